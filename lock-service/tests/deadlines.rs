//! A client connection costs the node something only while its client does: a connection
//! that stays silent before its `Hello` is closed at the hello deadline, and thousands of
//! connections each holding half a frame cost about what was sent of them, all of it given
//! back when they close.

use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use lock_service::proto::{self, ClientFrame, Reply, Request, ServerFrame, MAX_CLIENT_FRAME};
use std::time::{Duration, Instant};
use test_servers::{LockService, ServiceServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections each holding half a frame.
const HALF_SENT: usize = 2000;

/// A node of its own (one node, reached straight), started with `args`.
async fn node(args: Vec<String>) -> ServiceServer {
    tokio::task::spawn_blocking(move || {
        ServiceServer::launch_node(
            LockService::new(env!("CARGO_BIN_EXE_lock-server")).with_args(&args),
        )
        .expect("start a node")
    })
    .await
    .expect("node")
}

/// The pid of the node listening for clients on `port` (a child of this test).
fn pid_of(port: u16) -> u32 {
    let listen = format!("127.0.0.1:{port}");
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").expect("/proc") {
        let Ok(pid) = entry.expect("entry").file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let listens =
            args.windows(2).any(|w| w[0] == b"--listen-client" && w[1] == listen.as_bytes());
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let child = status.lines().any(|l| l.starts_with("PPid:") && l.ends_with(me.as_str()));
        if listens && child {
            return pid;
        }
    }
    panic!("no child process listens for clients on {listen}")
}

/// The resident memory of process `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number")
}

/// Let this process open as many files as it may (the node, its child, inherits it).
fn raise_file_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit are given a valid rlimit to read or fill.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    limit.rlim_cur
}

