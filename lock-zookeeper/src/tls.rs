//! TLS and ZooKeeper (crate docs, "TLS"): the client's TLS options from the user's
//! PEM files, and why a connect that gets no session was refused.
//!
//! - **TLS client.** `zookeeper-client`'s `tls` feature: [`options`] turns
//!   [`ZkConfig::tls`]'s files into its `TlsOptions` (the CA is required: the client trusts no
//!   system roots), and the connect string's servers are dialled over TLS. Its rustls config is
//!   made with the process's default crypto provider; since this workspace has both of
//!   rustls's providers compiled in (the feature brings aws-lc-rs, every other client here uses
//!   ring), there is no default to fall back on, so [`options`] installs ring as the default
//!   first, as lock-redis does, unless the process has installed one already.
//! - **Why no session.** A client whose handshake is refused (an untrusted certificate, one
//!   for another host, a server that wants a client certificate, a plain `clientPort`) gets no
//!   error from `zookeeper-client`: it takes each refusal for an outage and tries again until
//!   the connect timeout, with nothing to show but "no session". So when no session has come
//!   within [`PROBE_AFTER`], the backend asks the servers itself ([`refusal`]): with TLS set, a
//!   handshake of its own with the same files and the same provider ([`tls_refused`]), which
//!   meets the same refusal and can name it; without TLS, a handshake trusting no CA and sending
//!   nothing of the backend's ([`speaks_tls`]), which tells a TLS port. If every server refuses,
//!   the connect fails at once saying why; otherwise it goes on (an outage or a slow server is
//!   not a refusal).

use lock_core::tls::TlsFiles;
use lock_core::LockError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use zookeeper_client as zk;

/// How long a connect may go without a session before the servers are asked why: a server on
/// a healthy network gives a session in milliseconds.
pub(crate) const PROBE_AFTER: Duration = Duration::from_millis(500);

/// How long each step of a probe (TCP connect, handshake, the read after it) may take.
const PROBE_STEP: Duration = Duration::from_secs(2);

/// How long a probe that completed its handshake waits for the server's refusal of the
/// client's certificate, which TLS 1.3 sends after the client has finished its handshake.
const ALERT_WAIT: Duration = Duration::from_millis(300);

fn config_error(what: impl std::fmt::Display) -> LockError {
    LockError::Config(format!("ZkConfig::tls: {what}"))
}

/// `zookeeper-client`'s TLS options from `files`: the CA (required, since the client trusts
/// no system roots) and, for mutual TLS, the client's certificate and key. Errors name the
/// file, never a key's content. Installs ring as the process's default crypto provider if
/// none is (module docs).
pub(crate) fn options(files: &TlsFiles) -> Result<zk::TlsOptions, LockError> {
    let ca = files.read_ca().map_err(config_error)?.ok_or_else(|| {
        config_error(
            "a CA file is required (TlsFiles::trusting): zookeeper-client trusts no system roots",
        )
    })?;
    let ca_path = files.ca.as_deref().unwrap_or(std::path::Path::new("")).display();
    let mut options = zk::TlsOptions::new()
        .with_pem_ca(&String::from_utf8_lossy(&ca))
        .map_err(|e| config_error(format!("the CA file {ca_path}: {e}")))?;
    if let Some(identity) = files.read_identity().map_err(config_error)? {
        let cert = files.cert.as_deref().unwrap_or(std::path::Path::new("")).display();
        options = options
            .with_pem_identity(
                &String::from_utf8_lossy(&identity.cert),
                &String::from_utf8_lossy(&identity.key),
            )
            .map_err(|e| config_error(format!("the client certificate {cert} or its key: {e}")))?;
    }
    // What rustls makes of them, as the client will: a key that is not the certificate's,
    // named here rather than as the first connection's error.
    client_config(files).map_err(|e| {
        let cert = files.cert.as_deref().unwrap_or(std::path::Path::new("")).display();
        config_error(format!("the client certificate {cert} and its key: {e}"))
    })?;
    // Err: a provider is installed already (ours, or the application's), which the client uses.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(options)
}

