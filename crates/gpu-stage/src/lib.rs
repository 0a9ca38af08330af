//! gpu-stage — see README.md.
