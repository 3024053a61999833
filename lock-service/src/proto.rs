//! The wire protocol: length-prefixed JSON frames over TCP.
//!
//! Every frame is a 4-byte big-endian length and that many bytes of JSON. JSON rather than a
//! binary codec: a frame is a few dozen bytes, encoding it costs microseconds against a fsync
//! of 100+ µs per commit, and anyone can read a captured stream (or write a probe, as
//! `test-servers` does for the cluster's status) without our code. A frame longer than the
//! reader's limit ([`MAX_CLIENT_FRAME`] from clients) is refused before it is read: the node
//! answers an id-0 `BadRequest` and closes the connection; nothing else is touched.
//!
//! A client's connection carries [`ClientFrame`]s up and [`ServerFrame`]s down: replies to its
//! requests by id, and [`Push`]es, which come unasked (the grant of a lock it waited for, the
//! end of its session). Requests on one connection are served concurrently: a waiting acquire
//! never holds up a keep-alive behind it.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A session's id: the stamp of the command that opened it ([`crate::state`]: the log index
/// of its entry, or more in a batch), so unique in the cluster's history and never reused.
pub type SessionId = u64;

/// The shortest session TTL a server accepts.
pub const MIN_TTL: Duration = Duration::from_millis(200);
/// The longest session TTL a server accepts.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// The longest frame a server reads from a client, in bytes: a request names one lock id of at
/// most 200 bytes, so 64 KiB is generous and bounds what a hostile client can make it buffer.
pub const MAX_CLIENT_FRAME: u32 = 64 * 1024;
/// The longest frame a client reads from a server (a resume lists the session's locks).
pub const MAX_SERVER_FRAME: u32 = 16 * 1024 * 1024;
/// The longest frame between peers (a batch of log entries, a snapshot chunk).
pub const MAX_PEER_FRAME: u32 = 64 * 1024 * 1024;

/// What an ask wants of its lock: to hold it alone (the mutex, a write), beside other readers,
/// or some of a semaphore's permits beside other permit holders. Asks of one lock id are
/// served in one FIFO queue whatever they want; the head of the queue is granted as soon as
/// it fits beside the holders, and the asks behind it wait, so nobody is passed.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub enum Share {
    /// Alone: a mutex, or a reader-writer lock's write.
    #[default]
    Exclusive,
    /// Beside other reads.
    Read,
    /// `count` of a semaphore's `limit` permits, beside other permit holders.
    Permits {
        /// Permits asked for, 1 to `limit`.
        count: u32,
        /// The semaphore's size, the same for every ask of it.
        limit: u32,
    },
}

impl Share {
    /// True for [`Share::Exclusive`] (what an ask that says nothing wants).
    pub fn is_exclusive(&self) -> bool {
        *self == Share::Exclusive
    }

    /// The semaphore's size, for a permit ask.
    pub fn limit(&self) -> Option<u32> {
        match self {
            Share::Permits { limit, .. } => Some(*limit),
            Share::Exclusive | Share::Read => None,
        }
    }

    /// How many fencing tokens a grant of this ask carries: one per permit, one otherwise.
    pub fn tokens(&self) -> u64 {
        match self {
            Share::Permits { count, .. } => u64::from(*count).max(1),
            Share::Exclusive | Share::Read => 1,
        }
    }
}

/// Who leads an election, as the service tells it: the holder of the election's lock id and
/// the value it announced. Its term is the grant's fencing token.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader's owner id.
    pub owner: String,
    /// What it announced (its campaign's value, or its last proclamation).
    pub value: Vec<u8>,
    /// Its term.
    pub term: u64,
}

/// One request from a client, with the id its reply will carry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClientFrame {
    /// Chosen by the client; echoed in the [`ServerFrame::Reply`].
    pub id: u64,
    /// What it asks.
    pub body: Request,
}

