//! Two ends of a channel in one process (threads), TCP loopback, host memory.

mod common;
use common::{MIB, cfg, pattern};

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use _native::buffer::{BufferSpec, Place};
use _native::channel::{AbortHandle, PairListener, RecvChannel, SendChannel};
use _native::config::{ChannelConfig, TransportKind};
use _native::error::{BindError, ErrorKind};
use _native::handshake::Token;

/// A source. Every test keeps `b` alive and unwritten until the transfers that read it have returned.
fn cpu(b: &[u8]) -> BufferSpec {
    // SAFETY: as above (each test's buffers outlive its send calls, and nothing writes them meanwhile).
    unsafe { BufferSpec::from_raw(Place::Cpu, b.as_ptr() as u64, b.len()) }.expect("a valid range")
}

/// A destination: the pointer comes from `&mut`, since the receiver writes through it.
fn cpu_mut(b: &mut [u8]) -> BufferSpec {
    // SAFETY: each test keeps `b` alive and untouched until the recv calls that write it have returned.
    unsafe { BufferSpec::from_raw(Place::Cpu, b.as_mut_ptr() as u64, b.len()) }
        .expect("a valid range")
}

/// A connected pair: the sender runs `f` on its own thread.
fn pair<T: Send + 'static>(
    cfg: ChannelConfig,
    f: impl FnOnce(SendChannel) -> T + Send + 'static,
) -> (RecvChannel, thread::JoinHandle<T>) {
    let listener = PairListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let c2 = cfg.clone();
    let h = thread::spawn(move || {
        let ch =
            SendChannel::connect(&addr, &c2, AbortHandle::new(), Token::NONE).expect("connect");
        f(ch)
    });
    let rx = listener
        .accept(&cfg, AbortHandle::new(), Token::NONE)
        .expect("accept");
    (rx, h)
}

#[test]
fn many_objects_of_edge_sizes_over_one_channel() {
    let sizes = [0, 1, MIB - 1, MIB, MIB + 1, 5 * MIB + 3];
    let objects: Vec<Vec<Vec<u8>>> = (0..3u8)
        .map(|o| {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| pattern(n, o * 10 + i as u8))
                .collect()
        })
        .collect();
    let sent = objects.clone();
    let (mut rx, h) = pair(cfg(), move |mut tx| {
        for (o, bufs) in sent.iter().enumerate() {
            let specs: Vec<_> = bufs.iter().map(|b| cpu(b)).collect();
            let n = tx.send(&format!("obj-{o}"), &specs, None).expect("send");
            assert_eq!(n, bufs.iter().map(|b| b.len() as u64).sum::<u64>());
        }
    });
    for (o, bufs) in objects.iter().enumerate() {
        let mut dst: Vec<Vec<u8>> = bufs.iter().map(|b| vec![0xAA; b.len()]).collect();
        let specs: Vec<_> = dst.iter_mut().map(|b| cpu_mut(b)).collect();
        rx.recv(&format!("obj-{o}"), &specs, None).expect("recv");
        assert_eq!(&dst, bufs, "object {o}");
    }
    h.join().expect("sender thread");
}

#[test]
fn a_different_object_is_refused_before_any_byte_lands() {
    let src = pattern(3 * MIB, 7);
    let s2 = src.clone();
    let (mut rx, h) = pair(cfg(), move |mut tx| tx.send("obj-A", &[cpu(&s2)], None));
    let mut dst = vec![0u8; src.len()];
    let e = rx
        .recv("obj-B", &[cpu_mut(&mut dst)], None)
        .expect_err("tag differs");
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(
        e.to_string().contains("\"obj-A\"") && e.to_string().contains("\"obj-B\""),
        "{e}"
    );
    assert!(dst.iter().all(|&b| b == 0), "no byte was written");
    // The sender learns it too (the receiver aborted the session), well within the timeout.
    let se = h
        .join()
        .expect("sender thread")
        .expect_err("sender must fail");
    assert!(
        matches!(se, BindError::Stage(_) | BindError::Transport(_)),
        "{se:?}"
    );
    // The channel is closed for good.
    assert!(rx.closed().is_some());
    let e = rx
        .recv("obj-B", &[cpu_mut(&mut dst)], None)
        .expect_err("closed");
    assert!(matches!(e, BindError::Closed(_)), "{e:?}");
}

