//! Interoperability of the election with one no one here wrote: kazoo's `Election` and our
//! [`ZkElector`] campaign on one path of the test binary's ZooKeeper. kazoo's `Election` is a
//! kazoo `Lock` whose znodes hold the candidate's identifier; ours end in the same `__lock__`
//! and hold the candidate's value. Both take the lowest sequence number for the leader, so the
//! candidates of both clients are elected one at a time, in the order they queued; ours read
//! kazoo's leader (owner and value: its identifier), and kazoo's `contenders()` lists our
//! values in that order.
//!
//! [`ZkElector`]: lock_zookeeper::ZkElector

use crate::support;
use crate::support::kazoo::{python_with_kazoo, Kazoo};

use lock_core::election::{Elector, Leader, Leadership, Observer};
use lock_core::LockError;
use lock_zookeeper::ZkElector;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

/// The session timeout of every candidate, ours and kazoo's: how long a candidate that
/// crashed keeps its place.
const SESSION: Duration = Duration::from_secs(2);

/// How long an election may take once its leader's session ended: the session timeout, the
/// server's tick, and margin for a loaded 2-core machine.
const HANDOFF: Duration = Duration::from_secs(6);

/// The kazoo side: one candidate on its own session (timeout 2 s) with an `Election` of the
/// path, its identifier the candidate's name, driven by lines on stdin and answering on
/// stdout. `run` campaigns in a thread of its own, which answers `leading` once elected and
/// leads until `resign`, then answers `resigned`; `contenders` answers kazoo's `contenders()`
/// as JSON. Killed (the `Kazoo` dropped), it leaves its session to expire, as a crash does.
const KAZOO_ELECTION: &str = r#"
import json, sys, threading
from kazoo.client import KazooClient

hosts, path, ident = sys.argv[1:4]
zk = KazooClient(hosts=hosts, timeout=2.0)
zk.start(timeout=10)
election = zk.Election(path, ident)
resign = threading.Event()

def say(line):
    print(line, flush=True)

def lead():
    say("leading")
    resign.wait()

def run():
    election.run(lead)
    say("resigned")

say("ready")
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "run":
        threading.Thread(target=run, daemon=True).start()
    elif cmd[0] == "resign":
        resign.set()
    elif cmd[0] == "contenders":
        say(json.dumps(election.contenders()))
"#;

/// Start kazoo candidate `name` on the election at `path`, and let it campaign.
async fn kazoo(python: &str, name: &str, path: &str) -> Kazoo {
    let mut k = Kazoo::start(python, KAZOO_ELECTION, name, &[path, name]).await;
    k.send("run");
    k
}

/// kazoo's `k` says nothing for a while: it is not elected.
async fn not_elected(k: &mut Kazoo) {
    if let Some(line) = k.try_answer(Duration::from_millis(300)).await {
        panic!("kazoo's {} answered {line:?} while another led", k.name);
    }
}

/// What kazoo's `k` lists as the election's contenders, in its order.
async fn contenders(k: &mut Kazoo) -> String {
    k.send("contenders");
    k.answer(Duration::from_secs(10)).await
}

