//! PostgreSQL's failover and pooling setups: a standby that streams and is promoted after
//! its primary is killed, and PgBouncer in session and transaction pooling.

use std::time::Duration;
use test_servers::{
    psql_call, PgBouncer, PoolMode, PostgresPair, PostgresServer, PsqlSession, Replication,
};

#[test]
fn a_standby_streams_the_primary_and_takes_writes_once_promoted() {
    let mut pair = PostgresPair::start(Replication::Async);
    let primary = pair.primary().conn();
    let replica = pair.replica().conn();
    psql_call(&primary, "CREATE TABLE t (v int); INSERT INTO t VALUES (1)").unwrap();
    pair.wait_caught_up(Duration::from_secs(10)).unwrap();
    assert_eq!(psql_call(&replica, "SELECT v FROM t").unwrap(), "1");
    assert!(pair.replica_in_recovery().unwrap());
    let refused = psql_call(&replica, "INSERT INTO t VALUES (2)").unwrap_err().to_string();
    assert!(refused.contains("read-only transaction"), "{refused}");

    pair.kill_primary();
    assert!(psql_call(&primary, "SELECT 1").is_err(), "the primary is gone");
    let took = pair.promote().unwrap();
    eprintln!("promotion took {took:?}");
    assert!(!pair.replica_in_recovery().unwrap());
    psql_call(&replica, "INSERT INTO t VALUES (2)").unwrap();
    assert_eq!(psql_call(&replica, "SELECT count(*) FROM t").unwrap(), "2");
}

#[test]
fn a_killed_primary_rejoins_as_the_new_primarys_standby_and_the_pair_fails_over_again() {
    let mut pair = PostgresPair::start(Replication::Async);
    let (first, second) = (pair.primary().port, pair.replica().port);
    psql_call(&pair.primary().conn(), "CREATE TABLE t (v int); INSERT INTO t VALUES (1)").unwrap();
    pair.wait_caught_up(Duration::from_secs(10)).unwrap();
    assert!(pair.rejoin().is_err(), "nothing to rejoin before a promotion");

    pair.kill_primary();
    pair.promote().unwrap();
    pair.rejoin().unwrap();
    assert_eq!((pair.primary().port, pair.replica().port), (second, first), "roles swapped");
    assert!(pair.replica_in_recovery().unwrap(), "the old primary is a standby now");
    psql_call(&pair.primary().conn(), "INSERT INTO t VALUES (2)").unwrap();
    pair.wait_caught_up(Duration::from_secs(10)).unwrap();
    assert_eq!(psql_call(&pair.replica().conn(), "SELECT count(*) FROM t").unwrap(), "2");

    // Again, the other way: the first server leads once more, with every row.
    pair.kill_primary();
    pair.promote().unwrap();
    pair.rejoin().unwrap();
    assert_eq!(pair.primary().port, first);
    psql_call(&pair.primary().conn(), "INSERT INTO t VALUES (3)").unwrap();
    assert_eq!(psql_call(&pair.primary().conn(), "SELECT count(*) FROM t").unwrap(), "3");
}

#[test]
fn a_held_back_async_standby_misses_commits_until_it_streams_again() {
    let pair = PostgresPair::start(Replication::Async);
    let primary = pair.primary().conn();
    psql_call(&primary, "CREATE TABLE t (v int)").unwrap();
    pair.wait_caught_up(Duration::from_secs(10)).unwrap();
    pair.hold_replication().unwrap();
    psql_call(&primary, "INSERT INTO t VALUES (1)").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(psql_call(&pair.replica().conn(), "SELECT count(*) FROM t").unwrap(), "0");
    pair.release_replication().unwrap();
    pair.wait_caught_up(Duration::from_secs(10)).unwrap();
    assert_eq!(psql_call(&pair.replica().conn(), "SELECT count(*) FROM t").unwrap(), "1");
}

#[test]
fn a_sync_standby_is_reported_sync_and_a_commit_waits_for_it() {
    let sync = PostgresPair::start(Replication::Sync);
    let primary = sync.primary().conn();
    psql_call(&primary, "CREATE TABLE t (v int)").unwrap();
    // Held back, the standby does not confirm: the commit waits (until the statement
    // timeout cancels the wait; the row is committed locally all the same).
    sync.hold_replication().unwrap();
    let mut session = PsqlSession::open(&primary).unwrap();
    session.send("INSERT INTO t VALUES (1)").unwrap();
    assert_eq!(session.wait_output(Duration::from_millis(500)).unwrap(), None, "waits");
    sync.release_replication().unwrap();
    assert!(session.wait_output(Duration::from_secs(10)).unwrap().is_some(), "confirmed");
    let su = sync.primary().superuser_conn();
    let state = psql_call(&su, "SELECT sync_state FROM pg_stat_replication").unwrap();
    assert_eq!(state, "sync");
}

#[test]
fn pgbouncer_pools_sessions_or_transactions_and_takes_the_lock_clients_session_sets() {
    let server = PostgresServer::start();
    for mode in [PoolMode::Session, PoolMode::Transaction] {
        let bouncer = PgBouncer::start(&server, mode);
        let conn = bouncer.conn();
        assert!(bouncer.url().contains(&format!(":{}/", bouncer.port())));
        assert_eq!(psql_call(&conn, "SELECT current_user").unwrap(), "lockbench");
        let wrong = test_servers::PostgresConn { password: "wrong".into(), ..conn.clone() };
        assert!(psql_call(&wrong, "SELECT 1").is_err());
        // The session settings a lock client sends after connecting.
        let mut session = PsqlSession::open(&conn).unwrap();
        session.query("SET idle_session_timeout = 2000").unwrap();
        let shown = session.query("SHOW idle_session_timeout").unwrap();
        eprintln!("{mode:?}: idle_session_timeout after SET through pgbouncer: {shown}");
        // Another client, while the first is still connected.
        let other = psql_call(&conn, "SHOW idle_session_timeout").unwrap();
        eprintln!("{mode:?}: another client's idle_session_timeout meanwhile: {other}");
        if mode == PoolMode::Session {
            assert_eq!(shown, "2s");
            assert_eq!(other, "0", "the first client's session is its own");
        }
        // As root, PgBouncer (which refuses root) runs as the postgres system user.
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", bouncer.pid().unwrap())).unwrap();
        let uid = |key: &str| {
            let line = status.lines().find(|l| l.starts_with(key)).unwrap().to_string();
            line.split_whitespace().nth(1).unwrap().to_string()
        };
        let me = std::fs::read_to_string("/proc/self/status").unwrap();
        if me.lines().any(|l| l.starts_with("Uid:\t0\t")) {
            assert_ne!(uid("Uid:"), "0", "pgbouncer runs as root");
        }
    }
}
