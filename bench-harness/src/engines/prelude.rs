//! What a server engine's module names: the traits it implements, the shared server shape and
//! faults, and the lock-core, serde and std types their signatures take. Each engine imports
//! it whole (`use super::prelude::*`) and adds its own client crate.

pub(super) use super::algorithm::{
    no_primitive, per_owner_client, AlgorithmSettings, BuildFuture, Entry, SharedFuture,
};
pub(super) use super::counting::Kind;
pub(super) use super::options::Spawn;
pub(super) use super::server::{
    self, AddressFlag, Dial, Endpoint, LoginFlags, RunLine, ServerFlags, ServerOnly, SpawnedLogin,
    Starts, TlsFlags,
};
pub(super) use super::server_faults::{
    self, Connect, Connected, Managed, Opened, ServerFaults, Via,
};
pub(super) use super::typed::ServerEngine;
pub(super) use super::Sharing;
pub(super) use super::{
    About, Algorithm, Describe, EngineSetup, Open, OpenResult, ParseOptions, SecretNames,
};
pub(super) use crate::faults::FaultKind;
pub(super) use crate::primitive::{Asking, Primitive, PrimitiveKind};
pub(super) use clap::ArgMatches;
pub(super) use lock_core::context::ClientContext;
pub(super) use lock_core::requests::{Request, RequestHook};
pub(super) use lock_core::secret::Credentials;
pub(super) use lock_core::LockError;
pub(super) use serde::{Deserialize, Serialize};
pub(super) use std::sync::Arc;
pub(super) use std::time::Duration;
