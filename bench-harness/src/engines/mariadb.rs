//! The MariaDB engine: named user locks (`lock-mariadb`: `GET_LOCK` on a connection per held
//! lock, the wait in the server, a lease kept by `wait_timeout`, a fencing token from an
//! InnoDB row) on a real server, in wall time.
//!
//! Opening a run connects once (an unreachable server or a refused login fails here, naming
//! the address) and prepares the fencing table `bench_harness_<ns>` of the run; each
//! contender then gets a backend of its own, or with `--sessions N` shares one of N: each lock
//! still takes a connection of its own, so sharing saves only the connects.
//!
//! Store load: every request the backend sends, counted under the table `mariadb`: `GET_LOCK`
//! as a conditional write (granted only when free), `RELEASE_LOCK` as a delete, the token's
//! `UPDATE`, `connect`, `SET` and each `COM_PING` (the lease's renewal) as writes, the fencing
//! table's check on connect as a read. A grant on an idle connection costs three, however
//! long it waited.
//!
//! Options: `--mariadb HOST:PORT` (or `LOCK_MARIADB_ADDRESS`) and `--mariadb-database`, or
//! `--spawn-mariadb`: one server of the harness's own (Debian's `mariadb-server`) on a free
//! loopback port, which `--faults server-restart:…` can restart; it keeps no user lock across
//! a restart. The harness cannot start a MariaDB cluster. `--mariadb-user`, its password in
//! `LOCK_MARIADB_PASSWORD` or `--mariadb-password-file`, is the user every client logs in as;
//! with `--spawn-mariadb` the harness creates it, or uses the server's own user when none is
//! given. `--mariadb-ca` (and `--mariadb-cert`, `--mariadb-key`): TLS, the server's
//! certificate checked against the CA and the host dialled.
//!
//! `--faults terminate:…` logs in as an administrator, asks the server which connection holds
//! each of the run's locks (`IS_USED_LOCK`) and ends it (`KILL CONNECTION`): on the server
//! `--spawn-mariadb` starts, its `root`; on the user's, the user `--mariadb-admin-user` names
//! (with the `CONNECTION ADMIN` privilege, or `SUPER`), its password in
//! `LOCK_MARIADB_ADMIN_PASSWORD` or `--mariadb-admin-password-file`. The holder's client
//! notices at its next ping (a third of a lease later at most).

use super::prelude::*;
use lock_mariadb::{MariaBackend, MariaConfig};
use std::sync::Mutex;

/// The engine.
pub struct Mariadb;

/// `--mariadb`, its TLS files, `--spawn-mariadb`, `--mariadb-user` and
/// `--mariadb-password-file`.
pub static FLAGS: ServerFlags = ServerFlags {
    algorithm: &GET_LOCK,
    sessions: Sharing::Shared(
        "one backend and its idle connections: each held or awaited lock still takes a \
         connection (a server thread) of its own",
    ),
    address: AddressFlag::new(
        "HOST:PORT",
        "LOCK_MARIADB_ADDRESS",
        "MariaDB (or MySQL) server, host:port [default: 127.0.0.1:3306]; the database is \
         --mariadb-database.",
    )
    .or("127.0.0.1:3306")
    .each(Endpoint {
        valid: |e| {
            e.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        },
        like: "a server like 127.0.0.1:3306 (host and port)",
    }),
    tls: Some(TlsFlags {
        ca_help: "Speak TLS to --mariadb, trusting the CA certificates in this PEM file; the \
                  server's certificate must name the host dialled.",
        mutual: true,
    }),
    secures_clusters: false,
    run_line: RunLine {
        what: "mariadb",
        ttl: "lease (wait_timeout, whole seconds)",
        ttl_of: lease_ttl,
        user: "as user '{u}'",
    },
    login: LoginFlags {
        secret: SecretNames { name: "mariadb", secret: "password", var: "LOCK_MARIADB_PASSWORD" },
        heading: "MariaDB (--backend mariadb)",
        user_help: "Log every client in as this user, its password from the environment \
                variable LOCK_MARIADB_PASSWORD or from --mariadb-password-file (never on the \
                command line). With --spawn-mariadb, the harness creates the user on the server \
                it starts.",
    },
    members: "MEMBERS",
    spawn_help: "Start a MariaDB server of the harness's own for each run (Debian's \
                 `mariadb-server` package), on a free loopback port, and stop it afterwards; \
                 `--faults server-restart:…` restarts it (every session and user lock ends; \
                 the fencing table is kept). One server only: the harness starts no MariaDB \
                 cluster.",
    cluster: |n| format!("a MariaDB cluster of {n} servers (the harness cannot start one)"),
    one: "a MariaDB server",
    examples: "
  bench-harness --backend mariadb --spawn-mariadb --threads 8
      GET_LOCK on a MariaDB the harness starts, a connection per held lock
      (--ttl: the lease, the server's wait_timeout, rounded up to whole seconds)",
};

impl ServerEngine for Mariadb {
    type Client = MariaBackend;
    type Options = Options;
    const FLAGS: &'static ServerFlags = &FLAGS;
    const CLUSTERS: bool = false;
    const SPAWNED_LOGIN: SpawnedLogin = SpawnedLogin::Password;

    fn faults(o: &Options) -> &'static [FaultKind] {
        server::sql_fault_kinds(o, o.admin_user.is_some())
    }
}

