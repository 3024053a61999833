//! The names this store gives Cassandra: which keyspace and table names it accepts.
//!
//! A leaf module: [`config`](crate::config) checks the keyspace a user configures with it, and
//! [`cql`](crate::cql) and the store check table names with it, so neither of those two
//! modules has to import the other for it.

use lock_core::store::StoreError;

/// The longest keyspace or table name Cassandra accepts (`SchemaConstants.NAME_LENGTH`).
pub const MAX_NAME_LEN: usize = 48;

/// Check that `name` is usable as a keyspace or table name: `[a-z][a-z0-9_]*`, at most
/// [`MAX_NAME_LEN`] characters. Names are refused rather than rewritten, so two different
/// logical names never share a table (`a-b` and `a_b`; `Locks` and `locks`, which unquoted CQL
/// folds together).
pub fn validate_identifier(kind: &str, name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.as_bytes()[0].is_ascii_lowercase()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Rejected(format!(
            "{kind} name '{name}' is not a CQL identifier this store uses: it must match [a-z][a-z0-9_]* and have at most {MAX_NAME_LEN} characters"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_validated_not_rewritten() {
        for ok in [
            "shadow_lock_main",
            "queue_lock_queue",
            "lock_fence",
            "time_service",
            "t",
            "a1_b2",
            "x".repeat(48).as_str(),
        ] {
            assert!(validate_identifier("table", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Locks",
            "lock-fence",
            "1table",
            "_t",
            "t.x",
            "t\"",
            "tablé",
            "x".repeat(49).as_str(),
            "a b",
        ] {
            let err = validate_identifier("table", bad).expect_err(bad);
            assert!(
                matches!(&err, StoreError::Rejected(m) if m.contains("[a-z][a-z0-9_]*")),
                "{bad}: {err}"
            );
        }
    }
}
