//! The Raft log: every entry not yet purged in memory, for openraft to read, and on disk in
//! the segments of [`crate::wal`], written by one thread that syncs whatever has queued up
//! together. The vote, the committed index and the purge point go to the node's redb file
//! through the same thread, in order.
//!
//! **Why a writer thread.** Disk writes and syncs block; on a thread of their own they hold up
//! no task of the runtime, and every operation that queued while one sync ran (log records,
//! the vote, the purge point) goes with the next. `append` puts the entries in memory and
//! queues them, as openraft's storage contract asks (readable when `append` returns, durable
//! when [`LogFlushed`] is called). openraft 0.9's core awaits that callback before its next
//! step, so on the leader an entry reaches the followers only after its own sync: the
//! writer cannot overlap the two, and what makes one sync serve many commands is that one
//! entry carries many of them (the server's batcher).
//!
//! **Group commit.** The writer takes every operation queued meanwhile: the log's records
//! (appends and truncations, in the order they were queued) with one sync of the segments,
//! answered at once, then the vote and purge point in one redb transaction, with the
//! committed index (which alone is written at most every 100 ms). A purge deletes segments
//! only after its purge point is on disk. One thread does it all, so a truncation or a purge
//! can never be overtaken by an append made after it.
//!
//! The writer times each sync of the segments, and the store keeps the last committed index
//! openraft gave it, for the node's metrics ([`crate::counts`]).
//!
//! **Failure.** A write that fails fails every operation after it (a later append would leave
//! a hole in the log): the node stops acknowledging, and its peers carry on without it.

use crate::raft::{NodeId, Store, TypeConfig};
use crate::wal::Wal;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote};
use prometheus_client::metrics::histogram::Histogram;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

type SErr = StorageError<NodeId>;

/// One write for the writer thread, in the order openraft asked for them.
enum Write {
    /// Entries to append; `done` is openraft's callback.
    Append(Vec<Entry<TypeConfig>>, LogFlushed<TypeConfig>),
    /// Remove the entries from this index on.
    Truncate(u64, oneshot::Sender<Result<(), String>>),
    /// Remove the entries up to this log id, and remember it.
    Purge(LogId<NodeId>, oneshot::Sender<Result<(), String>>),
    /// The vote, durable before it is granted.
    Vote(Vote<NodeId>, oneshot::Sender<Result<(), String>>),
    /// The committed log id: written without waiting for it (see the `raft` module docs).
    Committed(Option<LogId<NodeId>>),
    /// The node is shutting down: stop after what came before, and let go of the files.
    Stop,
}

impl Write {
    /// Whether the transaction that carries it must be synced before it is answered.
    fn durable(&self) -> bool {
        !matches!(self, Write::Committed(_) | Write::Stop)
    }

    /// Tell whoever waits how it went.
    fn answer(self, result: Result<(), String>) {
        match self {
            Write::Append(_, done) => done.log_io_completed(result.map_err(std::io::Error::other)),
            Write::Truncate(_, tx) | Write::Purge(_, tx) | Write::Vote(_, tx) => {
                let _ = tx.send(result);
            }
            Write::Committed(_) | Write::Stop => {}
        }
    }
}

/// What openraft reads: the entries since the last purge, and the last purged id.
#[derive(Default)]
struct Tail {
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    purged: Option<LogId<NodeId>>,
}

/// The log and vote: openraft's [`RaftLogStorage`] on a [`Store`], with a writer thread.
#[derive(Clone)]
pub struct LogStore {
    store: Store,
    tail: Arc<Mutex<Tail>>,
    writer: mpsc::Sender<Write>,
    /// Why the writer stopped, once it has: every later operation fails with it.
    failed: Arc<Mutex<Option<String>>>,
    /// The writer thread, until [`LogStore::stop`] joins it.
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
    /// How long each sync of the segments took (the node's metrics).
    syncs: Histogram,
    /// One more than the last index openraft said is committed (0: none yet), for the
    /// node's metrics and health.
    committed: Arc<AtomicU64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LogStore {
    /// The log in `dir` (the segments of [`crate::wal`]) and the rest in `store`, read into
    /// memory, and its writer thread started. Entries a node of an earlier version kept in
    /// `store` move to the segments first.
    pub fn open(store: Store, dir: &Path) -> Result<LogStore, String> {
        let purged = store.meta("purged")?;
        let (mut wal, mut entries) = Wal::open(dir, purged)?;
        let older = store.entries(..)?;
        if !older.is_empty() {
            wal.append(&older)?;
            wal.sync()?;
            store.write_batch(true, |txn| txn.remove(..))?;
            let floor = purged.map_or(0, |p| p.index + 1);
            entries.extend(
                older.into_iter().filter(|e| e.log_id.index >= floor).map(|e| (e.log_id.index, e)),
            );
        }
        let (writer, queue) = mpsc::channel();
        let failed = Arc::new(Mutex::new(None));
        let (disk, flag) = (store.clone(), failed.clone());
        let syncs = crate::counts::short_histogram();
        let timed = syncs.clone();
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || write_loop(&disk, wal, &queue, &flag, timed))
            .map_err(|e| format!("cannot start the log writer: {e}"))?;
        let tail = Arc::new(Mutex::new(Tail { entries, purged }));
        let thread = Arc::new(Mutex::new(Some(thread)));
        let committed = Arc::default();
        Ok(LogStore { store, tail, writer, failed, thread, syncs, committed })
    }

