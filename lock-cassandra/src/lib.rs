//! # lock-cassandra
//!
//! A [`CellStore`] on a real Apache Cassandra or ScyllaDB cluster, through the `scylla`
//! driver (1.x): the backend on which the Cassandra-model lock algorithms of this workspace
//! (the shadow-table lock, the queue lock, fencing tokens, leases, the time service) run
//! unchanged, as they run on the embedded store.
//!
//! ## Targets
//!
//! Apache Cassandra 4.0, 4.1 and 5.0, ScyllaDB 5.x and 6.x (and the 2024.x/2025.x
//! releases), over the CQL native protocol v4, the one the driver speaks. Nothing beyond CQL 3
//! of Cassandra 2.1 is used: `USING TTL ? AND TIMESTAMP ?` with bind markers, `WRITETIME`,
//! `LIMIT ?`, single-partition `UNLOGGED BATCH`, `CREATE … IF NOT EXISTS`; and, only for
//! [`CellStore::cas`] and [`CellStore::read_serial`], the lightweight transactions of
//! Cassandra 2.0 (conditional statements and batches, `SERIAL` reads; see
//! [below](#lightweight-transactions-cas-and-read_serial)). No counters, materialized views
//! or secondary indexes.
//!
//! ## Schema
//!
//! One keyspace ([`CassandraConfig::keyspace`], default `distributed_locks`), created if
//! missing with the configured [`Replication`] (default: one replica per datacenter, for a
//! single development node; production: three, `LOCK_CASSANDRA_REPLICATION=3`, or per
//! datacenter, `LOCK_CASSANDRA_REPLICATION=NetworkTopologyStrategy:dc1=3,dc2=3`). An existing
//! keyspace is kept as it is.
//!
//! ```text
//! CREATE KEYSPACE IF NOT EXISTS "distributed_locks"
//!     WITH replication = {'class': 'NetworkTopologyStrategy', 'replication_factor': 1} AND durable_writes = true
//! ```
//!
//! `NetworkTopologyStrategy` with the `replication_factor` shorthand is accepted by Cassandra
//! 4.0+ and every ScyllaDB; `SimpleStrategy` ([`Replication::Simple`]) is refused by ScyllaDB
//! 2026.2+, whose keyspaces use tablets by default. The plain reads and writes need nothing
//! tablets lack; lightweight transactions do: ScyllaDB refuses them in a keyspace with
//! tablets. For the LWT lock on ScyllaDB, set [`CassandraConfig::tablets_off`]
//! (`LOCK_CASSANDRA_TABLETS_OFF=1`), which appends `AND tablets = {'enabled': false}` to the
//! statement above (Apache Cassandra refuses that option), or create the keyspace so by hand.
//!
//! The keyspace holds one CQL table per logical table name of the cell model (`shadow_lock_main`,
//! `shadow_lock_shadow`, `queue_lock_main`, `queue_lock_queue`, `lock_fence`, `time_service`,
//! or any other name matching `[a-z][a-z0-9_]*`, at most 48 characters; other names are
//! refused with [`StoreError::Rejected`], never rewritten, so two names never share a table):
//!
//! ```text
//! CREATE TABLE IF NOT EXISTS "distributed_locks"."<table>" (
//!     "row" text, "column" text, "value" blob,
//!     PRIMARY KEY (("row"), "column")
//! ) WITH CLUSTERING ORDER BY ("column" ASC)
//! ```
//!
//! The row key is the partition key, the column name the clustering column. `text`
//! (`UTF8Type`) clustering keys compare byte-wise, which is exactly the cell model's order, so
//! the server returns a row's cells in the order the algorithms expect (the queue lock's
//! zero-padded time columns in arrival order, the fence table's inverted tokens greatest
//! first). A cell's write timestamp is the CQL cell timestamp (`USING TIMESTAMP`, read back
//! with `WRITETIME`), its TTL the CQL TTL: last-write-wins, tombstones and expiry are
//! Cassandra's own, which is what the model of `lock_core::store` was written after.
//!
//! **When tables are created.** Lazily: the first request naming a table creates it
//! (`CREATE TABLE IF NOT EXISTS`, then waiting for schema agreement) and prepares its
//! statements; both are cached per store, so every later request is one round trip. Creation
//! is serialized within a store; [`CassandraStore::ensure_tables`] does it eagerly. On
//! Cassandra before 5.0, concurrent `CREATE TABLE` of one name from several processes can
//! leave the nodes disagreeing on the table's id: when many processes start at once, let one
//! call `ensure_tables` first (or create the schema by hand and set
//! [`CassandraConfig::create_schema`] to false).
//!
//! ## Statements
//!
//! Identifiers are always double-quoted (`"ks"."t"`, `"row"`, …); see [`cql`] for the exact
//! text and the bound values, which are built by pure functions and tested.
//!
//! | `CellStore` call | CQL | bound values |
//! |---|---|---|
//! | `write`, one cell | `INSERT INTO ks.t (row, column, value) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?` | row, column, value, TTL seconds (0 = none; else [`ttl_secs`](lock_core::store::ttl_secs), rounded up, plus [1 s](cql::TTL_MARGIN_SECS)), timestamp µs |
//! | `write`, n cells | `BEGIN UNLOGGED BATCH` of n such inserts | one tuple per cell |
//! | `delete` | `DELETE FROM ks.t USING TIMESTAMP ? WHERE row = ? AND column = ?` | timestamp, row, column |
//! | `read`, whole row | `SELECT column, value, WRITETIME(value) FROM ks.t WHERE row = ?` | row |
//! | `read`, `Slice::from(start, n)` | `… WHERE row = ? AND column >= ? LIMIT ?` | row, start, n |
//! | `read`, `Slice::first(n)` | `… WHERE row = ? LIMIT ?` | row, n |
//! | `read`, start without limit | `… WHERE row = ? AND column >= ?` | row, start |
//! | `cas` | one conditional statement, or a conditional `BATCH` of them: see [below](#lightweight-transactions-cas-and-read_serial) | per statement |
//! | `read_serial` | the `read` statement of the slice, at consistency `SERIAL` / `LOCAL_SERIAL` | as `read` |
//!
//! **TTL.** The servers keep a cell's expiry in whole seconds of their clock, so `USING TTL n`
//! keeps a cell between n − 1 and n seconds. The store binds one second more than
//! asked ([`cql::TTL_MARGIN_SECS`]): a cell lives between its TTL and its TTL + 1 s, never
//! shorter than asked, which is what a lease's "valid until write start + TTL" relies on; a
//! crashed holder's lock is free up to one second later than on the embedded store.
//!
//! A slice of limit 0 and a write of no cells send nothing. Several cells of one row go in
//! one **unlogged batch on one partition**: one request, applied atomically and in isolation
//! on each replica (no batch log is needed for a single partition). Every statement is
//! prepared, marked idempotent (a cell with an explicit timestamp can be applied twice with
//! the same result, so the driver may retry it on another node after a broken connection),
//! and carries the consistency level of the call. A `DELETE` of one clustering row also
//! removes the row marker the `INSERT` created; on equal timestamps the deletion wins, as in
//! the model. Reads are unpaged: lock rows hold a handful of cells.
//!
//! ## What each lock operation issues
//!
//! **Shadow-table lock** (`lock-shadow`, thesis listing 3), one `TryLock`:
//! 1. read the main row: `SELECT … FROM shadow_lock_main WHERE row = ?`; one cell that is
//!    not ours ends the attempt (`AnotherThreadIsOwner`, 1 request); one that is ours is
//!    rewritten with an `INSERT` (`Success`, 2 requests);
//! 2. write our shadow cell: `INSERT INTO shadow_lock_shadow … USING TTL ? AND TIMESTAMP ?`;
//! 3. read the shadow row: `SELECT … FROM shadow_lock_shadow WHERE row = ?`;
//! 4. if ours is the only shadow cell, read the main row again: `SELECT … FROM
//!    shadow_lock_main WHERE row = ?`, and if it is empty write our main cell: `INSERT INTO
//!    shadow_lock_main …`;
//! 5. delete our shadow cell, in every case: `DELETE FROM shadow_lock_shadow USING TIMESTAMP ?
//!    WHERE row = ? AND column = ?`.
//!
//! A won attempt costs 6 requests (read, write, read, read, write, delete). `GetLock`
//! repeats attempts with the thesis's random backoff.
//!
//! **Queue lock** (`lock-queue`, thesis listings 5–7):
//! - join: (with the GlobalTime source, read it first, see below) `INSERT INTO
//!   queue_lock_queue …` of the column `<20-digit µs><owner>`;
//! - each poll: `SELECT … FROM queue_lock_queue WHERE row = ? LIMIT ?` with limit 1; if the
//!   head is ours, the head check: `INSERT INTO queue_lock_main …` of our cell, then `SELECT …
//!   FROM queue_lock_main WHERE row = ?` — alone there means granted, otherwise `DELETE FROM
//!   queue_lock_main …` of our cell and poll again after the poll interval;
//! - `TryGetLock` first reads `SELECT … FROM queue_lock_main WHERE row = ? LIMIT ?` (limit 1)
//!   and gives up if it holds a cell; a soft attempt that is not first leaves the queue with
//!   `DELETE FROM queue_lock_queue …`;
//! - release (and timeout, failure): `DELETE` of the main cell, then of the queue cell.
//!
//! An uncontended grant costs 4 requests (write, read, write, read) plus the fencing token.
//!
//! **After every grant** (both locks), the fencing token of `lock_core::fence`: `SELECT … FROM
//! lock_fence WHERE row = ? LIMIT ?` (limit 1: the greatest token so far sorts first), then
//! `INSERT INTO lock_fence …` of the next token with TTL 0 (token cells never expire).
//!
//! **Leases** (`lock_core::lease`): every TTL/2 the keeper rewrites the holder's cells, one
//! `INSERT` (or single-partition batch) per row with fresh timestamps and the full TTL: the
//! shadow lock's main cell; the queue lock's queue cell while waiting, and its queue and main
//! cells while holding (two inserts, two tables). **Release** stops the keeper and `DELETE`s
//! every kept cell with a fresh timestamp.
//!
//! **Time service** (`lock_core::time`): readers of `GlobalTime` issue `SELECT … FROM
//! time_service WHERE row = ? AND column >= ? LIMIT ?` (`'global'`, `'GlobalTime'`, 1); each
//! service replica does that every 500 ms and, when its clock is ahead, `INSERT INTO
//! time_service …` with TTL 0 and `USING TIMESTAMP` equal to the value written.
//!
//! ## Lightweight transactions (`cas` and `read_serial`)
//!
//! A [`CasRequest`] becomes one conditional statement, or a conditional batch when it has
//! several changes (all on the partition `row`, so the server runs them as one Paxos round),
//! built by [`cql::cas_plan`]; each change is one statement, conditioned by the condition on
//! its column:
//!
//! | change | condition on its column | CQL |
//! |---|---|---|
//! | `Set` | `Expect::Absent` | `INSERT INTO ks.t (row, column, value) VALUES (?, ?, ?) IF NOT EXISTS USING TTL ?` |
//! | `Set` | `Expect::Value(v)` | `UPDATE ks.t USING TTL ? SET value = ? WHERE row = ? AND column = ? IF value = ?` |
//! | `Delete` | `Expect::Value(v)` | `DELETE FROM ks.t WHERE row = ? AND column = ? IF value = ?` |
//! | `Set` | none (in a batch) | `INSERT INTO ks.t (row, column, value) VALUES (?, ?, ?) USING TTL ?` |
//! | `Delete` | none (in a batch) | `DELETE FROM ks.t WHERE row = ? AND column = ?` |
//!
//! Several statements go in one `BEGIN BATCH … APPLY BATCH` in the order of the changes.
//! TTLs are bound as for plain writes (0 = none; [`ttl_secs`](lock_core::store::ttl_secs)
//! plus the [1 s margin](cql::TTL_MARGIN_SECS), so a lease never ends before its TTL). There
//! is no `USING TIMESTAMP`: Cassandra forbids it on conditional statements, whose writes take
//! the timestamp of the Paxos ballot that decided them (rule 10 of `lock_core::store`). Each
//! statement carries the call's serial consistency (`SERIAL` or `LOCAL_SERIAL`, as asked,
//! also with a local datacenter) and the commit consistency as its consistency. What CQL
//! cannot express is refused with [`StoreError::Rejected`] before anything is sent: no
//! condition, no change, a condition on a column that no change touches, two conditions or
//! two changes on one column, a `Delete` of a cell expected absent.
//!
//! The five statements of each table are prepared on its first CAS and cached with the
//! table's others. They are not marked idempotent (sent again after a lost answer, an applied
//! CAS reports "not applied": the driver must not retry it by itself), and their answers are
//! decoded with the metadata each answer carries, because its columns vary with the outcome.
//!
//! **The answer** ([`cql::decode_cas`]). `[applied]` true: Cassandra sends nothing else, and
//! the current cells are rebuilt from the conditions (timestamp 0), as rule 9 of
//! `lock_core::store` says. `[applied]` false: Cassandra 4.0 sends one row per conditioned CQL
//! row that exists, in clustering order, with `row`, `column` and `value` (only `value` for a
//! single `UPDATE`/`DELETE … IF value = ?`, whose column is its condition's), or one row of
//! `[applied]` alone when none exists; ScyllaDB always sends the old rows, one per
//! conditional statement, nulls where none exists. The current cells are the rows with a
//! value, in column order, timestamp 0.
//!
//! **SERIAL reads** are the ordinary selects of `read` at consistency `SERIAL` or
//! `LOCAL_SERIAL`, which the servers run through Paxos; they return `WRITETIME` like any
//! read (for cells written by CAS, the deciding ballot's timestamp).
//!
//! **Row markers, the one place CQL differs from the cell model.** An `INSERT` also writes
//! the CQL row's marker, with the `INSERT`'s TTL; `UPDATE` writes only the value. A cell
//! created by a CAS `Set` on an absent cell without TTL, then set by a CAS `Set` with a TTL,
//! leaves a row whose value expires while its marker does not: reads see no cell, but `IF NOT
//! EXISTS` sees the row and never applies again. The store answers that case with
//! [`StoreError::Rejected`] rather than an endless "not applied" (the test `lwt.rs` shows it
//! on a real node). The lock algorithms never do this: a lock cell always has a TTL, a
//! fencing counter never.
//!
//! **Timeouts** ([`errors`]): a CAS that timed out is a [`StoreError::CasTimeout`], whose
//! outcome a `read_serial` settles; over protocol v4 Cassandra cannot tell the driver a
//! proposal accepted by fewer than a quorum from another Paxos-phase timeout, nor how many
//! rounds were contended.
//!
//! **ScyllaDB**: the keyspace must not use tablets (see [Schema](#schema)). Its LWT takes 3
//! round trips between replicas instead of Cassandra 4.0's 4 (the read rides on the prepare).
//!
//! ## Consistency levels that keep the algorithms correct
//!
//! Both algorithms rest on the thesis's Lemma 1: if two clients each write a cell into one row
//! and then read the row, at least one of them sees both cells. That holds when every read
//! quorum meets every write quorum, `R + W > RF`:
//! - **`QUORUM` reads and writes** (the default of `lock_core::context::ClientContext`): correct
//!   with any replication, across datacenters;
//! - **`LOCAL_QUORUM`** (set [`CassandraConfig::local_datacenter`]; `QUORUM` requests are then
//!   sent as `LOCAL_QUORUM`, `ONE` as `LOCAL_ONE`): correct only while all contenders of a lock
//!   use the same datacenter; cheaper across a WAN;
//! - **`ALL`**: correct, but one replica down stops every lock;
//! - **`ONE` breaks Lemma 1** with more than one replica: two clients can each write to a
//!   different replica and each read its own, both see themselves alone, and both hold the
//!   lock. (With replication factor 1 every level is the same, and correct.)
//!
//! ## Errors
//!
//! The driver's errors map onto [`StoreError`] by the pure functions of [`errors`]: a write
//! timeout (server- or client-side) is [`StoreError::WriteTimeout`], "may have applied" (a
//! compare-and-set's is a [`StoreError::CasTimeout`], a SERIAL read's a
//! [`StoreError::ReadTimeout`]);
//! `Unavailable` (not applied) carries required and alive replicas; syntax, invalid,
//! unauthorized and other refusals are [`StoreError::Rejected`] with the server's message;
//! broken connections, empty pools and failed connects are [`StoreError::Unreachable`] naming
//! the contact points and what was tried. A connect to unreachable nodes gives up after the
//! connect timeout (default 5 s) plus 5 s at most.
//!
//! ## TLS
//!
//! **Configuring.** Set [`CassandraConfig::tls`] (a `lock_core::tls::TlsFiles`:
//! `CassandraConfig::from_nodes("10.0.0.5:9142")?.with_tls(TlsFiles::trusting("ca.pem"))`,
//! plus `.with_identity("client.pem", "client-key.pem")` for nodes that require a client
//! certificate), or the environment read by [`CassandraConfig::from_env`]:
//! `LOCK_CASSANDRA_CA` (the CA file; setting it turns TLS on), `LOCK_CASSANDRA_CERT` and
//! `LOCK_CASSANDRA_KEY` (mutual TLS). A CA file is required: this build trusts no system roots.
//! The contact points must be the nodes' TLS port: Cassandra's `native_transport_port` with
//! `client_encryption_options: enabled: true` (`optional: true` takes plain and TLS clients on
//! one port), ScyllaDB's `native_transport_port_ssl` (9142; the driver then also uses its
//! shard-aware TLS port when the node advertises one). [`CassandraConfig::credentials`] work
//! as before, inside the encrypted connection. A missing or unreadable file, a certificate
//! without its key, a key that does not match its certificate, or a file holding no PEM
//! certificate is a [`ConfigError`] naming the file, from [`CassandraConfig::validate`] (and
//! so from `from_env` and [`CassandraStore::connect`]) before anything connects.
//!
//! **What is verified.** The driver (`scylla` 1.9, feature `rustls-023`) speaks TLS through
//! rustls 0.23 with the configuration [`tls::client_config`] builds on the `ring` provider,
//! explicitly (never rustls's process default: another dependency brings aws-lc-rs into the
//! build, and with two providers `ClientConfig::builder()` panics). TLS 1.2 or 1.3. A node's
//! certificate must chain to the CA file, be valid now, and **name the IP address the client
//! dials**: the driver checks it against the node's IP address, never a host name, also for a
//! contact point given by host name and for every node it discovers from `system.peers`. So
//! each node's certificate needs its IP address as a subjectAltName (an IP SAN); one naming
//! only DNS names is refused. There is no way to turn a check off.
//!
//! **Before the session.** The driver bounds only the TCP connect by its connect timeout: a
//! node that never answers the handshake would hold the connect until its deadline (the
//! connect timeout + 5 s), and its errors name neither the node nor what rustls's words mean.
//! So [`CassandraStore::connect`] first probes every contact point
//! as the driver will (TCP, the handshake against the IP address, a CQL `OPTIONS` request;
//! nothing of the user's, no credentials), each within the connect timeout, at the cost of one
//! connection per contact point per connect. Any refusal fails the connect, even when another
//! contact point answered: a certificate problem is a configuration to fix, not an outage.
//!
//! **Refusals** (each asserted by `tests/tls.rs` against TLS servers on loopback, with a 2 s
//! connect timeout; "at once" is a round trip or two). Every message names the CA file and client certificate in use and each
//! node (`node localhost:9142 (127.0.0.1:9142)` for a host name); a refusal is a
//! [`StoreError::Rejected`], never retried as an outage; silence is a
//! [`StoreError::Unreachable`].
//!
//! | case | what the error says | within |
//! |---|---|---|
//! | the node's certificate is signed by another CA | `the TLS handshake failed: invalid peer certificate: UnknownIssuer: the node's certificate is not signed by the CA the client trusts` | at once |
//! | it names another host, or only a host name | `certificate not valid for name "127.0.0.1"; certificate is only valid for DnsName("db.example.com"): … needs its IP address as a subjectAltName (an IP SAN)` | at once |
//! | the node requires a client certificate, none given | `the node ended the TLS session after the handshake: received fatal alert: CertificateRequired: the node requires a client certificate …` | at once |
//! | the node does not trust the client's certificate | `received fatal alert: UnknownCA: the node refused the client's certificate …` | at once |
//! | a TLS client at a plain CQL port | `received corrupt message of type InvalidContentType: the node did not answer in TLS: a plain CQL port …`; a port that hangs up: `the node closed the connection during the TLS handshake` | at once |
//! | a port that never answers the handshake | `no answer to the TLS handshake within 2s (the connect timeout)` (`Unreachable`) | the connect timeout |
//! | a trusted handshake, then no CQL | `the TLS handshake succeeded, but the answer to a CQL OPTIONS request is not CQL (first byte 0x2d)`; silent: `… got no answer within 2s` (`Unreachable`) | at once / the connect timeout |
//! | a plain client at a TLS-only port | `the cluster closed every plain connection (…), and node … speaks TLS there (a handshake showed a certificate): give CassandraConfig::tls the CA …` | at once |
//!
//! The plain client's case is found after the driver's failure, by a handshake that trusts no
//! CA and sends nothing of the user's (at most 2 s). After the connect, a node that refuses
//! TLS (one the driver discovered, or whose certificate changed) has its pool refilled in the
//! background like any broken connection; requests that needed it fail with a
//! [`StoreError::Rejected`] in the same words ([`errors::tls_hint`]).
//!
//! ## Node restarts and outages
//!
//! The `scylla` driver (1.9) recovers by itself; a [`CassandraStore`] never has to be made
//! again. Each node has a connection pool that the driver refills in the background after a
//! connection breaks, spacing failed attempts by its default `ExponentialReconnectPolicy`
//! (50 ms doubling to 10 s, with jitter), and the control connection that follows the
//! topology reconnects to any live contact point. Statements are idempotent (above), so the
//! driver may retry one on another node. What a lock sees while a node is down:
//!
//! - **Replicas left for the consistency level** (three replicas at `QUORUM`, one down): the
//!   load balancer skips the down node and the locks go on; no holder or waiter notices.
//! - **Too few replicas, or the only node down**: every request fails with
//!   [`StoreError::Unreachable`] (broken connection, empty pool) or `Unavailable`, at once or
//!   within the request timeout, as `lock_core::LockError::Store`. A **waiter** (a mandatory
//!   lock polling the queue or retrying `TryLock`) fails with that error; it does not wait out
//!   the outage. A **holder**'s renewals fail; the lease keeper (`lock_core::lease`) publishes
//!   `LeaseState::Lost` once no renewal has succeeded within the TTL, and stops renewing (a late
//!   renewal could resurrect a lock another thread took). Its release fails with the same
//!   error; its cells expire by their TTL, which keeps running while the node is down (expiry
//!   is absolute: write time + TTL).
//! - **After the restart** the node replays its commit log: cells, tombstones and fencing
//!   tokens written before the crash are back, expired ones are gone, and a holder whose lease
//!   was still valid renews on it as before. Requests succeed again once the pool has
//!   reconnected (the next fill attempt: at most 10 s after the node answers, usually far
//!   less).
//! - **Unsafe case**: Cassandra's default `commitlog_sync: periodic` acknowledges a write before
//!   it is synced (up to `commitlog_sync_period`, 10 s). If every replica of a row crashes within
//!   that window (replication factor 1, or a whole-cluster power loss), an acknowledged grant or
//!   fencing-token cell can vanish: another thread may then be granted a lock whose holder still
//!   believes in it, with a fencing token that repeats an earlier one. Use replication factor 3
//!   at `QUORUM` (a single crash loses nothing a quorum holds) or `commitlog_sync: batch` where
//!   that matters. The tests cannot show this here (no Cassandra in this environment; they run
//!   only with `LOCK_TEST_CASSANDRA`).
//!
//! ## Caveats the model does not show
//!
//! - **Clocks.** Write timestamps come from the clients' clocks; TTLs run on the servers'.
//!   Use `lock_core::time::PhysicalClock::System` for timestamps against a real cluster (a
//!   tokio clock restarts at the simulated epoch each run and would write under the tombstones
//!   of earlier runs).
//! - **Equal timestamps.** Cassandra 4.0+ (CASSANDRA-14592) lets an expiring cell win over a
//!   non-expiring one of the same timestamp before comparing values; the model compares values
//!   first. The algorithms never write two versions of one cell with one timestamp (each
//!   client's timestamps strictly increase, and clients write different columns), so this
//!   does not reach them.
//! - **Tombstones.** Every join and leave of a queue leaves a tombstone at the head of the
//!   queue row, and the `LIMIT 1` poll reads past all of them until they are purged
//!   (`gc_grace_seconds`, default 10 days, then a compaction). A busy lock id can hit
//!   `tombstone_warn_threshold` (1 000) and then `tombstone_failure_threshold` (100 000), which
//!   fails the read ([`StoreError::Rejected`]). Every cell the lock algorithms delete carries a
//!   TTL of seconds, so a replica that missed a deletion cannot bring a live cell back after the
//!   tombstone is purged; lowering [`CassandraConfig::gc_grace_seconds`] (e.g. to 3600) for
//!   tables created here is therefore safe for them, not for tables holding cells without TTL
//!   that are deleted. The fence table only grows (one cell per grant, never deleted); its
//!   `LIMIT 1` read finds the newest token first.
//!
//! ## Example
//!
//! ```no_run
//! use lock_cassandra::{CassandraConfig, CassandraStore};
//! use lock_core::store::{CellStore, CellWrite, Consistency, Slice, StoreError};
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), StoreError> {
//! // Contact points from LOCK_CASSANDRA_NODES, or a local node.
//! let config = match CassandraConfig::from_env() {
//!     Ok(Some(config)) => config,
//!     _ => CassandraConfig::from_nodes("127.0.0.1:9042").expect("valid contact point"),
//! };
//! let store = CassandraStore::connect(config).await?;
//! store.ensure_tables(&lock_cassandra::ALGORITHM_TABLES).await?;
//!
//! // One handle per contender; each can be cut off on its own in tests.
//! let worker = store.client("worker-1");
//! let cell = CellWrite {
//!     column: "worker-1".into(),
//!     value: b"worker-1".to_vec(),
//!     timestamp: 1_767_225_600_000_000,
//!     ttl: Some(Duration::from_secs(10)),
//! };
//! worker.write("shadow_lock_main", "invoice-42", &[cell], Consistency::Quorum).await?;
//! let row = worker.read("shadow_lock_main", "invoice-42", Slice::all(), Consistency::Quorum).await?;
//! assert_eq!(row[0].column, "worker-1");
//! # Ok(())
//! # }
//! ```
//!
//! Any algorithm generic over `CellStore + Clone` takes a [`CassandraClient`] (or the
//! [`CassandraStore`] itself) where it takes an embedded client, e.g.
//! `QueueLocker::new(store.client(owner), ctx, QueueConfig::default())`.
#![deny(missing_docs)]

mod client;
pub mod config;
pub mod cql;
pub mod errors;
#[cfg(any(test, feature = "conformance"))]
pub mod fixture;
pub mod names;
mod session;
pub mod tls;

pub use client::CassandraClient;
pub use config::{CassandraConfig, ConfigError, Replication};

use async_trait::async_trait;
use cql::{CasKind, CasStatements, RawCell, ReadKind, ReadValues, TableStatements};
use errors::{Operation, RequestInfo};
use lock_core::store::{
    CasRequest, CasResult, Cell, CellStore, CellWrite, Consistency, Micros, SerialConsistency,
    Slice, StoreError,
};
use scylla::client::session::Session;
use scylla::response::query_result::QueryResult;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Statement;
use session::{open_session, session_builder};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// The tables the lock algorithms of this workspace use, for [`CassandraStore::ensure_tables`]:
/// the shadow lock's main and shadow tables, the queue lock's main and queue tables, the
/// fencing tokens (`lock_core::fence::FENCE_TABLE`) and the time service
/// (`lock_core::time::GLOBAL_TIME_TABLE`).
pub const ALGORITHM_TABLES: [&str; 6] = [
    "shadow_lock_main",
    "shadow_lock_shadow",
    "queue_lock_main",
    "queue_lock_queue",
    "lock_fence",
    "time_service",
];

/// The prepared statements of one table.
struct Prepared {
    insert: PreparedStatement,
    delete: PreparedStatement,
    reads: [PreparedStatement; 4],
    /// The compare-and-set statements, indexed by [`CasKind::index`]: prepared on the table's
    /// first CAS, not before, so that a store that never uses them never prepares them (a
    /// ScyllaDB keyspace with tablets refuses them).
    cas: OnceCell<[PreparedStatement; 5]>,
}

struct Inner {
    session: Session,
    config: CassandraConfig,
    tables: Mutex<HashMap<String, Arc<OnceCell<Arc<Prepared>>>>>,
    ddl: tokio::sync::Mutex<()>,
}

/// A cell store on a Cassandra or ScyllaDB cluster: one driver session (with its connection
/// pools), the keyspace, and the prepared statements of every table used so far. Cheap to
/// clone; clones share everything.
#[derive(Clone)]
pub struct CassandraStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for CassandraStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CassandraStore")
            .field("nodes", &self.inner.config.nodes)
            .field("keyspace", &self.inner.config.keyspace)
            .field("tables", &self.known_tables())
            .finish()
    }
}

