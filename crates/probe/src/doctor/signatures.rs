//! The built-in knowledge base: log signatures of NCCL, UCX/NIXL, Ray RDT, ibverbs, BuildKit,
//! registries and Kubernetes, each with a cause and a fix.
//!
//! `{1}`, `{2}` in `cause`/`fix` are replaced by the pattern's capture groups. What a signature is
//! (its fields and the `sig` constructors) is `signatures/model.rs`; this file and the two by subject
//! beside it (`plugins.rs`, `topology.rs`) are the catalogue.

use crate::facts::limits::MEMLOCK_FIX;

mod model;
mod plugins;
mod topology;
use crate::verdict::Verdict;
pub use model::{Signature, Source};
use model::{fallback, sig, with_context};
pub(crate) use plugins::PLUGIN_PATH_FIX;

use Source::*;
use Verdict::{Fail, Info, Ok as Good, Warn};

const NCCL_PIN_FIX: &str = "Install a working NCCL in the image: `pip install nvidia-nccl-cu13==2.30.7` \
(2.28.3, 2.29.7 and 2.30.7 work on eRDMA); check with `python -c \"import cupy.cuda.nccl as n; print(n.get_version())\"` \
→ 23007.";
const NCCL_NOT_NIXL_FIX: &str = "On eRDMA use `@ray.method(tensor_transport=\"nccl\")` (NCCL over eRDMA, ~11.5 GiB/s). \
NIXL works only with UCX rebuilt with Alibaba's eRDMA patch or a source-built NIXL with the Mooncake backend.";
const BUILD_DISK_FIX: &str = "Give buildkitd a persistent cache volume of at least 200 GiB (a PVC on a cloud disk \
mounted at /var/lib/buildkit): unpacking the Ray base image needs more than 100 GiB, which exhausts node \
ephemeral storage and gets the pod evicted.";
const NO_DEVICE_FIX: &str = "Run `rdmakit probe` inside the pod: the pod must request the RDMA resource \
(`aliyun/erdma: 1`, `rdma/rdma_shared_device_a: 1`, a DRA claim) so /dev/infiniband is mounted, the image must \
carry the device's userspace provider (eRDMA: ibverbs-providers from the Alibaba Cloud eRDMA APT source), and \
NCCL_IB_HCA must match a device name.";

/// The RoCE GID fix, shared by every signature whose cause is a wrong or differing GID index.
pub const GID_FIX: &str = "Pin NCCL_IB_GID_INDEX (NCCL) / UCX_IB_GID_INDEX (UCX, NIXL) to the IPv4-mapped RoCE v2 \
entry of the port on every node: the profile's value (eRDMA: 1; Mellanox RoCE is usually 3); `rdmakit probe` prints \
the index per device and `show_gids` lists the table. Check both sides agree, then test the path with \
`ib_write_bw -d <dev> -x <index>` between the two nodes.";
const UCX_DEVICE_FIX: &str = "Pin UCX to the pod's RDMA device and its RoCE v2 GID: UCX_NET_DEVICES=<dev>:1 \
(eRDMA: erdma_0:1) and UCX_IB_GID_INDEX=<index> (eRDMA profile: 1; `rdmakit probe` prints it). With a shared \
device plugin every device is visible but only one has an address in the pod: pick that one.";
const SOCKET_IFNAME_FIX: &str = "Set NCCL_SOCKET_IFNAME to an interface that exists in the pod and carries its IP \
(`ip -br addr`; `rdmakit probe` lists the interfaces): the profile's value is eth0 for hostNetwork eRDMA workers. \
Under hostNetwork the names are the node's, in the pod network they are the CNI's; a leading `=` asks for an exact \
match and `^` excludes.";
const DEVICE_PLUGIN_FIX: &str = "Compare the plugin's selectors (vendors, deviceIDs, drivers, ifNames) with the \
node (`lspci -nn`, `ls /sys/class/infiniband`, `ip link`); the `error creating new device` lines above say which \
device was rejected and why. Fix the config map or load the missing kernel module, then restart the plugin pod: \
the node advertises 0 of the resource until it rescans.";
const DRA_FIX: &str = "Compare the device attributes in `kubectl get resourceslices -o yaml` with the DeviceClass \
CEL selectors: `probe::preflight::dra_selector_gaps` names the attribute no published device carries (for example \
`alibaba.dra.net/erdma` when DRANET did not recognise the instance). Check that the DRANET pods run on those nodes \
and that enough matching devices are unallocated.";
const PEERMEM_FIX: &str = "Load nvidia_peermem on the node (`modprobe nvidia_peermem`; with the GPU Operator \
`driver.rdma.enabled=true`), or use DMA-BUF instead (open GPU kernel modules, kernel 5.12 or newer, NCCL 2.13 or \
newer). Until then expect the staged rate of `probe::expect`, not line rate.";
const MESH_FIX: &str = "Keep the mesh out of RDMA worker pods: annotate the pod template with \
`sidecar.istio.io/inject: \"false\"` (Istio) or `linkerd.io/inject: disabled` (Linkerd). NCCL's bootstrap opens \
connections on random ports that the proxy intercepts, and hostNetwork pods cannot be meshed at all.";
const WATCHDOG_FIX: &str = "Tell a dead or stuck peer from a slow fabric: (1) read the log of the rank that did \
not time out, or failed first: it names the cause; (2) check the NCCL log for `NET/IB : Using` (a silent TCP \
fallback makes large collectives slow enough to time out); (3) read the RDMA counters twice during the hang \
(`rdmakit probe --counters`): counters that still move mean a slow or lossy fabric (GID, MTU, PFC/ECN), flat \
counters mean a peer stopped. Rerun with NCCL_DEBUG=INFO and TORCH_NCCL_TRACE_BUFFER_SIZE set for the flight recorder.";

