// A READ destination is an `Exclusive` (the sole handle); a shared `Local` slice is not accepted.
use erdma_verbs::{Local, RemoteBuf, SendWr};

fn unsound(shared: Local, remote: RemoteBuf) {
    let _ = SendWr::read(shared, remote);
}

fn main() {}