impl CassandraStore {
    /// Connect to the cluster and create the keyspace if missing (unless
    /// [`CassandraConfig::create_schema`] is off). Tables are created on first use, or by
    /// [`CassandraStore::ensure_tables`].
    ///
    /// Fails with [`StoreError::Unreachable`], naming every contact point and what was tried,
    /// when no node answers within [`CassandraConfig::connect_deadline`]; with
    /// [`StoreError::Rejected`] for an invalid configuration or refused credentials.
    ///
    /// With [`CassandraConfig::tls`], every contact point is first probed over TLS (crate
    /// docs, "TLS"): a refused handshake, or a port that is not a CQL port over TLS, is a
    /// [`StoreError::Rejected`] naming the node and what was refused, within the connect
    /// timeout.
    pub async fn connect(config: CassandraConfig) -> Result<Self, StoreError> {
        config.validate().map_err(|e| StoreError::Rejected(e.to_string()))?;
        let mut builder = session_builder(&config);
        if let Some(files) = &config.tls {
            let tls = tls::client_config(files)
                .map_err(|e| StoreError::Rejected(format!("CassandraConfig::tls: {e}")))?;
            tls::preflight(&config.nodes, &tls, files, config.connect_timeout).await?;
            builder = builder.tls_context(Some(tls));
        }
        let session = open_session(&config, builder).await?;
        let store = CassandraStore {
            inner: Arc::new(Inner {
                session,
                config,
                tables: Mutex::new(HashMap::new()),
                ddl: tokio::sync::Mutex::new(()),
            }),
        };
        if store.inner.config.create_schema {
            let config = &store.inner.config;
            let text =
                cql::create_keyspace(&config.keyspace, &config.replication, config.tablets_off);
            store.schema_change(text, "keyspace").await?;
        }
        Ok(store)
    }

