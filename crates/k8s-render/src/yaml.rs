//! Deterministic YAML emission over serde-saphyr.
//!
//! Defaults keep YAML 1.1 quoting, so strings such as `"0"`, `"1"`, `"true"` or `"8"` stay quoted and
//! reach the API server as strings (`rayStartParams` values and quantities must be strings). Multi-line
//! strings become literal blocks (`|`); single-line strings are never folded.

use serde::Serialize;

/// Serialises one object as a YAML document (no leading `---`, ending in a newline).
pub fn to_yaml<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    // Only multi-line strings use block style; long single-line strings (CEL, image names) stay on one line.
    options.folded_wrap_chars = usize::MAX / 2;
    let mut out = serde_saphyr::to_string_with_options(value, options)?;
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn numeric_strings_stay_quoted() {
        let mut m = BTreeMap::new();
        m.insert("num-gpus", "0");
        m.insert("flag", "true");
        m.insert("plain", "eth0");
        let y = to_yaml(&m).unwrap();
        assert!(
            y.contains("num-gpus: \"0\"") || y.contains("num-gpus: '0'"),
            "{y}"
        );
        assert!(
            y.contains("flag: \"true\"") || y.contains("flag: 'true'"),
            "{y}"
        );
        assert!(y.contains("plain: eth0"), "{y}");
    }

    #[test]
    fn multiline_is_literal_block() {
        let mut m = BTreeMap::new();
        m.insert(
            "script",
            "sleep 10\nmpirun -np 4 \\\n  --allow-run-as-root\n",
        );
        let y = to_yaml(&m).unwrap();
        assert!(y.contains("script: |"), "{y}");
        let long = "x ".repeat(100);
        let y = to_yaml(&BTreeMap::from([("k", long.trim())])).unwrap();
        assert_eq!(y.lines().count(), 1, "{y}");
    }
}
