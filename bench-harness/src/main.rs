//! `bench-harness`: parse the command line, run, map failures to exit codes (clap exits with 2
//! on usage errors by itself; every other failure exits with 1).
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = bench_harness::cli::Cli::parse();
    match bench_harness::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
