#![no_main]
//! Fuzz the log doctor through its reader entry point (raw bytes, invalid UTF-8 included).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = probe::doctor::diagnose_reader(std::io::Cursor::new(data)) {
        // Findings are ordered and point at real lines.
        let mut last = 0;
        for f in &d.findings {
            assert!(f.line >= last && f.line >= 1 && f.line <= d.lines_read);
            last = f.line;
        }
    }
});
