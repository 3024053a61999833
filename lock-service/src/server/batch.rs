//! Group commit: the client commands that arrive while the leader's writes are under way go
//! to Raft together, as one entry ([`Command::Batch`]), the way etcd, ZooKeeper and Redis
//! gather many clients' writes into one append and one disk sync.
//!
//! **Why.** openraft's core appends each proposal as an entry of its own and waits for that
//! append to be on disk before it takes the next proposal. One command an entry was one disk
//! sync a command, one after the other, however many clients waited: the sync's latency
//! bounded the node's commits, and the disk and the cores sat mostly idle. An entry carrying
//! every command that waited costs one append, one sync and one replication round for all
//! of them.
//!
//! **How.** Commands queue on one task, which proposes whatever has queued as one entry
//! (at most [`MAX_BATCH`] commands) as soon as one of its [`WRITES_IN_FLIGHT`] writes is
//! free, and hands each command's caller its own outcome. A command that finds the queue
//! empty and a write free goes at once, alone, as a plain entry: an idle node adds no delay.
//! The entry is applied command by command in order ([`crate::state`]), each with a stamp of
//! its own, so every session id and fencing token stays unique and rising.
//!
//! The batcher also times each command, from its handing here to its outcome: the commit
//! latency of the node's metrics.
//!
//! **What it costs.** A command waits for the writes in flight before its own starts; at
//! most [`WRITES_IN_FLIGHT`] entries are ever queued in openraft's core, so a vote or a
//! heartbeat waits behind no more than those. The commit window ([`super::gate`]) still
//! bounds how many commands are between the clients and the applied state, and so how large
//! a batch grows, and shares it among the connections in turn.

use crate::raft::{NodeId, NodeInfo};
use crate::state::{Command, Outcome};
use openraft::error::{ClientWriteError, Fatal, RaftError};
use prometheus_client::metrics::histogram::Histogram;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;

/// Why Raft did not commit a proposal.
pub(super) type WriteError = RaftError<NodeId, ClientWriteError<NodeId, NodeInfo>>;

/// The most commands one entry carries: with openraft's 300 entries a replication message at
/// most, and a command of at most a few hundred bytes, a message stays well under
/// [`crate::proto::MAX_PEER_FRAME`].
pub(super) const MAX_BATCH: usize = 128;

/// The most entries proposed to Raft at once: one being synced, and the next gathered and
/// queued behind it, so the disk never waits for the batch after.
pub(super) const WRITES_IN_FLIGHT: usize = 2;

/// A command waiting for its entry, and where its outcome goes.
type Pending = (Command, oneshot::Sender<Result<Outcome, WriteError>>);

/// The queue in front of Raft's writes.
pub(super) struct Batcher {
    queue: mpsc::UnboundedSender<Pending>,
    /// From a command's handing to the batcher to its outcome (the node's metrics).
    latency: Histogram,
}

impl Batcher {
    /// A batcher proposing entries with `write`, and its task (on the current runtime); each
    /// command's time to its outcome goes to `latency`.
    pub(super) fn start<W, F>(write: W, latency: Histogram) -> (Batcher, JoinHandle<()>)
    where
        W: Fn(Command) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Outcome, WriteError>> + Send + 'static,
    {
        let (queue, pending) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(pending, Arc::new(write)));
        (Batcher { queue, latency }, task)
    }

    /// Commit `command` in the next entry and return what applying it did.
    pub(super) async fn write(&self, command: Command) -> Result<Outcome, WriteError> {
        let started = Instant::now();
        let (tx, rx) = oneshot::channel();
        self.queue.send((command, tx)).map_err(|_| stopped())?;
        let outcome = rx.await.map_err(|_| stopped())?;
        if outcome.is_ok() {
            self.latency.observe(started.elapsed().as_secs_f64());
        }
        outcome
    }
}

fn stopped() -> WriteError {
    RaftError::Fatal(Fatal::Stopped)
}

