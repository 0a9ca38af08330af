//! Connection setup through librdmacm (`rdma_cm`). iWARP devices — eRDMA in its default mode, siw —
//! cannot be connected by hand with an [`crate::Endpoint`]; rdma_cm resolves the route by IP address and
//! moves the QP through INIT/RTR/RTS itself. RoCE devices (rxe, mlx5) work either way.
//!
//! Server: [`Listener::bind`] → [`Listener::get_request`] → allocate PD/CQ/MRs on
//! [`ConnectRequest::context`] → [`ConnectRequest::accept`]. Client: [`Connector::resolve`] → allocate on
//! [`Connector::context`] → [`Connector::connect`]. Both return a [`QueuePair<Rts>`]. Up to 56 bytes of
//! private data travel with the request and the reply (enough for a [`crate::RemoteBuf`]).

use std::ffi::CStr;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys as sys;

use crate::device::{Context, Owner};
use crate::error::{Error, Result, check};
use crate::pd::ProtectionDomain;
use crate::qp::{QpBuilder, QueuePair, Rts};

/// Largest private data in a connect request (InfiniBand CM limit; iWARP allows more).
pub const MAX_PRIVATE_DATA: usize = 56;

/// An `rdma_cm_id` with its own event channel. Destroyed after everything made from it.
pub struct CmId {
    id: *mut sys::rdma_cm_id,
    channel: *mut sys::rdma_event_channel,
}

// SAFETY: librdmacm ids may be used from any thread; we never use one concurrently without the library's
// own locking (events are consumed by the single owner).
unsafe impl Send for CmId {}
// SAFETY: shared references only read the id's pointer and call librdmacm, which locks its own state;
// every call that consumes events takes the id by its single owner.
unsafe impl Sync for CmId {}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId").field("id", &self.id).finish()
    }
}

