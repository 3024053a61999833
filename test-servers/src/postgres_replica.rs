//! PostgreSQL with a streaming replica that can be promoted: [`PostgresPair`].

use crate::postgres::{
    as_user, conninfo_value, program, psql_call, quote_literal, run, succeeded, Postgres,
    PostgresServer, PostgresUser, RunAs,
};
use crate::ServerError;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The replication role's name.
const REPLICATION_USER: &str = "replicator";
/// The standby's name, as the primary sees it (`application_name`, `synchronous_standby_names`).
const STANDBY_NAME: &str = "replica";

/// How the primary waits for its standby when a transaction commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// PostgreSQL's default: a commit returns once its WAL is on the primary's disk; the
    /// standby receives it a moment later, and what it had not received when the primary died
    /// is lost to a promotion.
    Async,
    /// `synchronous_standby_names` names the standby (with `synchronous_commit = on`): a
    /// commit that wrote WAL returns only once the standby has it on disk, so a promoted
    /// standby has every commit a client saw. While the standby is held back
    /// ([`PostgresPair::hold_replication`]) such commits wait.
    Sync,
}

/// A primary PostgreSQL server and a hot standby that streams its WAL, each a
/// [`PostgresServer`] on a port of its own, with the same roles and passwords (the standby is
/// a copy of the primary's data directory).
///
/// It is two servers, not a [`Cluster`](crate::Cluster): a standby is made by
/// `pg_basebackup` from a primary that already runs, and a promotion is an explicit act
/// ([`PostgresPair::promote`]), not an election the members hold among themselves, so the
/// members are not alike as a cluster's are; clients are pointed at the one they want.
///
/// ## How it is made
/// The primary is a [`PostgresServer`] whose `pg_hba.conf` also lets the role `replicator`
/// (made with the other roles, `REPLICATION`, a random password) stream WAL over TCP with
/// SCRAM (`host replication replicator 127.0.0.1/32 scram-sha-256`); `wal_level = replica`
/// and the WAL senders are PostgreSQL's defaults. The standby's data directory is
/// `pg_basebackup -R -X stream` from it (run as the `postgres` system user when root, as the
/// server is), which writes `standby.signal` and a `primary_conninfo` with the standby's name
/// `replica`; it starts as a read-only hot standby. With [`Replication::Sync`],
/// `synchronous_standby_names` is set on the primary (`ALTER SYSTEM`, after the copy, so the
/// standby does not inherit it) once the standby streams, and the pair is ready when the
/// primary reports the standby `sync`.
///
/// ## Faults
/// [`PostgresPair::kill_primary`] kills the primary as a crash would ([`PostgresServer`]'s
/// `stop`); [`PostgresPair::promote`] makes the standby a primary (`pg_promote()`), after
/// which it accepts writes. Session state (advisory locks) is not replicated: a promoted
/// standby has none of the old primary's. [`PostgresPair::hold_replication`] stops the stream
/// (the standby's `primary_conninfo` emptied) so that the primary runs ahead of its standby.
pub struct PostgresPair {
    primary: PostgresServer,
    replica: PostgresServer,
    replication: Replication,
    /// The standby's `primary_conninfo` as `pg_basebackup` wrote it.
    conninfo: String,
}

impl PostgresPair {
    /// Start a primary and its standby, streaming as `replication` says, and wait until the
    /// standby streams (and, with [`Replication::Sync`], is the synchronous one); or say why
    /// not.
    pub fn launch(replication: Replication) -> Result<PostgresPair, ServerError> {
        let mut engine = Postgres::default();
        let user = PostgresUser::new(REPLICATION_USER);
        engine.replication = Some(user.clone());
        let primary = PostgresServer::launch_with(engine.clone())?;
        engine.replication = None;
        engine.standby_of =
            Some(StandbyOf { port: primary.port, user, name: STANDBY_NAME.to_string() });
        let replica = PostgresServer::launch_with(engine)?;
        let conninfo = psql_call(&replica.superuser_conn(), "SHOW primary_conninfo")?;
        let pair = PostgresPair { primary, replica, replication, conninfo };
        pair.wait_ready()?;
        Ok(pair)
    }