/// What a client can ask a server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Request {
    /// Say who this connection is: the first request on a server that authenticates its
    /// clients (every other request but [`Request::Status`] is refused before it). A wrong
    /// name or token is answered with an error and the connection is closed.
    Hello {
        /// The identity.
        user: String,
        /// Its token (sent over TLS; the server keeps only its SHA-256).
        token: String,
    },
    /// Open a session whose lease is `ttl_ms` (leader only; one commit).
    Open {
        /// The session's TTL in milliseconds.
        ttl_ms: u64,
    },
    /// Attach this connection to an existing session (after a reconnect or a failover); the
    /// reply lists what the session holds, so a grant pushed while it was away is not lost.
    Resume {
        /// The session.
        session: SessionId,
        /// The session's key, as [`Reply::Opened`] gave it: a session is resumed only with
        /// it (left out only for a session opened by a server that gave no key).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
    /// Renew the session's lease (leader only; confirmed with a quorum, not committed).
    KeepAlive {
        /// The session.
        session: SessionId,
    },
    /// Ask for a lock; with `wait`, join its FIFO queue when it is held.
    Acquire {
        /// The session asking.
        session: SessionId,
        /// The lock id.
        lock: String,
        /// The owner within the session (a session may serve several lockers).
        owner: String,
        /// Queue when held (the mandatory lock) or answer [`Reply::Busy`] (the soft lock).
        wait: bool,
        /// Which of the owner's asks for this lock this is, unique within the session: a
        /// retry repeats it, a new ask after one given up on does not (see [`crate::state`]).
        #[serde(default)]
        attempt: u64,
        /// What the ask wants: the lock alone (left out: the mutex), a read, or some of a
        /// semaphore's permits. Asks of one lock id share one FIFO queue.
        #[serde(default, skip_serializing_if = "Share::is_exclusive")]
        share: Share,
        /// A campaign's value: the ask is a candidacy in the election of this id, and once
        /// granted its holder leads, announcing this value (see [`Request::Observe`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Vec<u8>>,
    },
    /// The leader of an election announces another value, without an election.
    Proclaim {
        /// The session.
        session: SessionId,
        /// The election (its lock id).
        lock: String,
        /// The leader's owner id.
        owner: String,
        /// The ask that was granted the leadership.
        attempt: u64,
        /// The new value.
        value: Vec<u8>,
    },
    /// Who leads the election of this id now, and from now on a [`Push::Leader`] to the
    /// session at each change (until the session's connection closes or the leader changes:
    /// the client observes again on its next connection).
    Observe {
        /// The session the changes are pushed to.
        session: SessionId,
        /// The election (its lock id).
        lock: String,
    },
    /// Release a held lock, or leave its queue.
    Release {
        /// The session.
        session: SessionId,
        /// The lock id.
        lock: String,
        /// The owner within the session.
        owner: String,
        /// The ask whose grant or place in the queue this gives up.
        #[serde(default)]
        attempt: u64,
    },
    /// End the session: every lock it holds goes to the next waiter.
    Close {
        /// The session.
        session: SessionId,
    },
    /// Take a lock from whoever holds it (administrators only; logged and counted): the
    /// holder is told, and the lock goes to its next waiter.
    ForceRelease {
        /// The lock id.
        lock: String,
    },
    /// This node's view of the cluster (any node answers).
    Status,
    /// The locks whose ids start with `prefix`, in id order, each with its holders and its
    /// queue, as the leader's applied state has them (leader only; any identity may ask). At
    /// most `limit` locks (at most [`MAX_LOCKS_PER_REPLY`]) whose ids sort after `after`: a
    /// client pages through many locks by asking again after the last id it was given.
    Locks {
        /// Only ids starting with this ("" for every lock).
        #[serde(default)]
        prefix: String,
        /// Only ids after this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<String>,
        /// The most locks to list.
        #[serde(default = "default_locks_limit")]
        limit: u32,
    },
    /// Make a node a member of the cluster (administrators only; leader only): it is added as
    /// a learner, sent the log until it has caught up, then made a voter. The node must be
    /// running, started with this id and these addresses and without `--init`.
    AddMember {
        /// Its node id, never used before in this cluster.
        id: u64,
        /// Where the other nodes reach its peer port (`host:port`).
        peer: String,
        /// Where clients reach its client port (`host:port`).
        client: String,
    },
    /// Take a node out of the cluster (administrators only; leader only). The node can be
    /// stopped once the change is committed; its data directory is of no further use.
    RemoveMember {
        /// Its node id.
        id: u64,
    },
}

