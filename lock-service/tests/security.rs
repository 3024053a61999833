//! The service's security: clients say who they are over TLS, a session
//! belongs to the identity that opened it, only an admin may force-release a lock, a hostile
//! client meets limits, and every refusal is a clear error within seconds that changes
//! nothing. Nodes run in this process ([`Node::start`]) on free loopback ports; the
//! conformance suite on a secured 3-node cluster of real processes is in
//! `tests/secured_conformance.rs`.

use crate::support;

use lock_core::secret::{Credentials, Secret};
use lock_core::tls::TlsFiles;
use lock_core::{LeaseState, LockError, Locker};
use lock_service::auth::token_hash;
use lock_service::client::{ClientConfig, ServiceClient};
use lock_service::proto::{self, ClientFrame, ErrorKind, Reply, Request, ServerFrame};
use lock_service::server::Node;
use lock_service::tls::{client_connector, connect, BoxIo};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_servers::{random_password, TestPki};
use tokio::net::TcpStream;

/// A secured node: TLS with a certificate of `pki`, and the users alice, bob (clients) and
/// root (admin) with random tokens.
struct Secured {
    pki: TestPki,
    dir: tempfile::TempDir,
    tokens: [(String, String); 3],
    node: Arc<Node>,
}

impl Secured {
    async fn start(extra: &[&str]) -> Secured {
        Secured::start_with(TestPki::new("service"), None, extra).await
    }

    /// A node whose certificate is `cert` (default: `pki`'s loopback one).
    async fn start_with(pki: TestPki, cert: Option<(PathBuf, PathBuf)>, extra: &[&str]) -> Secured {
        let dir = tempfile::tempdir().unwrap();
        let tokens = [
            ("alice".to_string(), random_password()),
            ("bob".to_string(), random_password()),
            ("root".to_string(), random_password()),
        ];
        let users = dir.path().join("users");
        let roles = ["client", "client", "admin"];
        let lines: Vec<String> = tokens
            .iter()
            .zip(roles)
            .map(|((n, t), r)| format!("{n} {r} {}", token_hash(t)))
            .collect();
        std::fs::write(&users, lines.join("\n")).unwrap();
        let (cert, key) =
            cert.unwrap_or_else(|| (pki.server().cert.clone(), pki.server().key.clone()));
        let (users, cert, key, ca) = (path(&users), path(&cert), path(&key), path(pki.ca_file()));
        let mut args =
            vec!["--users", &users, "--tls-cert", &cert, "--tls-key", &key, "--tls-ca", &ca];
        args.extend_from_slice(extra);
        let data = dir.path().join("data");
        let node = Node::start(&support::node_args(&data, "secured", &args)).await.expect("start");
        let s = Secured { pki, dir, tokens, node };
        s.wait_until_it_leads().await;
        s
    }

