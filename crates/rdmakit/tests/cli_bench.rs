//! `rdmakit bench` as a user runs it, on the host backend (no GPU needed). The RDMA transport's
//! live runs are in the soft-RoCE VM tier (tests/rxe/suites/rdmakit-bench-rdma.sh); here its
//! argument checks and a missing device.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use assert_cmd::Command;
use common::cli::{rdmakit, rdmakit_process};
use predicates::prelude::*;
use serde_json::Value;

/// One iteration of 2 MiB on the host backend (no GPU).
const SMALL_HOST_RUN: [&str; 6] = ["--backend", "host", "--size", "2MiB", "--iters", "1"];

/// Runs `c`, which must succeed; what it printed.
fn stdout_of(c: &mut Command) -> Vec<u8> {
    c.assert().success().get_output().stdout.clone()
}

fn results(stdout: &[u8]) -> Vec<Value> {
    serde_json::from_slice::<Vec<Value>>(stdout).unwrap()
}

#[test]
fn stage_in_process_reports_the_pinned_peer_beside_ours() {
    let out = stdout_of(
        rdmakit()
            .args(["bench", "stage", "--backend", "host", "--size", "3MiB"])
            .args(["--chunk", "1MiB", "--slots", "2", "--iters", "2", "--json"]),
    );
    let r = results(&out);
    let names: Vec<_> = r.iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["pinned_d2h", "inprocess"]);
    assert!(r.iter().all(|x| x["verified"] == true));
    assert_eq!(r[1]["bytes"], 3 << 20);
    assert_eq!(r[1]["chunk_bytes"], 1 << 20);
    assert_eq!(r[1]["slots"], 2);
    assert_eq!(r[1]["seconds"].as_array().unwrap().len(), 2);
}

#[test]
fn stage_tcp_both_ends_in_one_process_verify() {
    let out = stdout_of(
        rdmakit()
            .args(["bench", "stage", "--transport", "tcp", "--backend", "host"])
            .args([
                "--size",
                "5MiB",
                "--chunk",
                "1MiB",
                "--connections",
                "3",
                "--iters",
                "1",
            ])
            .arg("--json"),
    );
    let r = results(&out);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["name"], "tcp");
    assert_eq!(r[1]["name"], "tcp_receiver");
    assert!(
        r.iter()
            .all(|x| x["verified"] == true && x["connections"] == 3)
    );
}

/// Starts `rdmakit bench stage --role server` on a free loopback port and returns once it
/// listens (it says so on stderr before accepting).
fn start_server(transport: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = rdmakit_process()
        .args([
            "bench",
            "stage",
            "--transport",
            transport,
            "--role",
            "server",
        ])
        .args(SMALL_HOST_RUN)
        .args(["--json", "--listen", &listen])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("waiting for a client"), "{line}");
    // Keep reading so the server can still write its errors.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (server, listen)
}

#[test]
fn stage_tcp_server_and_client_as_two_processes() {
    let (server, listen) = start_server("tcp");
    let client = stdout_of(
        rdmakit()
            .args(["bench", "stage", "--transport", "tcp", "--role", "client"])
            .args(SMALL_HOST_RUN)
            .args(["--json", "--connect", &listen]),
    );
    let server = server.wait_with_output().unwrap();
    assert!(server.status.success());
    let (c, s) = (results(&client), results(&server.stdout));
    assert_eq!(c[0]["name"], "tcp");
    assert_eq!(s[0]["name"], "tcp_receiver");
    assert!(c[0]["verified"] == true && s[0]["verified"] == true);
}

#[test]
fn a_client_that_connects_and_leaves_fails_the_server_instead_of_hanging_it() {
    let (mut server, listen) = start_server("tcp");
    drop(std::net::TcpStream::connect(&listen).unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = server.try_wait().unwrap() {
            break Some(s);
        }
        if std::time::Instant::now() > deadline {
            server.kill().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let status = status.expect("the server still waited 60 s after its client left");
    assert_eq!(status.code(), Some(2));
}

#[test]
fn stage_argument_errors_name_the_fix() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--transport", "rdma", "--backend", "host"],
            "--device NAME",
        ),
        (
            &[
                "--transport",
                "rdma",
                "--device",
                "a",
                "--device",
                "b",
                "--cm-addr",
                "10.0.0.1",
            ],
            "cm_addrs",
        ),
        (
            &["--role", "server", "--backend", "host"],
            "--transport tcp or",
        ),
        (
            &["--transport", "tcp", "--role", "client"],
            "--connect HOST:PORT",
        ),
        (&["--backend", "host", "--chunk", "512KiB"], "chunk"),
    ];
    for (args, says) in cases {
        rdmakit()
            .args(["bench", "stage"])
            .args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(says));
    }
}

