//! What a lock on a server (Redis, ZooKeeper, etcd, the lock service) reports when its server
//! or its driver fails: the driver's own error, kept as the source, and a kind a caller can
//! branch on without reading words.
//!
//! A caller that retries asks [`BackendErrorKind::is_transient`]: a timeout or a lost
//! connection may pass, a refused credential or a protocol mismatch will not pass by asking
//! again. [`BackendError::downcast_ref`] reaches the driver's error type for a caller that
//! needs more than the kind.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// What kind of failure a backend reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The server was not reached, or the connection to it broke. Asking again may succeed.
    Unavailable,
    /// The server did not answer within the client's deadline. Asking again may succeed.
    Timeout,
    /// The server refused the client's identity, credentials or permissions, or the TLS
    /// handshake. Asking again with the same settings fails the same way.
    Refused,
    /// The server's answer cannot be used: a protocol or version mismatch, an answer that
    /// breaks the recipe's rules, a limit of the server. Asking again fails the same way.
    Protocol,
    /// Anything else the server or the driver said.
    Other,
}

impl BackendErrorKind {
    /// True when the same request may succeed if asked again (a timeout, a lost connection).
    pub fn is_transient(self) -> bool {
        matches!(self, BackendErrorKind::Unavailable | BackendErrorKind::Timeout)
    }
}

impl fmt::Display for BackendErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendErrorKind::Unavailable => "unavailable",
            BackendErrorKind::Timeout => "timeout",
            BackendErrorKind::Refused => "refused",
            BackendErrorKind::Protocol => "protocol",
            BackendErrorKind::Other => "other",
        })
    }
}

/// A backend's error: the driver's error (or a sentence, where the client itself found the
/// fault), shared so that [`crate::LockError`] stays cheap to clone.
///
/// Two are equal when they read the same: driver errors rarely compare, and a test that
/// compares two lock errors compares what a person would read.
#[derive(Clone)]
pub struct BackendError(Arc<dyn Error + Send + Sync + 'static>);

impl BackendError {
    /// Wrap a driver's error, or a sentence (`String` and `&str` convert too).
    pub fn new(source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        BackendError(Arc::from(source.into()))
    }

    /// A driver's error with what was being done when it came: reads `"{what}: {source}"`,
    /// and its [`Error::source`] is the driver's error.
    pub fn context(
        what: impl Into<String>,
        source: impl Into<Box<dyn Error + Send + Sync + 'static>>,
    ) -> Self {
        BackendError::new(Context { what: what.into(), source: source.into() })
    }

    /// The first error of type `E` in the chain: this error, then each [`Error::source`]
    /// below it (through [`BackendError::context`]'s wrapper and any sentence that keeps the
    /// driver's error as its source).
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        let mut next: Option<&(dyn Error + 'static)> = Some(&*self.0);
        while let Some(e) = next {
            if let Some(found) = e.downcast_ref::<E>() {
                return Some(found);
            }
            next = e.source();
        }
        None
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl Error for BackendError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}

impl Eq for BackendError {}

impl From<String> for BackendError {
    fn from(sentence: String) -> Self {
        BackendError::new(sentence)
    }
}

impl From<&str> for BackendError {
    fn from(sentence: &str) -> Self {
        BackendError::new(sentence)
    }
}

impl From<Box<dyn Error + Send + Sync + 'static>> for BackendError {
    fn from(source: Box<dyn Error + Send + Sync + 'static>) -> Self {
        BackendError(Arc::from(source))
    }
}

/// What was being done, and the driver's error it met.
#[derive(Debug)]
struct Context {
    what: String,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl Error for Context {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct DriverError(u32);

    impl fmt::Display for DriverError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "driver error {}", self.0)
        }
    }

    impl Error for DriverError {}

    #[test]
    fn the_driver_error_stays_reachable_through_its_context() {
        let e = BackendError::context("cannot reach 127.0.0.1:1", DriverError(7));
        assert_eq!(e.to_string(), "cannot reach 127.0.0.1:1: driver error 7");
        assert_eq!(e.downcast_ref::<DriverError>(), Some(&DriverError(7)));
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("driver error 7"));
        #[derive(Debug)]
        struct Sentence(DriverError);
        impl fmt::Display for Sentence {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the server said no")
            }
        }
        impl Error for Sentence {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let deeper = BackendError::context("connecting", Sentence(DriverError(9)));
        assert_eq!(deeper.downcast_ref::<DriverError>(), Some(&DriverError(9)));
        let plain = BackendError::new(DriverError(8));
        assert_eq!(plain.downcast_ref::<DriverError>(), Some(&DriverError(8)));
        assert!(BackendError::new("a sentence").downcast_ref::<DriverError>().is_none());
    }

    #[test]
    fn errors_that_read_the_same_are_equal() {
        assert_eq!(BackendError::new("lost"), BackendError::new(String::from("lost")));
        assert_ne!(BackendError::new("lost"), BackendError::new("found"));
    }

    #[test]
    fn only_timeouts_and_lost_connections_are_transient() {
        assert!(BackendErrorKind::Unavailable.is_transient());
        assert!(BackendErrorKind::Timeout.is_transient());
        assert!(!BackendErrorKind::Refused.is_transient());
        assert!(!BackendErrorKind::Protocol.is_transient());
        assert!(!BackendErrorKind::Other.is_transient());
    }
}
