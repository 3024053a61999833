//! A real PostgreSQL server: SCRAM passwords over TCP, TLS verified against the test CA,
//! session-level advisory locks held by a `psql` session and gone after a restart, and a
//! server that dies with its test binary although it runs as another user.

use std::io::BufRead;
use std::time::{Duration, Instant};
use test_servers::{
    psql_call, shared_postgres, Postgres, PostgresConn, PostgresServer, PostgresTls, PostgresUser,
    PsqlSession, TestPki,
};

/// The uid of process `pid` (its real uid, from `/proc`).
fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The postmaster's pid, from its data directory's `postmaster.pid`.
fn postmaster_pid(server: &PostgresServer) -> u32 {
    let pid_file = std::fs::read_to_string(server.dir().join("data/postmaster.pid")).unwrap();
    pid_file.lines().next().unwrap().trim().parse().unwrap()
}

#[test]
fn the_default_user_runs_queries_over_tcp_with_scram_and_a_wrong_password_is_refused() {
    let server = shared_postgres();
    let conn = server.conn();
    assert_eq!(psql_call(&conn, "SELECT 1").unwrap(), "1");
    assert_eq!(
        server.url(),
        format!(
            "postgres://lockbench:{}@127.0.0.1:{}/lockbench",
            server.user().password,
            server.port
        )
    );
    let who = "SELECT current_user, current_database(), inet_server_addr()";
    assert_eq!(psql_call(&conn, who).unwrap(), "lockbench|lockbench|127.0.0.1");
    let settings = "SELECT current_setting('password_encryption'), current_setting('fsync'), \
                    current_setting('max_connections')::int >= 300";
    assert_eq!(psql_call(&conn, settings).unwrap(), "scram-sha-256|on|t");
    let hashed =
        "SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'lockbench'";
    assert_eq!(psql_call(&server.superuser_conn(), hashed).unwrap(), "t");

    let wrong = PostgresConn { password: "not-the-password".into(), ..conn.clone() };
    let refused = psql_call(&wrong, "SELECT 1").unwrap_err().to_string();
    assert!(refused.contains("password authentication failed for user \"lockbench\""), "{refused}");

    // A user created on the running server logs in with its own password.
    let alice = PostgresUser::new("alice");
    server.create_user(&alice).unwrap();
    assert_eq!(psql_call(&server.conn_as(&alice), "SELECT current_user").unwrap(), "alice");
    let failed = psql_call(&conn, "SELECT 1/0").unwrap_err().to_string();
    assert!(failed.contains("division by zero"), "{failed}");

    // As root, the server runs as the postgres system user.
    if uid_of(std::process::id()) == Some(0) {
        let uid = uid_of(postmaster_pid(server)).unwrap();
        assert_ne!(uid, 0, "the postmaster runs as root");
    }
}

#[test]
fn a_tls_server_takes_verified_tls_connections_and_refuses_others() {
    let pki = TestPki::new("postgres-tls");
    let bob = PostgresUser::new("bob");
    let engine = Postgres::default()
        .with_users(std::slice::from_ref(&bob))
        .with_tls(PostgresTls::from_pki(&pki, true));
    let server = PostgresServer::start_with(engine);
    assert!(server.is_tls() && server.url().ends_with("?sslmode=require"));
    let conn = server.conn();
    assert_eq!(conn.ca, server.ca_file());
    assert!(conn.conninfo().contains("sslmode=verify-full"), "{conn:?}");
    let ssl = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    assert_eq!(psql_call(&conn, ssl).unwrap(), "t");
    assert_eq!(psql_call(&server.conn_as(&bob), "SELECT current_user").unwrap(), "bob");
    let by_name = PostgresConn { host: "localhost".into(), ..conn.clone() };
    assert_eq!(psql_call(&by_name, "SELECT 1").unwrap(), "1");

    let plain = PostgresConn { ca: None, ..conn.clone() };
    let refused = psql_call(&plain, "SELECT 1").unwrap_err().to_string();
    assert!(refused.contains("no encryption"), "a connection without TLS: {refused}");
    let stranger = TestPki::new("postgres-tls-other");
    let untrusted = PostgresConn { ca: Some(stranger.ca_file().to_path_buf()), ..conn };
    let refused = psql_call(&untrusted, "SELECT 1").unwrap_err().to_string();
    assert!(refused.contains("certificate verify failed"), "another CA: {refused}");
}

