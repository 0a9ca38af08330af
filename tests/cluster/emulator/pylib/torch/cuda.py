"""torch.cuda on the pod's GPUs: as many as its container's nvidia.com/gpu limit, the node's model."""
from emu import context

_current = 0


def device_count():
    return context.pod().gpus()


def is_available():
    return device_count() > 0


def _need_gpu():
    if device_count() == 0:
        raise RuntimeError("No CUDA GPUs are available")


def set_device(i):
    global _current
    _need_gpu()
    if i >= device_count():
        raise RuntimeError("CUDA error: invalid device ordinal")
    _current = i


def get_device_name(i=0):
    _need_gpu()
    return context.pod().node.gpu_model()


def synchronize():
    pass
