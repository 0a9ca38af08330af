//! Soft-RoCE tier: real kernel RDMA (rdma_rxe) inside the VM started by `tests/rxe/run.sh`.
//!
//! The two-process tests re-run this test binary as the peer: the parent sets `ERDMA_RXE_ROLE=peer` and
//! `ERDMA_RXE_OOB=<port>` and runs the same test with `--exact`; the test body sees the variable and
//! plays the peer. Endpoints and buffer descriptions travel as JSON lines over TCP on 127.0.0.1.

// Helpers outside #[test] fns panic on failure on purpose: a broken fixture is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use erdma_verbs::cm::{Connector, Listener};
use erdma_verbs::*;
use serde::{Deserialize, Serialize};

const VM: &str = "soft-RoCE VM tier: run by tests/rxe/run.sh";

/// Counts this thread's allocations, for the allocation-free fast path test.
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static ALLOCS: Cell<usize> = const { Cell::new(0) };
    }

    pub struct Counting;

    // SAFETY: forwards every call to the system allocator; counting touches only a const-initialised
    // thread-local Cell, which never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: forwarded with the caller's contract.
            unsafe { System.alloc(l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
            let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: forwarded with the caller's contract.
            unsafe { System.realloc(p, l, n) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: forwarded with the caller's contract.
            unsafe { System.dealloc(p, l) }
        }
    }

    pub fn allocations(f: impl FnOnce()) -> usize {
        let before = ALLOCS.with(Cell::get);
        f();
        ALLOCS.with(Cell::get) - before
    }
}

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;
const T: Duration = Duration::from_secs(20);
const MIB: usize = 1 << 20;

fn device() -> String {
    std::env::var("RDMAKIT_RXE_DEVICE").unwrap_or_else(|_| "rxe0".into())
}

