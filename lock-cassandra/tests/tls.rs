//! TLS to Cassandra, without a Cassandra: every refusal against real TLS servers on
//! loopback, with certificates made at test time (`test_servers::TestPki`), and the shared
//! conformance suite over TLS when a cluster and its CA are named.
//!
//! - The servers here are tokio-rustls listeners (ring) that speak just enough CQL to be told
//!   apart: `Then::Cql` answers `OPTIONS` with `SUPPORTED` and refuses anything else with a
//!   CQL error, as a node that will not take this client would; `Then::NotCql` answers in
//!   another protocol; `Then::Silent` says nothing; `Then::Close` hangs up.
//! - Each bad case fails at [`CassandraStore::connect`] with a [`StoreError`] that names the
//!   node and what was refused, within [`REFUSED_WITHIN`]: a certificate of another CA, one
//!   for another host, one naming only a host name, a TLS client at a plain port (silent,
//!   closing, or answering in plain CQL), a trusted handshake with a server that is not
//!   Cassandra (answering or silent), a node requiring a client certificate, a client
//!   certificate of another CA, and a plain client at a TLS port.
//! - A trusted handshake, with and without mutual TLS, gets past the probe to the driver,
//!   which then speaks CQL over TLS to the node (the server counts its `OPTIONS`).
//! - With `LOCK_TEST_CASSANDRA` and `LOCK_TEST_CASSANDRA_CA`, the conformance suite runs over
//!   TLS on that cluster (`mod over_tls`); without them each of its tests says it was not run.

use lock_cassandra::fixture::{CassandraFixture, ENV_TEST_CA, ENV_TEST_NODES};
use lock_cassandra::{CassandraConfig, CassandraStore};
use lock_core::store::StoreError;
use lock_core::tls::TlsFiles;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_servers::{CertFiles, SilentServer, TestPki};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The connect timeout of every client here.
const CONNECT: Duration = Duration::from_secs(2);

/// Every refusal must come back within this: "within seconds", never a hang.
const REFUSED_WITHIN: Duration = Duration::from_secs(10);

/// What a test server does with a connection (after the handshake, for a TLS one).
#[derive(Debug, Clone, Copy)]
enum Then {
    /// Speak CQL v4: `SUPPORTED` to `OPTIONS`, a CQL error to anything else; to a frame of
    /// another protocol version, a CQL protocol error and hang up, as Cassandra does.
    Cql,
    /// Answer the first bytes in another protocol (a Redis error reply).
    NotCql,
    /// Say nothing and keep the connection.
    Silent,
    /// Hang up at once.
    Close,
}

/// A loopback server; stops when dropped.
struct Server {
    addr: SocketAddr,
    /// CQL `OPTIONS` requests answered (by [`Then::Cql`]).
    options: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// TLS with `cert`; requiring a client certificate of `client_ca` when given.
    async fn tls(cert: &CertFiles, client_ca: Option<&Path>, then: Then) -> Server {
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(cert, client_ca));
        Server::start(then, Some(acceptor)).await
    }

    /// Plain TCP.
    async fn plain(then: Then) -> Server {
        Server::start(then, None).await
    }

    async fn start(then: Then, tls: Option<tokio_rustls::TlsAcceptor>) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let options = Arc::new(AtomicUsize::new(0));
        let counted = options.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (tls, counted) = (tls.clone(), counted.clone());
                tokio::spawn(async move {
                    match tls {
                        None => serve(tcp, then, &counted).await,
                        // A refused handshake just ends the connection, as a node's does.
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(tcp).await {
                                serve(stream, then, &counted).await
                            }
                        }
                    }
                });
            }
        });
        Server { addr, options, task }
    }

    fn node(&self) -> String {
        self.addr.to_string()
    }
}

fn server_config(cert: &CertFiles, client_ca: Option<&Path>) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<_> = CertificateDer::pem_file_iter(&cert.cert)
        .expect("cert")
        .map(|c| c.expect("cert"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&cert.key).expect("key");
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).expect("ca") {
                roots.add(c.expect("ca")).expect("ca");
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    Arc::new(builder.with_single_cert(chain, key).expect("server certificate"))
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, then: Then, options: &AtomicUsize) {
    match then {
        Then::Cql => {
            let _ = speak_cql(&mut s, options).await;
        }
        Then::NotCql => {
            let mut first = [0u8; 1];
            if s.read(&mut first).await.is_ok() {
                let _ = s.write_all(b"-ERR unknown command\r\n").await;
                let _ = s.flush().await;
            }
            let _ = s.read(&mut [0u8; 64]).await;
        }
        Then::Silent => {
            let _ = s.read_to_end(&mut Vec::new()).await;
        }
        Then::Close => {}
    }
}

