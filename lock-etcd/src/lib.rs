//! # lock-etcd
//!
//! etcd's own lock, `concurrency.Mutex` of the Go client (`client/v3/concurrency/mutex.go`),
//! against a real etcd server through the `etcd-client` crate: the lock that users of
//! Kubernetes-era systems already run, beside ZooKeeper's recipe (`lock-zookeeper`) and Redis's
//! (`lock-redis`).
//!
//! ## The protocol, step by step
//! Every backend holds one **lease** (a *session*, see below). Per lock id, with the prefix
//! `<root>/<lock id>/` (`root` is `/locks` by default):
//!
//! 1. **Enqueue, in one transaction**: `IF create_revision(key) = 0 THEN put(key, owner,
//!    lease), get(prefix, first by create revision) ELSE get(key), get(prefix, first by create
//!    revision)`. Our place in the queue is the key's **create revision**, the revision of the
//!    transaction that made it (or, in the `ELSE` branch, the existing key's). The key is bound
//!    to the lease: it vanishes when the lease ends.
//! 2. If the prefix's first key (lowest create revision) is ours, or there is none, the lock is
//!    ours. The uncontended path is one round trip.
//! 3. Otherwise **wait for the deletion of every earlier key**: read the prefix's *last* key
//!    created before ours (`max_create_revision = ours − 1`); if there is none, go to 4; else
//!    watch that one key from the revision after the read until it is deleted, and read again.
//!    Watching the predecessor rather than the prefix means a release wakes one waiter: no herd.
//! 4. Read our key: if it is gone, the lease ended while we waited
//!    ([`LockError::LeaseLost`]); otherwise the lock is ours.
//! 5. **Release**: delete our key. A lease that ends deletes it too: that is how a crashed
//!    holder frees the lock, one TTL after its last renewal reached the server.
//!
//! The mandatory lock with a timeout deletes its key before returning [`LockError::Timeout`], so
//! nothing of it delays the next contender; a waiting future that is dropped deletes it in the
//! background. The soft lock is etcd's `TryLock`: step 1, and if the first key is not ours,
//! delete ours and answer "not held".
//!
//! ## Choices the Go client leaves open, and ours
//! - **Key names.** Go names the key `<prefix><lease hex>`, so two mutexes of one session on
//!   one prefix are the same waiter. Here the lockers of one backend share its lease (as
//!   ZooKeeper lockers share a session), so each acquisition gets a key of its own,
//!   `<prefix><lease hex>-<n>`. It also makes a lost answer safe: step 1 is create-or-get, so
//!   an attempt whose answer was lost could be retried with the same key; we instead delete
//!   that key (it belongs to no one else) in the background and fail the attempt
//!   ([`LockError::Backend`]): a later attempt never adopts a key whose grant nobody saw.
//! - **Waiting across outages.** A read or watch that fails while waiting (a broken connection,
//!   a restarting server) is tried again after a pause for as long as the lease stands and the
//!   timeout allows: a waiter keeps its place, which is its key, across a short outage. A watch
//!   the server cancels (compaction) is set again from a fresh read. The create that queues
//!   the waiter and the read that confirms the grant are retried the same way when they fail
//!   transiently ([`lock_core::retry`]): a create whose answer was lost is swept, and the retry
//!   creates a new key. The call reports the last error once its deadline passes.
//! - **Every request is bounded** by [`EtcdConfig::request_timeout`] (default 5 s), and
//!   connecting (authenticating, checking the lock root, granting the first lease) by
//!   [`EtcdConfig::connect_timeout`] (default 10 s): an unreachable server is a
//!   [`LockError::Backend`] naming its address within that time, never a hang.
//!
//! ## Sessions, and what a holder is told
//! A session is a lease of [`EtcdConfig::lease_ttl`] (whole seconds; the server may raise it to
//! its minimum, 1.5 election timeouts) renewed every TTL/3 over a keep-alive stream. The
//! server counts each renewal from when it receives it, so the client knows the lease stands
//! until the *send* time of the last answered renewal plus the TTL. When that moment passes
//! without a fresh answer, or an answer says the lease is gone, the session is over and every
//! guard of it is told [`LeaseState::Lost`] — before the server
//! can expire the lease and grant the lock to someone else, as long as the two clocks run at
//! the same rate. This is Go's `Session.Done()`, measured from the send time rather than the
//! answer's arrival. A session that is over revokes its lease so that its keys go at once:
//! when its renewals went unanswered, as soon as the server answers again (sent again for ten
//! TTLs, at least a minute). The server may well hold the lease still: etcd restarted with its
//! data gives every lease its whole TTL again, so a server restarted within each TTL would
//! otherwise keep a holder's key, and the lock, for as long as the restarts went on. With
//! authentication that revoke is refused while the lease has keys (below), and the lease
//! expires one TTL after the server is back. The backend's next request grants a new lease
//! ([`EtcdBackend::sessions_made`]).
//! A waiter whose lease ends fails with [`LockError::LeaseLost`]: its place was a key of that
//! lease, and a new key would go to the back of the queue, so the caller decides.
//!
//! ### Told when another client deletes or overwrites the key
//! The lease cannot tell a holder that someone else deleted its key (a stray `etcdctl del`, a
//! cleanup script, a client on the same prefix): the lease stands, so the holder goes on,
//! while the next waiter, watching that key, is granted the lock. Go's Mutex never notices.
//! Here every guard has a task that, besides the lease:
//!
//! 1. right after the grant, without the holder waiting for it, opens a watch of the guard's
//!    own key from the revision after the key's creation. The holder never writes its key
//!    again before its release, so every event on it is someone else's (an event that came
//!    while it waited, too);
//! 2. on a `PUT`: tells the guard [`LeaseState::Lost`], "its key … was overwritten by another
//!    client at revision … (now bound to lease …, not ours)": the key that holds the lock is
//!    no longer only the holder's (if the writer bound it to its own lease, that lease's end
//!    grants the next waiter);
//! 3. on a `DELETE`: asks etcd for the lease's time to live (`LeaseTimeToLive`, one round trip)
//!    and tells the guard "its key … was deleted by another client … while lease … still
//!    stands", or, if the lease has ended, that the key went with it;
//! 4. on a broken stream: watches again from the same revision (etcd replays what it missed);
//!    on a watch the server cancels (compaction, a token it refused): reads the key, and if it
//!    is untouched (same create and mod revision, our lease) watches again from that read;
//! 5. on release: stops, before the release deletes the key, so its own delete is never news.
//!    Dropping a guard stops it too.
//!
//! It costs one `Watch` per grant (a stream on the client's connection and a watcher on the
//! server while the lock is held), sent in the background: neither the grant nor the release
//! waits for it, so the handoff gap is unchanged. It is opened even for a guard released at
//! once, so that every grant costs the same requests. A holder is told within one round trip
//! of the event reaching it (a `DELETE`'s one more round trip is the lease query).
//!
//! ## Credentials, roles and strangers
//! [`EtcdConfig::credentials`] names an etcd user and its password
//! ([`lock_core::secret::Credentials`]: the password is never printed, nor put in an error);
//! over TLS a client certificate can be the identity instead (see "TLS" below).
//! Connecting authenticates (`Authenticate`, a token every key-value and watch request then
//! carries) and reads one key name under `<root>/` before granting a lease, so that within the
//! connect timeout a refusal is a [`LockError::Backend`] of kind
//! [`Refused`](lock_core::BackendErrorKind::Refused) that says what is wrong:
//! - a wrong user or password: "etcd at … refused the credentials of user 'locker':
//!   authentication failed, invalid user ID or password";
//! - no credentials, on a server with authentication on: "etcd at … has authentication
//!   enabled and no credentials were given …";
//! - a role that does not cover the lock root: "etcd at … denies user '…' access to the lock
//!   root …/ (etcdserver: permission denied): its role must grant READWRITE on the key range
//!   `[<root>/, <root>0)`". The whole range, because every waiter reads and watches the keys
//!   before its own. Nothing else is needed: leases need no permission.
//!
//! Credentials given to a server whose authentication is off are not an error (as in Go's
//! client): clients can be given credentials before the operator turns authentication on,
//! and they authenticate once the server asks for a user.
//!
//! **Tokens.** etcd's simple tokens expire after `--auth-token-ttl` (300 s) without use, and a
//! request that races a change to users or roles is refused as of an old auth revision;
//! `etcd-client` 0.18 never authenticates again by itself. So a request refused with "invalid
//! auth token", "revision of auth store is old" or "user name is empty" (authentication turned
//! on after we connected) authenticates again, once for all the requests refused at that
//! moment, and is sent once more, as Go's client does (`tests/security.rs` lets a token
//! expire). The re-sent request and the `Authenticate` are counted.
//!
//! **What a stranger can do.** On a server without authentication, anyone who reaches it can
//! delete or overwrite a holder's key, which grants the lock to the next waiter while the
//! holder's lease stands: two holders. The holder is told (above), but told after the fact;
//! fencing tokens ([`LockGuard::token`]) or an ACL are what prevent harm. With authentication
//! and a role per application on its own lock root, a client of another identity, or one
//! without credentials, is refused (`permission denied`, `user name is empty`) when it reads,
//! writes or deletes the keys, and when it revokes the holder's lease: etcd 3.4 checks a
//! revoke against the lease's keys. What etcd 3.4 does not check: granting leases, and keeping
//! any lease alive by its id (`LeaseKeepAlive` carries no token). A stranger that learnt a
//! lease id could keep a crashed holder's lease, and so its lock, alive; it cannot take the
//! lock. `etcd-client` sends no token with lease requests, so our own `LeaseRevoke` when a
//! backend is dropped is refused while the lease still has keys (a guard abandoned with
//! [`LockGuard::abandon`]); those keys go when the lease expires, one TTL later. A backend
//! whose keys are all released revokes its lease as before.
//!
//! ## TLS
//! [`EtcdConfig::tls`] ([`lock_core::tls::TlsFiles`], three PEM files) turns it on: the CA that
//! signed the server's certificate, and, for a server run with `--client-cert-auth`, this
//! client's certificate and key (mutual TLS). The endpoints are then `https://host:port` (a
//! `host:port` without a scheme is taken as `https://`), and each endpoint's host must be a
//! name or IP address the server's certificate is valid for.
//!
//! ```no_run
//! use lock_core::tls::TlsFiles;
//! use lock_etcd::{EtcdBackend, EtcdConfig};
//!
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! let config = EtcdConfig {
//!     tls: Some(
//!         TlsFiles::trusting("/etc/etcd/ca.pem")
//!             .with_identity("/etc/locks/locker.pem", "/etc/locks/locker-key.pem"),
//!     ),
//!     ..EtcdConfig::default()
//! };
//! let backend = EtcdBackend::connect_with("https://10.0.0.5:2379", config).await?;
//! # Ok(())
//! # }
//! ```
//!
//! **A certificate as the identity.** An etcd run with `--client-cert-auth` and authentication
//! on takes the common name of a client's verified certificate as the user of every request
//! that carries no token. So a client with a certificate and no [`EtcdConfig::credentials`]
//! *is* the user its certificate names: no password, no `Authenticate`, no token to expire;
//! that user's role must grant READWRITE on the lock root as a password user's must. Given
//! credentials as well, the token wins: requests are the password's user's.
//!
//! **What is built in.** The `tls` feature (on by default) brings tonic's rustls with ring's
//! crypto (`etcd-client/tls`, i.e. `tonic/tls-ring`; not aws-lc-rs). Only the CA given is
//! trusted, never the system's roots, so [`TlsFiles::ca`](lock_core::tls::TlsFiles::ca) is
//! required. Built without the feature, the crate connects over plain `http://` only, and any
//! TLS setting is a [`LockError::Config`] saying so. The TLS handshake is bounded by the
//! connect timeout and by half the request timeout, whichever is shorter (tonic's own connect
//! timeout covers only the TCP connect; half, so that a silent server is named as a handshake
//! that timed out, not as the first request's timeout).
//!
//! **Settings refused before connecting** ([`LockError::Config`]): an `https://` endpoint
//! without [`EtcdConfig::tls`]; an `http://` endpoint with it; [`EtcdConfig::tls`] without a CA
//! file; a file that cannot be read, or holds no PEM certificate (or key) (the error names the
//! file); a certificate without its key, or a key without its certificate.
//!
//! **Refusals at connect**, each a [`LockError::Backend`] of kind
//! [`Refused`](lock_core::BackendErrorKind::Refused) naming the endpoint, at once rather than
//! at a timeout (`tests/tls.rs` checks each, and that it takes under 5 s); rustls's own words,
//! then what they mean:
//!
//! | what is wrong | the error says |
//! |---|---|
//! | the server's certificate is signed by a CA other than ours | `TLS handshake with https://…:2379 failed: invalid peer certificate: UnknownIssuer (the server's certificate is not signed by the CA in /etc/etcd/ca.pem)` |
//! | the server's certificate is for another host | `… invalid peer certificate: certificate not valid for name "10.0.0.5"; certificate is only valid for DnsName("…") (the server's certificate does not name the endpoint's host)` |
//! | an `https://` endpoint of a plain server | `… failed: the server closed the connection during the handshake (tls handshake eof): is it a plain http:// server?` |
//! | an `http://` endpoint of a TLS server | `etcd at http://10.0.0.5:2379 closed the plain-text connection (transport error: connection error: stream closed because of a broken pipe): http://10.0.0.5:2379 speaks TLS (its handshake showed a certificate): use https://10.0.0.5:2379 and EtcdConfig::tls` |
//! | no client certificate, and the server requires one | `… failed: received fatal alert: BadCertificate (the server requires a client certificate and EtcdConfig::tls gives none: set TlsFiles::with_identity)` |
//! | a client certificate the server does not trust | `… received fatal alert: BadCertificate (the server refused the client certificate /etc/locks/locker.pem: is it signed by the CA the server trusts (--trusted-ca-file), and for client authentication?)` |
//! | a server that never answers the handshake | `cannot connect to etcd at https://…: transport error: TLS handshake timeout.` |
//! | a certificate user whose role does not cover the lock root | `etcd at … denies the user of the client certificate /etc/locks/locker.pem (its common name) access to the lock root …/ (etcdserver: permission denied): …` |
//! | a certificate, no credentials, a server with authentication on but without `--client-cert-auth` | `etcd at … has authentication enabled and took no user from the client certificate … (etcdserver: user name is empty): a certificate is a user only on a server run with --client-cert-auth; otherwise set EtcdConfig::credentials` |
//!
//! A server that refuses the client's certificate, or its lack of one, does so (in TLS 1.3)
//! after the client has finished its side of the handshake, in an alert that tonic never reads:
//! it is writing its first request by then, and meets a broken pipe. On that broken pipe, and
//! only then, the backend makes one handshake of its own with the same files (rustls
//! directly, bounded by the connect timeout and 2 s a step) and reports the server's alert;
//! a plain client whose connection is dropped likewise tries a handshake (trusting nothing)
//! to learn whether the server speaks TLS. Messages name files, never their contents: no key,
//! like no password, is ever printed.
//!
//! ## Fencing token
//! The key's create revision. Keys are granted in create-revision order and the revision of
//! the whole store increases with every write, so tokens strictly increase in grant order,
//! also across lock ids and across a server restart (the revision is in the log).
//!
//! ## Requests per grant
//! A backend reports every request it sends to [`EtcdConfig::requests`] (a [`RequestHook`]),
//! one per RPC, named as etcd's API names it, under its service: `kv` (`Txn`, `Range`,
//! `DeleteRange`), `watch` (`Watch`: the create request that opens a watch stream), `lease`
//! (`LeaseGrant`, each `LeaseKeepAlive` message, `LeaseRevoke`, `LeaseTimeToLive`), `auth`
//! (`Authenticate`). Watch events the server sends are not requests. From the protocol above:
//!
//! | what | requests |
//! |---|---|
//! | uncontended lock and release | 3: `Txn`, `Watch` (our own key, in the background), `DeleteRange` |
//! | lock after waiting behind one or more holders, and release | 7: `Txn`, `Range` (the predecessor), `Watch` (on it), `Range` (none left before ours), `Range` (our key, step 4), `Watch` (our own key, in the background), `DeleteRange` |
//! | soft lock refused | 2: `Txn`, `DeleteRange` |
//! | connect | `Authenticate` (with credentials), `Range` (the lock root, the access check), then the session's |
//! | a session (lease) | `LeaseGrant`, then one `LeaseKeepAlive` when the keep-alive stream opens and one every TTL/3; `LeaseRevoke` when the backend is dropped, or (until one is answered) once its renewals went unanswered for the TTL |
//! | a holder's key deleted by someone else | `LeaseTimeToLive` (who deleted it) |
//!
//! A waiter costs the same however long the queue ahead of it: it watches its predecessor
//! alone, and the predecessor's deletion comes after every earlier key's. More requests come
//! only from failures (a read or watch tried again after an outage, a watch the server cancels,
//! a request sent again with a new token after an `Authenticate`) and from the leases, which
//! are load whether anything is held or not: three renewals per TTL per backend. The holder's
//! watch of its own key is the price of being told when another client deletes or overwrites
//! it (above). `tests/requests.rs` checks the first four rows exactly, and that an etcd of its
//! own received, by its metrics, exactly the RPCs the backends reported.
//!
//! ## What the fault experiments show
//! etcd's key-value operations are linearizable, but the lock is a lease, and a lease is only
//! as good as the holder's knowledge of time. Jepsen's analysis of etcd 3.4.3 (2020) found
//! the locks unsafe under process pauses: a holder paused for longer than the TTL wakes up
//! believing it holds the lock while the server has expired its lease and granted the lock to
//! the next waiter. The harness reproduces this (`pause` longer than the TTL: overlapping
//! holds) and shows the cure: a resource that rejects writes whose token (the create revision)
//! is older than one it has seen rejects every stale write (`bench-harness` tests
//! `an_etcd_holder_paused_past_its_lease_*`).
//!
//! ## Invariants the tests check
//! - At most one key holds a lock id: the live key with the lowest create revision.
//! - A waiter watches one key, its predecessor; a release wakes one waiter.
//! - Grants are first come, first served, by create revision.
//! - A crashed holder's lock is free one TTL after its last renewal reached the server
//!   (plus the server's expiry check, every 500 ms).
//! - A timed-out, cancelled or refused (soft) attempt leaves no key behind.
//! - A holder whose key another client deletes or overwrites is told, with its lease intact.
//! - On a secured etcd, a client of another identity or without credentials can neither
//!   delete, overwrite nor revoke a holder's key; wrong or missing credentials and a role that
//!   does not cover the lock root are refused at connect, naming the user and never the
//!   password.
//! - Over TLS, a server certificate from another CA or for another host, the wrong protocol
//!   on either side, and a missing or untrusted client certificate are each refused at
//!   connect within seconds, saying what was refused and never showing a key.
//!
//! ## Conformance verdict
//! The whole shared suite (`lock_core::conformance_suite!`) passes against a real etcd with a
//! 2 s lease, each contender on its own backend through a proxy it can be cut off by
//! (`tests/conformance.rs`). "Lease renewal" is the lease keep-alive; "TTL" is the lease TTL.
//! It passes on a 3-member cluster too, each client given all three endpoints
//! (`tests/cluster_conformance.rs`), on an etcd with authentication on, every contender a
//! user whose role covers only the lock root (`tests/security.rs`), and over TLS
//! (`tests/tls.rs`): on an etcd with `--client-cert-auth` and authentication on, every
//! contender known by its client certificate alone, and by password over TLS; the benchmark
//! harness's cluster rows put it through leader kills, pauses and partitions.
//!
//! ## Example
//! ```no_run
//! use lock_core::Locker;
//! use lock_etcd::EtcdBackend;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! let backend = EtcdBackend::connect("http://127.0.0.1:2379", Duration::from_secs(10)).await?;
//! let locker = backend.locker("worker-1")?;
//! let guard = locker.lock("invoice-42", Some(Duration::from_secs(30))).await?;
//! tokio::select! {
//!     _ = guard.lost() => { /* the lease may be gone: stop, someone else may hold the lock */ }
//!     _ = async { /* the critical section, passing guard.token() downstream */ } => {}
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod auth;
mod errors;
mod holder;
mod rpc;
mod session;
mod tls;

use async_trait::async_trait;
use auth::{check_root, Auth};
use errors::{backend_err, kind_of, said};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use holder::Holder;
use lock_core::lock::{validate_id, LeaseState, Release};
use lock_core::requests::RequestHook;
use lock_core::retry::{Backoff, Retries};
use lock_core::secret::Credentials;
use lock_core::session::SessionSlot;
use lock_core::tls::TlsFiles;
use lock_core::{BackendErrorKind, LockError, LockGuard, Locker};
use rpc::Rpc;
use session::{Session, RETRY_PAUSE};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The backend name in [`LockError::Backend`].
pub const BACKEND: &str = "etcd";

/// How [`EtcdBackend::connect_with`] connects.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// The lease TTL asked of the server, rounded up to whole seconds (default 10 s; the server
    /// raises it to its minimum). A crashed holder's lock is free this long after the server
    /// last heard from it.
    pub lease_ttl: Duration,
    /// Longest wait for the first lease grant when connecting (default 10 s).
    pub connect_timeout: Duration,
    /// Longest wait for the answer to one request (default 5 s).
    pub request_timeout: Duration,
    /// Parent of the lock prefixes (default `/locks`).
    pub root: String,
    /// Where each request the backend sends is reported (default: nowhere). The crate docs
    /// ("Requests per grant") say what one grant costs.
    pub requests: RequestHook,
    /// The etcd user and password to authenticate as (default: none). Its role must grant
    /// READWRITE on the lock root's keys, `[<root>/, <root>0)`; the crate docs ("Credentials,
    /// roles and strangers") say why, and what a client without them can do.
    pub credentials: Option<Credentials>,
    /// TLS (default: none, plain `http://`): the CA that signed the server's certificate, and
    /// this client's certificate and key when the server asks for one (etcd's
    /// `--client-cert-auth`). With it, endpoints are `https://host:port` (or `host:port`).
    /// On a server with authentication on and `--client-cert-auth`, a client with a
    /// certificate and no [`EtcdConfig::credentials`] is the user its certificate's common
    /// name names. The crate docs ("TLS") say what each refusal means.
    pub tls: Option<TlsFiles>,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            lease_ttl: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            root: "/locks".into(),
            requests: RequestHook::none(),
            credentials: None,
            tls: None,
        }
    }
}

