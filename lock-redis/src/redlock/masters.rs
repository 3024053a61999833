//! The independent masters of Redlock, and one request sent to all of them at once.

use crate::{backend_err, RedisBackend, RedisConnectConfig, BACKEND};
use lock_core::{BackendError, BackendErrorKind, LockError};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// The N independent Redis masters a [`Redlock`](crate::Redlock) runs on: no replication
/// between them, no Sentinel, each one a [`RedisBackend`] with its own connection.
#[derive(Debug, Clone)]
pub struct RedisMasters {
    masters: Arc<[RedisBackend]>,
}

impl RedisMasters {
    /// Connect to every master of `urls` with the default [`RedisConnectConfig`].
    pub async fn connect(urls: &[String]) -> Result<Self, LockError> {
        Self::connect_with(urls, RedisConnectConfig::default()).await
    }

    /// Connect to every master of `urls` with `config` (the same key prefix on each). A
    /// majority must answer now, or the error names the first that did not; a master that
    /// does not is connected at its first request (a vote less until then, as a master that
    /// goes away later is). The commands to the `i`th master of `urls` are reported to
    /// `config.requests` under `master-<i>`. [`RedisConnectConfig::tracking`] is ignored:
    /// Redlock's masters never track.
    pub async fn connect_with(
        urls: &[String],
        config: RedisConnectConfig,
    ) -> Result<Self, LockError> {
        // Redlock watches no key: tracking would only cost the masters pushes for the keys
        // its scripts read (the crate docs, "Told Lost at once").
        let config = RedisConnectConfig { tracking: false, ..config };
        let mut masters = Vec::with_capacity(urls.len());
        let mut failed = Vec::new();
        for (i, url) in urls.iter().enumerate() {
            let target = format!("master-{i}");
            match RedisBackend::connect_as(url, config.clone(), &target).await {
                Ok(m) => masters.push(m),
                Err(e @ LockError::Backend { .. }) => {
                    masters.push(RedisBackend::unconnected(url, config.clone(), &target)?);
                    failed.push(e);
                }
                Err(e) => return Err(e),
            }
        }
        let up = urls.len() - failed.len();
        match failed.into_iter().next() {
            Some(first) if up < urls.len() / 2 + 1 => Err(first_error(
                format!(
                    "Redlock: only {up} of {} masters answered, a majority is needed; first error",
                    urls.len()
                ),
                first,
            )),
            _ => Self::from_backends(masters),
        }
    }

    /// The masters of already connected backends, in this order.
    pub fn from_backends(masters: Vec<RedisBackend>) -> Result<Self, LockError> {
        if masters.is_empty() {
            return Err(LockError::Config("Redlock needs at least one Redis master".into()));
        }
        Ok(RedisMasters { masters: masters.into() })
    }

    /// How many masters there are (Redlock's N).
    pub fn len(&self) -> usize {
        self.masters.len()
    }

    /// Always false: [`RedisMasters::from_backends`] refuses an empty list.
    pub fn is_empty(&self) -> bool {
        self.masters.is_empty()
    }

    /// How many masters make a majority: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// The masters' backends, in order.
    pub fn backends(&self) -> &[RedisBackend] {
        &self.masters
    }

