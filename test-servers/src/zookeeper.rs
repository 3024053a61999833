//! A real standalone ZooKeeper.

use crate::process::{keep, temp_dir, try_with_retries, Launch, Process};
use crate::{free_port, INSTALL_HINT};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The Debian package's jars; `ZOOKEEPER_CLASSPATH` overrides.
pub const ZK_DEFAULT_CLASSPATH: &str =
    "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// The server's tick: session expiry is checked at this granularity, and the smallest session
/// timeout it grants is 2 ticks.
pub const ZK_TICK_MS: u64 = 200;

/// A ZooKeeper server (standalone, on `java`) child process on a free loopback port, with its
/// own data directory; killed on drop (and when the test binary exits).
///
/// [`ZkServer::stop`] and [`ZkServer::start_again`] restart it on the same port with the same
/// data directory, as a crash and a restart would. ZooKeeper writes every transaction (session
/// creations and closes included) to its log before it answers, and a restarted standalone
/// server reloads its sessions from the snapshot and log and gives each of them a whole session
/// timeout again: a client that reconnects within that time keeps its session, its ephemeral
/// znodes and its watches.
pub struct ZkServer {
    process: Process,
    /// The loopback client port it listens on.
    pub port: u16,
}

const LAUNCH: Launch = Launch {
    program: "java",
    missing: "java is not installed (not on PATH), ZooKeeper needs it",
    name: "ZooKeeper",
    probe: "ruok",
    log: "zookeeper.log",
    log_on_timeout: true,
    ready: |port| four_letter(port, "ruok").as_deref() == Some("imok"),
    deadline: Duration::from_secs(60),
    poll: Duration::from_millis(50),
};

/// Send a four-letter command (`ruok`, `wchp`, ...: the server allows them all) to the server
/// on loopback `port` and return the answer.
pub fn four_letter(port: u16, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

impl ZkServer {
    /// Start a server (it answers `ruok` within 60 s, on the third port at the latest), or
    /// panic saying why, or what to install. The tick is [`ZK_TICK_MS`]; granted session
    /// timeouts range from 2 ticks to 60 s.
    pub fn start() -> ZkServer {
        Self::launch().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`ZkServer::start`], returning why it could not start (what to install, when a jar is
    /// missing) instead of panicking: for a benchmark binary.
    pub fn launch() -> Result<ZkServer, String> {
        let classpath = std::env::var("ZOOKEEPER_CLASSPATH")
            .unwrap_or_else(|_| ZK_DEFAULT_CLASSPATH.to_string());
        for jar in classpath.split(':') {
            if !std::path::Path::new(jar).exists() {
                return Err(format!("ZooKeeper jar {jar} is missing: {INSTALL_HINT}"));
            }
        }
        try_with_retries("ZooKeeper", || Self::try_start(&classpath))
    }

    fn try_start(classpath: &str) -> Result<ZkServer, String> {
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
        let classpath = classpath.to_string();
        let command = move || {
            let mut cmd = Command::new("java");
            cmd.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
                .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
                .arg("-Dzookeeper.admin.enableServer=false")
                .args(["-cp", &classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain"])
                .arg(&cfg_path);
            cmd
        };
        let process = LAUNCH.spawn(command, dir, port)?;
        Ok(ZkServer { process, port })
    }

    /// Kill the server (`SIGKILL`, as a crash) and wait until it is gone. Clients see their
    /// connections closed and new ones refused; the server's clock of session expiry stops
    /// with it. The port and the data directory stay this server's. A no-op when stopped.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Start the stopped server again on the same port with the same data directory, and wait
    /// until it answers `ruok` (60 s at most), or panic saying why (another process may have
    /// taken the port meanwhile). It reloads its znodes and sessions. A no-op when it runs.
    pub fn start_again(&mut self) {
        if let Err(e) = self.try_start_again() {
            panic!("{e}");
        }
    }

    /// [`ZkServer::start_again`], returning the failure instead of panicking.
    pub fn try_start_again(&mut self) -> Result<(), String> {
        self.process
            .start_again()
            .map_err(|e| format!("could not start ZooKeeper again on port {}: {e}", self.port))
    }

    /// [`ZkServer::stop`], `downtime` of sleep, [`ZkServer::start_again`].
    pub fn restart_after(&mut self, downtime: Duration) {
        self.stop();
        std::thread::sleep(downtime);
        self.start_again();
    }

    /// Its data directory (removed when it is dropped).
    pub fn dir(&self) -> &std::path::Path {
        self.process.dir()
    }

    /// Whether it runs (started and not stopped since).
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// `127.0.0.1:<port>`, as ZooKeeper clients take it.
    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// The test binary's ZooKeeper: started by the first call (which panics if it cannot be), then
/// the same one until the binary exits.
pub fn shared_zookeeper() -> &'static ZkServer {
    shared_zookeeper_with(|_| {})
}

/// [`shared_zookeeper`], with `prepare` run on the server once it answers and before anyone
/// gets it (a warm-up for a fresh JVM, say). Only the call that starts the server runs its
/// `prepare`, so a test binary should always call this one with the same `prepare`.
pub fn shared_zookeeper_with(prepare: fn(&ZkServer)) -> &'static ZkServer {
    static SERVER: OnceLock<ZkServer> = OnceLock::new();
    keep(&SERVER, "zookeeper-keeper", move || {
        let server = ZkServer::start();
        prepare(&server);
        server
    })
}
