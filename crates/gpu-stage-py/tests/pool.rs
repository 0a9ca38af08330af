//! The process's pool of staging rings: closed sessions give their rings back, the next sessions
//! take them, the bound makes a session wait (and, after its timeout, fail naming the setting),
//! a failed ring is never lent again. One test: the pool is per process, so its steps run in order.
#![allow(clippy::unwrap_used)]

mod common;
use common::{MIB, cfg, pattern};

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use _native::buffer::{BufferSpec, Place};
use _native::channel::{AbortHandle, PairListener, RecvChannel, SendChannel};
use _native::config::ChannelConfig;
use _native::handshake::Token;
use _native::pool;

/// A connected pair (both ends in this process: two rings), one 3 MiB object moved and checked.
fn pair(
    cfg: &ChannelConfig,
    abort: Arc<AbortHandle>,
) -> Result<(SendChannel, RecvChannel), String> {
    let listener = PairListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener
        .local_addr()
        .map_err(|e| e.to_string())?
        .to_string();
    let c2 = cfg.clone();
    let h = thread::spawn(move || {
        SendChannel::connect(&addr, &c2, abort, Token::NONE).map_err(|e| e.to_string())
    });
    let rx = listener.accept(cfg, AbortHandle::new(), Token::NONE);
    let tx = h.join().expect("sender thread")?;
    let mut rx = rx.map_err(|e| e.to_string())?;
    let mut tx = tx;
    let data = pattern(3 * MIB, 9);
    let mut got = vec![0u8; data.len()];
    // SAFETY: `data` and `got` outlive both calls; nothing else touches them meanwhile.
    let s = unsafe { BufferSpec::from_raw(Place::Cpu, data.as_ptr() as u64, data.len()) }.unwrap();
    // SAFETY: as above.
    let d =
        unsafe { BufferSpec::from_raw(Place::Cpu, got.as_mut_ptr() as u64, got.len()) }.unwrap();
    let h = thread::spawn(move || {
        tx.send("o", &[s], None)
            .map(|_| tx)
            .map_err(|e| e.to_string())
    });
    rx.recv("o", &[d], None).map_err(|e| e.to_string())?;
    let tx = h.join().expect("send thread")?;
    assert!(got == data, "bytes differ");
    Ok((tx, rx))
}

#[test]
fn rings_are_lent_again_bounded_and_failed_ones_dropped() {
    // One pair holds two 4 MiB rings: the pool has room for exactly one pair.
    let base = ChannelConfig {
        pool_bytes: 8 * MIB as u64,
        ..cfg()
    };

    // Closed sessions give their rings back; the next pair takes them.
    let s0 = pool::stats();
    drop(pair(&base, AbortHandle::new()).expect("first pair"));
    let s1 = pool::stats();
    assert_eq!(s1.allocated - s0.allocated, 2, "{s1:?}");
    assert_eq!((s1.idle, s1.live_bytes), (2, 8 * MIB as u64), "{s1:?}");
    let held = pair(&base, AbortHandle::new()).expect("second pair");
    let s2 = pool::stats();
    assert_eq!(
        (s2.allocated, s2.reused - s1.reused),
        (s1.allocated, 2),
        "{s2:?}"
    );

    // Full: a third session waits its whole timeout, then fails naming the setting.
    let short = ChannelConfig {
        timeout: Duration::from_millis(300),
        ..base.clone()
    };
    let t0 = Instant::now();
    let err = pair(&short, AbortHandle::new()).expect_err("refused while full");
    assert!(t0.elapsed() >= Duration::from_millis(300), "did not wait");
    assert!(err.contains("RDMAKIT_PINNED_POOL"), "{err}");
    let s3 = pool::stats();
    assert!(
        s3.refused > s2.refused && s3.live_bytes == 8 * MIB as u64,
        "{s3:?}"
    );

    // Full, but a ring comes back while it waits: it goes on with that ring.
    let waiter = {
        let base = base.clone();
        thread::spawn(move || pair(&base, AbortHandle::new()))
    };
    thread::sleep(Duration::from_millis(300));
    drop(held);
    let third = waiter
        .join()
        .expect("thread")
        .expect("third pair once a ring came back");
    let s4 = pool::stats();
    assert!(
        s4.waited > s3.waited && s4.allocated == s3.allocated,
        "{s4:?}"
    );

    // A failed ring (an abort) is not lent again: its bytes leave the pool, the next pair gets a
    // new one.
    let abort = AbortHandle::new();
    drop(third);
    let (tx, rx) = pair(&base, Arc::clone(&abort)).expect("pair to abort");
    abort.abort("test: abort an idle channel");
    drop((tx, rx, abort));
    let s5 = pool::stats();
    assert_eq!(
        s5.live_bytes,
        4 * MIB as u64,
        "the aborted sender's ring left: {s5:?}"
    );
    drop(pair(&base, AbortHandle::new()).expect("pair after the abort"));
    let s6 = pool::stats();
    assert_eq!(s6.allocated - s5.allocated, 1, "{s6:?}");
}
