//! CI tier: the whole pipeline on the host-memory backend (no GPU). Ordering, short chunks,
//! backpressure, transport and copy failures, bounds.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns panic on failure by design

mod common;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{Collect, Counting, Feed, Hold, eventually, stays};
use gpu_stage::checksum::pattern;
use gpu_stage::{
    Device, HostDevice, HostFaults, InProcessStage, MIB, Receiver, RecvTransport, RingConfig,
    Sender, StageError, StagingRing, TcpReceiver, TcpSender, TransportError,
};

const CHUNK: usize = MIB;
/// Long enough for a pipeline that is not blocked to move on (so staying put means blocked).
const QUIET: Duration = Duration::from_millis(300);
/// Bound on anything that should happen promptly.
const WAIT: Duration = Duration::from_secs(10);

fn sizes() -> Vec<usize> {
    vec![1, CHUNK - 1, CHUNK, CHUNK + 1, 13 * CHUNK + 7]
}

fn ring(slots: usize) -> RingConfig {
    RingConfig::new(CHUNK, slots).unwrap()
}

#[test]
fn sender_slices_exactly_including_the_short_last_chunk() {
    let dev = HostDevice::new();
    for len in sizes() {
        let data = pattern(len, len as u64);
        let src = dev.upload(&data).unwrap();
        let mut sender = Sender::new(&dev, ring(3)).unwrap();
        let mut sink = Collect::new(len);
        let st = sender.send(&src, &mut sink).unwrap();
        assert_eq!(sink.data, data, "len {len}");
        assert_eq!(st.bytes, len as u64);
        assert_eq!(st.chunks, len.div_ceil(CHUNK) as u64);
        let last = sink.seen.last().unwrap();
        assert_eq!(
            last.offset as usize + last.len,
            len,
            "last chunk ends at the end"
        );
        assert!(sink.seen.iter().all(|c| c.len <= CHUNK && c.len > 0));
        let f = sink.finished.unwrap();
        assert_eq!((f.bytes, f.chunks), (st.bytes, st.chunks));
        assert_eq!(sender.ring().gate().busy_count(), 0, "every slot returned");
    }
}

#[test]
fn receiver_places_chunks_and_acknowledges() {
    let dev = HostDevice::new();
    for len in sizes() {
        let data = pattern(len, 99);
        let mut dst = dev.alloc_zeroed(len).unwrap();
        let mut recv = Receiver::new(&dev, ring(2)).unwrap();
        let mut feed = Feed::new(data.clone(), CHUNK);
        let st = recv.recv(&mut dst, &mut feed).unwrap();
        assert_eq!(dst.as_slice(), &data[..], "len {len}");
        assert_eq!(feed.completed.unwrap().bytes, len as u64);
        assert_eq!(st.chunks, len.div_ceil(CHUNK) as u64);
    }
}

#[test]
fn in_process_all_sizes_and_empty() {
    let dev = HostDevice::new();
    let mut stage = InProcessStage::new(&dev, &dev, ring(4)).unwrap();
    for len in sizes().into_iter().chain([0]) {
        let data = pattern(len, 5);
        let src = dev.upload(&data).unwrap();
        let mut dst = dev.alloc_zeroed(len).unwrap();
        let st = stage.transfer(&src, &mut dst).unwrap();
        assert_eq!(dev.download(&dst).unwrap(), data, "len {len}");
        assert_eq!(st.bytes, len as u64);
    }
    // The stage is reusable and the ring is idle afterwards.
    assert_eq!(stage.ring().gate().busy_count(), 0);
}

#[test]
fn sender_and_receiver_over_the_in_process_transport_share_one_ring() {
    // The threaded pair InProcessStage replaced still works for callers that build it by hand.
    let dev = HostDevice::new();
    let len = 9 * CHUNK + 17;
    let data = pattern(len, 6);
    let src = dev.upload(&data).unwrap();
    let mut dst = dev.alloc_zeroed(len).unwrap();
    let ring = gpu_stage::new_ring(&dev, ring(3)).unwrap();
    let mut sender = Sender::with_ring(&dev, ring.clone()).unwrap();
    let mut receiver = Receiver::with_ring(&dev, ring.clone()).unwrap();
    let (mut tx, mut rx) = gpu_stage::in_process_pair();
    let sent = std::thread::scope(|s| {
        let h = s.spawn(|| sender.send(&src, &mut tx));
        let got = receiver.recv(&mut dst, &mut rx).unwrap();
        assert_eq!(got.chunks, 10);
        h.join().unwrap().unwrap()
    });
    assert_eq!(sent.bytes, len as u64);
    assert_eq!(dst.as_slice(), &data[..]);
    assert_eq!(ring.gate().busy_count(), 0);
}

