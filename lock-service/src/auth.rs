//! Who a client is: the users file a node authenticates clients against, and the identity a
//! connection carries once it said who it is.
//!
//! **The users file** (`lock-server --users FILE`) has one line per identity:
//! `NAME ROLE SHA256`, where `ROLE` is `client` or `admin` and `SHA256` is the hex SHA-256 of
//! the identity's token, so that the file, a backup of it or a look over an operator's
//! shoulder gives no token away. Make a token and its line with, for example:
//! ```text
//! TOKEN=$(head -c 24 /dev/urandom | base64)
//! echo "billing client $(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)" >> users
//! ```
//! `#` starts a comment; blank lines are skipped. A malformed line stops the node at start-up
//! with its line number.
//!
//! **Without a users file** every client is trusted, administrator included: the service is
//! then as open as a ZooKeeper with the open ACL, and any client may force-release any lock
//! (the stranger rows of results/safety show what that costs).

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;

/// What an identity may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Open sessions and lock with them.
    Client,
    /// A client that may also force-release any lock.
    Admin,
}

/// Who a connection is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The name, or `None` on a node without a users file (anyone).
    pub name: Option<String>,
    /// What it may do.
    pub role: Role,
}

impl Identity {
    /// Anyone, on a node that does not authenticate: trusted with everything.
    pub fn anyone() -> Identity {
        Identity { name: None, role: Role::Admin }
    }

    /// How it is named in messages and logs.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or("anyone")
    }
}

/// Why a users file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    /// The file cannot be read.
    #[error("cannot read it: {0}")]
    Read(#[source] std::io::Error),
    /// A line is malformed.
    #[error("line {line}: {reason}")]
    Line {
        /// Its number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The file lists nobody, so nobody could connect.
    #[error("it lists no user")]
    Empty,
}

/// The identities a node accepts.
#[derive(Clone, Default)]
pub struct Users {
    by_name: HashMap<String, (Role, [u8; 32])>,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.by_name.keys().collect();
        names.sort();
        f.debug_struct("Users").field("names", &names).finish()
    }
}

/// The hex SHA-256 of `token`: what the users file holds.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A new session key: 32 random bytes from the TLS library's system generator, in hex. The
/// node that opens a session draws it and keeps only its SHA-256 ([`token_hash`]) in the
/// replicated `Open`.
pub fn new_session_key() -> String {
    let mut key = [0u8; 32];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut key)
        .expect("the system's random generator works");
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `key` is the key whose hex SHA-256 is `hash` (compared in constant time).
pub fn key_matches(hash: &str, key: &str) -> bool {
    match (parse_hex(hash), parse_hex(&token_hash(key))) {
        (Some(want), Some(got)) => constant_time_eq(&want, &got),
        _ => false,
    }
}

impl Users {
    /// Read a users file; an error names the line (the caller knows the file).
    pub fn load(path: &Path) -> Result<Users, UsersError> {
        Users::parse(&std::fs::read_to_string(path).map_err(UsersError::Read)?)
    }

    /// Parse a users file's text.
    pub fn parse(text: &str) -> Result<Users, UsersError> {
        let mut by_name = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |reason: String| UsersError::Line { line: n + 1, reason };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, role, hash] = fields[..] else {
                return Err(at(format!(
                    "expected NAME ROLE SHA256-OF-TOKEN, found {} fields",
                    fields.len()
                )));
            };
            lock_core::lock::validate_id("user name", name).map_err(|e| at(e.to_string()))?;
            let role = match role {
                "client" => Role::Client,
                "admin" => Role::Admin,
                other => return Err(at(format!("role {other:?} is neither client nor admin"))),
            };
            let digest = parse_hex(hash).ok_or_else(|| {
                at(format!("{name}'s token hash is not 64 hex digits (a SHA-256)"))
            })?;
            if by_name.insert(name.to_string(), (role, digest)).is_some() {
                return Err(at(format!("{name} is listed twice")));
            }
        }
        if by_name.is_empty() {
            return Err(UsersError::Empty);
        }
        Ok(Users { by_name })
    }

    /// The identity `user` proves with `token`, or why not. The message is the same for an
    /// unknown user and a wrong token, so that it tells a guesser nothing.
    pub fn authenticate(&self, user: &str, token: &str) -> Result<Identity, String> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        match self.by_name.get(user) {
            Some((role, want)) if constant_time_eq(want, &digest) => {
                Ok(Identity { name: Some(user.to_string()), role: *role })
            }
            _ => Err(format!("user {user:?} is unknown or its token is wrong")),
        }
    }

    /// How many identities there are.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

fn parse_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_against_their_hashes() {
        let text = format!(
            "# who may lock\nbilling client {}\n\nroot admin {}  # the operator\n",
            token_hash("s3cret"),
            token_hash("r00t")
        );
        let users = Users::parse(&text).unwrap();
        assert_eq!(users.len(), 2);
        let billing = users.authenticate("billing", "s3cret").unwrap();
        assert_eq!((billing.label(), billing.role), ("billing", Role::Client));
        assert_eq!(users.authenticate("root", "r00t").unwrap().role, Role::Admin);
        let wrong = users.authenticate("billing", "guess").unwrap_err();
        let unknown = users.authenticate("nobody", "s3cret").unwrap_err();
        assert!(wrong.contains("unknown or its token is wrong"), "{wrong}");
        assert!(!wrong.contains("s3cret") && !unknown.contains("s3cret"));
        assert!(!format!("{users:?}").contains(&token_hash("s3cret")));
    }

    #[test]
    fn a_malformed_file_is_refused_with_its_line() {
        let hash = token_hash("t");
        for (text, says) in [
            (format!("a client {hash}\nb writer {hash}\n"), "line 2: role \"writer\""),
            ("a client 1234\n".to_string(), "line 1: a's token hash is not 64 hex digits"),
            (format!("a client\n{hash}"), "line 1: expected NAME ROLE SHA256-OF-TOKEN"),
            (format!("a client {hash}\na admin {hash}\n"), "line 2: a is listed twice"),
            ("# nobody\n".to_string(), "lists no user"),
        ] {
            let e = Users::parse(&text).unwrap_err().to_string();
            assert!(e.contains(says), "{e:?} should contain {says:?}");
        }
        let second = format!("a client {hash}\nb writer {hash}\n");
        assert!(matches!(Users::parse(&second), Err(UsersError::Line { line: 2, .. })));
        assert!(matches!(Users::parse("# nobody\n"), Err(UsersError::Empty)));
    }
}
