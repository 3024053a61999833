//! A burst of pipelined requests at the leader of a 3-node cluster: clients write thousands
//! of acquires and releases without waiting for their replies. The leader serves them as fast
//! as it can, but its heartbeats and its peers' votes never wait behind them: the term and
//! the leader are the same before and after (no election), every request is answered by the
//! leader (none is told `NotLeader`), and a bystander's acquires of another lock during the
//! burst are served promptly.

use crate::support;

use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use lock_service::proto::{
    decode, encode, read_bytes, send, ClientFrame, Reply, Request, ServerFrame, MAX_SERVER_FRAME,
};
use lock_service::tls::BoxIo;
use std::collections::BTreeMap;
use std::time::Duration;
use support::SecuredCluster;
use test_servers::ServiceCluster;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Connections of the burst.
const CONNECTIONS: usize = 3;
/// Requests each writes without waiting for a reply.
const PER_CONNECTION: u64 = 2000;
/// How long every reply of the burst may take to come (a loaded 2-core machine).
const BURST_DEADLINE: Duration = Duration::from_secs(120);
/// The longest a bystander's acquire may take during the burst: a loose bound, for a loaded
/// machine. The slowest was 40 to 85 ms with a load of 6 on 2 cores; a node that let the
/// burst queue ahead of it made it wait up to 1.3 s, and an election (300 to 600 ms of
/// timeout, then the vote and the client's search for the new leader) 1.3 to 2 s.
const BYSTANDER_BOUND: Duration = Duration::from_millis(600);
/// The bystander's median acquire during the burst at most: 15 to 30 ms on a machine with a
/// load of 6 on its 2 cores; 250 to 800 ms when the burst queued ahead of it.
const BYSTANDER_TYPICAL: Duration = Duration::from_millis(100);

/// Every node's `(leader, term)`, read from its status, straight from its client port.
fn terms(cluster: &ServiceCluster) -> Vec<(Option<u64>, u64)> {
    (0..cluster.len())
        .map(|i| {
            let json = test_servers::service_status(cluster.direct_addr(i).port())
                .unwrap_or_else(|e| panic!("node {i}'s status: {e}"));
            match decode::<ServerFrame>(json.as_bytes()) {
                Ok(ServerFrame::Reply { body: Reply::Status(s), .. }) => (s.leader, s.term),
                other => panic!("node {i} answered its status with {other:?}"),
            }
        })
        .collect()
}

/// A connection to the node at `addr`: plain, or over TLS and logged in as `user` of
/// `secured`.
async fn dial(addr: &str, secured: Option<(&SecuredCluster, &str)>) -> BoxIo {
    let tcp = TcpStream::connect(addr).await.expect("connect to the leader");
    tcp.set_nodelay(true).unwrap();
    let Some((cluster, user)) = secured else {
        return Box::new(tcp);
    };
    let connector = lock_service::tls::client_connector(&cluster.tls()).expect("connector");
    let mut s = lock_service::tls::connect(&connector, addr, tcp).await.expect("TLS");
    let c = cluster.credentials(user);
    let hello = Request::Hello { user: c.user.clone(), token: c.password.expose().to_string() };
    match ask(&mut s, 1, hello).await {
        Reply::Welcome { .. } => s,
        other => panic!("hello: {other:?}"),
    }
}

/// Send `body` on `s` and read its reply (no other request is in flight).
async fn ask(s: &mut BoxIo, id: u64, body: Request) -> Reply {
    send(s, &encode(&ClientFrame { id, body })).await.expect("write");
    let bytes = read_bytes(s, MAX_SERVER_FRAME).await.expect("read").expect("a reply");
    match decode::<ServerFrame>(&bytes).expect("a server frame") {
        ServerFrame::Reply { id: got, body } if got == id => body,
        other => panic!("expected the reply to {id}, got {other:?}"),
    }
}

