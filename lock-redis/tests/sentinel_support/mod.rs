//! Test support for the Sentinel tests: backends that find the master of a test-servers
//! [`RedisCluster`] through its Sentinels, and probes of the members.
#![allow(dead_code)]

use lock_core::LockError;
use lock_redis::{RedisBackend, RedisConnectConfig};
use std::future::Future;
use std::time::{Duration, Instant};
use test_servers::{redis_call, RedisCluster, Reply, REDIS_MASTER_NAME};

/// Connect and response timeouts of the tests' backends: a request during a failover must
/// fail within them (plus one connect timeout per Sentinel that does not answer).
pub const CONNECT: Duration = Duration::from_secs(1);
pub const RESPONSE: Duration = Duration::from_secs(1);

/// The longest a failover may take in these tests: Sentinel deems the master down after 2 s,
/// elects one of its own and promotes a replica; room for a second round on a loaded machine.
pub const FAILOVER: Duration = Duration::from_secs(20);

/// The longest a failed request may take: one attempt (the Sentinels answer at once on
/// loopback; the master's connect and response timeouts) and its own response timeout, with
/// margin for a loaded machine.
pub const SLOWEST_FAILURE: Duration = Duration::from_secs(4);

/// The cluster's Sentinels, the first as `redis://host:port/`, the others as `host:port`
/// (both forms are accepted).
pub fn sentinels(cluster: &RedisCluster) -> Vec<String> {
    let addrs = cluster.sentinel_addrs();
    let mut out: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    out[0] = format!("redis://{}/", addrs[0]);
    out
}

pub fn config(prefix: &str) -> RedisConnectConfig {
    RedisConnectConfig {
        connect_timeout: CONNECT,
        response_timeout: RESPONSE,
        key_prefix: prefix.to_string(),
        ..RedisConnectConfig::default()
    }
}

/// A backend that finds the cluster's master through its Sentinels.
pub async fn backend(cluster: &RedisCluster, prefix: &str) -> RedisBackend {
    RedisBackend::connect_sentinel(&sentinels(cluster), REDIS_MASTER_NAME, config(prefix))
        .await
        .expect("connect through Sentinel")
}

/// Run a blocking cluster operation from a multi-threaded test runtime.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

/// What a run of failing requests looked like.
#[derive(Debug, Default)]
pub struct Failures {
    pub count: u32,
    pub slowest: Duration,
    pub first: Option<String>,
}

/// Repeat `request` every 50 ms until it succeeds, for at most `bound`: every failure must be a
/// [`LockError::Backend`] that took less than [`SLOWEST_FAILURE`]. Returns the value, the
/// failures and how long it took.
pub async fn until_ok<T, F, Fut>(bound: Duration, mut request: F) -> (T, Failures, Duration)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let start = Instant::now();
    let mut failures = Failures::default();
    loop {
        let sent = Instant::now();
        match request().await {
            Ok(v) => return (v, failures, start.elapsed()),
            Err(e) => {
                let took = sent.elapsed();
                assert!(matches!(e, LockError::Backend { .. }), "{e:?}");
                assert!(took < SLOWEST_FAILURE, "a failed request took {took:?}: {e}");
                failures.count += 1;
                failures.slowest = failures.slowest.max(took);
                failures.first.get_or_insert_with(|| e.to_string());
                assert!(start.elapsed() < bound, "still failing after {:?}: {e}", start.elapsed());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// `GET key` at member `i`'s own port (whatever the faults on its proxy).
pub fn get(cluster: &RedisCluster, i: usize, key: &str) -> Reply {
    redis_call(cluster.direct_addr(i), &["GET", key]).unwrap_or_else(|e| panic!("GET at {i}: {e}"))
}

/// The first word of `ROLE` at member `i`'s own port ("master", "slave").
pub fn role(cluster: &RedisCluster, i: usize) -> String {
    match redis_call(cluster.direct_addr(i), &["ROLE"]) {
        Ok(Reply::Array(a)) => a[0].text().unwrap_or("").to_string(),
        other => panic!("ROLE at {i}: {other:?}"),
    }
}

/// Poll `what` every 50 ms until it holds, or panic after `timeout` naming `name`.
pub fn eventually(timeout: Duration, name: &str, what: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !what() {
        assert!(Instant::now() < deadline, "{name} did not happen within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A stand-in for a Sentinel that names whatever address the test says (or none): to demote a
/// master under an open connection without a real Sentinel's `CLIENT KILL`, which would hide
/// the `READONLY` path. It answers `SENTINEL ...` with the address and anything else `+OK`
/// (the driver's connection setup).
pub struct FakeSentinel {
    addr: std::net::SocketAddr,
    master: std::sync::Arc<std::sync::Mutex<Option<std::net::SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeSentinel {
    pub async fn start() -> FakeSentinel {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let master = std::sync::Arc::new(std::sync::Mutex::new(None));
        let named = master.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, named.clone()));
            }
        });
        FakeSentinel { addr, master, task }
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Name `master` from now on (`None`: answer nil, no such master).
    pub fn name(&self, master: Option<std::net::SocketAddr>) {
        *self.master.lock().unwrap() = master;
    }
}

impl Drop for FakeSentinel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    stream: tokio::net::TcpStream,
    master: std::sync::Arc<std::sync::Mutex<Option<std::net::SocketAddr>>>,
) {
    use tokio::io::AsyncWriteExt;
    let (read, mut write) = stream.into_split();
    let mut read = tokio::io::BufReader::new(read);
    while let Some(args) = read_command(&mut read).await {
        let sentinel = args.first().is_some_and(|a| a.eq_ignore_ascii_case("SENTINEL"));
        let named = *master.lock().unwrap();
        let reply = match (sentinel, named) {
            (false, _) => "+OK\r\n".to_string(),
            (true, None) => "*-1\r\n".to_string(),
            (true, Some(a)) => {
                let (host, port) = (a.ip().to_string(), a.port().to_string());
                format!("*2\r\n${}\r\n{host}\r\n${}\r\n{port}\r\n", host.len(), port.len())
            }
        };
        if write.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// One RESP command (an array of bulk strings), or `None` at the end of the stream.
pub async fn read_command(r: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> Option<Vec<String>> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut line = String::new();
    r.read_line(&mut line).await.ok().filter(|&n| n > 0)?;
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0; len + 2];
        r.read_exact(&mut buf).await.ok()?;
        args.push(String::from_utf8_lossy(&buf[..len]).into_owned());
    }
    Some(args)
}
