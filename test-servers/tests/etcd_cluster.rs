//! A 3-member etcd cluster behind its proxies: it forms, says who leads, and elects another
//! leader when the leader is killed or cut off from its peers and clients.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
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

/// One `GET /health` on an open HTTP/1.1 connection: the status line, once the whole answer
/// (headers and `Content-Length` bytes of body) is read.
fn health(conn: &mut TcpStream) -> std::io::Result<String> {
    conn.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length:").map(str::to_owned)
                })
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return Ok(text.lines().next().unwrap_or_default().to_string());
            }
        }
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_leader_cut_off_from_peers_and_clients_loses_the_lead() {
    let cluster = EtcdCluster::start(3);
    // A client connection open to every member before the fault, each forwarded once.
    let mut open: Vec<TcpStream> = (0..3)
        .map(|i| {
            let mut conn = TcpStream::connect(cluster.client_addr(i)).unwrap();
            conn.set_read_timeout(Some(ELECTION)).unwrap();
            let status = health(&mut conn).unwrap();
            assert!(status.starts_with("HTTP/1.1 "), "member {i}: {status}");
            conn
        })
        .collect();
    assert_eq!(cluster.origin_scans(), 0, "no fault: no connection's origin is looked up");
    let (old, new) = support::cut_off_leader(&cluster, ELECTION);
    assert!(cluster.origin_scans() >= 1, "the cut needs the members' connections named");
    for (i, conn) in open.iter_mut().enumerate() {
        let status = health(conn);
        if i == old {
            assert!(status.is_err(), "the cut-off member's client is cut: {status:?}");
        } else {
            let status = status.unwrap();
            assert!(status.starts_with("HTTP/1.1 "), "member {i}'s client stays: {status}");
        }
    }
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
