//! One client connection, in the shape of tokio's mini-redis `Handler`: [`serve_client`] runs
//! the TLS step and starts the connection's writer task, then a [`Handler`] reads frames,
//! learns who the client is (`Hello`) and dispatches each request to a task of its own.
//!
//! Requests run concurrently (at most `--max-inflight` at once) and their replies, like the
//! pushes of the `hub`, go through one writer task, so that a slow request never
//! holds up the reading of the next and frames never interleave on the wire.

use super::gate::ConnId;
use super::hub::{Outbox, OUTBOX};
use super::listener::HANDSHAKE;
use super::requests::{bad_request, unauthenticated};
use super::Node;
use crate::auth::{Identity, Role};
use crate::proto::{
    decode, encode, read_bytes, send, ClientFrame, Reply, Request, ServerFrame, MAX_CLIENT_FRAME,
};
use crate::tls::{plain_refusal, starts_tls, BoxIo};
use std::sync::Arc;
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};

/// Serve one client connection: TLS first if the node has it, then frames. Requests run
/// concurrently (at most `--max-inflight` at once), replies and pushes share one writer. A
/// malformed frame is answered with an error (request id 0) and the connection goes on; an
/// oversized or truncated one, or a failed `Hello`, closes it.
pub(super) async fn serve_client(node: Arc<Node>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Some(io) = secure(&node, stream).await else {
        return;
    };
    let (rd, wr) = tokio::io::split(io);
    let (out, outbox) = mpsc::channel::<Vec<u8>>(OUTBOX);
    let writer = tokio::spawn(write_frames(wr, outbox));
    let handler = Handler {
        conn: node.next_conn.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        inflight: Arc::new(Semaphore::new(node.limits.inflight)),
        who: node.users.is_none().then(|| Arc::new(Identity::anyone())),
        node,
        out,
    };
    // The handler ends with the connection and drops its sender: the writer then drains what
    // is queued (the requests still running hold senders of their own) and ends.
    handler.run(rd).await;
    let _ = writer.await;
}

/// The TLS step of a node that has TLS: a connection that does not start a handshake is
/// answered in plain ([`plain_on_tls`]) and ends (`None`), as does a failed handshake.
async fn secure(node: &Node, stream: TcpStream) -> Option<BoxIo> {
    let Some(tls) = &node.tls else {
        return Some(Box::new(stream));
    };
    if !starts_tls(&stream).await {
        plain_on_tls(node, stream).await;
        return None;
    }
    match tokio::time::timeout(HANDSHAKE, tls.clients.accept(stream)).await {
        Ok(Ok(s)) => Some(Box::new(s)),
        Ok(Err(e)) => {
            tracing::debug!("a client's TLS handshake failed: {e}");
            None
        }
        Err(_) => None,
    }
}

/// The connection's writer: frames in the order queued, until every sender is gone or a
/// write fails.
async fn write_frames(mut wr: WriteHalf<BoxIo>, mut outbox: mpsc::Receiver<Vec<u8>>) {
    while let Some(bytes) = outbox.recv().await {
        if wr.write_all(&bytes).await.is_err() {
            break;
        }
        // Flush once the queue is empty: frames queued together leave together.
        if outbox.is_empty() && wr.flush().await.is_err() {
            break;
        }
    }
}

/// What a step of the read loop says to do next.
enum Next<T> {
    /// Go on with this.
    Go(T),
    /// Read the next frame.
    Skip,
    /// End the connection.
    Stop,
}

/// One client connection after its TLS step: who the client is, and the requests in flight.
struct Handler {
    node: Arc<Node>,
    /// This connection's number (its turn in the commit window).
    conn: ConnId,
    /// Replies (and, once a session is attached, pushes) to the writer task.
    out: Outbox,
    /// Who the client proved to be: `None` on a node with users until its `Hello`.
    who: Option<Arc<Identity>>,
    /// One permit per request in flight (`--max-inflight`).
    inflight: Arc<Semaphore>,
}

