//! POSIX shell (bash, dash, zsh): one word, and text inside a `#` comment.

/// Characters a word may hold unquoted in every POSIX shell (no glob, no expansion, no operator).
const PLAIN: &str = "_./:=,@%+-";

/// `s` as exactly one shell word: bare when it is plain, otherwise single-quoted, where nothing is
/// special but the quote itself (`'` becomes `'\''`). A newline stays a newline inside the quotes.
///
/// NUL is dropped: no argv or environment can hold one (the kernel ends the string there).
pub fn word(s: &str) -> String {
    if s.is_empty() {
        return "''".to_owned();
    }
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || PLAIN.contains(c))
    {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `NAME=value` as one word, for `env`, `mpirun -x` and the like: `value` is quoted with [`word`].
/// `None` when `name` is not a shell variable name (letters, digits, `_`, not starting with a digit).
pub fn assignment(name: &str, value: &str) -> Option<String> {
    is_name(name).then(|| format!("{name}={}", word(value)))
}

/// True for a shell variable name.
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `s` on one line for the text of a `#` comment (or any one-line display): a newline, CR and every
/// other control or line-separator character are written as escapes (`\n`, `\r`, `\x1b`, `\u{2028}`),
/// so the comment can never end early and the terminal shows what is there. A backslash stays as it is
/// (a comment is read, not parsed: `printf '\n'` in a note reads as written).
pub fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            c if super::breaks_line(c) && u32::from(c) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if super::breaks_line(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// `# text`: a comment line (no trailing newline) that holds `text` escaped as [`escape_text`] does.
pub fn comment(text: &str) -> String {
    format!("# {}", escape_text(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(word("abc-1.2"), "abc-1.2");
        assert_eq!(word(""), "''");
        assert_eq!(word("a b"), "'a b'");
        assert_eq!(word("it's"), "'it'\\''s'");
        assert_eq!(word("INFO $(touch P)"), "'INFO $(touch P)'");
        assert_eq!(word("/opt/x;id;#"), "'/opt/x;id;#'");
        assert_eq!(word("a\nb"), "'a\nb'");
        assert_eq!(word("^docker,lo"), "'^docker,lo'");
        assert_eq!(word("*"), "'*'");
        assert_eq!(word("~root"), "'~root'");
        assert_eq!(word("a\0b"), "'ab'");
    }

    #[test]
    fn assignments() {
        assert_eq!(
            assignment("NCCL_DEBUG", "INFO;id").as_deref(),
            Some("NCCL_DEBUG='INFO;id'")
        );
        assert_eq!(assignment("A B", "x"), None);
        assert_eq!(assignment("1A", "x"), None);
        assert_eq!(assignment("", "x"), None);
    }

    #[test]
    fn comments_stay_on_one_line() {
        assert_eq!(
            comment("Deploy to a\ntouch PWNED"),
            "# Deploy to a\\ntouch PWNED"
        );
        assert_eq!(escape_text("a\r\u{1b}[2Jb\\"), "a\\r\\x1b[2Jb\\");
        assert_eq!(escape_text("x\u{2028}y\u{85}"), "x\\u{2028}y\\x85");
        assert_eq!(escape_text("tab\there"), "tab\there");
    }

    /// Every word is read back by bash as the exact string (NUL aside): the round trip, through a real bash.
    #[test]
    fn bash_reads_every_word_back() {
        let cases = [
            "plain",
            "a b",
            "it's",
            "$(touch P)",
            "`id`",
            "a\nb\r\n",
            "'\"'\\",
            "${x:-y}",
            "!event",
            "\u{2028}é",
            "--",
            "-n",
        ];
        let script: String = cases
            .iter()
            .map(|c| format!("printf '%s\\0' {}\n", word(c)))
            .collect();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{out:?}");
        let got: Vec<&[u8]> = out.stdout.split(|b| *b == 0).collect();
        for (i, c) in cases.iter().enumerate() {
            assert_eq!(got[i], c.as_bytes(), "case {c:?}");
        }
    }
}
