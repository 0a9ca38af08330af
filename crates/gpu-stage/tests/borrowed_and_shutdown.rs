//! Additive API for the Python binding: borrowed host memory and TCP shutdown handles.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use gpu_stage::checksum::pattern;
use gpu_stage::{
    Device, HostDevice, HostMemory, MIB, Receiver, RingConfig, Sender, TcpReceiver, TcpSender,
};

#[test]
fn borrowed_host_memory_is_sent_and_received_in_place_and_not_freed() {
    let dev = HostDevice::new();
    let cfg = RingConfig::new(MIB, 2).expect("ring");
    let src: Vec<u8> = pattern(3 * MIB + 7, 11);
    let mut dst = vec![0u8; src.len()];
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (s_addr, s_len) = (src.as_ptr() as usize, src.len());
    let d2 = dev.clone();
    let h = thread::spawn(move || {
        let mut t = TcpSender::connect(addr, 2).expect("connect");
        // SAFETY: `src` outlives the thread (joined below) and is not written meanwhile.
        let mem = unsafe { HostMemory::borrowed(s_addr as *mut u8, s_len) }.expect("borrow");
        Sender::new(&d2, cfg)
            .expect("sender")
            .send(&mem, &mut t)
            .expect("send");
    });
    let mut t = TcpReceiver::accept(&listener, 2).expect("accept");
    {
        // SAFETY: `dst` is exclusively lent for the duration of this block.
        let mut mem = unsafe { HostMemory::borrowed(dst.as_mut_ptr(), dst.len()) }.expect("borrow");
        let stats = Receiver::new(&dev, cfg)
            .expect("receiver")
            .recv(&mut mem, &mut t)
            .expect("recv");
        assert_eq!(stats.bytes, src.len() as u64);
    } // dropping the borrowed memory must not free `dst`
    h.join().expect("sender thread");
    assert_eq!(dst, src);
}

#[test]
fn borrowed_host_memory_refuses_a_null_pointer() {
    // SAFETY: the call refuses the pointer before using it.
    let e = unsafe { HostMemory::borrowed(std::ptr::null_mut(), 8) }.expect_err("null");
    assert!(e.to_string().contains("null pointer"), "{e}");
}

#[test]
fn a_shutdown_handle_wakes_a_receiver_blocked_on_a_silent_sender() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let h = thread::spawn(move || {
        let t = TcpSender::connect(addr, 2).expect("connect");
        thread::sleep(Duration::from_secs(3));
        drop(t);
    });
    let mut t = TcpReceiver::accept(&listener, 2).expect("accept");
    let stop = t.shutdown_handle().expect("handle");
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        stop.shutdown();
    });
    let dev = HostDevice::new();
    let mut dst = dev.alloc_zeroed(MIB).expect("alloc");
    let start = Instant::now();
    let r = Receiver::new(&dev, RingConfig::new(MIB, 2).expect("ring"))
        .expect("receiver")
        .recv(&mut dst, &mut t);
    assert!(r.is_err(), "a shut-down receiver must fail");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    killer.join().expect("killer");
    h.join().expect("sender");
}
