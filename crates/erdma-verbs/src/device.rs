//! Devices: enumeration, opening, and the queries `ibv_devinfo` shows (device, port, GID table).

use std::ffi::CStr;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::ptr;
use std::str::FromStr;
use std::sync::Arc;

use rdma_sys as sys;
use serde::{Deserialize, Serialize};

use crate::caps::{Caps, DeviceLimits, Transport, Vendor};
use crate::error::{Error, Result, check};

/// A 16-byte GID. Shown and serialised as an IPv6 address (`::ffff:10.99.0.1` for a RoCE v2 IPv4 GID).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// True for the all-zero GID (an empty table slot).
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|b| *b == 0)
    }

    pub(crate) fn to_sys(self) -> sys::ibv_gid {
        sys::ibv_gid { raw: self.0 }
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ipv6Addr::from(self.0).fmt(f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl FromStr for Gid {
    type Err = Error;
    fn from_str(s: &str) -> Result<Gid> {
        Ipv6Addr::from_str(s).map(|a| Gid(a.octets())).map_err(|_| {
            Error::InvalidArgument(format!(
                "gid '{s}': expected an IPv6-formatted GID such as ::ffff:10.0.0.1"
            ))
        })
    }
}

impl Serialize for Gid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Gid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Gid, D::Error> {
        let s = String::deserialize(d)?;
        Gid::from_str(&s).map_err(serde::de::Error::custom)
    }
}

/// GID type, from sysfs `gid_attrs/types/<index>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GidType {
    /// InfiniBand or RoCE v1.
    IbRoceV1,
    /// RoCE v2 (UDP/IP encapsulated; the usual choice, index 1 on rxe and eRDMA).
    RoceV2,
    /// iWARP devices and devices without the sysfs attribute.
    Unknown,
}

impl GidType {
    fn parse(s: &str) -> GidType {
        match s.trim() {
            "RoCE v2" => GidType::RoceV2,
            "IB/RoCE v1" => GidType::IbRoceV1,
            _ => GidType::Unknown,
        }
    }
}

/// One populated GID table entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GidEntry {
    /// Index in the port's GID table (what `-x` / `NCCL_IB_GID_INDEX` select).
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
    /// Network device the GID belongs to (sysfs `gid_attrs/ndevs`), if any.
    pub netdev: Option<String>,
}

/// A device as listed by `ibv_get_device_list`, before opening it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Kernel device name (`erdma_0`, `mlx5_0`, `rxe0`).
    pub name: String,
    /// Node GUID, as 16 hex digits.
    pub guid: String,
    /// Transport type.
    pub transport: Transport,
    /// sysfs directory (`/sys/class/infiniband/<name>`).
    pub sysfs: PathBuf,
}

fn cstr(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libibverbs returns NUL-terminated strings that live as long as the device list / context.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn transport_of(t: sys::ibv_transport_type::Type) -> Transport {
    match t {
        sys::ibv_transport_type::IBV_TRANSPORT_IB => Transport::Ib,
        sys::ibv_transport_type::IBV_TRANSPORT_IWARP => Transport::Iwarp,
        _ => Transport::Other,
    }
}

/// # Safety
/// `dev` must be a device from a live `ibv_get_device_list` result.
unsafe fn info_of(dev: *mut sys::ibv_device) -> DeviceInfo {
    // SAFETY: per the function contract `dev` is valid.
    unsafe {
        let guid = u64::from_be(sys::ibv_get_device_guid(dev));
        DeviceInfo {
            name: cstr(sys::ibv_get_device_name(dev)),
            guid: format!("{guid:016x}"),
            transport: transport_of((*dev).transport_type),
            sysfs: PathBuf::from(cstr((*dev).ibdev_path.as_ptr())),
        }
    }
}

/// Owns an `ibv_get_device_list` result and frees it on drop.
struct RawList {
    list: *mut *mut sys::ibv_device,
    len: usize,
}

impl RawList {
    fn get() -> Result<RawList> {
        let mut n: libc::c_int = 0;
        // SAFETY: n is a valid out-pointer.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            let e = Error::last("ibv_get_device_list");
            // ENOSYS: the kernel has no RDMA support (no /sys/class/infiniband) — simply no devices.
            if e.errno() == Some(libc::ENOSYS) {
                return Ok(RawList { list, len: 0 });
            }
            return Err(e);
        }
        Ok(RawList {
            list,
            len: n.max(0) as usize,
        })
    }

    fn iter(&self) -> impl Iterator<Item = *mut sys::ibv_device> + '_ {
        // SAFETY: the list holds `len` valid pointers while self lives.
        (0..self.len).map(move |i| unsafe { *self.list.add(i) })
    }
}

