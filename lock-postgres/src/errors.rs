//! The driver's errors, mapped to what a caller branches on: pure functions of the error's
//! SQLSTATE and of whether the connection is gone, checked without a server.

use lock_core::{BackendError, BackendErrorKind, LockError};

/// The name lock errors carry for this backend.
pub const BACKEND: &str = "postgres";

/// SQLSTATE of a lock wait that ran out of `lock_timeout`.
pub const LOCK_NOT_AVAILABLE: &str = "55P03";

/// What kind of failure a SQLSTATE is, for the lock's purposes.
///
/// | SQLSTATE | meaning | kind |
/// |---|---|---|
/// | class `08` | connection exception | unavailable |
/// | `57P01`, `57P02`, `57P03` | administrator or crash shutdown, server starting | unavailable |
/// | `57P05` | the server ended an idle session | unavailable |
/// | `53300` | too many connections (frees as others close) | unavailable |
/// | `57014` | statement cancelled (a timeout) | timeout |
/// | `28000`, `28P01`, `42501` | authorization refused, wrong password, no privilege | refused |
/// | `53200` | out of shared memory: the lock table is full | protocol (a limit) |
/// | `42704`, `42883` | unknown setting or function: the server is too old | protocol |
/// | anything else | | other |
pub fn kind_of_sqlstate(code: &str) -> BackendErrorKind {
    match code {
        c if c.starts_with("08") => BackendErrorKind::Unavailable,
        "57P01" | "57P02" | "57P03" | "57P05" | "53300" => BackendErrorKind::Unavailable,
        "57014" => BackendErrorKind::Timeout,
        "28000" | "28P01" | "42501" => BackendErrorKind::Refused,
        "53200" | "42704" | "42883" => BackendErrorKind::Protocol,
        _ => BackendErrorKind::Other,
    }
}

/// The kind of a driver error: by its SQLSTATE when the server sent one; a closed connection or
/// an I/O failure is unavailable; the driver's own complaints (a malformed answer) are protocol.
pub fn kind_of(e: &tokio_postgres::Error) -> BackendErrorKind {
    if let Some(code) = e.code() {
        return kind_of_sqlstate(code.code());
    }
    if is_tls_refusal(e) {
        return BackendErrorKind::Refused;
    }
    if e.is_closed() || source_is_io(e) {
        return BackendErrorKind::Unavailable;
    }
    let text = e.to_string();
    if text.contains("timed out") {
        BackendErrorKind::Timeout
    } else if text.contains("password") || text.contains("authentication") {
        BackendErrorKind::Refused
    } else {
        BackendErrorKind::Other
    }
}

/// A TLS handshake that failed on a certificate or a server without TLS: asking again with the
/// same settings fails the same way. rustls's error sits inside an I/O error, which does not
/// name it as its source, so each I/O error's payload is looked at too.
fn is_tls_refusal(e: &tokio_postgres::Error) -> bool {
    if e.to_string().contains("TLS") {
        return true;
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = next {
        if s.is::<rustls::Error>() {
            return true;
        }
        if let Some(inner) = s.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            if inner.is::<rustls::Error>() {
                return true;
            }
        }
        next = s.source();
    }
    false
}

fn source_is_io(e: &tokio_postgres::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = next {
        if s.is::<std::io::Error>() {
            return true;
        }
        next = s.source();
    }
    false
}

/// A lock error for driver error `e` met while doing `what`; the server's own message and
/// SQLSTATE are in its text (the driver's error, kept as the source, reads only "db error").
pub fn backend_error(what: impl Into<String>, e: tokio_postgres::Error) -> LockError {
    let kind = kind_of(&e);
    let mut what = what.into();
    if let Some(db) = e.as_db_error() {
        what = format!("{what}: {} (SQLSTATE {})", db.message(), db.code().code());
    }
    LockError::backend(BACKEND, kind, BackendError::context(what, e))
}

/// A lock error of `kind` in the client's own words.
pub fn client_error(kind: BackendErrorKind, what: impl Into<String>) -> LockError {
    LockError::backend(BACKEND, kind, BackendError::new(what.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_the_kind_a_caller_branches_on() {
        for (code, kind) in [
            ("08006", BackendErrorKind::Unavailable),
            ("08001", BackendErrorKind::Unavailable),
            ("57P01", BackendErrorKind::Unavailable),
            ("57P05", BackendErrorKind::Unavailable),
            ("53300", BackendErrorKind::Unavailable),
            ("57014", BackendErrorKind::Timeout),
            ("28P01", BackendErrorKind::Refused),
            ("28000", BackendErrorKind::Refused),
            ("42501", BackendErrorKind::Refused),
            ("53200", BackendErrorKind::Protocol),
            ("42704", BackendErrorKind::Protocol),
            ("23505", BackendErrorKind::Other),
        ] {
            assert_eq!(kind_of_sqlstate(code), kind, "{code}");
        }
        assert!(kind_of_sqlstate("08006").is_transient());
        assert!(!kind_of_sqlstate("28P01").is_transient());
        assert!(!kind_of_sqlstate("53200").is_transient(), "a full lock table is final");
    }
}
