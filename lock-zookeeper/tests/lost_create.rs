//! A create whose answer is lost with the connection: with protected names the
//! request finds its znode by its GUID once reconnected and takes it instead of creating a
//! second one; a create that never reached the server is made again; with plain names the
//! request fails and the znode it left is swept.
//!
//! The client talks to the server through a forwarder of this file that can drop what one
//! direction carries: the answer (the create lands, the client never hears), or the request
//! (nothing lands). Closing its connections then makes the client see the connection lost with
//! the create outstanding, as after a network failure, and reconnect within its session.

use crate::support;

use lock_core::{LockError, Locker};
use lock_zookeeper::{Guids, NodeNaming, ZkBackend, ZkConfig, ZkLockOptions};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zookeeper_client as zk;

/// Long enough that the client does not give up a connection whose answers are dropped before
/// the test closes it (it pings every third of the session timeout).
const SESSION: Duration = Duration::from_secs(6);

/// A TCP forwarder whose directions can each be silenced.
struct Forwarder {
    addr: SocketAddr,
    /// Drop what the server sends (the create lands, its answer is lost).
    drop_answers: Arc<AtomicBool>,
    /// Drop what the client sends (the create never lands).
    drop_requests: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

/// Copy `from` to `to`, dropping the bytes while `drop` is set.
async fn pipe(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    drop: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        if !drop.load(Ordering::SeqCst) && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Forwarder {
    async fn start(upstream: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fw = Forwarder {
            addr: listener.local_addr().unwrap(),
            drop_answers: Arc::default(),
            drop_requests: Arc::default(),
            conns: Arc::default(),
        };
        let (answers, requests, conns) =
            (fw.drop_answers.clone(), fw.drop_requests.clone(), fw.conns.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else { continue };
                let ((cr, cw), (sr, sw)) = (client.into_split(), server.into_split());
                let mut conns = conns.lock().unwrap();
                conns.push(tokio::spawn(pipe(cr, sw, requests.clone())));
                conns.push(tokio::spawn(pipe(sr, cw, answers.clone())));
            }
        });
        fw
    }

    /// Close every connection (the client sees the connection lost) and forward both ways
    /// again: the client reconnects within its session. The copies are awaited to their end
    /// before the directions open: one running on another worker may have read an answer and
    /// not yet looked at its flag, and would forward it if the flag were cleared first (on a
    /// loaded machine a plain create was then granted instead of failing).
    async fn break_connections(&self) {
        let conns: Vec<_> = self.conns.lock().unwrap().drain(..).collect();
        for c in &conns {
            c.abort();
        }
        for c in conns {
            let _ = c.await;
        }
        self.drop_answers.store(false, Ordering::SeqCst);
        self.drop_requests.store(false, Ordering::SeqCst);
    }
}

async fn raw() -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(&support::shared().hosts())
        .await
        .unwrap()
}

async fn children(raw: &zk::Client, dir: &str) -> Vec<String> {
    raw.list_children(dir).await.unwrap_or_default()
}

/// A backend through a forwarder, a locker on it with `naming`, and the lock's directory made
/// (with the directory missing, the create would first fail and make it).
async fn setup(tag: &str, naming: NodeNaming) -> (Forwarder, ZkBackend, Arc<dyn Locker>, String) {
    let fw = Forwarder::start(support::shared().addr()).await;
    let root = support::unique_root(tag);
    let config = ZkConfig { session_timeout: SESSION, root, ..ZkConfig::default() };
    let backend = ZkBackend::connect_with(&fw.addr.to_string(), config).await.unwrap();
    let options = ZkLockOptions::new(Guids::seeded(23)).with_naming(naming);
    let locker: Arc<dyn Locker> = Arc::new(backend.locker_with(tag, options).unwrap());
    locker.lock("x", None).await.unwrap().release().await.unwrap();
    let dir = backend.lock_dir("x");
    (fw, backend, locker, dir)
}

