//! One client connection, in the shape of tokio's mini-redis `Handler`: [`serve_client`] runs
//! the TLS step and starts the connection's writer task, then a [`Handler`] reads frames,
//! learns who the client is (`Hello`) and dispatches each request to a task of its own.
//!
//! Requests run concurrently (at most `--max-inflight` at once) and their replies, like the
//! pushes of the `hub`, go through one writer task, so that a slow request never
//! holds up the reading of the next and frames never interleave on the wire.

use super::gate::ConnId;
use super::hub::{Outbox, OUTBOX};
use super::requests::{bad_request, unauthenticated};
use super::Node;
use crate::auth::{Identity, Role};
use crate::proto::{
    decode, encode, read_bytes, read_rest, send, ClientFrame, Reply, Request, ServerFrame,
    MAX_CLIENT_FRAME,
};
use crate::tls::{plain_refusal, starts_tls, BoxIo};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{timeout, timeout_at, Duration, Instant};

/// Serve one client connection: TLS first if the node has it, then frames. Requests run
/// concurrently (at most `--max-inflight` at once), replies and pushes share one writer. A
/// malformed frame is answered with an error (request id 0) and the connection goes on; an
/// oversized or truncated one, or a failed `Hello`, closes it, as does a deadline missed.
///
/// **Deadlines.** A connection must finish its TLS handshake and send its first whole frame
/// within `--handshake-timeout-ms` of connecting; on a node with users, say `Hello` within
/// `--hello-timeout-ms`; and, while it serves no session and has no request in progress,
/// send something every `--idle-timeout-ms`. Once a frame's first byte has come, the rest
/// must come within `--frame-timeout-ms`, and a frame written to the client must be taken
/// within as long. So a connection costs the node something only while its client does:
/// one that connects and waits, or sends half a frame and stops, is closed, and what it
/// held (its buffers, its tasks, its sessions' place in the hub) goes with it.
pub(super) async fn serve_client(node: Arc<Node>, stream: TcpStream) {
    let accepted = Instant::now();
    let _ = stream.set_nodelay(true);
    let handshake_by = accepted + node.limits.handshake;
    let _closed = Closed(&node);
    let Some(io) = secure(&node, stream, handshake_by).await else {
        return;
    };
    let (rd, wr) = tokio::io::split(io);
    let (out, outbox) = mpsc::channel::<Vec<u8>>(OUTBOX);
    let mut writer = tokio::spawn(write_frames(wr, outbox, node.limits.frame));
    let conn = node.next_conn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let authenticates = node.users.is_some();
    let handler = Handler {
        conn,
        inflight: Arc::new(Semaphore::new(node.limits.inflight)),
        who: (!authenticates).then(|| Arc::new(Identity::anyone())),
        handshake_by: Some(handshake_by),
        hello_by: authenticates.then(|| accepted + node.limits.hello),
        heard: accepted,
        node: node.clone(),
        out,
    };
    // The handler ends with the connection and drops its sender: the writer then drains what
    // is queued (the requests still running hold senders of their own) and ends. Its
    // sessions are forgotten at once: no grant can reach it any more.
    handler.run(rd).await;
    node.hub.detach(conn);
    node.rights.forget(conn);
    // A client that does not read cannot hold the connection open: the writer has a frame's
    // deadline for each write, and the requests still running as long again to finish.
    let drain = node.limits.frame * 2;
    if timeout(drain, &mut writer).await.is_err() {
        writer.abort();
    }
}

/// Tells the node's trimmer when the connection is gone.
struct Closed<'a>(&'a Node);

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.trimmer.closed();
    }
}

/// The TLS step of a node that has TLS, by `deadline`: a connection that does not start a
/// handshake is answered in plain ([`plain_on_tls`]) and ends (`None`), as does a failed or
/// late handshake.
async fn secure(node: &Node, stream: TcpStream, deadline: Instant) -> Option<BoxIo> {
    let Some(tls) = &node.tls else {
        return Some(Box::new(stream));
    };
    match timeout_at(deadline, starts_tls(&stream)).await {
        Ok(true) => {}
        Ok(false) => {
            plain_on_tls(node, stream, deadline).await;
            return None;
        }
        Err(_) => return None,
    }
    match timeout_at(deadline, tls.clients.accept(stream)).await {
        Ok(Ok(s)) => Some(Box::new(s)),
        Ok(Err(e)) => {
            tracing::debug!("a client's TLS handshake failed: {e}");
            None
        }
        Err(_) => None,
    }
}

/// The connection's writer: frames in the order queued, until every sender is gone, a write
/// fails, or the client does not take a frame within `deadline`.
async fn write_frames(
    mut wr: WriteHalf<BoxIo>,
    mut outbox: mpsc::Receiver<Vec<u8>>,
    deadline: Duration,
) {
    while let Some(bytes) = outbox.recv().await {
        if !matches!(timeout(deadline, wr.write_all(&bytes)).await, Ok(Ok(()))) {
            break;
        }
        // Flush once the queue is empty: frames queued together leave together.
        if outbox.is_empty() && !matches!(timeout(deadline, wr.flush()).await, Ok(Ok(()))) {
            break;
        }
    }
}

