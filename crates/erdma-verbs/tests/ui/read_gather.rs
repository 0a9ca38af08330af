// An RDMA READ writes into its local buffer: it must not gather a shared `Local` source that safe code
// can read (`MemoryRegion::as_slice`) while the NIC writes into it.
use erdma_verbs::{Exclusive, Local, RemoteBuf, SendWr};

fn unsound(dst: Exclusive, shared: Local, remote: RemoteBuf) {
    let _ = SendWr::read(dst, remote).gather(shared);
}

fn main() {}
