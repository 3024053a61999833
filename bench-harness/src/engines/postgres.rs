//! The PostgreSQL engine: session-level advisory locks (`lock-postgres`: a connection per held
//! lock, the wait in the server's queue, a lease kept by `idle_session_timeout`) on a real
//! server, in wall time; and `postgres-xact`, the transaction-level lock, each grant an open
//! transaction (`pg_advisory_xact_lock`) that the release commits, its lease kept by
//! `idle_in_transaction_session_timeout`.
//!
//! Opening a run connects once (an unreachable server or a refused login fails here, naming
//! the address) and prepares the fencing sequence `bench_harness_<ns>` of the run; each
//! contender then gets a backend of its own, or with `--sessions N` shares one of N: each lock
//! still takes a connection of its own, so sharing saves only the connects.
//!
//! Store load: every query message the backend sends, counted under the table `postgres`:
//! `lock`, `try_lock` and `transaction` as conditional writes (granted only when free),
//! `unlock`, `COMMIT` and `ROLLBACK` as deletes, `connect`, `SET` and each `ping` (the lease's
//! renewal) as writes, the sequence's check on connect as a read. A grant on a pooled
//! connection costs two (`lock`, `unlock`), and a `ping` after a wait of more than a third of a
//! lease.
//!
//! Options: `--postgres HOST:PORT` (or `LOCK_POSTGRES_ADDRESS`) and `--postgres-database`, or
//! `--spawn-postgres`: one server of the harness's own (Debian's `postgresql`) on a free
//! loopback port, which `--faults server-restart:…` can restart; it keeps no advisory lock
//! across a restart. The harness cannot start a PostgreSQL cluster. With
//! `--postgres-pool session|transaction` it puts a PgBouncer of its own (Debian's
//! `pgbouncer`) in front of that server, `--postgres-pool-size` server connections per pool
//! (4 by default): in session pooling the lock works as on the server; in transaction pooling
//! a client's statements may each run on another server connection, so a session-level
//! advisory lock is no lock at all, and the run's overlaps say how often it failed.
//! `--postgres-standby` starts a streaming standby beside that server (asynchronous, as
//! PostgreSQL's default) and points every client at both (`target_session_attrs=read-write`:
//! the one that takes writes); `--faults leader-kill:…` then kills the primary and promotes the
//! standby at once, as a failover manager (Patroni, an operator) would, and DURATION later makes
//! the killed server a standby of the new primary (its data removed, `pg_basebackup`), so that
//! the pair can fail over again. No advisory lock survives a promotion: they are not written to
//! the WAL.
//! `--postgres-user`, its password in `LOCK_POSTGRES_PASSWORD` or `--postgres-password-file`,
//! is the role every client logs in as (SCRAM); with `--spawn-postgres` the harness creates
//! it, or uses the server's own user when none is given. `--postgres-ca` (and
//! `--postgres-cert`, `--postgres-key`): TLS, the server's certificate checked against the CA
//! and the host dialled.
//!
//! `--faults terminate:…` logs in as an administrator and ends the backend of every holder of
//! one of the run's advisory locks (`pg_terminate_backend`), session-level or
//! transaction-level: on the server `--spawn-postgres` starts, its superuser (straight to the
//! server, past a PgBouncer in front); on the user's, the role `--postgres-admin-user` names
//! (a superuser, or a member of `pg_signal_backend`), its password in
//! `LOCK_POSTGRES_ADMIN_PASSWORD` or `--postgres-admin-password-file`.

use super::prelude::*;
use lock_postgres::{PgBackend, PgConfig};
use std::sync::Mutex;

/// The engine.
pub struct Postgres;

