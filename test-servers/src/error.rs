//! Why a test server could not be had, or a command to it failed: one error type for every
//! public function, so that a caller can tell a program that is not installed from a server
//! that did not start in time, one that lost its port to another process, and a request the
//! server refused, while its text stays what a person reading a failed test needs.

use std::process::ExitStatus;
use std::time::Duration;

/// What went wrong with a test server. Its `Display` is the whole story (which server, which
/// port, the tail of its log); the variants say what kind of failure it was, and
/// [`ServerError::cause`] finds the one beneath the context added on the way up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A program or file the server needs is not there (a test fails with this, saying what to
    /// install; it is never skipped).
    #[error("{missing}: {install}")]
    NotInstalled {
        /// The program or file that is missing.
        program: String,
        /// The Debian package that provides it, when one does.
        package: Option<&'static str>,
        /// What is missing, in words ("redis-server is not installed (not on PATH)").
        missing: String,
        /// How to get it ([`crate::INSTALL_HINT`] for the packaged servers).
        install: &'static str,
        /// The failure that showed it was missing, if any.
        #[source]
        source: Option<std::io::Error>,
    },
    /// The server exited before it answered.
    #[error("{label} exited with {status}: {log}")]
    Exited {
        /// The process in messages ("redis-server", "etcd member 2").
        label: String,
        /// How it ended.
        status: ExitStatus,
        /// The last lines of its log.
        log: String,
    },
    /// The server runs but did not answer its readiness probe in time (it was killed).
    #[error(
        "{label} on port {port} did not answer {probe} within {} s{}",
        waited.as_secs(),
        log.as_ref().map(|l| format!(": {l}")).unwrap_or_default()
    )]
    StartTimeout {
        /// The process in messages.
        label: String,
        /// The port it was asked on.
        port: u16,
        /// The readiness request ("PING", "ruok", "GET /health").
        probe: &'static str,
        /// How long it was waited for.
        waited: Duration,
        /// The last lines of its log, for the servers whose log says why.
        log: Option<String>,
    },
    /// The server could not bind one of its ports: another process took it between the probe
    /// that found it free and the server's bind. Another set of ports may do. It is the
    /// failure it showed as (an [`ServerError::Exited`] or a [`ServerError::StartTimeout`]
    /// whose log says "address already in use").
    #[error(transparent)]
    PortTaken(Box<ServerError>),
    /// A cluster did not form (every member answering, and the engine's own condition: a
    /// leader, Sentinels that know everyone) within its deadline; `source` says what failed or
    /// what it still lacked.
    #[error(
        "the {cluster} cluster of {members} did not form within {} s: {source}",
        waited.as_secs()
    )]
    NotFormed {
        /// The engine's server ("etcd", "ZooKeeper").
        cluster: &'static str,
        /// How many members it was to have.
        members: usize,
        /// How long it was given.
        waited: Duration,
        /// The failure, or what the cluster still lacked at the deadline.
        #[source]
        source: Box<ServerError>,
    },
    /// No leader (or not the one wanted) within the time given.
    #[error("{what} within {} ms (leader now: {leader:?})", waited.as_millis())]
    NoLeader {
        /// What did not happen ("the etcd cluster elected no leader").
        what: String,
        /// How long it was waited for.
        waited: Duration,
        /// Who led when the wait ended.
        leader: Option<usize>,
    },
    /// What a server or cluster still lacks for what was asked of it (a Sentinel that does not
    /// know every replica yet, a replica not synchronised, a cluster version not decided).
    #[error("{0}")]
    NotReady(String),
    /// A fault or command for a process that does not run.
    #[error("{label} is not running")]
    NotRunning {
        /// The process in messages.
        label: String,
    },
    /// The server answered a command, but not with what the command asked for (a refusal, an
    /// error, an answer without the expected field), or no server answered it.
    #[error("{what}{}", answer.as_ref().map(|a| format!(": {a}")).unwrap_or_default())]
    Command {
        /// The command and what went wrong ("etcd at 127.0.0.1:2379 refused /v3/auth/enable").
        what: String,
        /// What the server answered, when it did.
        answer: Option<String>,
    },
    /// A system call failed: a file written, a socket bound, a process spawned or signalled,
    /// a request that got no answer.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A request test-servers cannot serve (a cluster of no members, TLS on a cluster).
    #[error("{0}")]
    Invalid(String),
    /// Several servers failed at once (the members of a cluster that did not answer in time),
    /// each with its own error.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<ServerError>),
    /// A failure, with what was being done when it happened ("etcd member 0: ...", "could not
    /// start redis-server: ...").
    #[error("{context}: {source}")]
    Context {
        /// What was being done, or which process it was.
        context: String,
        /// The failure.
        #[source]
        source: Box<ServerError>,
    },
}

/// The log text that says a server could not bind a port.
const ADDRESS_IN_USE: &str = "address already in use";

impl ServerError {
    /// `source`, with `context` (what was being done, which process) before its text.
    pub fn context(context: impl Into<String>, source: ServerError) -> ServerError {
        ServerError::Context { context: context.into(), source: Box::new(source) }
    }

