//! A cuttable, pausable TCP forwarder; in a cluster, one that knows which member each
//! connection comes from, so that one member's links can be cut or held without the others'.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;

/// What a proxy does with the traffic of one connection. Ordered: when two rules apply (the
/// whole proxy is paused and this origin is cut), the stronger one wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Link {
    /// Forward every byte.
    Open,
    /// Hold every byte, and the end of the stream, until the link opens again (a stalled
    /// network: nothing is lost, nothing arrives).
    Held,
    /// Close the connection; refuse new ones (a partition, as the endpoints see it).
    Cut,
}

/// Tells which cluster member opened a connection, from the connection's peer address and
/// the proxy's own address (see [`crate::origin`]).
pub(crate) type Identify = Arc<dyn Fn(SocketAddr, SocketAddr) -> Option<usize> + Send + Sync>;

/// Looks at the first bytes a client sends and may replace them before they go upstream
/// (ZooKeeper's election handshake names the sender's own address, which must be rewritten to
/// its proxy's). Called with all the bytes read so far.
pub(crate) type Prelude = Arc<dyn Fn(&[u8]) -> Rewrite + Send + Sync>;

/// What a cluster engine decides about the first bytes of a connection through one of its
/// proxies ([`crate::ClusterEngine::rewrite`]).
pub enum Rewrite {
    /// Not enough bytes yet.
    More,
    /// Forward them as they are.
    Keep,
    /// Send `with` instead of the first `consumed` bytes.
    Replace {
        /// How many of the bytes seen are replaced.
        consumed: usize,
        /// What goes upstream instead of them.
        with: Vec<u8>,
    },
}

/// A TCP forwarder to the server for one client. [`Proxy::cut`] closes its connections and
/// refuses new ones until [`Proxy::heal`]: the client is cut off as by a crash or a partition,
/// while the server keeps whatever the client left there. [`Proxy::pause`] holds every byte in
/// both directions until [`Proxy::resume`], as a stalled process or network would.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The accepting task (aborted on drop).
    accept: tokio::task::AbortHandle,
}

struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
    identify: Option<Identify>,
    prelude: Option<Prelude>,
}

#[derive(Default)]
struct State {
    /// [`Proxy::cut`] / [`Proxy::heal`]: for every connection.
    cut: bool,
    /// [`Proxy::pause`] / [`Proxy::resume`]: for every connection.
    paused: bool,
    /// The link of each origin: index 0 for anyone but a member, `1 + i` for member `i`;
    /// missing ones are open.
    links: Vec<Link>,
    /// Every live connection: its origin and the watch its two directions follow.
    conns: Vec<(Option<usize>, watch::Sender<Link>)>,
}

impl State {
    fn link(&self, origin: Option<usize>) -> Link {
        let whole = if self.cut {
            Link::Cut
        } else if self.paused {
            Link::Held
        } else {
            Link::Open
        };
        let own = self.links.get(origin.map_or(0, |i| i + 1)).copied().unwrap_or(Link::Open);
        whole.max(own)
    }

    /// Tell every live connection its link (after a change of rules).
    fn apply(&mut self) {
        self.conns.retain(|(_, tx)| !tx.is_closed());
        for (origin, tx) in &self.conns {
            tx.send_replace(self.link(*origin));
        }
    }
}

/// Wait until `link` is open: true, or cut (or the proxy gone): false.
async fn open(link: &mut watch::Receiver<Link>) -> bool {
    loop {
        match *link.borrow_and_update() {
            Link::Open => return true,
            Link::Cut => return false,
            Link::Held => {}
        }
        if link.changed().await.is_err() {
            return false;
        }
    }
}

async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut link: watch::Receiver<Link>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        // What arrives while the link is held, bytes or the end of the stream, waits.
        if !open(&mut link).await {
            return;
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Read the client's first bytes until `prelude` decides, and send what it decided upstream.
async fn rewrite_prelude(
    prelude: &Prelude,
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    link: &mut watch::Receiver<Link>,
) -> std::io::Result<()> {
    let mut seen = Vec::new();
    let out = loop {
        match prelude(&seen) {
            Rewrite::More => {}
            Rewrite::Keep => break seen,
            Rewrite::Replace { consumed, mut with } => {
                with.extend_from_slice(&seen[consumed.min(seen.len())..]);
                break with;
            }
        }
        let mut chunk = [0u8; 1024];
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            break seen; // ended early: forward what came, the pipe forwards the end
        }
        seen.extend_from_slice(&chunk[..n]);
    };
    if !open(link).await {
        return Err(std::io::ErrorKind::ConnectionAborted.into());
    }
    to.write_all(&out).await
}

