//! # lock-mariadb
//!
//! MariaDB's named user locks (`GET_LOCK`) as a [`Locker`](lock_core::Locker): the lock that
//! teams which already run MariaDB (or MySQL) take instead of adding Redis, ZooKeeper or
//! etcd, on a real server through the `mysql_async` driver.
//!
//! ## The driver
//! `mysql_async` is the maintained asynchronous MySQL/MariaDB driver for tokio: the protocol
//! in pure Rust, prepared statements with a per-connection cache, `COM_PING`, the `OK`
//! packet's affected rows and last insert id, and TLS through
//! rustls. It is used without its default features (which compile zlib from C): its pure-Rust
//! deflate backend, and rustls with ring as its crypto, as every other client here, so no
//! OpenSSL is linked. Its own connection pool is not used: a connection holding a lock must
//! never go back to a pool that could hand it to another caller.
//!
//! ## The protocol
//! - **The name.** Lock id `name` is the `GET_LOCK` name `name` itself, so a `mariadb` client
//!   session or another program takes the same lock with `SELECT GET_LOCK('invoice-42', 10)`.
//!   The server compares names **byte for byte**: on MariaDB 10.11, `Invoice` and `invoice`
//!   are two different locks (MySQL 5.7 and later compare them case-insensitively; a program
//!   that must behave alike on both keeps its ids in one case). An id is at most 64 characters
//!   (MySQL's limit) and 192 bytes (MariaDB's): a longer one is refused with
//!   [`LockError::InvalidId`] before anything is sent
//!   ([`validate_name`]).
//! - **Acquire** on a connection of its own: `SELECT GET_LOCK(name, T)`. The wait is the
//!   server's own (a waiter is woken when the holder releases; nobody polls), and the call's
//!   timeout is the server's: `T` is the time left, in seconds with a fraction (MariaDB waits
//!   to the microsecond). `GET_LOCK` answers 1 (granted), 0 (timed out: the session holds
//!   nothing, the connection is reused) or `NULL` (an error). MariaDB takes no "wait for
//!   ever" (a negative timeout answers `NULL` at once), so a call without a timeout waits a
//!   year at a time.
//! - **The soft lock** is the same statement with `T = 0`.
//! - **The fencing token** is drawn by the holder right after its grant, on the same
//!   connection (a second round trip): `UPDATE lock_fencing_token SET v = LAST_INSERT_ID(v + 1)
//!   WHERE id = 1`, one autocommitted InnoDB row ([`MariaConfig::fencing_table`], created on
//!   first connect when the user may), whose new value comes back in the statement's answer.
//!   Every later holder of any lock draws a larger one. It is strictly increasing on one
//!   server, across its restarts and crashes, as long as InnoDB flushes its log at each commit
//!   (`innodb_flush_log_at_trx_commit = 1`, the default): the value is durable before it is
//!   answered. It is **not** across a promotion of an asynchronous replica: values drawn on
//!   the old primary that had not reached the replica are drawn again.
//!
//!   Not a `SEQUENCE`: on MariaDB 10.11, after a server was killed (`SIGKILL`, a crash) and
//!   restarted, its sequences handed out their values again from 1 (cached, the default, and
//!   `NOCACHE` alike), and one `NOCACHE` sequence failed with "Can't find record" (error
//!   1032): a sequence's updates are not made durable when its values are answered.
//! - **Release**: `SELECT RELEASE_LOCK(name)` (1: released); the connection goes back to the
//!   locker's small pool of idle connections.
//!
//! ## A connection per held lock
//! A `GET_LOCK` lock belongs to the server session (the connection) that took it, and a
//! session waiting in `GET_LOCK` can do nothing else. One connection per locker would make a
//! locker waiting for one lock unable to release another it holds. So each acquisition runs on
//! a connection of its own, taken from the locker's idle connections or opened, and the
//! connection stays with the guard until release. The cost is a server thread and connection
//! per held or awaited lock: `max_connections` bounds how many locks all clients together can
//! hold or wait for. A session holds at most one lock here, so the server's deadlock detection
//! among user locks never fires.
//!
//! ## The lease, and what a holder is told
//! A `GET_LOCK` lock is held until its session ends, and the server ends a session only when
//! it notices: a holder whose host is gone keeps its lock until then. So every connection
//! makes the server enforce a lease:
//! - it sets `SET SESSION wait_timeout = TTL` ([`MariaConfig::lease_ttl`], whole seconds: the
//!   variable is an integer). The server closes a session that sends nothing for that long
//!   after its last statement's answer, and frees the session's locks at once (checked on
//!   MariaDB 10.11: a session with `wait_timeout = 2` that took a lock and went silent had
//!   lost it 2.0 s after its statement, within the 0.1 s its watcher polled at; the server
//!   does not wait for a TCP keep-alive or a reset);
//! - the holder's keeper sends `COM_PING` every TTL/3, which resets that timer.
//!
//! The timer does not run while a statement runs: a session waiting in `GET_LOCK` whose client
//! vanished is noticed only when the wait ends (its timeout, or a grant), and a grant then
//! lasts one TTL at most. The server counts the TTL from when it answered the last statement,
//! after the client sent it: so the lease stands at least until the *send* time of the last
//! answered ping plus the TTL. A grant's lease starts at the sending of its token's draw,
//! the statement after the grant's answer arrived, however long the wait in `GET_LOCK` was.
//! When that moment passes without a fresh answer, or the connection breaks, the guard is
//! told [`LeaseState::Lost`](lock_core::LeaseState::Lost) (before the server can end the
//! session, as long as the two clocks run at the same rate) and the connection is closed, so
//! that a server that can still hear it frees the lock at once. A connection that closes
//! (cut, or closed by the server) is noticed only at the next ping, as the driver reads only
//! when it sends: the server frees the lock as soon as it sees the close, so for up to a third
//! of a lease the holder is not yet told and another may hold the lock. Fencing tokens cover
//! that window. The client's TCP keep-alive ([`MariaConfig::keepalive`]) finds a server that is gone.
//!
//! ## Requests per grant
//! A backend reports every request it sends to [`MariaConfig::requests`] (target `mariadb`),
//! named by what it runs: `connect`, `SET` (the session's lease), `prepare` (the fencing
//! table's check, on the first connect), `GET_LOCK`, `UPDATE` (the token's draw),
//! `COM_PING` (the lease's renewal) and `RELEASE_LOCK`. A grant on an idle connection costs
//! three (`GET_LOCK`, `UPDATE`, `RELEASE_LOCK`), however long it waited, plus a ping per third
//! of a lease it is held.
//!
//! ## Security
//! Passwords go as the server's account asks (`mysql_native_password`, MariaDB's default for
//! `IDENTIFIED BY`, or `caching_sha2_password` on MySQL; MariaDB's `ed25519` plugin is not
//! compiled in). With [`MariaConfig::tls`], every connection is TLS: the server's certificate
//! must chain to the named CA (the driver's built-in public roots are turned off) and name the
//! host connected to, so a server without TLS, or with another CA's certificate, is refused
//! at connect.
//!
//! ## Failures
//! Every statement is bounded by [`MariaConfig::request_timeout`] beyond the lock's own wait,
//! and connecting by [`MariaConfig::connect_timeout`]. A transient failure (a refused or
//! broken connection, a restarting server, too many connections) is retried within the call's
//! deadline ([`lock_core::retry`]) on a new connection; the connection of a failed attempt is
//! closed, never reused, so a grant nobody saw is freed with it. A release whose connection
//! broke is complete: the lock ends with the session. Wrong passwords, missing privileges and
//! refused TLS handshakes are [`BackendErrorKind::Refused`](lock_core::BackendErrorKind::Refused)
//! ([`kind_of_code`] is the table).
//!
//! ## Example
//! ```no_run
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! use lock_core::Locker;
//! use lock_mariadb::{MariaBackend, MariaConfig};
//! let backend =
//!     MariaBackend::connect("mysql://app:secret@127.0.0.1:3306/app", MariaConfig::default())
//!         .await?;
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
mod locker;
mod name;
mod tls;