/// A rustls client config like the one `zookeeper-client` makes of `files` (the same roots,
/// identity and provider), for [`tls_refused`]'s handshake.
fn client_config(files: &TlsFiles) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = files.read_ca()? {
        for cert in CertificateDer::pem_slice_iter(&ca) {
            roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    match files.read_identity()? {
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(&identity.cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(&identity.key).map_err(|e| e.to_string())?;
            builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// Once [`PROBE_AFTER`] has passed without a session: why `hosts` refuse this client, if
/// every one of its servers does ([`tls_refused`] with TLS, [`speaks_tls`] without);
/// otherwise never (the connect goes on, to its session or its timeout).
pub(crate) async fn refusal(hosts: &str, tls: Option<&TlsFiles>) -> String {
    tokio::time::sleep(PROBE_AFTER).await;
    let servers = servers(hosts);
    let why = match tls {
        _ if servers.is_empty() => None,
        Some(files) => tls_refusal(&servers, files).await,
        None => plain_refusal(&servers).await,
    };
    match why {
        Some(why) => format!("cannot connect to ZooKeeper at {hosts}: {why}"),
        None => std::future::pending().await,
    }
}

/// Why every one of `servers` refuses a TLS client with `files`, if every one does.
async fn tls_refusal(servers: &[(String, u16)], files: &TlsFiles) -> Option<String> {
    // Files that cannot be read: the client's own options have said so already.
    let config = Arc::new(client_config(files).ok()?);
    let reasons = ask_each(servers, config).await;
    (reasons.len() == servers.len()).then(|| format!("over TLS, {}", reasons.join("; ")))
}

/// Each server's refusal of a TLS client with `config`: one entry per server that refused.
async fn ask_each(servers: &[(String, u16)], config: Arc<rustls::ClientConfig>) -> Vec<String> {
    let mut probes = tokio::task::JoinSet::new();
    for (host, port) in servers.iter().cloned() {
        let config = config.clone();
        probes.spawn(async move {
            let why = tls_refused(&host, port, config).await?;
            Some(format!("{host}:{port} {why}"))
        });
    }
    probes.join_all().await.into_iter().flatten().collect()
}

/// Why the server at `host:port` refuses a TLS client with `config`, if it does: the
/// handshake's own error (an untrusted certificate, one for another host, the server's alert),
/// or the server closing the connection at the ClientHello (a plain port, which reads a TLS
/// record as a malformed request). A server that does not answer within [`PROBE_STEP`], or
/// cannot be reached, is not a refusal: `None`.
pub(crate) async fn tls_refused(
    host: &str,
    port: u16,
    config: Arc<rustls::ClientConfig>,
) -> Option<String> {
    let name = ServerName::try_from(host.to_string()).ok()?;
    let tcp = tokio::time::timeout(PROBE_STEP, tokio::net::TcpStream::connect((host, port)));
    let Ok(Ok(tcp)) = tcp.await else { return None };
    let connector = tokio_rustls::TlsConnector::from(config);
    match tokio::time::timeout(PROBE_STEP, connector.connect(name, tcp)).await {
        Err(_) => None,
        Ok(Err(e)) => Some(handshake_refusal(&e)),
        Ok(Ok(mut stream)) => {
            // TLS 1.3: a server refuses the client's certificate (or its lack of one) after the
            // client's side of the handshake is done, in an alert that the first read meets.
            let mut byte = [0u8; 1];
            match tokio::time::timeout(ALERT_WAIT, stream.read(&mut byte)).await {
                Ok(Err(e)) => Some(handshake_refusal(&e)),
                _ => None,
            }
        }
    }
}

/// A handshake's error as a refusal a user can act on.
fn handshake_refusal(e: &std::io::Error) -> String {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, UnexpectedEof};
    match e.kind() {
        UnexpectedEof | ConnectionReset | ConnectionAborted => format!(
            "closed the connection at the TLS handshake ({e}): a plain clientPort? TLS needs the \
             servers' secureClientPort"
        ),
        _ if e.to_string().contains("CertificateRequired")
            || e.to_string().contains("BadCertificate") =>
        {
            format!(
                "refused this client's certificate, or its lack of one, in the TLS handshake ({e}): \
                 the server wants a certificate its CA signed (TlsFiles::with_identity)"
            )
        }
        _ => format!("refused in the TLS handshake: {e}"),
    }
}

/// Why every one of `servers` refuses a plain client, if every one speaks TLS.
async fn plain_refusal(servers: &[(String, u16)]) -> Option<String> {
    let mut probes = tokio::task::JoinSet::new();
    for (host, port) in servers.iter().cloned() {
        probes.spawn(async move { speaks_tls(&host, port).await });
    }
    if !probes.join_all().await.into_iter().all(|tls| tls) {
        return None;
    }
    let which = if servers.len() == 1 { "it speaks" } else { "every server speaks" };
    Some(format!(
        "{which} TLS there (a TLS handshake showed a certificate): a secureClientPort, which \
         closes a plain connection at its first bytes; set ZkConfig::tls (crate docs, \"TLS\") \
         or use the server's plain clientPort"
    ))
}
/// The servers of a connect string (`host:port[,host:port...][/chroot]`, each perhaps with
/// `zookeeper-client`'s `tcp://` or `tcp+tls://`), as host and port (2181 when none is
/// given); IPv6 addresses in brackets.
pub(crate) fn servers(connect: &str) -> Vec<(String, u16)> {
    connect
        .split(',')
        .filter_map(|server| {
            let server = server.trim();
            let server = server.strip_prefix("tcp+tls://").unwrap_or(server);
            let server = server.strip_prefix("tcp://").unwrap_or(server);
            // The chroot follows the last server.
            let server = server.split('/').next().unwrap_or_default();
            let (host, port) = match server.rsplit_once(':') {
                Some((host, port)) if !port.contains(']') => (host, port.parse().ok()?),
                _ => (server, 2181),
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            (!host.is_empty()).then(|| (host.to_string(), port))
        })
        .collect()
}

/// Whether the server at `host:port` answers a TLS handshake with a certificate: a client that
/// trusts no CA at all meets it, so any server that speaks TLS there refuses with
/// `UnknownIssuer` (nothing of the backend's is sent: no certificate, no credentials). Each
/// step is bounded by [`PROBE_STEP`]; anything else (refused, closed, silent) is `false`.
pub(crate) async fn speaks_tls(host: &str, port: u16) -> bool {
    let Ok(name) = rustls::pki_types::ServerName::try_from(host.to_string()) else {
        return false;
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth());
    let Ok(config) = config else { return false };
    let tcp = tokio::time::timeout(PROBE_STEP, tokio::net::TcpStream::connect((host, port)));
    let Ok(Ok(tcp)) = tcp.await else { return false };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    match tokio::time::timeout(PROBE_STEP, connector.connect(name, tcp)).await {
        Ok(Ok(_)) => true, // cannot happen without a root, but it would be TLS
        Ok(Err(e)) => e.to_string().contains("invalid peer certificate"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_of_a_connect_string_are_found_whatever_its_form() {
        let s = |h: &str, p| (h.to_string(), p);
        assert_eq!(servers("127.0.0.1:2181"), vec![s("127.0.0.1", 2181)]);
        assert_eq!(
            servers("a:1,tcp://b:2,tcp+tls://c:3/chroot/x"),
            vec![s("a", 1), s("b", 2), s("c", 3)]
        );
        assert_eq!(servers("zk1,zk2/app"), vec![s("zk1", 2181), s("zk2", 2181)]);
        assert_eq!(servers("[::1]:2182,[::1]"), vec![s("::1", 2182), s("::1", 2181)]);
        assert!(servers("").is_empty());
    }
}
