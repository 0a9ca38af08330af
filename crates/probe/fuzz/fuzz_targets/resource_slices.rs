#![no_main]
//! Fuzz `probe::preflight::parse_resource_slices`, `parse_device_class` and the DRA selector
//! checks: any bytes, as (lossy) UTF-8, as ResourceSlice JSON, as DeviceClass JSON and as a CEL
//! selector, must not panic.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let devices = probe::preflight::parse_resource_slices(&text).unwrap_or_default();
    let _ = probe::preflight::dra_selector_gaps(&[text.to_string()], &devices);
    let (name, selectors) = probe::preflight::parse_device_class(&text)
        .unwrap_or_else(|_| ("fuzz".into(), vec![text.to_string()]));
    let _ = probe::preflight::device_class_checks(&name, &selectors, &devices);
});
