//! TLS (`rediss://`): the one place the crate makes the driver's clients, so that
//! every connection (one server, each Redlock master, the Sentinels and the master they name)
//! speaks TLS the same way, and what a failed handshake means in words a user can act on.
//!
//! - **Which connections speak TLS**: to one server or a Redlock master, those of a
//!   `rediss://` URL; through Sentinel, the Sentinels and the master alike when
//!   [`RedisConnectConfig::tls`] is set or the Sentinels' addresses are `rediss://`. A
//!   `redis://` URL with `tls` set is refused ([`LockError::Config`]): the two say different
//!   things, and neither silently wins.
//! - **What it trusts**: [`RedisConnectConfig::tls`]'s CA file, read when the backend is made
//!   (a missing or unreadable file is a [`LockError::Config`] naming it), or without it the
//!   system's roots; it presents the client certificate and key of the same files when they
//!   are given (mutual TLS, `tls-auth-clients yes`). The host name of the URL (or the address
//!   a Sentinel names) must be in the server's certificate. `rediss://...#insecure` (no
//!   verification) is refused.
//! - **rustls, its crypto from `ring`**: the driver builds its rustls configuration with the
//!   process's default crypto provider, so the first TLS client the crate makes installs
//!   `ring`'s as that default, unless the process has chosen one already (then that one is
//!   used). Without a default, rustls would refuse to choose when a build enables both of its
//!   providers (another crate of the process asking for `aws-lc-rs`).
//!
//! **A refusal is not an outage** ([`crate::link`]): a handshake refused for a certificate (the
//! server's from a CA the client does not trust, or for another host; the client's missing or
//! refused), or a port that does not speak what the client speaks, fails the attempt as
//! refused ([`AttemptError::Refused`]), naming the peer and what was refused, and the next
//! attempt waits the longest reconnect delay. The driver hands rustls's error over as text
//! only (inside an I/O error), so it is recognised by rustls's words, which are quoted.
//! Two mismatches show only as what an outage can look like too, and are told apart by asking
//! the port once more, sending nothing of the backend's (no credentials, no certificate):
//! - a plain client at a TLS-only port sees its connection closed before any answer: the
//!   attempt tries a TLS handshake at the same port, and a server that answers it with a
//!   certificate speaks TLS there ([`speaks_tls`]);
//! - a TLS client at a plain port gets no answer at all (Redis reads the ClientHello as an
//!   inline command whose line never ends) and times out after the connect timeout: the
//!   attempt sends the port a plain `PING`, and a RESP answer (`+PONG`, `-NOAUTH`) means it
//!   speaks plain Redis there ([`speaks_plain`]).

