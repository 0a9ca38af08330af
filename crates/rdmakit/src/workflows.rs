//! Workflows shipped with rdmakit (`scripts/workflows/`), embedded so `rdmakit run NAME` works anywhere.

/// How errors name the text of a built-in workflow or library module (`<built-in>/vke-ib-pod.rhai:40:22`,
/// `<built-in>/lib/verify.rhai:12:5`): not a local path, which may hold other text or none.
pub const BUILTIN_PREFIX: &str = "<built-in>";

/// `(name, source)` of every built-in workflow.
pub const BUILTIN: &[(&str, &str)] = crate::builtins::WORKFLOWS;

/// Looks a built-in workflow up by name (with or without `.rhai`).
pub fn builtin(name: &str) -> Option<&'static str> {
    let name = name.trim_end_matches(".rhai");
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}
