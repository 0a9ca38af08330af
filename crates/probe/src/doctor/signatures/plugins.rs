//! NCCL net plugins: NCCL's own plugin loader (every wording from 2.18 to 2.30), aws-ofi-nccl
//! (libfabric, EFA) and Google's gIB (GKE RDMA). Each plugin has its "used", "not found", "did
//! not load" and "fell back" lines, with the cause and the fix.
//!
//! Strings are encoded only as the sources print them:
//! - NCCL: `src/net.cc` (2.18–2.26: `Plugin load (%s) returned`, `dlerror=%s No plugin found`,
//!   `NET/Plugin: No plugin found (%s)`, `Plugin load returned %d : %s when loading %s`),
//!   `src/plugin/plugin_open.cc` (2.22+: `NET/Plugin: Could not find:%s. Using internal net
//!   plugin.`, 2.28+: `NET/Plugin: %s: %s`), `src/plugin/net.cc` (2.27+: `Successfully loaded
//!   external [network ]plugin`, `Initialized` / `Failed to initialize` / `Assigned NET plugin %s`,
//!   `External network plugin %s is unsupported`, `WARN Failed to initialize any NET plugin`,
//!   2.28+: `NCCL_NET_PLUGIN set by environment to %s`), `src/plugin/net/net_v*.cc`
//!   (`NET/Plugin: Loaded net plugin %s (v%d)`).
//! - aws-ofi-nccl (`NCCL_OFI_WARN`/`NCCL_OFI_INFO` prefix every line with `NET/OFI `):
//!   `src/nccl_ofi_net.c[pp]` (`Initializing aws-ofi-nccl <version>`, `Selected Provider is %s
//!   (found %d nics)` up to 1.13, `Selected provider is %s, fabric is %s (found %d nics)` from
//!   1.14, `EFA provider requires at least libfabric version`, `Failed to initialize rdma
//!   protocol`, `Unable to find a protocol that worked.`, `aws-ofi-nccl initialization failed`),
//!   `src/nccl_ofi_rdma.c[pp]` / `nccl_ofi_sendrecv.c[pp]` (`OFI fi_getinfo() call failed: %s`),
//!   1.7 and older `Couldn't find any optimal provider`; 1.3 printed `Using aws-ofi-nccl %s`;
//!   the plugin's NCCL name is `Libfabric` (NVIDIA builds from 1.13) or `AWS Libfabric`.
//!   libfabric's own `fi_getinfo: provider efa output empty list` is quoted in aws-ofi-nccl
//!   issue #889; the `fi_info -p efa -t FI_EP_RDM` check is the maintainers' advice in #1020.
//! - gIB: Google Cloud's "Troubleshoot NCCL/gIB" page (`NET/gIB : Initializing gIB v1.0.5`,
//!   `Using network gIB`, `NCCL/NET (shim) mismatch enforced|recommended`, the guest config
//!   checker's `cannot find config file at default paths`, the mounts and LD_LIBRARY_PATH);
//!   rdma-core prints `libibverbs: Warning: couldn't open config directory '%s'.`.

use super::*;

/// How to give NCCL the net plugin a fabric needs (also used by the whole-log rules).
pub const PLUGIN_PATH_FIX: &str = "Put the plugin in the image and its directory on LD_LIBRARY_PATH, or set \
NCCL_NET_PLUGIN to the library's full path (NCCL tries the name as given, then libnccl-net-<name>.so). \
aws-ofi-nccl installs under /opt/amazon/ofi-nccl/lib (the EFA installer and the libnccl-ofi packages); GKE's gIB \
needs the node's /home/kubernetes/bin/gib mounted at /usr/local/gib and \
LD_LIBRARY_PATH=/usr/local/gib/lib64:/usr/local/nvidia/lib64. Check with `ldd <plugin>` that its own \
dependencies (libfabric.so.1 for aws-ofi-nccl) resolve in the pod.";

const EFA_DEVICE_FIX: &str = "Give the pod its EFA devices: request `vpc.amazonaws.com/efa: <the instance type's EFA \
count>` in the container's resources (the EFA device plugin mounts /dev/infiniband/uverbs*), and run \
`fi_info -p efa -t FI_EP_RDM` in the pod: it must list the devices (-61 is FI_ENODATA: none). The image needs \
libfabric with the efa provider (the EFA installer, `--skip-kmod` inside images) and the instance's security group \
must allow all traffic to itself.";

