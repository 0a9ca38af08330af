//! Device capabilities and vendor profiles.
//!
//! [`Caps`] is computed once when a device is opened, from `ibv_query_device` plus a vendor profile that
//! records what the device cannot do even when its attributes suggest otherwise. The eRDMA facts encoded
//! here: RC only (no UD, no SRQ), no extended verbs (`ibv_wr_*`, `ibv_create_qp_ex`, `ibv_create_cq_ex`),
//! 6 send SGEs and 1 receive SGE, 96-byte inline data, at most 8192 send WRs, and a total registered memory
//! cap of about 64 GiB (split large registrations).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// PCI vendor id of Alibaba Cloud eRDMA.
pub const ERDMA_VENDOR_ID: u32 = 0x1ded;
/// PCI device (part) id of eRDMA.
pub const ERDMA_PART_ID: u32 = 0x107f;
/// Mellanox / NVIDIA vendor id (IEEE OUI 0x02c9).
pub const MELLANOX_VENDOR_ID: u32 = 0x02c9;
/// Vendor id reported by the kernel's soft-RoCE driver (rdma_rxe).
pub const RXE_VENDOR_ID: u32 = 0x00ff_ffff;
/// Vendor id reported by the kernel's soft-iWARP driver (siw): ASCII "bmt".
pub const SIW_VENDOR_ID: u32 = 0x0062_6d74;

/// Which vendor profile applies to a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// Alibaba Cloud elastic RDMA (PCI 1ded:107f, devices `erdma_*`).
    Erdma,
    /// NVIDIA/Mellanox ConnectX (`mlx5_*`).
    Mlx5,
    /// Linux soft-RoCE (`rxe*`).
    Rxe,
    /// Linux soft-iWARP (`siw*`).
    Siw,
    /// Anything else: attributes are taken as reported.
    Unknown,
}

impl Vendor {
    /// Classifies a device by PCI vendor/part id first, then by its name prefix.
    pub fn detect(name: &str, vendor_id: u32, vendor_part_id: u32) -> Vendor {
        if vendor_id == ERDMA_VENDOR_ID && vendor_part_id == ERDMA_PART_ID
            || name.starts_with("erdma")
        {
            Vendor::Erdma
        } else if name.starts_with("mlx5") || vendor_id == MELLANOX_VENDOR_ID {
            Vendor::Mlx5
        } else if name.starts_with("rxe") || vendor_id == RXE_VENDOR_ID {
            Vendor::Rxe
        } else if name.starts_with("siw") || vendor_id == SIW_VENDOR_ID {
            Vendor::Siw
        } else {
            Vendor::Unknown
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Erdma => "erdma",
            Vendor::Mlx5 => "mlx5",
            Vendor::Rxe => "rxe",
            Vendor::Siw => "siw",
            Vendor::Unknown => "unknown",
        })
    }
}

/// A feature that a device may lack; named in [`Error::Unsupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// Unreliable datagram queue pairs.
    Ud,
    /// Shared receive queues.
    Srq,
    /// Extended verbs (`ibv_wr_*`, `ibv_create_qp_ex`, `ibv_create_cq_ex`).
    ExtendedVerbs,
    /// Atomic operations (compare-and-swap, fetch-and-add).
    Atomics,
    /// Connecting a QP by hand with an out-of-band endpoint (iWARP devices must use rdma_cm).
    ManualConnect,
    /// RDMA WRITE with immediate data (siw has none: plain iWARP carries no immediate).
    WriteWithImm,
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Feature::Ud => "UD queue pairs",
            Feature::Srq => "shared receive queues (SRQ)",
            Feature::ExtendedVerbs => {
                "extended verbs (ibv_wr_*, ibv_create_qp_ex, ibv_create_cq_ex)"
            }
            Feature::Atomics => "atomic operations",
            Feature::ManualConnect => "manual (out-of-band) QP connection",
            Feature::WriteWithImm => "RDMA WRITE with immediate data",
        })
    }
}

