//! Faults on real servers, in wall time, the way a user runs them: the binary with a server it
//! starts itself (`--spawn-redis`, `--spawn-zookeeper`, `--spawn-etcd`) or one the test
//! started, the checker's exit status, and the CSV files. Needs `redis-server`, ZooKeeper and
//! etcd (`scripts/test.sh` installs them; the etcd tests are in the build with the `etcd`
//! feature, which `scripts/test.sh` turns on); a missing one fails the test, naming the
//! package.

use bench_harness::check;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support;
use support::{run_checked, windows, BIN};

fn scratch(name: &str) -> PathBuf {
    support::scratch("bench-harness-server-faults", name)
}

/// A server restarted mid-run: nothing is granted while it is down, grants resume after
/// it answers again, nothing overlaps.
fn restart_is_survived(dir: &Path, args: &[&str], resume_within: Duration) {
    let (code, text) = run_checked(dir, args);
    assert_eq!(code, Some(0), "{text}");
    let restarts = windows(dir, "server-restart");
    assert!(!restarts.is_empty(), "no restart happened: {text}");
    // Each lasts its 2 s, but one still open when the run ends is healed then.
    assert!(restarts.iter().all(|(t, a, b)| t == "server" && b - a < 2_500_000), "{restarts:?}");
    assert!(restarts.iter().any(|(_, a, b)| b - a >= 1_900_000), "{restarts:?}");
    let verdicts = check::check_dir(dir, Duration::from_secs(2)).unwrap();
    for v in &verdicts {
        let resumed = v.figures.resumed_after_us_by_fault.get("server-restart").copied();
        assert!(
            resumed.is_some_and(|us| us < resume_within.as_micros() as u64),
            "{}: grants must resume within {resume_within:?} of the restart, got {resumed:?}",
            v.algorithm
        );
    }
    // Locks retry a lost connection within their deadline, so the outage need not show as
    // errors (only a call whose deadline passed, or a release in flight, counts one); it shows
    // as no grant at all while the server was down (a reply already on its way when the
    // server was killed may land just after).
    let csv = |file: &str| -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        text.lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect()
    };
    let (grants, faults) = (csv("grants.csv"), csv("faults.csv"));
    assert!(!grants.is_empty(), "{text}");
    for f in faults.iter().filter(|f| f[1] == "server-restart") {
        let (a, b): (u64, u64) = (f[3].parse().unwrap(), f[4].parse().unwrap());
        let during: Vec<&Vec<String>> = grants
            .iter()
            .filter(|g| g[0] == f[0])
            .filter(|g| g[4].parse::<u64>().is_ok_and(|t| t > a + 50_000 && t < b))
            .collect();
        assert!(during.is_empty(), "granted while the server was down ({f:?}): {during:?}");
    }
    assert!(
        text.contains("grants resumed at most this long after a fault ended: server-restart"),
        "{text}"
    );
}

#[test]
fn a_redis_restart_mid_run_grants_nothing_while_down_and_resumes() {
    let dir = scratch("redis-restart");
    restart_is_survived(
        &dir,
        &[
            "--backend",
            "redis",
            "--spawn-redis",
            "--threads",
            "4",
            "--duration",
            "8s",
            "--ttl",
            "2s",
            "--faults",
            "server-restart:2s@4s",
        ],
        // Keys outlive the restart (append-only file): the holder renews or its key expires
        // within the TTL, and clients reconnect within their 1 s backoff.
        Duration::from_secs(5),
    );
}

#[test]
fn a_zookeeper_restart_mid_run_grants_nothing_while_down_and_resumes() {
    let dir = scratch("zk-restart");
    restart_is_survived(
        &dir,
        &[
            "--backend",
            "zookeeper",
            "--spawn-zookeeper",
            "--threads",
            "4",
            "--duration",
            "20s",
            "--ttl",
            "4s",
            // One restart: seed 6 starts it 5.3 s in (a quarter of its period). A restart every
            // few seconds can keep a loaded ZooKeeper from ever serving long enough to expire
            // an abandoned session, and then nothing is granted until the run ends.
            "--seed",
            "6",
            "--faults",
            "server-restart:2s@20s",
        ],
        // A restarted ZooKeeper gives every session it knew a whole timeout (the TTL, 4 s) to
        // come back: a holder whose client reconnected too late, or got a new session, keeps
        // its znode, and the lock, until then. On a loaded machine the server also takes
        // seconds to serve after its port opens, and that time counts too (8.9 s seen beside
        // `stress-ng --cpu 2`); the run lasts long enough for grants to resume inside it.
        Duration::from_secs(12),
    );
}