/// Its options: its command-line flags besides the shared ones ([`FLAGS`]), and what result
/// files show.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[group(id = "mariadb-options")]
#[command(next_help_heading = "MariaDB (--backend mariadb)")]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// The server the harness starts, or the user's and how to reach it, and the user.
    #[arg(skip)]
    #[serde(flatten)]
    pub server: Spawn,
    /// The database on --mariadb, where the fencing table is kept [default: the user's name].
    /// The server the harness starts has its own.
    #[arg(id = "mariadb-database", long = "mariadb-database", value_name = "NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// The administrator `--faults terminate` logs in as on --mariadb to end the holders'
    /// connections (`KILL CONNECTION`): a user with the CONNECTION ADMIN privilege (or SUPER).
    /// Its password from the environment variable LOCK_MARIADB_ADMIN_PASSWORD or from
    /// --mariadb-admin-password-file (never on the command line). The server --spawn-mariadb
    /// starts has its own administrator.
    #[arg(id = "mariadb-admin-user", long = "mariadb-admin-user", value_name = "USER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_user: Option<String>,
    /// A file whose first line is the password of --mariadb-admin-user.
    #[arg(
        id = "mariadb-admin-password-file",
        long = "mariadb-admin-password-file",
        value_name = "FILE",
        requires = "mariadb-admin-user"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_password_file: Option<std::path::PathBuf>,
}

impl Options {
    /// `--mariadb-admin-user` and its password file.
    fn admin(&self) -> super::Login {
        super::Login {
            user: self.admin_user.clone(),
            password_file: self.admin_password_file.clone(),
        }
    }
}

impl super::Options for Options {
    fn server_mut(&mut self) -> Option<&mut Spawn> {
        Some(&mut self.server)
    }

    fn check(&self) -> Result<(), String> {
        FLAGS.admin(&self.server, &self.admin()).map(drop)
    }
}

/// The lease for a run's TTL: `wait_timeout` takes whole seconds, at least one, so a TTL is
/// rounded up.
pub fn lease_ttl(ttl: Duration) -> Duration {
    let whole = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    Duration::from_secs(whole.max(1))
}

/// Where contenders log in: the database, and the settings with the user and password; and
/// for `--faults terminate`, the administrator and the run's locks.
#[derive(Clone)]
pub struct Login {
    database: String,
    config: MariaConfig,
    admin: Option<server::Admin>,
    locks: Vec<String>,
}

