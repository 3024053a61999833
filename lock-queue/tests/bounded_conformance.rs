//! The shared conformance suite for the bounded queue lock, on the embedded store (simulated
//! time, and wall time).
lock_core::embedded_conformance_suite!(|client, ctx| std::sync::Arc::new(
    lock_queue::BoundedQueueLocker::new(client, ctx, Default::default()).expect("valid config")
) as std::sync::Arc<dyn lock_core::Locker>);
