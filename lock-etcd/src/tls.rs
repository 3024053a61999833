//! TLS to etcd: the endpoints checked against [`EtcdConfig::tls`], the client's TLS settings
//! (the CA it trusts, the certificate it presents), and a failed connection put in words.
//!
//! `etcd-client` speaks TLS through tonic's rustls (`tonic/tls-ring`): the handshake happens
//! when the channel first connects, which is the first request, so a refused handshake
//! reaches us as a request's error, its cause (rustls's) several sources down. [`refusal`]
//! finds it and says what was refused, and what to change; the caller adds nothing that could
//! hold a secret (a key is never read into a message, a password never enters this module).

use crate::EtcdConfig;
use etcd_client::ConnectOptions;
use lock_core::tls::TlsFiles;
use lock_core::{BackendErrorKind, LockError};
use std::error::Error as StdError;

/// `options` with the TLS of `config`, checked against the endpoints of `list`: `https://`
/// endpoints need [`EtcdConfig::tls`] with a CA, and [`EtcdConfig::tls`] needs `https://` (or
/// scheme-less) endpoints. Reads the files; an unreadable one is a [`LockError::Config`]
/// naming it.
pub(crate) fn apply(
    list: &[&str],
    config: &EtcdConfig,
    options: ConnectOptions,
) -> Result<ConnectOptions, LockError> {
    let https = list.iter().find(|e| e.starts_with("https://"));
    let http = list.iter().find(|e| e.starts_with("http://"));
    let Some(tls) = &config.tls else {
        return match https {
            Some(e) => Err(LockError::Config(format!(
                "etcd endpoint {e} is https:// but EtcdConfig::tls is not set: give it the CA \
                 that signed the server's certificate (lock_core::tls::TlsFiles::trusting)"
            ))),
            None => Ok(options),
        };
    };
    if let Some(e) = http {
        return Err(LockError::Config(format!(
            "etcd endpoint {e} is plain http:// while EtcdConfig::tls is set: use https://{}",
            e.trim_start_matches("http://")
        )));
    }
    if tls.ca.is_none() {
        return Err(LockError::Config(
            "EtcdConfig::tls has no CA file: give the CA that signed the etcd server's \
             certificate (this build trusts no system roots)"
                .into(),
        ));
    }
    with_tls(tls, config, options)
}

/// How long a TLS handshake may take: the connect timeout, and at most half the request
/// timeout (see [`with_tls`]).
#[cfg(feature = "tls")]
fn handshake_timeout(config: &EtcdConfig) -> std::time::Duration {
    config.connect_timeout.min(config.request_timeout / 2)
}

#[cfg(feature = "tls")]
fn with_tls(
    tls: &TlsFiles,
    config: &EtcdConfig,
    options: ConnectOptions,
) -> Result<ConnectOptions, LockError> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    let ca = tls.read_ca().map_err(LockError::Config)?.unwrap_or_default();
    // The handshake is bounded on its own: tonic's connect timeout covers the TCP connect only.
    // Half the request timeout at most, so that a silent server is reported as a handshake
    // that timed out rather than as the first request's own timeout, which would otherwise
    // expire at the same moment (a race the fresh-clone CI lost once).
    let mut options_tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca))
        .timeout(handshake_timeout(config));
    if let Some(identity) = tls.read_identity().map_err(LockError::Config)? {
        options_tls = options_tls.identity(Identity::from_pem(&identity.cert, &identity.key));
    }
    Ok(options.with_tls(options_tls))
}

#[cfg(not(feature = "tls"))]
fn with_tls(
    tls: &TlsFiles,
    _config: &EtcdConfig,
    _options: ConnectOptions,
) -> Result<ConnectOptions, LockError> {
    let _ = tls;
    Err(LockError::Config(
        "EtcdConfig::tls is set but lock-etcd was built without its `tls` feature".into(),
    ))
}