impl Drop for RawList {
    fn drop(&mut self) {
        if !self.list.is_null() {
            // SAFETY: list came from ibv_get_device_list and is freed once.
            unsafe { sys::ibv_free_device_list(self.list) };
        }
    }
}

/// Lists the RDMA devices the installed providers see (`ibv_get_device_list`). An empty list is not an
/// error: a machine without RDMA hardware or without the provider library (e.g. the erdma provider missing
/// from a container image) has none.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let list = RawList::get()?;
    // SAFETY: the pointers come from the live list.
    Ok(list.iter().map(|d| unsafe { info_of(d) }).collect())
}

/// Device attributes from `ibv_query_device`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (hex).
    pub node_guid: String,
    /// System image GUID (hex).
    pub sys_image_guid: String,
    /// PCI vendor id (0x1ded for eRDMA).
    pub vendor_id: u32,
    /// PCI part id (0x107f for eRDMA).
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// The numeric limits.
    pub limits: DeviceLimits,
}

/// Port state (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PortState {
    /// `PORT_NOP`.
    Nop,
    /// `PORT_DOWN`.
    Down,
    /// `PORT_INIT`.
    Init,
    /// `PORT_ARMED`.
    Armed,
    /// `PORT_ACTIVE`: usable.
    Active,
    /// `PORT_ACTIVE_DEFER`.
    ActiveDefer,
}

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum LinkLayer {
    /// InfiniBand (LID routed).
    InfiniBand,
    /// Ethernet (RoCE, iWARP, eRDMA): GID routed.
    Ethernet,
    /// Not reported.
    Unspecified,
}

/// Port attributes from `ibv_query_port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortAttr {
    /// Port number (1-based).
    pub port: u8,
    /// State.
    pub state: PortState,
    /// Largest MTU the port supports, in bytes.
    pub max_mtu: u32,
    /// MTU in use, in bytes (what goes into an [`crate::Endpoint`]).
    pub active_mtu: u32,
    /// Local identifier (0 on Ethernet).
    pub lid: u16,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Largest message size.
    pub max_msg_sz: u32,
}

/// Converts `ibv_mtu` to bytes.
pub(crate) fn mtu_bytes(m: sys::ibv_mtu::Type) -> u32 {
    match m {
        sys::ibv_mtu::IBV_MTU_256 => 256,
        sys::ibv_mtu::IBV_MTU_512 => 512,
        sys::ibv_mtu::IBV_MTU_1024 => 1024,
        sys::ibv_mtu::IBV_MTU_2048 => 2048,
        sys::ibv_mtu::IBV_MTU_4096 => 4096,
        _ => 0,
    }
}

/// Converts bytes to `ibv_mtu` (must be one of 256, 512, 1024, 2048, 4096).
pub(crate) fn mtu_enum(bytes: u32) -> Result<sys::ibv_mtu::Type> {
    Ok(match bytes {
        256 => sys::ibv_mtu::IBV_MTU_256,
        512 => sys::ibv_mtu::IBV_MTU_512,
        1024 => sys::ibv_mtu::IBV_MTU_1024,
        2048 => sys::ibv_mtu::IBV_MTU_2048,
        4096 => sys::ibv_mtu::IBV_MTU_4096,
        other => {
            return Err(Error::InvalidArgument(format!(
                "endpoint mtu {other}: expected 256, 512, 1024, 2048 or 4096"
            )));
        }
    })
}

