//! Settings of an RDMA transport end and the striping of chunks over QPs and devices.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::TransportError;

/// Most queue pairs one transport opens to its peer.
pub const MAX_QPS: usize = 64;
/// Default bound on every wait for the peer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default number of queue pairs.
pub const DEFAULT_QPS: usize = 2;

/// How the queue pairs are connected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectMode {
    /// rdma_cm when the first device needs it (`caps().needs_rdma_cm`: iWARP, eRDMA's default
    /// mode), otherwise endpoints exchanged over the side channel.
    #[default]
    Auto,
    /// Endpoints (QP number, PSN, GID) exchanged over the side channel; RoCE/IB devices only.
    Manual,
    /// librdmacm: the receiver listens on each device's IP address, the sender connects.
    RdmaCm,
}

/// Settings of an RDMA transport end. Both ends must agree on `qps`, the connect mode they
/// resolve to, and the ring geometry (checked during setup, with an error naming both values).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RdmaConfig {
    /// Verbs devices to stripe over, e.g. `["erdma_0", "erdma_1"]`; QP `q` uses device
    /// `q % devices.len()`. In rdma_cm mode the receiver listens on one address per device and
    /// the sender's devices are picked by the route to those addresses.
    pub devices: Vec<String>,
    /// Queue pairs to the peer in total (≥ the number of devices); chunk `g` uses QP `g % qps`.
    pub qps: usize,
    /// GID index for manual connection (1 = the RoCE v2 IPv4 GID on rxe and usually on eRDMA).
    pub gid_index: u32,
    /// Port number (1-based).
    pub port: u8,
    /// How QPs are connected.
    pub connect: ConnectMode,
    /// rdma_cm only, receiver side: the IP address to listen on for each device (same order as
    /// `devices`). Empty: the IPv4 address in each device's GID at `gid_index`, or, where that GID
    /// holds none (eRDMA in iWARP mode), the first IPv4 address of the device's network interface.
    pub cm_addrs: Vec<IpAddr>,
    /// Bound on every wait for the peer (setup, credits, completions, the ACK, the next chunk).
    pub timeout: Duration,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            devices: Vec::new(),
            qps: DEFAULT_QPS,
            gid_index: 1,
            port: 1,
            connect: ConnectMode::Auto,
            cm_addrs: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

pub(super) fn config_err(
    field: &'static str,
    value: impl ToString,
    reason: impl Into<String>,
) -> TransportError {
    TransportError::Config {
        field,
        value: value.to_string(),
        reason: reason.into(),
    }
}

impl RdmaConfig {
    /// A configuration for `devices` with the defaults (2 QPs, GID index 1, automatic connect).
    pub fn new<S: Into<String>>(devices: impl IntoIterator<Item = S>) -> Self {
        RdmaConfig {
            devices: devices.into_iter().map(Into::into).collect(),
            ..RdmaConfig::default()
        }
    }

    /// Checks the settings without touching a device; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), TransportError> {
        if self.devices.is_empty() {
            return Err(config_err(
                "devices",
                "[]",
                "name at least one RDMA device (e.g. erdma_0, or rxe0 under soft-RoCE)",
            ));
        }
        for (i, d) in self.devices.iter().enumerate() {
            if d.trim().is_empty() {
                return Err(config_err(
                    "devices",
                    format!("{:?}", self.devices),
                    "device names must not be empty",
                ));
            }
            if self.devices[..i].contains(d) {
                return Err(config_err(
                    "devices",
                    format!("{:?}", self.devices),
                    format!(
                        "{d} is listed twice; stripe over distinct devices (raise `qps` for more QPs per device)"
                    ),
                ));
            }
        }
        if !(1..=MAX_QPS).contains(&self.qps) {
            return Err(config_err(
                "qps",
                self.qps,
                format!("use 1..={MAX_QPS} queue pairs"),
            ));
        }
        if self.qps < self.devices.len() {
            return Err(config_err(
                "qps",
                self.qps,
                format!(
                    "{} devices need at least {} queue pairs (one per device)",
                    self.devices.len(),
                    self.devices.len()
                ),
            ));
        }
        if self.port == 0 {
            return Err(config_err("port", 0, "ports are numbered from 1"));
        }
        if self.timeout.is_zero() {
            return Err(config_err(
                "timeout",
                "0s",
                "use a positive timeout (default 60 s)",
            ));
        }
        if !self.cm_addrs.is_empty() && self.cm_addrs.len() != self.devices.len() {
            return Err(config_err(
                "cm_addrs",
                format!("{:?}", self.cm_addrs),
                format!(
                    "give one address per device ({} devices) or none",
                    self.devices.len()
                ),
            ));
        }
        Ok(())
    }

    /// The striping map for this configuration.
    pub fn stripe(&self) -> Stripe {
        Stripe {
            qps: self.qps.max(1),
            devices: self.devices.len().max(1),
        }
    }
}

/// Which queue pair and device carry a chunk: chunk `g` → QP `g % qps` → device `qp % devices`.
/// Consecutive chunks therefore alternate between devices, so two NICs share the load evenly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    /// Queue pairs in total.
    pub qps: usize,
    /// Devices striped over.
    pub devices: usize,
}

impl Stripe {
    /// The QP that carries session-wide chunk `global`.
    pub fn qp_of(&self, global: u64) -> usize {
        (global % self.qps as u64) as usize
    }

    /// The device (index into [`RdmaConfig::devices`]) that QP `qp` lives on.
    pub fn device_of(&self, qp: usize) -> usize {
        qp % self.devices
    }

    /// The QPs living on device `device`.
    pub fn qps_on(&self, device: usize) -> Vec<usize> {
        (0..self.qps)
            .filter(|q| self.device_of(*q) == device)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation_names_the_field() {
        let e = RdmaConfig::default().validate().unwrap_err().to_string();
        assert!(e.contains("devices") && e.contains("erdma_0"), "{e}");
        let mut c = RdmaConfig::new(["erdma_0", "erdma_1"]);
        c.validate().unwrap();
        c.qps = 1;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("qps") && e.contains("at least 2"), "{e}");
        c.qps = MAX_QPS + 1;
        assert!(c.validate().unwrap_err().to_string().contains("1..=64"));
        let c = RdmaConfig::new(["a", "a"]);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("listed twice")
        );
        let mut c = RdmaConfig::new(["rxe0"]);
        c.timeout = Duration::ZERO;
        assert!(c.validate().unwrap_err().to_string().contains("timeout"));
        let mut c = RdmaConfig::new(["rxe0"]);
        c.cm_addrs = vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("one address per device")
        );
        let mut c = RdmaConfig::new(["rxe0"]);
        c.port = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn stripe_alternates_devices_and_covers_every_qp() {
        let mut c = RdmaConfig::new(["erdma_0", "erdma_1"]);
        c.qps = 4;
        let s = c.stripe();
        let qps: Vec<usize> = (0..8).map(|g| s.qp_of(g)).collect();
        assert_eq!(qps, [0, 1, 2, 3, 0, 1, 2, 3]);
        let devs: Vec<usize> = (0..8).map(|g| s.device_of(s.qp_of(g))).collect();
        assert_eq!(
            devs,
            [0, 1, 0, 1, 0, 1, 0, 1],
            "consecutive chunks alternate NICs"
        );
        assert_eq!(s.qps_on(0), [0, 2]);
        assert_eq!(s.qps_on(1), [1, 3]);
        let one = RdmaConfig::new(["rxe0"]).stripe();
        assert_eq!(one.qps_on(0), [0, 1]);
        assert_eq!(one.device_of(1), 0);
    }
}
