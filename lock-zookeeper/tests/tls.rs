//! TLS and ZooKeeper (crate docs, "TLS"): the backend locks over mutual TLS with a TestPki's
//! certificates, and each refusal it can meet comes back as a clear error within seconds,
//! naming the server and what was refused: a server certificate from a CA it does not trust,
//! one for another host, a server that needs a client certificate and gets none, a TLS client
//! at a plain port, a plain client at a TLS port, and TLS files that cannot be used.
//! `tests/tls_conformance.rs` runs the conformance suite over mutual TLS.

use crate::support;

use lock_core::tls::TlsFiles;
use lock_core::{LockError, Locker};
use lock_zookeeper::{ZkBackend, ZkConfig};
use std::sync::OnceLock;
use std::time::Duration;
use test_servers::{TestPki, ZkClientAuth, ZkServer, ZkTls};
use tokio::time::Instant;

/// How long a refusal may take: "within seconds", never the connect timeout (30 s here) or a
/// hang.
const PROMPTLY: Duration = Duration::from_secs(10);

/// The binary's test CA, its server certificate for 127.0.0.1 and localhost.
fn pki() -> &'static TestPki {
    static PKI: OnceLock<TestPki> = OnceLock::new();
    PKI.get_or_init(|| TestPki::new("lock-zookeeper-tls"))
}

/// A ZooKeeper whose client port speaks TLS only and needs a client certificate.
fn server() -> &'static ZkServer {
    tokio::task::block_in_place(|| support::shared_tls(pki(), ZkClientAuth::Need))
}

/// A client of `pki()` named `user`: its CA and its own certificate.
fn client_files(user: &str) -> TlsFiles {
    let client = pki().client(user);
    TlsFiles::trusting(pki().ca_file()).with_identity(&client.cert, &client.key)
}

fn config(tag: &str, tls: Option<TlsFiles>) -> ZkConfig {
    ZkConfig {
        session_timeout: Duration::from_secs(6),
        // Far above PROMPTLY: a refusal must be named, not waited out.
        connect_timeout: Duration::from_secs(30),
        root: support::unique_root(tag),
        tls,
        ..ZkConfig::default()
    }
}

/// Connect to `hosts` with `config`, which must be refused promptly with a backend error
/// naming `hosts`: its message.
async fn refused(hosts: &str, config: ZkConfig) -> String {
    let start = Instant::now();
    let err = ZkBackend::connect_with(hosts, config).await.expect_err("the connect is refused");
    let took = start.elapsed();
    eprintln!("refused in {took:?}: {err}");
    assert!(took < PROMPTLY, "refused only after {took:?}: {err}");
    let LockError::Backend { backend: "zookeeper", kind, source: message } = err else {
        panic!("expected a backend error, got {err:?}")
    };
    let message = message.to_string();
    assert_eq!(kind, lock_core::BackendErrorKind::Refused, "{message}");
    assert!(message.contains(hosts), "names the server: {message}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_certificate_locks_over_mutual_tls() {
    let server = server();
    let backend =
        ZkBackend::connect_with(&server.hosts(), config("mtls", Some(client_files("alice"))))
            .await
            .expect("a session over mutual TLS");
    let locker = backend.locker("alice").unwrap();
    let guard = locker.lock("over-tls", Some(Duration::from_secs(5))).await.expect("the lock");
    assert!(locker.try_lock("over-tls").await.unwrap().is_none(), "held: a second ask waits");
    guard.release().await.expect("released");
    let again = locker.try_lock("over-tls").await.unwrap().expect("free again");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_refused_by_name() {
    let server = server();
    let stranger_ca = TestPki::new("lock-zookeeper-tls-other-ca");
    let alice = pki().client("alice-other-ca");
    let files = TlsFiles::trusting(stranger_ca.ca_file()).with_identity(&alice.cert, &alice.key);
    let message = refused(&server.hosts(), config("other-ca", Some(files))).await;
    assert!(message.contains("invalid peer certificate"), "{message}");
    assert!(message.contains("UnknownIssuer"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_is_refused_by_name() {
    // A server of the same CA whose certificate names another host only.
    let other = pki().issue("other-host", "other-host", &["other.example"]);
    let tls = ZkTls { server: other, ca: pki().ca_file().into(), client_auth: ZkClientAuth::Want };
    let server = tokio::task::block_in_place(|| ZkServer::launch_tls(tls)).expect("a TLS server");
    let message = refused(&server.hosts(), config("other-host", Some(client_files("bob")))).await;
    assert!(message.contains("invalid peer certificate"), "{message}");
    assert!(message.contains("not valid for name \"127.0.0.1\""), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_at_a_server_that_needs_one_is_told_so() {
    let server = server();
    let files = TlsFiles::trusting(pki().ca_file());
    let message = refused(&server.hosts(), config("no-cert", Some(files))).await;
    assert!(message.contains("refused this client's certificate, or its lack of one"), "{message}");
    assert!(message.contains("TlsFiles::with_identity"), "says what to do: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_at_a_plain_port_is_told_it_may_be_one() {
    let plain = tokio::task::block_in_place(support::shared);
    let message =
        refused(&plain.hosts(), config("tls-at-plain", Some(client_files("carol")))).await;
    assert!(message.contains("closed the connection at the TLS handshake"), "{message}");
    assert!(message.contains("secureClientPort"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_at_a_tls_port_is_told_the_port_speaks_tls_within_seconds() {
    let server = server();
    let message = refused(&server.hosts(), config("plain-at-tls", None)).await;
    assert!(message.contains("it speaks TLS there"), "{message}");
    assert!(message.contains("set ZkConfig::tls"), "{message}");
    assert!(message.contains("use the server's plain clientPort"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_that_cannot_be_used_are_refused_at_once_naming_the_file() {
    // Refused before any connection: no server is needed, and none at this port exists.
    let at_once = |files: TlsFiles| async move {
        let start = Instant::now();
        let err = ZkBackend::connect_with("127.0.0.1:1", config("bad-files", Some(files)))
            .await
            .expect_err("refused");
        assert!(
            start.elapsed() < Duration::from_millis(200),
            "refused after {:?}",
            start.elapsed()
        );
        let LockError::Config(message) = &err else { panic!("expected a config error: {err:?}") };
        message.clone()
    };
    let missing = at_once(TlsFiles::trusting("/nonexistent/ca.pem")).await;
    assert!(missing.contains("/nonexistent/ca.pem"), "{missing}");
    let alice = pki().client("alice-no-ca");
    let no_ca = at_once(TlsFiles::default().with_identity(&alice.cert, &alice.key)).await;
    assert!(no_ca.contains("a CA file is required"), "{no_ca}");
    // A certificate with a key that is not its own: named, the key never shown.
    let other = pki().client("mallory");
    let mismatched = TlsFiles::trusting(pki().ca_file()).with_identity(&alice.cert, &other.key);
    let mismatch = at_once(mismatched).await;
    assert!(mismatch.contains(&alice.cert.display().to_string()), "{mismatch}");
    assert!(mismatch.contains("KeyMismatch"), "{mismatch}");
    let key = std::fs::read_to_string(&other.key).unwrap();
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(!mismatch.contains(&body[..24]), "shows no key: {mismatch}");
}
