//! Faults on a real server, for the engines that talk to one (Redis, ZooKeeper).
//!
//! - **Contender faults** (`pause`, `crash`, `partition`): each contender reaches the server
//!   through a TCP proxy of its own ([`test_servers::Proxy`]) when the run has such faults, so
//!   that one contender can be hit without the others. `pause` holds every byte both ways (its
//!   lease renewals and session pings stall, as in a stopped process); `silent-partition` holds
//!   them the same way while the contender works on; `partition` closes its
//!   connections and refuses new ones until healed (its client reconnects by itself); `crash`
//!   closes them for good: what it left on the server (keys, znodes, sessions) stays until it
//!   expires there, and the contender comes back under a new owner id with a new proxy.
//! - **`clock-jump`**: every contender's clock carries a [`ClockJump`] the nemesis moves.
//! - **`server-restart`**: for a server the harness started itself ([`Managed`], with the
//!   engine's `--spawn-…` option): it is killed (`SIGKILL`, as a crash) and started again on
//!   the same port and data directory; or for one the user says how to stop and start
//!   ([`Commanded`]: a Cassandra node's `--node-stop` / `--node-start`). A server the harness
//!   neither started nor was told how to restart is not its to kill.
//!
//! - **Member faults** ([`FaultKind::MEMBER`]), on a cluster the harness started
//!   (`--spawn-etcd=3`, `--spawn-zookeeper=3`, `--spawn-redis=sentinel`, `--spawn-redlock`).
//!   The leader faults hit the member that leads when the fault starts
//!   ([`Members::wait_for_leader`]: etcd's member status, ZooKeeper's `srvr`, the Sentinels'
//!   answer): killed and restarted with its data, stopped and continued, or cut off from its
//!   peers and clients and healed; `lagged-leader-kill` holds back the connections every other
//!   member opened to it (a Redis replica's replication link) for the fault's `lag` before the
//!   kill, and lets them go before the restart. The master faults of independent masters hit
//!   each master in turn and restart it with or without its data. The undo goes to the member
//!   that was hit, whoever leads by then. The contenders reach the cluster through its members'
//!   client proxies (or the Sentinels), not through proxies of their own: contender faults
//!   need a single server.
//!
//! Runs without these faults connect straight to the server: the proxy hop is never measured
//! unless a fault needs it.
//!
//! [`Opened`], the opened engine of every server engine but Cassandra, also counts the requests
//! of the contenders' clients ([`super::counting`]).

use super::counting::{Kind, RequestCounter};
use super::{BoxFuture, Describe, Injection};
use crate::faults::FaultKind;
use lock_core::requests::{Request, RequestHook};
use lock_core::time::ClockJump;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use test_servers::{Proxy, RedisServer, ZkServer};

/// Every fault kind a server the harness started may have, in the order they are listed: what
/// the contenders' proxies and clocks make, the server's restart, then the kinds only some
/// engines know how to make (see [`kinds_with_stranger`], [`kinds_with_terminate`]).
const MANAGED: [FaultKind; 8] = [
    FaultKind::Pause,
    FaultKind::Crash,
    FaultKind::ClockJump,
    FaultKind::Partition,
    FaultKind::SilentPartition,
    FaultKind::ServerRestart,
    FaultKind::Stranger,
    FaultKind::Terminate,
];

/// [`MANAGED`] without the restart: a server the user runs.
const CONTENDER: [FaultKind; 7] = [
    FaultKind::Pause,
    FaultKind::Crash,
    FaultKind::ClockJump,
    FaultKind::Partition,
    FaultKind::SilentPartition,
    FaultKind::Stranger,
    FaultKind::Terminate,
];

/// The common kinds and the first `extra` of the engine-specific ones.
fn kinds_plus(managed: bool, extra: usize) -> &'static [FaultKind] {
    if managed {
        &MANAGED[..6 + extra]
    } else {
        &CONTENDER[..5 + extra]
    }
}

