//! The reader-writer suite on the queue reader-writer lock (simulated time, and wall time).
lock_core::embedded_rwlock_conformance_suite!(|client, ctx| std::sync::Arc::new(
    lock_queue::QueueRwLocker::new(client, ctx, Default::default()).expect("valid config")
)
    as std::sync::Arc<dyn lock_core::RwLocker>);