struct Inner {
    endpoints: Arc<str>,
    client: Client,
    /// The identity every request goes out with.
    auth: Arc<Auth>,
    config: EtcdConfig,
    /// The session new requests use; a new lease once it is over.
    slot: SessionSlot<Session>,
}

impl Inner {
    fn current(&self) -> Arc<Session> {
        self.slot.current()
    }

    /// The session for a new request: the current one while its lease stands, else a new
    /// lease (one attempt at a time; after a failed attempt requests fail at once for a
    /// backoff of 100 ms, doubling up to 2 s: [`SessionSlot`]).
    async fn session(&self) -> Result<Arc<Session>, LockError> {
        let open = || Session::open(&self.auth, &self.config, self.config.request_timeout);
        let refused = |last: &str, wait: Duration| {
            backend_err(
                BackendErrorKind::Unavailable,
                format!("no etcd lease at {}: {last} (next attempt in {wait:?})", self.endpoints),
            )
        };
        self.slot.get(open, refused).await
    }
}

/// `config` with its root trimmed of a final `/`, or why it cannot be used.
fn checked(mut config: EtcdConfig) -> Result<EtcdConfig, LockError> {
    config.root = config.root.trim_end_matches('/').to_string();
    if !config.root.starts_with('/') || config.root.contains("//") {
        return Err(LockError::Config(format!(
            "etcd lock root {:?} must be an absolute path other than /",
            config.root
        )));
    }
    if config.lease_ttl < Duration::from_secs(1) {
        return Err(LockError::Config(format!(
            "etcd lease TTL {:?} must be at least 1 s (leases are granted in whole seconds)",
            config.lease_ttl
        )));
    }
    if config.connect_timeout.is_zero() || config.request_timeout.is_zero() {
        return Err(LockError::Config("etcd connect and request timeouts must be positive".into()));
    }
    Ok(config)
}

