//! CI tier: one transfer over many buffers (`Sender::send_gather`, `Receiver::recv_scatter`), on
//! the host-memory backend. Chunks cross buffer boundaries, empty buffers are skipped, the two
//! ends may split the same bytes differently, and a stream longer than the buffers is refused.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns panic on failure by design

mod common;

use std::net::TcpListener;

use common::{Collect, Feed};
use gpu_stage::checksum::pattern;
use gpu_stage::{
    Device, HostDevice, HostMemory, MIB, Receiver, RingConfig, Sender, StageError, TcpReceiver,
    TcpSender,
};

const CHUNK: usize = MIB;

fn ring(slots: usize) -> RingConfig {
    RingConfig::new(CHUNK, slots).unwrap()
}

/// Buffers of `lens`, filled from `data` in order.
fn split(dev: &HostDevice, data: &[u8], lens: &[usize]) -> Vec<HostMemory> {
    let mut at = 0;
    lens.iter()
        .map(|&l| {
            let m = dev.upload(&data[at..at + l]).unwrap();
            at += l;
            m
        })
        .collect()
}

/// Empty, one byte, just under a chunk, a chunk and a bit, many small ones: every boundary case.
const SEND_LENS: [usize; 9] = [0, 1, CHUNK - 1, 3, 2 * CHUNK + 5, 0, 7, 4096, 4096];

#[test]
fn a_gathered_send_is_one_transfer_of_the_buffers_back_to_back() {
    let dev = HostDevice::new();
    let total: usize = SEND_LENS.iter().sum();
    let data = pattern(total, 3);
    let srcs = split(&dev, &data, &SEND_LENS);
    let refs: Vec<&HostMemory> = srcs.iter().collect();
    let mut sender = Sender::new(&dev, ring(3)).unwrap();
    let mut sink = Collect::new(total);
    let st = sender.send_gather(&refs, &mut sink).unwrap();
    assert_eq!(sink.data, data);
    assert_eq!(st.bytes, total as u64);
    // Whole chunks but the last: the chunks cross the buffers' boundaries.
    assert_eq!(st.chunks, total.div_ceil(CHUNK) as u64);
    assert!(
        sink.seen[..sink.seen.len() - 1]
            .iter()
            .all(|c| c.len == CHUNK)
    );
    let f = sink.finished.unwrap();
    assert_eq!((f.bytes, f.chunks), (st.bytes, st.chunks));
    assert_eq!(sender.ring().gate().busy_count(), 0, "every slot returned");
}

#[test]
fn a_scattered_receive_splits_the_stream_where_each_buffer_ends() {
    let dev = HostDevice::new();
    let lens = [5, CHUNK + 2, 0, 1, 3 * CHUNK];
    let total: usize = lens.iter().sum();
    let data = pattern(total, 8);
    let mut dsts: Vec<HostMemory> = lens.iter().map(|&l| dev.alloc_zeroed(l).unwrap()).collect();
    let mut refs: Vec<&mut HostMemory> = dsts.iter_mut().collect();
    let mut recv = Receiver::new(&dev, ring(2)).unwrap();
    let mut feed = Feed::new(data.clone(), CHUNK);
    let st = recv.recv_scatter(&mut refs, &mut feed).unwrap();
    assert_eq!(st.bytes, total as u64);
    let mut at = 0;
    for (d, &l) in dsts.iter().zip(&lens) {
        assert_eq!(d.as_slice(), &data[at..at + l], "buffer at {at}");
        at += l;
    }
    assert_eq!(recv.ring().gate().busy_count(), 0);
}

#[test]
fn a_stream_longer_than_the_scattered_buffers_is_refused_before_it_writes_past_them() {
    let dev = HostDevice::new();
    let data = pattern(3 * CHUNK, 1);
    let mut a = dev.alloc_zeroed(CHUNK).unwrap();
    let mut b = dev.alloc_zeroed(CHUNK / 2).unwrap();
    let mut recv = Receiver::new(&dev, ring(2)).unwrap();
    let mut feed = Feed::new(data.clone(), CHUNK);
    let e = recv
        .recv_scatter(&mut [&mut a, &mut b], &mut feed)
        .unwrap_err();
    assert!(matches!(e, StageError::OutOfBounds { .. }), "{e}");
    // The second chunk (CHUNK..2*CHUNK) does not fit in the CHUNK / 2 left: nothing of it lands.
    assert_eq!(a.as_slice(), &data[..CHUNK]);
    assert!(b.as_slice().iter().all(|&x| x == 0));
}

#[test]
fn both_ends_may_split_the_same_bytes_differently_over_tcp() {
    let dev = HostDevice::new();
    let total: usize = SEND_LENS.iter().sum();
    let data = pattern(total, 21);
    // The receiver's layout shares no boundary with the sender's but the ends.
    let recv_lens = [CHUNK / 3, total - CHUNK / 3 - 11, 11];
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let expected = data.clone();
    let rx = std::thread::spawn(move || {
        let dev = HostDevice::new();
        let mut t = TcpReceiver::accept(&listener, 2).unwrap();
        let mut recv = Receiver::new(&dev, ring(4)).unwrap();
        let mut dsts: Vec<HostMemory> = recv_lens
            .iter()
            .map(|&l| dev.alloc_zeroed(l).unwrap())
            .collect();
        for _ in 0..2 {
            dsts.iter_mut().for_each(|d| dev.zero(d).unwrap());
            let mut refs: Vec<&mut HostMemory> = dsts.iter_mut().collect();
            recv.recv_scatter(&mut refs, &mut t).unwrap();
            let got: Vec<u8> = dsts.iter().flat_map(|d| d.as_slice().to_vec()).collect();
            assert!(got == expected, "received bytes differ");
        }
    });
    let srcs = split(&dev, &data, &SEND_LENS);
    let refs: Vec<&HostMemory> = srcs.iter().collect();
    let mut t = TcpSender::connect(addr, 2).unwrap();
    let mut sender = Sender::new(&dev, ring(4)).unwrap();
    for _ in 0..2 {
        let st = sender.send_gather(&refs, &mut t).unwrap();
        assert_eq!(st.bytes, total as u64);
    }
    rx.join().unwrap();
}