/// The fault kinds a server engine can inject: `managed` when the harness started the server.
pub fn kinds(managed: bool) -> &'static [FaultKind] {
    kinds_plus(managed, 0)
}

/// [`kinds`], and the `stranger` fault: for the engines whose [`Connect::stranger`] knows
/// where the holders' keys or znodes are (Redis, ZooKeeper, etcd).
pub fn kinds_with_stranger(managed: bool) -> &'static [FaultKind] {
    kinds_plus(managed, 1)
}

/// [`kinds_with_stranger`], and the `terminate` fault: for a SQL server whose administrator
/// can log in (the superuser of a server the harness started, or one the user names), which
/// [`Connect::terminate`] logs in as to end the holders' sessions (PostgreSQL, MariaDB).
pub fn kinds_with_terminate(managed: bool) -> &'static [FaultKind] {
    kinds_plus(managed, 2)
}

/// The fault kinds of an engine whose contenders cannot go through proxies (a Cassandra
/// driver finds the cluster's nodes itself): clock jumps, and restarts when it knows how.
pub fn kinds_without_proxies(restartable: bool) -> &'static [FaultKind] {
    if restartable {
        &[FaultKind::ClockJump, FaultKind::ServerRestart]
    } else {
        &[FaultKind::ClockJump]
    }
}

/// The fault kinds on a cluster the harness started that elects a leader (etcd, ZooKeeper, the
/// lock service): clock jumps, the leader faults but the Redis one, a paused follower and the
/// whole cluster's restart.
pub fn cluster_kinds() -> &'static [FaultKind] {
    &[
        FaultKind::ClockJump,
        FaultKind::LeaderKill,
        FaultKind::LeaderPause,
        FaultKind::LeaderCut,
        FaultKind::FollowerPause,
        FaultKind::ClusterRestart,
    ]
}

/// The fault kinds on Redis with Sentinel the harness started: clock jumps and every leader
/// fault, `lagged-leader-kill` included.
pub fn sentinel_kinds() -> &'static [FaultKind] {
    &[
        FaultKind::ClockJump,
        FaultKind::LeaderKill,
        FaultKind::LeaderPause,
        FaultKind::LeaderCut,
        FaultKind::LaggedLeaderKill,
    ]
}

/// The fault kinds on independent masters the harness started (Redlock's).
pub fn masters_kinds() -> &'static [FaultKind] {
    &[FaultKind::MasterKill, FaultKind::MasterWipe, FaultKind::MasterPause, FaultKind::MasterCut]
}

/// A cluster's members as the member faults use them: who leads, and the faults on one
/// member. One implementation for every [`test_servers::Cluster`], whatever its engine.
/// The calls block (from async code they run on `spawn_blocking`).
pub trait Members: Send + Sync {
    /// How many members.
    fn count(&self) -> usize;
    /// The member that leads, waiting up to `timeout` for the cluster to agree on one.
    fn wait_for_leader(&self, timeout: Duration) -> Result<usize, String>;
    /// Kill member `i` (`SIGKILL`).
    fn kill(&self, i: usize);
    /// Start member `i` again with its data.
    fn restart(&self, i: usize) -> Result<(), String>;
    /// Start every member again with its data, all at once.
    fn restart_all(&self) -> Result<(), String>;
    /// Start member `i` (killed) again without its data.
    fn restart_without_data(&self, i: usize) -> Result<(), String>;
    /// Hold the connections member `from` opened to member `to`.
    fn hold_link(&self, from: usize, to: usize);
    /// Let them go again.
    fn release_link(&self, from: usize, to: usize);
    /// Stop member `i` (`SIGSTOP`).
    fn pause(&self, i: usize) -> Result<(), String>;
    /// Continue member `i` (`SIGCONT`).
    fn resume(&self, i: usize) -> Result<(), String>;
    /// Cut member `i` off from its peers and its clients.
    fn cut_off(&self, i: usize);
    /// Heal member `i`.
    fn heal(&self, i: usize);
}