/// How many locks [`Request::Locks`] lists when it does not say.
pub const DEFAULT_LOCKS_PER_REPLY: u32 = 1000;
/// The most locks one [`Reply::Locks`] lists.
pub const MAX_LOCKS_PER_REPLY: u32 = 10_000;

fn default_locks_limit() -> u32 {
    DEFAULT_LOCKS_PER_REPLY
}

/// What a server sends down a client's connection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum ServerFrame {
    /// The answer to request `id`.
    Reply {
        /// The request's id.
        id: u64,
        /// The answer.
        body: Reply,
    },
    /// Something the client did not ask for just now.
    Push(Push),
}

/// A lock a session holds: `(lock id, owner, fencing token, the ask it was granted to)`.
pub type Held = (String, String, u64, u64);

/// The answer to a [`Request`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Reply {
    /// The connection is authenticated as `identity`.
    Welcome {
        /// The identity.
        identity: String,
        /// Whether it may force-release locks.
        admin: bool,
    },
    /// A session was opened.
    Opened {
        /// Its id.
        session: SessionId,
        /// Its key, a secret drawn at random for this session and told only to the client
        /// that opened it: [`Request::Resume`] must present it. On a server without users,
        /// only a connection that opened the session or resumed it with its key may act for
        /// it. (Absent from a server that gives no keys.)
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
    /// The connection now serves the session; what it holds.
    Resumed {
        /// Its locks.
        held: Vec<Held>,
    },
    /// The lease was renewed.
    Alive,
    /// The lock is held, with this fencing token (the stamp of the granting command, which
    /// rises with every grant: [`crate::state`]).
    Granted {
        /// The fencing token.
        token: u64,
    },
    /// The lock is held by another; the grant will come as a [`Push::Granted`].
    Queued,
    /// Who leads the election (none: nobody).
    Leader {
        /// The leader.
        leader: Option<LeaderInfo>,
    },
    /// The leader's new value is announced.
    Proclaimed,
    /// The lock id is in use by asks of another kind (a semaphore's permits against reads and
    /// writes) or for a semaphore of another size, as `share` says: nothing was changed.
    Mismatch {
        /// What a holder or waiter of the lock id asked for.
        share: Share,
    },
    /// The lock is held by another (soft lock).
    Busy,
    /// The lock was released (and handed to the next waiter, if any, in the same commit).
    Released,
    /// The owner left the lock's queue before it was granted.
    Cancelled,
    /// The owner neither held nor waited for the lock.
    NotHeld,
    /// The session is closed.
    Closed,
    /// A node's view of the cluster.
    Status(Box<Status>),
    /// Locks and who holds and waits for them ([`Request::Locks`]).
    Locks {
        /// The locks, in id order.
        locks: Vec<LockInfo>,
        /// Whether more locks match after the last one listed.
        more: bool,
    },
    /// The cluster's members once a membership change has committed.
    Members {
        /// Every member.
        members: Vec<Member>,
    },
    /// This node does not lead; ask the leader (its client address, when known).
    NotLeader {
        /// The leader's client address.
        leader: Option<String>,
    },
    /// The request failed.
    Error {
        /// What kind of failure.
        kind: ErrorKind,
        /// For humans.
        message: String,
    },
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum ErrorKind {
    /// The session expired or was closed: its locks are gone.
    SessionGone,
    /// The request is malformed or impossible (an invalid lock id, a TTL out of range).
    BadRequest,
    /// The cluster cannot serve it now (no quorum, shutting down); try again.
    Unavailable,
    /// The connection has not said who it is, or said it wrongly.
    Unauthenticated,
    /// The client may not do this (act for another identity's session, or, on a server
    /// without users, for a session its connection neither opened nor resumed with the
    /// session's key; resume a session without its key; force-release as a
    /// non-administrator): nothing was changed.
    Forbidden,
    /// A limit was reached (sessions per identity, or per connection and in all on a server
    /// without users; asks per session): nothing was changed.
    LimitReached,
    /// An ask arrived after a newer ask of the same owner for the same lock, which holds or
    /// waits: the older ask changed nothing (see [`crate::state`]).
    Superseded,
}

/// Unasked news for a client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Push {
    /// A lock the session waited for is now its.
    Granted {
        /// The lock id.
        lock: String,
        /// The owner within the session.
        owner: String,
        /// The fencing token.
        token: u64,
        /// The ask it answers: a grant for an ask the client has given up on is not handed
        /// to a later one (the earlier ask's release gives it back).
        #[serde(default)]
        attempt: u64,
    },
    /// An administrator took a lock the session held: that lock is gone, the session stays.
    Revoked {
        /// The lock id.
        lock: String,
        /// The owner within the session.
        owner: String,
        /// The token it was held with.
        token: u64,
        /// The administrator.
        by: String,
    },
    /// The leader of an election the session observes changed (a new leader, a new value, or
    /// none).
    Leader {
        /// The election (its lock id).
        lock: String,
        /// Who leads now.
        leader: Option<LeaderInfo>,
    },
    /// The cluster's membership changed (a node added or removed): its members now. A client
    /// that follows leader hints dials them from now on, so that it still finds the cluster
    /// once every node it was given has left.
    Members {
        /// Every member.
        members: Vec<Member>,
    },
    /// The session is over (expired, closed): every lock it held is gone.
    SessionEnded {
        /// Why.
        reason: String,
    },
}

