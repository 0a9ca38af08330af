//! Misuse that must not compile (trybuild): READ with a gathered or shared destination.

#[test]
fn misuse_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
