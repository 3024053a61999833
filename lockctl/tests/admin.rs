//! `lockctl locks`, `status`, `release --force` and `member list`, on an open node and on one
//! that authenticates its clients over TLS.

use crate::support::{wait_for_file, TestNode};
use lock_service::auth::token_hash;
use serde_json::Value;
use std::process::Output;
use std::time::Duration;

fn json_lines(out: &Output) -> Vec<Value> {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect()
}

/// `locks` lists the holder (owner, token, how long) and the waiter; `status` names the
/// leader and counts the lock; `release --force` of a free lock exits 1.
#[test]
fn locks_and_status_show_who_holds_and_who_waits() {
    let node = TestNode::start(&[]);
    let ready = node.dir.path().join("ready");
    let script = format!("echo \"$LOCK_FENCING_TOKEN\" > {}; sleep 60", ready.display());
    let mut holder = node
        .lockctl()
        .args(["lock", "--owner", "first", "report", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let token: u64 = wait_for_file(&ready, Duration::from_secs(20)).trim().parse().unwrap();
    let mut waiter =
        node.lockctl().args(["lock", "--owner", "second", "report", "--", "true"]).spawn().unwrap();
    // The waiter's ask is queued once it shows in the listing.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let listed = loop {
        let out = node.lockctl().args(["--output", "json", "locks", "rep"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let locks = json_lines(&out);
        if locks.len() == 1 && locks[0]["waiters"].as_array().is_some_and(|w| w.len() == 1) {
            break locks;
        }
        assert!(std::time::Instant::now() < deadline, "no waiter listed: {locks:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let lock = &listed[0];
    assert_eq!(lock["lock"], "report");
    assert_eq!(lock["holders"][0]["owner"], "first");
    assert_eq!(lock["holders"][0]["token"], token);
    assert_eq!(lock["waiters"][0]["owner"], "second");
    let text = node.lockctl().args(["locks"]).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.starts_with("LOCK"), "{text}");
    assert!(text.contains("first (session") && text.contains("1: second (session"), "{text}");
    let other = node.lockctl().args(["--output", "json", "locks", "zzz"]).output().unwrap();
    assert!(other.status.success() && other.stdout.is_empty());

    let status = node.lockctl().args(["--output", "json", "status"]).output().unwrap();
    assert_eq!(status.status.code(), Some(0), "{}", String::from_utf8_lossy(&status.stderr));
    let rows = json_lines(&status);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["role"], "leader");
    assert_eq!(rows[0]["status"]["locks"], 1);
    assert!(rows[0]["status"]["applied"].as_u64().unwrap() >= token);
    assert!(rows[0]["status"]["committed"].as_u64().unwrap() >= token);

    let members = node.lockctl().args(["--output", "json", "member", "list"]).output().unwrap();
    let members = json_lines(&members);
    assert_eq!(members.len(), 1);
    assert_eq!((members[0]["id"].as_u64(), members[0]["voter"].as_bool()), (Some(0), Some(true)));

    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    holder.wait().unwrap();
    assert!(waiter.wait().unwrap().success());
    let free = node.lockctl().args(["release", "--force", "report"]).output().unwrap();
    assert_eq!(free.status.code(), Some(1), "{}", String::from_utf8_lossy(&free.stdout));
}

/// On a node with users and TLS: a client may list locks but not force-release (77), a wrong
/// token is refused (77), plain TCP to the TLS port fails, and an admin's force-release works.
#[test]
fn on_a_secured_node_only_an_admin_may_force_release() {
    let pki = test_servers::TestPki::new("lockctl");
    let dir = tempfile::tempdir().unwrap();
    let (alice, root) = ("alice-token-1234", "root-token-5678");
    let users = dir.path().join("users");
    let lines = format!("alice client {}\nroot admin {}\n", token_hash(alice), token_hash(root));
    std::fs::write(&users, lines).unwrap();
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (cert, key, users) = (s(&pki.server().cert), s(&pki.server().key), s(&users));
    let node = TestNode::start(&["--users", &users, "--tls-cert", &cert, "--tls-key", &key]);
    let ca = s(pki.ca_file());
    let as_user = |user: &str, token: &str| {
        let mut c = node.lockctl();
        c.args(["--service-ca", &ca, "--service-user", user]).env("LOCK_SERVICE_TOKEN", token);
        c
    };
    let ready = dir.path().join("ready");
    let script = format!("echo up > {}; sleep 60", ready.display());
    let mut holder = as_user("alice", alice)
        .args(["lock", "guarded", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    let listed = as_user("alice", alice).args(["--output", "json", "locks"]).output().unwrap();
    let listed = json_lines(&listed);
    assert_eq!(listed[0]["holders"][0]["identity"], "alice");
    let refused = as_user("alice", alice).args(["release", "--force", "guarded"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(77), "{}", String::from_utf8_lossy(&refused.stderr));
    let wrong = as_user("alice", "not-her-token").args(["locks"]).output().unwrap();
    assert_eq!(wrong.status.code(), Some(77), "{}", String::from_utf8_lossy(&wrong.stderr));
    let no_token = node
        .lockctl()
        .args(["--service-ca", &ca, "--service-user", "alice", "locks"])
        .output()
        .unwrap();
    assert_eq!(no_token.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&no_token.stderr).contains("LOCK_SERVICE_TOKEN"));
    let forced = as_user("root", root).args(["release", "--force", "guarded"]).output().unwrap();
    assert_eq!(forced.status.code(), Some(0), "{}", String::from_utf8_lossy(&forced.stderr));
    assert_eq!(holder.wait().unwrap().code(), Some(76));
}

/// `lockctl member add` makes a waiting node a voter of a one-node cluster, `member remove`
/// takes it out again; adding a voter again changes nothing; moving a voter, or removing the
/// last, is refused (64).
#[test]
fn members_are_added_and_removed_with_lockctl() {
    let first = TestNode::start(&[]);
    let second = TestNode::start_as(1, false, &[]);
    let (peer, client) = (second.node.peer_addr().to_string(), second.endpoint());
    let add = first
        .lockctl()
        .args(["--output", "json", "member", "add", "1", "--peer", &peer, "--client", &client])
        .output()
        .unwrap();
    assert!(add.status.success(), "{}", String::from_utf8_lossy(&add.stderr));
    let members = json_lines(&add);
    let voters: Vec<_> =
        members.iter().filter(|m| m["voter"] == true).map(|m| m["id"].as_u64()).collect();
    assert_eq!(voters, [Some(0), Some(1)]);
    // The new node knows the leader and serves locks through it.
    let through_second = second.lockctl().args(["lock", "--try", "x", "--", "true"]).status();
    assert_eq!(through_second.unwrap().code(), Some(0));
    // Sent again, it does nothing more; moving a voter to other addresses is refused (64).
    let again = first
        .lockctl()
        .args(["member", "add", "1", "--peer", &peer, "--client", &client])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    let moved = first
        .lockctl()
        .args(["member", "add", "1", "--peer", &peer, "--client", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(moved.status.code(), Some(64), "{}", String::from_utf8_lossy(&moved.stderr));
    let removed = first.lockctl().args(["member", "remove", "1"]).output().unwrap();
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    let text = String::from_utf8(removed.stdout).unwrap();
    assert!(text.starts_with("ID") && !text.contains("\n1 "), "{text}");
    let last = first.lockctl().args(["member", "remove", "0"]).output().unwrap();
    assert_eq!(last.status.code(), Some(64), "{}", String::from_utf8_lossy(&last.stderr));
}
