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

use super::locker::unexpected;
use super::session::Session;
use crate::proto::{Reply, Request};
use lock_core::election::Observer;
use std::sync::{Arc, Weak};
use std::time::Duration;

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
