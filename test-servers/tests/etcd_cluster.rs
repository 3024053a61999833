//! A 3-member etcd cluster behind its proxies: it forms, says who leads, and elects another
//! leader when the leader is killed or cut off from its peers and clients.

mod support;

use std::time::{Duration, Instant};
use test_servers::{etcd_post, Cluster, ClusterOptions, Etcd, EtcdCluster, INSTALL_HINT};

/// Long enough for an election (500 ms timeout) and the leader probes after it.
const ELECTION: Duration = Duration::from_secs(10);

/// Put `key` = `value` through member `i`'s client proxy (the JSON gateway wants base64).
fn put(cluster: &EtcdCluster, i: usize, key: &str, value: &str) -> std::io::Result<String> {
    let body = format!(r#"{{"key":"{}","value":"{}"}}"#, b64(key), b64(value));
    etcd_post(cluster.client_addr(i), "/v3/kv/put", &body)
}

fn b64(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn a_killed_leader_is_replaced_and_comes_back_as_a_follower() {
    let started = Instant::now();
    let cluster = EtcdCluster::start(3);
    eprintln!("etcd cluster of 3 formed in {:?}", started.elapsed());
    let leader = support::formed(&cluster, ELECTION);
    let answer = put(&cluster, leader, "k", "v").unwrap();
    assert!(answer.contains("\"revision\""), "put: {answer}");

    let (old, new) = support::kill_leader(&cluster, ELECTION);
    assert!(put(&cluster, new, "k", "w").unwrap().contains("\"revision\""));

    cluster.restart(old).unwrap();
    assert_eq!(cluster.wait_for_leader(ELECTION).unwrap(), new, "pre-vote: no one deposed");
    eprintln!("etcd kill test took {:?}", started.elapsed());
}

#[test]
fn a_leader_cut_off_from_peers_and_clients_loses_the_lead() {
    let cluster = EtcdCluster::start(3);
    let (old, new) = support::cut_off_leader(&cluster, ELECTION);
    // The proxy accepts and closes at once: an error, or an empty answer.
    let answer = put(&cluster, old, "k", "v");
    assert!(answer.as_ref().map_or(true, String::is_empty), "its clients are cut: {answer:?}");
    assert!(put(&cluster, new, "k", "v").unwrap().contains("\"revision\""));
    cluster.heal(old);
    assert!(cluster.wait_for_leader(ELECTION).is_ok());
}

#[test]
fn a_paused_leader_is_replaced() {
    let cluster = EtcdCluster::start(3);
    let (old, _) = support::pause_leader(&cluster, ELECTION);
    cluster.resume(old).unwrap();
    assert!(cluster.wait_for_leader(ELECTION).is_ok());
}

#[test]
fn a_member_restarted_without_its_data_rejoins() {
    let cluster = EtcdCluster::start(3);
    let leader = cluster.wait_for_leader(ELECTION).unwrap();
    let follower = (leader + 1) % 3;
    assert!(put(&cluster, leader, "k", "v").unwrap().contains("\"revision\""));
    cluster.restart_without_data(follower).unwrap();
    assert!(cluster.wait_for_leader(ELECTION).is_ok());
    // A new member with an empty log, caught up by the leader: it serves writes again.
    let answer = put(&cluster, follower, "k", "w").unwrap();
    assert!(answer.contains("\"revision\""), "put through the rejoined member: {answer}");
}

#[test]
fn a_missing_program_fails_fast_naming_what_to_install() {
    let started = Instant::now();
    let mut options = ClusterOptions::new(3);
    options.program = Some("/nonexistent/etcd".into());
    let Err(error) = Cluster::launch(Etcd::default(), &options) else {
        panic!("a cluster formed without its program");
    };
    assert!(error.is_not_installed(), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("etcd member 0") && text.contains(INSTALL_HINT), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}
