//! Exit codes scripts can trust, and the error that carries one.
//!
//! `lockctl lock` passes its command's own exit status through (128 + N when a signal N
//! killed it, as a shell reports it), so its own codes sit where commands seldom put theirs:
//! the BSD `sysexits` block and `timeout(1)`'s 124.

use lock_core::lock::LockError;
use lock_core::BackendErrorKind;
use lock_service::client::AdminError;
use lock_service::proto::ErrorKind;

/// Every code `lockctl` exits with that is not its command's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done (`status`, `locks`, `member`, `release --force` of a held lock).
    Ok,
    /// `release --force` found the lock free; `status` found a member unreachable or no
    /// leader.
    NotFound,
    /// The command line is wrong (an unknown option, an invalid lock name, a bad duration).
    Usage,
    /// No node of the service could be reached, or none leads.
    Unavailable,
    /// The service answered something this `lockctl` does not understand.
    Software,
    /// `--try`: another holder has the lock.
    Busy,
    /// The lock was lost while the command ran (its session expired, an administrator took
    /// it): the command was stopped.
    Lost,
    /// The service refused: wrong credentials, or an admin's request by a non-admin.
    Refused,
    /// `--timeout` passed before the lock was granted.
    TimedOut,
    /// The command exists but could not be run.
    CannotRun,
    /// The command was not found.
    NotFoundCommand,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> i32 {
        match self {
            Exit::Ok => 0,
            Exit::NotFound => 1,
            Exit::Usage => 64,
            Exit::Unavailable => 69,
            Exit::Software => 70,
            Exit::Busy => 75,
            Exit::Lost => 76,
            Exit::Refused => 77,
            Exit::TimedOut => 124,
            Exit::CannotRun => 126,
            Exit::NotFoundCommand => 127,
        }
    }
}

/// The exit codes' text, as a literal for `concat!`.
#[macro_export]
macro_rules! exit_codes_help {
    () => {
        "\
Exit codes:
  lock      the command's own exit code (128+N if signal N killed it), or:
  0         done
  1         release --force: the lock was not held; status: a member did not answer, or no
            node leads
  64        bad command line (unknown option, invalid lock name, bad duration), or a
            request the service found invalid (removing the last voter, say)
  69        the service could not serve it: no node answered, none leads, or a limit
            (sessions per user, locks per session) was reached
  70        the service answered something unexpected
  75        lock --try: the lock is held by another
  76        lock: the lock was lost while the command ran (session expired, or an
            administrator took it); the command was sent SIGTERM, then SIGKILL after --grace
  77        refused: wrong credentials, or an administrator's request by another user
  124       lock --timeout: the lock was not granted in time
  126, 127  the command could not be run, or was not found"
    };
}

/// The exit codes as `--help` lists them.
pub const EXIT_CODES_HELP: &str = exit_codes_help!();

/// Why `lockctl` stops, with the code it exits with.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// A usage error found after parsing (a lock name the service refuses, say).
    #[error("{0}")]
    Usage(String),
    /// An administration request failed.
    #[error("{message}")]
    Admin {
        /// The code.
        exit: Exit,
        /// What happened.
        message: String,
        /// The client's error.
        #[source]
        source: AdminError,
    },
    /// The service, or the way to it, failed.
    #[error("{message}")]
    Service {
        /// The code.
        exit: Exit,
        /// What happened.
        message: String,
        /// The client's error.
        #[source]
        source: LockError,
    },
    /// The command could not be started.
    #[error("cannot run {command:?}: {source}")]
    Spawn {
        /// The program.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Anything else this process met (signals, output).
    #[error("{0}")]
    Local(String),
}

impl CtlError {
    /// `source` met while `doing`, with the exit code its kind calls for.
    pub fn service(doing: impl std::fmt::Display, source: LockError) -> CtlError {
        let exit = exit_of(&source);
        CtlError::Service { exit, message: format!("{doing}: {source}"), source }
    }

    /// `source`, an administration request's error met while `doing`.
    pub fn admin(doing: impl std::fmt::Display, source: AdminError) -> CtlError {
        let exit = match &source {
            AdminError::Refused { kind, .. } => match kind {
                ErrorKind::BadRequest => Exit::Usage,
                ErrorKind::Forbidden | ErrorKind::Unauthenticated => Exit::Refused,
                ErrorKind::Unavailable | ErrorKind::LimitReached => Exit::Unavailable,
                ErrorKind::SessionGone | ErrorKind::Superseded => Exit::Software,
            },
            AdminError::Unexpected(_) => Exit::Software,
            AdminError::Client(e) => exit_of(e),
        };
        CtlError::Admin { exit, message: format!("{doing}: {source}"), source }
    }

    /// The code to exit with.
    pub fn exit(&self) -> Exit {
        match self {
            CtlError::Usage(_) => Exit::Usage,
            CtlError::Service { exit, .. } | CtlError::Admin { exit, .. } => *exit,
            CtlError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Exit::NotFoundCommand
            }
            CtlError::Spawn { .. } => Exit::CannotRun,
            CtlError::Local(_) => Exit::Software,
        }
    }
}

/// The exit code a client error calls for.
pub fn exit_of(e: &LockError) -> Exit {
    match e {
        LockError::InvalidId { .. } | LockError::Config(_) | LockError::Usage(_) => Exit::Usage,
        LockError::Timeout { .. } => Exit::TimedOut,
        LockError::LeaseLost { .. } => Exit::Lost,
        LockError::Backend { kind: BackendErrorKind::Refused, .. } => Exit::Refused,
        LockError::Backend { kind: BackendErrorKind::Protocol, .. } => Exit::Software,
        // Unavailable, timed out, or refused for another reason (a limit reached).
        LockError::Backend { .. } | LockError::Store { .. } => Exit::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_in_the_help() {
        let all = [
            Exit::Ok,
            Exit::NotFound,
            Exit::Usage,
            Exit::Unavailable,
            Exit::Software,
            Exit::Busy,
            Exit::Lost,
            Exit::Refused,
            Exit::TimedOut,
            Exit::CannotRun,
            Exit::NotFoundCommand,
        ];
        // The first column of each line: "64", "126, 127".
        let listed: Vec<i32> = EXIT_CODES_HELP
            .lines()
            .filter_map(|l| l.trim_start().split("  ").next())
            .flat_map(|first| first.split(',').filter_map(|c| c.trim().parse().ok()))
            .collect();
        for e in all {
            assert!(listed.contains(&e.code()), "{e:?} ({}) is not in the help", e.code());
        }
        let mut codes: Vec<i32> = all.iter().map(|e| e.code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), all.len(), "two exits share a code");
    }
}
