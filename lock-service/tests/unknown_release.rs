//! A release whose outcome the client cannot learn at once (its connection cut, its leader
//! silent) is sent again until the outcome is known, and the owner's next ask for the lock is
//! never handed the old grant again: its token is greater. Found by the nemesis test, where a
//! contender whose release met "no leader answered within 5s" was told "granted, token 857"
//! twice in a row.

use crate::support;

use lock_core::{LockError, LockGuard, Locker};
use lock_service::client::{ClientConfig, ServiceClient, ServiceLocker};
use lock_service::proto::{self, ClientFrame, ErrorKind, Held, Reply, Request, ServerFrame};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_servers::{Proxy, ServiceCluster};
use tokio::task::JoinHandle;

/// Long enough for the client to give up on one request many times over while its session
/// stands; the fault lasts [`OUTAGE`].
const TTL: Duration = Duration::from_secs(20);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
const OUTAGE: Duration = Duration::from_secs(3);

async fn one_node() -> Arc<ServiceCluster> {
    Arc::new(tokio::task::spawn_blocking(|| support::cluster(1)).await.expect("cluster"))
}

/// A locker dialling only `endpoint` (a proxy the test cuts, say): it neither follows leader
/// hints nor learns the members' addresses, which would lead it around the proxy.
async fn locker(endpoint: String, owner: &str) -> ServiceLocker {
    let config = ClientConfig {
        ttl: TTL,
        request_timeout: REQUEST_TIMEOUT,
        follow_leader_hints: false,
        ..ClientConfig::default()
    };
    let client = ServiceClient::connect(&[endpoint], config).await.expect("connect");
    client.locker(owner).expect("locker")
}

/// Release `guard` while a fault (begun by the caller) lasts; end the fault with `heal` after
/// [`OUTAGE`] (several request timeouts) and wait for the release's outcome.
async fn release_through_outage(guard: LockGuard, heal: impl FnOnce()) {
    let release: JoinHandle<Result<(), LockError>> = tokio::spawn(guard.release());
    tokio::time::sleep(OUTAGE).await;
    let gave_up = release.is_finished();
    heal();
    assert!(
        !gave_up,
        "the release gave up while its outcome was unknown: {:?}",
        release.await.expect("release task")
    );
    tokio::time::timeout(TTL, release)
        .await
        .expect("the release's outcome is known within a TTL once the fault ends")
        .expect("release task")
        .expect("the release committed");
}