    async fn wait_until_it_leads(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.node.status().leader != Some(0) {
            assert!(Instant::now() < deadline, "the node did not elect itself");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn endpoint(&self) -> Vec<String> {
        vec![self.node.client_addr().to_string()]
    }

    fn token(&self, user: &str) -> String {
        self.tokens.iter().find(|(n, _)| n == user).map(|(_, t)| t.clone()).expect("a user")
    }

    fn config(&self, user: Option<&str>) -> ClientConfig {
        ClientConfig {
            ttl: Duration::from_secs(2),
            credentials: user.map(|u| Credentials::new(u, Secret::new(self.token(u)))),
            tls: Some(TlsFiles::trusting(self.pki.ca_file())),
            ..ClientConfig::default()
        }
    }

    async fn client(&self, user: &str) -> ServiceClient {
        ServiceClient::connect(&self.endpoint(), self.config(Some(user))).await.expect("connect")
    }

    /// A raw TLS connection, authenticated as `user`, for requests the client never sends.
    async fn raw(&self, user: &str) -> Raw {
        let tls = client_connector(&TlsFiles::trusting(self.pki.ca_file())).unwrap();
        let addr = self.node.client_addr().to_string();
        let tcp = TcpStream::connect(&addr).await.unwrap();
        let mut raw = Raw { io: connect(&tls, &addr, tcp).await.unwrap(), next: 1 };
        let hello = Request::Hello { user: user.into(), token: self.token(user) };
        assert!(matches!(raw.ask(hello).await, Reply::Welcome { .. }));
        raw
    }

    fn applied(&self) -> Option<u64> {
        self.node.status().applied
    }
}

fn path(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

struct Raw {
    io: BoxIo,
    next: u64,
}

impl Raw {
    async fn ask(&mut self, body: Request) -> Reply {
        let id = self.next;
        self.next += 1;
        proto::write_frame(&mut self.io, &ClientFrame { id, body }).await.unwrap();
        loop {
            match proto::read_frame::<ServerFrame, _>(&mut self.io, proto::MAX_SERVER_FRAME)
                .await
                .unwrap()
            {
                Some(ServerFrame::Reply { id: got, body }) if got == id => return body,
                Some(_) => continue,
                None => panic!("the node closed the connection"),
            }
        }
    }
}

fn refused_kind(reply: &Reply) -> Option<ErrorKind> {
    match reply {
        Reply::Error { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// `f` fails within 10 s; its error's text.
async fn fails_quickly<T, F>(what: &str, f: F) -> String
where
    F: std::future::Future<Output = Result<T, LockError>>,
{
    let started = Instant::now();
    let e = match tokio::time::timeout(Duration::from_secs(10), f).await {
        Ok(Err(e)) => e,
        Ok(Ok(_)) => panic!("{what}: must be refused"),
        Err(_) => panic!("{what}: hung for 10 s instead of failing"),
    };
    eprintln!("{what}: refused in {:?}: {e}", started.elapsed());
    e.to_string()
}

#[tokio::test]
async fn an_unauthenticated_client_or_a_wrong_token_is_refused_within_seconds() {
    let s = Secured::start(&[]).await;
    let e = fails_quickly("no credentials", ServiceClient::connect(&s.endpoint(), s.config(None)))
        .await;
    assert!(e.contains("authenticates its clients"), "{e}");
    let mut wrong = s.config(Some("alice"));
    wrong.credentials = Some(Credentials::new("alice", Secret::new("guess")));
    let e = fails_quickly("a wrong token", ServiceClient::connect(&s.endpoint(), wrong)).await;
    assert!(e.contains("refused \"alice\"") && e.contains("token is wrong"), "{e}");
    assert!(!e.contains("guess"), "the token must not be printed: {e}");
    let e = fails_quickly(
        "an unknown user",
        ServiceClient::connect(&s.endpoint(), {
            let mut c = s.config(None);
            c.credentials = Some(Credentials::new("mallory", Secret::new("x")));
            c
        }),
    )
    .await;
    assert!(e.contains("refused \"mallory\""), "{e}");
    // And the node still serves those it knows.
    let alice = s.client("alice").await;
    alice.locker("a").unwrap().lock("l", None).await.unwrap().release().await.unwrap();
    s.node.shutdown().await;
}

#[tokio::test]
async fn another_identitys_session_cannot_be_used_and_a_refusal_changes_nothing() {
    let s = Secured::start(&[]).await;
    let alice = s.client("alice").await;
    let guard = alice.locker("a").unwrap().lock("l", None).await.unwrap();
    let session = alice.session_id().await;
    let token = guard.token();
    let mut bob = s.raw("bob").await;
    let before = s.applied();
    // Everything bob could send in alice's name: her lock's release (with the attempt the
    // client used, 1), a new ask, a keep-alive, a resume and a close of her session.
    let asks = [
        Request::Release { session, lock: "l".into(), owner: "a".into(), attempt: 1 },
        Request::Acquire {
            session,
            lock: "m".into(),
            owner: "a".into(),
            wait: true,
            attempt: 9,
            share: Default::default(),
            value: None,
        },
        Request::KeepAlive { session },
        Request::Resume { session, key: None },
        Request::Close { session },
        Request::ForceRelease { lock: "l".into() },
    ];
    for ask in asks {
        let reply = bob.ask(ask.clone()).await;
        assert_eq!(refused_kind(&reply), Some(ErrorKind::Forbidden), "{ask:?} → {reply:?}");
    }
    assert_eq!(s.applied(), before, "a refused request commits nothing");
    assert_eq!(s.node.status().forced_releases, 0);
    assert_eq!(guard.lease_state(), LeaseState::Held);
    // bob's own client sees the lock held by alice, and gets it when she releases.
    let bob_client = s.client("bob").await;
    let bob_locker = bob_client.locker("b").unwrap();
    assert!(bob_locker.try_lock("l").await.unwrap().is_none());
    let e = fails_quickly("bob's force-release", bob_client.force_release("l")).await;
    assert!(e.contains("Forbidden") && e.contains("only an admin"), "{e}");
    guard.release().await.unwrap();
    let next = bob_locker.lock("l", Some(Duration::from_secs(5))).await.unwrap();
    assert!(next.token() > token);
    s.node.shutdown().await;
}

#[tokio::test]
async fn an_admin_force_release_tells_the_holder_grants_the_next_and_is_counted() {
    let s = Secured::start(&[]).await;
    let (alice, bob, root) =
        (s.client("alice").await, s.client("bob").await, s.client("root").await);
    let held = alice.locker("a").unwrap().lock("l", None).await.unwrap();
    let bob_locker = bob.locker("b").unwrap();
    let waiter =
        tokio::spawn(async move { bob_locker.lock("l", Some(Duration::from_secs(10))).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(root.force_release("l").await.unwrap(), "the lock was held");
    let told = tokio::time::timeout(Duration::from_secs(2), held.lost()).await;
    let reason = told.expect("the holder is told within 2 s").reason;
    assert!(reason.contains("force-released by root"), "{reason}");
    let next = waiter.await.unwrap().expect("the waiter is granted");
    assert!(next.token() > held.token(), "the next grant's token is greater");
    assert_eq!(s.node.status().forced_releases, 1);
    assert!(!root.force_release("free").await.unwrap(), "a free lock: nothing to take");
    assert_eq!(s.node.status().forced_releases, 1);
    s.node.shutdown().await;
}

#[tokio::test]
async fn a_flood_of_sessions_or_asks_meets_a_clear_limit_and_others_are_still_served() {
    let s =
        Secured::start(&["--max-sessions-per-identity", "3", "--max-asks-per-session", "4"]).await;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(s.client("alice").await);
    }
    let e = fails_quickly(
        "a fourth session",
        ServiceClient::connect(&s.endpoint(), s.config(Some("alice"))),
    )
    .await;
    assert!(e.contains("already has 3 sessions open") && e.contains("--max-sessions"), "{e}");
    let alice = &sessions[0];
    let mut guards = Vec::new();
    for i in 0..4 {
        guards.push(alice.locker("a").unwrap().lock(&format!("l{i}"), None).await.unwrap());
    }
    let e = fails_quickly("a fifth ask", alice.locker("a").unwrap().lock("l4", None)).await;
    assert!(e.contains("LimitReached") && e.contains("4 locks"), "{e}");
    // Asking again for a lock it holds is not a new ask.
    assert!(alice.locker("a").unwrap().try_lock("l0").await.unwrap().is_some());
    // bob is another identity: his sessions and asks are his own.
    let bob = s.client("bob").await;
    bob.locker("b").unwrap().lock("l4", None).await.unwrap().release().await.unwrap();
    s.node.shutdown().await;
}

#[tokio::test]
async fn a_certificate_from_another_ca_or_for_another_host_is_refused_within_seconds() {
    let s = Secured::start(&[]).await;
    let stranger_ca = TestPki::new("stranger");
    let mut config = s.config(Some("alice"));
    config.tls = Some(TlsFiles::trusting(stranger_ca.ca_file()));
    let e = fails_quickly("an untrusted CA", ServiceClient::connect(&s.endpoint(), config)).await;
    assert!(e.contains("TLS handshake") && e.contains("UnknownIssuer"), "{e}");
    s.node.shutdown().await;

    let pki = TestPki::new("service");
    let other = pki.issue("elsewhere", "elsewhere", &["db.example.org"]);
    let s = Secured::start_with(pki, Some((other.cert, other.key)), &[]).await;
    let e = fails_quickly(
        "a certificate for another host",
        ServiceClient::connect(&s.endpoint(), s.config(Some("alice"))),
    )
    .await;
    assert!(e.contains("not valid for name") && e.contains("another host name"), "{e}");
    s.node.shutdown().await;
}

#[tokio::test]
async fn tls_on_one_side_only_is_a_clear_error_within_seconds() {
    let s = Secured::start(&[]).await;
    let mut plain = s.config(Some("alice"));
    plain.tls = None;
    let e =
        fails_quickly("a plain client at a TLS node", ServiceClient::connect(&s.endpoint(), plain))
            .await;
    assert!(e.contains("speaks TLS only"), "{e}");
    // The plain Status probe is still answered, for health checks.
    let port = s.node.client_addr().port();
    let status = tokio::task::spawn_blocking(move || test_servers::service_status(port))
        .await
        .unwrap()
        .expect("a plain Status probe");
    assert!(status.contains("\"leader\":0"), "{status}");
    s.node.shutdown().await;

    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&support::node_args(dir.path(), "plain", &[])).await.unwrap();
    let config = ClientConfig { tls: s.config(None).tls, ..ClientConfig::default() };
    let endpoint = vec![node.client_addr().to_string()];
    let e =
        fails_quickly("a TLS client at a plain node", ServiceClient::connect(&endpoint, config))
            .await;
    assert!(e.contains("TLS handshake") && e.contains("does not seem to speak TLS"), "{e}");
    // Credentials at a node that has no users: refused at once, not retried to the timeout.
    let config = ClientConfig {
        credentials: Some(Credentials::new("alice", Secret::new("x"))),
        ..ClientConfig::default()
    };
    let e = fails_quickly("credentials at a node without users", async {
        ServiceClient::connect(&endpoint, config).await
    })
    .await;
    assert!(e.contains("does not take credentials"), "{e}");
    node.shutdown().await;
}

#[tokio::test]
async fn arbitrary_frames_from_an_authenticated_client_leave_the_node_serving() {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let s = Secured::start(&[]).await;
    let alice = s.client("alice").await;
    let guard = alice.locker("a").unwrap().lock("l", None).await.unwrap();
    let before = s.applied();
    let mut runner = TestRunner::deterministic();
    let bytes = proptest::collection::vec(any::<u8>(), 0..300);
    let mut bob = s.raw("bob").await;
    for _ in 0..200 {
        let junk = bytes.new_tree(&mut runner).unwrap().current();
        let mut frame = (junk.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&junk);
        tokio::io::AsyncWriteExt::write_all(&mut bob.io, &frame).await.unwrap();
    }
    tokio::io::AsyncWriteExt::flush(&mut bob.io).await.unwrap();
    let mut answered = 0;
    while answered < 200 {
        match proto::read_frame::<ServerFrame, _>(&mut bob.io, proto::MAX_SERVER_FRAME).await {
            Ok(Some(ServerFrame::Reply { id: 0, body: Reply::Error { kind, .. } })) => {
                assert_eq!(kind, ErrorKind::BadRequest);
                answered += 1;
            }
            other => panic!("every junk frame is answered as malformed: {other:?}"),
        }
    }
    // Every junk frame was answered (as malformed) and the connection still serves bob.
    assert!(matches!(bob.ask(Request::Status).await, Reply::Status(_)));
    assert_eq!(s.applied(), before, "junk commits nothing");
    assert_eq!(guard.lease_state(), LeaseState::Held);
    guard.release().await.unwrap();
    s.node.shutdown().await;
    drop(s.dir);
}

/// Dial `node`'s peer port with `tls` (or plain) and say hello as a node of its cluster: the
/// answer, or why there was none.
async fn peer_hello(node: &Node, tls: Option<TlsFiles>) -> Result<(), String> {
    use lock_service::raft::{PeerReply, PeerRequest};
    let addr = node.peer_addr().to_string();
    let tcp = TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
    let mut io: BoxIo = match tls {
        None => Box::new(tcp),
        Some(files) => {
            let tls = client_connector(&files).map_err(|e| e.to_string())?;
            connect(&tls, &addr, tcp).await?
        }
    };
    let hello = PeerRequest::Hello { cluster: "secured".into(), from: 7 };
    let exchange = async {
        proto::write_frame(&mut io, &hello).await?;
        proto::read_frame::<PeerReply, _>(&mut io, proto::MAX_PEER_FRAME).await
    };
    match tokio::time::timeout(Duration::from_secs(5), exchange).await {
        Ok(Ok(Some(PeerReply::Hello(r)))) => r,
        Ok(Ok(other)) => Err(format!("no hello: {other:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 5 s".into()),
    }
}

#[tokio::test]
async fn only_a_peer_with_a_certificate_of_the_clusters_ca_may_speak_raft() {
    let s = Secured::start(&[]).await;
    let node_cert = TlsFiles::trusting(s.pki.ca_file())
        .with_identity(&s.pki.server().cert, &s.pki.server().key);
    peer_hello(&s.node, Some(node_cert)).await.expect("a node of the cluster is welcome");
    let plain = peer_hello(&s.node, None).await.unwrap_err();
    eprintln!("a plain peer: {plain}");
    let no_cert = peer_hello(&s.node, Some(TlsFiles::trusting(s.pki.ca_file()))).await.unwrap_err();
    eprintln!("a peer without a certificate: {no_cert}");
    let stranger = TestPki::new("stranger");
    let foreign = stranger.client("node-7");
    let other_ca = TlsFiles::trusting(s.pki.ca_file()).with_identity(&foreign.cert, &foreign.key);
    let refused = peer_hello(&s.node, Some(other_ca)).await.unwrap_err();
    eprintln!("a peer with another CA's certificate: {refused}");
    // And the node still serves its clients.
    let alice = s.client("alice").await;
    alice.locker("a").unwrap().lock("l", None).await.unwrap().release().await.unwrap();
    s.node.shutdown().await;
}
