//! Python source: string literals and the text of a `"""` docstring.

/// `s` as a Python string literal (double quotes); every control or line-separator character escaped, so
/// the literal stays on its line and holds exactly `s`.
pub fn str_lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    escape_into(&mut out, s, false);
    out.push('"');
    out
}

/// `s` for the inside of a `"""` docstring: backslashes and quotes escaped (so `"""` cannot end it), other
/// control characters as escapes; newlines stay newlines (the docstring is prose).
pub fn doc_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s, true);
    out
}

fn escape_into(out: &mut String, s: &str, keep_newlines: bool) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' if keep_newlines => out.push('\n'),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if super::breaks_line(c) && u32::from(c) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if super::breaks_line(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_docstrings() {
        assert_eq!(str_lit("a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(str_lit("a\nb\r\0"), "\"a\\nb\\r\\x00\"");
        assert_eq!(str_lit("\u{2028}"), "\"\\u2028\"");
        assert_eq!(
            doc_text("RoCE\"\"\"\nimport os"),
            "RoCE\\\"\\\"\\\"\nimport os"
        );
    }

    /// Python reads every literal back as the exact string, and a docstring stays one (skipped where no
    /// python3 is installed).
    #[test]
    fn python_reads_literals_back() {
        let cases = [
            "plain",
            "a\"b",
            "\\",
            "x\ny\r",
            "\u{0}\u{1b}\u{85}\u{2028}é",
            "{f}",
            "'''",
        ];
        let src: String = cases
            .iter()
            .map(|c| {
                let hex: String = c.bytes().map(|b| format!("{b:02x}")).collect();
                format!(
                    "assert {} == bytes.fromhex('{hex}').decode(), '{hex}'\n",
                    str_lit(c)
                )
            })
            .chain(std::iter::once(format!(
                "d = \"\"\"{}\"\"\"\nassert d == 'a\"\"\"b\\\\\\nc', d\n",
                doc_text("a\"\"\"b\\\nc")
            )))
            .collect();
        match std::process::Command::new("python3")
            .arg("-c")
            .arg(&src)
            .output()
        {
            Ok(out) => assert!(out.status.success(), "{src}\n{out:?}"),
            Err(_) => {
                assert!(
                    std::env::var_os("RDMAKIT_NO_SKIP").is_none(),
                    "python3 is needed under RDMAKIT_NO_SKIP"
                );
                eprintln!("skipped: python3 not found");
            }
        }
    }
}
