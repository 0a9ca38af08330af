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

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn small_cuda_objects_go_inline_through_the_bounce_buffer_either_way() {
    let dev = gpu();
    let cfg = ChannelConfig {
        backend: RingBackend::Cuda,
        ..ChannelConfig::default()
    };
    // (sizes, sender on the GPU, receiver on the GPU); at most 64 KiB in all goes inline.
    let cases: Vec<(Vec<usize>, bool, bool)> = vec![
        (vec![4096], true, true),
        (vec![4096, 1, 60 * 1024 - 1], true, true),
        (vec![64 * 1024], true, true),
        (vec![64 * 1024 + 1], true, true),
        (vec![4096, 8192], true, false),
        (vec![4096, 8192], false, true),
        (vec![0, 7], true, true),
    ];
    let listener = PairListener::bind("127.0.0.1:0").unwrap();
    let a = listener.local_addr().unwrap().to_string();
    // Every object's bytes, and where they live on each end (device allocations and host
    // vectors, alive until both ends are done).
    let mut plans = Vec::new();
    for (k, (sizes, src_gpu, dst_gpu)) in cases.iter().enumerate() {
        let mut s = Vec::new();
        let mut d = Vec::new();
        for (j, &n) in sizes.iter().enumerate() {
            let data = pattern(n, (k * 31 + j) as u64);
            let src: Result<CudaSlice<u8>, Vec<u8>> = if *src_gpu && n > 0 {
                Ok(dev.upload(&data).unwrap())
            } else {
                Err(data.clone())
            };
            let dst: Result<CudaSlice<u8>, Vec<u8>> = if *dst_gpu && n > 0 {
                Ok(dev.alloc_zeroed(n).unwrap())
            } else {
                Err(vec![0u8; n])
            };
            s.push((data, src));
            d.push(dst);
        }
        plans.push((s, d));
    }
    let spec = |m: &Result<CudaSlice<u8>, Vec<u8>>| match m {
        // SAFETY: the allocation / vector outlives the transfers below and nothing else touches it.
        Ok(c) => unsafe { BufferSpec::from_raw(Place::Cuda(0), addr(&dev, c), c.len()) }.unwrap(),
        // SAFETY: as above.
        Err(v) => unsafe { BufferSpec::from_raw(Place::Cpu, v.as_ptr() as u64, v.len()) }.unwrap(),
    };
    let sends: Vec<Vec<BufferSpec>> = plans
        .iter()
        .map(|(s, _)| s.iter().map(|(_, m)| spec(m)).collect())
        .collect();
    // Receive targets: host vectors by a pointer from `&mut` (the receiver writes through it).
    let recvs: Vec<Vec<BufferSpec>> = plans
        .iter_mut()
        .map(|(_, d)| {
            d.iter_mut()
                .map(|m| match m {
                    Ok(_) => spec(m),
                    Err(v) => {
                        // SAFETY: the vector outlives the receives and nothing else touches it.
                        unsafe { BufferSpec::from_raw(Place::Cpu, v.as_mut_ptr() as u64, v.len()) }
                            .unwrap()
                    }
                })
                .collect()
        })
        .collect();
    let c2 = cfg.clone();
    let h = thread::spawn(move || {
        let mut ch = SendChannel::connect(&a, &c2, AbortHandle::new(), Token::NONE).unwrap();
        let mut staged = Vec::new();
        for (k, bufs) in sends.iter().enumerate() {
            let before = ch.staged_transfers();
            ch.send(&format!("o{k}"), bufs, None).unwrap();
            staged.push(ch.staged_transfers() - before);
        }
        // 4 KiB CUDA objects, one after another on the kept channel: the binding's fixed cost.
        for i in 0..500 {
            ch.send(&format!("t{i}"), &sends[0], None).unwrap();
        }
        staged
    });
    let mut rx = listener
        .accept(&cfg, AbortHandle::new(), Token::NONE)
        .unwrap();
    let mut staged_rx = Vec::new();
    for (k, bufs) in recvs.iter().enumerate() {
        let before = rx.staged_transfers();
        let want: usize = cases[k].0.iter().sum();
        assert_eq!(rx.recv(&format!("o{k}"), bufs, None).unwrap(), want as u64);
        staged_rx.push(rx.staged_transfers() - before);
    }
    let mut took = Vec::new();
    for i in 0..500 {
        let t0 = std::time::Instant::now();
        rx.recv(&format!("t{i}"), &recvs[0], None).unwrap();
        took.push(t0.elapsed().as_micros());
    }
    let staged_tx = h.join().unwrap();
    for (k, (s, d)) in plans.iter().enumerate() {
        for (j, ((data, _), dst)) in s.iter().zip(d).enumerate() {
            let got = match dst {
                Ok(c) => dev.download(c).unwrap(),
                Err(v) => v.clone(),
            };
            assert!(got == *data, "object {k}, buffer {j}: bytes differ");
        }
    }
    // Inline objects take no staged transfer on either end; the one over 64 KiB takes one.
    let expect = vec![0, 0, 0, 1, 0, 0, 0];
    assert_eq!(staged_tx, expect, "sender's staged transfers per object");
    assert_eq!(staged_rx, expect, "receiver's staged transfers per object");
    took.sort_unstable();
    eprintln!(
        "4 KiB CUDA -> CUDA over a kept channel, 500 objects: median {} us, p90 {} us",
        took[took.len() / 2],
        took[took.len() * 9 / 10]
    );
}