impl CmId {
    fn new_channel() -> Result<*mut sys::rdma_event_channel> {
        // SAFETY: rdma_create_event_channel takes no arguments and returns an owned channel or null (checked).
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(Error::last("rdma_create_event_channel"));
        }
        Ok(ch)
    }

    fn create() -> Result<CmId> {
        let channel = Self::new_channel()?;
        let mut id = ptr::null_mut();
        // SAFETY: channel is live; id is an out-pointer.
        let rc = unsafe {
            sys::rdma_create_id(
                channel,
                &mut id,
                ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            let e = check("rdma_create_id", rc).err();
            // SAFETY: `channel` was created above and rdma_create_id failed, so no id refers to it and it is
            // destroyed exactly once here.
            unsafe { sys::rdma_destroy_event_channel(channel) };
            return Err(e.unwrap_or(Error::verbs("rdma_create_id", libc::EIO)));
        }
        Ok(CmId { id, channel })
    }

    /// Disconnects and destroys the id's QP; called by the QP's drop. Returns whether the QP is gone:
    /// `rdma_destroy_qp` returns nothing, so the QP is destroyed with `ibv_destroy_qp` (what
    /// `rdma_destroy_qp` does for a QP made on caller-supplied CQs, as ours are) and the id's pointer
    /// cleared only on success; on failure the caller keeps the QP's in-flight buffers alive.
    pub(crate) fn destroy_qp(&self) -> bool {
        // SAFETY: id is live; disconnect on an unconnected id just fails, which is fine during teardown.
        unsafe {
            let _ = sys::rdma_disconnect(self.id);
            let qp = (*self.id).qp;
            if qp.is_null() {
                return true;
            }
            let rc = sys::ibv_destroy_qp(qp);
            if rc != 0 {
                tracing::warn!(
                    rc,
                    "ibv_destroy_qp failed; keeping its in-flight buffers alive"
                );
                return false;
            }
            (*self.id).qp = ptr::null_mut();
        }
        true
    }

    fn context(self: &Arc<Self>) -> Result<Arc<Context>> {
        // SAFETY: id is live; verbs is set once the address is resolved or a request arrived.
        let verbs = unsafe { (*self.id).verbs };
        if verbs.is_null() {
            return Err(Error::InvalidArgument(
                "rdma_cm id has no device yet (address not resolved)".into(),
            ));
        }
        // SAFETY: verbs is librdmacm's open context; the Owner::Cm hold keeps the id (and so the context) alive.
        unsafe {
            let dev = (*verbs).device;
            let name = CStr::from_ptr(sys::ibv_get_device_name(dev))
                .to_string_lossy()
                .into_owned();
            let transport = match (*dev).transport_type {
                sys::ibv_transport_type::IBV_TRANSPORT_IWARP => crate::caps::Transport::Iwarp,
                sys::ibv_transport_type::IBV_TRANSPORT_IB => crate::caps::Transport::Ib,
                _ => crate::caps::Transport::Other,
            };
            let sysfs = PathBuf::from(
                CStr::from_ptr((*dev).ibdev_path.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
            );
            Context::from_raw(verbs, name, transport, sysfs, Owner::Cm(self.clone())).map(Arc::new)
        }
    }

    /// Waits for the next event on this id's channel and checks it is `expected`.
    fn expect(&self, expected: sys::rdma_cm_event_type::Type, timeout: Duration) -> Result<Event> {
        let ev = next_event(self.channel, timeout)?;
        if ev.kind != expected {
            return Err(Error::CmEvent {
                expected: event_name(expected),
                got: event_name(ev.kind).to_owned(),
                status: ev.status,
            });
        }
        Ok(ev)
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: QPs made on the id were destroyed by their owners (they hold this Arc); all events acked.
        unsafe {
            if !(*self.id).qp.is_null() {
                sys::rdma_destroy_qp(self.id);
            }
            let rc = sys::rdma_destroy_id(self.id);
            if rc != 0 {
                tracing::warn!(rc, "rdma_destroy_id failed");
            }
            sys::rdma_destroy_event_channel(self.channel);
        }
    }
}

struct Event {
    kind: sys::rdma_cm_event_type::Type,
    status: i32,
    id: *mut sys::rdma_cm_id,
    private_data: Vec<u8>,
}

fn event_name(kind: sys::rdma_cm_event_type::Type) -> &'static str {
    use sys::rdma_cm_event_type as t;
    match kind {
        t::RDMA_CM_EVENT_ADDR_RESOLVED => "ADDR_RESOLVED",
        t::RDMA_CM_EVENT_ADDR_ERROR => "ADDR_ERROR",
        t::RDMA_CM_EVENT_ROUTE_RESOLVED => "ROUTE_RESOLVED",
        t::RDMA_CM_EVENT_ROUTE_ERROR => "ROUTE_ERROR",
        t::RDMA_CM_EVENT_CONNECT_REQUEST => "CONNECT_REQUEST",
        t::RDMA_CM_EVENT_CONNECT_RESPONSE => "CONNECT_RESPONSE",
        t::RDMA_CM_EVENT_CONNECT_ERROR => "CONNECT_ERROR",
        t::RDMA_CM_EVENT_UNREACHABLE => "UNREACHABLE",
        t::RDMA_CM_EVENT_REJECTED => "REJECTED (is a listener running at that address?)",
        t::RDMA_CM_EVENT_ESTABLISHED => "ESTABLISHED",
        t::RDMA_CM_EVENT_DISCONNECTED => "DISCONNECTED",
        t::RDMA_CM_EVENT_DEVICE_REMOVAL => "DEVICE_REMOVAL",
        t::RDMA_CM_EVENT_TIMEWAIT_EXIT => "TIMEWAIT_EXIT",
        _ => "other event",
    }
}

fn next_event(channel: *mut sys::rdma_event_channel, timeout: Duration) -> Result<Event> {
    let start = Instant::now();
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(Error::Timeout(timeout, "rdma_cm event"));
        }
        // SAFETY: the caller's channel came from rdma_create_event_channel and is destroyed only after its
        // last event was read, so it points to a live rdma_event_channel here.
        let fd = unsafe { (*channel).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: pfd valid for the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::verbs(
                "poll(rdma_cm channel)",
                e.raw_os_error().unwrap_or(libc::EIO),
            ));
        }
        if rc == 0 {
            continue;
        }
        let mut ev: *mut sys::rdma_cm_event = ptr::null_mut();
        // SAFETY: channel live; the fd is readable so this does not block for long.
        check("rdma_get_cm_event", unsafe {
            sys::rdma_get_cm_event(channel, &mut ev)
        })?;
        // SAFETY: ev is a valid event until acked; copy what we need first.
        let out = unsafe {
            let conn = &(*ev).param.conn;
            let pd = if conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    conn.private_data_len as usize,
                )
                .to_vec()
            };
            let out = Event {
                kind: (*ev).event,
                status: (*ev).status,
                id: (*ev).id,
                private_data: pd,
            };
            sys::rdma_ack_cm_event(ev);
            out
        };
        return Ok(out);
    }
}

