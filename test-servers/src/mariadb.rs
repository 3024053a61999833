//! MariaDB: a server of one ([`MariadbServer`], whose docs say how it is made, secured and
//! run as root) on a free loopback port, configured by [`Mariadb`]; probes without a client
//! library ([`mariadb_call`], [`MariadbSession`]) through the `mariadb` client binary.

use crate::cluster::{Cluster, ClusterEngine, Layout, Server, Start};
use crate::lines::forward_lines;
use crate::process::{keep, Launch};
use crate::redis::random_password;
use crate::run_as::{is_root, own, searchable_by, system_user, write_owned, RunAs};
use crate::tls::{CertFiles, TestPki};
use crate::{ServerError, INSTALL_HINT};
use std::fmt;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The server's `max_connections`: room for hundreds of lock clients, each holding a
/// connection per lock, beside the probes.
pub const MARIADB_MAX_CONNECTIONS: u32 = 500;
/// How long [`mariadb_call`] and [`MariadbSession::query`] wait for an answer.
pub const MARIADB_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The administrator's name (every privilege, from 127.0.0.1 only).
const ADMIN_USER: &str = "root";
/// The default user's name, and the name of the database it may use.
const DEFAULT_USER: &str = "lockbench";
/// The system user a server runs as when the tests run as root.
const SYSTEM_USER: &str = "mysql";

/// A MariaDB `mariadbd` server on a free loopback port, with its own data directory (made by
/// `mariadb-install-db` at the first start), configured by [`Mariadb`]: users with passwords,
/// TLS when asked; killed on drop (and when the test binary exits).
///
/// [`Server::stop`] and [`Server::start_again`] restart it on the same port with the same data
/// directory, as a crash and a restart would: it keeps its users, databases, tables and
/// sequences (InnoDB recovers them), and every session, with the `GET_LOCK` locks it held, is
/// gone.
///
/// ## The programs
/// From Debian's package `mariadb-server`: `mariadbd` (in `/usr/sbin`, or on `PATH`),
/// `mariadb-install-db`, and the clients `mariadb` and `mariadb-admin`. A missing one fails
/// the test with [`ServerError::NotInstalled`], naming the package.
///
/// ## The server
/// It listens on `127.0.0.1` only (`--bind-address`, `--port`), with its Unix socket in its
/// directory (`sock`), `--skip-name-resolve` (users are `'name'@'127.0.0.1'`), no host cache
/// (a proxy cut mid-handshake must not get the loopback host blocked),
/// [`MARIADB_MAX_CONNECTIONS`] connections, `--no-defaults` (no `/etc/mysql` file is read),
/// and its log on its standard error: the file `mariadb.log` in its directory, whose tail a
/// failure to start quotes. Readiness is `mariadb-admin ping` over TCP: the server answers it
/// only once it has run its init file and accepts connections (`ping` counts a refused login
/// as alive, so it needs no password).
///
/// ## Users and authentication
/// Every start runs an init file (`--init-file`, before the server accepts a connection) that
/// creates or replaces the administrator `root@127.0.0.1` ([`Server::admin_conn`]), the
/// default user `lockbench@127.0.0.1` with every privilege on the database `lockbench`
/// ([`Server::url`], [`Server::conn`]: what a lock client takes), and the users of
/// [`Mariadb::with_users`] (the same privileges), each with a password drawn at random unless
/// given ([`MariadbUser`]). Passwords are checked by `mysql_native_password`, the server's
/// default plugin for `IDENTIFIED BY`, which every MySQL driver speaks (MariaDB's `ed25519`
/// needs an optional plugin on both sides). No grant-table bypass: `root@localhost` is the
/// package's default (the Unix socket's owner only), and no account has an empty password.
///
/// ## Running as root
/// `mariadbd` refuses to run as root unless told `--user`; here, when the effective user id
/// is 0, `mariadb-install-db` is spawned as the `mysql` system user the Debian package creates
/// and the server through `setpriv --reuid --regid --clear-groups --pdeathsig KILL`: the
/// kernel clears a process's parent-death signal when its user ids change, so `setpriv` arms
/// `SIGKILL` again after the switch, and the server still dies with its test binary. The
/// server's directory and data directory are that user's (mode `0700`), and so are the init
/// file and the TLS key (mode `0600`); every directory above that the user could not search
/// gets the search bit of the user's class. Not as root, everything runs as the current user.
///
/// ## TLS
/// [`Server::start_tls`] starts it with a certificate of a [`TestPki`] (valid for 127.0.0.1
/// and localhost; `--ssl-cert`, `--ssl-key`, `--ssl-ca`), the files copied into its
/// directory; with [`MariadbTls::require`], `--require-secure-transport=ON` refuses every TCP
/// connection without TLS. [`Server::ca_file`] is a copy of the CA.
pub type MariadbServer = Server<Mariadb>;

