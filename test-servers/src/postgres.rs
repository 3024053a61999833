//! PostgreSQL: a server of one ([`PostgresServer`], whose docs say how it is made, secured
//! and run as root) on a free loopback port, configured by [`Postgres`]; probes without a
//! client library ([`psql_call`], [`PsqlSession`]) through the `psql` binary.

use crate::cluster::{Cluster, ClusterEngine, Layout, Server, Start};
use crate::lines::forward_lines;
use crate::postgres_replica::{base_backup, StandbyOf};
use crate::process::{keep, Launch};
use crate::redis::random_password;
use crate::run_as::{is_root, system_user};
pub(crate) use crate::run_as::{own, searchable_by, write_owned, RunAs};
use crate::tls::{CertFiles, TestPki};
use crate::{ServerError, INSTALL_HINT};
use std::collections::VecDeque;
use std::fmt;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The server's `max_connections`: room for hundreds of lock clients, each holding a
/// connection per lock, beside the probes (3 more are kept for the superuser).
pub const POSTGRES_MAX_CONNECTIONS: u32 = 500;
/// How long [`psql_call`] and [`PsqlSession::query`] wait for an answer.
pub const PSQL_TIMEOUT: Duration = Duration::from_secs(10);

/// The bootstrap superuser's name.
const SUPERUSER: &str = "postgres";
/// The default user's name, and the name of the database it owns.
const DEFAULT_USER: &str = "lockbench";
/// The system user a server runs as when the tests run as root.
const SYSTEM_USER: &str = "postgres";

/// A PostgreSQL `postgres` server on a free loopback port, with its own data directory
/// (`initdb`'d at the first start), configured by [`Postgres`] (see below): users with SCRAM
/// passwords, TLS when asked; killed on drop (and when the test binary exits).
///
/// [`Server::stop`] and [`Server::start_again`] restart it on the same port with the same
/// data directory, as a crash and a restart would: it keeps its roles, databases and tables,
/// and every session, with the session-level advisory locks it held, is gone.
///
/// ## The programs
/// From the newest `/usr/lib/postgresql/<version>/bin` of Debian's package `postgresql`
/// (elsewhere, the directory of a `postgres` on `PATH`): `postgres`, `initdb`, and `psql` and
/// `pg_isready` of the same version. A missing server fails the test with
/// [`ServerError::NotInstalled`], naming the package.
///
/// ## A data directory, made once
/// The first start runs `initdb` in the server's `data` directory (UTF-8, locale `C`), writes
/// its `pg_hba.conf` and settings (below), and creates the roles and the database in
/// single-user mode (`postgres --single`), before the server first listens: a server that
/// answers has its users. `initdb` skips its final sync and the single-user run does not
/// fsync: the fault a test injects is a killed process, whose writes the kernel keeps, not a
/// lost machine. The server itself runs with `fsync = on`, as a real one does, with
/// [`POSTGRES_MAX_CONNECTIONS`] connections, and logs to its standard error, the file
/// `postgres.log` in its directory, whose tail a failure to start quotes. Readiness is
/// `pg_isready`, which answers only once the server accepts connections (after its crash
/// recovery, on a restart), not a bare TCP connect.
///
/// ## Users and authentication
/// The server opens no Unix socket (`unix_socket_directories` is empty) and listens on
/// `127.0.0.1` only; every client, the setup's too, authenticates over TCP with a password,
/// checked by SCRAM (`password_encryption = scram-sha-256`, `pg_hba.conf`: `host all all
/// 127.0.0.1/32 scram-sha-256`); no connection is ever trusted. The roles: the superuser
/// `postgres` ([`Server::superuser_conn`]), the default user `lockbench`, owner of the
/// database `lockbench` ([`Server::url`], [`Server::conn`]: what a lock client takes), and
/// the users of [`Postgres::with_users`] or [`Server::create_user`], each with a password
/// drawn at random unless given ([`PostgresUser`]). They are in the server's catalogs, so
/// they survive restarts; session state (a session-level advisory lock) does not.
///
/// ## Running as root
/// Postgres refuses to run as root, and the tests run as root (in CI too). When the
/// effective user id is 0, `initdb` and the single-user run are spawned as the `postgres`
/// system user the Debian package creates (its uid and gid from the password database; the
/// supplementary groups dropped), and the server through `setpriv --reuid --regid
/// --clear-groups --pdeathsig KILL`: the kernel clears a process's parent-death signal when
/// its user ids change, so `setpriv` arms `SIGKILL` again after the switch, and the server
/// still dies with its test binary (`PR_SET_PDEATHSIG`). The data directory is the
/// `postgres` user's, mode `0700` as Postgres requires, and so is the TLS key it reads (mode
/// `0600`, which Postgres also requires); every directory above it that the user could not
/// search gets the search bit (not read) of the user's class, others' (`o+x`) in practice.
/// The server's own directory, with its log, stays root's. Not as root, everything runs as the current user.
///
/// ## Restarts and what a killed server leaves
/// [`Server::stop`] kills the postmaster (`SIGKILL`, a crash); its backends exit a moment
/// later, and Postgres refuses to start while one is still attached to the data directory's
/// shared memory. So the server's command is a shell that waits (10 s at most) until the
/// segment `postmaster.pid` names has nothing attached, then `exec`s the server:
/// [`Server::start_again`] works right after a stop, and the server recovers from its WAL.
/// Dynamic shared memory lives in the data directory (`dynamic_shared_memory_type = mmap`);
/// the small System V segment every postmaster makes as an interlock outlives a killed one,
/// so each start removes those of the servers' user whose creator is gone and to which
/// nothing is attached.
///
/// ## TLS
/// [`Server::start_tls`] starts it with `ssl = on` and a certificate of a [`TestPki`] (valid
/// for 127.0.0.1 and localhost), the files copied into its data directory; with
/// [`PostgresTls::require`], `pg_hba.conf` has `hostssl` lines and refuses every connection
/// without TLS (`hostnossl ... reject`). [`Server::ca_file`] is a copy of the CA, for a
/// client's `sslmode=verify-full`.
pub type PostgresServer = Server<Postgres>;

