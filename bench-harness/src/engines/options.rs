//! An engine's options: one typed serde struct per engine, carried type-erased through the run.
//!
//! Each engine owns a struct of its options (`#[serde(default, deny_unknown_fields)]`) and
//! implements [`Options`] for it. In [`crate::config::RunConfig`] and in result files they stand
//! beside the run's other settings as a flat JSON map ([`EngineOptions`]), so a file says exactly
//! what produced it; reading them back ([`EngineOptions::decode`]) is strict: an unknown
//! (misspelt) field or a value of the wrong type is an [`OptionsError`] naming the field, never
//! a silent default.

use lock_core::secret::{Credentials, Secret};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::path::{Path, PathBuf};

/// An engine's own options struct.
pub trait Options:
    Serialize + DeserializeOwned + Default + Clone + PartialEq + Debug + Send + Sync + 'static
{
    /// The part every server engine the harness can start shares (`--spawn-X[=N]`, the user and
    /// its secret), when the engine has it: the safety table's spawned, secured and clustered
    /// servers, the topology and the member faults come from it.
    fn server_mut(&mut self) -> Option<&mut Spawn> {
        None
    }

    /// The user and the file of its secret, for an engine without [`Options::server_mut`] that
    /// authenticates its clients.
    fn login_mut(&mut self) -> Option<&mut Login> {
        None
    }

    /// [`Options::server_mut`], read only.
    fn server(&self) -> Option<Spawn> {
        self.clone().server_mut().map(|s| s.clone())
    }

    /// Why the engine's own flags cannot work together, as a usage error naming them; `Ok`
    /// when they can (the default).
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Options that could not be read back: the engine, the field and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptionsError {
    /// One field is unknown to the engine or holds a value it cannot take.
    #[error("{engine} option '{field}': {reason}")]
    Field {
        /// The engine's name.
        engine: String,
        /// The field, as written.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The options as a whole cannot be read (no single field is to blame).
    #[error("{engine} options: {reason}")]
    Whole {
        /// The engine's name.
        engine: String,
        /// What is wrong.
        reason: String,
    },
}

/// An engine's options, type-erased: each engine serializes its own [`Options`] struct into it
/// and reads it back ([`EngineOptions::of`], [`EngineOptions::decode`]). In result files they
/// stand beside the run's other settings (the field is flattened).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EngineOptions(serde_json::Map<String, serde_json::Value>);

impl EngineOptions {
    /// The options `value` (an engine's own serde struct).
    pub fn of<T: Serialize>(value: &T) -> EngineOptions {
        match serde_json::to_value(value) {
            Ok(serde_json::Value::Object(map)) => EngineOptions(map),
            _ => EngineOptions::default(),
        }
    }

    /// The options as engine `engine`'s own struct. Fields missing take their defaults; an
    /// unknown field or a bad value is an error naming it.
    pub fn decode<T: DeserializeOwned>(&self, engine: &str) -> Result<T, OptionsError> {
        let whole = serde_json::Value::Object(self.0.clone());
        serde_json::from_value(whole).map_err(|e| {
            // Find the field to blame: the first that cannot be read on its own.
            let alone = |(k, v): (&String, &serde_json::Value)| {
                let one = serde_json::Map::from_iter([(k.clone(), v.clone())]);
                let err = serde_json::from_value::<T>(serde_json::Value::Object(one)).err()?;
                Some(OptionsError::Field {
                    engine: engine.to_string(),
                    field: k.clone(),
                    reason: err.to_string(),
                })
            };
            self.0.iter().find_map(alone).unwrap_or_else(|| OptionsError::Whole {
                engine: engine.to_string(),
                reason: e.to_string(),
            })
        })
    }

    /// The options with `value` merged over them (tests and experiments that change one
    /// engine setting).
    pub fn with<T: Serialize>(mut self, value: &T) -> EngineOptions {
        self.0.extend(EngineOptions::of(value).0);
        self
    }
}

/// The user a server engine's clients authenticate as, and where its secret is read from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Login {
    /// The user every client authenticates as (`--X-user`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Where its secret is read from, when not from the environment (`--X-password-file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
}

/// Where a server engine's server is (the user's address, or a server or cluster the harness
/// starts for each run), how its clients reach it (TLS) and who they are. Its fields are flat
/// (no nested [`Login`]): serde checks a flattened struct's fields for strangers only when it
/// reads them by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Spawn {
    /// The user's server or servers (`--X HOST:PORT,...`); none: the engine's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A server the harness starts for each run (`--spawn-X`), instead of the user's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub spawn: bool,
    /// The started cluster's members, when more than one (`--spawn-X=3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<u16>,
    /// The user every client authenticates as (`--X-user`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Where its secret is read from, when not from the environment (`--X-<secret>-file`).
    #[serde(skip_serializing_if = "Option::is_none", alias = "token_file")]
    pub password_file: Option<PathBuf>,
    /// TLS to the user's server: the CA certificates to trust (`--X-ca`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// The client's certificate, for mutual TLS (`--X-cert`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// Its key (`--X-key`): the path only, never the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

impl Spawn {
    /// The user's credentials, their secret read now; `None` without a user.
    pub fn credentials(&self, names: &SecretNames) -> Result<Option<Credentials>, String> {
        let login = Login { user: self.user.clone(), password_file: self.password_file.clone() };
        login.credentials(names)
    }

    /// TLS to the user's server, when a CA is given.
    pub fn tls(&self) -> Option<lock_core::tls::TlsFiles> {
        let ca = self.ca.clone()?;
        Some(lock_core::tls::TlsFiles {
            ca: Some(ca),
            cert: self.cert.clone(),
            key: self.key.clone(),
        })
    }
}

/// The options of a server engine that has no others.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerOnly {
    /// Where the server is and who the clients are.
    #[serde(flatten)]
    pub server: Spawn,
}

