//! The binary, end to end: usage errors, failures, a small run, a small sweep, determinism,
//! and the real backends (a `redis-server` and a ZooKeeper started by the tests on free
//! loopback ports; unreachable servers on 127.0.0.1:1).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_bench-harness");
const HEADER: &str =
    "algorithm,lock,contender,requested_us,granted_us,released_us,token,lease_lost,crashed";

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-harness-cli").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn zero_threads_is_a_usage_error() {
    let o = run(&["--threads", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--threads"), "{}", stderr(&o));
}

#[test]
fn an_unknown_algorithm_is_a_usage_error_that_lists_the_known_ones() {
    let o = run(&["--algorithms", "queue,paxos"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("unknown algorithm 'paxos'") && e.contains("shadow") && e.contains("queue"),
        "{e}"
    );
}

#[test]
fn zero_and_negative_durations_are_usage_errors() {
    let o = run(&["--duration", "0s"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("zero"), "{}", stderr(&o));
    let o = run(&["--duration", "-5s"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("negative"), "{}", stderr(&o));
    let o = run(&["--duration", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn an_unwritable_output_directory_fails_with_exit_code_1() {
    let dir = scratch("unwritable");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("results");
    let o = run(&["--threads", "2", "--duration", "1s", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.starts_with("error: cannot create the output directory"), "{e}");
}

/// Runs `args`, expecting a failure with exit code 1 within 15 s, no panic, and a message
/// that contains every one of `needles`.
fn fails_fast(args: &[&str], needles: &[&str]) {
    let start = Instant::now();
    let o = run(args);
    let took = start.elapsed();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
    assert!(took < Duration::from_secs(15), "{args:?} took {took:?}");
    assert!(!e.contains("panicked"), "{e}");
    for n in needles {
        assert!(e.contains(n), "{args:?}: no '{n}' in: {e}");
    }
}

#[test]
fn an_unreachable_cassandra_fails_fast_naming_the_address_and_what_was_tried() {
    let dir = scratch("cassandra-unreachable");
    fails_fast(
        &[
            "--backend",
            "cassandra",
            "--nodes",
            "127.0.0.1:1",
            "--threads",
            "4",
            "--out",
            dir.to_str().unwrap(),
        ],
        &["error: cannot reach the cassandra backend at 127.0.0.1:1", "TCP connect"],
    );
}

#[test]
fn an_unreachable_redis_fails_fast_naming_the_address() {
    let dir = scratch("redis-unreachable");
    fails_fast(
        &[
            "--backend",
            "redis",
            "--redis",
            "redis://127.0.0.1:1/",
            "--threads",
            "4",
            "--out",
            dir.to_str().unwrap(),
        ],
        &["error: cannot reach the redis backend at redis://127.0.0.1:1/", "cannot connect"],
    );
}

#[test]
fn an_unreachable_zookeeper_fails_fast_naming_the_address() {
    let dir = scratch("zookeeper-unreachable");
    fails_fast(
        &[
            "--backend",
            "zookeeper",
            "--zookeeper",
            "127.0.0.1:1",
            "--threads",
            "4",
            "--out",
            dir.to_str().unwrap(),
        ],
        &["error: cannot reach the zookeeper backend at 127.0.0.1:1", "session"],
    );
}

#[cfg(feature = "etcd")]
#[test]
fn an_unreachable_etcd_fails_fast_naming_the_address() {
    let dir = scratch("etcd-unreachable");
    fails_fast(
        &[
            "--backend",
            "etcd",
            "--etcd",
            "http://127.0.0.1:1",
            "--threads",
            "4",
            "--out",
            dir.to_str().unwrap(),
        ],
        &["error: cannot reach the etcd backend at http://127.0.0.1:1", "lease"],
    );
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_runs_in_wall_time_and_bad_endpoints_are_usage_errors() {
    let server = test_servers::shared_etcd();
    let dir = scratch("etcd");
    let o = run(&[
        "--backend",
        "etcd",
        "--etcd",
        &server.endpoint(),
        "--threads",
        "3",
        "--duration",
        "2s",
        "--ttl",
        "4s",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = summary_of(&dir);
    let r = &summary["results"][0];
    assert_eq!(r["algorithm"], "etcd");
    assert!(r["grants"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["safety"]["overlapping_holds"], 0);
    assert_eq!(r["safety"]["token_order_violations"], 0);
    assert_eq!(r["errors"]["lock_errors"], 0, "{r}");
    for bad in ["https://127.0.0.1:2379", "127.0.0.1", "http://127.0.0.1:2379/v3"] {
        let o = run(&["--backend", "etcd", "--etcd", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--etcd"), "{}", stderr(&o));
    }
}

#[test]
fn an_unreachable_postgres_fails_fast_naming_the_address() {
    let dir = scratch("postgres-unreachable");
    let closed = test_servers::ClosedPort::new();
    let at = closed.addr().to_string();
    fails_fast(
        &[
            "--backend",
            "postgres",
            "--postgres",
            &at,
            "--threads",
            "4",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[&format!("error: cannot reach the postgres backend at {at}"), "log in"],
    );
}

#[test]
fn postgres_runs_on_a_server_it_starts_and_bad_addresses_are_usage_errors() {
    let dir = scratch("postgres");
    let o = run(&[
        "--backend",
        "postgres",
        "--spawn-postgres",
        "--threads",
        "3",
        "--duration",
        "2s",
        "--ttl",
        "4s",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = summary_of(&dir);
    let r = &summary["results"][0];
    assert_eq!(r["algorithm"], "postgres");
    assert!(r["grants"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["safety"]["overlapping_holds"], 0);
    assert_eq!(r["safety"]["token_order_violations"], 0);
    assert_eq!(r["errors"]["lock_errors"], 0, "{r}");
    for bad in ["127.0.0.1", "postgres://127.0.0.1:5432/db", "127.0.0.1:notaport"] {
        let o = run(&["--backend", "postgres", "--postgres", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--postgres"), "{}", stderr(&o));
    }
    let cluster = scratch("postgres-cluster");
    let o = run(&[
        "--backend",
        "postgres",
        "--spawn-postgres=3",
        "--threads",
        "2",
        "--duration",
        "1s",
        "--out",
        cluster.to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "a PostgreSQL cluster cannot be started");
    assert!(stderr(&o).contains("--spawn-postgres=3"), "{}", stderr(&o));
}

/// A finding, not a bug of ours: behind PgBouncer in transaction pooling a session-level
/// advisory lock is no lock (each statement may run on another server session, and a session
/// that holds the lock is granted it again), while session pooling keeps it one; the
/// transaction-level lock (`postgres-xact`) holds behind both, a transaction keeping its
/// server session to its end.
#[test]
fn postgres_behind_transaction_pooling_overlaps_and_behind_session_pooling_does_not() {
    let mut overlaps = Vec::new();
    let mut xact_overlaps = Vec::new();
    for mode in ["session", "transaction"] {
        let dir = scratch(&format!("postgres-pool-{mode}"));
        let o = run(&[
            "--backend",
            "postgres",
            "--spawn-postgres",
            "--postgres-pool",
            mode,
            "--threads",
            "6",
            "--duration",
            "3s",
            "--ttl",
            "3s",
            "-q",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{mode}: {}", stderr(&o));
        let summary = summary_of(&dir);
        let (r, x) = (&summary["results"][0], &summary["results"][1]);
        assert_eq!(
            (r["algorithm"].as_str(), x["algorithm"].as_str()),
            (Some("postgres"), Some("postgres-xact"))
        );
        assert!(r["grants"].as_u64().unwrap() > 10, "{mode}: {r}");
        assert!(x["grants"].as_u64().unwrap() > 10, "{mode}: {x}");
        overlaps.push(r["safety"]["overlapping_holds"].as_u64().unwrap());
        xact_overlaps.push(x["safety"]["overlapping_holds"].as_u64().unwrap());
    }
    assert_eq!(overlaps[0], 0, "session pooling overlapped");
    assert!(overlaps[1] > 0, "transaction pooling kept the session lock exclusive");
    assert_eq!(xact_overlaps, [0, 0], "the transaction-level lock overlapped behind a pooler");
    for (args, says) in [
        (&["--postgres-pool", "transaction"][..], "needs --spawn-postgres"),
        (&["--spawn-postgres", "--postgres-pool-size", "3"][..], "needs --postgres-pool"),
        (&["--spawn-postgres", "--postgres-pool", "statement"][..], "--postgres-pool"),
    ] {
        let o = run(&[&["--backend", "postgres"][..], args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn mariadb_runs_on_a_server_it_starts_and_bad_input_fails_fast() {
    let dir = scratch("mariadb");
    let o = run(&[
        "--backend",
        "mariadb",
        "--spawn-mariadb",
        "--threads",
        "3",
        "--duration",
        "2s",
        "--ttl",
        "2500ms",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = summary_of(&dir);
    let r = &summary["results"][0];
    assert_eq!(r["algorithm"], "mariadb");
    assert!(r["grants"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["safety"]["overlapping_holds"], 0);
    assert_eq!(r["safety"]["token_order_violations"], 0);
    assert_eq!(r["errors"]["lock_errors"], 0, "{r}");
    for bad in ["127.0.0.1", "mysql://127.0.0.1:3306/db", "127.0.0.1:notaport"] {
        let o = run(&["--backend", "mariadb", "--mariadb", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--mariadb"), "{}", stderr(&o));
    }
    let closed = test_servers::ClosedPort::new();
    let at = closed.addr().to_string();
    let unreachable = scratch("mariadb-unreachable");
    fails_fast(
        &[
            "--backend",
            "mariadb",
            "--mariadb",
            &at,
            "--threads",
            "4",
            "--out",
            unreachable.to_str().unwrap(),
        ],
        &[&format!("error: cannot reach the mariadb backend at {at}"), "log in"],
    );
}

#[test]
fn backend_mismatches_are_usage_errors() {
    let o = run(&["--backend", "redis", "--clock", "simulated"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--clock simulated"), "{}", stderr(&o));
    let o = run(&["--backend", "zookeeper", "--algorithms", "queue"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("available on --backend zookeeper: zookeeper"), "{}", stderr(&o));
    let o = run(&["--processes", "2", "--threads", "4"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("one process"), "{}", stderr(&o));
}

fn summary_of(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// (algorithm, contender, requested_us) of every row of `grants.csv`.
fn grant_rows(dir: &Path) -> Vec<(String, u32, u64)> {
    let csv = std::fs::read_to_string(dir.join("grants.csv")).unwrap();
    assert_eq!(csv.lines().next(), Some(HEADER));
    csv.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].to_string(), f[2].parse().unwrap(), f[3].parse().unwrap())
        })
        .collect()
}

#[test]
fn redis_with_two_worker_processes_merges_one_result() {
    let server = test_servers::shared_redis();
    let dir = scratch("redis-processes");
    let url = server.url();
    let o = run(&[
        "--backend",
        "redis",
        "--redis",
        &url,
        "--processes",
        "2",
        "--threads",
        "4",
        "--duration",
        "2s",
        "--ttl",
        "5s",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    assert!(table.contains("jedis") && table.contains("redis-token"), "{table}");

    let summary = summary_of(&dir);
    assert_eq!(summary["config"]["processes"], 2);
    assert_eq!(summary["config"]["clock"], "wall");
    assert_eq!(summary["config"]["redis"], url.as_str());
    assert!(summary["derived"]["mean_round_trip_ms"].is_null());
    let results = summary["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert!(r["grants"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["safety"]["overlapping_holds"], 0, "{r}");
        assert_eq!(r["safety"]["token_order_violations"], 0, "{r}");
        // Both workers' requests, added up: at least an acquisition and a release per grant
        // (crate docs of lock-redis). The contenders' connections were made before the
        // window, and are not counted.
        let store = &r["store"];
        let at_least = 2 * r["grants"].as_u64().unwrap();
        assert!(store["ops"]["total"].as_u64().unwrap() >= at_least, "{store}");
        assert_eq!(r["contenders"].as_array().unwrap().len(), 4);
    }
    let rows = grant_rows(&dir);
    for algorithm in ["jedis", "redis-token"] {
        let of: Vec<_> = rows.iter().filter(|r| r.0 == algorithm).collect();
        // Both workers' contenders (0-1 in the first, 2-3 in the second) are in one log...
        assert!(of.iter().any(|r| r.1 < 2) && of.iter().any(|r| r.1 >= 2), "{of:?}");
        // ...on one clock that starts at the run's common start.
        assert!(of.iter().all(|r| r.2 < 4_000_000), "{of:?}");
    }
}

#[test]
fn zookeeper_runs_in_wall_time() {
    let server = test_servers::shared_zookeeper();
    let dir = scratch("zookeeper");
    let o = run(&[
        "--backend",
        "zookeeper",
        "--zookeeper",
        &server.hosts(),
        "--threads",
        "3",
        "--duration",
        "2s",
        "--ttl",
        "4s",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = summary_of(&dir);
    let r = &summary["results"][0];
    assert_eq!(r["algorithm"], "zookeeper");
    assert!(r["grants"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["safety"]["overlapping_holds"], 0);
    assert_eq!(r["safety"]["token_order_violations"], 0);
    assert_eq!(r["errors"]["lock_errors"], 0, "{r}");
    // create, getChildren and delete at the least (lock-zookeeper's crate docs).
    assert!(r["store"]["ops_per_grant"].as_f64().unwrap() >= 3.0, "{r}");
}

/// A ZooKeeper whose client port speaks TLS only and needs a client certificate of `pki`.
fn zookeeper_over_tls(pki: &test_servers::TestPki) -> test_servers::ZkServer {
    test_servers::ZkServer::start_tls(pki, test_servers::ZkClientAuth::Need)
}

#[test]
fn zookeeper_runs_over_mutual_tls_and_a_refused_handshake_fails_fast_naming_it() {
    let pki = test_servers::TestPki::new("bench-harness-cli-zk-tls");
    let server = zookeeper_over_tls(&pki);
    let client = pki.client("bench");
    let (ca, cert, key) = (
        pki.ca_file().to_str().unwrap(),
        client.cert.to_str().unwrap(),
        client.key.to_str().unwrap(),
    );
    let dir = scratch("zookeeper-tls");
    let hosts = server.hosts();
    let base = ["--backend", "zookeeper", "--zookeeper", &hosts, "--threads", "3", "--ttl", "4s"];
    let tls = ["--zookeeper-ca", ca, "--zookeeper-cert", cert, "--zookeeper-key", key];
    let rest = ["--duration", "2s", "-q", "--out", dir.to_str().unwrap()];
    let o = run(&[&base[..], &tls, &rest].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = summary_of(&dir);
    let r = &summary["results"][0];
    assert!(r["grants"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["errors"]["lock_errors"], 0, "{r}");
    let written = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    let key_body: String = client.key_pem().lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(!written.contains(&key_body[..24]), "the key itself is in summary.json");

    // Without a client certificate the server refuses the handshake: exit 1, named, fast.
    let refused = scratch("zookeeper-tls-no-cert");
    let rest = ["--out", refused.to_str().unwrap()];
    fails_fast(
        &[&base[..], &["--zookeeper-ca", ca], &rest].concat(),
        &["error: cannot reach the zookeeper backend", "refused this client's certificate"],
    );
    // A plain client at the TLS port is told the port speaks TLS.
    fails_fast(&[&base[..], &rest].concat(), &["it speaks TLS there", "--zookeeper"]);
    // A CA file that does not exist is a usage error before anything starts.
    let o = run(&[&base[..], &["--zookeeper-ca", "/nonexistent/ca.pem"], &rest].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("/nonexistent/ca.pem"), "{}", stderr(&o));
}

#[test]
fn help_has_examples_and_the_store_model() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let h = stdout(&o);
    assert!(h.contains("Examples:") && h.contains("800us+400us") && h.contains("QUORUM"), "{h}");
    for example in [
        "--backend cassandra --nodes",
        "--backend redis --redis",
        "--backend zookeeper --zookeeper",
        "--processes 4",
    ] {
        assert!(h.contains(example), "no example of {example} in --help");
    }
    #[cfg(feature = "etcd")]
    assert!(h.contains("--backend etcd --spawn-etcd"), "no etcd example in --help");
    let o = run(&["list"]);
    assert!(o.status.success());
    let l = stdout(&o);
    #[cfg(feature = "etcd")]
    assert!(l.contains("etcd:") && l.contains("  etcd "), "etcd missing from list: {l}");
    for needle in
        ["shadow", "queue", "cassandra:", "redis:", "  jedis", "  redis-token", "zookeeper:"]
    {
        assert!(l.contains(needle), "{needle} missing from list: {l}");
    }
}

#[test]
fn a_small_run_writes_summary_csv_and_charts() {
    let dir = scratch("small");
    let o = run(&["--threads", "4", "--duration", "2s", "--quiet", "--out", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "--quiet prints nothing on stderr: {}", stderr(&o));
    let table = stdout(&o);
    assert!(
        table.contains("shadow") && table.contains("queue") && table.contains("gap p50 ms"),
        "{table}"
    );
    // The default table fits a 120-column terminal; --wide shows every column.
    assert!(table.lines().all(|l| l.chars().count() <= 120), "{table}");
    assert!(!table.contains("gap/ideal"), "{table}");
    let wide =
        run(&["--threads", "4", "--duration", "2s", "-q", "--wide", "-o", dir.to_str().unwrap()]);
    assert!(wide.status.success(), "{}", stderr(&wide));
    let wide = stdout(&wide);
    assert!(wide.contains("gap/ideal") && wide.contains("tombs/read p50/max"), "{wide}");
    assert!(wide.lines().next().unwrap().chars().count() > 120, "{wide}");

    let csv = std::fs::read_to_string(dir.join("grants.csv")).unwrap();
    assert_eq!(csv.lines().next(), Some(HEADER));
    assert!(csv.lines().skip(1).any(|l| l.starts_with("shadow,")));
    assert!(csv.lines().skip(1).any(|l| l.starts_with("queue,")));

    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["config"]["threads"], 4);
    assert_eq!(summary["config"]["duration"], "2s");
    assert_eq!(summary["config"]["latency"], "800us+400us");
    let results = summary["results"].as_array().unwrap();
    // Every registered algorithm of the embedded store, the two thesis locks among them.
    assert!(results.len() >= 2);
    for name in ["shadow", "queue"] {
        assert!(results.iter().any(|r| r["algorithm"] == name), "{name} missing");
    }
    for r in results {
        assert!(r["grants"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["safety"]["overlapping_holds"], 0);
        assert_eq!(r["safety"]["token_order_violations"], 0);
        assert!(
            r["latency"]["p99_ms"].as_f64().unwrap() >= r["latency"]["p50_ms"].as_f64().unwrap()
        );
    }
    let queue = results.iter().find(|r| r["algorithm"] == "queue").unwrap();
    assert!(queue["handoff"]["ratio_to_ideal"].as_f64().is_some(), "{queue}");
    for chart in ["latency_cdf.png", "latency_cdf.svg", "timeline.png", "grants_per_contender.png"]
    {
        assert!(std::fs::metadata(dir.join(chart)).unwrap().len() > 1000, "{chart}");
    }
}

#[test]
fn the_same_seed_gives_byte_identical_results() {
    let args = |dir: &Path| {
        vec![
            "--threads".to_string(),
            "6".into(),
            "--locks".into(),
            "2".into(),
            "--duration".into(),
            "3s".into(),
            "--skew".into(),
            "2ms".into(),
            "--think".into(),
            "uniform:0ms..4ms".into(),
            "--seed".into(),
            "7".into(),
            "-q".into(),
            "--out".into(),
            dir.to_str().unwrap().into(),
        ]
    };
    let (a, b) = (scratch("same-seed-a"), scratch("same-seed-b"));
    for dir in [&a, &b] {
        let o = Command::new(BIN).args(args(dir)).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    for file in ["summary.json", "grants.csv"] {
        let (x, y) = (std::fs::read(a.join(file)).unwrap(), std::fs::read(b.join(file)).unwrap());
        assert!(x == y, "{file} differs between two runs with the same seed");
    }
    let c = scratch("other-seed");
    let mut other = args(&c);
    other[11] = "8".into();
    assert!(Command::new(BIN).args(other).output().unwrap().status.success());
    assert_ne!(
        std::fs::read(a.join("grants.csv")).unwrap(),
        std::fs::read(c.join("grants.csv")).unwrap()
    );
}

/// A thaw wakes the frozen client's waiting requests together, and a crash of a paused holder
/// makes the order they run in matter: with tokio's `watch` that order was random, and about
/// one run in four of this one moved a grant.
#[test]
fn the_same_seed_gives_one_grant_log_under_pauses_and_crashes() {
    let args = |dir: &Path| {
        let dir = dir.to_str().unwrap();
        let faults = "pause:2s@10s,crash:1s@7s/who=holder";
        ["-a", "queue", "-t", "8", "-d", "25s", "--faults", faults, "-q", "--out", dir]
            .map(String::from)
    };
    let first = scratch("faulted-seed-0");
    let o = Command::new(BIN).args(args(&first)).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let log = std::fs::read(first.join("grants.csv")).unwrap();
    for run in 1..8 {
        let dir = scratch(&format!("faulted-seed-{run}"));
        let o = Command::new(BIN).args(args(&dir)).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let again = std::fs::read(dir.join("grants.csv")).unwrap();
        assert!(again == log, "run {run}'s grants.csv differs from the first's");
    }
}

#[test]
fn the_global_time_source_runs() {
    let dir = scratch("global");
    let o = run(&[
        "-a",
        "queue",
        "--threads",
        "4",
        "--duration",
        "3s",
        "--time-source",
        "global",
        "--skew",
        "5ms",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    assert!(summary["results"][0]["grants"].as_u64().unwrap() > 0);
    assert_eq!(summary["results"][0]["safety"]["overlapping_holds"], 0);
}

/// A finding kept as a test (lock-queue's docs, "First come, first served needs agreeing
/// clocks"): with clocks ±100 ms apart the queue lock lets a request that began later, with an
/// earlier clock, pass one already in line; the bakery, which orders by its Numbers row and
/// reads no clock for it, keeps first come, first served (its overtakes by request time are
/// requests whose doorways overlapped).
#[test]
fn skewed_clocks_break_first_come_first_served_for_the_queue_lock_but_not_the_bakery() {
    let dir = scratch("skew-in-line");
    let args = ["-a", "queue,bakery", "--threads", "16", "--duration", "30s", "--skew", "100ms"];
    let o = run(&[&args[..], &["-q", "--out", dir.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = summary_of(&dir);
    let in_line = |i: usize| {
        let r = &summary["results"][i];
        let line = &r["fairness"]["overtakes"]["in_line"];
        (r["algorithm"].as_str().unwrap().to_string(), line["overtaken_grants"].as_u64().unwrap())
    };
    let (queue, queue_in_line) = in_line(0);
    let (bakery, bakery_in_line) = in_line(1);
    assert_eq!((queue.as_str(), bakery.as_str()), ("queue", "bakery"));
    assert!(queue_in_line > 100, "queue: {queue_in_line} grants overtaken in line");
    assert_eq!(bakery_in_line, 0, "bakery: overtaken in line");
}

#[test]
fn a_quick_sweep_writes_the_results_directory() {
    let dir = scratch("sweep");
    let o = run(&[
        "sweep",
        "--quick",
        "--contenders",
        "1,2,8,64",
        "--duration",
        "2s",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for needle in [
        "# Benchmark results",
        "## Findings",
        "latency_vs_contenders.png",
        "timeline_2.png",
        "timeline_8.png",
        "poll_interval.png",
        "clock_skew.png",
        "| overtaken | overtaken in line |",
        "(Lamport's first come, first served)",
        // The bakery's overtakes by request time are not Lamport's: none is in line.
        "of grants are overtaken, none of them by a request that began after their place",
    ] {
        assert!(readme.contains(needle), "README lacks {needle}:\n{readme}");
    }
    for chart in [
        "latency_vs_contenders",
        "throughput_vs_contenders",
        "fairness_vs_contenders",
        "store_ops_vs_contenders",
        "poll_interval",
        "clock_skew",
        "timeline_2",
        "timeline_8",
    ] {
        assert!(dir.join(format!("{chart}.png")).exists(), "{chart}.png");
    }
    let sweep: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("sweep.json")).unwrap()).unwrap();
    let points = sweep["points"].as_array().unwrap();
    assert!(points.iter().all(|p| p["report"]["safety"]["overlapping_holds"] == 0));
    assert!(points.iter().any(|p| p["experiment"] == "skew" && p["series"] == "queue/global"));
}

/// On a real cluster only: `LOCK_TEST_CASSANDRA=host:port` (as for lock-cassandra's tests);
/// otherwise the test says so and passes.
#[test]
fn cassandra_with_two_worker_processes_when_a_cluster_is_given() {
    let nodes = match std::env::var("LOCK_TEST_CASSANDRA") {
        Ok(n) if !n.trim().is_empty() => n,
        _ => {
            use std::io::Write;
            // Straight to stderr, past the test harness's capture, so that it is seen.
            let _ = writeln!(
                std::io::stderr(),
                "LOCK_TEST_CASSANDRA not set: the bench-harness Cassandra run was not run"
            );
            return;
        }
    };
    let dir = scratch("cassandra-processes");
    let o = run(&[
        "--backend",
        "cassandra",
        "--nodes",
        &nodes,
        "--keyspace",
        "distributed_locks_test",
        "--processes",
        "2",
        "--threads",
        "4",
        "--duration",
        "3s",
        "--ttl",
        "2s",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = summary_of(&dir);
    let results = summary["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results {
        assert!(r["grants"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["safety"]["overlapping_holds"], 0, "{r}");
        assert_eq!(r["safety"]["token_order_violations"], 0, "{r}");
        // Requests are counted on Cassandra, in every worker, and added up.
        assert!(r["store"]["ops_per_grant"].as_f64().unwrap() > 1.0, "{r}");
    }
}

#[test]
fn a_short_long_run_shows_the_queue_lock_slowing_and_queue_bounded_flat() {
    // Three simulated minutes at 8 contenders, tombstones kept as Cassandra keeps them: the
    // thesis's queue lock reads more tombstones every interval and slows down; queue-bounded's
    // reads scan at most one tombstone per contender.
    let results = scratch("longrun");
    let dir = results.join("longrun");
    std::fs::create_dir_all(&results).unwrap();
    std::fs::write(results.join("README.md"), "# Benchmark results\n").unwrap();
    let o = run(&[
        "longrun",
        "--duration",
        "3m",
        "--interval",
        "30s",
        "--contenders",
        "8",
        "--no-calibration",
        "-a",
        "queue,queue-bounded",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("longrun.json")).unwrap()).unwrap();
    let runs = s["runs"].as_array().unwrap();
    let of = |name: &str| runs.iter().find(|r| r["algorithm"] == name).unwrap().clone();
    let per_read = |r: &serde_json::Value| -> Vec<f64> {
        r["intervals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["tombstones_per_read"].as_f64().unwrap())
            .collect()
    };
    let grants = |r: &serde_json::Value| -> Vec<u64> {
        r["intervals"].as_array().unwrap().iter().map(|i| i["grants"].as_u64().unwrap()).collect()
    };
    let queue = of("queue");
    let q = per_read(&queue);
    assert_eq!(q.len(), 6);
    assert!(q.windows(2).all(|w| w[1] > w[0]), "queue tombstones per read: {q:?}");
    assert!(q[5] > 1000.0, "queue tombstones per read: {q:?}");
    let g = grants(&queue);
    assert!(g[5] < g[0], "queue grants per interval: {g:?}");
    let bounded = of("queue-bounded");
    assert!(bounded["max_tombstones_per_read"].as_u64().unwrap() <= 8, "{bounded}");
    assert_eq!(bounded["would_fail_at_s"], serde_json::Value::Null);
    assert!(dir.join("longrun.png").exists());
    // The results README gained its long-run section.
    let readme = std::fs::read_to_string(results.join("README.md")).unwrap();
    assert!(readme.contains("<!-- longrun:begin") && readme.contains("queue-bounded"), "{readme}");
    assert!(stdout(&o).contains("would fail at"), "{}", stdout(&o));
}