/// `--postgres`, its TLS files, `--spawn-postgres`, `--postgres-user` and
/// `--postgres-password-file`.
pub static FLAGS: ServerFlags = ServerFlags {
    algorithm: &ADVISORY,
    sessions: Sharing::Shared(
        "one backend and its idle connections: each held or awaited lock still takes a \
         connection (a server process) of its own",
    ),
    address: AddressFlag::new(
        "HOST:PORT",
        "LOCK_POSTGRES_ADDRESS",
        "PostgreSQL server, host:port [default: 127.0.0.1:5432]; the database is \
         --postgres-database.",
    )
    .or("127.0.0.1:5432")
    .each(Endpoint {
        valid: |e| {
            e.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        },
        like: "a server like 127.0.0.1:5432 (host and port)",
    }),
    tls: Some(TlsFlags {
        ca_help: "Speak TLS to --postgres, trusting the CA certificates in this PEM file; the \
                  server's certificate must name the host dialled (libpq's verify-full).",
        mutual: true,
    }),
    secures_clusters: false,
    run_line: RunLine {
        what: "postgres",
        ttl: "lease (idle_session_timeout)",
        ttl_of: lease_ttl,
        user: "as role '{u}'",
    },
    login: LoginFlags {
        secret: SecretNames { name: "postgres", secret: "password", var: "LOCK_POSTGRES_PASSWORD" },
        heading: "PostgreSQL (--backend postgres)",
        user_help: "Log every client in as this role, its password from the environment \
                variable LOCK_POSTGRES_PASSWORD or from --postgres-password-file (never on the \
                command line). With --spawn-postgres, the harness creates the role on the \
                server it starts.",
    },
    members: "MEMBERS",
    spawn_help: "Start a PostgreSQL server of the harness's own for each run (Debian's \
                 `postgresql` package), on a free loopback port, and stop it afterwards; \
                 `--faults server-restart:…` restarts it (every session and advisory lock ends; \
                 the fencing sequence is kept). One server only: the harness starts no \
                 PostgreSQL cluster.",
    cluster: |n| format!("a PostgreSQL cluster of {n} servers (the harness cannot start one)"),
    one: "a PostgreSQL server",
    examples: "
  bench-harness --backend postgres --spawn-postgres --threads 8
      advisory locks on a PostgreSQL the harness starts, a connection per held lock
      (--ttl: the lease, the server's idle_session_timeout)",
};

impl ServerEngine for Postgres {
    type Client = PgBackend;
    type Options = Options;
    const FLAGS: &'static ServerFlags = &FLAGS;
    const CLUSTERS: bool = false;
    const LOCKS: &'static [Entry<PgBackend>] =
        &[Entry::per_owner(&ADVISORY), Entry::mutex(&XACT, transaction_lock)];

    /// A primary and its standby: the failover rows of the comparisons and the safety table.
    fn cluster_options() -> Option<Options> {
        let mut o: Options = server::spawned()?;
        o.standby = true;
        Some(o)
    }

    /// Behind PgBouncer in transaction pooling: the safety table's pooling rows.
    fn pool_options() -> Option<Options> {
        let mut o: Options = server::spawned()?;
        o.pool = Some(Pool::Transaction);
        Some(o)
    }

    fn place(o: &Options) -> String {
        match (o.standby, o.pool) {
            (true, _) => {
                "a PostgreSQL primary and its streaming standby started by the harness".into()
            }
            (_, Some(pool)) => format!(
                "a PostgreSQL server behind a PgBouncer in {} pooling, started by the harness",
                match pool {
                    Pool::Session => "session",
                    Pool::Transaction => "transaction",
                }
            ),
            _ => FLAGS.address(&o.server),
        }
    }

    fn shape(o: &Options) -> String {
        match (o.standby, o.pool) {
            (true, _) => STANDBY_SHAPE.into(),
            (_, Some(Pool::Session)) => "via PgBouncer (session)".into(),
            (_, Some(Pool::Transaction)) => "via PgBouncer (transaction)".into(),
            _ => server::topology(o),
        }
    }

    /// On a pair: the kill of the primary with a promotion, and clock jumps (the contenders
    /// reach the pair directly, not through proxies of their own).
    fn faults(o: &Options) -> &'static [FaultKind] {
        if o.standby {
            &[FaultKind::ClockJump, FaultKind::LeaderKill]
        } else {
            server::sql_fault_kinds(o, o.admin_user.is_some())
        }
    }

    const SPAWNED_LOGIN: SpawnedLogin = SpawnedLogin::Password;
}