#[test]
fn a_size_mismatch_names_both_sides() {
    let (mut rx, h) = pair(cfg(), |mut tx| {
        let a = pattern(10, 1);
        tx.send("o", &[cpu(&a)], None)
    });
    let mut dst = vec![0u8; 11];
    let e = rx
        .recv("o", &[cpu_mut(&mut dst)], None)
        .expect_err("sizes differ")
        .to_string();
    assert!(
        e.contains("1 buffers, 10 bytes") && e.contains("1 buffers, 11 bytes"),
        "{e}"
    );
    assert!(h.join().expect("sender thread").is_err());
}

#[test]
fn abort_ends_a_receive_that_waits_for_a_silent_sender() {
    let listener = PairListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let c = cfg();
    let c2 = c.clone();
    // The sender connects and then sends nothing for longer than the test allows.
    let h = thread::spawn(move || {
        let ch =
            SendChannel::connect(&addr, &c2, AbortHandle::new(), Token::NONE).expect("connect");
        thread::sleep(Duration::from_secs(2));
        drop(ch);
    });
    let abort = AbortHandle::new();
    let mut rx = listener
        .accept(&c, Arc::clone(&abort), Token::NONE)
        .expect("accept");
    let a2 = Arc::clone(&abort);
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        a2.abort("test abort");
    });
    let mut dst = vec![0u8; MIB];
    let start = Instant::now();
    let e = rx
        .recv("o", &[cpu_mut(&mut dst)], None)
        .expect_err("aborted");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert!(e.to_string().contains("test abort"), "{e}");
    t.join().expect("abort thread");
    h.join().expect("sender thread");
}

#[test]
fn abort_ends_a_pending_accept_at_once() {
    let listener = PairListener::bind("127.0.0.1:0").expect("bind");
    let abort = AbortHandle::new();
    let a2 = Arc::clone(&abort);
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        a2.abort("nobody is coming");
    });
    let start = Instant::now();
    let e = listener
        .accept(&cfg(), abort, Token::NONE)
        .expect_err("aborted");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(e.kind(), ErrorKind::Aborted);
    t.join().expect("abort thread");
}

#[test]
fn accept_times_out_naming_the_address() {
    let listener = PairListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let c = ChannelConfig {
        timeout: Duration::from_millis(300),
        ..cfg()
    };
    let e = listener
        .accept(&c, AbortHandle::new(), Token::NONE)
        .expect_err("timeout");
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(e.to_string().contains(&port.to_string()), "{e}");
}

#[test]
fn a_sender_that_vanishes_mid_object_fails_the_receiver_quickly() {
    let (mut rx, h) = pair(cfg(), |tx| {
        // Connect, then go away without sending (the process-death case: sockets close).
        drop(tx);
    });
    h.join().expect("sender thread");
    let mut dst = vec![0u8; 4 * MIB];
    let start = Instant::now();
    let e = rx
        .recv("o", &[cpu_mut(&mut dst)], None)
        .expect_err("peer gone");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(e.kind(), ErrorKind::Other, "{e}");
}

#[test]
fn aborting_the_sender_mid_transfer_fails_both_ends() {
    // The receiver never reads (it is not called), so the sender blocks on a full ring / socket.
    let listener = PairListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let c = cfg();
    let abort = AbortHandle::new();
    let a2 = Arc::clone(&abort);
    let c2 = c.clone();
    let h = thread::spawn(move || {
        let mut tx = SendChannel::connect(&addr, &c2, a2, Token::NONE).expect("connect");
        let big = pattern(64 * MIB, 3);
        let start = Instant::now();
        let r = tx.send("o", &[cpu(&big)], None);
        (r, start.elapsed())
    });
    let mut rx = listener
        .accept(&c, AbortHandle::new(), Token::NONE)
        .expect("accept");
    thread::sleep(Duration::from_millis(300));
    abort.abort("Ray aborted the transfer");
    let (r, took) = h.join().expect("sender thread");
    let e = r.expect_err("aborted");
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert!(e.to_string().contains("Ray aborted the transfer"), "{e}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // The other end: the receiver's recv of that object fails at once (the sender's sockets were
    // shut down), well before its 5 s timeout, and its channel is then closed.
    assert!(
        rx.peer_closed(),
        "the receiver does not see the aborted sender's sockets closed"
    );
    let mut dst = vec![0u8; 64 * MIB];
    let start = Instant::now();
    let e = rx
        .recv("o", &[cpu_mut(&mut dst)], None)
        .expect_err("the sender aborted");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "receiver took {:?}",
        start.elapsed()
    );
    assert_ne!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(rx.closed().is_some());
}

