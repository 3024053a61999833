//! The Python client of `clients/python`, written from `docs/PROTOCOL.md` alone, against real
//! nodes: several `contend.py` processes and a Rust client take turns on one lock, and every
//! hold is checked against every other. Each process writes a line per grant (owner, token,
//! and when it was granted and released, read from `CLOCK_MONOTONIC`, one clock for every
//! process of the machine), and the test reads the Rust client's holds from the same clock.
//! No two holds may overlap, and the tokens must rise in grant order. Over TLS, with a users
//! file, the same client says `Hello` with its token, a wrong token is refused, and a plain
//! `Status` is still answered on the TLS port. After a broken connection the client resumes
//! its session with the session's key, which a stranger naming the session lacks.

use crate::support;

use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The lock they all contend for.
const LOCK: &str = "python-contended";
/// How long a run may take before its processes are killed.
const RUN: Duration = Duration::from_secs(40);

/// One hold of the lock: who, with which token, from when to when (`CLOCK_MONOTONIC`, ns).
#[derive(Debug, Clone)]
struct Hold {
    owner: String,
    token: u64,
    granted: u64,
    released: u64,
}

/// `CLOCK_MONOTONIC` in nanoseconds: Python's `time.monotonic_ns()` on Linux.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime is given a valid timespec to fill.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) }, 0);
    u64::try_from(ts.tv_sec).expect("a positive time") * 1_000_000_000
        + u64::try_from(ts.tv_nsec).expect("a positive time")
}

/// The Python interpreter, or a panic saying what to install.
fn python() -> &'static str {
    static CHECKED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let checked = CHECKED.get_or_init(|| match Command::new("python3").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("`python3 --version` failed ({})", out.status)),
        Err(e) => Err(format!("python3 cannot be run ({e})")),
    });
    if let Err(why) = checked {
        panic!(
            "{why}: the Python client's test needs Python 3.8 or later (Debian: apt-get \
             install python3)"
        );
    }
    "python3"
}

/// A script of the Python client.
fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/python").join(name)
}