/// A user of a [`MariadbServer`] that logs in with a password: made up by the test at run
/// time, never committed. `Debug` shows no password.
#[derive(Clone)]
pub struct MariadbUser {
    /// The user's name (at host `127.0.0.1`).
    pub name: String,
    /// Its password.
    pub password: String,
}

impl MariadbUser {
    /// User `name` with a fresh random password ([`random_password`]).
    pub fn new(name: &str) -> MariadbUser {
        MariadbUser { name: name.into(), password: random_password() }
    }

    /// User `name` with `password`.
    pub fn with_password(name: &str, password: &str) -> MariadbUser {
        MariadbUser { name: name.into(), password: password.into() }
    }

    /// `CREATE OR REPLACE USER` for it, with every privilege on `grants` (`*.*` or a
    /// database's `` `db`.* ``), or why it cannot be one.
    fn create_sql(&self, grants: &str, admin: bool) -> Result<String, ServerError> {
        if self.name.is_empty()
            || format!("{}{}", self.name, self.password).contains(char::is_control)
        {
            let why = format!("a MariaDB user needs a name, and no control character: {self:?}");
            return Err(ServerError::Invalid(why));
        }
        let (name, password) = (quote_literal(&self.name), quote_literal(&self.password));
        let option = if admin { " WITH GRANT OPTION" } else { "" };
        Ok(format!(
            "CREATE OR REPLACE USER {name}@'127.0.0.1' IDENTIFIED BY {password};\n\
             GRANT ALL PRIVILEGES ON {grants} TO {name}@'127.0.0.1'{option};\n"
        ))
    }
}

impl fmt::Debug for MariadbUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MariadbUser {{ name: {:?}, password: *** }}", self.name)
    }
}

/// TLS on a [`MariadbServer`]: the certificate it serves, the CA clients verify it with, and
/// whether a client without TLS is refused.
#[derive(Clone, Debug)]
pub struct MariadbTls {
    /// The server's certificate and key (copied into its directory, the key with mode `0600`,
    /// owned by the user the server runs as).
    pub server: CertFiles,
    /// The CA that signed it (copied into its directory: [`Server::ca_file`]).
    pub ca: PathBuf,
    /// Whether every TCP connection must use TLS (`require_secure_transport = ON`).
    pub require: bool,
}

impl MariadbTls {
    /// `pki`'s server certificate (valid for 127.0.0.1 and localhost) and CA.
    pub fn from_pki(pki: &TestPki, require: bool) -> MariadbTls {
        MariadbTls { server: pki.server().clone(), ca: pki.ca_file().to_path_buf(), require }
    }
}

/// Where and as whom to connect: what a client takes, as a URL ([`MariadbConn::url`]) or as
/// parameters, and what [`mariadb_call`] and [`MariadbSession`] use. `Debug` shows no
/// password.
#[derive(Clone)]
pub struct MariadbConn {
    /// `127.0.0.1`.
    pub host: String,
    /// The server's port.
    pub port: u16,
    /// The user.
    pub user: String,
    /// Its password.
    pub password: String,
    /// The database.
    pub database: String,
    /// On a TLS server, the CA file to verify it with: the connection then uses TLS and
    /// checks the server's certificate and name. `None`: no TLS.
    pub ca: Option<PathBuf>,
}

