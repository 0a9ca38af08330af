//! Misuse that must not compile (trybuild): forging slot ownership from outside the crate.

#[test]
fn slot_ownership_cannot_be_forged() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
