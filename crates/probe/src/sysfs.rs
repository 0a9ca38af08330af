//! Small readers for sysfs/procfs-style files under a configurable root.
//!
//! Every path is resolved as `root.join(relative)`, so tests point `root` at a fixture tree.

use std::path::{Path, PathBuf};

use crate::error::{ProbeError, Result};

/// Join an absolute-looking path (`/sys/class/...`) onto a root.
pub(crate) fn under(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

/// Read a file, trimmed. `Ok(None)` when it does not exist or the kernel refuses to read it
/// (sysfs returns EINVAL for empty GID attribute slots, for example).
pub(crate) fn read_opt(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).trim().to_string())),
        Err(e) => match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput => Ok(None),
            _ if e.raw_os_error() == Some(libc::EINVAL)
                || e.raw_os_error() == Some(libc::ENOTDIR)
                || e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
            {
                Ok(None)
            }
            _ => Err(ProbeError::io(path, e)),
        },
    }
}

/// Names of the entries of a directory, sorted; empty when it does not exist.
pub(crate) fn list_dir(path: &Path) -> Result<Vec<String>> {
    let rd = match std::fs::read_dir(path) {
        Ok(rd) => rd,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            return Ok(Vec::new());
        }
        Err(e) => return Err(ProbeError::io(path, e)),
    };
    let mut names = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| ProbeError::io(path, e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort_by(|a, b| natural_cmp(a, b));
    Ok(names)
}

/// Compare names so that `gids/2` sorts before `gids/10` and `uverbs2` before `uverbs10`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn split(s: &str) -> (&str, Option<u64>) {
        let idx = s
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_digit())
            .last()
            .map(|(i, _)| i);
        match idx {
            Some(i) => (&s[..i], s[i..].parse().ok()),
            None => (s, None),
        }
    }
    let (pa, na) = split(a);
    let (pb, nb) = split(b);
    pa.cmp(pb).then(na.cmp(&nb)).then(a.cmp(b))
}

/// Parse an unsigned integer as sysfs writes it: decimal or `0x`-prefixed hex.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else {
        s.parse().ok()
    }
}