/// How often the client pings an idle connection: above etcd's default minimum (5 s), as
/// etcd's own client does.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a ping may go unanswered before the connection counts as dead.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The client of `list`. It has no user: [`Auth::sign_in`] authenticates afterwards, so that
/// a server with authentication disabled is no error (`ConnectOptions::with_user` would make
/// it one) and so that a later token can be bought the same way.
async fn connect_client(
    list: &[&str],
    endpoints: &str,
    config: &EtcdConfig,
) -> Result<Client, LockError> {
    let options = ConnectOptions::new()
        // The TCP connect (the TLS handshake has a timeout of its own, see `tls::apply`).
        .with_connect_timeout(config.connect_timeout)
        // HTTP/2 pings find a dead connection (a stalled network, a killed server) so that
        // the channel connects again instead of waiting on it. etcd closes a connection that
        // pings more often than its `--grpc-keepalive-min-time` (5 s by default) with
        // `too_many_pings`, breaking every stream on it; etcd's own Go client never pings more
        // often than every 10 s. A request meanwhile has its own deadline.
        .with_keep_alive(KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT)
        // In a cluster without a leader, fail requests instead of holding them.
        .with_require_leader(true);
    let options = tls::apply(list, config, options)?;
    tokio::time::timeout(config.connect_timeout, Client::connect(list, Some(options)))
        .await
        .map_err(|_| {
            backend_err(
                BackendErrorKind::Timeout,
                format!(
                    "cannot connect to etcd at {endpoints}: no connection within {:?}",
                    config.connect_timeout
                ),
            )
        })?
        .map_err(|e| {
            let text = format!("cannot connect to etcd at {endpoints}: {}", tls::chain(&e));
            said(kind_of(&e), text, e)
        })
}