/// A role of a [`PostgresServer`] that logs in with a password: made up by the test at run
/// time, never committed. `Debug` shows no password.
#[derive(Clone)]
pub struct PostgresUser {
    /// The role's name.
    pub name: String,
    /// Its password.
    pub password: String,
}

impl PostgresUser {
    /// User `name` with a fresh random password ([`random_password`]).
    pub fn new(name: &str) -> PostgresUser {
        PostgresUser { name: name.into(), password: random_password() }
    }

    /// User `name` with `password` (a harness run's, read from where its user keeps it).
    pub fn with_password(name: &str, password: &str) -> PostgresUser {
        PostgresUser { name: name.into(), password: password.into() }
    }

    /// `CREATE ROLE` for it (a plain role that may log in), or why it cannot be one: a name or
    /// password with a control character, which single-user mode would split.
    fn create_role(&self) -> Result<String, ServerError> {
        if self.name.is_empty()
            || format!("{}{}", self.name, self.password).contains(char::is_control)
        {
            let why = format!("a Postgres user needs a name, and no control character: {self:?}");
            return Err(ServerError::Invalid(why));
        }
        let (name, password) = (quote_ident(&self.name), quote_literal(&self.password));
        Ok(format!("CREATE ROLE {name} LOGIN PASSWORD {password};"))
    }
}

impl fmt::Debug for PostgresUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgresUser {{ name: {:?}, password: *** }}", self.name)
    }
}

/// TLS on a [`PostgresServer`] ([`Server::launch_tls`]): the certificate it serves, the CA
/// clients verify it with, and whether a client without TLS is refused.
#[derive(Clone, Debug)]
pub struct PostgresTls {
    /// The server's certificate and key (copied into the data directory, the key with mode
    /// `0600`, owned by the user the server runs as).
    pub server: CertFiles,
    /// The CA that signed it (copied beside the data directory: [`Server::ca_file`]).
    pub ca: PathBuf,
    /// Whether every connection must use TLS (`hostssl` lines, `hostnossl ... reject`);
    /// otherwise a client may use either.
    pub require: bool,
}

impl PostgresTls {
    /// `pki`'s server certificate (valid for 127.0.0.1 and localhost) and CA.
    pub fn from_pki(pki: &TestPki, require: bool) -> PostgresTls {
        PostgresTls { server: pki.server().clone(), ca: pki.ca_file().to_path_buf(), require }
    }
}

/// Where and as whom to connect: what a client takes, as a URL ([`PostgresConn::url`]) or
/// as parameters, and what [`psql_call`] and [`PsqlSession`] use. `Debug` shows no password.
#[derive(Clone)]
pub struct PostgresConn {
    /// `127.0.0.1`.
    pub host: String,
    /// The server's port.
    pub port: u16,
    /// The role.
    pub user: String,
    /// Its password.
    pub password: String,
    /// The database.
    pub dbname: String,
    /// On a TLS server, the CA file to verify it with: the connection then uses TLS and
    /// checks the server's certificate and name (`sslmode=verify-full`). `None`: no TLS.
    pub ca: Option<PathBuf>,
}

impl PostgresConn {
    /// `postgres://<user>:<password>@127.0.0.1:<port>/<dbname>` (user, password and database
    /// percent-encoded), with `?sslmode=require` when it uses TLS: the form every client
    /// library parses; a client that verifies the server takes [`PostgresConn::ca`] itself.
    pub fn url(&self) -> String {
        let (user, password, db) =
            (encode(&self.user), encode(&self.password), encode(&self.dbname));
        let tls = if self.ca.is_some() { "?sslmode=require" } else { "" };
        format!("postgres://{user}:{password}@{}:{}/{db}{tls}", self.host, self.port)
    }

