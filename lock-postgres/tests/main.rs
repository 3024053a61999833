//! Every integration test of this crate, one module per file, linked into one binary:
//! one link of the crate and its dependencies instead of one per file. nextest still
//! runs each test in its own process, so no test sees another's state.

mod support;

mod bad_input;
mod conformance;
mod cut;
mod interop;
mod long_wait;
mod pooler;
mod promotion;
mod requests;
mod restart;
mod terminated;
mod tls;
mod transaction;