/// One lock's holders and queue, as [`Reply::Locks`] lists them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock id.
    pub lock: String,
    /// Who holds it: one exclusive holder, or every reader or permit holder.
    pub holders: Vec<HolderInfo>,
    /// Who waits for it, first in line first.
    pub waiters: Vec<WaiterInfo>,
}

/// A grant of a lock.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HolderInfo {
    /// The holder's session.
    pub session: SessionId,
    /// The identity that opened the session (none on a node without users).
    pub identity: Option<String>,
    /// The owner within the session.
    pub owner: String,
    /// The grant's fencing token (its first, for permits).
    pub token: u64,
    /// What the grant holds (left out: the lock alone).
    #[serde(default, skip_serializing_if = "Share::is_exclusive")]
    pub share: Share,
    /// How long ago the answering node applied the grant (or, for a grant it loaded from a
    /// snapshot when it started, loaded it), in milliseconds, by its own monotonic clock: at
    /// most the time since that node last started. None from a node that keeps no such record.
    #[serde(default)]
    pub held_ms: Option<u64>,
}

/// An ask waiting in a lock's queue.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WaiterInfo {
    /// The waiter's session.
    pub session: SessionId,
    /// The identity that opened the session (none on a node without users).
    pub identity: Option<String>,
    /// The owner within the session.
    pub owner: String,
    /// What it asks for (left out: the lock alone).
    #[serde(default, skip_serializing_if = "Share::is_exclusive")]
    pub share: Share,
}

/// A node of the cluster, as its membership lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Member {
    /// Its node id.
    pub id: u64,
    /// Where its peers reach it.
    pub peer: String,
    /// Where clients reach it.
    pub client: String,
    /// Whether it votes (a learner only receives the log).
    pub voter: bool,
}

/// A node's view, for probes and for clients looking for the leader.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Status {
    /// This node's id.
    pub id: u64,
    /// The leader this node knows of.
    pub leader: Option<u64>,
    /// The leader's client address.
    pub leader_addr: Option<String>,
    /// This node's current term.
    pub term: u64,
    /// The last log index applied to its state machine.
    pub applied: Option<u64>,
    /// Live sessions in its state machine.
    pub sessions: usize,
    /// Locks administrators took from their holders, over the cluster's life.
    #[serde(default)]
    pub forced_releases: u64,
    /// The last log index this node knows to be committed (on a follower, as its leader
    /// last told it).
    #[serde(default)]
    pub committed: Option<u64>,
    /// The last log index in this node's log.
    #[serde(default)]
    pub last_log: Option<u64>,
    /// Locks held or waited for, in its state machine.
    #[serde(default)]
    pub locks: usize,
    /// The cluster's members, as this node's last membership entry lists them.
    #[serde(default)]
    pub members: Vec<Member>,
}

/// Read the bytes of one frame of at most `max` bytes; `Ok(None)` at a clean end of stream
/// (before a frame's first byte). A longer frame is an error before any of it is read.
pub async fn read_bytes<R: AsyncRead + Unpin>(r: &mut R, max: u32) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read(&mut len).await? {
        0 => Ok(None),
        got => read_rest(r, len, got, max).await.map(Some),
    }
}

