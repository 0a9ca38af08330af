//! lint — see crate docs.
