//! Fencing tokens on the cell store.
//!
//! A fencing token is a number handed out with every grant, strictly increasing per lock across
//! holders, so that storage downstream can refuse a write carrying a smaller token than one it
//! has already seen (a holder whose lease expired while it was paused).
//!
//! # How it is kept
//!
//! Row `lockId` of table [`FENCE_TABLE`] holds one cell per token ever handed out, with no TTL.
//! The column name is `u64::MAX - token`, zero-padded to 20 digits, so the row's *first* cell is
//! the greatest token and a slice of one cell finds it. After its grant the holder:
//!
//! 1. reads the first cell of the row: the greatest token `t` so far (0 when empty);
//! 2. writes the cell for `t + 1` (value: its owner id);
//! 3. checks that its lease is still valid now ([`crate::lease::LeaseKeeper::valid_until`]);
//!    if not, it gives up the grant as lost.
//!
//! # Why tokens strictly increase, also after a holder's lease expired
//!
//! Only a holder runs steps 1–2, and holds are mutually exclusive while leases are valid. Take
//! holders A then B. A's steps 1–3 ended before A's lease ran out (step 3), i.e. before A's
//! cells could have expired, and B is granted only once A's cells are gone (released or
//! expired). So A's write of `t_A` completed before B's read began, and a QUORUM read after a
//! completed QUORUM write sees it: B reads at least `t_A` and writes `t_B > t_A`. An expired
//! lease deletes nothing here: the token cells have no TTL, so a lock that changed hands by
//! expiry continues from the last token. If A was paused between steps 1 and 3 past its lease,
//! step 3 fails and A's token is never handed to A's caller, even if its write lands later.
//! The argument assumes, as every lease does, that the client's clock and the store's clock
//! run at the same rate (bounded drift over one TTL).
//!
//! # Keeping the row small
//!
//! One live cell per grant forever would make the row grow without bound. So the holder of
//! token `t`, when it releases (after its cells are deleted, off the acquisition path),
//! deletes the cell of token `t - KEEP_TOKENS` ([`KEEP_TOKENS`] = 4): the row keeps the newest
//! few tokens live. Why this keeps tokens strictly increasing: the cell deleted is never the
//! greatest one. Token `t`'s write completed at QUORUM before `t`'s holder got its guard, so
//! from then on every read sees a token `>= t > t - KEEP_TOKENS`; and nobody writes the column
//! of `t - KEEP_TOKENS` again, since a holder writes only the successor of the greatest token
//! it read. The deleted cells become tombstones, and they sort *after* the live cells (greater
//! tokens sort first), so step 1's `first(1)` read stops at the first, live, cell and scans no
//! tombstone, however many accumulate until a compaction purges them. A holder that crashes,
//! or whose trim fails, leaves one extra live cell, also after the newest ones: the row's live
//! cells grow by one per crash, never per grant.

use crate::store::{CellStore, CellWrite, Consistency, Slice, StoreError};
use crate::time::TimestampGenerator;

/// The table of fencing-token cells.
pub const FENCE_TABLE: &str = "lock_fence";

/// The column name that stores `token`: sorts greater tokens first.
pub fn token_column(token: u64) -> String {
    format!("{:020}", u64::MAX - token)
}

/// The token a column name stores.
pub fn column_token(column: &str) -> Option<u64> {
    column.parse::<u64>().ok().map(|inv| u64::MAX - inv)
}

/// Steps 1 and 2: read the greatest token of `lock_id` and write the next one. Two store round
/// trips. The caller must then check its lease (step 3) before handing the token out.
pub async fn next_token<S: CellStore + ?Sized>(
    store: &S,
    timestamps: &TimestampGenerator,
    lock_id: &str,
    owner: &str,
    consistency: Consistency,
) -> Result<u64, StoreError> {
    next_tokens(store, timestamps, lock_id, owner, 1, consistency).await.map(|t| *t.end())
}

/// Steps 1 and 2 for `count` tokens at once (a semaphore's permits): read the greatest token
/// `t` and write `t + count`; the tokens are `t + 1 ..= t + count`. Still two round trips.
pub async fn next_tokens<S: CellStore + ?Sized>(
    store: &S,
    timestamps: &TimestampGenerator,
    lock_id: &str,
    owner: &str,
    count: u64,
    consistency: Consistency,
) -> Result<std::ops::RangeInclusive<u64>, StoreError> {
    let last = store
        .read(FENCE_TABLE, lock_id, Slice::first(1), consistency)
        .await?
        .first()
        .and_then(|c| column_token(&c.column))
        .unwrap_or(0);
    let greatest = last + count.max(1);
    let cell = CellWrite {
        column: token_column(greatest),
        value: owner.as_bytes().to_vec(),
        timestamp: timestamps.next(),
        ttl: None,
    };
    store.write(FENCE_TABLE, lock_id, std::slice::from_ref(&cell), consistency).await?;
    Ok(last + 1..=greatest)
}

/// How many of the newest token cells the row keeps live.
pub const KEEP_TOKENS: u64 = 4;

/// Deletes the cell of token `token - KEEP_TOKENS`, if any: called by the holder of `token`
/// when it releases. One store round trip (none for the first tokens).
pub async fn trim_older<S: CellStore + ?Sized>(
    store: &S,
    timestamps: &TimestampGenerator,
    lock_id: &str,
    token: u64,
    consistency: Consistency,
) -> Result<(), StoreError> {
    let Some(old) = token.checked_sub(KEEP_TOKENS).filter(|&t| t > 0) else { return Ok(()) };
    store.delete(FENCE_TABLE, lock_id, &token_column(old), timestamps.next(), consistency).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greater_tokens_sort_first_and_round_trip() {
        let cols: Vec<String> =
            [1u64, 2, 10, 999, u64::MAX - 1].iter().map(|t| token_column(*t)).collect();
        let mut sorted = cols.clone();
        sorted.sort();
        assert_eq!(sorted, cols.iter().rev().cloned().collect::<Vec<_>>());
        for t in [0u64, 1, 42, u64::MAX] {
            assert_eq!(column_token(&token_column(t)), Some(t));
            assert_eq!(token_column(t).len(), 20);
        }
    }
}