/// Who closes the `ibv_context`.
pub(crate) enum Owner {
    /// Opened with `ibv_open_device`: closed on drop.
    Opened,
    /// Belongs to librdmacm (an `rdma_cm_id`'s `verbs`): kept alive by holding the id.
    #[allow(dead_code)] // held for its Drop
    Cm(Arc<crate::cm::CmId>),
}

/// An open device (`ibv_context`). Every other object holds an `Arc<Context>`, so the context is closed
/// only after the last PD, CQ, QP and MR made from it are gone.
pub struct Context {
    pub(crate) ptr: *mut sys::ibv_context,
    name: String,
    transport: Transport,
    sysfs: PathBuf,
    attr: DeviceAttr,
    caps: Caps,
    owner: Owner,
    /// Bytes registered on this device by this process, shared by every `Context` opened on it
    /// (rdma_cm opens one per connection), for the vendor's total-MR cap.
    pub(crate) registered: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// The process-wide registration counter of device `name` (one per device, whatever the number of
/// `Context` wrappers opened on it).
pub(crate) fn registered_counter(name: &str) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static COUNTERS: OnceLock<Mutex<HashMap<String, Arc<std::sync::atomic::AtomicU64>>>> =
        OnceLock::new();
    let mut map = COUNTERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Arc::clone(map.entry(name.to_owned()).or_default())
}

// SAFETY: libibverbs contexts are thread-safe; all mutation goes through the library.
unsafe impl Send for Context {}
// SAFETY: shared use only queries the context through libibverbs, which locks its own state; the Rust
// fields are immutable after open except the registration counter, which is atomic.
unsafe impl Sync for Context {}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.name)
            .field("vendor", &self.caps.vendor)
            .finish()
    }
}

