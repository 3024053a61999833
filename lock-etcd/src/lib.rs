//! # lock-etcd
//!
//! etcd's own lock, `concurrency.Mutex` of the Go client (`client/v3/concurrency/mutex.go`),
//! against a real etcd server through the `etcd-client` crate: the lock that users of
//! Kubernetes-era systems already run, beside ZooKeeper's recipe (`lock-zookeeper`) and Redis's
//! (`lock-redis`). On the same leases and the same machinery: etcd's reader-writer lock recipe,
//! a counting semaphore, and etcd's leader election, each in the layout of etcd's own code so
//! that its tools take part (see "Reader-writer lock, semaphore and election" below).
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
//! guard of it is told [`LeaseState::Lost`](lock_core::lock::LeaseState::Lost) — before the server
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
//! 2. on a `PUT`: tells the guard [`LeaseState::Lost`](lock_core::lock::LeaseState::Lost), "its key … was overwritten by another
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
//! fencing tokens ([`LockGuard::token`](lock_core::LockGuard::token)) or an ACL are what prevent harm. With authentication
//! and a role per application on its own lock root, a client of another identity, or one
//! without credentials, is refused (`permission denied`, `user name is empty`) when it reads,
//! writes or deletes the keys, and when it revokes the holder's lease: etcd 3.4 checks a
//! revoke against the lease's keys. What etcd 3.4 does not check: granting leases, and keeping
//! any lease alive by its id (`LeaseKeepAlive` carries no token). A stranger that learnt a
//! lease id could keep a crashed holder's lease, and so its lock, alive; it cannot take the
//! lock. `etcd-client` sends no token with lease requests, so our own `LeaseRevoke` when a
//! backend is dropped is refused while the lease still has keys (a guard abandoned with
//! [`LockGuard::abandon`](lock_core::LockGuard::abandon)); those keys go when the lease expires, one TTL later. A backend
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
//! - A writer of a reader-writer lock holds alone; readers hold together; a reader behind a
//!   waiting writer waits for it.
//! - Never more permits of a semaphore held than its size; an ask of another size is refused
//!   with nothing written.
//! - One leader at a time, whether its candidates are ours or `etcdctl elect`'s; terms rise;
//!   each client's observer sees the other's leader and value.
//! - On a secured etcd, a client of another identity or without credentials can neither
//!   delete, overwrite nor revoke a holder's key; wrong or missing credentials and a role that
//!   does not cover the lock root are refused at connect, naming the user and never the
//!   password.
//! - Over TLS, a server certificate from another CA or for another host, the wrong protocol
//!   on either side, and a missing or untrusted client certificate are each refused at
//!   connect within seconds, saying what was refused and never showing a key.
//!
//! ## Conformance verdict
//! The reader-writer lock's, the semaphore's and the election's suites pass on one etcd
//! (`tests/primitives.rs`) and on the 3-member cluster (`tests/cluster_primitives.rs`), and
//! `tests/etcdctl_elect.rs` runs our candidates and observers against `etcdctl elect` in both
//! roles.
//!
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
//! ## Reader-writer lock, semaphore and election
//! Three more primitives on a backend's lease ([`EtcdBackend::rw_locker`],
//! [`EtcdBackend::semaphore`], [`EtcdBackend::elector`]), each a key per ask ordered by create
//! revision, sharing the mutex's machinery: the create transaction, the wait for the keys
//! ahead, the key deleted when an ask times out, is cancelled or is refused, retries across
//! outages, the holder's task that tells a guard its lease ended or its key was touched, and
//! the lease itself. Each has a parent of its own under the root, so the kinds never see each
//! other's keys; a mutex may therefore not take one of the parents' names as its lock id
//! (`rwlocks`, `semaphores`, `elections`, `candidates`: [`LockError::InvalidId`]).
//!
//! | primitive | keys | whose layout |
//! |---|---|---|
//! | reader-writer lock | `<root>/rwlocks/<id>/read/<lease hex>-<n>`, `…/write/<lease hex>-<n>` | `recipe.RWMutex` with `pfx` = `<root>/rwlocks/<id>` ([`EtcdBackend::rwlock_name`]) |
//! | semaphore | `<root>/semaphores/<id>/<lease hex>-<n>`, value `"N k owner"` | this crate's (etcd has no semaphore recipe) |
//! | election | `<root>/elections/<id>/<lease hex>`, value the leader's value; owner records `<root>/candidates/<id>/<lease hex>` | `concurrency.Election` with `pfx` = `<root>/elections/<id>` ([`EtcdBackend::election_name`]), as `etcdctl elect` uses it |
//!
//! - **Reader-writer lock** ([`EtcdRwLocker`]): a reader waits for the write keys created
//!   before its own, a writer for every key created before its own, first come first served
//!   ([`WriterPolicy::Fifo`](lock_core::WriterPolicy::Fifo)). The token is the key's create
//!   revision. A Go `recipe.RWMutex` on the same name excludes and is excluded by it.
//! - **Semaphore** ([`EtcdSemaphore`]): an acquire of k permits holds once the permits of the
//!   keys created before its own, plus k, are at most N. The create writes nothing unless every
//!   key of the semaphore records the same N (one transaction compares the values of the whole
//!   prefix), so another size is refused
//!   ([`UsageError::LimitMismatch`](lock_core::UsageError::LimitMismatch)). Its module says why
//!   never more than N are held, and how its k tokens are made.
//! - **Election** ([`EtcdElector`]): Go's keys and transactions exactly (campaign, proclaim,
//!   resign, leader, observe), so that `etcdctl elect <name> <value>`, `etcdctl elect -l
//!   <name>`, a Go program and this crate see one leader at a time and the same value. The
//!   term is the leader key's create revision. The owner id our candidates record sits outside
//!   the election's prefix, which Go reads whole; a candidate of another client is named by its
//!   lease in hex. An observer watches the prefix from the revision of its first read, and etcd
//!   delivers every event from there, so it misses no leader, even one that came and went
//!   between two of its looks; only a history the server compacted before the watch read it is
//!   lost. Go names a candidate's key after its lease alone, so the electors of one backend
//!   campaign in one election one after the other.
//!
//! What does not interoperate: a Go `concurrency.Mutex` and our election on one prefix would
//! take each other for candidates (both are "lowest create revision holds"), which is why the
//! kinds have parents of their own; the semaphore has no counterpart in etcd's tools.
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
mod election;
mod errors;
mod holder;
mod mutex;
mod observe;
mod queue;
mod rpc;
mod rwlock;
mod semaphore;
mod session;
mod tls;

