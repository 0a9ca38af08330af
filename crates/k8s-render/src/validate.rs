//! validate — see crate docs.