/// A `contend.py` process for `owner`: `rounds` grants of `LOCK`, held 20 ms each.
fn contender(
    endpoints: &str,
    owner: &str,
    rounds: usize,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let rounds = rounds.to_string();
    Command::new(python())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(env.iter().copied())
        .arg(script("contend.py"))
        .args(["--endpoints", endpoints, "--lock", LOCK, "--rounds", &rounds])
        .args(["--owner", owner, "--hold-ms", "20", "--ttl-ms", "5000"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start contend.py for {owner}: {e}"))
}

/// Wait for `child` until `deadline` (killing it then); whether it succeeded, and its
/// standard output and error.
fn finish(owner: &str, mut child: Child, deadline: Instant) -> (bool, String, String) {
    let status = loop {
        match child.try_wait().expect("wait for contend.py") {
            Some(status) => break status,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                break child.wait().expect("wait for a killed contend.py");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let out = child.wait_with_output().expect("contend.py's output");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8 output");
    let (stdout, stderr) = (text(out.stdout), text(out.stderr));
    eprintln!("{owner}: {status}\n{stderr}");
    (status.success(), stdout, stderr)
}

/// The holds of a successful `contend.py` that was to make `rounds` grants.
fn holds(owner: &str, child: Child, rounds: usize, deadline: Instant) -> Vec<Hold> {
    let (ok, stdout, stderr) = finish(owner, child, deadline);
    assert!(ok, "contend.py {owner} failed:\n{stderr}");
    let holds: Vec<Hold> = stdout
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap_or_else(|e| panic!("{line:?}: {e}"));
            assert_eq!(f.len(), 4, "owner token granted released: {line:?}");
            Hold { owner: f[0].to_string(), token: n(1), granted: n(2), released: n(3) }
        })
        .collect();
    assert_eq!(holds.len(), rounds, "{owner}'s grants:\n{stdout}");
    assert!(holds.iter().all(|h| h.owner == owner && h.granted < h.released), "{holds:?}");
    holds
}

/// No two holds overlap, and tokens rise in grant order.
fn check_exclusive(mut all: Vec<Hold>) {
    all.sort_by_key(|h| h.granted);
    for pair in all.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(b.granted > a.released, "{b:?} was granted while {a:?} held the lock");
        assert!(b.token > a.token, "tokens must rise in grant order: {a:?}, then {b:?}");
    }
    let owners: std::collections::BTreeSet<&str> = all.iter().map(|h| h.owner.as_str()).collect();
    let handoffs = all.windows(2).filter(|p| p[0].owner != p[1].owner).count();
    eprintln!(
        "{} holds by {owners:?}, {handoffs} of them handed to another owner, none overlapping, \
         tokens rising",
        all.len()
    );
}

/// The live sessions the node at loopback `port` counts.
fn sessions(port: u16) -> u64 {
    let status = test_servers::service_status(port).unwrap_or_default();
    let Some(at) = status.find("\"sessions\":") else { return 0 };
    let digits: String = status[at + 11..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

#[test]
fn python_clients_and_a_rust_client_take_turns_on_one_lock() {
    const PYTHON_ROUNDS: usize = 10;
    const RUST_ROUNDS: usize = 8;
    let started = Instant::now();
    let python = python();
    let cluster = support::cluster(1);
    let endpoints = cluster.endpoints();
    let deadline = Instant::now() + RUN;
    let owners = ["py-1", "py-2", "py-3"];
    let children: Vec<Child> = owners
        .iter()
        .map(|owner| contender(&endpoints.join(","), owner, PYTHON_ROUNDS, &[], &[]))
        .collect();

    // The Rust client joins once the Python sessions are open (or after 5 s regardless), so
    // that it contends with them.
    let node = cluster.direct_addr(0).port();
    let waited = Instant::now();
    while sessions(node) < owners.len() as u64 && waited.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rust = runtime.block_on(async {
        let config = ClientConfig { ttl: Duration::from_secs(5), ..ClientConfig::default() };
        let client = ServiceClient::connect(&endpoints, config).await.expect("connect");
        let locker = client.locker("rust").expect("locker");
        let mut holds = Vec::new();
        for _ in 0..RUST_ROUNDS {
            let g = locker.lock(LOCK, Some(Duration::from_secs(20))).await.expect("lock");
            let granted = monotonic_ns();
            tokio::time::sleep(Duration::from_millis(20)).await;
            let released = monotonic_ns();
            assert!(!g.is_lost(), "the Rust client lost the lock while holding it");
            holds.push(Hold { owner: "rust".into(), token: g.token(), granted, released });
            g.release().await.expect("release");
        }
        // The node pushes `SessionEnded` before the `Closed` reply, often: still a close.
        client.close().await.expect("close");
        holds
    });

    let mut all = rust;
    for (owner, child) in owners.iter().zip(children) {
        all.extend(holds(owner, child, PYTHON_ROUNDS, deadline));
    }
    assert_eq!(all.len(), owners.len() * PYTHON_ROUNDS + RUST_ROUNDS);
    check_exclusive(all);
    eprintln!("{python}: the run took {:?}", started.elapsed());
}

#[test]
fn python_client_over_tls_says_hello_and_a_tls_port_answers_a_plain_status() {
    let python = python();
    let s = support::SecuredCluster::start(1, &["py"]);
    let endpoints = s.cluster.endpoints().join(",");
    let token = s.tokens.iter().find(|(u, _)| u == "py").expect("py's token").1.clone();
    let ca = s.pki.ca_file().to_str().expect("a UTF-8 path").to_string();
    let deadline = Instant::now() + RUN;
    let tls = ["--user", "py", "--ca", ca.as_str()];

    let children: Vec<(&str, Child)> = ["py-tls-1", "py-tls-2"]
        .into_iter()
        .map(|owner| {
            (
                owner,
                contender(&endpoints, owner, 5, &tls, &[("LOCK_SERVICE_TOKEN", token.as_str())]),
            )
        })
        .collect();
    let wrong = contender(&endpoints, "py-wrong", 1, &tls, &[("LOCK_SERVICE_TOKEN", "guess")]);
    let mut all = Vec::new();
    for (owner, child) in children {
        all.extend(holds(owner, child, 5, deadline));
    }
    check_exclusive(all);
    let (ok, stdout, stderr) = finish("py-wrong", wrong, deadline);
    assert!(!ok && stdout.is_empty(), "a wrong token must be refused: {stdout}");
    assert!(stderr.contains("Unauthenticated"), "{stderr}");

    // A plain Status on the TLS port is answered (once, then the node hangs up).
    let node = s.cluster.direct_addr(0).to_string();
    let status = |extra: &[&str]| {
        let out = Command::new(python)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg(script("lockclient.py"))
            .args(["status", &node])
            .args(extra)
            .output()
            .expect("run lockclient.py status");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success() && text.contains("\"term\""), "{text}\n{err}");
        text
    };
    eprintln!("plain: {}", status(&[]));
    eprintln!("TLS: {}", status(&["--ca", ca.as_str()]));
}

/// The Python client keeps its session's key and resumes with it after a broken connection,
/// on a node without users; a client that names the session without the key is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_resumes_its_session_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let node = lock_service::server::Node::start(&support::node_args(dir.path(), "py", &[]))
        .await
        .expect("start");
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.status().leader != Some(0) {
        assert!(Instant::now() < deadline, "the node did not elect itself");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let endpoint = node.client_addr().to_string();
    let client_dir = script("").to_str().unwrap().to_string();
    let program = format!(
        r#"
import sys, time
sys.path.insert(0, {client_dir:?})
import lockclient as lc
c = lc.LockClient([{endpoint:?}], ttl_ms=5000)
sid = c.open()
assert c.key is not None and len(c.key) == 64, c.key
hold = c.acquire("l", "o")
c.conn.close()  # a broken connection: the release resumes first, with the key
time.sleep(0.2)
c.release(hold)
stranger = lc.LockClient([{endpoint:?}], ttl_ms=5000)
stranger.session = sid
try:
    stranger._connection(None, time.monotonic() + 5)
    print("the stranger resumed")
except lc.LockServiceError as e:
    print("stranger refused:", e)
c.close()
print("done")
"#
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-c", &program])
            .output()
            .expect("run python3")
    })
    .await
    .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "python failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("stranger refused") && stdout.contains("Forbidden"), "{stdout}");
    assert!(stdout.contains("done"), "{stdout}");
    assert_eq!(node.status().sessions, 0, "closed");
    node.shutdown().await;
}