const GIB_ENV_FIX: &str = "Source /usr/local/gib/scripts/set_nccl_env.sh in the container before the workload and do \
not override what it sets; Google's guest config checker compares the NCCL environment with it (enforced \
mismatches end the job). Its configuration is /usr/local/gib/configs/guest_config.txtpb \
(NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE).";

// --- NCCL's internal transports as plugins (2.27+: Initialized/Assigned; 2.28+: Failed to initialize) ---

pub(super) const IB_FAILED: Signature = sig(
    "nccl-net-plugin-ib-failed",
    Fail,
    Nccl,
    r"Failed to initialize NET plugin IB",
    "NCCL's IB transport failed to initialise (no usable RDMA device, provider or libibverbs in the pod), so NCCL continues over TCP sockets",
    NO_DEVICE_FIX,
);

pub(super) const SOCKET: Signature = sig(
    "nccl-net-plugin-socket",
    Warn,
    Nccl,
    r"(?:Initialized|Assigned) NET plugin Socket",
    "NCCL loaded its socket (TCP) network plugin for this communicator",
    "See nccl-tcp-fallback: set NCCL_IB_DISABLE=0 and make NET/IB usable (device, provider, NCCL_IB_HCA).",
);

pub(super) const IB: Signature = sig(
    "nccl-net-plugin-ib",
    Good,
    Nccl,
    r"(?:Initialized|Assigned) NET plugin (IB\w*)",
    "NCCL loaded its {1} (RDMA) network plugin",
    "",
);

pub(super) const ABSENT: Signature = sig(
    "nccl-net-plugin-absent",
    Info,
    Nccl,
    r"NET/Plugin ?: (?:Could not find: libnccl-net\.so(?:\.|\s*$)|(?:dlerror=.*)?No plugin found \(libnccl-net\.so\)|Plugin load \(libnccl-net\.so\) returned 2)",
    "no external NCCL net plugin (libnccl-net.so) in the image: NCCL uses its internal IB and socket transports (normal \
unless the fabric needs a vendor plugin: aws-ofi-nccl on EFA, gIB on GKE)",
    "",
);

pub(super) const LOAD_FAILED: Signature = fallback(sig(
    "nccl-net-plugin-load-failed",
    Warn,
    Nccl,
    r"NET/Plugin ?: Plugin load \((\S+)\) returned (\d+)",
    "the NCCL net plugin {1} did not load (error {2}): NCCL falls back to its internal transports and loses what the \
plugin adds (EFA through aws-ofi-nccl, gIB on GKE, SHARP)",
    PLUGIN_PATH_FIX,
));

// --- NCCL's plugin loader ---------------------------------------------------------------------

pub(super) const NET_PLUGIN_ENV: Signature = sig(
    "nccl-net-plugin-env",
    Info,
    Nccl,
    r"NCCL_NET_PLUGIN set by environment to (\S+)|Plugin name set by env to (\S+)",
    "the net plugin NCCL was told to load: {1}{2}",
    "",
);

pub(super) const NET_PLUGIN_LOADED: Signature = sig(
    "nccl-net-plugin-loaded",
    Good,
    Nccl,
    r"NET/Plugin ?: Loaded net plugin (.+?) \(v\d+\)|NCCL INFO Successfully loaded external (?:network )?plugin (\S+)",
    "NCCL loaded the external net plugin {1}{2}",
    "",
);

pub(super) const NET_PLUGIN_NOT_FOUND: Signature = sig(
    "nccl-net-plugin-not-found",
    Warn,
    Nccl,
    r"NET/Plugin ?: (?:Could not find: ((?:\S+ )?(?:\S*libnccl-net-[\w.-]+?\.so|/\S+?\.so))|.*No plugin found \((\S*libnccl-net-[\w.-]+?\.so|/\S+?)\))",
    "NCCL_NET_PLUGIN names a net plugin that is not in the image ({1}{2} is on no library path), so NCCL uses its \
internal IB and socket transports: on EFA (aws-ofi-nccl) that means TCP, on GKE (gIB) the internal IB transport \
without Google's tuning",
    PLUGIN_PATH_FIX,
);

pub(super) const NET_PLUGIN_DLOPEN_FAILED: Signature = sig(
    "nccl-net-plugin-dlopen-failed",
    Warn,
    Nccl,
    r"NET/Plugin ?: Plugin load returned \d+ : (.+?)(?: :)? when loading( \S+)|NET/Plugin:( \S+?\.so\S*): (\S+: (?:cannot open shared object file|undefined symbol|wrong ELF class|version `|failed to map segment).*)|NET/Plugin: (\S+: (?:cannot open shared object file|undefined symbol|wrong ELF class|version `|failed to map segment).*)|NET/Plugin : Plugin load returned \d+ : (.+?)\.?\s*$",
    "NCCL found the net plugin{2}{3} but could not load it: {1}{4}{5}{6}. NCCL continues with its internal IB and socket \
transports and loses what the plugin adds (EFA through aws-ofi-nccl, gIB on GKE)",
    PLUGIN_PATH_FIX,
);

