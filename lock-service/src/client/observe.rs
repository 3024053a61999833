//! Following elections from a session: the changes the leader pushes, handed to every
//! [`Observer`] of the election, in order and once each.
//!
//! An election is followed by one task per session ([`follow`]): it asks the leader to push
//! the election's changes to the session (`Observe`, whose answer is who leads now), then waits
//! for the session to resume on another connection (a reconnect or a failover forgets what a
//! node was asked to push) and asks again, until nobody observes the election or the session
//! is lost. Pushes and answers can cross on the wire: an answer is used only when no push for
//! the election came while it was asked, so an older state never follows a newer one. Each
//! observer is told a change only when it differs from the last it was told, and never a
//! leader of an older term than one it was told. A change that happened and was undone while
//! the session moved to another connection is not seen: the observer learns the state it
//! finds there.

use super::lock;
use super::locker::unexpected;
use super::session::Session;
use crate::proto::{LeaderInfo, Reply, Request};
use lock_core::election::{Leader, Observer};
use lock_core::lock::LockError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

type Change = Result<Option<Leader>, LockError>;

/// One observer: where its changes go, and the last it was told.
struct Watch {
    tx: mpsc::UnboundedSender<Change>,
    told: Option<Option<LeaderInfo>>,
}

/// One election's observers, the pushes seen for it, and the last state known.
#[derive(Default)]
struct Followed {
    pushes: u64,
    known: Option<Option<LeaderInfo>>,
    watches: Vec<Watch>,
}

impl Followed {
    /// Tell every observer `leader`, unless it is what it was told last or of an older term.
    fn report(&mut self, leader: Option<LeaderInfo>) {
        self.known = Some(leader.clone());
        self.watches.retain_mut(|w| tell(w, &leader));
    }
}

/// Tell `w` about `leader` if it is news; false when `w` is gone.
fn tell(w: &mut Watch, leader: &Option<LeaderInfo>) -> bool {
    let older = match (&w.told, leader) {
        (Some(Some(told)), Some(new)) => new.term < told.term,
        _ => false,
    };
    if older || w.told.as_ref() == Some(leader) {
        return !w.tx.is_closed();
    }
    w.told = Some(leader.clone());
    let change = leader.clone().map(|l| Leader { owner: l.owner, value: l.value, term: l.term });
    w.tx.send(Ok(change)).is_ok()
}

/// The elections a session follows.
#[derive(Default)]
pub(super) struct Observations {
    by_election: Mutex<HashMap<String, Followed>>,
}

impl Observations {
    /// A new observer of `election`: true when no task follows it yet.
    fn add(&self, election: &str) -> (mpsc::UnboundedReceiver<Change>, bool) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut by = lock(&self.by_election);
        let first = !by.contains_key(election);
        let f = by.entry(election.to_string()).or_default();
        let mut w = Watch { tx, told: None };
        if let Some(known) = f.known.clone() {
            tell(&mut w, &known);
        }
        f.watches.push(w);
        (rx, first)
    }

    /// The leader pushed a change of `election`.
    pub(super) fn pushed(&self, election: &str, leader: Option<LeaderInfo>) {
        if let Some(f) = lock(&self.by_election).get_mut(election) {
            f.pushes += 1;
            f.report(leader);
        }
    }

    fn pushes(&self, election: &str) -> u64 {
        lock(&self.by_election).get(election).map_or(0, |f| f.pushes)
    }

    /// An `Observe` asked after `pushes` pushes was answered `leader`: news only if no push
    /// came meanwhile.
    fn answered(&self, election: &str, leader: Option<LeaderInfo>, pushes: u64) {
        if let Some(f) = lock(&self.by_election).get_mut(election) {
            if f.pushes == pushes {
                f.report(leader);
            }
        }
    }

    /// Whether anyone still observes `election`; forgets it when nobody does.
    fn followed(&self, election: &str) -> bool {
        let mut by = lock(&self.by_election);
        let live = by.get_mut(election).is_some_and(|f| {
            f.watches.retain(|w| !w.tx.is_closed());
            !f.watches.is_empty()
        });
        if !live {
            by.remove(election);
        }
        live
    }

    /// End `election`'s observations with `error`.
    fn fail(&self, election: &str, error: LockError) {
        if let Some(f) = lock(&self.by_election).remove(election) {
            for w in f.watches {
                let _ = w.tx.send(Err(error.clone()));
            }
        }
    }

    /// The session is lost: end every observation.
    pub(super) fn end(&self, reason: &str) {
        for (election, f) in lock(&self.by_election).drain() {
            for w in f.watches {
                let error =
                    LockError::LeaseLost { lock_id: election.clone(), reason: reason.into() };
                let _ = w.tx.send(Err(error));
            }
        }
    }
}

/// An observer of `election` on `session`.
pub(super) fn observe(session: &Arc<Session>, election: &str) -> Observer {
    let (rx, first) = session.observations.add(election);
    if first {
        tokio::spawn(follow(Arc::downgrade(session), election.to_string()));
    }
    Observer::new(election, rx)
}

/// Ask the leader to push `election`'s changes to the session, again after every resume,
/// while anyone observes it (see the module docs).
async fn follow(session: Weak<Session>, election: String) {
    loop {
        let Some(s) = session.upgrade() else { return };
        if s.lost_reason().is_some() || !s.observations.followed(&election) {
            return;
        }
        let mut resumed = s.resumed.subscribe();
        resumed.borrow_and_update();
        let pushes = s.observations.pushes(&election);
        let ask = Request::Observe { session: s.id, lock: election.clone() };
        match s.call(ask).await {
            Ok(Reply::Leader { leader }) => s.observations.answered(&election, leader, pushes),
            Ok(other) => {
                s.observations.fail(&election, unexpected(&election, other));
                return;
            }
            Err(_) if s.lost_reason().is_some() => return,
            Err(e) => {
                tracing::debug!("session {}: observing {election:?}: {e}", s.id);
                drop(s);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        }
        drop(s);
        loop {
            tokio::select! {
                changed = resumed.changed() => match changed {
                    Ok(()) => break,
                    Err(_) => return,
                },
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            let Some(s) = session.upgrade() else { return };
            if s.lost_reason().is_some() || !s.observations.followed(&election) {
                return;
            }
        }
    }
}