/// A primary with its standby, in tables: two servers.
const STANDBY_SHAPE: &str = "×2";

/// Its options: its command-line flags besides the shared ones ([`FLAGS`]), and what result
/// files show.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[group(id = "postgres-options")]
#[command(next_help_heading = "PostgreSQL (--backend postgres)")]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// The server the harness starts, or the user's and how to reach it, and the role.
    #[arg(skip)]
    #[serde(flatten)]
    pub server: Spawn,
    /// The database on --postgres [default: the role's name, as libpq's]. The server the
    /// harness starts has its own.
    #[arg(long = "postgres-database", value_name = "NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// Put a PgBouncer of the harness's own (Debian's `pgbouncer`) between the clients and
    /// the server --spawn-postgres starts, pooling `session`s (a client keeps one server
    /// connection) or `transaction`s (a client may get another server connection for each
    /// statement: session-level advisory locks do not hold there, which is what this shows).
    #[arg(long = "postgres-pool", value_name = "MODE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<Pool>,
    /// Server connections PgBouncer keeps per pool (with --postgres-pool) [default: 4].
    #[arg(long = "postgres-pool-size", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_size: Option<u32>,
    /// Start a streaming standby (asynchronous replication) beside the server --spawn-postgres
    /// starts, and connect to whichever of the two takes writes. `--faults leader-kill:…` kills
    /// the primary and promotes the standby; DURATION later the killed server comes back as
    /// the new primary's standby. Every advisory lock ends with the primary: none is
    /// replicated.
    #[arg(long = "postgres-standby")]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub standby: bool,
    /// The administrator `--faults terminate` logs in as on --postgres to end the holders'
    /// backends (`pg_terminate_backend`): a superuser, or a member of `pg_signal_backend`. Its
    /// password from the environment variable LOCK_POSTGRES_ADMIN_PASSWORD or from
    /// --postgres-admin-password-file (never on the command line). The server --spawn-postgres
    /// starts has its own superuser.
    #[arg(id = "postgres-admin-user", long = "postgres-admin-user", value_name = "USER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_user: Option<String>,
    /// A file whose first line is the password of --postgres-admin-user.
    #[arg(
        id = "postgres-admin-password-file",
        long = "postgres-admin-password-file",
        value_name = "FILE",
        requires = "postgres-admin-user"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_password_file: Option<std::path::PathBuf>,
}

impl Options {
    /// `--postgres-admin-user` and its password file.
    fn admin(&self) -> super::Login {
        super::Login {
            user: self.admin_user.clone(),
            password_file: self.admin_password_file.clone(),
        }
    }
}

/// How the PgBouncer the harness starts pools (`--postgres-pool`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pool {
    /// `pool_mode = session`.
    Session,
    /// `pool_mode = transaction`.
    Transaction,
}

impl super::Options for Options {
    fn server_mut(&mut self) -> Option<&mut Spawn> {
        Some(&mut self.server)
    }

    fn check(&self) -> Result<(), String> {
        FLAGS.admin(&self.server, &self.admin())?;
        if self.standby {
            let s = &self.server;
            if !s.spawn || s.members.is_some() {
                return Err("--postgres-standby starts a standby beside the server the harness \
                            starts: it needs --spawn-postgres"
                    .into());
            }
            if self.pool.is_some() {
                return Err("--postgres-standby with --postgres-pool: the PgBouncer the harness \
                            starts knows one server; drop one of the two"
                    .into());
            }
            if s.user.is_some() {
                return Err("--postgres-standby with --postgres-user: the pair the harness \
                            starts knows only its own user"
                    .into());
            }
        }
        match (self.pool, &self.server) {
            (None, _) if self.pool_size.is_some() => {
                Err("--postgres-pool-size needs --postgres-pool".into())
            }
            (Some(_), s) if !s.spawn || s.members.is_some() => Err("--postgres-pool puts a \
                 PgBouncer in front of the server the harness starts: it needs --spawn-postgres"
                .into()),
            (Some(_), s) if s.user.is_some() => Err("--postgres-pool with --postgres-user: the \
                 PgBouncer the harness starts knows only the server's own user"
                .into()),
            _ => Ok(()),
        }
    }
}

