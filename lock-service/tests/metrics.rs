//! The HTTP endpoint of `--metrics-addr`: `/metrics` counts what the node applied (and
//! `promtool` accepts it), `/health` says 200 only with a leader known and the log applied,
//! and bad HTTP is refused without disturbing the locks. Nodes run in this process
//! ([`Node::start`]) on free loopback ports.

use crate::support;

use clap::Parser;
use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use lock_service::proto::{self, ClientFrame, Reply, Request, ServerFrame};
use lock_service::server::{Node, ServerArgs};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Send `request` as is and read the whole answer (the server closes after it): its status
/// and body. `None` when the connection closed without an answer.
async fn http_raw(addr: SocketAddr, request: &[u8]) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).await.expect("connect to the metrics endpoint");
    s.write_all(request).await.ok()?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut answer))
        .await
        .expect("the endpoint closes after its answer")
        .ok()?;
    let text = String::from_utf8(answer).expect("a text answer");
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    http_raw(addr, request.as_bytes()).await.expect("an answer")
}

/// The value of the sample `name` (no labels) in a text exposition.
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample {name} in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

/// Poll `/health` until it answers `status`, for up to `within`.
async fn health_becomes(addr: SocketAddr, status: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (got, body) = get(addr, "/health").await;
        if got == status {
            return body;
        }
        assert!(Instant::now() < deadline, "/health stayed {got}, not {status}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn metrics_node(dir: &std::path::Path) -> (Arc<Node>, SocketAddr) {
    let args = support::node_args(dir, "metrics", &["--metrics-addr", "127.0.0.1:0"]);
    let node = Node::start(&args).await.expect("start");
    let addr = node.metrics_addr().expect("the node reports where it serves metrics");
    (node, addr)
}

async fn client_of(node: &Node) -> ServiceClient {
    let addr = node.client_addr().to_string();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ServiceClient::connect(std::slice::from_ref(&addr), ClientConfig::default()).await
            {
                Ok(c) => return c,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("the node elects itself")
}

/// One request on a raw connection, and its reply.
async fn call(s: &mut TcpStream, id: u64, body: Request) -> Reply {
    proto::write_frame(s, &ClientFrame { id, body }).await.unwrap();
    loop {
        match proto::read_frame::<ServerFrame, _>(s, proto::MAX_SERVER_FRAME).await.unwrap() {
            Some(ServerFrame::Reply { id: got, body }) if got == id => return body,
            Some(_) => continue,
            None => panic!("the node closed the connection"),
        }
    }
}

/// Run `promtool check metrics` on `body`; a machine without promtool fails the test.
fn promtool_check(body: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("promtool not found: install Debian's prometheus package (promtool)")
        }
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed: {}{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_grants_releases_waits_and_expiries_and_promtool_accepts_them() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = metrics_node(dir.path()).await;
    let client = client_of(&node).await;

    // A grant and its release; the node records when the grant was applied while it is held.
    let a = client.locker("a").unwrap();
    let g = a.lock("one", None).await.unwrap();
    let token = g.token();
    let since = node.grant_times().since("one", token).expect("a held grant has its instant");
    assert!(since <= Instant::now());
    assert_eq!(node.grant_times().len(), 1);
    g.release().await.unwrap();
    assert_eq!(node.grant_times().since("one", token), None, "an ended grant is forgotten");

    // A wait: "c" queues behind "b" and is handed the lock by b's release.
    let (b, c) = (client.locker("b").unwrap(), client.locker("c").unwrap());
    let held = b.lock("two", None).await.unwrap();
    let waiter = tokio::spawn(async move { c.lock("two", Some(Duration::from_secs(10))).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while sample(&get(addr, "/metrics").await.1, "lock_service_waiters") < 1.0 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release().await.unwrap();
    waiter.await.unwrap().expect("granted after the release").release().await.unwrap();

    // An expiry: a session on a raw connection takes a lock and goes silent.
    let mut raw = TcpStream::connect(node.client_addr()).await.unwrap();
    let session = match call(&mut raw, 1, Request::Open { ttl_ms: 300 }).await {
        Reply::Opened { session, .. } => session,
        other => panic!("not opened: {other:?}"),
    };
    let ask = Request::Acquire {
        session,
        lock: "three".into(),
        owner: "silent".into(),
        wait: true,
        attempt: 1,
        share: Default::default(),
        value: None,
    };
    assert!(matches!(call(&mut raw, 2, ask).await, Reply::Granted { .. }));
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        if sample(&body, "lock_service_session_expirations_total") >= 1.0 {
            break body;
        }
        assert!(Instant::now() < deadline, "the silent session never expired:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    assert_eq!(sample(&body, "lock_service_grants_total"), 4.0, "{body}");
    assert_eq!(sample(&body, "lock_service_releases_total"), 3.0, "{body}");
    assert_eq!(sample(&body, "lock_service_session_expirations_total"), 1.0, "{body}");
    assert_eq!(sample(&body, "lock_service_forced_releases_total"), 0.0, "{body}");
    assert_eq!(sample(&body, "lock_service_wait_seconds_count"), 1.0, "{body}");
    assert!(sample(&body, "lock_service_wait_seconds_sum") > 0.0, "{body}");
    assert_eq!(sample(&body, "lock_service_hold_seconds_count"), 4.0, "{body}");
    assert_eq!(sample(&body, "lock_service_grants_held"), 0.0, "{body}");
    assert_eq!(sample(&body, "lock_service_waiters"), 0.0, "{body}");
    assert!(sample(&body, "lock_service_commit_seconds_count") >= 6.0, "{body}");
    assert!(sample(&body, "lock_service_log_sync_seconds_count") >= 1.0, "{body}");
    assert_eq!(sample(&body, "lock_service_raft_is_leader"), 1.0, "{body}");
    assert_eq!(sample(&body, "lock_service_raft_leader_id"), 0.0, "{body}");
    assert!(sample(&body, "lock_service_raft_term") >= 1.0, "{body}");
    let applied = sample(&body, "lock_service_raft_applied_index");
    assert!(applied >= 6.0, "{body}");
    assert!(sample(&body, "lock_service_raft_commit_index") >= applied, "{body}");
    assert!(node.grant_times().is_empty(), "no grant is held");
    promtool_check(&body);
    node.shutdown().await;
}

/// The arguments of node `id` of the cluster `spec`, serving metrics on a free port.
fn cluster_args(dir: &std::path::Path, id: u64, spec: &str) -> ServerArgs {
    let dir = dir.join(id.to_string());
    let id = id.to_string();
    ServerArgs::try_parse_from([
        "lock-server",
        "--id",
        &id,
        "--cluster",
        spec,
        "--data-dir",
        dir.to_str().unwrap(),
        "--init",
        "--metrics-addr",
        "127.0.0.1:0",
    ])
    .expect("arguments")
}

fn cluster_spec(n: u64) -> String {
    (0..n)
        .map(|id| {
            let (peer, client) = (test_servers::free_port(), test_servers::free_port());
            format!("{id}=127.0.0.1:{peer}/127.0.0.1:{client}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_200_with_a_leader_and_503_without() {
    // A single node, once it has elected itself.
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = metrics_node(&dir.path().join("single")).await;
    let body = health_becomes(addr, 200, Duration::from_secs(10)).await;
    assert!(body.contains("\"healthy\":true"), "{body}");
    node.shutdown().await;

    // One node of three, started alone: no leader, whatever the wait.
    let spec = cluster_spec(3);
    let alone = Node::start(&cluster_args(&dir.path().join("alone"), 0, &spec)).await.unwrap();
    let alone_addr = alone.metrics_addr().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, body) = get(alone_addr, "/health").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no leader known"), "{body}");
    alone.shutdown().await;

    // Every node of a running cluster of three.
    let spec = cluster_spec(3);
    let mut nodes = Vec::new();
    for id in 0..3 {
        nodes.push(Node::start(&cluster_args(&dir.path().join("three"), id, &spec)).await.unwrap());
    }
    for node in &nodes {
        let body = health_becomes(node.metrics_addr().unwrap(), 200, Duration::from_secs(20)).await;
        assert!(body.contains("\"leader\":"), "{body}");
    }
    let leaders: f64 = {
        let mut sum = 0.0;
        for node in &nodes {
            sum += sample(
                &get(node.metrics_addr().unwrap(), "/metrics").await.1,
                "lock_service_raft_is_leader",
            );
        }
        sum
    };
    assert_eq!(leaders, 1.0, "one node leads");
    for node in nodes {
        node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_is_refused_and_the_node_keeps_serving_locks() {
    let dir = tempfile::tempdir().unwrap();
    let (node, addr) = metrics_node(dir.path()).await;
    let client = client_of(&node).await;
    let locker = client.locker("holder").unwrap();
    let held = locker.lock("kept", None).await.unwrap();

    // Garbage, and a request line that is not HTTP.
    assert_eq!(http_raw(addr, b"\x00\x01garbage\r\n\r\n").await.map(|a| a.0), Some(400));
    assert_eq!(http_raw(addr, b"GET /metrics SPDY/3\r\n\r\n").await.map(|a| a.0), Some(400));
    // Not served: another path, another method.
    assert_eq!(get(addr, "/admin").await.0, 404);
    assert_eq!(http_raw(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await.map(|a| a.0), Some(405));
    // A head over the bound: refused, the connection closed.
    let oversized = |filler: usize| {
        let mut head = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', filler));
        head.extend_from_slice(b"\r\n\r\n");
        head
    };
    assert_eq!(http_raw(addr, &oversized(20 * 1024)).await.map(|a| a.0), Some(400));
    // Far over it, the connection may be reset before the whole was sent: refused either way.
    let far = http_raw(addr, &oversized(1024 * 1024)).await;
    assert!(far.as_ref().is_none_or(|a| a.0 == 400), "{far:?}");
    // A request that never ends: answered 408 and closed at the read deadline.
    let started = Instant::now();
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), slow.read_to_end(&mut answer))
        .await
        .expect("closed at the read deadline")
        .unwrap();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(started.elapsed() >= Duration::from_secs(4), "{:?}", started.elapsed());

    // Meanwhile and after, the locks are served and so are well-formed requests.
    assert!(!held.is_lost());
    let other = client.locker("other").unwrap();
    assert!(other.try_lock("kept").await.unwrap().is_none());
    held.release().await.unwrap();
    other.lock("kept", Some(Duration::from_secs(5))).await.unwrap().release().await.unwrap();
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(sample(&body, "lock_service_grants_total"), 2.0, "{body}");
    assert_eq!(get(addr, "/health").await.0, 200);
    node.shutdown().await;
}
