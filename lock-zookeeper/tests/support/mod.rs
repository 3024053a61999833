//! Test support: a real ZooKeeper server on a free loopback port, a cuttable TCP proxy per
//! contender, and the conformance [`Fixture`].
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::Locker;
use lock_zookeeper::{ZkBackend, ZkConfig};
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

/// The Debian package's jars; `ZOOKEEPER_CLASSPATH` overrides.
pub const DEFAULT_CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// The server's tick: session expiry is checked at this granularity, and the smallest session
/// timeout it grants is 2 ticks.
pub const TICK_MS: u64 = 200;

/// A ZooKeeper server (standalone) child process with its own data directory; killed on drop.
pub struct ZkServer {
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

/// Send a four-letter command and return the answer.
pub fn four_letter(port: u16, cmd: &str) -> Option<String> {
    let mut s =
        TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

impl ZkServer {
    /// Start a server, or panic saying what to install.
    pub fn start() -> ZkServer {
        let classpath = std::env::var("ZOOKEEPER_CLASSPATH").unwrap_or_else(|_| DEFAULT_CLASSPATH.to_string());
        for jar in classpath.split(':') {
            if !std::path::Path::new(jar).exists() {
                panic!("ZooKeeper jar {jar} is missing: {INSTALL_HINT}");
            }
        }
        let mut last = String::new();
        // A free port can be taken by someone else between our probe and the server's bind.
        for _ in 0..3 {
            match Self::try_start(&classpath) {
                Ok(s) => return s,
                Err(e) => last = e,
            }
        }
        panic!("could not start ZooKeeper: {last}");
    }

    fn try_start(classpath: &str) -> Result<ZkServer, String> {
        let port = free_port();
        let dir = temp_dir("zk");
        let data = dir.join("data");
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        let cfg = format!(
            "tickTime={TICK_MS}\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n4lw.commands.whitelist=*\nminSessionTimeout={}\nmaxSessionTimeout=60000\n\
             initLimit=10\nsyncLimit=5\npreAllocSize=1024\nmaxClientCnxns=0\n",
            data.display(),
            2 * TICK_MS
        );
        let cfg_path = dir.join("zoo.cfg");
        std::fs::write(&cfg_path, cfg).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join("zookeeper.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("java");
        cmd.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-Dzookeeper.admin.enableServer=false")
            .args(["-cp", classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain"])
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        die_with_parent(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("java is not installed (not on PATH), ZooKeeper needs it: {INSTALL_HINT}")
            }
            Err(e) => return Err(format!("spawn java: {e}")),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if four_letter(port, "ruok").as_deref() == Some("imok") {
                return Ok(ZkServer { child, port, dir });
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.join("zookeeper.log")).unwrap_or_default();
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("ZooKeeper exited with {status}: {log}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let log = std::fs::read_to_string(dir.join("zookeeper.log")).unwrap_or_default();
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("ZooKeeper on port {port} did not answer ruok within 60 s: {log}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for ZkServer {
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
pub fn shared() -> &'static ZkServer {
    static SERVER: OnceLock<ZkServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("zookeeper-keeper".into())
            .spawn(move || {
                let server = std::panic::catch_unwind(|| {
                    let server = ZkServer::start();
                    warm_up(&server.hosts());
                    server
                });
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

/// Run the lock recipe's requests a few hundred times before any test does: a fresh JVM
/// interprets them slowly at first, and the time between the server's last touch of a
/// session and the client learning of its grant then eats into the timing margins of the
/// crash and expiry tests.
fn warm_up(hosts: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("warm-up runtime");
    rt.block_on(async {
        let client = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(2))
            .connect(hosts)
            .await
            .expect("warm-up session");
        let dir = "/warm-up";
        let persistent = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
        let ephemeral =
            zookeeper_client::CreateMode::EphemeralSequential.with_acls(zookeeper_client::Acls::anyone_all());
        let _ = client.mkdir(dir, &persistent).await;
        for _ in 0..300 {
            let (_, seq) = client.create(&format!("{dir}/lock-"), b"w", &ephemeral).await.expect("warm-up create");
            let path = format!("{dir}/lock-{seq}");
            let _ = client.list_children(dir).await;
            let _ = client.check_and_watch_stat(&path).await;
            let _ = client.delete(&path, None).await;
        }
    });
}

/// A lock root no other test of this binary uses.
pub fn unique_root(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("/t{}-{tag}/locks", N.fetch_add(1, Ordering::Relaxed))
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

/// The conformance fixture: every contender has its own session through its own proxy; each
/// fixture has a lock root of its own.
pub struct ZkFixture {
    server: SocketAddr,
    root: String,
    session_timeout: Duration,
    proxies: Mutex<HashMap<String, Proxy>>,
}

impl ZkFixture {
    pub async fn new(tag: &str, session_timeout: Duration) -> ZkFixture {
        let server = shared().addr();
        ZkFixture { server, root: unique_root(tag), session_timeout, proxies: Mutex::default() }
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// A new session for contender `name`, through its own proxy.
    pub async fn backend(&self, name: &str) -> ZkBackend {
        let proxy = Proxy::start(self.server).await;
        let config = ZkConfig {
            session_timeout: self.session_timeout,
            connect_timeout: Duration::from_secs(10),
            root: self.root.clone(),
        };
        let backend =
            ZkBackend::connect_with(&proxy.addr().to_string(), config).await.expect("connect through the proxy");
        assert_eq!(backend.session_timeout(), self.session_timeout, "the server must grant the asked session timeout");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxy) {
            old.cut();
        }
        backend
    }

    /// Run `f` on contender `name`'s proxy.
    pub fn with_proxy<R>(&self, name: &str, f: impl FnOnce(&Proxy) -> R) -> R {
        f(self.proxies.lock().unwrap().get(name).expect("no such contender"))
    }
}

#[async_trait]
impl Fixture for ZkFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        Arc::new(self.backend(name).await.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        if let Some(p) = self.proxies.lock().unwrap().get(name) {
            p.cut();
        }
    }
    fn ttl(&self) -> Duration {
        self.session_timeout
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // The server expires sessions on its tick (200 ms) after the timeout; the watch fires
        // at once; the rest is margin for a loaded 2-core machine.
        Duration::from_millis(1200)
    }
}
