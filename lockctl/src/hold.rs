//! `lockctl lock` and `lockctl elect`: take the lock (or lead the election), run the command
//! while it is held, stop the command if it is lost, release it when the command ends; and
//! `elect --observe`, which follows who leads.
//!
//! The command runs in a process group of its own, so that a lost lock stops everything the
//! command started (a shell's children too), not only the process lockctl started: SIGTERM to
//! the group, then SIGKILL after the grace period. Signals sent to lockctl itself (SIGINT,
//! SIGTERM, SIGHUP) are passed on to the group, and lockctl waits for the command and releases
//! the lock as it would had the command ended on its own.

use crate::cli::{Connect, ElectArgs, LockArgs, Output};
use crate::connect::{config, endpoints};
use crate::exit::{CtlError, Exit};
use crate::show::event;
use lock_core::election::Elector;
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
/// The command's environment, with `elect`: what the leader announces.
pub const LOCK_LEADER_VALUE: &str = "LOCK_LEADER_VALUE";

/// Run `lockctl elect`; the exit code.
pub async fn elect(connect: &Connect, args: &ElectArgs, out: Output) -> Result<i32, CtlError> {
    validate_id("election name", &args.name).map_err(|e| CtlError::Usage(e.to_string()))?;
    let owner = args.holding.owner.clone().unwrap_or_else(default_owner);
    validate_id("owner", &owner).map_err(|e| CtlError::Usage(format!("--owner: {e}")))?;
    let client = ServiceClient::connect(&endpoints(connect)?, config(connect, args.holding.ttl)?)
        .await
        .map_err(|e| CtlError::service("cannot open a session", e))?;
    let elector = client.elector(&owner).map_err(|e| CtlError::service("elect", e))?;
    if args.observe {
        let code = observe(&elector, &args.name, out).await;
        let _ = client.close().await;
        return code;
    }
    let value = args.value.clone().unwrap_or_else(|| owner.clone());
    let leadership = elector
        .campaign(&args.name, value.clone().into_bytes(), args.timeout)
        .await
        .map_err(|e| CtlError::service(format!("cannot lead {:?}", args.name), e))?;
    let env = Some((LOCK_LEADER_VALUE, value));
    let guard = leadership.into_guard();
    let code =
        run_while_held(guard, &args.name, &owner, &args.command, env, args.holding.grace, out)
            .await?;
    let _ = client.close().await;
    Ok(code)
}

/// Print who leads `name`, and each change, until SIGINT or SIGTERM (exit 0) or the session
/// is lost.
async fn observe(elector: &impl Elector, name: &str, out: Output) -> Result<i32, CtlError> {
    let listen = |kind: SignalKind| {
        signal(kind).map_err(|e| CtlError::Local(format!("cannot watch signals: {e}")))
    };
    let (mut int, mut term) = (listen(SignalKind::interrupt())?, listen(SignalKind::terminate())?);
    let mut observer = elector
        .observe(name)
        .await
        .map_err(|e| CtlError::service(format!("cannot observe {name:?}"), e))?;
    loop {
        tokio::select! {
            change = observer.changed() => {
                let leader = change.map_err(|e| CtlError::service(format!("observing {name:?}"), e))?;
                match (out, leader) {
                    (Output::Json, None) => println!("{}", json!({"election": name, "leader": null})),
                    (Output::Json, Some(l)) => println!("{}", json!({
                        "election": name,
                        "leader": {"owner": l.owner, "term": l.term, "value": String::from_utf8_lossy(&l.value)},
                    })),
                    (Output::Text, None) => println!("no leader"),
                    (Output::Text, Some(l)) => println!(
                        "{} term {} value {}", l.owner, l.term, String::from_utf8_lossy(&l.value)
                    ),
                }
            }
            _ = int.recv() => return Ok(Exit::Ok.code()),
            _ = term.recv() => return Ok(Exit::Ok.code()),
        }
    }
}

/// Run `lockctl lock`; the exit code.
pub async fn hold(connect: &Connect, args: &LockArgs, out: Output) -> Result<i32, CtlError> {
    validate_id("lock name", &args.name).map_err(|e| CtlError::Usage(e.to_string()))?;
    let owner = args.holding.owner.clone().unwrap_or_else(default_owner);
    validate_id("owner", &owner).map_err(|e| CtlError::Usage(format!("--owner: {e}")))?;
    let endpoints = endpoints(connect)?;
    let client = ServiceClient::connect(&endpoints, config(connect, args.holding.ttl)?)
        .await
        .map_err(|e| CtlError::service("cannot open a session", e))?;
    let Some(guard) = acquire(&client, &owner, args).await? else {
        event(out, json!({"event": "busy", "lock": args.name}), || {
            format!("lockctl: {:?} is held by another", args.name)
        });
        let _ = client.close().await;
        return Ok(Exit::Busy.code());
    };
    let env = args.limit.map(|n| (LOCK_PERMITS, n.to_string()));
    let code =
        run_while_held(guard, &args.name, &owner, &args.command, env, args.holding.grace, out)
            .await?;
    let _ = client.close().await;
    Ok(code)
}

/// Run `command` while `guard` holds `name` (its token in the environment, and `env`); stop it
/// if the lock is lost; release the lock when it ends. The exit code.
async fn run_while_held(
    guard: LockGuard,
    name: &str,
    owner: &str,
    command: &[String],
    env: Option<(&str, String)>,
    grace: Duration,
    out: Output,
) -> Result<i32, CtlError> {
    let token = guard.token();
    event(
        out,
        json!({"event": "acquired", "lock": name, "owner": owner, "token": token}),
        String::new,
    );
    let mut child = spawn(command, name, token, env)?;
    let ended = supervise(&mut child, &guard, grace).await?;
    let code = match ended {
        Ended::Exited(status) => {
            let code = exit_code(status);
            match guard.release().await {
                Ok(()) => event(
                    out,
                    json!({"event": "released", "lock": name, "token": token, "exit": code}),
                    String::new,
                ),
                Err(e) => event(
                    out,
                    json!({"event": "release-failed", "lock": name, "error": e.to_string()}),
                    || {
                        format!("lockctl: the release of {:?} failed (its session's expiry frees it): {e}", name)
                    },
                ),
            }
            code
        }
        Ended::Lost { reason, killed } => {
            event(
                out,
                json!({"event": "lost", "lock": name, "token": token, "reason": reason, "killed": killed}),
                || {
                    let how = if killed {
                        "killed (SIGKILL) after the grace period"
                    } else {
                        "stopped by SIGTERM"
                    };
                    format!("lockctl: lost the lock {:?} ({reason}): the command was {how}", name)
                },
            );
            Exit::Lost.code()
        }
    };
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

fn spawn(
    command: &[String],
    name: &str,
    token: u64,
    env: Option<(&str, String)>,
) -> Result<Child, CtlError> {
    let (program, rest) = command.split_first().expect("clap requires a command");
    let mut c = tokio::process::Command::new(program);
    c.args(rest).env(LOCK_NAME, name).env(LOCK_FENCING_TOKEN, token.to_string());
    if let Some((var, value)) = env {
        c.env(var, value);
    }
    c.process_group(0);
    c.spawn().map_err(|source| CtlError::Spawn { command: program.clone(), source })
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