impl Context {
    /// Opens the device called `name` (`ibv_open_device`), queries it and probes its [`Caps`].
    ///
    /// Fails with [`Error::NoSuchDevice`] (listing the devices that exist) when no device has that name,
    /// and with [`Error::Verbs`] when the open or the query fails.
    pub fn open(name: &str) -> Result<Arc<Context>> {
        let list = RawList::get()?;
        let mut names = Vec::new();
        for dev in list.iter() {
            // SAFETY: dev comes from the live list.
            let info = unsafe { info_of(dev) };
            if info.name == name {
                // SAFETY: dev is valid; the context outlives the list (libibverbs refcounts devices).
                let ptr = unsafe { sys::ibv_open_device(dev) };
                if ptr.is_null() {
                    return Err(Error::last("ibv_open_device"));
                }
                // SAFETY: ptr is a freshly opened context we own.
                return unsafe {
                    Self::from_raw(ptr, info.name, info.transport, info.sysfs, Owner::Opened)
                }
                .map(Arc::new);
            }
            names.push(info.name);
        }
        Err(Error::NoSuchDevice {
            name: name.to_owned(),
            available: if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            },
        })
    }

    /// Opens the first device the providers list. Fails with [`Error::NoSuchDevice`] if there is none.
    pub fn open_first() -> Result<Arc<Context>> {
        match devices()?.first() {
            Some(d) => Context::open(&d.name),
            None => Err(Error::NoSuchDevice {
                name: "<any>".into(),
                available: "none".into(),
            }),
        }
    }

    /// Wraps a context; queries attributes and probes caps. On failure the context is closed if owned.
    ///
    /// # Safety
    /// `ptr` must be a valid open context; with [`Owner::Opened`] ownership moves to the returned value.
    pub(crate) unsafe fn from_raw(
        ptr: *mut sys::ibv_context,
        name: String,
        transport: Transport,
        sysfs: PathBuf,
        owner: Owner,
    ) -> Result<Context> {
        // Build the value first so an error path closes an owned context through Drop.
        let registered = registered_counter(&name);
        let mut ctx = Context {
            ptr,
            name,
            transport,
            sysfs,
            attr: DeviceAttr {
                fw_ver: String::new(),
                node_guid: String::new(),
                sys_image_guid: String::new(),
                vendor_id: 0,
                vendor_part_id: 0,
                hw_ver: 0,
                phys_port_cnt: 0,
                limits: DeviceLimits::default(),
            },
            caps: Caps::derive(Vendor::Unknown, transport, &DeviceLimits::default(), None),
            owner,
            registered,
        };
        ctx.attr = ctx.query_device()?;
        let vendor = Vendor::detect(&ctx.name, ctx.attr.vendor_id, ctx.attr.vendor_part_id);
        let inline = crate::inline_size::probe_inline(&ctx, vendor);
        ctx.caps = Caps::derive(vendor, transport, &ctx.attr.limits, inline);
        tracing::debug!(device = %ctx.name, caps = ?ctx.caps, "opened RDMA device");
        Ok(ctx)
    }

    /// Device name (`erdma_0`, `rxe0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Transport type of the device.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Capabilities probed at open.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Vendor profile (shortcut for `caps().vendor`).
    pub fn vendor(&self) -> Vendor {
        self.caps.vendor
    }

    /// Attributes queried at open.
    pub fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    /// Queries the device again (`ibv_query_device`).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: zeroed POD out-struct; ptr is a live context.
        let a = unsafe {
            let mut a: sys::ibv_device_attr = std::mem::zeroed();
            check("ibv_query_device", sys::ibv_query_device(self.ptr, &mut a))?;
            a
        };
        let u = |v: libc::c_int| v.max(0) as u32;
        Ok(DeviceAttr {
            fw_ver: cstr(a.fw_ver.as_ptr()),
            node_guid: format!("{:016x}", u64::from_be(a.node_guid)),
            sys_image_guid: format!("{:016x}", u64::from_be(a.sys_image_guid)),
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            phys_port_cnt: a.phys_port_cnt,
            limits: DeviceLimits {
                max_qp: u(a.max_qp),
                max_qp_wr: u(a.max_qp_wr),
                max_sge: u(a.max_sge),
                max_sge_rd: u(a.max_sge_rd),
                max_cq: u(a.max_cq),
                max_cqe: u(a.max_cqe),
                max_mr: u(a.max_mr),
                max_mr_size: a.max_mr_size,
                max_qp_rd_atom: u(a.max_qp_rd_atom),
                max_srq: u(a.max_srq),
                atomics: a.atomic_cap != sys::ibv_atomic_cap::IBV_ATOMIC_NONE,
                has_ah: a.max_ah > 0,
            },
        })
    }

    /// Queries port `port` (1-based) with `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: the exported ibv_query_port fills the leading (compat) part of ibv_port_attr, which holds
        // every field read below; the rest stays zeroed.
        let a = unsafe {
            let mut a: sys::ibv_port_attr = std::mem::zeroed();
            check(
                "ibv_query_port",
                sys::ibv_query_port(self.ptr, port, &mut a as *mut sys::ibv_port_attr as *mut _),
            )?;
            a
        };
        Ok(PortAttr {
            port,
            state: match a.state {
                sys::ibv_port_state::IBV_PORT_DOWN => PortState::Down,
                sys::ibv_port_state::IBV_PORT_INIT => PortState::Init,
                sys::ibv_port_state::IBV_PORT_ARMED => PortState::Armed,
                sys::ibv_port_state::IBV_PORT_ACTIVE => PortState::Active,
                sys::ibv_port_state::IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
                _ => PortState::Nop,
            },
            max_mtu: mtu_bytes(a.max_mtu),
            active_mtu: mtu_bytes(a.active_mtu),
            lid: a.lid,
            gid_tbl_len: a.gid_tbl_len.max(0) as u32,
            link_layer: match a.link_layer as u32 {
                1 => LinkLayer::InfiniBand,
                2 => LinkLayer::Ethernet,
                _ => LinkLayer::Unspecified,
            },
            max_msg_sz: a.max_msg_sz,
        })
    }

    /// Reads one GID (`ibv_query_gid`).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let idx = libc::c_int::try_from(index)
            .map_err(|_| Error::InvalidArgument(format!("gid index {index} is out of range")))?;
        // SAFETY: gid is a valid out-pointer.
        unsafe {
            let mut gid = sys::ibv_gid { raw: [0; 16] };
            check(
                "ibv_query_gid",
                sys::ibv_query_gid(self.ptr, port, idx, &mut gid),
            )?;
            Ok(Gid(gid.raw))
        }
    }

    /// The populated entries of the port's GID table, with their types (from sysfs `gid_attrs`).
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let attr = self.query_port(port)?;
        let mut out = Vec::new();
        for index in 0..attr.gid_tbl_len {
            let Ok(gid) = self.query_gid(port, index) else {
                continue;
            };
            if gid.is_zero() {
                continue;
            }
            let dir = self.sysfs.join(format!("ports/{port}/gid_attrs"));
            let gid_type = std::fs::read_to_string(dir.join(format!("types/{index}")))
                .map(|s| GidType::parse(&s))
                .unwrap_or(GidType::Unknown);
            let netdev = std::fs::read_to_string(dir.join(format!("ndevs/{index}")))
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty());
            out.push(GidEntry {
                index,
                gid,
                gid_type,
                netdev,
            });
        }
        Ok(out)
    }
}

