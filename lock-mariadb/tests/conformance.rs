//! The shared conformance suite for MariaDB's `GET_LOCK` against a real server: a 2 s lease,
//! each contender on its own backend through a proxy that can go silent.

use crate::support;
use std::time::Duration;

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |_seed| async move { support::MariaFixture::new(Duration::from_secs(2)) },
    seeds = 3,
    contenders = 12
);
