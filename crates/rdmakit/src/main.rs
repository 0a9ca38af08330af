//! rdmakit command-line interface. See `rdmakit --help` and the crate README.

#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    quiet_broken_pipe();
    cli::main()
}

/// `rdmakit ... | head` should end quietly when the reader goes away, as Unix filters do, instead
/// of println! panicking on EPIPE. SIGPIPE itself stays ignored (Rust's default), so a write to a
/// socket whose peer left is an error the code handles, not a signal that kills the process.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            // 128 + SIGPIPE: what a shell reports for a filter stopped by a closed pipe.
            std::process::exit(141);
        }
        default(info)
    }));
}