    /// Create (if missing) and prepare the statements of every table in `tables` now, instead
    /// of on first use.
    pub async fn ensure_tables(&self, tables: &[&str]) -> Result<(), StoreError> {
        for t in tables {
            self.table(t).await?;
        }
        Ok(())
    }

    /// A handle for contender `id`: shares this store's session and statements, and can be
    /// cut off on its own ([`CassandraClient::cut_off`]).
    pub fn client(&self, id: impl Into<String>) -> CassandraClient {
        CassandraClient {
            store: self.clone(),
            id: Arc::from(id.into()),
            row_prefix: Arc::from(""),
            cut_off: Arc::new(AtomicBool::new(false)),
            doorbell: None,
        }
    }

    /// The configuration connected with.
    pub fn config(&self) -> &CassandraConfig {
        &self.inner.config
    }

    /// The driver session, for anything this store does not offer.
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// The tables whose statements are prepared, sorted.
    pub fn known_tables(&self) -> Vec<String> {
        let map = self.inner.tables.lock().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = map
            .iter()
            .filter(|(_, cell)| cell.initialized())
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        names
    }

    fn info<'a>(
        &'a self,
        op: Operation,
        table: &'a str,
        consistency: Consistency,
    ) -> RequestInfo<'a> {
        RequestInfo {
            op,
            table,
            consistency,
            serial: None,
            replicas: self.inner.config.quorum_base(),
            nodes: &self.inner.config.nodes,
        }
    }

    fn consistency(&self, c: Consistency) -> scylla::statement::Consistency {
        cql::driver_consistency(c, self.inner.config.local_datacenter.is_some())
    }

    /// Run one DDL statement and wait until the nodes agree on the new schema.
    async fn schema_change(&self, text: String, what: &str) -> Result<(), StoreError> {
        let info = self.info(Operation::Schema, what, Consistency::Quorum);
        let mut statement = Statement::new(text);
        // Schema changes may take longer than data requests.
        statement.set_request_timeout(Some(self.inner.config.schema_agreement_timeout));
        self.inner
            .session
            .query_unpaged(statement, ())
            .await
            .map_err(|e| errors::map_execution_error(&e, &info))?;
        self.inner
            .session
            .await_schema_agreement()
            .await
            .map_err(|e| errors::map_schema_agreement_error(&e, &info))?;
        Ok(())
    }

    /// The prepared statements of `table`, creating and preparing them on first use.
    async fn table(&self, table: &str) -> Result<Arc<Prepared>, StoreError> {
        let cell = {
            let mut map = self.inner.tables.lock().unwrap_or_else(|e| e.into_inner());
            match map.get(table) {
                Some(cell) => cell.clone(),
                None => {
                    names::validate_identifier("table", table)?;
                    map.entry(table.to_string()).or_default().clone()
                }
            }
        };
        cell.get_or_try_init(|| self.prepare_table(table)).await.cloned()
    }

    async fn prepare_table(&self, table: &str) -> Result<Arc<Prepared>, StoreError> {
        let _ddl = self.inner.ddl.lock().await;
        let config = &self.inner.config;
        if config.create_schema {
            let text = cql::create_table(&config.keyspace, table, config.gc_grace_seconds);
            self.schema_change(text, table).await?;
        }
        let texts = TableStatements::new(&config.keyspace, table);
        let insert = self.prepare(&texts.insert, table).await?;
        let delete = self.prepare(&texts.delete, table).await?;
        let reads = [
            self.prepare(texts.read(ReadKind::Row), table).await?,
            self.prepare(texts.read(ReadKind::From), table).await?,
            self.prepare(texts.read(ReadKind::First), table).await?,
            self.prepare(texts.read(ReadKind::FromFirst), table).await?,
        ];
        Ok(Arc::new(Prepared { insert, delete, reads, cas: OnceCell::new() }))
    }

    /// The compare-and-set statements of `table`, prepared on first use.
    async fn cas_statements<'p>(
        &self,
        table: &str,
        prepared: &'p Prepared,
    ) -> Result<&'p [PreparedStatement; 5], StoreError> {
        prepared
            .cas
            .get_or_try_init(|| async {
                let texts = CasStatements::new(&self.inner.config.keyspace, table);
                let mut statements = Vec::with_capacity(CasKind::ALL.len());
                for kind in CasKind::ALL {
                    let mut statement = self.prepare(texts.text(kind), table).await?;
                    // Not idempotent: sent again after an answer was lost, an applied CAS
                    // answers "not applied" (its own write is the current value). The driver
                    // must not retry it on its own; the caller resolves a lost answer with a
                    // SERIAL read (rule 12 of lock_core::store).
                    statement.set_is_idempotent(false);
                    // The answer's columns vary with the outcome (see cql::decode_cas): never
                    // decode it with the metadata cached at preparation.
                    statement.set_use_cached_result_metadata(false);
                    statements.push(statement);
                }
                statements.try_into().map_err(|_| {
                    StoreError::Rejected("internal: wrong number of CAS statements".into())
                })
            })
            .await
    }

    async fn prepare(&self, text: &str, table: &str) -> Result<PreparedStatement, StoreError> {
        let info = self.info(Operation::Schema, table, Consistency::Quorum);
        let mut prepared = self
            .inner
            .session
            .prepare(text)
            .await
            .map_err(|e| errors::map_prepare_error(&e, &info))?;
        // Every statement names its cell and its timestamp: applying it twice is applying it once.
        prepared.set_is_idempotent(true);
        Ok(prepared)
    }

    async fn do_write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        if cells.is_empty() {
            return Ok(());
        }
        let values =
            cells.iter().map(|cell| cql::write_values(row, cell)).collect::<Result<Vec<_>, _>>()?;
        let prepared = self.table(table).await?;
        let info = self.info(Operation::Write, table, c);
        let result = if let [one] = values.as_slice() {
            let mut statement = prepared.insert.clone();
            statement.set_consistency(self.consistency(c));
            self.inner.session.execute_unpaged(&statement, one).await
        } else {
            let mut batch = Batch::new(BatchType::Unlogged);
            for _ in &values {
                batch.append_statement(prepared.insert.clone());
            }
            batch.set_consistency(self.consistency(c));
            batch.set_is_idempotent(true);
            self.inner.session.batch(&batch, &values).await
        };
        result.map(drop).map_err(|e| errors::map_execution_error(&e, &info))
    }

    async fn do_delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        ts: Micros,
        c: Consistency,
    ) -> Result<(), StoreError> {
        let values = cql::delete_values(row, column, ts)?;
        let prepared = self.table(table).await?;
        let info = self.info(Operation::Delete, table, c);
        let mut statement = prepared.delete.clone();
        statement.set_consistency(self.consistency(c));
        self.inner
            .session
            .execute_unpaged(&statement, values)
            .await
            .map(drop)
            .map_err(|e| errors::map_execution_error(&e, &info))
    }

    async fn do_read(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.read_at(table, row, slice, self.consistency(c), self.info(Operation::Read, table, c))
            .await
    }

    /// A read at SERIAL or LOCAL_SERIAL: the ordinary select, which Cassandra and ScyllaDB run
    /// through Paxos when asked for that read consistency.
    async fn do_read_serial(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        let info = RequestInfo {
            serial: Some(serial),
            ..self.info(Operation::SerialRead, table, Consistency::Quorum)
        };
        self.read_at(table, row, slice, cql::serial_read_consistency(serial), info).await
    }

    async fn read_at(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        consistency: scylla::statement::Consistency,
        info: RequestInfo<'_>,
    ) -> Result<Vec<Cell>, StoreError> {
        let values = cql::read_values(row, slice)?;
        let Some(kind) = values.kind() else {
            return Ok(Vec::new());
        };
        let prepared = self.table(table).await?;
        let mut statement = prepared.reads[kind.index()].clone();
        statement.set_consistency(consistency);
        let session = &self.inner.session;
        let result = match values {
            ReadValues::Nothing => return Ok(Vec::new()),
            ReadValues::Row(r) => session.execute_unpaged(&statement, (r,)).await,
            ReadValues::From(r, s) => session.execute_unpaged(&statement, (r, s)).await,
            ReadValues::First(r, l) => session.execute_unpaged(&statement, (r, l)).await,
            ReadValues::FromFirst(r, s, l) => session.execute_unpaged(&statement, (r, s, l)).await,
        }
        .map_err(|e| errors::map_execution_error(&e, &info))?;
        decode_result(result, slice.limit, &info)
    }

    /// One compare-and-set: one conditional statement, or a conditional batch (see
    /// [`cql::cas_plan`]), at serial consistency `serial` and commit consistency `commit`.
    async fn do_cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        // Refused shapes fail here, before anything (even the table's setup) is sent.
        let plan = cql::cas_plan(row, request)?;
        let prepared = self.table(table).await?;
        let statements = self.cas_statements(table, &prepared).await?;
        let info = RequestInfo { serial: Some(serial), ..self.info(Operation::Cas, table, commit) };
        let result = if let [one] = plan.statements.as_slice() {
            let mut statement = statements[one.kind.index()].clone();
            statement.set_consistency(self.consistency(commit));
            statement.set_serial_consistency(Some(cql::driver_serial_consistency(serial)));
            self.inner.session.execute_unpaged(&statement, &one.values).await
        } else {
            // A logged batch, as CQL's plain `BEGIN BATCH`: on one partition with conditions
            // Cassandra runs it as one Paxos round and writes no batch log.
            let mut batch = Batch::new(BatchType::Logged);
            for s in &plan.statements {
                batch.append_statement(statements[s.kind.index()].clone());
            }
            batch.set_consistency(self.consistency(commit));
            batch.set_serial_consistency(Some(cql::driver_serial_consistency(serial)));
            batch.set_is_idempotent(false);
            let values: Vec<&Vec<scylla::value::CqlValue>> =
                plan.statements.iter().map(|s| &s.values).collect();
            self.inner.session.batch(&batch, values).await
        }
        .map_err(|e| errors::map_execution_error(&e, &info))?;
        decode_cas_result(result, request, &info)
    }
}

