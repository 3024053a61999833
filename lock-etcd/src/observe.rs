//! Following an election: one watch of its prefix, every change of leader or value reported
//! once, in order.
//!
//! The task reads the prefix's keys (the candidates) and the owner records at one revision,
//! reports who leads (the key with the lowest create revision), then watches the prefix from
//! the revision after that read. etcd delivers every event from a watch's start revision on,
//! grouped by revision, so the task keeps the candidates as etcd has them at each revision and
//! reports the leader after each revision that changed it: a leader that came and went
//! between two of the task's looks is still reported, and in order. A leader's owner comes
//! from its owner record, read as of the revision that created the candidate (the record is
//! created in the same transaction).
//!
//! A watch that breaks (an outage, a restarting server) is opened again from the revision
//! after the last one handled, and etcd replays what was missed. Only a watch the server
//! cancels because that history was compacted loses it: the task reads the keys again and
//! reports the leader it finds, so changes inside the compacted history are not seen. The task
//! ends when the observer is dropped.

use crate::rpc::Rpc;
use crate::session::{Session, RETRY_PAUSE};
use crate::{Inner, CANDIDATES, ELECTIONS};
use etcd_client::{
    EventType, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use lock_core::election::{Leader, Observer};
use lock_core::LockError;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Where an election's keys are.
pub(crate) struct Places {
    /// The election's prefix, `<root>/elections/<id>/`.
    pub prefix: String,
    /// The owner records' prefix, `<root>/candidates/<id>/`.
    pub owners: String,
}

impl Places {
    pub fn of(inner: &Inner, election: &str) -> Places {
        Places {
            prefix: format!("{}/", inner.kind_name(ELECTIONS, election)),
            owners: format!("{}/", inner.kind_name(CANDIDATES, election)),
        }
    }
}

type Change = Result<Option<Leader>, LockError>;

/// The leader whose key is `kv`, named by its owner record among `owners` (same name after the
/// prefix, same create revision) or else by its key's last segment (its lease in hex).
pub(crate) fn leader_of(kv: &KeyValue, owners: &[KeyValue]) -> Leader {
    let name = last_segment(kv.key());
    let owner = owners
        .iter()
        .find(|o| o.create_revision() == kv.create_revision() && last_segment(o.key()) == name)
        .map_or_else(
            || String::from_utf8_lossy(name).into_owned(),
            |o| String::from_utf8_lossy(o.value()).into_owned(),
        );
    Leader { owner, value: kv.value().to_vec(), term: kv.create_revision() as u64 }
}

fn last_segment(key: &[u8]) -> &[u8] {
    key.rsplit(|b| *b == b'/').next().unwrap_or(key)
}

/// An observer of `election`, fed by a task of its own.
pub(crate) fn observe(inner: Arc<Inner>, election: &str) -> Observer {
    let (tx, rx) = mpsc::unbounded_channel();
    let follower = Follower {
        places: Places::of(&inner, election),
        inner,
        tx,
        candidates: HashMap::new(),
        owners: HashMap::new(),
        told: None,
    };
    tokio::spawn(follower.run());
    Observer::new(election, rx)
}

/// A leader as the observer was told it: its key, create revision and value.
type Seen = (Vec<u8>, i64, Vec<u8>);

/// One candidate key: its create revision and value.
#[derive(Clone)]
struct Candidate {
    created: i64,
    value: Vec<u8>,
}

struct Follower {
    inner: Arc<Inner>,
    places: Places,
    tx: mpsc::UnboundedSender<Change>,
    /// The prefix's keys as of the last revision handled.
    candidates: HashMap<Vec<u8>, Candidate>,
    /// Owners found, by candidate create revision.
    owners: HashMap<i64, String>,
    /// The last change told: (key, create revision, value), or nobody.
    told: Option<Option<Seen>>,
}

/// How one watch ended.
enum Ended {
    /// Broken: watch again from the revision after the last one handled.
    Broke(i64),
    /// Cancelled or compacted: read again.
    Cancelled,
    /// The observer was dropped.
    Gone,
}

impl Follower {
    async fn run(mut self) {
        loop {
            let Some(mut at) = self.read().await else { return };
            loop {
                match self.watch_from(at + 1).await {
                    Ended::Gone => return,
                    Ended::Cancelled => break,
                    Ended::Broke(last) => {
                        at = last;
                        tokio::select! {
                            _ = tokio::time::sleep(RETRY_PAUSE) => {}
                            _ = self.tx.closed() => return,
                        }
                    }
                }
            }
        }
    }

    fn session(&self) -> Arc<Session> {
        self.inner.current()
    }

    /// Read the candidates and owner records, report who leads, and return the revision read
    /// at. Retried until it succeeds; `None` once the observer is gone.
    async fn read(&mut self) -> Option<i64> {
        loop {
            let session = self.session();
            let all =
                GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
            let txn = Txn::new().and_then([
                TxnOp::get(self.places.prefix.as_str(), Some(all)),
                TxnOp::get(self.places.owners.as_str(), Some(GetOptions::new().with_prefix())),
            ]);
            let send = || {
                let (mut kv, txn) = (session.client.kv_client(), txn.clone());
                async move { kv.txn(txn).await }
            };
            let answer = tokio::select! {
                answer = session.call(Rpc::Txn, &self.places.prefix, send) => answer,
                _ = self.tx.closed() => return None,
            };
            if let Ok(answer) = answer {
                let gets: Vec<Vec<KeyValue>> = answer
                    .op_responses()
                    .into_iter()
                    .filter_map(|r| match r {
                        TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
                        _ => None,
                    })
                    .collect();
                if let [candidates, owners] = gets.as_slice() {
                    self.candidates = candidates
                        .iter()
                        .map(|kv| {
                            let c = Candidate {
                                created: kv.create_revision(),
                                value: kv.value().to_vec(),
                            };
                            (kv.key().to_vec(), c)
                        })
                        .collect();
                    if let Some(first) = candidates.first() {
                        let leader = leader_of(first, owners);
                        self.owners.insert(first.create_revision(), leader.owner);
                    }
                    if !self.report().await {
                        return None;
                    }
                    return Some(answer.header().map_or(0, |h| h.revision()));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(RETRY_PAUSE) => {}
                _ = self.tx.closed() => return None,
            }
        }
    }

    /// Watch the prefix from `from`, reporting after each revision that changed the leader.
    async fn watch_from(&mut self, from: i64) -> Ended {
        let session = self.session();
        let options = WatchOptions::new().with_prefix().with_start_revision(from);
        let prefix = self.places.prefix.clone();
        let open = || {
            let (mut watches, prefix, options) =
                (session.client.watch_client(), prefix.clone(), options.clone());
            async move { watches.watch(prefix, Some(options)).await }
        };
        let opened = tokio::select! {
            opened = session.call(Rpc::Watch, &prefix, open) => opened,
            _ = self.tx.closed() => return Ended::Gone,
        };
        let Ok(mut stream) = opened else { return Ended::Broke(from - 1) };
        let mut handled = from - 1;
        loop {
            let answer = tokio::select! {
                answer = stream.message() => answer,
                _ = self.tx.closed() => return Ended::Gone,
            };
            let Ok(Some(answer)) = answer else { return Ended::Broke(handled) };
            if answer.canceled() || answer.compact_revision() > 0 {
                return Ended::Cancelled;
            }
            let events = answer.events();
            for (i, event) in events.iter().enumerate() {
                let Some(kv) = event.kv() else { continue };
                match event.event_type() {
                    EventType::Put => {
                        let c =
                            Candidate { created: kv.create_revision(), value: kv.value().to_vec() };
                        self.candidates.insert(kv.key().to_vec(), c);
                    }
                    EventType::Delete => {
                        self.candidates.remove(kv.key());
                    }
                }
                let revision = kv.mod_revision();
                let last_of_revision = events
                    .get(i + 1)
                    .and_then(|e| e.kv())
                    .is_none_or(|next| next.mod_revision() != revision);
                if last_of_revision {
                    handled = revision;
                    if !self.report().await {
                        return Ended::Gone;
                    }
                }
            }
        }
    }

    /// Tell the observer who leads now, if it changed. False once the observer is gone.
    async fn report(&mut self) -> bool {
        let leader = self
            .candidates
            .iter()
            .min_by_key(|(_, c)| c.created)
            .map(|(key, c)| (key.clone(), c.created, c.value.clone()));
        if self.told.as_ref() == Some(&leader) {
            return !self.tx.is_closed();
        }
        let change = match &leader {
            None => None,
            Some((key, created, value)) => {
                let owner = self.owner(key, *created).await;
                Some(Leader { owner, value: value.clone(), term: *created as u64 })
            }
        };
        self.told = Some(leader);
        self.tx.send(Ok(change)).is_ok()
    }

    /// The owner of the candidate `key` created at `created`: its owner record as of that
    /// revision (or now, if that revision was compacted), else its key's last segment.
    async fn owner(&mut self, key: &[u8], created: i64) -> String {
        if let Some(owner) = self.owners.get(&created) {
            return owner.clone();
        }
        let name = last_segment(key);
        let record = format!("{}{}", self.places.owners, String::from_utf8_lossy(name));
        let session = self.session();
        let mut found = None;
        for options in [GetOptions::new().with_revision(created), GetOptions::new()] {
            let read = || {
                let (mut kv, record, options) =
                    (session.client.kv_client(), record.clone(), options.clone());
                async move { kv.get(record, Some(options)).await }
            };
            if let Ok(answer) = session.call(Rpc::Range, &record, read).await {
                found = Some(answer.kvs().to_vec());
                break;
            }
        }
        let Some(owners) = found else {
            // Unreadable: name it by its lease, and ask again next time.
            return String::from_utf8_lossy(name).into_owned();
        };
        let owner = owners.iter().find(|o| o.create_revision() == created).map_or_else(
            || String::from_utf8_lossy(name).into_owned(),
            |o| String::from_utf8_lossy(o.value()).into_owned(),
        );
        self.owners.insert(created, owner.clone());
        owner
    }
}
