"""Stand-in for the slice of PyTorch the rendered programs use (tests/cluster/emulator/README in the tier's
README): tensors are a fill value and a length (no memory is allocated), CUDA is the pod's GPUs, and
torch.distributed's NCCL backend is emu.nccl deciding the transport from the pod."""
from . import cuda  # noqa: F401
from . import distributed  # noqa: F401

float32 = "float32"


class Tensor:
    def __init__(self, n, value, device="cpu"):
        self.n, self.value, self._device = int(n), float(value), device

    @property
    def device(self):
        return self._device

    def numel(self):
        return self.n

    def fill_(self, v):
        self.value = float(v)
        return self

    def nbytes(self):
        return self.n * 4

    def __eq__(self, other):
        return _Bool(self.value == float(other))

    def item(self):
        return self.value


class _Bool:
    def __init__(self, v):
        self.v = v

    def item(self):
        return self.v


def _device(device):
    if str(device).startswith("cuda"):
        cuda._need_gpu()
        return f"cuda:{cuda._current}"
    return "cpu"


def ones(n, dtype=None, device="cpu"):
    return Tensor(n, 1.0, _device(device))


def full(shape, fill, dtype=None, device="cpu"):
    n = shape[0] if isinstance(shape, (tuple, list)) else shape
    return Tensor(n, fill, _device(device))


def all(b):  # noqa: A001 - torch's name
    return b
