//! What a holder is told: a task per guard that publishes [`LeaseState::Lost`] when the lease
//! ends, or when someone else deletes or overwrites the guard's key.
//!
//! The lease alone cannot tell the second: a client that deletes our key (by mistake, or
//! with etcdctl) leaves our lease alive, and the next waiter, which watches our key, is
//! granted the lock while we still hold it. So the task watches our own key from the revision
//! after its creation. A lock's holder never writes that key again before its release, so
//! every event on it is someone else's; a leader writes its proclamations to it, and records
//! each one ([`OwnWrites`]) before sending it, so that those are not news. A `PUT` means
//! overwritten; a `DELETE` means deleted, by another client
//! or with our lease, which one `LeaseTimeToLive` tells apart.
//!
//! The watch is opened in the background after the grant (the holder does not wait for it),
//! once per grant, even for a guard released at once, so that a grant's cost is one number;
//! the release stops the task before it deletes the key, so our own `DELETE` is never
//! reported. A watch that breaks is opened again from the same revision; one the server
//! cancels (compaction, or a token it refused) is replaced after a read of our key shows it
//! untouched.

use crate::rpc::Rpc;
use crate::session::{Session, RETRY_PAUSE};
use etcd_client::{EventType, GetOptions, WatchOptions};
use lock_core::lock::{LeaseLost, LeaseState};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The longest pause between attempts to watch our key while they fail.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// What a guard's task follows, and how it is stopped.
pub(crate) struct Holder {
    pub session: Arc<Session>,
    /// Our key.
    pub key: String,
    /// Its create revision.
    pub revision: i64,
    /// The values we write to our key ourselves while holding it (an election's
    /// proclamations): a `PUT` of one of them, on our key as we created it and with our
    /// lease, is not news.
    pub own_writes: Option<Arc<OwnWrites>>,
    /// The guard's state, which the task turns to `Lost`.
    pub state: Arc<watch::Sender<LeaseState>>,
    /// `true` (or dropped) once the guard is released: nothing that happens to the key after
    /// that is news.
    pub stop: watch::Receiver<bool>,
}

/// How one watch of our key ended.
enum Seen {
    /// Someone else wrote or deleted it: the event's type, revision, and the lease of the
    /// key it wrote.
    Changed(EventType, i64, i64),
    /// The guard was released.
    Stopped,
    /// The server cancelled the watch: read the key, then watch again.
    Cancelled,
    /// The stream broke or could not be opened: watch again from the same revision.
    Broke,
}

/// What a read of our key found.
enum Found {
    /// As we created it, at the read's revision.
    Untouched(i64),
    /// Changed: why the holder lost the lock.
    Changed(String),
}

impl Holder {
    /// Follow the lease and the key until one is lost (and say so) or the guard is released.
    pub async fn run(mut self) {
        let session = self.session.clone();
        let reason = tokio::select! {
            why = session.ended() => why,
            why = self.key_changed() => match why {
                Some(why) => why,
                None => return,
            },
        };
        let stop = self.stop.clone();
        self.state.send_if_modified(|s| {
            let news = *s == LeaseState::Held && !stopped(&stop);
            if news {
                *s = LeaseState::Lost(LeaseLost { reason });
            }
            news
        });
    }

