//! rdmakit command-line interface. See `rdmakit --help` and the crate README.

mod cli;

fn main() -> std::process::ExitCode {
    // Like every Unix filter: `rdmakit ... | head` ends quietly when the reader goes away,
    // instead of println! panicking on EPIPE (Rust ignores SIGPIPE by default).
    // SAFETY: restoring the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    cli::main()
}
