//! Which node to dial: the endpoints in the order to try them, the nodes that failed, and
//! [`find_leader`], which dials until the leader answers.

use super::connection::{Conn, DialError};
use super::{backend_of, lock, PushSink, Shared};
use crate::proto::{ErrorKind, Reply, Request};
use lock_core::lock::LockError;
use lock_core::BackendErrorKind;
use std::time::Duration;
use tokio::time::Instant;

/// Dial nodes until one that leads answers `first`: the hint first, then every endpoint, the
/// ones that answered last time first. Each attempt gets [`ClientConfig::connect_timeout`] to
/// connect and as long again to answer, so a dead node (or one cut off behind a proxy that
/// still accepts) costs at most that before the next is tried. A follower's hint naming a node
/// that failed since it last answered is not followed: until the election ends, followers
/// still name the old leader, and dialling a paused or cut-off leader again on each hint cost
/// twice the connect timeout each time. Such a node is still tried in its turn (last), so one
/// that comes back is found.
pub(super) async fn find_leader(
    shared: &Shared,
    first: &Request,
    mut hint: Option<String>,
    pushes: &PushSink,
    deadline: Instant,
) -> Result<(Conn, Reply), LockError> {
    let mut failures: Vec<String> = Vec::new();
    // Between rounds with no leader found: 50 ms, doubling to 400 ms, so that every session
    // of every client looking for the leader during an election does not flood the nodes.
    let mut pause = Duration::from_millis(50);
    loop {
        let mut candidates: Vec<String> = hint.take().into_iter().collect();
        candidates.extend(lock(&shared.order).iter().cloned());
        for addr in candidates {
            if Instant::now() >= deadline {
                break;
            }
            let attempt = deadline.min(Instant::now() + shared.config.connect_timeout * 2);
            let conn = match Conn::dial(&addr, shared, pushes.clone()).await {
                Ok(c) => c,
                Err(DialError::Refused(why)) => {
                    return Err(backend_of(BackendErrorKind::Refused, why))
                }
                Err(DialError::Retry(e)) => {
                    shared.demote(&addr);
                    failures.push(e);
                    continue;
                }
            };
            match conn.request(shared, first.clone(), attempt).await {
                Ok(Reply::NotLeader { leader }) => {
                    conn.close();
                    failures.push(format!("{addr}: not the leader"));
                    let follow = shared.config.follow_leader_hints;
                    if let Some(l) = leader.filter(|l| follow && shared.worth_following(l, &addr)) {
                        hint = Some(l);
                        break;
                    }
                }
                Ok(Reply::Error { kind: ErrorKind::Unavailable, message }) => {
                    conn.close();
                    failures.push(format!("{addr}: {message}"));
                }
                Ok(Reply::Error { kind: ErrorKind::Unauthenticated, message }) => {
                    conn.close();
                    return Err(backend_of(
                        BackendErrorKind::Refused,
                        format!("{addr}: {message} (give the client credentials)"),
                    ));
                }
                Ok(reply) => {
                    shared.promote(&addr);
                    if shared.config.follow_leader_hints {
                        learn_members(shared, &conn, attempt).await;
                    }
                    return Ok((conn, reply));
                }
                Err(e) => {
                    conn.close();
                    if let Some(why) = conn.refused() {
                        return Err(backend_of(
                            BackendErrorKind::Refused,
                            format!("{addr}: {why}"),
                        ));
                    }
                    shared.demote(&addr);
                    failures.push(e);
                }
            }
        }
        if Instant::now() >= deadline {
            failures.dedup();
            let tail: Vec<_> = failures.iter().rev().take(6).rev().cloned().collect();
            return Err(backend_of(
                BackendErrorKind::Unavailable,
                format!(
                    "no leader among {:?} answered within {:?}: {}",
                    shared.endpoints,
                    shared.config.request_timeout,
                    tail.join("; ")
                ),
            ));
        }
        if hint.is_none() {
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(Duration::from_millis(400));
        }
    }
}

/// Ask the node just found for the cluster's members and dial them too from now on, so that
/// a client whose endpoints have all left the cluster (replaced one by one by membership
/// changes) still finds it. One `Status` per connection to a new leader; a node that does not
/// answer it in time teaches nothing.
async fn learn_members(shared: &Shared, conn: &Conn, deadline: Instant) {
    let deadline = deadline.max(Instant::now() + shared.config.connect_timeout);
    if let Ok(Reply::Status(status)) = conn.request(shared, Request::Status, deadline).await {
        if !status.members.is_empty() {
            shared.learn(status.members.into_iter().map(|m| m.client).collect());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex;

    #[test]
    fn a_hint_naming_a_node_that_failed_since_it_last_answered_is_not_followed() {
        let nodes = ["a:1".to_string(), "b:1".to_string(), "c:1".to_string()];
        let shared = Shared {
            endpoints: nodes.to_vec(),
            order: Mutex::new(nodes.to_vec()),
            failed: Mutex::new(Vec::new()),
            config: ClientConfig::default(),
            next_id: AtomicU64::new(1),
            tls: None,
        };
        let follows = |leader: &str, from: &str| shared.worth_following(leader, from);
        assert!(follows("a:1", "b:1"));
        assert!(!follows("b:1", "b:1"), "a node naming itself");
        // a:1 stops answering: it goes last, and b's hint naming it is not followed...
        shared.demote("a:1");
        assert_eq!(*lock(&shared.order), ["b:1", "c:1", "a:1"]);
        assert!(!follows("a:1", "b:1"));
        assert!(follows("c:1", "b:1"));
        // ...until it answers again.
        shared.promote("a:1");
        assert_eq!(*lock(&shared.order), ["a:1", "b:1", "c:1"]);
        assert!(follows("a:1", "b:1"));
    }

    #[test]
    fn members_learnt_are_dialled_after_the_ones_known_and_leavers_are_forgotten() {
        let given = ["a:1".to_string(), "b:1".to_string()];
        let shared = Shared::new(&given, ClientConfig::default()).unwrap();
        shared.learn(vec!["b:1".into(), "c:1".into(), "d:1".into()]);
        assert_eq!(*lock(&shared.order), ["a:1", "b:1", "c:1", "d:1"]);
        // c leaves the cluster: it is dropped; the endpoints given are always kept.
        shared.learn(vec!["d:1".into()]);
        assert_eq!(*lock(&shared.order), ["a:1", "b:1", "d:1"]);
    }
}
