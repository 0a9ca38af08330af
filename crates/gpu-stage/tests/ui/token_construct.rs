// A slot token cannot be built outside the crate: only acquiring the slot makes one.
use std::sync::Arc;

use gpu_stage::{SlotToken, StagingRing};

fn forge(ring: Arc<StagingRing>) -> SlotToken {
    SlotToken { ring, slot: 0 }
}

fn main() {}
