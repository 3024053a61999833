//! Interoperability of the reader-writer lock with one no one here wrote: kazoo's `ReadLock`
//! and `WriteLock` contend with our [`ZkRwLocker`] for one lock path on the test binary's
//! ZooKeeper. kazoo is told our names the way it documents for other clients' znodes
//! (`extra_lock_patterns`): its writers `["__READ__", "__WRIT__"]`, its readers `["__WRIT__"]`;
//! ours recognise kazoo's `__lock__` (exclusive) and `__rlock__` (shared) by themselves. No
//! writer may hold beside anyone, readers of both clients share, and the lock is granted in
//! the order the asks queued, whichever client made them.
//!
//! kazoo's `ReadLock` before 2.9.0 (Debian's 2.8.0 among them) takes every writer in the
//! queue for its predecessor, the ones queued after it included, and so deadlocks with a later
//! writer of any client (kazoo's own too) once it has to wait. The script checks the installed
//! kazoo for that (a reader asked which znode it waits for, with a writer queued below it and
//! one above) and, if it has it, gives kazoo's locks the corrected rule of later versions: a
//! contender waits only for recognised znodes below its own. Everything else is kazoo's own.
//!
//! [`ZkRwLocker`]: lock_zookeeper::ZkRwLocker

use crate::support;
use crate::support::kazoo::{python_with_kazoo, Kazoo};

use lock_core::{Access, LockGuard, RwLocker};
use lock_zookeeper::{Guids, NodeNaming, ZkBackend, ZkConfig, ZkLockOptions, ZkRwLocker};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use zookeeper_client as zk;

const SESSION: Duration = Duration::from_secs(4);

/// The kazoo side: one contender on its own session, with a `ReadLock` and a `WriteLock` on
/// the path, driven by lines on stdin and answering on stdout. `read` or `write` blocks in
/// that lock's `acquire()` and then answers `held <czxid>`; `release` releases the lock held
/// and answers `released`; `rounds <n> <hold ms> <log> <seed>` takes the lock n times, each
/// time reading or writing (three in four read, drawn from the seed), writing `enter` and
/// `exit` lines (with the kind and its znode's czxid) to the log around a hold, then answers
/// `done`. Before `ready` it says `patched` if kazoo's read lock needed the corrected rule.
const KAZOO_RW_CONTENDER: &str = r#"
import os, random, re, sys, time
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock, ReadLock, WriteLock
from kazoo.retry import ForceRetryError

hosts, path, ident = sys.argv[1:4]

SEQ = re.compile(r"(-?\d{10})$")

def below_only(self, node):
    # The corrected rule: the nearest recognised contender below our own znode.
    ours = int(SEQ.search(node).group(1))
    children = self.client.get_children(self.path)
    if node not in children:
        raise ForceRetryError()
    below = []
    for child in children:
        m = self._contenders_re.search(child)
        if m is not None and int(m.group(1)) < ours:
            below.append((int(m.group(1)), child))
    return max(below)[1] if below else None

class Children(object):
    def __init__(self, names):
        self.names = names
    def get_children(self, path):
        return self.names

def waits_for_later_writers():
    probe = object.__new__(ReadLock)
    probe.path = "/probe"
    probe.client = Children(["a__lock__0000000001", "b__rlock__0000000002", "c__lock__0000000003"])
    probe.prefix = "b__rlock__"
    probe._exclude_names = set(ReadLock._EXCLUDE_NAMES)
    probe._contenders_re = re.compile(r"(?:{})(-?\d{{10}})$".format("|".join(probe._exclude_names)))
    return probe._get_predecessor("b__rlock__0000000002") != "a__lock__0000000001"

def say(line):
    print(line, flush=True)

try:
    affected = waits_for_later_writers()
except Exception as e:
    # A kazoo whose rule reads what the probe does not give: not the affected one.
    affected = False
if affected:
    Lock._get_predecessor = below_only
    say("patched")

zk = KazooClient(hosts=hosts, timeout=10)
zk.start(timeout=10)
locks = {
    "read": zk.ReadLock(path, ident, extra_lock_patterns=["__WRIT__"]),
    "write": zk.WriteLock(path, ident, extra_lock_patterns=["__READ__", "__WRIT__"]),
}
held = None

def czxid(lock):
    return zk.exists(path + "/" + lock.node).czxid

