//! One connection to one node: the dial (TCP, TLS, the credentials' `Hello`), the reader
//! task that routes replies and pushes, and a request's round trip.

use super::{kind_of, lock, PushSink, Shared};
use crate::proto::{
    decode, encode, read_bytes, ClientFrame, ErrorKind, Reply, Request, ServerFrame,
    MAX_SERVER_FRAME,
};
use crate::tls::BoxIo;
use lock_core::secret::Credentials;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio::io::WriteHalf;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::{timeout_at, Instant};

/// One connection to one node: its write half, written by whoever sends, and a reader task
/// that routes replies by id and hands pushes to the session. Neither goes through another
/// task: a handoff's path (the release sent, the grant pushed) wakes only the tasks that
/// wait for it.
#[derive(Clone)]
pub(super) struct Conn {
    pub(super) wr: Arc<tokio::sync::Mutex<WriteHalf<BoxIo>>>,
    pub(super) pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>,
    pub(super) closed: Arc<AtomicBool>,
    /// What the node said when it refused the connection as a whole (a plain client at a
    /// TLS-only node), if it did.
    pub(super) refusal: Arc<Mutex<Option<String>>>,
    pub(super) addr: String,
}

/// Why a connection to a node could not be made.
pub(super) enum DialError {
    /// Try another node, or the same one later: it is down, or the network is.
    Retry(String),
    /// Every node will answer the same (a certificate not trusted, credentials refused, TLS
    /// on one side only): fail now, saying so.
    Refused(String),
}

impl Conn {
    pub(super) async fn dial(
        addr: &str,
        shared: &Shared,
        pushes: PushSink,
    ) -> Result<Conn, DialError> {
        let timeout = shared.config.connect_timeout;
        let retry = |e: String| DialError::Retry(format!("{addr}: {e}"));
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| retry("connect timed out".into()))?
            .map_err(|e| retry(e.to_string()))?;
        stream.set_nodelay(true).map_err(|e| retry(e.to_string()))?;
        let io: BoxIo = match &shared.tls {
            None => Box::new(stream),
            Some(tls) => {
                match tokio::time::timeout(timeout * 5, crate::tls::connect(tls, addr, stream))
                    .await
                {
                    Ok(Ok(io)) => io,
                    // A handshake the node answered with a certificate we refuse, an alert, or
                    // bytes that are not TLS: every node will do the same.
                    Ok(Err(e)) if !e.contains("unexpected EOF") && !e.contains("reset") => {
                        return Err(DialError::Refused(e))
                    }
                    Ok(Err(e)) => return Err(DialError::Retry(e)),
                    Err(_) => return Err(retry("TLS handshake timed out".into())),
                }
            }
        };
        let (mut rd, wr) = tokio::io::split(io);
        let conn = Conn {
            wr: Arc::new(tokio::sync::Mutex::new(wr)),
            pending: Arc::default(),
            closed: Arc::default(),
            refusal: Arc::default(),
            addr: addr.to_string(),
        };
        let (pending, closed, refusal) =
            (conn.pending.clone(), conn.closed.clone(), conn.refusal.clone());
        tokio::spawn(async move {
            while let Ok(Some(bytes)) = read_bytes(&mut rd, MAX_SERVER_FRAME).await {
                match decode::<ServerFrame>(&bytes) {
                    Ok(ServerFrame::Reply {
                        id: 0,
                        body: Reply::Error { kind: ErrorKind::Unauthenticated, message },
                    }) => {
                        *lock(&refusal) = Some(message);
                        break;
                    }
                    Ok(ServerFrame::Reply { id, body }) => {
                        if let Some(tx) = lock(&pending).remove(&id) {
                            let _ = tx.send(body);
                        }
                    }
                    Ok(ServerFrame::Push(p)) => {
                        if let Some(session) = pushes.get().and_then(Weak::upgrade) {
                            session.on_push(p);
                        }
                    }
                    Err(_) => break,
                }
            }
            // A close of our own set the flag first; otherwise the node or the network ended it.
            let lost = !closed.swap(true, Ordering::SeqCst);
            // Every request still waiting learns the connection is gone.
            lock(&pending).clear();
            if lost {
                if let Some(session) = pushes.get().and_then(Weak::upgrade) {
                    session.dropped.notify_one();
                }
            }
        });
        if let Some(c) = &shared.config.credentials {
            conn.hello(shared, c).await?;
        }
        Ok(conn)
    }

    /// Say who this connection is; a refusal is final.
    pub(super) async fn hello(&self, shared: &Shared, c: &Credentials) -> Result<(), DialError> {
        let deadline = Instant::now() + shared.config.connect_timeout * 2;
        let hello = Request::Hello { user: c.user.clone(), token: c.password.expose().to_string() };
        match self.request(shared, hello, deadline).await {
            Ok(Reply::Welcome { .. }) => Ok(()),
            Ok(Reply::Error { kind: ErrorKind::Unauthenticated, message }) => {
                self.close();
                Err(DialError::Refused(format!(
                    "{}: the service refused {:?}: {message}",
                    self.addr, c.user
                )))
            }
            // A node without users answers a Hello that it takes no credentials ("already
            // said who it is"); one of another version cannot read it: final either way.
            Ok(Reply::Error { kind: ErrorKind::BadRequest, message }) => {
                self.close();
                Err(DialError::Refused(format!(
                    "{}: the node does not take credentials: {message}",
                    self.addr
                )))
            }
            Ok(other) => {
                self.close();
                Err(DialError::Retry(format!(
                    "{}: unexpected answer to hello: {other:?}",
                    self.addr
                )))
            }
            Err(e) => Err(match self.refused() {
                Some(why) => DialError::Refused(format!("{}: {why}", self.addr)),
                None => DialError::Retry(e),
            }),
        }
    }

    /// The node's refusal of this connection as a whole, if it sent one.
    pub(super) fn refused(&self) -> Option<String> {
        lock(&self.refusal).clone()
    }

    pub(super) fn is_open(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }

    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        lock(&self.pending).clear();
    }

    /// Close the connection and tell the node so (it then drops its end at once).
    pub(super) async fn hang_up(&self) {
        self.close();
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut *self.wr.lock().await).await;
    }

    /// Send `body` and wait for its answer until `deadline`; `Err` if the connection failed.
    pub(super) async fn request(
        &self,
        shared: &Shared,
        body: Request,
        deadline: Instant,
    ) -> Result<Reply, String> {
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        shared.config.requests.sent("service", kind_of(&body));
        let frame = encode(&ClientFrame { id, body });
        let write = async { crate::proto::send(&mut *self.wr.lock().await, &frame).await };
        let written = self.is_open() && matches!(timeout_at(deadline, write).await, Ok(Ok(())));
        if !written {
            // A write cut short leaves half a frame on the wire: the connection is done.
            self.close();
            return Err(format!("{}: connection closed", self.addr));
        }
        match timeout_at(deadline, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(format!("{}: connection lost", self.addr)),
            Err(_) => {
                lock(&self.pending).remove(&id);
                Err(format!("{}: no answer in time", self.addr))
            }
        }
    }
}
