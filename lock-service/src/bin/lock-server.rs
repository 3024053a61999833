//! `lock-server`: one node of the lock service (see `lock-server --help` and the crate docs).

use clap::Parser;
use lock_service::server::{run, ServerArgs};

fn main() -> std::process::ExitCode {
    let args = ServerArgs::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,lock_service=info".into()),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lock-server: cannot start a runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lock-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
