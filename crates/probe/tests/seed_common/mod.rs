//! Seed 000's figures, shared by the expectation and bench tests.

#![allow(dead_code)]

use probe::expect::ExpectationInputs;

/// Seed 000: ecs.ebmgn9gc.64xlarge, two eRDMA NICs of 190 Gb/s ("两块 eRDMA 网卡合计约 380 Gbps"),
/// no GPUDirect ("GPU Direct RDMA Disabled for HCA 0 'erdma_0'"), PCIe Gen5 GPUs, NCCL pinned to
/// erdma_0, NIC WRITE measured at 20.4 GiB/s ("实测单块网卡上基于 WRITE 的传输可以到 20.4 GiB/s").
pub fn seed_000() -> ExpectationInputs {
    ExpectationInputs {
        nic_line_gbps: 190.0,
        nics_per_node: 2,
        nics_used: 1,
        gpudirect: false,
        pcie_gen: 5,
        pcie_lanes: 16,
        nic_write_gib_s: Some(20.4),
        host_copy_gib_s: None,
        stream_gib_s: None,
    }
}

/// A GPUDirect node: 8 × 400 Gb/s ConnectX-7, PCIe Gen5 x16, nothing measured; `nics_used` of them.
pub fn gpudirect_8x400(nics_used: u32) -> ExpectationInputs {
    ExpectationInputs {
        nic_line_gbps: 400.0,
        nics_per_node: 8,
        nics_used,
        gpudirect: true,
        nic_write_gib_s: None,
        ..seed_000()
    }
}
