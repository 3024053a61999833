//! The shared conformance suite for both single-master Redis locks through Redis Sentinel
//! (the suite passes for the locks on each cluster): the token lock (`SET NX PX` +
//! Lua) in `token::`, the jedis-lock algorithm (seed 001) in `jedis::`, each as the
//! single-server suites run it (`token_conformance.rs`, `jedis_conformance.rs`: TTL 2 s,
//! renewal every 1 s), on a master with two replicas watched by three Sentinels; and the
//! reader-writer and semaphore suites for the reader-writer lock in `rwlock::` and the
//! semaphore in `semaphore::`, as `rwlock_conformance.rs` and `semaphore_conformance.rs` run
//! them on one server. Every
//! contender has its own backend, made with [`RedisBackend::connect_sentinel`]: it finds the
//! master by asking the Sentinels, as a user's would.
//!
//! **Each contender's own way to the master.** The suite's crash and lost-lease scenarios cut
//! one contender off (see `lock_core::conformance::Fixture::cut_off`), so, as on one server,
//! its connection must run through a proxy of its own. But the master's address is whatever
//! the Sentinels name, and they name the master's client proxy, which every contender shares.
//! So every contender asks the Sentinels through relays of its own (one per Sentinel, a
//! [`Relay`]): a relay passes the contender's `SENTINEL ...` request to its real Sentinel and
//! the answer back, with the master's address in it replaced by the address of the
//! contender's own proxy in front of that member. The contender keeps a proxy in front of
//! every member, so whichever member the Sentinels name, at its first connect or at any
//! reconnect, it reaches it through its own proxy: this holds across a failover too (none
//! happens in the suite; `sentinel_failover.rs` has those), and the real Sentinels decide
//! every time. Cutting a contender off cuts its proxies and makes its relays refuse, so it
//! can reach neither the master nor the Sentinels, as a crashed or partitioned client.
//!
//! Every scenario of each suite runs for every lock; none is skipped. One cluster per test
//! binary, started by the first test and shared by all (each fixture has a key prefix of its
//! own), as the single-server suites share one server; all the suites are in this one binary so
//! that CI starts and links it once. Its servers and Sentinels are killed when the binary
//! exits (test-servers arms `PR_SET_PDEATHSIG` on a thread that lives as long as each process;
//! the static cluster is never dropped).

use crate::sentinel_support;

use async_trait::async_trait;
use lock_core::conformance::{Contenders, Fixture, Mode};
use lock_core::{Locker, RwLocker, Semaphore};
use lock_redis::{RedisBackend, RedisConnectConfig, RwLockConfig, SemaphoreConfig, Variant};
use sentinel_support::read_command;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use test_servers::{redis_call, Proxy, RedisCluster, Reply, REDIS_MASTER_NAME};
use tokio::io::AsyncWriteExt;

/// The master's replicas.
const REPLICAS: usize = 2;
/// The Sentinels that watch it.
const SENTINELS: usize = 3;

/// The binary's cluster: started on a thread of its own (not on a test runtime's worker,
/// where a failed start would drop the cluster's proxy runtime inside another runtime).
fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        std::thread::spawn(|| {
            let started = std::time::Instant::now();
            let cluster = RedisCluster::sentinel(REPLICAS, SENTINELS);
            eprintln!(
                "Redis master, {REPLICAS} replicas and {SENTINELS} Sentinels ready in {:?}",
                started.elapsed()
            );
            cluster
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A prefix no other fixture of this binary uses.
fn unique_prefix(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t{}-{tag}:", N.fetch_add(1, Ordering::Relaxed))
}

/// A stand-in for one Sentinel, for one contender (see the module docs): it answers each
/// `SENTINEL ...` request with its real Sentinel's answer, in which a member's client proxy
/// (the master's address) becomes the contender's own proxy in front of that member; anything
/// else (the driver's connection setup) with `+OK`. While the contender is cut off it closes
/// every connection. Its task ends when it is dropped.
struct Relay {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// A relay to `sentinel` on the current runtime; `own` maps a member's client proxy to the
    /// contender's proxy in front of it.
    async fn start(
        sentinel: SocketAddr,
        own: Arc<HashMap<SocketAddr, SocketAddr>>,
        cut: Arc<AtomicBool>,
    ) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a relay");
        let addr = listener.local_addr().expect("relay address");
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if !cut.load(Ordering::SeqCst) {
                    tokio::spawn(relay(stream, sentinel, own.clone(), cut.clone()));
                }
            }
        });
        Relay { addr, task }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serve one connection of a [`Relay`].
