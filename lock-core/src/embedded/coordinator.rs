//! The coordinator: how a request reaches the replicas. Each request gets a timeline of
//! messages (a replica acts half-way through its round trip, its answer arrives at the end),
//! which the request walks with tokio sleeps; a write still due to some replicas when the
//! request ends goes on in the background.

use super::counters::{OpCounts, OpKind, TombstoneStats};
use super::handles::{ClientState, Inner};
use super::lock;
use super::read::ReadScan;
use super::replica::{Mutation, Replica};
use crate::store::{Consistency, StoreError};
use rand::RngExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl Inner {
    fn count_table(&self, table: &str, kind: OpKind) {
        let mut tables = lock(&self.table_counts);
        match tables.get_mut(table) {
            Some(counts) => counts.bump(kind),
            None => {
                let mut counts = OpCounts::default();
                counts.bump(kind);
                tables.insert(table.to_owned(), counts);
            }
        }
    }

    pub(super) fn deadline(&self, start: Instant) -> Instant {
        // A timeout too large for the clock means "never"; ~30 years is never for any run.
        start
            .checked_add(self.config.request_timeout)
            .or_else(|| start.checked_add(Duration::from_secs(30 * 365 * 86_400)))
            .unwrap_or(start)
    }

    pub(super) fn record_tombstones(&self, scan: &ReadScan<'_>, failed: bool) {
        let warn = self.config.tombstone_warn_threshold;
        let mut tables = lock(&self.tombstones);
        match tables.get_mut(scan.table) {
            Some(stats) => stats.record(scan.most, warn, failed),
            None => {
                let mut stats = TombstoneStats::default();
                stats.record(scan.most, warn, failed);
                tables.insert(scan.table.to_owned(), stats);
            }
        }
    }

    pub(super) fn running(&self) -> Vec<usize> {
        (0..self.replicas.len()).filter(|&i| self.replicas[i].is_running()).collect()
    }

    /// A mutation reaches replica `replica` at `now`: an overloaded replica may drop it
    /// ([`EmbeddedStore::lag_replica`]). True when applied (it will be acknowledged).
    fn deliver(
        &self,
        replica: usize,
        table: &str,
        row: &str,
        m: Mutation<'_>,
        now: Instant,
    ) -> bool {
        let Some(r) = self.replicas.get(replica) else { return false };
        let drop_ppm = r.drop_ppm.load(Ordering::Acquire);
        if drop_ppm > 0
            && r.is_running()
            && lock(&self.rng).random_range(0..1_000_000u32) < drop_ppm
        {
            return false;
        }
        r.apply(table, row, m, now, self.config.row_policy())
    }

    /// True when no replica lags: requests may then be served inline without latency.
    fn none_lagging(&self) -> bool {
        !self.replicas.iter().any(Replica::is_lagging)
    }
}

/// One scheduled step of a request: a replica applies or reads (`reply == false`, half-way
/// through its round trip) or its answer reaches the coordinator (`reply == true`).
#[derive(Clone, Copy)]
pub(super) struct Event {
    pub(super) at: Instant,
    /// Index into the replicas (writes) or into the chosen replicas (reads).
    pub(super) slot: usize,
    pub(super) reply: bool,
}

/// Builds the timeline of one request to `slots` replicas, sorted by time; a stable sort so
/// that simultaneous events keep a fixed order (each replica's apply before its reply). For a
/// mutation (`slots` are replica indices) an overloaded replica's lag delays both its apply
/// and its acknowledgement.
pub(super) fn timeline(
    inner: &Inner,
    start: Instant,
    slots: impl Iterator<Item = usize>,
    mutation: bool,
) -> Vec<Event> {
    let mut events = Vec::new();
    {
        let mut rng = lock(&inner.rng);
        for slot in slots {
            let lag = match inner.replicas.get(slot) {
                Some(r) if mutation => r.lag(),
                _ => Duration::ZERO,
            };
            let rt = inner.config.latency.sample(&mut rng);
            // An instant beyond the clock's range is never reached: that message is lost.
            if let Some(at) = start.checked_add(rt / 2 + lag) {
                events.push(Event { at, slot, reply: false });
            }
            if let Some(at) = start.checked_add(rt + lag) {
                events.push(Event { at, slot, reply: true });
            }
        }
    }
    events.sort_by_key(|e| e.at);
    events
}

