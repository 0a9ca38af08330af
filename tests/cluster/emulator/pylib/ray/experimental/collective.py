from ray import _Collective


def create_collective_group(actors, backend="nccl", **_kw):
    return _Collective(actors, backend)


def destroy_collective_group(group):
    group.destroy()