/// A failed request's words: for a gRPC status, its sources' and then its message, unless
/// they said it already (tonic's display of a status quotes its source's debug form, which is
/// not for people); otherwise the chain of `e`'s sources.
pub(crate) fn words(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => match s.source() {
            Some(source) => {
                let sources = chain(source);
                match sources.contains(s.message()) {
                    true => sources,
                    false => format!("{sources}: {}", s.message()),
                }
            }
            None => s.message().to_string(),
        },
        other => chain(other),
    }
}

/// `first`, then every message of the chain from `next`, joined by `: `, each once (tonic
/// and hyper repeat their sources' words in their own).
fn joined(first: String, mut next: Option<&(dyn StdError + 'static)>) -> String {
    let mut parts: Vec<String> = vec![first];
    while let Some(e) = next {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.retain(|p| !p.is_empty());
    parts.join(": ")
}

/// Every message of `e`'s chain of sources, joined by `: `, each once.
pub(crate) fn chain(e: &(dyn StdError + 'static)) -> String {
    joined(e.to_string(), e.source())
}

/// If `e`, the failure of the first request of a connection, is a refused or broken connection
/// rather than etcd's answer: what was refused, in words, naming the endpoints and the file to
/// change, and its kind (refused, or a server not reached). `None` for anything else. A dropped connection is diagnosed by a handshake of our
/// own ([`probe`]), within `within`: over TLS, because a server that refuses the client's
/// certificate, or its lack of one, says so in an alert that tonic never reads (it is writing
/// by then, and meets a broken pipe); over plain text, to learn whether the server speaks TLS.
pub(crate) async fn refusal(
    e: &etcd_client::Error,
    endpoints: &str,
    tls: Option<&TlsFiles>,
    within: std::time::Duration,
) -> Option<(BackendErrorKind, String)> {
    let refused = |why: String| Some((BackendErrorKind::Refused, why));
    let words = words(e);
    if let Some(cause) = rustls_cause(&words) {
        return refused(handshake_failed(endpoints, cause, tls));
    }
    if words.contains("tls handshake eof") {
        return refused(format!(
            "TLS handshake with {endpoints} failed: the server closed the connection during the \
             handshake (tls handshake eof): is it a plain http:// server?"
        ));
    }
    let lower = words.to_ascii_lowercase();
    let dropped = ["broken pipe", "connection reset", "connection closed", "unexpected eof"]
        .iter()
        .any(|w| lower.contains(w));
    match tls {
        Some(tls) if dropped => {
            for endpoint in endpoints.split(',') {
                if let Some(cause) = diagnose(endpoint, Some(tls), within).await {
                    return refused(handshake_failed(endpoint, &cause, Some(tls)));
                }
            }
            refused(format!(
                "etcd at {endpoints} closed the TLS connection right after the handshake ({words})"
            ))
        }
        None if dropped => {
            for endpoint in endpoints.split(',') {
                // Trusting no CA: a server that speaks TLS shows itself by its certificate.
                let said = diagnose(endpoint, None, within).await.unwrap_or_default();
                if said.contains("invalid peer certificate") {
                    let host_port = endpoint.trim().trim_start_matches("http://");
                    return refused(format!(
                        "etcd at {endpoints} closed the plain-text connection ({words}): \
                         {endpoint} speaks TLS (its handshake showed a certificate): use \
                         https://{host_port} and EtcdConfig::tls"
                    ));
                }
            }
            refused(format!(
                "etcd at {endpoints} closed the plain-text connection ({words}): if it is a TLS \
                 server, use an https:// endpoint and EtcdConfig::tls"
            ))
        }
        _ if lower.contains("transport error") || lower.contains("error trying to connect") => {
            // Not a refusal: the server was not reached.
            Some((crate::kind_of(e), format!("cannot connect to etcd at {endpoints}: {words}")))
        }
        _ => None,
    }
}

/// "TLS handshake with … failed: <rustls's words> (what it means)".
fn handshake_failed(endpoints: &str, cause: &str, tls: Option<&TlsFiles>) -> String {
    let file = |f: Option<&std::path::PathBuf>| {
        f.map_or_else(|| "none".to_string(), |p| p.display().to_string())
    };
    let ca = file(tls.and_then(|t| t.ca.as_ref()));
    let cert = tls.and_then(|t| t.cert.as_ref());
    let has = |words: &[&str]| words.iter().any(|w| cause.contains(w));
    let hint = if has(&["UnknownIssuer", "BadSignature"]) {
        format!("the server's certificate is not signed by the CA in {ca}")
    } else if has(&["NotValidForName", "not valid for name"]) {
        "the server's certificate does not name the endpoint's host".into()
    } else if has(&["Expired", "expired", "NotValidYet", "not valid yet"]) {
        "the server's certificate is not valid now".into()
    } else if has(&["CertificateRequired"]) || (cert.is_none() && has(&["BadCertificate"])) {
        match cert {
            None => "the server requires a client certificate and EtcdConfig::tls gives none: \
                     set TlsFiles::with_identity"
                .into(),
            Some(c) => {
                format!("the server wants a client certificate and did not take {}", c.display())
            }
        }
    } else if has(&["BadCertificate", "UnknownCA", "DecryptError", "CertificateUnknown"]) {
        format!(
            "the server refused the client certificate {}: is it signed by the CA the server \
             trusts (--trusted-ca-file), and for client authentication?",
            file(cert)
        )
    } else if has(&["corrupt message", "InvalidContentType"]) {
        "the server did not answer in TLS: is it a plain http:// server?".into()
    } else if has(&["unexpected end of file", "UnexpectedEof"]) {
        // A plain etcd answers a ClientHello with bytes that are not TLS, or (seen on a
        // loaded machine) closes the connection without a word.
        "the server closed the connection during the handshake: is it a plain http:// server?"
            .into()
    } else {
        return format!("TLS handshake with {endpoints} failed: {cause}");
    };
    format!("TLS handshake with {endpoints} failed: {cause} ({hint})")
}

/// rustls's own words in a chain of messages, from the first of them on.
fn rustls_cause(words: &str) -> Option<&str> {
    const RUSTLS: [&str; 6] = [
        "invalid peer certificate",
        "received fatal alert",
        "received corrupt message",
        "peer sent no certificates",
        "peer is incompatible",
        "peer misbehaved",
    ];
    RUSTLS.iter().filter_map(|w| words.find(w)).min().map(|at| &words[at..])
}

/// [`probe`] off the runtime's threads, bounded by `within`.
async fn diagnose(
    endpoint: &str,
    tls: Option<&TlsFiles>,
    within: std::time::Duration,
) -> Option<String> {
    #[cfg(feature = "tls")]
    {
        // Each step of the probe (connect, handshake, verdict) gets this much at most.
        let step = within.min(std::time::Duration::from_secs(2));
        let (endpoint, tls) = (endpoint.trim().to_string(), tls.cloned());
        let probing = tokio::task::spawn_blocking(move || probe(&endpoint, tls.as_ref(), step));
        tokio::time::timeout(within, probing).await.ok()?.ok()?
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = (endpoint, tls, within);
        None
    }
}

/// A TLS handshake of our own with `endpoint`, as the client's (same CA, same certificate,
/// same ALPN; without `tls`, trusting no CA and presenting nothing), then a moment for the
/// server's verdict: a server that refuses the client's certificate (or its lack of one) sends
/// an alert at once; one that accepts it waits for the client's first bytes, and none come.
/// rustls's words for a refusal, `None` for an accepted handshake or one we could not try.
#[cfg(feature = "tls")]
fn probe(endpoint: &str, tls: Option<&TlsFiles>, within: std::time::Duration) -> Option<String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use std::io::Read;
    use std::net::ToSocketAddrs;
    use std::sync::Arc;

    let host_port = endpoint.trim_start_matches("https://").trim_start_matches("http://");
    let host_port = host_port.trim_end_matches('/');
    let addr = host_port.to_socket_addrs().ok()?.next()?;
    let host = host_port.rsplit_once(':')?.0.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).ok()?;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(tls) = tls {
        for cert in CertificateDer::pem_slice_iter(&tls.read_ca().ok()??) {
            roots.add(cert.ok()?).ok()?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let identity = match tls {
        Some(tls) => tls.read_identity().ok()?,
        None => None,
    };
    let mut config = match identity {
        Some(id) => {
            let chain: Vec<_> =
                CertificateDer::pem_slice_iter(&id.cert).collect::<Result<_, _>>().ok()?;
            let key = PrivateKeyDer::from_pem_slice(&id.key).ok()?;
            builder.with_client_auth_cert(chain, key).ok()?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connection = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let tcp = std::net::TcpStream::connect_timeout(&addr, within).ok()?;
    tcp.set_read_timeout(Some(within)).ok()?;
    tcp.set_write_timeout(Some(within)).ok()?;
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    while stream.conn.is_handshaking() {
        if let Err(e) = stream.conn.complete_io(&mut stream.sock) {
            return Some(chain(&e));
        }
    }
    let verdict = within.min(std::time::Duration::from_secs(1));
    stream.sock.set_read_timeout(Some(verdict)).ok()?;
    match stream.read(&mut [0u8; 1]) {
        Ok(0) => Some("the server closed the connection after the handshake".into()),
        Ok(_) => None,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) => Some(chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(tls: Option<TlsFiles>) -> EtcdConfig {
        EtcdConfig { tls, ..EtcdConfig::default() }
    }

    fn config_err(list: &[&str], tls: Option<TlsFiles>) -> String {
        match apply(list, &config(tls), ConnectOptions::new()) {
            Err(LockError::Config(m)) => m,
            other => panic!("expected a config error, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn endpoints_and_tls_settings_must_agree() {
        assert!(apply(&["http://a:1", "b:2"], &config(None), ConnectOptions::new()).is_ok());
        let m = config_err(&["https://a:1"], None);
        assert!(m.contains("https:// but EtcdConfig::tls is not set"), "{m}");
        let tls = TlsFiles::trusting("/nonexistent/ca.pem");
        let m = config_err(&["http://a:1"], Some(tls.clone()));
        assert!(m.contains("use https://a:1"), "{m}");
        let m = config_err(&["https://a:1"], Some(TlsFiles::default()));
        assert!(m.contains("no CA file"), "{m}");
        let m = config_err(&["https://a:1"], Some(tls));
        if cfg!(feature = "tls") {
            assert!(m.contains("/nonexistent/ca.pem"), "names the file: {m}");
        } else {
            assert!(m.contains("without its `tls` feature"), "{m}");
        }
    }

    #[test]
    fn rustls_words_are_found_in_a_chain() {
        let words = "status: Unavailable: error trying to connect: invalid peer certificate: \
                     UnknownIssuer";
        assert_eq!(rustls_cause(words), Some("invalid peer certificate: UnknownIssuer"));
        assert_eq!(rustls_cause("transport error: connection refused"), None);
    }

    /// A plain server met with a ClientHello either answers bytes that are not TLS or closes
    /// the connection (etcd did both on this machine); either way the message says what to
    /// check.
    #[test]
    fn a_handshake_ended_by_a_plain_server_says_what_to_check() {
        let endpoint = "https://127.0.0.1:2379";
        for cause in
            ["received corrupt message of type InvalidContentType", "unexpected end of file"]
        {
            let message = handshake_failed(endpoint, cause, None);
            assert!(message.starts_with("TLS handshake with https://127.0.0.1:2379 failed: "));
            assert!(message.contains("is it a plain http:// server?"), "{message}");
        }
    }
}
