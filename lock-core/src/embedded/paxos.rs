//! Lightweight transactions on the embedded store: Cassandra's Paxos, run among the replicas.
//!
//! [`CellStore::cas`](crate::store::CellStore::cas) and
//! [`CellStore::read_serial`](crate::store::CellStore::read_serial) are real Paxos rounds over
//! the same replicas, latency model and faults as every other request, so what contention and
//! faults do to them comes from the protocol, not from a constant. The coordinator follows
//! Apache Cassandra 4.0's `StorageProxy.cas`/`readWithPaxos` (v1) step by step; v2 is the
//! round-trip shape of Cassandra 4.1's Paxos v2 (CEP-14).
//!
//! # Each replica (Cassandra's `PaxosState`)
//! Per row it keeps the **promised** ballot, the **accepted** proposal and the **most recent
//! commit** (MRC). A ballot is a timestamp in microseconds with a random tie-break (Cassandra's
//! time UUID), compared timestamp first.
//! - *prepare(b)*: if `b` is greater than the promise, promise `b` and answer with the accepted
//!   proposal and the MRC (v2: and a read of the row); otherwise refuse, naming the promise.
//! - *propose(p)*: accept when `p.ballot` is at least the promise (it becomes the promise and
//!   the accepted proposal); otherwise refuse.
//! - *commit(p)*: write `p`'s changes into the row with `p.ballot`'s timestamp as their write
//!   timestamp, make `p` the MRC if it is newer, and forget an accepted proposal no newer than
//!   `p`.
//!
//! A stopped replica answers nothing; an overloaded one ([`EmbeddedStore::lag_replica`](super::EmbeddedStore::lag_replica)) is
//! late or drops the message, as for mutations (Paxos messages run on Cassandra's mutation
//! stage).
//!
//! # The coordinator (v1, Cassandra 4.0)
//! Every phase goes to every live replica and waits for a quorum of the serial consistency;
//! each costs one round trip. A CAS:
//! 1. **prepare** with a new ballot: greater than this client's last one, than the store's
//!    clock, and than any promise that refused it before. One refusal among the first quorum
//!    of answers ends the phase: *contention*.
//! 2. If a promise carries an accepted, non-empty proposal newer than the newest MRC, that
//!    round is unfinished: **propose** it again under our ballot and **commit** it, then start
//!    again from 1. If some promising replicas miss the newest MRC, send it to them (without
//!    waiting) and start again from 1.
//! 3. **read** the row at QUORUM and evaluate the conditions.
//! 4. **propose** the changes, or an empty update when the conditions do not hold (4.0 does
//!    this since CASSANDRA-12126, so that a failed CAS or a SERIAL read is linearizable too).
//!    It waits for every live replica or a quorum of acceptances. Refused by all: contention.
//!    Accepted by some but not a quorum: the outcome is unknown,
//!    [`CasTimeoutKind::PartiallyAccepted`].
//! 5. **commit** a non-empty proposal at the commit consistency. An empty one is not
//!    committed (and never replayed by step 2).
//!
//! After contention the coordinator sleeps a uniformly random 0–100 ms
//! ([`EmbeddedConfig::cas_contention_backoff`](super::EmbeddedConfig::cas_contention_backoff), from the store's seeded RNG) and starts again from 1, until [`EmbeddedConfig::cas_contention_timeout`](super::EmbeddedConfig::cas_contention_timeout) has passed
//! since the request began: then [`CasTimeoutKind::Paxos`]. A phase that does not get its
//! answers within the request timeout fails the same way; a commit that does not,
//! [`CasTimeoutKind::Commit`] (it is decided: a later round replays it). An applied CAS costs 4
//! round trips, one that does not apply 3, a SERIAL read 3 (prepare, empty propose, read).
//!
//! # v2 (Cassandra 4.1, CEP-14)
//! The promise carries the replica's read of the row, so steps 1 and 3 are one round trip, and
//! the commit is sent with the answer, not awaited: any later round finishes it (step 2). An
//! applied CAS costs 2 round trips, the best case CEP-14 describes. (Cassandra 4.1 waits for
//! the commit at the commit consistency unless it is `ANY`; the model does not, so its v2 is
//! the lower bound.) A failed CAS and a SERIAL read still propose the empty update, 2 round
//! trips: without it a proposal accepted by a minority outside the read's quorum could be
//! finished after the read said it had not happened (CASSANDRA-12126), and how 4.1 makes
//! one-round-trip reads safe is not modelled. Rule 12 of `lock_core::store` holds for both.
//!
//! # What the model leaves out
//! Cassandra purges Paxos state after `gc_grace` and repairs it with `nodetool repair
//! --paxos`; a replica here keeps its Paxos state for the store's life. Hints do not replay
//! commits to a stopped replica: it learns a missed commit when a later prepare finds it
//! behind (step 2), or not at all.

