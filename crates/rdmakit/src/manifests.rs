//! Reading Kubernetes objects from YAML files and bundle directories.

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
}
