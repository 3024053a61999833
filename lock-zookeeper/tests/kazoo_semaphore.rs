//! Interoperability of the semaphore with one no one here wrote: kazoo's `Semaphore` and our
//! [`ZkSemaphore`] take permits of one semaphore path on the test binary's ZooKeeper. Both
//! keep the size in the path's data and check it, take kazoo's admission lock
//! (`<path>-__lock__`) to count and create leases, and count every child of the path as one
//! permit held: never more than N permits are held, whichever client holds them, and a size
//! other than the stored one is refused on both sides.
//!
//! [`ZkSemaphore`]: lock_zookeeper::ZkSemaphore

use crate::support;
use crate::support::kazoo::{python_with_kazoo, Kazoo};

use lock_core::{LockError, Semaphore, UsageError};
use lock_zookeeper::{Guids, NodeNaming, ZkBackend, ZkConfig, ZkLockOptions, ZkSemaphore};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use zookeeper_client as zk;

const SESSION: Duration = Duration::from_secs(4);

/// The kazoo side: one contender on its own session with a `Semaphore` of the path, driven by
/// lines on stdin and answering on stdout. `acquire` blocks in `acquire()` and then answers
/// `held`; `try` answers `held` or `busy`; either answers `mismatch` if kazoo refuses the
/// size; `release` answers `released`; `rounds <n> <hold ms> <log>` takes a permit n times,
/// writing `enter` and `exit` lines to the log around a hold, then answers `done`.
const KAZOO_SEMAPHORE: &str = r#"
import os, sys, time
from kazoo.client import KazooClient

hosts, path, ident, size = sys.argv[1:5]
zk = KazooClient(hosts=hosts, timeout=10)
zk.start(timeout=10)
sem = zk.Semaphore(path, ident, max_leases=int(size))

def say(line):
    print(line, flush=True)

say("ready")
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] in ("acquire", "try"):
        try:
            got = sem.acquire(blocking=(cmd[0] == "acquire"))
            say("held" if got else "busy")
        except ValueError:
            say("mismatch")
    elif cmd[0] == "release":
        sem.release()
        say("released")
    elif cmd[0] == "rounds":
        n, hold, log = int(cmd[1]), int(cmd[2]) / 1000.0, cmd[3]
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        for _ in range(n):
            sem.acquire()
            os.write(fd, ("enter %s 1\n" % ident).encode())
            time.sleep(hold)
            os.write(fd, ("exit %s 1\n" % ident).encode())
            sem.release()
        os.close(fd)
        say("done")
zk.stop()
zk.close()
"#;

/// Start kazoo contender `name` with a semaphore of `size` permits on `path`.
async fn kazoo(python: &str, name: &str, path: &str, size: u32) -> Kazoo {
    Kazoo::start(python, KAZOO_SEMAPHORE, name, &[path, name, &size.to_string()]).await
}

/// Our semaphore `name` (on a session of its own) on `root`, and its backend.
async fn ours(root: &str, name: &str, naming: NodeNaming, seed: u64) -> (ZkSemaphore, ZkBackend) {
    let config = ZkConfig { session_timeout: SESSION, root: root.into(), ..ZkConfig::default() };
    let backend = ZkBackend::connect_with(&support::shared().hosts(), config).await.unwrap();
    let options = ZkLockOptions::new(Guids::seeded(seed)).with_naming(naming);
    (backend.semaphore_with(name, options).unwrap(), backend)
}

/// How many permits the semaphore's path says are held: its children.
async fn leases(raw: &zk::Client, dir: &str) -> usize {
    raw.list_children(dir).await.unwrap_or_default().len()
}

