//! Every integration test of this crate, one module per file, linked into one binary:
//! one link of the crate and its dependencies instead of one per file. nextest still
//! runs each test in its own process, so no test sees another's state.

mod redlock_support;
mod sentinel_support;
mod support;

mod faults;
mod jedis_conformance;
mod redlock_conformance;
mod redlock_faults;
mod redlock_fenced_conformance;
mod requests;
mod restart;
mod rwlock_conformance;
mod rwlock_policy;
mod secured_conformance;
mod security;
mod semaphore_conformance;
mod semaphore_queue;
mod sentinel;
mod sentinel_conformance;
mod sentinel_failover;
mod sentinel_safety;
mod tls;
mod token_conformance;