/// Transport of a device (from `ibv_device.transport_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// InfiniBand or RoCE.
    Ib,
    /// iWARP (eRDMA's default mode, siw): connections need rdma_cm.
    Iwarp,
    /// Something else (usNIC, unspecified).
    Other,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Ib => "InfiniBand",
            Transport::Iwarp => "iWARP",
            Transport::Other => "other",
        })
    }
}

/// The raw limits of `ibv_query_device` that [`Caps`] is derived from (kept separate so the derivation
/// can be unit-tested without a device).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLimits {
    /// `max_qp`.
    pub max_qp: u32,
    /// `max_qp_wr`.
    pub max_qp_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `max_sge_rd`.
    pub max_sge_rd: u32,
    /// `max_cq`.
    pub max_cq: u32,
    /// `max_cqe`.
    pub max_cqe: u32,
    /// `max_mr`.
    pub max_mr: u32,
    /// `max_mr_size`.
    pub max_mr_size: u64,
    /// `max_qp_rd_atom`.
    pub max_qp_rd_atom: u32,
    /// `max_srq`.
    pub max_srq: u32,
    /// `atomic_cap != IBV_ATOMIC_NONE`.
    pub atomics: bool,
    /// `device_cap_flags & IBV_DEVICE_UD_AV_PORT_ENFORCE`-style hint that UD exists is not reliable, so UD
    /// support is decided by the profile; this records `max_ah > 0`.
    pub has_ah: bool,
}

/// What a device can do, probed at open. Posts and object creation are checked against these limits
/// before the driver sees them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    /// Vendor profile.
    pub vendor: Vendor,
    /// Transport.
    pub transport: Transport,
    /// Reliable connected QPs (always true for the devices this crate knows).
    pub rc: bool,
    /// Unreliable datagram QPs.
    pub ud: bool,
    /// Shared receive queues.
    pub srq: bool,
    /// Extended verbs. eRDMA has none; this crate only uses classic verbs either way.
    pub extended_verbs: bool,
    /// Atomic operations.
    pub atomics: bool,
    /// QPs must be connected through rdma_cm (iWARP).
    pub needs_rdma_cm: bool,
    /// RDMA WRITE_WITH_IMM is supported (all but siw; eRDMA has it in iWARP mode too).
    #[serde(default = "yes")]
    pub write_imm: bool,
    /// Maximum number of QPs.
    pub max_qp: u32,
    /// Maximum outstanding send WRs per QP.
    pub max_send_wr: u32,
    /// Maximum outstanding receive WRs per QP.
    pub max_recv_wr: u32,
    /// Maximum SGEs in one send WR.
    pub max_send_sge: u32,
    /// Maximum SGEs in one receive WR.
    pub max_recv_sge: u32,
    /// Maximum inline data bytes in one send WR (0: no inline).
    pub max_inline: u32,
    /// Maximum CQ entries.
    pub max_cqe: u32,
    /// Maximum size of one memory region.
    pub max_mr_size: u64,
    /// Total registered bytes the device accepts, when the vendor caps it (eRDMA: ~64 GiB).
    pub max_total_mr_bytes: Option<u64>,
    /// Maximum outstanding RDMA READs per QP (initiator and responder).
    pub max_rd_atomic: u32,
}

fn yes() -> bool {
    true
}

/// eRDMA's per-WR send SGE limit.
pub const ERDMA_MAX_SEND_SGE: u32 = 6;
/// eRDMA's per-WR receive SGE limit.
pub const ERDMA_MAX_RECV_SGE: u32 = 1;
/// eRDMA's inline data limit in bytes.
pub const ERDMA_MAX_INLINE: u32 = 96;
/// eRDMA's send queue depth limit.
pub const ERDMA_MAX_SEND_WR: u32 = 8192;
/// eRDMA's total registered memory cap (64 GiB).
pub const ERDMA_MAX_TOTAL_MR: u64 = 64 << 30;