/// A write in flight. Whatever applies are still due when it is dropped (the request
/// completed, timed out, or the caller gave up on it) go on in a background task: the
/// messages were sent and the replicas will act on them.
struct InFlight<'a> {
    pub(super) inner: &'a Arc<Inner>,
    pub(super) table: &'a str,
    pub(super) row: &'a str,
    pub(super) mutation: Mutation<'a>,
    pub(super) events: Vec<Event>,
    pub(super) next: usize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let pending: Vec<(Instant, usize)> = self
            .events
            .get(self.next..)
            .unwrap_or(&[])
            .iter()
            .filter(|e| !e.reply)
            .map(|e| (e.at, e.slot))
            .collect();
        if pending.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let inner = Arc::clone(self.inner);
        let table = self.table.to_owned();
        let row = self.row.to_owned();
        let mutation = self.mutation.to_owned_mutation();
        handle.spawn(async move {
            for (at, replica) in pending {
                tokio::time::sleep_until(at).await;
                inner.deliver(replica, &table, &row, mutation.as_mutation(), Instant::now());
            }
        });
    }
}

/// Who is asking: the store, its client handles, and the state the request is counted under.
pub(super) struct Caller<'a> {
    pub(super) inner: &'a Arc<Inner>,
    pub(super) state: &'a ClientState,
    pub(super) id: &'a str,
}

impl Caller<'_> {
    pub(super) fn count(&self, table: &str, kind: OpKind) {
        self.state.bump(kind);
        self.inner.count_table(table, kind);
    }

    /// Returns `Err(Unreachable)` after the request timeout when the client is isolated.
    pub(super) async fn check_reachable(&self) -> Result<(), StoreError> {
        if !self.state.isolated.load(Ordering::Acquire) {
            return Ok(());
        }
        tokio::time::sleep_until(self.inner.deadline(Instant::now())).await;
        Err(StoreError::Unreachable(format!(
            "client '{}' is cut off from the embedded store (simulated partition)",
            self.id
        )))
    }

    pub(super) async fn mutate(
        &self,
        table: &str,
        row: &str,
        m: Mutation<'_>,
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.count(table, m.kind());
        self.check_reachable().await?;
        let inner = self.inner;
        let start = Instant::now();
        let required = c.required(inner.replicas.len());

        if inner.config.latency.is_zero() && inner.none_lagging() {
            let alive = inner.replicas.iter().filter(|r| r.is_running()).count();
            if alive < required {
                tokio::task::yield_now().await;
                return Err(StoreError::Unavailable { consistency: c, required, alive });
            }
            let policy = inner.config.row_policy();
            let acks =
                inner.replicas.iter().filter(|r| r.apply(table, row, m, start, policy)).count();
            tokio::task::yield_now().await;
            if acks >= required {
                return Ok(());
            }
            // Only when a replica stopped between the check and the apply (another thread).
            tokio::time::sleep_until(inner.deadline(start)).await;
            return Err(StoreError::WriteTimeout { consistency: c, received: acks, required });
        }

        let live = inner.running();
        if live.len() < required {
            tokio::task::yield_now().await;
            return Err(StoreError::Unavailable { consistency: c, required, alive: live.len() });
        }
        let deadline = inner.deadline(start);
        let events = timeline(inner, start, live.iter().copied(), true);
        let mut flight = InFlight { inner, table, row, mutation: m, events, next: 0 };
        let mut applied = vec![false; inner.replicas.len()];
        let mut acks = 0usize;
        let mut slept = false;
        // The clock moves only while the request sleeps (a paused clock not even then but by
        // the runtime's advance), so it is read again only after a sleep: every read of a
        // tokio instant takes a lock of the runtime's clock.
        let mut now = start;
        while let Some(&ev) = flight.events.get(flight.next) {
            if ev.at > deadline {
                break;
            }
            if ev.at > now {
                tokio::time::sleep_until(ev.at).await;
                slept = true;
                now = Instant::now();
            }
            flight.next += 1;
            if ev.reply {
                if applied.get(ev.slot).copied().unwrap_or(false) {
                    acks += 1;
                    if acks >= required {
                        break;
                    }
                }
            } else {
                let ok = inner.deliver(ev.slot, table, row, m, now);
                if let Some(a) = applied.get_mut(ev.slot) {
                    *a = ok;
                }
            }
        }
        if !slept {
            tokio::task::yield_now().await;
        }
        if acks >= required {
            return Ok(());
        }
        // Every event left is after the deadline, so waiting for it skips none of them.
        tokio::time::sleep_until(deadline).await;
        Err(StoreError::WriteTimeout { consistency: c, received: acks, required })
    }
}
