//! Every integration test of this crate, one module per file, linked into one binary:
//! one link of the crate and its dependencies instead of one per file. nextest still
//! runs each test in its own process, so no test sees another's state.

mod support;

mod etcd_cluster;
mod mariadb;
mod postgres;
mod postgres_failover;
mod redis_cluster;
mod restart;
mod zookeeper_cluster;
