//! Tombstones on a real cluster, over a long run: the thesis's queue lock leaves a tombstone at
//! the head of its queue row per request, and every read of the head scans them; queue-bounded
//! reuses one column per thread, so its reads stay under Cassandra's
//! `tombstone_warn_threshold` (1,000) however long it runs.
//!
//! Runs only when `LOCK_TEST_CASSANDRA=host:port[,…]` names a cluster; without it the test says
//! so and returns. `LOCK_TEST_SOAK_SECS` sets how long each lock runs (default 60 s; an hour
//! shows how the thesis's queue lock slows as its tombstones pile up):
//!
//! ```sh
//! LOCK_TEST_CASSANDRA=127.0.0.1:9042 LOCK_TEST_SOAK_SECS=3600 \
//!     cargo test -p lock-cassandra --test integration tombstones:: -- --nocapture
//! ```
//!
//! After each lock's run the test reads its queue row once more with tracing on, exactly as
//! the lock reads it, and takes the count from Cassandra's own trace line
//! `Read N live rows and M tombstone cells`.

use lock_cassandra::{CassandraConfig, CassandraStore};
use lock_core::context::ClientContext;
use lock_core::time::{LocalClock, PhysicalClock};
use lock_core::Locker;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ENV: &str = "LOCK_TEST_CASSANDRA";
const SOAK_ENV: &str = "LOCK_TEST_SOAK_SECS";
const KEYSPACE: &str = "distributed_locks_test";
const CONTENDERS: usize = 8;
const WARN_THRESHOLD: u64 = 1_000;

fn config() -> Option<CassandraConfig> {
    match std::env::var(ENV) {
        Ok(nodes) if !nodes.trim().is_empty() => Some(
            CassandraConfig::from_nodes(&nodes)
                .expect("LOCK_TEST_CASSANDRA: host:port[,host:port…]")
                .with_keyspace(KEYSPACE),
        ),
        _ => {
            let _ =
                writeln!(std::io::stderr(), "{ENV} not set: the Cassandra tombstone soak not run");
            None
        }
    }
}

fn soak() -> Duration {
    let secs = std::env::var(SOAK_ENV)
        .ok()
        .map(|s| {
            s.trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{SOAK_ENV}={s}: a whole number of seconds"))
        })
        .unwrap_or(60);
    Duration::from_secs(secs)
}

type Build = fn(lock_cassandra::CassandraClient, ClientContext) -> Arc<dyn Locker>;

