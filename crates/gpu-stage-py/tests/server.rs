//! The producer's server and consumers' pull sessions in one process (threads), TCP loopback,
//! host memory.

mod common;
use common::{MIB, cfg, pattern};

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use _native::buffer::{BufferSpec, Place};
use _native::channel::{AbortHandle, RecvChannel};
use _native::error::{BindError, ErrorKind};
use _native::handshake::Token;
use _native::server::Server;

fn tok(b: u8) -> Token {
    Token::from_bytes(&[b; 32]).expect("32 bytes")
}

/// Registers `data` as `tag`; the registration keeps the `Arc` (and so the bytes) alive.
fn register(server: &Server, tag: &str, data: &Arc<Vec<u8>>, token: Token) {
    // SAFETY: the spec describes `data`'s heap buffer, which the `Arc` given as `keep` holds
    // allocated for as long as the registration lives; nobody writes it (shared, immutable).
    let spec = unsafe { BufferSpec::from_raw(Place::Cpu, data.as_ptr() as u64, data.len()) }
        .expect("a valid range");
    // SAFETY: as above.
    unsafe { server.register(tag, vec![spec], token, None, Box::new(Arc::clone(data))) }
        .expect("register");
}

/// Pulls `tag` into a fresh buffer of `len` bytes over a new session.
fn pull(addr: &str, tag: &str, len: usize, token: Token) -> Result<Vec<u8>, BindError> {
    let mut ch = RecvChannel::connect(addr, &cfg(), AbortHandle::new(), token)?;
    pull_on(&mut ch, tag, len, token)
}

