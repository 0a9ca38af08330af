# Sourced by every emulated pod shell (BASH_ENV): `ulimit -l` reports the pod's memlock limit, which the
# emulator sets from the node's container runtime (emulator.rdmakit.test/containerd-memlock on the node).
ulimit() { if [ "$1" = "-l" ]; then echo "$EMU_MEMLOCK"; else builtin ulimit "$@"; fi; }

# cat, ls, mkdir and tar (EMU_PASSTHROUGH) in a script: the emulator (tests/cluster/emulator/bin) maps the pod's paths in their
# arguments, a Python process each (~35 ms of CPU; three per probed pod at 1,000 pods, bench/scale). The
# script's own text was mapped before bash started, so an argument names a path the pod maps only when it
# came from elsewhere (a variable, a substitution): then, and only then, the emulator runs the tool.
# EMU_MAPPED is the pod's mapped paths (':'-separated); the test is map_text's: a path at the start of an
# argument or after a character that cannot be part of a path.
_emu_unmapped() {
  local a p IFS=:
  for a in "$@"; do
    for p in $EMU_MAPPED; do
      [[ $a == "$p"* || $a =~ [^[:alnum:]_./]"$p" ]] && return 1
    done
  done
  return 0
}
for _emu_tool in $EMU_PASSTHROUGH; do  # the emulator's PASSTHROUGH tools
  eval "$_emu_tool() { if [ -n \"\$EMU_REAL_PATH\" ] && _emu_unmapped \"\$@\"; then PATH=\"\$EMU_REAL_PATH\" command $_emu_tool \"\$@\"; else command $_emu_tool \"\$@\"; fi; }"
done
unset _emu_tool