    /// The same place as another user.
    pub fn as_user(&self, user: &PostgresUser) -> PostgresConn {
        PostgresConn { user: user.name.clone(), password: user.password.clone(), ..self.clone() }
    }

    /// libpq's connection string without the password (which goes in `PGPASSWORD`, never on
    /// a command line): host, port, user, database, a 5 s connect timeout, and the TLS mode.
    pub fn conninfo(&self) -> String {
        let (host, user, db) =
            (conninfo_value(&self.host), conninfo_value(&self.user), conninfo_value(&self.dbname));
        let tls = match &self.ca {
            Some(ca) => {
                format!("verify-full sslrootcert={}", conninfo_value(&ca.to_string_lossy()))
            }
            None => "disable".into(),
        };
        format!(
            "host={host} port={} user={user} dbname={db} connect_timeout=5 sslmode={tls}",
            self.port
        )
    }
}

impl fmt::Debug for PostgresConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgresConn({} as {})", self.conninfo(), self.user)
    }
}

/// The Postgres engine: the superuser, the default user and its database, more users, TLS.
/// [`Postgres::default`] draws every password at random. Postgres has no cluster here: a
/// [`Cluster`] of it refuses to start with more than one member.
#[derive(Clone, Debug)]
pub struct Postgres {
    superuser: PostgresUser,
    user: PostgresUser,
    users: Vec<PostgresUser>,
    tls: Option<PostgresTls>,
    /// A role that may stream WAL (`REPLICATION`), and its `pg_hba.conf` line.
    pub(crate) replication: Option<PostgresUser>,
    /// Made by `pg_basebackup -R` from this primary instead of `initdb`: a standby.
    pub(crate) standby_of: Option<StandbyOf>,
}

impl Default for Postgres {
    fn default() -> Self {
        Postgres {
            superuser: PostgresUser::new(SUPERUSER),
            user: PostgresUser::new(DEFAULT_USER),
            users: Vec::new(),
            tls: None,
            replication: None,
            standby_of: None,
        }
    }
}

impl Postgres {
    /// This engine with `users` too: plain roles that may log in (and connect to every
    /// database, as `PUBLIC` may), created before the server first listens.
    pub fn with_users(mut self, users: &[PostgresUser]) -> Postgres {
        self.users.extend_from_slice(users);
        self
    }

    /// This engine with `user` as the default user (owner of the database of its name).
    pub fn with_default_user(mut self, user: PostgresUser) -> Postgres {
        self.user = user;
        self
    }

    /// This engine with TLS.
    pub fn with_tls(mut self, tls: PostgresTls) -> Postgres {
        self.tls = Some(tls);
        self
    }

    /// The SQL that creates the roles and the default database, one statement a line, as
    /// single-user mode reads it.
    fn bootstrap_sql(&self) -> Result<String, ServerError> {
        self.superuser.create_role()?; // only to check the password
        let password = quote_literal(&self.superuser.password);
        let mut sql = format!("ALTER ROLE {} PASSWORD {password};\n", quote_ident(SUPERUSER));
        for user in std::iter::once(&self.user).chain(&self.users) {
            sql.push_str(&user.create_role()?);
            sql.push('\n');
        }
        if let Some(user) = &self.replication {
            let role = user.create_role()?;
            sql.push_str(&role.replace(" LOGIN ", " LOGIN REPLICATION "));
            sql.push('\n');
        }
        let user = quote_ident(&self.user.name);
        sql.push_str(&format!("CREATE DATABASE {user} OWNER {user};\n"));
        Ok(sql)
    }
}

const LAUNCH: Launch = Launch {
    program: "postgres",
    missing: "PostgreSQL is not installed (no /usr/lib/postgresql/<version>/bin/postgres, nor a postgres on PATH)",
    package: Some("postgresql"),
    install: INSTALL_HINT,
    name: "postgres",
    probe: "pg_isready",
    log: "postgres.log",
    log_on_timeout: true,
    ready: pg_isready,
    deadline: Duration::from_secs(30),
    poll: Duration::from_millis(50),
};

/// The directory of the server's programs (see [`PostgresServer`]), found once.
fn bin_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let has_all = |dir: &Path| {
            ["postgres", "initdb", "psql", "pg_isready"].iter().all(|p| dir.join(p).is_file())
        };
        let version =
            |name: &str| -> Vec<u32> { name.split('.').map(|n| n.parse().unwrap_or(0)).collect() };
        let mut debian: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| (version(&e.file_name().to_string_lossy()), e.path().join("bin")))
            .filter(|(_, bin)| has_all(bin))
            .collect();
        debian.sort();
        let on_path = || std::env::split_paths(&std::env::var_os("PATH")?).find(|dir| has_all(dir));
        debian.pop().map(|(_, bin)| bin).or_else(on_path)
    })
    .as_deref()
}

