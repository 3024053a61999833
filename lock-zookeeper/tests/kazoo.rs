//! Interoperability with a ZooKeeper lock no one here wrote: kazoo's `Lock`, from
//! the Python client kazoo, given `extra_lock_patterns=["lock-"]` (its documented way of
//! recognising other clients' znodes), contends with ours for one lock path on the test
//! binary's ZooKeeper. Both sides must see each other's znodes: at most one holder at a time,
//! whichever client, and the lock granted in the order the requests queued, across clients.
//!
//! kazoo runs as a subprocess (a small script below, `python3 -c`). It must be installed:
//! `scripts/test.sh` installs Debian's `python3-kazoo` when no Python on the machine has
//! kazoo. Without it the tests fail saying what to install; they never pass unrun.

use crate::support;
use crate::support::kazoo::{python_with_kazoo, Kazoo};

use lock_core::{LockGuard, Locker};
use lock_zookeeper::{Guids, NodeNaming, ZkBackend, ZkConfig, ZkLockOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use zookeeper_client as zk;

const SESSION: Duration = Duration::from_secs(4);

/// The kazoo side: one contender on its own session, driven by lines on stdin, answering on
/// stdout. `acquire` blocks in `Lock.acquire()` and then answers `held <czxid>`; `release`
/// answers `released`; `rounds <n> <hold ms> <log>` takes the lock n times, each time writing
/// `enter` and `exit` lines (with its znode's czxid) to the log around a hold, then answers
/// `done`. The czxid of a lock znode is its place in the queue: ZooKeeper's zxids increase with
/// every transaction, and sequence numbers follow them.
const KAZOO_CONTENDER: &str = r#"
import os, sys, time
from kazoo.client import KazooClient

hosts, path, ident = sys.argv[1:4]
zk = KazooClient(hosts=hosts, timeout=10)
zk.start(timeout=10)
# Our znodes are `_c_<uuid>-lock-<seq>` or `lock-<seq>`: both end in "lock-" and 10 digits.
lock = zk.Lock(path, ident, extra_lock_patterns=["lock-"])

def czxid():
    return zk.exists(path + "/" + lock.node).czxid

def say(line):
    print(line, flush=True)

say("ready")
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "acquire":
        lock.acquire()
        say("held %d" % czxid())
    elif cmd[0] == "release":
        lock.release()
        say("released")
    elif cmd[0] == "rounds":
        n, hold, log = int(cmd[1]), int(cmd[2]) / 1000.0, cmd[3]
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        for _ in range(n):
            lock.acquire()
            z = czxid()
            os.write(fd, ("enter %s %d\n" % (ident, z)).encode())
            time.sleep(hold)
            os.write(fd, ("exit %s %d\n" % (ident, z)).encode())
            lock.release()
        os.close(fd)
        say("done")
zk.stop()
zk.close()
"#;

/// A backend of our own (one session) on `root`.
async fn backend(root: &str) -> ZkBackend {
    let config = ZkConfig { session_timeout: SESSION, root: root.into(), ..ZkConfig::default() };
    ZkBackend::connect_with(&support::shared().hosts(), config).await.unwrap()
}

/// Our contender `name` with `naming`, its GUIDs seeded from `seed`.
async fn ours(root: &str, name: &str, naming: NodeNaming, seed: u64) -> impl Locker {
    let options = ZkLockOptions::new(Guids::seeded(seed)).with_naming(naming);
    backend(root).await.locker_with(name, options).unwrap()
}

async fn children(raw: &zk::Client, dir: &str) -> Vec<String> {
    raw.list_children(dir).await.unwrap_or_default()
}

/// Wait until `dir` has `n` children (a contender has queued).
async fn until_queued(raw: &zk::Client, dir: &str, n: usize) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while children(raw, dir).await.len() != n {
        assert!(tokio::time::Instant::now() < until, "{dir}: expected {n} contenders");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A contender of [`grants_pass_between_the_clients_in_queue_order`]: kazoo's (by its index)
/// or ours (by name, its guard sent on the test's channel once granted).
#[derive(Debug, Clone, Copy)]
enum Turn {
    Kazoo(usize),
    Ours(&'static str, NodeNaming),
}

/// Everyone still waiting in that test: no one may be granted while another holds.
async fn nobody_granted(kazoos: &mut [Kazoo], ours: &mut UnboundedReceiver<LockGuard>) {
    // Long enough for a wrong grant to show: a handoff takes milliseconds.
    tokio::time::sleep(Duration::from_millis(200)).await;
    if let Ok(g) = ours.try_recv() {
        panic!("{} granted while another held", g.owner());
    }
    for k in kazoos {
        if let Some(line) = k.try_answer(Duration::from_millis(10)).await {
            panic!("kazoo's {} answered {line:?} while another held", k.name);
        }
    }
}

/// Wait for `turn`'s grant, check no one else has one, release it; its fencing token.
async fn take_turn(
    turn: Turn,
    kazoos: &mut [Kazoo],
    ours: &mut UnboundedReceiver<LockGuard>,
) -> u64 {
    let within = Duration::from_secs(10);
    match turn {
        Turn::Kazoo(i) => {
            let answer = kazoos[i].answer(within).await;
            let token = answer.strip_prefix("held ").expect("kazoo holds").parse().unwrap();
            nobody_granted(kazoos, ours).await;
            kazoos[i].send("release");
            assert_eq!(kazoos[i].answer(within).await, "released");
            token
        }
        Turn::Ours(name, _) => {
            let g = tokio::time::timeout(within, ours.recv()).await.expect("granted").unwrap();
            assert_eq!(g.owner(), name, "granted out of queue order");
            nobody_granted(kazoos, ours).await;
            let token = g.token();
            g.release().await.unwrap();
            token
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_pass_between_the_clients_in_queue_order() {
    let python = python_with_kazoo();
    let root = support::unique_root("kazoo-fifo");
    let dir = format!("{root}/x");
    let raw = zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(&support::shared().hosts())
        .await
        .unwrap();
    let held = ours(&root, "o0", NodeNaming::Protected, 1).await.lock("x", None).await.unwrap();
    let mut kazoos = vec![
        Kazoo::start(&python, KAZOO_CONTENDER, "k1", &[&dir, "k1"]).await,
        Kazoo::start(&python, KAZOO_CONTENDER, "k3", &[&dir, "k3"]).await,
    ];
    // Queued one by one behind o0: both clients alternately, ours in both naming forms.
    let turns = [
        Turn::Kazoo(0),
        Turn::Ours("o2", NodeNaming::Plain),
        Turn::Kazoo(1),
        Turn::Ours("o4", NodeNaming::Protected),
    ];
    let (tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    for (i, turn) in turns.into_iter().enumerate() {
        match turn {
            Turn::Kazoo(k) => kazoos[k].send("acquire"),
            Turn::Ours(name, naming) => {
                let locker = ours(&root, name, naming, 2 + i as u64).await;
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _ = tx.send(locker.lock("x", None).await.expect("our waiter is granted"));
                });
            }
        }
        until_queued(&raw, &dir, i + 2).await;
    }
    let names = children(&raw, &dir).await;
    eprintln!("one lock's queue, three naming forms: {names:?}");
    assert!(names.iter().any(|n| n.contains("__lock__")), "kazoo's names: {names:?}");
    assert!(names.iter().any(|n| n.starts_with("_c_")), "Curator's protected names: {names:?}");
    assert!(names.iter().any(|n| n.starts_with("lock-")), "the seed's plain names: {names:?}");

    // Hand the lock down the queue: each release grants exactly the next contender, whichever
    // client it is, with a greater fencing token.
    let mut token = held.token();
    held.release().await.unwrap();
    for turn in turns {
        let next = take_turn(turn, &mut kazoos, &mut granted).await;
        assert!(next > token, "{turn:?}: token {next} after {token}");
        token = next;
    }
    assert!(children(&raw, &dir).await.is_empty(), "every contender left");
}

/// One line of the shared log.
#[derive(Debug)]
struct Entry {
    enter: bool,
    who: String,
    czxid: u64,
}

fn read_log(path: &Path) -> Vec<Entry> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 3, "log line {line:?}");
            Entry { enter: f[0] == "enter", who: f[1].into(), czxid: f[2].parse().unwrap() }
        })
        .collect()
}

/// What the log says: holds that began while another was on, grants out of queue order, and
/// how often the lock passed from one client to the other.
#[derive(Debug, Default)]
struct Verdict {
    overlaps: usize,
    out_of_order: usize,
    handoffs: usize,
    grants: usize,
}

fn judge(log: &[Entry]) -> Verdict {
    let mut v = Verdict::default();
    let mut inside: Option<&Entry> = None;
    let mut last: Option<&Entry> = None;
    for e in log {
        if !e.enter {
            inside = inside.filter(|i| !(i.who == e.who && i.czxid == e.czxid));
            continue;
        }
        v.grants += 1;
        v.overlaps += usize::from(inside.is_some());
        if let Some(l) = last {
            v.out_of_order += usize::from(e.czxid <= l.czxid);
            v.handoffs += usize::from(l.who.starts_with('k') != e.who.starts_with('k'));
        }
        inside = Some(e);
        last = Some(e);
    }
    v
}

/// A shared resource: the log file every holder appends to (one `write` per line, in append
/// mode, so lines never tear).
fn append(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(line.as_bytes()).unwrap();
}

/// A new, empty log file of this process (removed by the test once judged; a failed test's
/// stays for a look).
fn log_path(tag: &str) -> PathBuf {
    let pid = std::process::id();
    let path = std::env::temp_dir().join(format!("lock-zookeeper-kazoo-{pid}-{tag}.log"));
    std::fs::write(&path, "").unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_ours_contending_never_overlap_and_grant_in_queue_order() {
    let python = python_with_kazoo();
    let (rounds, hold_ms) = (15, 10);
    let root = support::unique_root("kazoo-soak");
    let dir = format!("{root}/x");
    let log = log_path("soak");
    let mut kazoos = Vec::new();
    for i in 0..3 {
        let name = format!("k{i}");
        kazoos.push(Kazoo::start(&python, KAZOO_CONTENDER, &name, &[&dir, &name]).await);
    }
    let mut lockers = Vec::new();
    for (i, naming) in
        [NodeNaming::Protected, NodeNaming::Plain, NodeNaming::Protected].into_iter().enumerate()
    {
        lockers.push(ours(&root, &format!("o{i}"), naming, 100 + i as u64).await);
    }
    // Everyone starts at once, so that the queue holds both clients' contenders throughout.
    for k in &mut kazoos {
        k.send(&format!("rounds {rounds} {hold_ms} {}", log.display()));
    }
    let mut tasks = Vec::new();
    for locker in lockers {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let g = locker.lock("x", Some(Duration::from_secs(30))).await.expect("granted");
                append(&log, &format!("enter {} {}\n", locker.owner(), g.token()));
                tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                append(&log, &format!("exit {} {}\n", locker.owner(), g.token()));
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for k in &mut kazoos {
        assert_eq!(k.answer(Duration::from_secs(60)).await, "done");
    }
    let entries = read_log(&log);
    let v = judge(&entries);
    let from = |side: char| entries.iter().filter(|e| e.enter && e.who.starts_with(side)).count();
    eprintln!(
        "{} grants ({} kazoo, {} ours): {} overlaps, {} out of queue order, {} handoffs between \
         the clients",
        v.grants,
        from('k'),
        from('o'),
        v.overlaps,
        v.out_of_order,
        v.handoffs
    );
    assert_eq!((from('k'), from('o')), (3 * rounds, 3 * rounds), "every round of both sides");
    assert_eq!(v.overlaps, 0, "two holders at once: {entries:?}");
    assert_eq!(v.out_of_order, 0, "grants out of queue order: {entries:?}");
    // The two clients did contend: the lock passed between them again and again.
    assert!(v.handoffs >= rounds, "only {} handoffs between kazoo and ours", v.handoffs);
    let _ = std::fs::remove_file(&log);
}