/// Forward one accepted connection until it ends or its link is cut.
async fn serve(shared: Arc<Shared>, client: tokio::net::TcpStream, peer: SocketAddr) {
    let origin = match (&shared.identify, client.local_addr()) {
        (Some(identify), Ok(local)) => {
            let identify = identify.clone();
            // It reads /proc: a few hundred microseconds of blocking file reads.
            tokio::task::spawn_blocking(move || identify(peer, local)).await.unwrap_or(None)
        }
        _ => None,
    };
    let link = {
        let mut state = shared.lock();
        let link = state.link(origin);
        if link == Link::Cut {
            return; // accepted and closed at once
        }
        let (tx, rx) = watch::channel(link);
        state.conns.push((origin, tx));
        rx
    };
    let Ok(server) = tokio::net::TcpStream::connect(shared.upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, cw) = client.into_split();
    let (sr, mut sw) = server.into_split();
    let mut first = link.clone();
    let upward = async {
        if let Some(prelude) = &shared.prelude {
            if rewrite_prelude(prelude, &mut cr, &mut sw, &mut first).await.is_err() {
                return;
            }
        }
        pipe(cr, sw, first).await
    };
    let mut cut = link.clone();
    tokio::select! {
        _ = async { tokio::join!(upward, pipe(sr, cw, link)) } => {}
        // Dropping both streams closes them: both ends see the connection go.
        _ = cut.wait_for(|l| *l == Link::Cut) => {}
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
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
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        Proxy::spawn(&tokio::runtime::Handle::current(), listener, upstream, None, None)
    }

    /// Forward what `listener` accepts to `upstream`, on the runtime of `handle`; with
    /// `identify`, each connection's links follow its origin ([`Proxy::set_links`]); with
    /// `prelude`, the first bytes from the client may be rewritten.
    pub(crate) fn spawn(
        handle: &tokio::runtime::Handle,
        listener: std::net::TcpListener,
        upstream: SocketAddr,
        identify: Option<Identify>,
        prelude: Option<Prelude>,
    ) -> std::io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let listener = {
            let _runtime = handle.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared { upstream, state: Mutex::default(), identify, prelude });
        let accepting = shared.clone();
        let accept = handle.spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((client, peer)) => {
                        tokio::spawn(serve(accepting.clone(), client, peer));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(Proxy { addr, shared, accept: accept.abort_handle() })
    }

    /// The address the client connects to instead of the server's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The links by origin: `links[0]` for anyone but a member, `links[1 + i]` for member `i`
    /// (missing ones open). Live connections follow at once: a cut one is closed, a held one
    /// stops forwarding, an opened one delivers what it held.
    pub(crate) fn set_links(&self, links: Vec<Link>) {
        let mut state = self.shared.lock();
        state.links = links;
        state.apply();
    }

    /// Drop every connection (both sides see them close); new connections are accepted and
    /// closed at once, until [`Proxy::heal`].
    pub fn cut(&self) {
        let mut state = self.shared.lock();
        state.cut = true;
        state.apply();
    }

    /// Forward new connections again after [`Proxy::cut`] (the client reconnects by itself).
    pub fn heal(&self) {
        let mut state = self.shared.lock();
        state.cut = false;
        state.apply();
    }

    /// True between [`Proxy::cut`] and [`Proxy::heal`].
    pub fn is_cut(&self) -> bool {
        self.shared.lock().cut
    }

    /// Hold all traffic until [`Proxy::resume`].
    pub fn pause(&self) {
        let mut state = self.shared.lock();
        state.paused = true;
        state.apply();
    }

    /// Let held and new traffic through again.
    pub fn resume(&self) {
        let mut state = self.shared.lock();
        state.paused = false;
        state.apply();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
