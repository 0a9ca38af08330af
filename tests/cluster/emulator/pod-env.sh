# Sourced by every emulated pod shell (BASH_ENV): `ulimit -l` reports the pod's memlock limit, which the
# emulator sets from the namespace's faults (64 KiB when containerd lacks LimitMEMLOCK=infinity).
ulimit() { if [ "$1" = "-l" ]; then echo "$EMU_MEMLOCK"; else builtin ulimit "$@"; fi; }