/// `CONTENDERS` contenders loop lock → hold 5 ms → release → think 5 ms on one lock for `soak`;
/// returns the grants.
async fn run(store: &CassandraStore, prefix: &str, build: Build, soak: Duration) -> u64 {
    let deadline = Instant::now() + soak;
    let mut tasks = Vec::new();
    for i in 0..CONTENDERS {
        let owner = format!("c{i:04}");
        let client = store.client(owner.clone()).with_row_prefix(prefix.to_string());
        let ctx =
            ClientContext::new(owner, LocalClock::new(PhysicalClock::System, 0), i as u64 + 1);
        let locker = build(client, ctx);
        tasks.push(tokio::spawn(async move {
            let mut grants = 0u64;
            while Instant::now() < deadline {
                let guard = locker.lock("soak", Some(Duration::from_secs(30))).await.expect("lock");
                tokio::time::sleep(Duration::from_millis(5)).await;
                guard.release().await.expect("release");
                grants += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            grants
        }));
    }
    let mut grants = 0;
    for t in tasks {
        grants += t.await.expect("contender");
    }
    grants
}

/// Reads `table`'s row `row` as the lock does (`limit`: the thesis's head read takes one cell),
/// traced, and returns (live rows, tombstone cells) from Cassandra's trace.
async fn traced_read(
    store: &CassandraStore,
    table: &str,
    row: &str,
    limit: Option<u32>,
) -> (u64, u64) {
    let limit = limit.map_or(String::new(), |n| format!(" LIMIT {n}"));
    let mut stmt = scylla::statement::Statement::new(format!(
        "SELECT \"column\" FROM \"{KEYSPACE}\".\"{table}\" WHERE \"row\" = ?{limit}"
    ));
    stmt.set_tracing(true);
    stmt.set_consistency(scylla::statement::Consistency::Quorum);
    let result = store.session().query_unpaged(stmt, (row,)).await.expect("traced read");
    let id = result.tracing_id().expect("a tracing id");
    let info = store.session().get_tracing_info(&id).await.expect("tracing info");
    let activities: Vec<String> = info.events.iter().filter_map(|e| e.activity.clone()).collect();
    activities
        .iter()
        .find_map(|a| parse_read_line(a))
        .unwrap_or_else(|| panic!("no 'Read N live rows and M tombstone cells' line in the trace (ScyllaDB traces differently): {activities:#?}"))
}

/// `Read 1 live rows and 7023 tombstone cells` → (1, 7023).
fn parse_read_line(a: &str) -> Option<(u64, u64)> {
    let rest = a.strip_prefix("Read ")?;
    let (live, rest) = rest.split_once(" live rows and ")?;
    let (dead, _) = rest.split_once(" tombstone cells")?;
    Some((live.trim().parse().ok()?, dead.trim().parse().ok()?))
}

#[test]
fn trace_lines_parse() {
    assert_eq!(parse_read_line("Read 1 live rows and 7023 tombstone cells"), Some((1, 7023)));
    assert_eq!(
        parse_read_line("Read 0 live rows and 0 tombstone cells [ReadStage-2]"),
        Some((0, 0))
    );
    assert_eq!(parse_read_line("Merging memtable contents"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_bounded_stays_under_the_warning_threshold_while_the_queue_grows() {
    let Some(config) = config() else { return };
    let store = CassandraStore::connect(config).await.expect("connect to LOCK_TEST_CASSANDRA");
    let tables = [
        lock_queue::MAIN_TABLE,
        lock_queue::QUEUE_TABLE,
        lock_queue::bounded::BOUNDED_MAIN_TABLE,
        lock_queue::bounded::BOUNDED_QUEUE_TABLE,
        lock_core::fence::FENCE_TABLE,
    ];
    store.ensure_tables(&tables).await.expect("tables");
    let soak = soak();
    let prefix = format!("tomb{}p{}/", PhysicalClock::System.now_micros(), std::process::id());
    let row = format!("{prefix}soak");

    let bounded = run(
        &store,
        &prefix,
        |c, ctx| {
            Arc::new(
                lock_queue::BoundedQueueLocker::new(c, ctx, Default::default()).expect("config"),
            )
        },
        soak,
    )
    .await;
    let (_, bounded_dead) =
        traced_read(&store, lock_queue::bounded::BOUNDED_QUEUE_TABLE, &row, None).await;
    let queue = run(
        &store,
        &prefix,
        |c, ctx| {
            Arc::new(lock_queue::QueueLocker::new(c, ctx, Default::default()).expect("config"))
        },
        soak,
    )
    .await;
    let (_, queue_dead) = traced_read(&store, lock_queue::QUEUE_TABLE, &row, Some(1)).await;
    let _ = writeln!(
        std::io::stderr(),
        "after {soak:?} with {CONTENDERS} contenders: queue-bounded {bounded} grants, a read of its queue row scans {bounded_dead} tombstones; \
         the thesis queue {queue} grants, a read of its queue head scans {queue_dead}"
    );
    assert!(bounded > 0 && queue > 0);
    assert!(
        bounded_dead <= CONTENDERS as u64 && bounded_dead < WARN_THRESHOLD,
        "queue-bounded's read scanned {bounded_dead} tombstones, more than one per contender"
    );
    // Every request of the thesis's queue leaves a tombstone at the head: all of them are
    // scanned (they stay for gc_grace_seconds).
    assert!(
        queue_dead * 10 >= queue * 9,
        "the thesis queue's head read scanned {queue_dead} tombstones after {queue} requests"
    );
}