impl MariadbConn {
    /// `mysql://<user>:<password>@127.0.0.1:<port>/<database>` (user, password and database
    /// percent-encoded): the form MySQL client libraries parse. A TLS client takes
    /// [`MariadbConn::ca`] itself.
    pub fn url(&self) -> String {
        let (user, password, db) =
            (encode(&self.user), encode(&self.password), encode(&self.database));
        format!("mysql://{user}:{password}@{}:{}/{db}", self.host, self.port)
    }

    /// The same place as another user.
    pub fn as_user(&self, user: &MariadbUser) -> MariadbConn {
        MariadbConn { user: user.name.clone(), password: user.password.clone(), ..self.clone() }
    }
}

impl fmt::Debug for MariadbConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MariadbConn({}@{}:{}/{}, tls: {})",
            self.user,
            self.host,
            self.port,
            self.database,
            self.ca.is_some()
        )
    }
}

/// The MariaDB engine: the administrator, the default user and its database, more users,
/// TLS. [`Mariadb::default`] draws every password at random. MariaDB has no cluster here: a
/// [`Cluster`] of it refuses to start with more than one member.
#[derive(Clone, Debug)]
pub struct Mariadb {
    admin: MariadbUser,
    user: MariadbUser,
    users: Vec<MariadbUser>,
    tls: Option<MariadbTls>,
}

impl Default for Mariadb {
    fn default() -> Self {
        Mariadb {
            admin: MariadbUser::new(ADMIN_USER),
            user: MariadbUser::new(DEFAULT_USER),
            users: Vec::new(),
            tls: None,
        }
    }
}

impl Mariadb {
    /// This engine with `users` too, with every privilege on the default user's database.
    pub fn with_users(mut self, users: &[MariadbUser]) -> Mariadb {
        self.users.extend_from_slice(users);
        self
    }

    /// This engine with TLS.
    pub fn with_tls(mut self, tls: MariadbTls) -> Mariadb {
        self.tls = Some(tls);
        self
    }

    /// The init file: users and the default database, run at every start.
    fn init_sql(&self) -> Result<String, ServerError> {
        let db = quote_ident(&self.user.name);
        let mut sql = format!("CREATE DATABASE IF NOT EXISTS {db};\n");
        sql.push_str(&self.admin.create_sql("*.*", true)?);
        for user in std::iter::once(&self.user).chain(&self.users) {
            sql.push_str(&user.create_sql(&format!("{db}.*"), false)?);
        }
        Ok(sql)
    }
}

const LAUNCH: Launch = Launch {
    program: "mariadbd",
    missing: "MariaDB is not installed (no /usr/sbin/mariadbd, nor a mariadbd on PATH)",
    package: Some("mariadb-server"),
    install: INSTALL_HINT,
    name: "mariadbd",
    probe: "mariadb-admin ping",
    log: "mariadb.log",
    log_on_timeout: true,
    ready: admin_ping,
    deadline: Duration::from_secs(30),
    poll: Duration::from_millis(50),
};

/// The path of MariaDB program `name` (`/usr/sbin`, `/usr/bin`, then `PATH`), or what to
/// install.
fn program(name: &str) -> Result<PathBuf, ServerError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["/usr/sbin", "/usr/bin"]
        .iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(&path))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            let missing = format!("{name} is not installed");
            ServerError::NotInstalled {
                program: name.to_string(),
                package: Some("mariadb-server"),
                missing,
                install: INSTALL_HINT,
                source: None,
            }
        })
}

