//! What every server shares: a free port, a data directory, a child process that cannot outlive
//! its test binary, the wait until it answers, a stop and a start again on the same port and
//! directory (a server restart is a fault the lock clients must survive), and the one-per-binary
//! keeper.

use crate::ServerError;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// Every server's data directory is `<temp dir>/lockbench-<kind>-<pid>-<n>`.
const DIR_PREFIX: &str = "lockbench-";

/// A loopback port that was free a moment ago (another process may take it before the server
/// binds it: the servers' `start` retries).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral loopback port")
        .local_addr()
        .unwrap()
        .port()
}

/// A loopback address where nothing listens, for as long as this value lives: its socket is
/// bound but never listens, so a connection to it is refused at once, and no other server can
/// take the port meanwhile (a port from [`free_port`] could be taken by a server of a test
/// running beside, and a test of "nobody answers" would then reach it).
pub struct ClosedPort {
    socket: tokio::net::TcpSocket,
}

impl ClosedPort {
    /// Bind an ephemeral loopback port without listening on it.
    pub fn new() -> ClosedPort {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind an ephemeral loopback port");
        ClosedPort { socket }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.socket.local_addr().expect("a bound socket has an address")
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}

/// Remove data dirs left by test binaries that have exited (a server kept in a `static` is
/// never dropped, so its binary cannot remove its dir itself).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(DIR_PREFIX) else {
            continue;
        };
        let pid = rest.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// A new data directory for a server of `kind`; the first one of a test binary sweeps the