impl Caps {
    /// Derives the capabilities from the device limits and the vendor profile. `probed_inline` is the
    /// inline size a probe QP accepted (None if no probe ran).
    pub fn derive(
        vendor: Vendor,
        transport: Transport,
        lim: &DeviceLimits,
        probed_inline: Option<u32>,
    ) -> Caps {
        let base_inline = probed_inline.unwrap_or(match vendor {
            Vendor::Erdma => ERDMA_MAX_INLINE,
            _ => 0,
        });
        let mut caps = Caps {
            vendor,
            transport,
            rc: true,
            ud: transport == Transport::Ib && lim.has_ah,
            srq: lim.max_srq > 0,
            extended_verbs: true,
            atomics: lim.atomics,
            needs_rdma_cm: transport == Transport::Iwarp,
            write_imm: true,
            max_qp: lim.max_qp,
            max_send_wr: lim.max_qp_wr,
            max_recv_wr: lim.max_qp_wr,
            max_send_sge: lim.max_sge,
            max_recv_sge: lim.max_sge,
            max_inline: base_inline,
            max_cqe: lim.max_cqe,
            max_mr_size: lim.max_mr_size,
            max_total_mr_bytes: None,
            max_rd_atomic: lim.max_qp_rd_atom,
        };
        match vendor {
            Vendor::Erdma => {
                caps.ud = false;
                caps.srq = false;
                caps.extended_verbs = false;
                caps.max_send_sge = caps.max_send_sge.min(ERDMA_MAX_SEND_SGE);
                caps.max_recv_sge = caps.max_recv_sge.min(ERDMA_MAX_RECV_SGE);
                caps.max_inline = caps.max_inline.min(ERDMA_MAX_INLINE);
                caps.max_send_wr = caps.max_send_wr.min(ERDMA_MAX_SEND_WR);
                caps.max_total_mr_bytes = Some(ERDMA_MAX_TOTAL_MR);
            }
            Vendor::Siw => {
                caps.ud = false;
                caps.needs_rdma_cm = true;
                // The kernel's siw refuses IB_WR_RDMA_WRITE_WITH_IMM with EINVAL.
                caps.write_imm = false;
            }
            Vendor::Mlx5 | Vendor::Rxe | Vendor::Unknown => {}
        }
        caps
    }

