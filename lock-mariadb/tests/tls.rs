//! Over TLS with passwords: the whole conformance suite on a server that refuses every
//! connection without TLS, and the refusals a user meets (a server of another CA, a plain
//! client, a server without TLS) as clear, final errors within seconds.
//!
//! One test CA ([`test_servers::TestPki`]) made when the binary starts; no key material is
//! committed.

use crate::support;
use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::tls::TlsFiles;
use lock_core::{BackendErrorKind, Locker};
use lock_mariadb::{MariaBackend, MariaConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use test_servers::{MariadbServer, Proxy, TestPki};

fn pki() -> &'static TestPki {
    static PKI: OnceLock<TestPki> = OnceLock::new();
    PKI.get_or_init(|| TestPki::new("lock-mariadb-tls"))
}

/// The binary's TLS-only server.
fn tls_server() -> &'static MariadbServer {
    static SERVER: OnceLock<MariadbServer> = OnceLock::new();
    SERVER.get_or_init(|| MariadbServer::start_tls(pki()))
}

fn tls_config(ttl: Duration, table: &str, ca: &std::path::Path) -> MariaConfig {
    MariaConfig { tls: Some(TlsFiles::trusting(ca)), ..support::config(ttl, table) }
}

/// Every contender on its own backend, over TLS, through its own proxy.
struct TlsFixture {
    table: String,
    proxies: Mutex<HashMap<String, Proxy>>,
}

#[async_trait]
impl Fixture for TlsFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let server = tls_server();
        let proxy = Proxy::start(server.addr()).await;
        let url = support::url_at(server, proxy.addr());
        let config = tls_config(self.ttl(), &self.table, &server.ca_file().expect("a TLS server"));
        let backend = MariaBackend::connect(&url, config).await.expect("connect over TLS");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxy) {
            old.cut();
        }
        Arc::new(backend.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        if let Some(p) = self.proxies.lock().unwrap().get(name) {
            p.pause();
        }
    }
    fn ttl(&self) -> Duration {
        Duration::from_secs(2)
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        Duration::from_millis(1500)
    }
}

mod over_tls {
    use super::*;

    async fn make_fixture(_seed: u64) -> TlsFixture {
        TlsFixture { table: support::unique_table("tls"), proxies: Mutex::default() }
    }

    lock_core::conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |seed| async move { make_fixture(seed).await },
        seeds = 2,
        contenders = 8
    );
}

/// Connect with `config` to `url` and expect a final refusal within seconds; its text.
async fn refused(url: &str, config: MariaConfig) -> String {
    let start = Instant::now();
    let err = MariaBackend::connect(url, config).await.expect_err("must be refused");
    assert_eq!(err.backend_kind(), Some(BackendErrorKind::Refused), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    format!("{err} / {err:?}")
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused() {
    let other = TestPki::new("another-ca");
    let server = tls_server();
    let text =
        refused(&server.url(), tls_config(Duration::from_secs(2), "t_x", other.ca_file())).await;
    assert!(text.to_lowercase().contains("certificate") || text.contains("TLS"), "{text}");
}

#[tokio::test]
async fn a_plain_client_is_refused_by_a_server_that_requires_tls() {
    let server = tls_server();
    let text = refused(&server.url(), support::config(Duration::from_secs(2), "t_x")).await;
    assert!(text.contains("Access denied") || text.contains("secure"), "{text}");
}

#[tokio::test]
async fn a_tls_client_is_refused_by_a_server_without_tls() {
    let plain = support::shared();
    let text =
        refused(&plain.url(), tls_config(Duration::from_secs(2), "t_x", pki().ca_file())).await;
    assert!(text.contains("SSL") || text.contains("TLS"), "{text}");
}
