//! # lock-postgres
//!
//! PostgreSQL's session-level advisory locks as a [`Locker`](lock_core::Locker): the lock
//! that teams which already run PostgreSQL take instead of adding Redis, ZooKeeper or etcd
//! (migration tools, job queues, madelson/DistributedLock's Postgres back end), on a real
//! server through the `tokio-postgres` driver.
//!
//! ## The protocol
//! - **The key.** Lock id `name` is the advisory key [`advisory_key`]`(name)`, the first 8
//!   bytes of its MD5 as a `bigint`; [`KEY_SQL`] computes the same on the server, so that a
//!   `psql` session or another program takes the same lock:
//!   `SELECT pg_advisory_lock(('x' || substr(md5('invoice-42'), 1, 16))::bit(64)::bigint);`.
//! - **Acquire**, in one round trip on a connection of its own (one simple-query batch):
//!   `SET lock_timeout = T; SELECT pg_advisory_lock(key); SELECT nextval(sequence)`. The wait
//!   is the server's own queue: nobody polls, and a release wakes the next waiter at once. A
//!   timeout is the server's `lock_timeout` (SQLSTATE `55P03`), so the server decides
//!   atomically whether the lock was granted or the wait given up: a timed-out call leaves
//!   nothing behind. Without a timeout, `lock_timeout` is 0 (wait for ever).
//! - **The soft lock** is one statement:
//!   `SELECT CASE WHEN pg_try_advisory_lock(key) THEN nextval(sequence) END`.
//! - **The fencing token** is the next value of a sequence in the same database
//!   ([`PgConfig::fencing_sequence`], created on first connect when the user may), drawn by
//!   the holder after its grant: every later holder of any lock draws a larger one. It is
//!   strictly increasing on one server, across its restarts and crashes (sequences are
//!   WAL-logged, and the transaction that draws a value flushes its record before answering).
//!   It is **not** across a promotion of an asynchronous replica: values drawn on the old
//!   primary whose WAL had not reached the replica are drawn again. Only with synchronous
//!   replication (`synchronous_commit = on` or `remote_apply` and a synchronous standby) does
//!   a promoted replica continue above every token handed out.
//! - **Release**: `SELECT pg_advisory_unlock(key)`; the connection goes back to the locker's
//!   pool of idle connections.
//! - **The transaction-level lock** ([`PgLocker::transaction`], [`XactGuard`]):
//!   `BEGIN; SET LOCAL lock_timeout = T; SELECT pg_advisory_xact_lock(key); SELECT
//!   nextval(sequence)`, then the caller's writes in that transaction; `COMMIT` keeps them
//!   and frees the lock at once. A holder that stalls past its lease loses the transaction
//!   (`idle_in_transaction_session_timeout`) and its writes with it: fenced by construction,
//!   for writes to the same database. [`PgXactLocker`] is the same lock as a plain
//!   [`lock_core::Locker`] (release commits an empty transaction): the conformance suite and
//!   the harness run it as `postgres-xact`.
//!
//! ## A connection per held lock
//! An advisory lock belongs to the server session (the connection) that took it, and a
//! session waiting in `pg_advisory_lock` can do nothing else. One connection per locker would
//! make a locker waiting for one lock unable to release another it holds (and two such lockers
//! deadlock). So each acquisition runs on a connection of its own, taken from the locker's
//! pool of idle connections or opened, and the connection stays with the guard until release.
//! The cost is a server backend (a process) per held or awaited lock: `max_connections` bounds
//! how many locks all clients together can hold or wait for.
//!
//! ## The lease, and what a holder is told
//! A session-level lock is held until the session ends: a holder that crashes frees it when
//! the server notices, and with PostgreSQL's defaults the server may not notice for hours
//! (TCP keep-alive after 2 h idle, then 9 probes 75 s apart, on Linux). So every connection
//! here makes the server enforce a lease:
//! - it sets `idle_session_timeout` to the lease TTL ([`PgConfig::lease_ttl`]): the server
//!   ends a session that sends nothing for a TTL, and with it the session's locks;
//! - the holder's keeper sends `SELECT 1` every TTL/3, which resets that timer;
//! - the server's TCP keep-alive (`tcp_keepalives_idle`, `_interval`, `_count` and
//!   `tcp_user_timeout`, set per session) ends a session whose client's host is gone even
//!   while it waits in the queue (where the idle timer does not run), within about a TTL; the
//!   client's own keep-alives ([`PgConfig::keepalive`]) find a server that is gone.
//!
//! The server counts the TTL from when it finished the last statement, which is after the
//! client sent it: so the lease stands at least until the *send* time of the last answered
//! `SELECT 1` plus the TTL. A grant's lease starts at the sending of the request that asked
//! for it when the answer came within a third of a TTL; after a longer wait in the server's
//! queue that bound would make the lease seem spent at once, so a `SELECT 1` goes right after
//! the grant (one more request) and the lease starts at its sending. When that moment passes
//! without a fresh answer, the guard is told [`LeaseState::Lost`](lock_core::LeaseState::Lost)
//! (before the server can end the session, as long as the two clocks run at the same rate)
//! and the connection is closed, so that a server that can still hear it frees the lock at
//! once. A connection that ends (cut, or closed by the server) tells the guard at once: the
//! driver's task reads it all the time, and a server that saw the close has already freed the
//! lock.
//! `idle_session_timeout` needs PostgreSQL 14 or later; an older server is refused at connect
//! with an error saying so.
//!
//! ## Failover, administrators and poolers
//! What the tests beside this crate show on real servers (`tests/promotion.rs`,
//! `tests/terminated.rs`, `tests/pooler.rs`):
//! - **A promoted replica has no advisory locks**: they are not WAL-logged, so the moment a
//!   replica is promoted every lock is free on it, while the old primary's holders still
//!   believe they hold theirs until their next ping fails (up to a third of the lease). Two
//!   holders at once: only fencing makes that safe.
//! - **Tokens across a promotion**: `nextval` logs its value and the next 32 before it
//!   answers and serves those without writing again, so a replica that replayed that record
//!   continues above every value the old primary served. A value is drawn twice only when
//!   the draw whose record was lost was one that wrote (the first after the sequence was
//!   made, every 33rd, the first after a checkpoint) and the replica had not received it:
//!   with asynchronous replication that can happen, with synchronous replication it cannot
//!   (the commit of a draw that writes waits for the standby).
//! - **An administrator's `pg_terminate_backend`** ends the holder's session: the lock is
//!   free at once, and the holder learns it at its next ping.
//! - **Behind PgBouncer in session pooling** a client keeps one server session, and the lock
//!   works as on the server. **In transaction pooling** it does not: each statement may run on
//!   another server session, so the unlock may miss the session that holds the lock, the
//!   lease's settings land on whichever session ran them, and since advisory locks are
//!   re-entrant within a session, two clients whose statements share one server session are
//!   both granted the lock. Behind transaction pooling use the transaction-level lock
//!   ([`PgLocker::transaction`]): a transaction keeps its server session to its end.
//!
//! ## Requests per grant
//! A backend reports every query message it sends to [`PgConfig::requests`] (target
//! `postgres`): `lock` (the acquire batch), `try_lock`, `transaction`, `unlock`, `COMMIT` or
//! `ROLLBACK`, `ping` (every TTL/3 while held, and once right after a grant that waited more
//! than a third of a TTL), and for each new connection `connect` (the startup and
//! authentication) and `SET` (the lease's settings), and `prepare` (the fencing sequence's
//! check on connect). A grant on a pooled connection costs two, `lock` and `unlock`, however
//! long it waited, since the wait is the server's; three when the wait was that long.
//!
//! ## Security
//! Passwords go as the server asks (SCRAM-SHA-256 by default since PostgreSQL 14; the
//! driver never sends a password in clear text unless the server asks for it). With
//! [`PgConfig::tls`], every connection is TLS (the driver's `sslmode` is set to `require`
//! and the certificate check is rustls's: chain to the named CA, name of the host connected
//! to), so a server without TLS, or with another CA's certificate, is refused at connect.
//!
//! ## Failures
//! Every statement is bounded by [`PgConfig::request_timeout`] beyond the lock's own wait, and
//! connecting (authenticating, preparing the sequence) by [`PgConfig::connect_timeout`]. A
//! transient failure (a refused or broken connection, a restarting server, too many
//! connections) is retried within the call's deadline ([`lock_core::retry`]) on a new
//! connection; the connection of a failed attempt is closed, never reused, so a grant nobody
//! saw is freed with it. A release whose connection broke is complete: the lock ends with the
//! session, when the server sees the connection close or, if it cannot, one TTL later.
//! Wrong passwords, missing privileges and refused TLS handshakes are
//! [`BackendErrorKind::Refused`](lock_core::BackendErrorKind::Refused); a full lock table
//! (`out of shared memory`, sized by `max_locks_per_transaction × max_connections`) is a
//! final protocol error.
//!
//! ## Example
//! ```no_run
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! use lock_core::Locker;
//! use lock_postgres::{PgBackend, PgConfig};
//! let backend =
//!     PgBackend::connect("postgres://app:secret@127.0.0.1:5432/app", PgConfig::default()).await?;
//! let locker = backend.locker("worker-1")?;
//! let guard = locker.lock("invoice-42", Some(std::time::Duration::from_secs(5))).await?;
//! // ... write, passing guard.token() along as the fencing token ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod conn;
mod errors;
mod holder;
mod key;
mod locker;
mod tls;
mod xact;
mod xact_locker;