/// stale ones first.
pub(crate) fn temp_dir(kind: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    static CLEAN: std::sync::Once = std::sync::Once::new();
    CLEAN.call_once(remove_stale_dirs);
    let dir = std::env::temp_dir().join(format!(
        "{DIR_PREFIX}{kind}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir for the test server");
    dir
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

/// A child spawned from a thread of its own that lives exactly as long as the child is wanted.
/// The death signal is tied to the *thread* that spawned the child, so spawning from whatever
/// thread calls `start` or `start_again` (a tokio blocking-pool thread, which ends after 10 s
/// idle; a harness's short-lived helper) would kill the server behind its owner's back. The
/// holder thread ends when `stop` is dropped (after the child was killed), or with the process.
struct Held {
    child: Child,
    _stop: mpsc::Sender<()>,
}

fn spawn_held(cmd: Command) -> std::io::Result<Held> {
    let (result_tx, result_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    std::thread::Builder::new().name("test-server-holder".into()).spawn(move || {
        let mut cmd = cmd;
        let spawned = cmd.spawn();
        let ok = spawned.is_ok();
        let _ = result_tx.send(spawned);
        if ok {
            // Err once the sender is dropped: the server was stopped or dropped.
            let _ = stop_rx.recv();
        }
    })?;
    let child =
        result_rx.recv().map_err(|_| std::io::Error::other("the server holder thread died"))??;
    Ok(Held { child, _stop: stop_tx })
}

/// A server process and its data directory: killed, and the directory removed, on drop. It can
/// be stopped (killed, as by a crash, keeping the directory), paused (`SIGSTOP`) and started
/// again on the same port with the same command and directory.
pub(crate) struct Process {
    held: Option<Held>,
    dir: PathBuf,
    port: u16,
    launch: &'static Launch,
    /// The process in messages: "redis-server", "etcd member 2".
    label: String,
    command: Box<dyn Fn() -> Command + Send + Sync>,
}

impl Process {
    /// Kill the server (`SIGKILL`: a crash, nothing is flushed that the server had not already
    /// written; a paused one too) and wait until it is gone; the data directory stays. A no-op
    /// when stopped.
    pub fn stop(&mut self) {
        if let Some(mut held) = self.held.take() {
            let _ = held.child.kill();
            let _ = held.child.wait();
        }
    }

    /// Start the server again with the command, port and data directory it had, and wait until
    /// it answers. A no-op when it runs. On failure the directory stays (the process owns it).
    pub fn start_again(&mut self) -> Result<(), ServerError> {
        if self.held.is_some() {
            return Ok(());
        }
        let mut held = self.launch.start(self.command.as_ref(), &self.dir)?;
        let deadline = Instant::now() + self.launch.deadline;
        let ready = wait_ready(self.launch, &mut held, &self.label, &self.dir, self.port, deadline);
        ready.map(|()| self.held = Some(held))
    }

    /// Start the server again (as [`Process::start_again`]) without waiting until it answers:
    /// [`Process::poll_ready`] says when it does.
    pub fn spawn_again(&mut self) -> Result<(), ServerError> {
        if self.held.is_none() {
            self.held = Some(self.launch.start(self.command.as_ref(), &self.dir)?);
        }
        Ok(())
    }

    /// Whether it answers now: `Ok(false)` while it starts (or is stopped), an error naming it
    /// and quoting its log once it has exited.
    pub fn poll_ready(&mut self) -> Result<bool, ServerError> {
        let Some(held) = &mut self.held else { return Ok(false) };
        if (self.launch.ready)(self.port) && listens_on(held.child.id(), self.port) {
            return Ok(true);
        }
        match held.child.try_wait() {
            Ok(Some(status)) => {
                self.held = None;
                Err(ServerError::exited(&self.label, status, log_of(self.launch, &self.dir)))
            }
            _ => Ok(false),
        }
    }

    /// The error of a server that did not answer within `waited`, quoting its log.
    pub fn not_ready(&self, waited: Duration) -> ServerError {
        let log = self.launch.log_on_timeout.then(|| log_of(self.launch, &self.dir));
        ServerError::start_timeout(&self.label, self.port, self.launch.probe, waited, log)
    }

    /// Replace the command that starts it (from its next start on).
    pub fn set_command(&mut self, command: impl Fn() -> Command + Send + Sync + 'static) {
        self.command = Box::new(command);
    }

    /// Send `signal` (`SIGSTOP`, `SIGCONT`) to the running server.
    pub fn signal(&self, signal: libc::c_int) -> Result<(), ServerError> {
        let pid =
            self.pid().ok_or_else(|| ServerError::NotRunning { label: self.label.clone() })?;
        // SAFETY: kill(2) on our own child's pid; the child is not reaped while we hold it.
        if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
            let error = std::io::Error::last_os_error();
            return Err(ServerError::io(format!("signal {}", self.label), error));
        }
        Ok(())
    }

    /// The loopback port it answers on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.held.as_ref().map(|h| h.child.id())
    }

    /// Whether the server was started and not stopped since.
    pub fn is_running(&self) -> bool {
        self.held.is_some()
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process in messages.
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The last lines of the server's log in `dir`, for a failure message.
fn log_of(launch: &Launch, dir: &Path) -> String {
    log_tail(&dir.join(launch.log), 30)
}

/// The last `lines` lines of the log at `path` (empty when it cannot be read).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether the socket listening on loopback `port` is process `pid`'s (or one of its
/// descendants'). A server that lost the race for its port (taken by another test's server
/// between [`free_port`] and its bind) exits, but the other server answers the readiness
/// probe meanwhile: without this check a test went on with a stranger's Redis and lost its
/// connections ("broken pipe") when the test that owned it ended. Where `/proc/net` cannot be
/// read, nothing can be checked and every listener counts as the server's.
fn listens_on(pid: u32, port: u16) -> bool {
    let Some(inodes) = listening_inodes(port) else { return true };
    let mut pids = vec![pid];
    while let Some(p) = pids.pop() {
        for fd in std::fs::read_dir(format!("/proc/{p}/fd")).into_iter().flatten().flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else { continue };
            let target = target.to_string_lossy();
            let inode = target.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']'));
            if inode.is_some_and(|i| inodes.iter().any(|l| l == i)) {
                return true;
            }
        }
        for task in std::fs::read_dir(format!("/proc/{p}/task")).into_iter().flatten().flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            pids.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    false
}

/// The inodes of the sockets listening on `port` (IPv4 and IPv6), or `None` when neither
/// table can be read.
fn listening_inodes(port: u16) -> Option<Vec<String>> {
    let mut inodes = Vec::new();
    let mut read_any = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        read_any = true;
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
        for fields in text.lines().skip(1).map(|l| l.split_whitespace().collect::<Vec<_>>()) {
            let local_port = fields.get(1).and_then(|a| a.rsplit(':').next());
            let listening = fields.get(3) == Some(&"0A");
            if listening && local_port.and_then(|h| u16::from_str_radix(h, 16).ok()) == Some(port) {
                inodes.extend(fields.get(9).map(|i| i.to_string()));
            }
        }
    }
    read_any.then_some(inodes)
}

