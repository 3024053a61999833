//! Every integration test of this crate, one module per file, linked into one binary:
//! one link of the crate and its dependencies instead of one per file. nextest still
//! runs each test in its own process, so no test sees another's state.

mod bounded;
mod bounded_conformance;
mod conformance;
mod fairness;
mod push;
mod push_conformance;
mod rwlock_conformance;
mod semaphore_conformance;
