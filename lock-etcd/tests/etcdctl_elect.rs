//! Our election and etcd's own tool in one election: `etcdctl elect <name> <value>` (a
//! process that campaigns with etcd's `concurrency.Election`, prints its key and value once
//! elected, and resigns when interrupted) and `etcdctl elect -l <name>` (which prints the
//! leader's key and value at every change) against our candidates and observers, on the name
//! [`EtcdBackend::election_name`] gives.
//!
//! Each test needs `etcdctl` (Debian's `etcd-client`) and fails saying so when it is missing.

use crate::support;

use lock_core::election::{Elector, Leader, Observer};
use lock_core::LockError;
use lock_etcd::EtcdBackend;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::sync::mpsc;

/// The lease TTL of our candidates.
const TTL: Duration = Duration::from_secs(2);
/// How long etcdctl may take to start, connect and say something.
const SPEAKS_WITHIN: Duration = Duration::from_secs(15);

/// A running `etcdctl elect`: its output lines as they come; interrupted (so that it resigns)
/// by [`Etcdctl::interrupt`], killed when dropped.
struct Etcdctl {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Etcdctl {
    /// `etcdctl elect <args>` against the test binary's etcd.
    fn elect(args: &[&str]) -> Etcdctl {
        let endpoint = format!("http://{}", support::shared().addr());
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoint}"))
            .arg("elect")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run etcdctl ({e}): these tests need etcd's command-line client, \
                     Debian's package etcd-client (apt-get install -y etcd-client)"
                )
            });
        let stdout = child.stdout.take().expect("etcdctl's stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Etcdctl { child, lines }
    }

    /// The next (key, value) etcdctl prints, within `within`.
    async fn next_pair(&mut self, within: Duration) -> (String, String) {
        let key = self.line(within).await;
        let value = self.line(within).await;
        (key, value)
    }

    async fn line(&mut self, within: Duration) -> String {
        tokio::time::timeout(within, self.lines.recv())
            .await
            .expect("etcdctl printed nothing in time")
            .expect("etcdctl exited")
    }

    /// Whether etcdctl prints nothing for `quiet`.
    async fn silent_for(&mut self, quiet: Duration) -> bool {
        tokio::time::timeout(quiet, self.lines.recv()).await.is_err()
    }

    /// Interrupt it as a user would (SIGINT: it resigns or stops observing) and wait for it.
    fn interrupt(mut self) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill -INT");
        assert!(status.success(), "kill -INT failed");
        let _ = self.child.wait();
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A backend of our own on the test etcd (each contender on its own lease).
async fn backend(fx: &support::EtcdFixture, name: &str) -> EtcdBackend {
    fx.backend(name).await
}

