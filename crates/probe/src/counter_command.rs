//! The shell command a workflow runs in a pod to read a profile's summed transmit counter
//! ([`CounterSpec::read_command`]): the devices of the name glob, minus the excluded ones, summed with awk.
//! Every glob and the counter path are checked to be plain name characters first, so no profile value
//! can change the command's structure.

use crate::counters::CounterSpec;
use crate::error::{ProbeError, Result};

/// sysfs' RDMA device directory.
const CLASS: &str = "/sys/class/infiniband";

/// The awk that sums one number per line. printf, not `print s`: mawk (Debian's and Ubuntu's awk)
/// prints sums above 2^31 as 1.27087e+10.
const SUM: &str = r#"awk '{s+=$1} END {printf "%.0f\n", s}'"#;

fn glob_ok(g: &str) -> bool {
    !g.is_empty()
        && g.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*' | '?'))
}

fn path_ok(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && p.split('/').all(|s| !s.is_empty() && s != "..")
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
}

impl CounterSpec {
    /// The device globs of `name_pattern` (comma-separated).
    pub fn globs(&self) -> Vec<&str> {
        self.name_pattern
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .collect()
    }

    /// `["sh", "-c", SCRIPT]`: prints the sum of `tx_counter` over the devices under
    /// `/sys/class/infiniband` that a glob of `name_pattern` matches and no glob of `exclude` does (0
    /// when none). One glob without excludes keeps the plain `cat <glob>/<counter> | awk` form.
    pub fn read_command(&self) -> Result<Vec<String>> {
        Ok(vec!["sh".into(), "-c".into(), self.read_script(CLASS)?])
    }

    /// The script of [`CounterSpec::read_command`] over the device directory `class` (a test's tree).
    pub(crate) fn read_script(&self, class: &str) -> Result<String> {
        let globs = self.globs();
        let bad = |what: &str, v: &str| {
            ProbeError::CounterSpec(format!(
                "{what} `{v}` must be a device-name glob of letters, digits, '_', '-', '.', '*' and '?'"
            ))
        };
        if globs.is_empty() {
            return Err(bad("name_pattern", &self.name_pattern));
        }
        if let Some(g) = globs.iter().find(|g| !glob_ok(g)) {
            return Err(bad("name_pattern", g));
        }
        if let Some(g) = self.exclude.iter().find(|g| !glob_ok(g)) {
            return Err(bad("exclude", g));
        }
        if !path_ok(&self.tx_counter) {
            return Err(ProbeError::CounterSpec(format!(
                "tx_counter `{}` must be a relative sysfs path such as ports/1/counters/port_xmit_data",
                self.tx_counter
            )));
        }
        if globs.len() == 1 && self.exclude.is_empty() {
            return Ok(format!(
                "cat {class}/{}/{} | {SUM}",
                globs[0], self.tx_counter
            ));
        }
        let dirs: Vec<String> = globs.iter().map(|g| format!("{class}/{g}")).collect();
        let skip = if self.exclude.is_empty() {
            String::new()
        } else {
            format!(
                "case \"${{d##*/}}\" in {}) continue ;; esac; ",
                self.exclude.join("|")
            )
        };
        Ok(format!(
            "for d in {}; do {skip}f=\"$d/{}\"; [ -r \"$f\" ] && cat \"$f\"; done | {SUM}",
            dirs.join(" "),
            self.tx_counter
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: &str, exclude: &[&str]) -> CounterSpec {
        CounterSpec {
            name_pattern: pattern.into(),
            exclude: exclude.iter().map(|s| (*s).to_owned()).collect(),
            tx_counter: "ports/1/counters/port_xmit_data".into(),
            counter_multiplier: 4,
        }
    }

    /// A sysfs tree with two RDMA NICs and a front-end NIC that the glob `mlx5_*` also matches.
    fn tree(counts: &[(&str, u64)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        for (dev, n) in counts {
            let d = dir.path().join(dev).join("ports/1/counters");
            std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(d.join("port_xmit_data"), format!("{n}\n"))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        dir
    }

    fn run(script: &str) -> String {
        let out = std::process::Command::new("sh")
            .args(["-c", script])
            .output()
            .unwrap_or_else(|e| panic!("sh: {e}"));
        assert!(out.status.success(), "{script}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Issue 25: `mlx5_*` also matched the front-end NIC, whose bytes the proof summed.
    #[test]
    fn a_front_end_nics_bytes_are_not_counted() {
        let t = tree(&[("mlx5_0", 100), ("mlx5_1", 20), ("mlx5_bond_0", 7000)]);
        let class = t.path().to_string_lossy().into_owned();
        let all = spec("mlx5_*", &[]).read_script(&class).unwrap_or_default();
        assert_eq!(run(&all), "7120");
        let rdma = spec("mlx5_*", &["mlx5_bond_*"])
            .read_script(&class)
            .unwrap_or_default();
        assert_eq!(run(&rdma), "120", "{rdma}");
        let two = spec("mlx5_*", &["mlx5_bond_*", "mlx5_1"])
            .read_script(&class)
            .unwrap_or_default();
        assert_eq!(run(&two), "100", "{two}");
        // Nothing matched: 0, as before.
        let none = spec("erdma_*", &["x"])
            .read_script(&class)
            .unwrap_or_default();
        assert_eq!(run(&none), "0");
        // A comma list reads each glob.
        let list = spec("mlx5_0,mlx5_bond_*", &[])
            .read_script(&class)
            .unwrap_or_default();
        assert_eq!(run(&list), "7100");
    }

    #[test]
    fn the_plain_form_is_kept_and_values_cannot_change_the_command() -> Result<()> {
        let plain = spec("mlx5_*", &[]).read_command()?;
        assert_eq!(
            plain[2],
            r#"cat /sys/class/infiniband/mlx5_*/ports/1/counters/port_xmit_data | awk '{s+=$1} END {printf "%.0f\n", s}'"#
        );
        for (p, x) in [
            ("mlx5_*; id", ""),
            ("mlx5_*", "a|b"),
            ("mlx5_*", "$(id)"),
            ("", ""),
        ] {
            let s = spec(
                p,
                if x.is_empty() {
                    &[]
                } else {
                    std::slice::from_ref(&x)
                },
            );
            assert!(
                matches!(s.read_command(), Err(ProbeError::CounterSpec(_))),
                "{p} {x}"
            );
        }
        let mut s = spec("mlx5_*", &[]);
        s.tx_counter = "../../../etc/passwd".into();
        assert!(s.read_command().is_err());
        Ok(())
    }
}
