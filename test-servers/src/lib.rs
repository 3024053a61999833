//! # test-servers
//!
//! Test support for the workspace's crates that talk to real servers (a dev-dependency only,
//! never published): it starts real servers from Debian's packages on free loopback ports,
//! each with a data directory of its own, and waits until they answer (`PING` / `ruok` /
//! `GET /health` / `pg_isready`):
//!
//! - one server: a `redis-server` ([`RedisServer`]), a standalone ZooKeeper ([`ZkServer`],
//!   the package's jars on `java`), a one-member `etcd` ([`EtcdServer`]) or a PostgreSQL
//!   server ([`PostgresServer`]: `initdb`'d on first start, users with SCRAM passwords, TLS
//!   when asked; run as the `postgres` system user when the tests run as root, which
//!   Postgres refuses) or a MariaDB server ([`MariadbServer`]: `mariadb-install-db`'d on
//!   first start, users with passwords, TLS when asked; run as the `mysql` system user when
//!   root);
//! - a **cluster** ([`Cluster`]), because the fault that breaks users' locks in production is
//!   a failover, which one server cannot have: a 3-member etcd ([`EtcdCluster`]), a 3-server
//!   ZooKeeper ensemble ([`ZkCluster`]), a Redis master with replicas and Sentinels, or
//!   independent Redis masters for Redlock ([`RedisCluster`]). Every member sits behind
//!   proxies that all traffic goes through, its peers' included, so that one member can be
//!   killed, paused, cut off from its peers and clients, have one replication link held
//!   back, or be restarted with or without its data, and the cluster says who leads. It is
//!   one shape for every engine: an engine only says how a member is configured and who
//!   leads ([`ClusterEngine`]); a single server is the same engine code without proxies
//!   ([`Server`]).
//!
//! - PostgreSQL's own failover and pooling, which are not a [`Cluster`]: a primary with a
//!   streaming hot standby that a test promotes after killing the primary ([`PostgresPair`],
//!   asynchronous or synchronous [`Replication`]), and PgBouncer in front of a server
//!   ([`PgBouncer`], session or transaction [`PoolMode`]).
//!
//! A missing binary or jar **fails** the test with a message naming the packages to install
//! ([`INSTALL_HINT`]); nothing is ever skipped.
//!
//! Every function that can fail returns a [`ServerError`], which tells a program that is not
//! installed from a server that did not start in time, one that lost its port to another
//! process, and a command the server refused; its text names the server, its port and the tail
//! of its log.
//!
//! - [`shared_redis`], [`shared_zookeeper`], [`shared_etcd`], [`shared_postgres`],
//!   [`shared_mariadb`]: one server
//!   per test binary, started on first use and kept for the life of the process.
//! - Cleanup: a server or a cluster is killed and its directory removed on drop; every
//!   process also gets `SIGKILL` when its test binary exits or is killed
//!   (`PR_SET_PDEATHSIG`, armed from a thread that lives as long as the server, whichever
//!   thread started it), and the directories left by test binaries that have exited are
//!   swept when the next one makes its first.
//! - Restarts: [`Server::stop`] kills a server as a crash would and keeps its port and data
//!   directory; [`Server::start_again`] starts it on the same port with the same directory,
//!   so that clients can reconnect to the address they know ([`Server::restart_after`] does
//!   both around a downtime). A Redis started with [`RedisServer::start_persistent`] keeps
//!   its keys across a restart, one started with [`RedisServer::start`] comes back empty;
//!   ZooKeeper always keeps its znodes and sessions, etcd its keys, revisions and leases,
//!   Postgres its roles and tables (not its sessions, nor their advisory locks).
//!   These are plain public functions that block the calling thread, usable from a benchmark
//!   binary as well as from tests (from async code, call them in `spawn_blocking`); so are
//!   the clusters'.
//! - [`Proxy`]: a TCP forwarder in front of a server for one client, which a test can cut (as a
//!   crash or a partition would) or pause (as a stalled process or network would).
//! - [`TestPki`]: a CA and certificates made at test time for TLS servers and clients (no key
//!   material is committed).
//! - Probes without client libraries: [`redis_call`] (and [`redis_call_as`] an ACL user of a
//!   secured Redis), [`four_letter`], [`etcd_post`], and for Postgres the `psql` binary:
//!   [`psql_call`] (one statement on a connection of its own) and [`PsqlSession`] (a session
//!   kept open, holding what it locked, whose statements may block); for MariaDB the
//!   `mariadb` binary: [`mariadb_call`] and [`MariadbSession`].
#![deny(missing_docs)]

mod cluster;
mod contenders;
mod error;
mod etcd;
mod lines;
mod mariadb;
mod origin;
mod pgbouncer;
mod postgres;
mod postgres_replica;
mod process;
mod proxy;
mod redis;
mod run_as;
mod service;
mod silent;
mod tls;
mod zookeeper;

pub use cluster::{Cluster, ClusterEngine, ClusterOptions, Companion, Layout, Server, Start};
pub use contenders::ContenderProxies;
pub use error::ServerError;
pub use etcd::{
    etcd_post, etcd_post_as, etcd_secure, etcd_token, shared_etcd, shared_etcd_with, Etcd,
    EtcdCluster, EtcdServer, EtcdTls, EtcdUser, ETCD_ELECTION_MS, ETCD_HEARTBEAT_MS,
};
pub use mariadb::{
    mariadb_call, shared_mariadb, Mariadb, MariadbConn, MariadbServer, MariadbSession, MariadbTls,
    MariadbUser, MARIADB_CALL_TIMEOUT, MARIADB_MAX_CONNECTIONS,
};
pub use pgbouncer::{PgBouncer, PoolMode};
pub use postgres::{
    psql_call, shared_postgres, Postgres, PostgresConn, PostgresServer, PostgresTls, PostgresUser,
    PsqlSession, POSTGRES_MAX_CONNECTIONS, PSQL_TIMEOUT,
};
pub use postgres_replica::{PostgresPair, Replication};
pub use process::Launch;
pub use process::{free_port, ClosedPort};
pub use proxy::{Proxy, Rewrite};
pub use redis::{
    random_password, redis_call, redis_call_as, shared_redis, AclUser, Redis, RedisCluster,
    RedisServer, Reply, REDIS_MASTER_NAME, SENTINEL_DOWN_AFTER_MS, SENTINEL_FAILOVER_TIMEOUT_MS,
};
pub use service::{service_status, LockService, ServiceCluster, ServiceServer};
pub use silent::SilentServer;
pub use tls::{CertFiles, TestPki, LOOPBACK_NAMES};
pub use zookeeper::{
    four_letter, shared_zookeeper, shared_zookeeper_with, Zk, ZkClientAuth, ZkCluster, ZkServer,
    ZkTls, ZK_DEFAULT_CLASSPATH, ZK_TICK_MS, ZK_TLS_JARS,
};

/// What a test that cannot start a server tells its reader to do.
pub const INSTALL_HINT: &str =
    "install it with `apt-get install -y redis-server redis-sentinel zookeeper etcd-server postgresql mariadb-server` (`scripts/test.sh` installs them before it runs the tests)";
