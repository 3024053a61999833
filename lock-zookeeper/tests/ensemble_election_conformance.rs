//! The shared election suite for [`ZkElector`] on a 3-server ZooKeeper ensemble: session
//! timeout 2 s (the "TTL"), each contender on its own session with a connect string of all
//! three servers, each through a proxy of its own (`support::ensemble`), so that the
//! lost-leadership scenario cuts one candidate off from the whole ensemble. Every scenario
//! runs; the contention scenario with one seed and few candidates, since the election's queue
//! is the mutex's, which the mutex's suite on the ensemble already contends hard.
//!
//! [`ZkElector`]: lock_zookeeper::ZkElector

use crate::support::ensemble::EnsembleFixture;

use std::time::Duration;

async fn make_fixture(_seed: u64) -> EnsembleFixture {
    EnsembleFixture::new("ensemble-election", Duration::from_secs(2))
}

lock_core::election_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 1,
    contenders = 4
);
