//! A cuttable, pausable TCP forwarder.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A TCP forwarder to the server for one client. [`Proxy::cut`] closes its connections and
/// refuses new ones until [`Proxy::heal`]: the client is cut off as by a crash or a partition,
/// while the server keeps whatever the client left there. [`Proxy::pause`] holds every byte in
/// both directions until [`Proxy::resume`], as a stalled process or network would.
pub struct Proxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    paused: tokio::sync::watch::Sender<bool>,
    /// The connections' tasks (aborted by a cut).
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    /// The accepting task (aborted on drop).
    accept: tokio::task::AbortHandle,
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // What was read during a pause is held back, not lost.
        while *paused.borrow_and_update() {
            if paused.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Proxy {
    /// Start forwarding a loopback port of its own to `upstream`, on the current tokio runtime
    /// (its tasks end with the runtime, or when it is dropped). Panics if no port can be bound:
    /// for tests; [`Proxy::try_start`] returns the error.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        Proxy::try_start(upstream).await.expect("bind proxy")
    }

    /// [`Proxy::start`], returning the error when no loopback port can be bound.
    pub async fn try_start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let (paused, _) = tokio::sync::watch::channel(false);
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (cut2, tasks2, paused2) = (cut.clone(), tasks.clone(), paused.clone());
        let accept = tokio::spawn(async move {
            loop {
                let client = match listener.accept().await {
                    Ok((c, _)) => c,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if cut2.load(Ordering::SeqCst) {
                    continue;
                }
                let paused = paused2.subscribe();
                let conn = tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, paused.clone()), pipe(sr, cw, paused));
                });
                let mut conns = tasks2.lock().unwrap_or_else(|e| e.into_inner());
                conns.retain(|t| !t.is_finished());
                conns.push(conn.abort_handle());
            }
        });
        Ok(Proxy { addr, cut, paused, tasks, accept: accept.abort_handle() })
    }

    /// The address the client connects to instead of the server's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drop every connection (both sides see them close); new connections are accepted and
    /// closed at once, until [`Proxy::heal`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for t in self.tasks.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            t.abort();
        }
    }

    /// Forward new connections again after [`Proxy::cut`] (the client reconnects by itself).
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// True between [`Proxy::cut`] and [`Proxy::heal`].
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    /// Hold all traffic until [`Proxy::resume`].
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Let held and new traffic through again.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