fn sockaddr_of(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: zeroed sockaddr_storage is valid; we fill the matching variant.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr, sockaddr_in6 included,
            // and `ss` is zeroed, so viewing it as one is valid; the borrow ends before `ss` is used again.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
        }
    }
    ss
}

fn conn_param(ctx: &Context, private: &[u8]) -> Result<sys::rdma_conn_param> {
    if private.len() > MAX_PRIVATE_DATA {
        return Err(Error::InvalidArgument(format!(
            "rdma_cm private data of {} bytes: at most {MAX_PRIVATE_DATA} bytes are carried",
            private.len()
        )));
    }
    let depth = ctx.caps().max_rd_atomic.clamp(1, 16) as u8;
    // SAFETY: rdma_conn_param holds integers and a data pointer; all-zero is valid (no private data).
    let mut p: sys::rdma_conn_param = unsafe { std::mem::zeroed() };
    p.private_data = if private.is_empty() {
        ptr::null()
    } else {
        private.as_ptr().cast()
    };
    p.private_data_len = private.len() as u8;
    p.responder_resources = depth;
    p.initiator_depth = depth;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    Ok(p)
}

fn create_qp(
    id: &Arc<CmId>,
    pd: &Arc<ProtectionDomain>,
    builder: &QpBuilder,
) -> Result<QueuePair<Rts>> {
    let mut init = builder.cm_init_attr(pd)?;
    // SAFETY: id, pd and the builder's CQs are live and on id's context (checked by cm_init_attr).
    check("rdma_create_qp", unsafe {
        sys::rdma_create_qp(id.id, pd.ptr, &mut init)
    })?;
    // SAFETY: rdma_create_qp succeeded, so id->qp is set.
    let qp = unsafe { (*id.id).qp };
    Ok(QueuePair::wrap_cm(
        qp,
        pd.clone(),
        builder.clone(),
        &init,
        id.clone(),
    ))
}

/// A passive rdma_cm id listening on an IP address and port.
#[derive(Debug)]
pub struct Listener {
    id: Arc<CmId>,
}

impl Listener {
    /// Binds to `addr` (the RDMA interface's IP, e.g. eth0's on eRDMA or veth0's on rxe; `0.0.0.0`
    /// listens on all devices) and listens (`rdma_bind_addr`, `rdma_listen`).
    pub fn bind(addr: SocketAddr) -> Result<Listener> {
        let id = Arc::new(CmId::create()?);
        let mut ss = sockaddr_of(&addr);
        // SAFETY: id live; ss is a valid sockaddr for the call.
        check("rdma_bind_addr", unsafe {
            sys::rdma_bind_addr(id.id, (&mut ss as *mut libc::sockaddr_storage).cast())
        })?;
        // SAFETY: `id` is a live id that rdma_bind_addr just bound (the `?` above returns otherwise).
        check("rdma_listen", unsafe { sys::rdma_listen(id.id, 16) })?;
        Ok(Listener { id })
    }

    /// Waits up to `timeout` for the next connect request. The request gets its own event channel, so the
    /// listener may be dropped or reused while the connection lives.
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest> {
        let ev = self.id.expect(
            sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST,
            timeout,
        )?;
        let channel = CmId::new_channel()?;
        // SAFETY: ev.id is the new connection's id; moving it to its own channel is allowed before accept.
        let rc = unsafe { sys::rdma_migrate_id(ev.id, channel) };
        if rc != 0 {
            // SAFETY: reject and destroy the orphan id; the channel is unused.
            unsafe {
                sys::rdma_reject(ev.id, ptr::null(), 0);
                sys::rdma_destroy_id(ev.id);
                sys::rdma_destroy_event_channel(channel);
            }
            return Err(check("rdma_migrate_id", rc)
                .err()
                .unwrap_or(Error::verbs("rdma_migrate_id", libc::EIO)));
        }
        let id = Arc::new(CmId { id: ev.id, channel });
        let ctx = id.context()?;
        Ok(ConnectRequest {
            id,
            ctx,
            private_data: ev.private_data,
        })
    }

    /// The bound port (useful after binding port 0).
    pub fn port(&self) -> u16 {
        // SAFETY: a Listener only exists with a live id bound and listening (Listener::bind).
        u16::from_be(unsafe { sys::rdma_get_src_port(self.id.id) })
    }
}

