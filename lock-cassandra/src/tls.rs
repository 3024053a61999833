//! TLS to the nodes: the driver's rustls configuration made from
//! [`CassandraConfig::tls`](crate::CassandraConfig::tls), a probe of every contact point before
//! the session is built, and a plain client at a TLS port put in words (crate docs, "TLS").
//!
//! - **The configuration** trusts the CA file alone (this build has no system roots), presents
//!   the client certificate when one is given, and is built on `ring`'s provider explicitly:
//!   rustls's process default is ambiguous once another dependency brings aws-lc-rs, and
//!   `ClientConfig::builder()` then panics.
//! - **Why a probe.** The driver (scylla 1.9, `rustls-023`) bounds only the TCP connect by
//!   its connect timeout, not the handshake: a node that never answers the handshake, or a
//!   TLS server that says nothing to CQL, holds the session's making (the driver alone
//!   does not give up at its connect timeout; our deadline ends it at the connect timeout +
//!   5 s, as an unexplained timeout). Its other errors carry rustls's words but not the node, nor
//!   what they mean (a TLS server that is not a CQL port: "Received frame marked as coming
//!   from a client"). So before building the session, `preflight` does what the driver will
//!   do with each contact point (TCP, the handshake against the node's IP address, a CQL
//!   `OPTIONS` request, nothing of the user's: no credentials), all within the connect
//!   timeout, and turns a refusal into an error naming the node and what was refused. It
//!   costs one connection per contact point at connect time, never per request.
//! - **A plain client at a TLS port** sees its connection closed at its first bytes, which
//!   the driver reports as an outage. After such a failure, `plain_at_tls_port` tries a
//!   handshake trusting no CA (nothing of the user's is sent): a node that shows a
//!   certificate speaks TLS there.

use crate::errors;
use lock_core::store::StoreError;
use lock_core::tls::TlsFiles;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::ClientConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsConnector;

/// A CQL `OPTIONS` request, protocol v4, stream 0: what the driver sends first on every
/// connection. Its answer (`SUPPORTED`, or an `ERROR` naming the versions the node speaks)
/// starts with a response byte `0x80 | version`.
const OPTIONS_V4: [u8; 9] = [0x04, 0, 0, 0, 0x05, 0, 0, 0, 0];

/// How long a probe for TLS on a port that closed a plain client may take.
const PLAIN_PROBE: Duration = Duration::from_secs(2);

/// ring's provider: every rustls config of this crate is built on it (module docs).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The driver's TLS configuration for `files`: their CA alone as roots, their certificate and
/// key for mutual TLS. An error names the file at fault; a key's bytes are never in it. (A
/// `String`, which [`CassandraConfig::validate`](crate::CassandraConfig::validate) turns into a
/// [`ConfigError`](crate::ConfigError) naming the field, and the environment its variables.)
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, String> {
    let Some(ca) = files.read_ca()? else {
        return Err(
            "no CA file: give the CA that signed the nodes' certificates \
                    (TlsFiles::trusting, or LOCK_CASSANDRA_CA; this build trusts no system roots)"
                .into(),
        );
    };
    let unusable =
        |e: &dyn std::fmt::Display| format!("the CA file {} is not usable: {e}", shown(&files.ca));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.map_err(|e| unusable(&e))?).map_err(|e| unusable(&e))?;
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("ring offers no TLS version: {e}"))?
        .with_root_certificates(roots);
    let config = match identity(files)? {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
            format!(
                "the client certificate {} and key {} are not usable together: {e}",
                shown(&files.cert),
                shown(&files.key)
            )
        })?,
    };
    Ok(Arc::new(config))
}

/// A client's certificate chain and private key, parsed.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The client's certificate chain and key, parsed; `None` when none is given.
fn identity(files: &TlsFiles) -> Result<Option<Identity>, String> {
    let Some(id) = files.read_identity()? else { return Ok(None) };
    let chain = CertificateDer::pem_slice_iter(&id.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the client certificate {} is not usable: {e}", shown(&files.cert)))?;
    let key = PrivateKeyDer::from_pem_slice(&id.key)
        .map_err(|e| format!("the client key {} is not usable: {e}", shown(&files.key)))?;
    Ok(Some((chain, key)))
}

fn shown(path: &Option<std::path::PathBuf>) -> String {
    path.as_ref().map_or_else(|| "(none)".to_string(), |p| p.display().to_string())
}

/// What one address of a contact point did with the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// It answered the `OPTIONS` request in CQL, over TLS: the driver will get in.
    Cql,
    /// It refused the handshake, or is not a CQL port: the message says which.
    Refused(String),
    /// It accepted the TCP connection and then said nothing within the connect timeout.
    Silent(String),
    /// No TCP connection (or no address): an outage, which the driver reports as usual.
    Unreachable,
}

