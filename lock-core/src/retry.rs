//! Retrying a lock call's transient failures within its own deadline.
//!
//! A client on a loaded machine meets the same timeouts as one on a loaded network: a request
//! that is not answered in time, a connection that drops. As Curator's retry policies do, a
//! lock call treats such a failure ([`LockError::is_transient`]) as one more failed attempt:
//! it waits (exponential backoff, doubling from [`Backoff::first`] up to [`Backoff::max`],
//! never past the deadline) and tries again. It reports an error only when the error is final
//! (refused, invalid, a protocol error), or when its deadline passes while the backend still
//! fails; then it reports the backend's last error, not a timeout, so the caller learns why.
//!
//! A call without a deadline (`lock(id, None)`) waits for the lock for as long as it takes, but
//! not for a backend that never answers: consecutive transient failures are retried for at
//! most [`Backoff::budget`], then the last one is reported.
//!
//! What a retry must not do is the lock's business: an acquisition whose request may have
//! landed must clean up or recognise its own earlier attempt before it asks again (each lock
//! crate says how).

use crate::lock::LockError;
use std::time::Duration;
use tokio::time::Instant;

/// How long to wait between attempts after transient failures, and for how long to keep
/// trying without a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure.
    pub first: Duration,
    /// The longest wait between two attempts.
    pub max: Duration,
    /// Without a deadline: how long consecutive transient failures are retried.
    pub budget: Duration,
}

impl Default for Backoff {
    /// 50 ms, doubling to 1 s; 30 s of failures without a deadline.
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(50),
            max: Duration::from_secs(1),
            budget: Duration::from_secs(30),
        }
    }
}

/// One lock call's retries: feed it each outcome, it says how long to wait or gives the error
/// back as final. Time is the caller's (`now`), so simulated time works as wall time does.
#[derive(Debug)]
pub struct Retries {
    backoff: Backoff,
    deadline: Option<Instant>,
    /// When the current run of transient failures began, and the next wait.
    failing: Option<(Instant, Duration)>,
}

impl Retries {
    /// Retries for a call that must end by `deadline` (`None`: no deadline of its own).
    pub fn new(backoff: Backoff, deadline: Option<Instant>) -> Self {
        Retries { backoff, deadline, failing: None }
    }

    /// An attempt answered (granted or not): the next failure starts a new run.
    pub fn answered(&mut self) {
        self.failing = None;
    }

    /// An attempt failed with `error` at `now`: how long to wait before the next one, or the
    /// error when it is final, the deadline has passed, or the budget is spent.
    pub fn failed(&mut self, error: LockError, now: Instant) -> Result<Duration, LockError> {
        if !error.is_transient() {
            return Err(error);
        }
        let (since, wait) = *self.failing.get_or_insert((now, self.backoff.first));
        let end = match self.deadline {
            Some(d) => d,
            None => since + self.backoff.budget,
        };
        if now >= end {
            return Err(error);
        }
        self.failing = Some((since, (wait * 2).min(self.backoff.max)));
        Ok(wait.min(end - now))
    }

    /// Runs `attempt` until it returns a value, retrying its transient failures as above;
    /// sleeps with tokio's clock.
    pub async fn run<T, F, Fut>(mut self, mut attempt: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, LockError>>,
    {
        loop {
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(e) => {
                    let wait = self.failed(e, crate::rt::now())?;
                    crate::rt::sleep(wait).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendErrorKind;

    fn transient() -> LockError {
        LockError::backend("test", BackendErrorKind::Timeout, "no answer within 250ms")
    }

    fn backoff() -> Backoff {
        Backoff {
            first: Duration::from_millis(10),
            max: Duration::from_millis(40),
            budget: Duration::from_millis(100),
        }
    }

    #[test]
    fn transient_failures_wait_longer_each_time_up_to_the_max() {
        let t0 = crate::rt::now();
        let mut r = Retries::new(backoff(), Some(t0 + Duration::from_secs(10)));
        let waits: Vec<_> = (0..5).map(|_| r.failed(transient(), t0).unwrap()).collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(waits, [ms(10), ms(20), ms(40), ms(40), ms(40)]);
        r.answered();
        assert_eq!(r.failed(transient(), t0).unwrap(), ms(10), "an answer resets the backoff");
    }

    #[test]
    fn a_final_error_is_given_back_at_once() {
        let mut r = Retries::new(backoff(), None);
        let refused = LockError::backend("test", BackendErrorKind::Refused, "WRONGPASS");
        assert!(matches!(r.failed(refused, crate::rt::now()), Err(LockError::Backend { .. })));
        let invalid = LockError::Config("bad".into());
        assert!(matches!(r.failed(invalid, crate::rt::now()), Err(LockError::Config(_))));
    }

    #[test]
    fn the_deadline_ends_the_retries_with_the_backends_error() {
        let t0 = crate::rt::now();
        let deadline = t0 + Duration::from_millis(25);
        let mut r = Retries::new(backoff(), Some(deadline));
        assert_eq!(r.failed(transient(), t0).unwrap(), Duration::from_millis(10));
        // The wait never runs past the deadline.
        let at = t0 + Duration::from_millis(20);
        assert_eq!(r.failed(transient(), at).unwrap(), Duration::from_millis(5));
        let e = r.failed(transient(), deadline).unwrap_err();
        assert!(e.is_transient(), "the backend's own error, not a timeout: {e}");
    }

    #[test]
    fn without_a_deadline_the_budget_bounds_a_run_of_failures() {
        let t0 = crate::rt::now();
        let mut r = Retries::new(backoff(), None);
        assert!(r.failed(transient(), t0).is_ok());
        assert!(r.failed(transient(), t0 + Duration::from_millis(99)).is_ok());
        assert!(r.failed(transient(), t0 + Duration::from_millis(100)).is_err());
        // An answer starts a new run with a whole budget.
        r.answered();
        assert!(r.failed(transient(), t0 + Duration::from_millis(150)).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn run_retries_until_the_attempt_succeeds() {
        let mut left = 3;
        let start = crate::rt::now();
        let r = Retries::new(backoff(), None);
        let got = r
            .run(|| {
                left -= 1;
                let outcome = if left > 0 { Err(transient()) } else { Ok(7) };
                async move { outcome }
            })
            .await;
        assert_eq!(got.unwrap(), 7);
        assert_eq!(
            crate::rt::elapsed(start),
            Duration::from_millis(30),
            "waited 10 ms, then 20 ms"
        );
    }
}