use super::counters::OpKind;
use super::handles::Inner;
use super::lock;
use super::merge::merge;
use super::Answer;
use super::{timeline, Caller};
use super::{Mutation, RawAnswer, Replica, RowPolicy, SharedWrite};
use crate::store::{
    CasChange, CasRequest, CasResult, CasTimeoutKind, Cell, Consistency, Micros, SerialConsistency,
    Slice, StoreError,
};
use rand::RngExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Which Paxos the embedded store's lightweight transactions run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PaxosVariant {
    /// Cassandra 4.0: prepare, read, propose, commit.
    #[default]
    V1,
    /// Cassandra 4.1's Paxos v2: prepare with the read, propose (the commit is not awaited).
    V2,
}

impl std::fmt::Display for PaxosVariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PaxosVariant::V1 => "v1",
            PaxosVariant::V2 => "v2",
        })
    }
}

impl std::str::FromStr for PaxosVariant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "v1" | "1" => Ok(PaxosVariant::V1),
            "v2" | "2" => Ok(PaxosVariant::V2),
            other => Err(format!("unknown Paxos variant '{other}' (expected v1 or v2)")),
        }
    }
}

/// A Paxos ballot: a timestamp, then a random tie-break.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ballot {
    micros: Micros,
    tiebreak: u64,
}

/// A proposal: changes under a ballot; no changes is the empty update.
#[derive(Clone, Debug)]
pub(super) struct Proposal {
    ballot: Ballot,
    changes: Arc<[CasChange]>,
}

