//! erdma-verbs — see README.md.