impl Context {
    /// The network interfaces behind port `port`: the netdevs of its GID entries (RoCE), the PCI
    /// function's interfaces (`device/net/`: hardware NICs such as erdma and mlx5) and a soft device's
    /// `parent` (rxe, siw), from sysfs, without duplicates.
    pub fn netdevs(&self, port: u8) -> Vec<String> {
        netdevs_in(&self.sysfs, port)
    }

    /// The IPv4 addresses of [`Context::netdevs`] (`getifaddrs`), in that order: where an rdma_cm
    /// listener for this device can bind when its GID table holds no IPv4 entry (eRDMA in iWARP
    /// mode). Fails with [`Error::Verbs`] if the interfaces cannot be listed.
    pub fn ipv4_addrs(&self, port: u8) -> Result<Vec<Ipv4Addr>> {
        interface_ipv4(&self.netdevs(port))
    }
}

fn netdevs_in(sysfs: &Path, port: u8) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        let name = name.trim();
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    };
    let entries = |dir: PathBuf| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    for f in entries(sysfs.join(format!("ports/{port}/gid_attrs/ndevs"))) {
        if let Ok(name) = std::fs::read_to_string(&f) {
            add(&name);
        }
    }
    for d in entries(sysfs.join("device/net")) {
        if let Some(name) = d.file_name().and_then(|n| n.to_str()) {
            add(name);
        }
    }
    if let Ok(name) = std::fs::read_to_string(sysfs.join("parent")) {
        add(&name);
    }
    out
}

/// IPv4 addresses of the interfaces `names`, in the order of `names`.
fn interface_ipv4(names: &[String]) -> Result<Vec<Ipv4Addr>> {
    let mut head: *mut libc::ifaddrs = ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; the list is freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(Error::last("getifaddrs"));
    }
    let mut found: Vec<(usize, Ipv4Addr)> = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, which stays allocated until the
        // freeifaddrs below; its name is a NUL-terminated string and its address, when not null, a
        // sockaddr whose family says how to read it (AF_INET: a sockaddr_in).
        unsafe {
            let ifa = &*p;
            if !ifa.ifa_addr.is_null() && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET {
                let name = CStr::from_ptr(ifa.ifa_name).to_string_lossy();
                if let Some(i) = names.iter().position(|n| *n == name) {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                    if !found.iter().any(|(_, x)| *x == ip) {
                        found.push((i, ip));
                    }
                }
            }
            p = ifa.ifa_next;
        }
    }
    // SAFETY: `head` came from getifaddrs and no pointer into the list is used after this.
    unsafe { libc::freeifaddrs(head) };
    found.sort_by_key(|(i, _)| *i);
    Ok(found.into_iter().map(|(_, ip)| ip).collect())
}

