"""Stand-in for the rdmakit_rdt wheel, present in a pod only when its image was built with the wheel (the
stand-in buildctl saw `COPY rdmakit_rdt-*.whl` and found the file in the build context): gpu-stage moves a
tensor over the sender pod's RDMA devices (RDMAKIT_TRANSPORT=rdma) or over TCP (RDMAKIT_TRANSPORT=tcp); it has
no silent fallback: no device is an error."""
from emu import nccl


def register():
    pass


def _send(sender, receiver, nbytes):
    mode = sender.env.get("RDMAKIT_TRANSPORT", "rdma")
    devs = sender.pod.devices()
    if mode == "rdma":
        if not devs:
            raise RuntimeError(f"rdmakit_rdt: RDMAKIT_TRANSPORT=rdma but {sender.pod.name} has no RDMA device")
        memlock = sender.pod.memlock()
        if memlock is not None and memlock < nccl.IB_MEMLOCK_NEED:
            raise RuntimeError("rdmakit_rdt: ibv_reg_mr failed: Cannot allocate memory (RLIMIT_MEMLOCK)")
        sender.pod.node.add_bytes(devs, nbytes)
    rate = float(sender.pod.node.knob("ib-gib-s" if mode == "rdma" else "socket-gib-s",
                                      "14" if mode == "rdma" else "1.2"))
    import time
    time.sleep(min(nbytes / (rate * 2**30), 30.0))