/// What is missing (`program`, which `package` provides), and what to install.
fn missing(program: &str, package: &'static str, missing: String) -> ServerError {
    let (program, package) = (program.to_string(), Some(package));
    ServerError::NotInstalled { program, package, missing, install: INSTALL_HINT, source: None }
}

/// The path of the PostgreSQL program `name`, or what to install.
pub(crate) fn program(name: &str) -> Result<PathBuf, ServerError> {
    let dir = bin_dir().ok_or_else(|| missing(name, "postgresql", LAUNCH.missing.into()))?;
    Ok(dir.join(name))
}

/// `None` when not root; as root, the `postgres` system user, or what to install when there
/// is none.
pub(crate) fn run_as() -> Result<Option<RunAs>, ServerError> {
    if !is_root() {
        return Ok(None);
    }
    let found = system_user(SYSTEM_USER);
    let why = "Postgres refuses to run as root, and there is no `postgres` system user to run it \
               as (the postgresql package creates it)";
    found.map(Some).ok_or_else(|| missing(SYSTEM_USER, "postgresql", why.into()))
}

/// `setpriv`, which starts the server as another user when the tests run as root.
pub(crate) fn check_setpriv() -> Result<(), ServerError> {
    match Command::new("setpriv").arg("--version").stdout(Stdio::null()).status() {
        Ok(_) => Ok(()),
        Err(e) => Err(missing(
            "setpriv",
            "util-linux",
            format!(
                "setpriv is not installed ({e}; needed to run postgres as its own user as root)"
            ),
        )),
    }
}

/// Whether the server on loopback `port` accepts connections (`pg_isready`, 1 s at most).
fn pg_isready(port: u16) -> bool {
    let Ok(program) = program("pg_isready") else { return false };
    let port = port.to_string();
    Command::new(program)
        .args(["-q", "-t", "1", "-h", "127.0.0.1", "-p", &port, "-U", SUPERUSER, "-d", SUPERUSER])
        .env("LC_ALL", "C")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The server's command: wait until no process of its previous run is attached to the shared
/// memory segment `postmaster.pid` names (10 s at most; its 7th line is the segment's key and
/// id), then become the rest of the arguments. `$1` is the data directory.
const START_SCRIPT: &str = r#"data=$1; shift
id=
if [ -f "$data/postmaster.pid" ]; then
  { read -r _; read -r _; read -r _; read -r _; read -r _; read -r _; read -r _ id; } < "$data/postmaster.pid"
fi
n=0
while [ -n "$id" ] && [ "$n" -lt 200 ]; do
  busy=
  while read -r _ shmid _ _ _ _ nattch _; do
    if [ "$shmid" = "$id" ] && [ "$nattch" != 0 ]; then busy=1; fi
  done < /proc/sysvipc/shm
  [ -n "$busy" ] || break
  sleep 0.05
  n=$((n + 1))
done
exec "$@""#;

impl ClusterEngine for Postgres {
    const LAUNCH: &'static Launch = &LAUNCH;
    const KIND: &'static str = "postgres";
    const PORTS: &'static [&'static str] = &["client"];
    const FORMATION: Duration = Duration::from_secs(30);

    /// The programs, the user to run as (and `setpriv`) when root; then the interlock
    /// segments of killed servers go (see [`PostgresServer`]).
    fn check(&self) -> Result<(), ServerError> {
        program("postgres")?;
        let who = run_as()?;
        if who.is_some() {
            check_setpriv()?;
        }
        // SAFETY: geteuid cannot fail.
        remove_orphan_segments(who.map_or_else(|| unsafe { libc::geteuid() }, |w| w.uid));
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
                "Postgres is a server of one here (no replication)".into(),
            ));
        }
        let who = run_as()?;
        let data = dir.join("data");
        if let Some(who) = who {
            searchable_by(&data, who, SYSTEM_USER)?;
        }
        match &self.standby_of {
            _ if data.join("PG_VERSION").exists() => {}
            Some(primary) => base_backup(&data, who, primary)?,
            None => self.initialize(dir, &data, who)?,
        }
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(START_SCRIPT).arg("postgres-start").arg(&data);
        if let Some(who) = who {
            cmd.arg("setpriv")
                .arg(format!("--reuid={}", who.uid))
                .arg(format!("--regid={}", who.gid))
                .args(["--clear-groups", "--pdeathsig", "KILL", "--"]);
        }
        cmd.arg(program("postgres")?)
            .arg("-D")
            .arg(&data)
            .args(["-p", &layout.listen(i, 0).to_string()])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="])
            .env("LC_ALL", "C");
        Ok(cmd)
    }

    /// The one member, while it runs.
    fn leader(&self, cluster: &Cluster<Self>) -> Option<usize> {
        (cluster.len() == 1 && cluster.is_up(0)).then_some(0)
    }
}

