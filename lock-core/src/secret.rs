//! Secrets and credentials for the engines' clients: a user name and a password that no
//! `Debug`, `Display` or error message ever shows.
//!
//! Every engine names its credentials its own way (Redis's ACL user, etcd's user, ZooKeeper's
//! digest `user:password`, Cassandra's role), but the rules are shared, so the type is too:
//! - a password is read from the environment ([`Secret::from_env`]) or a file
//!   ([`Secret::from_file`]), never required on a command line, where `ps` and shell
//!   histories would show it;
//! - it prints as `***`, so a config struct, a log line or a result file that includes a
//!   [`Credentials`] shows the user and never the password.
//!
//! ```
//! use lock_core::secret::{Credentials, Secret};
//! let c = Credentials::new("locker", Secret::new("hunter2"));
//! assert_eq!(format!("{c:?}"), r#"Credentials { user: "locker", password: *** }"#);
//! assert_eq!(c.password.expose(), "hunter2");
//! ```

use std::fmt;
use std::path::Path;

/// A secret string: shown as `***` by `Debug` and `Display`. [`Secret::expose`] is the one way
/// to read it, so every place that sends it is easy to find.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value of the environment variable `var`: `Ok(None)` when it is not set, an error
    /// naming the variable (never its value) when it is not Unicode or is empty.
    pub fn from_env(var: &str) -> Result<Option<Secret>, String> {
        match std::env::var(var) {
            Ok(v) if v.is_empty() => Err(format!("{var} is set but empty")),
            Ok(v) => Ok(Some(Secret(v))),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("{var} is not valid Unicode")),
        }
    }

    /// The first line of the file at `path` (so an editor's final newline is not part of the
    /// password), or an error naming the file.
    pub fn from_file(path: &Path) -> Result<Secret, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the secret file {}: {e}", path.display()))?;
        let line = text.lines().next().unwrap_or("");
        if line.is_empty() {
            return Err(format!("the secret file {} is empty", path.display()));
        }
        Ok(Secret(line.to_string()))
    }

    /// The secret itself, to send to a server.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A user name and its password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The user (an ACL user, an etcd user, a digest user name): not secret, shown in
    /// messages so that a refusal says whose it was.
    pub user: String,
    /// The password.
    pub password: Secret,
}

impl Credentials {
    /// `user` with `password`.
    pub fn new(user: impl Into<String>, password: Secret) -> Credentials {
        Credentials { user: user.into(), password }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        let c = Credentials::new("u", s);
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn a_secret_file_gives_its_first_line_and_an_empty_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("secret-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        assert_eq!(Secret::from_file(&f).unwrap().expose(), "s3cret");
        std::fs::write(&f, "\n").unwrap();
        let e = Secret::from_file(&f).unwrap_err();
        assert!(e.contains("is empty"), "{e}");
        let e = Secret::from_file(&dir.join("missing")).unwrap_err();
        assert!(e.contains("cannot read the secret file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
