//! The CQL text of every statement, the values bound to them, and the decoding of their rows:
//! pure functions, so that what goes over the wire is tested without a server.
//!
//! Identifiers are always double-quoted in the statement text (`"ks"."t"`, `"row"`,
//! `"column"`, `"value"`): names are validated to lower-case identifiers, for which the quoted
//! and the unquoted spelling mean the same, and the quotes keep them clear of CQL keywords.

use crate::config::Replication;
use lock_core::store::{
    ttl_secs, CasChange, CasRequest, CasResult, Cell, CellWrite, Consistency, Expect, Micros,
    SerialConsistency, Slice, StoreError,
};
use scylla::value::{CqlValue, Row};
use std::time::Duration;

/// The longest TTL Cassandra accepts in `USING TTL` (20 years, `Attributes.MAX_TTL`).
pub const MAX_TTL_SECS: u32 = 630_720_000;
/// The longest partition key CQL accepts, in bytes.
pub const MAX_ROW_KEY_BYTES: usize = 65_535;

/// `"ks"."table"`.
pub fn qualified(keyspace: &str, table: &str) -> String {
    format!("\"{keyspace}\".\"{table}\"")
}

/// `CREATE KEYSPACE IF NOT EXISTS "ks" WITH replication = {…} AND durable_writes = true`,
/// followed by `AND tablets = {'enabled': false}` when `tablets_off`: ScyllaDB refuses
/// lightweight transactions in keyspaces with tablets (its manual says so through 2025.x),
/// which recent releases create by default; Apache Cassandra refuses the `tablets` option,
/// so it is only sent when asked for
/// ([`CassandraConfig::tablets_off`](crate::CassandraConfig::tablets_off)).
pub fn create_keyspace(keyspace: &str, replication: &Replication, tablets_off: bool) -> String {
    let tablets = if tablets_off { " AND tablets = {'enabled': false}" } else { "" };
    format!(
        "CREATE KEYSPACE IF NOT EXISTS \"{keyspace}\" WITH replication = {} AND durable_writes = true{tablets}",
        replication.cql()
    )
}

/// `CREATE TABLE IF NOT EXISTS "ks"."t" (…)`: partition = row key, clustering column = column
/// name in ascending (byte-wise) order, one blob per cell.
pub fn create_table(keyspace: &str, table: &str, gc_grace_seconds: Option<u32>) -> String {
    let mut s = format!(
        "CREATE TABLE IF NOT EXISTS {} (\"row\" text, \"column\" text, \"value\" blob, PRIMARY KEY ((\"row\"), \"column\")) WITH CLUSTERING ORDER BY (\"column\" ASC)",
        qualified(keyspace, table)
    );
    if let Some(g) = gc_grace_seconds {
        s.push_str(&format!(" AND gc_grace_seconds = {g}"));
    }
    s
}

/// Which of the four prepared reads a [`Slice`] needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadKind {
    /// The whole row.
    Row,
    /// Every cell from a column on.
    From,
    /// The first `limit` cells.
    First,
    /// The first `limit` cells from a column on.
    FromFirst,
}

impl ReadKind {
    /// Every kind, in the order [`TableStatements::reads`] holds them.
    pub const ALL: [ReadKind; 4] =
        [ReadKind::Row, ReadKind::From, ReadKind::First, ReadKind::FromFirst];

    /// Index into [`ReadKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The text of every statement on one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableStatements {
    /// `INSERT … USING TTL ? AND TIMESTAMP ?`; binds [`WriteValues`].
    pub insert: String,
    /// `DELETE … USING TIMESTAMP ? WHERE …`; binds [`DeleteValues`].
    pub delete: String,
    /// The reads, indexed by [`ReadKind::index`]; bind [`ReadValues`].
    pub reads: [String; 4],
}

impl TableStatements {
    /// The statements on `"keyspace"."table"`.
    pub fn new(keyspace: &str, table: &str) -> Self {
        let t = qualified(keyspace, table);
        let select = format!(
            "SELECT \"column\", \"value\", WRITETIME(\"value\") FROM {t} WHERE \"row\" = ?"
        );
        TableStatements {
            insert: format!(
                "INSERT INTO {t} (\"row\", \"column\", \"value\") VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ),
            delete: format!("DELETE FROM {t} USING TIMESTAMP ? WHERE \"row\" = ? AND \"column\" = ?"),
            reads: [
                select.clone(),
                format!("{select} AND \"column\" >= ?"),
                format!("{select} LIMIT ?"),
                format!("{select} AND \"column\" >= ? LIMIT ?"),
            ],
        }
    }

    /// The read statement of `kind`.
    pub fn read(&self, kind: ReadKind) -> &str {
        &self.reads[kind.index()]
    }
}

/// Values of the insert, in bind order: `(row, column, value, ttl, timestamp)`; TTL as CQL
/// `int` seconds, 0 for none; timestamp as `bigint` microseconds.
pub type WriteValues<'a> = (&'a str, &'a str, &'a [u8], i32, i64);

/// Values of the delete, in bind order: `(timestamp, row, column)`.
pub type DeleteValues<'a> = (i64, &'a str, &'a str);

fn check_row(row: &str) -> Result<(), StoreError> {
    if row.is_empty() {
        return Err(StoreError::Rejected(
            "the row key is empty; CQL partition keys may not be empty".into(),
        ));
    }
    if row.len() > MAX_ROW_KEY_BYTES {
        return Err(StoreError::Rejected(format!(
            "the row key has {} bytes; CQL partition keys hold at most {MAX_ROW_KEY_BYTES}",
            row.len()
        )));
    }
    Ok(())
}

/// Seconds added to every TTL so that a cell never lives shorter than asked.
///
/// Cassandra and ScyllaDB keep a cell's expiry in whole seconds of the server's clock: a write
/// at 10.9 s with `USING TTL 2` expires at 12.0 s, after 1.1 s. With one second more the cell
/// lives between TTL and TTL + 1 s, which is what the lease keeper's "valid until write
/// start + TTL" relies on.
pub const TTL_MARGIN_SECS: u32 = 1;

