//! What the backend reports when ZooKeeper or its driver fails: a sentence naming what was
//! being done, with the driver's error as its source where one came, and a kind a caller can
//! branch on ([`BackendErrorKind`]).

use crate::BACKEND;
use lock_core::{BackendError, BackendErrorKind, LockError};
use std::error::Error;
use std::fmt;
use zookeeper_client as zk;

/// A failure as the backend tells it: its own sentence (which may quote the driver's error),
/// and the error it came from, if any, as [`Error::source`], so that
/// [`BackendError::downcast_ref`] still reaches the driver's error.
#[derive(Debug)]
pub(crate) struct Failure {
    sentence: String,
    cause: Option<Box<dyn Error + Send + Sync + 'static>>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sentence)
    }
}

impl Error for Failure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

/// A [`LockError::Backend`] of `kind` reading `sentence`, found by the backend itself.
pub(crate) fn backend_err(kind: BackendErrorKind, sentence: impl fmt::Display) -> LockError {
    LockError::backend(BACKEND, kind, sentence.to_string())
}

/// A [`LockError::Backend`] of `kind` reading `sentence`, whose source is `cause`.
pub(crate) fn caused(
    kind: BackendErrorKind,
    sentence: impl fmt::Display,
    cause: impl Error + Send + Sync + 'static,
) -> LockError {
    let failure = Failure { sentence: sentence.to_string(), cause: Some(Box::new(cause)) };
    LockError::backend(BACKEND, kind, BackendError::new(failure))
}

/// A [`LockError::Backend`] reading `sentence`, whose source is the driver's error `e`, of
/// `e`'s kind ([`kind_of`]).
pub(crate) fn driver_err(sentence: impl fmt::Display, e: zk::Error) -> LockError {
    caused(kind_of(&e), sentence, e)
}

/// The kind of a driver's error: whether asking again may help, and if not, why.
pub(crate) fn kind_of(e: &zk::Error) -> BackendErrorKind {
    use zk::Error as E;
    match e {
        E::ConnectionLoss
        | E::NoHosts
        | E::SessionExpired
        | E::ClientClosed
        | E::SessionMoved
        | E::NotReadOnly
        | E::Throttled => BackendErrorKind::Unavailable,
        E::Timeout => BackendErrorKind::Timeout,
        E::NoAuth | E::AuthFailed | E::InvalidAcl => BackendErrorKind::Refused,
        // The server's answer breaks the recipe's expectations (a znode in a state the recipe
        // did not leave it in, a limit of the server) or cannot be read, or the server lacks
        // the operation: asking again fails the same way.
        E::UnmarshalError { .. }
        | E::MarshallingError
        | E::UnexpectedErrorCode(_)
        | E::Unimplemented
        | E::QuotaExceeded
        | E::NoNode
        | E::NodeExists
        | E::NotEmpty
        | E::BadVersion
        | E::NoChildrenForEphemerals => BackendErrorKind::Protocol,
        _ => BackendErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_error_stays_the_source_and_the_sentence_reads_as_before() {
        let e = driver_err(
            "list /locks/k on ZooKeeper at h:1: connection to server has lost",
            zk::Error::ConnectionLoss,
        );
        assert_eq!(
            e.to_string(),
            "zookeeper error: list /locks/k on ZooKeeper at h:1: connection to server has lost"
        );
        assert_eq!(e.backend_kind(), Some(BackendErrorKind::Unavailable));
        let LockError::Backend { source, .. } = &e else { unreachable!() };
        assert_eq!(source.downcast_ref::<zk::Error>(), Some(&zk::Error::ConnectionLoss));
    }

    #[test]
    fn kinds_of_driver_errors() {
        assert!(kind_of(&zk::Error::SessionExpired).is_transient());
        assert_eq!(kind_of(&zk::Error::Timeout), BackendErrorKind::Timeout);
        assert_eq!(kind_of(&zk::Error::NoAuth), BackendErrorKind::Refused);
        assert_eq!(kind_of(&zk::Error::AuthFailed), BackendErrorKind::Refused);
        assert_eq!(kind_of(&zk::Error::NodeExists), BackendErrorKind::Protocol);
        assert_eq!(kind_of(&zk::Error::UnexpectedErrorCode(-999)), BackendErrorKind::Protocol);
        assert_eq!(kind_of(&zk::Error::NoWatcher), BackendErrorKind::Other);
    }
}