    /// Fails with [`Error::Unsupported`] when the device lacks `feature`.
    pub fn require(&self, device: &str, feature: Feature) -> Result<()> {
        let (ok, hint) = match feature {
            Feature::Ud => (
                self.ud,
                "use RC queue pairs (eRDMA is RC only; UCX/NIXL need a patched UCX)",
            ),
            Feature::Srq => (
                self.srq,
                "post receives per QP instead of on a shared receive queue",
            ),
            Feature::ExtendedVerbs => (
                self.extended_verbs,
                "use the classic ibv_post_send/ibv_create_qp/ibv_create_cq path",
            ),
            Feature::Atomics => (
                self.atomics,
                "implement the update with SEND/RECV or WRITE_WITH_IMM",
            ),
            Feature::ManualConnect => (
                !self.needs_rdma_cm,
                "connect through rdma_cm (erdma_verbs::cm)",
            ),
            Feature::WriteWithImm => (
                self.write_imm,
                "signal the peer with a SEND after the WRITE (a QP completes its WRs in order)",
            ),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::Unsupported {
                device: device.to_owned(),
                vendor: self.vendor,
                feature,
                hint,
            })
        }
    }

    /// Fails with [`Error::ExceedsCaps`] when `requested > limit`.
    pub(crate) fn limit(
        device: &str,
        what: &'static str,
        requested: u64,
        limit: u64,
    ) -> Result<()> {
        if requested > limit {
            Err(Error::ExceedsCaps {
                device: device.to_owned(),
                what,
                requested,
                limit,
            })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> DeviceLimits {
        DeviceLimits {
            max_qp: 1024,
            max_qp_wr: 32768,
            max_sge: 32,
            max_sge_rd: 32,
            max_cq: 1024,
            max_cqe: 1 << 20,
            max_mr: 1 << 20,
            max_mr_size: u64::MAX,
            max_qp_rd_atom: 128,
            max_srq: 1024,
            atomics: true,
            has_ah: true,
        }
    }

    #[test]
    fn vendor_detection_by_pci_id_and_name() {
        assert_eq!(Vendor::detect("eth_rdma0", 0x1ded, 0x107f), Vendor::Erdma);
        assert_eq!(Vendor::detect("erdma_0", 0, 0), Vendor::Erdma);
        assert_eq!(Vendor::detect("mlx5_0", 0x02c9, 4129), Vendor::Mlx5);
        assert_eq!(Vendor::detect("rxe0", 0xffffff, 0), Vendor::Rxe);
        assert_eq!(Vendor::detect("siw0", 0x626d74, 0), Vendor::Siw);
        assert_eq!(Vendor::detect("bnxt_re0", 0x14e4, 0x1750), Vendor::Unknown);
    }

    #[test]
    fn erdma_profile_clamps_generous_attributes() {
        let c = Caps::derive(Vendor::Erdma, Transport::Iwarp, &limits(), Some(256));
        assert!(!c.ud && !c.srq && !c.extended_verbs);
        assert!(c.rc && c.needs_rdma_cm);
        assert_eq!(c.max_send_sge, 6);
        assert_eq!(c.max_recv_sge, 1);
        assert_eq!(c.max_inline, 96);
        assert_eq!(c.max_send_wr, 8192);
        assert_eq!(c.max_total_mr_bytes, Some(64 << 30));
        let e = c.require("erdma_0", Feature::Srq).unwrap_err();
        assert!(matches!(
            e,
            Error::Unsupported {
                feature: Feature::Srq,
                ..
            }
        ));
        assert!(e.to_string().contains("erdma_0"), "{e}");
        assert!(
            c.require("erdma_0", Feature::Ud)
                .unwrap_err()
                .is_unsupported()
        );
        assert!(c.require("erdma_0", Feature::ExtendedVerbs).is_err());
        assert!(c.require("erdma_0", Feature::ManualConnect).is_err());
    }

    #[test]
    fn erdma_profile_without_probe_uses_96_inline() {
        let c = Caps::derive(Vendor::Erdma, Transport::Ib, &limits(), None);
        assert_eq!(c.max_inline, 96);
        assert!(!c.needs_rdma_cm);
    }

    #[test]
    fn rxe_profile_keeps_attributes() {
        let c = Caps::derive(Vendor::Rxe, Transport::Ib, &limits(), Some(256));
        assert!(c.ud && c.srq && c.extended_verbs && c.atomics);
        assert_eq!(c.max_send_sge, 32);
        assert_eq!(c.max_inline, 256);
        assert_eq!(c.max_total_mr_bytes, None);
        assert!(c.require("rxe0", Feature::ManualConnect).is_ok());
    }

    #[test]
    fn siw_needs_rdma_cm() {
        let c = Caps::derive(Vendor::Siw, Transport::Iwarp, &limits(), None);
        assert!(c.needs_rdma_cm && !c.ud);
        let e = c.require("siw0", Feature::WriteWithImm).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Unsupported {
                    feature: Feature::WriteWithImm,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("SEND after the WRITE"), "{e}");
        for v in [Vendor::Erdma, Vendor::Rxe, Vendor::Mlx5] {
            let t = if v == Vendor::Erdma {
                Transport::Iwarp
            } else {
                Transport::Ib
            };
            assert!(
                Caps::derive(v, t, &limits(), None)
                    .require("d", Feature::WriteWithImm)
                    .is_ok()
            );
        }
    }

    #[test]
    fn limit_check() {
        assert!(Caps::limit("d", "x", 6, 6).is_ok());
        let e = Caps::limit("erdma_0", "send SGEs per work request", 7, 6).unwrap_err();
        assert_eq!(
            e.to_string(),
            "send SGEs per work request: requested 7, limit 6 on erdma_0"
        );
    }

    #[test]
    fn caps_roundtrip_json() {
        let c = Caps::derive(Vendor::Erdma, Transport::Iwarp, &limits(), None);
        let s = serde_json::to_string(&c).unwrap();
        assert!(s.contains("\"vendor\":\"erdma\""), "{s}");
        let back: Caps = serde_json::from_str(&s).unwrap();
        assert_eq!(back, c);
    }
}