/// A response frame of CQL v4 to the request on `stream` (bytes 2..4 of its header).
fn frame(stream: [u8; 2], opcode: u8, body: &[u8]) -> Vec<u8> {
    let mut f = vec![0x84, 0, stream[0], stream[1], opcode];
    f.extend_from_slice(&(body.len() as u32).to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// A CQL `ERROR` body: protocol error (0x000A) with `message`.
fn protocol_error(message: &str) -> Vec<u8> {
    let mut body = 0x000Au32.to_be_bytes().to_vec();
    body.extend_from_slice(&(message.len() as u16).to_be_bytes());
    body.extend_from_slice(message.as_bytes());
    body
}

async fn speak_cql<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    options: &AtomicUsize,
) -> std::io::Result<()> {
    loop {
        let mut header = [0u8; 9];
        s.read_exact(&mut header).await?;
        let stream = [header[2], header[3]];
        if header[0] != 0x04 {
            let said = format!("Invalid or unsupported protocol version ({})", header[0] & 0x7f);
            s.write_all(&frame(stream, 0x00, &protocol_error(&said))).await?;
            return s.flush().await;
        }
        let len = u32::from_be_bytes([header[5], header[6], header[7], header[8]]);
        let mut body = vec![0u8; len.min(1 << 20) as usize];
        s.read_exact(&mut body).await?;
        let reply = match header[4] {
            0x05 => {
                options.fetch_add(1, Ordering::SeqCst);
                frame(stream, 0x06, &[0, 0]) // SUPPORTED, no options
            }
            _ => frame(stream, 0x00, &protocol_error("a test server, not Cassandra")),
        };
        s.write_all(&reply).await?;
        s.flush().await?;
    }
}

/// A client of `node` with the connect timeout here and `tls`.
fn config(node: &str, tls: Option<TlsFiles>) -> CassandraConfig {
    let config = CassandraConfig::new([node]).with_connect_timeout(CONNECT);
    match tls {
        Some(files) => config.with_tls(files),
        None => config,
    }
}

/// The error of connecting with `config`, which must come within [`REFUSED_WITHIN`], printed
/// with its time (`--nocapture` shows them).
async fn refusal(case: &str, config: CassandraConfig) -> (StoreError, Duration) {
    let start = Instant::now();
    let e = CassandraStore::connect(config).await.expect_err("connected to a test server");
    let took = start.elapsed();
    eprintln!("{case}: {took:.2?}: {e}");
    assert!(took < REFUSED_WITHIN, "{case}: took {took:?}: {e}");
    (e, took)
}

fn rejected(e: &StoreError) -> &str {
    match e {
        StoreError::Rejected(m) => m,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn unreachable(e: &StoreError) -> &str {
    match e {
        StoreError::Unreachable(m) => m,
        other => panic!("expected unreachable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_certificate_of_another_ca_is_refused_naming_the_node_and_the_ca() {
    let (ours, theirs) = (TestPki::new("cassandra-ours"), TestPki::new("cassandra-theirs"));
    let server = Server::tls(theirs.server(), None, Then::Cql).await;
    let tls = TlsFiles::trusting(ours.ca_file());
    let (e, _) = refusal("another CA", config(&server.node(), Some(tls))).await;
    let m = rejected(&e);
    assert!(m.contains(&format!("node {}", server.node())), "{m}");
    assert!(m.contains("invalid peer certificate: UnknownIssuer"), "{m}");
    assert!(m.contains("not signed by the CA the client trusts"), "{m}");
    assert!(m.contains(&ours.ca_file().display().to_string()), "{m}");
    assert_eq!(server.options.load(Ordering::SeqCst), 0, "nothing was sent in CQL");
}

#[tokio::test]
async fn a_certificate_for_another_host_is_refused_saying_the_ip_is_checked() {
    let pki = TestPki::new("cassandra-host");
    let elsewhere = pki.issue("elsewhere", "db.example.com", &["db.example.com"]);
    let server = Server::tls(&elsewhere, None, Then::Cql).await;
    let (e, _) =
        refusal("another host", config(&server.node(), Some(TlsFiles::trusting(pki.ca_file()))))
            .await;
    let m = rejected(&e);
    assert!(m.contains("certificate not valid for name \"127.0.0.1\""), "{m}");
    assert!(m.contains("db.example.com"), "{m}");
    assert!(m.contains("IP SAN"), "{m}");
}

#[tokio::test]
async fn a_certificate_naming_only_the_host_name_is_refused_when_dialed_by_that_name() {
    // The driver checks the certificate against the IP it dials, not the contact point's name.
    let pki = TestPki::new("cassandra-name-only");
    let named = pki.issue("named", "localhost", &["localhost"]);
    let server = Server::tls(&named, None, Then::Cql).await;
    let node = format!("localhost:{}", server.addr.port());
    let (e, _) =
        refusal("host name only", config(&node, Some(TlsFiles::trusting(pki.ca_file())))).await;
    let m = rejected(&e);
    assert!(m.contains(&format!("node {node} (127.0.0.1:")), "{m}");
    assert!(m.contains("not valid for name \"127.0.0.1\""), "{m}");
    assert!(m.contains("IP SAN"), "{m}");
}

#[tokio::test]
async fn a_tls_client_at_a_plain_port_that_never_answers_fails_at_the_connect_timeout() {
    let pki = TestPki::new("cassandra-silent");
    let silent = SilentServer::start().await;
    let node = silent.addr().to_string();
    let (e, took) = refusal(
        "TLS at a silent plain port",
        config(&node, Some(TlsFiles::trusting(pki.ca_file()))),
    )
    .await;
    let m = unreachable(&e);
    assert!(m.contains(&format!("node {node}")), "{m}");
    assert!(m.contains("no answer to the TLS handshake within 2s"), "{m}");
    assert!(took >= CONNECT && took < CONNECT + Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn a_tls_client_at_a_plain_port_that_hangs_up_is_told_so() {
    let pki = TestPki::new("cassandra-close");
    let server = Server::plain(Then::Close).await;
    let (e, _) = refusal(
        "TLS at a plain port that closes",
        config(&server.node(), Some(TlsFiles::trusting(pki.ca_file()))),
    )
    .await;
    let m = rejected(&e);
    assert!(m.contains("closed the connection during the TLS handshake"), "{m}");
}

#[tokio::test]
async fn a_tls_client_at_a_plain_cql_port_is_told_the_node_answered_in_plain_text() {
    let pki = TestPki::new("cassandra-plain-cql");
    let server = Server::plain(Then::Cql).await;
    let (e, _) = refusal(
        "TLS at a plain CQL port",
        config(&server.node(), Some(TlsFiles::trusting(pki.ca_file()))),
    )
    .await;
    let m = rejected(&e);
    assert!(m.contains("received corrupt message"), "{m}");
    assert!(m.contains("did not answer in TLS: a plain CQL port"), "{m}");
}

#[tokio::test]
async fn a_trusted_server_that_is_not_cassandra_is_named_as_such() {
    let pki = TestPki::new("cassandra-not-cql");
    let server = Server::tls(pki.server(), None, Then::NotCql).await;
    let tls = Some(TlsFiles::trusting(pki.ca_file()));
    let (e, _) = refusal("trusted, not CQL", config(&server.node(), tls)).await;
    let m = rejected(&e);
    assert!(m.contains("the TLS handshake succeeded"), "{m}");
    assert!(m.contains("not CQL (first byte 0x2d)"), "{m}");
}

#[tokio::test]
async fn a_trusted_server_that_never_answers_cql_fails_at_the_connect_timeout() {
    let pki = TestPki::new("cassandra-mute");
    let server = Server::tls(pki.server(), None, Then::Silent).await;
    let tls = Some(TlsFiles::trusting(pki.ca_file()));
    let (e, took) = refusal("trusted, silent", config(&server.node(), tls)).await;
    let m = unreachable(&e);
    assert!(m.contains("the TLS handshake succeeded, but a CQL OPTIONS request got no answer"));
    assert!(took >= CONNECT && took < CONNECT + Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn a_node_requiring_a_client_certificate_says_so_to_a_client_without_one() {
    let pki = TestPki::new("cassandra-mtls");
    let server = Server::tls(pki.server(), Some(pki.ca_file()), Then::Cql).await;
    let tls = Some(TlsFiles::trusting(pki.ca_file()));
    let (e, _) = refusal("client certificate required", config(&server.node(), tls)).await;
    let m = rejected(&e);
    assert!(m.contains("CertificateRequired"), "{m}");
    assert!(m.contains("requires a client certificate"), "{m}");
    assert!(m.contains("client certificate (none)"), "{m}");
}

#[tokio::test]
async fn a_client_certificate_of_another_ca_is_refused_by_the_node() {
    let (pki, other) = (TestPki::new("cassandra-mtls2"), TestPki::new("cassandra-stranger"));
    let server = Server::tls(pki.server(), Some(pki.ca_file()), Then::Cql).await;
    let stranger = other.client("stranger");
    let tls = TlsFiles::trusting(pki.ca_file()).with_identity(&stranger.cert, &stranger.key);
    let (e, _) =
        refusal("client certificate of another CA", config(&server.node(), Some(tls))).await;
    let m = rejected(&e);
    assert!(m.contains("refused the client's certificate"), "{m}");
    assert!(m.contains("client-stranger.pem"), "{m}");
}

#[tokio::test]
async fn a_plain_client_at_a_tls_port_is_told_the_port_speaks_tls() {
    let pki = TestPki::new("cassandra-plain-client");
    let server = Server::tls(pki.server(), None, Then::Cql).await;
    let (e, _) = refusal("plain client at a TLS port", config(&server.node(), None)).await;
    let m = rejected(&e);
    assert!(m.contains(&format!("node {} speaks TLS there", server.node())), "{m}");
    assert!(m.contains("LOCK_CASSANDRA_CA"), "{m}");
}

/// Past the probe, the driver speaks CQL over TLS to the node (its `OPTIONS` is the second the
/// server answers; the probe's was the first); the test server then refuses its `STARTUP`.
async fn the_driver_speaks_cql_over_tls(server: &Server, tls: TlsFiles) {
    let (e, _) = refusal("trusted, then STARTUP refused", config(&server.node(), Some(tls))).await;
    assert!(e.to_string().contains("a test server, not Cassandra"), "{e}");
    assert!(server.options.load(Ordering::SeqCst) >= 2, "{e}");
}

#[tokio::test]
async fn a_trusted_handshake_hands_the_node_to_the_driver_over_tls() {
    let pki = TestPki::new("cassandra-trusted");
    let server = Server::tls(pki.server(), None, Then::Cql).await;
    the_driver_speaks_cql_over_tls(&server, TlsFiles::trusting(pki.ca_file())).await;
}

#[tokio::test]
async fn mutual_tls_hands_the_node_to_the_driver_with_the_client_certificate() {
    let pki = TestPki::new("cassandra-mutual");
    let server = Server::tls(pki.server(), Some(pki.ca_file()), Then::Cql).await;
    let me = pki.client("locker");
    let tls = TlsFiles::trusting(pki.ca_file()).with_identity(&me.cert, &me.key);
    the_driver_speaks_cql_over_tls(&server, tls).await;
}

#[tokio::test]
async fn a_missing_ca_file_is_a_config_error_before_any_connection() {
    let server = Server::plain(Then::Cql).await;
    let missing = TlsFiles::trusting("/nonexistent/cassandra-ca.pem");
    let (e, took) = refusal("missing CA file", config(&server.node(), Some(missing))).await;
    let m = rejected(&e);
    assert!(m.contains("/nonexistent/cassandra-ca.pem"), "{m}");
    assert!(took < Duration::from_millis(100), "{took:?}");
    assert_eq!(server.options.load(Ordering::SeqCst), 0);
}

// ---- the conformance suite over TLS, on a cluster the user names ----

fn cluster_with_ca_named() -> Result<(), String> {
    let set = |name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    match (set(ENV_TEST_NODES), set(ENV_TEST_CA)) {
        (true, true) => Ok(()),
        _ => Err(format!(
            "{ENV_TEST_NODES} and {ENV_TEST_CA} not both set: Cassandra conformance suite over \
             TLS not run"
        )),
    }
}

async fn fixture(seed: u64, build: lock_cassandra::fixture::BuildLocker) -> CassandraFixture {
    let fixture = CassandraFixture::from_test_env_tls(seed, move |c, ctx| build(c, ctx))
        .await
        .unwrap_or_else(|e| {
            panic!("cannot reach the cluster named by {ENV_TEST_NODES} over TLS: {e}")
        })
        .expect("checked by run_if");
    assert!(fixture.store().config().tls.is_some(), "the suite must run over TLS");
    fixture
}

mod over_tls {
    use super::*;
    every_lock!(fixture, cluster_with_ca_named());
}
