//! The rule catalogue: every rule's id, default severity, summary and why it breaks RDMA
//! (`lint::rules()`, `rdmakit lint --explain`, the SARIF rule descriptors and the README table).

use super::{Rule, Severity};

macro_rules! rules {
    ($( $konst:ident = $id:literal, $sev:ident, $summary:literal, $why:literal; )*) => {
        $( pub(super) const $konst: &Rule = &Rule { id: $id, severity: Severity::$sev, summary: $summary, why: $why }; )*
        pub(super) const ALL_RULES: &[&Rule] = &[ $( $konst ),* ];
    };
}

rules! {
    RAY_HEAD_NUM_GPUS = "ray-head-num-gpus", Error,
        "Ray head without a GPU limit does not set rayStartParams num-gpus: \"0\"",
        "A head container without a GPU limit still sees every GPU of its node; Ray advertises them, so GPU actors can land on the head pod, which has no RDMA device, and NCCL falls back to TCP or fails.";
    RAY_START_PARAMS_STRING = "ray-start-params-not-string", Error,
        "rayStartParams value is not a string",
        "The RayCluster CRD declares rayStartParams as a map of strings; the API server rejects numbers and booleans (num-gpus: 0 must be written num-gpus: \"0\").";
    MISSING_IPC_LOCK = "rdma-missing-ipc-lock", Error,
        "RDMA container without the IPC_LOCK capability",
        "ibverbs pins (locks) memory for every registered buffer and queue pair; without CAP_IPC_LOCK the registrations fail (ibv_reg_mr/ibv_create_qp ENOMEM, NCCL 'Call to ibv_create_qp failed') and NCCL drops to TCP.";
    IPC_LOCK_WITHOUT_RDMA = "rdma-ipc-lock-without-device", Error,
        "Container adds IPC_LOCK but asks for no device and its pod for no RDMA resource or claim (profile linting)",
        "IPC_LOCK is what RDMA memory registration needs; in a profile's RDMA bundle a container that asks for it but whose pod requests no RDMA device (the device plugin's resource or a DRA claim) lost its device request: the scheduler places it on any node, it gets no /dev/infiniband, and the workload falls back to TCP or fails at ibv_open_device. Seed 004's test pod asks for both (vke.volcengine.com/infiniband-rdma: 1 with IPC_LOCK).";
    HOST_NETWORK_DNS = "host-network-dns-policy", Error,
        "hostNetwork: true without dnsPolicy: ClusterFirstWithHostNet",
        "With hostNetwork the default DNS policy resolves through the node, so cluster names such as the Ray head service do not resolve and workers cannot join.";
    REPLICAS_EXCEED_NODES = "host-network-replicas-exceed-nodes", Error,
        "hostNetwork group has more replicas than RDMA nodes",
        "Pods on the host network bind the node's ports, so at most one such pod runs per node; replicas beyond the RDMA node count stay Pending or crash on port conflicts.";
    NO_SPREAD = "host-network-no-spread", Warning,
        "hostNetwork group with several replicas and no one-per-node guarantee",
        "Two host-network pods on one node collide on ports (Ray, NCCL bootstrap); without required pod anti-affinity on kubernetes.io/hostname (or a DoNotSchedule topology spread) the scheduler may co-locate them.";
    HCA_WITHOUT_RDMA = "nccl-ib-hca-without-rdma", Error,
        "NCCL_IB_HCA is set but the pod requests no RDMA resource or claim",
        "Without an RDMA device plugin resource or DRA claim the container has no /dev/infiniband device, so NCCL finds no HCA and silently uses sockets.";
    HCA_MISMATCH = "nccl-ib-hca-mismatch", Error,
        "NCCL_IB_HCA does not match the profile's RDMA device names",
        "NCCL selects HCAs by name prefix; a value for another vendor's devices (mlx5 on an eRDMA node, or a typo) matches nothing and NCCL falls back to TCP without an error.";
    SHM_DISABLED = "nccl-shm-disabled", Warning,
        "NCCL_SHM_DISABLE=1 outside a benchmark",
        "Disabling shared memory forces intra-node traffic through the NIC; useful to benchmark RDMA, but it slows production multi-GPU workloads.";
    IB_DISABLED = "nccl-ib-disabled", Error,
        "NCCL_IB_DISABLE=1 left set",
        "NCCL_IB_DISABLE=1 turns the RDMA transport off: the job still succeeds but all traffic goes over TCP sockets and the RDMA counters stay at zero.";
    BAD_NCCL = "nccl-known-bad-version", Error,
        "NCCL 2.28.7 or 2.28.9 pinned",
        "NCCL 2.28.7 and 2.28.9 segfault in ncclNetInit() while probing eRDMA devices (SIGSEGV in every NCCL job); 2.28.3, 2.29.7 and 2.30.7 work.";
    TORCH_NCCL = "torch-bundled-bad-nccl", Warning,
        "torch 2.11 installed without an explicit NCCL pin",
        "torch 2.11 bundles NCCL 2.28.9, which segfaults in ncclNetInit() on eRDMA; pin a good nvidia-nccl wheel after installing torch.";
    NO_DEV_SHM = "nccl-missing-dev-shm", Warning,
        "NCCL pod without a memory-backed /dev/shm",
        "Container runtimes give /dev/shm 64 MiB; NCCL's shared-memory and proxy buffers exceed it ('failed to extend /dev/shm', bus errors) unless /dev/shm is an emptyDir with medium: Memory or the pod uses hostIPC.";
    PRIVILEGED = "privileged-instead-of-ipc-lock", Warning,
        "RDMA container runs privileged",
        "RDMA needs only the IPC_LOCK capability plus the device from the device plugin or DRA claim; privileged mode exposes every host device and hides a missing device request.";
    VKE_MGPU = "vke-mgpu-with-rdma", Error,
        "Volcengine mGPU resource together with RDMA",
        "On VKE a pod cannot use the mGPU and RDMA device plugins at the same time; the pod fails to start or gets no RDMA device.";
    VKE_TOPOLOGY = "vke-missing-topology-mount", Warning,
        "vke.volcengine.com/infiniband-rdma without the /var/run/nvidia-topologyd mount",
        "On non-bare-metal VKE instances NCCL reads the real PCIe/NIC topology from virtualTopology.xml in /var/run/nvidia-topologyd; without it NCCL picks a poor GPU-NIC pairing.";
    NIXL_ERDMA = "ucx-nixl-on-erdma", Error,
        "UCX/NIXL tensor transport on eRDMA",
        "eRDMA has no UD queue pairs and no SRQ: stock UCX fails (uct_iface_open(ud_verbs/erdma_0:1) failed, ibv_create_srq() Operation not supported). Use tensor_transport=\"nccl\", or a UCX built with Alibaba's eRDMA patch.";
    REQUEST_LIMIT = "rdma-request-limit-mismatch", Error,
        "Extended resource (RDMA/GPU) in requests but not limits, or with different values",
        "Extended resources cannot be overcommitted: the API server rejects a request without an equal limit, so the pod is never created.";
    DRA_CLAIM = "dra-claim-mismatch", Error,
        "DRA claim declared but not used by any container, or used but not declared",
        "A pod-level resourceClaim that no container lists in resources.claims allocates the RDMA device but injects it into no container; a container claim without a pod-level entry is rejected by the API server.";
    RDT_RECEIVER = "rdt-receiver-missing-enable-tensor-transport", Error,
        "Ray RDT program without enable_tensor_transport=True on the receiving actor",
        "Only actors declared with enable_tensor_transport=True get the background thread that receives RDT tensors; otherwise the receive queues behind consume(), which waits for the tensor, and fails with 'not found in RDT object store after 60.0s'.";
    RDT_GROUP = "rdt-missing-collective-group", Error,
        "Ray RDT over NCCL without create_collective_group",
        "The NCCL tensor transport needs an explicit collective group (ray.experimental.collective.create_collective_group) between sender and receiver; without it the transfer cannot start.";
    DOCKERFILE_USERSPACE = "dockerfile-missing-rdma-userspace", Error,
        "Dockerfile installs no (or not all) RDMA userspace packages",
        "Base images such as rayproject/ray-llm ship no ibverbs provider for the vendor's NIC (no erdma provider), so the container sees no RDMA device and NCCL silently uses TCP; the image must install libibverbs1, ibverbs-providers and librdmacm1 (from the vendor's source where it has one).";
    DOCKERFILE_APT_SOURCE = "dockerfile-apt-without-vendor-source", Error,
        "Dockerfile installs RDMA packages without the vendor's APT source",
        "The distribution's ibverbs-providers lacks the vendor's provider (Alibaba's erdma provider comes from mirrors.cloud.aliyuncs.com/erdma): without the vendor source apt installs a provider that finds no device.";
    GLOO_CPU = "rdt-gloo-cpu-transport", Warning,
        "Ray RDT with tensor_transport=\"gloo\" for GPU tensors",
        "GLOO is a CPU transport: every GPU tensor is copied to host memory and sent over TCP, so nothing goes over RDMA; use tensor_transport=\"nccl\" on RDMA fabrics.";
    UCX_ALL = "ucx-net-devices-all", Warning,
        "UCX_NET_DEVICES=all",
        "With all devices UCX also uses TCP and Ethernet interfaces and may pick one for the bulk transfer; name the RDMA port (UCX_NET_DEVICES=mlx5_0:1) so a missing device fails loudly instead of running over TCP.";
    SOCKET_IFNAME_NOTHING = "nccl-socket-ifname-excludes-nothing", Warning,
        "NCCL_SOCKET_IFNAME that selects or excludes nothing",
        "An empty value or a bare ^ leaves the interface choice to NCCL, which may bootstrap over docker0, lo or a CNI bridge the peer cannot reach; the job then hangs at init.";
    MESH_SIDECAR = "service-mesh-sidecar-on-nccl-pod", Error,
        "A service-mesh sidecar (Istio, Linkerd) injected into an NCCL pod",
        "The mesh proxy intercepts the pod's TCP traffic: NCCL's bootstrap and socket connections to the peer's ephemeral ports are redirected and fail or hang (ncclInternalError / socket timeouts).";
    GID_INDEX = "nccl-gid-index-mismatch", Error,
        "NCCL_IB_GID_INDEX differs from the profile's GID index",
        "The GID index selects the RoCE/eRDMA address NCCL uses; a wrong index picks an address the peer cannot route to (eRDMA needs its profile's index) and the QPs never connect.";
    EXPANDABLE_SEGMENTS = "pytorch-expandable-segments-rdma", Warning,
        "PyTorch expandable_segments on a pod that registers memory for RDMA",
        "expandable_segments maps CUDA memory in pieces that can move and grow; memory registered with the NIC (NCCL user buffers, RDT tensors) then stops matching its registration, giving registration failures or NCCL falling back to copies.";
    RDT_DRIVER_GET = "rdt-ray-get-copies-through-object-store", Warning,
        "ray.get on the result of an RDT (tensor_transport) method",
        "ray.get of an RDT reference in the driver or a non-GPU process falls back to the object store: the tensor is copied to host memory and serialised, which is the path RDT exists to avoid; pass the reference to the receiving actor instead.";
    PLUGIN_MISSING = "nccl-plugin-missing-from-image", Error,
        "Dockerfile does not install the profile's NCCL net plugin",
        "On a fabric NCCL reaches through a net plugin (aws-ofi-nccl on EFA), NCCL looks for libnccl-net*.so at start-up; when the image lacks it NCCL prints 'NET/Plugin: Could not find' and silently runs over TCP sockets at a fraction of the bandwidth, with no error.";
    PLUGIN_ENV = "nccl-plugin-env-missing", Error,
        "NCCL container without the environment the profile's net plugin needs",
        "The net plugin reads its provider settings from the environment (aws-ofi-nccl: FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1); without them libfabric may pick another provider (tcp, sockets) or GPUDirect stays off, and NCCL runs far below the fabric's rate.";
    PLUGIN_WITHOUT_RDMA = "nccl-plugin-env-without-rdma", Error,
        "Container set up for the profile's net plugin but the pod requests no RDMA resource or claim",
        "The plugin's provider settings (FI_PROVIDER=efa) say the container means to use the fabric, but without the device plugin resource (vpc.amazonaws.com/efa) or a DRA claim it has no device: aws-ofi-nccl finds 'No eligible providers' and NCCL falls back to sockets, or hangs.";
    PLUGIN_BAD = "nccl-plugin-known-bad-version", Error,
        "NCCL net plugin version known to fail pinned",
        "Some plugin releases crash or lose bandwidth with the drivers and installers of their time (aws-ofi-nccl 1.12.0-aws with EFA installer 1.35.0 and later); the profile lists them with the reason and the versions known to work.";
    PLUGIN_SOCKETS = "nccl-net-socket-with-plugin", Error,
        "NCCL_NET=Socket on a profile whose traffic goes through a net plugin",
        "NCCL_NET=Socket makes NCCL skip the plugin and move every byte over TCP; the job succeeds, the fabric's counters stay flat and the bandwidth is a fraction of the expected.";
    PLUGIN_HOST_MOUNT = "nccl-plugin-host-mount-missing", Error,
        "NCCL pod without the hostPath mount that brings the node's net plugin in",
        "Where a node installer puts the plugin on the node (GKE's nccl-rdma-installer: /home/kubernetes/bin/gib), pods see it only through a hostPath mount; without it NCCL finds no plugin and falls back to sockets.";
    SOCKET_IFNAME = "nccl-socket-ifname-unset", Info,
        "NCCL over RDMA without NCCL_SOCKET_IFNAME",
        "NCCL bootstraps and falls back over a TCP interface it picks itself; on hosts with several interfaces (docker0, lo, secondary NICs) it can pick one the peer cannot reach.";
}
