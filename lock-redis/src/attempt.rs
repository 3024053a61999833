//! Why a connect attempt failed, in words a user can act on: a leaf module, so that the link
//! ([`crate::link`]) and the Sentinel lookup ([`crate::sentinel`]) both use it without
//! importing each other.

use redis::{ErrorKind, RedisError};
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
    Refused(String),
    /// Anything else: nobody reachable, no answer in time, not a master.
    Failed(String),
}

impl Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::UnknownMaster(m) | AttemptError::Refused(m) | AttemptError::Failed(m) => {
                f.write_str(m)
            }
        }
    }
}

impl From<String> for AttemptError {
    fn from(message: String) -> Self {
        AttemptError::Failed(message)
    }
}

/// `e`, met at `step` of a connect attempt, as the attempt's error: a [`refusal`] is
/// [`AttemptError::Refused`].
pub(crate) fn attempt_error(e: &RedisError, step: &str) -> AttemptError {
    match refusal(e, step) {
        Some(why) => AttemptError::Refused(why),
        None => AttemptError::Failed(e.to_string()),
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
