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

use std::net::SocketAddr;
use std::sync::Mutex;

/// The process ids of a cluster's members, by member index (`None` while one is not running).
#[derive(Default)]
pub(crate) struct Origins {
    pids: Mutex<Vec<Option<u32>>>,
}

impl Origins {
    /// Record that member `i` runs as `pid` (or, with `None`, no longer runs).
    pub fn set(&self, i: usize, pid: Option<u32>) {
        let mut pids = self.pids.lock().unwrap_or_else(|e| e.into_inner());
        if pids.len() <= i {
            pids.resize(i + 1, None);
        }
        pids[i] = pid;
    }

    /// The member whose process holds the other end of the loopback connection that a proxy
    /// listening on `local` accepted from `peer`; `None` for anyone else (a client, a
    /// Sentinel, a connection already closed).
    pub fn of(&self, peer: SocketAddr, local: SocketAddr) -> Option<usize> {
        let inode = sockets()
            .into_iter()
            .find(|s| s.local == peer.port() && s.remote == local.port() && s.inode != 0)?
            .inode;
        let pids = self.pids.lock().unwrap_or_else(|e| e.into_inner()).clone();
        pids.iter().position(|pid| pid.is_some_and(|pid| socket_inodes(pid).contains(&inode)))
    }

    /// The connections that run straight from one member's process to another's, bypassing
    /// the proxies, as `(connecting member, listening member)` pairs (both ends are listed by
    /// the kernel, so each such connection appears once per direction of ownership). A
    /// cluster whose traffic all goes through its proxies has none.
    pub fn direct_links(&self) -> Vec<(usize, usize)> {
        let pids = self.pids.lock().unwrap_or_else(|e| e.into_inner()).clone();
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
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port =
                |f: &str| f.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            let (Some(local), Some(remote), Some(inode)) = (
                fields.get(1).and_then(|f| port(f)),
                fields.get(2).and_then(|f| port(f)),
                fields.get(9).and_then(|f| f.parse().ok()),
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
        assert_eq!(origins.of(peer, listener.local_addr().unwrap()), Some(2));
        origins.set(2, None);
        assert_eq!(origins.of(peer, listener.local_addr().unwrap()), None);
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
