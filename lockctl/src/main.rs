//! `lockctl`: see the crate docs, or `lockctl --help`.

use clap::Parser;
use lockctl::cli::Cli;
use lockctl::exit::Exit;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; every other parse failure is a usage error.
            std::process::exit(if e.use_stderr() { Exit::Usage.code() } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lockctl: cannot start a runtime: {e}");
            std::process::exit(Exit::Software.code());
        }
    };
    let code = match runtime.block_on(lockctl::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lockctl: {e}");
            e.exit().code()
        }
    };
    // The runtime's tasks (the session's reader) are dropped with it.
    drop(runtime);
    std::process::exit(code);
}
