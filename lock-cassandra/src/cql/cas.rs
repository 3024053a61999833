//! The compare-and-set layer: the conditional statements and batches a [`CasRequest`] becomes,
//! the values they bind, and the decoding of the answer rows into a [`CasResult`]; and the
//! serial consistency levels of lightweight transactions.

use super::{check_row, qualified, ttl_bind};
use lock_core::store::{
    CasChange, CasRequest, CasResult, Cell, Expect, SerialConsistency, StoreError,
};
use scylla::value::{CqlValue, Row};

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
/// datacenter: unlike [`Consistency`](lock_core::store::Consistency), the model's serial levels name the local one.
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
    use crate::cql::MAX_TTL_SECS;
    use lock_core::store::CasCondition;
    use std::time::Duration;

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
