//! A real `redis-server`.

use crate::free_port;
use crate::process::{keep, temp_dir, with_retries, Launch, Process};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// A `redis-server` child process on a free loopback port, with its own data directory and no
/// persistence; killed on drop (and when the test binary exits).
pub struct RedisServer {
    _process: Process,
    /// The loopback port it listens on.
    pub port: u16,
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
    /// Start a server (it answers `PING` within 15 s, on the third port at the latest), or
    /// panic saying why, or what to install.
    pub fn start() -> RedisServer {
        with_retries("redis-server", Self::try_start)
    }

    fn try_start() -> Result<RedisServer, String> {
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
        let process = LAUNCH.spawn(cmd, dir, port)?;
        Ok(RedisServer {
            _process: process,
            port,
        })
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
