//! The read path: a read at a consistency level chooses its replicas, runs one round (or two
//! when merged answers came up short), charges each replica's answer for the tombstones it
//! scanned, and fails past the failure threshold.

use super::config::EmbeddedConfig;
use super::counters::OpKind;
use super::lock;
use super::merge::{merge_into, Filler};
use super::row::LiveSlice;
use super::Answer;
use super::{timeline, Caller, Event};
use crate::store::{Cell, Consistency, Slice, StoreError};
use rand::RngExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl Caller<'_> {
    pub(super) async fn read(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        self.count(table, OpKind::Read);
        self.check_reachable().await?;
        self.quorum_read_into(table, row, slice, c, out).await
    }

    /// [`Caller::read`] as a shared snapshot ([`CellStore::read_shared`]).
    ///
    /// [`CellStore::read_shared`]: crate::store::CellStore::read_shared
    pub(super) async fn read_shared(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
    ) -> Result<Arc<[Cell]>, StoreError> {
        self.count(table, OpKind::Read);
        self.check_reachable().await?;
        let mut out = Vec::new();
        match self.quorum_read_shared(table, row, slice, c, &mut out).await? {
            Some(cells) => Ok(cells),
            None => Ok(Arc::from(out)),
        }
    }

    /// A read at `c` as a coordinator runs it, not counted as a request of its own (a
    /// lightweight transaction's reads are part of it).
    pub(super) async fn quorum_read(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        let mut out = Vec::new();
        self.quorum_read_into(table, row, slice, c, &mut out).await?;
        Ok(out)
    }

    /// [`Caller::quorum_read`] into `out`, reusing its cells ([`CellStore::read_into`]).
    ///
    /// [`CellStore::read_into`]: crate::store::CellStore::read_into
    async fn quorum_read_into(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        if let Some(cells) = self.quorum_read_shared(table, row, slice, c, out).await? {
            let mut filled = Filler::new(out);
            for cell in cells.iter() {
                filled.push(&cell.column, &cell.value, cell.timestamp);
            }
            filled.finish();
        }
        Ok(())
    }

    /// A read at `c`: its answer as the read cache's shared cells, or `None` when it was
    /// written into `out` instead (a second round, which the cache does not keep).
    async fn quorum_read_shared(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<Option<Arc<[Cell]>>, StoreError> {
        let inner = self.inner;
        let required = c.required(inner.replicas.len());
        let mut chosen = inner.running();
        if chosen.len() < required {
            crate::rt::yield_now().await;
            return Err(StoreError::Unavailable { consistency: c, required, alive: chosen.len() });
        }
        if required < chosen.len() {
            let mut rng = lock(&inner.rng);
            for k in 0..required {
                let j = rng.random_range(k..chosen.len());
                chosen.swap(k, j);
            }
            chosen.truncate(required);
        }
        let mut scan = ReadScan { table, row, most: 0 };
        let result = self.read_rounds(&chosen, slice, c, &mut scan, out).await;
        match &result {
            Ok(_) => inner.record_tombstones(&scan, false),
            Err(StoreError::TombstoneOverwhelming { .. }) => inner.record_tombstones(&scan, true),
            Err(_) => {}
        }
        result
    }

    /// The rounds of one read: one, or two when merged answers came up short. The answer of
    /// one round comes from the read cache ([`ReadCache`]), that of two is written into `out`.
    ///
    /// [`ReadCache`]: super::cache::ReadCache
    async fn read_rounds(
        &self,
        chosen: &[usize],
        slice: &Slice,
        c: Consistency,
        scan: &mut ReadScan<'_>,
        out: &mut Vec<Cell>,
    ) -> Result<Option<Arc<[Cell]>>, StoreError> {
        let inner = self.inner;
        let (table, row) = (scan.table, scan.row);
        let policy = inner.config.row_policy();
        if chosen.len() == 1 {
            // A lone answer needs no merge: the replica slices its live cells itself.
            let read_live = |replica: usize, now: Instant| {
                let (live, tombstones) =
                    inner.replicas.get(replica)?.read_live(table, row, slice, now, policy)?;
                Some((Answer::Live(live), tombstones))
            };
            let answers = self.read_round(chosen, c, scan, read_live).await?;
            let empty = LiveSlice::default();
            let live = match answers.last() {
                Some(Answer::Live(live)) => live,
                _ => &empty,
            };
            let fill = |buffer: &mut Vec<Cell>| {
                let mut filled = Filler::new(buffer);
                for (column, cell) in live.iter() {
                    filled.push(column, &cell.value, cell.timestamp);
                }
                filled.finish();
                true
            };
            return Ok(lock(&inner.reads).answer(table, row, slice, &[live], fill));
        }

        let start = slice.start.as_deref();
        let read_raw = |limit: Option<usize>| {
            move |replica: usize, now: Instant| {
                let (raw, tombstones) =
                    inner.replicas.get(replica)?.read_raw(table, row, start, limit, now, policy)?;
                Some((Answer::Raw(raw), tombstones))
            }
        };
        let answers = self.read_round(chosen, c, scan, read_raw(slice.limit)).await?;
        let lives: Vec<&LiveSlice> = answers
            .iter()
            .filter_map(|a| match a {
                Answer::Raw(raw) => Some(&raw.live),
                _ => None,
            })
            .collect();
        let merged = lock(&inner.reads)
            .answer(table, row, slice, &lives, |buffer| merge_into(&answers, slice.limit, buffer));
        if merged.is_some() {
            return Ok(merged);
        }
        let answers = self.read_round(chosen, c, scan, read_raw(None)).await?;
        if !merge_into(&answers, slice.limit, out) {
            out.clear();
        }
        Ok(None)
    }

    /// One round of a read: every chosen replica reads half-way through its round trip and
    /// answers at its end, later by the time it took to step over the tombstones it scanned;
    /// all of them are needed. A replica whose scan passes the failure threshold aborts it
    /// and answers with a failure, which fails the read when it arrives.
    async fn read_round(
        &self,
        chosen: &[usize],
        c: Consistency,
        scan: &mut ReadScan<'_>,
        read: impl Fn(usize, Instant) -> Option<(Answer, u64)>,
    ) -> Result<Vec<Answer>, StoreError> {
        let inner = self.inner;
        let start = crate::rt::now();
        let required = chosen.len();
        let mut answers: Vec<Option<Answer>> = Vec::with_capacity(required);
        let mut received = 0usize;

        if inner.config.latency.is_zero() {
            let mut delay = Duration::ZERO;
            for &replica in chosen {
                let answer = read(replica, start).map(|(a, t)| scan.answered(&inner.config, a, t));
                delay = delay.max(answer.as_ref().map_or(Duration::ZERO, |(_, d)| *d));
                received += usize::from(answer.is_some());
                answers.push(answer.map(|(a, _)| a));
            }
            if delay.is_zero() {
                crate::rt::yield_now().await;
            } else {
                crate::rt::sleep(delay).await;
            }
        } else {
            answers.resize_with(required, || None);
            let deadline = inner.deadline(start);
            let mut slept = false;
            let mut events = timeline(inner, start, 0..required, false);
            let mut next = 0;
            // Read again only after a sleep, as in `mutate`.
            let mut now = start;
            while let Some(&ev) = events.get(next) {
                next += 1;
                if ev.at > deadline {
                    break;
                }
                // A reply that neither completes nor fails the read changes nothing anyone can
                // see, so the coordinator counts it without waking up at its instant.
                let decisive = ev.reply
                    && answers.get(ev.slot).is_some_and(|a| {
                        matches!(a, Some(Answer::Overwhelmed(_)))
                            || (a.is_some() && received + 1 == required)
                    });
                if ev.at > now && (!ev.reply || decisive) {
                    crate::rt::sleep_until(ev.at).await;
                    slept = true;
                    now = crate::rt::now();
                }
                let Some(answer) = answers.get_mut(ev.slot) else { continue };
                if ev.reply {
                    // A stopped replica read nothing and sends nothing.
                    if answer.is_some() {
                        received += 1;
                        if let Some(Answer::Overwhelmed(scanned)) = answer {
                            return Err(scan.overwhelmed(*scanned));
                        }
                        if received == required {
                            break;
                        }
                    }
                } else if let Some(&replica) = chosen.get(ev.slot) {
                    let Some((a, delay)) =
                        read(replica, now).map(|(a, t)| scan.answered(&inner.config, a, t))
                    else {
                        continue;
                    };
                    *answer = Some(a);
                    delay_reply(&mut events[next..], ev.slot, delay);
                }
            }
            if !slept {
                crate::rt::yield_now().await;
            }
        }

        if let Some(Answer::Overwhelmed(scanned)) =
            answers.iter().flatten().find(|a| matches!(a, Answer::Overwhelmed(_)))
        {
            return Err(scan.overwhelmed(*scanned));
        }
        if received < required {
            crate::rt::sleep_until(inner.deadline(start)).await;
            return Err(StoreError::ReadTimeout { consistency: c, received, required });
        }
        Ok(answers.into_iter().flatten().collect())
    }
}