#[test]
fn a_session_holds_an_advisory_lock_until_it_unlocks_is_terminated_or_the_server_restarts() {
    let mut server = PostgresServer::start();
    let conn = server.conn();
    let mut holder = PsqlSession::open(&conn).unwrap();
    let mut other = PsqlSession::open(&conn).unwrap();
    assert_ne!(holder.backend_pid(), other.backend_pid());
    assert_eq!(holder.query("SELECT pg_advisory_lock(7)").unwrap(), "");
    assert_eq!(other.query("SELECT pg_try_advisory_lock(7)").unwrap(), "f");

    // A blocking lock waits in the server until the holder unlocks.
    other.send("SELECT pg_advisory_lock(7)").unwrap();
    assert_eq!(other.wait_output(Duration::from_millis(300)).unwrap(), None, "it waits");
    assert_eq!(other.pending(), 1);
    assert_eq!(holder.query("SELECT pg_advisory_unlock(7)").unwrap(), "t");
    assert_eq!(other.wait_output(Duration::from_secs(5)).unwrap().as_deref(), Some(""));
    assert_eq!(holder.query("SELECT pg_advisory_unlock(7)").unwrap(), "f");
    assert!(holder.messages().contains("you don't own a lock"), "{}", holder.messages());
    assert_eq!(psql_call(&conn, "SELECT pg_try_advisory_lock(7)").unwrap(), "f");

    // A terminated session's locks are released, and the session is over.
    let kill = format!("SELECT pg_terminate_backend({})", other.backend_pid());
    assert_eq!(psql_call(&server.superuser_conn(), &kill).unwrap(), "t");
    let ended = other.query("SELECT 1").unwrap_err().to_string();
    assert!(ended.contains("terminating connection"), "{ended}");
    assert_eq!(holder.query("SELECT pg_try_advisory_lock(7)").unwrap(), "t");

    // A restart (a crash: SIGKILL) ends every session and every lock; the roles stay.
    let port = server.port;
    server.stop();
    assert!(psql_call(&conn, "SELECT 1").is_err(), "a stopped server refuses connections");
    server.start_again();
    assert_eq!(server.port, port);
    assert!(holder.query("SELECT 1").is_err(), "the session died with the server");
    assert_eq!(psql_call(&conn, "SELECT pg_try_advisory_lock(7)").unwrap(), "t");
}

/// The child's role in the next test: start a server, say where it is, wait to be killed.
const CHILD: &str = "TEST_SERVERS_POSTGRES_CHILD";

#[test]
fn a_server_dies_with_its_test_binary_although_it_runs_as_another_user() {
    if std::env::var_os(CHILD).is_some() {
        let server = PostgresServer::start();
        println!("POSTMASTER {} {}", postmaster_pid(&server), server.dir().display());
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    // This test's name as the harness knows it: its module path without the binary's name.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let name =
        format!("{module}::a_server_dies_with_its_test_binary_although_it_runs_as_another_user");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--nocapture"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let line = stdout.lines().map_while(Result::ok).find(|l| l.starts_with("POSTMASTER "));
    let line = line.expect("the child started a server");
    let mut words = line.split_whitespace().skip(1);
    let pid: u32 = words.next().unwrap().parse().unwrap();
    let dir = std::path::PathBuf::from(words.next().unwrap());
    assert!(uid_of(pid).is_some(), "the postmaster runs");
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    // Gone, or a zombie whose parent (an init that does not reap) keeps its entry.
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    };
    while !gone() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if !gone() {
        // SAFETY: kill(2) of the server this test started, which should be gone.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        panic!("the postmaster {pid} outlived its test binary");
    }
    let _ = std::fs::remove_dir_all(dir);
}
