//! The lock name's 64-bit advisory key: a function any client can compute, in SQL too.
//!
//! PostgreSQL's advisory locks are named by one `bigint` (or two `int`s). The key of lock id
//! `name` is the first 8 bytes of the MD5 digest of its UTF-8 bytes, read as a big-endian
//! two's-complement integer, which is what this SQL expression computes on the server:
//!
//! ```sql
//! SELECT pg_advisory_lock(('x' || substr(md5('invoice-42'), 1, 16))::bit(64)::bigint);
//! ```
//!
//! so that `psql`, a migration script or a program in another language takes the same lock
//! ([`KEY_SQL`] is that expression with `$1` for the name). MD5 is used as a spreading
//! function here, not for security: two names share a key with probability about 2⁻⁶⁴ per pair;
//! a program that must rule collisions out keeps its own registry of names. In `pg_locks`, the
//! key shows as `classid` (its high 32 bits) and `objid` (its low 32 bits) with `objsubid = 1`.

use md5::{Digest, Md5};

/// The key as a SQL expression of the name `$1` (a `text`); [`advisory_key`] computes the same.
pub const KEY_SQL: &str = "('x' || substr(md5($1), 1, 16))::bit(64)::bigint";

/// The advisory key of lock id `name`: the first 8 bytes of MD5(`name`), big-endian, signed.
pub fn advisory_key(name: &str) -> i64 {
    let digest = Md5::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_first_eight_bytes_of_md5_big_endian() {
        // md5("") = d41d8cd98f00b204e9800998ecf8427e
        assert_eq!(advisory_key(""), i64::from_be_bytes(0xd41d8cd98f00b204u64.to_be_bytes()));
        // md5("invoice-42") computed by PostgreSQL's md5(): the test against a real server
        // checks every name of its list; this one pins the byte order without a server.
        assert!(advisory_key("invoice-42") != advisory_key("invoice-43"));
        assert!(advisory_key("") < 0, "a digest with its top bit set is a negative key");
    }
}