pub use errors::{kind_of, kind_of_sqlstate, BACKEND};
pub use key::{advisory_key, KEY_SQL};
pub use locker::{PgBackend, PgLocker};
pub use xact::XactGuard;
pub use xact_locker::PgXactLocker;

use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use lock_core::tls::TlsFiles;
use lock_core::LockError;
use std::time::Duration;

/// How the lockers connect and keep their locks.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// The lease: the server ends a session silent for this long, and its locks with it
    /// (`idle_session_timeout`); the holder pings every third of it. At least 200 ms.
    pub lease_ttl: Duration,
    /// Longest wait for any statement's answer beyond the lock's own wait.
    pub request_timeout: Duration,
    /// Longest wait to connect, authenticate and set a session up.
    pub connect_timeout: Duration,
    /// The sequence fencing tokens are drawn from (`name` or `schema.name`, lower-case
    /// letters, digits and `_`); created on first connect if missing and the user may.
    pub fencing_sequence: String,
    /// TCP keep-alive on the client's side: idle time before the first probe (also the
    /// interval between probes, three of which may go unanswered). `None` leaves the system's.
    pub keepalive: Option<Duration>,
    /// Idle connections a locker keeps for its next acquisitions.
    pub max_idle: usize,
    /// TLS: the CA the server's certificate must chain to (its name must match the host
    /// connected to), and a client certificate if the server asks for one. `None`: plain TCP,
    /// whatever the connection string's `sslmode` says.
    pub tls: Option<TlsFiles>,
    /// Whom to log in as, instead of the connection string's user and password: a password
    /// kept out of strings that get printed.
    pub credentials: Option<Credentials>,
    /// Called for every request sent ([`lock_core::requests`]): one per query message,
    /// whatever its statements (see "Requests per grant").
    pub requests: RequestHook,
}