use auth::{check_root, Auth};
use errors::{backend_err, kind_of, said};
use etcd_client::{Client, ConnectOptions};
use lock_core::lock::validate_id;
use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use lock_core::session::SessionSlot;
use lock_core::tls::TlsFiles;
use lock_core::{BackendErrorKind, LockError};
use session::Session;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

pub use election::EtcdElector;
pub use mutex::EtcdLock;
pub use rwlock::EtcdRwLocker;
pub use semaphore::EtcdSemaphore;

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

    /// The mutex's prefix of `lock_id`: `<root>/<lock id>/`.
    fn lock_prefix(&self, lock_id: &str) -> String {
        format!("{}/{lock_id}/", self.config.root)
    }

    /// The name (etcd's `pfx`, without the final `/`) of `id` among the primitives of `kind`:
    /// `<root>/<kind>/<id>`.
    fn kind_name(&self, kind: &str, id: &str) -> String {
        format!("{}/{kind}/{id}", self.config.root)
    }
}

/// Under the root, the parents of the reader-writer locks, the semaphores, the elections and
/// the elections' owner records. No mutex may take one of these names as its lock id: its
/// prefix would hold the keys of every primitive of that kind ([`EtcdLock`] refuses them).
pub(crate) const RWLOCKS: &str = "rwlocks";
/// See [`RWLOCKS`].
pub(crate) const SEMAPHORES: &str = "semaphores";
/// See [`RWLOCKS`].
pub(crate) const ELECTIONS: &str = "elections";
/// See [`RWLOCKS`].
pub(crate) const CANDIDATES: &str = "candidates";

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
        self.inner.lock_prefix(lock_id)
    }

    /// A reader-writer lock for `owner` on this backend's lease (etcd's `recipe.RWMutex`).
    pub fn rw_locker(&self, owner: &str) -> Result<EtcdRwLocker, LockError> {
        validate_id("owner id", owner)?;
        Ok(EtcdRwLocker::new(self.inner.clone(), owner))
    }

    /// A counting semaphore for `owner` on this backend's lease.
    pub fn semaphore(&self, owner: &str) -> Result<EtcdSemaphore, LockError> {
        validate_id("owner id", owner)?;
        Ok(EtcdSemaphore::new(self.inner.clone(), owner))
    }

    /// An elector for `owner` on this backend's lease (etcd's `concurrency.Election`).
    pub fn elector(&self, owner: &str) -> Result<EtcdElector, LockError> {
        validate_id("owner id", owner)?;
        Ok(EtcdElector::new(self.inner.clone(), owner))
    }

    /// The name of reader-writer lock `lock_id` as etcd's `recipe.NewRWMutex` takes it
    /// (`<root>/rwlocks/<lock id>`): its keys are `<name>/read/…` and `<name>/write/…`.
    pub fn rwlock_name(&self, lock_id: &str) -> String {
        self.inner.kind_name(RWLOCKS, lock_id)
    }

    /// The prefix of semaphore `semaphore_id`'s keys (`<root>/semaphores/<id>/`).
    pub fn semaphore_prefix(&self, semaphore_id: &str) -> String {
        format!("{}/", self.inner.kind_name(SEMAPHORES, semaphore_id))
    }

    /// The name of `election` as etcd's `concurrency.NewElection` and `etcdctl elect` take it
    /// (`<root>/elections/<election>`): candidates' keys are `<name>/<lease id in hex>`.
    pub fn election_name(&self, election: &str) -> String {
        self.inner.kind_name(ELECTIONS, election)
    }

    /// The client, for tests and tools that look at the keys.
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }
}
