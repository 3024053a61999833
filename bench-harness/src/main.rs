//! `bench-harness`: parse the command line, run, map failures to exit codes (clap exits with 2
//! on usage errors by itself, and so do the usage errors found after parsing; the checker exits
//! with 3 when it finds a run unsafe; every other failure exits with 1).
use clap::{CommandFactory, Parser};
use std::process::ExitCode;

/// mimalloc rather than the system's malloc: the simulator's store requests allocate and free
/// many small buffers, and glibc's malloc spent a quarter of a run on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = bench_harness::cli::Cli::parse();
    match bench_harness::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(usage) = e.downcast_ref::<bench_harness::UsageError>() {
                bench_harness::cli::Cli::command()
                    .error(clap::error::ErrorKind::ArgumentConflict, &usage.0)
                    .exit();
            }
            if let Some(unsafe_run) = e.downcast_ref::<bench_harness::check::Unsafe>() {
                eprintln!("check: {unsafe_run}");
                return ExitCode::from(3);
            }
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
