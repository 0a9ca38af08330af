//! Hello, gpu-stage: one buffer through the whole pipeline on the host-memory backend, so no GPU
//! is needed. A [`Sender`] copies the source chunk by chunk into its staging ring and hands each
//! filled buffer to a TCP transport; a [`Receiver`] on another thread takes the chunks into its own
//! ring and copies them to the destination. Both ends run in this process, over loopback; with
//! GPUs, swap `HostDevice::new()` for `CudaDevice::new(0)?` and nothing else changes.
//!
//! ```text
//! cargo run -p gpu-stage --example hello
//! ```

use std::net::TcpListener;

use gpu_stage::{
    Device, HostDevice, MIB, Receiver, RingConfig, Sender, StageError, TcpReceiver, TcpSender,
};

/// Parallel TCP connections; both ends must use the same number.
const CONNECTIONS: usize = 2;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = HostDevice::new();
    // Three full 1 MiB chunks and a short last one of 5 bytes.
    let data: Vec<u8> = (0..3 * MIB + 5).map(|i| (i % 251) as u8).collect();
    let src = dev.upload(&data)?;
    let mut dst = dev.alloc_zeroed(data.len())?;

    // Two 1 MiB staging buffers on each side.
    let ring = RingConfig::new(MIB, 2)?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let (sent, received) = std::thread::scope(|s| -> Result<_, StageError> {
        let receiving = s.spawn(|| -> Result<_, StageError> {
            let mut transport = TcpReceiver::accept(&listener, CONNECTIONS)?;
            Receiver::new(&dev, ring)?.recv(&mut dst, &mut transport)
        });
        let mut transport = TcpSender::connect(addr, CONNECTIONS)?;
        let sent = Sender::new(&dev, ring)?.send(&src, &mut transport)?;
        let received = receiving
            .join()
            .map_err(|_| StageError::Aborted("the receiving thread panicked".into()))??;
        Ok((sent, received))
    })?;

    if dev.download(&dst)? != data {
        return Err("the destination does not hold the source's bytes".into());
    }
    println!(
        "sent {} bytes in {} chunks, received {} bytes in {} chunks over {CONNECTIONS} TCP \
         connections: the destination matches the source",
        sent.bytes, sent.chunks, received.bytes, received.chunks
    );
    Ok(())
}