/// The server `--spawn-postgres` starts, and the PgBouncer in front of it with
/// `--postgres-pool`.
pub struct Spawned {
    server: test_servers::PostgresServer,
    bouncer: Option<test_servers::PgBouncer>,
}

impl Spawned {
    /// Where clients connect: the PgBouncer when there is one.
    fn address(&self) -> String {
        match &self.bouncer {
            Some(b) => b.addr().to_string(),
            None => self.server.addr().to_string(),
        }
    }
}

/// The lease for a run's TTL: the server's timeout takes milliseconds; the client refuses
/// less than 200 ms.
pub fn lease_ttl(ttl: Duration) -> Duration {
    ttl.max(Duration::from_millis(200))
}

/// Where contenders log in: the database and the role (with its password); and for
/// `--faults terminate`, the administrator and the run's locks.
#[derive(Clone)]
pub struct Login {
    database: String,
    config: PgConfig,
    admin: Option<server::Admin>,
    locks: Vec<String>,
}

impl Open for Postgres {
    async fn open<'a>(&'a self, options: Options, setup: EngineSetup<'a>) -> OpenResult {
        super::Options::check(&options)?;
        if options.standby {
            return open_pair(setup).await;
        }
        let given = FLAGS.credentials(&options.server)?;
        let given_admin = FLAGS.admin(&options.server, &options.admin())?;
        let pool = options.pool.map(|p| match p {
            Pool::Session => test_servers::PoolMode::Session,
            Pool::Transaction => test_servers::PoolMode::Transaction,
        });
        let pool_size = options.pool_size.unwrap_or(4);
        // The server the harness starts names its own database and, without a user given, its
        // own role; the closure that starts it leaves them here.
        let found: Arc<Mutex<Option<server::SqlSpawned>>> = Arc::default();
        let (wanted, leave) = (given.clone(), found.clone());
        let one = move || {
            let server = test_servers::PostgresServer::launch()?;
            let conn = server.conn();
            let who = match wanted {
                Some(c) => {
                    let role =
                        test_servers::PostgresUser::with_password(&c.user, c.password.expose());
                    server.create_user(&role)?;
                    let grant = format!(
                        "GRANT CREATE ON SCHEMA public TO \"{}\"",
                        c.user.replace('"', "\"\"")
                    );
                    let owner = test_servers::PostgresConn {
                        dbname: conn.dbname.clone(),
                        ..server.superuser_conn()
                    };
                    test_servers::psql_call(&owner, &grant)?;
                    c
                }
                None => Credentials::new(
                    conn.user.clone(),
                    lock_core::secret::Secret::new(conn.password.clone()),
                ),
            };
            let superuser = server.superuser();
            let admin = server::Admin {
                address: server.addr().to_string(),
                credentials: Credentials::new(
                    superuser.name.clone(),
                    lock_core::secret::Secret::new(superuser.password.clone()),
                ),
            };
            *leave.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(server::SqlSpawned { database: conn.dbname.clone(), login: who, admin });
            let bouncer = match pool {
                Some(mode) => Some(test_servers::PgBouncer::launch(&server, mode, pool_size)?),
                None => None,
            };
            Ok(Spawned { server, bouncer })
        };
        let starts = Starts {
            cluster: test_servers::Postgres::default(),
            cluster_address: |_| String::new(),
            one,
            one_address: Spawned::address,
        };
        let (address, faults) =
            server::locate(&FLAGS, &options.server, &setup.fault_kinds, starts).await?;
        let spawned = found.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (database, credentials, admin) = server::sql_login_and_admin(
            spawned,
            given,
            given_admin,
            options.database.clone(),
            "postgres",
            &address,
        );
        let config = client_config(&setup, options.server.tls(), credentials);
        let login = Login { database, config, admin, locks: setup.lock_ids.clone() };
        if setup.fault_kinds.contains(&FaultKind::Terminate) {
            login.admin_client().await.map_err(|e| format!("--faults terminate: {e}"))?;
        }
        let connector = Dial { address, config: login };
        Opened::probe(connector, setup.settings, faults).await
    }
}

