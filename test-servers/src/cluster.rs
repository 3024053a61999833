//! One shape for every engine: a [`Cluster`] of member processes behind proxies, and the
//! [`Server`] of one member without them; the engine's own part is a [`ClusterEngine`].
//!
//! **Where the traffic goes.** Each member listens on its ports (by role: clients', peers',
//! ...) at loopback ports of its own, and for each of them a [`Proxy`] listens at another
//! port. Everyone reaches a member only at its proxies' ports, the [`Layout`]'s `reach`
//! ports: clients, and the other members, whose configurations name the proxies (etcd's
//! advertised peer URLs, ZooKeeper's `server.N` lines, Redis's `replicaof` and announced
//! ports). Each proxy can tell which member opened each of its connections (the kernel's socket
//! tables, [`crate::origin`]; asked only while a fault depends on it), so that:
//!
//! - [`Cluster::cut_off`] closes, and refuses, every connection to the member's proxies and
//!   every connection the member opens to the others': it is cut off from its peers and its
//!   clients in both directions, whichever side dialled (etcd's peers each dial the other, so
//!   cutting only the connections *to* a member would not isolate it: its messages would
//!   still go out over the connections it dialled, and come in over the ones its peers did);
//! - [`Cluster::hold_link`] holds only the bytes of the connections one member opened to
//!   another (a Redis replica's replication link to its master), and nobody else's.
//!
//! **Processes.** Every member runs in a data directory of its own under the cluster's; all
//! are killed and the directories removed when the cluster is dropped (on a panic too), and
//! killed by the kernel if the test binary dies first (see [`crate::process`]).

use crate::origin::Origins;
use crate::process::{free_port, temp_dir, try_with_retries, Launch, Process};
use crate::proxy::{Link, Proxy, Rewrite};
use crate::ServerError;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where the members of a cluster listen and where they are reached: two loopback ports per
/// member and port role, the one its process listens on and the one everyone else connects
/// to (its proxy's; the same port for a [`Server`], which has no proxies).
pub struct Layout {
    listen: Vec<Vec<u16>>,
    reach: Vec<Vec<u16>>,
    token: String,
}

impl Layout {
    /// How many members.
    pub fn members(&self) -> usize {
        self.listen.len()
    }

    /// The port member `member`'s process listens on for role `role` (an index into the
    /// engine's [`ClusterEngine::PORTS`]).
    pub fn listen(&self, member: usize, role: usize) -> u16 {
        self.listen[member][role]
    }

    /// The port everyone else reaches member `member` at for role `role`.
    pub fn reach(&self, member: usize, role: usize) -> u16 {
        self.reach[member][role]
    }

