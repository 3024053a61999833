//! TLS and ZooKeeper (issue 25): why this build has no TLS client, and how a plain client at a
//! TLS port learns why it gets no session (crate docs, "TLS").
//!
//! - **No TLS client.** `zookeeper-client` 0.11 speaks TLS only with its `tls` feature, and
//!   that feature depends on rustls with rustls's default features, whose crypto provider is
//!   aws-lc-rs (a C library with a build of its own; every TLS client of this workspace uses
//!   `ring` alone). Cargo's feature unification can add features, never remove a dependency's
//!   defaults, and Cargo.lock lists an optional dependency even when no build enables it, so
//!   even an off-by-default feature of this crate would bring aws-lc-rs and aws-lc-sys into the
//!   workspace. The client has no other transport hook (its connections are a plain
//!   `TcpStream` or its own rustls stream). So [`ZkConfig::tls`] is refused ([`unsupported`]),
//!   never silently ignored: a user who asks for TLS must not get plain text.
//! - **A plain client at a TLS port.** ZooKeeper's `secureClientPort` closes a plain
//!   connection at its first bytes; the client takes that for an outage and tries again until
//!   the connect timeout, with nothing to show but "no session". So when no session has come
//!   within [`PROBE_AFTER`], the backend tries a TLS handshake of its own with every server of
//!   the connect string ([`speaks_tls`]), trusting no CA and sending nothing of the backend's
//!   (no certificate, no credentials): a server that answers with a certificate speaks TLS
//!   there. If every one does, the connect fails at once saying so ([`plain_at_tls_port`]).
//!   A healthy plain server gets no such probe (it gives a session first), and one that is
//!   only slow gets a ClientHello it closes as a malformed request.

use crate::ZkConfig;
use lock_core::LockError;
use std::sync::Arc;
use std::time::Duration;

/// How long a connect may go without a session before the servers are asked whether they
/// speak TLS: a plain server on a healthy network gives a session in milliseconds.
pub(crate) const PROBE_AFTER: Duration = Duration::from_millis(500);

/// How long each step of a probe (TCP connect, handshake) may take.
const PROBE_STEP: Duration = Duration::from_secs(2);

/// The refusal of [`ZkConfig::tls`].
pub(crate) fn unsupported(config: &ZkConfig) -> Option<LockError> {
    config.tls.as_ref()?;
    Some(LockError::Config(
        "ZkConfig::tls is set, but this build of lock-zookeeper cannot speak TLS to ZooKeeper: \
         zookeeper-client 0.11's `tls` feature brings rustls's default crypto provider, \
         aws-lc-rs, which this workspace keeps out (ring only; crate docs, \"TLS\"). Use the \
         server's plain clientPort, on a network you trust"
            .into(),
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

/// Once [`PROBE_AFTER`] has passed: why a plain client gets no session from `hosts`, if every
/// one of its servers speaks TLS ([`speaks_tls`]); otherwise never (the connect goes on).
pub(crate) async fn plain_at_tls_port(hosts: &str) -> String {
    tokio::time::sleep(PROBE_AFTER).await;
    let servers = servers(hosts);
    let mut probes = tokio::task::JoinSet::new();
    for (host, port) in servers.clone() {
        probes.spawn(async move { speaks_tls(&host, port).await });
    }
    let answers = probes.join_all().await;
    if servers.is_empty() || !answers.iter().all(|&tls| tls) {
        return std::future::pending().await;
    }
    let which = if servers.len() == 1 { "it speaks" } else { "every server speaks" };
    format!(
        "cannot connect to ZooKeeper at {hosts}: {which} TLS there (a TLS handshake showed a \
         certificate): a secureClientPort, which closes a plain connection at its first bytes, \
         and this client speaks plain text only (ZkConfig::tls is not available in this build: \
         crate docs, \"TLS\"); use the server's plain clientPort"
    )
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
