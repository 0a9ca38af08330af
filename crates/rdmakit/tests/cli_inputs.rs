//! What validate, lint, doctor and render do with awkward input (issue 25): no documents at all, bytes that
//! are not UTF-8, link loops, one unreadable file among many, and `render --stdout` of files that are not
//! manifests. Each case here passed silently, or failed the wrong way, before.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::path::Path;

use common::cli::rdmakit;

/// Runs `rdmakit args...` with `stdin`; returns (exit code, stdout, stderr).
fn run(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut c = rdmakit();
    c.args(args).write_stdin(stdin.to_vec());
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: c, image: busybox}\n";

#[test]
fn no_documents_is_no_input_not_a_pass() {
    for stdin in ["", "# only a comment\n---\n...\n"] {
        for cmd in ["validate", "lint"] {
            let (rc, out, err) = run(&[cmd, "-"], stdin.as_bytes());
            assert_eq!(rc, 2, "{cmd} - on {stdin:?}: {out}{err}");
            assert!(
                err.contains("no input: <stdin> held no Kubernetes document"),
                "{err}"
            );
        }
    }
    let (rc, out, err) = run(&["doctor", "-"], b"");
    assert_eq!(rc, 2, "{out}{err}");
    assert!(err.contains("no input: <stdin> is empty"), "{err}");
}

#[test]
fn doctor_keeps_the_finding_of_a_log_with_an_invalid_byte_and_names_its_offset() {
    let mut log = b"worker:1 [0] NCCL INFO NET/IB : No device found.\n\xffgarbage\n".to_vec();
    log.extend_from_slice(b"worker:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.5.76<0>\n");
    log.extend_from_slice(b"worker:1 [0] NCCL INFO Using network Socket\n");
    let (rc, out, err) = run(&["doctor", "-", "--json"], &log);
    assert_eq!(rc, 1, "the TCP fallback is a finding: {out}{err}");
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"nccl-tcp-fallback"), "{ids:?}");
    assert!(
        err.contains("1 invalid UTF-8 sequence(s), first at byte 49 (0xff)"),
        "{err}"
    );
}

#[test]
fn validate_and_lint_stream_every_document_of_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("many.yaml");
    let text: String = (0..200)
        .map(|i| POD.replace("name: p", &format!("name: p{i}")) + "---\n")
        .collect();
    std::fs::write(&f, text).unwrap();
    let (rc, out, err) = run(&["validate", "--strict", f.to_str().unwrap()], b"");
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("200 document(s), 0 error(s)"), "{out}");
}

#[cfg(unix)]
#[test]
fn link_loops_and_unreadable_files_are_reported_and_the_rest_still_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::os::unix::fs::symlink(d.join("loop-b.yaml"), d.join("loop-a.yaml")).unwrap();
    std::os::unix::fs::symlink(d.join("loop-a.yaml"), d.join("loop-b.yaml")).unwrap();
    // The given path itself loops: a loop, not "no such file".
    let (rc, out, err) = run(&["validate", d.join("loop-a.yaml").to_str().unwrap()], b"");
    assert_eq!(rc, 2, "{out}{err}");
    assert!(err.contains("loop-a.yaml: symbolic link loop"), "{err}");
    assert!(!err.contains("no such file"), "{err}");

    // In a directory: the loops, a dangling link, a file that cannot be read and a file that does not
    // parse are each reported; the good file is still validated; the exit code says input was lost.
    std::fs::write(d.join("good.yaml"), POD).unwrap();
    std::fs::write(d.join("bad-yaml.yaml"), "a: [\n").unwrap();
    std::os::unix::fs::symlink(d.join("gone.yaml"), d.join("dangling.yaml")).unwrap();
    #[cfg(target_os = "linux")]
    std::os::unix::fs::symlink("/proc/self/mem", d.join("unreadable.yaml")).unwrap();
    for cmd in ["validate", "lint"] {
        let (rc, out, err) = run(&[cmd, d.to_str().unwrap()], b"");
        assert_eq!(rc, 2, "{cmd}: {out}{err}");
        for needle in [
            "loop-a.yaml: symbolic link loop",
            "loop-b.yaml: symbolic link loop",
            "dangling.yaml: dangling symbolic link to",
            "bad-yaml.yaml doc 0, line",
            #[cfg(target_os = "linux")]
            "unreadable.yaml: cannot read",
        ] {
            assert!(err.contains(needle), "{cmd}: missing {needle:?} in {err}");
        }
        let good = if cmd == "validate" {
            "1 document(s), 0 error(s)"
        } else {
            "no RDMA pitfalls in 1 document(s)"
        };
        assert!(out.contains(good), "{cmd}: {out}");
    }
}