impl Proposal {
    fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// One replica's Paxos state for one row.
#[derive(Default)]
pub(super) struct PaxosState {
    promised: Option<Ballot>,
    accepted: Option<Proposal>,
    committed: Option<Proposal>,
}

#[derive(Clone)]
enum Message {
    Prepare { ballot: Ballot, read: Option<Slice> },
    Propose(Proposal),
    Commit(Proposal),
}

enum Reply {
    Promise { accepted: Option<Proposal>, committed: Option<Proposal>, read: Option<RawAnswer> },
    Refused { promised: Ballot },
    Accepted,
    Acknowledged,
}

impl Replica {
    /// Handles one Paxos message at `now`; `None` when the replica is stopped.
    fn paxos(
        &self,
        table: &str,
        row: &str,
        message: &Message,
        now: Instant,
        policy: RowPolicy,
    ) -> Option<Reply> {
        if !self.is_running() {
            return None;
        }
        let key = (table.to_owned(), row.to_owned());
        match message {
            Message::Prepare { ballot, read } => {
                let (accepted, committed) = {
                    let mut states = lock(&self.paxos);
                    let state = states.entry(key).or_default();
                    if let Some(promised) = state.promised.filter(|p| p >= ballot) {
                        return Some(Reply::Refused { promised });
                    }
                    state.promised = Some(*ballot);
                    (state.accepted.clone(), state.committed.clone())
                };
                let read = match read {
                    Some(slice) => Some(
                        self.read_raw(
                            table,
                            row,
                            slice.start.as_deref(),
                            slice.limit,
                            now,
                            policy,
                        )?
                        .0,
                    ),
                    None => None,
                };
                Some(Reply::Promise { accepted, committed, read })
            }
            Message::Propose(p) => {
                let mut states = lock(&self.paxos);
                let state = states.entry(key).or_default();
                if state.promised.is_some_and(|promised| promised > p.ballot) {
                    return Some(Reply::Refused { promised: state.promised.unwrap_or(p.ballot) });
                }
                state.promised = Some(p.ballot);
                state.accepted = Some(p.clone());
                Some(Reply::Accepted)
            }
            Message::Commit(p) => {
                for change in p.changes.iter() {
                    let applied = match change {
                        CasChange::Set { column, value, ttl } => {
                            let cell = SharedWrite {
                                column: Arc::from(column.as_str()),
                                value: Arc::from(value.as_slice()),
                                timestamp: p.ballot.micros,
                                ttl: *ttl,
                            };
                            self.apply(
                                table,
                                row,
                                Mutation::Write(std::slice::from_ref(&cell)),
                                now,
                                policy,
                            )
                        }
                        CasChange::Delete { column } => self.apply(
                            table,
                            row,
                            Mutation::Delete {
                                column: &Arc::from(column.as_str()),
                                timestamp: p.ballot.micros,
                            },
                            now,
                            policy,
                        ),
                    };
                    if !applied {
                        return None;
                    }
                }
                let mut states = lock(&self.paxos);
                let state = states.entry(key).or_default();
                if state.committed.as_ref().is_none_or(|c| c.ballot < p.ballot) {
                    state.committed = Some(p.clone());
                }
                if state.accepted.as_ref().is_some_and(|a| a.ballot <= p.ballot) {
                    state.accepted = None;
                }
                Some(Reply::Acknowledged)
            }
        }
    }
}

impl Inner {
    /// The coordinator's clock for ballots: the store's clock in microseconds.
    fn physical_now(&self) -> Micros {
        crate::time::SIMULATED_EPOCH_MICROS
            + crate::rt::now().saturating_duration_since(self.origin).as_micros() as Micros
    }

    /// A Paxos message reaches replica `replica` at `now`: an overloaded replica may drop it.
    fn deliver_paxos(
        &self,
        replica: usize,
        table: &str,
        row: &str,
        message: &Message,
        now: Instant,
    ) -> Option<Reply> {
        let r = self.replicas.get(replica)?;
        let drop_ppm = r.drop_ppm.load(Ordering::Acquire);
        if drop_ppm > 0
            && r.is_running()
            && lock(&self.rng).random_range(0..1_000_000u32) < drop_ppm
        {
            return None;
        }
        r.paxos(table, row, message, now, self.config.row_policy())
    }
}

/// When a phase has heard enough.
#[derive(Clone, Copy)]
enum Wait {
    /// Prepare: a quorum of promises, or one refusal.
    Promises(usize),
    /// Propose: a quorum of acceptances, or every live replica (`fail_fast`: or when a quorum
    /// can no longer be reached).
    Acceptances { required: usize, fail_fast: bool },
    /// Commit: this many acknowledgements.
    Acks(usize),
}

impl Wait {
    fn satisfied(self, answers: &[(usize, Reply)], contacted: usize) -> bool {
        let yes = answers
            .iter()
            .filter(|(_, r)| {
                matches!(r, Reply::Promise { .. } | Reply::Accepted | Reply::Acknowledged)
            })
            .count();
        match self {
            Wait::Promises(required) => yes >= required || yes < answers.len(),
            Wait::Acceptances { required, fail_fast } => {
                let refused = answers.len() - yes;
                yes >= required
                    || answers.len() == contacted
                    || (fail_fast && contacted - refused < required)
            }
            Wait::Acks(required) => yes >= required,
        }
    }
}

/// One phase's answers, and whether it heard enough before its deadline.
struct Phase {
    answers: Vec<(usize, Reply)>,
    complete: bool,
}

impl Phase {
    fn yes(&self) -> usize {
        self.answers.iter().filter(|(_, r)| !matches!(r, Reply::Refused { .. })).count()
    }
    fn refusal(&self) -> Option<Ballot> {
        self.answers.iter().find_map(|(_, r)| match r {
            Reply::Refused { promised } => Some(*promised),
            _ => None,
        })
    }
}

/// What a Paxos operation does once a ballot is prepared.
enum Operation<'a> {
    Cas(&'a CasRequest),
    SerialRead(&'a Slice),
}

/// How an operation ended a round: done, or start again (after contention or a repair).
enum Round<T> {
    Done(T),
    Again { contended: bool, min_micros: Micros },
}

/// The answer of either operation.
enum Outcome {
    Cas(CasResult),
    Rows(Vec<Cell>),
}

impl Caller<'_> {
    pub(super) async fn cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        self.count(table, OpKind::Cas);
        self.check_reachable().await?;
        match self.paxos(table, row, Operation::Cas(request), serial, commit).await? {
            Outcome::Cas(result) => Ok(result),
            Outcome::Rows(_) => {
                Err(StoreError::Rejected("internal: a CAS answered with rows".into()))
            }
        }
    }