/// Probe every contact point in `nodes` (module docs), each address within `within`, all at
/// once. `Ok` when one answered in CQL and none refused, or when none could be reached at all
/// (the driver then says so as it always has); otherwise the refusals and silences, each
/// naming its node, as [`StoreError::Rejected`] (any refusal) or [`StoreError::Unreachable`]
/// (silence only).
pub(crate) async fn preflight(
    nodes: &[String],
    config: &Arc<ClientConfig>,
    files: &TlsFiles,
    within: Duration,
) -> Result<(), StoreError> {
    let mut probes = tokio::task::JoinSet::new();
    for node in nodes {
        let (node, config) = (node.clone(), config.clone());
        probes.spawn(async move { probe_node(&node, config, within).await });
    }
    let answers: Vec<(String, Answer)> = probes.join_all().await.into_iter().flatten().collect();
    let refused = answers.iter().any(|(_, a)| matches!(a, Answer::Refused(_)));
    let answered = answers.iter().any(|(_, a)| *a == Answer::Cql);
    let words: Vec<String> = answers
        .into_iter()
        .filter_map(|(addr, a)| match a {
            Answer::Refused(why) | Answer::Silent(why) => Some(format!("{addr}: {why}")),
            Answer::Cql | Answer::Unreachable => None,
        })
        .collect();
    if words.is_empty() || (answered && !refused) {
        return Ok(());
    }
    let said = format!(
        "TLS to the cluster failed (tried a TLS handshake and a CQL OPTIONS request with each \
         contact point; CA file {}, client certificate {}): {}",
        shown(&files.ca),
        shown(&files.cert),
        words.join("; ")
    );
    Err(match refused {
        true => StoreError::Rejected(said),
        false => StoreError::Unreachable(said),
    })
}

/// The answers of every address `node` (`host:port`) resolves to, probed at once, each named
/// `node host:port (ip:port)` when the node is a host name.
async fn probe_node(
    node: &str,
    config: Arc<ClientConfig>,
    within: Duration,
) -> Vec<(String, Answer)> {
    let Ok(Ok(addrs)) = tokio::time::timeout(within, tokio::net::lookup_host(node)).await else {
        return vec![(node.to_string(), Answer::Unreachable)];
    };
    let mut probes = tokio::task::JoinSet::new();
    for addr in addrs {
        let name = match node == addr.to_string() {
            true => format!("node {node}"),
            false => format!("node {node} ({addr})"),
        };
        let config = config.clone();
        probes.spawn(async move { (name, probe(addr, config, within).await) });
    }
    probes.join_all().await
}

/// TCP, the handshake, `OPTIONS`, all before `within` has passed.
async fn probe(addr: SocketAddr, config: Arc<ClientConfig>, within: Duration) -> Answer {
    let deadline = Instant::now() + within;
    let Ok(Ok(tcp)) = timeout_at(deadline, tokio::net::TcpStream::connect(addr)).await else {
        return Answer::Unreachable;
    };
    // What the driver verifies: the certificate against the IP address it dials, whatever
    // host name the contact point had.
    let name = ServerName::IpAddress(addr.ip().into());
    let mut stream = match timeout_at(deadline, TlsConnector::from(config).connect(name, tcp)).await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Answer::Refused(handshake_failed(&e)),
        Err(_) => {
            return Answer::Silent(format!(
                "no answer to the TLS handshake within {within:?} (the connect timeout): a \
                 hung node, or a port that does not speak TLS and waits for more bytes (check \
                 that it is the node's TLS port)"
            ))
        }
    };
    match timeout_at(deadline, ask_options(&mut stream)).await {
        Ok(Ok(first)) if (0x81..=0x86).contains(&first) => Answer::Cql,
        Ok(Ok(first)) => Answer::Refused(format!(
            "the TLS handshake succeeded, but the answer to a CQL OPTIONS request is not CQL \
             (first byte {first:#04x}): this port is not a CQL native-protocol port"
        )),
        Ok(Err(e)) => Answer::Refused(after_handshake(&e)),
        Err(_) => Answer::Silent(format!(
            "the TLS handshake succeeded, but a CQL OPTIONS request got no answer within \
             {within:?} (the connect timeout): is this port a CQL native-protocol port?"
        )),
    }
}

/// Send `OPTIONS`, flush, and read the first byte of the answer.
async fn ask_options<S>(stream: &mut S) -> std::io::Result<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(&OPTIONS_V4).await?;
    stream.flush().await?;
    stream.read_u8().await
}