/// The last segment of a key: a candidate's lease in hex.
fn lease_of(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

/// Wait until `e` sees a leader for which `check` holds.
async fn leader_becomes(
    e: &dyn Elector,
    election: &str,
    check: impl Fn(&Option<Leader>) -> bool,
) -> Option<Leader> {
    let until = tokio::time::Instant::now() + SPEAKS_WITHIN;
    loop {
        let leader = e.leader(election).await.expect("leader");
        if check(&leader) {
            return leader;
        }
        assert!(tokio::time::Instant::now() < until, "the leader stayed {leader:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One leader at a time whichever client campaigns: while etcdctl leads our candidate is not
/// elected (and sees etcdctl's value and lease); once etcdctl resigns ours is, with a greater
/// term; while ours leads a second etcdctl is not elected, and it is once ours resigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_and_our_candidates_take_turns_one_leader_at_a_time() {
    let fx = support::EtcdFixture::new("elect-turns", TTL).await;
    let ours = backend(&fx, "ours").await;
    let name = ours.election_name("turns");
    let elector = ours.elector("ours").expect("elector");

    let mut first = Etcdctl::elect(&[&name, "ctl-first"]);
    let (ctl_key, ctl_value) = first.next_pair(SPEAKS_WITHIN).await;
    assert!(ctl_key.starts_with(&format!("{name}/")), "etcdctl's key {ctl_key} under {name}/");
    assert_eq!(ctl_value, "ctl-first");
    let seen = elector.leader("turns").await.expect("leader").expect("etcdctl leads");
    assert_eq!(seen.value, b"ctl-first");
    assert_eq!(seen.owner, lease_of(&ctl_key), "a foreign leader is named by its lease");
    let ctl_term = seen.term;

    match elector.campaign("turns", b"ours".to_vec(), Some(TTL * 2)).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("elected beside etcdctl's leader: {other:?}"),
    }
    let waiting = {
        let elector = ours.elector("ours").expect("elector");
        tokio::spawn(async move { elector.campaign("turns", b"ours".to_vec(), None).await })
    };
    tokio::time::sleep(TTL).await;
    assert!(!waiting.is_finished(), "our candidate was elected while etcdctl led");
    first.interrupt();
    let leadership = tokio::time::timeout(SPEAKS_WITHIN, waiting)
        .await
        .expect("our candidate elected once etcdctl resigned")
        .expect("candidate task")
        .expect("campaign");
    assert!(leadership.term() > ctl_term, "term {} after {ctl_term}", leadership.term());

    let mut second = Etcdctl::elect(&[&name, "ctl-second"]);
    assert!(second.silent_for(TTL * 2).await, "etcdctl was elected while our candidate led");
    let our_term = leadership.term();
    leadership.resign().await.expect("resign");
    let (key, value) = second.next_pair(SPEAKS_WITHIN).await;
    assert_eq!(value, "ctl-second");
    let seen = leader_becomes(&elector, "turns", |l| l.is_some()).await.expect("a leader");
    assert_eq!((seen.owner.as_str(), seen.value.as_slice()), (lease_of(&key), &b"ctl-second"[..]));
    assert!(seen.term > our_term, "etcdctl's term {} after ours {our_term}", seen.term);
    second.interrupt();
    leader_becomes(&elector, "turns", Option::is_none).await;
}

/// The observer's next change.
async fn next(observer: &mut Observer) -> Option<Leader> {
    tokio::time::timeout(SPEAKS_WITHIN, observer.changed())
        .await
        .expect("a change observed in time")
        .expect("the observation goes on")
}

/// Our observer follows etcdctl's candidates: nobody, etcdctl's leader with its value and
/// lease, nobody again once it resigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_observer_sees_etcdctls_leader_and_value() {
    let fx = support::EtcdFixture::new("elect-observed", TTL).await;
    let ours = backend(&fx, "observer").await;
    let name = ours.election_name("observed");
    let elector = ours.elector("observer").expect("elector");
    let mut observer = elector.observe("observed").await.expect("observe");
    assert_eq!(next(&mut observer).await, None, "first: nobody leads");
    let mut ctl = Etcdctl::elect(&[&name, "from etcdctl"]);
    let seen = next(&mut observer).await.expect("etcdctl's leader");
    assert_eq!(seen.value, b"from etcdctl");
    let (key, _) = ctl.next_pair(SPEAKS_WITHIN).await;
    assert_eq!(seen.owner, lease_of(&key));
    ctl.interrupt();
    assert_eq!(next(&mut observer).await, None, "nobody once etcdctl resigned");
}

/// etcdctl's observer follows our candidates: our leader's value, then its proclamation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctls_observer_sees_our_leader_and_its_proclamation() {
    let fx = support::EtcdFixture::new("elect-listened", TTL).await;
    let ours = backend(&fx, "candidate").await;
    let name = ours.election_name("listened");
    let elector = ours.elector("candidate").expect("elector");
    let mut listener = Etcdctl::elect(&["-l", &name]);
    // etcdctl's observer prints nothing while nobody leads.
    assert!(listener.silent_for(Duration::from_secs(1)).await, "etcdctl made up a leader");
    let mut leadership =
        elector.campaign("listened", b"ours-1".to_vec(), None).await.expect("campaign");
    let (key, value) = listener.next_pair(SPEAKS_WITHIN).await;
    assert_eq!(value, "ours-1");
    assert_eq!(key, format!("{name}/{:x}", ours.lease_id()), "our key is Go's: <pfx>/<lease hex>");
    leadership.proclaim(b"ours-2".to_vec()).await.expect("proclaim");
    let (_, value) = listener.next_pair(SPEAKS_WITHIN).await;
    assert_eq!(value, "ours-2");
    assert!(!leadership.is_lost(), "our own proclamation taken for a stranger's write");
    leadership.resign().await.expect("resign");
    listener.interrupt();
}
