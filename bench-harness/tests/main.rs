//! Every integration test of this crate, one module per file, linked into one binary:
//! one link of the crate and its dependencies instead of one per file. nextest still
//! runs each test in its own process, so no test sees another's state.

mod support;

mod cli;
mod cluster_faults;
mod faults;
mod golden;
mod layering;
mod locks;
mod primitives;
mod scale;
mod server_faults;
mod store_load;
mod test_targets;
