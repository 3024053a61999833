//! The fenced variant's token: read the counters of a majority, take the greatest, and raise
//! a majority to one more (a max-register on majorities; why `INCR` on a majority is not
//! enough, and when this is sound, is in the crate docs).

use super::masters::{Late, Tally};
use super::Lease;
use crate::RedisBackend;
use lock_core::LockError;
use std::sync::LazyLock;
use tokio::time::Instant;

/// Raises the counter to `ARGV[1]` unless it already is at least that: never lowers it, so a
/// slow writer of an older token cannot undo a newer one.
static RAISE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1",
    )
});

/// The token of the grant `lease` just won: `Some` once a majority holds it, `None` when the
/// validity ran out meanwhile (the grant is then as good as lost, like step 3's late round),
/// an error when too few masters answered.
pub(super) async fn next_token(
    lease: &Lease,
    valid_until: Instant,
) -> Result<Option<u64>, LockError> {
    let (n, quorum) = (lease.masters.len(), lease.masters.quorum());
    let read = lease
        .masters
        .on_all(lease.config.master_timeout, Late::Drop, {
            let lock_id = lease.lock_id.clone();
            move |m| read(m, lock_id.clone())
        })
        .await;
    let seen: Vec<u64> = read.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    if seen.len() < quorum {
        let tally = Tally::of(read.into_iter().map(|r| r.map(|_| true)).collect());
        return Err(tally.too_few_answers("fencing-token read", quorum, n));
    }
    let token = seen.into_iter().max().unwrap_or(0) + 1;
    let written = lease
        .masters
        .on_all(lease.config.master_timeout, Late::Drop, {
            let lock_id = lease.lock_id.clone();
            move |m| raise(m, lock_id.clone(), token)
        })
        .await;
    let tally = Tally::of(written);
    if tally.yes < quorum {
        return Err(tally.too_few_answers("fencing-token write", quorum, n));
    }
    // Handed out only while the grant is valid: the next holder's read comes after this.
    Ok((Instant::now() < valid_until).then_some(token))
}

async fn read(m: RedisBackend, lock_id: String) -> Result<u64, LockError> {
    let key = m.fence_key(&lock_id);
    let mut conn = m.conn().await?;
    let value: Option<u64> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .map_err(|e| m.err("GET", &key, e))?;
    Ok(value.unwrap_or(0))
}

async fn raise(m: RedisBackend, lock_id: String, token: u64) -> Result<bool, LockError> {
    let key = m.fence_key(&lock_id);
    let mut conn = m.conn().await?;
    let _: i64 = RAISE
        .key(&key)
        .arg(token)
        .invoke_async(&mut conn)
        .await
        .map_err(|e| m.err("fencing-token script on", &key, e))?;
    Ok(true)
}