/// The built-in signatures, in priority order.
pub static SIGNATURES: &[Signature] = &[
    // --- memory locking ---------------------------------------------------------------------
    sig(
        "memlock-create-qp-enomem",
        Fail,
        Nccl,
        r"ibv_create_qp failed with (?:error )?(?:Unknown error -12|(?:12 )?Cannot allocate memory)",
        "ibv_create_qp returned ENOMEM: the container's RLIMIT_MEMLOCK is the 64 KiB systemd default inherited from containerd, too small to pin queue memory",
        MEMLOCK_FIX,
    ),
    sig(
        "memlock-create-cq-enomem",
        Fail,
        Nccl,
        r"ibv_create_cq failed with (?:error )?(?:Unknown error -12|Cannot allocate memory)",
        "ibv_create_cq returned ENOMEM: locked-memory limit too small (64 KiB inherited from containerd) or, at very large scale, too many CQs",
        MEMLOCK_FIX,
    ),
    sig(
        "memlock-reg-mr-enomem",
        Fail,
        Nccl,
        r"ibv_reg_mr\w*(?:\([^)]*\))? failed(?: with)?:? (?:error )?(?:Unknown error -12|Cannot allocate memory)",
        "memory registration returned ENOMEM: locked-memory limit too small, or the device's total MR size cap was hit (eRDMA: about 64 GiB in all)",
        "Make RLIMIT_MEMLOCK unlimited (containerd LimitMEMLOCK=infinity drop-in, see memlock-create-qp-enomem); on eRDMA split very large registrations.",
    ),
    fallback(sig(
        "create-qp-failed",
        Fail,
        Nccl,
        r"Call to ibv_create_qp failed",
        "ibv_create_qp failed; without an errno this is most often the locked-memory limit",
        MEMLOCK_FIX,
    )),
    sig(
        "ulimit-memlock-limited",
        Fail,
        Shell,
        r"max locked memory\s+\(kbytes, -l\)\s+(\d+)",
        "RLIMIT_MEMLOCK is {1} KiB, not unlimited: RDMA queue pairs cannot be created",
        MEMLOCK_FIX,
    ),
    // --- NCCL crashes and versions ----------------------------------------------------------
    with_context(
        sig(
            "nccl-netinit-segfault",
            Fail,
            Nccl,
            r"ncclNetInit",
            "NCCL 2.28.7 / 2.28.9 (the one torch 2.11 ships) segfault in ncclNetInit() while probing eRDMA devices",
            NCCL_PIN_FIX,
        ),
        r"SIGSEGV|Segmentation fault|signal 11\b|Caught signal",
        40,
    ),
    fallback(sig(
        "nccl-version",
        Info,
        Nccl,
        r"NCCL version (\d+\.\d+\.\d+\S*)",
        "NCCL {1}",
        "",
    )),
    fallback(sig(
        "segfault",
        Warn,
        Ray,
        r"SIGSEGV|Segmentation fault \(core dumped\)|Fatal Python error: Segmentation fault",
        "a process crashed with SIGSEGV; the frames around it name the library",
        "Look at the stack: ncclNetInit → NCCL version (pin nvidia-nccl-cu13==2.30.7); libuct/libucs → UCX on eRDMA.",
    )),
    // --- UCX / NIXL -------------------------------------------------------------------------
    sig(
        "ucx-ud-unsupported",
        Fail,
        Ucx,
        r"uct_iface_open\((ud_(?:verbs|mlx5))/([^)]+)\) failed",
        "UCX (NIXL's backend) needs UD queue pairs to wire up RC connections, and {2} has no UD (eRDMA is RC only)",
        NCCL_NOT_NIXL_FIX,
    ),
    sig(
        "ucx-srq-unsupported",
        Fail,
        Ucx,
        r"ibv_create_srq\w*(?:\(\))? failed:? .*(?:Operation not supported|EOPNOTSUPP)",
        "UCX's rc_verbs transport always creates a shared receive queue; eRDMA has no SRQ",
        NCCL_NOT_NIXL_FIX,
    ),
    sig(
        "ucx-no-am-transport",
        Fail,
        Ucx,
        r"no active messages transport",
        "UCX found no usable transport between the peers: its RDMA transports did not see the device (the NIXL wheel bundles its own UCX and a renamed libibverbs that cannot load the eRDMA provider)",
        "Build UCX/NIXL against the system rdma-core (eRDMA: with Alibaba's UCX patch), or use tensor_transport=\"nccl\".",
    ),
    sig(
        "ucx-transport-unavailable",
        Warn,
        Ucx,
        r"transports? '([^']+)' (?:is|are) not available",
        "UCX_TLS asks for {1}, which UCX cannot open here",
        "Drop it from UCX_TLS or install the transport's support (rdma-core provider, CUDA).",
    ),
    sig(
        "extended-verbs-unsupported",
        Fail,
        Ibverbs,
        r"(ibv_create_qp_ex|ibv_create_cq_ex|ibv_wr_\w+|ibv_start_poll)\b.*(?:not supported|Function not implemented)",
        "{1} is an extended verb; eRDMA implements the classic verbs only",
        "Use classic verbs (ibv_create_qp, ibv_post_send) — erdma-verbs does; UCX/NIXL need eRDMA-patched builds.",
    ),
    // --- Ray RDT ------------------------------------------------------------------------------
    sig(
        "rdt-object-not-found",
        Fail,
        Ray,
        r"not found in RDT object store after ([\d.]+)s",
        "the receiving actor has no RDT receive thread (it lacks enable_tensor_transport=True), so the receive is queued behind consume(), which blocks waiting for the tensor until the {1}s timeout",
        "Declare the consumer with `@ray.remote(num_gpus=1, enable_tensor_transport=True)`, and create the NCCL group with ray.experimental.collective.create_collective_group([producer, consumer], backend=\"nccl\").",
    ),
    sig(
        "ray-uniqueid-store-leftover",
        Warn,
        Ray,
        r"NCCLUniqueIDStore",
        "an NCCLUniqueIDStore actor of an earlier collective group is still around: Ray destroys a group when a transfer fails but can leave this actor behind, and each actor may join only one group per backend",
        "Before retrying, kill leftovers: `ray list actors --filter class_name=NCCLUniqueIDStore` then `ray.kill(ray.get_actor(<name>))` (or restart the RayCluster).",
    ),
    sig(
        "rdt-checksum-bad",
        Fail,
        Ray,
        r"checksum (?:MISMATCH|FAILED|BAD|ERROR|mismatch|failed)",
        "the received tensor differs from the sent one",
        "RDT does not copy tensors: do not modify a tensor after returning it from a tensor_transport method; rerun with NCCL_DEBUG=INFO.",
    ),
    sig(
        "rdt-iteration-ok",
        Good,
        Ray,
        r"iter \d+: .*checksum OK",
        "RDT transfer completed with a correct checksum",
        "",
    ),
    sig(
        "rdt-demo-ok",
        Good,
        Ray,
        r"RDT over \S+: OK",
        "RDT demo finished: OK",
        "",
    ),
    // --- NCCL transport selection ----------------------------------------------------------------
    sig(
        "nccl-net-ib-using",
        Good,
        Nccl,
        r"NET/IB ?: Using (\[\d+\]\S+(?: \[\d+\]\S+)*)",
        "NCCL uses RDMA devices {1}",
        "",
    ),
    sig(
        "nccl-using-network-ib",
        Good,
        Nccl,
        r"Using network (IB\w*)",
        "NCCL selected the {1} network (RDMA)",
        "",
    ),
    sig(
        "nccl-qp-created",
        Good,
        Nccl,
        r"ncclIbReceiverQpsCreateToRts: QP created.*?devName=(\S+)",
        "NCCL created RC queue pairs on {1}",
        "",
    ),
    sig(
        "nccl-channel-net-ib",
        Good,
        Nccl,
        r"via NET/IB(?:ext\w*)?/(\d+)(/GDRDMA)?",
        "NCCL channels run over NET/IB device {1}{2}",
        "",
    ),
    sig(
        "nccl-channel-net-socket",
        Warn,
        Nccl,
        r"via NET/Socket/(\d+)",
        "NCCL channels run over TCP sockets",
        "See nccl-tcp-fallback.",
    ),
    fallback(sig(
        "nccl-gdr-disabled",
        Info,
        Nccl,
        r"GPU Direct RDMA Disabled for HCA (\d+) '([^']+)'",
        "GPUDirect RDMA is off for {2}: data is staged through host memory, so the ceiling is the staged model of `probe::expect` (the lowest of host copy, NIC and staging-stream rates), not NIC line rate; expected on eRDMA, where NCCL overlaps the copies with the network",
        "",
    )),
    sig(
        "nccl-ib-disabled-env",
        Info,
        Nccl,
        r"NCCL_IB_DISABLE set by environment to 1",
        "NCCL_IB_DISABLE=1: RDMA disabled on purpose (the TCP A/B run)",
        "",
    ),
    sig(
        "nccl-ib-hca-env",
        Info,
        Nccl,
        r"NCCL_IB_HCA set (?:by environment )?to (\S+)",
        "NCCL_IB_HCA={1}",
        "",
    ),
    sig(
        "nccl-gid-index-env",
        Info,
        Nccl,
        r"NCCL_IB_GID_INDEX set by environment to (\d+)",
        "NCCL_IB_GID_INDEX={1}",
        "",
    ),
    sig(
        "nccl-shm-disable-env",
        Info,
        Nccl,
        r"NCCL_SHM_DISABLE set by environment to 1",
        "shared-memory transport disabled: intra-node traffic also crosses the NIC (benchmarks only)",
        "Remove NCCL_SHM_DISABLE=1 for production multi-GPU workloads.",
    ),
    sig(
        "nccl-bootstrap",
        Info,
        Nccl,
        r"Bootstrap ?: Using (\S+)",
        "NCCL bootstrap (out-of-band TCP) on {1}",
        "",
    ),
    // --- NCCL / verbs failures ----------------------------------------------------------------------
    sig(
        "nccl-ib-no-device",
        Fail,
        Nccl,
        r"NET/IB ?: No device found",
        "NCCL found no usable RDMA device and will fall back to TCP",
        NO_DEVICE_FIX,
    ),
    sig(
        "nccl-libibverbs-missing",
        Fail,
        Nccl,
        r"(?i)(?:failed to open|unable to open|cannot open) libibverbs\.so",
        "libibverbs is not in the image (or not on the library path): NCCL cannot use RDMA",
        "Install libibverbs1, ibverbs-providers and librdmacm1 in the image (eRDMA: from the Alibaba Cloud eRDMA APT source).",
    ),
    sig(
        "ibverbs-no-provider",
        Fail,
        Ibverbs,
        r"libibverbs: Warning: no userspace device-specific driver found for (\S+)",
        "libibverbs has no userspace provider for {1}: the image lacks the device's driver library (stock Ray images have no erdma provider)",
        "Install ibverbs-providers from the device vendor's repository (eRDMA: the Alibaba Cloud eRDMA APT source, reachable only inside the VPC — build in-cluster).",
    ),
    sig(
        "ibverbs-couldnt-load-driver",
        Info,
        Ibverbs,
        r"libibverbs: Warning: couldn't load driver '([^']+)'",
        "libibverbs could not load provider {1}; harmless unless it is the provider of your device",
        "",
    ),
    sig(
        "ibverbs-no-devices",
        Fail,
        Ibverbs,
        r"No IB devices found|Failed to get IB devices list",
        "verbs sees no RDMA device in this container",
        NO_DEVICE_FIX,
    ),
    sig(
        "modify-qp-timeout",
        Fail,
        Nccl,
        r"ibv_modify_qp failed with (?:error )?(?:110 )?Connection timed out",
        "the queue pair could not be moved to RTR/RTS: the peers cannot reach each other over RDMA (wrong GID index, NICs on different rails, or a security group blocking the traffic)",
        "Set NCCL_IB_GID_INDEX to the IPv4-mapped RoCE v2 GID (eRDMA: 1; `rdmakit probe` shows it), try NCCL_CROSS_NIC=0 on rail-optimised fabrics, allow traffic between the nodes, and check with `ib_write_bw -d <dev> -x <gid>` between the two nodes.",
    ),
    sig(
        "modify-qp-unreachable",
        Fail,
        Nccl,
        r"ibv_modify_qp failed with (?:error )?(?:\d+ )?Network is unreachable",
        "the GID used for the connection has no route to the peer",
        "Set NCCL_IB_GID_INDEX to the IPv4-mapped RoCE v2 entry of the port on every node (eRDMA profile: 1; `rdmakit probe` prints it).",
    ),
    sig(
        "modify-qp-no-device",
        Fail,
        Nccl,
        r"ibv_modify_qp failed with (?:error )?(?:\d+ )?No such device",
        "a selected device or port cannot carry traffic (port down, or a device without link)",
        "Exclude it (NCCL_IB_HCA=^mlx5_3) or list the exact devices (NCCL_IB_HCA==mlx5_0,mlx5_1); on RoCE also pin NCCL_IB_GID_INDEX to the IPv4-mapped RoCE v2 entry (eRDMA profile: 1), since a GID slot without an address gives the same error.",
    ),
    fallback(sig(
        "nccl-retry-exceeded",
        Fail,
        Nccl,
        r"Got completion from peer .*?(?:status=12|error 12)|transport retry counter exceeded",
        "RDMA retries exhausted: packets between the NICs are being dropped (MTU mismatch, congestion without PFC/ECN, wrong GID)",
        GID_FIX,
    )),
    sig(
        "nccl-remote-error",
        Fail,
        Nccl,
        r"remote process exited or there was a network error",
        "a peer died or the network broke during the collective",
        "Read the other rank's log first; the first failing rank shows the cause.",
    ),
    fallback(sig(
        "nccl-unhandled-system-error",
        Fail,
        Nccl,
        r"unhandled system error",
        "NCCL hit a failing system or verbs call; the real cause is a WARN line before this one",
        "Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and feed the whole log to `rdmakit doctor`; common causes: memlock, ibv_modify_qp timeouts, missing devices.",
    )),
    sig(
        "ibv-port-down",
        Fail,
        Ibverbs,
        r"state:\s+PORT_(DOWN|INIT|ARMED)",
        "port state is {1}, not ACTIVE",
        "Bring the link up; for rxe the netdev under it must be up.",
    ),
    sig(
        "ibv-port-active",
        Good,
        Ibverbs,
        r"state:\s+PORT_ACTIVE",
        "port is ACTIVE",
        "",
    ),
    sig(
        "ibv-hca-id",
        Good,
        Ibverbs,
        r"hca_id:\s*(\S+)",
        "RDMA device {1} is visible to verbs",
        "",
    ),
    // --- NCCL net plugins: NCCL's loader, aws-ofi-nccl, gIB (signatures/plugins.rs) ----------------
    plugins::IB_FAILED,
    plugins::SOCKET,
    plugins::IB,
    plugins::ABSENT,
    plugins::LOAD_FAILED,
    plugins::NET_PLUGIN_ENV,
    plugins::NET_PLUGIN_LOADED,
    plugins::NET_PLUGIN_NOT_FOUND,
    plugins::NET_PLUGIN_DLOPEN_FAILED,
    plugins::NET_PLUGIN_INIT_FAILED,
    plugins::NET_PLUGIN_UNSUPPORTED,
    plugins::NET_NONE_INITIALIZED,
    plugins::USING_NETWORK_PLUGIN,
    plugins::CHANNEL_NET_PLUGIN,
    plugins::OFI_INIT,
    plugins::OFI_PROVIDER_EFA,
    plugins::OFI_PROVIDER_TCP,
    plugins::OFI_GETINFO_FAILED,
    plugins::OFI_INIT_FAILED,
    plugins::OFI_LIBFABRIC_OLD,
    plugins::GIB_INIT,
    plugins::GIB_MISMATCH_ENFORCED,
    plugins::GIB_MISMATCH_RECOMMENDED,
    plugins::GIB_CONFIG_MISSING,
    plugins::IBVERBS_CONFIG_DIR,
    // --- GID index (RoCE) ------------------------------------------------------------------------
    sig(
        "nccl-gid-type-mismatch",
        Fail,
        Nccl,
        r"status=12 .*?localGid\s*(::ffff:[0-9.]+)\s+remoteGids?\s*(fe80:[0-9a-f:]*)|status=12 .*?localGid\s*(fe80:[0-9a-f:]*)\s+remoteGids?\s*(::ffff:[0-9.]+)",
        "retries exhausted (status 12, vendor err 129) between GIDs of different types, local {1}{3} and remote {2}{4}: the nodes picked different GID indexes (one IPv4-mapped RoCE v2, one link-local), so the packets never route",
        GID_FIX,
    ),
    sig(
        "ucx-modify-qp-rtr",
        Fail,
        Ucx,
        r"UCX\s+ERROR\s.*?(?:failed to modify to RTR|RTR\) failed|modifying QP to RTR)\s*:\s*(.+?)\s*$",
        "UCX could not move a queue pair to RTR ({1}): the device or GID index UCX picked has no address or route in this pod",
        UCX_DEVICE_FIX,
    ),
    sig(
        "perftest-zero-gid",
        Fail,
        Ibverbs,
        r"^\s*GID: 00(?::00){15}\s*$",
        "perftest used an all-zero GID: that GID slot is empty in this pod, because the RDMA device's netdev is not in the pod's network namespace (or the index is wrong)",
        "Pass `-x <index>` of the IPv4-mapped RoCE v2 GID (`rdmakit probe`, `show_gids`), and give the pod the device's netdev: hostNetwork: true or a Multus secondary network (macvlan, SR-IOV) on the RDMA NIC.",
    ),
    sig(
        "perftest-connect-failed",
        Fail,
        Ibverbs,
        r"Failed to modify QP \d+ to RTR|Unable to Connect the HCA's through the link",
        "perftest could not connect the two queue pairs: wrong or empty GID, peers on different subnets, or a port that is down",
        GID_FIX,
    ),
    // --- locked memory (shell) ---------------------------------------------------------------------
    with_context(
        sig(
            "ulimit-l-limited",
            Fail,
            Shell,
            r"^\s*(\d{1,9})\s*$",
            "`ulimit -l` prints {1} KiB, not unlimited: ibv_create_qp and memory registration will fail with ENOMEM",
            MEMLOCK_FIX,
        ),
        r"ulimit -l\b",
        2,
    ),
    // --- device plugins and DRA ------------------------------------------------------------------
    sig(
        "rdma-dp-exposing-zero",
        Fail,
        Kubernetes,
        r#"exposing "0" devices"#,
        "the RDMA shared device plugin advertises 0 devices for a resource: pods requesting it stay Pending with `Insufficient rdma/...`",
        DEVICE_PLUGIN_FIX,
    ),
    sig(
        "rdma-dp-no-devices-for-resource",
        Fail,
        Kubernetes,
        r"no Rdma Devices were found for resource (\S+)",
        "no RDMA device matched the selectors of resource {1}",
        DEVICE_PLUGIN_FIX,
    ),
    sig(
        "rdma-dp-missing-char-device",
        Warn,
        Kubernetes,
        r#"missing RDMA device spec for device (\S+), RDMA device \\?"(\w+)\\?" not found"#,
        "PCI device {1} has no /dev/infiniband/{2}: the kernel module behind it is not loaded on the node (rdma_cm: rdma_ucm; issm/umad: ib_umad), so the plugin rejects the device",
        "Load the module on the node (`modprobe rdma_ucm`, `modprobe ib_umad`, or through the network operator's driver pod), then restart the device plugin pod.",
    ),
    sig(
        "dra-cannot-allocate",
        Fail,
        Kubernetes,
        r"cannot allocate all claims",
        "the scheduler found no node whose ResourceSlices have a free device that matches the claim's DeviceClass and selectors; the claim stays pending",
        DRA_FIX,
    ),
    sig(
        "dra-claim-pending",
        Warn,
        Kubernetes,
        r"^\S+\s+pending\s+\d+[smhd]\S*\s*$",
        "a ResourceClaim is still pending: no device has been allocated to it",
        DRA_FIX,
    ),
    // --- wrong NIC ---------------------------------------------------------------------------------
    sig(
        "nccl-socket-ifname-no-match",
        Fail,
        Nccl,
        r"(?i)Bootstrap ?: no socket interface found|no usable listening interface found|No interface found in the same subnet as remote address|no NCCL_SOCKET_IFNAME interface found",
        "NCCL found no usable interface for its TCP bootstrap: NCCL_SOCKET_IFNAME matches no interface with an address in this pod (or none in the peer's subnet)",
        SOCKET_IFNAME_FIX,
    ),
    sig(
        "nccl-socket-ifname-env",
        Info,
        Nccl,
        r"NCCL_SOCKET_IFNAME set by environment to (\S+)",
        "NCCL_SOCKET_IFNAME={1}",
        "",
    ),
    sig(
        "ucx-net-device-unavailable",
        Warn,
        Ucx,
        r"network device '([^']+)' is not available",
        "UCX_NET_DEVICES names {1}, which UCX cannot use in this pod",
        UCX_DEVICE_FIX,
    ),
    sig(
        "ucx-tcp-lane",
        Warn,
        Ucx,
        r"ep_cfg\[\d+\]: .*?\btcp/([\w.-]+)",
        "UCX wired an endpoint over TCP on {1}: with UCX_NET_DEVICES=all (the default) UCX binds any interface, a management NIC included, and the transfer never touches RDMA",
        "Restrict UCX_NET_DEVICES to the RDMA device (eRDMA: erdma_0:1; Mellanox: mlx5_0:1) and drop tcp from UCX_TLS for the data path.",
    ),
    sig(
        "ucx-net-devices-all",
        Info,
        Ucx,
        r"\bUCX_NET_DEVICES=all\b",
        "UCX_NET_DEVICES=all: UCX may use any interface, management NICs included",
        "",
    ),
    // --- GPUDirect -----------------------------------------------------------------------------------
    sig(
        "nccl-gdr-no-peermem",
        Warn,
        Nccl,
        r"GPU Direct RDMA Disabled for HCA \d+ '([^']+)' \(no module\)|Module (nvidia_peermem|nv_peer_mem) not found",
        "nvidia_peermem is not loaded ({1}{2}): NCCL stages every transfer through host memory although the NIC could read GPU memory directly",
        PEERMEM_FIX,
    ),
    sig(
        "nccl-dmabuf-unsupported",
        Warn,
        Nccl,
        r"ibv_reg_dmabuf_mr failed with (?:error )?Operation not supported",
        "DMA-BUF registration of GPU memory is not supported by this kernel, rdma-core or NIC driver",
        "Set NCCL_DMABUF_ENABLE=0 to use nvidia_peermem instead (load it on the node), or update the kernel, rdma-core/OFED and the GPU driver (open kernel modules).",
    ),
    sig(
        "nccl-dmabuf-available",
        Info,
        Nccl,
        r"DMA-BUF is available on GPU device (\d+)",
        "the GPU {1} driver can export memory as DMA-BUF (GPUDirect RDMA without nvidia_peermem)",
        "",
    ),
    sig(
        "nccl-gdr-enabled",
        Good,
        Nccl,
        r"GPU Direct RDMA (?:\(nvidia-peermem\) )?[Ee]nabled for HCA (\d+) '([^']+)",
        "GPUDirect RDMA is on for {2}: the NIC reads and writes GPU memory directly",
        "",
    ),
    // --- NCCL's topology file (signatures/topology.rs) ------------------------------------------------
    topology::TOPO_FILE_ENV,
    topology::TOPO_FILE_MISSING,
    // --- secondary network and service mesh -----------------------------------------------------------
    sig(
        "rdma-cm-no-netdev",
        Fail,
        Ibverbs,
        r"rdma_resolve_(?:addr|route) failed|RDMA_CM_EVENT_ADDR_ERROR|Unable to perform rdma_(?:client|server) function",
        "rdma_cm could not map the IP address to an RDMA device: the address is on the pod's CNI interface (veth), which has no RDMA device behind it",
        "Give the pod an interface on the RDMA NIC (hostNetwork: true, or a Multus secondary network: macvlan, ipoib or SR-IOV on that NIC) and use that interface's address for rdma_cm; or connect without rdma_cm (perftest without -R, NCCL's own out-of-band exchange).",
    ),
    sig(
        "service-mesh-sidecar",
        Warn,
        Kubernetes,
        r"\b(istio-proxy|linkerd-proxy)\b",
        "the pod runs a mesh sidecar ({1}): the mesh intercepts the pod's TCP, including NCCL's bootstrap and socket connections",
        MESH_FIX,
    ),
    sig(
        "nccl-socket-reset",
        Warn,
        Nccl,
        r"socketProgress: Connection (?:reset by peer|closed by remote peer)",
        "an NCCL TCP connection (bootstrap or socket transport) was closed by the other side: the peer died, or a proxy or firewall in between dropped it",
        "Read the peer's log first; if a mesh sidecar is injected into the pod, disable it (see service-mesh-sidecar).",
    ),
    // --- collective timeouts ----------------------------------------------------------------------------
    sig(
        "torch-watchdog-timeout",
        Fail,
        Nccl,
        r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+).*?Timeout\(ms\)=(\d+)\)",
        "collective {3} (SeqNum {2}) did not complete within its {4} ms timeout",
        WATCHDOG_FIX,
    ),
    // --- nccl-tests ---------------------------------------------------------------------------
    sig(
        "nccl-tests-wrong-values",
        Fail,
        NcclTests,
        r"Out of bounds values\s*:\s*([1-9]\d*) FAILED",
        "nccl-tests found {1} wrong values: data corruption",
        "Rerun with -c 1 on fewer nodes to isolate the node; check GPU/NIC health.",
    ),
    sig(
        "mpi-not-enough-slots",
        Fail,
        NcclTests,
        r"There are not enough slots available in the system to satisfy the (\d+)",
        "mpirun asked for {1} ranks, more than the slots of the hostfile the MPI Operator wrote (Worker replicas x slotsPerWorker): no rank started",
        "Make mpirun's -np at most the MPIJob's Worker replicas x slotsPerWorker (rdmakit renders -np = mpi_workers x slots per worker), or raise slotsPerWorker / the replicas to match -np.",
    ),
    sig(
        "nccl-tests-no-gpu",
        Fail,
        NcclTests,
        r"Test CUDA failure \S+ '(no CUDA-capable device is detected|invalid device ordinal)'",
        "a rank found no GPU of its own ({1}): the worker pod has fewer GPUs than its ranks ask for",
        "Give each worker container `resources.limits: nvidia.com/gpu: N` with N = slotsPerWorker x the GPUs per rank (all_reduce_perf -g); without the limit the device plugin mounts no GPU into the pod.",
    ),
    sig(
        "nccl-shm-too-small",
        Fail,
        Nccl,
        r"failed to extend (/dev/shm/\S+) to (\d+) bytes",
        "NCCL could not grow its shared-memory segment {1} to {2} bytes: the pod's /dev/shm is too small (a container's default /dev/shm is 64 MiB)",
        "Mount an emptyDir with `medium: Memory` at /dev/shm in the worker pods (the rendered MPIJob's shm volume), or set NCCL_SHM_DISABLE=1 to keep intra-node traffic off shared memory.",
    ),
    sig(
        "nccl-tests-avg-busbw",
        Info,
        NcclTests,
        r"# Avg bus bandwidth\s*:\s*([\d.]+)",
        "nccl-tests average bus bandwidth {1} GB/s",
        "",
    ),
    // --- image builds and registries ------------------------------------------------------------
    sig(
        "registry-insufficient-scope",
        Fail,
        Registry,
        r"insufficient_scope: authorization failed",
        "the credentials only have pull rights on that repository (re-hosted base images are pull-only)",
        "Push to a repository you own, and give the BuildKit client one merged docker config with both the pull and the push registry: `jq -s '{auths: (.[0].auths + .[1].auths)}' a.json b.json`.",
    ),
    sig(
        "registry-unauthorized",
        Fail,
        Registry,
        r"(?i)unauthorized: (?:authentication required|incorrect username or password)|401 Unauthorized",
        "the registry rejected the credentials (none mounted, or wrong)",
        "Mount the merged docker config Secret at the buildctl client (config.json, DOCKER_CONFIG) and check the registry host name matches the auths key.",
    ),
    sig(
        "dockerhub-unreachable",
        Fail,
        Registry,
        r"(?:registry-1\.docker\.io|index\.docker\.io|docker\.io).*(?:i/o timeout|connection refused|connection reset|TLS handshake timeout|no such host)",
        "docker.io is not reachable from this network (e.g. mainland-China regions)",
        "Pull the base image from a reachable copy (the runbook uses a re-hosted rayproject/ray-llm) or a registry mirror.",
    ),
    sig(
        "erdma-apt-unreachable",
        Fail,
        Buildkit,
        r"mirrors\.cloud\.aliyuncs\.com.*(?:Could not resolve|Failed to fetch|Connection timed out|Could not connect|Temporary failure)",
        "the eRDMA APT source is reachable only from inside an Alibaba Cloud VPC",
        "Build the image inside the cluster (BuildKit in the VPC), not on a laptop.",
    ),
    sig(
        "buildkit-no-space",
        Fail,
        Buildkit,
        // Not NCCL's own "No space left on device" for /dev/shm (nccl-shm-too-small): a file write failing.
        r"(?i)(?:write|extract|copy|mkdir|create|unpack)\S*\s.*: no space left on device",
        "the build ran out of disk",
        BUILD_DISK_FIX,
    ),
    sig(
        "k8s-ephemeral-eviction",
        Fail,
        Kubernetes,
        r"(?i)low on resource: ephemeral-storage|ephemeral local storage usage exceeds",
        "the pod was evicted for using too much node ephemeral storage",
        BUILD_DISK_FIX,
    ),
    sig(
        "buildkit-pushed",
        Good,
        Buildkit,
        r"pushing manifest for (\S+)",
        "image pushed: {1}",
        "",
    ),
    // --- scheduling -------------------------------------------------------------------------------
    sig(
        "k8s-insufficient-resource",
        Fail,
        Kubernetes,
        r"Insufficient ((?:aliyun/erdma|rdma/[\w.-]+|nvidia\.com/[\w.-]+|vke\.volcengine\.com/[\w.-]+))",
        "no node has free {1}",
        "Check node capacity (`kubectl get nodes -o custom-columns=...`), the device plugin (ack-erdma-controller / rdma-device-plugin) and that hostNetwork worker replicas do not exceed the number of RDMA nodes.",
    ),
    sig(
        "k8s-node-selector-mismatch",
        Warn,
        Kubernetes,
        r"didn't match Pod's node affinity/selector",
        "the pod's nodeSelector/affinity matches no node with free resources",
        "Compare the nodeSelector (e.g. the GPU model label aliyun.accelerator/nvidia_name) with `kubectl get nodes --show-labels`.",
    ),
];