impl Options for ServerOnly {
    fn server_mut(&mut self) -> Option<&mut Spawn> {
        Some(&mut self.server)
    }
}

/// No flags of its own: a server engine's shared ones are added and read by its
/// [`super::server::ServerFlags`] (not even an argument group, whose name two such engines
/// would share).
impl clap::Args for ServerOnly {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd
    }
}

impl clap::FromArgMatches for ServerOnly {
    fn from_arg_matches(_: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(ServerOnly::default())
    }
    fn update_from_arg_matches(&mut self, _: &clap::ArgMatches) -> Result<(), clap::Error> {
        Ok(())
    }
}

/// How an engine names the secret of its user: `--<name>-user`, `--<name>-<secret>-file`, the
/// environment variable `var`.
#[derive(Debug, Clone, Copy)]
pub struct SecretNames {
    /// The engine's name.
    pub name: &'static str,
    /// "password" or "token".
    pub secret: &'static str,
    /// The environment variable that holds it.
    pub var: &'static str,
}

impl Login {
    /// The credentials, their secret read now; `None` without a user.
    pub fn credentials(&self, names: &SecretNames) -> Result<Option<Credentials>, String> {
        credentials(
            names.name,
            names.secret,
            self.user.as_deref(),
            self.password_file.as_deref(),
            names.var,
        )
    }
}

/// The credentials of engine `name`'s `--<name>-user USER`, its `secret` ("password",
/// "token") read now: from `file` when given (`--<name>-<secret>-file`), else from the
/// environment variable `var` (never from the command line); an error saying where it may come
/// from when there is none. `None` without a user.
pub fn credentials(
    name: &str,
    secret: &str,
    user: Option<&str>,
    file: Option<&Path>,
    var: &str,
) -> Result<Option<Credentials>, String> {
    let Some(user) = user else { return Ok(None) };
    let password = match file {
        Some(file) => Secret::from_file(file)?,
        None => Secret::from_env(var)?.ok_or_else(|| {
            format!("--{name}-user {user}: no {secret} (set {var}, or give --{name}-{secret}-file)")
        })?,
    };
    Ok(Some(Credentials::new(user, password)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;
    use crate::engines::EngineRef;

    /// A run configuration on `engine` as JSON, with `field` set to `value` among the engine's
    /// options (they stand beside the run's other settings), read back and checked.
    fn with_field(engine: &str, field: &str, value: serde_json::Value) -> Result<(), String> {
        let engine = EngineRef::find(engine).unwrap();
        let names = engine.algorithm_names().iter().map(|a| a.to_string()).collect();
        let cfg = RunConfig { algorithms: names, ..RunConfig::on(engine) };
        let mut json = serde_json::to_value(&cfg).unwrap();
        json.as_object_mut().unwrap().insert(field.into(), value);
        let back: RunConfig = serde_json::from_value(json).map_err(|e| e.to_string())?;
        back.validate()
    }

    #[test]
    fn misspelt_or_bad_engine_options_are_errors_naming_the_field() {
        // A misspelt field is not taken for a default.
        let err = with_field("zookeeper", "spwan", true.into()).unwrap_err();
        assert!(err.contains("zookeeper option 'spwan'") && err.contains("unknown"), "{err}");
        let err = with_field("embedded", "replica", 1.into()).unwrap_err();
        assert!(err.contains("embedded option 'replica'"), "{err}");
        // A bad value names its field, whether the engine's own or the shared server shape's.
        let err = with_field("embedded", "replicas", "three".into()).unwrap_err();
        assert!(err.contains("embedded option 'replicas'") && err.contains("three"), "{err}");
        let err = with_field("zookeeper", "members", "three".into()).unwrap_err();
        assert!(err.contains("zookeeper option 'members'"), "{err}");
        let err = with_field("redis", "spawn", "disk".into()).unwrap_err();
        assert!(err.contains("redis option 'spawn'") && err.contains("disk"), "{err}");
        // Good fields pass.
        with_field("zookeeper", "members", 3.into()).unwrap();
        with_field("embedded", "replicas", 5.into()).unwrap();
    }

    #[test]
    fn decoding_names_the_field_and_keeps_good_ones() {
        let zk = EngineRef::find("zookeeper").unwrap();
        let mut o = zk.clustered().unwrap();
        assert_eq!(zk.topology(&o), "×3");
        assert!(zk.check_options(&o).is_ok());
        o = o.with(&serde_json::json!({ "user": 7 }));
        let err = zk.check_options(&o).unwrap_err();
        assert!(
            matches!(&err, OptionsError::Field { engine, field, .. } if engine == "zookeeper" && field == "user"),
            "{err:?}"
        );
    }
}

/// What the contenders sharing one client of an engine share (`--sessions N`, [`super::Engine::sessions`]),
/// or why its clients cannot be shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Each of the N clients serves the contenders on it, each under its own owner id: what
    /// one client is, and what its contenders share by it (for `--help`).
    Shared(&'static str),
    /// `--sessions` is a usage error on this engine, for this reason.
    Refused(&'static str),
}