/// The time left until `deadline` (at least a millisecond: a zero timeout would not even try).
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
}

/// An etcd backend, from which lockers are made: one client connection and one lease at a
/// time.
///
/// All lockers of one backend share its lease: if it ends, every lock they hold is lost at
/// once. Give each contender of a benchmark its own backend when they must fail
/// independently. Once the lease is over the next request grants a new one. Dropping the last
/// clone of a backend (and every guard and locker made from it) revokes the lease, which
/// deletes its keys.
#[derive(Clone)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.inner.endpoints)
            .field("root", &self.inner.config.root)
            .field("lease_ttl", &self.lease_ttl())
            .finish()
    }
}

impl EtcdBackend {
    /// Connect to `endpoints` (`http://host:port` or `host:port`, comma-separated; for
    /// `https://` see [`EtcdConfig::tls`] and [`EtcdBackend::connect_with`]) with a lease
    /// of `lease_ttl` and the other settings of [`EtcdConfig::default`]. An unreachable server
    /// fails within the connect timeout (10 s) with a [`LockError::Backend`] naming it.
    pub async fn connect(endpoints: &str, lease_ttl: Duration) -> Result<Self, LockError> {
        Self::connect_with(endpoints, EtcdConfig { lease_ttl, ..EtcdConfig::default() }).await
    }