/// The smallest piece a frame's buffer grows by (see [`read_rest`]).
const FIRST_PIECE: usize = 256;

/// The rest of a frame of at most `max` bytes, when the first `got` bytes (1 to 4) of its
/// length prefix, in `len`, have come. A longer frame is an error before any of it is read.
///
/// The buffer grows as the bytes come, at most doubling each time, rather than taking the
/// length the prefix announces: a frame that is announced and never sent costs what was
/// sent of it (at least 256 bytes), not the announced length. Waiting for a
/// frame's first byte is for the caller, who knows how long a connection may stay silent
/// ([`read_bytes`] waits for ever); this reads the rest.
pub async fn read_rest<R: AsyncRead + Unpin>(
    r: &mut R,
    mut len: [u8; 4],
    got: usize,
    max: u32,
) -> io::Result<Vec<u8>> {
    r.read_exact(&mut len[got..]).await?;
    let len = u32::from_be_bytes(len);
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes refused: at most {max} are allowed"),
        ));
    }
    let len = len as usize;
    let mut buf = Vec::new();
    while buf.len() < len {
        let start = buf.len();
        let piece = (len - start).min(start.max(FIRST_PIECE));
        buf.resize(start + piece, 0);
        let n = r.read(&mut buf[start..]).await?;
        buf.truncate(start + n);
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the stream ended {start} bytes into a frame of {len}"),
            ));
        }
    }
    Ok(buf)
}

/// Decode a frame's bytes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("malformed frame: {e}")))
}

/// Read one frame of at most `max` bytes; `Ok(None)` at a clean end of stream.
pub async fn read_frame<T, R>(r: &mut R, max: u32) -> io::Result<Option<T>>
where
    T: DeserializeOwned,
    R: AsyncRead + Unpin,
{
    match read_bytes(r, max).await? {
        Some(bytes) => decode(&bytes).map(Some),
        None => Ok(None),
    }
}

/// The bytes of one frame holding `value`.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let body = serde_json::to_vec(value).expect("protocol types always serialise");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Write one frame holding `value`.
pub async fn write_frame<T, W>(w: &mut W, value: &T) -> io::Result<()>
where
    T: Serialize,
    W: AsyncWrite + Unpin,
{
    send(w, &encode(value)).await
}

