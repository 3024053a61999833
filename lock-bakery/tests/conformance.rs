//! The shared conformance suite, on the embedded store (simulated time, and wall time).
lock_core::embedded_conformance_suite!(|client, ctx| std::sync::Arc::new(
    lock_bakery::BakeryLocker::new(client, ctx, Default::default()).unwrap()
) as std::sync::Arc<dyn lock_core::Locker>);
