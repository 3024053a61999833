//! etcd over TLS: the conformance suite on a TLS server whose clients are known by their
//! certificates, and again by user and password over TLS; and every way a TLS connection can
//! be refused, each a clear error within seconds.
//!
//! One test CA ([`test_servers::TestPki`], made when the binary starts; no key material is
//! committed) signs every server and client certificate here. Two TLS servers of the binary's
//! own, secured as `tests/security.rs` secures its server (users `locker` on `/secure/` and
//! `stranger` on `/elsewhere/`, passwords made up at run time):
//! - `cert_auth_server`: `--client-cert-auth`, so every client presents a certificate, and one
//!   without a token is the user its certificate's common name names;
//! - `password_server`: TLS without client certificates, clients authenticate by password.

use crate::support;

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::secret::Credentials;
use lock_core::tls::TlsFiles;
use lock_core::{LockError, Locker};
use lock_etcd::{EtcdBackend, EtcdConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use test_servers::{EtcdServer, EtcdTls, Proxy, TestPki};

/// How long a refusal may take: a hang would show as the connect timeout (10 s) or more.
const PROMPTLY: Duration = Duration::from_secs(5);

use support::{credentials, password, users, LOCKER, STRANGER};

/// The binary's test CA, its server certificate for 127.0.0.1 and localhost, and one client
/// certificate per user (common name = user).
fn pki() -> &'static TestPki {
    static PKI: OnceLock<TestPki> = OnceLock::new();
    PKI.get_or_init(|| TestPki::new("lock-etcd-tls"))
}

/// A client certificate for `user`, made once.
fn client_cert(user: &str) -> TlsFiles {
    static CERTS: OnceLock<Mutex<HashMap<String, TlsFiles>>> = OnceLock::new();
    let mut certs = CERTS.get_or_init(Mutex::default).lock().unwrap();
    certs
        .entry(user.to_string())
        .or_insert_with(|| {
            let files = pki().client(user);
            TlsFiles::trusting(pki().ca_file()).with_identity(files.cert, files.key)
        })
        .clone()
}

/// Trusting the binary's CA, presenting no certificate.
fn trusting() -> TlsFiles {
    TlsFiles::trusting(pki().ca_file())
}

fn secured(server: EtcdServer) -> EtcdServer {
    server.secure(&password("root"), &users()).unwrap_or_else(|e| panic!("{e}"));
    server
}

/// TLS with `--client-cert-auth`, authentication on.
fn cert_auth_server() -> &'static EtcdServer {
    static SERVER: OnceLock<EtcdServer> = OnceLock::new();
    SERVER.get_or_init(|| secured(EtcdServer::start_tls(pki(), true)))
}

/// TLS without client certificates, authentication on.
fn password_server() -> &'static EtcdServer {
    static SERVER: OnceLock<EtcdServer> = OnceLock::new();
    SERVER.get_or_init(|| secured(EtcdServer::start_tls(pki(), false)))
}

/// A lock root under `locker`'s prefix that no other test uses.
fn secured_root(tag: &str) -> String {
    format!("/secure{}", support::unique_root(tag))
}

/// Settings for `ttl` under `root`, as `who` (if anyone), with `tls`.
fn config(root: &str, ttl: Duration, who: Option<Credentials>, tls: TlsFiles) -> EtcdConfig {
    EtcdConfig { credentials: who, tls: Some(tls), ..support::config(root, ttl) }
}

/// The conformance fixture over TLS: every contender has its own backend through its own
/// proxy (TLS goes through it untouched: the proxy is on 127.0.0.1 too, which the server's
/// certificate names).
struct TlsFixture {
    server: SocketAddr,
    root: String,
    ttl: Duration,
    credentials: Option<Credentials>,
    tls: TlsFiles,
    proxies: Mutex<HashMap<String, Proxy>>,
}

impl TlsFixture {
    fn new(server: &EtcdServer, credentials: Option<Credentials>, tls: TlsFiles) -> TlsFixture {
        TlsFixture {
            server: server.addr(),
            root: secured_root("conf"),
            ttl: Duration::from_secs(2),
            credentials,
            tls,
            proxies: Mutex::default(),
        }
    }
}

