//! Which member of a cluster opened a loopback connection.
//!
//! A cluster's proxies must tell a member's connections from the clients' to cut one member
//! off from its peers (in both directions) or to hold back only the link from one member to
//! another. Nothing in the connection says so: every process connects from 127.0.0.1 (the
//! kernel picks that source address for any 127.0.0.0/8 destination), etcd has no option for
//! the source address of its peer connections, and it must advertise one peer URL to every
//! member (its member id is hashed from it). The kernel knows, though: the connecting socket is
//! in `/proc/net/tcp` (or `tcp6`, for a JVM's dual-stack sockets) with its inode, and the inode
//! is in the `/proc/<pid>/fd` of the process that holds it. The members are our children, so
//! their `fd` directories are readable.
//!
//! **Cost, and when it is paid.** Telling the members' connections apart costs a read of the
//! kernel's socket tables (every TCP socket of the host) and of each member's `fd` directory:
//! milliseconds with thousands of connections open, and blocking file reads. A proxy pays it
//! only while the origin of a connection decides its fate (some member's link is cut or held,
//! see [`crate::proxy`]), and then once for a batch of connections, never once per
//! connection: [`Origins::identify`] answers any number of them with one scan, and
//! [`Origins::of`] gathers the connections accepted meanwhile into the next scan, with at most
//! one scan under way at a time. [`Origins::scans`] counts them.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// One accepted connection, as a proxy sees it: the peer's address (the connecting socket)
/// and the proxy's own address.
pub(crate) type Ends = (SocketAddr, SocketAddr);

/// The process ids of a cluster's members, by member index (`None` while one is not running),
/// and the connections waiting for the next scan.
#[derive(Default)]
pub(crate) struct Origins {
    pids: Mutex<Vec<Option<u32>>>,
    /// How many scans of the socket tables [`Origins::identify`] has made.
    scans: AtomicUsize,
    batch: Mutex<Batch>,
}

/// The connections [`Origins::of`] was asked about since the last scan began.
#[derive(Default)]
struct Batch {
    waiting: Vec<(Ends, oneshot::Sender<Option<usize>>)>,
    /// Whether a task is scanning (it takes the next batch when its scan is done).
    scanning: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Origins {
    /// Record that member `i` runs as `pid` (or, with `None`, no longer runs).
    pub fn set(&self, i: usize, pid: Option<u32>) {
        let mut pids = lock(&self.pids);
        if pids.len() <= i {
            pids.resize(i + 1, None);
        }
        pids[i] = pid;
    }

    /// How many times the socket tables have been scanned.
    pub fn scans(&self) -> usize {
        self.scans.load(Ordering::Relaxed)
    }

    /// For each connection, the member whose process holds its connecting end; `None` for
    /// anyone else (a client, a Sentinel, a connection already closed). One scan, whatever
    /// the number of connections: the socket tables are read once, and each member's `fd`
    /// directory once (none when no connection is still open). Blocks on file reads.
    pub fn identify(&self, conns: &[Ends]) -> Vec<Option<usize>> {
        if conns.is_empty() {
            return Vec::new();
        }
        self.scans.fetch_add(1, Ordering::Relaxed);
        // The connecting socket: its local port is the peer's, its remote port the proxy's.
        let wanted: HashSet<(u16, u16)> =
            conns.iter().map(|(peer, local)| (peer.port(), local.port())).collect();
        let mut inodes: HashMap<(u16, u16), u64> = HashMap::new();
        for s in sockets() {
            if s.inode != 0 && wanted.contains(&(s.local, s.remote)) {
                inodes.insert((s.local, s.remote), s.inode);
            }
        }
        let mut owner: HashMap<u64, usize> = HashMap::new();
        if !inodes.is_empty() {
            let sought: HashSet<u64> = inodes.values().copied().collect();
            let pids = lock(&self.pids).clone();
            for (i, pid) in pids.iter().enumerate() {
                let Some(pid) = *pid else { continue };
                for inode in socket_inodes(pid).into_iter().filter(|i| sought.contains(i)) {
                    owner.insert(inode, i);
                }
            }
        }
        conns
            .iter()
            .map(|(peer, local)| {
                let inode = inodes.get(&(peer.port(), local.port()))?;
                owner.get(inode).copied()
            })
            .collect()
    }

    /// [`Origins::identify`] for one connection, in the batch of every connection asked
    /// about while the scan before it runs: a burst of connections costs two scans, not one
    /// each. The scan runs on the runtime's blocking pool, one at a time.
    pub async fn of(self: &Arc<Self>, conn: Ends) -> Option<usize> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut batch = lock(&self.batch);
            batch.waiting.push((conn, tx));
            !std::mem::replace(&mut batch.scanning, true)
        };
        if start {
            tokio::spawn(self.clone().scan_batches());
        }
        rx.await.unwrap_or(None)
    }

    /// Scan for the waiting connections, batch after batch, until none waits.
    async fn scan_batches(self: Arc<Self>) {
        // Let the connections accepted in the same turn of the runtime join the first batch.
        tokio::task::yield_now().await;
        loop {
            let waiting = {
                let mut batch = lock(&self.batch);
                if batch.waiting.is_empty() {
                    batch.scanning = false;
                    return;
                }
                std::mem::take(&mut batch.waiting)
            };
            let conns: Vec<Ends> = waiting.iter().map(|(c, _)| *c).collect();
            let me = self.clone();
            let found =
                tokio::task::spawn_blocking(move || me.identify(&conns)).await.unwrap_or_default();
            let found = found.into_iter().chain(std::iter::repeat(None));
            for ((_, tx), origin) in waiting.into_iter().zip(found) {
                let _ = tx.send(origin);
            }
        }
    }

    /// The connections that run straight from one member's process to another's, bypassing
    /// the proxies, as `(connecting member, listening member)` pairs (both ends are listed by
    /// the kernel, so each such connection appears once per direction of ownership). A
    /// cluster whose traffic all goes through its proxies has none.
    pub fn direct_links(&self) -> Vec<(usize, usize)> {
        let pids = lock(&self.pids).clone();
        let owned: Vec<Vec<u64>> =
            pids.iter().map(|pid| pid.map(socket_inodes).unwrap_or_default()).collect();
        let owner = |inode: u64| owned.iter().position(|inodes| inodes.contains(&inode));
        let all = sockets();
        let mut links = Vec::new();
        for a in all.iter().filter(|s| s.inode != 0) {
            let Some(from) = owner(a.inode) else { continue };
            // Its other end: the socket whose local port is our remote one and vice versa.
            for b in all.iter().filter(|b| b.local == a.remote && b.remote == a.local) {
                if let Some(to) = owner(b.inode).filter(|&to| to != from) {
                    links.push((from, to));
                }
            }
        }
        links.sort_unstable();
        links.dedup();
        links
    }
}

