//! The lease under every key of a backend, kept alive in the background: etcd's
//! `concurrency.Session`.
//!
//! A session is one lease granted by the server and a task that renews it every TTL/3 over a
//! keep-alive stream. The task knows when the lease is safe: the server counts a renewal's TTL
//! from the moment it *receives* the request, so the lease lives at least until the *sending*
//! time of the last answered renewal plus the TTL the answer granted. Once that moment passes
//! without a fresh answer, or an answer says the lease is gone (TTL 0), the session is over:
//! every guard of it is told [`LeaseState::Lost`](lock_core::LeaseState::Lost), and the next
//! request of the backend grants a new lease.
//!
//! Every request of the crate is named by its [`Rpc`]: the key-value requests, watches and
//! lease queries through [`Session::call`] (which sends them through [`Auth::call`]), the
//! lease's grant, keep-alives and revoke in this module's lease code, `Authenticate` in
//! [`crate::auth`]. Each is reported to the backend's [`RequestHook`] as it is sent.

use crate::auth::Auth;
use crate::rpc::Rpc;
use crate::{backend_err, kind_of, said, EtcdConfig};
use etcd_client::Client;
use lock_core::requests::RequestHook;
use lock_core::retry::{Backoff, Retries};
use lock_core::{BackendErrorKind, LeaseDeadline, LockError};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The pause before a failed keep-alive stream, request or delete is tried again.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Whether a session's lease still stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Renewed, as far as the client knows.
    Alive,
    /// Expired, or possibly expired: why.
    Over(String),
}

/// One lease, its keep-alive task, and the keys made under it.
pub(crate) struct Session {
    pub client: Client,
    /// The lease id (the hex of it names the keys).
    pub lease: i64,
    /// The TTL the server granted.
    pub ttl: Duration,
    /// How long one request may take.
    pub request_timeout: Duration,
    /// Where each request is reported.
    requests: RequestHook,
    /// The backend's identity, through which every key-value and watch request goes.
    auth: Arc<Auth>,
    state: watch::Receiver<Lease>,
    /// Until when the lease is certainly alive by our clock, for the guards to read.
    deadline: LeaseDeadline,
    keeper: tokio::task::JoinHandle<()>,
    next_key: AtomicU64,
    /// Per election, the slot of the session's one candidacy (its key is named after the
    /// lease alone, as in etcd's `concurrency.Election`).
    candidacies: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Session {
    /// Grant a lease of `config.lease_ttl` (in whole seconds) on `auth`'s client and start
    /// keeping it alive; the grant must answer within `within`.
    pub async fn open(
        auth: &Arc<Auth>,
        config: &EtcdConfig,
        within: Duration,
    ) -> Result<Session, LockError> {
        let (client, endpoints) = (&auth.client, &auth.endpoints);
        let ttl_secs = config.lease_ttl.as_secs_f64().ceil() as i64;
        let sent = Instant::now();
        let mut leases = client.lease_client();
        Rpc::LeaseGrant.sent(&config.requests);
        let granted = match tokio::time::timeout(within, leases.grant(ttl_secs, None)).await {
            Ok(Ok(g)) => g,
            Ok(Err(e)) => {
                let text = format!(
                    "cannot grant a lease on etcd at {endpoints}: {}",
                    crate::tls::words(&e)
                );
                return Err(said(kind_of(&e), text, e));
            }
            Err(_) => {
                return Err(backend_err(
                    BackendErrorKind::Timeout,
                    format!(
                        "cannot reach etcd at {endpoints}: no answer to a lease grant within \
                         {within:?}"
                    ),
                ))
            }
        };
        if !granted.error().is_empty() {
            return Err(backend_err(
                BackendErrorKind::Other,
                format!("etcd at {endpoints} refused a lease: {}", granted.error()),
            ));
        }
        let ttl = Duration::from_secs(granted.ttl().max(1) as u64);
        let (tx, state) = watch::channel(Lease::Alive);
        let lapsed = format!(
            "no keep-alive of lease {:x} answered by etcd at {endpoints} for its TTL ({ttl:?}): \
             the server may have expired it, and deleted its keys",
            granted.id()
        );
        let deadline = LeaseDeadline::new(Some(sent + ttl), lapsed);
        let keeper = tokio::spawn(keep_alive(
            client.clone(),
            granted.id(),
            ttl,
            deadline.clone(),
            endpoints.clone(),
            config.requests.clone(),
            tx,
        ));
        Ok(Session {
            client: client.clone(),
            lease: granted.id(),
            ttl,
            request_timeout: config.request_timeout,
            requests: config.requests.clone(),
            auth: auth.clone(),
            state,
            deadline,
            keeper,
            next_key: AtomicU64::new(0),
            candidacies: std::sync::Mutex::default(),
        })
    }

    /// Until when the lease is certainly alive by our clock ([`LeaseDeadline`]).
    pub fn deadline(&self) -> LeaseDeadline {
        self.deadline.clone()
    }

    /// Why the lease is over, or `None` while it stands.
    pub fn over(&self) -> Option<String> {
        match &*self.state.borrow() {
            Lease::Alive => None,
            Lease::Over(why) => Some(why.clone()),
        }
    }

    /// Resolves with the reason once the lease is over.
    pub async fn ended(&self) -> String {
        let mut state = self.state.clone();
        loop {
            if let Lease::Over(why) = &*state.borrow_and_update() {
                return why.clone();
            }
            if state.changed().await.is_err() {
                return "the lease keeper stopped".into();
            }
        }
    }

    /// A key of its own under `prefix`: `<prefix><lease hex>-<n>`. etcd's Mutex names its key
    /// after the lease alone; here every acquisition gets a fresh name because the lockers of
    /// one backend share its lease, and because a key left by an attempt whose answer was lost
    /// must never be adopted by a later one (see the crate docs).
    pub fn new_key(&self, prefix: &str) -> String {
        format!("{prefix}{:x}-{}", self.lease, self.next_key.fetch_add(1, Ordering::Relaxed))
    }

    /// The slot of this session's candidacy in `election`: whoever holds it may have the
    /// session's candidate key there (`<prefix><lease hex>`), so candidacies of one session in
    /// one election follow each other.
    pub fn candidacy(&self, election: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut slots = self.candidacies.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        slots.entry(election.to_string()).or_default().clone()
    }

    /// The request `request()` makes, an `rpc` on `key`: reported to the backend's hook,
    /// bounded by the request timeout, sent again with a new token if etcd refused ours
    /// ([`Auth::call`]), its failure worded for what it does.
    pub async fn call<T, F, Fut>(&self, rpc: Rpc, key: &str, request: F) -> Result<T, LockError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.auth.call(rpc, key, self.request_timeout, request).await
    }