#[async_trait]
impl Fixture for TlsFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let proxy = Proxy::start(self.server).await;
        let endpoint = format!("https://{}", proxy.addr());
        let config = config(&self.root, self.ttl, self.credentials.clone(), self.tls.clone());
        let backend = EtcdBackend::connect_with(&endpoint, config)
            .await
            .unwrap_or_else(|e| panic!("connect over TLS through the proxy: {e}"));
        assert_eq!(backend.lease_ttl(), self.ttl, "the server must grant the asked lease TTL");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxy) {
            old.cut();
        }
        Arc::new(backend.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        if let Some(p) = self.proxies.lock().unwrap().get(name) {
            p.cut();
        }
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        Duration::from_millis(1200)
    }
}

/// (a) The whole suite on a TLS server with `--client-cert-auth` and authentication on, every
/// contender known by its certificate alone (common name `locker`, no password).
mod by_certificate {
    use super::*;

    async fn make_fixture(_seed: u64) -> TlsFixture {
        TlsFixture::new(cert_auth_server(), None, client_cert(LOCKER.0))
    }

    lock_core::conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |seed| async move { make_fixture(seed).await },
        seeds = 1,
        contenders = 12
    );
}

/// (b) The whole suite over TLS (no client certificates), every contender authenticated as
/// `locker` by its password.
mod by_password {
    use super::*;

    async fn make_fixture(_seed: u64) -> TlsFixture {
        TlsFixture::new(password_server(), Some(credentials(LOCKER)), trusting())
    }

    lock_core::conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |seed| async move { make_fixture(seed).await },
        seeds = 1,
        contenders = 12
    );
}