impl Postgres {
    /// `initdb` into `data` (empty), its configuration, TLS files, and the roles and database
    /// made in single-user mode; as `who` when given.
    fn initialize(&self, dir: &Path, data: &Path, who: Option<RunAs>) -> Result<(), ServerError> {
        let io = |what: &str, path: &Path| {
            let context = format!("{what} {}", path.display());
            move |e| ServerError::io(context, e)
        };
        own(data, who, 0o700).map_err(io("prepare", data))?;
        // No password file: the superuser's password is set with the other roles, below;
        // initdb's pg_hba.conf is replaced before the server first starts.
        let mut initdb = as_user(Command::new(program("initdb")?), who);
        initdb
            .arg("-D")
            .arg(data)
            .args(["-U", SUPERUSER, "-E", "UTF8", "--locale=C", "--no-sync"])
            .current_dir(dir);
        succeeded("initdb", run(&mut initdb, ""))?;

        let hba = match &self.tls {
            Some(tls) if tls.require => {
                "hostssl all all 127.0.0.1/32 scram-sha-256\nhostnossl all all 127.0.0.1/32 reject\n"
            }
            _ => "host all all 127.0.0.1/32 scram-sha-256\n",
        };
        let replication = match &self.replication {
            Some(user) => {
                format!("host replication {} 127.0.0.1/32 scram-sha-256\n", quote_ident(&user.name))
            }
            None => String::new(),
        };
        let hba_file = data.join("pg_hba.conf");
        let hba = format!(
            "# test-servers: passwords (SCRAM) over TCP on loopback; no Unix socket.\n{hba}{replication}"
        );
        std::fs::write(&hba_file, hba).map_err(io("write", &hba_file))?;
        let mut settings = format!(
            "\n# test-servers\nmax_connections = {POSTGRES_MAX_CONNECTIONS}\n\
             password_encryption = 'scram-sha-256'\nfsync = on\n\
             dynamic_shared_memory_type = mmap\nlogging_collector = off\nlog_destination = 'stderr'\n"
        );
        if let Some(tls) = &self.tls {
            for (from, name) in [(&tls.server.cert, "server.crt"), (&tls.server.key, "server.key")]
            {
                let to = data.join(name);
                let pem = std::fs::read_to_string(from).map_err(io("read", from))?;
                write_owned(&to, &pem, who).map_err(io("write", &to))?;
            }
            let ca = dir.join("ca.pem");
            std::fs::copy(&tls.ca, &ca).map_err(io("copy the CA to", &ca))?;
            settings
                .push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        }
        let conf = data.join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut f| f.write_all(settings.as_bytes()))
            .map_err(io("write", &conf))?;

        let mut single = as_user(Command::new(program("postgres")?), who);
        single
            .arg("--single")
            .arg("-D")
            .arg(data)
            .args(["-c", "exit_on_error=on", "-c", "fsync=off", SUPERUSER])
            .current_dir(dir);
        succeeded("postgres --single", run(&mut single, &self.bootstrap_sql()?))
    }
}

/// `cmd`, spawned as `who` when given (its supplementary groups dropped), in the C locale.
pub(crate) fn as_user(mut cmd: Command, who: Option<RunAs>) -> Command {
    if let Some(who) = who {
        cmd.uid(who.uid).gid(who.gid);
    }
    cmd.env("LC_ALL", "C");
    cmd
}