impl Handler {
    /// Read, identify and dispatch frames until the connection ends.
    async fn run(mut self, mut rd: ReadHalf<BoxIo>) {
        loop {
            let frame = match self.read(&mut rd).await {
                Next::Go(f) => f,
                Next::Skip => continue,
                Next::Stop => break,
            };
            let identity = match self.identify(frame.id, frame.body).await {
                Next::Go(i) => i,
                Next::Skip => continue,
                Next::Stop => break,
            };
            if let Next::Stop = self.dispatch(frame.id, identity).await {
                break;
            }
        }
    }

    /// Answer with `body` (as to request `id`, 0 when the frame had none).
    async fn reply(&self, id: u64, body: Reply) {
        let _ = self.out.send(encode(&ServerFrame::Reply { id, body })).await;
    }

    /// The next frame. One that does not decode is answered with an error and skipped; an
    /// oversized or truncated one ends the connection.
    async fn read(&self, rd: &mut ReadHalf<BoxIo>) -> Next<ClientFrame> {
        let bytes = match read_bytes(rd, MAX_CLIENT_FRAME).await {
            Ok(Some(b)) => b,
            Ok(None) => return Next::Stop,
            Err(e) => {
                self.reply(0, bad_request(format!("connection closed: {e}"))).await;
                return Next::Stop;
            }
        };
        match decode(&bytes) {
            Ok(f) => Next::Go(f),
            Err(e) => {
                self.reply(0, bad_request(e.to_string())).await;
                Next::Skip
            }
        }
    }

    /// Who sends `body`: the identity the connection proved, or, before it did, the answer to
    /// its `Hello` (a refusal ends the connection). Before a `Hello` only `Status` is served.
    async fn identify(&mut self, id: u64, body: Request) -> Next<(Arc<Identity>, Request)> {
        match (&self.who, body) {
            (Some(who), body) => Next::Go((who.clone(), body)),
            (None, Request::Hello { user, token }) => {
                let users =
                    self.node.users.as_ref().expect("only a node with users waits for Hello");
                let (body, known) = match users.authenticate(&user, &token) {
                    Ok(who) => {
                        let admin = who.role == Role::Admin;
                        let body = Reply::Welcome { identity: user, admin };
                        (body, Some(Arc::new(who)))
                    }
                    Err(why) => {
                        tracing::warn!("a client was refused: {why}");
                        (unauthenticated(why), None)
                    }
                };
                self.reply(id, body).await;
                match known {
                    Some(who) => {
                        self.who = Some(who);
                        Next::Skip
                    }
                    None => Next::Stop,
                }
            }
            (None, Request::Status) => Next::Go((Arc::new(Identity::anyone()), Request::Status)),
            (None, _) => {
                let body = unauthenticated(
                    "this node authenticates its clients: say who you are (Hello) first".into(),
                );
                self.reply(id, body).await;
                Next::Skip
            }
        }
    }

    /// Run the request on a task of its own once a permit is free (reading waits for one).
    async fn dispatch(&self, id: u64, (who, request): (Arc<Identity>, Request)) -> Next<()> {
        let Ok(permit) = self.inflight.clone().acquire_owned().await else {
            return Next::Stop;
        };
        let (node, out, conn) = (self.node.clone(), self.out.clone(), self.conn);
        tokio::spawn(async move {
            let body = node.handle(request, conn, &out, &who).await;
            let _ = out.send(encode(&ServerFrame::Reply { id, body })).await;
            drop(permit);
        });
        Next::Go(())
    }
}

/// A plain connection to a TLS node: a `Status` probe is answered (health checks need no
/// certificate, as ZooKeeper's four-letter words need none; a status tells the leader, the
/// term and counts, nothing of a lock or a session), anything else is refused with one plain
/// frame saying the node speaks TLS only.
async fn plain_on_tls(node: &Node, mut stream: TcpStream) {
    let read = tokio::time::timeout(HANDSHAKE, read_bytes(&mut stream, MAX_CLIENT_FRAME)).await;
    let frame = match read {
        Ok(Ok(Some(bytes))) => decode::<ClientFrame>(&bytes).ok(),
        _ => None,
    };
    let answer = match frame {
        Some(ClientFrame { id, body: Request::Status }) => {
            encode(&ServerFrame::Reply { id, body: Reply::Status(node.status()) })
        }
        _ => plain_refusal(),
    };
    let _ = send(&mut stream, &answer).await;
}