    /// Wait until the standby streams and, with [`Replication::Sync`], until the primary
    /// waits for it (`synchronous_standby_names` set there first).
    fn wait_ready(&self) -> Result<(), ServerError> {
        self.wait_streaming(Duration::from_secs(20))?;
        if self.replication == Replication::Sync {
            let name = quote_literal(&format!("\"{STANDBY_NAME}\""));
            let su = self.primary.superuser_conn();
            psql_call(&su, &format!("ALTER SYSTEM SET synchronous_standby_names = {name}"))?;
            psql_call(&su, "SELECT pg_reload_conf()")?;
            self.wait_until(Duration::from_secs(20), "the standby to be synchronous", || {
                Ok(self.standby_state()? == "sync")
            })?;
        }
        Ok(())
    }

    /// After [`PostgresPair::kill_primary`] and [`PostgresPair::promote`], what an operator
    /// does next: the old primary's data removed (it may hold commits the new one never
    /// received), a standby of the new primary made in its place by `pg_basebackup` on its old
    /// port, and the two swap roles, so that [`PostgresPair::primary`] is the promoted server
    /// and the pair can fail over again. Waits as [`PostgresPair::launch`] does.
    pub fn rejoin(&mut self) -> Result<(), ServerError> {
        if self.replica_in_recovery()? {
            return Err(ServerError::Invalid(
                "rejoin: the standby was not promoted; promote it first".into(),
            ));
        }
        let mut engine = self.primary.engine().clone();
        // The role was made on the first primary; its engine remembers it, wherever it is now.
        let user = (engine.replication.clone())
            .or_else(|| self.replica.engine().replication.clone())
            .ok_or_else(|| ServerError::Invalid("rejoin: no replication role".into()))?;
        engine.standby_of =
            Some(StandbyOf { port: self.replica.port, user, name: STANDBY_NAME.to_string() });
        self.primary.rebuild_as(engine)?;
        std::mem::swap(&mut self.primary, &mut self.replica);
        self.conninfo = psql_call(&self.replica.superuser_conn(), "SHOW primary_conninfo")?;
        self.wait_ready()
    }

    /// [`PostgresPair::launch`], panicking with why it could not start.
    pub fn start(replication: Replication) -> PostgresPair {
        Self::launch(replication).unwrap_or_else(|e| panic!("{e}"))
    }

    /// How the primary waits for the standby.
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// The primary (its `url()`, `conn()`, `addr()`...).
    pub fn primary(&self) -> &PostgresServer {
        &self.primary
    }

    /// The standby, or after [`PostgresPair::promote`] the new primary.
    pub fn replica(&self) -> &PostgresServer {
        &self.replica
    }

    /// The primary's URL for the default user ([`PostgresServer`]'s `url()`).
    pub fn primary_url(&self) -> String {
        self.primary.url()
    }

    /// The standby's URL for the default user: read-only until promoted.
    pub fn replica_url(&self) -> String {
        self.replica.url()
    }

    /// Kill the primary (`SIGKILL`, a crash; its data directory stays) and wait until it is
    /// gone.
    pub fn kill_primary(&mut self) {
        self.primary.stop();
    }

    /// Make the standby a primary (`SELECT pg_promote()`, which returns once it accepts
    /// writes); how long that took.
    pub fn promote(&self) -> Result<Duration, ServerError> {
        let started = Instant::now();
        let su = self.replica.superuser_conn();
        let done = psql_call(&su, "SELECT pg_promote(true, 30)")?;
        if done != "t" {
            return Err(ServerError::command("pg_promote() on the standby", done));
        }
        self.wait_until(Duration::from_secs(10), "the promoted standby to leave recovery", || {
            Ok(psql_call(&su, "SELECT pg_is_in_recovery()")? == "f")
        })?;
        Ok(started.elapsed())
    }

    /// Whether the standby is still in recovery (not promoted).
    pub fn replica_in_recovery(&self) -> Result<bool, ServerError> {
        Ok(psql_call(&self.replica.superuser_conn(), "SELECT pg_is_in_recovery()")? == "t")
    }

