//! Hello, erdma-verbs: list the RDMA devices the installed providers see and what each can do (the
//! vendor profile's and the probed limits). Runs on any Linux host: without RDMA hardware, or without the
//! device's provider library in this image, it says there is none.
//!
//! `cargo run -p erdma-verbs --example hello` (`--example devices` prints ports and GID tables too).

fn main() -> erdma_verbs::Result<()> {
    let devices = erdma_verbs::devices()?;
    if devices.is_empty() {
        println!(
            "no RDMA device: libibverbs lists none (no RDMA hardware, or its provider is not installed)"
        );
        return Ok(());
    }
    for dev in devices {
        // A listed device may still fail to open (permissions on /dev/infiniband, memlock): say why.
        match erdma_verbs::Context::open(&dev.name) {
            Ok(ctx) => {
                let c = ctx.caps();
                println!(
                    "{} ({}, {:?}): RC {}, UD {}, SRQ {}, {} send / {} recv SGEs, {} B inline, {} send WRs",
                    dev.name,
                    c.vendor,
                    c.transport,
                    c.rc,
                    c.ud,
                    c.srq,
                    c.max_send_sge,
                    c.max_recv_sge,
                    c.max_inline,
                    c.max_send_wr
                );
            }
            Err(e) => println!("{}: listed but cannot be opened: {e}", dev.name),
        }
    }
    Ok(())
}