/// Gather what queued while no write was free, and propose it as one entry.
async fn run<W, F>(mut pending: mpsc::UnboundedReceiver<Pending>, write: Arc<W>)
where
    W: Fn(Command) -> F + Send + Sync + 'static,
    F: Future<Output = Result<Outcome, WriteError>> + Send + 'static,
{
    let free = Arc::new(Semaphore::new(WRITES_IN_FLIGHT));
    while let Some(first) = pending.recv().await {
        let Ok(place) = free.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match pending.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let write = write.clone();
        tokio::spawn(async move {
            commit(&*write, batch).await;
            drop(place);
        });
    }
}

/// Propose `batch` as one entry (a plain one for a single command) and answer each command.
async fn commit<W, F>(write: &W, mut batch: Vec<Pending>)
where
    W: Fn(Command) -> F,
    F: Future<Output = Result<Outcome, WriteError>>,
{
    if batch.len() == 1 {
        let (command, answer) = batch.remove(0);
        let _ = answer.send(write(command).await);
        return;
    }
    let (commands, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    match write(Command::Batch(commands)).await {
        Ok(Outcome::Batch(outcomes)) if outcomes.len() == answers.len() => {
            for (answer, outcome) in answers.into_iter().zip(outcomes) {
                let _ = answer.send(Ok(outcome));
            }
        }
        // Not what a batch is applied to: each caller is told it did not get its outcome.
        Ok(_) => {
            for answer in answers {
                let _ = answer.send(Ok(Outcome::Nothing));
            }
        }
        Err(e) => {
            for answer in answers {
                let _ = answer.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::LockTable;
    use std::sync::Mutex;

    /// Many commands sent together become a few entries, each command still gets its own
    /// outcome, and the grants' tokens are distinct, in entry order.
    #[tokio::test]
    async fn commands_sent_together_share_entries_and_keep_their_own_outcomes() {
        let table = Arc::new(Mutex::new((LockTable::default(), 0u64, Vec::new())));
        let log = table.clone();
        let (batcher, task) = Batcher::start(
            move |command: Command| {
                let log = log.clone();
                async move {
                    // An entry's append takes a while, as a disk sync does.
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    let mut guard = log.lock().unwrap();
                    let (table, index, sizes) = &mut *guard;
                    *index += 1;
                    sizes.push(match &command {
                        Command::Batch(c) => c.len(),
                        _ => 1,
                    });
                    Ok(table.apply(*index, &command, &mut Vec::new()))
                }
            },
            crate::counts::short_histogram(),
        );
        let batcher = Arc::new(batcher);
        let session = match batcher
            .write(Command::Open { ttl_ms: 1000, identity: None, key: None, max_sessions: None })
            .await
        {
            Ok(Outcome::Opened(s)) => s,
            other => panic!("not opened: {other:?}"),
        };
        let asks = (0..200).map(|i| {
            let batcher = batcher.clone();
            tokio::spawn(async move {
                let lock = format!("lock-{i}");
                let ask = Command::Acquire {
                    session,
                    lock: lock.clone(),
                    owner: "o".into(),
                    wait: true,
                    attempt: 1,
                    by: None,
                    share: Default::default(),
                    value: None,
                    max_asks: None,
                };
                (lock, batcher.write(ask).await)
            })
        });
        let mut answered = std::collections::BTreeMap::new();
        for ask in asks.collect::<Vec<_>>() {
            match ask.await.unwrap() {
                (lock, Ok(Outcome::Granted(token))) => answered.insert(lock, token),
                (lock, other) => panic!("{lock} not granted: {other:?}"),
            };
        }
        let (table, _, sizes) = &*table.lock().unwrap();
        let entries = sizes.len() - 1;
        assert!(entries < 100, "200 commands sent together took {entries} entries: {sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 201);
        let mut distinct: Vec<u64> = answered.values().copied().collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 200, "every grant a token of its own");
        assert!(distinct[0] > session, "tokens come after the session's stamp");
        let held: std::collections::BTreeMap<String, u64> =
            table.held_by(session).into_iter().map(|(lock, _, token, _)| (lock, token)).collect();
        assert_eq!(held, answered, "each ask answered the grant the table holds for it");
        task.abort();
    }
}