pub use errors::{backend_error, kind_of, kind_of_code, BACKEND};
pub use locker::{MariaBackend, MariaLocker};
pub use name::{validate_name, MAX_NAME_BYTES, MAX_NAME_CHARS};

use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use lock_core::tls::TlsFiles;
use lock_core::LockError;
use std::time::Duration;

/// How the lockers connect and keep their locks.
#[derive(Debug, Clone)]
pub struct MariaConfig {
    /// The lease: the server ends a session silent for this long, and its locks with it
    /// (`wait_timeout`); the holder pings every third of it. Whole seconds, at least 1.
    pub lease_ttl: Duration,
    /// Longest wait for any statement's answer beyond the lock's own wait.
    pub request_timeout: Duration,
    /// Longest wait to connect, authenticate and set a session up.
    pub connect_timeout: Duration,
    /// The table fencing tokens are drawn from (`name` or `database.name`, lower-case letters,
    /// digits and `_`): one InnoDB row, created on first connect if missing and the user may.
    pub fencing_table: String,
    /// TCP keep-alive on the client's side: idle time before the first probe. `None` leaves
    /// the system's.
    pub keepalive: Option<Duration>,
    /// Idle connections a locker keeps for its next acquisitions.
    pub max_idle: usize,
    /// TLS: the CA the server's certificate must chain to (its name must match the host
    /// connected to), and a client certificate if the server asks for one. `None`: plain TCP.
    pub tls: Option<TlsFiles>,
    /// Whom to log in as, instead of the URL's user and password: a password kept out of
    /// strings that get printed.
    pub credentials: Option<Credentials>,
    /// Called for every request sent ([`lock_core::requests`]): one per statement or
    /// `COM_PING` (see "Requests per grant").
    pub requests: RequestHook,
}

