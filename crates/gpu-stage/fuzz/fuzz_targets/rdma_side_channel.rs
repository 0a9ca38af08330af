#![no_main]
//! A hostile peer on the RDMA transport's side channel: arbitrary bytes as the lines it sends after
//! setup, read by the receiver's and the sender's real side-channel readers (capped lines, END
//! queued into the bounded event channel, ACK recorded), and each line through the setup parsers and
//! checks (`Wire::from_line`, `check_hello`, `check_welcome`). Nothing may panic; the readers must
//! end on any input (EOF at the latest) having queued no more than the channel holds.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (ends, acks) = gpu_stage::fuzzing::rdma_side_channel(data);
    assert!(ends <= 12, "{ends} ENDs queued past the bound");
    assert!(acks <= 1);
});