/// Every contender's client settings for a run.
fn client_config(
    setup: &EngineSetup<'_>,
    tls: Option<lock_core::tls::TlsFiles>,
    credentials: Option<Credentials>,
) -> PgConfig {
    PgConfig {
        lease_ttl: lease_ttl(setup.settings.scaled(setup.settings.ttl)),
        connect_timeout: server::CONNECT_TIMEOUT,
        fencing_sequence: server::sql_name(setup.namespace),
        tls,
        credentials,
        ..PgConfig::default()
    }
}

/// `--postgres-standby`: a primary and its standby of the harness's own, the contenders
/// connected to both (the one that takes writes serves them), and the leader faults on them.
async fn open_pair(setup: EngineSetup<'_>) -> OpenResult {
    let launch = || test_servers::PostgresPair::launch(test_servers::Replication::Async);
    let pair = tokio::task::spawn_blocking(launch)
        .await
        .map_err(|e| format!("--postgres-standby: starting the pair panicked: {e}"))?
        .map_err(|e| format!("--postgres-standby: {e}"))?;
    let address = format!("{},{}", pair.primary().addr(), pair.replica().addr());
    let conn = pair.primary().conn();
    let credentials =
        Credentials::new(conn.user.clone(), lock_core::secret::Secret::new(conn.password.clone()));
    let config = client_config(&setup, None, Some(credentials));
    let faults = ServerFaults::on_cluster(Arc::new(Pair::new(pair)));
    let login = Login { database: conn.dbname, config, admin: None, locks: Vec::new() };
    let connector = Dial { address, config: login };
    Opened::probe(connector, setup.settings, faults).await
}

/// A primary and its standby as the leader faults see them: member `i` is the server on the
/// `i`th port it started with, whichever role it has now. A kill of the primary promotes the
/// standby; the restart makes the killed server the new primary's standby.
struct Pair {
    pair: Mutex<test_servers::PostgresPair>,
    ports: [u16; 2],
    /// Why the last promotion failed, reported by the restart that follows.
    failed: Mutex<Option<String>>,
}

impl Pair {
    fn new(pair: test_servers::PostgresPair) -> Pair {
        let ports = [pair.primary().port, pair.replica().port];
        Pair { pair: Mutex::new(pair), ports, failed: Mutex::default() }
    }

    fn pair(&self) -> std::sync::MutexGuard<'_, test_servers::PostgresPair> {
        self.pair.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn not_here(what: &str) -> Result<(), String> {
        Err(format!("{what}: not on a PostgreSQL primary and standby"))
    }
}

