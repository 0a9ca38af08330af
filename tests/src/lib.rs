//! Cross-crate integration tests for rdmakit. The tests live in `tests/tests/`; this library holds shared helpers.
