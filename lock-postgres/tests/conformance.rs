//! The shared conformance suite for PostgreSQL's advisory locks against a real server: a 2 s
//! lease, each contender on its own backend through a proxy that can go silent; the session
//! lock, then the transaction-level lock as a plain `Locker`.

use crate::support;
use std::time::Duration;

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |_seed| async move { support::PgFixture::new(Duration::from_secs(2)) },
    seeds = 3,
    contenders = 12
);

mod transaction {
    use crate::support;
    use std::time::Duration;

    lock_core::conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |_seed| async move { support::PgXactFixture(support::PgFixture::new(Duration::from_secs(2))) },
        seeds = 3,
        contenders = 12
    );
}