/// kazoo's `contenders()` answer for `names`, as Python's `json.dumps` writes it.
fn listed(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Our candidate campaigning with `value`, in a task of its own.
fn campaign(e: &Arc<ZkElector>, value: &str) -> JoinHandle<Leadership> {
    let (e, value) = (e.clone(), value.as_bytes().to_vec());
    tokio::spawn(async move { e.campaign("e", value, None).await.expect("campaign") })
}

/// Our campaign `c`, elected within `within`.
async fn elected(c: JoinHandle<Leadership>, within: Duration) -> Leadership {
    tokio::time::timeout(within, c).await.expect("our candidate elected in time").unwrap()
}

/// The observer's next change, within `within`.
async fn next(o: &mut Observer, within: Duration) -> Option<Leader> {
    tokio::time::timeout(within, o.changed())
        .await
        .expect("a change observed in time")
        .expect("the observation goes on")
}

/// Wait until the election's directory has `n` candidates: the one just started has queued.
async fn until_queued(raw: &zk::Client, dir: &str, n: usize) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while raw.list_children(dir).await.unwrap_or_default().len() != n {
        assert!(tokio::time::Instant::now() < until, "{dir}: expected {n} candidates");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_ours_elect_one_leader_at_a_time_in_sequence_order() {
    let python = python_with_kazoo();
    let fx = support::ZkFixture::new("kazoo-election", SESSION).await;
    let watcher = fx.backend("observer").await;
    let path = watcher.lock_dir("e");
    let raw = zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(&support::shared().hosts())
        .await
        .unwrap();
    let observer = watcher.elector("observer").unwrap();
    let mut seen = observer.observe("e").await.unwrap();
    assert_eq!(next(&mut seen, HANDOFF).await, None, "nobody leads at first");

    // In line: kazoo's k1, our o1, kazoo's k2, our o2, each queued before the next comes.
    let mut k1 = kazoo(&python, "k1", &path).await;
    assert_eq!(k1.answer(Duration::from_secs(10)).await, "leading");
    let o1 = Arc::new(fx.backend("o1").await.elector("o1").unwrap());
    let c1 = campaign(&o1, "o1:v1");
    until_queued(&raw, &path, 2).await;
    let mut k2 = kazoo(&python, "k2", &path).await;
    until_queued(&raw, &path, 3).await;
    let o2 = Arc::new(fx.backend("o2").await.elector("o2").unwrap());
    let c2 = campaign(&o2, "o2:v1");
    until_queued(&raw, &path, 4).await;

    // kazoo leads: ours see it (its identifier is its owner and its value), and wait.
    let k1_leads = next(&mut seen, HANDOFF).await.expect("kazoo's leader observed");
    assert_eq!((k1_leads.owner.as_str(), &k1_leads.value[..]), ("k1", &b"k1"[..]));
    assert_eq!(observer.leader("e").await.unwrap(), Some(k1_leads.clone()));
    not_elected(&mut k2).await;
    assert!(!c1.is_finished() && !c2.is_finished(), "ours elected while kazoo's led");
    // kazoo lists every candidate in sequence order, ours by their values.
    assert_eq!(contenders(&mut k1).await, listed(&["k1", "o1:v1", "k2", "o2:v1"]));

    // kazoo's leader crashes: once its session expires, ours (next in line) is elected.
    drop(k1);
    let mut l1 = elected(c1, HANDOFF).await;
    assert!(l1.term() > k1_leads.term, "term {} after kazoo's {}", l1.term(), k1_leads.term);
    let o1_leads = Leader { owner: "o1".into(), value: b"o1:v1".to_vec(), term: l1.term() };
    assert_eq!(next(&mut seen, HANDOFF).await, Some(o1_leads));
    not_elected(&mut k2).await;
    assert!(!c2.is_finished(), "two of ours elected at once");
    // Our proclamation is what kazoo lists for us.
    l1.proclaim(b"o1:v2".to_vec()).await.unwrap();
    assert_eq!(next(&mut seen, HANDOFF).await.map(|l| l.value), Some(b"o1:v2".to_vec()));
    assert_eq!(contenders(&mut k2).await, listed(&["o1:v2", "k2", "o2:v1"]));
    assert!(!l1.is_lost(), "our own proclamation taken for a stranger's rewrite");

    // Our leader is cut off, as a crash would: told at once; kazoo's k2 elected once its
    // session expired, and ours behind k2 still waits.
    fx.with_proxy("o1", |p| p.cut());
    tokio::time::timeout(HANDOFF, l1.lost()).await.expect("our cut-off leader told");
    assert_eq!(k2.answer(HANDOFF).await, "leading");
    let k2_leads = next(&mut seen, HANDOFF).await.expect("kazoo's second leader observed");
    assert_eq!((k2_leads.owner.as_str(), &k2_leads.value[..]), ("k2", &b"k2"[..]));
    assert!(k2_leads.term > l1.term(), "term {} after ours {}", k2_leads.term, l1.term());
    match l1.proclaim(b"o1:v3".to_vec()).await {
        Err(LockError::Usage(lock_core::UsageError::NotLeader { .. })) => {}
        other => panic!("a deposed leader proclaimed: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!c2.is_finished(), "ours elected while kazoo's led");

    // kazoo resigns: ours is elected at once.
    k2.send("resign");
    assert_eq!(k2.answer(Duration::from_secs(10)).await, "resigned");
    let l2 = elected(c2, Duration::from_secs(5)).await;
    assert!(l2.term() > k2_leads.term);
    let o2_leads = Leader { owner: "o2".into(), value: b"o2:v1".to_vec(), term: l2.term() };
    assert_eq!(next(&mut seen, HANDOFF).await, Some(o2_leads));
    assert_eq!(contenders(&mut k2).await, listed(&["o2:v1"]));
    l2.resign().await.unwrap();
    assert_eq!(next(&mut seen, HANDOFF).await, None, "nobody leads at the end");
}