say("ready")
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] in locks:
        held = locks[cmd[0]]
        held.acquire()
        say("held %d" % czxid(held))
    elif cmd[0] == "release":
        held.release()
        held = None
        say("released")
    elif cmd[0] == "rounds":
        n, hold, log, seed = int(cmd[1]), int(cmd[2]) / 1000.0, cmd[3], int(cmd[4])
        rng = random.Random(seed)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        for _ in range(n):
            kind = "read" if rng.random() < 0.75 else "write"
            lock = locks[kind]
            lock.acquire()
            z = czxid(lock)
            os.write(fd, ("enter %s %s %d\n" % (ident, kind, z)).encode())
            time.sleep(hold)
            os.write(fd, ("exit %s %s %d\n" % (ident, kind, z)).encode())
            lock.release()
        os.close(fd)
        say("done")
zk.stop()
zk.close()
"#;

/// Start kazoo contender `name` on `path`; whether its read lock needed the corrected rule.
async fn kazoo(python: &str, name: &str, path: &str) -> (Kazoo, bool) {
    let k = Kazoo::start(python, KAZOO_RW_CONTENDER, name, &[path, name]).await;
    let patched = k.said("patched");
    (k, patched)
}

/// Our reader-writer lock `name` (on a session of its own) on `root`.
async fn ours(root: &str, name: &str, naming: NodeNaming, seed: u64) -> ZkRwLocker {
    let config = ZkConfig { session_timeout: SESSION, root: root.into(), ..ZkConfig::default() };
    let backend = ZkBackend::connect_with(&support::shared().hosts(), config).await.unwrap();
    let options = ZkLockOptions::new(Guids::seeded(seed)).with_naming(naming);
    backend.rw_locker_with(name, options).unwrap()
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

/// A contender of [`readers_share_and_writers_exclude_across_the_clients_in_queue_order`]:
/// kazoo's (by its index) or ours (by name), reading or writing.
#[derive(Debug, Clone, Copy)]
enum Who {
    Kazoo(usize),
    Ours(&'static str),
}

/// Every contender of that test, and what each holds.
struct Table {
    kazoos: Vec<Kazoo>,
    /// Our grants, as they come.
    granted: UnboundedReceiver<LockGuard>,
    /// Our guards held now.
    ours: Vec<LockGuard>,
}

impl Table {
    /// Wait until each of `group` holds, and check that no one else is granted meanwhile (long
    /// enough for a wrong grant to show: a handoff takes milliseconds). The tokens of the
    /// group.
    async fn granted_exactly(&mut self, group: &[Who]) -> Vec<u64> {
        let within = Duration::from_secs(10);
        let mut tokens = Vec::new();
        for who in group {
            match *who {
                Who::Kazoo(i) => {
                    let answer = self.kazoos[i].answer(within).await;
                    let token = answer.strip_prefix("held ").expect("kazoo holds");
                    tokens.push(token.parse().unwrap());
                }
                Who::Ours(name) => {
                    let g = tokio::time::timeout(within, self.granted.recv())
                        .await
                        .unwrap_or_else(|_| panic!("{name} not granted"))
                        .unwrap();
                    assert!(
                        group.iter().any(|w| matches!(w, Who::Ours(n) if *n == g.owner())),
                        "{} granted out of queue order (expected {group:?})",
                        g.owner()
                    );
                    tokens.push(g.token());
                    self.ours.push(g);
                }
            }
        }
        self.nobody_else().await;
        tokens
    }

    /// No one is granted now.
    async fn nobody_else(&mut self) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Ok(g) = self.granted.try_recv() {
            panic!("{} granted out of turn", g.owner());
        }
        for k in &mut self.kazoos {
            if let Some(line) = k.try_answer(Duration::from_millis(10)).await {
                panic!("kazoo's {} answered {line:?} out of turn", k.name);
            }
        }
    }

    /// `who` releases what it holds.
    async fn release(&mut self, who: Who) {
        match who {
            Who::Kazoo(i) => {
                self.kazoos[i].send("release");
                assert_eq!(self.kazoos[i].answer(Duration::from_secs(10)).await, "released");
            }
            Who::Ours(name) => {
                let at = self.ours.iter().position(|g| g.owner() == name).expect("holds");
                self.ours.remove(at).release().await.unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_exclude_across_the_clients_in_queue_order() {
    let python = python_with_kazoo();
    let root = support::unique_root("kazoo-rw");
    let dir = format!("{root}/x");
    let raw = zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(&support::shared().hosts())
        .await
        .unwrap();
    let held = ours(&root, "o0", NodeNaming::Protected, 1).await.write("x", None).await.unwrap();
    let mut kazoos = Vec::new();
    for name in ["k1", "k3", "k5"] {
        let (k, patched) = kazoo(&python, name, &dir).await;
        if patched {
            eprintln!("kazoo's {name}: its read lock waits for later writers; corrected");
        }
        kazoos.push(k);
    }
    // Queued one by one behind o0's write, both clients alternately, ours in both naming forms.
    let queue = [
        (Who::Kazoo(0), Access::Read),
        (Who::Ours("o2"), Access::Read),
        (Who::Kazoo(1), Access::Write),
        (Who::Ours("o4"), Access::Read),
        (Who::Kazoo(2), Access::Read),
        (Who::Ours("o6"), Access::Write),
    ];
    let (tx, granted) = tokio::sync::mpsc::unbounded_channel();
    for (i, (who, access)) in queue.into_iter().enumerate() {
        match who {
            Who::Kazoo(k) => kazoos[k].send(access.name()),
            Who::Ours(name) => {
                let naming = [NodeNaming::Protected, NodeNaming::Plain][i % 2];
                let locker = ours(&root, name, naming, 2 + i as u64).await;
                let tx = tx.clone();
                tokio::spawn(async move {
                    let g = locker.lock("x", access, None).await.expect("our ask is granted");
                    let _ = tx.send(g);
                    // The locker lives as long as its session must.
                    std::future::pending::<()>().await;
                });
            }
        }
        until_queued(&raw, &dir, i + 2).await;
    }
    let names = children(&raw, &dir).await;
    eprintln!("one lock's queue, both clients: {names:?}");
    for kind in ["__rlock__", "__lock__", "__READ__", "__WRIT__"] {
        assert!(names.iter().any(|n| n.contains(kind)), "{kind} in {names:?}");
    }

    let mut t = Table { kazoos, granted, ours: Vec::new() };
    t.nobody_else().await;
    let mut last = held.token();
    held.release().await.unwrap();
    // The two readers behind the write, one of each client, hold together; the writer behind
    // them waits for both.
    let readers = t.granted_exactly(&[Who::Kazoo(0), Who::Ours("o2")]).await;
    assert!(readers.iter().all(|r| *r > last), "{readers:?} after {last}");
    t.release(Who::Kazoo(0)).await;
    t.nobody_else().await;
    t.release(Who::Ours("o2")).await;
    let writer = t.granted_exactly(&[Who::Kazoo(1)]).await;
    assert!(readers.iter().all(|r| writer[0] > *r), "{writer:?} after {readers:?}");
    last = writer[0];
    t.release(Who::Kazoo(1)).await;
    let readers = t.granted_exactly(&[Who::Ours("o4"), Who::Kazoo(2)]).await;
    assert!(readers.iter().all(|r| *r > last), "{readers:?} after {last}");
    t.release(Who::Kazoo(2)).await;
    t.nobody_else().await;
    t.release(Who::Ours("o4")).await;
    let writer = t.granted_exactly(&[Who::Ours("o6")]).await;
    assert!(readers.iter().all(|r| writer[0] > *r), "{writer:?} after {readers:?}");
    t.release(Who::Ours("o6")).await;
    assert!(children(&raw, &dir).await.is_empty(), "every contender left");
}

/// One line of the shared log.
#[derive(Debug)]
struct Entry {
    enter: bool,
    who: String,
    write: bool,
    czxid: u64,
}

fn read_log(path: &Path) -> Vec<Entry> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 4, "log line {line:?}");
            Entry {
                enter: f[0] == "enter",
                who: f[1].into(),
                write: f[2] == "write",
                czxid: f[3].parse().unwrap(),
            }
        })
        .collect()
}

/// What the log says.
#[derive(Debug, Default)]
struct Verdict {
    /// Holds, reads among them.
    grants: usize,
    reads: usize,
    /// A write whose hold overlapped another hold, or that was granted before a hold queued
    /// ahead of it (a smaller czxid) ended, or after a hold queued behind it began.
    misplaced_writes: Vec<String>,
    /// The most holds at once (readers sharing).
    most_at_once: usize,
    /// Readers of the two clients holding at once, how often.
    mixed_readers: usize,
}

/// Judge the log: each hold is an enter line and an exit line, and the file's order is the
/// order those happened in. Every ask is granted in the end (no timeouts), so a write is in
/// its place when every hold queued ahead of it (by czxid) exited before it entered, and every
/// hold queued behind it entered after it exited.
fn judge(log: &[Entry]) -> Verdict {
    let mut v = Verdict::default();
    // (czxid, who) -> (enter line, exit line, write)
    let mut holds: std::collections::BTreeMap<(u64, &str), (usize, usize, bool)> =
        Default::default();
    let mut inside: Vec<&Entry> = Vec::new();
    for (i, e) in log.iter().enumerate() {
        let key = (e.czxid, e.who.as_str());
        if e.enter {
            holds.insert(key, (i, usize::MAX, e.write));
            v.grants += 1;
            v.reads += usize::from(!e.write);
            inside.push(e);
            v.most_at_once = v.most_at_once.max(inside.len());
            let kazoo_reading = inside.iter().any(|h| !h.write && h.who.starts_with('k'));
            let ours_reading = inside.iter().any(|h| !h.write && h.who.starts_with('o'));
            v.mixed_readers += usize::from(kazoo_reading && ours_reading);
        } else {
            holds.get_mut(&key).expect("an exit after its enter").1 = i;
            inside.retain(|h| (h.czxid, h.who.as_str()) != key);
        }
    }
    for (&(z, who), &(enter, exit, write)) in &holds {
        if !write {
            continue;
        }
        for (&(other, other_who), &(o_enter, o_exit, _)) in &holds {
            let misplaced = if other < z {
                o_exit > enter
            } else if other > z {
                o_enter < exit
            } else {
                false
            };
            if misplaced {
                v.misplaced_writes.push(format!(
                    "{who}'s write {z} (lines {enter}..{exit}) against {other_who}'s hold \
                     {other} (lines {o_enter}..{o_exit})"
                ));
            }
        }
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
    let path = std::env::temp_dir().join(format!("lock-zookeeper-kazoo-rw-{pid}-{tag}.log"));
    std::fs::write(&path, "").unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_ours_reading_and_writing_keep_every_write_alone_and_in_queue_order() {
    let python = python_with_kazoo();
    let (rounds, hold_ms) = (16, 30);
    let root = support::unique_root("kazoo-rw-soak");
    let dir = format!("{root}/x");
    let log = log_path("soak");
    let mut kazoos = Vec::new();
    for i in 0..3 {
        kazoos.push(kazoo(&python, &format!("k{i}"), &dir).await.0);
    }
    let mut lockers = Vec::new();
    for (i, naming) in
        [NodeNaming::Protected, NodeNaming::Plain, NodeNaming::Protected].into_iter().enumerate()
    {
        lockers.push(ours(&root, &format!("o{i}"), naming, 100 + i as u64).await);
    }
    // Everyone starts at once, so that the queue holds both clients' asks throughout.
    for (i, k) in kazoos.iter_mut().enumerate() {
        k.send(&format!("rounds {rounds} {hold_ms} {} {}", log.display(), 7 + i));
    }
    let mut tasks = Vec::new();
    for (i, locker) in lockers.into_iter().enumerate() {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                // Three in four read, as kazoo's side does (a fixed pattern per contender).
                let access = if (round + i) % 4 == 3 { Access::Write } else { Access::Read };
                let kind = access.name();
                let g = locker.lock("x", access, Some(Duration::from_secs(60))).await;
                let g = g.expect("granted");
                append(&log, &format!("enter {} {kind} {}\n", locker.owner(), g.token()));
                tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                append(&log, &format!("exit {} {kind} {}\n", locker.owner(), g.token()));
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for k in &mut kazoos {
        assert_eq!(k.answer(Duration::from_secs(120)).await, "done");
    }
    let entries = read_log(&log);
    let v = judge(&entries);
    let from = |side: char| entries.iter().filter(|e| e.enter && e.who.starts_with(side)).count();
    eprintln!(
        "{} holds ({} reads; {} kazoo, {} ours): at most {} at once, readers of both clients \
         together {} times, {} writes out of place",
        v.grants,
        v.reads,
        from('k'),
        from('o'),
        v.most_at_once,
        v.mixed_readers,
        v.misplaced_writes.len()
    );
    assert_eq!((from('k'), from('o')), (3 * rounds, 3 * rounds), "every round of both sides");
    assert!(v.misplaced_writes.is_empty(), "writes out of place: {:#?}", v.misplaced_writes);
    // Readers did share the lock (whether kazoo's and ours together at some instant is up to
    // the timing: `readers_share_and_writers_exclude_across_the_clients_in_queue_order` makes
    // them).
    assert!(v.most_at_once >= 2, "readers never held together: {entries:?}");
    let _ = std::fs::remove_file(&log);
}
