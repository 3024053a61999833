//! TLS for the service's two kinds of connection, with rustls (its `ring` provider, chosen
//! explicitly so that no process-wide default is needed):
//!
//! - **clients → node**: the node presents its certificate (`--tls-cert`, `--tls-key`); the
//!   client checks it against the CA it was given ([`lock_core::tls::TlsFiles`]) and the host
//!   name or IP address it dialled. Who the client is, it says with a token inside the TLS
//!   stream ([`crate::auth`]): the node asks no client certificate.
//! - **node ↔ node**: mutual TLS. With `--tls-ca`, a node accepts a peer only if the peer
//!   presents a certificate that CA signed, and checks the certificate of every peer it dials
//!   the same way; so a stranger on the network can neither join the cluster nor pose as a
//!   node to another.
//!
//! A node started with TLS speaks nothing else on that listener, but for one thing: a plain
//! client that dials it is answered one plain frame before the node hangs up, so that the
//! client's error names the cause instead of "connection closed" ([`plain_refusal`]), and a
//! plain `Status` (a probe, a monitoring script) is answered with the status itself.

use rustls::client::WebPkiServerVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A byte stream: plain TCP or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static> Io for T {}

/// A boxed [`Io`].
pub type BoxIo = Box<dyn Io>;

/// The first byte of a TLS record that starts a handshake.
pub const TLS_HANDSHAKE: u8 = 0x16;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why TLS cannot be set up from the files given. Each names the file or the option at
/// fault (`what`), never a key's contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file cannot be read, or holds no item of the kind wanted.
    #[error("cannot read {what} {}: {source}", path.display())]
    Read {
        /// Which file ("the node's certificate (--tls-cert)").
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The reader's error.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// A certificate file holds no certificate.
    #[error("{what} {} holds no PEM certificate", path.display())]
    NoCertificate {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
    },
    /// rustls refused a certificate, a key or a CA.
    #[error("{what}: {source}")]
    Refused {
        /// The file or the options at fault.
        what: String,
        /// rustls's error.
        #[source]
        source: rustls::Error,
    },
    /// No verifier of certificates can be made from a CA.
    #[error("{what}: {source}")]
    Verifier {
        /// The option or file of the CA.
        what: &'static str,
        /// rustls's error.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// The files given do not make a whole (no CA, a certificate without its key).
    #[error("{0}")]
    Incomplete(&'static str),
}

/// Certificates from a PEM file, or an error naming the file.
pub fn certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Read { what, path: path.to_path_buf(), source })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { what, path: path.to_path_buf() });
    }
    Ok(certs)
}

/// A private key from a PEM file, or an error naming the file (never its contents).
pub fn key(path: &Path, what: &'static str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn roots(ca: &Path, what: &'static str) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certs(ca, what)? {
        store.add(cert).map_err(|source| TlsError::Refused {
            what: format!("{what} {}", ca.display()),
            source,
        })?;
    }
    Ok(Arc::new(store))
}

/// rustls's `source`, refusing `what`.
fn refused(what: &str) -> impl FnOnce(rustls::Error) -> TlsError + '_ {
    move |source| TlsError::Refused { what: what.to_string(), source }
}

/// What a node needs for TLS.
#[derive(Clone)]
pub struct NodeTls {
    /// Accepts clients.
    pub clients: TlsAcceptor,
    /// Accepts peers (mutual TLS), when a CA was given.
    pub peers: Option<TlsAcceptor>,
    /// Dials peers with this node's certificate, when a CA was given.
    pub dial_peers: Option<TlsConnector>,
}

