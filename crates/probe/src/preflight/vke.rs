//! Volcengine VKE: which Kubernetes builds can run VKE's RDMA device plugin (seed 004).

/// Why a node's kubelet version cannot use VKE's RDMA device plugin, or `None` when it can. Seed 004:
/// 1.24 needs `v1.24.15-vke.12` or later, 1.20 needs `v1.20.15-vke.18` or later, later minors are
/// supported, earlier ones are not. `None` for the version means the node status has no kubeletVersion.
///
/// ```
/// use probe::preflight::vke_rdma_kubelet_problem as problem;
/// assert_eq!(problem(Some("v1.24.15-vke.12")), None);
/// assert_eq!(problem(Some("v1.28.3-vke.5")), None);
/// assert_eq!(problem(Some("v1.24.15-vke.11")).as_deref(), Some("v1.24.15-vke.11 is below v1.24.15-vke.12"));
/// ```
pub fn vke_rdma_kubelet_problem(version: Option<&str>) -> Option<String> {
    let Some(s) = version else {
        return Some("no kubeletVersion in the node status".into());
    };
    let unreadable = || Some(format!("cannot read {s}"));
    let t = s.strip_prefix('v').unwrap_or(s);
    let (numbers, build) = match t.split_once("-vke.") {
        Some((n, b)) => match b.parse::<u32>() {
            Ok(b) => (n, b),
            Err(_) => return unreadable(),
        },
        None => (t, 0),
    };
    let parts: Vec<&str> = numbers.split('.').collect();
    let [_, minor, patch, ..] = parts[..] else {
        return unreadable();
    };
    let (Ok(minor), Ok(patch)) = (minor.parse::<u32>(), patch.parse::<u32>()) else {
        return unreadable();
    };
    let floor = match minor {
        24 => (15, 12),
        20 => (15, 18),
        m if m > 24 => return None,
        _ => {
            return Some(format!(
                "{s} is older than the versions VKE supports for RDMA"
            ));
        }
    };
    if (patch, build) >= floor {
        None
    } else {
        Some(format!(
            "{s} is below v1.{minor}.{}-vke.{}",
            floor.0, floor.1
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::vke_rdma_kubelet_problem as problem;

    #[test]
    fn seed_004_floors_per_minor() {
        for ok in [
            "v1.24.15-vke.12",
            "v1.24.16-vke.1",
            "v1.20.15-vke.18",
            "v1.26.0",
            "1.30.2-vke.3",
        ] {
            assert_eq!(problem(Some(ok)), None, "{ok}");
        }
        assert_eq!(
            problem(Some("v1.20.15-vke.17")).as_deref(),
            Some("v1.20.15-vke.17 is below v1.20.15-vke.18")
        );
        // A 1.24 build without a -vke. suffix is not a VKE build of the supported patch.
        assert_eq!(
            problem(Some("v1.24.15")).as_deref(),
            Some("v1.24.15 is below v1.24.15-vke.12")
        );
        assert_eq!(
            problem(Some("v1.22.3-vke.40")).as_deref(),
            Some("v1.22.3-vke.40 is older than the versions VKE supports for RDMA")
        );
    }

    #[test]
    fn unreadable_and_missing_versions_are_said() {
        assert_eq!(
            problem(None).as_deref(),
            Some("no kubeletVersion in the node status")
        );
        for bad in ["v1.24", "vX.Y.Z", "v1.24.15-vke.x", ""] {
            assert_eq!(
                problem(Some(bad)),
                Some(format!("cannot read {bad}")),
                "{bad}"
            );
        }
    }
}
