//! Test support: a real `redis-server` and a real ZooKeeper, each on a free loopback port,
//! started the way the lock-redis and lock-zookeeper tests start theirs (one server per test
//! binary, killed when the binary exits). A missing binary fails the test with the command
//! that installs it; nothing is skipped.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const INSTALL_HINT: &str =
    "install it with `apt-get install -y redis-server zookeeper` (or run `scripts/test-servers.sh install`)";

/// The Debian package's jars; `ZOOKEEPER_CLASSPATH` overrides.
pub const ZK_CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";
/// The ZooKeeper server's tick (sessions as short as 2 ticks are granted).
pub const ZK_TICK_MS: u64 = 200;

/// A server child process with its own data directory; killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral loopback port")
        .local_addr()
        .unwrap()
        .port()
}

/// Remove data dirs left by test binaries that have exited.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("bench-harness-server-") else {
            continue;
        };
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
        "bench-harness-server-{kind}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir for the test server");
    dir
}

/// The server child gets SIGKILL when the thread that spawned it ends, so that a test binary
/// that exits (or is killed) never leaves a server behind.
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

fn talk(port: u16, send: &[u8]) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(300),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(send).ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Spawns `cmd` (its output into `dir/log`) and waits until `ready(port)`.
fn spawn_until(
    mut cmd: Command,
    what: &str,
    dir: PathBuf,
    port: u16,
    ready: fn(u16) -> bool,
    wait: Duration,
) -> Result<Server, String> {
    let log = std::fs::File::create(dir.join("log")).map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    die_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("{what} is not installed (not on PATH): {INSTALL_HINT}")
        }
        Err(e) => return Err(format!("spawn {what}: {e}")),
    };
    let deadline = Instant::now() + wait;
    loop {
        if ready(port) {
            return Ok(Server { child, port, dir });
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("{what} exited with {status}: {log}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "{what} on port {port} did not answer within {wait:?}: {log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}

fn start_redis() -> Result<Server, String> {
    let port = free_port();
    let dir = temp_dir("redis");
    let mut cmd = Command::new("redis-server");
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ])
    .arg("--dir")
    .arg(&dir);
    spawn_until(
        cmd,
        "redis-server",
        dir,
        port,
        |p| talk(p, b"PING\r\n").is_some_and(|a| a.starts_with("+PONG")),
        Duration::from_secs(15),
    )
}

fn start_zookeeper() -> Result<Server, String> {
    let classpath =
        std::env::var("ZOOKEEPER_CLASSPATH").unwrap_or_else(|_| ZK_CLASSPATH.to_string());
    for jar in classpath.split(':') {
        if !std::path::Path::new(jar).exists() {
            panic!("ZooKeeper jar {jar} is missing: {INSTALL_HINT}");
        }
    }
    let port = free_port();
    let dir = temp_dir("zk");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let cfg = format!(
        "tickTime={ZK_TICK_MS}\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n4lw.commands.whitelist=*\nminSessionTimeout={}\nmaxSessionTimeout=60000\n\
         initLimit=10\nsyncLimit=5\npreAllocSize=1024\nmaxClientCnxns=0\n",
        data.display(),
        2 * ZK_TICK_MS
    );
    let cfg_path = dir.join("zoo.cfg");
    std::fs::write(&cfg_path, cfg).map_err(|e| e.to_string())?;
    let mut cmd = Command::new("java");
    cmd.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-Dzookeeper.admin.enableServer=false")
        .args([
            "-cp",
            &classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        ])
        .arg(&cfg_path);
    spawn_until(
        cmd,
        "java (ZooKeeper)",
        dir,
        port,
        |p| talk(p, b"ruok").is_some_and(|a| a == "imok"),
        Duration::from_secs(60),
    )
}

fn start_with_retries(start: fn() -> Result<Server, String>, what: &str) -> Server {
    let mut last = String::new();
    // A free port can be taken by someone else between our probe and the server's bind.
    for _ in 0..3 {
        match start() {
            Ok(s) => return s,
            Err(e) => last = e,
        }
    }
    panic!("could not start {what}: {last}");
}

/// One server per test binary, spawned from a thread that lives as long as the process, so
/// the death signal fires only when the binary exits.
fn keep(start: fn() -> Server, cell: &'static OnceLock<Server>) -> &'static Server {
    cell.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("test-server-keeper".into())
            .spawn(move || {
                let _ = tx.send(std::panic::catch_unwind(start));
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

/// The test binary's `redis-server`.
pub fn redis() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    keep(|| start_with_retries(start_redis, "redis-server"), &SERVER)
}

/// The test binary's ZooKeeper.
pub fn zookeeper() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    keep(|| start_with_retries(start_zookeeper, "ZooKeeper"), &SERVER)
}
