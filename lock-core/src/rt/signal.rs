//! A value that tasks wait on, woken in the order they began waiting.
//!
//! tokio's `watch` would do the same work, but it parks each receiver on one of several
//! notifiers picked by a thread-local random number that nothing seeds, and a change wakes
//! the notifiers one after the other: tasks that wait on one value wake in a random order.
//! The simulation runs woken tasks in the order they were woken, so a run whose tasks wait
//! together on one value (the requests of a frozen client, say) would not be fixed by its
//! seed. A [`Signal`] parks every waiter on one `Notify`, which wakes them first come, first
//! served.

use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

/// A value behind a lock, and the tasks waiting for it to change ([`Signal::wait_for`]).
#[derive(Debug, Default)]
pub struct Signal<T> {
    value: Mutex<T>,
    changed: Notify,
}

impl<T> Signal<T> {
    /// A signal holding `value`.
    pub fn new(value: T) -> Self {
        Signal { value: Mutex::new(value), changed: Notify::new() }
    }

    /// The value now, as `read` sees it.
    pub fn read<R>(&self, read: impl FnOnce(&T) -> R) -> R {
        read(&self.value())
    }

    /// Sets the value and wakes every waiter, in the order they began waiting; returns the
    /// value it replaced.
    pub fn replace(&self, value: T) -> T {
        let old = std::mem::replace(&mut *self.value(), value);
        self.changed.notify_waiters();
        old
    }

    /// Waits until `accept` accepts the value (at once, without yielding, if it does now) and
    /// returns what `accept` made of it.
    pub async fn wait_for<R>(&self, mut accept: impl FnMut(&T) -> Option<R>) -> R {
        // Most waits return at once (a client's every request waits here for a thaw that is
        // almost never due): only a wait that must park registers with the notifier.
        if let Some(accepted) = self.read(&mut accept) {
            return accepted;
        }
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the value is read: a change between the read and the wait
            // is not missed.
            changed.as_mut().enable();
            if let Some(accepted) = self.read(&mut accept) {
                return accepted;
            }
            changed.await;
        }
    }

    fn value(&self) -> MutexGuard<'_, T> {
        // A value is only ever replaced whole, so a panic elsewhere leaves it consistent.
        self.value.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::{self, Simulation};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn waiters_wake_in_the_order_they_began_waiting_whatever_the_seed() {
        for seed in 0..20 {
            let order = Simulation::new(seed).block_on(async {
                let signal = Arc::new(Signal::new(true));
                let woke = Arc::new(Mutex::new(Vec::new()));
                let mut tasks = Vec::new();
                for i in 0..16 {
                    let (signal, woke) = (signal.clone(), woke.clone());
                    tasks.push(rt::spawn(async move {
                        signal.wait_for(|frozen| (!frozen).then_some(())).await;
                        woke.lock().unwrap().push(i);
                    }));
                    // Each begins waiting before the next is spawned.
                    rt::yield_now().await;
                }
                rt::sleep(Duration::from_millis(1)).await;
                assert!(woke.lock().unwrap().is_empty(), "no one wakes while it is set");
                assert!(signal.replace(false), "the value replaced is returned");
                for t in tasks {
                    t.await.unwrap();
                }
                let order = woke.lock().unwrap().clone();
                order
            });
            assert_eq!(order, (0..16).collect::<Vec<_>>(), "seed {seed}");
        }
    }

    #[test]
    fn an_accepted_value_returns_at_once_and_a_change_between_read_and_wait_is_seen() {
        Simulation::new(1).block_on(async {
            let signal = Arc::new(Signal::new(Some(7)));
            assert_eq!(signal.wait_for(|v| *v).await, 7);
            signal.replace(None);
            let waiter = {
                let signal = signal.clone();
                rt::spawn(async move { signal.wait_for(|v| *v).await })
            };
            rt::yield_now().await;
            // Set twice before the waiter runs again: it sees the last value.
            signal.replace(Some(1));
            signal.replace(Some(2));
            assert_eq!(waiter.await.unwrap(), 2);
            assert_eq!(signal.read(|v| *v), Some(2));
        });
    }
}
