//! The setup steps both ends take, which differ between them only in who speaks first: the plan
//! derived from the settings, the side channel during setup, device opening and checks, QP creation
//! and connection (by endpoint exchange or rdma_cm), and ring registration.

use std::io::BufReader;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use erdma_verbs::{
    Access, Context, Endpoint, Init, MemoryRegion, ProtectionDomain, QueuePair, Rts,
};

use super::config::{ConnectMode, RdmaConfig, Stripe, config_err};
use super::plumbing::{Dev, Shared, SharedQp, SideWriter, Workers, post_recvs};
use super::wire::Wiring;
use crate::config::RingConfig;
use crate::error::TransportError;
use crate::ring::StagingRing;

/// Queue depth per QP: a full ring of writes or credits in flight, plus room for the stragglers.
pub(super) fn qp_depth(ring: &RingConfig) -> u32 {
    (2 * ring.slots + 16).min(u32::MAX as usize) as u32
}
/// Resolves [`ConnectMode::Auto`] by opening the first device.
pub(super) fn resolve_wiring(cfg: &RdmaConfig) -> Result<Wiring, TransportError> {
    match cfg.connect {
        ConnectMode::Manual => Ok(Wiring::Manual),
        ConnectMode::RdmaCm => Ok(Wiring::RdmaCm),
        ConnectMode::Auto => {
            let name = &cfg.devices[0];
            let ctx = Context::open(name)
                .map_err(TransportError::rdma(format!("opening RDMA device {name}")))?;
            Ok(if ctx.caps().needs_rdma_cm {
                Wiring::RdmaCm
            } else {
                Wiring::Manual
            })
        }
    }
}

pub(super) fn open_devices(cfg: &RdmaConfig, cqe: u32) -> Result<Vec<Dev>, TransportError> {
    cfg.devices
        .iter()
        .map(|name| {
            let ctx = Context::open(name)
                .map_err(TransportError::rdma(format!("opening RDMA device {name}")))?;
            Dev::new(ctx, cqe)
        })
        .collect()
}

pub(super) fn check_msg_size(
    dev: &Dev,
    cfg: &RdmaConfig,
    ring: &RingConfig,
) -> Result<(), TransportError> {
    let port = dev
        .ctx
        .query_port(cfg.port)
        .map_err(TransportError::rdma(format!(
            "{}: querying port {}",
            dev.ctx.name(),
            cfg.port
        )))?;
    if port.max_msg_sz > 0 && (ring.chunk_bytes as u64) > u64::from(port.max_msg_sz) {
        return Err(config_err(
            "chunk_bytes",
            ring.chunk_bytes,
            format!(
                "{} carries at most {} bytes per message; use a smaller --chunk",
                dev.ctx.name(),
                port.max_msg_sz
            ),
        ));
    }
    Ok(())
}

/// Registers every slot of `ring` on `pd`.
pub(super) fn register_ring(
    pd: &Arc<ProtectionDomain>,
    ring: &Arc<StagingRing>,
    access: Access,
) -> Result<Vec<Arc<MemoryRegion>>, TransportError> {
    if access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC) {
        // Before any key exists: from here on a peer may write a slot at any time (issue 26, F4).
        ring.expose_to_remote_writes();
    }
    (0..ring.slots())
        .map(|slot| {
            // SAFETY: the region stays valid while the ring lives, and the MR keeps an Arc of the
            // ring as its owner, so the memory outlives the registration. The NIC touches a slot
            // only between acquire and release under the gate protocol (writes are posted for
            // slots the transport owns; an honest peer writes only into slots it holds a credit for,
            // and for a dishonest one the ring was marked remotely writable above, which turns the
            // safe slices off).
            let region = unsafe { ring.raw_region(slot) }.ok_or_else(|| {
                TransportError::Protocol(format!("ring slot {slot} does not exist"))
            })?;
            // SAFETY: see above; nothing in this crate calls the region's slice accessors.
            unsafe {
                MemoryRegion::register_external(
                    pd,
                    region.addr,
                    region.len,
                    access,
                    Arc::clone(ring),
                )
            }
            .map_err(TransportError::rdma(format!(
                "{}: registering ring slot {slot} ({} bytes)",
                pd.context().name(),
                region.len
            )))
        })
        .collect()
}

/// Where an rdma_cm receiver without `cm_addrs` listens for device `ctx`: the IPv4 address in its GID
/// at `gid_index` (RoCE, rxe), else the first IPv4 address of its network interface (eRDMA in iWARP
/// mode may have no such GID); an error naming what was tried, and `--cm-addr`, otherwise.
pub(super) fn listen_ip(ctx: &Context, cfg: &RdmaConfig) -> Result<IpAddr, TransportError> {
    let gid = match ctx.query_gid(cfg.port, cfg.gid_index) {
        Ok(gid) => match Ipv6Addr::from(gid.0).to_ipv4_mapped() {
            Some(ip) => return Ok(IpAddr::V4(ip)),
            None => format!("its GID {} ({gid}) holds no IPv4 address", cfg.gid_index),
        },
        Err(e) => format!("its GID {} cannot be read ({e})", cfg.gid_index),
    };
    let netdevs = ctx.netdevs(cfg.port);
    let from_netdev = match ctx.ipv4_addrs(cfg.port) {
        Ok(ips) => match ips.first() {
            Some(ip) => return Ok(IpAddr::V4(*ip)),
            None if netdevs.is_empty() => {
                "no network interface was found for it in sysfs".to_string()
            }
            None => format!("its network interface(s) {netdevs:?} have no IPv4 address"),
        },
        Err(e) => format!("its network interfaces cannot be listed ({e})"),
    };
    Err(config_err(
        "cm_addrs",
        "[]",
        format!(
            "no address to listen on for {}: {gid}, and {from_netdev}; give the device's IP address for rdma_cm (--cm-addr)",
            ctx.name()
        ),
    ))
}

