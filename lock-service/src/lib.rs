//! # lock-service
#![deny(missing_docs)]

pub mod client;
pub mod proto;
pub mod raft;
pub mod server;
pub mod state;