fn render_stdout(systems: &[&str]) -> String {
    let mut args = vec!["render"];
    args.extend_from_slice(systems);
    args.extend(["--profile", "aliyun-erdma", "--stdout"]);
    let (rc, out, err) = run(&args, b"");
    assert_eq!(rc, 0, "{args:?}: {err}");
    assert!(!out.trim().is_empty(), "{args:?} printed nothing");
    out
}

#[test]
fn render_stdout_prints_dockerfiles_and_programs_too() {
    let image = render_stdout(&["image"]);
    assert!(image.lines().any(|l| l.starts_with("FROM ")), "{image}");
    let demo = render_stdout(&["rdt-demo"]);
    assert!(demo.contains("import "), "{demo}");

    // Beside manifests each such file follows the stream, commented out, so kubectl still applies it.
    let dir = tempfile::tempdir().unwrap();
    let all = render_stdout(&["all"]);
    assert!(
        all.contains("# ===== file: Dockerfile (a Dockerfile, not a manifest"),
        "{all}"
    );
    assert!(all.lines().any(|l| l.starts_with("# FROM ")), "{all}");
    let f = dir.path().join("all.yaml");
    std::fs::write(&f, &all).unwrap();
    let (rc, out, err) = run(&["validate", "--strict", f.to_str().unwrap()], b"");
    assert_eq!(
        rc, 0,
        "the stream with the commented files still validates: {out}{err}"
    );
    let written = tempfile::tempdir().unwrap();
    let o = rdmakit()
        .args(["render", "all", "--profile", "aliyun-erdma", "--out"])
        .arg(written.path().join("b"))
        .output()
        .unwrap();
    assert!(o.status.success());
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        let name = Path::new(line).file_name().unwrap().to_str().unwrap();
        assert!(
            all.contains(&format!("file: {name}")) || all.contains(&format!("# Source: {name}")),
            "{name} missing from --stdout"
        );
    }
}

/// Peak resident memory of a running process (Linux `VmHWM`), in KiB.
#[cfg(target_os = "linux")]
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// `kubectl logs -f | rdmakit doctor -`: the finding is printed while the stream is still open, and
/// memory stays flat while 256 MiB of log goes through the pipe (the whole log was read into memory before).
#[cfg(target_os = "linux")]
#[test]
fn doctor_reports_a_stream_as_it_goes_in_bounded_memory() {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::process::Stdio;
    let mut child = common::cli::rdmakit_process()
        .args(["doctor", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdin
        .write_all(b"worker:1 [0] NCCL INFO NET/IB : No device found.\n")
        .unwrap();
    let filler = "worker:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC, a line that matches nothing\n"
        .repeat(10_000);
    // Enough lines after it for any context window; the stream stays open.
    stdin.write_all(filler.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(
        first.starts_with("found: line 1 ") && first.contains("nccl-ib-no-device"),
        "{first:?}"
    );
    let start = peak_rss_kib(child.id());
    let mut sent = filler.len();
    while sent < 256 << 20 {
        stdin.write_all(filler.as_bytes()).unwrap();
        sent += filler.len();
    }
    let peak = peak_rss_kib(child.id());
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(rest.contains("nccl-ib-no-device"), "{rest}");
    // The 256 MiB went through; memory grew by less than a tenth of it.
    assert!(
        peak < start + 25 * 1024,
        "peak RSS {peak} KiB after {sent} bytes, {start} KiB before"
    );
}