impl Drop for Context {
    fn drop(&mut self) {
        if matches!(self.owner, Owner::Opened) {
            // SAFETY: we own the context and every child holds an Arc to us, so none is left.
            let rc = unsafe { sys::ibv_close_device(self.ptr) };
            if rc != 0 {
                tracing::warn!(device = %self.name, rc, "ibv_close_device failed");
            }
        }
        self.ptr = ptr::null_mut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_display_and_parse() {
        let mut raw = [0u8; 16];
        raw[10] = 0xff;
        raw[11] = 0xff;
        raw[12..].copy_from_slice(&[10, 99, 0, 1]);
        let g = Gid(raw);
        assert_eq!(g.to_string(), "::ffff:10.99.0.1");
        assert_eq!("::ffff:10.99.0.1".parse::<Gid>().unwrap(), g);
        assert!(!g.is_zero());
        assert!(Gid::default().is_zero());
        let e = "nope".parse::<Gid>().unwrap_err();
        assert!(e.to_string().contains("gid 'nope'"), "{e}");
    }

    #[test]
    fn gid_type_parse() {
        assert_eq!(GidType::parse("RoCE v2\n"), GidType::RoceV2);
        assert_eq!(GidType::parse("IB/RoCE v1"), GidType::IbRoceV1);
        assert_eq!(GidType::parse(""), GidType::Unknown);
    }

    #[test]
    fn mtu_conversions() {
        for b in [256, 512, 1024, 2048, 4096] {
            assert_eq!(mtu_bytes(mtu_enum(b).unwrap()), b);
        }
        assert!(mtu_enum(1500).unwrap_err().to_string().contains("mtu 1500"));
    }

    #[test]
    #[cfg_attr(miri, ignore = "FFI: ibv_get_device_list")]
    fn missing_device_lists_what_exists() {
        // This machine's kernel may have no RDMA at all; either way the error names the device.
        let e = Context::open("no_such_dev9").unwrap_err();
        assert!(e.to_string().contains("no_such_dev9"), "{e}");
    }

    #[test]
    fn netdevs_come_from_gid_attrs_the_pci_function_and_the_parent() {
        let dir = std::env::temp_dir().join(format!("erdma-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ports/1/gid_attrs/ndevs")).unwrap();
        std::fs::create_dir_all(dir.join("device/net/eth1")).unwrap();
        std::fs::write(dir.join("ports/1/gid_attrs/ndevs/0"), "eth0\n").unwrap();
        std::fs::write(dir.join("ports/1/gid_attrs/ndevs/1"), "eth0\n").unwrap();
        std::fs::write(dir.join("parent"), "eth1\n").unwrap();
        assert_eq!(netdevs_in(&dir, 1), ["eth0", "eth1"]);
        assert!(netdevs_in(&dir, 2).iter().all(|n| n == "eth1"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(netdevs_in(Path::new("/nonexistent/rxe9"), 1).is_empty());
    }

    #[test]
    #[cfg_attr(miri, ignore = "FFI: getifaddrs")]
    fn loopback_has_its_ipv4_address() {
        let v = interface_ipv4(&["no-such-if0".into(), "lo".into()]).unwrap();
        assert_eq!(v, [Ipv4Addr::LOCALHOST]);
        assert!(interface_ipv4(&[]).unwrap().is_empty());
    }
}
