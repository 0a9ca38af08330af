//! Reading Kubernetes objects from YAML files and bundle directories.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::ExecError;

/// Parses a multi-document YAML string into objects (empty documents are skipped).
pub fn parse_yaml_stream(text: &str, source: &str) -> Result<Vec<Value>, ExecError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)
        .map_err(|e| ExecError::Input(format!("{source}: not valid YAML: {e}")))?;
    let objects: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    for (i, o) in objects.iter().enumerate() {
        if !o.is_object() {
            return Err(ExecError::Input(format!(
                "{source}: document {} is not a mapping (expected a Kubernetes object with apiVersion and kind)",
                i + 1
            )));
        }
    }
    Ok(objects)
}

/// The YAML files to apply for `path`: the file itself, or a directory's `*.yaml`/`*.yml` in name order.
pub fn yaml_files(path: &Path) -> Result<Vec<PathBuf>, ExecError> {
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| ExecError::io(path, e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(ExecError::Input(format!(
                "{}: no .yaml files in this directory",
                path.display()
            )));
        }
        Ok(files)
    } else if path.is_file() {
        Ok(vec![path.to_owned()])
    } else {
        Err(ExecError::Input(format!(
            "{}: no such file or directory",
            path.display()
        )))
    }
}

/// Reads one YAML file into objects.
pub fn read_yaml_file(path: &Path) -> Result<Vec<Value>, ExecError> {
    let text = std::fs::read_to_string(path).map_err(|e| ExecError::io(path, e))?;
    parse_yaml_stream(&text, &path.display().to_string())
}

/// Every manifest document under `path` (a file or a bundle directory), each named by `shown(file)`.
pub fn read_docs(
    path: &Path,
    shown: &dyn Fn(&Path) -> String,
) -> Result<Vec<k8s_render::manifest::Document>, String> {
    let files = yaml_files(path).map_err(|e| e.to_string())?;
    parse_docs(&files, shown)
}

/// The manifest documents in `files`, each named by `shown(file)`.
pub(crate) fn parse_docs(
    files: &[PathBuf],
    shown: &dyn Fn(&Path) -> String,
) -> Result<Vec<k8s_render::manifest::Document>, String> {
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        docs.extend(k8s_render::manifest::parse_str(&shown(f), &text).map_err(|e| e.to_string())?);
    }
    Ok(docs)
}

/// A bundle the user edited (`rdmakit run --bundle DIR`), read whole before the run starts: the files a
/// workflow renders are taken from it instead (same relative names as `--out` writes under `bundle/`).
#[derive(Debug, Clone)]
pub struct UserBundle {
    /// The folder the files came from, as the user named it (`DIR` or `DIR/bundle`).
    pub dir: PathBuf,
    /// Relative path (`raycluster.yaml`, `images/Dockerfile`) -> contents.
    pub files: BTreeMap<String, String>,
}

impl UserBundle {
    /// Reads `dir`: an out dir a dry-run wrote (its `bundle/` folder is used) or the bundle folder itself.
    /// Hidden files (an editor's swap file) are skipped; anything that is not UTF-8 text is an error.
    pub fn read(dir: &Path) -> Result<Self, ExecError> {
        let dir = if dir.join("bundle").is_dir() {
            dir.join("bundle")
        } else {
            dir.to_owned()
        };
        if !dir.is_dir() {
            return Err(ExecError::Input(format!(
                "--bundle {}: no such directory (pass the --out DIR of `rdmakit run WORKFLOW --dry-run \
                 --out DIR`, or its bundle/ folder)",
                dir.display()
            )));
        }
        let mut files = BTreeMap::new();
        let mut todo = vec![dir.clone()];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(&d).map_err(|e| ExecError::io(&d, e))? {
                let path = entry.map_err(|e| ExecError::io(&d, e))?.path();
                let hidden = path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'));
                if hidden {
                    continue;
                }
                if path.is_dir() {
                    todo.push(path);
                    continue;
                }
                let bytes = std::fs::read(&path).map_err(|e| ExecError::io(&path, e))?;
                let text = String::from_utf8(bytes).map_err(|_| {
                    ExecError::Input(format!(
                        "--bundle: {} is not UTF-8 text (a bundle holds YAML, Dockerfiles and scripts)",
                        path.display()
                    ))
                })?;
                let rel = path
                    .strip_prefix(&dir)
                    .unwrap_or(&path)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                files.insert(rel, text);
            }
        }
        if files.is_empty() {
            return Err(ExecError::Input(format!(
                "--bundle {}: the folder holds no files",
                dir.display()
            )));
        }
        Ok(Self { dir, files })
    }

    /// The user's `rel`, or an error naming the file that is missing and what renders it.
    pub fn file(&self, rel: &str, rendered_by: &str) -> Result<&str, String> {
        self.files.get(rel).map(String::as_str).ok_or_else(|| {
            format!(
                "--bundle {}: {rel} is missing: this workflow renders it ({rendered_by}), so the edited \
                 bundle must hold it (its files: {})",
                self.dir.display(),
                self.names()
            )
        })
    }

    /// The user's files that none of `rendered` names, as an error naming them; `Ok` when there are none.
    pub fn check_no_extra<'a>(
        &self,
        rendered: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), String> {
        let rendered: std::collections::BTreeSet<&str> = rendered.into_iter().collect();
        let extra: Vec<&str> = self
            .files
            .keys()
            .map(String::as_str)
            .filter(|f| !rendered.contains(f))
            .collect();
        if extra.is_empty() {
            return Ok(());
        }
        Err(format!(
            "--bundle {}: {} not rendered by this workflow (it renders {}): an extra file would be \
             neither validated nor applied; remove it, or run the workflow this bundle was rendered for",
            self.dir.display(),
            extra.join(", "),
            rendered.iter().copied().collect::<Vec<_>>().join(", ")
        ))
    }

    fn names(&self) -> String {
        self.files.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_doc() {
        let objs = parse_yaml_stream("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Service\nmetadata: {name: b}\n", "x.yaml").unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1]["kind"], "Service");
        let err = parse_yaml_stream("- a\n- b\n", "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.yaml: document 1 is not a mapping"), "{err}");
    }

    #[test]
    fn a_user_bundle_names_missing_and_extra_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("bundle/images")).unwrap();
        std::fs::write(d.path().join("bundle/pod.yaml"), "kind: Pod\n").unwrap();
        std::fs::write(d.path().join("bundle/images/Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(d.path().join("bundle/.pod.yaml.swp"), "x").unwrap();
        // The out dir or its bundle/ folder: the same files.
        for dir in [d.path().to_owned(), d.path().join("bundle")] {
            let b = UserBundle::read(&dir).unwrap();
            assert_eq!(
                b.files.keys().collect::<Vec<_>>(),
                ["images/Dockerfile", "pod.yaml"]
            );
        }
        let b = UserBundle::read(d.path()).unwrap();
        assert_eq!(b.file("pod.yaml", "rdma-test-pod").unwrap(), "kind: Pod\n");
        let e = b.file("dra.yaml", "dra for gke-rdma-dranet").unwrap_err();
        assert!(
            e.contains("dra.yaml is missing") && e.contains("dra for gke-rdma-dranet"),
            "{e}"
        );
        let e = b.check_no_extra(["pod.yaml"]).unwrap_err();
        assert!(
            e.contains("images/Dockerfile not rendered by this workflow"),
            "{e}"
        );
        b.check_no_extra(["pod.yaml", "images/Dockerfile"]).unwrap();
        assert!(UserBundle::read(&d.path().join("nope")).is_err());
    }
}