/// The TTL to bind: whole seconds rounded up ([`ttl_secs`]) plus [`TTL_MARGIN_SECS`]; 0 for
/// none.
pub fn ttl_value(cell: &CellWrite) -> Result<i32, StoreError> {
    ttl_bind(&cell.column, cell.ttl)
}

/// [`ttl_value`] of a TTL of `column` (also a conditional write's).
fn ttl_bind(column: &str, ttl: Option<Duration>) -> Result<i32, StoreError> {
    match ttl {
        None => Ok(0),
        Some(ttl) => {
            let secs = ttl_secs(ttl).saturating_add(TTL_MARGIN_SECS);
            if secs > MAX_TTL_SECS {
                return Err(StoreError::Rejected(format!(
                    "TTL of {secs} s for column '{column}' exceeds CQL's maximum of {MAX_TTL_SECS} s"
                )));
            }
            Ok(secs as i32)
        }
    }
}

/// The values one cell's insert binds.
pub fn write_values<'a>(row: &'a str, cell: &'a CellWrite) -> Result<WriteValues<'a>, StoreError> {
    check_row(row)?;
    Ok((row, &cell.column, &cell.value, ttl_value(cell)?, cell.timestamp))
}

/// The values a delete binds.
pub fn delete_values<'a>(
    row: &'a str,
    column: &'a str,
    timestamp: Micros,
) -> Result<DeleteValues<'a>, StoreError> {
    check_row(row)?;
    Ok((timestamp, row, column))
}

/// Values of a read, in bind order; which statement takes them is [`ReadValues::kind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadValues<'a> {
    /// A slice of limit 0: nothing to ask the store.
    Nothing,
    /// `(row)`.
    Row(&'a str),
    /// `(row, start)`.
    From(&'a str, &'a str),
    /// `(row, limit)`.
    First(&'a str, i32),
    /// `(row, start, limit)`.
    FromFirst(&'a str, &'a str, i32),
}

impl ReadValues<'_> {
    /// The statement these values go with; `None` for [`ReadValues::Nothing`].
    pub fn kind(&self) -> Option<ReadKind> {
        match self {
            ReadValues::Nothing => None,
            ReadValues::Row(..) => Some(ReadKind::Row),
            ReadValues::From(..) => Some(ReadKind::From),
            ReadValues::First(..) => Some(ReadKind::First),
            ReadValues::FromFirst(..) => Some(ReadKind::FromFirst),
        }
    }
}

/// The read a slice of `row` needs. A limit above `i32::MAX` (CQL's `LIMIT` is an `int`) is
/// sent as `i32::MAX`, which no row of a lock table comes near.
pub fn read_values<'a>(row: &'a str, slice: &'a Slice) -> Result<ReadValues<'a>, StoreError> {
    check_row(row)?;
    let limit = slice.limit.map(|l| l.min(i32::MAX as usize) as i32);
    Ok(match (slice.start.as_deref(), limit) {
        (_, Some(0)) => ReadValues::Nothing,
        (None, None) => ReadValues::Row(row),
        (Some(start), None) => ReadValues::From(row, start),
        (None, Some(limit)) => ReadValues::First(row, limit),
        (Some(start), Some(limit)) => ReadValues::FromFirst(row, start, limit),
    })
}

/// One result row of a read: `(column, value, WRITETIME(value))`.
pub type RawCell = (String, Option<Vec<u8>>, Option<i64>);

/// The cells of a read's result rows. The server returns them in clustering order (byte-wise
/// ascending) and only live ones; a row without a value (which these statements never write)
/// is not a cell and is skipped. At most `limit` cells are kept.
pub fn decode_cells(rows: impl IntoIterator<Item = RawCell>, limit: Option<usize>) -> Vec<Cell> {
    rows.into_iter()
        .filter_map(|(column, value, writetime)| {
            let value = value?;
            Some(Cell { column, value, timestamp: writetime.unwrap_or(Micros::MIN) })
        })
        .take(limit.unwrap_or(usize::MAX))
        .collect()
}

/// The driver's consistency for a request at `c`: `ONE`, `QUORUM`, `ALL`; with a local
/// datacenter, `LOCAL_ONE` and `LOCAL_QUORUM` instead of the first two.
pub fn driver_consistency(c: Consistency, local_dc: bool) -> scylla::statement::Consistency {
    use scylla::statement::Consistency as D;
    match (c, local_dc) {
        (Consistency::One, false) => D::One,
        (Consistency::One, true) => D::LocalOne,
        (Consistency::Quorum, false) => D::Quorum,
        (Consistency::Quorum, true) => D::LocalQuorum,
        (Consistency::All, _) => D::All,
    }
}

/// The kinds of statement a compare-and-set is made of: one prepared statement per kind and
/// table. A TTL is always bound (0 = none, as for plain writes), so that a kind has one text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CasKind {
    /// `Set` of a cell expected absent: `INSERT … IF NOT EXISTS USING TTL ?`; binds
    /// `(row, column, value, ttl)`.
    InsertIfNotExists,
    /// `Set` of a cell expected to hold a value: `UPDATE … USING TTL ? SET value = ? WHERE …
    /// IF value = ?`; binds `(ttl, value, row, column, expected)`.
    UpdateIf,
    /// `Delete` of a cell expected to hold a value: `DELETE … WHERE … IF value = ?`; binds
    /// `(row, column, expected)`.
    DeleteIf,
    /// `Set` without a condition, inside a conditional batch: `INSERT … USING TTL ?` (no
    /// `USING TIMESTAMP`: Cassandra forbids it in a conditional batch, whose writes take the
    /// Paxos ballot's timestamp); binds `(row, column, value, ttl)`.
    Insert,
    /// `Delete` without a condition, inside a conditional batch; binds `(row, column)`.
    Delete,
}

impl CasKind {
    /// Every kind, in the order [`CasStatements::texts`] holds them.
    pub const ALL: [CasKind; 5] = [
        CasKind::InsertIfNotExists,
        CasKind::UpdateIf,
        CasKind::DeleteIf,
        CasKind::Insert,
        CasKind::Delete,
    ];

    /// Index into [`CasKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The text of the compare-and-set statements of one table, indexed by [`CasKind::index`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasStatements {
    /// One text per [`CasKind`].
    pub texts: [String; 5],
}