/// Remove the System V shared memory segments of user `uid` that a killed postmaster left:
/// nothing attached, a creator that is gone, and no bigger than the header PostgreSQL's
/// interlock segment holds (its shared memory proper is an anonymous mapping). Postgres
/// removes such a segment itself when it starts in the same data directory; one whose
/// directory was removed would stay until the machine reboots.
fn remove_orphan_segments(uid: u32) {
    let Ok(table) = std::fs::read_to_string("/proc/sysvipc/shm") else { return };
    // key shmid perms size cpid lpid nattch uid gid cuid cgid ...
    for fields in table.lines().skip(1).map(|l| l.split_whitespace().collect::<Vec<_>>()) {
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        let (Some(id), Some(size), Some(cpid), Some(nattch), Some(cuid)) =
            (field(1), field(3), field(4), field(6), field(9))
        else {
            continue;
        };
        let gone = !Path::new(&format!("/proc/{cpid}")).exists();
        if nattch == 0 && cuid == u64::from(uid) && size <= 256 && gone {
            // SAFETY: IPC_RMID takes no buffer; a segment removed meanwhile is an error.
            unsafe { libc::shmctl(id as libc::c_int, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
}

/// Run `cmd` to its end with `input` on its standard input; its status and output.
pub(crate) fn run(cmd: &mut Command, input: &str) -> std::io::Result<Output> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    // A program that exits before it reads (psql refused a connection) says why in its output.
    let _ = child.stdin.take().expect("piped").write_all(input.as_bytes());
    child.wait_with_output()
}

/// `Ok` if `what` ran and exited with success; otherwise the failure, with its output.
pub(crate) fn succeeded(what: &str, ran: std::io::Result<Output>) -> Result<(), ServerError> {
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

impl Server<Postgres> {
    /// Start a server of `engine`'s configuration ([`Postgres::with_users`],
    /// [`Postgres::with_tls`], ...), as [`Server::launch`] does the default's.
    pub fn launch_with(engine: Postgres) -> Result<Self, ServerError> {
        Server::launch_engine(engine)
    }

    /// [`Server::launch_with`], panicking with why it could not start (what to install).
    pub fn start_with(engine: Postgres) -> Self {
        Self::launch_with(engine).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start a server that speaks TLS with `pki`'s server certificate (valid for 127.0.0.1 and
    /// localhost) and refuses every connection without TLS; [`Server::conn`] verifies it with
    /// a copy of `pki`'s CA ([`Server::ca_file`]), so `pki` may be dropped. Panics, saying
    /// why or what to install, if it cannot start.
    pub fn start_tls(pki: &TestPki) -> Self {
        Self::start_with(Postgres::default().with_tls(PostgresTls::from_pki(pki, true)))
    }

    /// [`Server::start_tls`] with any certificate (one for another host, to test that a
    /// client refuses it) and TLS required or not, returning why it could not start.
    pub fn launch_tls(tls: PostgresTls) -> Result<Self, ServerError> {
        Self::launch_with(Postgres::default().with_tls(tls))
    }

    /// Whether it speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.engine().tls.is_some()
    }

    /// The CA that signed its certificate (a copy in its directory), on a TLS server.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.engine().tls.as_ref().map(|_| self.dir().join("ca.pem"))
    }

    /// The default user (`lockbench`, owner of the database `lockbench`, with a random
    /// password unless [`Postgres::with_default_user`] gave another).
    pub fn user(&self) -> &PostgresUser {
        &self.engine().user
    }

    /// The superuser (`postgres`): for setup and for probes a test's user may not make
    /// (`pg_terminate_backend` of another role's session).
    pub fn superuser(&self) -> &PostgresUser {
        &self.engine().superuser
    }

    /// The default user on its database, over TLS verified with [`Server::ca_file`] on a TLS
    /// server: what a lock client takes.
    pub fn conn(&self) -> PostgresConn {
        let user = self.user();
        PostgresConn {
            host: "127.0.0.1".into(),
            port: self.port,
            user: user.name.clone(),
            password: user.password.clone(),
            dbname: user.name.clone(),
            ca: self.ca_file(),
        }
    }

    /// [`Server::conn`] as `user` (on the default user's database).
    pub fn conn_as(&self, user: &PostgresUser) -> PostgresConn {
        self.conn().as_user(user)
    }

    /// [`Server::conn`] as the superuser.
    pub fn superuser_conn(&self) -> PostgresConn {
        self.conn_as(self.superuser())
    }

    /// `postgres://lockbench:<password>@127.0.0.1:<port>/lockbench` (`?sslmode=require` on
    /// a TLS server): the default user's URL ([`PostgresConn::url`]).
    pub fn url(&self) -> String {
        self.conn().url()
    }

    /// [`Server::url`] as `user`.
    pub fn url_as(&self, user: &PostgresUser) -> String {
        self.conn_as(user).url()
    }

    /// Create `user` (a plain role that may log in) on the running server, as the superuser;
    /// it stays across restarts.
    pub fn create_user(&self, user: &PostgresUser) -> Result<(), ServerError> {
        psql_run(&self.superuser_conn(), &["-f", "-"], &user.create_role()?).map(drop)
    }
}

/// The test binary's Postgres server: started by the first call (which panics if it cannot
/// be), then the same one until the binary exits.
pub fn shared_postgres() -> &'static PostgresServer {
    static SERVER: OnceLock<PostgresServer> = OnceLock::new();
    keep(&SERVER, "postgres-keeper", PostgresServer::start)
}

/// `psql` for `conn`: no `.psqlrc`, unaligned rows without headers, never a password prompt
/// (the password is in `PGPASSWORD`), messages in English.
fn psql_command(conn: &PostgresConn) -> Result<Command, ServerError> {
    let mut cmd = Command::new(program("psql")?);
    cmd.args(["-X", "-A", "-t", "-w", "-d", &conn.conninfo()])
        .env("PGPASSWORD", &conn.password)
        .env("LC_ALL", "C");
    for var in ["PGSERVICE", "PGOPTIONS", "PGSSLCERT", "PGSSLKEY"] {
        cmd.env_remove(var);
    }
    Ok(cmd)
}

/// Run `psql` for `conn` with `args` (and `input`), stopping at the first error; its output.
fn psql_run(conn: &PostgresConn, args: &[&str], input: &str) -> Result<String, ServerError> {
    let mut cmd = psql_command(conn)?;
    let timeout = format!("-c statement_timeout={}", PSQL_TIMEOUT.as_millis());
    cmd.args(["-v", "ON_ERROR_STOP=1"]).args(args).env("PGOPTIONS", timeout);
    let what = format!("psql as {} at {}:{}", conn.user, conn.host, conn.port);
    let out = run(&mut cmd, input).map_err(|e| ServerError::io(&what, e))?;
    if !out.status.success() {
        let error = String::from_utf8_lossy(&out.stderr);
        return Err(ServerError::command(format!("{what} failed"), error.trim_end()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n').to_string())
}

/// Run `sql` with `psql -X -A -t -v ON_ERROR_STOP=1 -c <sql>` on a connection of its own for
/// `conn`, and return what it printed: the rows, one a line, columns separated by `|`,
/// without the last newline (`SELECT 1` gives `"1"`, `SELECT true` `"t"`). A refused
/// connection or a failed statement is [`ServerError::Command`] with `psql`'s message (a wrong
/// password: "password authentication failed for user ..."); 5 s to connect, and the statement
/// is cancelled after [`PSQL_TIMEOUT`] (its `statement_timeout`).
pub fn psql_call(conn: &PostgresConn, sql: &str) -> Result<String, ServerError> {
    psql_run(conn, &["-c", sql], "")
}

/// A long-lived `psql` session: one connection, one backend, kept open between statements,
/// so that what is tied to a session (a session-level advisory lock) stays held until the
/// session ends. Dropped, its `psql` is killed: the connection closes, and the backend ends,
/// releasing what it held, as soon as it notices (at once when idle).
///
/// Each statement sent is followed by `\echo` and `\warn` of a marker, which `psql` runs once
/// the statement is done: its rows are what the standard output holds before the marker, its
/// errors and notices what the standard error does. [`PsqlSession::send`] does not wait, so a
/// statement may block in the server (`SELECT pg_advisory_lock(7)` while another session holds
/// 7) while the test does something else; [`PsqlSession::wait_output`] says whether it is done.
pub struct PsqlSession {
    child: Child,
    stdin: ChildStdin,
    out: Receiver<Option<String>>,
    err: Receiver<Option<String>>,
    /// The statements sent and not yet waited for, by marker number.
    sent: VecDeque<u64>,
    next: u64,
    /// What the oldest of them printed so far, and whether its standard output is complete.
    rows: Vec<String>,
    rows_done: bool,
    notes: Vec<String>,
    messages: String,
    pid: u32,
    label: String,
}

/// Whether a line `psql` wrote on its standard error says a statement or the connection failed
/// (not a `NOTICE` or `WARNING`).
fn is_error(line: &str) -> bool {
    ["ERROR:", "FATAL:", "PANIC:", "psql:", "server closed the connection", "connection to server"]
        .iter()
        .any(|p| line.starts_with(p))
}

impl PsqlSession {
    /// Connect with `psql` as `conn` says and wait until the session answers (its backend's
    /// pid: [`PsqlSession::backend_pid`]), or say why it did not (the connection refused).
    pub fn open(conn: &PostgresConn) -> Result<PsqlSession, ServerError> {
        let label = format!("psql session as {} at {}:{}", conn.user, conn.host, conn.port);
        let mut cmd = psql_command(conn)?;
        cmd.arg("-q").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| ServerError::io(format!("spawn {label}"), e))?;
        let stdin = child.stdin.take().expect("piped");
        let out = forward_lines(child.stdout.take().expect("piped"));
        let err = forward_lines(child.stderr.take().expect("piped"));
        let mut session = PsqlSession {
            child,
            stdin,
            out,
            err,
            sent: VecDeque::new(),
            next: 0,
            rows: Vec::new(),
            rows_done: false,
            notes: Vec::new(),
            messages: String::new(),
            pid: 0,
            label,
        };
        let pid = session.query("SELECT pg_backend_pid()")?;
        session.pid = pid
            .parse()
            .map_err(|_| ServerError::command(format!("{} has no backend", session.label), pid))?;
        Ok(session)
    }

    /// The process id of the session's backend (for `pg_terminate_backend`, `pg_locks`).
    pub fn backend_pid(&self) -> u32 {
        self.pid
    }

    /// Send `sql` (one statement or more; a `;` follows on a line of its own, ending the last
    /// if it was not) without waiting for it: [`PsqlSession::wait_output`] takes its output, statements' in the order
    /// sent.
    pub fn send(&mut self, sql: &str) -> Result<(), ServerError> {
        let n = self.next;
        self.next += 1;
        let marker = marker(n);
        let text = format!("{sql}\n;\n\\echo {marker}\n\\warn {marker}\n");
        let sent = self.stdin.write_all(text.as_bytes()).and_then(|()| self.stdin.flush());
        sent.map_err(|e| ServerError::io(format!("send to {}", self.label), e))?;
        self.sent.push_back(n);
        Ok(())
    }

    /// Wait up to `timeout` for the oldest statement sent and not yet waited for: `Ok(None)`
    /// while it runs (a wait for a lock; wait again later), its rows as [`psql_call`] gives
    /// them once it is done; [`ServerError::Command`] with the server's message if it failed,
    /// or if the session ended (its backend terminated, the server gone). Its notices and
    /// warnings are [`PsqlSession::messages`].
    pub fn wait_output(&mut self, timeout: Duration) -> Result<Option<String>, ServerError> {
        let Some(&n) = self.sent.front() else {
            return Err(ServerError::Invalid(format!("nothing was sent to {}", self.label)));
        };
        let deadline = Instant::now() + timeout;
        let marker = marker(n);
        while !self.rows_done {
            match self.out.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(line)) if line == marker => self.rows_done = true,
                Ok(Some(line)) => self.rows.push(line),
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return Err(self.ended()),
            }
        }
        // `\warn` runs right after `\echo`.
        let deadline = deadline.max(Instant::now() + Duration::from_secs(5));
        loop {
            match self.err.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(line)) if line == marker => break,
                Ok(Some(line)) => self.notes.push(line),
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return Err(self.ended()),
            }
        }
        self.sent.pop_front();
        self.rows_done = false;
        let rows = std::mem::take(&mut self.rows).join("\n");
        self.messages = std::mem::take(&mut self.notes).join("\n");
        if self.messages.lines().any(is_error) {
            return Err(ServerError::command(format!("{} failed", self.label), &self.messages));
        }
        Ok(Some(rows))
    }

    /// [`PsqlSession::send`] `sql` and wait for its rows ([`PSQL_TIMEOUT`] at most: a
    /// statement still running then is [`ServerError::Command`], and stays the next to wait
    /// for).
    pub fn query(&mut self, sql: &str) -> Result<String, ServerError> {
        self.send(sql)?;
        let rows = self.wait_output(PSQL_TIMEOUT)?;
        let what = format!("{} did not finish `{sql}` within {PSQL_TIMEOUT:?}", self.label);
        rows.ok_or(ServerError::Command { what, answer: None })
    }

    /// The notices and warnings of the last statement waited for ("WARNING:  you don't own a
    /// lock of type ExclusiveLock" from an unlock of a lock not held).
    pub fn messages(&self) -> &str {
        &self.messages
    }

    /// How many statements were sent and not waited for yet.
    pub fn pending(&self) -> usize {
        self.sent.len()
    }

    /// The error of a session whose `psql` ended: what it wrote last.
    fn ended(&mut self) -> ServerError {
        let deadline = Instant::now() + Duration::from_secs(2);
        while let Ok(Some(line)) =
            self.err.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.notes.push(line);
        }
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        ServerError::command(format!("{} ended ({status})", self.label), self.notes.join("\n"))
    }
}

