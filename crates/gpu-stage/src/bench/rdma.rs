//! Two processes over the RDMA transport (feature `rdma`).

use std::net::{TcpListener, ToSocketAddrs};

use super::config::{Backend, BenchConfig, check_cfg};
use super::result::BenchResult;
use super::two_process::{control_io, two_process_receiver, two_process_sender};
use crate::device::{CudaDevice, Device, HostDevice};
use crate::error::StageError;
use crate::transport::rdma::{RdmaConfig, RdmaReceiver, RdmaSender};

/// Receiving process of the two-process RDMA benchmark (feature `rdma`): accepts the control
/// connection and then the RDMA transport's side channel on `listener`, receives into GPU
/// `cfg.dst_device` (or host memory with [`Backend::Host`]) through a ring registered with the
/// devices in `rdma`, and verifies every iteration against the pattern's checksum. The result is
/// named `rdma_receiver`; `connections` holds the number of queue pairs. Fails with the
/// transport's error (a peer that vanished, a mismatched setting, a timeout) or
/// [`StageError::Verify`].
pub fn run_rdma_receiver(
    cfg: &BenchConfig,
    rdma: &RdmaConfig,
    listener: &TcpListener,
) -> Result<BenchResult, StageError> {
    check_cfg(cfg)?;
    rdma.validate()?;
    match cfg.backend {
        Backend::Cuda => rdma_receiver_with(&CudaDevice::new(cfg.dst_device)?, cfg, rdma, listener),
        Backend::Host => rdma_receiver_with(&HostDevice::new(), cfg, rdma, listener),
    }
}

fn rdma_receiver_with<D: Device>(
    dev: &D,
    cfg: &BenchConfig,
    rdma: &RdmaConfig,
    listener: &TcpListener,
) -> Result<BenchResult, StageError> {
    let mut devices = Vec::new();
    let mut r = two_process_receiver(dev, cfg, listener, "RDMA", "rdma_receiver", |ring| {
        let t = RdmaReceiver::accept(listener, rdma, ring)?;
        devices = t.devices();
        Ok::<_, StageError>(t)
    })?;
    r.connections = Some(rdma.qps);
    r.devices.extend(devices);
    Ok(r)
}

/// Sending process of the two-process RDMA benchmark (feature `rdma`): connects to the receiver
/// at `addr` (control connection, then the transport's side channel), sends from GPU
/// `cfg.src_device` (or host memory), times each transfer from the first device→host copy to the
/// receiver's ACK (data on the receiving device), and returns the result (named `rdma`,
/// `connections` = queue pairs, `devices` = both staging devices then the local RDMA devices)
/// with the receiver's verification in `verified`.
pub fn run_rdma_sender(
    cfg: &BenchConfig,
    rdma: &RdmaConfig,
    addr: impl ToSocketAddrs,
) -> Result<BenchResult, StageError> {
    check_cfg(cfg)?;
    rdma.validate()?;
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(control_io("resolve"))?
        .collect();
    match cfg.backend {
        Backend::Cuda => rdma_sender_with(&CudaDevice::new(cfg.src_device)?, cfg, rdma, &addrs),
        Backend::Host => rdma_sender_with(&HostDevice::new(), cfg, rdma, &addrs),
    }
}

fn rdma_sender_with<D: Device>(
    dev: &D,
    cfg: &BenchConfig,
    rdma: &RdmaConfig,
    addrs: &[std::net::SocketAddr],
) -> Result<BenchResult, StageError> {
    let (mut r, t) = two_process_sender(dev, cfg, addrs, "rdma", |ring| {
        RdmaSender::connect(addrs, rdma, ring)
    })?;
    r.connections = Some(t.qps());
    r.devices.extend(t.devices());
    Ok(r)
}