    /// Wait until the standby has replayed all the WAL the primary has written so far.
    pub fn wait_caught_up(&self, timeout: Duration) -> Result<(), ServerError> {
        let target = psql_call(&self.primary.superuser_conn(), "SELECT pg_current_wal_lsn()")?;
        let sql = format!("SELECT pg_last_wal_replay_lsn() >= {}::pg_lsn", quote_literal(&target));
        let su = self.replica.superuser_conn();
        self.wait_until(timeout, "the standby to catch up", || Ok(psql_call(&su, &sql)? == "t"))
    }

    /// Stop the stream to the standby (its `primary_conninfo` set empty and reloaded) and
    /// wait until the primary has no WAL sender for it: what the primary writes from now on
    /// does not reach the standby until [`PostgresPair::release_replication`]. With
    /// [`Replication::Sync`], commits that write WAL wait meanwhile.
    pub fn hold_replication(&self) -> Result<(), ServerError> {
        self.set_conninfo("")?;
        self.wait_until(Duration::from_secs(10), "the WAL sender to go", || {
            Ok(self.standby_state()?.is_empty())
        })
    }

    /// Let the standby stream again, and wait until it does.
    pub fn release_replication(&self) -> Result<(), ServerError> {
        self.set_conninfo(&self.conninfo.clone())?;
        self.wait_streaming(Duration::from_secs(20))
    }

    /// The standby's `sync_state` in the primary's `pg_stat_replication` (`async`, `sync`),
    /// empty when it is not connected.
    fn standby_state(&self) -> Result<String, ServerError> {
        let sql = format!(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = {} \
             AND state = 'streaming'",
            quote_literal(STANDBY_NAME)
        );
        psql_call(&self.primary.superuser_conn(), &sql)
    }

    fn wait_streaming(&self, timeout: Duration) -> Result<(), ServerError> {
        self.wait_until(timeout, "the standby to stream", || Ok(!self.standby_state()?.is_empty()))
    }

    fn set_conninfo(&self, conninfo: &str) -> Result<(), ServerError> {
        let su = self.replica.superuser_conn();
        let set = format!("ALTER SYSTEM SET primary_conninfo = {}", quote_literal(conninfo));
        psql_call(&su, &set)?;
        psql_call(&su, "SELECT pg_reload_conf()").map(drop)
    }

    /// Ask `done` every 50 ms until it says yes, `timeout` at most.
    fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut() -> Result<bool, ServerError>,
    ) -> Result<(), ServerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = done();
            if let Ok(true) = last {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let why = match last {
                    Err(e) => e.to_string(),
                    Ok(_) => "not yet".into(),
                };
                let what = format!("waited {timeout:?} for {what}");
                return Err(ServerError::command(what, why));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Where a standby's first start copies its data directory from, and as whom.
#[derive(Clone, Debug)]
pub(crate) struct StandbyOf {
    /// The primary's port on 127.0.0.1.
    pub(crate) port: u16,
    /// Its replication role.
    pub(crate) user: PostgresUser,
    /// The standby's name, as the primary sees it (`application_name`).
    pub(crate) name: String,
}

/// A standby's data directory: `pg_basebackup -R` (WAL streamed along, checkpoint at
/// once, no sync) from the primary `from` into `data` (empty), as `who` when given; `-R`
/// writes `standby.signal` and a `primary_conninfo` naming the standby `from.name`.
pub(crate) fn base_backup(
    data: &Path,
    who: Option<RunAs>,
    from: &StandbyOf,
) -> Result<(), ServerError> {
    std::os::unix::fs::chown(data, who.map(|w| w.uid), who.map(|w| w.gid))
        .and_then(|()| std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| ServerError::io(format!("prepare {}", data.display()), e))?;
    let conninfo = format!(
        "host=127.0.0.1 port={} user={} application_name={} sslmode=disable",
        from.port,
        conninfo_value(&from.user.name),
        conninfo_value(&from.name)
    );
    let mut backup = as_user(Command::new(program("pg_basebackup")?), who);
    backup
        .arg("-D")
        .arg(data)
        .args(["-R", "-X", "stream", "-c", "fast", "--no-sync", "-w", "-d", &conninfo])
        .env("PGPASSWORD", &from.user.password)
        .current_dir(data);
    succeeded("pg_basebackup", run(&mut backup, ""))
}