impl Default for PgConfig {
    /// A 10 s lease, 5 s requests, 10 s to connect, sequence `lock_fencing_token`, keep-alive
    /// probes after 5 s, 4 idle connections per locker, no TLS.
    fn default() -> Self {
        PgConfig {
            lease_ttl: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            fencing_sequence: "lock_fencing_token".to_string(),
            keepalive: Some(Duration::from_secs(5)),
            max_idle: 4,
            tls: None,
            credentials: None,
            requests: RequestHook::none(),
        }
    }
}

impl PgConfig {
    /// Refuse settings that cannot work, with what is wrong.
    pub fn validate(&self) -> Result<(), LockError> {
        let bad = |why: String| Err(LockError::Config(why));
        if self.lease_ttl < Duration::from_millis(200) {
            return bad(format!("lease_ttl {:?} is under 200ms", self.lease_ttl));
        }
        if self.request_timeout.is_zero() || self.connect_timeout.is_zero() {
            return bad("request_timeout and connect_timeout must be above zero".into());
        }
        let ident = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        let parts: Vec<&str> = self.fencing_sequence.split('.').collect();
        if parts.len() > 2 || !parts.iter().all(|p| ident(p)) {
            return bad(format!(
                "fencing_sequence {:?} is not a plain (schema.)name of lower-case letters, digits and _",
                self.fencing_sequence
            ));
        }
        Ok(())
    }
}
