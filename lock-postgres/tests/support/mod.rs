//! Test support: the test binary's PostgreSQL (from `test-servers`) and the conformance
//! [`Fixture`] on it, a proxy per contender that can go silent.
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::Locker;
use lock_postgres::{PgBackend, PgConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_servers::{shared_postgres, PostgresServer, Proxy};

/// The test binary's PostgreSQL.
pub fn shared() -> &'static PostgresServer {
    shared_postgres()
}

/// The URL of `server`'s default user, reached at `addr` (a proxy's) instead of its own port.
pub fn url_at(server: &PostgresServer, addr: SocketAddr) -> String {
    let own = format!("127.0.0.1:{}", server.addr().port());
    let url = server.url();
    assert!(url.contains(&own), "{url} does not name {own}");
    url.replace(&own, &addr.to_string())
}

/// A sequence name no other test of this binary uses.
pub fn unique_sequence(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t{}_{}_{tag}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Settings for tests: lease `ttl`, 3 s requests, a fencing sequence of the test's own.
pub fn config(ttl: Duration, sequence: &str) -> PgConfig {
    PgConfig {
        lease_ttl: ttl,
        request_timeout: Duration::from_secs(3),
        connect_timeout: Duration::from_secs(5),
        fencing_sequence: sequence.to_string(),
        ..PgConfig::default()
    }
}

/// The conformance fixture: each contender has its own backend through its own proxy, which
/// [`Fixture::cut_off`] pauses (the holder's host goes silent: no reset reaches the server,
/// which ends the session when its idle timer runs out).
pub struct PgFixture {
    ttl: Duration,
    sequence: String,
    proxies: Mutex<HashMap<String, Proxy>>,
}

impl PgFixture {
    pub fn new(ttl: Duration) -> PgFixture {
        PgFixture { ttl, sequence: unique_sequence("conf"), proxies: Mutex::default() }
    }

    /// A backend for contender `name`, through its own proxy.
    pub async fn backend(&self, name: &str) -> PgBackend {
        let server = shared();
        let proxy = Proxy::start(server.addr()).await;
        let url = url_at(server, proxy.addr());
        let backend = PgBackend::connect(&url, config(self.ttl, &self.sequence))
            .await
            .expect("connect through the proxy");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxy) {
            old.cut();
        }
        backend
    }
}

#[async_trait]
impl Fixture for PgFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        Arc::new(self.backend(name).await.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        if let Some(p) = self.proxies.lock().unwrap().get(name) {
            p.pause();
        }
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // The server's idle timer fires on time; a waiter's grant is pushed by the server at
        // once; the rest is margin for a loaded 2-core machine.
        Duration::from_millis(1200)
    }
}

/// [`PgFixture`] with the transaction-level lock ([`lock_postgres::PgXactLocker`]): the same
/// backends and proxies, each grant an open transaction.
pub struct PgXactFixture(pub PgFixture);

#[async_trait]
impl Fixture for PgXactFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let locker = self.0.backend(name).await.locker(name).expect("locker");
        Arc::new(lock_postgres::PgXactLocker::new(locker))
    }
    async fn cut_off(&self, name: &str) {
        self.0.cut_off(name).await
    }
    fn ttl(&self) -> Duration {
        self.0.ttl()
    }
    fn mode(&self) -> Mode {
        self.0.mode()
    }
    fn notice_slack(&self) -> Duration {
        self.0.notice_slack()
    }
}
