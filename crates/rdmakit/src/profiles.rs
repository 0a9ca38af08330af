//! Vendor profiles authored as Rhai scripts under `scripts/vendors/` (built-ins embedded in the binary).
//!
//! A profile script evaluates to one object map whose fields are those of [`k8s_render::Profile`]
//! (snake_case). The script runs in a sandboxed engine (operation, depth and size limits; built-ins
//! cannot `import`), its result is converted to JSON and deserialised with field paths, then checked with
//! [`Profile::check`]. Every error names the script and, where it can, the line.
//!
//! ```
//! let profile = rdmakit::profiles::load_builtin("aliyun-erdma")?;
//! assert_eq!(profile.gpu_resource, "nvidia.com/gpu");
//! assert!(rdmakit::profiles::load_builtin("nope").is_err());
//! # Ok::<(), rdmakit::profiles::ProfileError>(())
//! ```

use std::path::{Path, PathBuf};

use k8s_render::Profile;
use rhai::{Dynamic, Engine, EvalAltResult, Position};

/// Built-in profile names and their embedded scripts, in listing order.
const BUILTIN: &[(&str, &str)] = &[
    (
        "aliyun-erdma",
        include_str!("../../../scripts/vendors/aliyun-erdma.rhai"),
    ),
    (
        "aliyun-erdma-dra",
        include_str!("../../../scripts/vendors/aliyun-erdma-dra.rhai"),
    ),
    (
        "rdma-shared-device",
        include_str!("../../../scripts/vendors/rdma-shared-device.rhai"),
    ),
    (
        "volcengine-ib",
        include_str!("../../../scripts/vendors/volcengine-ib.rhai"),
    ),
    (
        "mellanox-ib",
        include_str!("../../../scripts/vendors/mellanox-ib.rhai"),
    ),
];

const BUILTIN_NAMES: &[&str] = &[
    "aliyun-erdma",
    "aliyun-erdma-dra",
    "rdma-shared-device",
    "volcengine-ib",
    "mellanox-ib",
];

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// No built-in profile has that name.
    #[error(
        "unknown profile `{name}`; built-in profiles: {known} (or pass a path to a .rhai profile script)"
    )]
    Unknown {
        /// Name asked for.
        name: String,
        /// Comma-separated built-in names.
        known: String,
    },
    /// The script file cannot be read.
    #[error("cannot read profile script `{}`: {source}", path.display())]
    Io {
        /// Script path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The script does not parse or fails while running.
    #[error("{file}{}: {message}", at(*line, *column))]
    Script {
        /// Script file (`scripts/vendors/<name>.rhai` for built-ins).
        file: String,
        /// 1-based line, when Rhai knows it.
        line: Option<usize>,
        /// 1-based column, when Rhai knows it.
        column: Option<usize>,
        /// Rhai's message.
        message: String,
    },
    /// The script ran but did not produce an object map.
    #[error(
        "{file}: a profile script must evaluate to an object map `#{{ name: ..., ... }}`, got {type_name}"
    )]
    NotAMap {
        /// Script file.
        file: String,
        /// Rhai type of the result.
        type_name: String,
    },
    /// A field is missing, unknown, of the wrong type or has a bad value.
    #[error("{file}{}: field `{field}`: {message}", at(*line, None))]
    Field {
        /// Script file.
        file: String,
        /// Dotted path of the field (`nccl.pin`, `pod.host_paths[0].name`); `.` for the whole map.
        field: String,
        /// Line where the field (or the key named in the message) first appears, if found.
        line: Option<usize>,
        /// What is wrong and what is expected.
        message: String,
    },
}

fn at(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

/// Names of the built-in profiles.
pub fn builtin_names() -> &'static [&'static str] {
    BUILTIN_NAMES
}

