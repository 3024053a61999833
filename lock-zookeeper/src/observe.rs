//! Following an election ([`ZkElector::observe`](crate::ZkElector)): a task per observer that
//! looks at who leads, reports it if it changed, and sets one watch that fires on the next
//! change.
//!
//! Candidates' znodes are sequential, so a znode created later never gets ahead of the leader:
//! the leader changes only when its znode goes, and its value only when its znode is
//! rewritten. So while someone leads, the observer watches the leader's znode alone (`getData`
//! with a watch), which fires on both, and not the directory, which would wake it for every
//! candidate that comes or goes. While nobody leads it watches the directory's children (or,
//! before the first candidate ever, the directory's creation). When the watch fires it looks
//! again, and reports what it finds if that differs from what it reported last.
//!
//! What it can miss, and why, is in [`ZkElector`](crate::ZkElector)'s docs.

use crate::naming::{candidate_owner, sequence_of};
use crate::op::Op;
use crate::session::{Session, RETRY_PAUSE};
use crate::Contender;
use lock_core::election::{Leader, Observer};
use lock_core::LockError;
use std::sync::Arc;
use tokio::sync::mpsc;
use zookeeper_client as zk;

/// The leader whose znode is `name`, holding `data`, with `stat`: its owner from the name or
/// the data ([`candidate_owner`]), its value the data, its term the znode's `czxid`.
pub(crate) fn leader_of(name: &str, data: Vec<u8>, stat: &zk::Stat) -> Leader {
    Leader { owner: candidate_owner(name, &data), value: data, term: stat.czxid as u64 }
}

/// An observer of `election`, fed by a task of its own on `c`'s sessions.
pub(crate) fn observe(c: Contender, election: &str) -> Observer {
    let (tx, rx) = mpsc::unbounded_channel();
    let dir = c.dir(election);
    tokio::spawn(Follower { c, dir, tx, told: None }.run());
    Observer::new(election, rx)
}

/// The leader as reported, and its znode's name; `None` for nobody.
type Seen = Option<(String, Leader)>;

struct Follower {
    c: Contender,
    dir: String,
    tx: mpsc::UnboundedSender<Result<Option<Leader>, LockError>>,
    /// What was reported last (`None` before the first report).
    told: Option<Seen>,
}

/// How following on one session ended.
enum Ended {
    /// The observer was dropped.
    Gone,
    /// The session ended, or a request failed in a way asking again may mend: look again.
    Again,
}

impl Follower {
    async fn run(mut self) {
        loop {
            let session = tokio::select! {
                session = self.c.session() => session,
                _ = self.tx.closed() => return,
            };
            let ended = match session {
                Ok(session) => self.follow(&session).await,
                Err(e) => self.failed(e),
            };
            if let Ended::Gone = ended {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(RETRY_PAUSE) => {}
                _ = self.tx.closed() => return,
            }
        }
    }

    /// A failure: look again later if asking again may mend it, else tell the observer and end.
    fn failed(&mut self, e: LockError) -> Ended {
        if e.is_transient() {
            return Ended::Again;
        }
        let _ = self.tx.send(Err(e));
        Ended::Gone
    }

    /// Look, report and wait for the next change, on `session` until it ends.
    async fn follow(&mut self, session: &Arc<Session>) -> Ended {
        loop {
            let watcher = match self.look(session).await {
                Ok(Some(watcher)) => watcher,
                // Changed between two requests of the look: look again at once.
                Ok(None) => continue,
                Err(_) if session.is_over() => return Ended::Again,
                Err(e) => return self.failed(e),
            };
            if self.tx.is_closed() {
                return Ended::Gone;
            }
            let event = tokio::select! {
                event = watcher.changed() => event,
                _ = self.tx.closed() => return Ended::Gone,
            };
            if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                return Ended::Again;
            }
        }
    }

    /// Find who leads, report it if it changed, and return the watch that fires on the next
    /// change; `None` when the election changed under the look (look again).
    async fn look(&mut self, session: &Session) -> Result<Option<zk::OneshotWatcher>, LockError> {
        let dir = &self.dir;
        let queue = self.c.queue(session, dir).await?;
        if let Some((_, name)) = queue.first() {
            let path = format!("{dir}/{name}");
            let read = || session.client.get_and_watch_data(&path);
            return match session.read(Op::WatchData, &path, read).await? {
                Ok((data, stat, watcher)) => {
                    self.report(Some((name.clone(), leader_of(name, data, &stat))));
                    Ok(Some(watcher))
                }
                // It went meanwhile: the next candidate leads, or nobody.
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(session.refused("watch data", &path, e)),
            };
        }
        let list = || session.client.list_and_watch_children(dir);
        match session.read(Op::WatchChildren, dir, list).await? {
            Ok((children, watcher)) => {
                if children.iter().any(|name| sequence_of(name).is_some()) {
                    return Ok(None);
                }
                self.report(None);
                Ok(Some(watcher))
            }
            // No candidate has ever been here: wait for the directory.
            Err(zk::Error::NoNode) => {
                match session
                    .read(Op::Watch, dir, || session.client.check_and_watch_stat(dir))
                    .await?
                {
                    Ok((None, watcher)) => {
                        self.report(None);
                        Ok(Some(watcher))
                    }
                    Ok((Some(_), _)) => Ok(None),
                    Err(e) => Err(session.refused("watch", dir, e)),
                }
            }
            Err(e) => Err(session.refused("watch children", dir, e)),
        }
    }

    /// Tell the observer who leads now, if it differs from what it was told last.
    fn report(&mut self, seen: Seen) {
        if self.told.as_ref() == Some(&seen) {
            return;
        }
        let change = seen.clone().map(|(_, leader)| leader);
        self.told = Some(seen);
        // A closed channel (the observer dropped) ends the task at its next wait.
        let _ = self.tx.send(Ok(change));
    }
}
