//! rdmakit command-line interface. See `rdmakit --help` and the crate README.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