    /// Connect to `endpoints` with `config`: authenticate as [`EtcdConfig::credentials`] (if
    /// any), check that this identity may use the lock root, grant the first lease. All of it
    /// within [`EtcdConfig::connect_timeout`], or a [`LockError::Backend`] that names the
    /// endpoints and, for a refusal, the user and what was refused (never the password).
    pub async fn connect_with(endpoints: &str, config: EtcdConfig) -> Result<Self, LockError> {
        let config = checked(config)?;
        let list: Vec<&str> =
            endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        if list.is_empty() {
            return Err(LockError::Config(format!("no etcd endpoint in {endpoints:?}")));
        }
        let endpoints: Arc<str> = list.join(",").into();
        let deadline = Instant::now() + config.connect_timeout;
        let client = connect_client(&list, &endpoints, &config).await?;
        let auth = Arc::new(Auth::new(client.clone(), &config, endpoints.clone()));
        tokio::time::timeout_at(deadline, auth.sign_in(left(deadline))).await.map_err(|_| {
            backend_err(
                BackendErrorKind::Timeout,
                format!(
                    "cannot reach etcd at {endpoints}: no answer to Authenticate within {:?}",
                    config.connect_timeout
                ),
            )
        })??;
        check_root(&auth, &config.root, left(deadline)).await?;
        let session = Session::open(&auth, &config, left(deadline)).await?;
        let slot = SessionSlot::new(session);
        Ok(EtcdBackend { inner: Arc::new(Inner { endpoints, client, auth, config, slot }) })
    }

