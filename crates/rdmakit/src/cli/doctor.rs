//! `rdmakit doctor`: a NCCL/UCX/Ray/ibverbs log against probe's known failure signatures, each with its
//! cause and fix. The log is read a line at a time (`kubectl logs -f POD | rdmakit doctor -` reports each
//! finding as it appears and runs in bounded memory however long the stream).

use std::io::BufRead;

use clap::Args;

use super::io::table;
use super::{CmdResult, Failure, code};

/// `rdmakit doctor` arguments.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Log file, or - for stdin.
    pub file: String,
    /// Print findings as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Longest line kept (bytes); the rest of a longer line is skipped, so a stream without newlines
/// cannot grow memory either. Evidence is cut at 400 characters anyway.
const MAX_LINE: usize = 64 * 1024;

/// Invalid UTF-8 byte offsets named in the note (the first few).
const SHOWN_INVALID: usize = 5;

/// Reads one line (without its newline) of at most [`MAX_LINE`] bytes into `buf`; returns the
/// bytes consumed from the input, 0 at the end.
fn read_line_capped(r: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    buf.clear();
    let mut consumed = 0;
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            return Ok(consumed);
        }
        let (take, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        let room = MAX_LINE.saturating_sub(buf.len());
        let body = if done { take - 1 } else { take };
        buf.extend_from_slice(&avail[..body.min(room)]);
        r.consume(take);
        consumed += take;
        if done {
            return Ok(consumed);
        }
    }
}

/// Invalid UTF-8 seen so far: how many sequences, and the byte offsets (in the whole input) and
/// values of the first few.
#[derive(Default)]
struct Invalid {
    count: usize,
    shown: Vec<(usize, u8)>,
}

impl Invalid {
    /// Notes the invalid sequences of one line that starts at byte `base` of the input.
    fn scan(&mut self, mut bytes: &[u8], mut base: usize) {
        while let Err(e) = std::str::from_utf8(bytes) {
            let at = e.valid_up_to();
            let len = e.error_len().unwrap_or(bytes.len() - at);
            if self.shown.len() < SHOWN_INVALID {
                self.shown.push((base + at, bytes[at]));
            }
            self.count += 1;
            base += at + len;
            bytes = &bytes[at + len..];
        }
    }
}

fn open(file: &str) -> Result<Box<dyn BufRead>, Failure> {
    if file == "-" {
        return Ok(Box::new(std::io::stdin().lock()));
    }
    let f = std::fs::File::open(file).map_err(|e| {
        Failure::input(anyhow::anyhow!(super::io::io_problem(
            std::path::Path::new(file),
            &e
        )))
    })?;
    Ok(Box::new(std::io::BufReader::new(f)))
}

/// Diagnoses the log and prints the findings. Bytes that are not UTF-8 (binary noise in a log) are
/// replaced, not a reason to reject the log: a note on stderr names their byte offsets. An empty log is
/// exit 2 ("no input"), not a clean bill of health. Reading stdin, each finding is printed (`found: ...`)
/// as soon as its line is read; the table follows at the end of the stream.
pub fn doctor(a: DoctorArgs) -> CmdResult {
    let shown = if a.file == "-" { "<stdin>" } else { &a.file };
    let mut input = open(&a.file)?;
    let kb = probe::doctor::KnowledgeBase::builtin().map_err(Failure::input)?;
    let mut stream = kb.stream();
    let live = a.file == "-" && !a.json;
    let (mut buf, mut offset, mut invalid) = (Vec::new(), 0usize, Invalid::default());
    loop {
        let n = read_line_capped(&mut input, &mut buf)
            .map_err(|e| Failure::input(anyhow::anyhow!("{shown}: cannot read: {e}")))?;
        if n == 0 {
            break;
        }
        invalid.scan(&buf, offset);
        offset += n;
        for f in stream.push_line(&String::from_utf8_lossy(&buf)) {
            if live {
                println!(
                    "found: line {} {} {}: {}",
                    f.line,
                    f.severity.as_str(),
                    f.id,
                    f.cause
                );
            }
        }
    }
    if stream.lines_read() == 0 {
        return Err(Failure::input(anyhow::anyhow!(
            "no input: {shown} is empty; give doctor a log (a file, or `kubectl logs POD | rdmakit doctor -`)"
        )));
    }
    if invalid.count > 0 {
        let at: Vec<String> = invalid
            .shown
            .iter()
            .map(|(off, b)| format!("byte {off} (0x{b:02x})"))
            .collect();
        eprintln!(
            "note: {shown}: {} invalid UTF-8 sequence(s), first at {}; each was replaced with U+FFFD and the whole log read",
            invalid.count,
            at.join(", ")
        );
    }
    let d = stream.finish();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&d).map_err(Failure::input)?
        );
    } else if d.findings.is_empty() {
        println!("no known failure signature in {} lines", d.lines_read);
    } else {
        let mut t = table(&["line", "severity", "signature", "cause", "fix"]);
        for f in &d.findings {
            t.add_row(vec![
                f.line.to_string(),
                f.severity.as_str().to_owned(),
                f.id.clone(),
                f.cause.clone(),
                f.fix.clone().unwrap_or_default(),
            ]);
        }
        println!("{t}");
    }
    // Positive findings (NET/IB in use, device name) are reported but do not fail the command.
    Ok(if d.verdict >= probe::Verdict::Warn {
        code::FINDINGS
    } else {
        code::OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_and_line_ends_dropped() {
        let long = vec![b'x'; MAX_LINE + 10];
        let mut input = [long.as_slice(), b"\nnext\n"].concat();
        input.extend_from_slice(b"last");
        let mut r = std::io::Cursor::new(input);
        let mut buf = Vec::new();
        assert_eq!(read_line_capped(&mut r, &mut buf).unwrap(), MAX_LINE + 11);
        assert_eq!(buf.len(), MAX_LINE);
        assert_eq!(read_line_capped(&mut r, &mut buf).unwrap(), 5);
        assert_eq!(buf, b"next");
        assert_eq!(read_line_capped(&mut r, &mut buf).unwrap(), 4);
        assert_eq!(buf, b"last");
        assert_eq!(read_line_capped(&mut r, &mut buf).unwrap(), 0);
    }

    #[test]
    fn invalid_bytes_are_named_by_their_offset_in_the_input() {
        let mut inv = Invalid::default();
        inv.scan(b"ok \xff ok \xc3", 100);
        assert_eq!(inv.count, 2);
        assert_eq!(inv.shown, [(103, 0xff), (108, 0xc3)]);
    }
}