    pub(super) async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.count(table, OpKind::SerialRead);
        self.check_reachable().await?;
        let result =
            self.paxos(table, row, Operation::SerialRead(slice), serial, Consistency::Quorum).await;
        match result {
            Ok(Outcome::Rows(cells)) => Ok(cells),
            Ok(Outcome::Cas(_)) => Err(StoreError::Rejected(
                "internal: a SERIAL read answered with a CAS result".into(),
            )),
            // Cassandra answers a SERIAL read that timed out in Paxos with a read timeout.
            Err(StoreError::CasTimeout { received, required, .. }) => {
                Err(StoreError::ReadTimeout {
                    consistency: Consistency::Quorum,
                    received,
                    required,
                })
            }
            Err(e) => Err(e),
        }
    }

    fn count_round_trips(&self, table: &str, n: u64) {
        self.state.paxos_round_trips.fetch_add(n, Ordering::Relaxed);
        let mut tables = lock(&self.inner.table_counts);
        tables.entry(table.to_owned()).or_default().paxos_round_trips += n;
    }

    /// The contention loop of `StorageProxy.doPaxos` around one round.
    async fn paxos(
        &self,
        table: &str,
        row: &str,
        op: Operation<'_>,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<Outcome, StoreError> {
        let inner = self.inner;
        let start = crate::rt::now();
        let give_up = start.checked_add(inner.config.cas_contention_timeout).unwrap_or(start);
        let required = serial.required(inner.replicas.len());
        let mut contentions = 0u32;
        let mut min_micros = Micros::MIN;
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) && crate::rt::now() >= give_up {
                return Err(StoreError::CasTimeout {
                    kind: CasTimeoutKind::Paxos,
                    received: 0,
                    required,
                    contentions,
                });
            }
            let live = inner.running();
            if live.len() < required {
                crate::rt::yield_now().await;
                return Err(StoreError::Unavailable {
                    consistency: Consistency::Quorum,
                    required,
                    alive: live.len(),
                });
            }
            match self
                .round(table, row, &op, &live, required, commit, min_micros, contentions)
                .await?
            {
                Round::Done(outcome) => return Ok(outcome),
                Round::Again { contended, min_micros: m } => {
                    min_micros = min_micros.max(m);
                    if contended {
                        contentions += 1;
                        let bound = u64::try_from(inner.config.cas_contention_backoff.as_nanos())
                            .unwrap_or(u64::MAX)
                            .max(1);
                        let pause = Duration::from_nanos(lock(&inner.rng).random_range(0..bound));
                        crate::rt::sleep(pause).await;
                    }
                }
            }
        }
    }

    /// A new ballot: later than this client's last, the coordinator's clock and `min_micros`.
    fn ballot(&self, min_micros: Micros) -> Ballot {
        let now = self.inner.physical_now();
        let mut micros = now.max(min_micros);
        let _ = self.state.last_ballot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
            micros = micros.max(last.saturating_add(1));
            Some(micros)
        });
        Ballot { micros, tiebreak: lock(&self.inner.rng).random() }
    }

    /// One attempt: prepare, repair or read, propose, commit.
    #[allow(clippy::too_many_arguments)]
    async fn round(
        &self,
        table: &str,
        row: &str,
        op: &Operation<'_>,
        live: &[usize],
        required: usize,
        commit: Consistency,
        min_micros: Micros,
        contentions: u32,
    ) -> Result<Round<Outcome>, StoreError> {
        let v2 = self.inner.config.paxos == PaxosVariant::V2;
        let ballot = self.ballot(min_micros);
        let read = v2.then(|| match op {
            Operation::Cas(_) => Slice::all(),
            Operation::SerialRead(slice) => (*slice).clone(),
        });
        let prepare = self
            .phase(table, row, live, Message::Prepare { ballot, read }, Wait::Promises(required))
            .await;
        if let Some(promised) = prepare.refusal() {
            return Ok(Round::Again {
                contended: true,
                min_micros: promised.micros.saturating_add(1),
            });
        }
        if !prepare.complete {
            return Err(self.timeout(CasTimeoutKind::Paxos, &prepare, required, contentions));
        }
        let (in_progress, newest_commit) = summarize(&prepare.answers);
        if let Some(unfinished) = in_progress
            .filter(|p| !p.is_empty() && newest_commit.as_ref().is_none_or(|c| p.ballot > c.ballot))
        {
            let again = Proposal { ballot, changes: unfinished.changes };
            let propose = self
                .phase(
                    table,
                    row,
                    live,
                    Message::Propose(again.clone()),
                    Wait::Acceptances { required, fail_fast: true },
                )
                .await;
            if propose.yes() < required {
                if !propose.complete {
                    return Err(self.timeout(
                        CasTimeoutKind::Paxos,
                        &propose,
                        required,
                        contentions,
                    ));
                }
                return Ok(Round::Again { contended: true, min_micros: Micros::MIN });
            }
            let acks = commit.required(self.inner.replicas.len());
            let done = self.phase(table, row, live, Message::Commit(again), Wait::Acks(acks)).await;
            if !done.complete {
                return Err(self.timeout(CasTimeoutKind::Paxos, &done, acks, contentions));
            }
            return Ok(Round::Again { contended: false, min_micros: Micros::MIN });
        }
        if let Some(newest) = newest_commit.as_ref() {
            let behind: Vec<usize> = prepare
                .answers
                .iter()
                .filter(|(_, r)| matches!(r, Reply::Promise { committed, .. } if committed.as_ref().is_none_or(|c| c.ballot < newest.ballot)))
                .map(|(i, _)| *i)
                .collect();
            if !behind.is_empty() {
                self.send(table, row, &behind, Message::Commit(newest.clone()));
                return Ok(Round::Again { contended: false, min_micros: Micros::MIN });
            }
        }
        self.decide(table, row, op, live, required, commit, ballot, prepare, contentions).await
    }

    /// Steps 3 to 5: read, propose, commit.
    #[allow(clippy::too_many_arguments)]
    async fn decide(
        &self,
        table: &str,
        row: &str,
        op: &Operation<'_>,
        live: &[usize],
        required: usize,
        commit: Consistency,
        ballot: Ballot,
        mut prepare: Phase,
        contentions: u32,
    ) -> Result<Round<Outcome>, StoreError> {
        let v2 = self.inner.config.paxos == PaxosVariant::V2;
        let (changes, outcome): (Arc<[CasChange]>, Option<Outcome>) = match op {
            Operation::Cas(request) => {
                let rows = if v2 { merge_reads(&mut prepare.answers, None) } else { None };
                let rows = match rows {
                    Some(rows) => rows,
                    None => {
                        self.paxos_read(table, row, &Slice::all(), required, contentions).await?
                    }
                };
                let applied = request.holds_on(&rows);
                let columns = request.condition_columns();
                let current =
                    rows.into_iter().filter(|c| columns.contains(&c.column.as_str())).collect();
                let changes: Arc<[CasChange]> =
                    if applied { request.changes.clone().into() } else { Arc::from([]) };
                (changes, Some(Outcome::Cas(CasResult { applied, current })))
            }
            Operation::SerialRead(slice) => {
                let rows = if v2 { merge_reads(&mut prepare.answers, slice.limit) } else { None };
                (Arc::from([]), rows.map(Outcome::Rows))
            }
        };
        let proposal = Proposal { ballot, changes };
        {
            let propose = self
                .phase(
                    table,
                    row,
                    live,
                    Message::Propose(proposal.clone()),
                    Wait::Acceptances { required, fail_fast: false },
                )
                .await;
            let accepted = propose.yes();
            if accepted < required {
                if !propose.complete {
                    return Err(self.timeout(
                        CasTimeoutKind::Paxos,
                        &propose,
                        required,
                        contentions,
                    ));
                }
                if accepted > 0 && matches!(op, Operation::Cas(_)) {
                    return Err(self.timeout(
                        CasTimeoutKind::PartiallyAccepted,
                        &propose,
                        required,
                        contentions,
                    ));
                }
                return Ok(Round::Again { contended: true, min_micros: Micros::MIN });
            }
            if !proposal.is_empty() {
                let acks = commit.required(self.inner.replicas.len());
                if v2 {
                    self.send(table, row, live, Message::Commit(proposal));
                } else {
                    let done = self
                        .phase(table, row, live, Message::Commit(proposal), Wait::Acks(acks))
                        .await;
                    if !done.complete {
                        return Err(self.timeout(CasTimeoutKind::Commit, &done, acks, contentions));
                    }
                }
            }
        }
        match (op, outcome) {
            (_, Some(outcome)) => Ok(Round::Done(outcome)),
            (Operation::SerialRead(slice), None) => Ok(Round::Done(Outcome::Rows(
                self.paxos_read(table, row, slice, required, contentions).await?,
            ))),
            (Operation::Cas(_), None) => {
                Err(StoreError::Rejected("internal: a CAS without an outcome".into()))
            }
        }
    }

    /// The QUORUM read inside a Paxos operation: one round trip (two after a short read).
    async fn paxos_read(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        required: usize,
        contentions: u32,
    ) -> Result<Vec<Cell>, StoreError> {
        self.count_round_trips(table, 1);
        match self.quorum_read(table, row, slice, Consistency::Quorum).await {
            Err(StoreError::ReadTimeout { received, .. }) => Err(StoreError::CasTimeout {
                kind: CasTimeoutKind::Paxos,
                received,
                required,
                contentions,
            }),
            other => other,
        }
    }

    fn timeout(
        &self,
        kind: CasTimeoutKind,
        phase: &Phase,
        required: usize,
        contentions: u32,
    ) -> StoreError {
        StoreError::CasTimeout { kind, received: phase.yes(), required, contentions }
    }

    /// Sends `message` to `replicas` without waiting for their answers.
    fn send(&self, table: &str, row: &str, replicas: &[usize], message: Message) {
        let events: Vec<(Instant, usize)> =
            timeline(self.inner, crate::rt::now(), replicas.iter().copied(), true)
                .into_iter()
                .filter(|e| !e.reply)
                .map(|e| (e.at, e.slot))
                .collect();
        deliver_later(self.inner, table, row, message, events);
    }

    /// One Paxos phase: `message` to every replica of `live`, answers in arrival order until
    /// `wait` has heard enough or the request timeout passes. Messages still on their way when
    /// it stops are delivered all the same.
    async fn phase(
        &self,
        table: &str,
        row: &str,
        live: &[usize],
        message: Message,
        wait: Wait,
    ) -> Phase {
        self.count_round_trips(table, 1);
        let inner = self.inner;
        let start = crate::rt::now();
        let deadline = inner.deadline(start);
        let events = timeline(inner, start, live.iter().copied(), true);
        let mut replies: Vec<Option<Reply>> = (0..inner.replicas.len()).map(|_| None).collect();
        let mut answers = Vec::new();
        let mut complete = false;
        let mut next = 0;
        let mut slept = false;
        while let Some(&ev) = events.get(next) {
            if ev.at > deadline {
                break;
            }
            next += 1;
            if ev.reply {
                // A reply that does not complete the phase changes nothing anyone can see, so
                // the coordinator takes it in without waking up at its instant.
                if let Some(reply) = replies.get_mut(ev.slot).and_then(Option::take) {
                    answers.push((ev.slot, reply));
                    if wait.satisfied(&answers, live.len()) {
                        if ev.at > crate::rt::now() {
                            crate::rt::sleep_until(ev.at).await;
                            slept = true;
                        }
                        complete = true;
                        break;
                    }
                }
                continue;
            }
            if ev.at > crate::rt::now() {
                crate::rt::sleep_until(ev.at).await;
                slept = true;
            }
            if let Some(slot) = replies.get_mut(ev.slot) {
                *slot = inner.deliver_paxos(ev.slot, table, row, &message, crate::rt::now());
            }
        }
        if !slept {
            crate::rt::yield_now().await;
        }
        let pending: Vec<(Instant, usize)> = events
            .get(next..)
            .unwrap_or(&[])
            .iter()
            .filter(|e| !e.reply)
            .map(|e| (e.at, e.slot))
            .collect();
        deliver_later(inner, table, row, message, pending);
        if !complete {
            // Every answer left is due after the deadline: the coordinator waits until then.
            crate::rt::sleep_until(deadline).await;
        }
        Phase { answers, complete }
    }
}

