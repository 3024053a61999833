//! A real MariaDB server: password logins over TCP, TLS verified against the test CA,
//! `GET_LOCK` locks held by a `mariadb` session and gone after a restart, and a server that
//! dies with its test binary although it runs as another user.

use std::io::BufRead;
use std::time::{Duration, Instant};
use test_servers::{
    mariadb_call, shared_mariadb, Mariadb, MariadbConn, MariadbServer, MariadbSession, MariadbTls,
    MariadbUser, TestPki,
};

/// The uid of process `pid` (its real uid, from `/proc`).
fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The server's pid, from the pid file in its directory.
fn server_pid(server: &MariadbServer) -> u32 {
    let pid = std::fs::read_to_string(server.dir().join("mariadbd.pid")).unwrap();
    pid.trim().parse().unwrap()
}

#[test]
fn the_default_user_runs_queries_and_a_wrong_password_is_refused() {
    let server = shared_mariadb();
    let conn = server.conn();
    assert_eq!(mariadb_call(&conn, "SELECT 1").unwrap(), "1");
    assert_eq!(
        server.url(),
        format!("mysql://lockbench:{}@127.0.0.1:{}/lockbench", server.user().password, server.port)
    );
    let who = "SELECT CURRENT_USER(), DATABASE(), @@max_connections >= 300";
    assert_eq!(mariadb_call(&conn, who).unwrap(), "lockbench@127.0.0.1\tlockbench\t1");
    let plugin = "SELECT plugin FROM mysql.user WHERE user = 'lockbench'";
    assert_eq!(mariadb_call(&server.admin_conn(), plugin).unwrap(), "mysql_native_password");

    let wrong = MariadbConn { password: "not-the-password".into(), ..conn.clone() };
    let refused = mariadb_call(&wrong, "SELECT 1").unwrap_err().to_string();
    assert!(refused.contains("Access denied for user 'lockbench'"), "{refused}");
    let failed = mariadb_call(&conn, "SELECT * FROM no_such_table").unwrap_err().to_string();
    assert!(failed.contains("doesn't exist"), "{failed}");

    // As root, the server runs as the mysql system user.
    if uid_of(std::process::id()) == Some(0) {
        let uid = uid_of(server_pid(server)).unwrap();
        assert_ne!(uid, 0, "mariadbd runs as root");
    }
}

#[test]
fn a_tls_server_takes_verified_tls_connections_and_refuses_others() {
    let pki = TestPki::new("mariadb-tls");
    let bob = MariadbUser::new("bob");
    let engine = Mariadb::default()
        .with_users(std::slice::from_ref(&bob))
        .with_tls(MariadbTls::from_pki(&pki, true));
    let server = MariadbServer::start_with(engine);
    assert!(server.is_tls());
    let conn = server.conn();
    assert_eq!(conn.ca, server.ca_file());
    let cipher = "SHOW STATUS LIKE 'Ssl_version'";
    let version = mariadb_call(&conn, cipher).unwrap();
    assert!(version.starts_with("Ssl_version\tTLSv1."), "{version}");
    assert_eq!(
        mariadb_call(&server.conn_as(&bob), "SELECT CURRENT_USER()").unwrap(),
        "bob@127.0.0.1"
    );
    let by_name = MariadbConn { host: "localhost".into(), ..conn.clone() };
    assert_eq!(mariadb_call(&by_name, "SELECT 1").unwrap(), "1");

    let plain = MariadbConn { ca: None, ..conn.clone() };
    let refused = mariadb_call(&plain, "SELECT 1").unwrap_err().to_string();
    // MariaDB 10.11 answers a plain login to a server that requires TLS as a denied access.
    assert!(
        refused.contains("Access denied") || refused.contains("secure_transport"),
        "a connection without TLS: {refused}"
    );
    let stranger = TestPki::new("mariadb-tls-other");
    let untrusted = MariadbConn { ca: Some(stranger.ca_file().to_path_buf()), ..conn };
    let refused = mariadb_call(&untrusted, "SELECT 1").unwrap_err().to_string();
    assert!(refused.to_lowercase().contains("certificate"), "another CA: {refused}");
}

#[test]
fn a_session_holds_a_get_lock_until_it_releases_is_killed_or_the_server_restarts() {
    let mut server = MariadbServer::start();
    let conn = server.conn();
    let mut holder = MariadbSession::open(&conn).unwrap();
    let mut other = MariadbSession::open(&conn).unwrap();
    assert_ne!(holder.connection_id(), other.connection_id());
    assert_eq!(holder.query("SELECT GET_LOCK('x', 0)").unwrap(), "1");
    assert_eq!(other.query("SELECT GET_LOCK('x', 0)").unwrap(), "0");
    assert_eq!(
        mariadb_call(&conn, "SELECT IS_USED_LOCK('x')").unwrap(),
        holder.connection_id().to_string()
    );

    // A blocking GET_LOCK waits in the server until the holder releases.
    other.send("SELECT GET_LOCK('x', 10)").unwrap();
    assert_eq!(other.wait_output(Duration::from_millis(300)).unwrap(), None, "it waits");
    assert_eq!(holder.query("SELECT RELEASE_LOCK('x')").unwrap(), "1");
    assert_eq!(other.wait_output(Duration::from_secs(5)).unwrap().as_deref(), Some("1"));
    assert_eq!(holder.query("SELECT RELEASE_LOCK('x')").unwrap(), "0", "not the holder");
    assert_eq!(mariadb_call(&conn, "SELECT GET_LOCK('x', 0)").unwrap(), "0");

    // A killed session's locks are released, and the session is over.
    let kill = format!("KILL {}", other.connection_id());
    mariadb_call(&server.admin_conn(), &kill).unwrap();
    assert!(other.query("SELECT 1").is_err(), "the killed session goes on");
    assert_eq!(holder.query("SELECT GET_LOCK('x', 0)").unwrap(), "1");

    // A restart (a crash: SIGKILL) ends every session and every lock; the users stay.
    let port = server.port;
    server.stop();
    assert!(mariadb_call(&conn, "SELECT 1").is_err(), "a stopped server refuses connections");
    server.start_again();
    assert_eq!(server.port, port);
    assert!(holder.query("SELECT 1").is_err(), "the session died with the server");
    assert_eq!(mariadb_call(&conn, "SELECT GET_LOCK('x', 0)").unwrap(), "1");
}

/// The child's role in the next test: start a server, say where it is, wait to be killed.
const CHILD: &str = "TEST_SERVERS_MARIADB_CHILD";

#[test]
fn a_mariadb_server_dies_with_its_test_binary_although_it_runs_as_another_user() {
    if std::env::var_os(CHILD).is_some() {
        let server = MariadbServer::start();
        println!("MARIADBD {} {}", server_pid(&server), server.dir().display());
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let name = format!(
        "{module}::a_mariadb_server_dies_with_its_test_binary_although_it_runs_as_another_user"
    );
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--nocapture"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let line = stdout.lines().map_while(Result::ok).find(|l| l.starts_with("MARIADBD "));
    let line = line.expect("the child started a server");
    let mut words = line.split_whitespace().skip(1);
    let pid: u32 = words.next().unwrap().parse().unwrap();
    let dir = std::path::PathBuf::from(words.next().unwrap());
    assert!(uid_of(pid).is_some(), "mariadbd runs");
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
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
        panic!("mariadbd {pid} outlived its test binary");
    }
    let _ = std::fs::remove_dir_all(dir);
}
