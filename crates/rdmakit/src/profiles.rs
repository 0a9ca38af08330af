//! Vendor profiles authored as Rhai scripts under `scripts/vendors/` (built-ins embedded in the binary).
//!
//! A profile script evaluates to one object map whose fields are those of [`k8s_render::Profile`]
//! (snake_case). The script runs in a sandboxed engine (operation, depth and size limits; built-ins
//! import only the embedded base modules `base/mlx5` and `base/erdma`, `scripts/vendors/base/`), its result is converted to JSON and deserialised with field paths, then checked with
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
const BUILTIN: &[(&str, &str)] = crate::builtins::PROFILES;

const BUILTIN_NAMES: &[&str] = crate::builtins::PROFILE_NAMES;

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// No built-in or user profile has that name.
    #[error(
        "unknown profile `{name}`{}; profiles: {known} (or pass a path to a .rhai profile script)",
        hint.as_ref().map(|h| format!(" (did you mean `{h}`?)")).unwrap_or_default()
    )]
    Unknown {
        /// Name asked for.
        name: String,
        /// The nearest known name, when one is close.
        hint: Option<String>,
        /// Comma-separated known names: the built-ins, then the user's with their files.
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
    let source = builtin_source(name).ok_or_else(|| unknown(name, &[]))?;
    load_source(&format!("scripts/vendors/{name}.rhai"), source, None)
}

/// Loads a profile script from a file. The script may `import` modules next to it, and the embedded
/// bases (`import "base/mlx5" as mlx5;`) where no file of that name is next to it.
pub fn load_file(path: &Path) -> Result<Profile, ProfileError> {
    let source = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let dir = path.parent().map(Path::to_path_buf);
    load_source(&path.display().to_string(), &source, dir.as_deref())
}

/// A path to a `.rhai` script (anything containing `/` or ending in `.rhai`), a built-in name, or the
/// name of a user profile [`list`] finds from the environment ([`Search::from_env`]).
pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
    load_in(name_or_path, &Search::from_env(Vec::new()))
}

/// [`load`], looking for user profiles where `search` says: a path is read, a built-in name is the
/// built-in, and any other name is the user profile whose `name` (or file name without `.rhai`) it is.
/// An unknown name lists every known one, the nearest first.
pub fn load_in(name_or_path: &str, search: &Search) -> Result<Profile, ProfileError> {
    if name_or_path.ends_with(".rhai")
        || name_or_path.contains(std::path::MAIN_SEPARATOR)
        || name_or_path.contains('/')
    {
        return load_file(Path::new(name_or_path));
    }
    if builtin_source(name_or_path).is_some() {
        return load_builtin(name_or_path);
    }
    let mut users = user_profiles(search);
    let stem_is = |l: &Listed| {
        l.path
            .as_ref()
            .and_then(|p| p.file_stem())
            .is_some_and(|s| s == std::ffi::OsStr::new(name_or_path))
    };
    // By the name the listing shows first; else by file name, whose load error is then the answer.
    let named = users
        .iter()
        .position(|l| l.profile.as_ref().is_ok_and(|p| p.name == name_or_path))
        .or_else(|| users.iter().position(stem_is));
    if let Some(i) = named {
        return users.swap_remove(i).profile;
    }
    Err(unknown(name_or_path, &users))
}

/// The error for a name no profile has, listing the built-ins and the user's profiles.
fn unknown(name: &str, users: &[Listed]) -> ProfileError {
    let user_names: Vec<(String, String)> = users
        .iter()
        .filter_map(|l| {
            let p = l.profile.as_ref().ok()?;
            let path = l.path.as_ref().map(|p| p.display().to_string())?;
            Some((p.name.clone(), path))
        })
        .collect();
    let names = BUILTIN_NAMES
        .iter()
        .copied()
        .chain(user_names.iter().map(|(n, _)| n.as_str()));
    let hint = k8s_render::validate::suggest(name, names).map(str::to_owned);
    let known = BUILTIN_NAMES
        .iter()
        .map(|n| (*n).to_owned())
        .chain(user_names.iter().map(|(n, p)| format!("{n} ({p})")))
        .collect::<Vec<_>>()
        .join(", ");
    ProfileError::Unknown {
        name: name.to_owned(),
        hint,
        known,
    }
}

