//! One session at a time, renewed when it ends: for the backends whose locks live in a session
//! that can end under them (a ZooKeeper session, an etcd lease).
//!
//! A [`SessionSlot`] holds the session new requests use. While it lives, every request gets it.
//! Once it is over, the next request opens a new one; only one request at a time tries, and the
//! others wait for its outcome rather than open sessions of their own. After a failed attempt,
//! requests fail at once, saying why and when the next attempt will be made, for a backoff of
//! 100 ms that doubles up to 2 s: a server that is down is not hammered, and a caller is never
//! held longer than one attempt.

use crate::LockError;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The first wait after a failed attempt at a new session; it doubles up to
/// [`MAX_SESSION_RETRY`].
pub const FIRST_SESSION_RETRY: Duration = Duration::from_millis(100);
/// The longest wait between two attempts at a new session.
pub const MAX_SESSION_RETRY: Duration = Duration::from_secs(2);

/// A session that can end.
pub trait Ending {
    /// True once it can never be used again (expired, closed, its lease lapsed).
    fn is_over(&self) -> bool;
}

/// When the next attempt at a new session may be made, after failed ones.
struct Backoff {
    retry_at: Option<Instant>,
    wait: Duration,
    last_error: String,
}

/// The current session of a backend, and the renewal of it. See the module docs.
pub struct SessionSlot<S> {
    current: Mutex<Arc<S>>,
    backoff: Mutex<Backoff>,
    /// Held by the one request that is opening a new session.
    turn: tokio::sync::Mutex<()>,
    made: AtomicU64,
}

impl<S: Ending> SessionSlot<S> {
    /// A slot holding `first`, the session the backend connected with.
    pub fn new(first: S) -> Self {
        SessionSlot {
            current: Mutex::new(Arc::new(first)),
            backoff: Mutex::new(Backoff {
                retry_at: None,
                wait: FIRST_SESSION_RETRY,
                last_error: String::new(),
            }),
            turn: tokio::sync::Mutex::new(()),
            made: AtomicU64::new(1),
        }
    }

    /// The current session, over or not.
    pub fn current(&self) -> Arc<S> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many sessions were made: 1 for the first, one more for every renewal.
    pub fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// The session for a new request: the current one while it lives, else one made by `open`.
    /// While the backoff after a failed attempt runs, the answer is `refused(last error, time
    /// until the next attempt)`.
    pub async fn get<F>(
        &self,
        open: impl FnOnce() -> F,
        refused: impl Fn(&str, Duration) -> LockError,
    ) -> Result<Arc<S>, LockError>
    where
        F: Future<Output = Result<S, LockError>>,
    {
        if let Some(live) = self.live() {
            return Ok(live);
        }
        self.check_backoff(&refused)?;
        let _turn = self.turn.lock().await;
        // Whoever had the turn before us may have succeeded, or failed and set a backoff.
        if let Some(live) = self.live() {
            return Ok(live);
        }
        self.check_backoff(&refused)?;
        match open().await {
            Ok(new) => {
                let new = Arc::new(new);
                *self.current.lock().unwrap_or_else(|e| e.into_inner()) = new.clone();
                self.made.fetch_add(1, Ordering::Relaxed);
                let mut b = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
                b.retry_at = None;
                b.wait = FIRST_SESSION_RETRY;
                Ok(new)
            }
            Err(e) => {
                let mut b = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
                b.retry_at = Some(crate::rt::now() + b.wait);
                b.wait = (b.wait * 2).min(MAX_SESSION_RETRY);
                b.last_error = e.to_string();
                Err(e)
            }
        }
    }

    fn live(&self) -> Option<Arc<S>> {
        let session = self.current();
        (!session.is_over()).then_some(session)
    }

    fn check_backoff(
        &self,
        refused: &impl Fn(&str, Duration) -> LockError,
    ) -> Result<(), LockError> {
        let b = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        match b.retry_at {
            Some(at) if crate::rt::now() < at => {
                Err(refused(&b.last_error, at.saturating_duration_since(crate::rt::now())))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[derive(Debug)]
    struct Fake {
        over: AtomicBool,
        n: u64,
    }
    impl Ending for Fake {
        fn is_over(&self) -> bool {
            self.over.load(Ordering::SeqCst)
        }
    }
    fn fake(n: u64) -> Fake {
        Fake { over: AtomicBool::new(false), n }
    }
    fn refused(last: &str, wait: Duration) -> LockError {
        LockError::Config(format!("refused: {last} ({wait:?})"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_live_session_is_kept_an_ended_one_renewed_and_failures_back_off() {
        let slot = SessionSlot::new(fake(1));
        let s = slot.get(|| async { Ok(fake(99)) }, refused).await.unwrap();
        assert_eq!((s.n, slot.made()), (1, 1), "a live session is kept");
        s.over.store(true, Ordering::SeqCst);
        let down = || async { Err(LockError::Config("server down".into())) };
        assert!(slot.get(down, refused).await.is_err());
        // Within the backoff, requests are refused at once without an attempt.
        let e = slot
            .get(|| async { panic!("no attempt during the backoff") }, refused)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("server down"), "{e}");
        crate::rt::sleep(FIRST_SESSION_RETRY).await;
        assert!(slot.get(down, refused).await.is_err());
        // The backoff doubled: 100 ms later it still runs.
        crate::rt::sleep(FIRST_SESSION_RETRY).await;
        assert!(slot.get(|| async { panic!("still backing off") }, refused).await.is_err());
        crate::rt::sleep(FIRST_SESSION_RETRY).await;
        let s = slot.get(|| async { Ok(fake(2)) }, refused).await.unwrap();
        assert_eq!((s.n, slot.made()), (2, 2));
        assert_eq!(slot.current().n, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn one_request_at_a_time_opens_a_session() {
        let slot = Arc::new(SessionSlot::new(fake(1)));
        slot.current().over.store(true, Ordering::SeqCst);
        let opened = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (slot, opened) = (slot.clone(), opened.clone());
            tasks.push(crate::rt::spawn(async move {
                slot.get(
                    || async move {
                        opened.fetch_add(1, Ordering::SeqCst);
                        crate::rt::sleep(Duration::from_millis(50)).await;
                        Ok(fake(2))
                    },
                    refused,
                )
                .await
                .unwrap()
                .n
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 2);
        }
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        assert_eq!(slot.made(), 2);
    }
}