impl<E: test_servers::ClusterEngine> Members for test_servers::Cluster<E> {
    fn count(&self) -> usize {
        test_servers::Cluster::len(self)
    }
    fn restart_without_data(&self, i: usize) -> Result<(), String> {
        Ok(test_servers::Cluster::restart_without_data(self, i)?)
    }
    fn hold_link(&self, from: usize, to: usize) {
        test_servers::Cluster::hold_link(self, from, to)
    }
    fn release_link(&self, from: usize, to: usize) {
        test_servers::Cluster::release_link(self, from, to)
    }
    fn wait_for_leader(&self, timeout: Duration) -> Result<usize, String> {
        Ok(test_servers::Cluster::wait_for_leader(self, timeout)?)
    }
    fn kill(&self, i: usize) {
        test_servers::Cluster::kill(self, i)
    }
    fn restart(&self, i: usize) -> Result<(), String> {
        Ok(test_servers::Cluster::restart(self, i)?)
    }
    fn restart_all(&self) -> Result<(), String> {
        Ok(test_servers::Cluster::restart_all(self)?)
    }
    fn pause(&self, i: usize) -> Result<(), String> {
        Ok(test_servers::Cluster::pause(self, i)?)
    }
    fn resume(&self, i: usize) -> Result<(), String> {
        Ok(test_servers::Cluster::resume(self, i)?)
    }
    fn cut_off(&self, i: usize) {
        test_servers::Cluster::cut_off(self, i)
    }
    fn heal(&self, i: usize) {
        test_servers::Cluster::heal(self, i)
    }
}

/// How long a member fault waits for the cluster to name a leader before it gives up.
const LEADER_WAIT: Duration = Duration::from_secs(30);

/// Starts a cluster of `members` members of `engine` for a run (blocking: off the runtime's
/// threads; it returns once the cluster formed, its leader elected where it has one), and
/// returns what `address` reads off it (client addresses) with the faults on it. Errors name
/// `option`, the command-line option that asked for it.
pub async fn start_cluster<E: test_servers::ClusterEngine, A>(
    option: &str,
    engine: E,
    members: usize,
    address: fn(&test_servers::Cluster<E>) -> A,
) -> Result<(A, ServerFaults), String> {
    let launch =
        move || test_servers::Cluster::launch(engine, &test_servers::ClusterOptions::new(members));
    let cluster = tokio::task::spawn_blocking(launch)
        .await
        .map_err(|e| format!("{option}: starting the cluster panicked: {e}"))?
        .map_err(|e| format!("{option}: {e}"))?;
    let at = address(&cluster);
    Ok((at, ServerFaults::on_cluster(Arc::new(cluster))))
}

/// Faults on one server reached at `address` (an etcd endpoint list or a ZooKeeper connect
/// string; `server` when the harness started it): with a proxy per contender when `kinds` need
/// them, which only a single address allows.
pub async fn on_one_server(
    address: &str,
    server: Option<Managed>,
    kinds: &[FaultKind],
) -> Result<ServerFaults, String> {
    let upstream = if needs_proxies(kinds) {
        if address.contains(',') {
            return Err(format!(
                "pause, crash and partition faults need a single server address, not {address}"
            ));
        }
        Some(resolve(address.trim_start_matches("http://")).await?)
    } else {
        None
    };
    Ok(ServerFaults::new(upstream, server))
}

/// True when `kinds` need a proxy in front of each contender.
pub fn needs_proxies(kinds: &[FaultKind]) -> bool {
    kinds.iter().any(|k| {
        matches!(
            k,
            FaultKind::Pause | FaultKind::Crash | FaultKind::Partition | FaultKind::SilentPartition
        )
    })
}

/// A server the harness started, and can therefore restart.
pub trait Restartable: Send {
    /// Kill it (as a crash).
    fn stop(&mut self);
    /// Start it again on the same port and data directory, and wait until it answers.
    fn start_again(&mut self) -> Result<(), String>;
}

