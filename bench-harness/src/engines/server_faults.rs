//! Faults on a real server, for the engines that talk to one (Redis, ZooKeeper).
//!
//! - **Contender faults** (`pause`, `crash`, `partition`): each contender reaches the server
//!   through a TCP proxy of its own ([`test_servers::Proxy`]) when the run has such faults, so
//!   that one contender can be hit without the others. `pause` holds every byte both ways (its
//!   lease renewals and session pings stall, as in a stopped process); `partition` closes its
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
//! - **Leader faults** (`leader-kill`, `leader-pause`, `leader-cut`): for a cluster the
//!   harness started (`--spawn-etcd 3`, `--spawn-zookeeper 3`): the member that leads when the
//!   fault starts ([`Members::wait_for_leader`]: etcd's member status, ZooKeeper's `srvr`) is killed and
//!   restarted with its data, stopped and continued, or cut off from its peers and clients and
//!   healed; the undo goes to that same member, whoever leads by then. The contenders reach
//!   the cluster through its members' client proxies (every member's, as the client library
//!   takes them), not through proxies of their own: contender faults need a single server.
//!
//! Runs without these faults connect straight to the server: the proxy hop is never measured
//! unless a fault needs it.

use super::{BoxFuture, Injection};
use crate::faults::FaultKind;
use lock_core::time::ClockJump;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use test_servers::{Proxy, RedisServer, ZkServer};

/// The fault kinds a server engine can inject: `managed` when the harness started the server.
pub fn kinds(managed: bool) -> &'static [FaultKind] {
    const CONTENDER: [FaultKind; 4] =
        [FaultKind::Pause, FaultKind::Crash, FaultKind::ClockJump, FaultKind::Partition];
    const ALL: [FaultKind; 5] = [
        FaultKind::Pause,
        FaultKind::Crash,
        FaultKind::ClockJump,
        FaultKind::Partition,
        FaultKind::ServerRestart,
    ];
    if managed {
        &ALL
    } else {
        &CONTENDER
    }
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

/// The fault kinds on a cluster the harness started: clock jumps and the leader faults.
pub fn cluster_kinds() -> &'static [FaultKind] {
    &[FaultKind::ClockJump, FaultKind::LeaderKill, FaultKind::LeaderPause, FaultKind::LeaderCut]
}

/// A cluster's members as the leader faults use them: who leads, and the faults on one
/// member. One implementation for every [`test_servers::Cluster`], whatever its engine.
/// The calls block (from async code they run on `spawn_blocking`).
pub trait Members: Send + Sync {
    /// The member that leads, waiting up to `timeout` for the cluster to agree on one.
    fn wait_for_leader(&self, timeout: std::time::Duration) -> Result<usize, String>;
    /// Kill member `i` (`SIGKILL`).
    fn kill(&self, i: usize);
    /// Start member `i` again with its data.
    fn restart(&self, i: usize) -> Result<(), String>;
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
    fn wait_for_leader(&self, timeout: std::time::Duration) -> Result<usize, String> {
        test_servers::Cluster::wait_for_leader(self, timeout)
    }
    fn kill(&self, i: usize) {
        test_servers::Cluster::kill(self, i)
    }
    fn restart(&self, i: usize) -> Result<(), String> {
        test_servers::Cluster::restart(self, i)
    }
    fn pause(&self, i: usize) -> Result<(), String> {
        test_servers::Cluster::pause(self, i)
    }
    fn resume(&self, i: usize) -> Result<(), String> {
        test_servers::Cluster::resume(self, i)
    }
    fn cut_off(&self, i: usize) {
        test_servers::Cluster::cut_off(self, i)
    }
    fn heal(&self, i: usize) {
        test_servers::Cluster::heal(self, i)
    }
}

/// How long a leader fault waits for the cluster to name a leader before it gives up.
const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts a cluster with `launch` (blocking: off the runtime's threads), waits until it has a
/// leader, and returns it shared with the client addresses `address` reads off it.
pub async fn start_cluster<M: Members + 'static>(
    launch: impl FnOnce() -> Result<M, String> + Send + 'static,
    address: fn(&M) -> String,
) -> Result<(Arc<dyn Members>, String), String> {
    let cluster = tokio::task::spawn_blocking(move || {
        let cluster = launch()?;
        cluster.wait_for_leader(LEADER_WAIT)?;
        Ok::<_, String>(cluster)
    })
    .await
    .map_err(|e| format!("starting the cluster panicked: {e}"))??;
    let at = address(&cluster);
    Ok((Arc::new(cluster), at))
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
    kinds.iter().any(|k| matches!(k, FaultKind::Pause | FaultKind::Crash | FaultKind::Partition))
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
        self.try_start_again()
    }
}