    /// A failed system call, with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> ServerError {
        ServerError::Io { context: context.into(), source }
    }

    /// A command that the server answered with something else than what was asked for.
    pub fn command(what: impl Into<String>, answer: impl Into<String>) -> ServerError {
        ServerError::Command { what: what.into(), answer: Some(answer.into()) }
    }

    /// A server that exited before it answered; [`ServerError::PortTaken`] when its log says
    /// it could not bind its port.
    pub(crate) fn exited(label: &str, status: ExitStatus, log: String) -> ServerError {
        let taken = mentions_address_in_use(&log);
        let exited = ServerError::Exited { label: label.to_string(), status, log };
        if taken {
            ServerError::PortTaken(Box::new(exited))
        } else {
            exited
        }
    }

    /// A server that did not answer in time; [`ServerError::PortTaken`] when its log says it
    /// could not bind a port.
    pub(crate) fn start_timeout(
        label: &str,
        port: u16,
        probe: &'static str,
        waited: Duration,
        log: Option<String>,
    ) -> ServerError {
        let taken = log.as_deref().is_some_and(mentions_address_in_use);
        let timeout =
            ServerError::StartTimeout { label: label.to_string(), port, probe, waited, log };
        if taken {
            ServerError::PortTaken(Box::new(timeout))
        } else {
            timeout
        }
    }

    /// The failure beneath the context added on the way up ([`ServerError::Context`],
    /// [`ServerError::NotFormed`]): what kind of failure it was. A
    /// [`ServerError::PortTaken`] is its own cause.
    pub fn cause(&self) -> &ServerError {
        match self {
            ServerError::Context { source, .. } | ServerError::NotFormed { source, .. } => {
                source.cause()
            }
            other => other,
        }
    }

    /// Whether a program or file the server needs is missing ([`ServerError::NotInstalled`]
    /// beneath any context).
    pub fn is_not_installed(&self) -> bool {
        match self.cause() {
            ServerError::NotInstalled { .. } => true,
            ServerError::Several(all) => all.iter().any(ServerError::is_not_installed),
            _ => false,
        }
    }

    /// Whether a server lost one of its ports to another process ([`ServerError::PortTaken`]
    /// beneath any context, or among several failures): worth another try on other ports.
    pub fn is_port_taken(&self) -> bool {
        match self.cause() {
            ServerError::PortTaken(_) => true,
            ServerError::Several(all) => all.iter().any(ServerError::is_port_taken),
            _ => false,
        }
    }

    /// Whether a server or cluster did not get ready in time: it did not answer
    /// ([`ServerError::StartTimeout`]), elected no leader ([`ServerError::NoLeader`]), or a
    /// cluster still lacked something at its deadline ([`ServerError::NotReady`] within
    /// [`ServerError::NotFormed`]).
    pub fn is_timeout(&self) -> bool {
        let lacking = matches!(self, ServerError::NotFormed { source, .. }
            if matches!(source.cause(), ServerError::NotReady(_)));
        lacking
            || match self.cause() {
                ServerError::StartTimeout { .. } | ServerError::NoLeader { .. } => true,
                ServerError::Several(all) => all.iter().all(ServerError::is_timeout),
                _ => false,
            }
    }
}

/// Whether a server's log says it could not bind a port (Redis: "Address already in use",
/// Java: `BindException: Address already in use`, etcd: "bind: address already in use").
fn mentions_address_in_use(log: &str) -> bool {
    log.to_ascii_lowercase().contains(ADDRESS_IN_USE)
}

/// The error's text, for callers whose own errors are text.
impl From<ServerError> for String {
    fn from(e: ServerError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_lost_port_is_told_apart_and_keeps_its_text_under_context() {
        let status = ExitStatus::from_raw(1 << 8);
        let log = "# Could not create server TCP listening socket: bind: Address already in use";
        let e = ServerError::context(
            "etcd member 1",
            ServerError::exited("redis-server", status, log.into()),
        );
        assert!(e.is_port_taken() && !e.is_not_installed() && !e.is_timeout());
        assert_eq!(
            e.to_string(),
            format!("etcd member 1: redis-server exited with {status}: {log}")
        );
        let plain = ServerError::exited("redis-server", status, "bad config".into());
        assert!(matches!(plain, ServerError::Exited { .. }) && !plain.is_port_taken());
    }

    #[test]
    fn timeouts_and_missing_programs_are_told_apart() {
        let t = |port| {
            ServerError::start_timeout("etcd", port, "GET /health", Duration::from_secs(3), None)
        };
        let both = ServerError::Several(vec![t(1), t(2)]);
        assert_eq!(
            both.to_string(),
            "etcd on port 1 did not answer GET /health within 3 s; \
             etcd on port 2 did not answer GET /health within 3 s"
        );
        assert!(both.is_timeout());
        let missing = ServerError::NotInstalled {
            program: "etcd".into(),
            package: Some("etcd-server"),
            missing: "etcd is not installed (not on PATH)".into(),
            install: crate::INSTALL_HINT,
            source: None,
        };
        let wrapped = ServerError::context("could not start etcd", missing);
        assert!(wrapped.is_not_installed() && !wrapped.is_timeout());
        assert!(wrapped.to_string().ends_with(crate::INSTALL_HINT));
        let lacking = ServerError::NotFormed {
            cluster: "etcd",
            members: 3,
            waited: Duration::from_secs(20),
            source: Box::new(ServerError::NotReady("no leader elected".into())),
        };
        assert!(lacking.is_timeout());
        assert_eq!(
            lacking.to_string(),
            "the etcd cluster of 3 did not form within 20 s: no leader elected"
        );
    }
}
