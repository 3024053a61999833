//! TLS to the server: the driver's rustls, the server's certificate checked against the CA the
//! user names (and nothing else: the driver's built-in web roots are turned off) and its name
//! against the host connected to; a client certificate when the server asks for one.

use lock_core::tls::TlsFiles;
use lock_core::LockError;
use mysql_async::{ClientIdentity, SslOpts};

/// The driver's TLS settings for `files`: the CA to trust (required: a lock server is a private
/// service, and public roots would trust anyone's certificate for its name) and an optional
/// identity.
pub(crate) fn ssl_opts(files: &TlsFiles) -> Result<SslOpts, LockError> {
    let bad = |why: String| LockError::Config(format!("MariaDB TLS: {why}"));
    files.check().map_err(bad)?;
    let Some(ca) = files.read_ca().map_err(bad)? else {
        return Err(bad("name the CA that signed the server's certificate".into()));
    };
    if !String::from_utf8_lossy(&ca).contains("-----BEGIN CERTIFICATE-----") {
        return Err(bad("the CA file holds no PEM certificate".into()));
    }
    // The driver builds its rustls configuration with the process's default crypto provider;
    // with two providers compiled in (ring here, aws-lc-rs for another crate) there is none
    // until one is installed. An error means one already is.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut opts =
        SslOpts::default().with_disable_built_in_roots(true).with_root_certs(vec![ca.into()]);
    if let Some(identity) = files.read_identity().map_err(bad)? {
        opts = opts.with_client_identity(Some(ClientIdentity::new(
            identity.cert.into(),
            identity.key.into(),
        )));
    }
    Ok(opts)
}