impl Default for MariaConfig {
    /// A 10 s lease, 5 s requests, 10 s to connect, table `lock_fencing_token`, keep-alive
    /// probes after 5 s, 4 idle connections per locker, no TLS.
    fn default() -> Self {
        MariaConfig {
            lease_ttl: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            fencing_table: "lock_fencing_token".to_string(),
            keepalive: Some(Duration::from_secs(5)),
            max_idle: 4,
            tls: None,
            credentials: None,
            requests: RequestHook::none(),
        }
    }
}

impl MariaConfig {
    /// Refuse settings that cannot work, with what is wrong.
    pub fn validate(&self) -> Result<(), LockError> {
        let bad = |why: String| Err(LockError::Config(why));
        if self.lease_ttl < Duration::from_secs(1) || self.lease_ttl.subsec_nanos() != 0 {
            return bad(format!(
                "lease_ttl {:?} must be whole seconds, at least 1 (MariaDB's wait_timeout is an \
                 integer number of seconds)",
                self.lease_ttl
            ));
        }
        if self.lease_ttl > Duration::from_secs(31_536_000) {
            return bad(format!(
                "lease_ttl {:?} is over wait_timeout's maximum (a year)",
                self.lease_ttl
            ));
        }
        if self.request_timeout.is_zero() || self.connect_timeout.is_zero() {
            return bad("request_timeout and connect_timeout must be above zero".into());
        }
        let ident = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        let parts: Vec<&str> = self.fencing_table.split('.').collect();
        if parts.len() > 2 || !parts.iter().all(|p| ident(p)) {
            return bad(format!(
                "fencing_table {:?} is not a plain (database.)name of lower-case letters, digits and _",
                self.fencing_table
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_settings_are_refused() {
        assert!(MariaConfig::default().validate().is_ok());
        for ttl in [Duration::from_millis(500), Duration::from_millis(2500), Duration::ZERO] {
            let config = MariaConfig { lease_ttl: ttl, ..MariaConfig::default() };
            assert!(matches!(config.validate(), Err(LockError::Config(_))), "{ttl:?}");
        }
        for seq in ["", "Bad", "a;drop", "a.b.c", "x-y"] {
            let config = MariaConfig { fencing_table: seq.into(), ..MariaConfig::default() };
            assert!(matches!(config.validate(), Err(LockError::Config(_))), "{seq:?}");
        }
        let config = MariaConfig { request_timeout: Duration::ZERO, ..MariaConfig::default() };
        assert!(config.validate().is_err());
    }
}