    /// How long each sync of the log's segments took, in seconds.
    pub fn sync_seconds(&self) -> Histogram {
        self.syncs.clone()
    }

    /// The last log index openraft said is committed, since this store was opened.
    pub fn committed_index(&self) -> Option<u64> {
        self.committed.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Finish the writes queued so far and stop the writer, closing its files, so that the
    /// directory can be opened again at once (after openraft has shut down).
    pub fn stop(&self) {
        let _ = self.writer.send(Write::Stop);
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }

    /// Queue `write`; an error if the writer has stopped.
    fn queue(&self, write: Write) -> Result<(), String> {
        if let Some(why) = lock(&self.failed).clone() {
            write.answer(Err(why.clone()));
            return Err(why);
        }
        self.writer.send(write).map_err(|_| "the log writer has stopped".to_string())
    }

    /// Queue a write and wait for it to be on disk.
    async fn durably(
        &self,
        write: impl FnOnce(oneshot::Sender<Result<(), String>>) -> Write,
    ) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.queue(write(tx))?;
        rx.await.map_err(|_| "the log writer has stopped".to_string())?
    }
}

/// How often at most the committed index alone is written to redb. openraft reports it on
/// every commit, and a redb transaction per commit took a third of the writer's batches in
/// the pure handoff run, each one delaying the next append's sync. It only spares replaying
/// the log on restart, so it rides along with the next vote or purge, or goes alone at this
/// pace.
const COMMITTED_EVERY: Duration = Duration::from_millis(100);

/// What the writer thread keeps between batches.
struct Writer<'a> {
    store: &'a Store,
    wal: Wal,
    /// The latest committed index not yet written, and when it was last written.
    committed: Option<Option<LogId<NodeId>>>,
    committed_at: Instant,
    /// Each sync's duration.
    syncs: Histogram,
}

/// The writer thread: batches of queued writes, at most one sync of the segments and one
/// commit of redb each, until every [`LogStore`] is gone or a write fails.
fn write_loop(
    store: &Store,
    wal: Wal,
    queue: &mpsc::Receiver<Write>,
    failed: &Mutex<Option<String>>,
    syncs: Histogram,
) {
    let mut writer = Writer { store, wal, committed: None, committed_at: Instant::now(), syncs };
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        batch.extend(queue.try_iter());
        let stop = batch.iter().any(|w| matches!(w, Write::Stop));
        if let Err(why) = writer.write_batch(batch, stop) {
            tracing::error!("log write failed, this node stops acknowledging: {why}");
            *lock(failed) = Some(format!("log write failed: {why}"));
            // Fail what is still queued, and everything after (see `LogStore::queue`).
            for write in queue.try_iter() {
                write.answer(Err("log write failed earlier".into()));
            }
            return;
        }
        if stop {
            return;
        }
    }
    // Every sender is gone: the last committed index goes too.
    let _ = writer.write_batch(Vec::new(), true);
}