fn tok(b: u8) -> Token {
    Token::from_bytes(&[b; 32]).expect("32 bytes")
}

/// Sends `data` as object "o" with `token` on a fresh channel to `addr`.
fn send_with(
    addr: String,
    c: ChannelConfig,
    token: Token,
    data: Vec<u8>,
) -> Result<u64, BindError> {
    let mut tx = SendChannel::connect(&addr, &c, AbortHandle::new(), token)?;
    tx.send("o", &[cpu(&data)], None)
}

#[test]
fn wrong_and_absent_tokens_and_a_port_scan_are_refused_and_the_real_sender_still_gets_through() {
    use std::io::Write;
    let listener = PairListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let c = cfg();
    let data = pattern(3 * MIB + 7, 9);
    let want = data.clone();
    let (a2, c2) = (addr.clone(), c.clone());
    let h = thread::spawn(move || {
        // A port scan: connect and close; one that connects and sends garbage; one that sends
        // nothing and stays open.
        drop(std::net::TcpStream::connect(&a2).expect("scan"));
        let mut junk = std::net::TcpStream::connect(&a2).expect("junk");
        let _ = junk
            .write_all(b"GET / HTTP/1.0\r\n\r\n and more bytes than a handshake has, to be sure");
        let _silent = std::net::TcpStream::connect(&a2).expect("silent");
        // A sender of another object (wrong token) and one without a token: both refused.
        let wrong =
            send_with(a2.clone(), c2.clone(), tok(2), vec![1; 10]).expect_err("wrong token");
        let absent =
            send_with(a2.clone(), c2.clone(), Token::NONE, vec![1; 10]).expect_err("no token");
        // The real sender, after all that.
        let ok = send_with(a2, c2, tok(1), data);
        (wrong, absent, ok)
    });
    let mut rx = listener
        .accept(&c, AbortHandle::new(), tok(1))
        .expect("accept the real sender");
    let mut dst = vec![0u8; want.len()];
    assert_eq!(
        rx.recv("o", &[cpu_mut(&mut dst)], None).expect("recv"),
        want.len() as u64
    );
    let (wrong, absent, ok) = h.join().expect("sender thread");
    assert_eq!(ok.expect("the real sender"), want.len() as u64);
    assert!(dst == want, "bytes differ");
    for e in [wrong, absent] {
        assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
        assert!(!e.to_string().contains("0101"), "{e}");
    }
    // scan + junk + silent + wrong token (first connection) + absent token (first connection).
    assert!(listener.refused() >= 5, "refused {}", listener.refused());
}

#[test]
fn an_object_with_another_token_on_an_open_channel_is_refused_before_any_byte_lands() {
    let data = pattern(MIB, 4);
    let d2 = data.clone();
    let listener = PairListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let c = cfg();
    let c2 = c.clone();
    let h = thread::spawn(move || {
        let mut tx = SendChannel::connect(&addr, &c2, AbortHandle::new(), tok(1)).expect("connect");
        tx.send("o", &[cpu(&d2)], Some(tok(7)))
    });
    let mut rx = listener
        .accept(&c, AbortHandle::new(), tok(1))
        .expect("accept");
    let mut dst = vec![0u8; data.len()];
    let e = rx
        .recv("o", &[cpu_mut(&mut dst)], Some(tok(8)))
        .expect_err("token differs");
    assert!(e.to_string().contains("object token"), "{e}");
    assert!(dst.iter().all(|&b| b == 0), "bytes landed");
    let _ = h.join().expect("sender thread");
}

