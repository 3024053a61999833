//! The shared conformance suite for the push queue lock, on the embedded store (simulated
//! time, and wall time), woken through the store's in-process doorbells.
lock_core::embedded_conformance_suite!(|client, ctx| {
    let bell = lock_core::CellStore::doorbell(&client).expect("the embedded store has doorbells");
    std::sync::Arc::new(
        lock_queue::PushQueueLocker::new(client, ctx, Default::default(), bell)
            .expect("valid config"),
    ) as std::sync::Arc<dyn lock_core::Locker>
});
