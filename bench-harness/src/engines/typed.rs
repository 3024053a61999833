//! How an engine is written: three traits on its typed options, which make it an [`Engine`].
//!
//! - [`Describe`]: what it is, as data (name, help, algorithms, in this process or a server);
//! - [`ParseOptions`]: its options, one typed struct ([`Options`]): its flags, what they read
//!   into, and what the options say (address, the scenario line, topology, faults); a server
//!   engine's spawned, secured and clustered servers come from the shared shape in
//!   [`super::server`];
//! - [`Open`]: opening it for one algorithm's run.
//!
//! A server engine of the shared shape implements [`ServerEngine`] instead of the first two:
//! its [`ServerFlags`] say the rest.
//!
//! Every type with the three is an [`Engine`] (the object-safe trait the rest of the harness
//! asks), which decodes the type-erased [`EngineOptions`] strictly before any of them sees
//! them.

use super::algorithm::{Entry, PerOwner};
use super::options::{EngineOptions, Options, OptionsError, Sharing};
use super::server::{ServerFlags, SpawnedLogin};
use super::{
    given, server, Algorithm, AlgorithmSettings, BoxFuture, Engine, EngineSetup, OpenEngine,
};
use crate::faults::FaultKind;
use clap::ArgMatches;
use std::path::Path;
use std::time::Duration;

/// What describes an engine, as data: what it is ([`About`]) and its algorithms (each with how
/// to build a contender's locker on the engine's client).
pub trait Describe: Send + Sync + 'static {
    /// Its name, help and where it runs.
    const ABOUT: About;

    /// A contender's client of the engine (cloned for each contender that shares it, with
    /// `--sessions`: a handle on one connection or session).
    type Client: Clone + Send + 'static;

    /// Its algorithms, in the order they run and appear in tables.
    const ENTRIES: &'static [Entry<Self::Client>];
}

/// What an engine is, for `bench-harness list` and `--help`, and where it runs. Built by
/// [`About::new`] and the methods that add what an engine has beyond a name.
#[derive(Debug, Clone, Copy)]
pub struct About {
    /// The name `--backend` takes and result files carry.
    pub name: &'static str,
    /// One line for `bench-harness list`: what it is and how to point at it ("": a server
    /// engine's, from its shared flags).
    pub line: &'static str,
    /// Whether contenders may share its clients (`--sessions N`), and what one shared client
    /// is.
    pub sessions: Sharing,
    /// Example command lines for `--help` (see [`Engine::help_examples`]; "": a server
    /// engine's, from its shared flags).
    pub examples: &'static str,
    /// A paragraph for `--help` on what the engine is and how it behaves ("" for none).
    pub notes: &'static str,
    /// True for an engine inside this process (see [`Engine::in_process`]); a server is not.
    pub in_process: bool,
}

impl About {
    /// An engine named `name` (a server unless [`About::in_process`]), listed as `line`, whose
    /// clients contenders may share as
    /// `sessions` says; no examples, no notes.
    pub const fn new(name: &'static str, line: &'static str, sessions: Sharing) -> Self {
        About { name, line, sessions, examples: "", notes: "", in_process: false }
    }

    /// With these example command lines for `--help`.
    pub const fn examples(self, examples: &'static str) -> Self {
        About { examples, ..self }
    }

    /// With this paragraph for `--help`.
    pub const fn notes(self, notes: &'static str) -> Self {
        About { notes, ..self }
    }

    /// Inside this process rather than a server.
    pub const fn in_process(self) -> Self {
        About { in_process: true, ..self }
    }
}

/// The command-line options of an engine that has no flags of its own: it adds nothing to the
/// command (not even an argument group, whose name two such engines would share).
#[derive(Debug, Clone)]
pub struct NoArgs;

impl clap::FromArgMatches for NoArgs {
    fn from_arg_matches(_: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(NoArgs)
    }
    fn update_from_arg_matches(&mut self, _: &ArgMatches) -> Result<(), clap::Error> {
        Ok(())
    }
}

impl clap::Args for NoArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd
    }
}

/// What parses an engine's options and reads them.
pub trait ParseOptions: Describe {
    /// Its options, as result files show them.
    type Options: Options;

    /// Its own command-line options, besides a server engine's shared ones.
    type Args: clap::Args;

    /// A server engine's shared flags (`--spawn-X[=N]`, its user and secret).
    const SERVER_FLAGS: Option<&'static ServerFlags> = None;

