//! A server that accepts connections and never answers, like a hung one: for tests of
//! connect and response timeouts.

use std::net::SocketAddr;

/// A loopback listener that accepts every connection and keeps it open without a byte in
/// reply. Stops listening when dropped.
pub struct SilentServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl SilentServer {
    /// Listen on a free loopback port (inside a tokio runtime).
    pub async fn start() -> Self {
        let listener =
            tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        SilentServer { addr, task }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
