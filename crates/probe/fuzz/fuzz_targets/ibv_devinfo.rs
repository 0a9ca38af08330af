#![no_main]
//! Fuzz `probe::parse::parse_ibv_devinfo`: any bytes, as (lossy) UTF-8 text, must not panic.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = probe::parse::parse_ibv_devinfo(&text);
});
