//! The commands a backend reports ([`RedisConnectConfig::requests`]) against what the
//! protocols say one grant costs (the crate docs, "Requests per grant"), on servers of the
//! test's own, and against what the servers themselves counted (`INFO commandstats`): each
//! command once, nothing left out, nothing counted twice.

use crate::sentinel_support;
use crate::support;

use lock_core::requests::{RequestHook, RequestTally};
use lock_core::Locker;
use lock_redis::{
    JedisConfig, RedisBackend, RedisConnectConfig, RedisMasters, RedlockConfig, TokenConfig,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use support::{secured_redis, unique_prefix, Secured, SECURE_TAG};
use test_servers::{redis_call, RedisCluster, RedisServer, Reply};

/// What a tracking connection costs (the default): the driver's `HELLO 3`, the link's `PING`
/// and `CLIENT TRACKING ON NOLOOP`.
const TRACKING_CONNECTION: &[(&str, u64)] = &[("HELLO", 1), ("PING", 1), ("CLIENT", 1)];

/// Requests counted twice: per step (reset between steps) and over the whole test (to set
/// against the server's own count).
struct Tallies {
    step: Arc<RequestTally>,
    all: Arc<RequestTally>,
}

impl Tallies {
    fn new() -> Tallies {
        Tallies { step: RequestTally::new(), all: RequestTally::new() }
    }

    fn config(&self) -> RedisConnectConfig {
        let (step, all) = (self.step.clone(), self.all.clone());
        let requests = RequestHook::new(move |r| {
            step.count(r);
            all.count(r);
        });
        RedisConnectConfig { requests, key_prefix: "requests:".into(), ..Default::default() }
    }

    /// The step's counts, and forget them.
    fn take(&self) -> Step {
        let counts = self.step.counts();
        self.step.reset();
        Step(counts)
    }
}

/// One step's counts, by (target, command).
struct Step(BTreeMap<(String, String), u64>);

impl Step {
    /// The counts of `target`, by command.
    fn to(&self, target: &str) -> BTreeMap<String, u64> {
        let of = self.0.iter().filter(|((t, _), _)| t == target);
        of.map(|((_, c), n)| (c.clone(), *n)).collect()
    }
}

/// `tally`'s counts of `target`, by command.
fn commands(tally: &RequestTally, target: &str) -> BTreeMap<String, u64> {
    Step(tally.counts()).to(target)
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
}

/// What the server at `addr` has executed so far, by command as the hook names them (upper
/// case; `script|load` as `SCRIPT`): `INFO commandstats`'s calls and rejected calls. Commands
/// a script calls inside count there too.
fn executed(addr: SocketAddr) -> BTreeMap<String, u64> {
    let Ok(Reply::Bulk(text)) = redis_call(addr, &["INFO", "commandstats"]) else {
        panic!("INFO commandstats at {addr}")
    };
    let mut out = BTreeMap::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("cmdstat_")) {
        let (name, stats) = line.split_once(':').expect("cmdstat_<name>:<stats>");
        let field = |key: &str| -> u64 {
            let value = stats.split(',').find_map(|kv| kv.strip_prefix(key));
            value.and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        let command = name.split('|').next().unwrap_or(name).to_uppercase();
        *out.entry(command).or_default() += field("calls=") + field("rejected_calls=");
    }
    out
}

/// What the server at `addr` executed since `before`, but the `INFO`s that read it.
fn executed_since(addr: SocketAddr, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut since = executed(addr);
    since.remove("INFO");
    for (command, n) in since.iter_mut() {
        *n -= before.get(command).copied().unwrap_or(0);
    }
    since.retain(|_, n| *n > 0);
    since
}

/// A `redis-server` of the test's own, in memory: its scripts cache starts empty and its
/// counts are the test's alone.
fn own_server() -> RedisServer {
    tokio::task::block_in_place(|| RedisServer::launch(false)).expect("a redis-server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jedis_lock_grants_cost_setnx_incr_del_and_the_server_counts_the_same() {
    let server = own_server();
    let before = executed(server.addr());
    let t = Tallies::new();
    let a = RedisBackend::connect_with(&server.url(), t.config()).await.unwrap();
    assert_eq!(t.take().to("redis"), counts(TRACKING_CONNECTION), "a connection's");
    let locker = a.jedis("a", JedisConfig::default()).unwrap();
    for _ in 0..2 {
        locker.lock("k", None).await.unwrap().release().await.unwrap();
    }
    assert_eq!(t.take().to("redis"), counts(&[("SETNX", 2), ("INCR", 2), ("DEL", 2)]));

    let held = locker.lock("k", None).await.unwrap();
    let b = RedisBackend::connect_with(&server.url(), t.config()).await.unwrap();
    t.step.reset();
    assert!(b.jedis("b", JedisConfig::default()).unwrap().try_lock("k").await.unwrap().is_none());
    assert_eq!(t.take().to("redis"), counts(&[("SETNX", 1), ("GET", 1)]), "a refused attempt");
    held.release().await.unwrap();

    // No scripts ran (renewal comes at expiry/2, 15 s): the server executed exactly the
    // commands the hook saw.
    assert_eq!(executed_since(server.addr(), &before), commands(&t.all, "redis"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_lock_grants_cost_two_scripts_and_renewals_one_each() {
    let server = own_server();
    let before = executed(server.addr());
    let t = Tallies::new();
    let backend = RedisBackend::connect_with(&server.url(), t.config()).await.unwrap();
    t.step.reset();
    let locker = backend.token("a", TokenConfig::default()).unwrap();
    // The first use of each script: refused (NOSCRIPT), loaded, run.
    locker.lock("k", None).await.unwrap().release().await.unwrap();
    assert_eq!(t.take().to("redis"), counts(&[("EVALSHA", 4), ("SCRIPT", 2)]), "scripts loaded");
    locker.lock("k", None).await.unwrap().release().await.unwrap();
    assert_eq!(t.take().to("redis"), counts(&[("EVALSHA", 2)]));
    let held = locker.lock("k", None).await.unwrap();
    t.step.reset();
    assert!(locker.try_lock("k").await.unwrap().is_none());
    assert_eq!(t.take().to("redis"), counts(&[("EVALSHA", 1)]), "a refused attempt");
    held.release().await.unwrap();
    t.step.reset();

    // Renewals, in the background, every TTL/2: one script each (the first loads it).
    let short = backend.token("r", TokenConfig::new(Duration::from_millis(400))).unwrap();
    let guard = short.lock("r", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!guard.is_lost(), "renewed: {:?}", guard.lease_state());
    guard.release().await.unwrap();
    // Acquire, release, and the renewal script's first run, refused: the rest are renewals.
    let renewals = t.step.of("redis", "EVALSHA") - 3;
    assert!(renewals >= 2, "{:?}", t.step.counts());
    assert_eq!(t.step.of("redis", "SCRIPT"), 1, "the renewal script loaded once");

    // Every command the hook saw, the server ran as many times (and the scripts' own calls).
    let ran = executed_since(server.addr(), &before);
    for (command, n) in commands(&t.all, "redis") {
        assert_eq!(ran.get(&command), Some(&n), "{command}: server {ran:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_grants_cost_two_or_four_requests_per_master() {
    const N: usize = 3;
    let cluster = tokio::task::block_in_place(|| RedisCluster::masters(N, false));
    let before: Vec<_> = (0..N).map(|i| executed(cluster.direct_addr(i))).collect();
    let t = Tallies::new();
    let masters = RedisMasters::connect_with(&cluster.urls(), t.config()).await.unwrap();
    let each = |pairs: &[(&str, u64)]| {
        let step = t.take();
        for i in 0..N {
            assert_eq!(step.to(&format!("master-{i}")), counts(pairs), "master {i}");
        }
        assert_eq!(step.0.values().sum::<u64>(), N as u64 * counts(pairs).values().sum::<u64>());
    };
    each(&[("PING", 1)]);
    let config = RedlockConfig::new(Duration::from_secs(10), 1);
    let plain = masters.redlock("a", config).unwrap();
    let fenced = masters.redlock_fenced("b", config).unwrap();
    // Scripts loaded first (each master's first release and fence write).
    fenced.lock("k", None).await.unwrap().release().await.unwrap();
    t.step.reset();

    plain.lock("k", None).await.unwrap().release().await.unwrap();
    each(&[("SET", 1), ("EVALSHA", 1)]);
    fenced.lock("k", None).await.unwrap().release().await.unwrap();
    each(&[("SET", 1), ("GET", 1), ("EVALSHA", 2)]);
    let held = plain.lock("k", None).await.unwrap();
    t.step.reset();
    assert!(fenced.try_lock("k").await.unwrap().is_none());
    each(&[("SET", 1), ("EVALSHA", 1)]);
    held.release().await.unwrap();

    // The commands that no script calls inside, as the masters counted them.
    for (i, before) in before.iter().enumerate() {
        let ran = executed_since(cluster.direct_addr(i), before);
        for (command, n) in commands(&t.all, &format!("master-{i}")) {
            if ["PING", "EVALSHA", "SCRIPT"].contains(&command.as_str()) {
                assert_eq!(ran.get(&command), Some(&n), "master {i}, {command}: {ran:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_a_connection_costs_a_sentinel_query_and_a_role() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::sentinel(1, 2));
    let t = Tallies::new();
    let sentinels = sentinel_support::sentinels(&cluster);
    let backend =
        RedisBackend::connect_sentinel(&sentinels, test_servers::REDIS_MASTER_NAME, t.config())
            .await
            .unwrap();
    let connect = t.take();
    assert_eq!(connect.to("sentinel"), counts(&[("SENTINEL", 1)]), "the first Sentinel answers");
    assert_eq!(connect.to("redis"), counts(&[("HELLO", 1), ("ROLE", 1), ("CLIENT", 1)]));
    let locker = backend.token("a", TokenConfig::default()).unwrap();
    locker.lock("k", None).await.unwrap().release().await.unwrap();
    t.step.reset();
    locker.lock("k", None).await.unwrap().release().await.unwrap();
    assert_eq!(t.take().to("redis"), counts(&[("EVALSHA", 2)]), "as on one server");
    assert_eq!(t.all.to("sentinel"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_costs_a_hello_a_ping_and_a_tracking_command_or_a_ping_and_an_auth() {
    let s = tokio::task::spawn_blocking(secured_redis).await.unwrap();
    let t = Tallies::new();
    let prefix = unique_prefix(SECURE_TAG);
    let credentials = Some(Secured::credentials(&s.locker));
    let config = || RedisConnectConfig { key_prefix: prefix.clone(), ..t.config() };
    let as_locker = RedisConnectConfig { credentials: credentials.clone(), ..config() };
    RedisBackend::connect_with(&s.server.url(), as_locker).await.unwrap();
    // The credentials ride on the HELLO.
    assert_eq!(t.take().to("redis"), counts(TRACKING_CONNECTION), "tracking, credentials");
    let plain = RedisConnectConfig { credentials, tracking: false, ..config() };
    RedisBackend::connect_with(&s.server.url(), plain).await.unwrap();
    assert_eq!(t.take().to("redis"), counts(&[("AUTH", 1), ("PING", 1)]), "RESP2, credentials");
    RedisBackend::connect_with(&s.server.url_as(&s.locker), config()).await.unwrap();
    assert_eq!(t.take().to("redis"), counts(TRACKING_CONNECTION), "credentials in the URL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_a_held_key_costs_its_holder_one_script_and_a_new_connection_one_each() {
    let server = own_server();
    let t = Tallies::new();
    let backend = RedisBackend::connect_with(&server.url(), t.config()).await.unwrap();
    let locker = backend.token("a", TokenConfig::new(Duration::from_secs(30))).unwrap();
    // Load the scripts (the first renewal's too, by a holder told of a stranger's change).
    let held = locker.lock("k", None).await.unwrap();
    redis_call(server.addr(), &["DEL", "requests:k"]).unwrap();
    held.lost().await;
    held.release().await.unwrap();
    t.step.reset();

    let held = locker.lock("k", None).await.unwrap();
    assert_eq!(t.take().to("redis"), counts(&[("EVALSHA", 1)]), "the grant, tracked at once");
    // A key of the same name in another database is a push that changes nothing: the check
    // finds the key still ours.
    let stranger = redis_call_in(server.addr(), 1, &["SET", "requests:k", "x"]);
    assert_eq!(stranger.unwrap(), Reply::Status("OK".into()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_lost(), "{:?}", held.lease_state());
    assert_eq!(t.take().to("redis"), counts(&[("EVALSHA", 1)]), "one check, still held");
    // A stranger's overwrite: one check, which finds another value.
    redis_call(server.addr(), &["SET", "requests:k", "mine", "PX", "1000"]).unwrap();
    held.lost().await;
    assert_eq!(t.take().to("redis"), counts(&[("EVALSHA", 1)]), "one check, lost");
    held.release().await.unwrap();
    assert_eq!(t.take().to("redis"), counts(&[("EVALSHA", 1)]), "the release");

    // A new connection: each holder reads its key on it at once (one renewal each).
    let holders = [locker.lock("h1", None).await.unwrap(), locker.lock("h2", None).await.unwrap()];
    let kill = ["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"];
    assert_eq!(redis_call(server.addr(), &kill).unwrap(), Reply::Int(1));
    // The driver tells the link its connection closed: the next request reconnects.
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.step.reset();
    locker.try_lock("probe").await.unwrap().expect("free").release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut reconnect = counts(TRACKING_CONNECTION);
    reconnect.insert("EVALSHA".into(), 2 + holders.len() as u64);
    assert_eq!(t.take().to("redis"), reconnect, "a probe's grant and release, a renewal each");
    assert_eq!(backend.connections_made(), 2);
    for h in holders {
        assert!(!h.is_lost());
        h.release().await.unwrap();
    }
}

/// [`redis_call`] in database `db`.
fn redis_call_in(addr: SocketAddr, db: u32, args: &[&str]) -> std::io::Result<Reply> {
    let mut script = format!("redis.call('SELECT', {db}) return redis.call(");
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    script.push_str(&quoted.join(", "));
    script.push(')');
    redis_call(addr, &["EVAL", &script, "0"])
}