use crate::attempt::{attempt_error, refused, AttemptError};
use crate::RedisConnectConfig;
use lock_core::LockError;
use redis::{ClientTlsConfig, ConnectionAddr, ConnectionInfo, RedisError, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use std::time::Duration;

/// How the backend's connections speak, decided once from [`RedisConnectConfig::tls`].
#[derive(Clone)]
pub(crate) struct Transport {
    /// The certificates of [`RedisConnectConfig::tls`], read; `None` when it is not set (a
    /// `rediss://` address then trusts the system's roots and presents no certificate).
    certs: Option<TlsCertificates>,
}

impl Transport {
    /// The transport of `config`: its TLS files read and parsed now, so that a missing,
    /// unreadable or unusable one fails the backend's making with a [`LockError::Config`]
    /// naming it.
    pub(crate) fn new(config: &RedisConnectConfig) -> Result<Transport, LockError> {
        let Some(files) = &config.tls else { return Ok(Transport { certs: None }) };
        let bad = |e: String| LockError::Config(format!("RedisConnectConfig::tls: {e}"));
        let root_cert = files.read_ca().map_err(bad)?;
        if let (Some(pem), Some(path)) = (&root_cert, &files.ca) {
            check_ca(pem).map_err(|e| bad(format!("the CA file {}: {e}", path.display())))?;
        }
        let identity = files.read_identity().map_err(bad)?;
        if let (Some(identity), Some(cert), Some(key)) = (&identity, &files.cert, &files.key) {
            let chain =
                CertificateDer::pem_slice_iter(&identity.cert).collect::<Result<Vec<_>, _>>();
            chain.map_err(|e| {
                bad(format!("the client certificate {} is not usable: {e}", cert.display()))
            })?;
            // The error names the file, never the key's bytes.
            PrivateKeyDer::from_pem_slice(&identity.key)
                .map_err(|e| bad(format!("the client key {} is not usable: {e}", key.display())))?;
        }
        let client_tls = identity.map(|identity| ClientTlsConfig {
            client_cert: identity.cert.clone(),
            client_key: identity.key.clone(),
        });
        Ok(Transport { certs: Some(TlsCertificates { client_tls, root_cert }) })
    }

    /// A plain transport (the Sentinels' own tests).
    #[cfg(test)]
    pub(crate) fn plain() -> Transport {
        Transport { certs: None }
    }

    /// Whether [`RedisConnectConfig::tls`] is set.
    pub(crate) fn configured(&self) -> bool {
        self.certs.is_some()
    }

    /// The address `host:port` (a Sentinel's, or the master a Sentinel names), TLS or not.
    pub(crate) fn addr(host: &str, port: u16, tls: bool) -> ConnectionAddr {
        match tls {
            true => ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: false,
                tls_params: None,
            },
            false => ConnectionAddr::Tcp(host.to_string(), port),
        }
    }

    /// The driver's client for `info` (its settings already made: credentials, protocol):
    /// TLS with this transport's certificates when the address is TLS. The one function that
    /// makes a client; an error says why, for the caller to name the address.
    pub(crate) fn client(&self, info: ConnectionInfo) -> Result<redis::Client, String> {
        let made = match (info.addr(), &self.certs) {
            (ConnectionAddr::TcpTls { insecure: true, .. }, _) => {
                return Err("'#insecure' (a TLS connection that checks no certificate) is not \
                            supported: give RedisConnectConfig::tls the server's CA instead"
                    .into())
            }
            (ConnectionAddr::TcpTls { .. }, Some(certs)) => {
                default_provider();
                redis::Client::build_with_tls(info, certs.clone())
            }
            (ConnectionAddr::TcpTls { .. }, None) => {
                default_provider();
                redis::Client::open(info)
            }
            (_, Some(_)) => {
                return Err("RedisConnectConfig::tls is set but the address is not TLS: use a \
                            rediss:// URL (or leave tls unset for a plain connection)"
                    .into())
            }
            (_, None) => redis::Client::open(info),
        };
        made.map_err(|e| e.to_string())
    }
}

/// Whether the CA file's bytes `pem` hold certificates a client can trust.
fn check_ca(pem: &[u8]) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("is not usable: {e}"))?;
        roots.add(cert).map_err(|e| format!("holds a certificate that is not usable: {e}"))?;
    }
    Ok(())
}

/// Make `ring`'s the process's default crypto provider, unless one is chosen already.
fn default_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Err: another thread installed one meanwhile, which the driver then uses.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// `e`, met at `step` of a connect attempt by `client`, as the attempt's error: a TLS
/// refusal (see the module docs) or a plain client at a port that speaks TLS is
/// [`AttemptError::Refused`], naming the peer; otherwise as [`attempt_error`] says. `bound`
/// bounds the TLS handshake that tells a TLS port from an outage.
pub(crate) async fn connect_error(
    e: &RedisError,
    step: &str,
    client: &redis::Client,
    bound: Duration,
) -> AttemptError {
    match refused_by_tls(e, client.get_connection_info().addr(), bound).await {
        Some(why) => AttemptError::Refused(refused(why, e)),
        None => attempt_error(e, step),
    }
}

