//! `@@NAME@@` placeholders in the embedded program templates (`templates/`). `@@` never occurs in the
//! Python itself, so f-string braces need no escaping.

use super::RenderError;

/// Replaces each `@@KEY@@` and fails if any placeholder is left.
pub(crate) fn fill(
    file: &'static str,
    template: &str,
    vars: &[(&str, String)],
) -> Result<String, RenderError> {
    let mut out = template.to_owned();
    for (key, value) in vars {
        out = out.replace(&format!("@@{key}@@"), value);
    }
    if let Some(start) = out.find("@@") {
        let rest = &out[start + 2..];
        let end = rest.find("@@").unwrap_or(rest.len().min(32));
        return Err(RenderError::Template {
            file,
            placeholder: format!("@@{}@@", &rest[..end]),
        });
    }
    Ok(out)
}

/// A Python string literal (double-quoted, escaped).
pub(crate) fn py_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_leftovers() {
        let t = "a=@@A@@ b=@@B@@";
        assert_eq!(
            fill("t", t, &[("A", "1".into()), ("B", "2".into())]).unwrap(),
            "a=1 b=2"
        );
        let e = fill("t", t, &[("A", "1".into())]).unwrap_err();
        assert!(e.to_string().contains("@@B@@"), "{e}");
        assert_eq!(py_str("a\"b\\"), "\"a\\\"b\\\\\"");
    }
}
