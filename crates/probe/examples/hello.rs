//! Hello, probe: gather this host's RDMA facts (devices, ports, GIDs, `/dev/infiniband`, memlock,
//! CAP_IPC_LOCK, NCCL, GPUs, GPUDirect), judge them with this process's `NCCL_*` environment, and print
//! the report. Runs anywhere: on a host without RDMA the checks say what is missing and how to fix it.
//!
//! `cargo run -p rdmakit-probe --example hello` (what `rdmakit probe` prints, without the CLI).

use probe::{HostFacts, ProbeOptions, Report};

fn main() -> Result<(), probe::ProbeError> {
    let facts = HostFacts::gather(&ProbeOptions::live())?;
    println!("{}", Report::from(&facts).render_table());
    println!("overall: {}", facts.verdict());
    Ok(())
}
