//! A cuttable, pausable TCP forwarder; in a cluster, one that knows which member each
//! connection comes from, so that one member's links can be cut or held without the others'.
//!
//! **Origins, lazily.** A connection's origin (a member, or anyone else) matters only while
//! the links differ by origin ([`Proxy::set_links`]: some member's link is cut or held while
//! the others' are not). A proxy accepts a connection with its origin unknown and forwards it
//! at once, with no blocking work: while no link depends on the origin, nobody asks. When the
//! links come to differ, every connection whose origin is still unknown waits (forwarding
//! nothing) until one scan ([`Origins::identify`]) names the origins of all of them, in the
//! caller of [`Proxy::set_links`] or its cluster's; a connection accepted while they differ
//! waits for a batched scan ([`Origins::of`]) before a byte goes through. A known origin is
//! kept for the life of the connection.
//!
//! Each direction of a connection forwards through one buffer of its own, allocated once.

use crate::origin::{Ends, Origins};
use std::collections::HashMap;
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
    /// Who the members are, for a cluster's proxy; without it every connection is a client's.
    origins: Option<Arc<Origins>>,
    prelude: Option<Prelude>,
}

/// Who opened a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// Not known yet: nobody needed to know.
    Unknown,
    /// Anyone but a member (a client, a Sentinel).
    Other,
    /// Member `i`.
    Member(usize),
}

/// What a connection's two directions follow: `None` while it waits for its origin to be
/// known (it forwards nothing and, when new, does not connect upstream yet).
type Rule = Option<Link>;

struct Conn {
    ends: Ends,
    origin: Origin,
    rule: watch::Sender<Rule>,
}

/// A connection that waits for its origin: `(proxy's id of it, its ends)`.
pub(crate) type Waiting = (u64, Ends);

#[derive(Default)]
struct State {
    /// [`Proxy::cut`] / [`Proxy::heal`]: for every connection.
    cut: bool,
    /// [`Proxy::pause`] / [`Proxy::resume`]: for every connection.
    paused: bool,
    /// The link of each origin: index 0 for anyone but a member, `1 + i` for member `i`;
    /// missing members have index 0's.
    links: Vec<Link>,
    /// Every live connection, by an id of this proxy's.
    conns: HashMap<u64, Conn>,
    next: u64,
}

impl State {
    fn link(&self, origin: Origin) -> Link {
        let whole = if self.cut {
            Link::Cut
        } else if self.paused {
            Link::Held
        } else {
            Link::Open
        };
        let others = self.links.first().copied().unwrap_or(Link::Open);
        let own = match origin {
            Origin::Member(i) => self.links.get(i + 1).copied().unwrap_or(others),
            Origin::Other | Origin::Unknown => others,
        };
        whole.max(own)
    }

    /// Whether some member's link differs from everyone else's.
    fn origin_matters(&self) -> bool {
        let others = self.link(Origin::Other);
        (0..self.links.len().saturating_sub(1)).any(|i| self.link(Origin::Member(i)) != others)
    }

    /// The rule for a connection from `origin`: wait while it is unknown and matters.
    fn rule(&self, origin: Origin) -> Rule {
        match origin {
            Origin::Unknown if self.origin_matters() => None,
            known => Some(self.link(known)),
        }
    }

    /// Tell every live connection its rule (after a change of links), and return those that
    /// now wait for their origin.
    fn apply(&mut self) -> Vec<Waiting> {
        let mut waiting = Vec::new();
        for (&id, conn) in &self.conns {
            let rule = self.rule(conn.origin);
            if rule.is_none() {
                waiting.push((id, conn.ends));
            }
            conn.rule.send_replace(rule);
        }
        waiting
    }
}

/// A connection's place in its proxy's [`State::conns`], given up when it ends.
struct Registered {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.shared.lock().conns.remove(&self.id);
    }
}

/// Wait until `rule` is open: true, or cut (or the proxy gone): false.
async fn open(rule: &mut watch::Receiver<Rule>) -> bool {
    loop {
        match *rule.borrow_and_update() {
            Some(Link::Open) => return true,
            Some(Link::Cut) => return false,
            Some(Link::Held) | None => {}
        }
        if rule.changed().await.is_err() {
            return false;
        }
    }
}

