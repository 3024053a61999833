//! The rules a lock id must follow to be a MariaDB lock name.
//!
//! `GET_LOCK` names are strings the server compares byte for byte (in the connection's
//! character set, `utf8mb4` here): on MariaDB 10.11, `Invoice` and `invoice` are **two**
//! locks, and so are `café` composed and decomposed. (MySQL 5.7 and later compare names
//! case-insensitively: a program that must behave the same on both keeps its ids in one case.)
//! The server refuses a name longer than 192 bytes (error 1059, "Identifier name ... is too
//! long"); MySQL refuses one longer than 64 characters. An id here is at most
//! [`MAX_NAME_CHARS`] characters and [`MAX_NAME_BYTES`] bytes, so that every id accepted is a
//! name both servers take, and is refused before anything is sent otherwise.

use lock_core::lock::validate_id;
use lock_core::LockError;

/// The most characters a lock id may have (MySQL's limit for lock names).
pub const MAX_NAME_CHARS: usize = 64;
/// The most bytes a lock id may have in UTF-8 (MariaDB's limit for lock names).
pub const MAX_NAME_BYTES: usize = 192;

/// Check `id` as a lock id (lock-core's rules) and as a MariaDB lock name.
pub fn validate_name(id: &str) -> Result<(), LockError> {
    validate_id("lock id", id)?;
    let chars = id.chars().count();
    let fail = |reason: String| LockError::InvalidId {
        what: "lock id",
        id: id.chars().take(64).collect(),
        reason,
    };
    if chars > MAX_NAME_CHARS {
        return Err(fail(format!(
            "is {chars} characters long; a MariaDB/MySQL lock name has at most {MAX_NAME_CHARS}"
        )));
    }
    if id.len() > MAX_NAME_BYTES {
        return Err(fail(format!(
            "is {} bytes long in UTF-8; MariaDB refuses a lock name over {MAX_NAME_BYTES} bytes",
            id.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_over_64_characters_or_192_bytes_are_refused() {
        assert!(validate_name(&"x".repeat(64)).is_ok());
        assert!(validate_name(&"é".repeat(64)).is_ok(), "128 bytes");
        let long = validate_name(&"x".repeat(65)).unwrap_err();
        assert!(matches!(long, LockError::InvalidId { .. }), "{long}");
        assert!(long.to_string().contains("at most 64"), "{long}");
        let wide = validate_name(&"🔒".repeat(49)).unwrap_err();
        assert!(wide.to_string().contains("192 bytes"), "{wide}");
        assert!(validate_name(&"🔒".repeat(48)).is_ok(), "192 bytes");
        assert!(validate_name("").is_err());
    }
}
