#!/usr/bin/env bash
# Runs the unit tests Miri can interpret (no FFI: no verbs calls, no CUDA, no sockets) under
# `cargo +nightly miri test`, with Stacked Borrows (Miri's default aliasing model):
#   erdma-verbs: the whole lib test suite (the in-flight slab and WR chain linking in `wr`, CQ
#                completion bookkeeping, caps, errno, GID/endpoint codecs, MR range and access
#                checks); the one test that calls libibverbs is #[cfg_attr(miri, ignore)].
#   gpu-stage:   ring and slot-gate logic, credit/immediate and side-channel codecs of the RDMA
#                transport (`transport::rdma::{config,wire,plumbing}`), its chunk reordering,
#                checksums, ring config.
# Not part of `make test` (Miri is slow: minutes per crate on a loaded 2-core machine).
#
#   crates/gpu-stage/miri.sh            # both crates
#   crates/gpu-stage/miri.sh erdma      # erdma-verbs only
#   crates/gpu-stage/miri.sh gpu        # gpu-stage only
#
# Needs the nightly toolchain with the miri component: rustup +nightly component add miri rust-src
set -euo pipefail
cd "$(dirname "$0")/../.."
which="${1:-all}"
if ! cargo +nightly miri --version >/dev/null 2>&1; then
  echo "miri.sh: no Miri (rustup +nightly component add miri rust-src)" >&2
  exit 77
fi
# Isolation off: some tests read clocks (timeouts, PSN seeds); nothing here touches files or the net.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}"
# Miri builds into target/miri; CARGO_INCREMENTAL off keeps it small.
export CARGO_INCREMENTAL=0
if [[ "$which" == all || "$which" == erdma ]]; then
  echo "== miri: erdma-verbs (lib)"
  cargo +nightly miri test -p erdma-verbs --lib
fi
if [[ "$which" == all || "$which" == gpu ]]; then
  echo "== miri: gpu-stage (lib: ring, checksum, config, rdma config/wire/plumbing, reordering)"
  cargo +nightly miri test -p gpu-stage --features rdma --lib -- \
    ring:: checksum:: config::tests transport::rdma::config transport::rdma::wire \
    transport::rdma::plumbing chunks_arriving_out_of_order
fi
