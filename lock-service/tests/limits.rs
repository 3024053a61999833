//! Limits that hold for requests in flight, and a node without users (the open mode) on which
//! one client cannot harm another: a burst of pipelined opens or asks never passes its limit;
//! without users the sessions are limited per connection (and in all), a session is acted
//! for only by the connections that opened or resumed it with its key, and a force-release
//! still tells the holder. Nodes run in this process ([`Node::start`]) on free loopback ports,
//! and the requests the Rust client never sends go on raw connections.

use crate::support;

use lock_core::{LeaseState, Locker};
use lock_service::auth::token_hash;
use lock_service::client::{ClientConfig, ServiceClient};
use lock_service::proto::{
    self, encode, ClientFrame, ErrorKind, Reply, Request, ServerFrame, SessionId,
};
use lock_service::server::Node;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A node of one, with `extra` arguments, once it leads.
async fn node(dir: &std::path::Path, extra: &[&str]) -> Arc<Node> {
    let node =
        Node::start(&support::node_args(&dir.join("data"), "limits", extra)).await.expect("start");
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.status().leader != Some(0) {
        assert!(Instant::now() < deadline, "the node did not elect itself");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node
}

/// A Rust client of `node`, with a session of its own.
async fn connect(node: &Node) -> ServiceClient {
    let endpoint = vec![node.client_addr().to_string()];
    let config = ClientConfig { ttl: Duration::from_secs(5), ..ClientConfig::default() };
    ServiceClient::connect(&endpoint, config).await.expect("connect")
}

/// A raw plain connection, for frames the client never sends.
struct Raw {
    io: TcpStream,
    next: u64,
}

impl Raw {
    /// Dial `node`, and say `Hello` as `user` with `token` if given.
    async fn dial(node: &Node, hello: Option<(&str, &str)>) -> Raw {
        let io = TcpStream::connect(node.client_addr()).await.expect("connect");
        io.set_nodelay(true).unwrap();
        let mut raw = Raw { io, next: 1 };
        if let Some((user, token)) = hello {
            let hello = Request::Hello { user: user.into(), token: token.into() };
            assert!(matches!(raw.ask(hello).await, Reply::Welcome { .. }));
        }
        raw
    }

    async fn ask(&mut self, body: Request) -> Reply {
        self.burst(vec![body]).await.remove(0)
    }

    /// Write every request in one go, then read a reply to each (pushes are skipped): the
    /// replies in the order of the requests.
    async fn burst(&mut self, bodies: Vec<Request>) -> Vec<Reply> {
        let first = self.next;
        let mut frames = Vec::new();
        for body in bodies {
            frames.extend_from_slice(&encode(&ClientFrame { id: self.next, body }));
            self.next += 1;
        }
        self.io.write_all(&frames).await.expect("write");
        let mut replies = BTreeMap::new();
        while replies.len() < (self.next - first) as usize {
            let read = proto::read_frame::<ServerFrame, _>(&mut self.io, proto::MAX_SERVER_FRAME);
            match tokio::time::timeout(Duration::from_secs(60), read).await {
                Ok(Ok(Some(ServerFrame::Reply { id, body }))) if id >= first => {
                    replies.insert(id, body);
                }
                Ok(Ok(Some(_))) => {}
                other => panic!("no reply: {other:?}"),
            }
        }
        replies.into_values().collect()
    }

    /// Open a session: its id and key.
    async fn open(&mut self) -> (SessionId, Option<String>) {
        match self.ask(Request::Open { ttl_ms: 60_000 }).await {
            Reply::Opened { session, key } => (session, key),
            other => panic!("open: {other:?}"),
        }
    }
}

fn acquire(session: SessionId, lock: &str, owner: &str) -> Request {
    Request::Acquire {
        session,
        lock: lock.into(),
        owner: owner.into(),
        wait: true,
        attempt: 1,
        share: Default::default(),
        value: None,
    }
}

/// The replies by kind (`Opened`, `Granted`, `LimitReached`, ...), and the first message of
/// each kind of error.
fn tally(replies: &[Reply]) -> (BTreeMap<String, usize>, BTreeMap<String, String>) {
    let mut kinds = BTreeMap::new();
    let mut messages = BTreeMap::new();
    for r in replies {
        let kind = match r {
            Reply::Error { kind, message } => {
                messages.entry(format!("{kind:?}")).or_insert_with(|| message.clone());
                format!("{kind:?}")
            }
            other => format!("{other:?}").split([' ', '{', '(']).next().unwrap().to_string(),
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    (kinds, messages)
}

fn forbidden(reply: &Reply) -> bool {
    matches!(reply, Reply::Error { kind: ErrorKind::Forbidden, .. })
}

/// Samples the node's live sessions until stopped: the most it saw.
fn watch_sessions(node: &Arc<Node>) -> (Arc<AtomicBool>, tokio::task::JoinHandle<usize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (node, until) = (node.clone(), stop.clone());
    let peak = tokio::spawn(async move {
        let mut peak = 0;
        while !until.load(Ordering::Relaxed) {
            peak = peak.max(node.status().sessions);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        peak.max(node.status().sessions)
    });
    (stop, peak)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_burst_of_opens_or_asks_never_passes_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let lines = format!("alice client {}\nbob client {}\n", token_hash("a"), token_hash("b"));
    std::fs::write(&users, lines).unwrap();
    let users = users.to_str().unwrap().to_string();
    let limits = ["--max-sessions-per-identity", "1024", "--max-asks-per-session", "100"];
    let mut args = vec!["--users", users.as_str()];
    args.extend_from_slice(&limits);
    let node = node(dir.path(), &args).await;

    // 1,200 opens of alice, written at once on four connections.
    let (stop, peak) = watch_sessions(&node);
    let mut bursts = Vec::new();
    for _ in 0..4 {
        let mut raw = Raw::dial(&node, Some(("alice", "a"))).await;
        bursts.push(tokio::spawn(async move {
            raw.burst(vec![Request::Open { ttl_ms: 60_000 }; 300]).await
        }));
    }
    let mut replies = Vec::new();
    for b in bursts {
        replies.extend(b.await.unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    let (kinds, messages) = tally(&replies);
    eprintln!("1,200 opens: {kinds:?}, {messages:?}; at most {peak} sessions seen");
    assert_eq!(kinds.get("Opened"), Some(&1024), "{kinds:?}");
    assert_eq!(kinds.get("LimitReached"), Some(&176), "{kinds:?}");
    assert!(messages["LimitReached"].contains("--max-sessions-per-identity 1024"), "{messages:?}");
    assert!(peak <= 1024, "{peak} sessions were live at once");
    assert_eq!(node.status().sessions, 1024);
    // Refused, not queued: alice stays at her limit.
    let mut late = Raw::dial(&node, Some(("alice", "a"))).await;
    let reply = late.ask(Request::Open { ttl_ms: 60_000 }).await;
    assert!(matches!(reply, Reply::Error { kind: ErrorKind::LimitReached, .. }), "{reply:?}");

    // 300 asks of one session of bob's for 300 free locks, written at once on two of his
    // connections (with users, any connection of the identity may act for its sessions).
    let mut first = Raw::dial(&node, Some(("bob", "b"))).await;
    let (session, key) = first.open().await;
    let mut second = Raw::dial(&node, Some(("bob", "b"))).await;
    let asks = |from: usize| -> Vec<Request> {
        (from..from + 150).map(|i| acquire(session, &format!("l{i}"), "o")).collect()
    };
    let (a, b) = tokio::join!(first.burst(asks(0)), second.burst(asks(150)));
    let (kinds, messages) = tally(&[a, b].concat());
    eprintln!("300 asks: {kinds:?}, {messages:?}");
    assert_eq!(kinds.get("Granted"), Some(&100), "{kinds:?}");
    assert_eq!(kinds.get("LimitReached"), Some(&200), "{kinds:?}");
    assert!(messages["LimitReached"].contains("--max-asks-per-session 100"), "{messages:?}");
    match first.ask(Request::Resume { session, key }).await {
        Reply::Resumed { held } => assert_eq!(held.len(), 100),
        other => panic!("resume: {other:?}"),
    }
    assert_eq!(node.status().sessions, 1025);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_open_node_one_client_cannot_take_every_session() {
    let dir = tempfile::tempdir().unwrap();
    let limits = ["--max-sessions-per-identity", "3", "--max-anonymous-sessions", "6"];
    let node = node(dir.path(), &limits).await;
    // Client A fills its connection's limit with a burst.
    let mut a = Raw::dial(&node, None).await;
    let (kinds, messages) = tally(&a.burst(vec![Request::Open { ttl_ms: 60_000 }; 10]).await);
    eprintln!("A's opens: {kinds:?}, {messages:?}");
    assert_eq!(kinds.get("Opened"), Some(&3), "{kinds:?}");
    assert!(messages["LimitReached"].contains("one connection may"), "{messages:?}");
    // Client B, on a connection of its own, still opens a session and takes a lock.
    let b = connect(&node).await;
    let guard = b.locker("b").unwrap().lock("l", Some(Duration::from_secs(5))).await.unwrap();
    assert_eq!(guard.lease_state(), LeaseState::Held);
    // A client that opens more connections meets the cap on all the sessions together.
    let mut c = Raw::dial(&node, None).await;
    let (kinds, messages) = tally(&c.burst(vec![Request::Open { ttl_ms: 60_000 }; 10]).await);
    eprintln!("C's opens: {kinds:?}, {messages:?}");
    assert_eq!(kinds.get("Opened"), Some(&2), "{kinds:?}");
    assert_eq!(node.status().sessions, 6);
    let mut d = Raw::dial(&node, None).await;
    match d.ask(Request::Open { ttl_ms: 60_000 }).await {
        Reply::Error { kind: ErrorKind::LimitReached, message } => {
            assert!(message.contains("--max-anonymous-sessions 6"), "{message}")
        }
        other => panic!("a seventh session: {other:?}"),
    }
    guard.release().await.unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_open_node_only_the_sessions_own_connections_act_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), &[]).await;
    let holder = connect(&node).await;
    let guard = holder.locker("h").unwrap().lock("l", None).await.unwrap();
    let session = holder.session_id().await;
    let mut mallory = Raw::dial(&node, None).await;
    let before = node.status().applied;
    let wrong = Some("00".repeat(32));
    let asks = [
        Request::Release { session, lock: "l".into(), owner: "h".into(), attempt: 1 },
        Request::KeepAlive { session },
        acquire(session, "m", "h"),
        Request::Observe { session, lock: "l".into() },
        Request::Proclaim {
            session,
            lock: "l".into(),
            owner: "h".into(),
            attempt: 1,
            value: b"x".to_vec(),
        },
        Request::Close { session },
        Request::Resume { session, key: None },
        Request::Resume { session, key: wrong },
    ];
    for ask in asks {
        let reply = mallory.ask(ask.clone()).await;
        assert!(forbidden(&reply), "{ask:?} → {reply:?}");
        eprintln!("{ask:?} → {reply:?}");
    }
    assert_eq!(node.status().applied, before, "a refused request commits nothing");
    // The holder still holds: its keep-alives go on, and nobody else is granted the lock.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(guard.lease_state(), LeaseState::Held);
    let other = connect(&node).await;
    assert!(other.locker("o").unwrap().try_lock("l").await.unwrap().is_none());

    // A session's own client, on a new connection, resumes it with its key and acts for it.
    let mut first = Raw::dial(&node, None).await;
    let (own, key) = first.open().await;
    assert!(key.as_ref().is_some_and(|k| k.len() == 64), "a key of 32 bytes in hex: {key:?}");
    assert!(matches!(first.ask(acquire(own, "n", "o")).await, Reply::Granted { .. }));
    drop(first);
    let mut again = Raw::dial(&node, None).await;
    let release =
        Request::Release { session: own, lock: "n".into(), owner: "o".into(), attempt: 1 };
    assert!(forbidden(&again.ask(release.clone()).await), "not before it resumed");
    match again.ask(Request::Resume { session: own, key }).await {
        Reply::Resumed { held } => assert_eq!(held.len(), 1),
        other => panic!("resume with the key: {other:?}"),
    }
    assert_eq!(again.ask(release).await, Reply::Released);
    assert_eq!(again.ask(Request::Close { session: own }).await, Reply::Closed);
    guard.release().await.unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_open_node_a_force_release_tells_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), &[]).await;
    let holder = connect(&node).await;
    let guard = holder.locker("h").unwrap().lock("l", None).await.unwrap();
    let anyone = connect(&node).await;
    assert!(anyone.force_release("l").await.unwrap(), "the lock was held");
    let told = tokio::time::timeout(Duration::from_secs(2), guard.lost()).await;
    let reason = told.expect("the holder is told within 2 s").reason;
    assert!(reason.contains("force-released by anyone"), "{reason}");
    assert_eq!(node.status().forced_releases, 1);
    let next = anyone.locker("o").unwrap().try_lock("l").await.unwrap().expect("free now");
    assert!(next.token() > guard.token());
    next.release().await.unwrap();
    node.shutdown().await;
}
