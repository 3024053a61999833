//! Group commit on a real node: many connections' commands sent together share log entries
//! (far fewer entries are applied than commands were committed), each command still gets its
//! own answer, and the tokens stay distinct and rise for every lock.

use crate::support;

use lock_service::proto::{
    decode, encode, read_bytes, send, ClientFrame, Reply, Request, ServerFrame, MAX_SERVER_FRAME,
};
use std::collections::{BTreeMap, BTreeSet};
use test_servers::ServiceCluster;
use tokio::net::TcpStream;

/// Connections sending at once.
const CONNECTIONS: usize = 32;
/// Locks each connection asks for, in one write.
const LOCKS: usize = 20;

/// The node's last applied log index, read from its status.
fn applied(cluster: &ServiceCluster) -> u64 {
    let json = test_servers::service_status(cluster.direct_addr(0).port()).expect("status");
    match decode::<ServerFrame>(json.as_bytes()) {
        Ok(ServerFrame::Reply { body: Reply::Status(s), .. }) => s.applied.unwrap_or(0),
        other => panic!("status answered {other:?}"),
    }
}

/// Write `requests` on `s` in one go and read their replies, in request order.
async fn pipeline(s: &mut TcpStream, first_id: u64, requests: Vec<Request>) -> Vec<Reply> {
    let mut frames = Vec::new();
    for (i, body) in requests.iter().cloned().enumerate() {
        frames.extend_from_slice(&encode(&ClientFrame { id: first_id + i as u64, body }));
    }
    send(s, &frames).await.expect("write");
    let mut replies = BTreeMap::new();
    while replies.len() < requests.len() {
        let bytes = read_bytes(s, MAX_SERVER_FRAME).await.expect("read").expect("a reply");
        match decode::<ServerFrame>(&bytes).expect("a server frame") {
            ServerFrame::Reply { id, body } => replies.insert(id, body),
            ServerFrame::Push(p) => panic!("a push to a session that waits for nothing: {p:?}"),
        };
    }
    replies.into_values().collect()
}

/// One connection: open a session, then ask for its `LOCKS` locks in one write, release them
/// all in one write, and ask again: the tokens of both rounds, per lock.
async fn client(addr: String, tag: usize) -> Vec<(String, u64, u64)> {
    let mut s = TcpStream::connect(&addr).await.expect("connect");
    s.set_nodelay(true).unwrap();
    let session = match pipeline(&mut s, 1, vec![Request::Open { ttl_ms: 60_000 }]).await[..] {
        [Reply::Opened { session, .. }] => session,
        ref other => panic!("open: {other:?}"),
    };
    let locks: Vec<String> = (0..LOCKS).map(|j| format!("group-{tag}-{j}")).collect();
    let acquire = |attempt: u64| -> Vec<Request> {
        locks
            .iter()
            .map(|lock| Request::Acquire {
                session,
                lock: lock.clone(),
                owner: "o".into(),
                wait: true,
                attempt,
                share: Default::default(),
                value: None,
            })
            .collect()
    };
    let tokens = |replies: Vec<Reply>| -> Vec<u64> {
        replies
            .into_iter()
            .map(|r| match r {
                Reply::Granted { token } => token,
                other => panic!("a free lock answered {other:?}"),
            })
            .collect()
    };
    let first = tokens(pipeline(&mut s, 100, acquire(1)).await);
    let releases = locks
        .iter()
        .map(|lock| Request::Release { session, lock: lock.clone(), owner: "o".into(), attempt: 1 })
        .collect();
    for reply in pipeline(&mut s, 200, releases).await {
        assert!(matches!(reply, Reply::Released), "release answered {reply:?}");
    }
    let second = tokens(pipeline(&mut s, 300, acquire(2)).await);
    locks.into_iter().zip(first).zip(second).map(|((l, a), b)| (l, a, b)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_sent_together_share_entries_and_keep_tokens_distinct_and_rising() {
    let cluster = support::cluster(1);
    let addr = cluster.direct_addr(0).to_string();
    let before = applied(&cluster);
    let clients: Vec<_> =
        (0..CONNECTIONS).map(|tag| tokio::spawn(client(addr.clone(), tag))).collect();
    let mut rounds = Vec::new();
    for c in clients {
        rounds.extend(c.await.expect("a client"));
    }
    let entries = applied(&cluster) - before;
    // Opens, two rounds of acquires and one of releases.
    let commands = (CONNECTIONS * (1 + 3 * LOCKS)) as u64;
    assert!(
        entries * 2 < commands,
        "{commands} commands sent together took {entries} log entries: not gathered"
    );
    let mut seen = BTreeSet::new();
    for (lock, first, second) in &rounds {
        assert!(second > first, "{lock}: token {second} after {first}");
        assert!(seen.insert(*first) && seen.insert(*second), "{lock}: a token answered twice");
    }
}
