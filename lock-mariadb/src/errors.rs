//! The driver's errors, mapped to what a caller branches on: pure functions of the server's
//! error code and of the driver's error variant, checked without a server.

use lock_core::{BackendError, BackendErrorKind, LockError};
use mysql_async::{DriverError, Error, IoError};

/// The name lock errors carry for this backend.
pub const BACKEND: &str = "mariadb";

/// What kind of failure a server error code is, for the lock's purposes.
///
/// | code | meaning | kind |
/// |---|---|---|
/// | 1040, 1203 | too many connections (in all, for the user): frees as others close | unavailable |
/// | 1053, 1927 | the server is shutting down, the connection was killed | unavailable |
/// | 1290, 1836 | the server is read-only (a replica; a failover may pass) | unavailable |
/// | 1205, 1969 | a lock wait or a statement ran out of its time | timeout |
/// | 1044, 1045, 1698 | no access to the database, wrong user or password | refused |
/// | 1129, 1130 | this host is blocked, or may not connect | refused |
/// | 1142, 1227, 1370 | a missing privilege | refused |
/// | 3159, 4151 | the server requires TLS | refused |
/// | 1059 | a lock name longer than the server allows | protocol |
/// | 1064, 1146, 1305 | unknown syntax, table or function | protocol |
/// | anything else | | other |
pub fn kind_of_code(code: u16) -> BackendErrorKind {
    match code {
        1040 | 1203 | 1053 | 1927 | 1290 | 1836 => BackendErrorKind::Unavailable,
        1205 | 1969 => BackendErrorKind::Timeout,
        1044 | 1045 | 1698 | 1129 | 1130 | 1142 | 1227 | 1370 | 3159 | 4151 => {
            BackendErrorKind::Refused
        }
        1059 | 1064 | 1146 | 1305 => BackendErrorKind::Protocol,
        _ => BackendErrorKind::Other,
    }
}

/// The kind of a driver error: by its code when the server sent one; a failed TLS handshake
/// (a certificate not signed by the CA, a server without TLS) is refused; a broken or closed
/// connection is unavailable; the driver's other complaints (an answer it cannot read) are
/// protocol.
pub fn kind_of(e: &Error) -> BackendErrorKind {
    match e {
        Error::Server(s) => kind_of_code(s.code),
        Error::Io(IoError::Tls(_)) => BackendErrorKind::Refused,
        Error::Io(IoError::Io(io)) if is_tls_refusal(io) => BackendErrorKind::Refused,
        Error::Io(IoError::Io(_)) => BackendErrorKind::Unavailable,
        Error::Driver(DriverError::ConnectionClosed) => BackendErrorKind::Unavailable,
        Error::Driver(DriverError::NoClientSslFlagFromServer) => BackendErrorKind::Refused,
        Error::Driver(_) => BackendErrorKind::Protocol,
        Error::Url(_) => BackendErrorKind::Protocol,
        Error::Other(_) => BackendErrorKind::Other,
    }
}

/// A TLS handshake that failed on a certificate: rustls's error sits inside an I/O error.
fn is_tls_refusal(io: &std::io::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> =
        io.get_ref().map(|e| e as &(dyn std::error::Error + 'static));
    while let Some(s) = next {
        if s.to_string().contains("certificate") || s.to_string().contains("TLS") {
            return true;
        }
        next = s.source();
    }
    false
}

/// A lock error for driver error `e` met while doing `what`; the server's message and code are
/// in its text, the driver's error is its source.
pub fn backend_error(what: impl Into<String>, e: Error) -> LockError {
    let kind = kind_of(&e);
    let what = match &e {
        Error::Server(s) => format!("{}: {} (error {})", what.into(), s.message, s.code),
        _ => what.into(),
    };
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
    fn codes_map_to_the_kind_a_caller_branches_on() {
        for (code, kind) in [
            (1040, BackendErrorKind::Unavailable),
            (1203, BackendErrorKind::Unavailable),
            (1053, BackendErrorKind::Unavailable),
            (1927, BackendErrorKind::Unavailable),
            (1290, BackendErrorKind::Unavailable),
            (1969, BackendErrorKind::Timeout),
            (1045, BackendErrorKind::Refused),
            (1044, BackendErrorKind::Refused),
            (1142, BackendErrorKind::Refused),
            (3159, BackendErrorKind::Refused),
            (1059, BackendErrorKind::Protocol),
            (1146, BackendErrorKind::Protocol),
            (1062, BackendErrorKind::Other),
        ] {
            assert_eq!(kind_of_code(code), kind, "{code}");
        }
        assert!(kind_of_code(1040).is_transient(), "too many connections may pass");
        assert!(!kind_of_code(1045).is_transient(), "a wrong password is final");
    }

    #[test]
    fn driver_errors_map_by_variant() {
        let closed = Error::Driver(DriverError::ConnectionClosed);
        assert_eq!(kind_of(&closed), BackendErrorKind::Unavailable);
        let reset = Error::Io(IoError::Io(std::io::ErrorKind::ConnectionReset.into()));
        assert_eq!(kind_of(&reset), BackendErrorKind::Unavailable);
        let denied = Error::Server(mysql_async::ServerError {
            code: 1045,
            message: "Access denied".into(),
            state: "28000".into(),
        });
        assert_eq!(kind_of(&denied), BackendErrorKind::Refused);
        assert!(backend_error("connect", denied).to_string().contains("Access denied"));
    }
}