pub(super) const NET_PLUGIN_INIT_FAILED: Signature = fallback(sig(
    "nccl-net-plugin-init-failed",
    Warn,
    Nccl,
    r"Failed to initialize NET plugin (.+?)\s*$",
    "NCCL loaded the net plugin {1}, but its init found nothing to use, so NCCL moved on to its internal transports: \
the plugin's own lines above say why (aws-ofi-nccl: `NET/OFI` warnings, usually no EFA device in the pod)",
    "Read the plugin's lines above (nccl-ofi-getinfo-failed, nccl-ofi-init-failed) and give the pod the fabric's \
devices: `vpc.amazonaws.com/efa` on EKS, the RDMA networks of `networking.gke.io/interfaces` on GKE, the RDMA \
resource or claim elsewhere; /dev/infiniband must exist in the container.",
));

pub(super) const NET_PLUGIN_UNSUPPORTED: Signature = sig(
    "nccl-net-plugin-unsupported",
    Warn,
    Nccl,
    r"External network plugin (\S+) is unsupported",
    "the net plugin {1} exports no ncclNet API version this NCCL knows (plugin and NCCL are too far apart), so NCCL \
ignores it and uses its internal transports",
    "Install the plugin release built for this NCCL version (aws-ofi-nccl and gIB list the NCCL versions they \
support), or run the NCCL the plugin is shipped with (gIB's installer bundles its NCCL).",
);

pub(super) const NET_NONE_INITIALIZED: Signature = sig(
    "nccl-net-none-initialized",
    Fail,
    Nccl,
    r"Failed to initialize any NET plugin",
    "no network NCCL may use initialised: NCCL_NET forces one network (for example Libfabric or gIB) and NCCL has no \
fallback then, so the communicator fails with ncclInvalidUsage",
    "Find why the forced network failed in the lines above (nccl-net-plugin-not-found, nccl-net-plugin-dlopen-failed, \
NET/OFI or gIB errors, `Failed to open libibverbs`). NCCL_NET must name a network that works in this pod; a \
single-node run needs no fabric plugin, so do not export NCCL_NET there (check which sourced script sets it).",
);

pub(super) const USING_NETWORK_PLUGIN: Signature = sig(
    "nccl-using-network-plugin",
    Good,
    Nccl,
    r"(?:Using network|(?:Initialized|Assigned) NET plugin) (AWS Libfabric|Libfabric|gIB)\b",
    "NCCL runs over the {1} network plugin (RDMA through the fabric's plugin, not NCCL's socket transport)",
    "",
);

pub(super) const CHANNEL_NET_PLUGIN: Signature = sig(
    "nccl-channel-net-plugin",
    Good,
    Nccl,
    r"via NET/(AWS Libfabric|Libfabric|gIB)/(\d+)(/GDRDMA)?",
    "NCCL channels run over the {1} plugin, device {2}{3}",
    "",
);

// --- aws-ofi-nccl (libfabric, EFA) -------------------------------------------------------------

pub(super) const OFI_INIT: Signature = sig(
    "nccl-ofi-plugin",
    Info,
    Nccl,
    r"NET/OFI (?:Initializing|Using) (aws-ofi-nccl \S+)",
    "{1}, NCCL's libfabric net plugin (EFA), is loaded",
    "",
);

pub(super) const OFI_PROVIDER_EFA: Signature = sig(
    "nccl-ofi-provider-efa",
    Good,
    Nccl,
    r"NET/OFI Selected [Pp]rovider is efa\b",
    "aws-ofi-nccl selected libfabric's efa provider: NCCL traffic crosses EFA",
    "",
);

pub(super) const OFI_PROVIDER_TCP: Signature = sig(
    "nccl-ofi-provider-tcp",
    Fail,
    Nccl,
    r"NET/OFI Selected [Pp]rovider is ((?:tcp|sockets|udp)[^\s,]*)",
    "aws-ofi-nccl selected libfabric's {1} provider: NCCL reports the Libfabric network, but the bytes go over TCP, \
not EFA",
    "Make the EFA devices visible in the pod and restrict libfabric to them with FI_PROVIDER=efa (aws-ofi-nccl does this \
itself on the EC2 instance types it knows: `Setting provider_filter to efa`). Request `vpc.amazonaws.com/efa` and \
check `fi_info -p efa -t FI_EP_RDM` in the pod.",
);