    /// The ids of the flags that point at this engine (an address, a server to start) besides
    /// a server engine's shared ones; none, on an engine without those: it is always there.
    const CONFIGURED_BY: &'static [&'static str] = &[];

    /// Adds its command-line options to `cmd`.
    fn add_args(&self, cmd: clap::Command) -> clap::Command {
        let cmd = <Self::Args as clap::Args>::augment_args(cmd);
        match Self::SERVER_FLAGS {
            Some(flags) => flags.augment(cmd),
            None => cmd,
        }
    }

    /// True when the command line or the environment points at this engine.
    fn is_configured(&self, m: &ArgMatches) -> bool {
        if let Some(flags) = Self::SERVER_FLAGS {
            return flags.given(m) || Self::CONFIGURED_BY.iter().any(|id| given(m, id));
        }
        Self::CONFIGURED_BY.is_empty() || Self::CONFIGURED_BY.iter().any(|id| given(m, id))
    }

    /// Its options as given on the command line, checked: an invalid address or setting is a
    /// usage error naming the option. Without flags of its own, a server engine's options are
    /// its shared ones.
    fn parse(&self, m: &ArgMatches) -> Result<Self::Options, String> {
        let mut options = Self::Options::default();
        if let (Some(flags), Some(server)) = (Self::SERVER_FLAGS, options.server_mut()) {
            *server = flags.read(m)?;
        }
        Ok(options)
    }

    /// Where it is, for messages (passwords redacted); a server engine's from its shared flags.
    fn address(&self, o: &Self::Options) -> String {
        match (Self::SERVER_FLAGS, o.server()) {
            (Some(flags), Some(server)) => flags.address(&server),
            _ => Self::ABOUT.name.to_string(),
        }
    }

    /// The store and its settings, for the line that describes a run; a server engine's from
    /// its shared flags.
    fn describe(&self, o: &Self::Options, s: &AlgorithmSettings) -> String {
        match (Self::SERVER_FLAGS, o.server()) {
            (Some(flags), Some(server)) => flags.describe(&server, s.ttl),
            _ => Self::ABOUT.name.to_string(),
        }
    }

    /// True when the harness starts the server itself for each run.
    fn spawns_server(&self, o: &Self::Options) -> bool {
        o.server().is_some_and(|s| s.spawn)
    }

    /// Who may log in to a server the harness starts with no user named (see
    /// [`Engine::spawned_login`]).
    const SPAWNED_LOGIN: SpawnedLogin = SpawnedLogin::Open;

    /// Its options with one server the harness starts itself (see [`Engine::spawned`]).
    fn spawned(&self) -> Option<Self::Options> {
        server::spawned()
    }

    /// [`ParseOptions::spawned`], secured (see [`Engine::secured`]).
    fn secured(&self, password_file: &Path) -> Option<Self::Options> {
        server::secured(self.spawned()?, password_file)
    }

    /// Its options with a cluster the harness starts itself (see [`Engine::clustered`]).
    fn clustered(&self) -> Option<Self::Options> {
        server::clustered()
    }

    /// Its options with a pooler in front (see [`Engine::pooled`]).
    fn pooled(&self) -> Option<Self::Options> {
        None
    }

    /// The shape of the cluster the options start ("×3", "sentinel"; "" for one server).
    fn topology(&self, o: &Self::Options) -> String {
        server::topology(o)
    }

    /// The fault kinds its opened engine can inject.
    fn fault_kinds(&self, o: &Self::Options) -> &'static [FaultKind] {
        server::fault_kinds(o)
    }

    /// The mean round trip of its latency model, when it is a model.
    fn modelled_round_trip(&self, _o: &Self::Options) -> Option<Duration> {
        None
    }

    /// Its options modelling one Cassandra node on loopback, when it is a model.
    fn single_node(&self, _o: &Self::Options) -> Option<Self::Options> {
        None
    }

    /// The options as they may be written into result files.
    fn redacted(&self, o: &Self::Options) -> Self::Options {
        o.clone()
    }

    /// A caveat for the engines comparison's README, if its wall-time figures need one.
    fn comparison_note(&self, _o: &Self::Options) -> Option<String> {
        None
    }
}

