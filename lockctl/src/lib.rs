//! `lockctl`: the lock service from a shell, as `flock`, `etcdctl lock` and `consul lock` are
//! for theirs.
//!
//! ```text
//! export LOCK_SERVICE=10.0.0.1:7401,10.0.0.2:7401,10.0.0.3:7401
//! lockctl lock nightly-backup -- /usr/local/bin/backup --full
//! lockctl lock --try deploy -- ./deploy.sh     # exits 75 at once if deploy is held
//! lockctl lock -n 4 encoder -- ./encode.sh     # one of 4 permits
//! lockctl elect scheduler -- ./scheduler       # runs while it leads; the term is its token
//! lockctl elect --observe scheduler            # who leads, and each change
//! lockctl locks                                # who holds what, who waits
//! lockctl status                               # every member: role, term, indexes
//! lockctl --service-user root release --force deploy
//! lockctl member add 3 --peer 10.0.0.4:7400 --client 10.0.0.4:7401
//! ```
//!
//! `lockctl lock` opens a session, takes the lock (or one of a semaphore's N permits, `-n N`),
//! and runs the command with `LOCK_NAME` and `LOCK_FENCING_TOKEN` in its environment: a
//! command that writes to a store guarded by fencing passes the token along, and the store
//! refuses the writes of a holder whose lock has since gone to another. The session is kept
//! alive while the command runs. If the lock is lost (the service could not hear from lockctl
//! for a whole TTL, or an administrator took it), the command's process group gets SIGTERM,
//! then SIGKILL after the grace period, and lockctl exits 76. Otherwise the command's own exit
//! code is lockctl's, once the lock is released. [`exit`] lists every code.
//!
//! A lost lock is noticed by the client's own clock: the session stands until the send time
//! of the last request the service answered plus the TTL, and the service frees the lock no
//! earlier. A command stopped by SIGTERM may still be running for the grace period after the
//! lock went to another holder: a command that must never overlap another uses the fencing
//! token, which is what it is for.
//!
//! The connection options are the benchmark harness's for its `service` engine: `--service`
//! (or `LOCK_SERVICE`), `--service-ca`, `--service-user` with its token in
//! `LOCK_SERVICE_TOKEN` or `--service-token-file`.
//!
//! One concept a file: `cli` (the command line), `connect` (from it to the client), `hold`
//! (`lockctl lock` and `elect`), `show` (the subcommands that print), `exit` (exit codes and errors).

pub mod cli;
pub mod connect;
pub mod exit;
pub mod hold;
pub mod show;

use cli::{Cli, Command};
use exit::CtlError;

/// Run the command line; the exit code.
pub async fn run(cli: Cli) -> Result<i32, CtlError> {
    match &cli.command {
        Command::Lock(args) => hold::hold(&cli.connect, args, cli.output).await,
        Command::Elect(args) => hold::elect(&cli.connect, args, cli.output).await,
        Command::Status => show::status(&connect::admin(&cli.connect)?, cli.output).await,
        Command::Locks { prefix } => {
            show::locks(&connect::admin(&cli.connect)?, prefix, cli.output).await
        }
        Command::Release { name, .. } => {
            show::force_release(&connect::admin(&cli.connect)?, name, cli.output).await
        }
        Command::Member(m) => show::member(&connect::admin(&cli.connect)?, m, cli.output).await,
    }
}
