//! # probe — RDMA diagnostics that name the cause and the fix
//!
//! Part of rdmakit. Every part is usable without RDMA hardware (every reader takes a root path, so
//! tests run against fixture trees of `/sys`, `/proc` and `/dev`); only [`facts`]' live verbs query,
//! the default `live` feature, links libibverbs. Every outcome is a [`Verdict`] (`ok` / `info` /
//! `warn` / `fail`), most with a fix:
//!
//! - [`facts`]: what a pod or node offers — RDMA devices, ports, GIDs, `/dev/infiniband`,
//!   RLIMIT_MEMLOCK, CAP_IPC_LOCK, NCCL and torch's NCCL, GPUs, GPUDirect RDMA, interfaces —
//!   each judged as a [`Check`] with a [`Verdict`] and a fix.
//! - [`counters`]: snapshot and diff device counters, and prove that a run's bytes crossed
//!   the RDMA device (with the A/B against `NCCL_IB_DISABLE=1`).
//! - [`doctor`]: a knowledge base of log signatures (NCCL, UCX/NIXL, Ray RDT, ibverbs,
//!   BuildKit, registries, Kubernetes) mapped to cause, evidence line and fix.
//! - [`parse`]: nccl-tests (text and JSON), the RDT demo, `ibv_devinfo`, perftest.
//! - [`expect`]: the GPU→GPU rate a cluster should reach (GPUDirect or staged) and a measured
//!   figure as a fraction of it, with the model's inputs.
//! - [`throughput`]: a measured throughput's verdict (nccl-tests, the RDT demo, perftest, any
//!   GPU→GPU rate): the run on its own and, given an expectation, the figure as a fraction of it.
//! - [`judge`]: what a command printed inside a pod, judged as workflows do (memlock from
//!   `ulimit -l`, the NCCL version against a profile's pins, NCCL's transport, a net plugin's path,
//!   ours beside a peer's figure).
//!
//! [`check`] judges what `rdmakit check` gathers (per-pod facts, the environment against them, the
//! data-path matrix) and writes its JSON report and HTML page.
//!
//! [`report`] turns any of them into a JSON-serialisable [`Report`] or a table, [`units`] formats
//! bytes and rates for both, and [`preflight`] judges a whole cluster from data the CLI gathers
//! through the Kubernetes API (nodes, ResourceSlices, pods).
//!
//! ## Example
//!
//! ```
//! use probe::{doctor, Verdict};
//!
//! let log = "\
//! worker-0:41:88 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.
//! worker-0:41:88 [0] misc/ibvwrap.cc:130 NCCL WARN Call to ibv_create_qp failed with error Unknown error -12
//! worker-0:41:88 [0] NCCL INFO transport/net_ib.cc:1030 -> 2
//! ";
//! let diagnosis = doctor::diagnose(log)?;
//! let first = &diagnosis.findings[0];
//! assert_eq!(first.id, "memlock-create-qp-enomem");
//! assert_eq!(first.line, 2);
//! assert_eq!(diagnosis.verdict, Verdict::Fail);
//! assert!(first.fix.as_deref().unwrap_or("").contains("LimitMEMLOCK=infinity"));
//!
//! // Counters: did a 1.5 GiB run cross the device?
//! let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/erdma");
//! let before = probe::counters::snapshot(&root, "erdma_0", 1)?;
//! let mut after = before.clone();
//! if let Some(tx) = after.values.get_mut("hw_counters/hw_tx_bytes_cnt") {
//!     *tx += 1_642_000_000; // what three 512 MiB transfers put on the wire
//! }
//! let delta = probe::counters::CounterDelta::between(&before, &after)?;
//! let proof = probe::counters::prove(&delta, 1_610_612_736, 0.9);
//! assert_eq!(proof.verdict, Verdict::Ok);
//! # Ok::<(), probe::ProbeError>(())
//! ```

#![forbid(unsafe_code)]

pub mod check;
mod counter_command;
pub mod counters;
pub mod doctor;
mod error;
pub mod expect;
pub mod facts;
pub mod judge;
pub mod nccl_ib_hca;
pub mod parse;
pub mod preflight;
pub mod report;
mod sysfs;
pub mod throughput;
pub mod units;
mod verdict;

pub use error::{ParseError, ProbeError, Result};
pub use facts::{HostFacts, ProbeOptions};
pub use report::Report;
pub use verdict::{Check, Verdict};

/// The README's examples, compiled (and, where they need no live host, run) as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
