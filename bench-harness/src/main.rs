//! `bench-harness`: parse the command line, run, map failures to exit codes (clap exits with 2
//! on usage errors by itself, and so do the usage errors found after parsing; the checker exits
//! with 3 when it finds a run unsafe; every other failure exits with 1).
use bench_harness::Failure;
use clap::{CommandFactory, Parser};
use std::process::ExitCode;

/// mimalloc rather than the system's malloc: the simulator's store requests allocate and free
/// many small buffers, and glibc's malloc spent a quarter of a run on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = bench_harness::cli::Cli::parse();
    let Err(e) = bench_harness::run(cli) else { return ExitCode::SUCCESS };
    let failure = bench_harness::Failure::of(&e);
    match failure {
        // clap's own form of a usage error (and its exit code, 2).
        Failure::Usage => bench_harness::cli::Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, failure.message(&e))
            .exit(),
        Failure::Unsafe => eprintln!("check: {}", failure.message(&e)),
        Failure::Failed => eprintln!("error: {e:#}"),
    }
    ExitCode::from(failure.exit_code())
}
