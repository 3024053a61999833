//! The CQL text of every statement, the values bound to them, and the decoding of their rows:
//! pure functions, so that what goes over the wire is tested without a server.
//!
//! Identifiers are always double-quoted in the statement text (`"ks"."t"`, `"row"`,
//! `"column"`, `"value"`): names are validated to lower-case identifiers, for which the quoted
//! and the unquoted spelling mean the same, and the quotes keep them clear of CQL keywords.

mod cas;

pub use cas::{
    cas_answer_rows, cas_plan, decode_cas, driver_serial_consistency, serial_read_consistency,
    CasAnswerRow, CasKind, CasPlan, CasStatement, CasStatements, APPLIED,
};

use crate::config::Replication;
use lock_core::store::{ttl_secs, Cell, CellWrite, Consistency, Micros, Slice, StoreError};
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