/// The [`CasResult`] of a compare-and-set's answer.
fn decode_cas_result(
    result: QueryResult,
    request: &CasRequest,
    info: &RequestInfo<'_>,
) -> Result<CasResult, StoreError> {
    let bad = |e: &dyn fmt::Display| {
        StoreError::Rejected(format!(
            "{} on table '{}': unexpected result: {e}",
            info.op, info.table
        ))
    };
    let rows = result.into_rows_result().map_err(|e| bad(&e))?;
    let names: Vec<&str> = rows.column_specs().iter().map(|spec| spec.name()).collect();
    let raw = rows
        .rows::<scylla::value::Row>()
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let answer = cql::cas_answer_rows(&names, raw).map_err(|e| bad(&e))?;
    cql::decode_cas(request, answer)
}

/// The cells of a read's result.
fn decode_result(
    result: QueryResult,
    limit: Option<usize>,
    info: &RequestInfo<'_>,
) -> Result<Vec<Cell>, StoreError> {
    let bad = |e: &dyn fmt::Display| {
        StoreError::Rejected(format!(
            "{} on table '{}': unexpected result: {e}",
            info.op, info.table
        ))
    };
    let rows = result.into_rows_result().map_err(|e| bad(&e))?;
    let raw = rows
        .rows::<RawCell>()
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<RawCell>, _>>()
        .map_err(|e| bad(&e))?;
    Ok(cql::decode_cells(raw, limit))
}

