//! PgBouncer, the connection pooler, in front of a [`PostgresServer`]: [`PgBouncer`].

use crate::postgres::{
    check_setpriv, run_as, searchable_by, write_owned, PostgresConn, PostgresServer, PostgresUser,
};
use crate::process::{free_port, temp_dir, try_with_retries, Launch, Process};
use crate::ServerError;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What a test that cannot start PgBouncer tells its reader to do.
const PGBOUNCER_HINT: &str =
    "install it with `apt-get install -y pgbouncer` (`scripts/test.sh` installs it before it runs the tests)";

const LAUNCH: Launch = Launch {
    program: "pgbouncer",
    missing: "PgBouncer is not installed (no /usr/sbin/pgbouncer, nor a pgbouncer on PATH)",
    package: Some("pgbouncer"),
    install: PGBOUNCER_HINT,
    name: "pgbouncer",
    probe: "a TCP connect",
    log: "pgbouncer.log",
    log_on_timeout: true,
    ready: accepts,
    deadline: Duration::from_secs(10),
    poll: Duration::from_millis(50),
};

/// How PgBouncer hands its server connections to clients (`pool_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// A client keeps one server connection from its login to its logout; when it leaves,
    /// the connection is cleaned (`DISCARD ALL`, which also releases its advisory locks)
    /// and serves another client.
    Session,
    /// A client has a server connection for one transaction (a statement outside one) and
    /// may get another for the next: session state, a session-level advisory lock among it,
    /// stays on a connection other clients then use.
    Transaction,
}

impl PoolMode {
    fn name(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// A PgBouncer on a free loopback port in front of a [`PostgresServer`], pooling as
/// [`PoolMode`] says with a small pool, so that clients share server connections; killed
/// (and its directory removed) on drop, and when the test binary exits.
///
/// ## Configuration
/// One pool per user and database, any database name mapped to the server
/// (`* = host=127.0.0.1 port=...`), `default_pool_size` server connections per pool (2 by
/// default: [`PgBouncer::start`]), up to 1,000 clients. Clients log in with SCRAM
/// (`auth_type = scram-sha-256`) against an auth file holding the server's default user and
/// superuser with their plain passwords, which PgBouncer also uses to log in to the server
/// with SCRAM. It listens on `127.0.0.1` only, with no Unix socket, and logs to its standard
/// error, the file `pgbouncer.log` in its directory. Startup parameters it does not track
/// are refused, as PgBouncer does, except `extra_float_digits` (which JDBC-style drivers
/// send) and `options` (which [`psql_call`](crate::psql_call) sends for its statement
/// timeout), both ignored: they do not reach the server.
///
/// ## Running as root
/// PgBouncer refuses to run as root; when the tests run as root it runs as the `postgres`
/// system user through `setpriv --reuid --regid --clear-groups --pdeathsig KILL`, as the
/// PostgreSQL server does, with its configuration and auth file that user's (mode `0600`).
pub struct PgBouncer {
    process: Process,
    port: u16,
    mode: PoolMode,
    conn: PostgresConn,
}

impl PgBouncer {
    /// Start one in front of `server`, pooling in `mode` with `pool_size` server connections
    /// per pool, and wait until it accepts connections; or say why it could not start.
    pub fn launch(
        server: &PostgresServer,
        mode: PoolMode,
        pool_size: u32,
    ) -> Result<PgBouncer, ServerError> {
        let program = program()?;
        let who = run_as()?;
        if who.is_some() {
            check_setpriv()?;
        }
        let users = [server.user().clone(), server.superuser().clone()];
        try_with_retries("pgbouncer", || {
            let port = free_port();
            let dir = temp_dir("pgbouncer");
            let config = configure(&dir, server.port, port, mode, pool_size, &users, who)
                .inspect_err(|_| {
                    let _ = std::fs::remove_dir_all(&dir);
                })?;
            let program = program.clone();
            let command = move || {
                let mut cmd = Command::new("setpriv");
                if let Some(who) = who {
                    cmd.arg(format!("--reuid={}", who.uid))
                        .arg(format!("--regid={}", who.gid))
                        .args(["--clear-groups", "--pdeathsig", "KILL", "--"])
                        .arg(&program);
                } else {
                    cmd = Command::new(&program);
                }
                cmd.arg(&config).env("LC_ALL", "C");
                cmd
            };
            let process = LAUNCH.spawn(command, dir, port)?;
            let conn = PostgresConn { port, ca: None, ..server.conn() };
            Ok(PgBouncer { process, port, mode, conn })
        })
    }

    /// [`PgBouncer::launch`] with a pool of 2, panicking with why it could not start.
    pub fn start(server: &PostgresServer, mode: PoolMode) -> PgBouncer {
        Self::launch(server, mode, 2).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Its pool mode.
    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The server's default user on its database, through PgBouncer (no TLS).
    pub fn conn(&self) -> PostgresConn {
        self.conn.clone()
    }

    /// [`PgBouncer::conn`] as a URL: what a lock client takes.
    pub fn url(&self) -> String {
        self.conn.url()
    }

    /// The process id of the running PgBouncer (`setpriv` becomes it as root).
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Its directory (configuration, auth file, log), removed when it is dropped.
    pub fn dir(&self) -> &Path {
        self.process.dir()
    }
}

/// The `pgbouncer` program: Debian's `/usr/sbin/pgbouncer`, or one on `PATH`.
fn program() -> Result<PathBuf, ServerError> {
    let debian = PathBuf::from("/usr/sbin/pgbouncer");
    let on_path = || {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join("pgbouncer"))
            .find(|p| p.is_file())
    };
    if debian.is_file() {
        return Ok(debian);
    }
    on_path().ok_or_else(|| ServerError::NotInstalled {
        program: "pgbouncer".into(),
        package: LAUNCH.package,
        missing: LAUNCH.missing.into(),
        install: PGBOUNCER_HINT,
        source: None,
    })
}

/// Write the configuration and auth file into `dir` (the user's when `who` is given); the
/// configuration's path.
fn configure(
    dir: &Path,
    server_port: u16,
    port: u16,
    mode: PoolMode,
    pool_size: u32,
    users: &[PostgresUser],
    who: Option<crate::postgres::RunAs>,
) -> Result<PathBuf, ServerError> {
    let io = |path: &Path| {
        let context = format!("write {}", path.display());
        move |e| ServerError::io(context, e)
    };
    if let Some(who) = who {
        searchable_by(&dir.join("x"), who, "postgres")?;
    }
    let auth = dir.join("userlist.txt");
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let list: String =
        users.iter().map(|u| format!("{} {}\n", quote(&u.name), quote(&u.password))).collect();
    write_owned(&auth, &list, who).map_err(io(&auth))?;
    let config = dir.join("pgbouncer.ini");
    let text = format!(
        "[databases]\n* = host=127.0.0.1 port={server_port}\n\n[pgbouncer]\n\
         listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
         auth_type = scram-sha-256\nauth_file = {auth}\npool_mode = {mode}\n\
         default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n\
         max_client_conn = 1000\nmax_db_connections = 0\n\
         ignore_startup_parameters = extra_float_digits, options\n\
         server_login_retry = 1\nlogfile =\npidfile =\n",
        auth = auth.display(),
        mode = mode.name(),
    );
    write_owned(&config, &text, who).map_err(io(&config))?;
    Ok(config)
}

/// Whether something accepts TCP connections on loopback `port` (PgBouncer does once its
/// configuration is loaded; it connects to the server only when a client logs in).
fn accepts(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}
