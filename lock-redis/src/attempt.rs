//! Why a connect attempt failed, in words a user can act on: a leaf module, so that the link
//! ([`crate::link`]) and the Sentinel lookup ([`crate::sentinel`]) both use it without
//! importing each other.

use lock_core::{BackendErrorKind, LockError};
use redis::{ErrorKind, RedisError, ServerErrorKind};
use std::fmt::{self, Display};

/// Why a connect attempt failed.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// Every Sentinel answered and none knows the master's name: a wrong name, not an outage.
    UnknownMaster(String),
    /// The server refused who we are or what we may do (credentials, ACL, no RESP3), or the
    /// TLS handshake refused a certificate, or client and port disagree on TLS
    /// ([`crate::tls::connect_error`]): an operator must change something, asking again soon
    /// will not help.
    Refused(Said),
    /// Anything else: nobody reachable, no answer in time, not a master.
    Failed(Said),
}

/// What an attempt's failure says, its kind, and the driver's error it quotes, if one.
#[derive(Debug)]
pub(crate) struct Said {
    /// The words the user is told.
    pub(crate) text: String,
    pub(crate) kind: BackendErrorKind,
    /// The driver's error the words quote.
    pub(crate) driver: Option<RedisError>,
}

impl Said {
    /// Words of the client's own, of `kind`.
    pub(crate) fn own(kind: BackendErrorKind, text: impl Into<String>) -> Self {
        Said { text: text.into(), kind, driver: None }
    }

    /// The driver's error `e`, in its own words, of the kind [`kind_of`] gives.
    pub(crate) fn driver(e: &RedisError) -> Self {
        Said { text: e.to_string(), kind: kind_of(e), driver: Some(e.clone()) }
    }

    /// The same failure, its words rewritten by `f` (which keeps the driver's words).
    pub(crate) fn map(self, f: impl FnOnce(&str) -> String) -> Self {
        Said { text: f(&self.text), ..self }
    }

    /// The backend's error reading `"{prefix}: {text}"`.
    pub(crate) fn error(self, prefix: &str) -> LockError {
        crate::said(self.kind, format!("{prefix}: {}", self.text), self.driver)
    }
}

impl Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::UnknownMaster(m) => f.write_str(m),
            AttemptError::Refused(s) | AttemptError::Failed(s) => f.write_str(&s.text),
        }
    }
}

impl From<String> for AttemptError {
    fn from(message: String) -> Self {
        AttemptError::Failed(Said::own(BackendErrorKind::Other, message))
    }
}

/// `e`, met at `step` of a connect attempt, as the attempt's error: a [`refusal`] is
/// [`AttemptError::Refused`].
pub(crate) fn attempt_error(e: &RedisError, step: &str) -> AttemptError {
    match refusal(e, step) {
        Some(why) => AttemptError::Refused(refused(why, e)),
        None => AttemptError::Failed(Said::driver(e)),
    }
}

/// A refusal said in `why`, quoting the driver's `e`.
pub(crate) fn refused(why: String, e: &RedisError) -> Said {
    Said { text: why, kind: BackendErrorKind::Refused, driver: Some(e.clone()) }
}

/// The kind of failure `e` is: a [`refusal`] is refused; no answer within the response or
/// connect timeout a timeout; a connection refused, broken or dropped, and a server that is
/// loading its data or cannot serve yet, unavailable; a reply the client cannot use protocol;
/// anything else the server said (a `READONLY` replica, a script's error) other.
pub(crate) fn kind_of(e: &RedisError) -> BackendErrorKind {
    if refusal(e, "it").is_some() {
        return BackendErrorKind::Refused;
    }
    if e.is_timeout() {
        return BackendErrorKind::Timeout;
    }
    if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() {
        return BackendErrorKind::Unavailable;
    }
    match e.kind() {
        ErrorKind::Server(
            ServerErrorKind::BusyLoading | ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown,
        ) => BackendErrorKind::Unavailable,
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => BackendErrorKind::Protocol,
        _ if e.is_unrecoverable_error() => BackendErrorKind::Unavailable,
        _ => BackendErrorKind::Other,
    }
}

/// What the server refused, when `e` refuses who we are or what we may do (`what`: the command
/// refused, or `it`) rather than says it is unreachable: a wrong password or a disabled user
/// (`WRONGPASS`; on RESP2 the driver says only "authentication failed"), no credentials where
/// they are needed (`NOAUTH`), an ACL that forbids a command, key or channel (`NOPERM`), or a
/// server without RESP3 for tracking. Never the password: neither the server nor the driver
/// repeats it.
pub(crate) fn refusal(e: &RedisError, what: &str) -> Option<String> {
    let said = match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    };
    let wrong_password = || {
        format!(
            "authentication refused ({said}): a wrong password, or a user that does not exist \
             or is off"
        )
    };
    Some(match e.code() {
        Some("WRONGPASS") => wrong_password(),
        Some("NOAUTH") => format!(
            "the server asks for credentials ({said}): its default user is off or has a \
             password; give RedisConnectConfig::credentials, or a user and password in the URL"
        ),
        Some("NOPERM") => format!("the user's ACL refused {what} ({said})"),
        _ => match e.kind() {
            ErrorKind::AuthenticationFailed => wrong_password(),
            ErrorKind::RESP3NotSupported => format!(
                "the server does not speak RESP3 ({said}): Redis 6 or later is needed for \
                 tracking; set RedisConnectConfig::tracking to false"
            ),
            _ => return None,
        },
    })
}