async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut link: watch::Receiver<Rule>) {
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
    link: &mut watch::Receiver<Rule>,
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
    let local = client.local_addr().unwrap_or(peer);
    let (registered, mut link) = {
        let mut state = shared.lock();
        let origin = if shared.origins.is_some() { Origin::Unknown } else { Origin::Other };
        let rule = state.rule(origin);
        if rule == Some(Link::Cut) {
            return; // accepted and closed at once
        }
        let (tx, rx) = watch::channel(rule);
        let id = state.next;
        state.next += 1;
        state.conns.insert(id, Conn { ends: (peer, local), origin, rule: tx });
        (Registered { shared: shared.clone(), id }, rx)
    };
    if link.borrow().is_none() {
        if let Some(origins) = &shared.origins {
            let origin = origins.of((peer, local)).await;
            shared.identified(registered.id, origin);
        }
    }
    match link.wait_for(Option::is_some).await.map(|rule| *rule) {
        Ok(Some(Link::Open | Link::Held)) => {}
        _ => return,
    }
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
        _ = cut.wait_for(|l| *l == Some(Link::Cut)) => {}
    }
    drop(registered);
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connection `id` comes from member `member` (or, with `None`, from anyone else):
    /// recorded unless known already, and its rule follows.
    fn identified(&self, id: u64, member: Option<usize>) {
        let mut state = self.lock();
        let Some(conn) = state.conns.get_mut(&id) else { return };
        if conn.origin == Origin::Unknown {
            conn.origin = member.map_or(Origin::Other, Origin::Member);
        }
        let origin = conn.origin;
        let rule = state.rule(origin);
        if let Some(conn) = state.conns.get(&id) {
            conn.rule.send_replace(rule);
        }
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
    /// `origins`, each connection's links follow its origin ([`Proxy::set_links`]); with
    /// `prelude`, the first bytes from the client may be rewritten.
    pub(crate) fn spawn(
        handle: &tokio::runtime::Handle,
        listener: std::net::TcpListener,
        upstream: SocketAddr,
        origins: Option<Arc<Origins>>,
        prelude: Option<Prelude>,
    ) -> std::io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let listener = {
            let _runtime = handle.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared { upstream, state: Mutex::default(), origins, prelude });
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
    /// (a missing member has `links[0]`). Live connections of known origin follow at once: a
    /// cut one is closed, a held one stops forwarding, an opened one delivers what it held.
    /// When the links differ by origin, the connections whose origin is unknown stop
    /// forwarding, and are returned: give their origins to [`Proxy::identified`] (one
    /// [`Origins::identify`] for all the proxies of a cluster).
    pub(crate) fn set_links(&self, links: Vec<Link>) -> Vec<Waiting> {
        let mut state = self.shared.lock();
        state.links = links;
        state.apply()
    }

    /// The origins of connections [`Proxy::set_links`] returned: each follows its link.
    pub(crate) fn identified(&self, found: impl IntoIterator<Item = (u64, Option<usize>)>) {
        for (id, member) in found {
            self.shared.identified(id, member);
        }
    }

    /// [`Proxy::set_links`], then the origins of the connections it returned, from one scan.
    #[cfg(test)]
    fn set_links_now(&self, links: Vec<Link>) {
        let waiting = self.set_links(links);
        self.settle(waiting);
    }

    /// Name the origins of `waiting` connections with one scan (blocking file reads; none
    /// when no connection waits).
    fn settle(&self, waiting: Vec<Waiting>) {
        let Some(origins) = self.shared.origins.as_ref().filter(|_| !waiting.is_empty()) else {
            return;
        };
        let ends: Vec<Ends> = waiting.iter().map(|(_, ends)| *ends).collect();
        let found = origins.identify(&ends);
        self.identified(waiting.iter().map(|(id, _)| *id).zip(found));
    }

    /// Drop every connection (both sides see them close); new connections are accepted and
    /// closed at once, until [`Proxy::heal`].
    pub fn cut(&self) {
        let waiting = {
            let mut state = self.shared.lock();
            state.cut = true;
            state.apply()
        };
        self.settle(waiting);
    }

    /// Forward new connections again after [`Proxy::cut`] (the client reconnects by itself).
    pub fn heal(&self) {
        let waiting = {
            let mut state = self.shared.lock();
            state.cut = false;
            state.apply()
        };
        self.settle(waiting);
    }

    /// True between [`Proxy::cut`] and [`Proxy::heal`].
    pub fn is_cut(&self) -> bool {
        self.shared.lock().cut
    }

    /// Hold all traffic until [`Proxy::resume`].
    pub fn pause(&self) {
        let waiting = {
            let mut state = self.shared.lock();
            state.paused = true;
            state.apply()
        };
        self.settle(waiting);
    }

    /// Let held and new traffic through again.
    pub fn resume(&self) {
        let waiting = {
            let mut state = self.shared.lock();
            state.paused = false;
            state.apply()
        };
        self.settle(waiting);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::process::{Child, Command, Stdio};
    use tokio::net::{TcpSocket, TcpStream};
    use tokio::runtime::Runtime;

    /// How long any one step may take on a loaded machine before the test fails.
    const PATIENCE: Duration = Duration::from_secs(60);

    fn runtime() -> Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
    }

    /// A server that sends back every byte it receives.
    async fn echo() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = conn.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// A cluster's proxy in front of `upstream`, its member 0 the process `member`.
    fn cluster_proxy(rt: &Runtime, upstream: SocketAddr, member: u32) -> (Proxy, Arc<Origins>) {
        let origins = Arc::new(Origins::default());
        origins.set(0, Some(member));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy =
            Proxy::spawn(rt.handle(), listener, upstream, Some(origins.clone()), None).unwrap();
        (proxy, origins)
    }

    /// Whether a byte sent on `conn` comes back: false when the connection is closed.
    async fn round_trip(conn: &mut TcpStream) -> bool {
        let trip = async {
            conn.write_all(b"x").await?;
            let mut byte = [0u8; 1];
            conn.read(&mut byte).await
        };
        match tokio::time::timeout(PATIENCE, trip).await.expect("no answer, no close") {
            Ok(n) => n == 1,
            Err(_) => false,
        }
    }

    /// `count` connections to `addr`, each of which has round-tripped a byte.
    async fn clients(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
        let tasks: Vec<_> = (0..count)
            .map(|_| {
                tokio::spawn(async move {
                    let mut conn = TcpStream::connect(addr).await.unwrap();
                    assert!(round_trip(&mut conn).await, "a client's connection is forwarded");
                    conn
                })
            })
            .collect();
        let mut conns = Vec::new();
        for task in tasks {
            conns.push(task.await.unwrap());
        }
        conns
    }

    /// A process (`sleep`) that holds `sockets` (three at most) as its standard streams, as
    /// a member holds the connections it opens.
    fn holder(sockets: &[&TcpSocket]) -> Child {
        let mut streams = sockets
            .iter()
            .map(|s| Stdio::from(s.as_fd().try_clone_to_owned().expect("dup a socket")));
        let mut next = || streams.next().unwrap_or_else(Stdio::null);
        let (stdin, stdout, stderr) = (next(), next(), next());
        Command::new("sleep")
            .arg("600")
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("run sleep")
    }

    /// Raise this process's limit of open files to what `needed` takes, or fail saying so.
    fn allow_files(needed: u64) {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `limit` is a valid rlimit for the kernel to fill in and read.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
            if limit.rlim_cur < needed {
                limit.rlim_cur = limit.rlim_max.min(needed);
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
            }
        }
        assert!(limit.rlim_cur >= needed, "the test needs {needed} open files: raise `ulimit -Hn`");
    }

    #[test]
    fn a_thousand_clients_connect_with_no_scan_and_a_fault_costs_one() {
        const CLIENTS: usize = 1000;
        // Four sockets per connection here: the client's, the proxy's two, the echo's.
        allow_files(4 * CLIENTS as u64 + 256);
        let rt = runtime();
        let mut member = holder(&[]);
        let upstream = rt.block_on(echo());
        let (proxy, origins) = cluster_proxy(&rt, upstream, member.id());

        let open = rt.block_on(clients(proxy.addr(), CLIENTS));
        assert_eq!(origins.scans(), 0, "no link depends on the origin: nobody asks it");

        // Member 0 cut off: the connections already open are named by one scan, and are
        // clients' (forwarded still).
        proxy.set_links_now(vec![Link::Open, Link::Cut]);
        assert_eq!(origins.scans(), 1, "one scan for {CLIENTS} connections");
        let mut open = open;
        rt.block_on(async {
            for conn in &mut open {
                assert!(round_trip(conn).await, "a client's connection stays forwarded");
            }
        });
        drop(open);

        // Accepted while member 0 is cut off: named in batches, not one scan each.
        let again = rt.block_on(clients(proxy.addr(), CLIENTS));
        let scans = origins.scans() - 1;
        assert!(scans >= 1, "connections accepted under a fault are identified");
        assert!(scans <= CLIENTS / 2, "{scans} scans for {CLIENTS} connections");
        eprintln!("{CLIENTS} connections accepted under a fault took {scans} scans");
        drop(again);
        member.kill().unwrap();
        member.wait().unwrap();
    }

    #[test]
    fn a_cut_member_is_cut_and_held_while_the_clients_are_not() {
        let rt = runtime();
        let sockets: Vec<TcpSocket> = (0..3).map(|_| TcpSocket::new_v4().unwrap()).collect();
        let mut member = holder(&sockets.iter().collect::<Vec<_>>());
        let upstream = rt.block_on(echo());
        let (proxy, origins) = cluster_proxy(&rt, upstream, member.id());
        let mut sockets = sockets.into_iter();
        let mut connect = || {
            let socket = sockets.next().unwrap();
            rt.block_on(async {
                let mut conn = socket.connect(proxy.addr()).await.unwrap();
                let forwarded = round_trip(&mut conn).await;
                (conn, forwarded)
            })
        };

        // Before any fault, the member's connection and a client's are forwarded alike.
        let (mut before, forwarded) = connect();
        assert!(forwarded, "no fault: the member's connection is forwarded");
        let mut client = rt.block_on(clients(proxy.addr(), 1)).remove(0);
        assert_eq!(origins.scans(), 0);

        proxy.set_links_now(vec![Link::Open, Link::Cut]);
        assert_eq!(origins.scans(), 1, "one scan names both connections");
        assert!(!rt.block_on(round_trip(&mut before)), "the member's open connection is cut");
        assert!(rt.block_on(round_trip(&mut client)), "the client's is not");
        let (_during, forwarded) = connect();
        assert!(!forwarded, "a connection the member opens under the cut is cut");
        assert!(rt.block_on(round_trip(&mut client)), "the client's is still forwarded");
        assert_eq!(rt.block_on(clients(proxy.addr(), 1)).len(), 1, "new clients get through");

        // Held: the member's bytes wait, nobody else's, and arrive when the link opens.
        proxy.set_links_now(vec![Link::Open, Link::Held]);
        let socket = sockets.next().unwrap();
        let mut held = rt.block_on(socket.connect(proxy.addr())).unwrap();
        let echoed = rt.block_on(async {
            held.write_all(b"h").await.unwrap();
            let mut byte = [0u8; 1];
            let early =
                tokio::time::timeout(Duration::from_millis(300), held.read(&mut byte)).await;
            assert!(early.is_err(), "a held link delivers nothing: {early:?}");
            assert!(round_trip(&mut client).await, "the client's link is not held");
            proxy.set_links_now(vec![Link::Open, Link::Open]);
            tokio::time::timeout(PATIENCE, held.read(&mut byte)).await.map(|n| (n.ok(), byte))
        });
        assert_eq!(echoed.unwrap(), (Some(1), *b"h"), "released, the held byte arrives");
        member.kill().unwrap();
        member.wait().unwrap();
    }
}