/// The embedded script of a built-in profile.
pub fn builtin_source(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// Loads a built-in profile by name.
pub fn load_builtin(name: &str) -> Result<Profile, ProfileError> {
    let source = builtin_source(name).ok_or_else(|| ProfileError::Unknown {
        name: name.to_owned(),
        known: BUILTIN_NAMES.join(", "),
    })?;
    load_source(&format!("scripts/vendors/{name}.rhai"), source, None)
}

/// Loads a profile script from a file. The script may `import` modules next to it.
pub fn load_file(path: &Path) -> Result<Profile, ProfileError> {
    let source = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let dir = path.parent().map(Path::to_path_buf);
    load_source(&path.display().to_string(), &source, dir.as_deref())
}

/// A built-in name, or a path to a `.rhai` script (anything containing `/` or ending in `.rhai`).
pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
    if name_or_path.ends_with(".rhai")
        || name_or_path.contains(std::path::MAIN_SEPARATOR)
        || name_or_path.contains('/')
    {
        load_file(Path::new(name_or_path))
    } else {
        load_builtin(name_or_path)
    }
}

/// Evaluates profile script text. `file` names the script in errors; `import_dir` enables `import` of
/// modules from that directory (`None`: imports are refused).
pub fn load_source(
    file: &str,
    source: &str,
    import_dir: Option<&Path>,
) -> Result<Profile, ProfileError> {
    let engine = sandboxed_engine(import_dir);
    let value: Dynamic = engine.eval(source).map_err(|e| script_error(file, &e))?;
    if !value.is_map() {
        return Err(ProfileError::NotAMap {
            file: file.to_owned(),
            type_name: value.type_name().to_owned(),
        });
    }
    let json: serde_json::Value =
        rhai::serde::from_dynamic(&value).map_err(|e| ProfileError::Field {
            file: file.to_owned(),
            field: ".".to_owned(),
            line: None,
            message: e.to_string(),
        })?;
    let profile =
        Profile::from_json(json).map_err(|e| field_error(file, source, e.field, e.message))?;
    profile
        .check()
        .map_err(|e| field_error(file, source, e.field, e.message))?;
    Ok(profile)
}

fn sandboxed_engine(import_dir: Option<&Path>) -> Engine {
    let mut engine = Engine::new();
    engine.set_max_operations(1_000_000);
    engine.set_max_call_levels(32);
    engine.set_max_expr_depths(64, 64);
    engine.set_max_string_size(1 << 20);
    engine.set_max_array_size(10_000);
    engine.set_max_map_size(10_000);
    match import_dir {
        Some(dir) => {
            engine.set_module_resolver(rhai::module_resolvers::FileModuleResolver::new_with_path(
                dir,
            ));
        }
        None => {
            engine.set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new());
        }
    }
    engine
}

fn script_error(file: &str, err: &EvalAltResult) -> ProfileError {
    let pos: Position = err.position();
    let mut message = err.to_string();
    // Rhai appends " (line L, position C)"; the error already carries them separately.
    if !pos.is_none()
        && let Some(i) = message.rfind(" (line ")
    {
        message.truncate(i);
    }
    ProfileError::Script {
        file: file.to_owned(),
        line: pos.line(),
        column: pos.position(),
        message,
    }
}

fn field_error(file: &str, source: &str, field: String, message: String) -> ProfileError {
    // Prefer the key named in the message (`unknown field `hostNetwrok``), else the path's last key.
    let named = message
        .split('`')
        .nth(1)
        .filter(|k| !k.is_empty() && !k.contains(' '))
        .and_then(|k| find_key_line(source, k));
    let line = named.or_else(|| last_key(&field).and_then(|k| find_key_line(source, &k)));
    ProfileError::Field {
        file: file.to_owned(),
        field,
        line,
        message,
    }
}

fn last_key(path: &str) -> Option<String> {
    let last = path.rsplit('.').next()?;
    let key = last.split('[').next()?;
    (!key.is_empty()).then(|| key.to_owned())
}