    /// A backend error of `kind` for `what` on `key`, in the client's own words `e`.
    pub fn err(
        &self,
        kind: BackendErrorKind,
        what: &str,
        key: &str,
        e: impl std::fmt::Display,
    ) -> LockError {
        self.auth.err(kind, what, key, e)
    }

    /// A backend error for `what` on `key` that the driver's `e` ended, kept as the source.
    pub fn driver_err(&self, what: &str, key: &str, e: etcd_client::Error) -> LockError {
        self.auth.driver_err(what, key, e)
    }
}

impl lock_core::session::Ending for Session {
    fn is_over(&self) -> bool {
        self.over().is_some()
    }
}

impl Drop for Session {
    /// The last user of a session is gone: stop renewing and revoke the lease, which deletes
    /// its keys at once (as closing a ZooKeeper session deletes its ephemeral znodes). A revoke
    /// that cannot reach the server leaves the lease to expire after its TTL.
    fn drop(&mut self) {
        self.keeper.abort();
        if self.over().is_some() {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (mut leases, lease, within) =
                (self.client.lease_client(), self.lease, self.request_timeout);
            Rpc::LeaseRevoke.sent(&self.requests);
            handle.spawn(async move {
                let _ = tokio::time::timeout(within, leases.revoke(lease)).await;
            });
        }
    }
}