/// Write `bytes` and flush them: a TLS stream keeps what it could not write at once until the
/// next write or flush, so a frame that is not flushed may never leave.
pub async fn send<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> io::Result<()> {
    w.write_all(bytes).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_ones_are_refused() {
        let frame = ClientFrame {
            id: 7,
            body: Request::Acquire {
                session: 3,
                lock: "l".into(),
                owner: "o".into(),
                wait: true,
                attempt: 1,
                share: Share::Permits { count: 2, limit: 5 },
                value: None,
            },
        };
        let bytes = encode(&frame);
        let back: ClientFrame =
            read_frame(&mut &bytes[..], MAX_CLIENT_FRAME).await.unwrap().unwrap();
        assert_eq!(back, frame);
        let e = read_frame::<ClientFrame, _>(&mut &bytes[..], 4).await.unwrap_err();
        assert!(e.to_string().contains("refused"), "{e}");
        let empty: Option<ClientFrame> = read_frame(&mut &[][..], MAX_CLIENT_FRAME).await.unwrap();
        assert!(empty.is_none());
    }

    #[tokio::test]
    async fn malformed_and_truncated_frames_are_errors() {
        let mut junk = 5u32.to_be_bytes().to_vec();
        junk.extend_from_slice(b"{oops");
        let e = read_frame::<ClientFrame, _>(&mut &junk[..], MAX_CLIENT_FRAME).await.unwrap_err();
        assert!(e.to_string().contains("malformed"), "{e}");
        let mut short = 50u32.to_be_bytes().to_vec();
        short.extend_from_slice(b"{}");
        assert!(read_frame::<ClientFrame, _>(&mut &short[..], MAX_CLIENT_FRAME).await.is_err());
    }

    /// A frame announced at the limit and cut short waits for its bytes and is an error when
    /// the stream ends; a whole frame that comes in small pieces is read, into a buffer
    /// less than twice its size.
    #[tokio::test]
    async fn a_frame_grows_as_its_bytes_come() {
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        client.write_all(&MAX_CLIENT_FRAME.to_be_bytes()).await.unwrap();
        client.write_all(b"{\"id\"").await.unwrap();
        let mut len = [0u8; 4];
        let got = server.read(&mut len).await.unwrap();
        let reading = tokio::spawn(async move {
            let r = read_rest(&mut server, len, got, MAX_CLIENT_FRAME).await;
            (r, server)
        });
        tokio::task::yield_now().await;
        assert!(!reading.is_finished());
        drop(client);
        let (r, _) = reading.await.unwrap();
        let e = r.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");

        // The whole frame, in pieces of every size.
        let (mut client, mut server) = tokio::io::duplex(64);
        let body = vec![b'x'; 40_000];
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        let writer = tokio::spawn(async move { client.write_all(&frame).await.unwrap() });
        let got = read_bytes(&mut server, MAX_CLIENT_FRAME).await.unwrap().unwrap();
        writer.await.unwrap();
        assert_eq!(got, body);
        assert!(got.capacity() < 2 * body.len(), "capacity {}", got.capacity());
    }

    mod fuzz {
        //! The decoder against arbitrary input (a hostile client's frames): bytes
        //! of every kind, valid frames cut short or with a byte changed, and length prefixes
        //! of every size. Decoding returns a frame or an error; it never panics, and no frame
        //! over the limit is buffered. A bounded number of cases, so it runs in CI.
        use super::super::*;
        use proptest::prelude::*;

        fn request() -> impl Strategy<Value = Request> {
            let id = "[a-z/\\x00-\\x1f]{0,12}";
            prop_oneof![
                any::<u64>().prop_map(|ttl_ms| Request::Open { ttl_ms }),
                any::<u64>().prop_map(|session| Request::KeepAlive { session }),
                (any::<u64>(), id, id, any::<bool>(), any::<u64>()).prop_map(
                    |(session, lock, owner, wait, attempt)| {
                        let value = (attempt % 3 == 0).then(|| lock.as_bytes().to_vec());
                        let share = if attempt % 2 == 0 { Share::Read } else { Share::Exclusive };
                        Request::Acquire { session, lock, owner, wait, attempt, share, value }
                    }
                ),
                (id, ".{0,40}").prop_map(|(user, token)| Request::Hello { user, token }),
                id.prop_map(|lock| Request::ForceRelease { lock }),
                Just(Request::Status),
            ]
        }

        fn frame_bytes() -> impl Strategy<Value = Vec<u8>> {
            (any::<u64>(), request()).prop_map(|(id, body)| encode(&ClientFrame { id, body }))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn arbitrary_bytes_decode_to_a_frame_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = decode::<ClientFrame>(&bytes);
            }

            #[test]
            fn valid_frames_round_trip(id in any::<u64>(), body in request()) {
                let frame = ClientFrame { id, body };
                let bytes = encode(&frame);
                prop_assert_eq!(decode::<ClientFrame>(&bytes[4..]).unwrap(), frame);
            }

            #[test]
            fn damaged_frames_are_errors_or_other_frames(bytes in frame_bytes(), at in any::<usize>(), to in any::<u8>(), cut in any::<bool>()) {
                let mut body = bytes[4..].to_vec();
                let at = at % body.len();
                if cut {
                    body.truncate(at);
                } else {
                    body[at] = to;
                }
                let _ = decode::<ClientFrame>(&body);
            }

            #[test]
            fn streams_of_arbitrary_bytes_never_buffer_past_the_limit(
                len in any::<u32>(),
                rest in proptest::collection::vec(any::<u8>(), 0..256),
            ) {
                let mut stream = len.to_be_bytes().to_vec();
                stream.extend_from_slice(&rest);
                let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let got = rt.block_on(read_bytes(&mut &stream[..], MAX_CLIENT_FRAME));
                match got {
                    Ok(Some(b)) => prop_assert!(b.len() as u32 == len && len <= MAX_CLIENT_FRAME),
                    Ok(None) => prop_assert!(false, "a length prefix is not a clean end"),
                    Err(_) => prop_assert!(len > MAX_CLIENT_FRAME || (len as usize) > rest.len()),
                }
            }
        }
    }
}
