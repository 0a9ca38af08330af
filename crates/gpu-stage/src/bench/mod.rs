//! Benchmarks behind `rdmakit bench` and the `stage_bench` example: in-process, pinned copies, two
//! processes over TCP and (feature `rdma`) over RDMA (`run_rdma_receiver` / `run_rdma_sender` on
//! the two nodes). Every run verifies the data that arrived against a checksum of what was sent, on
//! every iteration, warm-ups included; a mismatch shows as `verified: false` with fewer
//! `verified_iterations`, never as a plain figure.
//!
//! Files: `config.rs` ([`BenchConfig`]), `result.rs` ([`BenchResult`] and its verification),
//! `local.rs` (the one-process harness) with `inprocess.rs` and `pinned.rs` (the copy-engine
//! peers), `two_process.rs` (the control connection between sender and receiver processes) with
//! `tcp.rs` and `rdma.rs`.

mod config;
mod inprocess;
mod local;
mod pinned;
#[cfg(feature = "rdma")]
mod rdma;
mod result;
mod tcp;
mod two_process;

pub use config::{Backend, BenchConfig};
pub use inprocess::run_inprocess;
pub use pinned::{Direction, run_pinned_copy, run_pinned_floor};
#[cfg(feature = "rdma")]
pub use rdma::{run_rdma_receiver, run_rdma_sender};
pub use result::BenchResult;
pub use tcp::{run_tcp_receiver, run_tcp_sender};

/// Small host-backend settings and a corrupting device, for the benchmarks' tests.
#[cfg(test)]
mod test_cfg {
    use super::{Backend, BenchConfig};
    use crate::config::{MIB, RingConfig};
    use crate::device::HostDevice;

    pub(super) fn host_cfg(bytes: usize) -> BenchConfig {
        BenchConfig {
            bytes,
            ring: RingConfig::new(MIB, 4).unwrap(),
            warmup: 1,
            iterations: 2,
            backend: Backend::Host,
            connections: 2,
            ..BenchConfig::default()
        }
    }

    pub(super) fn corrupting(n: usize) -> HostDevice {
        HostDevice::with_faults(crate::device::HostFaults {
            corrupt_h2d_at: Some(n),
            ..crate::device::HostFaults::default()
        })
    }
}