/// 1-based line of the first `key:` (bare or quoted) outside comments.
fn find_key_line(source: &str, key: &str) -> Option<usize> {
    let quoted = format!("\"{key}\"");
    source.lines().enumerate().find_map(|(i, line)| {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim_start();
        let hit = [key, quoted.as_str()].iter().any(|k| {
            trimmed
                .strip_prefix(k)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        });
        hit.then_some(i + 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_loads_and_checks() {
        assert_eq!(BUILTIN.len(), BUILTIN_NAMES.len());
        for name in builtin_names() {
            let p = load_builtin(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(p.name, *name);
        }
    }

    #[test]
    fn unknown_profile_lists_known_names() {
        let e = load_builtin("aws-efa").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("aws-efa")
                && msg.contains("aliyun-erdma-dra")
                && msg.contains("mellanox-ib"),
            "{msg}"
        );
    }

    #[test]
    fn syntax_error_has_file_and_line() {
        let src = "#{\n  name: \"x\",\n  fabric: ,\n}";
        let e = load_source("vendors/x.rhai", src, None).unwrap_err();
        match &e {
            ProfileError::Script { file, line, .. } => {
                assert_eq!(file, "vendors/x.rhai");
                assert_eq!(*line, Some(3), "{e}");
            }
            other => panic!("expected a script error, got {other:?}"),
        }
        assert!(e.to_string().starts_with("vendors/x.rhai:3:"), "{e}");
    }

    #[test]
    fn runtime_error_has_line() {
        let e = load_source("r.rhai", "let x = 1;\nlet y = x + \"a\" * 2;\n#{}", None).unwrap_err();
        assert!(
            matches!(e, ProfileError::Script { line: Some(2), .. }),
            "{e}"
        );
    }

    #[test]
    fn non_map_result() {
        let e = load_source("n.rhai", "42", None).unwrap_err();
        assert!(matches!(e, ProfileError::NotAMap { .. }), "{e}");
    }

    fn erdma_with(edit: &str, with: &str) -> String {
        let src = builtin_source("aliyun-erdma").unwrap_or_default();
        assert!(
            src.contains(edit),
            "fixture text `{edit}` not in the script"
        );
        src.replacen(edit, with, 1)
    }

    #[test]
    fn unknown_field_is_named_with_line() {
        let src = erdma_with("host_network: true", "hostNetwrok: true");
        let e = load_source("t.rhai", &src, None).unwrap_err();
        let ProfileError::Field {
            field,
            line,
            message,
            ..
        } = &e
        else {
            panic!("expected a field error, got {e:?}");
        };
        assert!(field.starts_with("pod"), "{field}");
        assert!(message.contains("hostNetwrok"), "{message}");
        let expected = src
            .lines()
            .position(|l| l.contains("hostNetwrok"))
            .map(|i| i + 1);
        assert_eq!(*line, expected);
    }

    #[test]
    fn wrong_type_is_named() {
        let src = erdma_with("counter_multiplier: 1", "counter_multiplier: \"one\"");
        let e = load_source("t.rhai", &src, None).unwrap_err();
        assert!(
            matches!(&e, ProfileError::Field { field, line: Some(_), .. } if field == "devices.counter_multiplier"),
            "{e:?}"
        );
    }

    #[test]
    fn bad_value_from_check_is_named() {
        let src = erdma_with("pin: \"2.30.7\"", "pin: \"2.28.9\"");
        let e = load_source("t.rhai", &src, None).unwrap_err();
        assert!(
            matches!(&e, ProfileError::Field { field, .. } if field == "nccl.pin"),
            "{e:?}"
        );
        assert!(e.to_string().contains("known_bad"), "{e}");
    }

    #[test]
    fn builtins_cannot_import() {
        let e = load_source("i.rhai", "import \"x\" as x;\n#{}", None).unwrap_err();
        assert!(matches!(e, ProfileError::Script { .. }), "{e:?}");
    }

    #[test]
    fn load_file_and_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.rhai");
        let src = erdma_with("name: \"aliyun-erdma\"", "name: \"my-erdma\"");
        std::fs::write(&path, src).unwrap();
        let p = load(path.to_str().unwrap()).unwrap();
        assert_eq!(p.name, "my-erdma");
        let e = load_file(&dir.path().join("missing.rhai")).unwrap_err();
        assert!(matches!(e, ProfileError::Io { .. }), "{e:?}");
        assert!(e.to_string().contains("missing.rhai"));
    }
}
