//! `rdmakit probe`: this host's RDMA facts (devices, memlock, NCCL, GPUs), judged by the probe crate. Named
//! `host_probe` to keep it apart from the probe crate and the workflows' `probe::` module.

use clap::Args;

use super::{CmdResult, Failure, Global, code};

/// `rdmakit probe` arguments.
#[derive(Debug, Args)]
pub struct HostProbeArgs {
    /// Print facts as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Gathers and prints this host's facts.
pub fn host_probe(_g: &Global, a: HostProbeArgs) -> CmdResult {
    // live(): the NCCL_* environment plus what libibverbs itself sees (a device in sysfs that libibverbs
    // cannot open means the image lacks its provider).
    let opts = probe::ProbeOptions::live();
    let facts = probe::HostFacts::gather(&opts).map_err(Failure::input)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&facts).map_err(Failure::input)?
        );
    } else {
        print!(
            "{}",
            probe::Report::from_checks("rdmakit probe: this host", &facts.checks).render_table()
        );
    }
    Ok(if facts.verdict() >= probe::Verdict::Fail {
        code::FINDINGS
    } else {
        code::OK
    })
}