/// Only what the leader kill calls does anything: [`Postgres`]'s fault kinds on a pair are
/// the leader kill and clock jumps.
impl server_faults::Members for Pair {
    fn count(&self) -> usize {
        2
    }
    fn wait_for_leader(&self, _timeout: Duration) -> Result<usize, String> {
        let primary = self.pair().primary().port;
        Ok(self.ports.iter().position(|&p| p == primary).unwrap_or(0))
    }
    /// Kills member `i` when it is the primary, and promotes the standby at once.
    fn kill(&self, i: usize) {
        let mut pair = self.pair();
        if pair.primary().port != self.ports[i] {
            return;
        }
        pair.kill_primary();
        if let Err(e) = pair.promote() {
            *self.failed.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(format!("promoting the standby: {e}"));
        }
    }
    /// Makes the killed member the new primary's standby.
    fn restart(&self, _i: usize) -> Result<(), String> {
        if let Some(e) = self.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(e);
        }
        self.pair().rejoin().map_err(|e| format!("the killed primary rejoining: {e}"))
    }
    fn restart_all(&self) -> Result<(), String> {
        Self::not_here("a restart of every member")
    }
    fn restart_without_data(&self, _i: usize) -> Result<(), String> {
        Self::not_here("a restart without data")
    }
    fn hold_link(&self, _from: usize, _to: usize) {}
    fn release_link(&self, _from: usize, _to: usize) {}
    fn pause(&self, _i: usize) -> Result<(), String> {
        Self::not_here("a member's pause")
    }
    fn resume(&self, _i: usize) -> Result<(), String> {
        Self::not_here("a member's pause")
    }
    fn cut_off(&self, _i: usize) {}
    fn heal(&self, _i: usize) {}
}

impl Login {
    /// The driver's settings for the server at `address` (host:port), or for the one of
    /// several (host:port,host:port...) that takes writes.
    fn at(&self, address: &str) -> tokio_postgres::Config {
        let mut pg = tokio_postgres::Config::new();
        for endpoint in address.split(',') {
            if let Some((host, port)) = endpoint.rsplit_once(':') {
                pg.host(host.trim_start_matches('[').trim_end_matches(']'));
                pg.port(port.parse().unwrap_or(5432));
            }
        }
        if address.contains(',') {
            pg.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
        }
        pg.dbname(&self.database).user("postgres");
        pg
    }

    /// A client of the administrator on the run's database, and the task driving its
    /// connection; an error names the server and the role when the login fails.
    async fn admin_client(
        &self,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), String> {
        let Some(admin) = &self.admin else {
            return Err("no administrator: --spawn-postgres, or --postgres-admin-user".into());
        };
        let mut pg = self.at(&admin.address);
        pg.user(&admin.credentials.user).password(admin.credentials.password.expose());
        pg.connect_timeout(ADMIN_TIMEOUT);
        let (client, connection) = pg.connect(tokio_postgres::NoTls).await.map_err(|e| {
            format!(
                "the administrator '{}' cannot log in to PostgreSQL at {}: {e}",
                admin.credentials.user, admin.address
            )
        })?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok((client, driver))
    }

    /// Ends the backend of every holder of one of the run's advisory locks, in the run's
    /// database (a transaction-level lock shows in `pg_locks` as a session-level one does);
    /// how many it ended.
    async fn end_holders(&self) -> Result<usize, String> {
        let (client, driver) = self.admin_client().await?;
        let keys: Vec<i64> = self.locks.iter().map(|l| lock_postgres::advisory_key(l)).collect();
        let ended = tokio::time::timeout(ADMIN_TIMEOUT, client.query_one(END_HOLDERS, &[&keys]))
            .await
            .map_err(|_| format!("no answer within {ADMIN_TIMEOUT:?}"))
            .and_then(|r| r.map_err(|e| e.to_string()));
        driver.abort();
        Ok(ended?.get::<_, i64>(0) as usize)
    }
}

/// How long the administrator waits to log in, and for an answer.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Ends the backends holding the advisory keys `$1` in the current database: a key shows in
/// `pg_locks` as `classid` (its high 32 bits) and `objid` (its low 32 bits), `objsubid = 1`.
const END_HOLDERS: &str = "\
    SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (\
        SELECT DISTINCT pid FROM pg_locks \
        WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
        AND ((classid::bigint << 32) | objid::bigint) = ANY($1)\
    ) AS holders";

impl Connect for Dial<Login> {
    type Engine = Postgres;