impl Restartable for RedisServer {
    fn stop(&mut self) {
        RedisServer::stop(self);
    }
    fn start_again(&mut self) -> Result<(), String> {
        Ok(self.try_start_again()?)
    }
}

impl Restartable for ZkServer {
    fn stop(&mut self) {
        ZkServer::stop(self);
    }
    fn start_again(&mut self) -> Result<(), String> {
        Ok(self.try_start_again()?)
    }
}

/// A server the user tells the harness how to stop and start: two shell commands (`sh -c`),
/// each of which must exit with status 0, the start command once the server answers.
pub struct Commanded {
    /// Stops the server.
    pub stop: String,
    /// Starts it again.
    pub start: String,
}

impl Commanded {
    fn run(what: &str, command: &str) -> Result<(), String> {
        let out = std::process::Command::new("sh")
            .args(["-c", command])
            .output()
            .map_err(|e| format!("cannot run the {what} command `{command}`: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "the {what} command `{command}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl Restartable for Commanded {
    fn stop(&mut self) {
        // A stop that fails leaves the server up; say so where the user looks.
        if let Err(e) = Commanded::run("stop", &self.stop) {
            eprintln!("server-restart: {e}");
        }
    }
    fn start_again(&mut self) -> Result<(), String> {
        Commanded::run("start", &self.start)
    }
}

/// A server the harness started for one run (stopped and removed with it).
#[derive(Clone)]
pub struct Managed(Arc<Mutex<Box<dyn Restartable>>>);

impl Managed {
    fn of(server: impl Restartable + 'static) -> Managed {
        Managed(Arc::new(Mutex::new(Box::new(server))))
    }

    /// Starts a server with `launch` (blocking: off the runtime's threads); returns it with
    /// the address `address` reads off it (a URL or connect string).
    pub async fn start<S: Restartable + 'static>(
        launch: impl FnOnce() -> Result<S, String> + Send + 'static,
        address: fn(&S) -> String,
    ) -> Result<(Managed, String), String> {
        let server = tokio::task::spawn_blocking(launch)
            .await
            .map_err(|e| format!("starting the server panicked: {e}"))??;
        let at = address(&server);
        Ok((Managed::of(server), at))
    }

    /// A server the user restarts with commands.
    pub fn commanded(commands: Commanded) -> Managed {
        Managed::of(commands)
    }

    async fn with(
        &self,
        f: impl FnOnce(&mut dyn Restartable) -> Result<(), String> + Send + 'static,
    ) -> Result<(), String> {
        let me = Arc::clone(&self.0);
        tokio::task::spawn_blocking(move || {
            f(me.lock().unwrap_or_else(|e| e.into_inner()).as_mut())
        })
        .await
        .map_err(|e| format!("restarting the server panicked: {e}"))?
    }
}

/// The faults of one opened server engine.
pub struct ServerFaults {
    /// Where proxies forward to, when contenders go through proxies.
    upstream: Option<SocketAddr>,
    proxies: Mutex<BTreeMap<String, Proxy>>,
    jumps: Mutex<BTreeMap<String, ClockJump>>,
    server: Option<Managed>,
    /// The cluster the harness started, for the member faults.
    cluster: Option<Arc<dyn Members>>,
    /// The member the running member fault hit, and how many master faults were made (the
    /// next one hits the next master).
    hit: Arc<Mutex<Hit>>,
}

impl ServerFaults {
    /// Faults for a server at `upstream`: contenders go through proxies when `upstream` is
    /// given; `server` when the harness started it.
    pub fn new(upstream: Option<SocketAddr>, server: Option<Managed>) -> Self {
        ServerFaults {
            upstream,
            proxies: Mutex::default(),
            jumps: Mutex::default(),
            server,
            cluster: None,
            hit: Arc::default(),
        }
    }

    /// Faults on a cluster the harness started: clock jumps and the member faults.
    pub fn on_cluster(cluster: Arc<dyn Members>) -> Self {
        ServerFaults { cluster: Some(cluster), ..ServerFaults::new(None, None) }
    }

    /// Where contender `owner` connects: a proxy of its own when contenders go through
    /// proxies (`None`: straight to the server).
    pub async fn route(&self, owner: &str) -> Result<Option<SocketAddr>, String> {
        let Some(upstream) = self.upstream else {
            return Ok(None);
        };
        let proxy = Proxy::try_start(upstream)
            .await
            .map_err(|e| format!("cannot start a proxy for contender {owner}: {e}"))?;
        let addr = proxy.addr();
        lock(&self.proxies).insert(owner.to_string(), proxy);
        Ok(Some(addr))
    }

    /// Contender `spec`'s locker of `algorithm` from `entries`: its clock carries a step the
    /// nemesis moves, and it connects with `connect`, through its own proxy when contenders go
    /// through proxies (`Some(proxy address)`) or straight to the server (`None`).
    pub fn contender<'a, C, F>(
        &'a self,
        entries: &'static [super::algorithm::Entry<C>],
        algorithm: &'static super::Algorithm,
        spec: super::ContenderSpec,
        settings: &'a super::algorithm::AlgorithmSettings,
        connect: impl FnOnce(Option<SocketAddr>) -> F + Send + 'a,
    ) -> BoxFuture<'a, Result<crate::primitive::Asking, String>>
    where
        C: Send + 'static,
        F: std::future::Future<Output = Result<C, String>> + Send + 'a,
    {
        let jump = self.jump(&spec.owner);
        Box::pin(async move {
            let via = self.route(&spec.owner).await?;
            super::server_contender(entries, algorithm, connect(via), spec, settings, jump).await
        })
    }

    /// A clock step for contender `owner`, which the nemesis moves.
    pub fn jump(&self, owner: &str) -> ClockJump {
        let jump = ClockJump::new();
        lock(&self.jumps).insert(owner.to_string(), jump.clone());
        jump
    }

    /// Takes one step of a fault.
    pub fn inject<'a>(&'a self, injection: Injection<'a>) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            match injection {
                Injection::Freeze { owner, on } => {
                    self.proxy(owner, |p| if on { p.pause() } else { p.resume() })
                }
                Injection::Partition { owner, on } => {
                    self.proxy(owner, |p| if on { p.cut() } else { p.heal() })
                }
                Injection::Kill { owner } => self.proxy(owner, |p| {
                    p.resume();
                    p.cut();
                }),
                Injection::ClockJump { owner, by_us } => match lock(&self.jumps).get(owner) {
                    Some(jump) => {
                        jump.jump(by_us);
                        Ok(())
                    }
                    None => Err(format!("no contender {owner} to step the clock of")),
                },
                Injection::ServerRestart { on } => match &self.server {
                    Some(server) if on => {
                        server
                            .with(|s| {
                                s.stop();
                                Ok(())
                            })
                            .await
                    }
                    Some(server) => server.with(|s| s.start_again()).await,
                    None => Err("server-restart needs a server the harness started itself".into()),
                },
                Injection::Member { kind, on } => self.member_fault(kind, on).await,
                Injection::KillHitMember => self.kill_hit_member().await,
                other => Err(format!("a server engine cannot inject {other:?}")),
            }
        })
    }

    /// Hits one member with `kind` (`on`): the one that leads now, or the next master; or
    /// undoes it on the member hit.
    async fn member_fault(&self, kind: FaultKind, on: bool) -> Result<(), String> {
        let Some(cluster) = self.cluster.clone() else {
            return Err(format!(
                "{kind} needs a cluster the harness started itself (--spawn-etcd=3, --spawn-zookeeper=3, --spawn-service=3, --spawn-redis=sentinel, --spawn-redlock)"
            ));
        };
        let hit = Arc::clone(&self.hit);
        tokio::task::spawn_blocking(move || {
            let m = cluster.as_ref();
            if on {
                let i = lock(&hit).pick(m, kind)?;
                return hit_member(m, kind, i);
            }
            let Some(i) = lock(&hit).member.take() else {
                return Err(format!("cannot heal {kind}: it hit no member"));
            };
            heal_member(m, kind, i)
        })
        .await
        .map_err(|e| format!("the {kind} fault panicked: {e}"))?
    }

    /// Kills the member the running member fault hit.
    async fn kill_hit_member(&self) -> Result<(), String> {
        let (Some(cluster), Some(i)) = (self.cluster.clone(), lock(&self.hit).member) else {
            return Err("no member fault is running: nothing to kill".into());
        };
        tokio::task::spawn_blocking(move || cluster.kill(i))
            .await
            .map_err(|e| format!("killing member {i} panicked: {e}"))
    }

    fn proxy(&self, owner: &str, f: impl FnOnce(&Proxy)) -> Result<(), String> {
        match lock(&self.proxies).get(owner) {
            Some(p) => {
                f(p);
                Ok(())
            }
            None => {
                Err(format!("contender {owner} has no proxy (the run has no contender faults)"))
            }
        }
    }
}

/// A client of `C`'s engine, or why it could not be connected.
pub type Connected<C> = Result<<<C as Connect>::Engine as Describe>::Client, String>;

/// Where a contender connects: through its proxy (`Some`), or straight to the server.
pub type Via = Option<SocketAddr>;

/// How a server engine connects one contender: straight to the server (`via` is `None`) or
/// through its proxy, with the run's settings, reporting its requests to a hook; and the
/// algorithms that run on that client.
pub trait Connect: Send + Sync + 'static {
    /// The engine: its client (connection, session, lease) and the algorithms on that client.
    type Engine: Describe;
    /// A new client whose lock crate reports each request it sends to `requests`, or an error
    /// naming the server and what was tried.
    fn connect(
        &self,
        via: Via,
        requests: RequestHook,
    ) -> impl std::future::Future<Output = Connected<Self>> + Send + '_;
    /// The kind a request of its lock crate is counted as (its command mapped onto reads,
    /// writes, deletes and conditional writes).
    fn kind(request: &Request<'_>) -> Kind;
    /// The command, as its lock crate reports it, that opens a session on the server (a
    /// ZooKeeper session's `connect`, an etcd `LeaseGrant`, a lock-service `Open`): each one
    /// counts as a session the run opened; `None` for an engine without sessions to count.
    const OPENS_SESSION: Option<&'static str> = None;
    /// The `stranger` fault ([`super::OpenEngine::stranger`]): a client of its own with no
    /// credentials deletes the holder's key or znode of every lock under the run's root.
    fn stranger(&self) -> impl std::future::Future<Output = Result<String, String>> + Send + '_ {
        async { Err("this engine has no stranger (--faults stranger)".to_string()) }
    }
    /// The `terminate` fault ([`super::OpenEngine::terminate`]): the server's administrator
    /// ends the session holding each of the run's locks that is held.
    fn terminate(&self) -> impl std::future::Future<Output = Result<String, String>> + Send + '_ {
        async { Err("this engine has no administrator (--faults terminate)".to_string()) }
    }
}

/// What a stranger did, for the fault log: `deleted N` (holders' keys or znodes), `refused:
/// why` (every attempt refused), or `none held`.
pub fn stranger_outcome(deleted: usize, refused: Option<String>) -> String {
    match (deleted, refused) {
        (0, Some(why)) => format!("refused: {}", short_reason(&why)),
        (0, None) => "none held".to_string(),
        (n, _) => format!("deleted {n}"),
    }
}

/// What an administrator did, for the fault log: `ended N` (sessions holding the run's locks),
/// `none held`, or `failed: why` (it could not log in, or the server refused the statement).
pub fn terminate_outcome(ended: Result<usize, String>) -> String {
    match ended {
        Ok(0) => "none held".to_string(),
        Ok(n) => format!("ended {n}"),
        Err(why) => format!("failed: {}", short_reason(&why)),
    }
}

/// A server's refusal in a few words for a CSV field: the message inside a gRPC error's
/// `message: "…"` when there is one, without commas or quotes, at most 60 characters.
fn short_reason(why: &str) -> String {
    let inner = match why.split_once("message: \"") {
        Some((_, m)) => m.split('"').next().unwrap_or(m),
        None => why,
    };
    let clean: String =
        inner.chars().map(|c| if matches!(c, ',' | '"' | '\n' | '\r') { ' ' } else { c }).collect();
    clean.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(60).collect()
}

/// A server engine opened for one run: every contender gets a client of its own from `C`,
/// through a proxy of its own when the run has contender faults, or with `--sessions N` a
/// clone of shared client `i % N` (connected once, straight to the server: a run with shared
/// clients has no per-contender proxies); its requests counted; faults go to [`ServerFaults`].
pub struct Opened<C: Connect> {
    connector: C,
    settings: super::AlgorithmSettings,
    faults: ServerFaults,
    counter: Arc<RequestCounter>,
    /// The shared clients made so far, by session index.
    shared: tokio::sync::Mutex<BTreeMap<usize, Client<C>>>,
}

/// The client type of `C`'s engine.
type Client<C> = <<C as Connect>::Engine as Describe>::Client;

impl<C: Connect> Opened<C> {
    /// Opens the engine after one probe connection, whose requests are not counted: an
    /// unreachable server fails here, once. The contenders' requests are counted from here
    /// on, their connections' too (each lock crate's docs say what one costs).
    pub async fn probe(
        connector: C,
        settings: super::AlgorithmSettings,
        faults: ServerFaults,
    ) -> Result<Box<dyn super::OpenEngine>, String> {
        connector.connect(None, RequestHook::none()).await?;
        let counter = Arc::new(RequestCounter::default());
        Ok(Box::new(Opened { connector, settings, faults, counter, shared: Default::default() }))
    }

    /// Shared client `session`, connected (through `via`, which is the server itself in a run
    /// with shared clients) the first time a contender asks for it.
    async fn shared_client(&self, session: usize, via: Via, requests: RequestHook) -> Connected<C> {
        let mut shared = self.shared.lock().await;
        if let Some(client) = shared.get(&session) {
            return Ok(client.clone());
        }
        let client = self.connector.connect(via, requests).await?;
        shared.insert(session, client.clone());
        Ok(client)
    }
}

impl<C: Connect> super::OpenEngine for Opened<C> {
    fn contender(
        &self,
        algorithm: &'static super::Algorithm,
        spec: super::ContenderSpec,
    ) -> super::Contending<'_> {
        let requests = self.counter.hook(C::kind, C::OPENS_SESSION);
        let entries = C::Engine::ENTRIES;
        match spec.session {
            None => self.faults.contender(entries, algorithm, spec, &self.settings, move |via| {
                self.connector.connect(via, requests)
            }),
            Some(session) => {
                self.faults.contender(entries, algorithm, spec, &self.settings, move |via| {
                    self.shared_client(session, via, requests)
                })
            }
        }
    }

    fn counters(&self) -> Option<super::CounterHandle> {
        let counter = self.counter.clone();
        Some(Arc::new(move || counter.snapshot()))
    }

    fn sessions_opened(&self) -> Option<super::SessionCount> {
        let counter = self.counter.clone();
        C::OPENS_SESSION.map(|_| Arc::new(move || counter.sessions()) as super::SessionCount)
    }

    fn inject<'a>(&'a self, injection: Injection<'a>) -> BoxFuture<'a, Result<(), String>> {
        self.faults.inject(injection)
    }

    fn stranger(&self) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(self.connector.stranger())
    }

    fn terminate(&self) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(self.connector.terminate())
    }
}

/// Which member the running member fault hit, and how many master faults were made.
#[derive(Default)]
struct Hit {
    member: Option<usize>,
    masters_hit: usize,
}

impl Hit {
    /// The member `kind` hits now (remembered for its undo): the leader, the member after
    /// the leader (a follower), the next master; member 0 for the whole cluster.
    fn pick(&mut self, m: &dyn Members, kind: FaultKind) -> Result<usize, String> {
        let i = match kind {
            FaultKind::ClusterRestart => 0,
            FaultKind::FollowerPause => (m.wait_for_leader(LEADER_WAIT)? + 1) % m.count().max(1),
            k if FaultKind::LEADER.contains(&k) => m.wait_for_leader(LEADER_WAIT)?,
            _ => {
                self.masters_hit += 1;
                (self.masters_hit - 1) % m.count().max(1)
            }
        };
        self.member = Some(i);
        Ok(i)
    }
}

/// The start of member fault `kind` on member `i`.
fn hit_member(m: &dyn Members, kind: FaultKind, i: usize) -> Result<(), String> {
    match kind {
        FaultKind::LeaderPause | FaultKind::MasterPause | FaultKind::FollowerPause => m.pause(i)?,
        FaultKind::ClusterRestart => (0..m.count()).for_each(|j| m.kill(j)),
        FaultKind::LeaderCut | FaultKind::MasterCut => m.cut_off(i),
        // The others' links to it (a Redis replica's replication link) are held, so what it
        // acknowledges from now on reaches none of them; the nemesis kills it next
        // ([`super::Injection::KillHitMember`]).
        FaultKind::LaggedLeaderKill => {
            for r in (0..m.count()).filter(|r| *r != i) {
                m.hold_link(r, i);
            }
        }
        _ => m.kill(i),
    }
    Ok(())
}

/// The end of member fault `kind` on member `i`, the member its start hit.
fn heal_member(m: &dyn Members, kind: FaultKind, i: usize) -> Result<(), String> {
    match kind {
        FaultKind::LeaderPause | FaultKind::MasterPause | FaultKind::FollowerPause => m.resume(i),
        FaultKind::ClusterRestart => m.restart_all(),
        FaultKind::LeaderCut | FaultKind::MasterCut => {
            m.heal(i);
            Ok(())
        }
        FaultKind::MasterWipe => m.restart_without_data(i),
        FaultKind::LaggedLeaderKill => {
            // Released before the restart: a replica that still follows the dead master gets
            // the held bytes and its end of stream, and reconnects to whoever leads now.
            for r in (0..m.count()).filter(|r| *r != i) {
                m.release_link(r, i);
            }
            m.restart(i)
        }
        _ => m.restart(i),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The first `host:port` of a connect string or URL authority, resolved.
pub async fn resolve(host_port: &str) -> Result<SocketAddr, String> {
    tokio::net::lookup_host(host_port)
        .await
        .map_err(|e| format!("cannot resolve {host_port}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host_port} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strangers_outcome_fits_a_csv_field() {
        let etcd = "grpc request error: code: 'Client specified an invalid argument', \
                    message: \"etcdserver: user name is empty\", details: []";
        assert_eq!(
            stranger_outcome(0, Some(etcd.into())),
            "refused: etcdserver: user name is empty"
        );
        assert_eq!(
            stranger_outcome(0, Some("\"NOAUTH\": Authentication required.".into())),
            "refused: NOAUTH : Authentication required."
        );
        assert_eq!(stranger_outcome(2, Some("x".into())), "deleted 2");
        assert_eq!(stranger_outcome(0, None), "none held");
    }

    #[test]
    fn an_administrators_outcome_fits_a_csv_field() {
        assert_eq!(terminate_outcome(Ok(2)), "ended 2");
        assert_eq!(terminate_outcome(Ok(0)), "none held");
        let denied = "ERROR 1095 (HY000): You are not owner of thread 7, \"bench\"";
        assert_eq!(
            terminate_outcome(Err(denied.into())),
            "failed: ERROR 1095 (HY000): You are not owner of thread 7 bench"
        );
    }
}