#[test]
fn in_process_many_chunks_with_two_buffers_and_slow_copies() {
    // Two buffers and a slow copy engine: the sender must wait for the receiver every time.
    let dev = HostDevice::with_faults(HostFaults {
        copy_delay: Duration::from_millis(2),
        ..HostFaults::default()
    });
    let len = 40 * CHUNK + 3;
    let data = pattern(len, 11);
    let src = dev.upload(&data).unwrap();
    let mut dst = dev.alloc_zeroed(len).unwrap();
    let mut stage = InProcessStage::new(&dev, &dev, ring(2)).unwrap();
    stage.transfer(&src, &mut dst).unwrap();
    assert_eq!(dst.as_slice(), &data[..]);
}

#[test]
fn a_transport_holding_every_slot_stops_the_copies_until_one_comes_back() {
    let dev = HostDevice::new();
    let len = 8 * CHUNK;
    let data = pattern(len, 3);
    let src = dev.upload(&data).unwrap();
    let mut sender = Sender::new(&dev, ring(3)).unwrap();
    let ring = sender.ring().clone();
    let hold = Hold::new(len);
    let mut transport = hold.clone();
    std::thread::scope(|s| {
        let sending = s.spawn(|| sender.send(&src, &mut transport));
        // The three slots go to the transport, which keeps them: the pipeline must stop there.
        assert!(eventually(WAIT, || hold.submitted() == 3));
        assert!(
            stays(QUIET, 3, || hold.submitted()),
            "no fourth chunk while every slot is held"
        );
        assert_eq!(ring.gate().busy_count(), 3);
        // One slot back: exactly one more chunk goes out, then the pipeline waits again.
        assert_eq!(hold.release_oldest(), Some(0));
        assert!(eventually(WAIT, || hold.submitted() == 4));
        assert!(stays(QUIET, 4, || hold.submitted()));
        hold.release_all();
        let st = sending.join().unwrap().unwrap();
        assert_eq!(st.chunks, 8);
    });
    assert_eq!(hold.lock().data, data);
    assert_eq!(ring.gate().busy_count(), 0);
}

#[test]
fn transport_failure_mid_transfer_is_an_error_and_poisons_the_ring() {
    let dev = HostDevice::new();
    let len = 10 * CHUNK;
    let src = dev.upload(&pattern(len, 1)).unwrap();
    let mut sender = Sender::new(&dev, ring(4)).unwrap();
    let mut sink = Collect::new(len);
    sink.fail_at = Some(5);
    let err = sender.send(&src, &mut sink).unwrap_err();
    assert!(
        matches!(err, StageError::Transport(TransportError::Closed(ref m)) if m.contains("chunk 5")),
        "{err}"
    );
    assert!(sink.aborted.is_some(), "the transport is told to abort");
    assert_eq!(sink.seen.len(), 5);
    // A failed ring stays failed: the next transfer refuses to start.
    let again = sender.send(&src, &mut Collect::new(len)).unwrap_err();
    assert!(matches!(again, StageError::Aborted(_)), "{again}");
}

#[test]
fn receive_failure_mid_transfer_is_an_error() {
    let dev = HostDevice::new();
    let len = 6 * CHUNK;
    let mut dst = dev.alloc_zeroed(len).unwrap();
    let mut recv = Receiver::new(&dev, ring(2)).unwrap();
    let mut feed = Feed::new(pattern(len, 2), CHUNK);
    feed.fail_at = Some(3);
    let err = recv.recv(&mut dst, &mut feed).unwrap_err();
    assert!(
        err.to_string().contains("injected receive failure"),
        "{err}"
    );
    assert!(
        feed.completed.is_none(),
        "no acknowledgement after a failure"
    );
}

