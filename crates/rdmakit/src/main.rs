//! rdmakit command-line interface.
fn main() -> anyhow::Result<()> {
    println!("rdmakit {}", env!("CARGO_PKG_VERSION"));
    Ok(())
}