    /// Watch our key until someone else changes it (why the lock is lost), or the guard is
    /// released (`None`).
    async fn key_changed(&mut self) -> Option<String> {
        let mut from = self.revision + 1;
        let mut pause = RETRY_PAUSE;
        loop {
            match self.watch_from(from).await {
                Seen::Changed(kind, at, lease) => return Some(self.explain(kind, at, lease).await),
                Seen::Stopped => return None,
                Seen::Cancelled => match self.read().await {
                    Some(Found::Changed(why)) => return Some(why),
                    Some(Found::Untouched(at)) => (from, pause) = (at + 1, RETRY_PAUSE),
                    None => {}
                },
                Seen::Broke => {}
            }
            let stop = &mut self.stop;
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|s| *s) => return None,
            }
            if stopped(&self.stop) {
                return None;
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// One watch of our key from revision `from`. Opening it is not cut short by a release, so
    /// that every watch counted as sent reaches the server.
    async fn watch_from(&mut self, from: i64) -> Seen {
        let session = &self.session;
        let options = WatchOptions::new().with_start_revision(from);
        let open = || {
            let (mut watches, key, options) =
                (session.client.watch_client(), self.key.clone(), options.clone());
            async move { watches.watch(key, Some(options)).await }
        };
        let Ok(mut stream) = session.call(Rpc::Watch, &self.key, open).await else {
            return Seen::Broke;
        };
        loop {
            let answer = tokio::select! {
                _ = self.stop.wait_for(|s| *s) => return Seen::Stopped,
                answer = stream.message() => answer,
            };
            let Ok(Some(answer)) = answer else { return Seen::Broke };
            if stopped(&self.stop) {
                return Seen::Stopped;
            }
            for event in answer.events() {
                if event.event_type() == EventType::Put
                    && event.kv().is_some_and(|kv| self.ours(kv))
                {
                    continue;
                }
                let (at, lease) = event.kv().map_or((0, 0), |kv| (kv.mod_revision(), kv.lease()));
                return Seen::Changed(event.event_type(), at, lease);
            }
            if answer.canceled() {
                return Seen::Cancelled;
            }
        }
    }

    /// Read our key after a cancelled watch: untouched, or how it changed.
    async fn read(&self) -> Option<Found> {
        let session = &self.session;
        let get = || {
            let (mut kv, key) = (session.client.kv_client(), self.key.clone());
            async move { kv.get(key, Some(GetOptions::new())).await }
        };
        let answer = session.call(Rpc::Range, &self.key, get).await.ok()?;
        let at = answer.header().map_or(0, |h| h.revision());
        Some(match answer.kvs().first() {
            None => Found::Changed(self.deleted(None).await),
            Some(kv) if kv.mod_revision() == self.revision || self.ours(kv) => {
                if kv.create_revision() == self.revision && kv.lease() == session.lease {
                    Found::Untouched(at)
                } else {
                    Found::Changed(self.overwritten(kv.mod_revision(), kv.lease()))
                }
            }
            Some(kv) => Found::Changed(self.overwritten(kv.mod_revision(), kv.lease())),
        })
    }

    /// Whether `kv` is our key as we created it, holding a value we wrote ourselves.
    fn ours(&self, kv: &etcd_client::KeyValue) -> bool {
        kv.create_revision() == self.revision
            && kv.lease() == self.session.lease
            && self.own_writes.as_ref().is_some_and(|own| own.contains(kv.value()))
    }

    /// Why an event on our key lost us the lock.
    async fn explain(&self, kind: EventType, at: i64, lease: i64) -> String {
        match kind {
            EventType::Put => self.overwritten(at, lease),
            EventType::Delete => self.deleted(Some(at)).await,
        }
    }

    fn overwritten(&self, at: i64, lease: i64) -> String {
        let bound = match lease {
            l if l == self.session.lease => "still bound to our lease".to_string(),
            0 => "now bound to no lease".to_string(),
            l => format!("now bound to lease {l:x}, not ours"),
        };
        format!(
            "its key {} was overwritten by another client at revision {at} ({bound}): the key \
             that holds the lock is no longer only this holder's",
            self.key
        )
    }

    /// Why our key is gone: our lease ended (the session may not know yet), or another client
    /// deleted it. One `LeaseTimeToLive` tells which.
    async fn deleted(&self, at: Option<i64>) -> String {
        let session = &self.session;
        let (key, lease) = (&self.key, session.lease);
        let at = at.map(|r| format!(" at revision {r}")).unwrap_or_default();
        if let Some(why) = session.over() {
            return why;
        }
        let ask = || {
            let mut leases = session.client.lease_client();
            async move { leases.time_to_live(lease, None).await }
        };
        match session.call(Rpc::LeaseTimeToLive, key, ask).await {
            Ok(l) if l.ttl() > 0 => format!(
                "its key {key} was deleted by another client{at} while lease {lease:x} still \
                 stands: the next waiter may hold the lock now"
            ),
            Ok(_) => format!(
                "its key {key} was deleted{at} with lease {lease:x}, which etcd says has ended \
                 (expired or revoked): the next waiter may hold the lock now"
            ),
            Err(e) => format!(
                "its key {key} was deleted{at}, by another client or with lease {lease:x} (etcd \
                 could not be asked which: {e}): the next waiter may hold the lock now"
            ),
        }
    }
}

/// The values a holder wrote to its own key after creating it (an election's proclamations),
/// recorded before each write is sent so that its watch never reports it.
#[derive(Debug, Default)]
pub(crate) struct OwnWrites {
    values: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl OwnWrites {
    /// The most values remembered: a proclamation older than that is long past its event.
    const KEPT: usize = 16;

    /// `value` is about to be written by us.
    pub fn add(&self, value: &[u8]) {
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        if values.len() == Self::KEPT {
            values.remove(0);
        }
        values.push(value.to_vec());
    }

    fn contains(&self, value: &[u8]) -> bool {
        self.values.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|v| v == value)
    }
}

/// Whether the guard was released (or dropped, which drops the sender).
fn stopped(stop: &watch::Receiver<bool>) -> bool {
    stop.has_changed().is_err() || *stop.borrow()
}
