//! openraft's own test suite for storage (`openraft::testing::Suite`): the log store and the
//! state machine of a node, on a fresh data directory each time, answer as openraft expects
//! (log state, reads, truncation, purge, vote, membership, apply, snapshots). The log store
//! hands its writes to a writer thread, so this is also where a write that is not yet
//! readable, or a purge overtaken by an append, would show.

use lock_service::log::LogStore;
use lock_service::raft::{NodeId, StateMachine, Store, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{StorageError, StorageIOError};
use std::sync::Arc;

/// A fresh store in a temporary directory, kept while the test runs.
struct Fresh;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Fresh {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let fail =
            |e: String| StorageError::from(StorageIOError::read(openraft::AnyError::error(e)));
        let dir = tempfile::tempdir().map_err(|e| fail(e.to_string()))?;
        let store = Store::open(dir.path(), "suite", 0).map_err(|e| fail(e.to_string()))?;
        let log = LogStore::open(store.clone(), dir.path()).map_err(fail)?;
        let sm = StateMachine::open(store, Arc::new(|_| {})).map_err(|e| fail(e.to_string()))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(Fresh).expect("openraft's storage suite");
}
