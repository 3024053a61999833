//! What the conformance test binaries share: the suite of every Cassandra-model lock, each in a
//! module of its own.

/// The conformance suite of each Cassandra-model lock (shadow, queue, bakery and the
/// lightweight-transaction lock lwt), each in a module named after it, on fixtures made by
/// `$fixture(seed, build)` (a function of the calling module), run when `$run_if` is `Ok` and
/// otherwise each test saying why not.
macro_rules! every_lock {
    ($fixture:ident, $run_if:expr) => {
        every_lock!(@one shadow, lock_shadow::ShadowLocker::new, $fixture, $run_if);
        every_lock!(@one queue, lock_queue::QueueLocker::new, $fixture, $run_if);
        every_lock!(@one bakery, lock_bakery::BakeryLocker::new, $fixture, $run_if);
        every_lock!(@one lwt, lock_lwt::LwtLocker::new, $fixture, $run_if);
    };
    (@one $name:ident, $new:path, $fixture:ident, $run_if:expr) => {
        mod $name {
            use super::*;
            lock_core::conformance_suite!(
                lock_core::conformance::Mode::Wall,
                |seed| $fixture(
                    seed,
                    std::sync::Arc::new(|c, ctx| std::sync::Arc::new(
                        $new(c, ctx, Default::default()).expect("config")
                    ) as std::sync::Arc<dyn lock_core::Locker>)
                ),
                seeds = 2,
                contenders = 16,
                run_if = $run_if
            );
        }
    };
}
