"""cupy.cuda.nccl: the NCCL the pod's image carries (the pin the stand-in buildctl saw in its Dockerfile)."""
from emu import context

_v = context.pod().nccl_version()
if not _v:
    raise ImportError("libnccl.so.2: cannot open shared object file: No such file or directory")


def get_version():
    a, b, c = (int(x) for x in _v.split("."))
    return a * 10000 + b * 100 + c
