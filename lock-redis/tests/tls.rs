//! TLS: the locks over `rediss://` on `redis-server`s that speak only TLS
//! (`tls-port`, `port 0`), with certificates made at test time (`test_servers::TestPki`).
//!
//! - The shared conformance suite for the token lock passes on a TLS server secured by ACL
//!   users (default user off), every contender connecting through its own proxy with a
//!   `rediss://` URL, the test CA and `locker`'s credentials (`mod conformance`).
//! - Mutual TLS (`tls-auth-clients yes`): a client with a certificate of the CA connects and
//!   locks; one without a certificate, or with one of another CA, is refused.
//! - Each bad case fails at `connect` with a [`LockError::Backend`] that names the server and
//!   what was refused, never the password, within seconds: a server certificate of another CA,
//!   one for another host, a TLS client at a plain server, a plain client at a TLS-only server.
//! - jedis-lock and Redlock (three TLS masters) work over TLS too, and a missing CA file or a
//!   `redis://` URL with TLS set is a [`LockError::Config`].

use crate::support;

use lock_core::secret::{Credentials, Secret};
use lock_core::tls::TlsFiles;
use lock_core::{BackendErrorKind, LockError, Locker};
use lock_redis::{
    JedisConfig, RedisBackend, RedisConnectConfig, RedisMasters, RedlockConfig, TokenConfig,
    Variant,
};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use support::unique_prefix;
use test_servers::{AclUser, RedisServer, TestPki};

/// The connect and response timeouts of every client here.
const CONNECT: Duration = Duration::from_secs(1);
const RESPONSE: Duration = Duration::from_secs(1);

/// Every refusal must come back within this: "within seconds", never a hang.
const REFUSED_WITHIN: Duration = Duration::from_secs(10);

/// The key prefixes `locker` may touch: `t<n>-tls:`.
const TAG: &str = "tls";

/// The test binary's TLS servers, started at first use: `optional` asks no client certificate
/// (`tls-auth-clients optional`), `required` asks one (`yes`); both are secured by `locker`
/// (exactly `lock_redis::ACL_COMMANDS` on its prefixes), the default user off.
struct Tls {
    pki: TestPki,
    locker: AclUser,
    optional: RedisServer,
    required: RedisServer,
}

fn tls() -> &'static Tls {
    static TLS: OnceLock<Tls> = OnceLock::new();
    TLS.get_or_init(|| {
        let pki = TestPki::new("lock-redis");
        let rules = format!("~t*-{TAG}:* {}", lock_redis::ACL_COMMANDS);
        let locker = AclUser::new("locker", &rules);
        let users = [locker.clone()];
        let optional = RedisServer::start_tls(&pki, false, &users);
        let required = RedisServer::start_tls(&pki, true, &users);
        Tls { pki, locker, optional, required }
    })
}

/// The shared servers, started off the async runtime.
async fn servers() -> &'static Tls {
    tokio::task::spawn_blocking(tls).await.expect("the TLS redis-servers")
}

fn credentials(user: &AclUser) -> Credentials {
    Credentials::new(user.name(), Secret::new(user.password()))
}

/// A config for `locker` on a fresh prefix with `tls`.
fn config(s: &Tls, tls: Option<TlsFiles>) -> RedisConnectConfig {
    RedisConnectConfig {
        connect_timeout: CONNECT,
        response_timeout: RESPONSE,
        key_prefix: unique_prefix(TAG),
        credentials: Some(credentials(&s.locker)),
        tls,
        ..RedisConnectConfig::default()
    }
}

/// Trust the test CA, present no certificate.
fn trusting(pki: &TestPki) -> Option<TlsFiles> {
    Some(TlsFiles::trusting(pki.ca_file()))
}

/// Connect expecting a refusal: its message, checked to come within [`REFUSED_WITHIN`] (and
/// reported with its time), to name `url`, and never to hold `password`.
async fn refused(url: &str, config: RedisConnectConfig, password: &str) -> String {
    let start = Instant::now();
    let err = RedisBackend::connect_with(url, config).await.expect_err("refused");
    let took = start.elapsed();
    let LockError::Backend { backend: "redis", kind, source } = err else { panic!("{err:?}") };
    let message = source.to_string();
    eprintln!("refused after {took:?}: {message}");
    assert_eq!(kind, BackendErrorKind::Refused, "a refusal, not an outage: {message}");
    assert!(took < REFUSED_WITHIN, "refused after {took:?}: {message}");
    assert!(message.contains(url), "names the server: {message}");
    assert!(!message.contains(password), "the password leaked: {message}");
    message
}