fn pull_on(
    ch: &mut RecvChannel,
    tag: &str,
    len: usize,
    token: Token,
) -> Result<Vec<u8>, BindError> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` lives, untouched, until `pull` returns.
    let spec = unsafe { BufferSpec::from_raw(Place::Cpu, out.as_mut_ptr() as u64, len) }
        .expect("a valid range");
    ch.pull(tag, &[spec], token)?;
    Ok(out)
}

/// Waits until the server's counters satisfy `f`: a consumer's pull returns when its last byte
/// landed, a moment before the server's send returns and is counted. At most three of the channel
/// timeouts (`cfg()`'s 5 s): room for a loaded machine; a server that never settles fails.
fn settle(server: &Server, f: impl Fn(&_native::server::ServerStats) -> bool) {
    settle_within(server, 3 * cfg().timeout, f);
}

fn settle_within(
    server: &Server,
    limit: Duration,
    f: impl Fn(&_native::server::ServerStats) -> bool,
) {
    let deadline = Instant::now() + limit;
    while !f(&server.stats()) {
        assert!(Instant::now() < deadline, "{:?}", server.stats());
        thread::sleep(Duration::from_millis(5));
    }
}

fn server() -> (Server, String) {
    let s = Server::bind("127.0.0.1:0", &cfg(), Duration::from_secs(30)).expect("bind");
    let addr = s.local_addr().to_string();
    (s, addr)
}

#[test]
fn three_consumers_are_served_at_the_same_time() {
    let (server, addr) = server();
    let n = 48 * MIB;
    let data = Arc::new(pattern(n, 3));
    register(&server, "obj", &data, tok(1));
    let pulls: Vec<_> = (0..3)
        .map(|_| {
            let addr = addr.clone();
            thread::spawn(move || pull(&addr, "obj", n, tok(1)))
        })
        .collect();
    for p in pulls {
        assert!(
            p.join().expect("thread").expect("pull") == *data,
            "bytes differ"
        );
    }
    settle(&server, |st| st.served == 3);
    let spans = server.spans();
    assert_eq!(spans.len(), 3, "{spans:?}");
    assert!(spans.iter().all(|s| s.ok && s.bytes == n as u64));
    // Served at once, not one after another: every send started before the first one ended.
    let last_start = spans.iter().map(|s| s.start).fold(f64::MIN, f64::max);
    let first_end = spans.iter().map(|s| s.end).fold(f64::MAX, f64::min);
    assert!(
        last_start < first_end,
        "served one after another: {spans:?}"
    );
    let st = server.stats();
    assert_eq!((st.served, st.sessions_opened), (3, 3), "{st:?}");
}

#[test]
fn a_session_is_reused_for_many_objects() {
    let (server, addr) = server();
    let objs: Vec<_> = [0, 1, 4096, 64 << 10, (64 << 10) + 1, 3 * MIB + 5]
        .iter()
        .enumerate()
        .map(|(i, &n)| Arc::new(pattern(n, i as u8)))
        .collect();
    for (i, d) in objs.iter().enumerate() {
        register(&server, &format!("obj-{i}"), d, tok(i as u8 + 10));
    }
    let mut ch = RecvChannel::connect(&addr, &cfg(), AbortHandle::new(), tok(10)).expect("session");
    for (i, d) in objs.iter().enumerate() {
        let got = pull_on(&mut ch, &format!("obj-{i}"), d.len(), tok(i as u8 + 10)).expect("pull");
        assert!(got == **d, "object {i}");
    }
    settle(&server, |st| st.served == objs.len() as u64);
    assert_eq!(server.stats().sessions_opened, 1);
}

#[test]
fn a_pull_after_unregister_is_refused_by_name_and_serving_goes_on() {
    let (server, addr) = server();
    let data = Arc::new(pattern(MIB, 1));
    let keep = Arc::new(pattern(10, 2));
    register(&server, "gone", &data, tok(1));
    register(&server, "kept", &keep, tok(2));
    assert_eq!(pull(&addr, "gone", MIB, tok(1)).expect("pull"), *data);
    settle(&server, |st| st.served == 1);
    assert!(server.unregister("gone"));
    assert!(!server.unregister("gone"));
    // The bytes are no longer held by the server.
    assert_eq!(Arc::strong_count(&data), 1);
    let mut ch = RecvChannel::connect(&addr, &cfg(), AbortHandle::new(), tok(2)).expect("session");
    let e = pull_on(&mut ch, "gone", MIB, tok(1)).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
    assert!(e.to_string().contains("\"gone\" is not registered"), "{e}");
    assert_eq!(pull(&addr, "kept", 10, tok(2)).expect("pull"), *keep);
    // A session can only be opened with the token of a registered object.
    let e = RecvChannel::connect(&addr, &cfg(), AbortHandle::new(), tok(1)).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
}

#[test]
fn wrong_tokens_scans_and_junk_are_refused_and_serving_goes_on() {
    let (server, addr) = server();
    let data = Arc::new(pattern(2 * MIB, 7));
    register(&server, "obj", &data, tok(7));
    // A port scan, a silent connection, another protocol, a wrong token.
    drop(TcpStream::connect(&addr).expect("scan"));
    let silent = TcpStream::connect(&addr).expect("silent");
    let mut junk = TcpStream::connect(&addr).expect("junk");
    junk.write_all(&[b'.'; 200]).expect("junk");
    let e = RecvChannel::connect(&addr, &cfg(), AbortHandle::new(), tok(8)).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
    // The right consumer is served meanwhile (the silent connection still holds its vetting).
    let t0 = Instant::now();
    assert_eq!(pull(&addr, "obj", 2 * MIB, tok(7)).expect("pull"), *data);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    // A session opened with the right token that asks for the object with a wrong one is cut.
    let mut ch = RecvChannel::connect(&addr, &cfg(), AbortHandle::new(), tok(7)).expect("session");
    let e = pull_on(&mut ch, "obj", 2 * MIB, tok(9)).expect_err("refused");
    assert!(e.to_string().contains("wrong token"), "{e}");
    drop(silent);
    settle(&server, |st| st.connections_refused >= 4);
    assert_eq!(server.stats().pulls_refused, 1);
    assert_eq!(pull(&addr, "obj", 2 * MIB, tok(7)).expect("pull"), *data);
}

#[test]
fn a_consumer_aborted_mid_transfer_ends_only_its_session() {
    let (server, addr) = server();
    let n = 256 * MIB;
    let data = Arc::new(pattern(n, 5));
    register(&server, "big", &data, tok(5));
    let abort = AbortHandle::new();
    let a2 = Arc::clone(&abort);
    let a = addr.clone();
    let victim = thread::spawn(move || {
        let mut ch = RecvChannel::connect(&a, &cfg(), a2, tok(5))?;
        pull_on(&mut ch, "big", n, tok(5))
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.stats().serving == 0 {
        assert!(Instant::now() < deadline, "the pull never started");
        thread::sleep(Duration::from_millis(1));
    }
    abort.abort("the consumer gave up");
    let e = victim.join().expect("thread").expect_err("aborted");
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    // `abort` lives on: its duplicates of the consumer's sockets must not keep them open, or the
    // server, blocked writing into a full receive queue, saw the abort only after two of its write
    // timeouts (2 x 5 s: this test's flake in a fresh clone's make test).
    settle_within(&server, cfg().timeout, |st| st.serve_failures == 1);
    // The producer's server survives and serves the next consumer the same object.
    assert!(pull(&addr, "big", n, tok(5)).expect("pull") == *data);
    settle(&server, |st| (st.served, st.serve_failures) == (1, 1));
}

/// A consumer's channel dropped without an abort closes its session at once, though the abort handle
/// it was made with lives on (Python keeps it): the handle's socket duplicates go with the channel.
#[test]
fn a_dropped_consumer_channel_ends_its_session_though_its_abort_handle_lives() {
    let (server, addr) = server();
    let data = Arc::new(pattern(MIB, 9));
    register(&server, "obj", &data, tok(9));
    let abort = AbortHandle::new();
    let mut ch = RecvChannel::connect(&addr, &cfg(), Arc::clone(&abort), tok(9)).expect("connect");
    assert!(pull_on(&mut ch, "obj", MIB, tok(9)).expect("pull") == *data);
    settle(&server, |st| st.sessions_open == 1);
    drop(ch);
    // The server's idle limit is 30 s: only the connections' close ends the session this soon.
    settle_within(&server, cfg().timeout, |st| st.sessions_open == 0);
    assert!(abort.reason().is_none());
}

#[test]
fn the_ready_hook_runs_once_before_the_first_byte_and_its_failure_refuses() {
    let (server, addr) = server();
    let data = Arc::new(pattern(MIB, 1));
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let spec = |d: &Arc<Vec<u8>>| {
        // SAFETY: `keep` below holds the Arc, so the bytes outlive the registration.
        unsafe { BufferSpec::from_raw(Place::Cpu, d.as_ptr() as u64, d.len()) }.expect("range")
    };
    // SAFETY: `keep` holds `data` for as long as the registration lives; nobody writes it.
    unsafe {
        server.register(
            "ok",
            vec![spec(&data)],
            tok(1),
            Some(Box::new(move || {
                c.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })),
            Box::new(Arc::clone(&data)),
        )
    }
    .expect("register");
    // SAFETY: as above.
    unsafe {
        server.register(
            "bad",
            vec![spec(&data)],
            tok(2),
            Some(Box::new(|| Err("the producer's stream failed".into()))),
            Box::new(Arc::clone(&data)),
        )
    }
    .expect("register");
    for _ in 0..2 {
        assert_eq!(pull(&addr, "ok", MIB, tok(1)).expect("pull"), *data);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let e = pull(&addr, "bad", MIB, tok(2)).expect_err("refused");
    assert!(
        e.to_string().contains("the producer's stream failed"),
        "{e}"
    );
}

#[test]
fn a_push_sender_cannot_open_a_pull_session_and_closing_cuts_sessions() {
    let (server, addr) = server();
    let data = Arc::new(pattern(MIB, 1));
    register(&server, "obj", &data, tok(1));
    let e = _native::channel::SendChannel::connect(&addr, &cfg(), AbortHandle::new(), tok(1))
        .expect_err("a push sender is refused");
    assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
    let mut ch = RecvChannel::connect(&addr, &cfg(), AbortHandle::new(), tok(1)).expect("session");
    assert_eq!(pull_on(&mut ch, "obj", MIB, tok(1)).expect("pull"), *data);
    server.close();
    assert!(pull_on(&mut ch, "obj", MIB, tok(1)).is_err());
}

#[test]
fn an_abort_ends_a_connect_to_a_server_that_never_answers() {
    // Accepts (the kernel's backlog) but never replies to the greeting.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr").to_string();
    let abort = AbortHandle::new();
    let a2 = Arc::clone(&abort);
    let t = thread::spawn(move || RecvChannel::connect(&addr, &cfg(), a2, tok(1)));
    thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    abort.abort("the consumer gave up");
    let e = t.join().expect("thread").expect_err("aborted");
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
}

#[cfg(not(feature = "rdma"))]
#[test]
fn without_rdma_a_pull_over_rdma_is_refused_at_both_ends() {
    use std::io::Read;

    use _native::config::TransportKind;
    use _native::handshake::{FLAG_PULL, FLAG_RDMA, HELLO_LEN, Hello};

    let (server, addr) = server();
    let data = Arc::new(pattern(10, 1));
    register(&server, "obj", &data, tok(1));
    // The consumer's own build says so before it connects.
    let rdma = _native::config::ChannelConfig {
        transport: TransportKind::Rdma,
        ..cfg()
    };
    let e = RecvChannel::connect(&addr, &rdma, AbortHandle::new(), tok(1)).expect_err("no rdma");
    assert!(e.to_string().contains("RDMA"), "{e}");
    // A greeting for an RDMA pull session, with the right token, is refused by this server.
    let mut s = TcpStream::connect(&addr).expect("connect");
    let hello = Hello {
        index: 0,
        connections: 1,
        slots: 4,
        chunk: MIB as u64,
        flags: FLAG_PULL | FLAG_RDMA,
        session: [3; 16],
        token: tok(1),
    };
    s.write_all(&hello.encode()).expect("greet");
    let mut reply = [0u8; 8];
    s.read_exact(&mut reply).expect("reply");
    assert_eq!(&reply, b"RDKT-NO1");
    assert_eq!(HELLO_LEN, 88);
    // Serving goes on.
    assert_eq!(pull(&addr, "obj", 10, tok(1)).expect("pull"), *data);
}

#[test]
fn a_session_without_requests_is_closed_after_the_idle_limit() {
    let server = Server::bind("127.0.0.1:0", &cfg(), Duration::from_millis(300)).expect("bind");
    let addr = server.local_addr().to_string();
    let data = Arc::new(pattern(MIB, 4));
    register(&server, "obj", &data, tok(4));
    let mut ch = RecvChannel::connect(&addr, &cfg(), AbortHandle::new(), tok(4)).expect("session");
    assert_eq!(pull_on(&mut ch, "obj", MIB, tok(4)).expect("pull"), *data);
    settle(&server, |st| st.sessions_open == 1 && st.served == 1);
    settle(&server, |st| st.sessions_open == 0);
    // The consumer's kept session is dead now (it would retry on a fresh one), and a fresh one
    // is served.
    assert!(pull_on(&mut ch, "obj", MIB, tok(4)).is_err());
    assert_eq!(pull(&addr, "obj", MIB, tok(4)).expect("pull"), *data);
    assert_eq!(server.stats().sessions_opened, 2);
}
