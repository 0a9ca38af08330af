//! Paths a script names: what plans show (relative to the out dir), the YAML files a directory stands for
//! (in the out dir, only this run's), the manifest documents in them, and the read sandbox — a script
//! reads only the out dir, the workflow's folders and the files named on the command line.

use std::path::{Path, PathBuf};

use rhai::EvalAltResult;

use super::Ctx;
use crate::host::runtime_error;

impl Ctx {
    /// Turns a path into what plans show: relative to the out dir when inside it.
    pub(crate) fn display_path(&self, p: &Path) -> String {
        p.strip_prefix(&self.config.out_dir)
            .map(|r| r.display().to_string())
            .unwrap_or_else(|_| p.display().to_string())
    }

    /// The YAML files `path` stands for (a file, or a directory's `*.yaml`), where a directory inside the
    /// out dir means the files this run wrote there: what an earlier run or the user left beside them is
    /// not this run's to apply, validate or lint.
    pub(crate) fn yaml_files(&self, path: &Path) -> Result<Vec<PathBuf>, crate::error::ExecError> {
        let files = crate::manifests::yaml_files(path)?;
        if !path.is_dir() || !self.out.contains(path) {
            return Ok(files);
        }
        let (own, other): (Vec<PathBuf>, Vec<PathBuf>) =
            files.into_iter().partition(|f| self.out.wrote(f));
        if !other.is_empty() {
            tracing::info!(
                "{}: not written by this run, left out: {}",
                path.display(),
                other
                    .iter()
                    .map(|f| self.display_path(f))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if own.is_empty() {
            return Err(crate::error::ExecError::Input(format!(
                "{}: this run wrote no .yaml files in this directory (render:: or fs::write them first)",
                path.display()
            )));
        }
        Ok(own)
    }

    /// What a workflow's `validate::`/`lint::` read: the manifest documents of [`Ctx::yaml_files`]. With
    /// `--bundle`, first: the edited bundle holds no file this run did not render.
    pub(crate) fn run_docs(
        &self,
        path: &Path,
    ) -> Result<Vec<k8s_render::manifest::Document>, String> {
        if let Some(user) = &self.config.bundle {
            // By the first check every system the workflow uses is rendered: a file of the edited bundle
            // none of them wrote would silently go unchecked and unapplied.
            let rendered = self.out.files();
            user.check_no_extra(rendered.iter().filter_map(|f| f.strip_prefix("bundle/")))?;
        }
        let files = self.yaml_files(path).map_err(|e| e.to_string())?;
        crate::manifests::parse_docs(&files, &|f| self.display_path(f))
    }

    /// Resolves a path a script reads (`fs::read`, `kube::cp`, `kube::apply`, `lint::bundle`...): a relative
    /// path is looked up in the out dir, then the readable folders, then the working directory. What a
    /// script may read is confined to the out dir, [`HostConfig::read_dirs`] (the workflow's folder, its
    /// libraries) and [`HostConfig::read_files`] (files named on the command line), symlinks resolved; any
    /// other path is refused, naming what is allowed. `what` names the caller in the error.
    pub(crate) fn resolve_path(&self, p: &str, what: &str) -> Result<PathBuf, Box<EvalAltResult>> {
        let path = Path::new(p);
        let resolved = if path.is_absolute() {
            path.to_owned()
        } else {
            std::iter::once(&self.config.out_dir)
                .chain(&self.config.read_dirs)
                .map(|d| d.join(path))
                .chain(std::iter::once(path.to_owned()))
                .find(|c| c.exists())
                // Found nowhere: the out dir's path, so the caller reports it missing there.
                .unwrap_or_else(|| self.config.out_dir.join(path))
        };
        let real = |q: &Path| q.canonicalize().unwrap_or_else(|_| lexical(q));
        let target = real(&resolved);
        let allowed = std::iter::once(&self.config.out_dir)
            .chain(&self.config.read_dirs)
            .any(|d| target.starts_with(real(d)))
            || self.config.read_files.iter().any(|f| real(f) == target);
        if allowed {
            return Ok(resolved);
        }
        let mut places = vec![format!("the out dir ({})", self.config.out_dir.display())];
        places.extend(
            self.config
                .read_dirs
                .iter()
                .map(|d| format!("{}/", d.display())),
        );
        if !self.config.read_files.is_empty() {
            places.push(format!(
                "the files named on the command line ({})",
                self.config
                    .read_files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Err(runtime_error(format!(
            "{what}: {p:?} is outside what a workflow may read: {} (name the file on the command line with \
             --set KEY=PATH, or copy it into one of these)",
            places.join(", ")
        )))
    }
}

/// `path` made absolute against the working directory with `.` and `..` folded (for paths that do not
/// exist, which cannot be canonicalized).
fn lexical(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
