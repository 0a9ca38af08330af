// A READ has no inline data: the builder does not offer `inline`.
use erdma_verbs::{Exclusive, RemoteBuf, SendWr};

fn nonsense(dst: Exclusive, remote: RemoteBuf) {
    let _ = SendWr::read(dst, remote).inline();
}

fn main() {}