/// A server engine in the shared shape ([`super::server`]): its flags say everything
/// [`Describe`] and [`ParseOptions`] need (its name, its one algorithm, what a shared client
/// is, how its server is found, started and secured), its client makes each owner's lock, and
/// its options are the shared ones ([`super::server::ServerOnly`]) or a struct that holds them beside flags
/// of its own.
pub trait ServerEngine: Send + Sync + 'static {
    /// A contender's client (one connection or session), which makes each owner's lock.
    type Client: PerOwner + Clone;
    /// Its options, which are also its own command-line flags.
    type Options: Options + clap::Args + clap::FromArgMatches;
    /// Its shared flags.
    const FLAGS: &'static ServerFlags;
    /// Whether the harness can start a cluster of it (`--spawn-X=N`, the clusters of the
    /// comparisons and of the safety table).
    const CLUSTERS: bool = true;
    /// Who may log in to a server the harness starts with no user named.
    const SPAWNED_LOGIN: SpawnedLogin = SpawnedLogin::Open;
    /// Its algorithms, in the order they run: by default the one its flags name, each owner's
    /// lock made by its client.
    const LOCKS: &'static [Entry<Self::Client>] = &[Entry::per_owner(Self::FLAGS.algorithm)];

    /// Its options with the cluster the harness starts for the comparisons and the safety
    /// table ([`Engine::clustered`]): `--spawn-X=3` when it [`ServerEngine::CLUSTERS`].
    fn cluster_options() -> Option<Self::Options> {
        if Self::CLUSTERS {
            server::clustered()
        } else {
            None
        }
    }

    /// Its options with a pooler of the harness's own in front ([`Engine::pooled`]).
    fn pool_options() -> Option<Self::Options> {
        None
    }

    /// Where `o` points, in words, for result files ([`Engine::address`]).
    fn place(o: &Self::Options) -> String {
        match o.server() {
            Some(server) => Self::FLAGS.address(&server),
            None => Self::FLAGS.name().to_string(),
        }
    }

    /// The shape of what `o` starts, for tables ([`Engine::topology`]).
    fn shape(o: &Self::Options) -> String {
        server::topology(o)
    }

    /// The fault kinds its opened engine can inject with `o`.
    fn faults(o: &Self::Options) -> &'static [FaultKind] {
        server::fault_kinds(o)
    }
}

impl<E: ServerEngine> Describe for E {
    const ABOUT: About = About::new(E::FLAGS.name(), "", E::FLAGS.sessions);
    type Client = E::Client;
    const ENTRIES: &'static [Entry<E::Client>] = E::LOCKS;
}

impl<E: ServerEngine> ParseOptions for E {
    type Options = E::Options;
    type Args = E::Options;
    const SERVER_FLAGS: Option<&'static ServerFlags> = Some(E::FLAGS);
    const SPAWNED_LOGIN: SpawnedLogin = E::SPAWNED_LOGIN;

    fn clustered(&self) -> Option<E::Options> {
        E::cluster_options()
    }

    fn pooled(&self) -> Option<E::Options> {
        E::pool_options()
    }

    fn address(&self, o: &E::Options) -> String {
        E::place(o)
    }

    fn topology(&self, o: &E::Options) -> String {
        E::shape(o)
    }

    fn fault_kinds(&self, o: &E::Options) -> &'static [FaultKind] {
        E::faults(o)
    }

    fn parse(&self, m: &ArgMatches) -> Result<E::Options, String> {
        let mut options =
            <E::Options as clap::FromArgMatches>::from_arg_matches(m).map_err(|e| e.to_string())?;
        if let Some(server) = options.server_mut() {
            *server = E::FLAGS.read(m)?;
        }
        options.check()?;
        Ok(options)
    }
}

/// An engine opened for a run, or why it cannot be.
pub type OpenResult = Result<Box<dyn OpenEngine>, String>;

/// What opens an engine for one algorithm's run.
pub trait Open: ParseOptions {
    /// Opens it with `options` (see [`Engine::open`]).
    fn open<'a>(
        &'a self,
        options: Self::Options,
        setup: EngineSetup<'a>,
    ) -> impl std::future::Future<Output = OpenResult> + Send + 'a;
}

/// The options of `engine`, decoded. Every [`EngineOptions`] that reaches an engine was made by
/// it or checked ([`Engine::check_options`], which [`crate::config::RunConfig::validate`]
/// calls), so a failure here is a bug, said loudly rather than run on defaults.
fn typed<E: ParseOptions>(_engine: &E, options: &EngineOptions) -> E::Options {
    options.decode(E::ABOUT.name).unwrap_or_else(|e| panic!("unchecked engine options: {e}"))
}

