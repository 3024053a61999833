//! Told at once: Redis's client-side-caching invalidations (`CLIENT TRACKING`), turned into a
//! bell for the token lock's holders (the crate docs, "Told Lost at once", give the protocol
//! and its cost).
//!
//! The link's connection runs RESP3 with `CLIENT TRACKING ON NOLOOP`; the server then pushes
//! `invalidate [key, ...]` on that same connection when a key the connection has read is
//! changed by another connection (or expires, or is evicted), and `invalidate nil` when a
//! database is flushed. The driver hands every push to a callback in its reader task
//! ([`Link`](crate::link::Link) installs it): [`Tracker::invalidated`] rings the bell of every
//! holder watching one of the keys, and does nothing else (it must not block the reader).
//!
//! A bell is only a reason to look: the holder's keeper answers it with a renewal, whose
//! token check decides. So a push that does not mean our key changed (a key of the same name
//! in another database, a flush of another database, a push still in flight from a previous
//! grant of the same key) costs one renewal and changes nothing.
//!
//! Tracking is one-shot per key and per connection: a key is tracked from a read until the
//! first change, and a change by ourselves (our renewal's `PEXPIRE`, silenced by `NOLOOP`) ends
//! it too. The token lock's scripts therefore read the key last (`src/token.rs`), and a new
//! connection tracks nothing: the link announces each new connection ([`Tracker::rearmed`]),
//! and each holder whose key was tracked on an older one renews at once, which reads its key on
//! the new connection.

use redis::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{watch, Notify};

/// Key → the bells of the holders watching it, by watch id (more than one only for a moment:
/// a waiter registers before its attempt, see [`Tracker::watch`]).
type Bells = HashMap<String, Vec<(u64, Arc<Notify>)>>;

/// The holders of one backend that watch their keys, and the connection count they follow.
pub(crate) struct Tracker {
    bells: Mutex<Bells>,
    next_id: AtomicU64,
    /// The generation of the newest armed connection: holders tracked on an older one renew at
    /// once to be tracked on it.
    armed: watch::Sender<u64>,
}

/// Why a watching holder's keeper wakes before its renewal is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alert {
    /// Redis said the key changed.
    Invalidated,
    /// A new connection is armed; the key is not tracked on it yet.
    Rearmed,
}

impl Tracker {
    pub(crate) fn new() -> Arc<Tracker> {
        Arc::new(Tracker {
            bells: Mutex::default(),
            next_id: AtomicU64::new(0),
            armed: watch::Sender::new(0),
        })
    }

    /// Start watching `key`. Made *before* the acquire script is sent: the push for a change
    /// right after the grant may be read off the connection before the grant's reply reaches
    /// the caller, and would otherwise find nobody to ring.
    pub(crate) fn watch(self: &Arc<Self>, key: &str) -> Watch {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let bell = Arc::new(Notify::new());
        let mut bells = self.bells.lock().unwrap();
        bells.entry(key.to_string()).or_default().push((id, bell.clone()));
        Watch {
            tracker: self.clone(),
            key: key.to_string(),
            id,
            bell,
            armed: self.armed.subscribe(),
            tracked: 0,
        }
    }

    /// An `invalidate` push's data: an array of keys, or nil for every key (a flush).
    pub(crate) fn invalidated(&self, data: &[Value]) {
        let bells = self.bells.lock().unwrap();
        for item in data {
            match item {
                Value::Array(keys) => {
                    for key in keys.iter().filter_map(key_of) {
                        bells.get(&key).into_iter().flatten().for_each(|(_, b)| b.notify_one());
                    }
                }
                _ => bells.values().flatten().for_each(|(_, b)| b.notify_one()),
            }
        }
    }

    /// Connection `generation` was armed for tracking.
    pub(crate) fn rearmed(&self, generation: u64) {
        self.armed.send_if_modified(|n| {
            let newer = generation > *n;
            *n = (*n).max(generation);
            newer
        });
    }

    fn forget(&self, key: &str, id: u64) {
        let mut bells = self.bells.lock().unwrap();
        if let Some(list) = bells.get_mut(key) {
            list.retain(|(i, _)| *i != id);
            if list.is_empty() {
                bells.remove(key);
            }
        }
    }
}

fn key_of(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// One holder's watch on its key; dropping it (the keeper ends) stops watching.
pub(crate) struct Watch {
    tracker: Arc<Tracker>,
    key: String,
    id: u64,
    bell: Arc<Notify>,
    armed: watch::Receiver<u64>,
    /// The generation of the connection the key was granted on (0: not yet granted).
    tracked: u64,
}

impl Watch {
    /// The key was granted on connection `generation`, where the grant's script read it: a
    /// newer connection must read it again, this one need not.
    pub(crate) fn granted_on(&mut self, generation: u64) {
        self.tracked = generation;
    }

    /// The next alert. A push that came while nobody waited is kept (one permit), so none is
    /// lost while the keeper renews.
    pub(crate) async fn next(&mut self) -> Alert {
        loop {
            tokio::select! {
                _ = self.bell.notified() => return Alert::Invalidated,
                // The sender lives in the tracker this watch holds: `changed` never fails.
                _ = self.armed.changed() => {
                    let armed = *self.armed.borrow_and_update();
                    if armed > self.tracked {
                        // Renewals read the key on the newest connection from now on.
                        self.tracked = armed;
                        return Alert::Rearmed;
                    }
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.tracker.forget(&self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn keys(names: &[&str]) -> Vec<Value> {
        vec![Value::Array(names.iter().map(|n| Value::BulkString(n.as_bytes().to_vec())).collect())]
    }

    async fn rang(w: &mut Watch) -> Option<Alert> {
        tokio::time::timeout(Duration::from_millis(20), w.next()).await.ok()
    }

    #[tokio::test]
    async fn a_push_rings_the_watchers_of_its_keys_and_a_flush_rings_all() {
        let t = Tracker::new();
        let (mut a, mut b) = (t.watch("lock:a"), t.watch("lock:b"));
        t.invalidated(&keys(&["lock:a", "other"]));
        assert_eq!(rang(&mut a).await, Some(Alert::Invalidated));
        assert_eq!(rang(&mut b).await, None);
        t.invalidated(&[Value::Nil]);
        assert_eq!(rang(&mut a).await, Some(Alert::Invalidated));
        assert_eq!(rang(&mut b).await, Some(Alert::Invalidated));
        b.granted_on(2);
        t.rearmed(2);
        assert_eq!(rang(&mut b).await, None, "granted on that connection: tracked there");
        t.rearmed(3);
        assert_eq!(rang(&mut b).await, Some(Alert::Rearmed));
        drop(a);
        assert!(!t.bells.lock().unwrap().contains_key("lock:a"), "forgotten when dropped");
    }
}
