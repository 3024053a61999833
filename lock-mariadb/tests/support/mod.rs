//! Test support: the test binary's MariaDB (from `test-servers`) and the conformance
//! [`Fixture`] on it, a proxy per contender that can go silent.
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::Locker;
use lock_mariadb::{MariaBackend, MariaConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_servers::{shared_mariadb, MariadbServer, Proxy};

/// The test binary's MariaDB.
pub fn shared() -> &'static MariadbServer {
    shared_mariadb()
}

/// The URL of `server`'s default user, reached at `addr` (a proxy's) instead of its own port.
pub fn url_at(server: &MariadbServer, addr: SocketAddr) -> String {
    let own = format!("127.0.0.1:{}", server.addr().port());
    let url = server.url();
    assert!(url.contains(&own), "{url} does not name {own}");
    url.replace(&own, &addr.to_string())
}

/// A fencing table name no other test of this binary uses.
pub fn unique_table(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t{}_{}_{tag}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Settings for tests: lease `ttl`, 3 s requests, a fencing table of the test's own.
pub fn config(ttl: Duration, table: &str) -> MariaConfig {
    MariaConfig {
        lease_ttl: ttl,
        request_timeout: Duration::from_secs(3),
        connect_timeout: Duration::from_secs(5),
        fencing_table: table.to_string(),
        ..MariaConfig::default()
    }
}

/// The conformance fixture: each contender has its own backend through its own proxy, which
/// [`Fixture::cut_off`] pauses (the holder's host goes silent: no reset reaches the server,
/// which ends the session when its `wait_timeout` runs out).
pub struct MariaFixture {
    ttl: Duration,
    table: String,
    proxies: Mutex<HashMap<String, Proxy>>,
}

impl MariaFixture {
    pub fn new(ttl: Duration) -> MariaFixture {
        MariaFixture { ttl, table: unique_table("conf"), proxies: Mutex::default() }
    }

    /// A backend for contender `name`, through its own proxy.
    pub async fn backend(&self, name: &str) -> MariaBackend {
        let server = shared();
        let proxy = Proxy::start(server.addr()).await;
        let url = url_at(server, proxy.addr());
        let backend = MariaBackend::connect(&url, config(self.ttl, &self.table))
            .await
            .expect("connect through the proxy");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxy) {
            old.cut();
        }
        backend
    }
}

#[async_trait]
impl Fixture for MariaFixture {
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
        // The server's wait_timeout fires within a few hundred milliseconds of its second; a
        // waiter's grant comes from the server at once; the rest is margin for a loaded
        // 2-core machine.
        Duration::from_millis(1500)
    }
}