impl Drop for PsqlSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The marker `\echo` and `\warn` print after statement `n` of a session.
fn marker(n: u64) -> String {
    format!("__test_servers_psql_done_{n}__")
}

/// `s` as an SQL identifier: double-quoted, inner quotes doubled.
pub(crate) fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// `s` as an SQL string literal (`standard_conforming_strings` is on: backslashes are
/// themselves).
pub(crate) fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `s` as a libpq connection string value: single-quoted, `\` and `'` escaped.
pub(crate) fn conninfo_value(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
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
    fn names_and_passwords_are_quoted_for_sql_urls_and_conninfo() {
        assert_eq!(quote_ident(r#"a"b"#), r#""a""b""#);
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(conninfo_value(r"a'b\c"), r"'a\'b\\c'");
        let user = PostgresUser::with_password("lock er", "p@ss:/w");
        let conn = PostgresConn {
            host: "127.0.0.1".into(),
            port: 5432,
            user: user.name.clone(),
            password: user.password.clone(),
            dbname: "lockbench".into(),
            ca: None,
        };
        assert_eq!(conn.url(), "postgres://lock%20er:p%40ss%3A%2Fw@127.0.0.1:5432/lockbench");
        assert!(!format!("{conn:?}{user:?}").contains("p@ss"), "Debug shows no password");
        let tls = PostgresConn { ca: Some("/x/ca.pem".into()), ..conn };
        assert!(tls.url().ends_with("/lockbench?sslmode=require"));
        assert!(tls.conninfo().ends_with("sslmode=verify-full sslrootcert='/x/ca.pem'"));
        let bad = PostgresUser::with_password("x", "two\nlines");
        assert!(matches!(bad.create_role(), Err(ServerError::Invalid(_))));
        assert_eq!(
            PostgresUser::with_password("u", "p").create_role().unwrap(),
            r#"CREATE ROLE "u" LOGIN PASSWORD 'p';"#
        );
    }
}