/// The side channel of a session during setup: the writer every worker shares later, and the reader
/// (with a read timeout, so that a silent peer fails setup after `cfg.timeout`).
#[derive(Debug)]
pub(super) struct SideChannel {
    pub(super) writer: Arc<SideWriter>,
    pub(super) reader: BufReader<TcpStream>,
}

impl SideChannel {
    /// Takes the connected `stream` to `peer` (named in every message): no Nagle delay, reads
    /// bounded by `timeout` until [`SideChannel::into_reader`].
    pub(super) fn open(
        stream: TcpStream,
        peer: &str,
        timeout: Duration,
    ) -> Result<SideChannel, TransportError> {
        stream
            .set_nodelay(true)
            .map_err(TransportError::io("setting TCP_NODELAY"))?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(TransportError::io("setting a read timeout"))?;
        let writer = Arc::new(SideWriter::new(
            stream
                .try_clone()
                .map_err(TransportError::io("cloning a socket"))?,
            peer,
        ));
        Ok(SideChannel {
            writer,
            reader: BufReader::new(stream),
        })
    }

    /// Tells the peer why setup failed (best effort) before handing the error back.
    pub(super) fn or_abort<T>(&self, r: Result<T, TransportError>) -> Result<T, TransportError> {
        r.inspect_err(|e| self.writer.send_abort(&e.to_string()))
    }

    /// Setup is over: the reader goes to the side-channel thread, which waits for the peer's next
    /// message for as long as it takes (a transfer may be far away; EOF still ends the wait at once),
    /// waking every [`SIDE_POLL`](super::wire::SIDE_POLL) to notice a stop or a stalled message
    /// ([`read_line_after_setup`](super::wire::read_line_after_setup)).
    pub(super) fn into_reader(self) -> Result<BufReader<TcpStream>, TransportError> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(super::wire::SIDE_POLL))
            .map_err(TransportError::io(
                "setting the side channel's poll timeout",
            ))?;
        Ok(self.reader)
    }
}

/// What both ends derive from their settings before talking to the peer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    pub(super) wiring: Wiring,
    /// Send and receive queue depth per QP.
    pub(super) depth: u32,
    /// Entries per completion queue (one CQ per device, shared by its QPs).
    pub(super) cqe: u32,
    pub(super) stripe: Stripe,
    pub(super) ring: RingConfig,
}

impl Plan {
    /// Resolves the connect mode (opening the first device for [`super::ConnectMode::Auto`]).
    pub(super) fn new(cfg: &RdmaConfig, ring: RingConfig) -> Result<Plan, TransportError> {
        let depth = qp_depth(&ring);
        Ok(Plan {
            wiring: resolve_wiring(cfg)?,
            depth,
            cqe: depth.saturating_mul(2).saturating_mul(cfg.qps as u32),
            stripe: cfg.stripe(),
            ring,
        })
    }
}

/// The connected queue pairs of one end and the devices they live on.
#[derive(Debug)]
pub(super) struct Links {
    pub(super) devs: Vec<Dev>,
    pub(super) qps: Vec<SharedQp>,
    /// QP `q`'s device: an index into `devs`.
    pub(super) qp_dev: Vec<usize>,
}

impl Links {
    /// Names of the devices in use.
    pub(super) fn device_names(&self) -> Vec<String> {
        self.devs.iter().map(|d| d.ctx.name().to_string()).collect()
    }

    /// The QPs on device `d`, with their QP index.
    pub(super) fn qps_on(&self, d: usize) -> Vec<(usize, SharedQp)> {
        self.qps
            .iter()
            .enumerate()
            .filter(|(q, _)| self.qp_dev[*q] == d)
            .map(|(q, qp)| (q, Arc::clone(qp)))
            .collect()
    }

    /// The device QP `q` lives on.
    pub(super) fn dev_of(&self, q: usize) -> &Dev {
        &self.devs[self.qp_dev[q]]
    }
}

/// Manual wiring before the peer's endpoints are known: every device open and checked, `cfg.qps`
/// QPs in INIT (QP `q` on device `stripe.device_of(q)`) with their receives posted.
#[derive(Debug)]
pub(super) struct ManualQps {
    devs: Vec<Dev>,
    qps: Vec<QueuePair<Init>>,
    qp_dev: Vec<usize>,
    /// Our endpoints, in QP order, for the peer.
    pub(super) endpoints: Vec<Endpoint>,
}

