//! NCCL versions: the Python package (`nvidia-nccl-cu12|cu13`), `libnccl.so.X.Y.Z` files,
//! `nccl.h`, and the NCCL that torch declares.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::facts::rdma::DeviceKind;
use crate::sysfs::{list_dir, read_opt, under};

/// An NCCL version `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NcclVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

/// A NCCL release that is known to break on one vendor's devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KnownBadNccl {
    /// The device family it breaks on.
    pub kind: DeviceKind,
    /// The release.
    pub version: NcclVersion,
    /// What happens, in a phrase that follows "NCCL x.y.z ".
    pub symptom: &'static str,
    /// What to install instead.
    pub fix: &'static str,
}

const ERDMA_NETINIT_SEGFAULT: &str = "segfaults in ncclNetInit() while probing eRDMA devices";
const ERDMA_PIN_FIX: &str = "Install a working NCCL in the image: `pip install nvidia-nccl-cu13==2.30.7` \
(2.28.3, 2.29.7 and 2.30.7 work on eRDMA); check with `python -c \"import cupy.cuda.nccl as n; print(n.get_version())\"` \
→ 23007.";

/// Known-bad NCCL releases per vendor. The doctor reads the log's `NCCL version` line against this
/// table and fails when the log also shows that vendor's devices; facts do the same with the
/// installed NCCL. A new regression is a new row.
pub const KNOWN_BAD_NCCL: &[KnownBadNccl] = &[
    KnownBadNccl {
        kind: DeviceKind::Erdma,
        version: NcclVersion::new(2, 28, 7),
        symptom: ERDMA_NETINIT_SEGFAULT,
        fix: ERDMA_PIN_FIX,
    },
    KnownBadNccl {
        kind: DeviceKind::Erdma,
        version: NcclVersion::new(2, 28, 9),
        symptom: "segfaults in ncclNetInit() while probing eRDMA devices (torch 2.11 ships it)",
        fix: ERDMA_PIN_FIX,
    },
];

/// Versions that segfault in `ncclNetInit()` while probing eRDMA devices (torch 2.11 ships 2.28.9).
pub const KNOWN_BAD_ON_ERDMA: [NcclVersion; 2] =
    [NcclVersion::new(2, 28, 7), NcclVersion::new(2, 28, 9)];

/// Versions verified to work on eRDMA.
pub const KNOWN_GOOD_ON_ERDMA: [NcclVersion; 3] = [
    NcclVersion::new(2, 28, 3),
    NcclVersion::new(2, 29, 7),
    NcclVersion::new(2, 30, 7),
];

/// The pin the eRDMA runbook installs.
pub const RECOMMENDED_PIN: &str = "nvidia-nccl-cu13==2.30.7";

impl NcclVersion {
    /// Build a version.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parse `2.30.7`, `2.30.7-1`, `2.19.3+cuda12.2` (extra suffixes ignored).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let mut it = s.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        let patch_part = it.next()?;
        let digits: String = patch_part
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let patch = digits.parse().ok()?;
        Some(Self::new(major, minor, patch))
    }

    /// Decode `ncclGetVersion()` / `cupy.cuda.nccl.get_version()` codes (`23007` → 2.30.7).
    pub fn from_code(code: u32) -> Option<Self> {
        if code >= 10000 {
            Some(Self::new(code / 10000, (code / 100) % 100, code % 100))
        } else if code >= 1000 {
            // Before 2.9 the code was major*1000 + minor*100 + patch.
            Some(Self::new(code / 1000, (code / 100) % 10, code % 100))
        } else {
            None
        }
    }

    /// Whether this version crashes on eRDMA.
    pub fn is_known_bad_on_erdma(&self) -> bool {
        self.known_bad().any(|b| b.kind == DeviceKind::Erdma)
    }

    /// The rows of [`KNOWN_BAD_NCCL`] for this version (any vendor).
    pub fn known_bad(&self) -> impl Iterator<Item = &'static KnownBadNccl> + '_ {
        KNOWN_BAD_NCCL.iter().filter(move |b| b.version == *self)
    }
}

impl std::fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Where an NCCL version was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NcclSource {
    /// `nvidia-nccl-cu12` / `nvidia-nccl-cu13` dist-info (what torch and cupy load).
    PythonPackage,
    /// A `libnccl.so.X.Y.Z` file name.
    Library,
    /// `nccl.h` `NCCL_MAJOR/MINOR/PATCH`.
    Header,
}

