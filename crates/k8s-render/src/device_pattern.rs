//! The RDMA device-name glob: which names under `/sys/class/infiniband/` are the profile's devices.
//!
//! A profile names its devices with a glob (`erdma_*`, `mlx5_*`, `rdmap*`); the renderer passes it to
//! the check pods (which `cat /sys/class/infiniband/<glob>/<counter>`), the linter compares
//! `NCCL_IB_HCA` with it, and examples and hints show a device it matches. [`DevicePattern`] is the one
//! place that knows how such a glob reads: `*` any run of characters, `?` one character, and, for the
//! linter's options, several globs separated by commas.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A device-name glob (`erdma_*`), or several separated by commas (`erdma_*,mlx5_*`).
///
/// ```
/// use k8s_render::DevicePattern;
/// let p = DevicePattern::from("mlx5_*");
/// assert!(p.matches("mlx5_0"));
/// assert!(!p.matches("erdma_0"));
/// assert_eq!(p.prefix(), "mlx5_");
/// assert_eq!(p.example(), "mlx5_0");
/// // NCCL_IB_HCA=mlx5 selects every device whose name starts with mlx5.
/// assert!(p.matches_prefix("mlx5"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DevicePattern(String);

impl DevicePattern {
    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The globs of a comma-separated list, trimmed; one for a plain pattern.
    pub fn globs(&self) -> impl Iterator<Item = &str> {
        self.0.split(',').map(str::trim).filter(|g| !g.is_empty())
    }

    /// Whether device `name` matches one of the globs.
    pub fn matches(&self, name: &str) -> bool {
        self.globs().any(|g| glob_match(g, name))
    }

    /// Whether `prefix`, read the way NCCL reads an `NCCL_IB_HCA` entry without `=` (a name
    /// prefix), can select a device of this pattern: it matches a glob outright, starts with a
    /// glob's literal prefix, or is itself a start of that literal prefix (`erdma` for `erdma_*`).
    pub fn matches_prefix(&self, prefix: &str) -> bool {
        self.globs().any(|g| {
            let literal = literal_prefix(g);
            glob_match(g, prefix) || literal.starts_with(prefix) || prefix.starts_with(literal)
        })
    }

    /// The literal start of the first glob, before its first wildcard (`erdma_*` → `erdma_`,
    /// `rdmap*` → `rdmap`): what a device listing shows for every device of the pattern.
    pub fn prefix(&self) -> &str {
        literal_prefix(self.globs().next().unwrap_or(""))
    }

    /// A device name the first glob matches, for examples and fixes (`erdma_*` → `erdma_0`).
    pub fn example(&self) -> String {
        self.globs().next().unwrap_or("").replace(['*', '?'], "0")
    }

    /// Whether the pattern names Alibaba Cloud eRDMA devices (`erdma_*`), whose NCCL and UCX
    /// rules differ from other fabrics'.
    pub fn names_erdma(&self) -> bool {
        self.0.contains("erdma")
    }

    /// Why the pattern cannot be a glob over `/sys/class/infiniband/` names (empty, or a path).
    pub fn problem(&self) -> Option<&'static str> {
        (self.0.is_empty() || self.0.contains('/'))
            .then_some("must be a device-name glob such as erdma_*")
    }
}

/// The text of `glob` before its first `*`, `?` or `[`.
fn literal_prefix(glob: &str) -> &str {
    glob.split(['*', '?', '[']).next().unwrap_or("")
}

/// Shell-style matching of `*` and `?` (the only wildcards device globs use).
fn glob_match(pattern: &str, text: &str) -> bool {
    fn rec(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| rec(rest, &t[i..])),
            Some(('?', rest)) => !t.is_empty() && rec(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && rec(rest, &t[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    rec(&p, &t)
}

impl fmt::Display for DevicePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for DevicePattern {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

impl From<String> for DevicePattern {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl AsRef<str> for DevicePattern {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for DevicePattern {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for DevicePattern {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names() {
        let p = DevicePattern::from("erdma_*, mlx5_?");
        assert_eq!(p.globs().collect::<Vec<_>>(), ["erdma_*", "mlx5_?"]);
        assert!(p.matches("erdma_12"));
        assert!(p.matches("mlx5_1"));
        assert!(!p.matches("mlx5_10"));
        assert!(p.matches_prefix("erdma"));
        assert!(p.matches_prefix("mlx5_3"));
        assert!(!p.matches_prefix("rdmap"));
        assert_eq!(DevicePattern::from("rdmap*").example(), "rdmap0");
        assert_eq!(DevicePattern::from("mlx5_[01]").prefix(), "mlx5_");
        assert!(DevicePattern::from("").problem().is_some());
        assert!(DevicePattern::from("/sys/x").problem().is_some());
        assert!(DevicePattern::from("erdma_*").names_erdma());
    }
}
