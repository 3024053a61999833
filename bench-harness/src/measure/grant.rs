//! One acquisition in the grant log ([`Grant`]): who asked for which lock when, when it was
//! granted, when the holder let go, and the fencing token it got. A leaf of
//! [`crate::measure`]: the log, its passes and every metric name it.

use crate::primitive::Share;
use serde::{Deserialize, Serialize};

/// One acquisition in the grant log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Lock index.
    pub lock: u32,
    /// Contender index.
    pub contender: u32,
    /// When the contender called `lock`.
    pub requested_us: u64,
    /// When `lock` returned the guard.
    pub granted_us: u64,
    /// When the holder called `release`.
    pub released_us: u64,
    /// The fencing token.
    pub token: u64,
    /// The holder's guard said its lease was lost before it let go.
    #[serde(default)]
    pub lease_lost: bool,
    /// The holder crashed while holding (`released_us` is the crash): it let go of nothing.
    #[serde(default)]
    pub crashed: bool,
    /// When the request's place in line was fixed (`LockGuard::queued_at`), for locks that
    /// have a line; fairness "in line" ([`super::metrics::Overtakes::in_line`]) is judged
    /// from it. Not in `grants.csv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_us: Option<u64>,
    /// How it held the lock: alone (a mutex, a write, a leadership), as a reader, or some
    /// permits of a semaphore ([`Share`]).
    #[serde(default, skip_serializing_if = "Share::is_exclusive_ref")]
    pub share: Share,
}

impl Grant {
    /// Acquisition latency.
    pub fn latency_us(&self) -> u64 {
        self.granted_us.saturating_sub(self.requested_us)
    }
}

/// A grant of `lock` to `contender`, requested, granted and released at these times with
/// this token, for tests.
#[cfg(test)]
pub(crate) fn test_grant(
    lock: u32,
    contender: u32,
    req: u64,
    granted: u64,
    released: u64,
    token: u64,
) -> Grant {
    Grant {
        lock,
        contender,
        requested_us: req,
        granted_us: granted,
        released_us: released,
        token,
        ..Grant::default()
    }
}
