//! The backend's errors: their kind, and etcd's or the driver's error kept as their source.

use crate::BACKEND;
use lock_core::{BackendError, BackendErrorKind, LockError};
use std::fmt::Display;

/// The backend's error of `kind`, in the client's own words (no driver error to keep).
pub(crate) fn backend_err(kind: BackendErrorKind, message: impl Display) -> LockError {
    LockError::backend(BACKEND, kind, message.to_string())
}

/// The backend's error of `kind` reading `text`, which says what etcd or the driver said in
/// `e`, kept as the source: when `text` ends with `": {e}"`, as [`BackendError::context`],
/// which [`BackendError::downcast_ref`] sees through; otherwise (etcd's words explained, the
/// driver's chain of causes spelled out) as the source of the sentence.
pub(crate) fn said(kind: BackendErrorKind, text: String, e: etcd_client::Error) -> LockError {
    let quoted = e.to_string();
    let source = match text.strip_suffix(&quoted).and_then(|t| t.strip_suffix(": ")) {
        Some(what) => BackendError::context(what, e),
        None => BackendError::new(Quoting { text, driver: e }),
    };
    LockError::backend(BACKEND, kind, source)
}

/// A sentence that explains etcd's or the driver's error: reads as the sentence, and its
/// source is the error.
#[derive(Debug)]
struct Quoting {
    text: String,
    driver: etcd_client::Error,
}

impl Display for Quoting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Quoting {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.driver)
    }
}

/// The kind of failure `e` is: etcd refusing who we are or what we may do (a wrong password,
/// no user, a refused token, a role without the rights) refused; a deadline etcd or the
/// channel gave up on a timeout; a server not reached, a connection broken, a cluster without
/// a leader unavailable; anything else etcd said (a lease not found, a request it rejects)
/// other.
pub(crate) fn kind_of(e: &etcd_client::Error) -> BackendErrorKind {
    use etcd_client::Error as E;
    // gRPC's status codes (tonic's `Code`, which this crate does not name).
    const CANCELLED: i32 = 1;
    const DEADLINE_EXCEEDED: i32 = 4;
    const PERMISSION_DENIED: i32 = 7;
    const ABORTED: i32 = 10;
    const UNAVAILABLE: i32 = 14;
    const UNAUTHENTICATED: i32 = 16;
    match e {
        E::GRpcStatus(s) => {
            let m = s.message();
            let refused = ["authentication failed", "invalid auth token", "user name is empty"]
                .iter()
                .any(|w| m.contains(w));
            match i32::from(s.code()) {
                _ if refused => BackendErrorKind::Refused,
                UNAUTHENTICATED | PERMISSION_DENIED => BackendErrorKind::Refused,
                DEADLINE_EXCEEDED => BackendErrorKind::Timeout,
                UNAVAILABLE | ABORTED | CANCELLED => BackendErrorKind::Unavailable,
                _ => BackendErrorKind::Other,
            }
        }
        E::TransportError(_) | E::IoError(_) => BackendErrorKind::Unavailable,
        _ => BackendErrorKind::Other,
    }
}