/// `None` when not root; as root, the `mysql` system user, or what to install when there is
/// none.
fn run_as() -> Result<Option<RunAs>, ServerError> {
    if !is_root() {
        return Ok(None);
    }
    let found = system_user(SYSTEM_USER);
    found.map(Some).ok_or_else(|| ServerError::NotInstalled {
        program: SYSTEM_USER.into(),
        package: Some("mariadb-server"),
        missing: "mariadbd will not run as root, and there is no `mysql` system user to run it \
                  as (the mariadb-server package creates it)"
            .into(),
        install: INSTALL_HINT,
        source: None,
    })
}

/// Whether the server on loopback `port` answers `mariadb-admin ping` (1 s at most).
fn admin_ping(port: u16) -> bool {
    let Ok(admin) = program("mariadb-admin") else { return false };
    Command::new(admin)
        .args(["--no-defaults", "--protocol=TCP", "-h", "127.0.0.1", "-P", &port.to_string()])
        .args(["--connect-timeout=1", "-u", "ping", "ping"])
        .env("LC_ALL", "C")
        .env_remove("MYSQL_PWD")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl ClusterEngine for Mariadb {
    const LAUNCH: &'static Launch = &LAUNCH;
    const KIND: &'static str = "mariadb";
    const PORTS: &'static [&'static str] = &["client"];
    const FORMATION: Duration = Duration::from_secs(30);

    /// The programs, and the user to run as (and `setpriv`) when root.
    fn check(&self) -> Result<(), ServerError> {
        for name in ["mariadbd", "mariadb-install-db", "mariadb", "mariadb-admin"] {
            program(name)?;
        }
        if run_as()?.is_some() {
            if let Err(e) = Command::new("setpriv").arg("--version").stdout(Stdio::null()).status()
            {
                return Err(ServerError::NotInstalled {
                    program: "setpriv".into(),
                    package: Some("util-linux"),
                    missing: format!(
                        "setpriv is not installed ({e}; needed to run mariadbd as root)"
                    ),
                    install: INSTALL_HINT,
                    source: None,
                });
            }
        }
        Ok(())
    }

    fn command(
        &self,
        layout: &Layout,
        i: usize,
        dir: &Path,
        _start: Start,
    ) -> Result<Command, ServerError> {
        if layout.members() != 1 {
            return Err(ServerError::Invalid(
                "MariaDB is a server of one here (no replication)".into(),
            ));
        }
        let who = run_as()?;
        let data = dir.join("data");
        if let Some(who) = who {
            searchable_by(dir, who, SYSTEM_USER)?;
        }
        if !data.join("mysql").exists() {
            self.initialize(dir, &data, who)?;
        }
        let mut cmd = match who {
            Some(who) => {
                let mut cmd = Command::new("setpriv");
                cmd.arg(format!("--reuid={}", who.uid))
                    .arg(format!("--regid={}", who.gid))
                    .args(["--clear-groups", "--pdeathsig", "KILL", "--"])
                    .arg(program("mariadbd")?);
                cmd
            }
            None => Command::new(program("mariadbd")?),
        };
        let path = |name: &str| dir.join(name).display().to_string();
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", path("sock")))
            .arg(format!("--pid-file={}", path("mariadbd.pid")))
            .arg(format!("--init-file={}", path("init.sql")))
            .arg(format!("--port={}", layout.listen(i, 0)))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve", "--host-cache-size=0"])
            .arg(format!("--max-connections={MARIADB_MAX_CONNECTIONS}"))
            .args(["--max-connect-errors=1000000000", "--innodb-buffer-pool-size=32M"])
            .env("LC_ALL", "C");
        if let Some(tls) = &self.tls {
            cmd.arg(format!("--ssl-cert={}", path("server-cert.pem")))
                .arg(format!("--ssl-key={}", path("server-key.pem")))
                .arg(format!("--ssl-ca={}", path("ca.pem")));
            if tls.require {
                cmd.arg("--require-secure-transport=ON");
            }
        }
        Ok(cmd)
    }

    /// The one member, while it runs.
    fn leader(&self, cluster: &Cluster<Self>) -> Option<usize> {
        (cluster.len() == 1 && cluster.is_up(0)).then_some(0)
    }
}