impl ManualQps {
    pub(super) fn create(
        cfg: &RdmaConfig,
        plan: &Plan,
        peer: &str,
    ) -> Result<ManualQps, TransportError> {
        let devs = open_devices(cfg, plan.cqe)?;
        for d in &devs {
            check_msg_size(d, cfg, &plan.ring)?;
        }
        let mut qps = Vec::with_capacity(cfg.qps);
        let mut qp_dev = Vec::with_capacity(cfg.qps);
        let mut endpoints = Vec::with_capacity(cfg.qps);
        for q in 0..cfg.qps {
            let di = plan.stripe.device_of(q);
            let d = &devs[di];
            let mut qp = d
                .builder(cfg, plan.depth)
                .build(&d.pd)
                .map_err(TransportError::rdma(format!(
                    "{}: creating QP {q}",
                    d.ctx.name()
                )))?;
            // Credits (sender) and chunks (receiver) may arrive as soon as the peer connected.
            post_recvs(&mut qp, q, plan.depth, peer)?;
            endpoints.push(qp.endpoint().map_err(TransportError::rdma(format!(
                "{}: reading QP {q}'s endpoint",
                d.ctx.name()
            )))?);
            qps.push(qp);
            qp_dev.push(di);
        }
        Ok(ManualQps {
            devs,
            qps,
            qp_dev,
            endpoints,
        })
    }

    /// Connects QP `q` to the peer's `remote[q]` (the caller checked there is one per QP).
    pub(super) fn connect(self, remote: &[Endpoint], peer: &str) -> Result<Links, TransportError> {
        let mut qps = Vec::with_capacity(self.qps.len());
        for (q, (qp, ep)) in self.qps.into_iter().zip(remote).enumerate() {
            let qp = qp.connect(ep).map_err(TransportError::rdma(format!(
                "connecting QP {q} to the {peer}"
            )))?;
            qps.push(Arc::new(Mutex::new(qp)));
        }
        Ok(Links {
            devs: self.devs,
            qps,
            qp_dev: self.qp_dev,
        })
    }
}

/// rdma_cm wiring: QP `q` belongs to group `q % groups` (one group per receiver listener), and the
/// first connection of a group decides its device (the route to, or from, the peer's address).
#[derive(Debug)]
pub(super) struct CmGroups {
    devs: Vec<Option<Dev>>,
    qps: Vec<SharedQp>,
    qp_dev: Vec<usize>,
}

impl CmGroups {
    pub(super) fn new(groups: usize, qps: usize) -> CmGroups {
        CmGroups {
            devs: (0..groups).map(|_| None).collect(),
            qps: Vec::with_capacity(qps),
            qp_dev: Vec::with_capacity(qps),
        }
    }

    /// Groups in use.
    pub(super) fn groups(&self) -> usize {
        self.devs.len()
    }

    /// The device of QP `q`, whose connection to or from `via` runs over `ctx`; the group's first
    /// QP opens (and checks) it, later ones must run over the same device.
    pub(super) fn device(
        &mut self,
        q: usize,
        ctx: &Arc<Context>,
        via: SocketAddr,
        cfg: &RdmaConfig,
        plan: &Plan,
    ) -> Result<&Dev, TransportError> {
        let g = q % self.devs.len();
        if self.devs[g].is_none() {
            let d = Dev::new(Arc::clone(ctx), plan.cqe)?;
            check_msg_size(&d, cfg, &plan.ring)?;
            self.devs[g] = Some(d);
        }
        let d = self.devs[g]
            .as_ref()
            .ok_or_else(|| TransportError::Protocol("device group vanished".into()))?;
        if ctx.name() != d.ctx.name() {
            return Err(TransportError::Protocol(format!(
                "rdma_cm routes QP {q} to {via} over {} but earlier QPs to it use {}",
                ctx.name(),
                d.ctx.name()
            )));
        }
        Ok(d)
    }

    /// Adds connected QP `q` (the next one) after posting its receives.
    pub(super) fn push(
        &mut self,
        q: usize,
        mut qp: QueuePair<Rts>,
        plan: &Plan,
        peer: &str,
    ) -> Result<(), TransportError> {
        post_recvs(&mut qp, q, plan.depth, peer)?;
        self.qps.push(Arc::new(Mutex::new(qp)));
        self.qp_dev.push(q % self.devs.len());
        Ok(())
    }

    pub(super) fn finish(self) -> Result<Links, TransportError> {
        let devs = self
            .devs
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| TransportError::Protocol("a device group has no QP".into()))?;
        Ok(Links {
            devs,
            qps: self.qps,
            qp_dev: self.qp_dev,
        })
    }
}

/// The state and worker set of a session whose setup succeeded, working on `ring`.
pub(super) fn start(ring: &Arc<StagingRing>, side: &Arc<SideWriter>) -> (Arc<Shared>, Workers) {
    let shared = Arc::new(Shared::default());
    shared.lock().ring = Some(Arc::clone(ring));
    let workers = Workers::new(&shared, side);
    (shared, workers)
}