/// Open `n` connections to `addr`, each announcing a frame of the largest size a client may
/// send and sending 16 bytes of it.
async fn half_sent(addr: &str, n: usize) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut half = MAX_CLIENT_FRAME.to_be_bytes().to_vec();
        half.extend_from_slice(br#"{"id":1,"body":{"#);
        s.write_all(&half).await.expect("half a frame");
        conns.push(s);
    }
    conns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_holding_half_a_frame_give_their_memory_back_when_closed() {
    let limit = raise_file_limit();
    assert!(
        limit > 2 * HALF_SENT as u64 + 200,
        "this test needs {} open files, and may have {limit}",
        2 * HALF_SENT + 200
    );
    let node = node(Vec::new()).await;
    let pid = pid_of(node.port);
    let addr = node.endpoint();

    // Warm up: a session that locks, and a few hundred connections opened and closed, so that
    // the baseline counts the node's runtime and allocator as they are once serving.
    let client = ServiceClient::connect(std::slice::from_ref(&addr), ClientConfig::default())
        .await
        .expect("connect");
    let locker = client.locker("warm").expect("locker");
    for _ in 0..10 {
        locker.lock("warm", None).await.expect("lock").release().await.expect("release");
    }
    drop(half_sent(&addr, 200).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = rss_kb(pid);

    let conns = half_sent(&addr, HALF_SENT).await;
    // The node has read what each sent once a request behind them all is answered.
    let mut probe = TcpStream::connect(&addr).await.expect("connect");
    proto::write_frame(&mut probe, &ClientFrame { id: 1, body: Request::Status }).await.unwrap();
    let answer = proto::read_frame::<ServerFrame, _>(&mut probe, proto::MAX_SERVER_FRAME).await;
    assert!(matches!(answer, Ok(Some(ServerFrame::Reply { body: Reply::Status(_), .. }))));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = rss_kb(pid);
    drop(conns);
    drop(probe);

    // The allocator may take a moment to give pages back: look a few times.
    let bound = baseline + baseline / 10;
    let mut after = rss_kb(pid);
    for _ in 0..20 {
        if after <= bound {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = rss_kb(pid);
    }
    eprintln!(
        "node RSS: {baseline} kB after warm-up, {held} kB with {HALF_SENT} connections each \
         holding half a frame ({} bytes each), {after} kB once they closed",
        (held.saturating_sub(baseline) * 1024) / HALF_SENT as u64
    );
    assert!(
        after <= bound,
        "the node kept {after} kB after {HALF_SENT} half-sent connections closed, from \
         {baseline} kB before (at most {bound} kB allowed)"
    );
    // The node still serves.
    locker.lock("warm", None).await.expect("lock").release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_says_hello_is_closed_at_the_hello_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let token = test_servers::random_password();
    let line = format!("alice client {}", lock_service::auth::token_hash(&token));
    std::fs::write(&users, line).unwrap();
    let hello = Duration::from_millis(500);
    let args = vec![
        "--users".to_string(),
        users.to_str().unwrap().to_string(),
        "--hello-timeout-ms".into(),
        hello.as_millis().to_string(),
    ];
    let node = node(args).await;
    let addr = node.endpoint();

    // Silent from the start, and one that only asks for the status: both closed.
    let opened = Instant::now();
    let silent = TcpStream::connect(&addr).await.expect("connect");
    let mut probing = TcpStream::connect(&addr).await.expect("connect");
    proto::write_frame(&mut probing, &ClientFrame { id: 1, body: Request::Status }).await.unwrap();
    let answer = proto::read_frame::<ServerFrame, _>(&mut probing, proto::MAX_SERVER_FRAME).await;
    assert!(matches!(answer, Ok(Some(ServerFrame::Reply { body: Reply::Status(_), .. }))));
    // A connection that says who it is stays open past the deadline.
    let mut known = TcpStream::connect(&addr).await.expect("connect");
    let body = Request::Hello { user: "alice".into(), token };
    proto::write_frame(&mut known, &ClientFrame { id: 1, body }).await.unwrap();
    let answer = proto::read_frame::<ServerFrame, _>(&mut known, proto::MAX_SERVER_FRAME).await;
    assert!(matches!(answer, Ok(Some(ServerFrame::Reply { body: Reply::Welcome { .. }, .. }))));

    for (what, mut s) in [("a silent connection", silent), ("a status prober", probing)] {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf)).await;
        let closed_after = opened.elapsed();
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "{what} was not closed within 20 s of a {hello:?} hello deadline: {read:?}"
        );
        assert!(
            closed_after >= hello,
            "{what} was closed after {closed_after:?}, before {hello:?}"
        );
        eprintln!("{what} was closed {closed_after:?} after connecting");
    }
    proto::write_frame(&mut known, &ClientFrame { id: 2, body: Request::Status }).await.unwrap();
    let answer = proto::read_frame::<ServerFrame, _>(&mut known, proto::MAX_SERVER_FRAME).await;
    assert!(
        matches!(answer, Ok(Some(ServerFrame::Reply { body: Reply::Status(_), .. }))),
        "the authenticated connection was closed too: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_frame_and_an_idle_connection_without_a_session_are_closed_at_their_deadlines() {
    let (frame, idle) = (Duration::from_millis(500), Duration::from_millis(1500));
    let args = vec![
        "--frame-timeout-ms".to_string(),
        frame.as_millis().to_string(),
        "--idle-timeout-ms".into(),
        idle.as_millis().to_string(),
    ];
    let node = node(args).await;
    let addr = node.endpoint();
    let status = ClientFrame { id: 1, body: Request::Status };

    // Half a frame, after a whole one: closed a frame's deadline after its first byte.
    let mut half = TcpStream::connect(&addr).await.expect("connect");
    proto::write_frame(&mut half, &status).await.unwrap();
    let answer = proto::read_frame::<ServerFrame, _>(&mut half, proto::MAX_SERVER_FRAME).await;
    assert!(matches!(answer, Ok(Some(ServerFrame::Reply { body: Reply::Status(_), .. }))));
    let started = Instant::now();
    half.write_all(&100u32.to_be_bytes()).await.unwrap();
    half.write_all(b"{\"id\":").await.unwrap();
    // An idle connection without a session: one frame, then nothing.
    let mut idler = TcpStream::connect(&addr).await.expect("connect");
    let heard = Instant::now();
    proto::write_frame(&mut idler, &status).await.unwrap();
    let answer = proto::read_frame::<ServerFrame, _>(&mut idler, proto::MAX_SERVER_FRAME).await;
    assert!(matches!(answer, Ok(Some(ServerFrame::Reply { body: Reply::Status(_), .. }))));
    // A session's connection outlives the idle deadline.
    let mut serving = TcpStream::connect(&addr).await.expect("connect");
    let open = ClientFrame { id: 1, body: Request::Open { ttl_ms: 60_000 } };
    proto::write_frame(&mut serving, &open).await.unwrap();
    let answer = proto::read_frame::<ServerFrame, _>(&mut serving, proto::MAX_SERVER_FRAME).await;
    assert!(matches!(answer, Ok(Some(ServerFrame::Reply { body: Reply::Opened { .. }, .. }))));

    // The half frame is answered with why, then closed.
    let why = proto::read_frame::<ServerFrame, _>(&mut half, proto::MAX_SERVER_FRAME).await;
    let after = started.elapsed();
    match why {
        Ok(Some(ServerFrame::Reply { body: Reply::Error { message, .. }, .. })) => {
            assert!(message.contains("in time"), "{message}")
        }
        other => panic!("expected an error naming the deadline, got {other:?}"),
    }
    assert!(after >= frame && after < frame * 20, "closed {after:?} after half a frame");
    let mut buf = [0u8; 16];
    assert!(matches!(half.read(&mut buf).await, Ok(0) | Err(_)), "still open");

    let read = tokio::time::timeout(Duration::from_secs(20), idler.read(&mut buf)).await;
    let after = heard.elapsed();
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the idle connection stayed open: {read:?}");
    assert!(after >= idle, "the idle connection was closed after {after:?}, before {idle:?}");
    eprintln!("half a frame closed after {frame:?}+, an idle connection {after:?} after its frame");

    tokio::time::sleep(idle).await;
    let again = ClientFrame { id: 2, body: Request::Status };
    proto::write_frame(&mut serving, &again).await.unwrap();
    let answer = proto::read_frame::<ServerFrame, _>(&mut serving, proto::MAX_SERVER_FRAME).await;
    assert!(
        matches!(answer, Ok(Some(ServerFrame::Reply { body: Reply::Status(_), .. }))),
        "the session's connection was closed as idle: {answer:?}"
    );
}
