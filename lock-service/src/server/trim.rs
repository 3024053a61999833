//! Giving the memory of closed connections back to the system.
//!
//! A connection's buffers and tasks are freed when it closes, but glibc's allocator keeps
//! freed memory in its arenas for reuse, and a node that once held thousands of connections
//! would keep their memory for good. So once a second, when many connections closed since
//! the last time, the node asks the allocator to give its free pages back (`malloc_trim`),
//! on a blocking thread: it walks the heap once, and only after such a wave. Elsewhere than
//! with glibc this does nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Closed connections that make a trim worth its cost.
const AFTER: usize = 64;

/// Counts closed connections, and trims after a wave of them.
#[derive(Default)]
pub(super) struct Trimmer {
    closed: AtomicUsize,
}

impl Trimmer {
    /// A client connection closed.
    pub(super) fn closed(&self) {
        self.closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Once a second, trim if [`AFTER`] connections or more closed since the last time.
    pub(super) async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.closed.load(Ordering::Relaxed) >= AFTER {
                self.closed.store(0, Ordering::Relaxed);
                let _ = tokio::task::spawn_blocking(trim).await;
            }
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks the allocator's own free lists, under its locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
