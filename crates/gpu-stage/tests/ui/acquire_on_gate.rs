// Taking a slot without a token (so that nothing ties its release to its owner) is not possible either.
use std::sync::Arc;

use gpu_stage::StagingRing;

fn take(ring: &Arc<StagingRing>) {
    ring.gate().acquire(0).unwrap();
}

fn main() {}