async fn relay(
    stream: tokio::net::TcpStream,
    sentinel: SocketAddr,
    own: Arc<HashMap<SocketAddr, SocketAddr>>,
    cut: Arc<AtomicBool>,
) {
    let (read, mut write) = stream.into_split();
    let mut read = tokio::io::BufReader::new(read);
    while let Some(args) = read_command(&mut read).await {
        if cut.load(Ordering::SeqCst) {
            return;
        }
        let is = |i: usize, word: &str| args.get(i).is_some_and(|a| a.eq_ignore_ascii_case(word));
        let reply = if is(0, "SENTINEL") {
            let names_master = is(1, "get-master-addr-by-name");
            let asked = tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                redis_call(sentinel, &args)
            });
            match asked.await.expect("relay's request") {
                Ok(reply) if names_master => own_proxy(reply, &own),
                Ok(reply) => reply,
                // The real Sentinel did not answer: neither does its relay.
                Err(_) => return,
            }
        } else {
            Reply::Status("OK".into())
        };
        let mut out = String::new();
        encode(&reply, &mut out);
        if write.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// `reply` with an address `[host, port]` of a member's client proxy replaced by the
/// contender's proxy in front of that member. An address of no member is answered with an
/// error (the contender's connection would bypass its proxies).
fn own_proxy(reply: Reply, own: &HashMap<SocketAddr, SocketAddr>) -> Reply {
    let Reply::Array(items) = &reply else { return reply };
    let [Reply::Bulk(host), Reply::Bulk(port)] = items.as_slice() else { return reply };
    let named = format!("{host}:{port}").parse::<SocketAddr>();
    match named.ok().and_then(|a| own.get(&a)) {
        Some(proxy) => Reply::Array(vec![
            Reply::Bulk(proxy.ip().to_string()),
            Reply::Bulk(proxy.port().to_string()),
        ]),
        None => Reply::Error(format!("ERR relay: {host}:{port} is no member's client proxy")),
    }
}

/// `reply` in RESP2.
fn encode(reply: &Reply, out: &mut String) {
    match reply {
        Reply::Status(s) => out.push_str(&format!("+{s}\r\n")),
        Reply::Error(s) => out.push_str(&format!("-{s}\r\n")),
        Reply::Int(n) => out.push_str(&format!(":{n}\r\n")),
        Reply::Bulk(s) => out.push_str(&format!("${}\r\n{s}\r\n", s.len())),
        Reply::Nil => out.push_str("*-1\r\n"),
        Reply::Array(items) => {
            out.push_str(&format!("*{}\r\n", items.len()));
            items.iter().for_each(|i| encode(i, out));
        }
    }
}

/// One contender's way to the cluster: a proxy in front of every member, a relay for every
/// Sentinel.
struct Route {
    proxies: Vec<Proxy>,
    _relays: Vec<Relay>,
    cut: Arc<AtomicBool>,
}

impl Route {
    /// Cut the contender off from the members and the Sentinels.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.proxies.iter().for_each(Proxy::cut);
    }
}

/// The conformance fixture through Sentinel: every contender has its own backend, which asks
/// the Sentinels through its relays and reaches the master through its own proxy.
struct SentinelFixture {
    /// The members' client proxies.
    members: Vec<SocketAddr>,
    sentinels: Vec<SocketAddr>,
    prefix: String,
    variant: Variant,
    ttl: Duration,
    routes: Mutex<HashMap<String, Route>>,
}

impl SentinelFixture {
    fn new(tag: &str, variant: Variant, ttl: Duration) -> SentinelFixture {
        let cluster = shared_cluster();
        SentinelFixture {
            members: (0..cluster.len()).map(|i| cluster.client_addr(i)).collect(),
            sentinels: cluster.sentinel_addrs(),
            prefix: unique_prefix(tag),
            variant,
            ttl,
            routes: Mutex::default(),
        }
    }
}