#[async_trait]
impl CellStore for CassandraStore {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.do_write(table, row, cells, c).await
    }

    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        ts: Micros,
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.do_delete(table, row, column, ts, c).await
    }

    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.do_read(table, row, &slice, c).await
    }

    async fn cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        self.do_cas(table, row, request, serial, commit).await
    }

    async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.do_read_serial(table, row, &slice, serial).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn algorithm_tables_match_lock_core_and_are_valid_identifiers() {
        assert!(ALGORITHM_TABLES.contains(&lock_core::fence::FENCE_TABLE));
        assert!(ALGORITHM_TABLES.contains(&lock_core::time::GLOBAL_TIME_TABLE));
        for t in ALGORITHM_TABLES {
            names::validate_identifier("table", t).unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connecting_to_an_unreachable_node_fails_fast_and_names_it() {
        let config = CassandraConfig::from_nodes("127.0.0.1:1").unwrap();
        let start = Instant::now();
        let err = CassandraStore::connect(config).await.expect_err("nothing listens on port 1");
        let took = start.elapsed();
        eprintln!("connect to 127.0.0.1:1 failed after {took:?}: {err}");
        assert!(took < Duration::from_secs(15), "took {took:?}");
        match &err {
            StoreError::Unreachable(m) => {
                assert!(m.contains("127.0.0.1:1"), "{m}");
                assert!(m.contains("TCP connect"), "{m}");
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
        assert!(
            err.may_have_applied(),
            "Unreachable is treated as maybe-applied by the algorithms"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connecting_to_several_unreachable_nodes_names_each() {
        let config = CassandraConfig::from_nodes("127.0.0.1:1,127.0.0.1:2").unwrap();
        let start = Instant::now();
        let err =
            CassandraStore::connect(config).await.expect_err("nothing listens on ports 1 and 2");
        assert!(start.elapsed() < Duration::from_secs(15));
        match &err {
            StoreError::Unreachable(m) => {
                assert!(m.contains("127.0.0.1:1") && m.contains("127.0.0.1:2"), "{m}")
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_that_accepts_but_never_answers_fails_within_the_deadline() {
        // A loopback listener that takes connections and says nothing: the CQL handshake hangs.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let config = CassandraConfig::from_nodes(&addr.to_string())
            .unwrap()
            .with_connect_timeout(Duration::from_secs(1));
        let start = Instant::now();
        let err = CassandraStore::connect(config.clone())
            .await
            .expect_err("a silent node cannot be connected to");
        let took = start.elapsed();
        silent.abort();
        eprintln!("connect to a silent {addr} failed after {took:?}: {err}");
        assert!(took <= config.connect_deadline() + Duration::from_secs(1), "took {took:?}");
        match &err {
            StoreError::Unreachable(m) => assert!(m.contains(&addr.to_string()), "{m}"),
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_invalid_configuration_is_rejected_before_connecting() {
        let config = CassandraConfig::default().with_keyspace("Bad-Name");
        match CassandraStore::connect(config).await {
            Err(StoreError::Rejected(m)) => assert!(m.contains("keyspace"), "{m}"),
            other => panic!("expected Rejected, got {other:?}"),
        }
    }
}
