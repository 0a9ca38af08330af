//! Bundles: an ordered list of rendered files, written atomically and printable as one YAML stream.

use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::yaml::to_yaml;

/// What a bundle file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    /// Kubernetes manifests (one or more YAML documents).
    Manifest,
    /// A Dockerfile.
    Dockerfile,
    /// A Python program.
    Python,
}

/// One rendered file.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleFile {
    /// Path relative to the bundle directory (`ray-cluster-erdma.yaml`).
    pub path: String,
    /// What it holds.
    pub kind: FileKind,
    /// Exact bytes written (UTF-8, `\n` line ends, ending in a newline).
    pub contents: String,
    /// For manifests: each document as JSON, in file order (for validation and lint without re-parsing).
    pub documents: Vec<serde_json::Value>,
}

/// An ordered set of rendered files. Build it with [`crate::render`] / [`crate::render_all`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bundle {
    files: Vec<BundleFile>,
}

/// Errors while assembling or writing a bundle.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file path is absolute, empty or leaves the bundle directory.
    #[error("bundle file path `{0}` must be relative and stay inside the bundle directory")]
    BadPath(String),
    /// Two different files with one path.
    #[error("bundle already has a different `{0}`")]
    Duplicate(String),
    /// An object could not be serialised to YAML.
    #[error("cannot serialise document {index} of `{path}` to YAML: {message}")]
    Yaml {
        /// File.
        path: String,
        /// Document index (0-based).
        index: usize,
        /// serde-saphyr's message.
        message: String,
    },
    /// The target exists and is not a directory.
    #[error("`{0}` exists and is not a directory")]
    NotADirectory(PathBuf),
    /// Filesystem error.
    #[error("cannot write `{path}`: {source}")]
    Io {
        /// Path involved.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Bundle {
    /// An empty bundle.
    pub fn new() -> Self {
        Bundle::default()
    }

    /// Files in order.
    pub fn files(&self) -> &[BundleFile] {
        &self.files
    }

    /// A file by path.
    pub fn get(&self, path: &str) -> Option<&BundleFile> {
        self.files.iter().find(|f| f.path == path)
    }

    /// File paths in order.
    pub fn paths(&self) -> Vec<&str> {
        self.files.iter().map(|f| f.path.as_str()).collect()
    }

    /// Whether the bundle has no files.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Adds a non-manifest file (Dockerfile, program).
    pub fn add_text(
        &mut self,
        path: &str,
        kind: FileKind,
        contents: String,
    ) -> Result<(), BundleError> {
        let mut contents = contents;
        if !contents.ends_with('\n') {
            contents.push('\n');
        }
        self.push(BundleFile {
            path: path.to_owned(),
            kind,
            contents,
            documents: Vec::new(),
        })
    }

    /// Adds a manifest file made of `docs`, serialised as YAML documents separated by `---`.
    pub fn add_manifests<T: Serialize>(
        &mut self,
        path: &str,
        docs: &[T],
    ) -> Result<(), BundleError> {
        let mut contents = String::new();
        let mut documents = Vec::with_capacity(docs.len());
        for (index, doc) in docs.iter().enumerate() {
            let yaml_err = |message: String| BundleError::Yaml {
                path: path.to_owned(),
                index,
                message,
            };
            let text = to_yaml(doc).map_err(|e| yaml_err(e.to_string()))?;
            documents.push(serde_json::to_value(doc).map_err(|e| yaml_err(e.to_string()))?);
            if index > 0 {
                contents.push_str("---\n");
            }
            contents.push_str(&text);
        }
        self.push(BundleFile {
            path: path.to_owned(),
            kind: FileKind::Manifest,
            contents,
            documents,
        })
    }

    /// Appends `other`'s files; a file already present with identical contents is kept once.
    pub fn merge(&mut self, other: Bundle) -> Result<(), BundleError> {
        for f in other.files {
            self.push(f)?;
        }
        Ok(())
    }

    fn push(&mut self, file: BundleFile) -> Result<(), BundleError> {
        check_rel_path(&file.path)?;
        if let Some(existing) = self.get(&file.path) {
            if existing.contents == file.contents {
                return Ok(());
            }
            return Err(BundleError::Duplicate(file.path));
        }
        self.files.push(file);
        Ok(())
    }

    /// All manifests as one multi-document YAML stream for `kubectl apply -f -`, in bundle order.
    /// Dockerfiles and programs are not part of the stream.
    pub fn to_stream(&self) -> String {
        let mut out = String::new();
        for f in self.files.iter().filter(|f| f.kind == FileKind::Manifest) {
            if !out.is_empty() {
                out.push_str("---\n");
            }
            out.push_str("# Source: ");
            out.push_str(&f.path);
            out.push('\n');
            out.push_str(&f.contents);
        }
        out
    }

    /// Every manifest document with its file and index.
    pub fn documents(&self) -> impl Iterator<Item = (&str, usize, &serde_json::Value)> {
        self.files.iter().flat_map(|f| {
            f.documents
                .iter()
                .enumerate()
                .map(move |(i, d)| (f.path.as_str(), i, d))
        })
    }

    /// Writes the files under `dir`, all or nothing.
    ///
    /// Files are first written into a fresh temporary directory beside `dir` (same parent, so the same
    /// filesystem). If `dir` does not exist the temporary directory is renamed to it; otherwise each file
    /// is renamed into place and files of `dir` that are not in the bundle are left alone. On error the
    /// temporary directory is removed and `dir` is untouched. Returns the written paths.
    pub fn write_to(&self, dir: &Path) -> Result<Vec<PathBuf>, BundleError> {
        if dir.exists() && !dir.is_dir() {
            return Err(BundleError::NotADirectory(dir.to_path_buf()));
        }
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&parent).map_err(io(&parent))?;
        let stem = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "bundle".to_owned());
        let tmp = make_temp_dir(&parent, &stem)?;
        let staged = self.stage(&tmp);
        let result = staged.and_then(|()| self.commit(&tmp, dir));
        if tmp.exists() {
            // Best effort: a leftover temp dir is harmless and named after the target.
            let _ = fs::remove_dir_all(&tmp);
        }
        result?;
        Ok(self.files.iter().map(|f| dir.join(&f.path)).collect())
    }

    fn stage(&self, tmp: &Path) -> Result<(), BundleError> {
        for f in &self.files {
            let path = tmp.join(&f.path);
            if let Some(p) = path.parent() {
                fs::create_dir_all(p).map_err(io(p))?;
            }
            let mut file = fs::File::create(&path).map_err(io(&path))?;
            file.write_all(f.contents.as_bytes()).map_err(io(&path))?;
            file.sync_all().map_err(io(&path))?;
        }
        Ok(())
    }

    fn commit(&self, tmp: &Path, dir: &Path) -> Result<(), BundleError> {
        if !dir.exists() {
            return fs::rename(tmp, dir).map_err(io(dir));
        }
        for f in &self.files {
            let target = dir.join(&f.path);
            if let Some(p) = target.parent() {
                fs::create_dir_all(p).map_err(io(p))?;
            }
            fs::rename(tmp.join(&f.path), &target).map_err(io(&target))?;
        }
        Ok(())
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn make_temp_dir(parent: &Path, stem: &str) -> Result<PathBuf, BundleError> {
    for _ in 0..100 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let candidate = parent.join(format!(".{stem}.rdmakit-tmp-{}-{n}", std::process::id()));
        match fs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(&candidate)(e)),
        }
    }
    Err(BundleError::Io {
        path: parent.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "no free temporary directory name",
        ),
    })
}

