#!/usr/bin/env bash
# Runs the unit tests Miri can interpret (no FFI: no verbs calls, no CUDA, no sockets) under
# `cargo +nightly miri test`, with Stacked Borrows (Miri's default aliasing model):
#   erdma-verbs: the whole lib test suite (the in-flight slab and WR chain linking in `wr`, CQ
#                completion bookkeeping, caps, errno, GID/endpoint codecs, MR range and access
#                checks); the one test that calls libibverbs is #[cfg_attr(miri, ignore)].
#   gpu-stage:   ring and slot-gate logic (remote-writable refusal, held slots), the pipelines on
#                the host backend (`pipeline::tests`: tiling checks, a panicking transport; the host
#                backend's worker-thread streams run under Miri), `device::host` (streams, events,
#                faults), the TCP receiver over in-memory fake peers (`transport::tcp`: greeting,
#                reader threads, reassembly, END bounds, checksums), credit/immediate and side-channel
#                codecs and readers of the RDMA transport (`transport::rdma::{config,wire,plumbing}`,
#                `transport::rdma::tests`), its chunk reordering, checksums, ring config.
#                Not run: `bench::` (real loopback sockets, which Miri cannot open, and MiB-sized
#                patterns), `device::cuda` (dlopen of libcuda), the integration tests (sockets).
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
# Isolation off: some tests read clocks (timeouts, PSN seeds, host-stream delays); nothing here touches
# files or the net.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}"
# Miri builds into target/miri; CARGO_INCREMENTAL off keeps it small.
export CARGO_INCREMENTAL=0
if [[ "$which" == all || "$which" == erdma ]]; then
  echo "== miri: erdma-verbs (lib)"
  cargo +nightly miri test -p erdma-verbs --lib
fi
if [[ "$which" == all || "$which" == gpu ]]; then
  echo "== miri: gpu-stage (lib: ring, pipeline, host device, tcp over in-memory peers, checksum, config, rdma codecs, reordering)"
  cargo +nightly miri test -p gpu-stage --features rdma --lib -- \
    ring:: checksum:: config::tests pipeline:: device::host transport::tcp transport::rdma::config \
    transport::rdma::wire transport::rdma::plumbing transport::rdma::tests chunks_arriving_out_of_order
fi
