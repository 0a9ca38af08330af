//! Every Rhai script embedded in the binary, so `rdmakit` runs from any directory: the built-in vendor
//! profiles (`scripts/vendors/`) and the base modules they import (`scripts/vendors/base/`), the
//! built-in workflows (`scripts/workflows/`) and the library modules workflows import (`scripts/lib/`).
//! [`crate::profiles`], [`crate::workflows`] and the host's module resolver read these tables.

/// `(name, text)` of `scripts/<dir>/<name>.rhai` for each name, in the order given; with a second
/// identifier, also the names alone (for callers that hand out a `&'static [&str]`).
macro_rules! embed {
    ($(#[$doc:meta])* $table:ident, $names:ident, $dir:literal: [$($name:literal),* $(,)?]) => {
        embed!($(#[$doc])* $table, $dir: [$($name),*]);
        /// The names of the table above, in its order.
        pub(crate) const $names: &[&str] = &[$($name),*];
    };
    ($(#[$doc:meta])* $table:ident, $dir:literal: [$($name:literal),* $(,)?]) => {
        $(#[$doc])*
        pub(crate) const $table: &[(&str, &str)] = &[
            $(($name, include_str!(concat!("../../../scripts/", $dir, "/", $name, ".rhai")))),*
        ];
    };
}

embed! {
    /// Built-in vendor profiles, in listing order.
    PROFILES, PROFILE_NAMES, "vendors": [
        "aliyun-erdma",
        "aliyun-erdma-dra",
        "rdma-shared-device",
        "volcengine-ib",
        "mellanox-ib",
        "aws-efa-eks",
        "gke-rdma-dranet",
        "azure-ib-aks",
    ]
}

embed! {
    /// Base modules vendor profiles share (`import "base/mlx5" as mlx5;`), by their name under `base/`.
    PROFILE_BASES, "vendors/base": ["erdma", "mlx5"]
}

embed! {
    /// Built-in workflows.
    WORKFLOWS, "workflows": [
        "erdma-ray-rdt",
        "dranet-nccl-tests",
        "nccl-tests",
        "shared-device-raycluster",
        "vke-ib-pod",
    ]
}

embed! {
    /// Library modules workflows import (`import "verify" as verify;`).
    LIBS, "lib": ["verify", "ray", "profile", "mpijob", "dra"]
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The `*.rhai` stems directly in `scripts/<dir>`, sorted.
    fn on_disk(dir: &str) -> Vec<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts")
            .join(dir);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rhai"))
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    /// Every script of the folders that hold only built-ins is embedded: a profile or base added on disk
    /// but not here would work in a checkout and be missing from the binary.
    #[test]
    fn every_vendor_script_is_embedded() {
        let names: Vec<&str> = PROFILES.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, PROFILE_NAMES);
        for (dir, table) in [
            ("vendors", PROFILES),
            ("vendors/base", PROFILE_BASES),
            ("workflows", WORKFLOWS),
            ("lib", LIBS),
        ] {
            let mut embedded: Vec<String> = table.iter().map(|(n, _)| (*n).to_owned()).collect();
            embedded.sort();
            assert_eq!(on_disk(dir), embedded, "scripts/{dir}");
            assert!(table.iter().all(|(_, text)| !text.trim().is_empty()));
        }
    }
}