/// Wait until `dir` has `n` children.
async fn until_children(raw: &zk::Client, dir: &str, n: usize) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while leases(raw, dir).await != n {
        assert!(tokio::time::Instant::now() < until, "{dir}: expected {n} children");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// kazoo's `k` answers nothing for a while: it waits.
async fn waits(k: &mut Kazoo) {
    if let Some(line) = k.try_answer(Duration::from_millis(500)).await {
        panic!("kazoo's {} answered {line:?} while every permit was held", k.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_ours_count_each_others_permits() {
    let python = python_with_kazoo();
    let root = support::unique_root("kazoo-sem");
    let (sem_id, size) = ("s", 3);
    let raw = zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(&support::shared().hosts())
        .await
        .unwrap();
    let (o1, backend) = ours(&root, "o1", NodeNaming::Protected, 1).await;
    let dir = backend.lock_dir(sem_id);
    // Ours first: it makes the semaphore's node with its size, as kazoo writes it.
    let two = o1.acquire(sem_id, size, 2, None).await.unwrap();
    assert_eq!(raw.get_data(&dir).await.unwrap().0, b"3", "the size in the path's data");
    let mut k1 = kazoo(&python, "k1", &dir, size).await;
    let mut k2 = kazoo(&python, "k2", &dir, size).await;
    k1.send("acquire");
    assert_eq!(k1.answer(Duration::from_secs(10)).await, "held", "kazoo takes the third permit");
    assert_eq!(leases(&raw, &dir).await, 3);
    // All three held, two of them ours, one kazoo's: ours counts kazoo's, so a fourth is refused
    // to ours, at once or after a wait, with no one else in line...
    let (o2, _b2) = ours(&root, "o2", NodeNaming::Plain, 2).await;
    until_children(&raw, &backend.admission_dir(sem_id), 0).await;
    assert!(o2.try_acquire(sem_id, size, 1).await.unwrap().is_none(), "a fourth permit");
    let short = Some(Duration::from_millis(500));
    match o2.acquire(sem_id, size, 1, short).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("a fourth permit: expected a timeout, got {other:?}"),
    }
    // ... and kazoo counts ours: a fourth waits, whichever client asks.
    k2.send("acquire");
    waits(&mut k2).await;
    assert!(o2.try_acquire(sem_id, size, 1).await.unwrap().is_none(), "a fourth permit");
    let (o3, _b3) = ours(&root, "o3", NodeNaming::Protected, 3).await;
    let waiting = tokio::spawn(async move {
        let p = o3.acquire(sem_id, size, 1, None).await.expect("our waiter is granted");
        (p, o3)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "our acquire was granted a fourth permit");
    assert_eq!(leases(&raw, &dir).await, 3, "{:?}", raw.list_children(&dir).await);
    // Our two permits go: kazoo's waiter (first in line) and ours (behind it) take them.
    let tokens = two.tokens().to_vec();
    two.release().await.unwrap();
    assert_eq!(k2.answer(Duration::from_secs(10)).await, "held");
    let (p3, _o3) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("our waiter granted once permits were free")
        .unwrap();
    assert!(p3.tokens()[0] > *tokens.iter().max().unwrap(), "{:?} after {tokens:?}", p3.tokens());
    assert_eq!(leases(&raw, &dir).await, 3);
    // Full again: kazoo's next waits until kazoo's first leaves.
    let mut k3 = kazoo(&python, "k3", &dir, size).await;
    k3.send("acquire");
    waits(&mut k3).await;
    k1.send("release");
    assert_eq!(k1.answer(Duration::from_secs(10)).await, "released");
    assert_eq!(k3.answer(Duration::from_secs(10)).await, "held");
    for k in [&mut k2, &mut k3] {
        k.send("release");
        assert_eq!(k.answer(Duration::from_secs(10)).await, "released");
    }
    p3.release().await.unwrap();
    assert_eq!(leases(&raw, &dir).await, 0, "every permit released");
    until_children(&raw, &backend.admission_dir(sem_id), 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_clients_refuse_a_size_other_than_the_stored_one() {
    let python = python_with_kazoo();
    let root = support::unique_root("kazoo-sem-size");
    let (ours_3, backend) = ours(&root, "o", NodeNaming::Protected, 1).await;
    // Made by ours with 3: kazoo with 4 is refused.
    let dir = backend.lock_dir("a");
    ours_3.acquire("a", 3, 1, None).await.unwrap().release().await.unwrap();
    let mut k = kazoo(&python, "k4", &dir, 4).await;
    k.send("try");
    assert_eq!(k.answer(Duration::from_secs(10)).await, "mismatch");
    // Made by kazoo with 2: ours with 3 is refused, and holds nothing.
    let dir = backend.lock_dir("b");
    let mut k = kazoo(&python, "k2", &dir, 2).await;
    k.send("acquire");
    assert_eq!(k.answer(Duration::from_secs(10)).await, "held");
    match ours_3.acquire("b", 3, 1, Some(Duration::from_secs(10))).await {
        Err(LockError::Usage(UsageError::LimitMismatch { asked: 3, stored: 2, .. })) => {}
        other => panic!("expected the size to be refused, got {other:?}"),
    }
    // With kazoo's size, ours takes the other permit.
    let p = ours_3.try_acquire("b", 2, 1).await.unwrap().expect("the second of two permits");
    k.send("release");
    assert_eq!(k.answer(Duration::from_secs(10)).await, "released");
    p.release().await.unwrap();
}

/// The most permits the log shows held at once: each hold is an enter line and an exit line,
/// and the file's order is the order those happened in (a hold is logged inside the real one,
/// so the real count at any instant is at least the logged one).
fn most_held(path: &Path) -> (usize, u32, usize, usize) {
    let (mut held, mut most, mut kazoo, mut ours) = (0i64, 0i64, 0, 0);
    let text = std::fs::read_to_string(path).unwrap();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 3, "log line {line:?}");
        let k: i64 = f[2].parse().unwrap();
        if f[0] == "enter" {
            held += k;
            most = most.max(held);
            if f[1].starts_with('k') {
                kazoo += 1;
            } else {
                ours += 1;
            }
        } else {
            held -= k;
        }
    }
    (text.lines().count() / 2, most as u32, kazoo, ours)
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
    let path = std::env::temp_dir().join(format!("lock-zookeeper-kazoo-sem-{pid}-{tag}.log"));
    std::fs::write(&path, "").unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_ours_contending_never_hold_more_than_n_permits() {
    let python = python_with_kazoo();
    let (rounds, hold_ms, size) = (12, 20, 3);
    let root = support::unique_root("kazoo-sem-soak");
    let log = log_path("soak");
    let mut sems = Vec::new();
    for (i, naming) in
        [NodeNaming::Protected, NodeNaming::Plain, NodeNaming::Protected].into_iter().enumerate()
    {
        sems.push(ours(&root, &format!("o{i}"), naming, 100 + i as u64).await);
    }
    let dir = sems[0].1.lock_dir("s");
    let mut kazoos = Vec::new();
    for i in 0..3 {
        kazoos.push(kazoo(&python, &format!("k{i}"), &dir, size).await);
    }
    // Everyone starts at once, so that both clients' asks contend throughout.
    for k in &mut kazoos {
        k.send(&format!("rounds {rounds} {hold_ms} {}", log.display()));
    }
    let mut tasks = Vec::new();
    for (i, (sem, backend)) in sems.into_iter().enumerate() {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                // One or two permits, a fixed pattern per contender.
                let k = 1 + ((round + i) % 2) as u32;
                let p = sem.acquire("s", size, k, Some(Duration::from_secs(60))).await;
                let p = p.expect("granted");
                append(&log, &format!("enter {} {k}\n", sem.owner()));
                tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                append(&log, &format!("exit {} {k}\n", sem.owner()));
                p.release().await.unwrap();
            }
            drop(backend);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for k in &mut kazoos {
        assert_eq!(k.answer(Duration::from_secs(120)).await, "done");
    }
    let (holds, most, kazoo_holds, our_holds) = most_held(&log);
    eprintln!(
        "{holds} holds ({kazoo_holds} kazoo, {our_holds} ours) of a semaphore of {size}: at most \
         {most} permits held at once"
    );
    assert_eq!((kazoo_holds, our_holds), (3 * rounds, 3 * rounds), "every round of both sides");
    assert!(
        most <= size,
        "{most} permits of {size} held at once: {:?}",
        std::fs::read_to_string(&log)
    );
    assert!(most >= 2, "permits were never held together");
    let _ = std::fs::remove_file(&log);
}