/// A holder paused past its lease overlaps its successor (the run exits 3), is told its lease
/// was lost, and the fenced resource rejects every write it makes after the successor's grant.
fn a_pause_past_the_lease_is_caught_by_fencing(dir: &Path, args: &[&str]) {
    let (code, text) = run_checked(dir, args);
    assert_eq!(code, Some(3), "a pause past the TTL must break mutual exclusion: {text}");
    let v = &check::check_dir(dir, Duration::from_secs(1)).unwrap()[0];
    let f = &v.figures;
    assert!(f.overlapping_holds > 0 && f.stale_writes > 0, "{f:?}");
    assert_eq!(f.stale_accepted, 0, "the fenced resource must reject every stale write: {f:?}");
    assert_eq!(
        f.stale_holders_told, f.stale_holders,
        "stale holders are told their lease was lost: {f:?}"
    );
}

#[test]
fn a_redis_holder_paused_past_its_ttl_overlaps_and_the_fenced_resource_rejects_it() {
    a_pause_past_the_lease_is_caught_by_fencing(
        &scratch("redis-pause"),
        &[
            "--backend",
            "redis",
            "--spawn-redis",
            "-a",
            "redis-token",
            "--threads",
            "4",
            "--duration",
            "8s",
            "--ttl",
            "1s",
            "--faults",
            "pause:3s@5s",
        ],
    );
}

/// Jepsen's finding on etcd 3.4.3's locks, reproduced: a holder paused for longer than its
/// lease overlaps the next holder; the key's create revision as a fencing token makes the
/// resource safe.
#[cfg(feature = "etcd")]
#[test]
fn an_etcd_holder_paused_past_its_lease_overlaps_and_the_revision_fenced_resource_rejects_it() {
    a_pause_past_the_lease_is_caught_by_fencing(
        &scratch("etcd-pause"),
        &[
            "--backend",
            "etcd",
            "--spawn-etcd",
            "--threads",
            "4",
            "--duration",
            "8s",
            "--ttl",
            "1s",
            "--faults",
            "pause:3s@5s",
        ],
    );
}

#[cfg(feature = "etcd")]
#[test]
fn an_etcd_restart_mid_run_grants_nothing_while_down_and_resumes() {
    let dir = scratch("etcd-restart");
    restart_is_survived(
        &dir,
        &[
            "--backend",
            "etcd",
            "--spawn-etcd",
            "--threads",
            "4",
            "--duration",
            "20s",
            "--ttl",
            "4s",
            "--faults",
            "server-restart:2s@5s",
        ],
        // A restarted etcd extends every lease it knew by its whole TTL (4 s): a holder whose
        // keep-alive stream came back too late holds its key, and the lock, until then, after
        // the time the server takes to serve again; as for ZooKeeper, seconds on a loaded
        // machine.
        Duration::from_secs(12),
    );
}

#[test]
fn a_postgres_restart_mid_run_grants_nothing_while_down_and_resumes() {
    let dir = scratch("postgres-restart");
    restart_is_survived(
        &dir,
        &[
            "--backend",
            "postgres",
            "--spawn-postgres",
            "--threads",
            "4",
            "--duration",
            "12s",
            "--ttl",
            "4s",
            "--seed",
            "6",
            "--faults",
            "server-restart:2s@12s",
        ],
        // A restart ends every session and every advisory lock with it: the next ask after
        // the server answers is granted at once; the rest is the server's start (seconds on a
        // loaded machine) and the lock calls' backoff.
        Duration::from_secs(8),
    );
}