/// Where a listed profile comes from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Embedded in the binary (`scripts/vendors/` at build time).
    BuiltIn,
    /// `./scripts/vendors/*.rhai` in the working directory that is not byte-identical to the built-in of
    /// the same name (a checkout's copy of a built-in is that built-in, not listed twice).
    WorkingDir,
    /// A file or folder given on the command line (`rdmakit profiles --path`).
    Given,
    /// The user's config folder: `$XDG_CONFIG_HOME/rdmakit/profiles` or `~/.config/rdmakit/profiles`.
    UserConfig,
}

impl Origin {
    /// How the listing names it.
    pub fn label(&self) -> &'static str {
        match self {
            Origin::BuiltIn => "built-in",
            Origin::WorkingDir => "./scripts/vendors",
            Origin::Given => "--path",
            Origin::UserConfig => "user config",
        }
    }
}

/// One profile of [`list`]: where it is, and the profile or why it does not load.
#[derive(Debug)]
pub struct Listed {
    /// Where it comes from.
    pub origin: Origin,
    /// The script file (`None` for built-ins); pass it as `--profile` to use the profile.
    pub path: Option<PathBuf>,
    /// The loaded profile, or the error that names the file and line.
    pub profile: Result<Profile, ProfileError>,
}

/// Where [`list`] looks for user profiles besides the built-ins.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// The working directory; its `scripts/vendors/` is searched.
    pub working_dir: Option<PathBuf>,
    /// Files or folders given by the user, in order.
    pub given: Vec<PathBuf>,
    /// The user's profile folder (see [`user_config_dir`]).
    pub user_config: Option<PathBuf>,
}

impl Search {
    /// The current directory, `given`, and the user config folder from the environment.
    pub fn from_env(given: Vec<PathBuf>) -> Self {
        Self {
            working_dir: std::env::current_dir().ok(),
            given,
            user_config: user_config_dir(
                std::env::var_os("XDG_CONFIG_HOME").as_deref(),
                std::env::var_os("HOME").as_deref(),
            ),
        }
    }
}

/// `$XDG_CONFIG_HOME/rdmakit/profiles` when that variable is an absolute path (the XDG spec ignores a
/// relative one), else `$HOME/.config/rdmakit/profiles`; `None` when neither is usable.
pub fn user_config_dir(
    xdg_config_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    let base = match xdg_config_home.map(Path::new) {
        Some(x) if x.is_absolute() => x.to_path_buf(),
        _ => Path::new(home.filter(|h| !h.is_empty())?).join(".config"),
    };
    Some(base.join("rdmakit").join("profiles"))
}

/// Every profile: the built-ins, then `./scripts/vendors/*.rhai` of the working directory, the given files
/// and folders, and the user config folder (each folder's `*.rhai` in name order). Folders that do not
/// exist are skipped; a given path that does not exist, and a script that does not load, are listed with
/// their error.
pub fn list(search: &Search) -> Vec<Listed> {
    let mut out: Vec<Listed> = BUILTIN_NAMES
        .iter()
        .map(|n| Listed {
            origin: Origin::BuiltIn,
            path: None,
            profile: load_builtin(n),
        })
        .collect();
    out.extend(user_profiles(search));
    out
}

/// The user profiles of [`list`] (everything but the built-ins), in its order.
fn user_profiles(search: &Search) -> Vec<Listed> {
    let mut out = Vec::new();
    // `shown` is the path as listed (what the user passes as --profile); `path` is where it is read.
    let add = |origin: Origin, path: &Path, shown: PathBuf, out: &mut Vec<Listed>| {
        out.push(Listed {
            origin,
            path: Some(shown),
            profile: load_file(path),
        });
    };
    if let Some(wd) = &search.working_dir {
        for path in rhai_files(&wd.join("scripts").join("vendors")) {
            let same_as_builtin = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(builtin_source)
                .is_some_and(|b| std::fs::read_to_string(&path).is_ok_and(|t| t == b));
            if !same_as_builtin {
                // Shown relative to the working directory, as the user would type it.
                let shown = path
                    .strip_prefix(wd)
                    .map(|p| Path::new(".").join(p))
                    .unwrap_or_else(|_| path.clone());
                add(Origin::WorkingDir, &path, shown, &mut out);
            }
        }
    }
    for given in &search.given {
        if given.is_dir() {
            for path in rhai_files(given) {
                add(Origin::Given, &path, path.clone(), &mut out);
            }
        } else {
            add(Origin::Given, given, given.clone(), &mut out);
        }
    }
    if let Some(dir) = &search.user_config {
        for path in rhai_files(dir) {
            add(Origin::UserConfig, &path, path.clone(), &mut out);
        }
    }
    out
}

