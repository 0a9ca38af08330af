//! The control-plane tier: rdmakit against a real kube-apiserver, scheduler, controller-manager, the KubeRay
//! operator and the MPI Operator, with KWOK nodes shaped like the seeds' clusters (tests/cluster/README.md).
//! These tests are ignored in a plain `cargo test`; `make cluster-test` starts the tier and runs them with
//! `--ignored --test-threads=1` (the eRDMA workers are hostNetwork pods on two nodes: one run at a time).
//! `harness` is the one way in: kubectl, the rdmakit binary, test namespaces and the cluster changes a test
//! makes and undoes; each other module covers one subject.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed expectation is a test failure

mod access;
mod check;
mod harness;
mod judges;
mod mutations;
mod operators;
mod plans;
mod preflight;
mod reruns;
mod scale;
mod validate;
mod vendors;
mod workflows;