/// PostgreSQL has no open mode here: the server the harness starts asks every client for a
/// password, so a stranger (none) is refused whether or not the run names a user.
#[test]
fn a_postgres_stranger_without_a_password_is_refused() {
    let dir = scratch("postgres-stranger");
    let args = [
        "--backend",
        "postgres",
        "--spawn-postgres",
        "--threads",
        "4",
        "--duration",
        "4s",
        "--hold",
        "uniform:200ms..300ms",
        "--faults",
        "stranger:1s@2s",
    ];
    let (exit, text) = run_checked(&dir, &args);
    assert_eq!(exit, Some(0), "{text}");
    let strikes = windows(&dir, "stranger");
    assert!(!strikes.is_empty(), "no stranger struck: {text}");
    assert!(strikes.iter().all(|(t, ..)| t.starts_with("holder (refused")), "{strikes:?}");
    let f = check::check_dir(&dir, Duration::from_secs(10)).unwrap().remove(0).figures;
    assert_eq!(f.overlapping_holds, 0, "{f:?}");
}

/// The arguments of a run of PostgreSQL's session lock on a server the harness starts, 3
/// contenders, seed 6, then `more`.
fn session_lock_run<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let base = ["--backend", "postgres", "--spawn-postgres", "--algorithms", "postgres"];
    [&base[..], &["--threads", "3", "--seed", "6"], more].concat()
}

/// A holder cut off silently (its connection open, nothing crossing it) with holds of three
/// leases and more: the server ends its session when the lease (`idle_session_timeout`) runs
/// out without a ping, the lock goes to the next waiter while the cut-off holder still works,
/// and its client tells it the lease is lost. Without the lease the server would wait for TCP
/// to give up on the connection.
#[test]
fn a_silently_partitioned_postgres_holder_loses_its_lock_after_one_lease_and_is_told() {
    let dir = scratch("postgres-silent-partition");
    let args = session_lock_run(&[
        "--duration",
        "14s",
        "--ttl",
        "2s",
        "--hold",
        "uniform:6s..8s",
        "--faults",
        "silent-partition:5s@12s",
    ]);
    let (_, text) = run_checked(&dir, &args);
    let cuts = windows(&dir, "silent-partition");
    assert_eq!(cuts.len(), 1, "{text}");
    let f = check::check_dir(&dir, Duration::from_secs(10)).unwrap().remove(0).figures;
    assert!(f.leases_lost_signalled > 0, "the cut-off holder was not told: {f:?}\n{text}");
    assert_eq!(f.stale_holders_told, f.stale_holders, "{f:?}");
    assert_eq!(f.stale_accepted, 0, "{f:?}");
    let resumed = f.resumed_after_us_by_fault.get("silent-partition").copied();
    assert!(resumed.is_some(), "nothing granted after the cut: {f:?}\n{text}");
}

