//! `lock-server`: one node of the lock service (see `lock-server --help` and the crate docs).
//! Exits with 1, saying why, when the node cannot start.

use clap::Parser;
use lock_service::server::{serve, ServerArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    match serve(ServerArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lock-server: {e}");
            ExitCode::FAILURE
        }
    }
}
