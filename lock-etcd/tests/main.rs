//! Every integration test of this crate, one module per file, linked into one binary:
//! one link of the crate and its dependencies instead of one per file. nextest still
//! runs each test in its own process, so no test sees another's state.

mod support;

mod cluster_conformance;
mod cluster_primitives;
mod conformance;
mod etcdctl_elect;
mod mutex;
mod primitives;
mod requests;
mod restart;
mod security;
mod tls;
