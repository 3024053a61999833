//! The shared conformance suite for the Cassandra-model algorithms (shadow, queue, bakery, and
//! the lightweight-transaction lock lwt), on a real Cassandra or
//! ScyllaDB cluster. Runs only when `LOCK_TEST_CASSANDRA=host:port` names one (no server can be
//! started here); without it each test says so and returns.

use lock_cassandra::fixture::{CassandraFixture, ENV_TEST_NODES};

fn cluster_named() -> Result<(), String> {
    match std::env::var(ENV_TEST_NODES) {
        Ok(v) if !v.trim().is_empty() => Ok(()),
        _ => Err(format!("{ENV_TEST_NODES} not set: Cassandra conformance suite not run")),
    }
}

async fn fixture(seed: u64, build: lock_cassandra::fixture::BuildLocker) -> CassandraFixture {
    CassandraFixture::from_test_env(seed, move |c, ctx| build(c, ctx))
        .await
        .unwrap_or_else(|e| panic!("cannot reach the cluster named by {ENV_TEST_NODES}: {e}"))
        .expect("checked by run_if")
}

every_lock!(fixture, cluster_named());