    /// Send one request to every master at once and collect the answers in master order; a
    /// master without an answer within `timeout` counts as failed (the doc's per-instance
    /// timeout, so that a dead master cannot hold the round up). What becomes of a request
    /// still under way then is `late`'s choice.
    pub(crate) async fn on_all<T, F, Fut>(
        &self,
        timeout: Duration,
        late: Late,
        request: F,
    ) -> Vec<Result<T, LockError>>
    where
        T: Send + 'static,
        F: Fn(RedisBackend) -> Fut,
        Fut: Future<Output = Result<T, LockError>> + Send + 'static,
    {
        // Spawned, so that the requests run in parallel; the set aborts them if the caller
        // is dropped (a request that `late` finishes goes on without it).
        let mut set = JoinSet::new();
        for (i, master) in self.masters.iter().enumerate() {
            let request = request(master.clone());
            let addr = master.address().to_string();
            let no_answer = move || {
                let no_answer = format!("no answer from {addr} within {timeout:?}");
                Err(backend_err(BackendErrorKind::Timeout, no_answer))
            };
            set.spawn(async move {
                let answer = match late {
                    Late::Drop => tokio::time::timeout(timeout, request).await,
                    Late::Finish => {
                        let mut own = tokio::spawn(request);
                        match tokio::time::timeout(timeout, &mut own).await {
                            Ok(Ok(answer)) => Ok(answer),
                            Ok(Err(_)) => Ok(Err(panicked())),
                            // Dropping the handle leaves the request running.
                            Err(elapsed) => Err(elapsed),
                        }
                    }
                };
                (i, answer.unwrap_or_else(|_| no_answer()))
            });
        }
        let mut answers: Vec<Option<Result<T, LockError>>> =
            (0..self.masters.len()).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            if let Ok((i, answer)) = joined {
                answers[i] = Some(answer);
            }
        }
        answers.into_iter().map(|a| a.unwrap_or_else(|| Err(panicked()))).collect()
    }
}

fn panicked() -> LockError {
    backend_err(BackendErrorKind::Other, "a request task panicked")
}

/// What [`RedisMasters::on_all`] does with a request that has no answer when the master
/// timeout ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Late {
    /// Drop it: a command not yet sent is never sent. For a `SET` that would otherwise land
    /// after the undo that follows a lost attempt, and for an extension or a token step, whose
    /// round is over.
    Drop,
    /// Let it run to its end in the background (each command within the connection's
    /// response timeout), its answer unheard. For a delete: one command can be several (the
    /// first script call on a master whose script cache is empty is refused `NOSCRIPT`, then
    /// loaded, then called again), and a delete cut between them would leave the key until
    /// its TTL.
    Finish,
}

/// How the masters answered one round of a yes/no request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Masters that said yes (granted, extended, deleted).
    pub(crate) yes: usize,
    /// Masters that said no (the key is someone else's, or gone).
    pub(crate) no: usize,
    /// The first failure (no answer in time, connection refused), if any.
    pub(crate) first_error: Option<LockError>,
}

impl Tally {
    pub(crate) fn of(answers: Vec<Result<bool, LockError>>) -> Tally {
        let mut tally = Tally { yes: 0, no: 0, first_error: None };
        for a in answers {
            match a {
                Ok(true) => tally.yes += 1,
                Ok(false) => tally.no += 1,
                Err(e) => {
                    tally.first_error.get_or_insert(e);
                }
            }
        }
        tally
    }

    /// How many masters answered at all.
    pub(crate) fn answered(&self) -> usize {
        self.yes + self.no
    }

    /// A [`LockError::Backend`] saying that fewer than `quorum` of `n` masters answered.
    pub(crate) fn too_few_answers(&self, what: &str, quorum: usize, n: usize) -> LockError {
        let said = format!(
            "Redlock {what}: only {} of {n} masters answered, {quorum} needed",
            self.answered()
        );
        match &self.first_error {
            Some(first) => first_error(format!("{said}; first error"), first.clone()),
            None => backend_err(BackendErrorKind::Unavailable, said),
        }
    }
}

/// Too few masters: `"{what}: {first}"`, of `first`'s kind (unavailable if it has none),
/// `first` kept as the source.
fn first_error(what: String, first: LockError) -> LockError {
    let kind = first.backend_kind().unwrap_or(BackendErrorKind::Unavailable);
    LockError::backend(BACKEND, kind, BackendError::context(what, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_yes_no_and_keeps_the_first_error() {
        let t = Tally::of(vec![
            Ok(true),
            Err(backend_err(BackendErrorKind::Timeout, "first")),
            Ok(false),
            Ok(true),
            Err(backend_err(BackendErrorKind::Other, "second")),
        ]);
        assert_eq!((t.yes, t.no, t.answered()), (2, 1, 3));
        let e = t.too_few_answers("acquire", 4, 5).to_string();
        assert!(e.contains("only 3 of 5") && e.contains("first"), "{e}");
        let e = t.too_few_answers("acquire", 4, 5);
        assert_eq!(e.backend_kind(), Some(BackendErrorKind::Timeout), "the first error's kind");
    }
}
