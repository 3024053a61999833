//! Every integration test of this crate, one module per file, linked into one binary:
//! one link of the crate and its dependencies instead of one per file. nextest still
//! runs each test in its own process, so no test sees another's state.

mod support;

mod conformance;
mod election_conformance;
mod ensemble_conformance;
mod ensemble_election_conformance;
mod ensemble_rwlock_semaphore_conformance;
mod kazoo;
mod kazoo_election;
mod kazoo_rwlock;
mod kazoo_semaphore;
mod lost_create;
mod recipe;
mod requests;
mod restart;
mod rwlock_semaphore_conformance;
mod secured_conformance;
mod security;
mod tls;
mod tls_conformance;
