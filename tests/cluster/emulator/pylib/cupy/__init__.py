"""Stand-in for cupy: only cupy.cuda.nccl.get_version, the image's NCCL (what the pod's image was built with)."""