/// The message of a backend error, or a failure naming what came instead.
fn backend_message(err: &LockError) -> String {
    match err {
        LockError::Backend { backend, source: message, .. } => {
            assert_eq!(*backend, "etcd");
            message.to_string()
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
}

/// Connect to `endpoint` with `config`, expecting a refusal within [`PROMPTLY`]: its message,
/// checked to name the endpoint and to show no password and no key.
async fn refused(endpoint: &str, config: EtcdConfig) -> String {
    let keys: Vec<String> = [&config.tls]
        .into_iter()
        .flatten()
        .filter_map(|t| t.key.as_ref())
        .map(|k| std::fs::read_to_string(k).unwrap())
        .collect();
    let start = Instant::now();
    let err = EtcdBackend::connect_with(endpoint, config)
        .await
        .expect_err("the connection must be refused");
    let took = start.elapsed();
    assert!(took < PROMPTLY, "refused only after {took:?}: {err}");
    let message = backend_message(&err);
    assert!(message.contains(endpoint), "names the endpoint {endpoint}: {message}");
    let shown = format!("{err} {err:?}");
    for secret in [password(LOCKER.0), password(STRANGER.0), password("root")] {
        assert!(!shown.contains(&secret), "shows a password: {shown}");
    }
    for key in keys {
        let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
        let some = &body[..body.len().min(24)];
        assert!(!shown.contains(some), "shows the client key: {shown}");
    }
    eprintln!("refused in {took:?}: {message}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_refused_as_an_unknown_issuer() {
    let server = password_server();
    let other = TestPki::new("another");
    let tls = TlsFiles::trusting(other.ca_file());
    let config = config(&secured_root("other-ca"), Duration::from_secs(5), None, tls);
    let message = refused(&server.endpoint(), config).await;
    let expected = format!("TLS handshake with {} failed", server.endpoint());
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("invalid peer certificate: UnknownIssuer"), "{message}");
    assert!(message.contains(&other.ca_file().display().to_string()), "names the CA: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_for_another_host_name_is_refused_naming_the_host() {
    // A server whose certificate, from the trusted CA, names only elsewhere.example.
    let wrong_name = pki().issue("elsewhere", "elsewhere", &["elsewhere.example"]);
    let tls = EtcdTls { server: wrong_name, ca: pki().ca_file().into(), client_cert_auth: false };
    let server = tokio::task::block_in_place(|| EtcdServer::launch_tls(tls))
        .unwrap_or_else(|e| panic!("{e}"));
    let config = config(&secured_root("wrong-name"), Duration::from_secs(5), None, trusting());
    let message = refused(&server.endpoint(), config).await;
    let expected = format!("TLS handshake with {} failed", server.endpoint());
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("invalid peer certificate"), "{message}");
    assert!(message.contains("not valid for name"), "{message}");
    assert!(message.contains("127.0.0.1"), "names the host: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_client_against_a_plain_server_is_refused_saying_the_server_is_not_tls() {
    let plain = support::shared();
    let endpoint = format!("https://{}", plain.addr());
    let config =
        config(&support::unique_root("https-plain"), Duration::from_secs(5), None, trusting());
    let message = refused(&endpoint, config).await;
    let expected = format!("TLS handshake with {endpoint} failed");
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("is it a plain http:// server?"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_against_a_tls_server_is_refused_saying_the_server_wants_tls() {
    let server = password_server();
    let endpoint = format!("http://{}", server.addr());
    let config = EtcdConfig {
        credentials: Some(credentials(LOCKER)),
        ..support::config(&secured_root("plain-tls"), Duration::from_secs(5))
    };
    let message = refused(&endpoint, config).await;
    assert!(message.contains(&format!("{endpoint} speaks TLS")), "{message}");
    let https = format!("use https://{} and EtcdConfig::tls", server.addr());
    assert!(message.contains(&https), "says what to use: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_is_refused_by_a_server_that_requires_one() {
    let server = cert_auth_server();
    let config = config(
        &secured_root("no-cert"),
        Duration::from_secs(5),
        Some(credentials(LOCKER)),
        trusting(),
    );
    let message = refused(&server.endpoint(), config).await;
    let expected = format!("TLS handshake with {} failed", server.endpoint());
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("requires a client certificate"), "{message}");
    assert!(message.contains("TlsFiles::with_identity"), "says what to set: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_whose_user_has_no_role_on_the_root_is_refused_naming_the_certificate() {
    let server = cert_auth_server();
    let tls = client_cert(STRANGER.0);
    let cert = tls.cert.clone().unwrap();
    let config = config(&secured_root("stranger-cert"), Duration::from_secs(5), None, tls);
    let message = refused(&server.endpoint(), config).await;
    assert!(message.contains("permission denied"), "{message}");
    assert!(message.contains(&cert.display().to_string()), "names the certificate: {message}");
    assert!(message.contains("READWRITE"), "says what the role needs: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_alone_is_its_user_and_a_password_takes_precedence() {
    let server = cert_auth_server();
    // By certificate: `locker`, whose role covers the root.
    let root = secured_root("by-cert");
    let backend = EtcdBackend::connect_with(
        &server.endpoint(),
        config(&root, Duration::from_secs(5), None, client_cert(LOCKER.0)),
    )
    .await
    .expect("the certificate's user may lock");
    let guard = backend.locker("a").unwrap().lock("k", None).await.unwrap();
    // A certificate of `stranger` with `locker`'s password: the token names the user.
    let backend = EtcdBackend::connect_with(
        &server.endpoint(),
        config(&root, Duration::from_secs(5), Some(credentials(LOCKER)), client_cert(STRANGER.0)),
    )
    .await
    .expect("the password's user may lock");
    let soft = backend.locker("b").unwrap().try_lock("k").await.unwrap();
    assert!(soft.is_none(), "the lock is held: one holder at a time");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_another_ca_is_refused_naming_it() {
    let server = cert_auth_server();
    let other = TestPki::new("another-client-ca");
    let foreign = other.client(LOCKER.0);
    let tls = trusting().with_identity(&foreign.cert, &foreign.key);
    let config = config(&secured_root("foreign-cert"), Duration::from_secs(5), None, tls);
    let message = refused(&server.endpoint(), config).await;
    let expected = format!("TLS handshake with {} failed", server.endpoint());
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("received fatal alert"), "{message}");
    let named = format!("refused the client certificate {}", foreign.cert.display());
    assert!(message.contains(&named), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_the_handshake_fails_within_the_handshake_timeout() {
    let silent = test_servers::SilentServer::start().await;
    let endpoint = format!("https://{}", silent.addr());
    let config = EtcdConfig {
        connect_timeout: Duration::from_secs(3),
        ..config(&support::unique_root("silent"), Duration::from_secs(5), None, trusting())
    };
    let message = refused(&endpoint, config).await;
    assert!(message.contains("TLS handshake timeout"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_is_no_user_on_a_server_without_client_cert_auth_and_the_error_says_so() {
    // The server asks for no certificate, so the client sends none, and its requests have no
    // user.
    let server = password_server();
    let config =
        config(&secured_root("cert-no-cca"), Duration::from_secs(5), None, client_cert(LOCKER.0));
    let message = refused(&server.endpoint(), config).await;
    assert!(message.contains("took no user from the client certificate"), "{message}");
    assert!(message.contains("--client-cert-auth"), "{message}");
    assert!(message.contains("EtcdConfig::credentials"), "{message}");
}