    /// A backend on the server, or through `via` (a contender's proxy). The lease is the
    /// server's timer; the client reads no clock for it but the interval of its pings.
    async fn connect(&self, via: Via, requests: RequestHook) -> Connected<Self> {
        let address = self.target(via, |a| a.to_string());
        let config = PgConfig { requests, ..self.config.config.clone() };
        PgBackend::connect_to(self.config.at(&address), config)
            .await
            .map_err(|e| FLAGS.unreachable(&address, "log in and prepare the fencing sequence", e))
    }

    const OPENS_SESSION: Option<&'static str> = Some("connect");

    fn kind(request: &Request<'_>) -> Kind {
        match request.command {
            "lock" | "try_lock" | "transaction" => Kind::Cas,
            "unlock" | "COMMIT" | "ROLLBACK" => Kind::Delete,
            "prepare" => Kind::Read,
            _ => Kind::Write,
        }
    }

    /// The `stranger` fault: a client with no password logs in as the run's role and ends the
    /// backend of every holder of an advisory lock (`pg_terminate_backend`), which frees the
    /// lock. A server that asks for a password refuses it.
    async fn stranger(&self) -> Result<String, String> {
        let mut pg = self.config.at(&self.address);
        if let Some(c) = &self.config.config.credentials {
            pg.user(&c.user);
        }
        pg.connect_timeout(Duration::from_secs(5));
        let (client, connection) = match pg.connect(tokio_postgres::NoTls).await {
            Ok(pair) => pair,
            Err(e) => return Ok(server_faults::stranger_outcome(0, Some(e.to_string()))),
        };
        let driver = tokio::spawn(connection);
        let ended = client
            .query_one(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_locks \
                 WHERE locktype = 'advisory' AND granted",
                &[],
            )
            .await;
        driver.abort();
        Ok(match ended {
            Ok(row) => server_faults::stranger_outcome(row.get::<_, i64>(0) as usize, None),
            Err(e) => server_faults::stranger_outcome(0, Some(e.to_string())),
        })
    }

    /// The `terminate` fault: the administrator ends the backend of every holder of one of the
    /// run's locks (`pg_terminate_backend`), which frees the lock; the holder's client sees
    /// its connection end and tells the holder at once.
    async fn terminate(&self) -> Result<String, String> {
        Ok(server_faults::terminate_outcome(self.config.end_holders().await))
    }
}

/// Session-level advisory locks.
pub static ADVISORY: Algorithm = Algorithm::new(
    "postgres",
    "PostgreSQL session-level advisory locks: a connection per held lock, the wait in the server's queue",
);

/// Transaction-level advisory locks.
pub static XACT: Algorithm = Algorithm::new(
    "postgres-xact",
    "PostgreSQL transaction-level advisory locks: each grant an open transaction, freed by its commit",
);

per_owner_client!(PgBackend);

/// A contender's transaction-level lock, on its backend.
fn transaction_lock(client: PgBackend, ctx: ClientContext, _: &AlgorithmSettings) -> BuildFuture {
    Box::pin(async move {
        let locker = lock_postgres::PgXactLocker::new(client.locker(&ctx.owner)?);
        Ok(Arc::new(locker) as Arc<dyn lock_core::Locker>)
    })
}

/// The server `--spawn-postgres` starts, which `--faults server-restart` kills and starts
/// again (a PgBouncer in front stays, and connects to it again).
impl server_faults::Restartable for Spawned {
    fn stop(&mut self) {
        self.server.stop();
    }
    fn start_again(&mut self) -> Result<(), String> {
        Ok(self.server.try_start_again()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_names_take_only_what_an_identifier_may() {
        assert_eq!(server::sql_name("Run-42.x"), "bench_harness_run_42_x");
        assert!(server::sql_name(&"a".repeat(100)).len() <= "bench_harness_".len() + 40);
    }

    #[test]
    fn leases_are_at_least_200ms() {
        assert_eq!(lease_ttl(Duration::from_millis(50)), Duration::from_millis(200));
        assert_eq!(lease_ttl(Duration::from_secs(3)), Duration::from_secs(3));
    }
}
