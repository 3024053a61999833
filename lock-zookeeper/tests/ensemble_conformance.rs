//! The shared conformance suite for the ZooKeeper recipe (seed 004) on a 3-server ZooKeeper
//! ensemble: session timeout 2 s (the "TTL"), each contender on its own session, with a
//! connect string of all three servers.
//!
//! The contenders and the ensemble are `support::ensemble`'s: every contender reaches every
//! server through proxies of its own, so the suite's crash and lost-lease scenarios cut one
//! contender off from the whole ensemble, as a crash or a partition of that client would, and
//! its session expires on the ensemble's clock, while the others keep theirs. No server fault
//! happens here (those are the harness's cluster rows): this shows that the recipe keeps every
//! promise of the suite when its server is a replicated ensemble rather than one process.
//! Every scenario of the suite runs; none is skipped.

use crate::support::ensemble::EnsembleFixture;

use std::time::Duration;

async fn make_fixture(_seed: u64) -> EnsembleFixture {
    EnsembleFixture::new("ensemble", Duration::from_secs(2))
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
