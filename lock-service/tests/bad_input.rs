//! Bad input and failure: each is a clear error naming its cause within seconds, never a
//! hang, and a malformed request leaves the server serving everyone else.

use crate::support;

use clap::Parser;
use lock_core::{LockError, Locker};
use lock_service::auth::UsersError;
use lock_service::client::{ClientConfig, ServiceClient};
use lock_service::proto::{self, ClientFrame, Reply, Request, ServerFrame};
use lock_service::server::{Node, ServerArgs, ServerError};
use lock_service::tls::TlsError;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use support::node_args as args;

#[tokio::test]
async fn a_data_directory_of_another_cluster_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&args(dir.path(), "alpha", &[])).await.expect("first start");
    node.shutdown().await;
    drop(node);
    let e = Node::start(&args(dir.path(), "beta", &[])).await.err().expect("must refuse");
    let text = e.to_string();
    assert!(matches!(e, ServerError::Data(_)), "{text}");
    assert!(text.contains("alpha") && text.contains("beta"), "{text}");
}

#[tokio::test]
async fn an_unwritable_data_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let e = Node::start(&args(&file.join("data"), "t", &[])).await.err().expect("must fail");
    assert!(e.to_string().contains("cannot use data directory"), "{e}");
}

#[tokio::test]
async fn a_missing_or_malformed_users_file_is_a_users_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-users");
    let data = dir.path().join("data");
    let users = |file: &std::path::Path| args(&data, "t", &["--users", file.to_str().unwrap()]);
    let e = Node::start(&users(&missing)).await.err().expect("must refuse");
    let text = e.to_string();
    match &e {
        ServerError::Users { path, source: UsersError::Read(io) } => {
            assert_eq!(path, &missing);
            assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("not a users file error: {other:?}"),
    }
    assert!(text.contains(missing.to_str().unwrap()), "{text}");
    let malformed = dir.path().join("users");
    std::fs::write(&malformed, "alice client 1234\n").unwrap();
    let e = Node::start(&users(&malformed)).await.err().expect("must refuse");
    assert!(
        matches!(&e, ServerError::Users { path, source: UsersError::Line { line: 1, .. } }
            if path == &malformed),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_missing_certificate_is_a_tls_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("no-such-cert.pem");
    let key = dir.path().join("no-such-key.pem");
    let extra = ["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()];
    let e = Node::start(&args(&dir.path().join("data"), "t", &extra)).await.err().expect("refuse");
    assert!(
        matches!(&e, ServerError::Tls { source: TlsError::Read { path, .. } } if path == &cert),
        "{e:?}"
    );
    assert!(e.to_string().contains(cert.to_str().unwrap()), "{e}");
}

#[test]
fn a_cluster_list_without_this_node_or_malformed_is_refused() {
    let e = ServerArgs::try_parse_from([
        "lock-server",
        "--id",
        "0",
        "--data-dir",
        "/tmp/x",
        "--cluster",
        "1=a:1",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("PEER_ADDR/CLIENT_ADDR"), "{e}");
    let e = ServerArgs::try_parse_from([
        "lock-server",
        "--id",
        "0",
        "--data-dir",
        "/tmp/x",
        "--cluster",
        "0=a:1/b:2,0=c:3/d:4",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("listed twice"), "{e}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let parsed = ServerArgs::try_parse_from([
        "lock-server",
        "--id",
        "5",
        "--data-dir",
        "/tmp/x",
        "--cluster",
        "0=127.0.0.1:1/127.0.0.1:2",
    ])
    .unwrap();
    let e = rt.block_on(Node::start(&parsed)).err().expect("no node 5").to_string();
    assert!(e.contains("no node with id 5"), "{e}");
}

#[tokio::test]
async fn a_client_pointed_at_no_live_node_fails_within_seconds_naming_each() {
    let held: Vec<test_servers::ClosedPort> =
        (0..3).map(|_| test_servers::ClosedPort::new()).collect();
    let dead: Vec<String> = held.iter().map(|p| p.addr().to_string()).collect();
    let started = Instant::now();
    let config =
        ClientConfig { request_timeout: Duration::from_secs(2), ..ClientConfig::default() };
    let e = ServiceClient::connect(&dead, config).await.err().expect("no node answers");
    let took = started.elapsed();
    let text = e.to_string();
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(matches!(e, LockError::Backend { .. }), "{text}");
    assert!(dead.iter().all(|d| text.contains(d.as_str())), "{text}");
    assert!(text.contains("refused"), "{text}");
    drop(held); // the ports stay held until the assertions are done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_frames_are_answered_and_others_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&args(dir.path(), "t", &[])).await.expect("start");
    let addr = node.client_addr().to_string();
    let client = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ServiceClient::connect(std::slice::from_ref(&addr), ClientConfig::default()).await
            {
                Ok(c) => return c,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("the node elects itself");
    let locker = client.locker("good").unwrap();
    let g = locker.lock("l", None).await.unwrap();

    // Valid framing, junk inside: an error answer, and the connection goes on.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let junk = b"{\"id\":1,\"body\":{\"Acquire\":42}}";
    s.write_all(&(junk.len() as u32).to_be_bytes()).await.unwrap();
    s.write_all(junk).await.unwrap();
    match proto::read_frame::<ServerFrame, _>(&mut s, proto::MAX_SERVER_FRAME).await.unwrap() {
        Some(ServerFrame::Reply { id: 0, body: Reply::Error { message, .. } }) => {
            assert!(message.to_string().contains("malformed"), "{message}")
        }
        other => panic!("expected an error answer, got {other:?}"),
    }
    proto::write_frame(&mut s, &ClientFrame { id: 2, body: Request::Status }).await.unwrap();
    match proto::read_frame::<ServerFrame, _>(&mut s, proto::MAX_SERVER_FRAME).await.unwrap() {
        Some(ServerFrame::Reply { id: 2, body: Reply::Status(_) }) => {}
        other => panic!("the connection must go on after a malformed frame: {other:?}"),
    }
    // A lock id the service refuses: an error answer, nothing changes.
    let bad = Request::Acquire {
        session: 1,
        lock: "a/b".into(),
        owner: "o".into(),
        wait: true,
        attempt: 1,
        share: Default::default(),
        value: None,
    };
    proto::write_frame(&mut s, &ClientFrame { id: 3, body: bad }).await.unwrap();
    match proto::read_frame::<ServerFrame, _>(&mut s, proto::MAX_SERVER_FRAME).await.unwrap() {
        Some(ServerFrame::Reply { id: 3, body: Reply::Error { message, .. } }) => {
            assert!(message.to_string().contains("lock id"), "{message}")
        }
        other => panic!("expected an error answer, got {other:?}"),
    }
    // Oversized: refused before it is read, the connection closed.
    s.write_all(&(proto::MAX_CLIENT_FRAME + 1).to_be_bytes()).await.unwrap();
    match proto::read_frame::<ServerFrame, _>(&mut s, proto::MAX_SERVER_FRAME).await.unwrap() {
        Some(ServerFrame::Reply { body: Reply::Error { message, .. }, .. }) => {
            assert!(message.to_string().contains("refused"), "{message}")
        }
        other => panic!("expected an error answer, got {other:?}"),
    }
    // Everyone else is still served: the holder keeps its lock, another waits and gets it.
    let other = client.locker("other").unwrap();
    assert!(other.try_lock("l").await.unwrap().is_none());
    assert!(!g.is_lost());
    g.release().await.unwrap();
    other.lock("l", Some(Duration::from_secs(5))).await.unwrap().release().await.unwrap();
    node.shutdown().await;
}
