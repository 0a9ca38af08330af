# Sourced by every emulated pod shell (BASH_ENV): `ulimit -l` reports the pod's memlock limit, which the
# emulator sets from the node's container runtime (emulator.rdmakit.test/containerd-memlock on the node).
ulimit() { if [ "$1" = "-l" ]; then echo "$EMU_MEMLOCK"; else builtin ulimit "$@"; fi; }
