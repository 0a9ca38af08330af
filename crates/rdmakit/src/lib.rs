//! rdmakit — the CLI's library half: the Rhai workflow host, the executors that carry workflow actions to
//! a Kubernetes cluster (or record them in dry-run), plans, reports, and vendor profile loading.
//!
//! A workflow is a Rhai script. It renders manifests with `render::`, applies and checks them with `kube::`,
//! and records checks with `report::`. With the dry-run executor nothing touches a cluster: every action is
//! recorded into a [`plan::Plan`] that prints for humans and converts into an equivalent `plan.sh`.
//!
//! ```
//! use std::sync::Arc;
//! use rdmakit::{cancel::Cancel, exec::dry::DryRunExecutor, host::{Host, HostConfig}};
//!
//! let out = tempfile::tempdir().unwrap();
//! let dry = Arc::new(DryRunExecutor::new("demo.rhai", None, None));
//! let host = Host::new(dry.clone(), HostConfig::new(out.path()), Cancel::new(), "demo.rhai");
//! let outcome = host.run("demo.rhai", r#"
//!     step("Find the workers");
//!     let workers = kube::pods("ray.io/node-type=worker", #{ save_as: "WORKERS", expect: 2 });
//!     let r = kube::exec(workers[0], ["bash", "-lc", "ulimit -l"], #{ container: "ray-worker" });
//!     if r.dry_run { report::planned("memlock unlimited", "would read ulimit -l"); }
//! "#);
//! assert!(outcome.error.is_none());
//! let plan = dry.plan();
//! assert_eq!(plan.action_count(), 2);
//! assert!(plan.to_shell().contains("kubectl exec \"${WORKERS[0]}\" -c ray-worker -- bash -lc 'ulimit -l'"));
//! ```
//!
//! Where things live: [`host`] is the Rhai host (`host::modules`: one file per script module;
//! `host::run`: the run's state; `host::api_docs`: the generated API reference), [`exec`] the executors
//! ([`exec::dry`] records a plan, [`exec::kube`] drives a cluster, [`exec::kinds`] the kinds table),
//! [`plan`] the plan and its `plan.sh`, [`report`] the run's report, [`bridge`] what a vendor profile
//! means to probe's judgements and the lint, [`profiles`] and [`workflows`] the built-in scripts
//! (embedded by `builtins`), [`manifests`] YAML reading, [`outdir`] the out dir's bookkeeping,
//! [`secrets`] redaction, [`cancel`] Ctrl-C, [`error`] the error types, [`check`] `rdmakit check`'s matrix.

#![forbid(unsafe_code)]

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod bridge;
mod builtins;
pub mod cancel;
pub mod check;
pub mod error;
pub mod exec;
pub mod host;
pub mod manifests;
pub mod outdir;
pub mod plan;
pub mod profiles;
pub mod report;
pub mod secrets;
pub mod workflows;