/// Which deadline a silent connection missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Silence {
    /// No whole first frame (`--handshake-timeout-ms`).
    Handshake,
    /// No `Hello` (`--hello-timeout-ms`).
    Hello,
    /// Nothing, with no session and no request (`--idle-timeout-ms`).
    Idle,
}

impl Silence {
    fn describe(self) -> &'static str {
        match self {
            Silence::Handshake => "no first frame within the handshake timeout",
            Silence::Hello => "no Hello within the hello timeout",
            Silence::Idle => "idle, without a session, for the idle timeout",
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
    /// When the first frame must have come by, until it has.
    handshake_by: Option<Instant>,
    /// When the `Hello` must have come by, on a node with users, until it has.
    hello_by: Option<Instant>,
    /// When the last frame came (or the connection, before one).
    heard: Instant,
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

    /// Answer with `body` (as to request `id`; 0 for a frame that could not be decoded as a
    /// whole, even when its id was readable: nothing of such a frame is kept).
    async fn reply(&self, id: u64, body: Reply) {
        let _ = self.out.send(encode(&ServerFrame::Reply { id, body })).await;
    }

    /// The next frame. One that does not decode is answered with an error and skipped; an
    /// oversized or truncated one ends the connection, as does a deadline missed (see
    /// [`serve_client`]) or a writer that stopped.
    async fn read(&mut self, rd: &mut ReadHalf<BoxIo>) -> Next<ClientFrame> {
        let mut len = [0u8; 4];
        let got = loop {
            let (deadline, why) = self.next_deadline();
            tokio::select! {
                read = timeout_at(deadline, rd.read(&mut len)) => match read {
                    Ok(Ok(0)) => return Next::Stop,
                    Ok(Ok(got)) => break got,
                    Ok(Err(_)) => return Next::Stop,
                    Err(_) if why == Silence::Idle && !self.idle() => {
                        // Not idle after all (a session, or a request running): look again
                        // a whole idle time from now.
                        self.heard = Instant::now();
                    }
                    Err(_) => {
                        tracing::debug!("closing a client connection: {}", why.describe());
                        return Next::Stop;
                    }
                },
                // The writer stopped (a client that does not read): nothing more can be told.
                _ = self.out.closed() => return Next::Stop,
            }
        };
        // The first frame must also come whole by the handshake's deadline.
        let whole_by = Instant::now() + self.node.limits.frame;
        let whole_by = self.handshake_by.map_or(whole_by, |h| h.min(whole_by));
        let bytes = match timeout_at(whole_by, read_rest(rd, len, got, MAX_CLIENT_FRAME)).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                self.reply(0, bad_request(format!("connection closed: {e}"))).await;
                return Next::Stop;
            }
            Err(_) => {
                let why = "connection closed: a frame did not come whole in time".to_string();
                self.reply(0, bad_request(why)).await;
                return Next::Stop;
            }
        };
        self.heard = Instant::now();
        self.handshake_by = None;
        match decode(&bytes) {
            Ok(f) => Next::Go(f),
            Err(e) => {
                self.reply(0, bad_request(e.to_string())).await;
                Next::Skip
            }
        }
    }

    /// The soonest deadline for the next frame's first byte, and whose it is.
    fn next_deadline(&self) -> (Instant, Silence) {
        let idle = (self.heard + self.node.limits.idle, Silence::Idle);
        [
            self.handshake_by.map(|at| (at, Silence::Handshake)),
            self.hello_by.map(|at| (at, Silence::Hello)),
        ]
        .into_iter()
        .flatten()
        .fold(idle, |soonest, d| if d.0 < soonest.0 { d } else { soonest })
    }

    /// Whether the connection serves no session and has no request in progress.
    fn idle(&self) -> bool {
        self.inflight.available_permits() == self.node.limits.inflight
            && !self.node.hub.serves(self.conn)
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
                        self.hello_by = None;
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
async fn plain_on_tls(node: &Node, mut stream: TcpStream, deadline: Instant) {
    let read = timeout_at(deadline, read_bytes(&mut stream, MAX_CLIENT_FRAME)).await;
    let frame = match read {
        Ok(Ok(Some(bytes))) => decode::<ClientFrame>(&bytes).ok(),
        _ => None,
    };
    let answer = match frame {
        Some(ClientFrame { id, body: Request::Status }) => {
            encode(&ServerFrame::Reply { id, body: Reply::Status(Box::new(node.status())) })
        }
        _ => plain_refusal(),
    };
    let _ = timeout_at(deadline, send(&mut stream, &answer)).await;
}
