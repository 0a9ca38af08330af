#![no_main]
//! Fuzz validation (schemas, cross-references, CRDs learnt from the stream) on whatever the
//! loader accepts.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(docs) = k8s_render::manifest::read_from("fuzz.yaml", data) {
        let options = k8s_render::validate::ValidateOptions::default();
        for v in k8s_render::validate::validate(&docs, &options) {
            assert!(v.location.doc < docs.len());
        }
    }
});