    /// A locker for `owner` on this backend's lease.
    pub fn locker(&self, owner: &str) -> Result<EtcdLock, LockError> {
        validate_id("owner id", owner)?;
        Ok(EtcdLock { inner: self.inner.clone(), owner: owner.to_string() })
    }

    /// The TTL the server granted to the current lease.
    pub fn lease_ttl(&self) -> Duration {
        self.inner.current().ttl
    }

    /// The current lease's id.
    pub fn lease_id(&self) -> i64 {
        self.inner.current().lease
    }

    /// How many leases this backend has been granted: 1 after `connect`, one more for every
    /// lease that replaced one that was over.
    pub fn sessions_made(&self) -> u64 {
        self.inner.slot.made()
    }

    /// The endpoints, comma-separated.
    pub fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// The prefix of `lock_id`'s keys (`<root>/<lock id>/`).
    pub fn lock_prefix(&self, lock_id: &str) -> String {
        format!("{}/{lock_id}/", self.inner.config.root)
    }

    /// The client, for tests and tools that look at the keys.
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }
}

/// etcd's Mutex for one owner. See the crate docs for the protocol.
pub struct EtcdLock {
    inner: Arc<Inner>,
    owner: String,
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock")
            .field("owner", &self.owner)
            .field("endpoints", &self.inner.endpoints)
            .finish()
    }
}

/// The prefix's key with the lowest create revision.
fn first_created() -> GetOptions {
    GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1)
}

/// The prefix's key with the highest create revision below `revision`.
fn last_created_before(revision: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_max_create_revision(revision - 1)
        .with_limit(1)
}

/// Our key while we wait for the lock. Dropped without [`Pending::keep`] or
/// [`Pending::delete`] (the waiting future was cancelled), it deletes the key in the
/// background: left behind it would block the lock for as long as the lease lives.
struct Pending {
    session: Arc<Session>,
    key: String,
    armed: bool,
}

impl Pending {
    async fn delete(mut self) -> Result<(), LockError> {
        self.armed = false;
        let result = delete_key(&self.session, &self.key).await;
        if result.is_err() {
            tokio::spawn(delete_until_done(self.session.clone(), std::mem::take(&mut self.key)));
        }
        result
    }
    fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle
                    .spawn(delete_until_done(self.session.clone(), std::mem::take(&mut self.key)));
            }
        }
    }
}

