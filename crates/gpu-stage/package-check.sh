#!/usr/bin/env bash
# "Ready for cargo add" check for erdma-verbs and gpu-stage: packages both crates as a registry would
# see them (`cargo package`, which also builds each .crate on its own), then builds and runs a scratch
# crate outside the workspace that depends on the packaged sources (not on the workspace paths) and
# runs gpu-stage's crate-level example on the host backend plus erdma-verbs' device listing.
#
#   crates/gpu-stage/package-check.sh      # exit 0: both packaged and the scratch user ran
#
# Needs the workspace to allow publishing: with `publish = false` in the root Cargo.toml's
# [workspace.package], cargo resolves gpu-stage's erdma-verbs dependency on crates.io, where it is not,
# and gpu-stage fails to package ("no matching package named `erdma-verbs` found").
# Not part of `make test` (it builds both crates and their dependencies once more, in target/package).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
echo "== cargo package -p erdma-verbs -p gpu-stage"
if ! cargo package -p erdma-verbs -p gpu-stage --allow-dirty; then
  echo "package-check: packaging failed; if it says erdma-verbs is not on crates.io, the root Cargo.toml" >&2
  echo "still has 'publish = false' in [workspace.package] (see crates/gpu-stage/README.md)" >&2
  exit 1
fi
pkg="$target/package"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/src"
cat >"$scratch/Cargo.toml" <<EOF
[package]
name = "scratch-user"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
erdma-verbs = "0.1.0"
gpu-stage = { version = "0.1.0", features = ["rdma"] }

# The packaged sources, as a registry would serve them.
[patch.crates-io]
erdma-verbs = { path = "$pkg/erdma-verbs-0.1.0" }
gpu-stage = { path = "$pkg/gpu-stage-0.1.0" }

[workspace]
EOF
cat >"$scratch/src/main.rs" <<'EOF'
use gpu_stage::{Device, HostDevice, InProcessStage, MIB, RingConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // gpu-stage's crate-level example (host backend).
    let dev = HostDevice::new();
    let data: Vec<u8> = (0..3 * MIB + 5).map(|i| (i % 251) as u8).collect();
    let src = dev.upload(&data)?;
    let mut dst = dev.alloc_zeroed(data.len())?;
    let mut stage = InProcessStage::new(&dev, &dev, RingConfig::new(MIB, 2)?)?;
    let stats = stage.transfer(&src, &mut dst)?;
    assert_eq!(stats.chunks, 4);
    assert_eq!(dev.download(&dst)?, data);
    // erdma-verbs' first crate-level example (an empty list on a machine without RDMA).
    for d in erdma_verbs::devices()? {
        let ctx = erdma_verbs::Context::open(&d.name)?;
        println!("{} ({})", d.name, ctx.caps().vendor);
    }
    gpu_stage::RdmaConfig::new(["erdma_0"]).validate()?;
    println!("scratch user of the packaged crates: ok");
    Ok(())
}
EOF
echo "== scratch crate outside the workspace, on the packaged sources"
(cd "$scratch" && CARGO_TARGET_DIR="$target/package-check" cargo run -q)