/// Wait until the server `held` runs answers on `port`, it exits, or `deadline` passes (then
/// it is killed).
fn wait_ready(
    launch: &Launch,
    held: &mut Held,
    label: &str,
    dir: &Path,
    port: u16,
    deadline: Instant,
) -> Result<(), ServerError> {
    let started = Instant::now();
    loop {
        if (launch.ready)(port) && listens_on(held.child.id(), port) {
            return Ok(());
        }
        if let Ok(Some(status)) = held.child.try_wait() {
            return Err(ServerError::exited(label, status, log_of(launch, dir)));
        }
        if Instant::now() > deadline {
            let _ = held.child.kill();
            let _ = held.child.wait();
            let log = launch.log_on_timeout.then(|| log_of(launch, dir));
            return Err(ServerError::start_timeout(
                label,
                port,
                launch.probe,
                started.elapsed(),
                log,
            ));
        }
        std::thread::sleep(launch.poll);
    }
}

/// How one kind of server is spawned, recognised as ready, and named in failures.
pub struct Launch {
    /// The program, as in "spawn {program}: {error}".
    pub program: &'static str,
    /// What a missing program means, as in "{missing}: {install}".
    pub missing: &'static str,
    /// The Debian package that provides the program, if one does.
    pub package: Option<&'static str>,
    /// How to get the program ([`INSTALL_HINT`](crate::INSTALL_HINT) for a packaged server).
    pub install: &'static str,
    /// The server, as in "{name} exited with ..." and "{name} on port ... did not answer ...".
    pub name: &'static str,
    /// The readiness request, as in "did not answer {probe} within ...".
    pub probe: &'static str,
    /// The file in the data directory that takes the server's stdout and stderr.
    pub log: &'static str,
    /// Whether the did-not-answer failure quotes the log.
    pub log_on_timeout: bool,
    /// Whether the server on this loopback port answers (and is ready to serve).
    pub ready: fn(u16) -> bool,
    /// How long a server has to answer after a (re)start.
    pub deadline: Duration,
    /// How often it is asked.
    pub poll: Duration,
}

impl Launch {
    /// Spawn the server `command` builds (output into the log in `dir`, killed when the test
    /// binary exits) and wait until the server on `port` is ready. A failure is an `Err` (the
    /// caller may retry on another port; a missing program is
    /// [`ServerError::NotInstalled`]), with `dir` removed.
    pub(crate) fn spawn(
        &'static self,
        command: impl Fn() -> Command + Send + Sync + 'static,
        dir: PathBuf,
        port: u16,
    ) -> Result<Process, ServerError> {
        let mut process = self.spawn_unready(self.name.to_string(), command, dir, port)?;
        let deadline = Instant::now() + self.deadline;
        let held = process.held.as_mut().expect("just spawned");
        wait_ready(self, held, &process.label, &process.dir, port, deadline)?;
        Ok(process)
    }