fn gid_index() -> u32 {
    std::env::var("RDMAKIT_RXE_GID_INDEX")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn rxe_ip() -> String {
    std::env::var("RDMAKIT_RXE_IP")
        .expect("RDMAKIT_RXE_IP (veth0's IPv4 address) must be set in the VM")
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[derive(Serialize, Deserialize, Debug)]
struct Hello {
    ep: Endpoint,
    buf: RemoteBuf,
}

/// JSON-lines channel over TCP.
struct Oob {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Oob {
    fn new(s: TcpStream) -> Oob {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Oob {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }
    fn send<M: Serialize>(&mut self, m: &M) {
        let mut line = serde_json::to_string(m).unwrap();
        line.push('\n');
        self.w.write_all(line.as_bytes()).unwrap();
    }
    fn recv<M: for<'de> Deserialize<'de>>(&mut self) -> M {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad OOB message {line:?}: {e}"))
    }
}

/// Parent side: spawns the peer process running `test` and returns the OOB channel to it.
fn spawn_peer(test: &str) -> (Child, Oob) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ERDMA_RXE_ROLE", "peer")
        .env("ERDMA_RXE_OOB", port.to_string())
        .spawn()
        .unwrap();
    let (s, _) = l.accept().unwrap();
    (child, Oob::new(s))
}

/// Peer side: Some(channel) when this process is the peer.
fn as_peer() -> Option<Oob> {
    if std::env::var("ERDMA_RXE_ROLE").ok()? != "peer" {
        return None;
    }
    let port: u16 = std::env::var("ERDMA_RXE_OOB").ok()?.parse().ok()?;
    Some(Oob::new(TcpStream::connect(("127.0.0.1", port)).unwrap()))
}

fn finish(mut child: Child, oob: &mut Oob) {
    let verdict: String = oob.recv();
    let status = child.wait().unwrap();
    assert_eq!(verdict, "ok", "peer reported a failure");
    assert!(status.success(), "peer process failed: {status}");
}

struct Side {
    ctx: Arc<Context>,
    pd: Arc<ProtectionDomain>,
    cq: Arc<CompletionQueue>,
    builder: QpBuilder,
}

fn side(with_channel: bool) -> Side {
    let ctx = Context::open(&device()).unwrap();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let ch = with_channel.then(|| CompletionChannel::new(&ctx).unwrap());
    let cq = CompletionQueue::new(&ctx, 512, ch.as_ref()).unwrap();
    let builder = QpBuilder::new(&cq, &cq)
        .gid_index(gid_index())
        .max_send_wr(64)
        .max_recv_wr(64);
    Side {
        ctx,
        pd,
        cq,
        builder,
    }
}

fn wait_for(cq: &CompletionQueue, n: usize) -> Vec<Completion> {
    let mut all = Vec::new();
    while all.len() < n {
        all.extend(cq.wait(Some(T)).unwrap());
    }
    all
}

const WRITE_AT: usize = 0;
const IMM_AT: usize = 64 * 1024;
const READ_AT: usize = 256 * 1024;
const CHUNK: usize = 64 * 1024;
const SEND_LEN: usize = 4096;
const IMM: u32 = 0x00c0_ffee;

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn two_process_oob_write_imm_read_send_verified() {
    let _ = VM;
    if let Some(mut oob) = as_peer() {
        // Peer (B): target of WRITE/WRITE_WITH_IMM/SEND, source of READ; waits event-driven.
        let s = side(true);
        let mut buf = MemoryRegion::new(&s.pd, MIB, Access::ALL_RDMA).unwrap();
        // The peer may write this region: no safe &mut to it.
        assert!(matches!(
            MemoryRegion::get_mut(&mut buf),
            Err(Error::RemotelyWritable { .. })
        ));
        // SAFETY: A has not been told the region's RemoteBuf yet (sent below), so nothing writes it.
        unsafe { MemoryRegion::get_mut_unchecked(&mut buf) }.unwrap()[READ_AT..READ_AT + CHUNK]
            .copy_from_slice(&pattern(4, CHUNK));
        let qp = s.builder.build(&s.pd).unwrap();
        oob.send(&Hello {
            ep: qp.endpoint().unwrap(),
            buf: buf.remote(),
        });
        let a: Hello = oob.recv();
        let mut qp = qp.connect(&a.ep).unwrap();
        let recv_buf = MemoryRegion::new(&s.pd, SEND_LEN, Access::LOCAL_WRITE).unwrap();
        qp.post_recv_empty(1).unwrap();
        qp.post_recv(Exclusive::full(recv_buf).unwrap(), 2).unwrap();
        oob.send(&"ready");
        let done = wait_for(&s.cq, 2);
        let imm = done
            .iter()
            .find(|c| c.tag == 1)
            .expect("WRITE_WITH_IMM receive");
        assert!(imm.is_ok(), "{imm:?}");
        assert_eq!(imm.opcode, WcOpcode::RecvWriteImm);
        assert_eq!(imm.imm, Some(IMM));
        let sent = done.into_iter().find(|c| c.tag == 2).expect("SEND receive");
        assert!(
            sent.is_ok() && sent.opcode == WcOpcode::Recv && sent.byte_len as usize == SEND_LEN,
            "{sent:?}"
        );
        let recv_buf = sent.buffer.expect("RECV buffer handed back");
        assert_eq!(
            recv_buf.as_slice().unwrap(),
            pattern(3, SEND_LEN).as_slice(),
            "SEND payload"
        );
        assert!(matches!(
            buf.as_slice(),
            Err(Error::RemotelyWritable { len: MIB })
        ));
        let mut data = vec![0u8; MIB];
        buf.read_into(0, &mut data).unwrap();
        assert_eq!(
            &data[WRITE_AT..WRITE_AT + CHUNK],
            pattern(1, CHUNK).as_slice(),
            "WRITE payload"
        );
        assert_eq!(
            &data[IMM_AT..IMM_AT + CHUNK],
            pattern(2, CHUNK).as_slice(),
            "WRITE_WITH_IMM payload"
        );
        // Keep the QP up until A has finished its READ.
        let _: String = oob.recv();
        oob.send(&"ok");
        return;
    }
    // Parent (A): initiator, busy-polls.
    let (child, mut oob) = spawn_peer("two_process_oob_write_imm_read_send_verified");
    let s = side(false);
    // B only READs from A: A's region needs no remote write, so its safe views work.
    let mut src = MemoryRegion::new(&s.pd, MIB, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
    {
        let m = MemoryRegion::get_mut(&mut src).unwrap();
        m[..CHUNK].copy_from_slice(&pattern(1, CHUNK));
        m[CHUNK..2 * CHUNK].copy_from_slice(&pattern(2, CHUNK));
        m[2 * CHUNK..2 * CHUNK + SEND_LEN].copy_from_slice(&pattern(3, SEND_LEN));
    }
    let qp = s.builder.build(&s.pd).unwrap();
    let b: Hello = oob.recv();
    oob.send(&Hello {
        ep: qp.endpoint().unwrap(),
        buf: src.remote(),
    });
    assert_eq!(
        qp.endpoint().unwrap().path_mtu(&b.ep),
        b.ep.mtu.min(qp.endpoint().unwrap().mtu)
    );
    let mut qp = qp.connect(&b.ep).unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Rts);
    let _: String = oob.recv(); // receives posted
    // WRITE, WRITE_WITH_IMM and SEND chained behind one doorbell.
    qp.post_send_batch(vec![
        SendWr::write(
            src.slice(0..CHUNK).unwrap(),
            b.buf
                .slice(WRITE_AT as u64..(WRITE_AT + CHUNK) as u64)
                .unwrap(),
        )
        .tag(10),
        SendWr::write_imm(
            src.slice(CHUNK..2 * CHUNK).unwrap(),
            b.buf.slice(IMM_AT as u64..(IMM_AT + CHUNK) as u64).unwrap(),
            IMM,
        )
        .tag(11),
        SendWr::send(src.slice(2 * CHUNK..2 * CHUNK + SEND_LEN).unwrap()).tag(12),
    ])
    .unwrap();
    // While the source is in flight it cannot be mutated.
    assert!(matches!(
        MemoryRegion::get_mut(&mut src),
        Err(Error::BufferShared { .. })
    ));
    let done = s.cq.poll_blocking(3, T).unwrap();
    for c in &done {
        assert!(c.is_ok(), "{c:?}");
    }
    let mut tags: Vec<u64> = done.iter().map(|c| c.tag).collect();
    tags.sort();
    assert_eq!(tags, [10, 11, 12]);
    assert_eq!(qp.send_outstanding(), 0);
    assert!(
        MemoryRegion::get_mut(&mut src).is_ok(),
        "source released after its completions"
    );
    // READ back B's pre-filled pattern.
    let dst = MemoryRegion::new(&s.pd, CHUNK, Access::LOCAL_WRITE).unwrap();
    qp.post_read(
        Exclusive::full(dst).unwrap(),
        b.buf
            .slice(READ_AT as u64..(READ_AT + CHUNK) as u64)
            .unwrap(),
        13,
    )
    .unwrap();
    let c =
        s.cq.poll_blocking(1, T)
            .unwrap()
            .pop()
            .unwrap()
            .into_result()
            .unwrap();
    assert_eq!(c.opcode, WcOpcode::Read);
    assert_eq!(
        c.buffer.unwrap().as_slice().unwrap(),
        pattern(4, CHUNK).as_slice(),
        "READ payload"
    );
    oob.send(&"read done");
    finish(child, &mut oob);
    drop(s.ctx);
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn two_process_rdma_cm_write_imm_verified() {
    if let Some(mut oob) = as_peer() {
        // Peer: rdma_cm listener on veth0's address.
        let l = Listener::bind(SocketAddr::new(rxe_ip().parse().unwrap(), 0)).unwrap();
        oob.send(&l.port());
        let req = l.get_request(T).unwrap();
        let peer_buf =
            RemoteBuf::from_bytes(req.private_data()).expect("client's RemoteBuf in private data");
        assert_eq!(peer_buf.len, MIB as u64);
        let ctx = req.context().clone();
        assert_eq!(ctx.name(), device());
        let pd = ProtectionDomain::new(&ctx).unwrap();
        let ch = CompletionChannel::new(&ctx).unwrap();
        let cq = CompletionQueue::new(&ctx, 64, Some(&ch)).unwrap();
        let buf = MemoryRegion::new(&pd, MIB, Access::ALL_RDMA).unwrap();
        let builder = QpBuilder::new(&cq, &cq);
        let mut qp = req
            .accept(&pd, &builder, &buf.remote().to_bytes(), T)
            .unwrap();
        qp.post_recv_empty(5).unwrap();
        oob.send(&"ready");
        let c = wait_for(&cq, 1).pop().unwrap().into_result().unwrap();
        assert_eq!(c.imm, Some(IMM));
        let mut got = vec![0u8; CHUNK];
        buf.read_into(0, &mut got).unwrap();
        assert_eq!(got, pattern(9, CHUNK));
        oob.send(&"ok");
        return;
    }
    let (child, mut oob) = spawn_peer("two_process_rdma_cm_write_imm_verified");
    let port: u16 = oob.recv();
    let conn = Connector::resolve(SocketAddr::new(rxe_ip().parse().unwrap(), port), T).unwrap();
    let ctx = conn.context().clone();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::new(&ctx, 64, None).unwrap();
    let mut src = MemoryRegion::new(&pd, MIB, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
    MemoryRegion::get_mut(&mut src).unwrap()[..CHUNK].copy_from_slice(&pattern(9, CHUNK));
    let builder = QpBuilder::new(&cq, &cq);
    let (mut qp, reply) = conn
        .connect(&pd, &builder, &src.remote().to_bytes(), T)
        .unwrap();
    let remote = RemoteBuf::from_bytes(&reply).expect("server's RemoteBuf in the accept reply");
    assert_eq!(qp.state().unwrap(), QpState::Rts);
    let _: String = oob.recv();
    qp.post_write_imm(
        src.slice(0..CHUNK).unwrap(),
        remote.slice(0..CHUNK as u64).unwrap(),
        IMM,
        1,
    )
    .unwrap();
    let c = cq.poll_blocking(1, T).unwrap().pop().unwrap();
    assert!(c.is_ok(), "{c:?}");
    finish(child, &mut oob);
}

/// Two QPs of one process connected to each other.
fn local_pair(max_send_wr: u32) -> (Side, QueuePair<Rts>, QueuePair<Rts>) {
    let s = side(false);
    let b = s.builder.clone().max_send_wr(max_send_wr);
    let (x, y) = (b.build(&s.pd).unwrap(), b.build(&s.pd).unwrap());
    let (ex, ey) = (x.endpoint().unwrap(), y.endpoint().unwrap());
    (s, x.connect(&ey).unwrap(), y.connect(&ex).unwrap())
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn post_beyond_caps_is_rejected_before_the_driver() {
    let (s, mut a, _b) = local_pair(4);
    let caps = s.ctx.caps().clone();
    assert_eq!(caps.vendor, Vendor::Rxe);
    let src = MemoryRegion::new(&s.pd, 4096, Access::ALL_RDMA).unwrap();
    let dst = MemoryRegion::new(&s.pd, 4096, Access::ALL_RDMA).unwrap();
    // Two SGEs on a QP built with one.
    let e = a
        .post_send_batch(vec![
            SendWr::write(src.slice(0..8).unwrap(), dst.remote()).gather(src.slice(8..16).unwrap()),
        ])
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ExceedsCaps {
                what: "send SGEs per work request",
                requested: 2,
                limit: 1,
                ..
            }
        ),
        "{e}"
    );
    // Inline on a QP built without inline.
    let e = a
        .post_send_batch(vec![
            SendWr::write(src.slice(0..64).unwrap(), dst.remote()).inline(),
        ])
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ExceedsCaps {
                what: "inline bytes per work request",
                ..
            }
        ),
        "{e}"
    );
    // Five WRs on a 4-deep send queue: refused as a whole.
    let five: Vec<SourceWr> = (0..5)
        .map(|i| SendWr::write(src.slice(0..64).unwrap(), dst.remote()).tag(i))
        .collect();
    let e = a.post_send_batch(five).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ExceedsCaps {
                requested: 5,
                limit: 4,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(a.send_outstanding(), 0);
    assert_eq!(s.cq.in_flight(), 0);
    // Remote range too small.
    let e = a
        .post_write(src.full(), dst.remote().slice(0..16).unwrap(), 0)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfBounds {
                which: "remote",
                ..
            }
        ),
        "{e}"
    );
    // Builder limits beyond the device.
    let e = s
        .builder
        .clone()
        .max_send_sge(caps.max_send_sge + 1)
        .build(&s.pd)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ExceedsCaps {
                what: "send SGEs per work request",
                ..
            }
        ),
        "{e}"
    );
    let e = CompletionQueue::new(&s.ctx, caps.max_cqe + 1, None).unwrap_err();
    assert!(matches!(e, Error::ExceedsCaps { .. }), "{e}");
    // The QP is still usable: a valid write completes.
    a.post_write(src.slice(0..64).unwrap(), dst.remote(), 99)
        .unwrap();
    let c =
        s.cq.poll_blocking(1, T)
            .unwrap()
            .pop()
            .unwrap()
            .into_result()
            .unwrap();
    assert_eq!(c.tag, 99);
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn qp_in_error_is_recreated_and_works_again() {
    let (s, mut a, b) = local_pair(16);
    let src = MemoryRegion::new(&s.pd, 4096, Access::LOCAL_WRITE).unwrap();
    let dst = MemoryRegion::new(&s.pd, 4096, Access::ALL_RDMA).unwrap();
    let bogus = RemoteBuf {
        rkey: dst.rkey() ^ 0x5a5a_0000,
        ..dst.remote()
    };
    a.post_write(src.full(), bogus, 1).unwrap();
    let c = s.cq.poll_blocking(1, T).unwrap().pop().unwrap();
    assert_eq!(c.status, WcStatus::REM_ACCESS_ERR, "{c:?}");
    assert!(matches!(
        c.into_result(),
        Err(Error::Completion { tag: 1, .. })
    ));
    assert_eq!(a.state().unwrap(), QpState::Error);
    // Recreate both ends (new QP numbers) and reconnect.
    let (old_a, old_b) = (a.qpn(), b.qpn());
    let (x, y) = (a.recreate().unwrap(), b.recreate().unwrap());
    assert_ne!(x.qpn(), old_a);
    assert_ne!(y.qpn(), old_b);
    let (ex, ey) = (x.endpoint().unwrap(), y.endpoint().unwrap());
    let mut a = x.connect(&ey).unwrap();
    let _b = y.connect(&ex).unwrap();
    let mut src = src;
    MemoryRegion::get_mut(&mut src)
        .unwrap()
        .copy_from_slice(&pattern(7, 4096));
    a.post_write(src.full(), dst.remote(), 2).unwrap();
    // Flushes of the old QP may not arrive at all (it is destroyed); the new write must succeed.
    let c =
        s.cq.poll_blocking(1, T)
            .unwrap()
            .into_iter()
            .find(|c| c.tag == 2)
            .unwrap();
    assert!(c.is_ok(), "{c:?}");
    let mut got = vec![0u8; 4096];
    dst.read_into(0, &mut got).unwrap();
    assert_eq!(got, pattern(7, 4096));
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn teardown_with_work_in_flight() {
    let (s, mut a, mut b) = local_pair(64);
    let src = MemoryRegion::new(&s.pd, MIB, Access::ALL_RDMA).unwrap();
    let dst = MemoryRegion::new(&s.pd, MIB, Access::ALL_RDMA).unwrap();
    let wrs: Vec<SourceWr> = (0..64)
        .map(|i| SendWr::write(src.full(), dst.remote()).tag(i))
        .collect();
    a.post_send_batch(wrs).unwrap();
    let rbuf = MemoryRegion::new(&s.pd, 4096, Access::LOCAL_WRITE).unwrap();
    b.post_recv(Exclusive::full(rbuf).unwrap(), 1).unwrap();
    assert!(Arc::strong_count(&src) > 1, "posts hold the source");
    // Drop the QPs without polling: their buffers are released once the QPs are destroyed.
    drop(a);
    drop(b);
    assert_eq!(
        Arc::strong_count(&src),
        1,
        "source released after the QP was destroyed"
    );
    assert_eq!(s.cq.in_flight(), 0);
    // Remaining completions (if any) are for destroyed QPs and are skipped, not misattributed.
    assert!(s.cq.poll().unwrap().is_empty());
    // Drop the rest in the "wrong" order: context handle first; Arcs keep the parents alive.
    let Side {
        ctx,
        pd,
        cq,
        builder,
    } = s;
    drop(ctx);
    drop(pd);
    drop(builder);
    drop(cq);
    drop(src);
    drop(dst);
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn device_queries_on_rxe() {
    let list = devices().unwrap();
    assert!(list.iter().any(|d| d.name == device()), "{list:?}");
    let ctx = Context::open(&device()).unwrap();
    assert_eq!(ctx.vendor(), Vendor::Rxe);
    assert_eq!(ctx.transport(), Transport::Ib);
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.link_layer, LinkLayer::Ethernet);
    assert!(port.active_mtu >= 256);
    let gids = ctx.gid_table(1).unwrap();
    let e = gids
        .iter()
        .find(|g| g.index == gid_index())
        .expect("GID at the configured index");
    assert_eq!(e.gid_type, GidType::RoceV2);
    assert_eq!(e.gid.to_string(), format!("::ffff:{}", rxe_ip()));
    // The interface behind the device and its address (what an rdma_cm listener binds to when the
    // GID table has no IPv4 entry).
    let netdevs = ctx.netdevs(1);
    assert!(
        netdevs.iter().any(|n| Some(n) == e.netdev.as_ref()),
        "{netdevs:?} vs {e:?}"
    );
    let ips = ctx.ipv4_addrs(1).unwrap();
    assert_eq!(
        ips.first().map(ToString::to_string),
        Some(rxe_ip()),
        "{netdevs:?}: {ips:?}"
    );
    assert!(
        ctx.caps().max_inline > 0,
        "inline probe ran: {:?}",
        ctx.caps()
    );
    let e = Context::open("nonexistent0").unwrap_err();
    assert!(e.to_string().contains(&device()), "lists what exists: {e}");
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn a_batch_beyond_the_shared_cq_is_refused_before_posting() {
    // Two QPs whose send queues together exceed one small CQ they share.
    let ctx = Context::open(&device()).unwrap();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::new(&ctx, 16, None).unwrap();
    let cap = cq.capacity() as usize;
    let depth = u32::try_from(cap).unwrap();
    let b = QpBuilder::new(&cq, &cq)
        .gid_index(gid_index())
        .max_send_wr(depth)
        .max_recv_wr(4);
    let (x, y) = (b.build(&pd).unwrap(), b.build(&pd).unwrap());
    let (ex, ey) = (x.endpoint().unwrap(), y.endpoint().unwrap());
    let (mut a, mut c) = (x.connect(&ey).unwrap(), y.connect(&ex).unwrap());
    let src = MemoryRegion::new(&pd, 4096, Access::LOCAL_WRITE).unwrap();
    let dst = MemoryRegion::new(&pd, 4096, Access::ALL_RDMA).unwrap();
    let batch = |n: usize| -> Vec<SourceWr> {
        (0..n)
            .map(|i| SendWr::write(src.slice(0..64).unwrap(), dst.remote()).tag(i as u64))
            .collect()
    };
    // Half the CQ from each QP fits...
    a.post_send_batch(batch(cap / 2)).unwrap();
    // ...one more than what is left does not, although the QP's own queue has room.
    let left = cap - cap / 2;
    let e = c.post_send_batch(batch(left + 1)).unwrap_err();
    assert!(
        matches!(e, Error::ExceedsCaps { requested, limit, .. }
            if requested == (cap + 1) as u64 && limit == cap as u64),
        "{e}"
    );
    assert_eq!(
        c.send_outstanding(),
        0,
        "nothing of the refused batch was posted"
    );
    assert_eq!(cq.in_flight(), cap / 2);
    c.post_send_batch(batch(left)).unwrap();
    let done = cq.poll_blocking(cap, T).unwrap();
    assert!(done.iter().all(Completion::is_ok));
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn steady_state_posting_and_polling_allocate_nothing() {
    let (s, mut x, mut y) = local_pair(64);
    let src = MemoryRegion::new(&s.pd, 4096, Access::LOCAL_WRITE).unwrap();
    let dst = MemoryRegion::new(&s.pd, 4096, Access::ALL_RDMA).unwrap();
    let remote = dst.remote().slice(0..4096).unwrap();
    // One WRITE_WITH_IMM (x) into a posted zero-length receive (y): both completions on the one CQ.
    let mut round = |i: u32| {
        y.post_recv_empty(u64::from(i)).unwrap();
        x.post_write_imm(src.slice(0..4096).unwrap(), remote, i, u64::from(i))
            .unwrap();
        let mut got = 0;
        let start = std::time::Instant::now();
        while got < 2 {
            for c in s.cq.completions() {
                let c = c.unwrap();
                assert!(c.is_ok(), "{c:?}");
                got += 1;
            }
            assert!(start.elapsed() < T, "completions of round {i}");
        }
    };
    for i in 0..100 {
        round(i);
    }
    let n = counting::allocations(|| {
        for i in 100..1_100 {
            round(i);
        }
    });
    assert_eq!(
        n, 0,
        "allocations in 1,000 rounds of post_recv + post_write_imm + poll"
    );
    assert_eq!(s.cq.in_flight(), 0);
}
