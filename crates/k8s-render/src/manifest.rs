//! manifest — see crate docs.
