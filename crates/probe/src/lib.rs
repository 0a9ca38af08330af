//! probe — see README.md.