    /// A name of this cluster unique on the machine (etcd's cluster token), so that two
    /// clusters never take each other's members.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Fresh, distinct loopback ports for `members` × `roles` listeners.
    pub(crate) fn fresh_ports(
        members: usize,
        roles: usize,
        taken: &mut BTreeSet<u16>,
    ) -> Vec<Vec<u16>> {
        (0..members)
            .map(|_| {
                (0..roles)
                    .map(|_| loop {
                        // Two probes can return the same just-freed port.
                        let p = free_port();
                        if taken.insert(p) {
                            break p;
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

/// How a member is being started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// With the others, the first time: the cluster forms.
    New,
    /// Alone, into a cluster that runs, after its data was wiped
    /// ([`Cluster::restart_without_data`]).
    Rejoin,
}

/// An engine's part of a cluster: how a member is configured and started, and how the cluster
/// says who leads. Everything else (ports, proxies, processes, faults) is [`Cluster`]'s.
pub trait ClusterEngine: Send + Sync + Sized + 'static {
    /// How a member's process is spawned and recognised as ready (on its first port).
    const LAUNCH: &'static Launch;
    /// The kind of server in data directory names (`lockbench-<KIND>-...`; no `-` in it).
    const KIND: &'static str;
    /// The ports a member listens on, by role; the first is the clients' (and the one
    /// [`ClusterEngine::LAUNCH`] probes).
    const PORTS: &'static [&'static str];
    /// How long a cluster has to form unless told otherwise ([`ClusterOptions::deadline`]).
    const FORMATION: Duration;

    /// What must be there before anything starts, beyond the program (ZooKeeper's jars).
    fn check(&self) -> Result<(), ServerError> {
        Ok(())
    }

    /// Write member `member`'s configuration into `dir` (its own directory, where it runs
    /// and keeps its log) and return the command that starts it; the process listens on
    /// `layout.listen(member, ..)` and names the others at `layout.reach(..)`.
    fn command(
        &self,
        layout: &Layout,
        member: usize,
        dir: &Path,
        start: Start,
    ) -> Result<Command, ServerError>;

    /// Remove a member's data from its directory (for [`Cluster::restart_without_data`]),
    /// keeping its configuration. Default: the directory `data`, made again empty.
    fn wipe(&self, dir: &Path) -> std::io::Result<()> {
        let data = dir.join("data");
        if data.exists() {
            std::fs::remove_dir_all(&data)?;
        }
        std::fs::create_dir_all(data)
    }

    /// Before member `member` (killed) restarts without its data: make the others forget it,
    /// where the engine refuses a member that lost what it acknowledged (an etcd member's id
    /// with an empty Raft log makes etcd panic, so etcd removes the member and adds it again
    /// as a new one). Default: nothing to do.
    fn forget(&self, cluster: &Cluster<Self>, member: usize) -> Result<(), ServerError> {
        let _ = (cluster, member);
        Ok(())
    }

    /// Look at the first bytes a connection through the proxy of port `role` carries and
    /// say whether to rewrite them (called with more bytes until it decides). Default: keep.
    fn rewrite(&self, layout: &Layout, role: usize, first: &[u8]) -> Rewrite {
        let _ = (layout, role, first);
        Rewrite::Keep
    }

    /// The processes that serve beside the members (Redis's Sentinels), started once every
    /// member answers. Default: none.
    fn companions(&self, cluster: &Cluster<Self>) -> Result<Vec<Companion>, ServerError> {
        let _ = cluster;
        Ok(Vec::new())
    }

    /// Who leads, as the cluster itself says (its members, its Sentinels); `None` while it
    /// elects, or when nothing leads.
    fn leader(&self, cluster: &Cluster<Self>) -> Option<usize>;

    /// Whether the cluster has formed; otherwise what it still lacks
    /// ([`ServerError::NotReady`]) or what failed. Default: a leader.
    fn formed(&self, cluster: &Cluster<Self>) -> Result<(), ServerError> {
        let lacking = || ServerError::NotReady("no leader elected".into());
        self.leader(cluster).map(|_| ()).ok_or_else(lacking)
    }
}

/// How to start a [`Cluster`].
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// How many members (servers that store data; not counting Sentinels).
    pub members: usize,
    /// How long it has to form (every member answers, and the engine's
    /// [`ClusterEngine::formed`]); default, the engine's [`ClusterEngine::FORMATION`].
    pub deadline: Option<Duration>,
    /// The members' program instead of the engine's (a build that is not on `PATH`).
    pub program: Option<PathBuf>,
}

impl ClusterOptions {
    /// `members` members, the engine's deadline and program.
    pub fn new(members: usize) -> ClusterOptions {
        ClusterOptions { members, deadline: None, program: None }
    }
}

/// A process that serves beside a cluster's members (a Redis Sentinel): started once the
/// members answer, killed with the cluster; it has no proxies and no faults, and reaches the
/// members at their proxies like any client.
pub struct Companion {
    /// How it is spawned and recognised as ready.
    pub launch: &'static Launch,
    /// Its name in messages ("Sentinel 2").
    pub label: String,
    /// Its own directory, inside the cluster's [`Cluster::root`]: it runs and logs there.
    pub dir: PathBuf,
    /// The loopback port it answers on.
    pub port: u16,
    /// What starts it.
    pub command: Command,
}

/// The faults in force, from which every proxy's links follow.
#[derive(Default)]
struct Faults {
    cut_off: BTreeSet<usize>,
    /// `(from, to)`: the connections `from` opened to `to` are held.
    held: BTreeSet<(usize, usize)>,
}

impl Faults {
    /// The links of the proxies of member `to` in a cluster of `n`, by origin (see
    /// [`Proxy::set_links`]).
    fn links_to(&self, to: usize, n: usize) -> Vec<Link> {
        let mut links = vec![if self.cut_off.contains(&to) { Link::Cut } else { Link::Open }];
        for from in 0..n {
            links.push(if self.cut_off.contains(&to) || self.cut_off.contains(&from) {
                Link::Cut
            } else if self.held.contains(&(from, to)) {
                Link::Held
            } else {
                Link::Open
            });
        }
        links
    }
}

struct Member {
    process: Process,
    paused: bool,
}

/// A cluster of `n` server processes of one engine on loopback, each behind its proxies (see
/// the module docs): started formed (every member answers, a leader is elected), stopped
/// and cleaned up when dropped. Every fault is one call: [`Cluster::kill`],
/// [`Cluster::restart`], [`Cluster::restart_without_data`], [`Cluster::pause`] /
/// [`Cluster::resume`], [`Cluster::cut_off`] / [`Cluster::heal`], [`Cluster::hold_link`] /
/// [`Cluster::release_link`]; [`Cluster::leader`] says who leads.
///
/// Its methods block the calling thread (from async code, call them in `spawn_blocking`);
/// they take `&self`, so one cluster can be shared between threads. Members are numbered
/// from 0.
pub struct Cluster<E: ClusterEngine> {
    engine: Arc<E>,
    layout: Arc<Layout>,
    members: Vec<Mutex<Member>>,
    /// What runs beside the members ([`ClusterEngine::companions`]).
    companions: Vec<Process>,
    /// `proxies[i][role]`: member `i`'s.
    proxies: Vec<Vec<Proxy>>,
    origins: Arc<Origins>,
    faults: Mutex<Faults>,
    root: PathBuf,
    /// The members' program, when not the engine's ([`ClusterOptions::program`]).
    program: Option<PathBuf>,
    /// Runs the proxies (a worker thread per core); shut down after the members are dead.
    runtime: Option<tokio::runtime::Runtime>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<E: ClusterEngine> Cluster<E> {
    /// Start a cluster of `engine` and wait until it formed, or return why it could not
    /// (naming the member, and what to install when a program is missing), within the
    /// options' deadline; nothing is left running on failure. A port taken by someone else
    /// meanwhile costs another try on other ports (3 in all).
    pub fn launch(engine: E, options: &ClusterOptions) -> Result<Self, ServerError> {
        engine.check()?;
        let engine = Arc::new(engine);
        let mut last = Self::try_launch(engine.clone(), options);
        for _ in 1..3 {
            match last {
                Err(e) if e.is_port_taken() => last = Self::try_launch(engine.clone(), options),
                other => return other,
            }
        }
        last
    }

    fn try_launch(engine: Arc<E>, options: &ClusterOptions) -> Result<Self, ServerError> {
        let n = options.members;
        let name = E::LAUNCH.name;
        if n == 0 {
            return Err(ServerError::Invalid(format!(
                "a {name} cluster needs at least one member"
            )));
        }
        let started = Instant::now();
        let deadline = started + options.deadline.unwrap_or(E::FORMATION);
        // Forwarding for hundreds of clients wants every core; the blocking pool only ever
        // runs one scan of the socket tables at a time (see `crate::origin`).
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .max_blocking_threads(2)
            .thread_name(format!("{}-proxies", E::KIND))
            .enable_all()
            .build()
            .map_err(|e| ServerError::io(format!("start the {name} cluster's proxy runtime"), e))?;
        let root = temp_dir(E::KIND);
        let roles = E::PORTS.len();
        // The proxies' listeners first: their ports are bound, so the members' own ports,
        // probed next, cannot collide with them.
        let listeners: Vec<Vec<std::net::TcpListener>> = (0..n)
            .map(|_| (0..roles).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect())
            .collect::<Result<_, _>>()
            .map_err(|e| ServerError::io(format!("bind a proxy port for the {name} cluster"), e))?;
        let reach: Vec<Vec<u16>> = listeners
            .iter()
            .map(|l| l.iter().map(|l| l.local_addr().map(|a| a.port()).unwrap_or(0)).collect())
            .collect();
        let mut taken = reach.iter().flatten().copied().collect();
        let listen = Layout::fresh_ports(n, roles, &mut taken);
        let token = root.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let layout = Arc::new(Layout { listen, reach, token });
        let origins = Arc::new(Origins::default());
        let mut proxies = Vec::new();
        for (i, member) in listeners.into_iter().enumerate() {
            let mut own = Vec::new();
            for (role, listener) in member.into_iter().enumerate() {
                let upstream = SocketAddr::from(([127, 0, 0, 1], layout.listen(i, role)));
                let (e, l) = (engine.clone(), layout.clone());
                let proxy = Proxy::spawn(
                    runtime.handle(),
                    listener,
                    upstream,
                    Some(origins.clone()),
                    Some(Arc::new(move |first: &[u8]| e.rewrite(&l, role, first))),
                )
                .map_err(|e| ServerError::io(format!("start a proxy of the {name} cluster"), e))?;
                own.push(proxy);
            }
            proxies.push(own);
        }
        // Every member's process before waiting for any: a member of a cluster answers only
        // once a quorum of them runs.
        let mut members = Vec::new();
        for i in 0..n {
            let dir = root.join(format!("m{i}"));
            let data = dir.join("data");
            std::fs::create_dir_all(&data)
                .map_err(|e| ServerError::io(format!("create {}", data.display()), e))?;
            let label = format!("{name} member {i}");
            let command = engine
                .command(&layout, i, &dir, Start::New)
                .map_err(|e| ServerError::context(&label, e))?;
            let program = options.program.clone();
            let (cwd, port) = (dir.clone(), layout.listen(i, 0));
            let process = E::LAUNCH
                .spawn_unready(
                    label.clone(),
                    move || rebuild(&command, &cwd, program.as_deref()),
                    dir,
                    port,
                )
                .map_err(|e| ServerError::context(&label, e))?;
            origins.set(i, process.pid());
            members.push(Mutex::new(Member { process, paused: false }));
        }
        let mut cluster = Cluster {
            engine,
            layout,
            members,
            companions: Vec::new(),
            proxies,
            origins,
            faults: Mutex::default(),
            root,
            program: options.program.clone(),
            runtime: Some(runtime),
        };
        let too_late = |why: ServerError| ServerError::NotFormed {
            cluster: name,
            members: n,
            waited: started.elapsed(),
            source: Box::new(why),
        };
        cluster.wait_members(started, deadline).map_err(too_late)?;
        cluster.start_companions(started, deadline).map_err(too_late)?;
        loop {
            match cluster.engine.formed(&cluster) {
                Ok(()) => return Ok(cluster),
                Err(why) if Instant::now() > deadline => return Err(too_late(why)),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Wait until every member answers; past `deadline`, say which do not.
    fn wait_members(&self, started: Instant, deadline: Instant) -> Result<(), ServerError> {
        let mut members: Vec<MutexGuard<'_, Member>> = self.members.iter().map(lock).collect();
        let mut processes: Vec<&mut Process> = members.iter_mut().map(|m| &mut m.process).collect();
        wait_all(&mut processes, started, deadline)
    }

    /// Start the engine's companions and wait until they answer.
    fn start_companions(&mut self, started: Instant, deadline: Instant) -> Result<(), ServerError> {
        for c in self.engine.companions(self)? {
            let (label, launch, dir) = (c.label, c.launch, c.dir);
            std::fs::create_dir_all(&dir).map_err(|e| ServerError::io(&label, e))?;
            let (command, cwd) = (c.command, dir.clone());
            let process = launch
                .spawn_unready(label.clone(), move || rebuild(&command, &cwd, None), dir, c.port)
                .map_err(|e| ServerError::context(&label, e))?;
            self.companions.push(process);
        }
        let mut processes: Vec<&mut Process> = self.companions.iter_mut().collect();
        wait_all(&mut processes, started, deadline)
    }

    /// The loopback addresses the companions answer on ([`ClusterEngine::companions`]).
    pub fn companion_addrs(&self) -> Vec<SocketAddr> {
        self.companions.iter().map(|c| SocketAddr::from(([127, 0, 0, 1], c.port()))).collect()
    }

    /// The engine's part (its settings, and what it started beside the members).
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// Where the members listen and are reached.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Never: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The address clients reach member `i` at: its client proxy.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.layout.reach(i, 0)))
    }

    /// The address member `i`'s process itself listens on for clients, behind its proxy:
    /// for probes that must reach it whatever the faults (a test's look at a replica that is
    /// cut off, say); clients should use [`Cluster::client_addr`].
    pub fn direct_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.layout.listen(i, 0)))
    }

    /// The member whose client proxy is at loopback port `port`, if any (a master address
    /// Sentinel gives, say).
    pub fn member_at(&self, port: u16) -> Option<usize> {
        (0..self.len()).find(|&i| self.layout.reach(i, 0) == port)
    }

    /// Member `i`'s directory (its configuration, its log, its `data`).
    pub fn dir(&self, i: usize) -> PathBuf {
        lock(&self.members[i]).process.dir().to_path_buf()
    }

    /// The cluster's directory (the members' are inside; removed on drop).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether member `i` runs (it was not killed, or was restarted since); a paused one runs.
    pub fn is_running(&self, i: usize) -> bool {
        lock(&self.members[i]).process.is_running()
    }

    /// Whether member `i` is paused ([`Cluster::pause`]).
    pub fn is_paused(&self, i: usize) -> bool {
        lock(&self.members[i]).paused
    }

    /// Whether member `i` runs and is not paused: whether it can answer a probe at all.
    pub fn is_up(&self, i: usize) -> bool {
        let m = lock(&self.members[i]);
        m.process.is_running() && !m.paused
    }

    /// Whether member `i` is cut off ([`Cluster::cut_off`]).
    pub fn is_cut_off(&self, i: usize) -> bool {
        lock(&self.faults).cut_off.contains(&i)
    }

    /// Who leads, as the cluster says (see each engine); `None` while it elects or when
    /// nothing leads (independent Redis masters).
    pub fn leader(&self) -> Option<usize> {
        self.engine.leader(self)
    }

    /// What a majority of all members say, asking each member that is up with `ask` (`None`:
    /// it did not answer, or names nothing): how an engine tells who leads.
    pub fn majority<T: Ord>(&self, mut ask: impl FnMut(usize) -> Option<T>) -> Option<T> {
        let mut votes: std::collections::BTreeMap<T, usize> = Default::default();
        for i in (0..self.len()).filter(|&i| self.is_up(i)) {
            if let Some(said) = ask(i) {
                *votes.entry(said).or_default() += 1;
            }
        }
        votes.into_iter().find(|(_, n)| *n > self.len() / 2).map(|(said, _)| said)
    }

    /// Wait until a leader is elected (polling every 50 ms) and return it, or say that none
    /// was within `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, ServerError> {
        self.wait_for_leader_where(timeout, "leader", |_| true)
    }

    /// Wait until a member other than `old` leads and return it (a failover's end), or say
    /// that none did within `timeout`.
    pub fn wait_for_new_leader(&self, old: usize, timeout: Duration) -> Result<usize, ServerError> {
        self.wait_for_leader_where(timeout, &format!("leader other than member {old}"), |l| {
            l != old
        })
    }

    fn wait_for_leader_where(
        &self,
        timeout: Duration,
        what: &str,
        accept: impl Fn(usize) -> bool,
    ) -> Result<usize, ServerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.leader();
            if let Some(l) = leader.filter(|&l| accept(l)) {
                return Ok(l);
            }
            if Instant::now() > deadline {
                return Err(ServerError::NoLeader {
                    what: format!("the {} cluster elected no {what}", E::LAUNCH.name),
                    waited: timeout,
                    leader,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill member `i` (`SIGKILL`, as a crash; a paused one too) and wait until it is gone;
    /// its ports and data stay its own. A no-op when it is not running.
    pub fn kill(&self, i: usize) {
        let mut m = lock(&self.members[i]);
        self.stop_member(&mut m, i);
    }

    fn stop_member(&self, m: &mut Member, i: usize) {
        m.process.stop();
        m.paused = false;
        self.origins.set(i, None);
    }

    /// Kill member `i` if it runs, start it again on the same ports with the same data, and
    /// wait until it answers (the engine's deadline), or say why it did not.
    pub fn restart(&self, i: usize) -> Result<(), ServerError> {
        let mut m = lock(&self.members[i]);
        self.stop_member(&mut m, i);
        self.start_member(&mut m, i)
    }

    /// Kill member `i` if it runs, remove its data (its configuration stays), start it again
    /// on the same ports, and wait until it answers: a member that lost its disk and comes
    /// back empty, telling its peers nothing of what it had promised them (unless the engine
    /// must: see [`ClusterEngine::forget`]).
    pub fn restart_without_data(&self, i: usize) -> Result<(), ServerError> {
        self.kill(i);
        // Not under the member's lock: the engine asks the other members.
        self.engine.forget(self, i)?;
        let mut m = lock(&self.members[i]);
        self.stop_member(&mut m, i);
        let label = m.process.label().to_string();
        let dir = m.process.dir().to_path_buf();
        self.engine
            .wipe(&dir)
            .map_err(|e| ServerError::io(format!("wipe the data of {label}"), e))?;
        let command = self.engine.command(&self.layout, i, &dir, Start::Rejoin)?;
        let program = self.program.clone();
        m.process.set_command(move || rebuild(&command, &dir, program.as_deref()));
        self.start_member(&mut m, i)
    }

    /// Kill every member that runs and start them all again with their data, then wait until
    /// every one answers: a whole cluster coming back after a power cut. They start together
    /// because a member may answer only once a quorum is up (etcd's health needs a leader).
    pub fn restart_all(&self) -> Result<(), ServerError> {
        let mut members: Vec<_> = self.members.iter().map(lock).collect();
        for (i, m) in members.iter_mut().enumerate() {
            self.stop_member(m, i);
            m.process.spawn_again()?;
            self.origins.set(i, m.process.pid());
        }
        let started = Instant::now();
        let mut ready = vec![false; members.len()];
        while ready.iter().any(|r| !r) {
            for (m, r) in members.iter_mut().zip(ready.iter_mut()).filter(|(_, r)| !**r) {
                *r = m.process.poll_ready()?;
            }
            if ready.iter().any(|r| !r) && started.elapsed() > E::LAUNCH.deadline {
                let i = ready.iter().position(|r| !r).expect("one is not ready");
                return Err(members[i].process.not_ready(started.elapsed()));
            }
            std::thread::sleep(E::LAUNCH.poll);
        }
        Ok(())
    }

    fn start_member(&self, m: &mut Member, i: usize) -> Result<(), ServerError> {
        // Spawn, record the pid at once (its first connections must be recognised), wait.
        m.process.spawn_again()?;
        self.origins.set(i, m.process.pid());
        let started = Instant::now();
        while !m.process.poll_ready()? {
            if started.elapsed() > E::LAUNCH.deadline {
                let error = m.process.not_ready(started.elapsed());
                m.process.stop();
                self.origins.set(i, None);
                return Err(error);
            }
            std::thread::sleep(E::LAUNCH.poll);
        }
        Ok(())
    }

    /// Stop member `i` (`SIGSTOP`): it holds its connections and answers nothing, as a
    /// process in a long GC pause or a VM that was frozen would, until [`Cluster::resume`].
    pub fn pause(&self, i: usize) -> Result<(), ServerError> {
        let mut m = lock(&self.members[i]);
        m.process.signal(libc::SIGSTOP)?;
        m.paused = true;
        Ok(())
    }

    /// Let a paused member `i` run again (`SIGCONT`).
    pub fn resume(&self, i: usize) -> Result<(), ServerError> {
        let mut m = lock(&self.members[i]);
        m.process.signal(libc::SIGCONT)?;
        m.paused = false;
        Ok(())
    }

    /// Cut member `i` off from its peers and its clients: every connection to it and every
    /// connection it opened to a peer is closed, and new ones are refused (a network
    /// partition with the member alone on its side), until [`Cluster::heal`]. The member
    /// itself keeps running. Probes of [`Cluster::leader`] still reach it, directly.
    pub fn cut_off(&self, i: usize) {
        let mut faults = lock(&self.faults);
        faults.cut_off.insert(i);
        self.apply(&faults);
    }

    /// End [`Cluster::cut_off`] for member `i`: its peers and clients reconnect by
    /// themselves.
    pub fn heal(&self, i: usize) {
        let mut faults = lock(&self.faults);
        faults.cut_off.remove(&i);
        self.apply(&faults);
    }

    /// Hold every byte of the connections member `from` opened to member `to`, in both
    /// directions, until [`Cluster::release_link`]: a link that lags without end, nobody
    /// else's traffic touched. A Redis replica opens its replication link to its master, so
    /// `hold_link(replica, master)` holds back the replication stream.
    pub fn hold_link(&self, from: usize, to: usize) {
        let mut faults = lock(&self.faults);
        faults.held.insert((from, to));
        self.apply(&faults);
    }

    /// End [`Cluster::hold_link`]: what was held is delivered (to whoever still listens).
    pub fn release_link(&self, from: usize, to: usize) {
        let mut faults = lock(&self.faults);
        faults.held.remove(&(from, to));
        self.apply(&faults);
    }

    /// Give every proxy its links; the connections whose origin now matters and is not
    /// known yet, on all the proxies, are named by one scan of the socket tables.
    fn apply(&self, faults: &Faults) {
        let n = self.len();
        let mut waiting = Vec::new();
        for (to, proxies) in self.proxies.iter().enumerate() {
            let links = faults.links_to(to, n);
            for p in proxies {
                waiting.extend(p.set_links(links.clone()).into_iter().map(|w| (p, w)));
            }
        }
        if waiting.is_empty() {
            return;
        }
        let ends: Vec<_> = waiting.iter().map(|(_, (_, ends))| *ends).collect();
        let found = self.origins.identify(&ends);
        for ((p, (id, _)), member) in waiting.into_iter().zip(found) {
            p.identified([(id, member)]);
        }
    }

    /// How many times the proxies have read the kernel's socket tables (and the members'
    /// open files) to tell the members' connections from the clients': never while no link
    /// is cut or held, then once when a fault makes a member's links differ (for every
    /// connection open then), and once per batch of connections accepted while it lasts (a
    /// burst of them costs a few scans, not one each). Each scan costs milliseconds of
    /// blocking reads with thousands of connections open.
    pub fn origin_scans(&self) -> usize {
        self.origins.scans()
    }

    /// The connections that run straight between two members' processes, bypassing the
    /// proxies, as `(member, member)` pairs: none when every link can be cut (the cluster's
    /// tests check it for every engine).
    pub fn direct_links(&self) -> Vec<(usize, usize)> {
        self.origins.direct_links()
    }
}

/// Wait until every one of `processes` answers; an error as soon as one exits, or naming
/// those that do not answer once `deadline` passed.
fn wait_all(
    processes: &mut [&mut Process],
    started: Instant,
    deadline: Instant,
) -> Result<(), ServerError> {
    loop {
        let mut waiting = Vec::new();
        for p in processes.iter_mut() {
            if !p.poll_ready()? {
                waiting.push(p.not_ready(started.elapsed()));
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(match waiting.len() {
                1 => waiting.remove(0),
                _ => ServerError::Several(waiting),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A copy of `command` (its program, arguments and environment) to run in `dir`, with
/// `program` instead of its own: a `Command` cannot be cloned, and a member's is needed again
/// at every restart.
fn rebuild(command: &Command, dir: &Path, program: Option<&Path>) -> Command {
    let mut copy = Command::new(program.map_or(command.get_program(), Path::as_os_str));
    copy.args(command.get_args());
    for (k, v) in command.get_envs() {
        match v {
            Some(v) => copy.env(k, v),
            None => copy.env_remove(k),
        };
    }
    copy.current_dir(dir);
    copy
}

impl<E: ClusterEngine> Drop for Cluster<E> {
    fn drop(&mut self) {
        // Members first (a paused one too: SIGKILL needs no cooperation), so that no proxy
        // outlives a member's last word; then the proxies' runtime, without blocking on it
        // (this may run inside another runtime).
        // Companions before members: a Sentinel that outlived its master would only
        // start a failover nobody watches.
        self.companions.clear();
        for m in self.members.drain(..) {
            drop(m);
        }
        self.proxies.clear();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// One server of an engine, without proxies (its [`Layout`]'s `reach` ports are its `listen`
/// ports): the single-server types ([`crate::RedisServer`], [`crate::ZkServer`],
/// [`crate::EtcdServer`]) are this, configured by the same engine code as a cluster's
/// members. It is killed and its directory removed on drop (and killed when the test binary
/// exits).
///
/// [`Server::stop`] and [`Server::start_again`] restart it on the same port with the same
/// directory, as a crash and a restart would.
pub struct Server<E: ClusterEngine> {
    process: Process,
    /// The loopback port it listens on for clients.
    pub port: u16,
    layout: Layout,
    engine: E,
}

impl<E: ClusterEngine + Default> Cluster<E> {
    /// Start a cluster of `members` of the engine's default configuration and wait until it
    /// formed (the engine's [`ClusterEngine::FORMATION`] at most), or panic saying why, or
    /// what to install: for tests; [`Cluster::launch`] returns the error.
    pub fn start(members: usize) -> Self {
        Cluster::launch(E::default(), &ClusterOptions::new(members))
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl<E: ClusterEngine + Default + Clone> Server<E> {
    /// Start a server of the engine's default configuration and wait until it answers (the
    /// engine's [`Launch::deadline`], on the third set of ports at the latest), or panic
    /// saying why, or what to install.
    pub fn start() -> Self {
        Self::launch().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Server::start`], returning why it could not start (what to install, when the
    /// program is missing) instead of panicking: for a benchmark binary.
    pub fn launch() -> Result<Self, ServerError> {
        Server::launch_engine(E::default())
    }
}

impl<E: ClusterEngine + Clone> Server<E> {
    /// Start `engine`'s server on fresh loopback ports and wait until it answers, on the third
    /// set of ports at the latest; or say why it could not (what to install, when the program
    /// is missing).
    pub(crate) fn launch_engine(engine: E) -> Result<Self, ServerError> {
        engine.check()?;
        try_with_retries(E::LAUNCH.name, || Self::try_launch(engine.clone()))
    }

    fn try_launch(engine: E) -> Result<Self, ServerError> {
        let listen = Layout::fresh_ports(1, E::PORTS.len(), &mut BTreeSet::new());
        let layout = Layout { reach: listen.clone(), listen, token: "lockbench".into() };
        let dir = temp_dir(E::KIND);
        let data = dir.join("data");
        let command = std::fs::create_dir_all(&data)
            .map_err(|e| ServerError::io(format!("create {}", data.display()), e))
            .and_then(|()| engine.command(&layout, 0, &dir, Start::New));
        let command = command.inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        let (port, cwd) = (layout.listen(0, 0), dir.clone());
        let process = E::LAUNCH.spawn(move || rebuild(&command, &cwd, None), dir, port)?;
        Ok(Server { process, port, layout, engine })
    }
}

impl<E: ClusterEngine> Server<E> {
    /// Kill the server (`SIGKILL`, as a crash) and wait until it is gone. Clients see their
    /// connections closed and new ones refused. The port and the data directory stay this
    /// server's. A no-op when it is stopped.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Start the stopped server again on the same port, with the same data directory and
    /// settings, and wait until it answers, or panic saying why (another process may have
    /// taken the port meanwhile). A no-op when it runs.
    pub fn start_again(&mut self) {
        if let Err(e) = self.try_start_again() {
            panic!("{e}");
        }
    }

    /// [`Server::start_again`], returning the failure instead of panicking.
    pub fn try_start_again(&mut self) -> Result<(), ServerError> {
        self.process.start_again().map_err(|e| {
            let again = format!("could not start {} again on port {}", E::LAUNCH.name, self.port);
            ServerError::context(again, e)
        })
    }

    /// Kill the server, remove its data, and start it again on the same port as `engine`
    /// configures it (a new standby in the place of a lost primary), waiting until it answers.
    pub(crate) fn rebuild_as(&mut self, engine: E) -> Result<(), ServerError> {
        self.process.stop();
        let dir = self.process.dir().to_path_buf();
        let label = self.process.label().to_string();
        engine.wipe(&dir).map_err(|e| ServerError::io(format!("wipe the data of {label}"), e))?;
        let command = engine.command(&self.layout, 0, &dir, Start::Rejoin)?;
        let cwd = dir.clone();
        self.process.set_command(move || rebuild(&command, &cwd, None));
        self.engine = engine;
        self.try_start_again()
    }

    /// [`Server::stop`], `downtime` of sleep, [`Server::start_again`].
    pub fn restart_after(&mut self, downtime: Duration) {
        self.stop();
        std::thread::sleep(downtime);
        self.start_again();
    }

    /// Its data directory (removed when it is dropped).
    pub fn dir(&self) -> &Path {
        self.process.dir()
    }

    /// Whether it runs (started and not stopped since).
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Its ports ([`Layout`] of one member, reached where it listens).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The engine's settings it runs with.
    pub fn engine(&self) -> &E {
        &self.engine
    }
}