/// One NCCL installation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclInstall {
    /// Version.
    pub version: NcclVersion,
    /// How it was found.
    pub source: NcclSource,
    /// The file it was read from (relative to the probed root, shown as absolute).
    pub path: String,
    /// Python distribution name, for packages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
}

/// torch's install and the NCCL it declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorchInfo {
    /// torch version (`2.11.0`, `2.11.0+cu130`).
    pub version: String,
    /// Path of its dist-info.
    pub path: String,
    /// The `nvidia-nccl-*` requirement torch was built against, e.g. `nvidia-nccl-cu13==2.28.9`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_requirement: Option<String>,
    /// The version in that requirement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundled_nccl: Option<NcclVersion>,
    /// An NCCL inside torch's own `lib/` (source builds), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendored_nccl: Option<NcclVersion>,
}

/// Where to look for Python packages and libraries (paths are absolute inside the probed root).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchPaths {
    /// `site-packages` / `dist-packages` directories (globs on `python3*` are expanded).
    pub site_packages: Vec<String>,
    /// Directories that may hold `libnccl.so*`.
    pub lib_dirs: Vec<String>,
    /// Directories that may hold `nccl.h`.
    pub include_dirs: Vec<String>,
}

impl Default for SearchPaths {
    fn default() -> Self {
        let sp = [
            "/usr/lib/python3*/site-packages",
            "/usr/lib/python3*/dist-packages",
            "/usr/local/lib/python3*/site-packages",
            "/usr/local/lib/python3*/dist-packages",
            "/usr/lib64/python3*/site-packages",
            "/opt/conda/lib/python3*/site-packages",
            "/home/ray/anaconda3/lib/python3*/site-packages",
            "/root/.local/lib/python3*/site-packages",
            "/opt/venv/lib/python3*/site-packages",
        ];
        let libs = [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/usr/local/lib",
            "/usr/local/cuda/lib64",
            "/usr/local/nccl/lib",
            "/opt/nccl/lib",
        ];
        let incs = [
            "/usr/include",
            "/usr/local/include",
            "/usr/local/cuda/include",
            "/usr/local/nccl/include",
        ];
        Self {
            site_packages: sp.iter().map(|s| s.to_string()).collect(),
            lib_dirs: libs.iter().map(|s| s.to_string()).collect(),
            include_dirs: incs.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Expand one `python3*` wildcard component (the only glob the defaults use).
fn expand(root: &Path, pattern: &str) -> Result<Vec<(String, PathBuf)>> {
    let Some(star) = pattern.find('*') else {
        return Ok(vec![(pattern.to_string(), under(root, pattern))]);
    };
    let slash_before = pattern[..star].rfind('/').unwrap_or(0);
    let parent = &pattern[..slash_before];
    let rest = &pattern[slash_before + 1..];
    let (component, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let (prefix, suffix) = component.split_once('*').unwrap_or((component, ""));
    let mut out = Vec::new();
    for name in list_dir(&under(root, parent))? {
        if name.starts_with(prefix) && name.ends_with(suffix) {
            let abs = if tail.is_empty() {
                format!("{parent}/{name}")
            } else {
                format!("{parent}/{name}/{tail}")
            };
            let p = under(root, &abs);
            if p.is_dir() {
                out.push((abs, p));
            }
        }
    }
    Ok(out)
}

/// Parse `Name:` / `Version:` / `Requires-Dist:` headers of a METADATA file.
fn metadata_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
}

/// Find every NCCL under `root`: Python packages, library files and headers.
pub fn find_nccl(
    root: &Path,
    paths: &SearchPaths,
) -> Result<(Vec<NcclInstall>, Option<TorchInfo>)> {
    let mut installs = Vec::new();
    let mut torch = None;
    let mut site_dirs = Vec::new();
    for pat in &paths.site_packages {
        site_dirs.extend(expand(root, pat)?);
    }
    for (abs, dir) in &site_dirs {
        for entry in list_dir(dir)? {
            let lower = entry.to_ascii_lowercase();
            if !lower.ends_with(".dist-info") {
                continue;
            }
            if lower.starts_with("nvidia_nccl_cu") {
                let meta_path = dir.join(&entry).join("METADATA");
                let meta = read_opt(&meta_path)?.unwrap_or_default();
                let version = metadata_field(&meta, "Version")
                    .and_then(NcclVersion::parse)
                    .or_else(|| {
                        entry
                            .trim_end_matches(".dist-info")
                            .rsplit('-')
                            .next()
                            .and_then(NcclVersion::parse)
                    });
                if let Some(version) = version {
                    let package = metadata_field(&meta, "Name")
                        .map(str::to_string)
                        .unwrap_or_else(|| {
                            entry
                                .split('-')
                                .next()
                                .unwrap_or("nvidia-nccl")
                                .replace('_', "-")
                        });
                    installs.push(NcclInstall {
                        version,
                        source: NcclSource::PythonPackage,
                        path: format!("{abs}/{entry}/METADATA"),
                        package: Some(package),
                    });
                }
            } else if lower.starts_with("torch-") && torch.is_none() {
                let meta_path = dir.join(&entry).join("METADATA");
                let meta = read_opt(&meta_path)?.unwrap_or_default();
                let version = metadata_field(&meta, "Version")
                    .map(str::to_string)
                    .unwrap_or_else(|| {
                        entry
                            .trim_end_matches(".dist-info")
                            .trim_start_matches("torch-")
                            .to_string()
                    });
                let requirement = meta
                    .lines()
                    .filter_map(|l| l.strip_prefix("Requires-Dist:"))
                    .map(str::trim)
                    .find(|r| r.to_ascii_lowercase().starts_with("nvidia-nccl-cu"))
                    .map(|r| r.split(';').next().unwrap_or(r).trim().to_string());
                let bundled = requirement
                    .as_deref()
                    .and_then(|r| r.split("==").nth(1))
                    .and_then(NcclVersion::parse);
                let vendored = lib_versions(&dir.join("torch/lib"))?.into_iter().next();
                torch = Some(TorchInfo {
                    version,
                    path: format!("{abs}/{entry}"),
                    nccl_requirement: requirement,
                    bundled_nccl: bundled,
                    vendored_nccl: vendored.map(|(v, _)| v),
                });
            }
        }
        // The package's header, when present.
        let inc = dir.join("nvidia/nccl/include/nccl.h");
        if let Some(v) = read_opt(&inc)?.as_deref().and_then(parse_nccl_h) {
            installs.push(NcclInstall {
                version: v,
                source: NcclSource::Header,
                path: format!("{abs}/nvidia/nccl/include/nccl.h"),
                package: None,
            });
        }
    }
    for dir in &paths.lib_dirs {
        for (v, name) in lib_versions(&under(root, dir))? {
            installs.push(NcclInstall {
                version: v,
                source: NcclSource::Library,
                path: format!("{}/{name}", dir.trim_end_matches('/')),
                package: None,
            });
        }
    }
    for dir in &paths.include_dirs {
        let p = under(root, dir).join("nccl.h");
        if let Some(v) = read_opt(&p)?.as_deref().and_then(parse_nccl_h) {
            installs.push(NcclInstall {
                version: v,
                source: NcclSource::Header,
                path: format!("{}/nccl.h", dir.trim_end_matches('/')),
                package: None,
            });
        }
    }
    Ok((installs, torch))
}

/// `libnccl.so.2.30.7` files in a directory, newest first.
fn lib_versions(dir: &Path) -> Result<Vec<(NcclVersion, String)>> {
    let mut out: Vec<(NcclVersion, String)> = list_dir(dir)?
        .into_iter()
        .filter_map(|n| {
            let v = n.strip_prefix("libnccl.so.").and_then(NcclVersion::parse)?;
            Some((v, n))
        })
        .collect();
    out.sort_by_key(|(v, _)| std::cmp::Reverse(*v));
    Ok(out)
}

/// Read `#define NCCL_MAJOR 2` / `NCCL_MINOR` / `NCCL_PATCH` from the text of `nccl.h`.
pub fn parse_nccl_h(text: &str) -> Option<NcclVersion> {
    let get = |key: &str| {
        text.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some("#define") && it.next() == Some(key))
                .then(|| it.next())
                .flatten()
                .and_then(|v| v.parse::<u32>().ok())
        })
    };
    Some(NcclVersion::new(
        get("NCCL_MAJOR")?,
        get("NCCL_MINOR")?,
        get("NCCL_PATCH")?,
    ))
}
