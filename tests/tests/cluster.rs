//! The control-plane tier: rdmakit against a real kube-apiserver, scheduler, controller-manager, the KubeRay
//! operator and the MPI Operator, with KWOK nodes shaped like the seeds' clusters (tests/cluster/README.md).
//! These tests are ignored in a plain `cargo test`; `make cluster-test` starts the tier and runs them with
//! `--ignored --test-threads=1` (the eRDMA workers are hostNetwork pods on two nodes: one run at a time).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed expectation is a test failure

#[path = "cluster/access.rs"]
mod access;
#[path = "cluster/harness.rs"]
mod harness;
#[path = "cluster/operators.rs"]
mod operators;
#[path = "cluster/plans.rs"]
mod plans;
#[path = "cluster/preflight.rs"]
mod preflight;
#[path = "cluster/reruns.rs"]
mod reruns;
#[path = "cluster/validate.rs"]
mod validate;
#[path = "cluster/vendors.rs"]
mod vendors;
#[path = "cluster/workflows.rs"]
mod workflows;
