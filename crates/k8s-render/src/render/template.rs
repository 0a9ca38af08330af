//! `@@NAME@@` placeholders in the embedded program templates (`templates/`). `@@` never occurs in the
//! Python itself, so f-string braces need no escaping.

use super::RenderError;

/// Replaces each `@@KEY@@` in one pass over the template (a value that holds `@@` is never read as a
/// placeholder) and fails if the template has one that `vars` does not name.
pub(crate) fn fill(
    file: &'static str,
    template: &str,
    vars: &[(&str, String)],
) -> Result<String, RenderError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("@@") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let key = after.find("@@").map(|end| &after[..end]);
        match key.and_then(|k| vars.iter().find(|(name, _)| *name == k)) {
            Some((k, value)) => {
                out.push_str(value);
                rest = &after[k.len() + 2..];
            }
            None => {
                let shown = key.unwrap_or(&after[..after.len().min(32)]);
                return Err(RenderError::Template {
                    file,
                    placeholder: format!("@@{shown}@@"),
                });
            }
        }
    }
    out.push_str(rest);
    Ok(out)
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
        // A value is not a template: its `@@B@@` stays as it is.
        assert_eq!(
            fill("t", t, &[("A", "@@B@@".into()), ("B", "2".into())]).unwrap(),
            "a=@@B@@ b=2"
        );
    }
}
