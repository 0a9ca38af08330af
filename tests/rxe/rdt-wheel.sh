# shellcheck shell=bash
# Sourced by the rdmakit-rdt suites (suites/rdt-python-rdma.sh, suites/rdt-ray-rdma.sh): which wheel built with
# RDMA they run. rdt_wheel SUITE HINT sets WHEEL to $RDT_WHEEL or to the one wheel in target/wheels-rdma/ (which
# `make vm-test` builds), or prints why not and exits 77 (skip). Needs ROOT.
rdt_wheel() {
  local suite=$1 hint=$2 wheels
  if [ -n "${RDT_WHEEL:-}" ]; then
    WHEEL=$RDT_WHEEL
  else
    shopt -s nullglob
    wheels=("$ROOT"/target/wheels-rdma/rdmakit_rdt-*.whl)
    shopt -u nullglob
    if [ "${#wheels[@]}" -ne 1 ]; then
      echo "SKIP $suite: expected one wheel in $ROOT/target/wheels-rdma/, found ${#wheels[@]}; $hint"
      exit 77
    fi
    WHEEL=${wheels[0]}
  fi
  [ -r "$WHEEL" ] || { echo "SKIP $suite: $WHEEL not found; $hint"; exit 77; }
}