#[test]
fn stage_rdma_on_a_missing_device_fails_fast_naming_it() {
    let t = std::time::Instant::now();
    rdmakit()
        .args([
            "bench",
            "stage",
            "--transport",
            "rdma",
            "--device",
            "nosuch_9",
        ])
        .args(["--backend", "host", "--size", "1MiB"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nosuch_9"));
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "no hang on a failed setup"
    );
}

#[test]
fn pinned_both_directions_and_a_closed_pipe_is_quiet() {
    let out = stdout_of(
        rdmakit()
            .args(["bench", "pinned"])
            .args(SMALL_HOST_RUN)
            .arg("--json"),
    );
    let names: Vec<_> = results(&out)
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["pinned_d2h", "pinned_h2d"]);

    // `rdmakit ... | head -c1`: the reader leaves early; no panic message on stderr.
    let mut child = rdmakit_process()
        .args([
            "bench",
            "pinned",
            "--backend",
            "host",
            "--size",
            "1MiB",
            "--iters",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        matches!(out.status.code(), Some(0 | 141)),
        "exit status {:?}",
        out.status
    );
}

/// `bench stage` in process on the host backend, 2 MiB in 1 MiB chunks, one iteration.
fn small_host_stage() -> Command {
    let mut c = rdmakit();
    c.args(["bench", "stage"])
        .args(SMALL_HOST_RUN)
        .args(["--chunk", "1MiB"]);
    c
}

/// `--profile`: each staged figure (the median) is judged against the rate the instance type should reach,
/// the same run's pinned D2H being the model's host copy; JSON gains the report beside the results, and the
/// exit code follows the report (1 below 40 % of the expectation).
#[test]
fn stage_with_a_profile_is_judged_against_its_expected_rate() {
    let out = rdmakit()
        .args(["bench", "stage", "--backend", "host", "--size", "3MiB"])
        .args(["--chunk", "1MiB", "--slots", "2", "--iters", "2", "--json"])
        .args([
            "--profile",
            "aliyun-erdma",
            "--instance-type",
            "ecs.ebmgn9gc.64xlarge",
        ])
        .args(["--nic-write", "20.4"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results[0]["name"], "pinned_d2h");
    let items = v["report"]["items"].as_array().unwrap();
    // The pinned copy is the peer, not judged; the staged run is.
    assert_eq!(items.len(), 1, "{v:#}");
    assert_eq!(items[0]["id"], "gpu-stage");
    assert!(
        items[0]["subject"]
            .as_str()
            .unwrap()
            .starts_with("inprocess 3 MiB, host backend, median of 2"),
        "{}",
        items[0]["subject"]
    );
    let inputs = &items[0]["expectation"]["expectation"]["inputs"];
    assert_eq!(inputs["nic_line_gbps"], 190.0, "{:#}", items[0]);
    assert_eq!(inputs["nic_write_gib_s"], 20.4);
    assert_eq!(inputs["host_copy_gib_s"], results[0]["gib_s_best"]);
    let verdict = v["report"]["verdict"].as_str().unwrap();
    assert_eq!(
        out.status.code(),
        Some(if verdict == "fail" { 1 } else { 0 }),
        "{verdict}"
    );

    // The human form prints the report and the model's inputs.
    let out = small_host_stage()
        .args(["--profile", "aliyun-erdma"])
        .args(["--instance-type", "ecs.ebmgn9gc.64xlarge"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("gpu-stage") && text.contains("staged through host memory"),
        "{text}"
    );
}

#[test]
fn stage_without_a_profile_says_there_is_no_expectation() {
    small_host_stage()
        .assert()
        .success()
        .stdout(predicate::str::contains("no expectation: pass --profile"));
}

#[test]
fn a_profile_that_cannot_give_an_expectation_is_an_input_error() {
    let host_stage = |args: &[&str]| small_host_stage().args(args).assert().code(2);
    // Seed 002's profile does not know its NIC's line rate.
    host_stage(&["--profile", "aliyun-erdma-dra"]).stderr(predicate::str::contains("nic_gbps"));
    host_stage(&["--instance-type", "ecs.ebmgn9gc.64xlarge"])
        .stderr(predicate::str::contains("--profile"));
    host_stage(&[
        "--profile",
        "aliyun-erdma",
        "--instance-type",
        "ecs.ebmgn9gc.64xlarge",
        "--nic-write",
        "0",
    ])
    .stderr(predicate::str::contains("--nic-write 0"));
}
