// A slot token cannot be cloned: two owners of one slot would be two writers.
use gpu_stage::SlotToken;

fn copy(t: &SlotToken) -> SlotToken {
    t.clone()
}

fn main() {}
