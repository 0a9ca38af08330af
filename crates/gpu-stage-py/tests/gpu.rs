//! GPU tier of the binding: CUDA buffers given by address (as torch's `data_ptr()` gives them)
//! through a TCP channel, and the driver-side pointer checks. Ignored by default (CI has no GPU,
//! so they show as ignored); on a GPU machine:
//! `cargo test --release -p gpu-stage-py --test gpu -- --ignored` (or the binary built with
//! `--no-run`, carried, and run with `--ignored`).
#![allow(clippy::unwrap_used)]

use std::thread;

use _native::buffer::{BufferSpec, Place};
use _native::channel::{AbortHandle, PairListener, SendChannel};
use _native::config::{ChannelConfig, RingBackend};
use _native::handshake::Token;
use cudarc::driver::{CudaSlice, DevicePtr};
use gpu_stage::checksum::pattern;
use gpu_stage::{CudaDevice, Device, MIB, cuda_driver_present};

fn gpu() -> CudaDevice {
    assert!(
        cuda_driver_present(),
        "GPU tier requested (--ignored) but there is no CUDA driver"
    );
    CudaDevice::new(0).unwrap()
}

fn addr(dev: &CudaDevice, s: &CudaSlice<u8>) -> u64 {
    let (p, _sync) = s.device_ptr(dev.util_stream());
    p
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn cuda_buffers_by_address_cross_a_tcp_channel_intact() {
    let dev = gpu();
    let cfg = ChannelConfig {
        backend: RingBackend::Cuda,
        ..ChannelConfig::default()
    };
    for len in [1, 4 * MIB - 1, 4 * MIB + 1, 512 * MIB] {
        let data = pattern(len, len as u64);
        let src = dev.upload(&data).unwrap();
        let dst = dev.alloc_zeroed(len).unwrap();
        // SAFETY: `src` and `dst` are this loop's device allocations, alive until the transfers return.
        let spec = |p| unsafe { BufferSpec::from_raw(Place::Cuda(0), p, len) }.expect("in range");
        let (s, d) = (spec(addr(&dev, &src)), spec(addr(&dev, &dst)));
        let listener = PairListener::bind("127.0.0.1:0").unwrap();
        let a = listener.local_addr().unwrap().to_string();
        let c2 = cfg.clone();
        let h = thread::spawn(move || {
            SendChannel::connect(&a, &c2, AbortHandle::new(), Token::NONE)
                .unwrap()
                .send("o", &[s], None)
                .unwrap()
        });
        let got = listener
            .accept(&cfg, AbortHandle::new(), Token::NONE)
            .unwrap()
            .recv("o", &[d], None)
            .unwrap();
        assert_eq!(h.join().unwrap(), len as u64);
        assert_eq!(got, len as u64);
        assert!(dev.download(&dst).unwrap() == data, "{len} bytes differ");
    }
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn three_consumers_pull_one_cuda_object_from_a_server_at_once() {
    let dev = gpu();
    let cfg = ChannelConfig {
        backend: RingBackend::Cuda,
        ..ChannelConfig::default()
    };
    let len = 256 * MIB + 3;
    let data = pattern(len, 7);
    let src = std::sync::Arc::new(dev.upload(&data).unwrap());
    let server =
        _native::server::Server::bind("127.0.0.1:0", &cfg, std::time::Duration::from_secs(30))
            .unwrap();
    let token = Token::from_bytes(&[5; 32]).unwrap();
    // SAFETY: `src` is device memory of GPU 0 that the Arc given as `keep` holds allocated while
    // the registration lives; nothing writes it.
    let spec = unsafe { BufferSpec::from_raw(Place::Cuda(0), addr(&dev, &src), len) }.unwrap();
    // SAFETY: as above.
    unsafe {
        server.register(
            "w",
            vec![spec],
            token,
            None,
            Box::new(std::sync::Arc::clone(&src)),
        )
    }
    .unwrap();
    let a = server.local_addr().to_string();
    // Each consumer allocates and opens its session first (a cudaMalloc, a memset and a pinned
    // ring each: they synchronise the device), then all three pull at once.
    let start = std::sync::Arc::new(std::sync::Barrier::new(3));
    let pulls: Vec<_> = (0..3)
        .map(|_| {
            let (a, c, dev, start) = (a.clone(), cfg.clone(), dev.clone(), start.clone());
            thread::spawn(move || {
                let dst = dev.alloc_zeroed(len).unwrap();
                // SAFETY: `dst` is this thread's allocation, alive until the pull returns.
                let d =
                    unsafe { BufferSpec::from_raw(Place::Cuda(0), addr(&dev, &dst), len) }.unwrap();
                let mut ch =
                    _native::channel::RecvChannel::connect(&a, &c, AbortHandle::new(), token)
                        .unwrap();
                start.wait();
                ch.pull("w", &[d], token).unwrap();
                dev.download(&dst).unwrap()
            })
        })
        .collect();
    for p in pulls {
        assert!(p.join().unwrap() == data, "bytes differ");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.stats().served < 3 {
        assert!(std::time::Instant::now() < deadline, "{:?}", server.stats());
        thread::sleep(std::time::Duration::from_millis(5));
    }
    let spans = server.spans();
    let last_start = spans.iter().map(|s| s.start).fold(f64::MIN, f64::max);
    let first_end = spans.iter().map(|s| s.end).fold(f64::MAX, f64::min);
    assert!(
        last_start < first_end,
        "served one after another: {spans:?}"
    );
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn borrow_raw_refuses_what_the_driver_says_is_wrong() {
    let dev = gpu();
    let mem = dev.alloc_zeroed(MIB).unwrap();
    let p = addr(&dev, &mem);
    // SAFETY: `ptr..ptr+len` reaches past `mem`'s allocation, so the driver check refuses it
    // before anything is borrowed, read or written.
    let past = unsafe { dev.borrow_raw(p, MIB + 1) }
        .unwrap_err()
        .to_string();
    assert!(past.contains("outside"), "{past}");
    let host = [0u8; 64];
    // SAFETY: host memory is refused by the driver check before anything is borrowed.
    let h = unsafe { dev.borrow_raw(host.as_ptr() as u64, 64) }
        .unwrap_err()
        .to_string();
    assert!(
        h.contains("not CUDA device memory") || h.contains("cuPointerGetAttribute"),
        "{h}"
    );
    // SAFETY: a null address is refused before any driver call.
    assert!(unsafe { dev.borrow_raw(0, 1) }.is_err());
    // Inside the allocation is fine, at an offset too.
    // SAFETY: the range lies inside `mem`, which outlives `ok`; no work runs on `mem` while
    // `ok` lives (nothing is queued on it at all).
    let ok = unsafe { dev.borrow_raw(p + 4096, MIB - 4096) }.unwrap();
    assert_eq!(ok.len(), MIB - 4096);
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn a_state_dict_of_cuda_tensors_crosses_as_one_staged_transfer() {
    let dev = gpu();
    let cfg = ChannelConfig {
        backend: RingBackend::Cuda,
        ..ChannelConfig::default()
    };
    // 260 tensors of a transformer's shapes (norms, biases, projections), cut from two
    // allocations the way a caching allocator packs them: tensors back to back at offsets.
    let sizes: Vec<usize> = (0..260)
        .map(|i| match i % 4 {
            0 => 8192,
            1 => 2 * MIB + 6,
            2 => 3,
            _ => 5 * MIB,
        })
        .collect();
    let total: usize = sizes.iter().sum();
    let data = pattern(total, 7);
    let src = dev.upload(&data).unwrap();
    let dst = dev.alloc_zeroed(total).unwrap();
    let (s0, d0) = (addr(&dev, &src), addr(&dev, &dst));
    let mut at = 0u64;
    let (mut ss, mut ds) = (Vec::new(), Vec::new());
    for &n in &sizes {
        // SAFETY: each range lies inside `src` / `dst`, alive until the transfers return.
        ss.push(unsafe { BufferSpec::from_raw(Place::Cuda(0), s0 + at, n) }.unwrap());
        // SAFETY: as above; nothing else touches `dst` until the receive returns.
        ds.push(unsafe { BufferSpec::from_raw(Place::Cuda(0), d0 + at, n) }.unwrap());
        at += n as u64;
    }
    let listener = PairListener::bind("127.0.0.1:0").unwrap();
    let a = listener.local_addr().unwrap().to_string();
    let c2 = cfg.clone();
    let h = thread::spawn(move || {
        let mut ch = SendChannel::connect(&a, &c2, AbortHandle::new(), Token::NONE).unwrap();
        let n = ch.send("sd", &ss, None).unwrap();
        (n, ch.staged_transfers())
    });
    let mut rx = listener
        .accept(&cfg, AbortHandle::new(), Token::NONE)
        .unwrap();
    let got = rx.recv("sd", &ds, None).unwrap();
    assert_eq!(h.join().unwrap(), (total as u64, 1));
    assert_eq!((got, rx.staged_transfers()), (total as u64, 1));
    assert!(dev.download(&dst).unwrap() == data, "bytes differ");
}
