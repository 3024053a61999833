//! What every Cassandra-model algorithm needs from its environment, injected rather than read
//! from globals: who it is, how long leases last, which consistency to use, where write
//! timestamps and queue time come from, and the seed of its randomness.

use crate::lock::{validate_id, LockError};
use crate::store::Consistency;
use crate::time::{LocalClock, SharedTimeSource, TimestampGenerator};
use std::sync::Arc;
use std::time::Duration;

/// The default lease TTL (the thesis's N seconds; it gives no number). Ten seconds frees a
/// crashed holder's lock quickly while leaving renewals (every 5 s) a wide margin.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// One lock client's environment.
#[derive(Clone)]
pub struct ClientContext {
    /// The owner id (the thesis's `threadId`), unique among contenders.
    pub owner: String,
    /// TTL of every cell written; renewed every TTL/2.
    pub ttl: Duration,
    /// Consistency of every read and write. The algorithms are correct at QUORUM (Lemma 1).
    pub consistency: Consistency,
    /// Write timestamps: strictly increasing for this client.
    pub timestamps: Arc<TimestampGenerator>,
    /// Time that orders the queue lock's entries.
    pub time: SharedTimeSource,
    /// Seed of the client's random choices (backoff).
    pub seed: u64,
}

impl ClientContext {
    /// A context whose timestamps and queue time both come from `clock`, with the default TTL
    /// and QUORUM.
    pub fn new(owner: impl Into<String>, clock: LocalClock, seed: u64) -> Self {
        ClientContext {
            owner: owner.into(),
            ttl: DEFAULT_TTL,
            consistency: Consistency::Quorum,
            timestamps: Arc::new(TimestampGenerator::new(clock.clone())),
            time: Arc::new(clock),
            seed,
        }
    }

    /// Set the TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Set the consistency level.
    pub fn with_consistency(mut self, consistency: Consistency) -> Self {
        self.consistency = consistency;
        self
    }

    /// Set the queue time source.
    pub fn with_time(mut self, time: SharedTimeSource) -> Self {
        self.time = time;
        self
    }

    /// Check the settings: a valid owner id and a TTL of at least one second (CQL TTLs are whole
    /// seconds).
    pub fn validate(&self) -> Result<(), LockError> {
        validate_id("owner id", &self.owner)?;
        if self.ttl < Duration::from_secs(1) {
            return Err(LockError::Config(format!(
                "lease TTL must be at least 1 s (CQL TTLs are whole seconds), got {:?}",
                self.ttl
            )));
        }
        Ok(())
    }
}
