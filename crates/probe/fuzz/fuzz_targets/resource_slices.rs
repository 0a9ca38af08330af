#![no_main]
//! Fuzz `probe::preflight::parse_resource_slices` and the DRA selector check: any bytes, as
//! (lossy) UTF-8, as ResourceSlice JSON and as a CEL selector, must not panic.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let devices = probe::preflight::parse_resource_slices(&text).unwrap_or_default();
    let _ = probe::preflight::dra_selector_gaps(&[text.to_string()], &devices);
});
