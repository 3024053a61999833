//! TLS to the server: rustls, the server's certificate checked against the CA the user names
//! and its name against the host connected to (libpq's `sslmode=verify-full`); a client
//! certificate when the server asks for one.

use lock_core::tls::TlsFiles;
use lock_core::LockError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A connector for `files`: the CA to trust (required: a lock server is a private service,
/// the system's roots would trust anyone's certificate for its name) and an optional identity.
pub(crate) fn connector(files: &TlsFiles) -> Result<MakeRustlsConnect, LockError> {
    let bad = |why: String| LockError::Config(format!("PostgreSQL TLS: {why}"));
    files.check().map_err(bad)?;
    let Some(ca) = files.read_ca().map_err(bad)? else {
        return Err(bad("name the CA that signed the server's certificate".into()));
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&ca) {
        let cert =
            cert.map_err(|e| bad(format!("the CA file holds no usable certificate: {e}")))?;
        roots.add(cert).map_err(|e| bad(format!("the CA certificate is not usable: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("the CA file holds no certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots);
    let config = match files.read_identity().map_err(bad)? {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(&identity.cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("the client certificate: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(&identity.key)
                .map_err(|e| bad(format!("the client key: {e}")))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| bad(e.to_string()))?
        }
    };
    Ok(MakeRustlsConnect::new(config))
}