impl SentinelFixture {
    /// Contender `name`'s backend: its own proxies and relays, the Sentinels asked through them.
    async fn backend(&self, name: &str) -> RedisBackend {
        let mut proxies = Vec::new();
        for member in &self.members {
            proxies.push(Proxy::start(*member).await);
        }
        let own: HashMap<SocketAddr, SocketAddr> =
            self.members.iter().zip(&proxies).map(|(m, p)| (*m, p.addr())).collect();
        let (own, cut) = (Arc::new(own), Arc::new(AtomicBool::new(false)));
        let mut relays = Vec::new();
        for sentinel in &self.sentinels {
            relays.push(Relay::start(*sentinel, own.clone(), cut.clone()).await);
        }
        let addrs: Vec<String> = relays.iter().map(|r| r.addr.to_string()).collect();
        let config =
            RedisConnectConfig { key_prefix: self.prefix.clone(), ..RedisConnectConfig::default() };
        let backend = RedisBackend::connect_sentinel(&addrs, REDIS_MASTER_NAME, config)
            .await
            .expect("connect through Sentinel");
        let route = Route { proxies, _relays: relays, cut };
        if let Some(old) = self.routes.lock().unwrap().insert(name.to_string(), route) {
            old.cut();
        }
        backend
    }
}

#[async_trait]
impl Fixture for SentinelFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        self.backend(name).await.locker(name, self.variant.clone()).expect("locker")
    }
    async fn cut_off(&self, name: &str) {
        if let Some(route) = self.routes.lock().unwrap().get(name) {
            route.cut();
        }
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // As on one server: a waiter polls every 100 ms (jedis) / 50 ms (token); the rest is
        // margin for a loaded 2-core machine.
        Duration::from_millis(1000)
    }
}

/// The reader-writer lock and the semaphore through Sentinel, as one server runs them
/// (`rwlock_conformance.rs`, `semaphore_conformance.rs`).
#[async_trait]
impl Contenders<dyn RwLocker> for SentinelFixture {
    async fn contender(&self, name: &str) -> Arc<dyn RwLocker> {
        let config = RwLockConfig::new(self.ttl);
        Arc::new(self.backend(name).await.rwlock(name, config).expect("reader-writer lock"))
    }
    async fn cut_off(&self, name: &str) {
        Fixture::cut_off(self, name).await
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        Fixture::notice_slack(self)
    }
}

#[async_trait]
impl Contenders<dyn Semaphore> for SentinelFixture {
    async fn contender(&self, name: &str) -> Arc<dyn Semaphore> {
        let config = SemaphoreConfig::new(self.ttl);
        Arc::new(self.backend(name).await.semaphore(name, config).expect("semaphore"))
    }
    async fn cut_off(&self, name: &str) {
        Fixture::cut_off(self, name).await
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        Fixture::notice_slack(self)
    }
}

/// The token lock through Sentinel, as `token_conformance.rs` runs it on one server.
mod token {
    use super::*;
    use lock_redis::TokenConfig;

    async fn make_fixture(_seed: u64) -> SentinelFixture {
        let ttl = Duration::from_secs(2);
        SentinelFixture::new("token", Variant::Token(TokenConfig::new(ttl)), ttl)
    }

    lock_core::conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |seed| async move { make_fixture(seed).await },
        seeds = 3,
        contenders = 16
    );
}

/// The jedis-lock algorithm through Sentinel, as `jedis_conformance.rs` runs it on one server.
mod jedis {
    use super::*;
    use lock_redis::JedisConfig;

    async fn make_fixture(_seed: u64) -> SentinelFixture {
        let ttl = Duration::from_secs(2);
        SentinelFixture::new("jedis", Variant::Jedis(JedisConfig::new(ttl)), ttl)
    }

    lock_core::conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |seed| async move { make_fixture(seed).await },
        seeds = 3,
        contenders = 16
    );
}

/// The reader-writer lock (FIFO) through Sentinel, as `rwlock_conformance.rs` runs it on one
/// server.
mod rwlock {
    use super::*;
    use lock_redis::TokenConfig;

    async fn make_fixture(_seed: u64) -> SentinelFixture {
        let ttl = Duration::from_secs(2);
        // The fixture's mutex variant is not used here.
        SentinelFixture::new("rw", Variant::Token(TokenConfig::new(ttl)), ttl)
    }

    lock_core::rwlock_conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |seed| async move { make_fixture(seed).await },
        seeds = 1,
        contenders = 12
    );
}

/// The semaphore through Sentinel, as `semaphore_conformance.rs` runs it on one server.
mod semaphore {
    use super::*;
    use lock_redis::TokenConfig;

    async fn make_fixture(_seed: u64) -> SentinelFixture {
        let ttl = Duration::from_secs(2);
        // The fixture's mutex variant is not used here.
        SentinelFixture::new("sem", Variant::Token(TokenConfig::new(ttl)), ttl)
    }

    lock_core::semaphore_conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |seed| async move { make_fixture(seed).await },
        seeds = 1,
        contenders = 12
    );
}