#[test]
fn copy_engine_faults_surface_on_either_side() {
    let len = 8 * CHUNK;
    let data = pattern(len, 4);
    for faults in [
        HostFaults {
            fail_d2h_at: Some(3),
            ..HostFaults::default()
        },
        HostFaults {
            fail_h2d_at: Some(2),
            ..HostFaults::default()
        },
    ] {
        let dev = HostDevice::with_faults(faults.clone());
        let src = dev.upload(&data).unwrap();
        let mut dst = dev.alloc_zeroed(len).unwrap();
        let mut stage = InProcessStage::new(&dev, &dev, ring(2)).unwrap();
        let err = stage.transfer(&src, &mut dst).unwrap_err();
        assert!(
            err.to_string().contains("injected fault"),
            "{faults:?}: {err}"
        );
    }
}

#[test]
fn chunk_outside_the_destination_is_refused_not_written() {
    let dev = HostDevice::new();
    let len = 3 * CHUNK;
    let mut dst = dev.alloc_zeroed(len).unwrap();
    let mut recv = Receiver::new(&dev, ring(2)).unwrap();
    let mut feed = Feed::new(pattern(len, 8), CHUNK);
    feed.bad_offset_at = Some((1, (len - 10) as u64));
    let err = recv.recv(&mut dst, &mut feed).unwrap_err();
    assert!(matches!(err, StageError::OutOfBounds { .. }), "{err}");
}

#[test]
fn ranges_and_sizes_are_checked() {
    let dev = HostDevice::new();
    let src = dev.upload(&[1u8; 100]).unwrap();
    let mut sender = Sender::new(&dev, ring(2)).unwrap();
    let err = sender
        .send_range(&src, 50..101, &mut Collect::new(100))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StageError::OutOfBounds {
                end: 101,
                size: 100,
                ..
            }
        ),
        "{err}"
    );
    let mut sink = Collect::new(30);
    sender.send_range(&src, 70..100, &mut sink).unwrap();
    assert_eq!(sink.data, vec![1u8; 30]);

    let mut small = dev.alloc_zeroed(99).unwrap();
    let mut stage = InProcessStage::new(&dev, &dev, ring(2)).unwrap();
    assert!(matches!(
        stage.transfer(&src, &mut small).unwrap_err(),
        StageError::OutOfBounds { .. }
    ));
    assert!(
        Sender::new(
            &dev,
            RingConfig {
                chunk_bytes: MIB - 1,
                slots: 8
            }
        )
        .unwrap_err()
        .to_string()
        .contains("chunk_bytes")
    );
}

fn tcp_roundtrip(len: usize, connections: usize, recv_dev: HostDevice, slots: usize) {
    let dev = HostDevice::new();
    let data = pattern(len, 21);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let expected = data.clone();
    let rx = std::thread::spawn(move || {
        let mut t = TcpReceiver::accept(&listener, connections).unwrap();
        let mut recv = Receiver::new(&recv_dev, ring(slots)).unwrap();
        let mut dst = recv_dev.alloc_zeroed(len).unwrap();
        for _ in 0..2 {
            recv_dev.zero(&mut dst).unwrap();
            recv.recv(&mut dst, &mut t).unwrap();
            assert_eq!(dst.as_slice(), &expected[..]);
        }
    });
    let src = dev.upload(&data).unwrap();
    let mut t = TcpSender::connect(addr, connections).unwrap();
    let mut sender = Sender::new(&dev, ring(slots)).unwrap();
    for _ in 0..2 {
        let st = sender.send(&src, &mut t).unwrap();
        assert_eq!(st.bytes, len as u64);
    }
    rx.join().unwrap();
}

#[test]
fn tcp_all_sizes_one_and_several_connections() {
    for len in sizes() {
        tcp_roundtrip(len, 1, HostDevice::new(), 2);
        tcp_roundtrip(len, 3, HostDevice::new(), 4);
    }
}

#[test]
fn tcp_more_connections_than_chunks_and_empty_transfer() {
    tcp_roundtrip(CHUNK + 1, 8, HostDevice::new(), 8);
    tcp_roundtrip(0, 2, HostDevice::new(), 2);
}