/// "the TLS handshake failed: <rustls's words>: <what they mean>".
fn handshake_failed(e: &std::io::Error) -> String {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    let said = e.to_string();
    let hint = match e.kind() {
        // A plain port hangs up (or resets, with the ClientHello unread) instead of answering.
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
            errors::tls_hint("tls handshake eof")
        }
        _ => errors::tls_hint(&said),
    };
    match hint {
        Some(hint) => format!("the TLS handshake failed: {said}: {hint}"),
        None => format!("the TLS handshake failed: {said}"),
    }
}

/// A read after the handshake failed: an alert (the node refused the client's certificate, or
/// its lack of one, which TLS 1.3 tells only now) or a closed connection.
fn after_handshake(e: &std::io::Error) -> String {
    let said = e.to_string();
    if let Some(hint) = errors::tls_hint(&said) {
        return format!("the node ended the TLS session after the handshake: {said}: {hint}");
    }
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "the TLS handshake succeeded, but the node closed \
             the connection without answering a CQL OPTIONS request: not a CQL native-protocol \
             port, or a node that refused the client's certificate without saying why"
            .to_string(),
        _ => format!("the TLS handshake succeeded, then a CQL OPTIONS request failed: {said}"),
    }
}

/// After a plain client's connect failed with `failure`: why, if every contact point speaks TLS
/// (a handshake trusting no CA shows a certificate). `None` otherwise, or when the failure is
/// no closed connection (a refused TCP connect, a timeout, the server's own error).
pub(crate) async fn plain_at_tls_port(nodes: &[String], failure: &str) -> Option<String> {
    if !errors::closed_connection(failure) {
        return None;
    }
    let mut probes = tokio::task::JoinSet::new();
    for node in nodes {
        let node = node.clone();
        probes.spawn(async move { shows_certificate(&node).await });
    }
    let all = probes.join_all().await.into_iter().all(|tls| tls);
    all.then(|| {
        format!(
            "the cluster closed every plain connection ({failure}), and {} TLS there (a \
             handshake showed a certificate): give CassandraConfig::tls the CA that signed the \
             nodes' certificates (LOCK_CASSANDRA_CA), or use the nodes' plain CQL port",
            match nodes.len() {
                1 => format!("node {} speaks", nodes[0]),
                _ => format!("every contact point ({}) speaks", nodes.join(", ")),
            }
        )
    })
}

/// Whether `node` answers a TLS handshake with a certificate: trusting no CA, the client
/// refuses whatever it shows, with `invalid peer certificate`. Bounded by [`PLAIN_PROBE`].
async fn shows_certificate(node: &str) -> bool {
    let trusting_nothing = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth());
    let Ok(config) = trusting_nothing else { return false };
    let connector = TlsConnector::from(Arc::new(config));
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect(node).await?;
        let ip = tcp.peer_addr()?.ip();
        connector.connect(ServerName::IpAddress(ip.into()), tcp).await
    };
    match tokio::time::timeout(PLAIN_PROBE, handshake).await {
        Ok(Err(e)) => e.to_string().contains("invalid peer certificate"),
        Ok(Ok(_)) | Err(_) => false, // no root: a success cannot happen; silence is no proof
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("lock-cassandra-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_config_needs_a_ca_and_names_every_unusable_file() {
        let dir = dir("unit");
        let no_ca = TlsFiles::default().with_identity(dir.join("c.pem"), dir.join("k.pem"));
        assert!(client_config(&no_ca).unwrap_err().contains("no CA file"));
        let missing = TlsFiles::trusting(dir.join("nope.pem"));
        let e = client_config(&missing).unwrap_err();
        assert!(e.contains("nope.pem"), "{e}");
        // A PEM block that holds no certificate.
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n")
            .unwrap();
        let e = client_config(&TlsFiles::trusting(&junk)).unwrap_err();
        assert!(e.contains("junk.pem") && e.contains("not usable"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_real_ca_and_identity_make_a_config_and_a_foreign_key_is_refused() {
        let pki = test_servers::TestPki::new("cassandra-unit");
        let alice = pki.client("alice");
        let files = TlsFiles::trusting(pki.ca_file()).with_identity(&alice.cert, &alice.key);
        assert!(client_config(&files).is_ok());
        assert!(client_config(&TlsFiles::trusting(pki.ca_file())).is_ok());
        let bob = pki.client("bob");
        let crossed = TlsFiles::trusting(pki.ca_file()).with_identity(&alice.cert, &bob.key);
        let e = client_config(&crossed).unwrap_err();
        assert!(e.contains("client-alice.pem") && e.contains("client-bob-key.pem"), "{e}");
        assert!(!e.contains("PRIVATE KEY"), "{e}");
    }
}