impl Open for Mariadb {
    async fn open<'a>(&'a self, options: Options, setup: EngineSetup<'a>) -> OpenResult {
        super::Options::check(&options)?;
        let given = FLAGS.credentials(&options.server)?;
        let given_admin = FLAGS.admin(&options.server, &options.admin())?;
        // The server the harness starts names its own database and, without a user given, its
        // own user; the closure that starts it leaves them here.
        let found: Arc<Mutex<Option<server::SqlSpawned>>> = Arc::default();
        let (wanted, leave) = (given.clone(), found.clone());
        let one = move || {
            let mut engine = test_servers::Mariadb::default();
            if let Some(c) = &wanted {
                let user = test_servers::MariadbUser::with_password(&c.user, c.password.expose());
                engine = engine.with_users(&[user]);
            }
            let server = test_servers::MariadbServer::launch_with(engine)?;
            let conn = server.conn();
            let who = wanted.unwrap_or_else(|| {
                Credentials::new(
                    conn.user.clone(),
                    lock_core::secret::Secret::new(conn.password.clone()),
                )
            });
            let root = server.admin();
            let admin = server::Admin {
                address: server.addr().to_string(),
                credentials: Credentials::new(
                    root.name.clone(),
                    lock_core::secret::Secret::new(root.password.clone()),
                ),
            };
            *leave.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(server::SqlSpawned { database: conn.database, login: who, admin });
            Ok(server)
        };
        let starts = Starts {
            cluster: test_servers::Mariadb::default(),
            cluster_address: |_| String::new(),
            one,
            one_address: |s: &test_servers::MariadbServer| s.addr().to_string(),
        };
        let (address, faults) =
            server::locate(&FLAGS, &options.server, &setup.fault_kinds, starts).await?;
        let spawned = found.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (database, credentials, admin) = server::sql_login_and_admin(
            spawned,
            given,
            given_admin,
            options.database.clone(),
            "root",
            &address,
        );
        let config = MariaConfig {
            lease_ttl: lease_ttl(setup.settings.scaled(setup.settings.ttl)),
            connect_timeout: server::CONNECT_TIMEOUT,
            fencing_table: server::sql_name(setup.namespace),
            tls: options.server.tls(),
            credentials,
            ..MariaConfig::default()
        };
        let login = Login { database, config, admin, locks: setup.lock_ids.clone() };
        if setup.fault_kinds.contains(&FaultKind::Terminate) {
            let admin = login.admin_conn().await.map_err(|e| format!("--faults terminate: {e}"))?;
            let _ = admin.disconnect().await;
        }
        let connector = Dial { address, config: login };
        Opened::probe(connector, setup.settings, faults).await
    }
}

impl Login {
    /// The driver's URL for the server at `address` (host:port), without user or password
    /// (the settings carry them).
    fn url(&self, address: &str) -> String {
        let db: String = self
            .database
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("mysql://{address}/{db}")
    }

    /// A connection of the administrator, to no database (user locks are the server's, not a
    /// database's); an error names the server and the user when the login fails.
    async fn admin_conn(&self) -> Result<mysql_async::Conn, String> {
        let Some(admin) = &self.admin else {
            return Err("no administrator: --spawn-mariadb, or --mariadb-admin-user".into());
        };
        let url = format!("mysql://{}", admin.address);
        let opts = mysql_async::Opts::from_url(&url).map_err(|e| e.to_string())?;
        let opts = mysql_async::OptsBuilder::from_opts(opts)
            .user(Some(admin.credentials.user.as_str()))
            .pass(Some(admin.credentials.password.expose()))
            .prefer_socket(false);
        let cannot = |why: String| {
            format!(
                "the administrator '{}' cannot log in to MariaDB at {}: {why}",
                admin.credentials.user, admin.address
            )
        };
        match tokio::time::timeout(ADMIN_TIMEOUT, mysql_async::Conn::new(opts)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(cannot(e.to_string())),
            Err(_) => Err(cannot(format!("no answer within {ADMIN_TIMEOUT:?}"))),
        }
    }