/// The primary killed and its standby promoted mid-run (`--postgres-standby`): the promoted
/// server knows none of the old primary's advisory locks, so the next waiter is granted while
/// the old holder still works; that holder is told at once (its connection ended), and the
/// killed server comes back as the new primary's standby.
#[test]
fn a_promoted_postgres_standby_grants_again_and_the_old_holder_is_told() {
    let dir = scratch("postgres-promotion");
    let args = session_lock_run(&[
        "--postgres-standby",
        "--duration",
        "16s",
        "--ttl",
        "10s",
        "--hold",
        "uniform:2s..3s",
        "--faults",
        "leader-kill:3s@14s",
    ]);
    let (_, text) = run_checked(&dir, &args);
    let kills = windows(&dir, "leader-kill");
    assert_eq!(kills.len(), 1, "{text}");
    let (_, killed, rejoined) = kills[0].clone();
    let grants = std::fs::read_to_string(dir.join("grants.csv")).unwrap();
    let after: Vec<u64> = grants
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(4)?.parse().ok())
        .filter(|&t| t > killed)
        .collect();
    assert!(after.iter().any(|&t| t < rejoined), "no grant on the promoted standby: {text}");
    assert!(after.iter().any(|&t| t > rejoined), "no grant after the rejoin: {text}");
    let f = check::check_dir(&dir, Duration::from_secs(10)).unwrap().remove(0).figures;
    assert_eq!(f.stale_holders_told, f.stale_holders, "{f:?}");
    let out = Command::new(BIN)
        .args(["--backend", "postgres", "--postgres-standby", "--threads", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--spawn-postgres"), "{err}");
}

#[test]
fn a_mariadb_restart_mid_run_grants_nothing_while_down_and_resumes() {
    let dir = scratch("mariadb-restart");
    restart_is_survived(
        &dir,
        &[
            "--backend",
            "mariadb",
            "--spawn-mariadb",
            "--threads",
            "4",
            "--duration",
            "12s",
            "--ttl",
            "4s",
            "--seed",
            "6",
            "--faults",
            "server-restart:2s@12s",
        ],
        // A restart ends every session and every user lock with it: the next ask after the
        // server answers is granted at once; the rest is the server's start and the lock
        // calls' backoff.
        Duration::from_secs(8),
    );
}

/// The server the harness starts asks every user for a password, so a stranger (none) is
/// refused.
#[test]
fn a_mariadb_stranger_without_a_password_is_refused() {
    let dir = scratch("mariadb-stranger");
    let args = [
        "--backend",
        "mariadb",
        "--spawn-mariadb",
        "--threads",
        "4",
        "--duration",
        "4s",
        "--hold",
        "uniform:200ms..300ms",
        "--faults",
        "stranger:1s@2s",
    ];
    let (exit, text) = run_checked(&dir, &args);
    assert_eq!(exit, Some(0), "{text}");
    let strikes = windows(&dir, "stranger");
    assert!(!strikes.is_empty(), "no stranger struck: {text}");
    assert!(strikes.iter().all(|(t, ..)| t.starts_with("holder (refused")), "{strikes:?}");
    let f = check::check_dir(&dir, Duration::from_secs(10)).unwrap().remove(0).figures;
    assert_eq!(f.overlapping_holds, 0, "{f:?}");
}

#[test]
fn a_refused_combination_says_why() {
    let out = Command::new(BIN)
        .args([
            "--backend",
            "redis",
            "--redis",
            "redis://127.0.0.1:1/",
            "--faults",
            "server-restart:1s@5s",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--spawn"), "names the option that makes it possible: {err}");
    let out = Command::new(BIN)
        .args(["--backend", "redis", "--spawn-redis", "--processes", "2", "--threads", "4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_stopped_worker_process_is_granted_nothing_and_its_stale_writes_are_rejected() {
    let server = test_servers::RedisServer::start();
    let dir = scratch("process-pause");
    let url = server.url();
    let (code, text) = run_checked(
        &dir,
        &[
            "--backend",
            "redis",
            "--redis",
            &url,
            "-a",
            "redis-token",
            "--processes",
            "2",
            "--threads",
            "4",
            "--duration",
            "9s",
            "--ttl",
            "1s",
            "--faults",
            "process-pause:3s@4s",
        ],
    );
    assert!(matches!(code, Some(0) | Some(3)), "{text}");
    let pauses = windows(&dir, "process-pause");
    assert!(pauses.len() >= 2, "{pauses:?}");
    // Each lasts its 3 s, but one still open when the run ends is healed then.
    assert!(
        pauses.iter().all(|(t, a, b)| t.starts_with("worker-") && b - a < 3_300_000),
        "{pauses:?}"
    );
    assert!(pauses.iter().any(|(_, a, b)| b - a >= 2_900_000), "{pauses:?}");
    // Worker w runs a contiguous block of contenders: with 4 over 2, worker 0 has 0 and 1.
    let grants = std::fs::read_to_string(dir.join("grants.csv")).unwrap();
    for (target, start, end) in &pauses {
        let worker: u32 = target.trim_start_matches("worker-").parse().unwrap();
        let mine = |c: u32| c / 2 == worker;
        for l in grants.lines().skip(1) {
            let f: Vec<&str> = l.split(',').collect();
            let (c, granted): (u32, u64) = (f[2].parse().unwrap(), f[4].parse().unwrap());
            // A grant stamped inside the window (with slack for the signal's delivery).
            assert!(
                !(mine(c) && granted > start + 100_000 && granted + 100_000 < *end),
                "contender {c} of the stopped {target} was granted at {granted} us, inside [{start}, {end})"
            );
        }
    }
    let resource = std::fs::read_to_string(dir.join("resource.csv")).unwrap();
    assert!(
        resource.lines().count() > 10,
        "both workers write to the parent's resource: {resource}"
    );
    let v = &check::check_dir(&dir, Duration::from_secs(1)).unwrap()[0];
    assert_eq!(v.figures.stale_accepted, 0, "{:?}", v.figures);
}

/// `--faults stranger` on ZooKeeper, with holds long enough to be overlapped: on an open
/// server the stranger (a client with no credentials) deletes the holder's znode, the next
/// waiter is granted while the holder works (the run exits 3), the holder is told, and the
/// fenced resource rejects its stale writes; with `--zookeeper-user` the znodes are
/// creator-only, every strike is refused and nothing overlaps.
#[test]
fn a_stranger_takes_an_open_zookeeper_lock_and_is_refused_on_a_secured_one() {
    stranger_open_then_secured(
        "zookeeper",
        &["--backend", "zookeeper", "--spawn-zookeeper"],
        &["--zookeeper-user", "locker", "--zookeeper-password-file"],
        "holder (deleted",
    );
}

/// The same on the lock service: on an open node anyone may force-release, so the stranger
/// takes the lock and the holder is pushed `Revoked`; with `--service-user` the harness starts
/// the node with TLS and a users file, and the stranger (no credentials) is refused.
#[test]
fn a_stranger_force_releases_an_open_service_lock_and_is_refused_on_a_secured_one() {
    stranger_open_then_secured(
        "service",
        &["--backend", "service", "--spawn-service"],
        &["--service-user", "locker", "--service-token-file"],
        "holder (deleted",
    );
}

/// Run a stranger on `engine` open (`base`), then secured (`base` and `user_flags` followed by
/// a secret file): see the tests above. `took`: how an open strike's outcome starts.
fn stranger_open_then_secured(engine: &str, base: &[&str], user_flags: &[&str], took: &str) {
    let common = [
        "--threads",
        "4",
        "--duration",
        "5s",
        "--hold",
        "uniform:200ms..300ms",
        "--faults",
        "stranger:1s@2s",
    ];
    let args = [base, &common[..]].concat();
    // Runs `args` into `name`: the exit status wanted, every strike's outcome starting with
    // `did`; the output and the safety figures.
    let strikes = |name: &str, args: &[&str], code: i32, did: &str| {
        let dir = scratch(name);
        let (exit, text) = run_checked(&dir, args);
        assert_eq!(exit, Some(code), "{text}");
        let strikes = windows(&dir, "stranger");
        assert!(!strikes.is_empty(), "no stranger struck: {text}");
        assert!(strikes.iter().all(|(t, ..)| t.starts_with(did)), "{strikes:?}");
        (text, check::check_dir(&dir, Duration::from_secs(10)).unwrap().remove(0).figures)
    };
    // Exit 3: an open lock lets a stranger break mutual exclusion.
    let (_, f) = strikes(&format!("{engine}-stranger-open"), &args, 3, took);
    assert!(f.overlapping_holds > 0, "{f:?}");
    assert_eq!(f.stale_accepted, 0, "the fenced resource must reject every stale write: {f:?}");
    assert_eq!(f.stale_holders_told, f.stale_holders, "holders are told: {f:?}");

    let secret = scratch(&format!("{engine}-stranger-password"));
    std::fs::create_dir_all(&secret).unwrap();
    let password = secret.join("password");
    std::fs::write(&password, "a-password-for-this-test\n").unwrap();
    let secured = [&args[..], user_flags, &[password.to_str().unwrap()]].concat();
    let (text, f) = strikes(&format!("{engine}-stranger-secured"), &secured, 0, "holder (refused");
    assert_eq!(f.overlapping_holds, 0, "{f:?}");
    assert!(!text.contains("a-password-for-this-test"), "{text}");
}

/// `--faults terminate` on `base` (an engine and its server), holds of a few hundred
/// milliseconds: the administrator ends the session holding the lock at least once, the
/// server frees the lock with it and the next waiter is granted while the holder still works
/// (the run exits 3), the holder is told its lease is lost, and the fenced resource rejects
/// every stale write. A lease of 1 s: MariaDB's client notices a closed connection at its next
/// ping, a third of a lease later at most. Returns the output directory and the output.
fn an_administrator_ends_the_holders_session(name: &str, base: &[&str]) -> (PathBuf, String) {
    let dir = scratch(name);
    let run = [
        "--threads",
        "4",
        "--duration",
        "6s",
        "--ttl",
        "1s",
        "--hold",
        "uniform:400ms..600ms",
        "--faults",
        "terminate:1s@2s",
    ];
    let args = [base, &run[..]].concat();
    let (exit, text) = run_checked(&dir, &args);
    assert_eq!(exit, Some(3), "a holder whose session ended overlaps the next one: {text}");
    let strikes = windows(&dir, "terminate");
    let ended: u32 = strikes
        .iter()
        .filter_map(|(t, ..)| {
            t.strip_prefix("holder (ended ")?.strip_suffix(')')?.parse::<u32>().ok()
        })
        .sum();
    assert!(ended > 0, "no session was ended: {strikes:?}\n{text}");
    assert!(
        strikes.iter().all(|(t, ..)| t.starts_with("holder (ended") || t == "holder (none held)"),
        "{strikes:?}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let f = &summary["results"][0]["fault_safety"];
    let figure = |name: &str| f[name].as_u64().unwrap_or_else(|| panic!("no {name}: {f}"));
    assert!(figure("overlapping_holds") > 0, "the next waiter was not granted: {f}");
    assert!(figure("stale_holders") > 0, "{f}");
    assert_eq!(figure("stale_accepted"), 0, "the fenced resource must reject every stale write");
    assert!(figure("leases_lost_signalled") > 0, "no holder was told: {f}\n{text}");
    assert!(figure("stale_holders_told") > 0, "no stale holder was told: {f}");
    (dir, text)
}

#[test]
fn an_administrator_ends_a_postgres_holders_backend_and_the_next_waiter_is_granted() {
    an_administrator_ends_the_holders_session(
        "postgres-terminate",
        &["--backend", "postgres", "--spawn-postgres", "--algorithms", "postgres"],
    );
}

#[test]
fn an_administrator_ends_a_postgres_xact_holders_backend_and_the_next_waiter_is_granted() {
    an_administrator_ends_the_holders_session(
        "postgres-xact-terminate",
        &["--backend", "postgres", "--spawn-postgres", "--algorithms", "postgres-xact"],
    );
}

#[test]
fn an_administrator_ends_a_mariadb_holders_connection_and_the_next_waiter_is_granted() {
    an_administrator_ends_the_holders_session(
        "mariadb-terminate",
        &["--backend", "mariadb", "--spawn-mariadb"],
    );
}

/// On the user's own server the administrator is the one `--postgres-admin-user` names, its
/// password read from a file and never written out; the contenders log in as another role.
#[test]
fn the_administrator_of_a_users_postgres_is_named_by_a_flag() {
    let server = test_servers::PostgresServer::start();
    let secrets = scratch("postgres-terminate-secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let (user, admin) = (server.conn(), server.superuser_conn());
    let user_file = secrets.join("user");
    std::fs::write(&user_file, format!("{}\n", user.password)).unwrap();
    let admin_file = secrets.join("admin");
    std::fs::write(&admin_file, format!("{}\n", admin.password)).unwrap();
    let address = format!("127.0.0.1:{}", server.port);
    let (dir, text) = an_administrator_ends_the_holders_session(
        "postgres-terminate-users",
        &[
            "--backend",
            "postgres",
            "--postgres",
            &address,
            "--postgres-user",
            &user.user,
            "--postgres-password-file",
            user_file.to_str().unwrap(),
            "--postgres-admin-user",
            &admin.user,
            "--postgres-admin-password-file",
            admin_file.to_str().unwrap(),
            "--algorithms",
            "postgres",
        ],
    );
    let written = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    for out in [&written, &text] {
        assert!(!out.contains(&admin.password), "the administrator's password is written out");
    }
    assert!(written.contains("postgres-terminate-secrets"), "the file is named: {written}");
}

/// `terminate` where no administrator can log in is a usage error naming the engines and the
/// flags that give one; an administrator named for a server the harness starts is one too.
#[test]
fn terminate_without_an_administrator_is_a_usage_error() {
    let usage = |args: &[&str], says: &[&str]| {
        let out = Command::new(BIN).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for s in says {
            assert!(err.contains(s), "{args:?} must say {s:?}: {err}");
        }
    };
    usage(
        &["--backend", "redis", "--spawn-redis", "--faults", "terminate:1s@5s"],
        &["--spawn-postgres", "--spawn-mariadb", "--postgres-admin-user"],
    );
    usage(
        &["--backend", "postgres", "--postgres", "127.0.0.1:1", "--faults", "terminate:1s@5s"],
        &["--postgres-admin-user"],
    );
    usage(
        &["--backend", "mariadb", "--spawn-mariadb", "--mariadb-admin-user", "root"],
        &["has its own superuser"],
    );
}