impl CasStatements {
    /// The statements on `"keyspace"."table"`.
    pub fn new(keyspace: &str, table: &str) -> Self {
        let t = qualified(keyspace, table);
        let insert = format!("INSERT INTO {t} (\"row\", \"column\", \"value\") VALUES (?, ?, ?)");
        let cell = "WHERE \"row\" = ? AND \"column\" = ?";
        CasStatements {
            texts: [
                format!("{insert} IF NOT EXISTS USING TTL ?"),
                format!("UPDATE {t} USING TTL ? SET \"value\" = ? {cell} IF \"value\" = ?"),
                format!("DELETE FROM {t} {cell} IF \"value\" = ?"),
                format!("{insert} USING TTL ?"),
                format!("DELETE FROM {t} {cell}"),
            ],
        }
    }

    /// The text of `kind`.
    pub fn text(&self, kind: CasKind) -> &str {
        &self.texts[kind.index()]
    }
}

/// One statement of a compare-and-set: its kind and its bound values, in bind order.
#[derive(Debug, Clone, PartialEq)]
pub struct CasStatement {
    /// Which prepared statement.
    pub kind: CasKind,
    /// The values it binds ([`CasKind`] says which, in which order).
    pub values: Vec<CqlValue>,
}

/// How a [`CasRequest`] goes over the wire: one statement, or a conditional batch of one
/// statement per change (all on one partition, so the server runs them as one Paxos round),
/// in the order of the request's changes.
#[derive(Debug, Clone, PartialEq)]
pub struct CasPlan {
    /// The statements; more than one makes a batch.
    pub statements: Vec<CasStatement>,
}

fn cas_refused(why: impl std::fmt::Display) -> StoreError {
    StoreError::Rejected(format!("this compare-and-set cannot be written in CQL: {why}"))
}

/// The statements of `request` on `row` (see [`CasKind`]): each change becomes one statement,
/// conditioned by the condition on its column if there is one. Refused before anything is
/// sent, with [`StoreError::Rejected`] saying why, when CQL cannot express the request:
/// - no condition (a statement without `IF` is not a lightweight transaction) or no change
///   (every conditional statement changes something);
/// - two conditions, or two changes, on one column (one CQL row takes one condition, and two
///   writes of it in one batch share a timestamp);
/// - a condition on a column no change touches (CQL puts a condition on the statement that
///   writes its row);
/// - `Delete` of a cell expected [`Expect::Absent`] (there is no `DELETE … IF NOT EXISTS`).
pub fn cas_plan(row: &str, request: &CasRequest) -> Result<CasPlan, StoreError> {
    check_row(row)?;
    if request.conditions.is_empty() {
        return Err(cas_refused(
            "it has no condition, and a CQL statement without IF runs outside Paxos",
        ));
    }
    if request.changes.is_empty() {
        return Err(cas_refused(
            "it has no change, and every CQL conditional statement writes or deletes",
        ));
    }
    for (i, c) in request.conditions.iter().enumerate() {
        if request.conditions[..i].iter().any(|d| d.column == c.column) {
            return Err(cas_refused(format!(
                "two conditions on column '{}' (CQL takes one per row)",
                c.column
            )));
        }
        if !request.changes.iter().any(|ch| ch.column() == c.column) {
            return Err(cas_refused(format!(
                "the condition on column '{}' has no change on that column to be attached to",
                c.column
            )));
        }
    }
    let mut statements = Vec::with_capacity(request.changes.len());
    for (i, change) in request.changes.iter().enumerate() {
        let column = change.column();
        if request.changes[..i].iter().any(|ch| ch.column() == column) {
            return Err(cas_refused(format!(
                "two changes on column '{column}' (one batch writes them with one timestamp)"
            )));
        }
        let expect = request.conditions.iter().find(|c| c.column == column).map(|c| &c.expect);
        let text = |s: &str| CqlValue::Text(s.to_owned());
        let blob = |b: &[u8]| CqlValue::Blob(b.to_vec());
        let statement = match (change, expect) {
            (CasChange::Set { value, ttl, .. }, None | Some(Expect::Absent)) => {
                let kind = if expect.is_some() { CasKind::InsertIfNotExists } else { CasKind::Insert };
                let ttl = CqlValue::Int(ttl_bind(column, *ttl)?);
                CasStatement { kind, values: vec![text(row), text(column), blob(value), ttl] }
            }
            (CasChange::Set { value, ttl, .. }, Some(Expect::Value(expected))) => CasStatement {
                kind: CasKind::UpdateIf,
                values: vec![CqlValue::Int(ttl_bind(column, *ttl)?), blob(value), text(row), text(column), blob(expected)],
            },
            (CasChange::Delete { .. }, Some(Expect::Value(expected))) => {
                CasStatement { kind: CasKind::DeleteIf, values: vec![text(row), text(column), blob(expected)] }
            }
            (CasChange::Delete { .. }, None) => CasStatement { kind: CasKind::Delete, values: vec![text(row), text(column)] },
            (CasChange::Delete { .. }, Some(Expect::Absent)) => {
                return Err(cas_refused(format!(
                    "deleting column '{column}' on condition that it is absent (CQL has no DELETE … IF NOT EXISTS)"
                )))
            }
        };
        statements.push(statement);
    }
    Ok(CasPlan { statements })
}

/// What decoding needs of one row of a compare-and-set's answer, found by column name: the
/// answer's columns vary with the statement and the outcome (see [`decode_cas`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CasAnswerRow {
    /// `[applied]`.
    pub applied: Option<bool>,
    /// `"column"`: present in the answer of `IF NOT EXISTS` and of batches.
    pub column: Option<String>,
    /// `"value"`: the current value of the conditioned CQL row (null when it has none).
    pub value: Option<Vec<u8>>,
}

/// The name of the answer's applied flag.
pub const APPLIED: &str = "[applied]";

