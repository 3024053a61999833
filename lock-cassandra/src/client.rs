//! One contender's handle on a [`CassandraStore`]: the store's session, a row prefix, and a
//! switch that cuts it off as a crash or a partition would.

use crate::CassandraStore;
use async_trait::async_trait;
use lock_core::store::{
    CasRequest, CasResult, Cell, CellStore, CellWrite, Consistency, Micros, SerialConsistency,
    Slice, StoreError,
};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One contender's handle on a [`CassandraStore`]: the same session and statements, plus a
/// switch that cuts this handle off (every request then fails at once with
/// [`StoreError::Unreachable`] and nothing is sent), as a crash or a partition would, and an
/// optional prefix put before every row key (to keep test runs apart on a shared cluster).
/// Cheap to clone; clones share the switch.
#[derive(Clone)]
pub struct CassandraClient {
    pub(crate) store: CassandraStore,
    pub(crate) id: Arc<str>,
    pub(crate) row_prefix: Arc<str>,
    pub(crate) cut_off: Arc<AtomicBool>,
    pub(crate) doorbell: Option<Arc<dyn lock_core::doorbell::Doorbell>>,
}

impl fmt::Debug for CassandraClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CassandraClient")
            .field("id", &self.id)
            .field("row_prefix", &self.row_prefix)
            .field("cut_off", &self.is_cut_off())
            .finish()
    }
}

impl CassandraClient {
    /// The contender id this handle was made for.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The store this handle is on.
    pub fn store(&self) -> &CassandraStore {
        &self.store
    }

    /// Put `prefix` before every row key this handle reads or writes.
    pub fn with_row_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.row_prefix = Arc::from(prefix.into());
        self
    }

    /// The same client with `doorbell`: the process's doorbells for locks that wake each
    /// other (queue-push; e.g. a [`lock_core::doorbell::UdpDoorbells`] bound to this host's
    /// address on the cluster's network). Cassandra itself cannot push.
    pub fn with_doorbell(mut self, doorbell: Arc<dyn lock_core::doorbell::Doorbell>) -> Self {
        self.doorbell = Some(doorbell);
        self
    }

    /// The row-key prefix (empty by default).
    pub fn row_prefix(&self) -> &str {
        &self.row_prefix
    }

    /// Cut this handle off from the cluster (`true`) or reconnect it (`false`).
    pub fn cut_off(&self, cut: bool) {
        self.cut_off.store(cut, Ordering::Release);
    }

    /// True while cut off.
    pub fn is_cut_off(&self) -> bool {
        self.cut_off.load(Ordering::Acquire)
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.is_cut_off() {
            return Err(StoreError::Unreachable(format!(
                "client '{}' is cut off from the cluster ({}): simulated partition, nothing was sent",
                self.id,
                self.store.inner.config.nodes.join(", ")
            )));
        }
        Ok(())
    }

    /// The row key as stored: the prefix, then `row`.
    pub fn stored_row(&self, row: &str) -> String {
        format!("{}{row}", self.row_prefix)
    }
}

#[async_trait]
impl CellStore for CassandraClient {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.store.do_write(table, &self.stored_row(row), cells, c).await
    }

    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        ts: Micros,
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.store.do_delete(table, &self.stored_row(row), column, ts, c).await
    }

    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.check()?;
        self.store.do_read(table, &self.stored_row(row), &slice, c).await
    }

    async fn cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        self.check()?;
        self.store.do_cas(table, &self.stored_row(row), request, serial, commit).await
    }

    async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.check()?;
        self.store.do_read_serial(table, &self.stored_row(row), &slice, serial).await
    }

    fn doorbell(&self) -> Option<Arc<dyn lock_core::doorbell::Doorbell>> {
        self.doorbell.clone()
    }
}