fn erased<O: Options>(o: Option<O>) -> Option<EngineOptions> {
    o.map(|o| EngineOptions::of(&o))
}

impl<E: Open> Engine for E {
    fn name(&self) -> &'static str {
        E::ABOUT.name
    }
    fn about(&self) -> String {
        match E::SERVER_FLAGS {
            Some(flags) if E::ABOUT.line.is_empty() => flags.about(),
            _ => E::ABOUT.line.to_string(),
        }
    }
    fn help_examples(&self) -> &'static str {
        match E::SERVER_FLAGS {
            Some(flags) if E::ABOUT.examples.is_empty() => flags.examples,
            _ => E::ABOUT.examples,
        }
    }
    fn help_notes(&self) -> &'static str {
        E::ABOUT.notes
    }
    fn in_process(&self) -> bool {
        E::ABOUT.in_process
    }
    fn sessions(&self) -> Sharing {
        E::ABOUT.sessions
    }
    fn algorithms(&self) -> Vec<&'static Algorithm> {
        Entry::algorithms(E::ENTRIES)
    }
    /// Every engine here counts the requests its contenders send (store load per grant).
    fn counts_requests(&self) -> bool {
        true
    }
    fn check_options(&self, options: &EngineOptions) -> Result<(), OptionsError> {
        options.decode::<E::Options>(E::ABOUT.name).map(drop)
    }
    fn spawns_server(&self, options: &EngineOptions) -> bool {
        ParseOptions::spawns_server(self, &typed(self, options))
    }
    fn spawned(&self) -> Option<EngineOptions> {
        erased(ParseOptions::spawned(self))
    }
    fn spawned_login(&self) -> SpawnedLogin {
        E::SPAWNED_LOGIN
    }
    fn topology(&self, options: &EngineOptions) -> String {
        ParseOptions::topology(self, &typed(self, options))
    }
    fn secured(&self, password_file: &Path) -> Option<EngineOptions> {
        erased(ParseOptions::secured(self, password_file))
    }
    fn clustered(&self) -> Option<EngineOptions> {
        erased(ParseOptions::clustered(self))
    }
    fn pooled(&self) -> Option<EngineOptions> {
        erased(ParseOptions::pooled(self))
    }
    fn add_args(&self, cmd: clap::Command) -> clap::Command {
        ParseOptions::add_args(self, cmd)
    }
    fn is_configured(&self, m: &ArgMatches) -> bool {
        ParseOptions::is_configured(self, m)
    }
    fn options(&self, m: &ArgMatches) -> Result<EngineOptions, String> {
        self.parse(m).map(|o| EngineOptions::of(&o))
    }
    fn default_options(&self) -> EngineOptions {
        EngineOptions::of(&E::Options::default())
    }
    fn address(&self, options: &EngineOptions) -> String {
        ParseOptions::address(self, &typed(self, options))
    }
    fn describe(&self, options: &EngineOptions, settings: &AlgorithmSettings) -> String {
        ParseOptions::describe(self, &typed(self, options), settings)
    }
    fn modelled_round_trip(&self, options: &EngineOptions) -> Option<Duration> {
        ParseOptions::modelled_round_trip(self, &typed(self, options))
    }
    fn single_node(&self, options: &EngineOptions) -> Option<EngineOptions> {
        erased(ParseOptions::single_node(self, &typed(self, options)))
    }
    fn fault_kinds(&self, options: &EngineOptions) -> &'static [FaultKind] {
        ParseOptions::fault_kinds(self, &typed(self, options))
    }
    fn redacted(&self, options: &EngineOptions) -> EngineOptions {
        EngineOptions::of(&ParseOptions::redacted(self, &typed(self, options)))
    }
    fn comparison_note(&self, options: &EngineOptions) -> Option<String> {
        ParseOptions::comparison_note(self, &typed(self, options))
    }
    fn open<'a>(
        &'a self,
        setup: EngineSetup<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn OpenEngine>, String>> {
        match setup.options.decode(E::ABOUT.name) {
            Ok(options) => Box::pin(Open::open(self, options, setup)),
            Err(e) => Box::pin(async move { Err(e.to_string()) }),
        }
    }
}
