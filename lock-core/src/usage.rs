//! Requests the primitives refuse before touching any backend: asking a semaphore for more
//! permits than it has, a semaphore of no permits, a read lock asked to become a write lock, a
//! resignation by a leader that no longer leads, an election value too long.
//!
//! Each is a [`UsageError`] inside [`LockError::Usage`](crate::lock::LockError::Usage), so a
//! caller can tell a mistake of its own (fix the call) from a backend's failure (retry, or
//! give up). Nothing is written and nothing held is given up when one is returned.

/// A request that can never succeed as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// A semaphore must have at least one permit.
    #[error("semaphore {semaphore:?} must have at least one permit")]
    NoPermits {
        /// The semaphore id.
        semaphore: String,
    },
    /// An acquire must ask for at least one permit.
    #[error("an acquire of semaphore {semaphore:?} must ask for at least one permit")]
    ZeroAsked {
        /// The semaphore id.
        semaphore: String,
    },
    /// More permits asked for in one acquire than the semaphore has: it would wait forever.
    #[error("asked for {asked} permits of semaphore {semaphore:?}, which has {limit}")]
    TooManyPermits {
        /// The semaphore id.
        semaphore: String,
        /// Permits asked for.
        asked: u32,
        /// Permits the semaphore has.
        limit: u32,
    },
    /// The semaphore is in use with another number of permits: clients of one semaphore must
    /// agree on its size (as `consul lock -n` requires).
    #[error("semaphore {semaphore:?} has {stored} permits, not {asked}")]
    LimitMismatch {
        /// The semaphore id.
        semaphore: String,
        /// The size this client gave.
        asked: u32,
        /// The size its holders and waiters use.
        stored: u32,
    },
    /// A semaphore's id used as a lock's, or a lock's as a semaphore's, on a backend where
    /// the two share one namespace.
    #[error("{id:?} is in use as {used_as}, not as {asked}")]
    KindMismatch {
        /// The id.
        id: String,
        /// What this request used it as: "a lock" or "a semaphore".
        asked: &'static str,
        /// What its holders and waiters use it as.
        used_as: &'static str,
    },
    /// A leadership that is over was asked to proclaim or resign.
    #[error("not the leader of {election:?} any more (term {term} is over)")]
    NotLeader {
        /// The election.
        election: String,
        /// The term that ended.
        term: u64,
    },
    /// An election value longer than every backend accepts.
    #[error("an election value of {len} bytes, at most {max} are allowed")]
    ValueTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A write lock asked for by an owner that holds the same lock for reading. A reader-writer
    /// lock whose writers wait for earlier readers would wait for itself; release the read
    /// guard first.
    #[error("{owner:?} holds {lock_id:?} for reading: release it before asking to write")]
    Upgrade {
        /// The lock id.
        lock_id: String,
        /// The owner holding the read lock.
        owner: String,
    },
}

impl UsageError {
    /// Check one acquire of `asked` permits of `semaphore`, of `limit` permits.
    pub fn check_permits(semaphore: &str, limit: u32, asked: u32) -> Result<(), UsageError> {
        let semaphore = semaphore.to_string();
        if limit == 0 {
            Err(UsageError::NoPermits { semaphore })
        } else if asked == 0 {
            Err(UsageError::ZeroAsked { semaphore })
        } else if asked > limit {
            Err(UsageError::TooManyPermits { semaphore, asked, limit })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_checked_against_the_limit() {
        assert_eq!(UsageError::check_permits("s", 4, 4), Ok(()));
        assert_eq!(UsageError::check_permits("s", 4, 1), Ok(()));
        assert!(matches!(UsageError::check_permits("s", 0, 1), Err(UsageError::NoPermits { .. })));
        assert!(matches!(UsageError::check_permits("s", 4, 0), Err(UsageError::ZeroAsked { .. })));
        let e = UsageError::check_permits("s", 4, 5).unwrap_err();
        assert_eq!(e.to_string(), "asked for 5 permits of semaphore \"s\", which has 4");
    }
}