/// `*.rhai` files directly in `dir`, sorted; none when `dir` cannot be read.
fn rhai_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rhai") && p.is_file())
        .collect();
    files.sort();
    files
}

/// Evaluates profile script text. `file` names the script in errors; `import_dir` enables `import` of
/// modules from that directory (`None`: only the embedded bases, `import "base/erdma" as erdma;`).
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
            line: returned_map_line(source),
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
        // A user profile imports modules next to it first, then the embedded bases.
        Some(dir) => {
            let mut resolvers = rhai::module_resolvers::ModuleResolversCollection::new();
            resolvers.push(rhai::module_resolvers::FileModuleResolver::new_with_path(
                dir,
            ));
            resolvers.push(BaseResolver);
            engine.set_module_resolver(resolvers);
        }
        // A built-in imports only the embedded bases.
        None => {
            engine.set_module_resolver(BaseResolver);
        }
    }
    engine
}

/// Resolves `import "base/<name>"` to the embedded `scripts/vendors/base/<name>.rhai`, evaluated by the
/// importing (sandboxed) engine; any other path is not found.
struct BaseResolver;

impl rhai::ModuleResolver for BaseResolver {
    fn resolve(
        &self,
        engine: &Engine,
        _source: Option<&str>,
        path: &str,
        pos: Position,
    ) -> Result<rhai::Shared<rhai::Module>, Box<EvalAltResult>> {
        let name = path.trim_end_matches(".rhai");
        let Some((_, text)) = name.strip_prefix("base/").and_then(|base| {
            crate::builtins::PROFILE_BASES
                .iter()
                .find(|(n, _)| *n == base)
        }) else {
            return Err(EvalAltResult::ErrorModuleNotFound(path.to_owned(), pos).into());
        };
        crate::host::resolver::eval_module(
            engine,
            &format!("scripts/vendors/{name}.rhai"),
            text,
            pos,
        )
    }
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
    let line = field_line(source, &field, &message);
    ProfileError::Field {
        file: file.to_owned(),
        field,
        line,
        message,
    }
}

/// The line of the field an error names: the path walked key by key (`nccl`, then `extra_env` after it,
/// then `FI_PROVIDER` after that), so a key that appears in several objects is found in the right one;
/// where a key is not in the script (a missing field, one a base module gives) the deepest object found,
/// or the key the message names (`unknown field `hostNetwrok``); for the whole map (`.`) the line of
/// the map the script returns.
fn field_line(source: &str, path: &str, message: &str) -> Option<usize> {
    let keys: Vec<&str> = path
        .split('.')
        .map(|k| k.split('[').next().unwrap_or(k))
        .filter(|k| !k.is_empty())
        .collect();
    let mut at: Option<usize> = None;
    let mut walked = 0;
    for k in &keys {
        match find_key_line_from(source, k, at.unwrap_or(0)) {
            Some(l) => {
                at = Some(l);
                walked += 1;
            }
            None => break,
        }
    }
    // serde's `unknown field `x`` / `missing field `y``: the key it names, inside the deepest object found.
    let serde_key = message.starts_with("unknown field") || message.starts_with("missing field");
    let named = || {
        message
            .split('`')
            .nth(1)
            .filter(|k| !k.is_empty() && !k.contains(' '))
            .and_then(|k| find_key_line_from(source, k, at.unwrap_or(0)))
    };
    if serde_key && let Some(l) = named() {
        return Some(l);
    }
    if walked == keys.len() && at.is_some() {
        return at;
    }
    named().or(at).or_else(|| returned_map_line(source))
}

