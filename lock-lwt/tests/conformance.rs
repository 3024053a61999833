//! The shared conformance suite for the lightweight-transaction lock, on the embedded store's
//! Paxos (simulated time, and wall time).
lock_core::embedded_conformance_suite!(|client, ctx| {
    std::sync::Arc::new(
        lock_lwt::LwtLocker::new(client, ctx, Default::default()).expect("valid config"),
    ) as std::sync::Arc<dyn lock_core::Locker>
});
