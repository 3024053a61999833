//! The shared conformance suite for the ZooKeeper recipe with every contender authenticated by
//! digest credentials, so that every znode of the locks carries the creator-only ACL (crate
//! docs, "Credentials and ACLs"): what a user who secures the lock path gets. One seed: the
//! open path's suite (`tests/conformance.rs`) runs three.

use crate::support;

use lock_core::secret::{Credentials, Secret};
use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::ZkFixture {
    let credentials = Credentials::new("conformance", Secret::new("conformance-password"));
    support::ZkFixture::new("secured-conf", Duration::from_secs(2))
        .await
        .with_credentials(credentials)
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 1,
    contenders = 12
);
