//! The shared conformance suite for etcd's Mutex on a 3-member etcd cluster (the
//! suite passes for the locks on each cluster): lease TTL 2 s, each contender on its own
//! backend (client and lease) whose client is given the endpoints of all three members.
//!
//! Every contender reaches every member through a proxy of its own, in front of the member's
//! client proxy, and its client gets those three endpoints (it spreads its requests over them:
//! followers forward to the leader). So the suite's crash and lost-lease scenarios cut one
//! contender off from the whole cluster, as a crash or a partition of that client would, while
//! the others keep theirs. No member fault happens here (those are the harness's cluster
//! rows): this shows that the lock keeps every promise of the suite when its server is a
//! replicated cluster rather than one process. Every scenario of the suite runs; none is
//! skipped.
//!
//! One cluster per test binary, started by the first test and shared by all (each fixture has
//! a lock root of its own), as the single-server suite (`conformance.rs`) shares one server.
//! Its members are killed when the binary exits (test-servers arms `PR_SET_PDEATHSIG` on a
//! thread that lives as long as each member; the static cluster is never dropped).

use crate::support;

use std::time::Duration;
use support::ClusterFixture;

async fn make_fixture(_seed: u64) -> ClusterFixture {
    ClusterFixture::new("cluster", Duration::from_secs(2))
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
