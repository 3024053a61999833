//! The semaphore suite on the queue semaphore (simulated time, and wall time).
lock_core::embedded_semaphore_conformance_suite!(|client, ctx| std::sync::Arc::new(
    lock_queue::QueueSemaphore::new(client, ctx, Default::default()).expect("valid config")
)
    as std::sync::Arc<dyn lock_core::Semaphore>);