/// Delete our key. Gone already is success.
async fn delete_key(session: &Session, key: &str) -> Result<(), LockError> {
    let delete = || {
        let (mut kv, key) = (session.client.kv_client(), key.to_string());
        async move { kv.delete(key, None).await }
    };
    session.call(Rpc::DeleteRange, key, delete).await.map(|_| ())
}

/// [`delete_key`] until it succeeds or the lease is over (which deletes the key for us): a key
/// whose delete failed in an outage would otherwise block the lock for as long as the lease
/// lives, and a lease that survives the outage lives on.
async fn delete_until_done(session: Arc<Session>, key: String) {
    while session.over().is_none() && delete_key(&session, &key).await.is_err() {
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// What step 1 found.
struct Enqueued {
    pending: Pending,
    /// Our key's create revision: our place, and the fencing token.
    revision: i64,
    /// Whether our key is the first of the prefix.
    first: bool,
    /// When the answer came: our place in line was fixed by then.
    queued_at: Instant,
}

/// How a wait for the predecessor's deletion ended.
enum Waited {
    /// No key was created before ours is left: the lock is ours if our key still exists.
    NoneBefore,
    /// The lease ended (our key with it).
    LeaseOver(String),
    /// The deadline passed.
    TimedOut,
}

impl EtcdLock {
    fn prefix(&self, lock_id: &str) -> String {
        format!("{}/{lock_id}/", self.inner.config.root)
    }

    /// Step 1: our key, created in one transaction that also reads the prefix's first key.
    async fn enqueue(&self, session: &Arc<Session>, prefix: &str) -> Result<Enqueued, LockError> {
        let key = session.new_key(prefix);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.as_str(),
                    self.owner.as_str(),
                    Some(PutOptions::new().with_lease(session.lease)),
                ),
                TxnOp::get(prefix, Some(first_created())),
            ])
            .or_else([TxnOp::get(key.as_str(), None), TxnOp::get(prefix, Some(first_created()))]);
        let create = || {
            let (mut kv, txn) = (session.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        };
        let answer = match session.call(Rpc::Txn, &key, create).await {
            Ok(answer) => answer,
            Err(e) => {
                // The transaction may have been applied without our hearing of it: its key is
                // ours alone, so delete it now and again once a late request must have landed.
                tokio::spawn(sweep_lost_create(session.clone(), key));
                return Err(e);
            }
        };
        let queued_at = Instant::now();
        let pending = Pending { session: session.clone(), key, armed: true };
        let responses = answer.op_responses();
        let kvs = |i: usize| match responses.get(i) {
            Some(TxnOpResponse::Get(get)) => get.kvs().to_vec(),
            _ => Vec::new(),
        };
        let revision = if answer.succeeded() {
            answer.header().map_or(0, |h| h.revision())
        } else {
            kvs(0).first().map_or(0, |kv| kv.create_revision())
        };
        if revision <= 0 {
            let no_revision = "the transaction's answer has no revision";
            let e = session.err(BackendErrorKind::Protocol, "create", &pending.key, no_revision);
            drop(pending);
            return Err(e);
        }
        let first = kvs(1).first().is_none_or(|kv| kv.create_revision() == revision);
        Ok(Enqueued { pending, revision, first, queued_at })
    }

    /// Step 3: wait until no key of the prefix was created before `revision`, the lease ends,
    /// or `deadline` passes. Failed reads and watches are tried again after a pause.
    async fn wait_turn(
        &self,
        session: &Session,
        prefix: &str,
        revision: i64,
        deadline: Option<Instant>,
    ) -> Waited {
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Waited::TimedOut;
            }
            let step = async {
                let read = || {
                    let (mut kv, prefix) = (session.client.kv_client(), prefix.to_string());
                    async move { kv.get(prefix, Some(last_created_before(revision))).await }
                };
                let before = session.call(Rpc::Range, prefix, read).await?;
                let Some(predecessor) = before.kvs().first() else {
                    return Ok(true);
                };
                let read_at = before.header().map_or(0, |h| h.revision());
                watch_deletion(session, predecessor.key(), read_at + 1).await?;
                Ok::<bool, LockError>(false)
            };
            let sleep_until = |d: Option<Instant>| async move {
                match d {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                done = step => match done {
                    Ok(true) => return Waited::NoneBefore,
                    Ok(false) => {}
                    // An outage: keep our place and try again while the lease stands.
                    Err(_) => tokio::time::sleep(RETRY_PAUSE).await,
                },
                why = session.ended() => return Waited::LeaseOver(why),
                _ = sleep_until(deadline) => return Waited::TimedOut,
            }
        }
    }

    /// The guard for our key, and its task, which tells it when the lease ends or another
    /// client deletes or overwrites the key ([`Holder`]): started, not awaited.
    fn grant(&self, lock_id: &str, pending: Pending, revision: i64) -> LockGuard {
        let session = pending.session.clone();
        let key = pending.key.clone();
        pending.keep();
        let (tx, rx) = watch::channel(LeaseState::Held);
        let state = Arc::new(tx);
        let (stop, stopped) = watch::channel(false);
        let holder = Holder {
            session: session.clone(),
            key: key.clone(),
            revision,
            state: state.clone(),
            stop: stopped,
        };
        tokio::spawn(holder.run());
        let release = EtcdRelease { session, key, stop, state };
        LockGuard::new(lock_id, &self.owner, revision as u64, rx, Box::new(release))
    }
}