impl Restartable for ZkServer {
    fn stop(&mut self) {
        ZkServer::stop(self);
    }
    fn start_again(&mut self) -> Result<(), String> {
        self.try_start_again()
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
    /// The cluster the harness started, for the leader faults.
    cluster: Option<Arc<dyn Members>>,
    /// The member the running leader fault hit.
    hit: Arc<Mutex<Option<usize>>>,
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

    /// Faults on a cluster the harness started: clock jumps and the leader faults.
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
    ) -> BoxFuture<'a, Result<Arc<dyn lock_core::Locker>, String>>
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
                Injection::Leader { kind, on } => self.leader_fault(kind, on).await,
                other => Err(format!("a server engine cannot inject {other:?}")),
            }
        })
    }

    /// Hits the member that leads now with `kind` (`on`), or undoes it on the member hit.
    async fn leader_fault(&self, kind: FaultKind, on: bool) -> Result<(), String> {
        let Some(cluster) = self.cluster.clone() else {
            return Err(format!(
                "{kind} needs a cluster the harness started itself (--spawn-etcd 3, --spawn-zookeeper 3)"
            ));
        };
        let hit = Arc::clone(&self.hit);
        tokio::task::spawn_blocking(move || {
            let m = cluster.as_ref();
            if on {
                let i = m.wait_for_leader(LEADER_WAIT)?;
                *lock(&hit) = Some(i);
                match kind {
                    FaultKind::LeaderKill => m.kill(i),
                    FaultKind::LeaderPause => m.pause(i)?,
                    _ => m.cut_off(i),
                }
                return Ok(());
            }
            let Some(i) = lock(&hit).take() else {
                return Err(format!("cannot heal {kind}: it hit no member"));
            };
            match kind {
                FaultKind::LeaderKill => m.restart(i),
                FaultKind::LeaderPause => m.resume(i),
                _ => {
                    m.heal(i);
                    Ok(())
                }
            }
        })
        .await
        .map_err(|e| format!("the {kind} fault panicked: {e}"))?
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

/// How a server engine connects one contender: straight to the server (`via` is `None`) or
/// through its proxy, with the run's settings; and the algorithms that run on that client.
pub trait Connect: Send + Sync + 'static {
    /// A contender's client (connection, session, lease).
    type Client: Send + 'static;
    /// The engine's algorithms on that client.
    fn entries() -> &'static [super::algorithm::Entry<Self::Client>];
    /// A new client, or an error naming the server and what was tried.
    fn connect(&self, via: Option<SocketAddr>) -> BoxFuture<'_, Result<Self::Client, String>>;
}

/// A server engine opened for one run: every contender gets a client of its own from `C`,
/// through a proxy of its own when the run has contender faults; faults go to
/// [`ServerFaults`]. Such clients expose no request counts.
pub struct Opened<C> {
    connector: C,
    settings: super::AlgorithmSettings,
    faults: ServerFaults,
}

impl<C: Connect> Opened<C> {
    /// Opens the engine after one probe connection: an unreachable server fails here, once.
    pub async fn probe(
        connector: C,
        settings: super::AlgorithmSettings,
        faults: ServerFaults,
    ) -> Result<Box<dyn super::OpenEngine>, String> {
        connector.connect(None).await?;
        Ok(Box::new(Opened { connector, settings, faults }))
    }
}

impl<C: Connect> super::OpenEngine for Opened<C> {
    fn contender<'a>(
        &'a self,
        algorithm: &'static super::Algorithm,
        spec: super::ContenderSpec,
    ) -> BoxFuture<'a, Result<Arc<dyn lock_core::Locker>, String>> {
        self.faults.contender(C::entries(), algorithm, spec, &self.settings, move |via| {
            self.connector.connect(via)
        })
    }

    fn counters(&self) -> Option<super::CounterHandle> {
        None
    }

    fn inject<'a>(&'a self, injection: Injection<'a>) -> BoxFuture<'a, Result<(), String>> {
        self.faults.inject(injection)
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