/// One connection of the burst: open a session on `s`, then write `PER_CONNECTION` acquires
/// and releases (each release the previous acquire's) in one go and read every reply. The
/// count of replies by kind.
async fn burst(mut s: BoxIo, tag: usize) -> BTreeMap<String, usize> {
    let session = match ask(&mut s, 2, Request::Open { ttl_ms: 60_000 }).await {
        Reply::Opened { session, .. } => session,
        other => panic!("open: {other:?}"),
    };
    let mut frames = Vec::new();
    for i in 0..PER_CONNECTION {
        let (lock, owner, attempt) = (format!("burst-{tag}-{}", i / 2), format!("o{tag}"), i / 2);
        let body = if i % 2 == 0 {
            Request::Acquire {
                session,
                lock,
                owner,
                wait: false,
                attempt: attempt + 1,
                share: Default::default(),
                value: None,
            }
        } else {
            Request::Release { session, lock, owner, attempt: attempt + 1 }
        };
        frames.extend_from_slice(&encode(&ClientFrame { id: 100 + i, body }));
    }
    let (mut rd, mut wr) = tokio::io::split(s);
    let writer = tokio::spawn(async move {
        send(&mut wr, &frames).await.expect("write the burst");
        wr
    });
    let mut kinds = BTreeMap::new();
    for _ in 0..PER_CONNECTION {
        let bytes = read_bytes(&mut rd, MAX_SERVER_FRAME)
            .await
            .expect("read a reply of the burst")
            .expect("the leader closed a connection of the burst");
        let kind = match decode::<ServerFrame>(&bytes).expect("a server frame") {
            ServerFrame::Reply { body: Reply::Error { kind, .. }, .. } => format!("{kind:?}"),
            ServerFrame::Reply { body, .. } => {
                format!("{body:?}").split([' ', '{', '(']).next().unwrap_or_default().to_string()
            }
            ServerFrame::Push(p) => panic!("a push on a session that never waits: {p:?}"),
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    drop(writer.await.expect("writer"));
    kinds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_pipelined_requests_deposes_no_leader_and_stalls_no_bystander() {
    let cluster = tokio::task::spawn_blocking(|| support::cluster(3)).await.expect("cluster");
    survives_a_burst(&cluster, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_tls_deposes_no_leader_and_stalls_no_bystander() {
    let secured = tokio::task::spawn_blocking(|| SecuredCluster::start(3, &["burst", "bystander"]))
        .await
        .expect("cluster");
    survives_a_burst(&secured.cluster, Some(&secured)).await;
}

/// Run the burst at `cluster` (secured, when `secured` is given) and check what it did.
async fn survives_a_burst(cluster: &ServiceCluster, secured: Option<&SecuredCluster>) {
    // The bystander reaches the nodes straight, not through the test's proxies, which also
    // carry the burst's replication between the nodes.
    let direct: Vec<String> =
        (0..cluster.len()).map(|i| cluster.direct_addr(i).to_string()).collect();
    let mut config = ClientConfig {
        ttl: Duration::from_secs(10),
        follow_leader_hints: false,
        ..ClientConfig::default()
    };
    if let Some(s) = secured {
        config.credentials = Some(s.credentials("bystander"));
        config.tls = Some(s.tls());
    }
    let bystander = ServiceClient::connect(&direct, config).await.expect("connect");
    let bystander = bystander.locker("bystander").expect("locker");
    // One acquire before the burst: the bystander's session and connection are warm.
    bystander.lock("quiet", None).await.expect("lock").release().await.expect("release");

    let leader = tokio::task::block_in_place(|| cluster.wait_for_leader(Duration::from_secs(10)))
        .expect("a leader");
    let before = tokio::task::block_in_place(|| terms(cluster));
    let addr = cluster.direct_addr(leader).to_string();
    let mut bursts = Vec::new();
    for tag in 0..CONNECTIONS {
        let s = dial(&addr, secured.map(|s| (s, "burst"))).await;
        bursts.push(tokio::spawn(burst(s, tag)));
    }
    let started = Instant::now();

    // The bystander asks for another lock, again and again, while the burst is served.
    let mut latencies = Vec::new();
    tokio::time::sleep(Duration::from_millis(50)).await;
    while latencies.is_empty() || bursts.iter().any(|b| !b.is_finished()) && latencies.len() < 20 {
        let asked = Instant::now();
        let g = tokio::time::timeout(Duration::from_secs(30), bystander.lock("quiet", None))
            .await
            .expect("the bystander's acquire never completed")
            .expect("the bystander's acquire failed");
        latencies.push(asked.elapsed());
        g.release().await.expect("the bystander's release");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut kinds = BTreeMap::new();
    for b in bursts {
        let tally = tokio::time::timeout_at(started + BURST_DEADLINE, b)
            .await
            .expect("the burst was not answered in time")
            .expect("burst connection");
        for (k, n) in tally {
            *kinds.entry(k).or_insert(0) += n;
        }
    }
    let served = started.elapsed();
    let after = tokio::task::block_in_place(|| terms(cluster));
    let mut sorted = latencies.clone();
    sorted.sort();
    let (median, worst) = (sorted[sorted.len() / 2], sorted[sorted.len() - 1]);
    eprintln!(
        "{} requests on {CONNECTIONS} connections answered in {served:?}: {kinds:?}; \
         leader and term of each node before {before:?}, after {after:?}; \
         the bystander's {} acquires took {latencies:?} (median {median:?}, worst {worst:?})",
        CONNECTIONS as u64 * PER_CONNECTION,
        latencies.len(),
    );
    assert_eq!(before, after, "the burst changed the leader or the term: an election");
    assert!(
        !kinds.contains_key("NotLeader") && !kinds.contains_key("Unavailable"),
        "the leader refused part of the burst: {kinds:?}"
    );
    assert!(
        worst < BYSTANDER_BOUND,
        "a bystander's acquire waited {worst:?} during the burst (all: {latencies:?})"
    );
    assert!(
        median < BYSTANDER_TYPICAL,
        "the bystander's acquires took {median:?} (median) during the burst: they waited \
         behind it (all: {latencies:?})"
    );
}