/// One TCP socket of the host's network namespace: ports and inode (0 once it is closed and
/// in `TIME_WAIT`). Only ports are compared: every socket of interest is on loopback, and two
/// connected sockets never share both a local and a remote port.
struct Socket {
    local: u16,
    remote: u16,
    inode: u64,
}

/// Every TCP socket of `/proc/net/tcp` and `/proc/net/tcp6`.
fn sockets() -> Vec<Socket> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        // "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode"
        for line in text.lines().skip(1) {
            let mut fields = line.split_whitespace();
            let port =
                |f: &str| f.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            let (Some(local), Some(remote), Some(inode)) = (
                fields.nth(1).and_then(port),
                fields.next().and_then(port),
                fields.nth(6).and_then(|f| f.parse().ok()),
            ) else {
                continue;
            };
            out.push(Socket { local, remote, inode });
        }
    }
    out
}

/// The inodes of the sockets process `pid` holds open.
fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let t = target.to_str()?;
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_connection_of_this_process_is_attributed_to_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let origins = Origins::default();
        origins.set(0, Some(12345678)); // no such process
        origins.set(2, Some(std::process::id()));
        let local = listener.local_addr().unwrap();
        let other = TcpStream::connect(local).unwrap();
        let (_other, other_peer) = listener.accept().unwrap();
        drop(other); // closed: nobody's
        assert_eq!(origins.identify(&[(peer, local), (other_peer, local)]), [Some(2), None]);
        assert_eq!(origins.scans(), 1, "one scan for the batch");
        origins.set(2, None);
        assert_eq!(origins.identify(&[(peer, local)]), [None]);
        assert_eq!(origins.identify(&[]), []);
        assert_eq!(origins.scans(), 2, "nothing to scan for: no scan");
    }

    #[test]
    fn a_connection_within_one_process_is_no_link_between_members() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _accepted = listener.accept().unwrap();
        let origins = Origins::default();
        origins.set(0, Some(std::process::id()));
        assert!(!origins.direct_links().contains(&(0, 0)));
    }
}
