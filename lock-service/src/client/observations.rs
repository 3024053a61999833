//! The elections a session follows: each observer's channel and what it was told last, the
//! pushes seen per election, and the rules that keep an observer's changes in order and
//! once each ([`super::observe`] has the protocol).

use super::lock;
use crate::proto::LeaderInfo;
use lock_core::election::Leader;
use lock_core::lock::LockError;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::mpsc;

pub(super) type Change = Result<Option<Leader>, LockError>;

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
    pub(super) fn add(&self, election: &str) -> (mpsc::UnboundedReceiver<Change>, bool) {
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

    pub(super) fn pushes(&self, election: &str) -> u64 {
        lock(&self.by_election).get(election).map_or(0, |f| f.pushes)
    }

    /// An `Observe` asked after `pushes` pushes was answered `leader`: news only if no push
    /// came meanwhile.
    pub(super) fn answered(&self, election: &str, leader: Option<LeaderInfo>, pushes: u64) {
        if let Some(f) = lock(&self.by_election).get_mut(election) {
            if f.pushes == pushes {
                f.report(leader);
            }
        }
    }

    /// Whether anyone still observes `election`; forgets it when nobody does.
    pub(super) fn followed(&self, election: &str) -> bool {
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
    pub(super) fn fail(&self, election: &str, error: LockError) {
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