    /// Spawn the server `command` builds, named `label` in failures, without waiting until it
    /// answers on `port` ([`Process::poll_ready`]). On failure `dir` is removed.
    pub(crate) fn spawn_unready(
        &'static self,
        label: String,
        command: impl Fn() -> Command + Send + Sync + 'static,
        dir: PathBuf,
        port: u16,
    ) -> Result<Process, ServerError> {
        let mut process =
            Process { held: None, dir, port, launch: self, label, command: Box::new(command) };
        match self.start(process.command.as_ref(), &process.dir) {
            Ok(held) => {
                process.held = Some(held);
                Ok(process)
            }
            Err(e) => Err(e), // dropping `process` removes the directory
        }
    }

    /// Spawn the command (output appended to the log in `dir`, so that the log of a restarted
    /// server keeps what its earlier runs wrote), without waiting.
    fn start(
        &self,
        command: &(dyn Fn() -> Command + Send + Sync),
        dir: &Path,
    ) -> Result<Held, ServerError> {
        let mut cmd = command();
        let path = dir.join(self.log);
        let open_log = |e| ServerError::io(format!("open the log {}", path.display()), e);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        let log = log.map_err(open_log)?;
        cmd.stdin(Stdio::null()).stdout(log.try_clone().map_err(open_log)?).stderr(log);
        die_with_parent(&mut cmd);
        match spawn_held(cmd) {
            Ok(h) => Ok(h),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(self.not_installed(e)),
            Err(e) => Err(ServerError::io(format!("spawn {}", self.program), e)),
        }
    }

    /// The error of a program that is not there.
    pub(crate) fn not_installed(&self, source: std::io::Error) -> ServerError {
        ServerError::NotInstalled {
            program: self.program.to_string(),
            package: self.package,
            missing: self.missing.to_string(),
            install: self.install,
            source: Some(source),
        }
    }
}

/// Call `try_start` until it succeeds, 3 times at most, then return "could not start {name}"
/// and the last failure; a missing program at once.
pub(crate) fn try_with_retries<S>(
    name: &str,
    mut try_start: impl FnMut() -> Result<S, ServerError>,
) -> Result<S, ServerError> {
    // A free port can be taken by someone else between our probe and the server's bind.
    let mut last = try_start();
    for _ in 1..3 {
        match last {
            Ok(s) => return Ok(s),
            Err(e) if e.is_not_installed() => return Err(e),
            Err(_) => last = try_start(),
        }
    }
    last.map_err(|e| ServerError::context(format!("could not start {name}"), e))
}

/// One server per test binary, spawned from a thread (named `thread`) that lives as long as
/// the process, so the death signal fires only when the binary exits. A panic of `start` is
/// the caller's panic.
pub(crate) fn keep<S: Send + Sync + 'static>(
    cell: &'static OnceLock<S>,
    thread: &str,
    start: impl FnOnce() -> S + Send + 'static,
) -> &'static S {
    cell.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || {
                let server = std::panic::catch_unwind(std::panic::AssertUnwindSafe(start));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A "server" that never listens: `sleep`, ready when its port takes a connection.
    static SLEEPER: Launch = Launch {
        program: "sleep",
        missing: "sleep (coreutils)",
        package: Some("coreutils"),
        install: "install coreutils",
        name: "sleeper",
        probe: "a connection",
        log: "sleeper.log",
        log_on_timeout: false,
        ready: |port| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        deadline: Duration::from_secs(10),
        poll: Duration::from_millis(20),
    };

    /// A server that lost its port to another process is not taken for ready because the
    /// other process answers there: it fails when it exits, and the caller tries another port.
    #[test]
    fn another_process_answering_on_the_port_is_not_the_server() {
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = other.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port), "this process's own listener");
        let sleep = || {
            let mut c = Command::new("sleep");
            c.arg("0.3");
            c
        };
        let err = SLEEPER.spawn(sleep, temp_dir("sleeper"), port).err().expect("not ready");
        assert!(matches!(err, ServerError::Exited { .. }), "{err}");
        assert!(err.to_string().starts_with("sleeper exited"), "{err}");
    }
}