#[test]
fn a_tcp_receiver_holding_its_slots_stops_the_sender_until_they_come_back() {
    let len = 64 * CHUNK; // far more than the socket buffers hold
    let data = pattern(len, 21);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dev = HostDevice::new();
    let src = dev.upload(&data).unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let n = Arc::clone(&sent);
    let sending = std::thread::spawn(move || {
        let mut t = Counting {
            inner: TcpSender::connect(addr, 1).unwrap(),
            n,
        };
        Sender::new(&dev, ring(2)).unwrap().send(&src, &mut t)
    });
    let mut rx = TcpReceiver::accept(&listener, 1).unwrap();
    let recv_ring = StagingRing::heap(ring(2)).unwrap();
    rx.attach(&recv_ring).unwrap();
    let mut out = vec![0u8; len];
    let mut take = |rx: &mut TcpReceiver| {
        let (c, slot) = rx.next_chunk(&recv_ring).unwrap().unwrap();
        out[c.offset as usize..c.offset as usize + c.len]
            .copy_from_slice(slot.bytes(c.len).unwrap());
        (c, slot)
    };
    // Hold both receive slots: the reader stops, the sockets fill, the sender must stop.
    let (_, first) = take(&mut rx);
    let (_, second) = take(&mut rx);
    let count = || sent.load(Ordering::SeqCst);
    assert!(
        eventually(WAIT, || stays(QUIET, count(), count)),
        "the sender settles"
    );
    let stalled = count();
    assert!(
        stalled < 64,
        "the sender is held back: {stalled} of 64 chunks"
    );
    // One slot back: the reader takes the next chunk into it at once.
    drop(first);
    let (c, third) = take(&mut rx);
    assert_eq!((c.seq, c.slot), (2, 0));
    drop(second);
    drop(third);
    // Draining from here on lets the sender go on and finish.
    assert!(eventually(WAIT, || {
        drop(take(&mut rx));
        count() > stalled
    }));
    let mut next = count();
    while let Some((c, slot)) = rx.next_chunk(&recv_ring).unwrap() {
        out[c.offset as usize..c.offset as usize + c.len]
            .copy_from_slice(slot.bytes(c.len).unwrap());
        next = c.seq + 1;
    }
    assert_eq!(next, 64);
    rx.complete(gpu_stage::TransferSummary {
        chunks: 64,
        bytes: len as u64,
    })
    .unwrap();
    assert_eq!(sending.join().unwrap().unwrap().chunks, 64);
    assert_eq!(out, data);
}

#[test]
fn tcp_receiver_vanishing_mid_transfer_fails_the_sender() {
    let dev = HostDevice::new();
    let len = 64 * CHUNK;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rx = std::thread::spawn(move || {
        let mut t = TcpReceiver::accept(&listener, 2).unwrap();
        let recv_dev = HostDevice::new();
        let mut recv = Receiver::new(&recv_dev, ring(2)).unwrap();
        // A destination too small: the receiver fails after the first chunks and aborts.
        let mut dst = recv_dev.alloc_zeroed(3 * CHUNK).unwrap();
        recv.recv(&mut dst, &mut t).unwrap_err()
    });
    let src = dev.upload(&pattern(len, 6)).unwrap();
    let mut t = TcpSender::connect(addr, 2).unwrap();
    let mut sender = Sender::new(&dev, ring(2)).unwrap();
    let err = sender.send(&src, &mut t).unwrap_err();
    let recv_err = rx.join().unwrap();
    assert!(
        matches!(recv_err, StageError::OutOfBounds { .. }),
        "{recv_err}"
    );
    assert!(
        matches!(err, StageError::Transport(_) | StageError::Aborted(_)),
        "sender sees the failure: {err}"
    );
}

#[test]
fn tcp_connection_count_mismatch_is_reported() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rx = std::thread::spawn(move || TcpReceiver::accept(&listener, 3).map(|_| ()));
    let _sender = TcpSender::connect(addr, 2);
    let err = rx.join().unwrap();
    // Either the receiver sees a HELLO announcing 2 connections, or it waits for a third that
    // never comes; the former is what happens with a prompt sender.
    let msg = err.unwrap_err().to_string();
    assert!(msg.contains("connections"), "{msg}");
}
