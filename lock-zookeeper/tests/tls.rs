//! TLS and ZooKeeper (crate docs, "TLS"): the test server's secure port works with a TestPki's
//! certificates and mutual TLS (checked with a TLS handshake and a ZooKeeper session of our
//! own, since the backend has no TLS client in this build), and each refusal the backend can
//! meet comes back as a clear error within seconds: `ZkConfig::tls` set, and a plain client at
//! a TLS port.
//!
//! Not here, because the backend cannot speak TLS to ZooKeeper without aws-lc-rs (crate docs):
//! an untrusted server certificate, a certificate for another host, a TLS client at a plain
//! port, a client without a certificate at a server that needs one, and the conformance suite
//! over TLS.

mod support;

use lock_core::tls::TlsFiles;
use lock_core::LockError;
use lock_zookeeper::{ZkBackend, ZkConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use test_servers::{TestPki, ZkClientAuth, ZkServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// How long a refusal may take: "within seconds", never the connect timeout or a hang.
const PROMPTLY: Duration = Duration::from_secs(10);

/// The binary's test CA, its server certificate for 127.0.0.1 and localhost.
fn pki() -> &'static TestPki {
    static PKI: OnceLock<TestPki> = OnceLock::new();
    PKI.get_or_init(|| TestPki::new("lock-zookeeper-tls"))
}

/// A ZooKeeper whose client port speaks TLS only and needs a client certificate.
fn mutual_tls_server() -> &'static ZkServer {
    static SERVER: OnceLock<ZkServer> = OnceLock::new();
    SERVER.get_or_init(|| ZkServer::start_tls(pki(), ZkClientAuth::Need))
}

fn server() -> &'static ZkServer {
    tokio::task::block_in_place(mutual_tls_server)
}

/// A rustls client trusting `pki()`'s CA, presenting `identity` if given: ring alone.
fn client_config(identity: Option<&test_servers::CertFiles>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pki().ca_file()).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    match identity {
        Some(files) => {
            let chain = CertificateDer::pem_file_iter(&files.cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(&files.key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    }
}

/// A TLS handshake with the server's secure port.
async fn handshake(
    identity: Option<&test_servers::CertFiles>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(server().addr()).await?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(identity)));
    let name = ServerName::try_from("127.0.0.1").unwrap();
    tokio::time::timeout(PROMPTLY, connector.connect(name, tcp)).await.expect("no handshake hang")
}

/// A ZooKeeper `ConnectRequest` (protocol version 0, no last zxid, a 4 s session, no session
/// id or password, not read-only), as a length-prefixed frame.
fn connect_request() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    body.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
    body.extend_from_slice(&4000i32.to_be_bytes()); // session timeout (ms)
    body.extend_from_slice(&0i64.to_be_bytes()); // session id
    body.extend_from_slice(&16i32.to_be_bytes()); // password length
    body.extend_from_slice(&[0u8; 16]); // password
    body.push(0); // read-only
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_server_gives_a_session_over_mutual_tls_and_refuses_a_client_without_a_certificate(
) {
    // With a client certificate of the CA: the handshake, then a session in ZooKeeper's own
    // protocol over it.
    let alice = pki().client("alice");
    let mut tls = handshake(Some(&alice)).await.expect("a handshake with a client certificate");
    tls.write_all(&connect_request()).await.unwrap();
    let mut len = [0u8; 4];
    tokio::time::timeout(PROMPTLY, tls.read_exact(&mut len)).await.unwrap().unwrap();
    let mut answer = vec![0u8; i32::from_be_bytes(len) as usize];
    tls.read_exact(&mut answer).await.unwrap();
    let timeout = i32::from_be_bytes(answer[4..8].try_into().unwrap());
    let session = i64::from_be_bytes(answer[8..16].try_into().unwrap());
    assert!(timeout > 0 && session != 0, "a session over TLS: timeout {timeout}, id {session:#x}");

    // Without one: ZooKeeper (`ssl.clientAuth=need`) refuses in the handshake.
    let start = Instant::now();
    let refused = handshake(None).await.expect_err("a client without a certificate is refused");
    let took = start.elapsed();
    eprintln!("refused in {took:?}: {refused}");
    assert!(took < PROMPTLY, "refused only after {took:?}");
    assert!(refused.to_string().contains("received fatal alert"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_at_a_tls_port_is_told_the_port_speaks_tls_within_seconds() {
    let server = server();
    let config = ZkConfig {
        session_timeout: Duration::from_secs(6),
        root: support::unique_root("plain-at-tls"),
        ..ZkConfig::default()
    };
    let start = Instant::now();
    let err = ZkBackend::connect_with(&server.hosts(), config)
        .await
        .expect_err("a plain client gets no session at a TLS port");
    let took = start.elapsed();
    eprintln!("refused in {took:?}: {err}");
    assert!(took < PROMPTLY, "refused only after {took:?}: {err}");
    let LockError::Backend { backend: "zookeeper", message } = &err else {
        panic!("expected a backend error, got {err:?}")
    };
    assert!(message.contains(&server.hosts()), "names the server: {message}");
    assert!(message.contains("it speaks TLS there"), "{message}");
    assert!(message.contains("use the server's plain clientPort"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_are_refused_at_once_saying_this_build_has_no_tls_client() {
    // Refused before any connection: no server is needed, and none at this port exists.
    let alice = pki().client("alice-config");
    let config = ZkConfig {
        tls: Some(TlsFiles::trusting(pki().ca_file()).with_identity(&alice.cert, &alice.key)),
        ..ZkConfig::default()
    };
    let start = Instant::now();
    let err = ZkBackend::connect_with("127.0.0.1:1", config).await.expect_err("TLS is refused");
    let took = start.elapsed();
    eprintln!("refused in {took:?}: {err}");
    assert!(took < Duration::from_millis(100), "refused only after {took:?}");
    let LockError::Config(message) = &err else { panic!("expected a config error, got {err:?}") };
    assert!(message.contains("cannot speak TLS to ZooKeeper"), "{message}");
    assert!(message.contains("aws-lc-rs"), "says why: {message}");
    let key = std::fs::read_to_string(&alice.key).unwrap();
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(!format!("{err} {err:?}").contains(&body[..24]), "shows no key: {err:?}");
}