/// Delivers `message` to each `(instant, replica)` in a background task: once sent, a message
/// is acted on whether or not anyone waits for its answer.
fn deliver_later(
    inner: &Arc<Inner>,
    table: &str,
    row: &str,
    message: Message,
    pending: Vec<(Instant, usize)>,
) {
    if pending.is_empty() {
        return;
    }
    let inner = Arc::clone(inner);
    let (table, row) = (table.to_owned(), row.to_owned());
    let _ = crate::rt::try_spawn(async move {
        for (at, replica) in pending {
            crate::rt::sleep_until(at).await;
            inner.deliver_paxos(replica, &table, &row, &message, crate::rt::now());
        }
    });
}

/// The newest accepted proposal and the newest commit among the promises.
fn summarize(answers: &[(usize, Reply)]) -> (Option<Proposal>, Option<Proposal>) {
    let mut in_progress: Option<Proposal> = None;
    let mut newest: Option<Proposal> = None;
    for (_, reply) in answers {
        if let Reply::Promise { accepted, committed, .. } = reply {
            if let Some(a) = accepted
                .as_ref()
                .filter(|a| in_progress.as_ref().is_none_or(|p| a.ballot > p.ballot))
            {
                in_progress = Some(a.clone());
            }
            if let Some(c) =
                committed.as_ref().filter(|c| newest.as_ref().is_none_or(|n| c.ballot > n.ballot))
            {
                newest = Some(c.clone());
            }
        }
    }
    (in_progress, newest)
}

/// v2: the row as the promises read it, merged per cell by timestamp with their tombstones,
/// as a QUORUM read merges; `None` when a promise carried no read or the answers cannot tell
/// (a replica stopped at its limit). Every promising replica holds the newest commit (step 2
/// made sure), so the merge is the row as of the prepared ballot.
fn merge_reads(answers: &mut [(usize, Reply)], limit: Option<usize>) -> Option<Vec<Cell>> {
    let mut reads = Vec::with_capacity(answers.len());
    for (_, reply) in answers.iter_mut() {
        let Reply::Promise { read, .. } = reply else { return None };
        reads.push(Answer::Raw(read.take()?));
    }
    merge(&reads, limit)
}