/// Picks `[applied]`, `column` and `value` out of untyped result rows whose columns are named
/// `names`; other columns (`row`) are ignored. A column of an unexpected type is an error.
pub fn cas_answer_rows(names: &[&str], rows: Vec<Row>) -> Result<Vec<CasAnswerRow>, String> {
    let at = |name: &str| names.iter().position(|n| *n == name);
    let (applied, column, value) = (at(APPLIED), at("column"), at("value"));
    if applied.is_none() {
        return Err(format!("no {APPLIED} column in the answer (columns: {})", names.join(", ")));
    }
    rows.into_iter()
        .map(|row| {
            let mut cols = row.columns;
            let mut take =
                |i: Option<usize>| i.and_then(|i| cols.get_mut(i)).and_then(Option::take);
            let mut answer = CasAnswerRow::default();
            match take(applied) {
                Some(CqlValue::Boolean(b)) => answer.applied = Some(b),
                None => {}
                Some(other) => return Err(format!("{APPLIED} is not a boolean: {other:?}")),
            }
            match take(column) {
                Some(CqlValue::Text(c) | CqlValue::Ascii(c)) => answer.column = Some(c),
                None => {}
                Some(other) => return Err(format!("\"column\" is not text: {other:?}")),
            }
            match take(value) {
                Some(CqlValue::Blob(v)) => answer.value = Some(v),
                None => {}
                Some(other) => return Err(format!("\"value\" is not a blob: {other:?}")),
            }
            Ok(answer)
        })
        .collect()
}

/// The [`CasResult`] of `request`'s answer rows.
///
/// `[applied]` is the first row's. Applied: the current cells are rebuilt from the conditions
/// (a cell with the expected value, timestamp 0, for each [`Expect::Value`]; none for
/// [`Expect::Absent`]), as rule 9 of `lock_core::store` says: Cassandra sends only
/// `[applied]`, ScyllaDB the rows as they were, which the conditions already tell.
///
/// Not applied: Cassandra 4.0 answers with one row per conditioned CQL row that exists,
/// carrying `[applied]` = false and its columns (`row`, `column`, `value` for `IF NOT EXISTS`
/// and batches; only `value` for a single `IF value = ?` statement, whose column is then the
/// request's one condition), in clustering order; a single row with `[applied]` alone when
/// none exists. ScyllaDB answers one row per conditional statement, with nulls for a row that
/// does not exist. Either way the current cells are the rows with a value, on a conditioned
/// column, each column once, in column order, timestamp 0 (the answer carries none).
///
/// A not-applied answer whose cells satisfy every condition is refused with
/// [`StoreError::Rejected`]: the server saw a CQL row where the cell model sees no cell. That
/// is a row marker without a value (an `INSERT` without TTL whose value a later `UPDATE …
/// USING TTL` let expire), which makes `IF NOT EXISTS` fail for good; returning "not applied"
/// with an absent cell would have a caller retry forever.
pub fn decode_cas(request: &CasRequest, rows: Vec<CasAnswerRow>) -> Result<CasResult, StoreError> {
    let bad =
        |why: &str| StoreError::Rejected(format!("unexpected answer to a compare-and-set: {why}"));
    let applied = rows.first().and_then(|r| r.applied).ok_or_else(|| bad("no [applied] flag"))?;
    let columns = request.condition_columns();
    let mut current: Vec<Cell> = if applied {
        request
            .conditions
            .iter()
            .filter_map(|c| match &c.expect {
                Expect::Value(v) => {
                    Some(Cell { column: c.column.clone(), value: v.clone(), timestamp: 0 })
                }
                Expect::Absent => None,
            })
            .collect()
    } else {
        let only = match columns.as_slice() {
            [one] => Some(*one),
            _ => None,
        };
        let mut cells = Vec::new();
        for row in rows {
            let Some(value) = row.value else { continue };
            let column = match (row.column, only) {
                (Some(c), _) => c,
                (None, Some(one)) => one.to_owned(),
                (None, None) => {
                    return Err(bad("a current value without its column, for several conditions"))
                }
            };
            if columns.contains(&column.as_str())
                && !cells.iter().any(|c: &Cell| c.column == column)
            {
                cells.push(Cell { column, value, timestamp: 0 });
            }
        }
        if request.holds_on(&cells) {
            return Err(StoreError::Rejected(format!(
                "the server did not apply a compare-and-set whose conditions hold on the cells it reported ({}): \
                 a CQL row without a value exists where a condition expects no cell, which makes IF NOT EXISTS fail \
                 (the row marker of an INSERT without TTL outlives a value a later UPDATE … USING TTL let expire)",
                columns.join(", ")
            )));
        }
        cells
    };
    current.sort_by(|a, b| a.column.cmp(&b.column));
    Ok(CasResult { applied, current })
}

/// The driver's serial consistency for `serial`. Honoured as asked, also with a local
/// datacenter: unlike [`Consistency`], the model's serial levels name the local one.
pub fn driver_serial_consistency(
    serial: SerialConsistency,
) -> scylla::statement::SerialConsistency {
    use scylla::statement::SerialConsistency as D;
    match serial {
        SerialConsistency::Serial => D::Serial,
        SerialConsistency::LocalSerial => D::LocalSerial,
    }
}