/// What `e`, met connecting to `addr`, says was refused, when it is a TLS refusal or a
/// disagreement between client and port on TLS (each port probe bounded by `bound`).
async fn refused_by_tls(e: &RedisError, addr: &ConnectionAddr, bound: Duration) -> Option<String> {
    match addr {
        ConnectionAddr::TcpTls { host, port, .. } => {
            let peer = peer(host, *port);
            if let Some(why) = tls_refusal(&e.to_string(), &peer) {
                return Some(why);
            }
            // Redis reads a ClientHello as an inline command that never ends (no newline
            // before its first zero byte), so a TLS client at a plain port only times out.
            let plain = e.is_timeout()
                && tokio::time::timeout(bound, speaks_plain(host, *port)).await.unwrap_or(false);
            plain.then(|| {
                format!(
                    "TLS handshake with {peer} failed: no answer ({e}), and the port answers a \
                     plain PING: the server does not speak TLS on this port; use a redis:// \
                     URL, or the server's tls-port"
                )
            })
        }
        ConnectionAddr::Tcp(host, port) if closed_unanswered(e) => {
            let tls = tokio::time::timeout(bound, speaks_tls(host, *port)).await.unwrap_or(false);
            tls.then(|| {
                format!(
                    "{} closed a plain connection ({e}) and answers a TLS handshake: the server \
                     speaks only TLS on this port; use a rediss:// URL (and \
                     RedisConnectConfig::tls for a private CA)",
                    peer(host, *port)
                )
            })
        }
        _ => None,
    }
}

/// `host:port`, IPv6 hosts in brackets.
fn peer(host: &str, port: u16) -> String {
    match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

/// Whether `e` says the server closed the connection before answering: what a TLS-only port
/// does to a plain client (OpenSSL resets a connection whose first bytes are no TLS record).
fn closed_unanswered(e: &RedisError) -> bool {
    let said = e.to_string().to_lowercase();
    let closed = ["reset by peer", "broken pipe", "connection closed", "end of file"];
    (e.is_connection_dropped() && !e.is_connection_refusal())
        || closed.iter().any(|s| said.contains(s))
}

/// What a TLS connection's failure `said` (the driver's text, rustls's words inside) means,
/// when it is a refusal: the handshake with `peer` refused a certificate, or the peer does not
/// speak TLS. `None`: not a TLS refusal (an outage, a timeout, a server's error reply).
pub(crate) fn tls_refusal(said: &str, peer: &str) -> Option<String> {
    let why = if said.contains("invalid peer certificate: UnknownIssuer") {
        "the server's certificate is not signed by a CA the client trusts \
         (RedisConnectConfig::tls's CA file, or the system's roots without one)"
    } else if said.contains("invalid peer certificate: certificate not valid for name") {
        "the server's certificate is not valid for the host the client connected to (the \
         URL's host, or the address a Sentinel named)"
    } else if said.contains("invalid peer certificate") {
        "the client refused the server's certificate"
    } else if said.contains("received fatal alert: CertificateRequired") {
        "the server requires a client certificate (tls-auth-clients yes): give \
         RedisConnectConfig::tls a certificate and key (TlsFiles::with_identity)"
    } else if ["UnknownCA", "BadCertificate", "CertificateUnknown", "DecryptError"]
        .iter()
        .any(|alert| said.contains(&format!("received fatal alert: {alert}")))
    {
        "the server refused the client's certificate (not signed by a CA the server trusts, \
         tls-ca-cert-file, or not valid)"
    } else if said.contains("received fatal alert") {
        "the server ended the handshake"
    } else if said.contains("received corrupt message")
        || said.contains("peer is incompatible")
        || said.contains("peer misbehaved")
    {
        "the server does not speak TLS on this port (it answered in plain text, or not in \
         TLS): use a redis:// URL, or the server's tls-port"
    } else {
        return None;
    };
    Some(format!("TLS handshake with {peer} failed: {said}: {why}"))
}

/// Whether the server at `host:port` answers a plain `PING` in RESP (`+PONG`, or an error
/// such as `-NOAUTH`): it speaks plain Redis on this port. Nothing of the backend's is sent.
async fn speaks_plain(host: &str, port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut tcp) = tokio::net::TcpStream::connect((host, port)).await else { return false };
    if tcp.write_all(b"*1\r\n$4\r\nPING\r\n").await.is_err() {
        return false;
    }
    let mut first = [0u8; 1];
    matches!(tcp.read(&mut first).await, Ok(1) if matches!(first[0], b'+' | b'-'))
}