/// A lock and release on `backend`: it works.
async fn locks(backend: &RedisBackend) {
    let lock = backend.token("tls-client", TokenConfig::new(Duration::from_secs(5))).unwrap();
    let guard = lock.lock("x", Some(Duration::from_secs(5))).await.expect("granted");
    assert!(guard.token() > 0);
    guard.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rediss_client_of_the_ca_locks_with_acl_credentials() {
    let s = servers().await;
    let backend = RedisBackend::connect_with(&s.optional.url(), config(s, trusting(&s.pki)))
        .await
        .expect("connect over TLS");
    assert!(backend.address().starts_with("rediss://127.0.0.1:"), "{}", backend.address());
    locks(&backend).await;
    // jedis-lock takes the same connection.
    let jedis = backend.jedis("tls-jedis", JedisConfig::default()).unwrap();
    let guard = jedis.lock("j", Some(Duration::from_secs(5))).await.expect("jedis granted");
    guard.release().await.expect("jedis released");
    // The URL form of credentials works over TLS too, its password redacted.
    let by_url = RedisConnectConfig { credentials: None, ..config(s, trusting(&s.pki)) };
    let backend = RedisBackend::connect_with(&s.optional.url_as(&s.locker), by_url)
        .await
        .expect("connect over TLS, credentials in the URL");
    assert!(!backend.address().contains(s.locker.password()), "{}", backend.address());
    locks(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_a_client_with_a_certificate_of_the_ca_locks() {
    let s = servers().await;
    let alice = s.pki.client("alice");
    let files = TlsFiles::trusting(s.pki.ca_file()).with_identity(&alice.cert, &alice.key);
    let backend = RedisBackend::connect_with(&s.required.url(), config(s, Some(files)))
        .await
        .expect("connect with a client certificate");
    locks(&backend).await;
    // RESP2 (no tracking: AUTH instead of HELLO) too.
    let files = TlsFiles::trusting(s.pki.ca_file()).with_identity(&alice.cert, &alice.key);
    let resp2 = RedisConnectConfig { tracking: false, ..config(s, Some(files)) };
    let backend = RedisBackend::connect_with(&s.required.url(), resp2).await.expect("RESP2");
    locks(&backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_a_client_without_a_certificate_is_refused() {
    let s = servers().await;
    for tracking in [true, false] {
        let config = RedisConnectConfig { tracking, ..config(s, trusting(&s.pki)) };
        let message = refused(&s.required.url(), config, s.locker.password()).await;
        assert!(message.contains("as user 'locker'"), "names the user: {message}");
        assert!(message.contains("TLS handshake with 127.0.0.1:"), "{message}");
        assert!(message.contains("requires a client certificate"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_a_client_certificate_of_another_ca_is_refused() {
    let s = servers().await;
    let stranger = TestPki::new("stranger");
    let mallory = stranger.client("mallory");
    let files = TlsFiles::trusting(s.pki.ca_file()).with_identity(&mallory.cert, &mallory.key);
    let message = refused(&s.required.url(), config(s, Some(files)), s.locker.password()).await;
    assert!(message.contains("TLS handshake with 127.0.0.1:"), "{message}");
    assert!(message.contains("the server refused the client's certificate"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_of_another_ca_is_refused() {
    let s = servers().await;
    let stranger = TestPki::new("untrusted");
    let message =
        refused(&s.optional.url(), config(s, trusting(&stranger)), s.locker.password()).await;
    let peer = format!("TLS handshake with 127.0.0.1:{} failed", s.optional.port);
    assert!(message.contains(&peer), "names the peer: {message}");
    assert!(message.contains("invalid peer certificate: UnknownIssuer"), "{message}");
    assert!(message.contains("not signed by a CA the client trusts"), "{message}");
    assert!(!message.contains(s.locker.password()), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_for_another_host_is_refused() {
    let s = servers().await;
    let elsewhere = s.pki.issue("elsewhere", "elsewhere", &["db.example.net"]);
    let users = [s.locker.clone()];
    let server = tokio::task::spawn_blocking(move || {
        RedisServer::launch_tls_as(&tls().pki, &elsewhere, false, &users)
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    let message = refused(&server.url(), config(s, trusting(&s.pki)), s.locker.password()).await;
    assert!(message.contains(&format!("TLS handshake with 127.0.0.1:{}", server.port)));
    assert!(message.contains("certificate not valid for name"), "{message}");
    assert!(message.contains("not valid for the host the client connected to"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_at_a_plain_server_is_refused() {
    let s = servers().await;
    let plain = tokio::task::spawn_blocking(RedisServer::start).await.unwrap();
    let url = format!("rediss://127.0.0.1:{}/", plain.port);
    let message = refused(&url, config(s, trusting(&s.pki)), s.locker.password()).await;
    assert!(message.contains(&format!("TLS handshake with 127.0.0.1:{}", plain.port)));
    assert!(message.contains("does not speak TLS on this port"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_at_a_tls_only_server_is_refused() {
    let s = servers().await;
    let url = format!("redis://127.0.0.1:{}/", s.optional.port);
    for tracking in [true, false] {
        let config = RedisConnectConfig { tracking, ..config(s, None) };
        let message = refused(&url, config, s.locker.password()).await;
        assert!(message.contains("as user 'locker'"), "names the user: {message}");
        assert!(message.contains("speaks only TLS on this port"), "{message}");
        assert!(message.contains("use a rediss:// URL"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_and_urls_that_disagree_are_config_errors() {
    let s = servers().await;
    let url = format!("redis://127.0.0.1:{}/", s.optional.port);
    let err = RedisBackend::connect_with(&url, config(s, trusting(&s.pki))).await.unwrap_err();
    let LockError::Config(message) = err else { panic!("{err:?}") };
    assert!(message.contains("use a rediss:// URL"), "{message}");
    let missing = Some(TlsFiles::trusting(s.pki.dir().join("no-such-ca.pem")));
    let err = RedisBackend::connect_with(&s.optional.url(), config(s, missing)).await.unwrap_err();
    let LockError::Config(message) = err else { panic!("{err:?}") };
    assert!(message.contains("no-such-ca.pem"), "names the file: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_runs_on_tls_masters() {
    let s = servers().await;
    let masters = tokio::task::spawn_blocking(|| {
        let users = [tls().locker.clone()];
        (0..3).map(|_| RedisServer::start_tls(&tls().pki, true, &users)).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let bob = s.pki.client("bob");
    let files = TlsFiles::trusting(s.pki.ca_file()).with_identity(&bob.cert, &bob.key);
    let connected = RedisMasters::connect_with(&urls, config(s, Some(files))).await;
    let redlock_config = RedlockConfig::new(Duration::from_secs(5), 25);
    let redlock = connected.expect("TLS masters").redlock("tls-redlock", redlock_config).unwrap();
    let guard = redlock.lock("r", Some(Duration::from_secs(5))).await.expect("granted");
    guard.release().await.expect("released");
    // A client without a certificate reaches no master: the attempt fails, naming why.
    let connected = RedisMasters::connect_with(&urls, config(s, trusting(&s.pki))).await;
    let err = connected.expect_err("no master accepts a client without a certificate");
    assert!(err.to_string().contains("requires a client certificate"), "{err}");
}

/// The conformance fixture on the `optional` TLS server: the shared one, over TLS
/// (`rediss://` URLs through a proxy per contender, the test CA), as `locker`.
async fn tls_fixture(ttl: Duration) -> support::RedisFixture {
    let s = servers().await;
    let variant = Variant::Token(TokenConfig::new(ttl));
    support::RedisFixture::on(s.optional.addr(), Some(credentials(&s.locker)), TAG, variant, ttl)
        .with_tls(TlsFiles::trusting(s.pki.ca_file()))
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |_seed| async move { tls_fixture(Duration::from_secs(2)).await },
    seeds = 3,
    contenders = 16
);