/// The read consistency of a SERIAL read: `SERIAL` or `LOCAL_SERIAL`, which makes Cassandra
/// and ScyllaDB run the read through Paxos (rule 13 of `lock_core::store`).
pub fn serial_read_consistency(serial: SerialConsistency) -> scylla::statement::Consistency {
    use scylla::statement::Consistency as D;
    match serial {
        SerialConsistency::Serial => D::Serial,
        SerialConsistency::LocalSerial => D::LocalSerial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::store::CasCondition;

    fn cell(column: &str, value: &[u8], timestamp: Micros, ttl: Option<Duration>) -> CellWrite {
        CellWrite { column: column.into(), value: value.to_vec(), timestamp, ttl }
    }

    #[test]
    fn statement_text_per_operation() {
        let s = TableStatements::new("distributed_locks", "queue_lock_queue");
        assert_eq!(
            s.insert,
            "INSERT INTO \"distributed_locks\".\"queue_lock_queue\" (\"row\", \"column\", \"value\") VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?"
        );
        assert_eq!(
            s.delete,
            "DELETE FROM \"distributed_locks\".\"queue_lock_queue\" USING TIMESTAMP ? WHERE \"row\" = ? AND \"column\" = ?"
        );
        let select = "SELECT \"column\", \"value\", WRITETIME(\"value\") FROM \"distributed_locks\".\"queue_lock_queue\" WHERE \"row\" = ?";
        assert_eq!(s.read(ReadKind::Row), select);
        assert_eq!(s.read(ReadKind::From), format!("{select} AND \"column\" >= ?"));
        assert_eq!(s.read(ReadKind::First), format!("{select} LIMIT ?"));
        assert_eq!(s.read(ReadKind::FromFirst), format!("{select} AND \"column\" >= ? LIMIT ?"));
    }

    #[test]
    fn statement_text_per_table() {
        for table in [
            "shadow_lock_main",
            "shadow_lock_shadow",
            "queue_lock_main",
            "lock_fence",
            "time_service",
        ] {
            let s = TableStatements::new("ks1", table);
            let q = format!("\"ks1\".\"{table}\"");
            assert!(s.insert.starts_with(&format!("INSERT INTO {q} ")), "{}", s.insert);
            assert!(s.delete.starts_with(&format!("DELETE FROM {q} ")), "{}", s.delete);
            for kind in ReadKind::ALL {
                assert!(s.read(kind).contains(&format!(" FROM {q} WHERE ")), "{}", s.read(kind));
                // One bind marker per value the read binds.
                let markers = s.read(kind).matches('?').count();
                let expected = match kind {
                    ReadKind::Row => 1,
                    ReadKind::From | ReadKind::First => 2,
                    ReadKind::FromFirst => 3,
                };
                assert_eq!(markers, expected, "{kind:?}");
            }
            assert_eq!(s.insert.matches('?').count(), 5);
            assert_eq!(s.delete.matches('?').count(), 3);
        }
    }

    #[test]
    fn schema_statements() {
        assert_eq!(
            create_keyspace("distributed_locks", &Replication::default(), false),
            "CREATE KEYSPACE IF NOT EXISTS \"distributed_locks\" WITH replication = {'class': 'NetworkTopologyStrategy', 'replication_factor': 1} AND durable_writes = true"
        );
        assert_eq!(
            create_keyspace("ks", &Replication::Simple { replication_factor: 3 }, false),
            "CREATE KEYSPACE IF NOT EXISTS \"ks\" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3} AND durable_writes = true"
        );
        assert_eq!(
            create_keyspace("ks", &Replication::NetworkTopology { datacenters: vec![("dc1".into(), 3)] }, false),
            "CREATE KEYSPACE IF NOT EXISTS \"ks\" WITH replication = {'class': 'NetworkTopologyStrategy', 'dc1': 3} AND durable_writes = true"
        );
        // ScyllaDB: lightweight transactions need a keyspace without tablets.
        assert_eq!(
            create_keyspace("distributed_locks", &Replication::default(), true),
            "CREATE KEYSPACE IF NOT EXISTS \"distributed_locks\" WITH replication = {'class': 'NetworkTopologyStrategy', 'replication_factor': 1} AND durable_writes = true AND tablets = {'enabled': false}"
        );
        assert_eq!(
            create_table("distributed_locks", "lock_fence", None),
            "CREATE TABLE IF NOT EXISTS \"distributed_locks\".\"lock_fence\" (\"row\" text, \"column\" text, \"value\" blob, PRIMARY KEY ((\"row\"), \"column\")) WITH CLUSTERING ORDER BY (\"column\" ASC)"
        );
        assert!(create_table("ks", "t", Some(3600))
            .ends_with("WITH CLUSTERING ORDER BY (\"column\" ASC) AND gc_grace_seconds = 3600"));
    }

    #[test]
    fn write_binds_row_column_value_ttl_timestamp_in_order() {
        let c = cell(
            "0000000000000001worker-1",
            b"worker-1",
            1_767_225_600_000_123,
            Some(Duration::from_secs(10)),
        );
        // TTL: 10 s asked, 11 bound (the server expires cells on whole seconds of its clock).
        assert_eq!(
            write_values("lock-1", &c).unwrap(),
            ("lock-1", "0000000000000001worker-1", &b"worker-1"[..], 11, 1_767_225_600_000_123)
        );
        // No TTL binds 0 (CQL: no expiry); sub-second TTLs round up, then get the margin.
        assert_eq!(
            write_values("r", &cell("c", b"", -5, None)).unwrap(),
            ("r", "c", &b""[..], 0, -5)
        );
        assert_eq!(
            write_values("r", &cell("c", b"v", 1, Some(Duration::from_millis(1500)))).unwrap().3,
            3
        );
        assert_eq!(
            write_values("r", &cell("c", b"v", 1, Some(Duration::from_millis(1)))).unwrap().3,
            2
        );
        assert_eq!(write_values("r", &cell("c", b"v", 1, Some(Duration::ZERO))).unwrap().3, 2);
        let longest = Duration::from_secs((MAX_TTL_SECS - TTL_MARGIN_SECS) as u64);
        assert_eq!(
            write_values("r", &cell("c", b"v", 1, Some(longest))).unwrap().3,
            MAX_TTL_SECS as i32
        );
        let too_long = cell("c", b"v", 1, Some(longest + Duration::from_secs(1)));
        assert!(
            matches!(write_values("r", &too_long), Err(StoreError::Rejected(m)) if m.contains("maximum"))
        );
    }

    #[test]
    fn delete_binds_timestamp_row_column_in_order() {
        assert_eq!(delete_values("lock-1", "worker-1", 42).unwrap(), (42, "lock-1", "worker-1"));
    }

    #[test]
    fn empty_and_oversized_row_keys_are_refused_before_sending() {
        let c = cell("c", b"v", 1, None);
        assert!(
            matches!(write_values("", &c), Err(StoreError::Rejected(m)) if m.contains("empty"))
        );
        assert!(delete_values("", "c", 1).is_err());
        assert!(read_values("", &Slice::all()).is_err());
        let long = "k".repeat(MAX_ROW_KEY_BYTES + 1);
        assert!(
            matches!(read_values(&long, &Slice::all()), Err(StoreError::Rejected(m)) if m.contains("65535"))
        );
        assert!(read_values(&"k".repeat(MAX_ROW_KEY_BYTES), &Slice::all()).is_ok());
    }

    #[test]
    fn read_binds_per_slice() {
        let all = Slice::all();
        assert_eq!(read_values("r", &all).unwrap(), ReadValues::Row("r"));
        let from = Slice { start: Some("b".into()), limit: None };
        assert_eq!(read_values("r", &from).unwrap(), ReadValues::From("r", "b"));
        let first = Slice::first(1);
        assert_eq!(read_values("r", &first).unwrap(), ReadValues::First("r", 1));
        let from_first = Slice::from("GlobalTime", 1);
        assert_eq!(
            read_values("r", &from_first).unwrap(),
            ReadValues::FromFirst("r", "GlobalTime", 1)
        );
        let zero = Slice::first(0);
        assert_eq!(read_values("r", &zero).unwrap(), ReadValues::Nothing);
        let huge = Slice::first(usize::MAX);
        assert_eq!(read_values("r", &huge).unwrap(), ReadValues::First("r", i32::MAX));
        assert_eq!(ReadValues::Row("r").kind(), Some(ReadKind::Row));
        assert_eq!(ReadValues::From("r", "b").kind(), Some(ReadKind::From));
        assert_eq!(ReadValues::First("r", 1).kind(), Some(ReadKind::First));
        assert_eq!(ReadValues::FromFirst("r", "b", 1).kind(), Some(ReadKind::FromFirst));
        assert_eq!(ReadValues::Nothing.kind(), None);
    }

    #[test]
    fn rows_decode_into_cells_in_server_order() {
        let rows = vec![
            ("a".to_string(), Some(b"1".to_vec()), Some(10)),
            ("b".to_string(), None, None),
            ("c".to_string(), Some(vec![]), Some(-3)),
            ("d".to_string(), Some(b"4".to_vec()), None),
        ];
        assert_eq!(
            decode_cells(rows.clone(), None),
            vec![
                Cell { column: "a".into(), value: b"1".to_vec(), timestamp: 10 },
                Cell { column: "c".into(), value: vec![], timestamp: -3 },
                Cell { column: "d".into(), value: b"4".to_vec(), timestamp: Micros::MIN },
            ]
        );
        assert_eq!(decode_cells(rows.clone(), Some(1)).len(), 1);
        assert_eq!(decode_cells(rows, Some(2))[1].column, "c");
        assert!(decode_cells(Vec::new(), None).is_empty());
    }

    #[test]
    fn consistency_maps_to_the_driver_levels() {
        use scylla::statement::Consistency as D;
        assert_eq!(driver_consistency(Consistency::One, false), D::One);
        assert_eq!(driver_consistency(Consistency::Quorum, false), D::Quorum);
        assert_eq!(driver_consistency(Consistency::All, false), D::All);
        assert_eq!(driver_consistency(Consistency::One, true), D::LocalOne);
        assert_eq!(driver_consistency(Consistency::Quorum, true), D::LocalQuorum);
        assert_eq!(driver_consistency(Consistency::All, true), D::All);
    }

    fn t(s: &str) -> CqlValue {
        CqlValue::Text(s.into())
    }

    fn b(v: &[u8]) -> CqlValue {
        CqlValue::Blob(v.to_vec())
    }

    fn set(column: &str, value: &[u8], ttl: Option<Duration>) -> CasChange {
        CasChange::Set { column: column.into(), value: value.to_vec(), ttl }
    }

    fn del(column: &str) -> CasChange {
        CasChange::Delete { column: column.into() }
    }

    fn request(conditions: Vec<CasCondition>, changes: Vec<CasChange>) -> CasRequest {
        CasRequest { conditions, changes }
    }

    #[test]
    fn cas_statement_text_per_kind() {
        let s = CasStatements::new("distributed_locks", "lwt_lock");
        let t = "\"distributed_locks\".\"lwt_lock\"";
        assert_eq!(
            s.text(CasKind::InsertIfNotExists),
            format!("INSERT INTO {t} (\"row\", \"column\", \"value\") VALUES (?, ?, ?) IF NOT EXISTS USING TTL ?")
        );
        assert_eq!(
            s.text(CasKind::UpdateIf),
            format!("UPDATE {t} USING TTL ? SET \"value\" = ? WHERE \"row\" = ? AND \"column\" = ? IF \"value\" = ?")
        );
        assert_eq!(
            s.text(CasKind::DeleteIf),
            format!("DELETE FROM {t} WHERE \"row\" = ? AND \"column\" = ? IF \"value\" = ?")
        );
        assert_eq!(
            s.text(CasKind::Insert),
            format!(
                "INSERT INTO {t} (\"row\", \"column\", \"value\") VALUES (?, ?, ?) USING TTL ?"
            )
        );
        assert_eq!(
            s.text(CasKind::Delete),
            format!("DELETE FROM {t} WHERE \"row\" = ? AND \"column\" = ?")
        );
        // Cassandra refuses USING TIMESTAMP on conditional statements and in conditional batches.
        for kind in CasKind::ALL {
            assert!(!s.text(kind).contains("TIMESTAMP"), "{kind:?}");
            assert_eq!(CasKind::ALL[kind.index()], kind);
        }
    }

    #[test]
    fn each_cas_kind_binds_as_many_values_as_its_text_has_markers() {
        let s = CasStatements::new("ks", "t");
        let requests = [
            request(vec![CasCondition::absent("a")], vec![set("a", b"1", None)]),
            request(vec![CasCondition::equals("a", "1")], vec![set("a", b"2", None)]),
            request(vec![CasCondition::equals("a", "1")], vec![del("a")]),
            request(
                vec![CasCondition::equals("a", "1")],
                vec![del("a"), set("b", b"x", None), del("c")],
            ),
        ];
        let mut seen = std::collections::HashSet::new();
        for r in &requests {
            for st in cas_plan("row", r).unwrap().statements {
                assert_eq!(st.values.len(), s.text(st.kind).matches('?').count(), "{:?}", st.kind);
                seen.insert(st.kind);
            }
        }
        assert_eq!(seen.len(), CasKind::ALL.len(), "every kind is exercised");
    }

    #[test]
    fn one_change_is_one_conditional_statement() {
        let ten = Some(Duration::from_secs(10));
        // Acquire: the cell must be absent. TTL 10 s asked, 11 bound (the margin of plain writes).
        let plan = cas_plan(
            "lock-1",
            &request(vec![CasCondition::absent("owner")], vec![set("owner", b"w1", ten)]),
        )
        .unwrap();
        assert_eq!(
            plan.statements,
            vec![CasStatement {
                kind: CasKind::InsertIfNotExists,
                values: vec![t("lock-1"), t("owner"), b(b"w1"), CqlValue::Int(11)]
            }]
        );
        // Renew: the cell must hold our value.
        let plan = cas_plan(
            "lock-1",
            &request(vec![CasCondition::equals("owner", "w1")], vec![set("owner", b"w1", ten)]),
        )
        .unwrap();
        assert_eq!(
            plan.statements,
            vec![CasStatement {
                kind: CasKind::UpdateIf,
                values: vec![CqlValue::Int(11), b(b"w1"), t("lock-1"), t("owner"), b(b"w1")]
            }]
        );
        // Release.
        let plan = cas_plan(
            "lock-1",
            &request(vec![CasCondition::equals("owner", "w1")], vec![del("owner")]),
        )
        .unwrap();
        assert_eq!(
            plan.statements,
            vec![CasStatement {
                kind: CasKind::DeleteIf,
                values: vec![t("lock-1"), t("owner"), b(b"w1")]
            }]
        );
        // No TTL binds 0, as for plain writes.
        let plan = cas_plan(
            "r",
            &request(vec![CasCondition::equals("n", "4")], vec![set("n", b"5", None)]),
        )
        .unwrap();
        assert_eq!(plan.statements[0].values[0], CqlValue::Int(0));
    }

    #[test]
    fn several_changes_are_a_batch_in_change_order_with_unconditioned_ones_plain() {
        // The lock's acquire: owner absent, fencing counter at 41 -> owner set with a TTL, counter 42.
        let r = request(
            vec![CasCondition::absent("owner"), CasCondition::equals("fence", "41")],
            vec![
                set("owner", b"w1", Some(Duration::from_millis(1500))),
                set("fence", b"42", None),
                del("old"),
                set("note", b"n", None),
            ],
        );
        let plan = cas_plan("lock-1", &r).unwrap();
        let kinds: Vec<CasKind> = plan.statements.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [CasKind::InsertIfNotExists, CasKind::UpdateIf, CasKind::Delete, CasKind::Insert]
        );
        assert_eq!(
            plan.statements[0].values,
            vec![t("lock-1"), t("owner"), b(b"w1"), CqlValue::Int(3)]
        );
        assert_eq!(
            plan.statements[1].values,
            vec![CqlValue::Int(0), b(b"42"), t("lock-1"), t("fence"), b(b"41")]
        );
        assert_eq!(plan.statements[2].values, vec![t("lock-1"), t("old")]);
        assert_eq!(
            plan.statements[3].values,
            vec![t("lock-1"), t("note"), b(b"n"), CqlValue::Int(0)]
        );
    }

    #[test]
    fn shapes_cql_cannot_express_are_refused_saying_why() {
        let refused = |r: CasRequest, why: &str| match cas_plan("r", &r) {
            Err(StoreError::Rejected(m)) => assert!(m.contains(why), "{m} should say {why:?}"),
            other => panic!("{r:?} should be refused, got {other:?}"),
        };
        refused(
            request(
                vec![CasCondition::absent("a"), CasCondition::equals("b", "1")],
                vec![set("a", b"1", None)],
            ),
            "'b' has no change",
        );
        refused(
            request(
                vec![CasCondition::absent("a"), CasCondition::equals("a", "1")],
                vec![set("a", b"1", None)],
            ),
            "two conditions on column 'a'",
        );
        refused(
            request(vec![CasCondition::absent("a")], vec![del("a")]),
            "no DELETE … IF NOT EXISTS",
        );
        refused(request(vec![], vec![set("a", b"1", None)]), "no condition");
        refused(request(vec![CasCondition::absent("a")], vec![]), "no change");
        refused(
            request(vec![CasCondition::absent("a")], vec![set("a", b"1", None), del("a")]),
            "two changes on column 'a'",
        );
        refused(
            request(
                vec![CasCondition::absent("a")],
                vec![set("a", b"1", Some(Duration::from_secs(MAX_TTL_SECS as u64)))],
            ),
            "maximum",
        );
        assert!(
            matches!(cas_plan("", &request(vec![CasCondition::absent("a")], vec![set("a", b"1", None)])), Err(StoreError::Rejected(m)) if m.contains("empty"))
        );
    }

    fn answer(applied: Option<bool>, column: Option<&str>, value: Option<&[u8]>) -> CasAnswerRow {
        CasAnswerRow { applied, column: column.map(Into::into), value: value.map(<[u8]>::to_vec) }
    }

    fn cell0(column: &str, value: &[u8]) -> Cell {
        Cell { column: column.into(), value: value.to_vec(), timestamp: 0 }
    }

    #[test]
    fn an_applied_answer_is_rebuilt_from_the_conditions() {
        let r = request(
            vec![CasCondition::equals("fence", "41"), CasCondition::absent("owner")],
            vec![set("owner", b"w1", None), set("fence", b"42", None)],
        );
        // Cassandra: [applied] alone.
        let result = decode_cas(&r, vec![answer(Some(true), None, None)]).unwrap();
        assert_eq!(result, CasResult { applied: true, current: vec![cell0("fence", b"41")] });
        // ScyllaDB: the old rows too, which say nothing the conditions do not.
        let scylla = vec![
            answer(Some(true), Some("owner"), None),
            answer(Some(true), Some("fence"), Some(b"41")),
        ];
        assert_eq!(decode_cas(&r, scylla).unwrap(), result);
    }

    #[test]
    fn a_single_statement_that_did_not_apply_carries_the_current_value() {
        // INSERT … IF NOT EXISTS: [applied], row, column, value.
        let r = request(vec![CasCondition::absent("owner")], vec![set("owner", b"w2", None)]);
        let result = decode_cas(&r, vec![answer(Some(false), Some("owner"), Some(b"w1"))]).unwrap();
        assert_eq!(result, CasResult { applied: false, current: vec![cell0("owner", b"w1")] });
        // UPDATE … IF value = ?: [applied], value, without the column: it is the condition's.
        let r = request(vec![CasCondition::equals("owner", "w2")], vec![del("owner")]);
        let result = decode_cas(&r, vec![answer(Some(false), None, Some(b"w1"))]).unwrap();
        assert_eq!(result.current, vec![cell0("owner", b"w1")]);
        // ... on a row that does not exist: [applied] alone.
        assert_eq!(
            decode_cas(&r, vec![answer(Some(false), None, None)]).unwrap(),
            CasResult { applied: false, current: vec![] }
        );
    }

    #[test]
    fn a_batch_that_did_not_apply_carries_the_existing_conditioned_rows_in_column_order() {
        let r = request(
            vec![CasCondition::absent("owner"), CasCondition::equals("fence", "41")],
            vec![set("owner", b"w2", None), set("fence", b"42", None), set("other", b"x", None)],
        );
        // Cassandra: one row per existing conditioned row, clustering order.
        let rows = vec![
            answer(Some(false), Some("fence"), Some(b"43")),
            answer(Some(false), Some("owner"), Some(b"w1")),
        ];
        assert_eq!(
            decode_cas(&r, rows).unwrap().current,
            vec![cell0("fence", b"43"), cell0("owner", b"w1")]
        );
        // ScyllaDB: one row per conditional statement in statement order, nulls where none exists.
        let rows =
            vec![answer(Some(false), Some("owner"), Some(b"w1")), answer(Some(false), None, None)];
        assert_eq!(decode_cas(&r, rows).unwrap().current, vec![cell0("owner", b"w1")]);
        // No conditioned row exists (the counter moved on to absent): [applied] alone.
        assert!(decode_cas(&r, vec![answer(Some(false), None, None)]).unwrap().current.is_empty());
        // A row the conditions do not name, or a row twice, is not reported twice.
        let rows = vec![
            answer(Some(false), Some("other"), Some(b"x")),
            answer(Some(false), Some("owner"), Some(b"w1")),
            answer(Some(false), Some("owner"), Some(b"w1")),
        ];
        assert_eq!(decode_cas(&r, rows).unwrap().current, vec![cell0("owner", b"w1")]);
    }

    #[test]
    fn not_applied_although_the_conditions_hold_is_a_row_marker_and_an_error() {
        // IF NOT EXISTS failed on a CQL row whose value is null: the model sees no cell.
        let r = request(vec![CasCondition::absent("owner")], vec![set("owner", b"w2", None)]);
        match decode_cas(&r, vec![answer(Some(false), Some("owner"), None)]) {
            Err(StoreError::Rejected(m)) => {
                assert!(m.contains("row marker") && m.contains("owner"), "{m}")
            }
            other => panic!("expected Rejected, got {other:?}"),
        }
        // A batch where the other condition is what failed is an ordinary "not applied".
        let r = request(
            vec![CasCondition::absent("owner"), CasCondition::equals("fence", "41")],
            vec![set("owner", b"w2", None), set("fence", b"42", None)],
        );
        let result = decode_cas(&r, vec![answer(Some(false), Some("fence"), Some(b"40"))]).unwrap();
        assert_eq!(result.current, vec![cell0("fence", b"40")]);
    }

    #[test]
    fn an_answer_without_applied_or_with_unattributable_values_is_an_error() {
        let one = request(vec![CasCondition::absent("a")], vec![set("a", b"1", None)]);
        assert!(
            matches!(decode_cas(&one, vec![]), Err(StoreError::Rejected(m)) if m.contains("[applied]"))
        );
        assert!(decode_cas(&one, vec![answer(None, None, None)]).is_err());
        let two = request(
            vec![CasCondition::absent("a"), CasCondition::absent("b")],
            vec![set("a", b"1", None), set("b", b"1", None)],
        );
        assert!(
            matches!(decode_cas(&two, vec![answer(Some(false), None, Some(b"1"))]), Err(StoreError::Rejected(m)) if m.contains("without its column"))
        );
    }

    #[test]
    fn answer_rows_are_read_by_column_name() {
        let names = ["[applied]", "row", "column", "value"];
        let rows = vec![
            Row {
                columns: vec![
                    Some(CqlValue::Boolean(false)),
                    Some(t("r")),
                    Some(t("a")),
                    Some(b(b"1")),
                ],
            },
            Row { columns: vec![Some(CqlValue::Boolean(false)), None, None, None] },
        ];
        assert_eq!(
            cas_answer_rows(&names, rows).unwrap(),
            vec![answer(Some(false), Some("a"), Some(b"1")), answer(Some(false), None, None)]
        );
        // `[applied], value` (a single IF value = ?), and `[applied]` alone.
        let rows = vec![Row { columns: vec![Some(CqlValue::Boolean(false)), Some(b(b"7"))] }];
        assert_eq!(
            cas_answer_rows(&["[applied]", "value"], rows).unwrap(),
            vec![answer(Some(false), None, Some(b"7"))]
        );
        let rows = vec![Row { columns: vec![Some(CqlValue::Boolean(true))] }];
        assert_eq!(
            cas_answer_rows(&["[applied]"], rows).unwrap(),
            vec![answer(Some(true), None, None)]
        );
        // Not a CAS answer, or wrong types.
        assert!(cas_answer_rows(&["column", "value"], vec![])
            .unwrap_err()
            .contains("no [applied]"));
        let rows = vec![Row { columns: vec![Some(CqlValue::Int(1))] }];
        assert!(cas_answer_rows(&["[applied]"], rows).unwrap_err().contains("not a boolean"));
        let rows = vec![Row { columns: vec![Some(CqlValue::Boolean(false)), Some(t("x"))] }];
        assert!(cas_answer_rows(&["[applied]", "value"], rows).unwrap_err().contains("not a blob"));
    }

    #[test]
    fn serial_levels_map_to_the_driver_levels() {
        use scylla::statement::{Consistency as D, SerialConsistency as S};
        assert_eq!(driver_serial_consistency(SerialConsistency::Serial), S::Serial);
        assert_eq!(driver_serial_consistency(SerialConsistency::LocalSerial), S::LocalSerial);
        assert_eq!(serial_read_consistency(SerialConsistency::Serial), D::Serial);
        assert_eq!(serial_read_consistency(SerialConsistency::LocalSerial), D::LocalSerial);
    }
}