/// Whether the server at `host:port` answers a TLS handshake with a certificate: a client
/// that trusts no CA at all meets it, so any server that speaks TLS there refuses with
/// `UnknownIssuer` (nothing of the backend's is sent: no certificate, no credentials).
async fn speaks_tls(host: &str, port: u16) -> bool {
    let Ok(name) = rustls::pki_types::ServerName::try_from(host.to_string()) else {
        return false;
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth());
    let Ok(config) = config else { return false };
    let Ok(tcp) = tokio::net::TcpStream::connect((host, port)).await else { return false };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    match connector.connect(name, tcp).await {
        Ok(_) => true, // cannot happen without a root, but it would be TLS
        Err(e) => e.to_string().contains("invalid peer certificate"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    #[test]
    fn refusals_are_recognised_by_rustls_words() {
        let peer = "127.0.0.1:6380";
        let unknown = tls_refusal("invalid peer certificate: UnknownIssuer", peer).unwrap();
        assert!(unknown.starts_with("TLS handshake with 127.0.0.1:6380 failed: invalid peer"));
        assert!(unknown.contains("not signed by a CA the client trusts"), "{unknown}");
        let name = "invalid peer certificate: certificate not valid for name \"localhost\"";
        assert!(tls_refusal(name, peer).unwrap().contains("not valid for the host"));
        let required = "received fatal alert: CertificateRequired";
        assert!(tls_refusal(required, peer).unwrap().contains("requires a client certificate"));
        let plain = "received corrupt message of type InvalidContentType";
        assert!(tls_refusal(plain, peer).unwrap().contains("does not speak TLS"));
        assert!(tls_refusal("Connection refused (os error 111)", peer).is_none());
        assert!(tls_refusal("timed out", peer).is_none());
    }

    #[test]
    fn a_plain_url_with_tls_set_and_insecure_urls_are_refused() {
        let dir = std::env::temp_dir().join(format!("lock-redis-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n")
            .unwrap();
        let files = lock_core::tls::TlsFiles::trusting(&ca);
        let config = RedisConnectConfig { tls: Some(files), ..RedisConnectConfig::default() };
        // A PEM block that holds no certificate is refused, naming the file.
        let Err(LockError::Config(e)) = Transport::new(&config) else { panic!("accepted") };
        assert!(e.contains("ca.pem") && e.contains("not usable"), "{e}");
        // Without a CA file (the system's roots) the rest can be checked.
        let transport =
            Transport { certs: Some(TlsCertificates { client_tls: None, root_cert: None }) };
        assert!(transport.configured());
        let plain = "redis://127.0.0.1:1/".into_connection_info().unwrap();
        assert!(transport.client(plain).unwrap_err().contains("use a rediss:// URL"));
        let insecure = "rediss://127.0.0.1:1/#insecure".into_connection_info().unwrap();
        assert!(transport.client(insecure).unwrap_err().contains("#insecure"));
        let none = Transport::new(&RedisConnectConfig::default()).unwrap();
        let system_roots = "rediss://127.0.0.1:1/".into_connection_info().unwrap();
        assert!(none.client(system_roots).is_ok());
        let missing = RedisConnectConfig {
            tls: Some(lock_core::tls::TlsFiles::trusting(dir.join("nope.pem"))),
            ..RedisConnectConfig::default()
        };
        let Err(LockError::Config(e)) = Transport::new(&missing) else { panic!("refused") };
        assert!(e.contains("nope.pem"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
