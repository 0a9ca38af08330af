//! rdmakit — the CLI's library half: Rhai host, vendor profile loading, Kubernetes executors.

pub mod profiles;