impl Mariadb {
    /// `mariadb-install-db` into `data` (empty), the init file and TLS files; as `who` when
    /// given, whose directory `dir` becomes.
    fn initialize(&self, dir: &Path, data: &Path, who: Option<RunAs>) -> Result<(), ServerError> {
        let io = |what: &str, path: &Path| {
            let context = format!("{what} {}", path.display());
            move |e| ServerError::io(context, e)
        };
        own(dir, who, 0o700).map_err(io("prepare", dir))?;
        own(data, who, 0o700).map_err(io("prepare", data))?;
        let init = dir.join("init.sql");
        write_owned(&init, &self.init_sql()?, who).map_err(io("write", &init))?;
        if let Some(tls) = &self.tls {
            for (from, name) in [
                (&tls.server.cert, "server-cert.pem"),
                (&tls.server.key, "server-key.pem"),
                (&tls.ca, "ca.pem"),
            ] {
                let to = dir.join(name);
                let pem = std::fs::read_to_string(from).map_err(io("read", from))?;
                write_owned(&to, &pem, who).map_err(io("write", &to))?;
                if name == "ca.pem" {
                    // The tests (root or not) read the CA too.
                    own(&to, who, 0o644).map_err(io("prepare", &to))?;
                }
            }
        }
        let mut install = Command::new(program("mariadb-install-db")?);
        if let Some(who) = who {
            // As root, std drops the supplementary groups when it changes the user.
            install.uid(who.uid).gid(who.gid);
        }
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--skip-test-db", "--skip-name-resolve"])
            .current_dir(dir)
            .env("LC_ALL", "C");
        succeeded("mariadb-install-db", run(&mut install, "", None))
    }
}

/// Run `cmd` to its end with `input` on its standard input (killed after `limit`, when
/// given); its status and output.
fn run(cmd: &mut Command, input: &str, limit: Option<Duration>) -> std::io::Result<Output> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let _ = child.stdin.take().expect("piped").write_all(input.as_bytes());
    let Some(limit) = limit else { return child.wait_with_output() };
    let pid = child.id();
    let (done, wait) = mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        if wait.recv_timeout(limit) == Err(RecvTimeoutError::Timeout) {
            // SAFETY: kill takes no memory; the child is not reaped until wait_with_output.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output();
    let _ = done.send(());
    let _ = killer.join();
    out
}

/// `Ok` if `what` ran and exited with success; otherwise the failure, with its output.
fn succeeded(what: &str, ran: std::io::Result<Output>) -> Result<(), ServerError> {
    match ran {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(LAUNCH.not_installed(e)),
        Err(e) => Err(ServerError::io(format!("run {what}"), e)),
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            let output = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
            Err(ServerError::command(
                format!("{what} exited with {}", out.status),
                output.trim_end(),
            ))
        }
    }
}

impl Server<Mariadb> {
    /// Start a server of `engine`'s configuration ([`Mariadb::with_users`],
    /// [`Mariadb::with_tls`]), as [`Server::launch`] does the default's.
    pub fn launch_with(engine: Mariadb) -> Result<Self, ServerError> {
        Server::launch_engine(engine)
    }

    /// [`Server::launch_with`], panicking with why it could not start (what to install).
    pub fn start_with(engine: Mariadb) -> Self {
        Self::launch_with(engine).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start a server that speaks TLS with `pki`'s server certificate and refuses every TCP
    /// connection without TLS; [`Server::conn`] verifies it with a copy of `pki`'s CA
    /// ([`Server::ca_file`]). Panics, saying why or what to install, if it cannot start.
    pub fn start_tls(pki: &TestPki) -> Self {
        Self::start_with(Mariadb::default().with_tls(MariadbTls::from_pki(pki, true)))
    }

    /// Whether it speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.engine().tls.is_some()
    }

