//! GPU tier: correctness on real GPUs. Ignored by default (CI has no GPU, so they show as
//! ignored, never as passed); run on a GPU machine with
//! `cargo test -p gpu-stage --release -- --ignored`. Run with `--ignored` on a machine without a
//! CUDA driver, they fail with a message saying so rather than pretending to pass.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::TcpListener;

use common::{Collect, Feed};
use gpu_stage::checksum::{checksum, pattern};
use gpu_stage::{
    CudaDevice, Device, InProcessStage, MIB, Receiver, RingConfig, Sender, TcpReceiver, TcpSender,
    cuda_driver_present,
};

const CHUNK: usize = 4 * MIB;

fn sizes() -> Vec<usize> {
    vec![1, CHUNK - 1, CHUNK, CHUNK + 1, 512 * MIB]
}

fn gpus() -> (CudaDevice, CudaDevice) {
    assert!(
        cuda_driver_present(),
        "GPU tier requested (--ignored) but this machine has no CUDA driver"
    );
    let n = CudaDevice::count().unwrap();
    assert!(n >= 1, "the CUDA driver reports no devices");
    let a = CudaDevice::new(0).unwrap();
    let b = CudaDevice::new(if n > 1 { 1 } else { 0 }).unwrap();
    eprintln!("GPU tier on {} and {}", a.describe(), b.describe());
    (a, b)
}

fn cfg() -> RingConfig {
    RingConfig::new(CHUNK, 8).unwrap()
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn gpu_device_to_host_all_sizes() {
    let (a, _) = gpus();
    let mut sender = Sender::new(&a, cfg()).unwrap();
    assert!(sender.ring().is_page_locked());
    for len in sizes() {
        let data = pattern(len, len as u64);
        let src = a.upload(&data).unwrap();
        let mut sink = Collect::new(len);
        let st = sender.send(&src, &mut sink).unwrap();
        assert_eq!(st.chunks, len.div_ceil(CHUNK) as u64);
        assert!(sink.data == data, "D2H mismatch at {len} bytes");
    }
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn gpu_host_to_device_all_sizes() {
    let (_, b) = gpus();
    let mut recv = Receiver::new(&b, cfg()).unwrap();
    for len in sizes() {
        let data = pattern(len, 7 + len as u64);
        let want = checksum(&data);
        let mut dst = b.alloc_zeroed(len).unwrap();
        let mut feed = Feed::new(data, CHUNK);
        recv.recv(&mut dst, &mut feed).unwrap();
        assert_eq!(
            checksum(&b.download(&dst).unwrap()),
            want,
            "H2D mismatch at {len} bytes"
        );
    }
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn gpu_in_process_both_directions_all_sizes() {
    let (a, b) = gpus();
    let mut ab = InProcessStage::new(&a, &b, cfg()).unwrap();
    let mut ba = InProcessStage::new(&b, &a, cfg()).unwrap();
    for len in sizes() {
        let data = pattern(len, 3 * len as u64);
        let want = checksum(&data);
        let on_a = a.upload(&data).unwrap();
        let mut on_b = b.alloc_zeroed(len).unwrap();
        ab.transfer(&on_a, &mut on_b).unwrap();
        assert_eq!(
            checksum(&b.download(&on_b).unwrap()),
            want,
            "A→B at {len} bytes"
        );
        let mut back = a.alloc_zeroed(len).unwrap();
        ba.transfer(&on_b, &mut back).unwrap();
        assert_eq!(
            checksum(&a.download(&back).unwrap()),
            want,
            "B→A at {len} bytes"
        );
    }
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn gpu_tcp_loopback_all_sizes() {
    let (a, b) = gpus();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let lens = sizes();
    let lens2 = lens.clone();
    let rx = std::thread::spawn(move || {
        let mut t = TcpReceiver::accept(&listener, 4).unwrap();
        let mut recv = Receiver::new(&b, cfg()).unwrap();
        for len in lens2 {
            let mut dst = b.alloc_zeroed(len).unwrap();
            recv.recv(&mut dst, &mut t).unwrap();
            assert_eq!(
                checksum(&b.download(&dst).unwrap()),
                checksum(&pattern(len, 11)),
                "TCP at {len} bytes"
            );
        }
    });
    let mut t = TcpSender::connect(addr, 4).unwrap();
    let mut sender = Sender::new(&a, cfg()).unwrap();
    for len in lens {
        let src = a.upload(&pattern(len, 11)).unwrap();
        sender.send(&src, &mut t).unwrap();
    }
    rx.join().unwrap();
}

#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn gpu_out_of_range_is_an_error() {
    let (a, _) = gpus();
    let src = a.upload(&[1u8; 4096]).unwrap();
    let mut sender = Sender::new(&a, cfg()).unwrap();
    let err = sender
        .send_range(&src, 0..4097, &mut Collect::new(4097))
        .unwrap_err();
    assert!(err.to_string().contains("outside"), "{err}");
}

/// Issue 26, F9: `SlotToken::bytes` is a safe slice over a slot before any copy wrote it; the pinned
/// staging memory (uninitialised from cuMemHostAlloc) is zeroed once at allocation.
#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn pinned_staging_reads_zero_before_any_copy() {
    let (a, _) = gpus();
    let sender = Sender::new(&a, cfg()).unwrap();
    let ring = sender.ring();
    assert!(ring.is_page_locked());
    for slot in 0..ring.slots() {
        let token = ring.acquire(slot).unwrap();
        let bytes = token.bytes(CHUNK).unwrap();
        assert!(
            bytes.iter().all(|b| *b == 0),
            "slot {slot} holds stale bytes"
        );
    }
}

/// Issue 26: `CudaDevice::borrow_raw` said it rejects managed memory and did not check (managed memory
/// reports CU_MEMORYTYPE_DEVICE); it now asks CU_POINTER_ATTRIBUTE_IS_MANAGED.
#[test]
#[ignore = "GPU tier: needs a CUDA driver"]
fn borrowed_managed_memory_is_refused() {
    use cudarc::driver::sys;
    let (a, _) = gpus();
    a.bind().unwrap();
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: allocates 1 MiB of managed memory into `ptr` (freed below); the context is current.
    unsafe {
        sys::cuMemAllocManaged(
            &mut ptr,
            MIB,
            sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
        )
    }
    .result()
    .unwrap();
    // SAFETY: the allocation lives until the free below, and nothing else uses it; the call must
    // refuse it anyway.
    let r = unsafe { a.borrow_raw(ptr, MIB) };
    // SAFETY: `ptr` came from cuMemAllocManaged above and is not used after this.
    unsafe { sys::cuMemFree_v2(ptr) }.result().unwrap();
    let e = r.unwrap_err().to_string();
    assert!(e.contains("managed"), "{e}");
    // Ordinary device memory still passes.
    let own = a.alloc_zeroed(MIB).unwrap();
    let (p, _guard) = cudarc::driver::DevicePtr::device_ptr(&own, a.util_stream());
    // SAFETY: `own` outlives the borrow, which is dropped at once; nothing writes it meanwhile.
    assert!(unsafe { a.borrow_raw(p, MIB) }.is_ok());
}
