//! Dockerfile text. A Dockerfile has no escape for a line break: a newline in a comment starts an
//! instruction, one in a `RUN` line starts another. So a value is written as it is, or refused.

use super::{Unsafe, breaks_line};

/// `value` for a comment or a `RUN` line, unchanged, when it holds no line break or control character;
/// otherwise an [`Unsafe`] error naming `field`.
pub fn text<'a>(field: &str, value: &'a str) -> Result<&'a str, Unsafe> {
    match value.chars().find(|c| breaks_line(*c) && *c != '\t') {
        None => Ok(value),
        Some(c) => Err(Unsafe {
            field: field.to_owned(),
            value: value.to_owned(),
            reason: format!(
                "{} would end the Dockerfile line and start a new instruction",
                describe(c)
            ),
            fix: "give it on one line, without control characters".to_owned(),
        }),
    }
}

/// `value` as one shell word of a `RUN` command ([`super::shell::word`]), after [`text`]: shell quotes do not
/// hold a Dockerfile instruction together (a raw line break ends it, quoted or not).
pub fn run_word(field: &str, value: &str) -> Result<String, Unsafe> {
    Ok(super::shell::word(text(field, value)?))
}

/// `value` as one token of an instruction the Dockerfile parser itself expands (`FROM`, `ENV`, `COPY`,
/// `USER`): no whitespace (a second argument: `FROM x AS y`), no `$` (a build variable), no quote or
/// backslash (the parser's own quoting), no control character.
pub fn token<'a>(field: &str, value: &'a str) -> Result<&'a str, Unsafe> {
    text(field, value)?;
    let bad = value
        .chars()
        .find(|c| c.is_whitespace() || "$\"'\\`".contains(*c));
    match (value.is_empty(), bad) {
        (false, None) => Ok(value),
        (true, _) => Err(Unsafe {
            field: field.to_owned(),
            value: String::new(),
            reason: "it is empty, and the instruction needs one".to_owned(),
            fix: "give a value".to_owned(),
        }),
        (_, Some(c)) => Err(Unsafe {
            field: field.to_owned(),
            value: value.to_owned(),
            reason: format!(
                "{} would split or expand the Dockerfile instruction's argument",
                describe(c)
            ),
            fix: "give one word without whitespace, `$`, quotes or backslashes".to_owned(),
        }),
    }
}

fn describe(c: char) -> String {
    match c {
        '\n' => "a newline".to_owned(),
        '\r' => "a carriage return".to_owned(),
        ' ' => "a space".to_owned(),
        c if c.is_whitespace() || c.is_control() || breaks_line(c) => {
            format!("the character U+{:04X}", u32::from(c))
        }
        c => format!("`{c}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_refuses_line_breaks_naming_the_field() {
        assert_eq!(text("registry", "r.example.com/me"), Ok("r.example.com/me"));
        assert_eq!(text("note", "a\tb"), Ok("a\tb"));
        let e = text("registry", "r.example.com/me\nRUN echo injected").unwrap_err();
        assert_eq!(e.field, "registry");
        let msg = e.to_string();
        assert!(
            msg.starts_with("registry = r.example.com/me\\nRUN echo injected: a newline"),
            "{msg}"
        );
        assert!(text("x", "a\rb").is_err());
        assert!(text("x", "a\u{2028}b").is_err());
        assert!(text("x", "a\u{0}b").is_err());
    }

    #[test]
    fn tokens_are_one_unexpanded_word() {
        assert_eq!(
            token("base_image", "rayproject/ray:2.49.2-gpu"),
            Ok("rayproject/ray:2.49.2-gpu")
        );
        for bad in [
            "",
            "img AS x",
            "img\tx",
            "$HOME/x",
            "a\"b",
            "a\\b",
            "a\nFROM b",
        ] {
            let e = token("base_image", bad).unwrap_err();
            assert_eq!(e.field, "base_image", "{bad:?}");
        }
    }
}
