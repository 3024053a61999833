//! A lock-service node in this process, and `lockctl` commands aimed at it.

#![allow(dead_code)]

use clap::Parser;
use lock_service::client::{ClientConfig, ServiceAdmin};
use lock_service::server::{Node, ServerArgs};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A single-node cluster on free loopback ports, run on a runtime of its own; stopped when
/// dropped.
pub struct TestNode {
    pub node: Arc<Node>,
    runtime: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
}

impl TestNode {
    /// Start a node with `extra` arguments and wait until it leads.
    pub fn start(extra: &[&str]) -> TestNode {
        let t = TestNode::start_as(0, true, extra);
        let deadline = Instant::now() + Duration::from_secs(20);
        while t.node.status().leader != Some(0) {
            assert!(Instant::now() < deadline, "the node did not lead within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        t
    }

    /// Start node `id` as a cluster of its own: formed (`init`), or waiting to be added.
    pub fn start_as(id: u64, init: bool, extra: &[&str]) -> TestNode {
        let dir = tempfile::tempdir().unwrap();
        let (peer, client) = (test_servers::free_port(), test_servers::free_port());
        let cluster = format!("{id}=127.0.0.1:{peer}/127.0.0.1:{client}");
        let data = dir.path().join("data").to_str().unwrap().to_string();
        let id = id.to_string();
        let mut argv = vec!["lock-server", "--id", &id, "--cluster", &cluster];
        argv.extend_from_slice(&["--data-dir", &data]);
        if init {
            argv.push("--init");
        }
        argv.extend_from_slice(extra);
        let args = ServerArgs::try_parse_from(argv).expect("node arguments");
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let node = runtime.block_on(Node::start(&args)).expect("start a node");
        TestNode { node, runtime, dir }
    }

    /// Its client address.
    pub fn endpoint(&self) -> String {
        self.node.client_addr().to_string()
    }

    /// `lockctl` aimed at this node.
    pub fn lockctl(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lockctl"));
        c.env("LOCK_SERVICE", self.endpoint()).env_remove("LOCK_SERVICE_TOKEN");
        c
    }

    /// Run `f` on the node's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// An administration client of this node.
    pub fn admin(&self, config: ClientConfig) -> ServiceAdmin {
        ServiceAdmin::new(&[self.endpoint()], config).unwrap()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        let node = self.node.clone();
        self.runtime.block_on(async move { node.shutdown().await });
    }
}

/// Wait until `path` exists and holds a line, or panic after `within`.
pub fn wait_for_file(path: &Path, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "{} did not appear within {within:?}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` is still alive (a zombie not yet reaped counts as gone).
pub fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
    match stat {
        Err(_) => false,
        Ok(s) => !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
    }
}