/// Renew `lease` (granted for `ttl`) every TTL/3 until it is over, publishing the end on
/// `state`. `deadline` starts at the moment the grant made the lease safe to (the send time of
/// the grant plus its TTL) and moves on with each answered renewal.
async fn keep_alive(
    client: Client,
    lease: i64,
    mut ttl: Duration,
    deadline: LeaseDeadline,
    endpoints: Arc<str>,
    requests: RequestHook,
    state: watch::Sender<Lease>,
) {
    let over = |why: String| {
        state.send_replace(Lease::Over(why));
    };
    let lapsed = |ttl_hint: Duration| {
        format!(
            "no keep-alive of lease {lease:x} answered by etcd at {endpoints} for its TTL ({ttl_hint:?}): \
             the server may have expired it, and deleted its keys"
        )
    };
    // Given up by our own clock, not by the server: revoke it once the server answers again.
    let lapse = |ttl: Duration| {
        tokio::spawn(revoke_lapsed(client.clone(), lease, ttl, requests.clone()));
        over(lapsed(ttl))
    };
    let mut safe_until = deadline.until().unwrap_or_else(Instant::now);
    loop {
        // One keep-alive stream; a broken one is opened again until the lease may have lapsed.
        let sent = Instant::now();
        // Opening the stream sends its first renewal.
        Rpc::LeaseKeepAlive.sent(&requests);
        let opened =
            tokio::time::timeout_at(safe_until, client.lease_client().keep_alive(lease)).await;
        let (mut keeper, mut answers) = match opened {
            Err(_) => return lapse(ttl),
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(e))) => {
                return over(format!(
                    "etcd at {endpoints} says lease {lease:x} is gone ({e}): its keys are deleted"
                ))
            }
            Ok(Err(_)) => {
                tokio::time::sleep(
                    RETRY_PAUSE.min(safe_until.saturating_duration_since(Instant::now())),
                )
                .await;
                continue;
            }
            // Opening the stream renewed the lease once already.
            Ok(Ok(pair)) => pair,
        };
        // The crate keeps the opening renewal's answer to itself (it only checks that the lease
        // exists): its TTL is the last one granted.
        safe_until = sent + ttl;
        deadline.set(Some(safe_until));
        loop {
            tokio::time::sleep(ttl / 3).await;
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                break;
            }
            // Counted once on the stream: a closed stream took nothing.
            Rpc::LeaseKeepAlive.sent(&requests);
            match tokio::time::timeout_at(safe_until, answers.message()).await {
                Err(_) => return lapse(ttl),
                Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                    ttl = Duration::from_secs(answer.ttl() as u64);
                    safe_until = sent + ttl;
                    deadline.set(Some(safe_until));
                }
                Ok(Ok(Some(_))) => {
                    return over(format!(
                    "etcd at {endpoints} says lease {lease:x} has expired: its keys are deleted"
                ))
                }
                Ok(Ok(None)) | Ok(Err(_)) => break,
            }
        }
        if Instant::now() >= safe_until {
            return lapse(ttl);
        }
    }
}

/// Revoke a lease whose keep-alives went unanswered for its TTL, until the server answers.
///
/// The holder stopped counting on the lease, but the server may still hold it: etcd restarted
/// with its data gives every lease it knew its whole TTL again, so a server restarted again
/// within each TTL never expires a lease nobody renews, and its keys, a holder's among them,
/// keep the lock from everyone until the restarts stop. A revoke that reaches the server ends
/// the lease (or learns it is gone already) at once. Its transient failures are retried
/// ([`lock_core::retry`], from [`RETRY_PAUSE`] doubling up to 1 s) for at most ten TTLs and
/// never less than a minute; a server down for longer expires the lease one TTL after it
/// serves again. Any other answer (no such lease; a refused credential) ends it.
async fn revoke_lapsed(client: Client, lease: i64, ttl: Duration, requests: RequestHook) {
    let until = Instant::now() + (ttl * 10).max(Duration::from_secs(60));
    let backoff = Backoff { first: RETRY_PAUSE, ..Backoff::default() };
    let revoke = || async {
        Rpc::LeaseRevoke.sent(&requests);
        match tokio::time::timeout(ttl, client.lease_client().revoke(lease)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(backend_err(kind_of(&e), e)),
            Err(_) => Err(backend_err(BackendErrorKind::Timeout, "no answer to LeaseRevoke")),
        }
    };
    let _ = Retries::new(backoff, Some(until)).run(revoke).await;
}
