//! The fenced resource: the downstream storage of Kleppmann's argument ("How to do
//! distributed locking", 2016). Every critical section writes to it twice, at the grant and
//! just before release, carrying its guard's fencing token; per lock, it rejects a write whose
//! token is below the highest it has accepted. The decision is made when the write arrives and
//! logged as it was made ([`ResourceWrite`], `resource.csv`); nothing recomputes it later.
//!
//! A holder whose lease ran out while it was paused still believes it holds the lock, and
//! writes when it resumes; by then a newer holder (with a higher token) has written, so the
//! resource rejects the stale write. Without fencing the write would land: the safety figures
//! count both.

//!
//! With `--processes` the resource lives in the parent and the workers reach it over loopback
//! TCP ([`serve`], [`RemoteResource`]): one line per write, `lock contender token at_us`,
//! answered `1` (accepted) or `0` (rejected), decided in arrival order as in one process.

use crate::measure::log::{ResourceLog, ResourceWrite};
use crate::measure::spool::Spool;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// Where a run's contenders write: the resource in this process, or the parent's (a worker).
#[derive(Debug, Clone)]
pub enum Resource {
    /// In this process.
    Local(Arc<FencedResource>),
    /// The parent's, over loopback TCP.
    Remote(Arc<RemoteResource>),
}

impl Resource {
    /// A write (see [`FencedResource::write`]); `None` when a remote resource could not be
    /// reached (the write is then missing from its log).
    pub async fn write(&self, lock: u32, contender: u32, token: u64, at_us: u64) -> Option<bool> {
        match self {
            Resource::Local(r) => Some(r.write(lock, contender, token, at_us)),
            Resource::Remote(r) => r.write(lock, contender, token, at_us).await.ok(),
        }
    }

    /// The log of a local resource (a remote one's is its owner's to take); the error of a
    /// log that could not be kept.
    pub fn take_log(&self) -> std::io::Result<ResourceLog> {
        match self {
            Resource::Local(r) => r.take_log(),
            Resource::Remote(_) => Ok(ResourceLog::default()),
        }
    }
}

/// Serves `resource` on a loopback port of its own until the returned task is aborted.
pub async fn serve(
    resource: Arc<FencedResource>,
) -> std::io::Result<(SocketAddr, lock_core::rt::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = lock_core::rt::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let _ = conn.set_nodelay(true);
            lock_core::rt::spawn(answer(Arc::clone(&resource), conn));
        }
    });
    Ok((addr, task))
}

/// Answers one worker's writes until it hangs up; a malformed line ends the connection.
async fn answer(resource: Arc<FencedResource>, conn: TcpStream) {
    let (read, mut write) = conn.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Some([lock, contender, token, at_us]) = parse_write(&line) else { return };
        let accepted = resource.write(lock as u32, contender as u32, token, at_us);
        if write.write_all(if accepted { b"1\n" } else { b"0\n" }).await.is_err() {
            return;
        }
    }
}

fn parse_write(line: &str) -> Option<[u64; 4]> {
    let mut fields = line.split_ascii_whitespace().map(|f| f.parse::<u64>().ok());
    let out = [fields.next()??, fields.next()??, fields.next()??, fields.next()??];
    fields.next().is_none().then_some(out)
}

/// A worker's connection to the parent's resource, shared by its contenders (one write in
/// flight at a time).
#[derive(Debug)]
pub struct RemoteResource {
    conn: tokio::sync::Mutex<(tokio::io::Lines<BufReader<OwnedReadHalf>>, OwnedWriteHalf)>,
}

impl RemoteResource {
    /// Connects to the resource at `addr`.
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let conn = TcpStream::connect(addr).await?;
        conn.set_nodelay(true)?;
        let (read, write) = conn.into_split();
        Ok(RemoteResource { conn: tokio::sync::Mutex::new((BufReader::new(read).lines(), write)) })
    }

    /// One write; whether it was accepted.
    pub async fn write(
        &self,
        lock: u32,
        contender: u32,
        token: u64,
        at_us: u64,
    ) -> std::io::Result<bool> {
        let mut conn = self.conn.lock().await;
        let (lines, write) = &mut *conn;
        write.write_all(format!("{lock} {contender} {token} {at_us}\n").as_bytes()).await?;
        match lines.next_line().await? {
            Some(answer) => Ok(answer.trim() == "1"),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the fenced resource hung up",
            )),
        }
    }
}

/// The in-process fenced resource every contender of a run writes to.
#[derive(Debug, Default)]
pub struct FencedResource {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    highest: BTreeMap<u32, u64>,
    /// Every write of a run, two per hold, on disk: a run's longest log.
    log: Spool<ResourceWrite>,
}

impl FencedResource {
    /// An empty resource.
    pub fn new() -> Self {
        Self::default()
    }

    /// A write by `contender` under lock `lock` with `token`, at `at_us` on the grant log's
    /// clock: accepted unless a higher token was accepted before. Returns whether it was.
    pub fn write(&self, lock: u32, contender: u32, token: u64, at_us: u64) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let highest = s.highest.entry(lock).or_insert(0);
        let accepted = token >= *highest;
        if accepted {
            *highest = token;
        }
        s.log.push(&ResourceWrite { lock, contender, token, at_us, accepted });
        accepted
    }

    /// Every write so far, in the order decided (and a fresh log for what follows); the error
    /// of a log that could not be written whole.
    pub fn take_log(&self) -> std::io::Result<ResourceLog> {
        let log = std::mem::take(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).log);
        log.finish().map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot keep the fenced resource's log: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_below_the_highest_accepted_is_rejected_per_lock() {
        let r = FencedResource::new();
        assert!(r.write(0, 1, 5, 10));
        assert!(r.write(0, 1, 5, 20), "the same holder's second write");
        assert!(r.write(0, 2, 6, 30));
        assert!(!r.write(0, 1, 5, 40), "the stale holder");
        assert!(r.write(1, 1, 1, 50), "another lock has its own highest token");
        let log: Vec<_> = r.take_log().unwrap().iter().collect();
        assert_eq!(log.len(), 5);
        assert!(!log[3].accepted && log[3].at_us == 40);
    }

    #[tokio::test]
    async fn workers_write_to_the_parents_resource_over_loopback() {
        let parent = Arc::new(FencedResource::new());
        let (addr, server) = serve(Arc::clone(&parent)).await.unwrap();
        let a = RemoteResource::connect(addr).await.unwrap();
        let b = RemoteResource::connect(addr).await.unwrap();
        assert!(a.write(0, 1, 5, 10).await.unwrap());
        assert!(b.write(0, 2, 6, 20).await.unwrap());
        assert!(!a.write(0, 1, 5, 30).await.unwrap(), "stale, from another process");
        let log = parent.take_log().unwrap();
        assert_eq!(log.iter().map(|w| w.accepted).collect::<Vec<_>>(), [true, true, false]);
        assert_eq!(parse_write("1 2 3"), None);
        assert_eq!(parse_write("1 2 3 4 5"), None);
        server.abort();
    }
}
