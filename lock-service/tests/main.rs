//! Every integration test of this crate, one module per file, linked into one binary:
//! one link of the crate and its dependencies instead of one per file. nextest still
//! runs each test in its own process, so no test sees another's state.

mod support;

mod abandoned;
mod bad_input;
mod burst;
mod conformance;
mod deadlines;
mod disk;
mod election_failover;
mod failover;
mod group_commit;
mod limits;
mod membership;
mod metrics;
mod nemesis;
mod python_client;
mod secured_conformance;
mod security;
mod shared_requests;
mod storage_suite;
mod unknown_release;