impl Writer<'_> {
    /// One batch, every write answered: the log's records synced and answered at once (an
    /// append is on a commit's path; redb's writes are not), then redb's writes committed
    /// (synced when a vote or a purge point is among them) and answered, then the segments a
    /// purge frees deleted, once the purge point is on disk. The committed index waits for
    /// the next of these commits, or [`COMMITTED_EVERY`], or the end (`last`).
    fn write_batch(&mut self, batch: Vec<Write>, last: bool) -> Result<(), String> {
        let (log, meta): (Vec<Write>, Vec<Write>) =
            batch.into_iter().partition(|w| matches!(w, Write::Append(..) | Write::Truncate(..)));
        let synced = self.write_log(&log);
        answer_all(log, &synced);
        if let Err(why) = synced {
            answer_all(meta, &Err(why.clone()));
            return Err(why);
        }
        for write in &meta {
            if let Write::Committed(c) = write {
                self.committed = Some(*c);
            }
        }
        let durable = meta.iter().any(Write::durable);
        let due =
            self.committed.is_some() && (last || self.committed_at.elapsed() >= COMMITTED_EVERY);
        let mut written = Ok(());
        if durable || due {
            written = self.write_meta(&meta, durable);
        }
        let purge = meta.iter().find_map(|w| match w {
            Write::Purge(upto, _) => Some(upto.index),
            _ => None,
        });
        if let (Ok(()), Some(upto)) = (&written, purge) {
            written = self.wal.purge(upto);
        }
        answer_all(meta, &written);
        written
    }

    /// Append and truncate as `log` says, and sync.
    fn write_log(&mut self, log: &[Write]) -> Result<(), String> {
        if log.is_empty() {
            return Ok(());
        }
        log.iter().try_for_each(|write| match write {
            Write::Append(entries, _) => self.wal.append(entries),
            Write::Truncate(from, _) => self.wal.truncate(*from),
            _ => Ok(()),
        })?;
        let started = Instant::now();
        let synced = self.wal.sync();
        self.syncs.observe(started.elapsed().as_secs_f64());
        synced
    }

    /// One redb transaction: the votes and purge points of `meta`, and the committed index if
    /// one waits.
    fn write_meta(&mut self, meta: &[Write], durable: bool) -> Result<(), String> {
        let committed = self.committed.take();
        self.committed_at = Instant::now();
        self.store.write_batch(durable, |txn| {
            if let Some(c) = &committed {
                txn.put_meta("committed", c)?;
            }
            meta.iter().try_for_each(|write| match write {
                Write::Purge(upto, _) => txn.put_meta("purged", upto),
                Write::Vote(vote, _) => txn.put_meta("vote", vote),
                _ => Ok(()),
            })
        })
    }
}

/// Answer every write of `writes` with `result`.
fn answer_all(writes: Vec<Write>, result: &Result<(), String>) {
    for write in writes {
        write.answer(result.clone());
    }
}

/// A string error in openraft's error type.
fn anyerr(e: String) -> openraft::AnyError {
    openraft::AnyError::error(e)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, SErr> {
        Ok(lock(&self.tail).entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, SErr> {
        let tail = lock(&self.tail);
        let last = tail.entries.last_key_value().map(|(_, e)| e.log_id).or(tail.purged);
        Ok(LogState { last_purged_log_id: tail.purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), SErr> {
        let vote = *vote;
        self.durably(|tx| Write::Vote(vote, tx))
            .await
            .map_err(|e| StorageIOError::write_vote(anyerr(e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, SErr> {
        // Written only through the writer, which has answered before openraft reads it back.
        self.store.meta("vote").map_err(|e| StorageIOError::read_vote(anyerr(e)).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), SErr> {
        if let Some(c) = committed {
            self.committed.fetch_max(c.index + 1, Ordering::Relaxed);
        }
        self.queue(Write::Committed(committed)).map_err(|e| StorageIOError::write(anyerr(e)).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, SErr> {
        let committed = self
            .store
            .meta::<Option<LogId<NodeId>>>("committed")
            .map_err(|e| -> SErr { StorageIOError::read(anyerr(e)).into() })?
            .flatten();
        if let Some(c) = committed {
            self.committed.fetch_max(c.index + 1, Ordering::Relaxed);
        }
        Ok(committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        {
            let mut tail = lock(&self.tail);
            tail.entries.extend(entries.iter().map(|e| (e.log_id.index, e.clone())));
        }
        self.queue(Write::Append(entries, callback))
            .map_err(|e| StorageIOError::write_logs(anyerr(e)).into())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), SErr> {
        lock(&self.tail).entries.split_off(&log_id.index);
        self.durably(|tx| Write::Truncate(log_id.index, tx))
            .await
            .map_err(|e| StorageIOError::write_logs(anyerr(e)).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), SErr> {
        {
            let mut tail = lock(&self.tail);
            tail.entries = tail.entries.split_off(&(log_id.index + 1));
            tail.purged = Some(log_id);
        }
        self.durably(|tx| Write::Purge(log_id, tx))
            .await
            .map_err(|e| StorageIOError::write_logs(anyerr(e)).into())
    }
}