/// 1-based line of the first `key:` (bare or quoted) outside comments, on line `from` (1-based) or after
/// it (0: anywhere).
fn find_key_line_from(source: &str, key: &str, from: usize) -> Option<usize> {
    let quoted = format!("\"{key}\"");
    source
        .lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find_map(|(i, line)| {
            let code = line.split("//").next().unwrap_or("");
            let trimmed = code.trim_start();
            let hit = [key, quoted.as_str()].iter().any(|k| {
                trimmed
                    .strip_prefix(k)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
            });
            // The key on `from` itself is the parent's own line: look past it.
            (hit && (from == 0 || i + 1 > from)).then_some(i + 1)
        })
}

/// 1-based line of the object map a profile script returns: the last line that opens a map (`#{`) at the
/// start of a line, unindented.
fn returned_map_line(source: &str) -> Option<usize> {
    source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("#{"))
        .map(|(i, _)| i + 1)
        .last()
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
        // A field a base gives, overridden in the profile's own map.
        let src = erdma_with(
            "devices: erdma::devices(),",
            "devices: erdma::devices() + #{\n        counter_multiplier: \"one\",\n    },",
        );
        let e = load_source("t.rhai", &src, None).unwrap_err();
        assert!(
            matches!(&e, ProfileError::Field { field, line: Some(_), .. } if field == "devices.counter_multiplier"),
            "{e:?}"
        );
    }

    #[test]
    fn bad_value_from_check_is_named() {
        let src = erdma_with(
            "} + erdma::nccl_versions(),",
            "} + erdma::nccl_versions() + #{\n        pin: \"2.28.9\",\n    },",
        );
        let e = load_source("t.rhai", &src, None).unwrap_err();
        assert!(
            matches!(&e, ProfileError::Field { field, .. } if field == "nccl.pin"),
            "{e:?}"
        );
        assert!(e.to_string().contains("known_bad"), "{e}");
    }

    fn the_error(src: &str) -> (String, Option<usize>, String) {
        match load_source("t.rhai", src, None) {
            Err(ProfileError::Field {
                field,
                line,
                message,
                ..
            }) => (field, line, message),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    fn line_of(src: &str, text: &str) -> Option<usize> {
        src.lines().position(|l| l.contains(text)).map(|i| i + 1)
    }

    /// Issue 25: a missing top-level field carried no line; it names the map the script returns.
    #[test]
    fn a_missing_top_level_field_has_the_maps_line() {
        let src = erdma_with("    fabric: \"eRDMA\",\n", "");
        let (field, line, message) = the_error(&src);
        assert!(
            message.contains("missing field `fabric`"),
            "{field}: {message}"
        );
        let map = src.lines().position(|l| l == "#{").map(|i| i + 1);
        assert_eq!((line, map), (Some(5), Some(5)));
        let e = load_source("t.rhai", &src, None).unwrap_err();
        assert!(e.to_string().starts_with("t.rhai:5: "), "{e}");
    }

    /// Issue 25: an EFA profile with FI_PROVIDER in nccl.extra_env and nccl.transport.env rendered the
    /// variable twice; it is refused at load time, naming both fields, at the extra_env key's line.
    #[test]
    fn a_variable_in_two_env_maps_is_refused_at_its_line() {
        let efa = builtin_source("aws-efa-eks").unwrap_or_default();
        let edit = "        pip_package: \"nvidia-nccl-cu13\",";
        assert!(efa.contains(edit));
        let src = efa.replacen(
            edit,
            &format!(
                "        extra_env: #{{\n            FI_PROVIDER: \"efa\",\n        }},\n{edit}"
            ),
            1,
        );
        let (field, line, message) = the_error(&src);
        assert_eq!(field, "nccl.extra_env.FI_PROVIDER");
        assert!(
            message.contains("nccl.transport.env.FI_PROVIDER"),
            "{message}"
        );
        let extra = line_of(&src, "extra_env: #{").unwrap_or_default();
        assert_eq!(
            line,
            Some(extra + 1),
            "the FI_PROVIDER under extra_env, not the transport's"
        );
    }

    /// Cross-field errors name the line of the field or object involved, also when the key comes from a
    /// base module (the object's own line then).
    #[test]
    fn cross_field_errors_have_lines() {
        // (text replaced, its replacement, the field named, the text on the line named)
        let cases = [
            // nccl.pin in the known_bad list: the override's line.
            (
                "} + erdma::nccl_versions(),",
                "} + erdma::nccl_versions() + #{\n        pin: \"2.28.9\",\n    },",
                "nccl.pin",
                "pin: \"2.28.9\"",
            ),
            // A bad exclude glob added to the devices the base gives: the override's line.
            (
                "devices: erdma::devices(),",
                "devices: erdma::devices() + #{ exclude: [\"erdma_9; id\"] },",
                "devices.exclude[0]",
                "exclude: [",
            ),
            (
                "devices: erdma::devices(),",
                "devices: erdma::devices() + #{ counter_multiplier: 0 },",
                "devices.counter_multiplier",
                "counter_multiplier: 0",
            ),
            (
                "volume_name: \"shm\"",
                "volume_name: \"Shm\"",
                "pod.shm.volume_name",
                "volume_name: \"Shm\"",
            ),
        ];
        for (edit, with, want_field, on) in cases {
            let src = erdma_with(edit, with);
            let (field, line, _) = the_error(&src);
            assert_eq!(field, want_field);
            assert_eq!(line, line_of(&src, on), "{field}");
        }
    }

    #[test]
    fn builtins_import_only_the_embedded_bases() {
        let e = load_source("i.rhai", "import \"x\" as x;\n#{}", None).unwrap_err();
        assert!(matches!(e, ProfileError::Script { .. }), "{e:?}");
        let e = load_source("i.rhai", "import \"base/nope\" as x;\n#{}", None).unwrap_err();
        assert!(matches!(e, ProfileError::Script { .. }), "{e:?}");
        // A base is there for built-ins and for user profiles alike, wherever the user's file is.
        let mine = erdma_with("name: \"aliyun-erdma\"", "name: \"my-erdma\"");
        assert!(mine.contains("import \"base/erdma\" as erdma;"));
        let builtin = load_source("mine.rhai", &mine, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let from_file = load_source("mine.rhai", &mine, Some(dir.path())).unwrap();
        assert_eq!(builtin, from_file);
        assert_eq!(builtin.devices.name_pattern, "erdma_*");
        assert_eq!(builtin.nccl.pin.as_deref(), Some("2.30.7"));
        // A module next to a user profile wins over the embedded base of the same name.
        std::fs::create_dir_all(dir.path().join("base")).unwrap();
        std::fs::write(
            dir.path().join("base/erdma.rhai"),
            crate::builtins::PROFILE_BASES[0]
                .1
                .replace("\"erdma_*\"", "\"erdma_1*\""),
        )
        .unwrap();
        let local = load_source("mine.rhai", &mine, Some(dir.path())).unwrap();
        assert_eq!(local.devices.name_pattern, "erdma_1*");
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

    #[test]
    fn list_marks_builtins_and_each_kind_of_user_profile() {
        let named = |n: &str| erdma_with("name: \"aliyun-erdma\"", &format!("name: \"{n}\""));
        let wd = tempfile::tempdir().unwrap();
        let vendors = wd.path().join("scripts/vendors");
        std::fs::create_dir_all(&vendors).unwrap();
        // A checkout's copy of a built-in is that built-in; an edited one is the user's.
        std::fs::write(
            vendors.join("aliyun-erdma.rhai"),
            builtin_source("aliyun-erdma").unwrap(),
        )
        .unwrap();
        std::fs::write(vendors.join("mellanox-ib.rhai"), named("my-mlx")).unwrap();
        std::fs::write(vendors.join("notes.txt"), "not a profile").unwrap();
        let given = tempfile::tempdir().unwrap();
        std::fs::write(given.path().join("b.rhai"), named("given-b")).unwrap();
        std::fs::write(given.path().join("a.rhai"), named("given-a")).unwrap();
        let file = given.path().join("single.rhai.txt");
        std::fs::write(&file, named("given-file")).unwrap();
        let config = tempfile::tempdir().unwrap();
        std::fs::write(config.path().join("broken.rhai"), "#{ name: ").unwrap();
        std::fs::write(config.path().join("mine.rhai"), named("from-config")).unwrap();

        let listed = list(&Search {
            working_dir: Some(wd.path().to_path_buf()),
            given: vec![given.path().to_path_buf(), file.clone()],
            user_config: Some(config.path().to_path_buf()),
        });
        let rows: Vec<(Origin, String)> = listed
            .iter()
            .map(|l| {
                let what = match &l.profile {
                    Ok(p) => p.name.clone(),
                    Err(e) => format!("error: {e}"),
                };
                (l.origin.clone(), what)
            })
            .collect();
        let mut want: Vec<(Origin, String)> = BUILTIN_NAMES
            .iter()
            .map(|n| (Origin::BuiltIn, (*n).to_owned()))
            .collect();
        want.extend([
            (Origin::WorkingDir, "my-mlx".to_owned()),
            (Origin::Given, "given-a".to_owned()),
            (Origin::Given, "given-b".to_owned()),
            (Origin::Given, "given-file".to_owned()),
        ]);
        assert_eq!(rows[..want.len()], want[..], "{rows:#?}");
        assert_eq!(rows.len(), want.len() + 2, "{rows:#?}");
        let (origin, broken) = &rows[want.len()];
        assert_eq!(*origin, Origin::UserConfig);
        assert!(
            broken.starts_with("error: ") && broken.contains("broken.rhai"),
            "{broken}"
        );
        assert_eq!(
            rows[want.len() + 1],
            (Origin::UserConfig, "from-config".to_owned())
        );
        // Paths are what the user passes as --profile; the working directory's is relative to it.
        assert_eq!(
            listed[want.len() - 4].path.as_deref(),
            Some(Path::new("./scripts/vendors/mellanox-ib.rhai"))
        );
        assert!(listed[0].path.is_none());
    }

    #[test]
    fn list_without_user_folders_is_the_builtins_and_a_missing_given_path_is_an_error() {
        let nowhere = tempfile::tempdir().unwrap();
        let listed = list(&Search {
            working_dir: Some(nowhere.path().to_path_buf()),
            given: vec![nowhere.path().join("gone.rhai")],
            user_config: Some(nowhere.path().join("no-such-dir")),
        });
        assert_eq!(listed.len(), BUILTIN_NAMES.len() + 1);
        assert!(
            listed[..BUILTIN_NAMES.len()]
                .iter()
                .all(|l| l.origin == Origin::BuiltIn && l.profile.is_ok())
        );
        let last = &listed[BUILTIN_NAMES.len()];
        assert!(
            matches!(last.profile, Err(ProfileError::Io { .. })),
            "{last:?}"
        );
    }

    #[test]
    fn a_user_profile_loads_by_its_name_or_file_name_and_an_unknown_name_lists_them() {
        let config = tempfile::tempdir().unwrap();
        let named = erdma_with("name: \"aliyun-erdma\"", "name: \"my-erdma\"");
        std::fs::write(config.path().join("mine.rhai"), named).unwrap();
        std::fs::write(config.path().join("broken.rhai"), "#{ name: ").unwrap();
        let search = Search {
            user_config: Some(config.path().to_path_buf()),
            ..Search::default()
        };
        assert_eq!(load_in("my-erdma", &search).unwrap().name, "my-erdma");
        assert_eq!(load_in("mine", &search).unwrap().name, "my-erdma");
        // A built-in name is the built-in; a broken file asked for by its name gives its error.
        assert_eq!(
            load_in("aliyun-erdma", &search).unwrap().name,
            "aliyun-erdma"
        );
        let e = load_in("broken", &search).unwrap_err();
        assert!(e.to_string().contains("broken.rhai:1"), "{e}");
        let e = load_in("my-erdmaa", &search).unwrap_err().to_string();
        assert!(e.contains("did you mean `my-erdma`?"), "{e}");
        assert!(e.contains("mellanox-ib") && e.contains("my-erdma ("), "{e}");
    }

    #[test]
    fn user_config_dir_follows_xdg_then_home() {
        use std::ffi::OsStr;
        let p = |x: Option<&str>, h: Option<&str>| {
            user_config_dir(x.map(OsStr::new), h.map(OsStr::new))
        };
        assert_eq!(
            p(Some("/x"), Some("/home/u")),
            Some(PathBuf::from("/x/rdmakit/profiles"))
        );
        // A relative XDG_CONFIG_HOME is ignored, as the spec says.
        assert_eq!(
            p(Some("rel"), Some("/home/u")),
            Some(PathBuf::from("/home/u/.config/rdmakit/profiles"))
        );
        assert_eq!(
            p(None, Some("/home/u")),
            Some(PathBuf::from("/home/u/.config/rdmakit/profiles"))
        );
        assert_eq!(p(None, None), None);
        assert_eq!(p(Some(""), Some("")), None);
    }
}