/// After the release: the lock is free for another owner (the release committed), and the
/// first owner's next grant has a greater token than both.
async fn next_grants_are_new(first: &ServiceLocker, other: &ServiceLocker, lock: &str, old: u64) {
    let g = other.try_lock(lock).await.expect("try_lock").expect("the released lock is free");
    assert!(g.token() > old, "token {} after {old}", g.token());
    let between = g.token();
    g.release().await.expect("release");
    let again = first.lock(lock, Some(Duration::from_secs(10))).await.expect("lock again");
    assert!(again.token() > between, "token {} after {between}", again.token());
    again.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_off_from_the_service_is_sent_again_and_the_next_grant_is_new() {
    let cluster = one_node().await;
    let proxy = Proxy::start(cluster.client_addr(0)).await;
    let first = locker(proxy.addr().to_string(), "first").await;
    let other = locker(cluster.endpoints()[0].clone(), "other").await;
    let g = first.lock("cut", None).await.expect("lock");
    let token = g.token();
    proxy.cut();
    release_through_outage(g, || proxy.heal()).await;
    next_grants_are_new(&first, &other, "cut", token).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_to_a_silent_leader_is_sent_again_and_the_next_grant_is_new() {
    let cluster = one_node().await;
    let first = locker(cluster.endpoints()[0].clone(), "first").await;
    let other = locker(cluster.endpoints()[0].clone(), "other").await;
    let g = first.lock("silent", None).await.expect("lock");
    let token = g.token();
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.pause(0)).await.unwrap().expect("pause");
    let c = cluster.clone();
    release_through_outage(g, move || c.resume(0).expect("resume")).await;
    next_grants_are_new(&first, &other, "silent", token).await;
}

/// A leader that answers sessions, keep-alives and asks as the service does, and answers every
/// release `Unavailable` until told otherwise: a release whose outcome stays unknown while the
/// session stands. It notes every ask and release, and how a release was answered.
struct Leader {
    addr: String,
    seen: Arc<Mutex<Vec<(Request, bool)>>>,
    releases: Arc<AtomicBool>,
}

impl Leader {
    async fn start() -> Leader {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen: Arc<Mutex<Vec<(Request, bool)>>> = Arc::default();
        let releases = Arc::new(AtomicBool::new(false));
        let (s, r) = (seen.clone(), releases.clone());
        tokio::spawn(async move {
            let held: Arc<Mutex<Vec<Held>>> = Arc::default();
            while let Ok((stream, _)) = listener.accept().await {
                let (s, r, held) = (s.clone(), r.clone(), held.clone());
                tokio::spawn(async move {
                    let (mut rd, mut wr) = stream.into_split();
                    while let Ok(Some(ClientFrame { id, body })) =
                        proto::read_frame::<ClientFrame, _>(&mut rd, proto::MAX_CLIENT_FRAME).await
                    {
                        let reply = Leader::answer(&body, &r, &held);
                        if matches!(body, Request::Acquire { .. } | Request::Release { .. }) {
                            s.lock().unwrap().push((body, reply == Reply::Released));
                        }
                        let frame = ServerFrame::Reply { id, body: reply };
                        if proto::write_frame(&mut wr, &frame).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Leader { addr, seen, releases }
    }

    fn answer(request: &Request, releases: &AtomicBool, held: &Mutex<Vec<Held>>) -> Reply {
        let mut held = held.lock().unwrap();
        match request {
            Request::Open { .. } => Reply::Opened { session: 1, key: None },
            Request::Resume { .. } => Reply::Resumed { held: held.clone() },
            Request::KeepAlive { .. } => Reply::Alive,
            Request::Acquire { lock, owner, attempt, .. } => {
                held.push((lock.clone(), owner.clone(), 100 + attempt, *attempt));
                Reply::Granted { token: 100 + attempt }
            }
            Request::Release { .. } if !releases.load(Ordering::SeqCst) => Reply::Error {
                kind: ErrorKind::Unavailable,
                message: "no quorum (the test's leader)".into(),
            },
            Request::Release { lock, owner, attempt, .. } => {
                let before = held.len();
                held.retain(|(l, o, _, a)| (l, o, a) != (lock, owner, attempt));
                if held.len() < before {
                    Reply::Released
                } else {
                    Reply::NotHeld
                }
            }
            other => Reply::Error {
                kind: ErrorKind::BadRequest,
                message: format!("the test's leader does not serve {other:?}"),
            },
        }
    }

    /// Where in what it saw the first ask of `attempt` is.
    fn ask_at(&self, attempt: u64) -> Option<usize> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .position(|(r, _)| matches!(r, Request::Acquire { attempt: a, .. } if *a == attempt))
    }

    /// Where in what it saw a release of `attempt` was answered `Released`.
    fn released_at(&self, attempt: u64) -> Option<usize> {
        self.seen.lock().unwrap().iter().position(|(r, ok)| {
            *ok && matches!(r, Request::Release { attempt: a, .. } if *a == attempt)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_still_unknown_is_sent_again_before_the_next_ask_of_its_lock() {
    let leader = Leader::start().await;
    // The release is sent again for a whole TTL before it is given up on; keep-alives (every
    // TTL/3) keep the session meanwhile.
    let ttl = Duration::from_secs(6);
    let config = ClientConfig { ttl, request_timeout: REQUEST_TIMEOUT, ..ClientConfig::default() };
    let client =
        ServiceClient::connect(std::slice::from_ref(&leader.addr), config).await.expect("connect");
    let locker = client.locker("owner").unwrap();
    let g = locker.lock("unsettled", None).await.expect("lock");
    let e = g.release().await.expect_err("no release can be answered");
    let text = e.to_string();
    assert!(e.backend_kind().is_some_and(|k| k.is_transient()), "{text}");
    assert!(text.contains("unknown outcome") && text.contains("sent again"), "{text}");
    // While the release cannot be answered, the next ask is not sent.
    locker.lock("unsettled", None).await.expect_err("an ask behind an unknown release");
    assert_eq!(leader.ask_at(2), None, "asked again before the release's outcome was known");
    leader.releases.store(true, Ordering::SeqCst);
    let again = locker.lock("unsettled", None).await.expect("lock once the release is answered");
    let (released, asked) = (leader.released_at(1), leader.ask_at(2));
    assert!(
        released.zip(asked).is_some_and(|(r, a)| r < a),
        "the first ask's release (answered at {released:?}) must come before the next ask \
         ({asked:?})"
    );
    again.release().await.expect("release");
}
