//! Where a client finds what it needs for TLS: the CA it trusts, and its own certificate and
//! key when the server asks for one (mutual TLS).
//!
//! Each engine's client speaks TLS through its own library (rustls everywhere), but what a
//! user gives is the same three PEM files, so the type is shared. Files, not PEM text in a
//! config or on a command line: a key is a secret (see [`crate::secret`]), and files are how
//! etcd, Redis and ZooKeeper themselves take them. Reading them is here too, so that a
//! missing or unreadable file is the same clear error, naming the file, for every engine.
//!
//! ```
//! use lock_core::tls::TlsFiles;
//! let tls = TlsFiles::trusting("/etc/locks/ca.pem").with_identity("me.pem", "me-key.pem");
//! let e = tls.read_ca().unwrap_err();
//! assert!(e.contains("/etc/locks/ca.pem"), "{e}");
//! ```

use std::path::{Path, PathBuf};

/// The PEM files of a TLS client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA certificates to trust (PEM), instead of the system's roots.
    pub ca: Option<PathBuf>,
    /// This client's certificate chain (PEM), for servers that ask for one.
    pub cert: Option<PathBuf>,
    /// This client's private key (PEM).
    pub key: Option<PathBuf>,
}

/// A client's certificate and key, read.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    /// The certificate chain (PEM).
    pub cert: Vec<u8>,
    /// The private key (PEM): never printed.
    pub key: Vec<u8>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("cert", &self.cert.len()).field("key", &"***").finish()
    }
}

impl TlsFiles {
    /// Trust the CA certificates in `ca`.
    pub fn trusting(ca: impl Into<PathBuf>) -> TlsFiles {
        TlsFiles { ca: Some(ca.into()), ..TlsFiles::default() }
    }

    /// Present the certificate `cert` with its key `key` when the server asks.
    pub fn with_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsFiles {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }

    /// The CA file's bytes: an error naming the file when it cannot be read, is empty, or holds
    /// no PEM certificate; `Ok(None)` when no CA was given (trust the system's roots).
    pub fn read_ca(&self) -> Result<Option<Vec<u8>>, String> {
        match &self.ca {
            None => Ok(None),
            Some(path) => read_pem(path, "the CA file", "CERTIFICATE").map(Some),
        }
    }

    /// The client's certificate and key: `Ok(None)` when neither was given, an error when
    /// only one was or a file cannot be read.
    pub fn read_identity(&self) -> Result<Option<Identity>, String> {
        match (&self.cert, &self.key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(Identity {
                cert: read_pem(cert, "the client certificate", "CERTIFICATE")?,
                key: read_pem(key, "the client key", "PRIVATE KEY")?,
            })),
            (Some(_), None) => Err("a client certificate was given without its key".into()),
            (None, Some(_)) => Err("a client key was given without its certificate".into()),
        }
    }

    /// Check that every file given can be read, so that a typo fails at start-up rather than
    /// at the first connection.
    pub fn check(&self) -> Result<(), String> {
        self.read_ca()?;
        self.read_identity()?;
        Ok(())
    }
}

/// The bytes of a PEM file that must hold a `kind` block ("CERTIFICATE", "PRIVATE KEY", which
/// also matches "RSA PRIVATE KEY" and "EC PRIVATE KEY").
fn read_pem(path: &Path, what: &str, kind: &str) -> Result<Vec<u8>, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let holds = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{kind}-----")));
    if !holds {
        return Err(format!("{what} {} holds no PEM {kind}", path.display()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_checked_and_named_in_errors() {
        let dir = std::env::temp_dir().join(format!("lock-core-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n")
            .unwrap();
        let key = dir.join("key.pem");
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nMII=\n-----END PRIVATE KEY-----\n")
            .unwrap();
        assert!(TlsFiles::default().read_ca().unwrap().is_none());
        assert!(TlsFiles::trusting(&ca).read_ca().unwrap().is_some());
        let swapped = TlsFiles::trusting(&key).read_ca().unwrap_err();
        assert!(swapped.contains("holds no PEM CERTIFICATE"), "{swapped}");
        let id = TlsFiles::trusting(&ca).with_identity(&ca, &key).read_identity().unwrap();
        assert_eq!(format!("{:?}", id.unwrap()).matches("***").count(), 1);
        let half = TlsFiles { cert: Some(ca.clone()), ..TlsFiles::default() };
        assert!(half.check().unwrap_err().contains("without its key"));
        let missing = TlsFiles::trusting(dir.join("nope.pem")).check().unwrap_err();
        assert!(missing.contains("nope.pem"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