/// Wait until `key` is deleted, watching from `from_revision`. `Ok` also when the watch ends
/// without a deletion (cancelled by the server, or compacted): the caller reads again.
async fn watch_deletion(
    session: &Session,
    key: &[u8],
    from_revision: i64,
) -> Result<(), LockError> {
    let name = String::from_utf8_lossy(key).into_owned();
    let options = WatchOptions::new().with_start_revision(from_revision);
    let open = || {
        let (mut watches, key, options) =
            (session.client.watch_client(), key.to_vec(), options.clone());
        async move { watches.watch(key, Some(options)).await }
    };
    let mut stream = session.call(Rpc::Watch, &name, open).await?;
    loop {
        let answer = stream.message().await.map_err(|e| session.driver_err("watch", &name, e))?;
        let Some(answer) = answer else {
            let ended = "the watch stream ended";
            return Err(session.err(BackendErrorKind::Unavailable, "watch", &name, ended));
        };
        if answer.canceled() || answer.compact_revision() > 0 {
            return Ok(());
        }
        if answer.events().iter().any(|e| e.event_type() == EventType::Delete) {
            return Ok(());
        }
    }
}

/// After a create whose answer was lost: delete its key at once, and again once a request
/// still on its way must have landed (one request timeout later).
async fn sweep_lost_create(session: Arc<Session>, key: String) {
    delete_until_done(session.clone(), key.clone()).await;
    tokio::time::sleep(session.request_timeout).await;
    delete_until_done(session, key).await;
}

struct EtcdRelease {
    session: Arc<Session>,
    key: String,
    /// Set before the release deletes the key, and dropped with the guard: the holder's task
    /// stops, and never reports our own delete.
    stop: watch::Sender<bool>,
    state: Arc<watch::Sender<LeaseState>>,
}

#[async_trait]
impl Release for EtcdRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        self.stop.send_replace(true);
        let result = delete_key(&self.session, &self.key).await;
        if result.is_err() {
            // The lease may outlive the outage that failed the delete, and with it the key that
            // holds the lock: keep deleting in the background until one of them is gone.
            tokio::spawn(delete_until_done(self.session.clone(), self.key.clone()));
        }
        self.state.send_replace(LeaseState::Released);
        result
    }
}

#[async_trait]
impl Locker for EtcdLock {
    fn algorithm(&self) -> &str {
        "etcd"
    }
    fn owner(&self) -> &str {
        &self.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        // The whole wait runs on one lease: our place in the queue is a key of it.
        let session = self.inner.session().await?;
        let prefix = self.prefix(lock_id);
        // A transient failure while the lease stands is one more failed step, retried within
        // the deadline: a create whose answer was lost is swept by its own sweep, and the
        // retry makes a new key (each create names one of its own).
        let mut retries = Retries::new(Backoff::default(), deadline);
        let Enqueued { pending, revision, first, queued_at } = loop {
            match self.enqueue(&session, &prefix).await {
                Ok(enqueued) => break enqueued,
                Err(e) if session.over().is_some() => return Err(e),
                Err(e) => tokio::time::sleep(retries.failed(e, Instant::now())?).await,
            }
        };
        retries.answered();
        if first {
            return Ok(self.grant(lock_id, pending, revision).with_queued_at(queued_at));
        }
        let our_key = pending.key.clone();
        let place_lost = |why: String| LockError::LeaseLost {
            lock_id: lock_id.to_string(),
            reason: format!(
                "{why}; our key {our_key} (our place in the queue) went with the lease"
            ),
        };
        match self.wait_turn(&session, &prefix, revision, deadline).await {
            Waited::NoneBefore => {}
            Waited::LeaseOver(why) => return Err(place_lost(why)),
            Waited::TimedOut => {
                // Our key goes before we report: a waiter behind us must not wait on it.
                pending.delete().await?;
                return Err(LockError::Timeout {
                    lock_id: lock_id.to_string(),
                    waited: start.elapsed(),
                });
            }
        }
        // Step 4: the lease may have ended, taking our key, just as the last predecessor went.
        let read = || {
            let (mut kv, key) = (session.client.kv_client(), pending.key.clone());
            async move { kv.get(key, None).await }
        };
        let ours = loop {
            match session.call(Rpc::Range, &pending.key, read).await {
                Ok(answer) => break answer,
                Err(e) if session.over().is_some() => return Err(e),
                Err(e) => tokio::time::sleep(retries.failed(e, Instant::now())?).await,
            }
        };
        if ours.kvs().is_empty() {
            let why =
                session.over().unwrap_or_else(|| "our key was deleted while we waited".into());
            return Err(place_lost(why));
        }
        Ok(self.grant(lock_id, pending, revision).with_queued_at(queued_at))
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        let session = self.inner.session().await?;
        let prefix = self.prefix(lock_id);
        let Enqueued { pending, revision, first, queued_at } =
            self.enqueue(&session, &prefix).await?;
        if first {
            return Ok(Some(self.grant(lock_id, pending, revision).with_queued_at(queued_at)));
        }
        pending.delete().await?;
        Ok(None)
    }
}