    /// Ends the connection holding each of the run's locks that is held (`IS_USED_LOCK` names
    /// it); how many it ended. A holder that let go and closed meanwhile is not counted.
    async fn end_holders(&self) -> Result<usize, String> {
        use mysql_async::prelude::Queryable;
        let mut conn = self.admin_conn().await?;
        let work = async {
            let mut holders = std::collections::BTreeSet::new();
            for name in &self.locks {
                let id: Option<Option<u64>> =
                    conn.exec_first("SELECT IS_USED_LOCK(?)", (name.as_str(),)).await?;
                holders.extend(id.flatten());
            }
            let mut ended = 0;
            for id in holders {
                match conn.query_drop(format!("KILL CONNECTION {id}")).await {
                    Ok(()) => ended += 1,
                    // ER_NO_SUCH_THREAD: it ended by itself after IS_USED_LOCK answered.
                    Err(mysql_async::Error::Server(e)) if e.code == 1094 => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(ended)
        };
        let ended = tokio::time::timeout(ADMIN_TIMEOUT, work).await;
        let _ = conn.disconnect().await;
        match ended {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {ADMIN_TIMEOUT:?}")),
        }
    }
}

/// How long the administrator waits to log in, and for its statements' answers.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

impl Connect for Dial<Login> {
    type Engine = Mariadb;

    /// A backend on the server, or through `via` (a contender's proxy). The lease is the
    /// server's timer; the client reads no clock for it but the interval of its pings.
    async fn connect(&self, via: Via, requests: RequestHook) -> Connected<Self> {
        let address = self.target(via, |a| a.to_string());
        let config = MariaConfig { requests, ..self.config.config.clone() };
        MariaBackend::connect(&self.config.url(&address), config)
            .await
            .map_err(|e| FLAGS.unreachable(&address, "log in and prepare the fencing table", e))
    }

    const OPENS_SESSION: Option<&'static str> = Some("connect");

    fn kind(request: &Request<'_>) -> Kind {
        match request.command {
            "GET_LOCK" => Kind::Cas,
            "RELEASE_LOCK" => Kind::Delete,
            "prepare" => Kind::Read,
            _ => Kind::Write,
        }
    }

    /// The `stranger` fault: a client with no password logs in as the run's user and ends
    /// every other session of that user (`KILL CONNECTION`, which a user may do to its own
    /// sessions), which frees every lock they hold. A server that asks for a password refuses
    /// it.
    async fn stranger(&self) -> Result<String, String> {
        use mysql_async::prelude::Queryable;
        let user = self.config.config.credentials.as_ref().map_or("root", |c| c.user.as_str());
        let url = self.config.url(&self.address);
        let opts = mysql_async::Opts::from_url(&url).map_err(|e| e.to_string())?;
        let opts = mysql_async::OptsBuilder::from_opts(opts)
            .user(Some(user))
            .pass(None::<String>)
            .prefer_socket(false);
        let refused = |why: String| Ok(server_faults::stranger_outcome(0, Some(why)));
        let limit = Duration::from_secs(5);
        let mut conn = match tokio::time::timeout(limit, mysql_async::Conn::new(opts)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return refused(e.to_string()),
            Err(_) => return refused(format!("no answer within {limit:?}")),
        };
        let others = "SELECT ID FROM information_schema.PROCESSLIST \
             WHERE USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1) AND ID <> CONNECTION_ID()";
        let ids: Vec<u64> = match conn.query(others).await {
            Ok(ids) => ids,
            Err(e) => return refused(e.to_string()),
        };
        let mut killed = 0;
        for id in ids {
            if conn.query_drop(format!("KILL CONNECTION {id}")).await.is_ok() {
                killed += 1;
            }
        }
        let _ = conn.disconnect().await;
        Ok(server_faults::stranger_outcome(killed, None))
    }

    /// The `terminate` fault: the administrator ends the connection holding each of the run's
    /// locks (`KILL CONNECTION`), which frees the lock; the holder's client notices at its
    /// next ping.
    async fn terminate(&self) -> Result<String, String> {
        Ok(server_faults::terminate_outcome(self.config.end_holders().await))
    }
}

/// `GET_LOCK` named locks.
pub static GET_LOCK: Algorithm = Algorithm::new(
    "mariadb",
    "MariaDB GET_LOCK named locks: a connection per held lock, the wait in the server",
);

per_owner_client!(MariaBackend);

/// The server `--spawn-mariadb` starts, which `--faults server-restart` kills and starts
/// again.
impl server_faults::Restartable for test_servers::MariadbServer {
    fn stop(&mut self) {
        test_servers::MariadbServer::stop(self);
    }
    fn start_again(&mut self) -> Result<(), String> {
        Ok(self.try_start_again()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_whole_seconds_rounded_up() {
        assert_eq!(lease_ttl(Duration::from_millis(50)), Duration::from_secs(1));
        assert_eq!(lease_ttl(Duration::from_millis(2100)), Duration::from_secs(3));
        assert_eq!(lease_ttl(Duration::from_secs(4)), Duration::from_secs(4));
    }

    #[test]
    fn the_url_carries_the_database_encoded() {
        let login = Login {
            database: "a b".into(),
            config: MariaConfig::default(),
            admin: None,
            locks: Vec::new(),
        };
        assert_eq!(login.url("127.0.0.1:3306"), "mysql://127.0.0.1:3306/a%20b");
    }
}