/// Wait until `dir` has `n` children; their names.
async fn until_children(raw: &zk::Client, dir: &str, n: usize) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let kids = children(raw, dir).await;
        if kids.len() == n {
            return kids;
        }
        assert!(Instant::now() < until, "{dir} has {kids:?}, expected {n} children");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_create_whose_answer_was_lost_is_found_by_its_guid() {
    let (fw, _backend, locker, dir) = setup("answer-lost", NodeNaming::Protected).await;
    let raw = raw().await;
    fw.drop_answers.store(true, Ordering::SeqCst);
    let request = tokio::spawn(async move { locker.lock("x", None).await });
    // The create landed; its answer is in the forwarder's bin.
    let made = until_children(&raw, &dir, 1).await;
    fw.break_connections().await;
    let guard = tokio::time::timeout(SESSION, request)
        .await
        .expect("granted after reconnecting")
        .unwrap()
        .expect("the request takes the znode it made");
    let now = children(&raw, &dir).await;
    assert_eq!(now, made, "no second znode: the request found its own by its GUID");
    let (_, stat) = raw.get_data(&format!("{dir}/{}", made[0])).await.unwrap();
    assert_eq!(guard.token(), stat.czxid as u64, "the guard is that znode's");
    guard.release().await.unwrap();
    assert!(children(&raw, &dir).await.is_empty(), "release deletes it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_create_that_never_landed_is_made_again_with_the_same_guid() {
    let (fw, _backend, locker, dir) = setup("request-lost", NodeNaming::Protected).await;
    let raw = raw().await;
    fw.drop_requests.store(true, Ordering::SeqCst);
    let request = tokio::spawn(async move { locker.lock("x", None).await });
    // Long enough for the create to be on its way (and dropped).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(children(&raw, &dir).await.is_empty(), "the create reached the server");
    fw.break_connections().await;
    let guard = tokio::time::timeout(SESSION, request)
        .await
        .expect("granted after reconnecting")
        .unwrap()
        .expect("the request creates again");
    let now = children(&raw, &dir).await;
    assert_eq!(now.len(), 1, "{now:?}");
    // The GUID the seed gives the second request of this locker (the first one made the
    // directory in setup): the retry kept it.
    let tag = seeded_tag(23, 2).await;
    assert!(now[0].starts_with(&tag), "{now:?} (expected the GUID {tag})");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_create_whose_answer_was_lost_fails_and_its_znode_is_swept() {
    let (fw, backend, locker, dir) = setup("plain-lost", NodeNaming::Plain).await;
    let raw = raw().await;
    fw.drop_answers.store(true, Ordering::SeqCst);
    let request = tokio::spawn(async move { locker.lock("x", None).await });
    until_children(&raw, &dir, 1).await;
    fw.break_connections().await;
    let result = tokio::time::timeout(SESSION, request).await.expect("an answer").unwrap();
    assert!(matches!(result, Err(LockError::Backend { .. })), "{result:?}");
    // The session lives on, and with it the orphan, until the backend sweeps it.
    until_children(&raw, &dir, 0).await;
    assert_eq!(backend.sessions_made(), 1, "the same session throughout");
}

/// The `n`th protected tag (`_c_<uuid>-`, counting from 1) of a locker whose GUIDs are seeded
/// with `seed`, as the server shows it: read off the znodes of such a locker.
async fn seeded_tag(seed: u64, n: usize) -> String {
    let root = support::unique_root("seeded-tag");
    let config = ZkConfig { session_timeout: SESSION, root, ..ZkConfig::default() };
    let backend = ZkBackend::connect_with(&support::shared().hosts(), config).await.unwrap();
    let locker = backend.locker_with("t", ZkLockOptions::new(Guids::seeded(seed))).unwrap();
    let raw = raw().await;
    let mut name = String::new();
    for _ in 0..n {
        let g = locker.lock("x", None).await.unwrap();
        name = children(&raw, &backend.lock_dir("x")).await.remove(0);
        g.release().await.unwrap();
    }
    name[..40].to_string()
}