/// An incoming connection, before it is accepted.
#[derive(Debug)]
pub struct ConnectRequest {
    id: Arc<CmId>,
    ctx: Arc<Context>,
    private_data: Vec<u8>,
}

impl ConnectRequest {
    /// The device the request arrived on: allocate the PD, CQs and MRs for [`ConnectRequest::accept`] here.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Private data the client sent (may be zero-padded by the transport).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// Creates the QP (`rdma_create_qp`) from `builder` and accepts (`rdma_accept`), replying with
    /// `private_data`, then waits for ESTABLISHED.
    pub fn accept(
        self,
        pd: &Arc<ProtectionDomain>,
        builder: &QpBuilder,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<QueuePair<Rts>> {
        let qp = create_qp(&self.id, pd, builder)?;
        let mut p = conn_param(&self.ctx, private_data)?;
        // SAFETY: id live with its QP; p valid for the call.
        check("rdma_accept", unsafe {
            sys::rdma_accept(self.id.id, &mut p)
        })?;
        self.id
            .expect(sys::rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED, timeout)?;
        Ok(qp)
    }

    /// Refuses the connection (`rdma_reject`).
    pub fn reject(self) -> Result<()> {
        // SAFETY: the request owns its live id (from a CONNECT_REQUEST event) until it is accepted or rejected;
        // `self` is consumed, so it is rejected once.
        check("rdma_reject", unsafe {
            sys::rdma_reject(self.id.id, ptr::null(), 0)
        })
    }
}

/// An active rdma_cm id whose route to the server is resolved.
#[derive(Debug)]
pub struct Connector {
    id: Arc<CmId>,
    ctx: Arc<Context>,
}

impl Connector {
    /// Resolves the address and route to `dst` (`rdma_resolve_addr`, `rdma_resolve_route`), which picks
    /// the local device. Fails with [`Error::CmEvent`] (ADDR_ERROR, ROUTE_ERROR) when `dst` is not
    /// reachable over RDMA, and [`Error::Timeout`].
    pub fn resolve(dst: SocketAddr, timeout: Duration) -> Result<Connector> {
        let id = Arc::new(CmId::create()?);
        let mut ss = sockaddr_of(&dst);
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: id live; ss valid for the call.
        check("rdma_resolve_addr", unsafe {
            sys::rdma_resolve_addr(
                id.id,
                ptr::null_mut(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                ms,
            )
        })?;
        id.expect(
            sys::rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED,
            timeout,
        )?;
        // SAFETY: `id` is live and its ADDR_RESOLVED event was just consumed, which rdma_resolve_route requires.
        check("rdma_resolve_route", unsafe {
            sys::rdma_resolve_route(id.id, ms)
        })?;
        id.expect(
            sys::rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED,
            timeout,
        )?;
        let ctx = id.context()?;
        Ok(Connector { id, ctx })
    }

    /// The local device the route uses: allocate the PD, CQs and MRs here.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Creates the QP and connects (`rdma_connect`), sending `private_data`; waits for ESTABLISHED and
    /// returns the QP with the server's private data.
    pub fn connect(
        self,
        pd: &Arc<ProtectionDomain>,
        builder: &QpBuilder,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<(QueuePair<Rts>, Vec<u8>)> {
        let qp = create_qp(&self.id, pd, builder)?;
        let mut p = conn_param(&self.ctx, private_data)?;
        // SAFETY: id live with its QP; p valid for the call.
        check("rdma_connect", unsafe {
            sys::rdma_connect(self.id.id, &mut p)
        })?;
        let ev = self
            .id
            .expect(sys::rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED, timeout)?;
        Ok((qp, ev.private_data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_v4_layout() {
        let ss = sockaddr_of(&"10.99.0.1:7471".parse().unwrap());
        // SAFETY: test reads back the variant it wrote.
        let sin = unsafe { &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
        assert_eq!(sin.sin_family, libc::AF_INET as libc::sa_family_t);
        assert_eq!(u16::from_be(sin.sin_port), 7471);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 99, 0, 1]);
    }

    #[test]
    fn event_names() {
        assert_eq!(
            event_name(sys::rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED),
            "ESTABLISHED"
        );
        assert!(
            event_name(sys::rdma_cm_event_type::RDMA_CM_EVENT_REJECTED).starts_with("REJECTED")
        );
    }
}
