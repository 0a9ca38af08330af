//! Cross-crate integration tests for rdmakit. The tests live in `tests/tests/`; this library holds shared helpers.

/// Every file of a bundle as `==> path <==` followed by its text: what the bundle snapshots hold.
pub fn bundle_listing(b: &k8s_render::Bundle) -> String {
    let mut out = String::new();
    for f in b.files() {
        out.push_str(&format!("==> {} <==\n{}", f.path, f.contents));
    }
    out
}
