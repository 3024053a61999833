//! Store load on a real server: the requests the contenders send, per table and kind, in the
//! embedded store's units, counted on their way out.
//!
//! - **Cassandra**: a [`CellStore`] wrapper that counts each call before passing it on. Every
//!   [`CellStore`] call is exactly one request on the wire (a write of several cells of one row
//!   is one single-partition batch, see `lock-cassandra`), so counting calls counts requests.
//! - **Redis, Redlock, ZooKeeper, etcd**: their lock crates report each request they send to a
//!   [`RequestHook`] given in their connect settings ([`RequestCounter::hook`]), naming its
//!   target (filed here as the table) and its command or RPC, which the engine maps onto a
//!   [`Kind`]. Each crate's docs say what one grant costs in its own terms.
//!
//! Failed requests count too, as on the embedded store: they loaded the cluster (or the
//! network) all the same.

use async_trait::async_trait;
use lock_core::embedded::{OpCounts, StoreCounters};
use lock_core::requests::{Request, RequestHook};
use lock_core::store::{
    CasRequest, CasResult, Cell, CellStore, CellWrite, Consistency, Micros, SerialConsistency,
    Slice, StoreError,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Request counters shared by every [`CountingStore`] of a run, and the sessions the hooked
/// clients opened.
#[derive(Debug, Default)]
pub struct RequestCounter {
    per_table: Mutex<BTreeMap<String, OpCounts>>,
    sessions: AtomicU64,
}

/// The kind a request is filed under, as the embedded store's counters have them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A read.
    Read,
    /// A write.
    Write,
    /// A delete.
    Delete,
    /// A conditional write or delete, done atomically by the server (a lightweight
    /// transaction, an etcd transaction, a Redis `SET NX` or compare-and-act script).
    Cas,
    /// A SERIAL read.
    SerialRead,
}

impl RequestCounter {
    fn bump(&self, table: &str, kind: Kind) {
        let mut map = self.per_table.lock().unwrap_or_else(|e| e.into_inner());
        let c = match map.get_mut(table) {
            Some(c) => c,
            None => map.entry(table.to_string()).or_default(),
        };
        match kind {
            Kind::Read => c.reads += 1,
            Kind::Write => c.writes += 1,
            Kind::Delete => c.deletes += 1,
            Kind::Cas => c.cas += 1,
            Kind::SerialRead => c.serial_reads += 1,
        }
    }

    /// A hook for a server engine's lock crate: each request it reports is counted under its
    /// target as the table, and under the kind `kind` gives its command; a request whose
    /// command is `opens` (the one that opens a session) also counts a session.
    pub fn hook(
        self: &Arc<Self>,
        kind: fn(&Request<'_>) -> Kind,
        opens: Option<&'static str>,
    ) -> RequestHook {
        let me = Arc::clone(self);
        RequestHook::new(move |r| {
            if opens == Some(r.command) {
                me.sessions.fetch_add(1, Ordering::Relaxed);
            }
            me.bump(r.target, kind(&r))
        })
    }

    /// The sessions opened so far (requests of the command the hooks were told opens one).
    pub fn sessions(&self) -> u64 {
        self.sessions.load(Ordering::Relaxed)
    }

    /// The counts so far, in the embedded store's shape (no per-client split).
    pub fn snapshot(&self) -> StoreCounters {
        StoreCounters {
            per_table: self.per_table.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            ..StoreCounters::default()
        }
    }

    /// Forget every count (after the setup, before the contenders start).
    pub fn reset(&self) {
        self.per_table.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.sessions.store(0, Ordering::Relaxed);
    }
}

/// A store that counts each request in a [`RequestCounter`] and forwards it to `S`.
#[derive(Clone)]
pub struct CountingStore<S> {
    inner: S,
    counter: Arc<RequestCounter>,
}

impl<S> CountingStore<S> {
    /// `inner`, counted into `counter`.
    pub fn new(inner: S, counter: Arc<RequestCounter>) -> Self {
        CountingStore { inner, counter }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for CountingStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingStore").field("inner", &self.inner).finish()
    }
}

#[async_trait]
impl<S: CellStore> CellStore for CountingStore<S> {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        consistency: Consistency,
    ) -> Result<(), StoreError> {
        // A write of no cells sends nothing (lock-cassandra skips it).
        if !cells.is_empty() {
            self.counter.bump(table, Kind::Write);
        }
        self.inner.write(table, row, cells, consistency).await
    }

    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        timestamp: Micros,
        consistency: Consistency,
    ) -> Result<(), StoreError> {
        self.counter.bump(table, Kind::Delete);
        self.inner.delete(table, row, column, timestamp, consistency).await
    }

    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        consistency: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        // A slice of limit 0 sends nothing (lock-cassandra answers it locally).
        if slice.limit != Some(0) {
            self.counter.bump(table, Kind::Read);
        }
        self.inner.read(table, row, slice, consistency).await
    }

    // A lightweight transaction is one request on the wire; the Paxos round trips inside it
    // happen between the cluster's nodes, out of the client's sight (the embedded store
    // counts those itself).
    async fn cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        self.counter.bump(table, Kind::Cas);
        self.inner.cas(table, row, request, serial, commit).await
    }

    async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.counter.bump(table, Kind::SerialRead);
        self.inner.read_serial(table, row, slice, serial).await
    }

    fn doorbell(&self) -> Option<std::sync::Arc<dyn lock_core::doorbell::Doorbell>> {
        self.inner.doorbell()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel};

    #[tokio::test]
    async fn counts_one_request_per_call_that_sends_one() {
        let store = EmbeddedStore::new(EmbeddedConfig {
            latency: LatencyModel::new(Default::default(), Default::default()),
            replicas: 1,
            ..EmbeddedConfig::default()
        });
        let counter = Arc::new(RequestCounter::default());
        let s = CountingStore::new(store.client("a"), counter.clone());
        let cell = CellWrite { column: "c".into(), value: b"v".to_vec(), timestamp: 1, ttl: None };
        s.write(
            "t",
            "r",
            &[cell.clone(), CellWrite { column: "d".into(), ..cell.clone() }],
            Consistency::One,
        )
        .await
        .unwrap();
        s.write("t", "r", &[], Consistency::One).await.unwrap();
        s.read("t", "r", Slice::all(), Consistency::One).await.unwrap();
        s.read("u", "r", Slice::first(0), Consistency::One).await.unwrap();
        s.delete("t", "r", "c", 2, Consistency::One).await.unwrap();
        let ours = counter.snapshot();
        assert_eq!(ours.total().total(), 3);
        let t = &ours.per_table["t"];
        assert_eq!((t.reads, t.writes, t.deletes), (1, 1, 1));
        counter.reset();
        assert_eq!(counter.snapshot().total().total(), 0);
    }

    #[test]
    fn a_hook_files_requests_under_their_target_and_the_kind_of_their_command() {
        let counter = Arc::new(RequestCounter::default());
        let kind = |r: &Request<'_>| if r.command == "get" { Kind::Read } else { Kind::Cas };
        let hook = counter.hook(kind, Some("grant"));
        hook.sent("kv", "get");
        hook.sent("kv", "txn");
        hook.sent("lease", "grant");
        assert_eq!(counter.sessions(), 1, "a grant opened a session, nothing else did");
        let counts = counter.snapshot();
        let kv = &counts.per_table["kv"];
        assert_eq!((kv.reads, kv.cas, kv.writes), (1, 1, 0));
        assert_eq!(counts.per_table["lease"].cas, 1);
        assert_eq!(counts.total().total(), 3);
    }
}
