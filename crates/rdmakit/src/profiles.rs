//! Vendor profiles authored as Rhai scripts under `scripts/vendors/` (built-ins embedded in the binary).