    /// The CA that signed its certificate (a copy in its directory), on a TLS server.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.engine().tls.as_ref().map(|_| self.dir().join("ca.pem"))
    }

    /// The default user (`lockbench`, every privilege on the database `lockbench`).
    pub fn user(&self) -> &MariadbUser {
        &self.engine().user
    }

    /// The administrator (`root@127.0.0.1`, every privilege): for probes a test's user may not
    /// make (`KILL` of another user's session).
    pub fn admin(&self) -> &MariadbUser {
        &self.engine().admin
    }

    /// The default user on its database, over TLS verified with [`Server::ca_file`] on a TLS
    /// server: what a lock client takes.
    pub fn conn(&self) -> MariadbConn {
        let user = self.user();
        MariadbConn {
            host: "127.0.0.1".into(),
            port: self.port,
            user: user.name.clone(),
            password: user.password.clone(),
            database: user.name.clone(),
            ca: self.ca_file(),
        }
    }

    /// [`Server::conn`] as `user` (on the default user's database).
    pub fn conn_as(&self, user: &MariadbUser) -> MariadbConn {
        self.conn().as_user(user)
    }

    /// [`Server::conn`] as the administrator.
    pub fn admin_conn(&self) -> MariadbConn {
        self.conn_as(self.admin())
    }

    /// `mysql://lockbench:<password>@127.0.0.1:<port>/lockbench`: the default user's URL.
    pub fn url(&self) -> String {
        self.conn().url()
    }
}

/// The test binary's MariaDB server: started by the first call (which panics if it cannot
/// be), then the same one until the binary exits.
pub fn shared_mariadb() -> &'static MariadbServer {
    static SERVER: std::sync::OnceLock<MariadbServer> = std::sync::OnceLock::new();
    keep(&SERVER, "mariadb-keeper", MariadbServer::start)
}

/// `mariadb` for `conn`: no option files, tab-separated rows without headers, the password
/// in `MYSQL_PWD` (never on a command line), TLS verified against `conn.ca` when given.
fn mariadb_command(conn: &MariadbConn) -> Result<Command, ServerError> {
    let mut cmd = Command::new(program("mariadb")?);
    cmd.args(["--no-defaults", "--protocol=TCP", "-N", "-B", "--connect-timeout=5"])
        .args(["-h", &conn.host, "-P", &conn.port.to_string(), "-u", &conn.user])
        .args(["-D", &conn.database])
        .env("MYSQL_PWD", &conn.password)
        .env("LC_ALL", "C");
    match &conn.ca {
        Some(ca) => {
            cmd.arg("--ssl").arg(format!("--ssl-ca={}", ca.display()));
            cmd.arg("--ssl-verify-server-cert");
        }
        None => {
            cmd.arg("--skip-ssl");
        }
    }
    Ok(cmd)
}