fn check_rel_path(path: &str) -> Result<(), BundleError> {
    let p = Path::new(path);
    let ok = !path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(())
    } else {
        Err(BundleError::BadPath(path.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sample() -> Bundle {
        let mut b = Bundle::new();
        let doc = BTreeMap::from([("apiVersion", "v1"), ("kind", "ConfigMap")]);
        b.add_manifests("a.yaml", &[doc.clone(), doc]).unwrap();
        b.add_text("Dockerfile", FileKind::Dockerfile, "FROM x".into())
            .unwrap();
        b.add_text("sub/run.py", FileKind::Python, "print(1)\n".into())
            .unwrap();
        b
    }

    #[test]
    fn stream_and_documents() {
        let b = sample();
        let s = b.to_stream();
        assert!(s.starts_with("# Source: a.yaml\n"), "{s}");
        assert_eq!(s.matches("kind: ConfigMap").count(), 2);
        assert!(!s.contains("FROM x"));
        assert_eq!(b.documents().count(), 2);
        assert_eq!(b.get("Dockerfile").unwrap().contents, "FROM x\n");
    }

    #[test]
    fn paths_must_stay_inside() {
        let mut b = Bundle::new();
        for bad in ["", "/etc/passwd", "../x", "a/../../x"] {
            assert!(matches!(
                b.add_text(bad, FileKind::Python, String::new()),
                Err(BundleError::BadPath(_))
            ));
        }
    }

    #[test]
    fn duplicates() {
        let mut b = sample();
        b.add_text("Dockerfile", FileKind::Dockerfile, "FROM x\n".into())
            .unwrap();
        assert!(matches!(
            b.add_text("Dockerfile", FileKind::Dockerfile, "FROM y".into()),
            Err(BundleError::Duplicate(_))
        ));
        assert_eq!(b.files().len(), 3);
    }

    #[test]
    fn write_new_and_existing_dir_byte_stable() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("bundle");
        let b = sample();
        let written = b.write_to(&out).unwrap();
        assert_eq!(written.len(), 3);
        let first = fs::read(out.join("a.yaml")).unwrap();
        assert_eq!(first, b.get("a.yaml").unwrap().contents.as_bytes());
        // Existing dir: files replaced, foreign files kept, no temp dirs left over.
        fs::write(out.join("keep.txt"), "mine").unwrap();
        b.write_to(&out).unwrap();
        assert_eq!(fs::read(out.join("a.yaml")).unwrap(), first);
        assert_eq!(fs::read_to_string(out.join("keep.txt")).unwrap(), "mine");
        assert_eq!(
            fs::read_to_string(out.join("sub/run.py")).unwrap(),
            "print(1)\n"
        );
        let leftovers: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("bundle")]);
    }

    #[test]
    fn write_onto_file_fails_cleanly() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("file");
        fs::write(&f, "x").unwrap();
        assert!(matches!(
            sample().write_to(&f),
            Err(BundleError::NotADirectory(_))
        ));
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn failed_staging_writes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("bundle");
        let mut b = sample();
        // `sub/run.py` is a file, so staging `sub/run.py/inner` fails after the first files were staged.
        b.files.push(BundleFile {
            path: "sub/run.py/inner".into(),
            kind: FileKind::Python,
            contents: "x\n".into(),
            documents: vec![],
        });
        assert!(b.write_to(&out).is_err());
        assert!(!out.exists());
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}
