//! The shape every server engine the harness can start shares: `--spawn-X[=N]` (one server, or a
//! cluster of N members whose leader the cluster finds, `test_servers::ClusterEngine`), and the
//! user its clients authenticate as (`--X-user`, its secret in the environment or
//! `--X-<secret>-file`).
//!
//! An engine describes these once in a [`ServerFlags`]; its options struct holds a [`Spawn`]
//! (flattened, so result files show `spawn`, `members`, `user` and `password_file` beside its
//! own fields) and says so in [`super::Options::server_mut`]. From that alone come its flags,
//! what they read into, the options of the server the safety table starts, secures and
//! clusters, its topology, its address while the harness runs the server, and its fault kinds.

use super::options::{Login, Options, SecretNames, Spawn};
use super::server_faults;
use crate::faults::FaultKind;
use clap::{Arg, ArgAction, ArgMatches, Command};
use std::path::{Path, PathBuf};

/// The user of the secured server the safety table's "stranger (secured)" rows run on.
pub const SECURED_USER: &str = "bench-harness";

/// How many members a cluster the safety table starts has.
pub const CLUSTER_MEMBERS: u16 = 3;

/// How an engine names the flags of its user: `--<name>-user`, `--<name>-<secret>-file`.
#[derive(Debug, Clone, Copy)]
pub struct LoginFlags {
    /// The engine's name and its user's secret.
    pub secret: SecretNames,
    /// The help heading of the engine's flags.
    pub heading: &'static str,
    /// Help of `--<name>-user`.
    pub user_help: &'static str,
}

/// What a server engine calls its shared flags and its servers.
#[derive(Debug, Clone, Copy)]
pub struct ServerFlags {
    /// `--<name>-user` and `--<name>-<secret>-file`; `--spawn-<name>` takes the same name.
    pub login: LoginFlags,
    /// What `--spawn-<name>=N` counts: "MEMBERS", "NODES".
    pub members: &'static str,
    /// Help of `--spawn-<name>`.
    pub spawn_help: &'static str,
    /// A cluster it starts, for messages: "an etcd cluster of {n} members started by the
    /// harness".
    pub cluster: fn(u16) -> String,
    /// One server it starts, for messages: "an etcd server".
    pub one: &'static str,
}

/// `s`, for clap, which keeps argument names for the life of the command.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl LoginFlags {
    fn user_id(&self) -> String {
        format!("{}_user", self.secret.name)
    }

    fn file_id(&self) -> String {
        format!("{}_{}_file", self.secret.name, self.secret.secret)
    }

    /// Adds `--<name>-user` and `--<name>-<secret>-file` to `cmd`.
    pub fn augment(&self, cmd: Command) -> Command {
        let (name, secret) = (self.secret.name, self.secret.secret);
        let user = Arg::new(leak(self.user_id()))
            .long(leak(format!("{name}-user")))
            .value_name("USER")
            .action(ArgAction::Set)
            .help(self.user_help);
        let file = Arg::new(leak(self.file_id()))
            .long(leak(format!("{name}-{secret}-file")))
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .requires(leak(self.user_id()))
            .help(leak(format!("A file whose first line is the {secret} of --{name}-user.")));
        cmd.arg(user.help_heading(self.heading)).arg(file.help_heading(self.heading))
    }

    /// What the user's flags say.
    pub fn read(&self, m: &ArgMatches) -> Login {
        Login {
            user: m.try_get_one::<String>(&self.user_id()).ok().flatten().cloned(),
            password_file: m.try_get_one::<PathBuf>(&self.file_id()).ok().flatten().cloned(),
        }
    }
}

impl ServerFlags {
    fn spawn_id(&self) -> String {
        format!("spawn_{}", self.login.secret.name)
    }

    /// Adds `--spawn-<name>[=N]`, `--<name>-user` and `--<name>-<secret>-file` to `cmd`.
    pub fn augment(&self, cmd: Command) -> Command {
        let spawn = Arg::new(leak(self.spawn_id()))
            .long(leak(format!("spawn-{}", self.login.secret.name)))
            .value_name(self.members)
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("1")
            .value_parser(clap::value_parser!(u16).range(1..=9))
            .help(self.spawn_help);
        self.login.augment(cmd.arg(spawn.help_heading(self.login.heading)))
    }

    /// True when `--spawn-<name>` was given.
    pub fn spawn_given(&self, m: &ArgMatches) -> bool {
        super::given(m, &self.spawn_id())
    }

    /// What `--spawn-<name>[=N]` and the user's flags say.
    pub fn read(&self, m: &ArgMatches) -> Spawn {
        let members = m.try_get_one::<u16>(&self.spawn_id()).ok().flatten().copied();
        let Login { user, password_file } = self.login.read(m);
        Spawn { spawn: members.is_some(), members: members.filter(|n| *n > 1), user, password_file }
    }

    /// Where `server` is when the harness starts it; `None` for the user's own.
    pub fn started(&self, server: &Spawn) -> Option<String> {
        match (server.members, server.spawn) {
            (Some(n), _) => Some((self.cluster)(n)),
            (None, true) => Some(format!("{} started by the harness", self.one)),
            (None, false) => None,
        }
    }
}

/// The options of one server the harness starts, when the engine can start one.
pub fn spawned<O: Options>() -> Option<O> {
    let mut o = O::default();
    o.server_mut()?.spawn = true;
    Some(o)
}

/// `options` with its user the secured server's, its secret read from `password_file`.
pub fn secured<O: Options>(mut options: O, password_file: &Path) -> Option<O> {
    let (user, file) = (Some(SECURED_USER.into()), Some(password_file.into()));
    match options.server_mut() {
        Some(s) => (s.user, s.password_file) = (user, file),
        None => {
            let login = options.login_mut()?;
            (login.user, login.password_file) = (user, file);
        }
    }
    Some(options)
}

/// The options of a cluster the harness starts, when the engine can start one.
pub fn clustered<O: Options>() -> Option<O> {
    let mut o: O = spawned()?;
    o.server_mut()?.members = Some(CLUSTER_MEMBERS);
    Some(o)
}

/// "×N" for a cluster of N members, "" otherwise.
pub fn topology<O: Options>(options: &O) -> String {
    options.server().and_then(|s| s.members).map_or_else(String::new, |n| format!("×{n}"))
}

/// The faults on a server or cluster: the member faults on a cluster, the server restart on a
/// server the harness started.
pub fn fault_kinds<O: Options>(options: &O) -> &'static [FaultKind] {
    match options.server() {
        Some(Spawn { members: Some(_), .. }) => server_faults::cluster_kinds(),
        Some(s) => server_faults::kinds_with_stranger(s.spawn),
        None => &[],
    }
}