pub(super) const OFI_GETINFO_FAILED: Signature = sig(
    "nccl-ofi-getinfo-failed",
    Fail,
    Nccl,
    r"NET/OFI (?:OFI fi_getinfo\(\) call failed(: .+?)\s*$|Couldn't find any optimal provider)|fi_getinfo(: provider efa output empty list)",
    "libfabric offered aws-ofi-nccl no usable provider (fi_getinfo{1}{2}): the pod sees no EFA device (no `vpc.amazonaws.com/efa` \
requested, so /dev/infiniband is not mounted), or the image's libfabric has no efa provider",
    EFA_DEVICE_FIX,
);

pub(super) const OFI_INIT_FAILED: Signature = sig(
    "nccl-ofi-init-failed",
    Fail,
    Nccl,
    r"NET/OFI (?:Failed to initialize (?:rdma|sendrecv) protocol|Unable to find a protocol that worked|aws-ofi-nccl initialization failed)",
    "aws-ofi-nccl gave up initialising: NCCL drops the plugin and continues with its internal transports (TCP on EFA \
nodes); the NET/OFI warning before this line names the reason",
    EFA_DEVICE_FIX,
);

pub(super) const OFI_LIBFABRIC_OLD: Signature = sig(
    "nccl-ofi-libfabric-too-old",
    Fail,
    Nccl,
    r"NET/OFI EFA provider requires at least libfabric version (\d+\.\d+(?:\.\d+)?)",
    "the image's libfabric is older than {1}, the version this aws-ofi-nccl needs for EFA, so the plugin refuses EFA",
    "Install the libfabric of a current EFA installer in the image (the one the aws-ofi-nccl release was tested with), \
or pin an aws-ofi-nccl release that supports the libfabric you have.",
);

// --- Google gIB (GKE RDMA) ---------------------------------------------------------------------

pub(super) const GIB_INIT: Signature = sig(
    "nccl-gib-plugin",
    Info,
    Nccl,
    r"NET/gIB ?: Initializing gIB (v\S+)",
    "Google's gIB net plugin {1} is loaded",
    "",
);

pub(super) const GIB_MISMATCH_ENFORCED: Signature = sig(
    "nccl-gib-env-enforced",
    Fail,
    Nccl,
    r"NCCL/NET \(\s*shim\s*\) mismatch enforced:\s*(\w+)\s*=\s*(\S+?)\s*\(\s*expected ([^)]*?)\s*\)",
    "gIB's guest config checker ends the workload: {1}={2}, but the gIB configuration expects {3}",
    GIB_ENV_FIX,
);

pub(super) const GIB_MISMATCH_RECOMMENDED: Signature = sig(
    "nccl-gib-env-recommended",
    Warn,
    Nccl,
    r"NCCL/NET \(\s*shim\s*\) mismatch recommended:\s*(\w+)\s*=\s*(\S+?)\s*\(\s*expected ([^)]*?)\s*\)",
    "gIB's guest config checker recommends a different setting: {1}={2}, expected {3} (the job runs, more slowly)",
    GIB_ENV_FIX,
);

pub(super) const GIB_CONFIG_MISSING: Signature = sig(
    "nccl-gib-config-missing",
    Warn,
    Nccl,
    r"cannot find config file at default paths\s*;\s*you must specify NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE",
    "gIB's guest config checker found no configuration file in its default paths (the gIB installer directory is not \
mounted where the workload looks)",
    "Mount the node's /home/kubernetes/bin/gib at /usr/local/gib, or set \
NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE=/usr/local/gib/configs/guest_config.txtpb (the installer's default).",
);

pub(super) const IBVERBS_CONFIG_DIR: Signature = sig(
    "ibverbs-config-dir-missing",
    Warn,
    Ibverbs,
    r"libibverbs: Warning: couldn't open config directory '([^']+)'",
    "libibverbs looks for its device providers in {1}, which is not in this container, so it loads none and sees no RDMA \
device: NCCL falls back to TCP (with gIB's libibverbs under /usr/local/gib: the gIB directory is not mounted)",
    "Install the libibverbs and providers of one rdma-core into the image, or, on GKE with gIB, mount the node's \
/home/kubernetes/bin/gib at /usr/local/gib (Google's workload manifest does this); then `ibv_devices` must list the \
NICs.",
);
