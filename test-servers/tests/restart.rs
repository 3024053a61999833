//! Stopping and starting a server again: same port, same directory, the data it should keep,
//! and a server that outlives the thread that started it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;
use test_servers::{four_letter, EtcdServer, RedisServer, ZkServer};

/// Send one inline command to Redis on `port` and return its first reply line.
fn redis(port: u16, command: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("{command}\r\n").as_bytes())?;
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if line.starts_with('$') && !line.starts_with("$-1") {
        line.clear();
        reader.read_line(&mut line)?;
    }
    Ok(line.trim_end().to_string())
}

#[test]
fn redis_without_persistence_comes_back_empty_on_the_same_port() {
    let mut server = RedisServer::start();
    let port = server.port;
    assert_eq!(redis(port, "SET k v").unwrap(), "+OK");
    server.stop();
    assert!(!server.is_running());
    assert!(redis(port, "PING").is_err(), "a stopped server refuses connections");
    assert!(server.dir().exists(), "stop keeps the data directory");
    server.start_again();
    assert_eq!(server.port, port);
    assert_eq!(redis(port, "PING").unwrap(), "+PONG");
    assert_eq!(redis(port, "GET k").unwrap(), "$-1", "no persistence: the key is gone");
    let dir = server.dir().to_path_buf();
    drop(server);
    assert!(!dir.exists(), "drop removes the directory");
}

#[test]
fn persistent_redis_keeps_keys_and_their_running_ttls() {
    let mut server = RedisServer::start_persistent();
    let port = server.port;
    assert_eq!(redis(port, "SET k v").unwrap(), "+OK");
    assert_eq!(redis(port, "SET t v PX 60000").unwrap(), "+OK");
    server.restart_after(Duration::from_millis(300));
    assert_eq!(redis(port, "GET k").unwrap(), "v");
    let pttl: i64 = redis(port, "PTTL t").unwrap().trim_start_matches(':').parse().unwrap();
    assert!((1..=59_700).contains(&pttl), "the TTL kept running while the server was down: {pttl}");
}

#[test]
fn a_server_outlives_the_thread_that_started_it() {
    // The death signal belongs to the spawning thread: a server started (or started again) from
    // a short-lived thread must not die with that thread.
    let mut server = std::thread::spawn(RedisServer::start).join().unwrap();
    let port = server.port;
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(redis(port, "PING").unwrap(), "+PONG");
    server.stop();
    let server = std::thread::spawn(move || {
        server.start_again();
        server
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(redis(port, "PING").unwrap(), "+PONG");
    drop(server);
    assert!(redis(port, "PING").is_err(), "dropped: killed");
}

#[test]
fn zookeeper_comes_back_on_the_same_port_with_its_data() {
    let mut server = ZkServer::start();
    let port = server.port;
    server.stop();
    assert_eq!(four_letter(port, "ruok"), None, "a stopped server refuses connections");
    let data = server.dir().join("data");
    assert!(data.exists(), "stop keeps the data directory");
    server.start_again();
    assert_eq!(four_letter(port, "ruok").as_deref(), Some("imok"));
    let dir = server.dir().to_path_buf();
    drop(server);
    assert!(!dir.exists(), "drop removes the directory");
}

/// POST `body` (JSON) to etcd's JSON gateway at `path` on loopback `port`; the response body.
fn etcd_json(port: u16, path: &str, body: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer.split_once("\r\n\r\n").map_or(answer.clone(), |(_, b)| b.to_string()))
}

#[test]
fn etcd_comes_back_on_the_same_ports_with_its_keys() {
    let mut server = EtcdServer::start();
    let (port, peer) = (server.port, server.peer_port());
    assert_ne!(port, peer);
    // Key "k" and value "v", base64: "aw==" and "dg==".
    let put = etcd_json(port, "/v3/kv/put", r#"{"key":"aw==","value":"dg=="}"#).unwrap();
    assert!(put.contains("revision"), "{put}");
    server.stop();
    assert!(!server.is_running());
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "a stopped server refuses connections"
    );
    assert!(server.dir().join("data").exists(), "stop keeps the data directory");
    server.start_again();
    assert_eq!((server.port, server.peer_port()), (port, peer));
    let got = etcd_json(port, "/v3/kv/range", r#"{"key":"aw=="}"#).unwrap();
    assert!(got.contains(r#""value":"dg==""#), "the key survived the restart: {got}");
    let dir = server.dir().to_path_buf();
    drop(server);
    assert!(!dir.exists(), "drop removes the directory");
}
