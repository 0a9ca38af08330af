// Code outside gpu-stage must not free a slot it does not own: the pipeline's copy engine or a TCP
// writer may be using it. Only dropping the slot's `SlotToken` releases it.
use std::sync::Arc;

use gpu_stage::StagingRing;

fn forge(ring: &Arc<StagingRing>) {
    ring.gate().release(0);
}

fn main() {}
