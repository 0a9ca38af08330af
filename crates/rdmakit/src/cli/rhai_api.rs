//! `rdmakit rhai-api` (hidden): prints the Rhai API reference generated from the engine's registration
//! metadata, the text of `docs/rhai-api.md`.

use super::{CmdResult, Failure, code};

/// Prints the reference.
pub fn rhai_api() -> CmdResult {
    let md = rdmakit::host::api_docs::rhai_api_markdown().map_err(Failure::input)?;
    print!("{md}");
    Ok(code::OK)
}
