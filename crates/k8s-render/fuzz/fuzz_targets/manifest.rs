#![no_main]
//! Fuzz the YAML loader: any bytes either parse into documents whose positions point into the
//! input, or give a `ManifestError`; never a panic.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(docs) = k8s_render::manifest::read_from("fuzz.yaml", data) else {
        return;
    };
    let lines = data.iter().filter(|b| **b == b'\n').count() as u64 + 1;
    for d in &docs {
        assert!(d.line.is_none_or(|l| l >= 1 && l <= lines));
        for dup in &d.duplicate_keys {
            assert!(dup.first_line <= dup.line && dup.line <= lines);
        }
    }
});