impl NodeTls {
    /// Load a node's certificate and key, and the CA of its peers if given.
    pub fn load(cert: &Path, key_file: &Path, ca: Option<&Path>) -> Result<NodeTls, TlsError> {
        let chain = certs(cert, "the node's certificate (--tls-cert)")?;
        let private = key(key_file, "the node's key (--tls-key)")?;
        let versions = |b: rustls::ConfigBuilder<ServerConfig, rustls::WantsVersions>| {
            b.with_safe_default_protocol_versions().map_err(refused("TLS protocol versions"))
        };
        let pair = "--tls-cert / --tls-key";
        let clients = versions(ServerConfig::builder_with_provider(provider()))?
            .with_no_client_auth()
            .with_single_cert(chain.clone(), private.clone_key())
            .map_err(refused(pair))?;
        let (peers, dial_peers) = match ca {
            None => (None, None),
            Some(ca) => {
                let roots = roots(ca, "the peers' CA (--tls-ca)")?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                        .build()
                        .map_err(|source| TlsError::Verifier { what: "--tls-ca", source })?;
                let accept = versions(ServerConfig::builder_with_provider(provider()))?
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(chain.clone(), private.clone_key())
                    .map_err(refused(pair))?;
                let dial = client_builder(roots, "--tls-ca")?
                    .with_client_auth_cert(chain, private)
                    .map_err(refused(pair))?;
                (
                    Some(TlsAcceptor::from(Arc::new(accept))),
                    Some(TlsConnector::from(Arc::new(dial))),
                )
            }
        };
        Ok(NodeTls { clients: TlsAcceptor::from(Arc::new(clients)), peers, dial_peers })
    }
}

/// A client's configuration trusting `roots` (the CA named `what`).
fn client_builder(
    roots: Arc<RootCertStore>,
    what: &'static str,
) -> Result<rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>, TlsError> {
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|source| TlsError::Verifier { what, source })?;
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(refused("TLS protocol versions"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier))
}

/// A client's TLS connector from its files: the CA it trusts (required: the service has no
/// public certificates) and its own certificate and key, if given.
pub fn client_connector(files: &lock_core::tls::TlsFiles) -> Result<TlsConnector, TlsError> {
    let ca = files.ca.as_deref().ok_or(TlsError::Incomplete(
        "TLS to the lock service needs the CA that signed its nodes' certificates (TlsFiles::ca)",
    ))?;
    let builder = client_builder(roots(ca, "the CA file")?, "the CA file")?;
    let config = match (&files.cert, &files.key) {
        (Some(c), Some(k)) => builder
            .with_client_auth_cert(certs(c, "the client certificate")?, key(k, "the client key")?)
            .map_err(refused("the client certificate and key"))?,
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(TlsError::Incomplete(
                "a client certificate needs its key, and a key its certificate",
            ))
        }
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The name a certificate must carry for `addr` (`HOST:PORT`): its IP address or host name.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| format!("{addr}: {e}"))
}

/// Run the TLS handshake as a client of `addr` on `stream`; the error says what was refused
/// ("invalid peer certificate: UnknownIssuer", "… NotValidForName").
pub async fn connect(
    connector: &TlsConnector,
    addr: &str,
    stream: TcpStream,
) -> Result<BoxIo, String> {
    let name = server_name(addr)?;
    match connector.connect(name, stream).await {
        Ok(s) => Ok(Box::new(s)),
        Err(e) => Err(format!("TLS handshake with {addr} failed: {e}{}", hint(&e.to_string()))),
    }
}

/// A word on the likely cause of a handshake failure.
fn hint(error: &str) -> &'static str {
    if error.contains("InvalidContentType") || error.contains("corrupt message") {
        " (the node does not seem to speak TLS: is it started without --tls-cert?)"
    } else if error.contains("UnknownIssuer") {
        " (the node's certificate is not signed by the CA this client trusts)"
    } else if error.contains("NotValidForName") || error.contains("not valid for name") {
        " (the node's certificate is for another host name)"
    } else {
        ""
    }
}

/// The one frame a TLS-only node sends a plain client before hanging up.
pub fn plain_refusal() -> Vec<u8> {
    use crate::proto::{encode, ErrorKind, Reply, ServerFrame};
    encode(&ServerFrame::Reply {
        id: 0,
        body: Reply::Error {
            kind: ErrorKind::Unauthenticated,
            message: "this node speaks TLS only: connect with TLS (and the CA that signed its \
                      certificate)"
                .into(),
        },
    })
}

/// Whether the connection's first byte starts a TLS handshake (the stream is only peeked).
pub async fn starts_tls(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first).await, Ok(1) if first[0] == TLS_HANDSHAKE)
}
