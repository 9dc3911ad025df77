//! The `wasmloop` binary: the host (`run`), and tools for plugin authors and admins
//! (`reconcile`, `inspect`, `pack`).

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    match cli::main(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wasmloop: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
