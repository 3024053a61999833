//! Certificates made at test time, so that no key material is ever committed: a CA of its
//! own per [`TestPki`], certificates it signs for servers and clients, all written as PEM
//! files in a directory removed on drop.
//!
//! Every certificate carries both the server and the client extended key usage, because
//! some servers (etcd's peers, ZooKeeper's quorum) use one certificate both ways; a test of
//! a refused certificate makes one from *another* `TestPki`, or for another host name.

use crate::process::temp_dir;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl CertFiles {
    /// The certificate's PEM text.
    pub fn cert_pem(&self) -> String {
        read(&self.cert)
    }

    /// The key's PEM text.
    pub fn key_pem(&self) -> String {
        read(&self.key)
    }
}

/// A throw-away certificate authority and the certificates it signed, in a directory of its
/// own that is removed on drop.
pub struct TestPki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
    ca_file: PathBuf,
    server: CertFiles,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// The names a loopback server's certificate is valid for.
pub const LOOPBACK_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

impl TestPki {
    /// A new CA named `name`, and a server certificate for [`LOOPBACK_NAMES`].
    ///
    /// # Panics
    /// If a key cannot be made or a file written: test support, where a panic is the error.
    pub fn new(name: &str) -> TestPki {
        let dir = temp_dir("pki");
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(&format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("generate the test CA's key");
        let ca = CertifiedIssuer::self_signed(params, key).expect("sign the test CA");
        let ca_file = dir.join("ca.pem");
        write(&ca_file, &ca.pem());
        let mut pki = TestPki {
            dir,
            ca,
            ca_file,
            server: CertFiles { cert: PathBuf::new(), key: PathBuf::new() },
        };
        pki.server = pki.issue("server", "server", &LOOPBACK_NAMES);
        pki
    }

    /// The CA's certificate file (PEM): what a client or server trusts.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// The CA's certificate (PEM text).
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// The certificate of a server on loopback (valid for [`LOOPBACK_NAMES`]).
    pub fn server(&self) -> &CertFiles {
        &self.server
    }

    /// A client certificate whose common name is `user` (etcd's `--client-cert-auth` takes
    /// it as the user name), valid for loopback too.
    pub fn client(&self, user: &str) -> CertFiles {
        self.issue(&format!("client-{user}"), user, &LOOPBACK_NAMES)
    }

    /// A certificate named `common_name`, valid for the host names and IP addresses in
    /// `names`, written as `<stem>.pem` and `<stem>-key.pem`.
    pub fn issue(&self, stem: &str, common_name: &str, names: &[&str]) -> CertFiles {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("valid certificate names");
        params.distinguished_name = dn(common_name);
        params.key_usages =
            vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("generate a test key");
        let cert = params.signed_by(&key, &self.ca).expect("sign a test certificate");
        let files = CertFiles {
            cert: self.dir.join(format!("{stem}.pem")),
            key: self.dir.join(format!("{stem}-key.pem")),
        };
        write(&files.cert, &cert.pem());
        write(&files.key, &key.serialize_pem());
        files
    }

    /// The directory holding every file.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_pem_files_removed_with_their_pki() {
        let pki = TestPki::new("unit");
        let dir = pki.dir().to_path_buf();
        assert!(pki.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.server().key_pem().contains("PRIVATE KEY"));
        let alice = pki.client("alice");
        assert!(alice.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(alice.cert_pem(), pki.server().cert_pem());
        drop(pki);
        assert!(!dir.exists());
    }
}
