//! A real single-member `etcd`.

use crate::free_port;
use crate::process::{keep, temp_dir, try_with_retries, with_retries, Launch, Process};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The member's heartbeat interval. etcd grants no lease shorter than 1.5 election timeouts
/// (rounded up to a whole second), so short heartbeats and elections let the tests use
/// 1-second leases; a single member also elects itself after one election timeout, so it
/// starts faster.
pub const ETCD_HEARTBEAT_MS: u64 = 50;
/// The member's election timeout (see [`ETCD_HEARTBEAT_MS`]): the shortest lease it grants is
/// 1.5 × this, rounded up to a whole second: 1 s.
pub const ETCD_ELECTION_MS: u64 = 500;

/// An `etcd` child process (a cluster of one member) on two free loopback ports, the client
/// port and the peer port, with its own data directory; killed on drop (and when the test
/// binary exits).
///
/// [`EtcdServer::stop`] and [`EtcdServer::start_again`] restart it on the same ports with the
/// same data directory, as a crash and a restart would. etcd writes every change (keys,
/// leases) to its write-ahead log before it answers and replays it on restart; a restarted
/// member gives every lease a whole TTL again once it leads (its `Promote`), so a client that
/// keeps its lease alive within that time keeps its keys.
pub struct EtcdServer {
    process: Process,
    /// The loopback port clients connect to.
    pub port: u16,
    /// The loopback port of the member's peer URL (unused by clients; a cluster of one).
    pub peer_port: u16,
}

const LAUNCH: Launch = Launch {
    program: "etcd",
    missing: "etcd is not installed (not on PATH)",
    name: "etcd",
    probe: "GET /health",
    log: "etcd.log",
    log_on_timeout: true,
    ready: healthy,
    deadline: Duration::from_secs(30),
    poll: Duration::from_millis(50),
};

/// Whether the member on loopback `port` answers `GET /health` with `"health":"true"`: it is
/// up and has a leader (itself), so it can serve writes.
fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let request =
        format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

impl EtcdServer {
    /// Start a member (it answers `GET /health` within 30 s, on the third pair of ports at the
    /// latest), or panic saying why, or what to install.
    pub fn start() -> EtcdServer {
        with_retries("etcd", Self::try_start)
    }

    /// [`EtcdServer::start`], returning why it could not start (what to install, when `etcd`
    /// is missing) instead of panicking: for a benchmark binary.
    pub fn launch() -> Result<EtcdServer, String> {
        try_with_retries("etcd", Self::try_start)
    }

    fn try_start() -> Result<EtcdServer, String> {
        let port = free_port();
        let peer_port = free_port();
        if peer_port == port {
            return Err(format!("the client and peer ports came out the same ({port})"));
        }
        let dir = temp_dir("etcd");
        let data = dir.join("data");
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let command = move || {
            let mut cmd = Command::new("etcd");
            cmd.args(["--name", "lockbench"])
                .arg("--data-dir")
                .arg(&data)
                .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("lockbench={peer_url}")])
                .args(["--initial-cluster-state", "new"])
                .args(["--heartbeat-interval", &ETCD_HEARTBEAT_MS.to_string()])
                .args(["--election-timeout", &ETCD_ELECTION_MS.to_string()])
                .args(["--logger", "zap", "--log-level", "warn"]);
            cmd
        };
        let process = LAUNCH.spawn(command, dir, port)?;
        Ok(EtcdServer { process, port, peer_port })
    }

    /// Kill the member (`SIGKILL`, as a crash) and wait until it is gone. Clients see their
    /// connections closed and new ones refused; its leases' clocks stop with it. The ports and
    /// the data directory stay this server's. A no-op when it is stopped.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Start the stopped member again on the same ports with the same data directory, and
    /// wait until it is healthy (30 s at most), or panic saying why (another process may have
    /// taken a port meanwhile). It replays its log: keys, revisions and leases come back. A
    /// no-op when it runs.
    pub fn start_again(&mut self) {
        if let Err(e) = self.try_start_again() {
            panic!("{e}");
        }
    }

    /// [`EtcdServer::start_again`], returning the failure instead of panicking.
    pub fn try_start_again(&mut self) -> Result<(), String> {
        self.process
            .start_again()
            .map_err(|e| format!("could not start etcd again on port {}: {e}", self.port))
    }

    /// [`EtcdServer::stop`], `downtime` of sleep, [`EtcdServer::start_again`].
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

    /// `http://127.0.0.1:<port>`, the client URL etcd clients take.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// The test binary's `etcd`: started by the first call (which panics if it cannot be), then
/// the same one until the binary exits.
pub fn shared_etcd() -> &'static EtcdServer {
    static SERVER: OnceLock<EtcdServer> = OnceLock::new();
    keep(&SERVER, "etcd-keeper", EtcdServer::start)
}
