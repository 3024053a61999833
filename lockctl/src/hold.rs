//! `lockctl lock`: take the lock, run the command while it is held, stop the command if it is
//! lost, release the lock when the command ends.
//!
//! The command runs in a process group of its own, so that a lost lock stops everything the
//! command started (a shell's children too), not only the process lockctl started: SIGTERM to
//! the group, then SIGKILL after the grace period. Signals sent to lockctl itself (SIGINT,
//! SIGTERM, SIGHUP) are passed on to the group, and lockctl waits for the command and releases
//! the lock as it would had the command ended on its own.

use crate::cli::{Connect, LockArgs, Output};
use crate::connect::{config, endpoints};
use crate::exit::{CtlError, Exit};
use crate::show::event;
use lock_core::lock::{validate_id, LockGuard};
use lock_core::semaphore::Semaphore;
use lock_core::Locker;
use lock_service::client::ServiceClient;
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::process::Child;
use tokio::signal::unix::{signal, SignalKind};

/// The command's environment: the lock's name.
pub const LOCK_NAME: &str = "LOCK_NAME";
/// The command's environment: the grant's fencing token (the first permit's, with `-n`).
pub const LOCK_FENCING_TOKEN: &str = "LOCK_FENCING_TOKEN";
/// The command's environment, with `-n N`: the semaphore's size.
pub const LOCK_PERMITS: &str = "LOCK_PERMITS";

/// Run `lockctl lock`; the exit code.
pub async fn hold(connect: &Connect, args: &LockArgs, out: Output) -> Result<i32, CtlError> {
    validate_id("lock name", &args.name).map_err(|e| CtlError::Usage(e.to_string()))?;
    let owner = args.owner.clone().unwrap_or_else(default_owner);
    validate_id("owner", &owner).map_err(|e| CtlError::Usage(format!("--owner: {e}")))?;
    let endpoints = endpoints(connect)?;
    let client = ServiceClient::connect(&endpoints, config(connect, args.ttl)?)
        .await
        .map_err(|e| CtlError::service("cannot open a session", e))?;
    let Some(guard) = acquire(&client, &owner, args).await? else {
        event(out, json!({"event": "busy", "lock": args.name}), || {
            format!("lockctl: {:?} is held by another", args.name)
        });
        let _ = client.close().await;
        return Ok(Exit::Busy.code());
    };
    let token = guard.token();
    event(
        out,
        json!({"event": "acquired", "lock": args.name, "owner": owner, "token": token}),
        String::new,
    );
    let mut child = spawn(args, token)?;
    let ended = supervise(&mut child, &guard, args.grace).await?;
    let code = match ended {
        Ended::Exited(status) => {
            let code = exit_code(status);
            match guard.release().await {
                Ok(()) => event(
                    out,
                    json!({"event": "released", "lock": args.name, "token": token, "exit": code}),
                    String::new,
                ),
                Err(e) => event(
                    out,
                    json!({"event": "release-failed", "lock": args.name, "error": e.to_string()}),
                    || {
                        format!("lockctl: the release of {:?} failed (its session's expiry frees it): {e}", args.name)
                    },
                ),
            }
            code
        }
        Ended::Lost { reason, killed } => {
            event(
                out,
                json!({"event": "lost", "lock": args.name, "token": token, "reason": reason, "killed": killed}),
                || {
                    let how = if killed {
                        "killed (SIGKILL) after the grace period"
                    } else {
                        "stopped by SIGTERM"
                    };
                    format!(
                        "lockctl: lost the lock {:?} ({reason}): the command was {how}",
                        args.name
                    )
                },
            );
            Exit::Lost.code()
        }
    };
    let _ = client.close().await;
    Ok(code)
}

async fn acquire(
    client: &ServiceClient,
    owner: &str,
    args: &LockArgs,
) -> Result<Option<LockGuard>, CtlError> {
    let name = &args.name;
    let doing = || format!("cannot take {name:?}");
    match args.limit {
        None => {
            let locker = client.locker(owner).map_err(|e| CtlError::service(doing(), e))?;
            let got = if args.try_only {
                locker.try_lock(name).await
            } else {
                locker.lock(name, args.timeout).await.map(Some)
            };
            got.map_err(|e| CtlError::service(doing(), e))
        }
        Some(limit) => {
            let sem = client.semaphore(owner).map_err(|e| CtlError::service(doing(), e))?;
            let got = if args.try_only {
                sem.try_acquire(name, limit, 1).await
            } else {
                sem.acquire(name, limit, 1, args.timeout).await.map(Some)
            };
            got.map(|p| p.map(|p| p.into_guard())).map_err(|e| CtlError::service(doing(), e))
        }
    }
}

fn spawn(args: &LockArgs, token: u64) -> Result<Child, CtlError> {
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let mut command = tokio::process::Command::new(program);
    command.args(rest).env(LOCK_NAME, &args.name).env(LOCK_FENCING_TOKEN, token.to_string());
    if let Some(n) = args.limit {
        command.env(LOCK_PERMITS, n.to_string());
    }
    command.process_group(0);
    command.spawn().map_err(|source| CtlError::Spawn { command: program.clone(), source })
}

/// How the command's run ended.
enum Ended {
    /// It exited (or a signal killed it) while the lock was held.
    Exited(ExitStatus),
    /// The lock was lost and the command was stopped: by SIGTERM, or `killed` by SIGKILL.
    Lost { reason: String, killed: bool },
}

async fn supervise(
    child: &mut Child,
    guard: &LockGuard,
    grace: Duration,
) -> Result<Ended, CtlError> {
    let group = child.id().map(|pid| pid as libc::pid_t);
    let listen = |kind: SignalKind| {
        signal(kind).map_err(|e| CtlError::Local(format!("cannot watch signals: {e}")))
    };
    let (mut int, mut term, mut hup) = (
        listen(SignalKind::interrupt())?,
        listen(SignalKind::terminate())?,
        listen(SignalKind::hangup())?,
    );
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| CtlError::Local(format!("cannot wait for the command: {e}")))?;
                return Ok(Ended::Exited(status));
            }
            lost = guard.lost() => {
                signal_group(group, libc::SIGTERM);
                let killed = match tokio::time::timeout(grace, child.wait()).await {
                    Ok(_) => false,
                    Err(_) => {
                        signal_group(group, libc::SIGKILL);
                        let _ = child.wait().await;
                        true
                    }
                };
                return Ok(Ended::Lost { reason: lost.to_string(), killed });
            }
            _ = int.recv() => signal_group(group, libc::SIGINT),
            _ = term.recv() => signal_group(group, libc::SIGTERM),
            _ = hup.recv() => signal_group(group, libc::SIGHUP),
        }
    }
}

/// Send `sig` to the command's process group (its id is the command's pid).
fn signal_group(group: Option<libc::pid_t>, sig: libc::c_int) {
    if let Some(pgid) = group {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is shared.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// The exit code a shell would report for `status`.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => Exit::Software.code(),
    }
}

/// `lockctl-HOST-PID`, with what a lock id may not hold taken out of the host name.
pub fn default_owner() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let host = if ok {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown-host".to_string()
    };
    let host: String = host.chars().filter(|c| !c.is_control() && *c != '/').take(150).collect();
    format!("lockctl-{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_owner_is_a_valid_id() {
        let owner = default_owner();
        assert!(owner.starts_with("lockctl-"), "{owner}");
        validate_id("owner", &owner).unwrap();
    }

    #[test]
    fn a_signal_is_reported_as_a_shell_does() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 128 + 9);
    }
}