#[test]
fn the_receiver_adopts_the_senders_connections_and_ring() {
    let listener = PairListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let sender_cfg = ChannelConfig {
        connections: 5,
        ring: gpu_stage::RingConfig::new(2 * MIB, 3).expect("ring"),
        ..cfg()
    };
    let data = pattern(9 * MIB + 3, 5);
    let want = data.clone();
    let h = thread::spawn(move || send_with(addr, sender_cfg, tok(3), data));
    // The receiver's own settings (3 connections, 1 MiB x 4) differ: it adopts the sender's.
    let mut rx = listener
        .accept(&cfg(), AbortHandle::new(), tok(3))
        .expect("accept");
    let mut dst = vec![0u8; want.len()];
    rx.recv("o", &[cpu_mut(&mut dst)], None).expect("recv");
    h.join().expect("sender thread").expect("send");
    assert!(dst == want);
}

#[test]
fn an_idle_channel_sees_its_peer_go_away() {
    let (rx, h) = pair(cfg(), |tx| {
        assert!(!tx.peer_closed());
        tx
    });
    let tx = h.join().expect("sender thread");
    assert!(!rx.peer_closed() && !tx.peer_closed());
    drop(rx);
    let deadline = Instant::now() + Duration::from_secs(2);
    while !tx.peer_closed() {
        assert!(
            Instant::now() < deadline,
            "the sender never saw the receiver close"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[cfg_attr(
    feature = "rdma",
    ignore = "built with the rdma feature: the RDMA path needs a device (soft-RoCE tier)"
)]
fn rdma_without_the_feature_says_how_to_get_it() {
    let c = ChannelConfig {
        transport: TransportKind::Rdma,
        rdma_devices: vec!["rxe0".into()],
        ..cfg()
    };
    let e = SendChannel::connect("127.0.0.1:1", &c, AbortHandle::new(), Token::NONE)
        .expect_err("no rdma");
    assert!(e.to_string().contains("`rdma` feature"), "{e}");
}

/// A CUDA buffer that is not CUDA memory: without a driver that is "no CUDA driver"; with one, the
/// driver's pointer check refuses the address (or there is no GPU 0). Never a crash.
#[test]
fn a_bogus_cuda_buffer_is_an_error_not_a_crash() {
    let (mut rx, h) = pair(cfg(), |mut tx| {
        // SAFETY: deliberately false for CUDA (not device memory): the driver's pointer check must
        // refuse it before any copy; no host memory is named.
        let spec =
            unsafe { BufferSpec::from_raw(Place::Cuda(0), 0x7000_0000, 16) }.expect("in range");
        tx.send("o", &[spec], None)
    });
    let mut dst = vec![0u8; 16];
    let start = Instant::now();
    let re = rx
        .recv("o", &[cpu_mut(&mut dst)], None)
        .expect_err("the sender aborts");
    let e = h
        .join()
        .expect("sender thread")
        .expect_err("bogus pointer")
        .to_string();
    let expected = if gpu_stage::cuda_driver_present() {
        [
            "cuPointerGetAttribute",
            "CUDA device(s)",
            "not CUDA device memory",
        ]
        .as_slice()
    } else {
        ["no CUDA driver"].as_slice()
    };
    assert!(expected.iter().any(|x| e.contains(x)), "{e}");
    // The receiver hears the sender's ABORT at once, not after the timeout.
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}: {re}",
        start.elapsed()
    );
}

#[test]
fn objects_either_side_of_the_inline_limit_arrive_intact_in_order() {
    // At most 64 KiB in host memory: inline on the direct lane; above: header there, bytes staged.
    let limit = 64 << 10;
    let shapes: Vec<Vec<usize>> = vec![
        vec![],
        vec![0],
        vec![1],
        vec![limit],
        vec![limit / 2, limit / 2],
        vec![limit + 1],
        vec![limit / 2, limit / 2 + 1],
        vec![3 * MIB + 5, 7],
        vec![5],
    ];
    let objects: Vec<Vec<Vec<u8>>> = shapes
        .iter()
        .enumerate()
        .map(|(o, s)| {
            s.iter()
                .enumerate()
                .map(|(k, &n)| pattern(n, (o * 7 + k) as u8))
                .collect()
        })
        .collect();
    let sent = objects.clone();
    let (mut rx, h) = pair(cfg(), move |mut tx| {
        for (o, obj) in sent.iter().enumerate() {
            let specs: Vec<BufferSpec> = obj.iter().map(|b| cpu(b)).collect();
            let n = tx.send(&format!("obj-{o}"), &specs, None).expect("send");
            assert_eq!(n, obj.iter().map(|b| b.len() as u64).sum::<u64>());
        }
    });
    for (o, obj) in objects.iter().enumerate() {
        let mut dst: Vec<Vec<u8>> = obj.iter().map(|b| vec![0xAB; b.len()]).collect();
        let specs: Vec<BufferSpec> = dst.iter_mut().map(|b| cpu_mut(b)).collect();
        rx.recv(&format!("obj-{o}"), &specs, None).expect("recv");
        assert!(&dst == obj, "object {o} differs");
    }
    h.join().expect("sender thread");
}

#[test]
fn a_receive_whose_header_never_comes_times_out_naming_the_wait() {
    let c = ChannelConfig {
        timeout: Duration::from_millis(400),
        ..cfg()
    };
    let (mut rx, h) = pair(c, |tx| {
        thread::sleep(Duration::from_millis(1500)); // connected, silent
        drop(tx);
    });
    let mut dst = vec![0u8; 16];
    let start = Instant::now();
    let e = rx
        .recv("o", &[cpu_mut(&mut dst)], None)
        .expect_err("nothing comes");
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.to_string().contains("header"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    h.join().expect("sender thread");
}

#[test]
fn a_state_dict_of_hundreds_of_buffers_is_one_staged_transfer_per_object() {
    // 300 tensors: small ones (a bias, a norm), chunk-sized and larger ones, and empty ones.
    let sizes: Vec<usize> = (0..300)
        .map(|i| match i % 5 {
            0 => 4096,
            1 => 0,
            2 => MIB + 7,
            3 => 3,
            _ => 96 << 10,
        })
        .collect();
    let objects: Vec<Vec<Vec<u8>>> = (0..2u8)
        .map(|o| {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| pattern(n, o.wrapping_mul(7).wrapping_add(i as u8)))
                .collect()
        })
        .collect();
    let total: u64 = sizes.iter().map(|&n| n as u64).sum();
    let sent = objects.clone();
    let (mut rx, h) = pair(cfg(), move |mut tx| {
        for (o, bufs) in sent.iter().enumerate() {
            let specs: Vec<_> = bufs.iter().map(|b| cpu(b)).collect();
            assert_eq!(
                tx.send(&format!("sd-{o}"), &specs, None).expect("send"),
                total
            );
        }
        tx.staged_transfers()
    });
    for (o, bufs) in objects.iter().enumerate() {
        let mut dst: Vec<Vec<u8>> = bufs.iter().map(|b| vec![0xAA; b.len()]).collect();
        let specs: Vec<_> = dst.iter_mut().map(|b| cpu_mut(b)).collect();
        assert_eq!(
            rx.recv(&format!("sd-{o}"), &specs, None).expect("recv"),
            total
        );
        assert!(&dst == bufs, "object {o}: a buffer differs");
    }
    // Before: one staged transfer per non-empty buffer (240 per object).
    assert_eq!(h.join().expect("sender thread"), 2);
    assert_eq!(rx.staged_transfers(), 2);
}

#[test]
fn a_gathered_object_into_buffers_on_two_devices_is_refused_before_any_byte_lands() {
    let a = pattern(100 << 10, 1);
    let b = pattern(100 << 10, 2);
    let (mut rx, h) = pair(cfg(), move |mut tx| tx.send("o", &[cpu(&a), cpu(&b)], None));
    let mut dst = vec![0u8; 100 << 10];
    // SAFETY: never read or written: the receiver refuses the layout before it touches a buffer.
    let gpu =
        unsafe { BufferSpec::from_raw(Place::Cuda(0), 0x7000_0000, 100 << 10) }.expect("in range");
    let e = rx
        .recv("o", &[cpu_mut(&mut dst), gpu], None)
        .expect_err("two devices")
        .to_string();
    assert!(e.contains("several devices"), "{e}");
    assert!(dst.iter().all(|&x| x == 0), "a byte landed");
    h.join()
        .expect("sender thread")
        .expect_err("the receiver gave up");
}