/// Moves `slot`'s reply among the events still due `delay` later, keeping them sorted.
fn delay_reply(events: &mut [Event], slot: usize, delay: Duration) {
    if delay.is_zero() {
        return;
    }
    for e in events.iter_mut().filter(|e| e.reply && e.slot == slot) {
        e.at = e.at.checked_add(delay).unwrap_or(e.at);
    }
    events.sort_by_key(|e| e.at);
}

/// What one read scanned, for its answer times and the tombstone counters.
pub(super) struct ReadScan<'a> {
    pub(super) table: &'a str,
    pub(super) row: &'a str,
    /// The most tombstones one replica scanned in one round.
    pub(super) most: u64,
}

impl ReadScan<'_> {
    /// A replica read and scanned `tombstones`: its answer (a failure past the threshold, as
    /// Cassandra aborts the scan there) and the time the scan added to its answer.
    pub(super) fn answered(
        &mut self,
        config: &EmbeddedConfig,
        answer: Answer,
        tombstones: u64,
    ) -> (Answer, Duration) {
        let limit = config.tombstone_failure_threshold;
        if tombstones > limit {
            let scanned = limit.saturating_add(1);
            self.most = self.most.max(scanned);
            return (Answer::Overwhelmed(scanned), config.scan_delay(scanned));
        }
        self.most = self.most.max(tombstones);
        (answer, config.scan_delay(tombstones))
    }

    fn overwhelmed(&self, scanned: u64) -> StoreError {
        StoreError::TombstoneOverwhelming {
            table: self.table.to_owned(),
            row: self.row.to_owned(),
            scanned,
        }
    }
}
