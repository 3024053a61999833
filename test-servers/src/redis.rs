//! A real `redis-server`.

use crate::free_port;
use crate::process::{keep, temp_dir, try_with_retries, with_retries, Launch, Process};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// A `redis-server` child process on a free loopback port, with its own data directory; killed
/// on drop (and when the test binary exits). [`RedisServer::start`] runs it without
/// persistence (a restart forgets every key), [`RedisServer::start_persistent`] with an
/// append-only file synced on every write (a restart keeps them).
///
/// [`RedisServer::stop`] and [`RedisServer::start_again`] restart it on the same port with the
/// same directory, as a crash and a restart would.
pub struct RedisServer {
    process: Process,
    /// The loopback port it listens on.
    pub port: u16,
    persistent: bool,
}

const LAUNCH: Launch = Launch {
    program: "redis-server",
    missing: "redis-server is not installed (not on PATH)",
    name: "redis-server",
    probe: "PING",
    log: "redis.log",
    log_on_timeout: false,
    ready: ping,
    deadline: Duration::from_secs(15),
    poll: Duration::from_millis(20),
};

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    ) else {
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
    /// Start a server without persistence (it answers `PING` within 15 s, on the third port at
    /// the latest), or panic saying why, or what to install.
    pub fn start() -> RedisServer {
        with_retries("redis-server", || Self::try_start(false))
    }

    /// [`RedisServer::start`] with persistence: `appendonly yes`, `appendfsync always`, so
    /// that every acknowledged write survives a crash and a restart (keys' expiry times
    /// included: they are absolute, so a TTL keeps running while the server is down).
    pub fn start_persistent() -> RedisServer {
        with_retries("redis-server", || Self::try_start(true))
    }

    /// [`RedisServer::start`] (`persistent: false`) or [`RedisServer::start_persistent`],
    /// returning why it could not start (what to install, when `redis-server` is missing)
    /// instead of panicking: for a benchmark binary.
    pub fn launch(persistent: bool) -> Result<RedisServer, String> {
        try_with_retries("redis-server", || Self::try_start(persistent))
    }

    fn try_start(persistent: bool) -> Result<RedisServer, String> {
        let port = free_port();
        let dir = temp_dir("redis");
        let data = dir.clone();
        let command = move || {
            let mut cmd = Command::new("redis-server");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""]);
            if persistent {
                cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
            } else {
                cmd.args(["--appendonly", "no"]);
            }
            cmd.arg("--dir").arg(&data);
            cmd
        };
        let process = LAUNCH.spawn(command, dir, port)?;
        Ok(RedisServer { process, port, persistent })
    }

    /// Kill the server (`SIGKILL`, as a crash) and wait until it is gone. Clients see their
    /// connections closed and new ones refused. The port and the data directory stay this
    /// server's. A no-op when it is stopped.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Start the stopped server again on the same port, with the same data directory and
    /// settings, and wait until it answers `PING` (15 s at most), or panic saying why (another
    /// process may have taken the port meanwhile). Without persistence it starts empty. A no-op
    /// when it runs.
    pub fn start_again(&mut self) {
        if let Err(e) = self.try_start_again() {
            panic!("{e}");
        }
    }

    /// [`RedisServer::start_again`], returning the failure instead of panicking.
    pub fn try_start_again(&mut self) -> Result<(), String> {
        self.process
            .start_again()
            .map_err(|e| format!("could not start redis-server again on port {}: {e}", self.port))
    }

    /// [`RedisServer::stop`], `downtime` of sleep, [`RedisServer::start_again`].
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

    /// Whether it keeps its keys across a restart ([`RedisServer::start_persistent`]).
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// The test binary's `redis-server`: started by the first call (which panics if it cannot
/// be), then the same one until the binary exits.
pub fn shared_redis() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    keep(&SERVER, "redis-server-keeper", RedisServer::start)
}