/// Run `sql` with `mariadb -N -B -e <sql>` on a connection of its own for `conn`, and return
/// what it printed: the rows, one a line, columns separated by tabs, without the last newline
/// (`SELECT 1` gives `"1"`, `NULL` is `"NULL"`). A refused connection or a failed statement
/// is [`ServerError::Command`] with the client's message (a wrong password: "Access denied
/// for user ..."); 5 s to connect, and the client is killed after [`MARIADB_CALL_TIMEOUT`].
pub fn mariadb_call(conn: &MariadbConn, sql: &str) -> Result<String, ServerError> {
    let mut cmd = mariadb_command(conn)?;
    cmd.arg("-e").arg(sql);
    let what = format!("mariadb as {} at {}:{}", conn.user, conn.host, conn.port);
    let out =
        run(&mut cmd, "", Some(MARIADB_CALL_TIMEOUT)).map_err(|e| ServerError::io(&what, e))?;
    if !out.status.success() {
        let error = String::from_utf8_lossy(&out.stderr);
        return Err(ServerError::command(
            format!("{what} failed ({})", out.status),
            error.trim_end(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n').to_string())
}

/// A long-lived `mariadb` client session: one connection, kept open between statements, so
/// that what belongs to a session (a `GET_LOCK` lock) stays held until the session ends.
/// Dropped, its client is killed: the connection closes and the server frees what the session
/// held.
///
/// The client runs in batch mode (`--force`: an error does not end the session; `-n`: each
/// result is flushed at once; `--skip-reconnect`: a killed session stays ended), and each statement sent is followed by `SELECT '<marker>'`:
/// its rows are what the standard output holds before the marker, its errors what the
/// standard error held by then. [`MariadbSession::send`] does not wait, so a statement may
/// block in the server (`SELECT GET_LOCK('x', 10)` while another session holds `x`) while the
/// test does something else; [`MariadbSession::wait_output`] says whether it is done.
pub struct MariadbSession {
    child: Child,
    stdin: ChildStdin,
    out: Receiver<Option<String>>,
    err: Receiver<Option<String>>,
    /// The statements sent and not yet waited for, by marker number.
    sent: std::collections::VecDeque<u64>,
    next: u64,
    /// What the oldest of them printed so far, on its standard output and error.
    rows: Vec<String>,
    errors: Vec<String>,
    id: u64,
    label: String,
}

impl MariadbSession {
    /// Connect with `mariadb` as `conn` says and wait until the session answers (its
    /// connection id: [`MariadbSession::connection_id`]), or say why it did not.
    pub fn open(conn: &MariadbConn) -> Result<MariadbSession, ServerError> {
        let label = format!("mariadb session as {} at {}:{}", conn.user, conn.host, conn.port);
        let mut cmd = mariadb_command(conn)?;
        cmd.args(["--force", "-n", "--skip-reconnect"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| ServerError::io(format!("spawn {label}"), e))?;
        let stdin = child.stdin.take().expect("piped");
        let out = forward_lines(child.stdout.take().expect("piped"));
        let err = forward_lines(child.stderr.take().expect("piped"));
        let mut session = MariadbSession {
            child,
            stdin,
            out,
            err,
            sent: Default::default(),
            next: 0,
            rows: Vec::new(),
            errors: Vec::new(),
            id: 0,
            label,
        };
        let id = session.query("SELECT CONNECTION_ID()")?;
        session.id = id.parse().map_err(|_| {
            ServerError::command(format!("{} has no connection", session.label), id)
        })?;
        Ok(session)
    }

    /// The session's connection id (for `KILL`, `IS_USED_LOCK`).
    pub fn connection_id(&self) -> u64 {
        self.id
    }

    /// Send `sql` (one statement, without its `;`) without waiting for it:
    /// [`MariadbSession::wait_output`] takes its output, statements' in the order sent.
    pub fn send(&mut self, sql: &str) -> Result<(), ServerError> {
        let n = self.next;
        self.next += 1;
        let text = format!("{sql};\nSELECT '{}';\n", marker(n));
        let sent = self.stdin.write_all(text.as_bytes()).and_then(|()| self.stdin.flush());
        sent.map_err(|e| ServerError::io(format!("send to {}", self.label), e))?;
        self.sent.push_back(n);
        Ok(())
    }

    /// Wait up to `timeout` for the oldest statement sent and not yet waited for: `Ok(None)`
    /// while it runs (a wait for a lock; wait again later), its rows as [`mariadb_call`] gives
    /// them once it is done; [`ServerError::Command`] with the server's message if it failed,
    /// or if the session ended.
    pub fn wait_output(&mut self, timeout: Duration) -> Result<Option<String>, ServerError> {
        let Some(&n) = self.sent.front() else {
            return Err(ServerError::Invalid(format!("nothing was sent to {}", self.label)));
        };
        let deadline = Instant::now() + timeout;
        let marker = marker(n);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(Some(line)) if line == marker => break,
                Ok(Some(line)) => self.rows.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    // A session whose connection is gone runs no marker: its client's error
                    // says so at once.
                    while let Ok(Some(line)) = self.err.try_recv() {
                        self.errors.push(line);
                    }
                    if self.errors.iter().any(|l| is_connection_lost(l)) {
                        let errors = std::mem::take(&mut self.errors).join("\n");
                        let _ = self.child.kill();
                        return Err(ServerError::command(format!("{} ended", self.label), errors));
                    }
                    if left.is_zero() {
                        return Ok(None);
                    }
                }
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return Err(self.ended()),
            }
        }
        self.sent.pop_front();
        let rows = std::mem::take(&mut self.rows).join("\n");
        // The client wrote the statement's error before it ran the marker's SELECT.
        while let Ok(Some(line)) = self.err.recv_timeout(Duration::from_millis(50)) {
            self.errors.push(line);
        }
        if !self.errors.is_empty() {
            let errors = std::mem::take(&mut self.errors).join("\n");
            return Err(ServerError::command(format!("{} failed", self.label), errors));
        }
        Ok(Some(rows))
    }

    /// [`MariadbSession::send`] `sql` and wait for its rows ([`MARIADB_CALL_TIMEOUT`] at
    /// most: a statement still running then is [`ServerError::Command`], and stays the next
    /// to wait for).
    pub fn query(&mut self, sql: &str) -> Result<String, ServerError> {
        self.send(sql)?;
        let rows = self.wait_output(MARIADB_CALL_TIMEOUT)?;
        let what = format!("{} did not finish `{sql}` within {MARIADB_CALL_TIMEOUT:?}", self.label);
        rows.ok_or(ServerError::Command { what, answer: None })
    }

    /// The error of a session whose client ended: what it wrote last.
    fn ended(&mut self) -> ServerError {
        let mut notes = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while let Ok(Some(line)) =
            self.err.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            notes.push(line);
        }
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        ServerError::command(format!("{} ended ({status})", self.label), notes.join("\n"))
    }
}

impl Drop for MariadbSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a line the client wrote on its standard error says the connection is gone (the
/// server went away, the connection was lost or killed).
fn is_connection_lost(line: &str) -> bool {
    ["ERROR 2006", "ERROR 2013", "ERROR 1927", "ERROR 4031"].iter().any(|p| line.starts_with(p))
}

/// The marker printed after statement `n` of a session.
fn marker(n: u64) -> String {
    format!("__test_servers_mariadb_done_{n}__")
}

/// `s` as an SQL identifier: backquoted, inner backquotes doubled.
fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// `s` as an SQL string literal (backslashes escaped: the server's default `sql_mode` reads
/// them as escapes).
fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// `s` percent-encoded for a URL's user, password or path: every byte but the unreserved
/// characters.
fn encode(s: &str) -> String {
    let keep = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    s.bytes().map(|b| if keep(b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_passwords_are_quoted_for_sql_and_urls() {
        assert_eq!(quote_ident("a`b"), "`a``b`");
        assert_eq!(quote_literal(r"it's\"), r"'it''s\\'");
        let user = MariadbUser::with_password("lock er", "p@ss:/w");
        let conn = MariadbConn {
            host: "127.0.0.1".into(),
            port: 3306,
            user: user.name.clone(),
            password: user.password.clone(),
            database: "lockbench".into(),
            ca: None,
        };
        assert_eq!(conn.url(), "mysql://lock%20er:p%40ss%3A%2Fw@127.0.0.1:3306/lockbench");
        assert!(!format!("{conn:?}{user:?}").contains("p@ss"), "Debug shows no password");
        let bad = MariadbUser::with_password("x", "two\nlines");
        assert!(matches!(bad.create_sql("*.*", false), Err(ServerError::Invalid(_))));
    }
}
