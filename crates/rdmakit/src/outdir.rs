//! The out folder a run writes into, and the part of it the run owns.
//!
//! Every file rdmakit writes under `--out` (the rendered bundle, `fs::write` files, `plan.sh`, `plan.json`,
//! the reports) is listed, with a checksum, in `OUT/.rdmakit-files`. The next run in the same folder first
//! removes the files the previous run listed — only those, and only while they still hold what rdmakit
//! wrote: a file the user edited or added is never deleted. So `run erdma-ray-rdt --out X` then
//! `run vke-ib-pod --out X` leaves no RayCluster in X's bundle for the second run to lint. Directory
//! arguments inside the out folder (`lint::bundle("bundle")`, `kube::apply("bundle")`) read only the files
//! this run wrote there.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crate::error::ExecError;

/// The list of what the last run wrote, relative to the out folder.
pub const MANIFEST: &str = ".rdmakit-files";

const HEADER: &str = "# Files rdmakit wrote in this folder (path and FNV-1a checksum). The next run here removes\n\
                      # these files, if unchanged, before it writes its own; other files are left alone.\n";

/// What [`OutDir::claim`] did with the previous run's files.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Files removed (they held what the previous run wrote).
    pub removed: Vec<String>,
    /// Files kept because they changed since the previous run wrote them.
    pub kept: Vec<String>,
}

/// The out folder and the files this run wrote in it.
#[derive(Debug)]
pub struct OutDir {
    root: PathBuf,
    files: Mutex<BTreeMap<String, u64>>,
}

impl OutDir {
    /// The out folder at `root` (nothing is touched until [`claim`](Self::claim) or [`record`](Self::record)).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            files: Mutex::new(BTreeMap::new()),
        }
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the folder and removes what the previous run listed in [`MANIFEST`] and left unchanged,
    /// then the folders that removal emptied. Entries that are not plain relative paths inside the
    /// folder are ignored.
    pub fn claim(&self) -> Result<Claimed, ExecError> {
        std::fs::create_dir_all(&self.root).map_err(|e| ExecError::io(&self.root, e))?;
        let list = self.root.join(MANIFEST);
        let text = match std::fs::read_to_string(&list) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Claimed::default()),
            Err(e) => return Err(ExecError::io(&list, e)),
        };
        let mut done = Claimed::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((sum, rel)) = line.split_once(' ') else {
                continue;
            };
            let (Ok(sum), Some(path)) = (u64::from_str_radix(sum, 16), self.inside(rel)) else {
                continue;
            };
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            match std::fs::read(&path) {
                Ok(bytes) if fnv1a(&bytes) == sum => {
                    std::fs::remove_file(&path).map_err(|e| ExecError::io(&path, e))?;
                    done.removed.push(rel.to_owned());
                    self.remove_empty_parents(&path);
                }
                _ => done.kept.push(rel.to_owned()),
            }
        }
        std::fs::remove_file(&list).map_err(|e| ExecError::io(&list, e))?;
        Ok(done)
    }

    /// Records a file this run wrote (`rel` to the folder) and rewrites [`MANIFEST`], so that even a run
    /// stopped half-way lists what it left.
    pub fn record(&self, rel: &str) -> Result<(), ExecError> {
        let Some(path) = self.inside(rel) else {
            return Ok(());
        };
        let bytes = std::fs::read(&path).map_err(|e| ExecError::io(&path, e))?;
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.insert(normal(rel), fnv1a(&bytes));
        let mut text = HEADER.to_owned();
        for (rel, sum) in files.iter() {
            text.push_str(&format!("{sum:016x} {rel}\n"));
        }
        let list = self.root.join(MANIFEST);
        std::fs::write(&list, text).map_err(|e| ExecError::io(&list, e))
    }

    /// True when this run wrote `path` (absolute, or relative to the folder).
    pub fn wrote(&self, path: &Path) -> bool {
        let rel = path.strip_prefix(&self.root).unwrap_or(path);
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.contains_key(&normal(&rel.to_string_lossy()))
    }

    /// True when `path` is the folder or lies inside it.
    pub fn contains(&self, path: &Path) -> bool {
        path.starts_with(&self.root)
    }

    /// The files this run wrote, relative to the folder, in name order.
    pub fn files(&self) -> Vec<String> {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.keys().cloned().collect()
    }

    /// `rel` under the folder when it is a plain relative path (no `..`, not absolute).
    fn inside(&self, rel: &str) -> Option<PathBuf> {
        let p = Path::new(rel);
        let plain = p
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        (plain && !rel.is_empty()).then(|| self.root.join(p))
    }

    fn remove_empty_parents(&self, file: &Path) {
        let mut dir = file.parent();
        while let Some(d) = dir {
            if d == self.root || !d.starts_with(&self.root) || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
}

/// `./bundle//a.yaml` and `bundle/a.yaml` are one file.
fn normal(rel: &str) -> String {
    Path::new(rel)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// FNV-1a, 64 bit: stable across Rust versions (the std hasher is not), enough to tell an edited file.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_removes_what_the_last_one_wrote_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("out");
        let first = OutDir::new(&root);
        assert_eq!(first.claim().unwrap(), Claimed::default());
        for (rel, text) in [
            ("bundle/raycluster.yaml", "a"),
            ("bundle/rbac.yaml", "b"),
            ("plan.sh", "c"),
        ] {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            first.record(rel).unwrap();
        }
        assert!(first.wrote(&root.join("bundle/rbac.yaml")));
        assert!(first.wrote(Path::new("./bundle/rbac.yaml")));
        // The user's own file beside them, and an edit to one of ours.
        std::fs::write(root.join("bundle/mine.yaml"), "user").unwrap();
        std::fs::write(root.join("bundle/rbac.yaml"), "edited").unwrap();
        // A hostile list entry is ignored.
        let list = root.join(MANIFEST);
        let mut text = std::fs::read_to_string(&list).unwrap();
        text.push_str(&format!("{:016x} ../outside\n", fnv1a(b"x")));
        std::fs::write(&list, text).unwrap();
        std::fs::write(dir.path().join("outside"), "x").unwrap();

        let second = OutDir::new(&root);
        let c = second.claim().unwrap();
        assert_eq!(c.removed, vec!["bundle/raycluster.yaml", "plan.sh"]);
        assert_eq!(c.kept, vec!["bundle/rbac.yaml"]);
        assert!(root.join("bundle/mine.yaml").exists());
        assert!(root.join("bundle/rbac.yaml").exists());
        assert!(dir.path().join("outside").exists());
        assert!(!list.exists());
        assert!(!second.wrote(&root.join("bundle/rbac.yaml")));
    }

    #[test]
    fn emptied_folders_go_too() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        std::fs::create_dir_all(dir.path().join("bundle/sub")).unwrap();
        std::fs::write(dir.path().join("bundle/sub/a.py"), "x").unwrap();
        out.record("bundle/sub/a.py").unwrap();
        OutDir::new(dir.path()).claim().unwrap();
        assert!(!dir.path().join("bundle").exists());
        assert!(dir.path().exists());
    }
}
