//! Test support: a real `redis-server` on a free loopback port, a cuttable TCP proxy per
//! contender, and the conformance [`Fixture`].
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::Locker;
use lock_redis::{RedisBackend, RedisConnectConfig, Variant};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const INSTALL_HINT: &str =
    "install it with `apt-get install -y redis-server zookeeper` (or run `scripts/test-servers.sh install`)";

/// A `redis-server` child process with its own data directory; killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port").local_addr().unwrap().port()
}

/// Remove data dirs left by test binaries that have exited (a server kept in a `static` is
/// never dropped, so its binary cannot remove its dir itself).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("lockbench-") else { continue };
        let pid = rest.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

fn temp_dir(kind: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    static CLEAN: std::sync::Once = std::sync::Once::new();
    CLEAN.call_once(remove_stale_dirs);
    let dir = std::env::temp_dir().join(format!(
        "lockbench-{kind}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir for the test server");
    dir
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

impl RedisServer {
    /// Start a server, or panic saying what to install.
    pub fn start() -> RedisServer {
        let mut last = String::new();
        // A free port can be taken by someone else between our probe and the server's bind.
        for _ in 0..3 {
            match Self::try_start() {
                Ok(s) => return s,
                Err(e) => last = e,
            }
        }
        panic!("could not start redis-server: {last}");
    }

    fn try_start() -> Result<RedisServer, String> {
        let port = free_port();
        let dir = temp_dir("redis");
        let log = std::fs::File::create(dir.join("redis.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        die_with_parent(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("redis-server is not installed (not on PATH): {INSTALL_HINT}")
            }
            Err(e) => return Err(format!("spawn redis-server: {e}")),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if ping(port) {
                return Ok(RedisServer { child, port, dir });
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("redis-server exited with {status}: {log}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("redis-server on port {port} did not answer PING within 15 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server child gets SIGKILL when the thread that spawned it ends, so that a test binary
/// that exits (or is killed) never leaves a server behind, even one kept in a `static`.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// One server per test binary, spawned from a thread that lives as long as the process, so
/// the death signal fires only when the binary exits.
pub fn shared() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("redis-server-keeper".into())
            .spawn(move || {
                let server = std::panic::catch_unwind(RedisServer::start);
                let _ = tx.send(server);
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn the server keeper thread");
        match rx.recv().expect("server keeper thread") {
            Ok(s) => s,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

/// A prefix no other test of this binary uses.
pub fn unique_prefix(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t{}-{tag}:", N.fetch_add(1, Ordering::Relaxed))
}

/// A TCP forwarder to the server for one client. [`Proxy::cut`] closes its connections and
/// refuses new ones: the client is cut off as by a crash or a partition, while the server keeps
/// whatever the client left there. [`Proxy::pause`] holds every byte in both directions until
/// [`Proxy::resume`], as a stalled process or network would.
pub struct Proxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    paused: tokio::sync::watch::Sender<bool>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // What was read during a pause is held back, not lost.
        while *paused.borrow_and_update() {
            if paused.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let (paused, _) = tokio::sync::watch::channel(false);
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (cut2, tasks2, paused2) = (cut.clone(), tasks.clone(), paused.clone());
        let accept = tokio::spawn(async move {
            loop {
                let client = match listener.accept().await {
                    Ok((c, _)) => c,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if cut2.load(Ordering::SeqCst) {
                    continue;
                }
                let paused = paused2.subscribe();
                let conn = tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, paused.clone()), pipe(sr, cw, paused));
                });
                tasks2.lock().unwrap().push(conn.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        Proxy { addr, cut, paused, tasks }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drop every connection (both sides see them close) and the listener (new connections are
    /// refused).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// Hold all traffic until [`Proxy::resume`].
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Let held and new traffic through again.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// The conformance fixture: every contender has its own connection through its own proxy;
/// keys of one fixture carry a prefix of their own.
pub struct RedisFixture {
    server: SocketAddr,
    prefix: String,
    variant: Variant,
    ttl: Duration,
    proxies: Mutex<HashMap<String, Proxy>>,
}

impl RedisFixture {
    /// Run `f` on contender `name`'s proxy.
    pub fn with_proxy<R>(&self, name: &str, f: impl FnOnce(&Proxy) -> R) -> R {
        f(self.proxies.lock().unwrap().get(name).expect("no such contender"))
    }

    pub async fn new(tag: &str, variant: Variant, ttl: Duration) -> RedisFixture {
        let server = shared().addr();
        RedisFixture { server, prefix: unique_prefix(tag), variant, ttl, proxies: Mutex::default() }
    }

    pub async fn backend(&self, name: &str) -> RedisBackend {
        let proxy = Proxy::start(self.server).await;
        let url = format!("redis://{}/", proxy.addr());
        let config = RedisConnectConfig { key_prefix: self.prefix.clone(), ..RedisConnectConfig::default() };
        let backend = RedisBackend::connect_with(&url, config).await.expect("connect through the proxy");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxy) {
            old.cut();
        }
        backend
    }
}

#[async_trait]
impl Fixture for RedisFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        self.backend(name).await.locker(name, self.variant.clone()).expect("locker")
    }
    async fn cut_off(&self, name: &str) {
        if let Some(p) = self.proxies.lock().unwrap().get(name) {
            p.cut();
        }
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // A waiter polls every 100 ms (jedis) / 50 ms (token); the rest is margin for a loaded
        // 2-core machine.
        Duration::from_millis(1000)
    }
}
