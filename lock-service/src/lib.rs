//! # lock-service
//!
//! A lock service built for locks alone: its nodes replicate one state machine with Raft
//! (openraft 0.9), its sessions are kept by the servers rather than by clients' clocks, and
//! it hands a released lock to the next waiter in the same commit and pushes the grant down
//! the waiter's connection. It runs as one node or as a cluster (three or five nodes, to
//! survive one or two failures). The `lock-server` binary runs a node
//! ([`server::ServerArgs`] lists its options); [`client::ServiceClient`] is the client, and
//! its [`client::ServiceLocker`] implements [`lock_core::Locker`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! use lock_core::Locker;
//! use lock_service::client::{ClientConfig, ServiceClient};
//! let endpoints = ServiceClient::parse_endpoints("10.0.0.1:7401,10.0.0.2:7401,10.0.0.3:7401");
//! let client = ServiceClient::connect(&endpoints, ClientConfig::default()).await?;
//! let locker = client.locker("billing-worker-1")?;
//! let guard = locker.lock("invoice-42", Some(std::time::Duration::from_secs(30))).await?;
//! // ... write to the resource with guard.token() as the fencing token;
//! // tokio::select! on guard.lost() to stop when the session is lost ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Running a node and a cluster
//! Every node is given the whole cluster as `ID=PEER_ADDR/CLIENT_ADDR` pairs, its own id and
//! a data directory; `--init` bootstraps a new cluster on the first start (give it to every
//! node of the new cluster; on a node whose log is not empty it does nothing, but never give
//! it to a node that lost its data directory, which would bootstrap again under its old id):
//!
//! ```text
//! CLUSTER=1=10.0.0.1:7400/10.0.0.1:7401,2=10.0.0.2:7400/10.0.0.2:7401,3=10.0.0.3:7400/10.0.0.3:7401
//! lock-server --id 1 --cluster $CLUSTER --data-dir /var/lib/lock-service --init   # on 10.0.0.1
//! lock-server --id 2 --cluster $CLUSTER --data-dir /var/lib/lock-service --init   # on 10.0.0.2
//! lock-server --id 3 --cluster $CLUSTER --data-dir /var/lib/lock-service --init   # on 10.0.0.3
//! ```
//!
//! One node is the same with a cluster of one. Clients are given the client addresses
//! ([`client::ServiceClient::parse_endpoints`]) and find the leader themselves. A node's data
//! directory belongs to that node of that cluster (`--cluster-token` names the cluster): a
//! node started on another's directory refuses to start.
//!
//! ## The protocol, step by step
//! This section tells the steps and why they are safe; the bytes on the wire (frames, every
//! request, reply and push as JSON, errors, retries and limits), enough to write a client in
//! another language, are in `docs/PROTOCOL.md` at the repository's root. The Python client
//! in `lock-service/clients/python` is written from it alone.
//!
//! The replicated state ([`state::LockTable`]) holds every live session (id, TTL) and, per
//! lock id, its holder `(session, owner, token, attempt)` and a FIFO queue of
//! `(session, owner, attempt)`. The *attempt* numbers an owner's asks within its session.
//!
//! 1. **Open a session.** The client dials any node; a follower answers `NotLeader` with the
//!    leader's address. The leader draws the session's key, a random secret, and commits
//!    `Open { ttl, hash of the key }`; the session's id is that command's stamp (below), and
//!    the client is answered the id and the key. The TTL is the client's choice, within the
//!    range the protocol allows ([`proto::MIN_TTL`] to [`proto::MAX_TTL`]).
//! 2. **Keep it alive.** The leader answers a keep-alive only after confirming with a quorum
//!    that it still leads, and notes the time of that confirmation (after receiving it: the
//!    safe side); keep-alives are not written to
//!    the log. A command of the session that the leader commits counts the same (the commit
//!    proves the quorum), so a busy session sends no keep-alive and an idle one sends one
//!    every TTL/3.
//! 3. **Acquire** commits `Acquire { session, lock, owner, wait, attempt }`. Applying it
//!    grants a free lock (token = this command's stamp), queues the owner (`wait`), or
//!    answers busy (`try_lock`). Acquire is one request and one commit.
//! 4. **Release** commits `Release { …, attempt }`. Applying it frees the lock and, **in the
//!    same entry**, grants it to the first waiter of a live session (token = this release's
//!    stamp). Every node applies it; the leader pushes the grant, naming the waiter's
//!    attempt, down the waiter's connection. So a handoff costs one commit, with no polling
//!    and no watch round trip.
//! 5. **Expiry.** The leader looks at its sessions every 20 ms. When a session's last
//!    keep-alive is a whole TTL old, it commits `Expire { session }`. Applying it frees the
//!    session's locks to their next waiters and drops it from every queue. The client is
//!    told when it can be reached: a push, or `SessionGone` on its next request.
//! 6. **Failover**, below.
//!
//! ## What a client sees on failover
//! A client whose connection breaks, or that hears `NotLeader` or `Unavailable`, finds the
//! leader again and sends `Resume { session, key }`. The reply lists what the session holds, so
//! a grant pushed while it was away is not lost.
//! - A session that holds or waits resumes as soon as its connection drops, not at its next
//!   keep-alive, so a waiter hears of the new leader's grant without waiting up to TTL/3.
//! - A node that keeps the connection open and answers nothing (paused, or stalled) is given
//!   up on after TTL/3 without an answer and moved to the end of the client's list, so the
//!   session resumes on the leader the others elected while its lease still stands. The
//!   client does not follow a leader hint to a node that failed since it last answered, but
//!   still tries it last in its turn, so a node that comes back is found.
//! - Between rounds that find no leader the client waits 50 ms, doubling to 400 ms.
//! - **A release is sent until its outcome is known**, as Curator's and etcd's clients do: a
//!   guard's release is sent again for up to a session TTL, so
//!   [`LockGuard::release`](lock_core::LockGuard::release) returns `Ok` once the lock is
//!   released or the session that held it is over, and an error only when the outcome is
//!   still unknown with the session alive. Such a release is sent again after each
//!   keep-alive, and before the owner's next ask for that lock on the session, which waits
//!   for it. Whatever the client does, the owner's next ask is never answered the old grant:
//!   the server gives it up first and grants anew, with a greater token ([`state`]).
//! - **What it costs:** no grant is made while there is no leader, so a lost leader costs
//!   every client an election (the election timeout, `--election-ms`, plus a vote) and a
//!   reconnect. Locks stay held meanwhile; a session outlives a failover only if its TTL is
//!   longer than that. The leader-kill runs, beside ZooKeeper's and etcd's, are in
//!   `results/leader-kills/README.md`.
//! - **The heartbeat bounds the round trip between nodes.** openraft gives every call to a
//!   peer the heartbeat interval (`--heartbeat-ms`) to be answered; a call that misses it
//!   goes on in the background and hands its connection back when the late answer comes
//!   ([`raft`]'s `Peer::call`). If the round trip between nodes stays above the interval,
//!   leadership checks fail and nothing commits, and sessions are lost.
//!
//! ## Why a grant never goes to two live sessions, across leader changes
//! - **Only the committed log decides.** Grants are made only by applying committed entries,
//!   in log order, on every node, by a function that reads no clock. Raft makes the committed
//!   log the same on every node and keeps it across leader changes. A lock has at most one
//!   holder in that state.
//! - **The token rises with every grant.** Every command applied takes a *stamp*: its
//!   entry's log index, or one more than the previous command's stamp when that is greater
//!   (a command after the first of a batch, or any command after a batch). A grant's fencing
//!   token is the stamp of the command that made it, a session's id the stamp of its `Open`.
//!   Stamps rise strictly along the committed log and within each entry, the last one is in
//!   every snapshot, and every node computes the same ones; so every later grant of any lock
//!   has a greater token, across leader changes and restarts. A resource that refuses writes with a token below the highest it
//!   has seen refuses a holder that lost its lock.
//! - **An expired session releases its locks.** Expiry is an entry like any other: applying
//!   it frees the session's locks to their next waiters in that same entry.
//! - **The client stops believing before the server can expire.** The client counts its
//!   session alive until `s + TTL`, where `s` is the *send* time of its last answered
//!   keep-alive or committed command. A leader answers either only after a quorum confirmed
//!   it still led (the check, or the commit), at some time `c > s`. Any later leader was
//!   elected by a quorum that overlaps that one, so its election came after `c`.
//! - **A new leader waits a whole TTL (Chubby's rule).** A new leader counts every session
//!   from the moment it saw itself lead, and expires none before a whole TTL from then. So
//!   no leader expires a session before `c + TTL > s + TTL`, the moment its client stopped
//!   believing in it. The old leader's own expiries need a commit, which it cannot make
//!   once deposed.
//! - **The assumption:** the clocks of client and servers *run* at the same rate. Their
//!   readings are never compared, and no wall clock is read anywhere.
//! - **What remains: the paused holder.** A holder paused past its TTL (a GC pause, a
//!   stopped VM) is told `Lost` only when it runs again, after the lock went on. Like every
//!   lease lock, it may then act under a lock it lost. The fencing token is what stops its
//!   writes.
//!
//! ## Durability
//! Each node keeps its log in segments of its own format ([`wal`]) and its vote, its last
//! snapshot and the log's purge point in a redb file ([`raft::Store`]):
//! - Log appends and votes are synced to disk before openraft is told they are done. One
//!   writer thread ([`log`]) syncs whatever queued meanwhile at once. openraft 0.9's core
//!   waits for the leader's own append to be synced before it sends the entry to the
//!   followers, so a commit costs the leader's sync and then a follower's, one after the
//!   other; what spreads that cost is the many commands one entry carries (group commit,
//!   below).
//! - So an acknowledged grant is on a majority's disks and survives every node crashing at
//!   once (`tests/failover.rs` kills all three and restarts them).
//! - A crash mid-write damages only the unacknowledged last batch, which is dropped on
//!   restart; damage anywhere else stops the node with the segment's name ([`wal`] argues
//!   this).
//! - A node that loses its disk must not rejoin under its old id: it could vote twice in a
//!   term, or count towards a quorum for entries it no longer has. It comes back under a new
//!   id, added by a membership change (`lockctl member add`), and the old id is removed; a
//!   copy of its directory from before is no better than an empty one, for the same reason.
//!   `docs/DEPLOYMENT.md` (at the repository's root) says how to run a cluster: TLS, users,
//!   systemd, membership, rolling restarts, backups.
//!
//! ## Choices, and what they cost
//! - **Replication before a grant.** A grant is answered or pushed only once its entry is
//!   committed: on a majority's disks. A handoff therefore costs a round trip to a follower
//!   and a disk sync on each side, and the disk is most of that; a node of one skips the
//!   round trip but not the sync.
//! - **One fsync per batch of writes** ([`log`]): the writer thread syncs together whatever
//!   queued while the last sync ran, so a busy node pays one sync for many commits, and an
//!   idle one a sync per commit. The committed index, which Raft can rebuild, is written
//!   only now and then, so it never holds up an append's sync.
//! - **A log format of its own** ([`wal`]) rather than redb's B-tree for the entries: an
//!   overwrite in a pre-allocated segment syncs one block and no metadata. It is more code
//!   to trust; [`wal`] argues why it is as safe, and openraft's storage suite runs against it.
//! - **JSON frames over TCP**, not gRPC: no protobuf compiler and no generated code; a frame
//!   is small beside a disk sync. Frames from clients are capped at 64 KiB; a malformed one
//!   is answered with an error and the connection goes on.
//! - **Retries are idempotent**: an ask sent again (the same attempt) for a lock the owner
//!   already holds (or waits for) is answered the same grant (or queue place). So a client
//!   resends after a lost answer or a failover without taking two places.
//! - **Asks are told apart by their attempt** ([`state`] has the rules and why). An ask the
//!   caller gives up on (its future dropped, or failed across a failover) leaves the queue
//!   by a release the client sends on its own, later. A new ask of the same owner takes
//!   over the old one's queue place; if the old one holds, its grant is given up in the new
//!   ask's entry and the new ask is served as new, so it is never answered the old grant
//!   and its token. A release gives up only the ask it names, and the client hands a pushed
//!   or resumed grant only to the ask it names. So a late release of an old ask never
//!   cancels a new one, a grant never reaches an ask that was given up, and one grant is
//!   never seen as two acquisitions. A `try_lock` given up on gives its grant back the same
//!   way.
//! - **Raft on a thread of its own; clients on `--threads` (one by default).** openraft's
//!   core, its replication, the state machine's applier, the peer listener and the calls to
//!   peers run on one thread ([`server`]'s `raft_thread`); client connections, TLS, frames
//!   and requests on the client runtime. So no client work delays a heartbeat or a vote: a
//!   burst of pipelined requests on one shared thread got a leader deposed. Within each
//!   runtime a hand-off between tasks wakes no other thread; a commit crosses between the
//!   two twice per entry (the batch in, its outcomes out). Those crossings are the price: two
//!   thread wake-ups more in every commit, felt most by one contended lock, whose every grant
//!   waits for the previous release's commit.
//! - **Group commit: many clients' commands in one entry** ([`server`]'s `batch`). openraft
//!   makes each proposal an entry of its own and waits for its append to be on disk before
//!   it takes the next, so one command an entry cost a disk sync each, one after the other,
//!   whatever the number of clients. The leader therefore proposes the commands that
//!   arrived while its previous writes were under way as one entry (`Batch`), at most two
//!   entries in flight: one append, one sync and one replication round for all of them. The
//!   entry is applied command by command, in order, each with its own stamp and outcome, so
//!   tokens and session ids stay unique and rising. A command that finds nothing in flight
//!   goes alone at once, so an idle node adds no wait. The cost: entries of an earlier
//!   version are read as before, but a node of an earlier version cannot read a batch, so a
//!   cluster is upgraded all at once (stopped, then started on the new version), not node by
//!   node.
//! - **A commit window, shared in turn** (`--commit-window`, 32): at most that many client
//!   commands are between the clients and the applied state at once, which bounds the
//!   batches. When it is full, a freed place goes to the waiting connections in turn, so a
//!   bystander's acquire waits for one command of each busy connection and the window, not
//!   for the whole burst (`tests/burst.rs` checks both), and openraft's queue holds two
//!   entries at most, so its heartbeats and votes never wait behind a burst.
//! - **Memory: about half a KiB per session and per held lock** on each node: the table's
//!   entry for it, the hub's entry for its connection, and the log entry that made it,
//!   kept in memory until the next snapshot lets the log be trimmed. Measured as a node's
//!   resident memory before and after opening 10,000 sessions over one connection, then
//!   after one session acquired 10,000 free locks (with the limits per identity and per
//!   session raised to allow it).
//! - **Sessions cost keep-alives, not polls**: a grant costs one acquire and one release
//!   request, plus a keep-alive per session that sent nothing else for TTL/3. The requests
//!   per grant of every engine are in `results/engines/README.md`.
//! - **A hot lock is a ceiling no batching lifts.** Commits are shared across locks, but one
//!   lock's grants follow each other: each waits for the previous holder's release to
//!   commit. When a few locks take most asks (a Zipf law), their hold time plus the handoff
//!   gap bounds the whole rate, and the service's lead over another engine shrinks to the
//!   ratio of their hold-plus-gap, however many clients and locks there are
//!   (`results/scale/README.md`, the Zipf sections).
//!
//! ## Order: first come, first served
//! The queue is FIFO in commit order (`state`'s tests). What the service promises is
//! Lamport's first come, first served: once the `Queued` (or `Granted`) answer has come, no
//! ask made after it is served first. The client records that instant in the guard
//! (`LockGuard::queued_at`); the conformance suite checks the promise
//! (`check_first_come_first_served`, which a LIFO queue fails). Two asks sent at nearly the
//! same time over two connections may reach the leader in either order; a harness that
//! stamps asks before sending counts that as an overtake, though no lock could prevent it.
//! Both counts, beside ZooKeeper's and etcd's, are in `results/engines/README.md`.
//!
//! ## Readers, writers and permits
//! [`client::ServiceRwLocker`] and [`client::ServiceSemaphore`] are native: an ask carries
//! what it wants (`proto::Share`: alone, a read, or k of N permits) and the state machine
//! keeps one FIFO queue per id for all of them ([`state`], "Shared asks"). A reader behind a
//! waiting writer waits for it, so writers never starve; a writer's release grants every
//! reader up to the next writer in the same commit, so a shared handoff costs what a mutex
//! handoff does: one commit, and a request each to ask and to release. A grant of k permits
//! carries k tokens. Semaphore ids and lock ids share one namespace: an id held as a lock is
//! refused to a semaphore's ask, and a semaphore's size to an ask naming another.
//!
//! [`client::ServiceElector`] is an election on the same queue: a candidacy is an exclusive
//! ask carrying the candidate's value, the grant is the leadership and its token the term.
//! The commit that changes who leads (or what the leader announces) pushes the change to every
//! session observing the election, so observers learn a new leader in the commit that made it.
//! A node pushes only to the connections that asked it; a client observes again on the
//! connection it resumes on, and learns the state it finds there.
//!
//! ```no_run
//! # async fn demo(client: lock_service::client::ServiceClient) -> Result<(), lock_core::LockError> {
//! use lock_core::{Elector, RwLocker, Semaphore};
//! let catalogue = client.rw_locker("indexer-1")?;
//! let read = catalogue.read("catalogue", None).await?; // beside other readers
//! read.release().await?;
//!
//! let pool = client.semaphore("worker-1")?;
//! let permits = pool.acquire("db-connections", 8, 2, None).await?; // 2 of 8, a token each
//! permits.release().await?;
//!
//! let elector = client.elector("scheduler-1")?;
//! let mut observer = elector.observe("scheduler").await?;
//! let now = observer.changed().await?; // who leads now (None: nobody), then every change
//! let leadership = elector.campaign("scheduler", b"10.0.0.7:9000".to_vec(), None).await?;
//! // Leading: write to the resource with leadership.term() as the fencing token.
//! leadership.resign().await?;
//! # Ok(()) }
//! ```
//!
//! ## Security: TLS and credentials
//! A node started with `--users FILE --tls-cert CERT --tls-key KEY --tls-ca CA`:
//! - **speaks TLS only** to clients (its certificate, which clients check against the CA in
//!   [`client::ClientConfig::tls`] and the address they dial) and **mutual TLS** to its peers:
//!   a node accepts a peer only with a certificate the CA signed, so a stranger on the network
//!   can neither join the cluster nor speak Raft to it. The one plain thing it answers is a
//!   `Status` probe (leader, term, counts; nothing of a lock or a session), for health checks;
//! - **authenticates every client**: the first request on a connection is `Hello { user,
//!   token }`, checked against the users file, which keeps only each token's SHA-256
//!   ([`auth`] shows how to make a line). A wrong token closes the connection; any request
//!   before a `Hello` but `Status` is refused (`Unauthenticated`). The client sends it from
//!   [`client::ClientConfig::credentials`] on every connection it makes, failovers included;
//! - **a session belongs to the identity that opened it**: the identity is in the session's
//!   `Open` entry, and every request naming a session (keep-alive, resume, acquire, release,
//!   close) is refused (`Forbidden`) when another identity sends it. The leader refuses it
//!   before committing anything, and the state machine checks it again on every entry it
//!   applies, so a request that slipped past a leader still catching up changes nothing;
//! - **a session is resumed only with its key**: the node that opens a session draws a random
//!   key outside the state machine (which reads no randomness), answers it to the client
//!   alone and commits only its SHA-256 in the `Open` entry, so every replica can check it; a
//!   `Resume` without the right key is refused;
//! - **only an admin may force-release a lock** ([`client::ServiceClient::force_release`]):
//!   the entry names the admin, the holder is pushed `Revoked` and its guard turns `Lost`
//!   with the admin's name, the next waiter is granted in the same entry, the leader logs a
//!   warning, and the cluster counts it (`Status::forced_releases`);
//! - **bounds what one client can make it hold**: sessions per identity
//!   (`--max-sessions-per-identity`), locks held or waited for per session
//!   (`--max-asks-per-session`), both carried in the command and counted again when it is
//!   applied, in log order, so requests in flight together (a pipelined burst, a change of
//!   leader) never pass them; requests in progress per connection (`--max-inflight`:
//!   further frames are not read, so a client pipelining more waits in its own socket),
//!   frames of at most 64 KiB, and at most 4096 frames queued for a connection that does not
//!   read (then it is dropped). Each limit is a clear error (`LimitReached`) that commits
//!   nothing;
//! - **closes connections that cost without serving**: the TLS handshake and the first frame
//!   within `--handshake-timeout-ms` (10 s), the `Hello` within `--hello-timeout-ms` (10 s),
//!   something every `--idle-timeout-ms` (60 s) from a connection with no session and no
//!   request in progress, and the rest of a frame within `--frame-timeout-ms` (10 s) of its
//!   first byte (a frame written to the client within as long). A frame's buffer grows as its
//!   bytes come, so half a frame costs what was sent of it, not the length it announced; a
//!   closed connection keeps nothing (its sessions leave the push hub), and after a wave of
//!   closed connections the node gives the freed memory back to the system (`server`'s
//!   `trim`).
//!
//! Without `--users`, every client may do everything, force-releasing included (the holder is
//! told), as on a ZooKeeper with the open ACL: the stranger rows of `results/safety/README.md`
//! show what that costs. But one client cannot take another's session or every session: there
//! a session belongs to the connections that opened it or resumed it with its key (the
//! client resumes on each new connection, so a reconnect or a failover loses nothing), and
//! the limit on sessions holds per connection, reserved before the `Open` is proposed, with a
//! cap on all the sessions together (`--max-anonymous-sessions`) for a client that opens many
//! connections. Per connection rather than per client address: an address would lump
//! together every client behind one NAT, proxy or host. **What security costs**: a connection costs one TLS handshake and one `Hello`
//! more; a commit costs nothing more.
//!
//! ## Metrics and health
//! A node started with `--metrics-addr IP:PORT` serves HTTP there (off by default; plain
//! HTTP without authentication, so bind it where only the monitoring reaches it):
//! - `GET /metrics`: Prometheus' text format, without labels: grants, releases, session
//!   expirations and forced releases (counters, counted by every node as it applies the
//!   log), wait and hold times (histograms on the node's own monotonic clock as it applies:
//!   node-local, not replicated), commit latency on the leader and the log's sync latency
//!   (histograms), and sessions, grants held, waiters, Raft's term, whether the node leads,
//!   the leader's id, and the applied and committed indexes (gauges).
//!   [`server::metrics`] lists every name and where each comes from.
//! - `GET /health`: 200 when the node knows a leader, its Raft runs, and within a second it
//!   has applied every entry it knew committed when asked; else 503 with the reason (no
//!   leader known, Raft stopped, still applying). Both answer a JSON object of the figures.
//!
//! The endpoint answers one request per connection, bounds each request's size and time, and
//! runs on the client runtime, never on Raft's thread ([`server::metrics`], `server`'s `http`).
//! The node also keeps when each current grant was applied ([`server::GrantTimes`]).
//!
//! ## What the tests check
//! - `state`'s unit tests: FIFO handoff in the releasing entry, increasing tokens, idempotent
//!   retries, a new ask taking an abandoned one's queue place, a new ask of a holder given a
//!   token of its own, a property test that a grant answers one ask only, and an ended
//!   session freeing its locks and queue places.
//! - `tests/group_commit.rs`: 32 connections each sending their commands in one write to a
//!   node: far fewer log entries applied than commands, every command answered its own
//!   outcome, tokens distinct and rising per lock; `state`'s and `server`'s `batch` unit
//!   tests: a batch's commands stamped one after another, and commands sent together
//!   gathered into few entries, each answered the grant the table holds for it.
//! - `tests/abandoned.rs`: asks given up on and made again at once, on a real node: the new
//!   ask is neither cancelled by the old one's release nor handed its grant.
//! - `tests/unknown_release.rs`: a release sent while the client is cut off, or while the
//!   leader is stopped, is answered once the fault ends; the lock is then free for others
//!   and the owner's next grant has a greater token. Against a leader that refuses every
//!   release, the release is given up on with an error saying so, and sent again (and
//!   answered) before the owner's next ask is sent.
//! - `tests/conformance.rs`: the workspace's conformance suite on a 3-node cluster.
//! - `tests/failover.rs`: a killed leader, a partitioned leader, a leader silent for longer
//!   than the TTL, and every node crashing at once. The holder keeps its lock, nobody else
//!   is granted it meanwhile, and the next token is greater.
//! - `tests/burst.rs`: 3 connections pipelining 2,000 requests each at a 3-node cluster, in
//!   plain and over TLS: no election (every node's leader and term the same before and
//!   after), no request refused, and a bystander's acquires during the burst prompt.
//! - `tests/deadlines.rs`: a connection silent before its `Hello`, one holding half a frame
//!   and one idle without a session each closed at its deadline (a session's connection
//!   kept), and 2,000 connections each holding half a frame leaving the node's memory where
//!   it was once they closed.
//! - `tests/bad_input.rs`: a foreign or unwritable data directory, a bad cluster list, a
//!   client pointed at no live node, and malformed and oversized frames.
//! - `tests/storage_suite.rs`: openraft's own storage test suite on the log store and the
//!   state machine; `wal`'s unit tests: entries, truncations and purges after a reopen, new
//!   segments, a torn last record dropped, and damage in an earlier segment refused.
//! - `tests/security.rs`: clients without credentials or with a wrong token refused, every
//!   request in another identity's name refused with nothing committed, an admin's
//!   force-release told to the holder and counted, the limits, untrusted and wrong-host
//!   certificates, TLS on one side only, peers without the cluster's certificates, and
//!   arbitrary frames from an authenticated client. `proto`'s property tests decode
//!   arbitrary and damaged frames. `tests/secured_conformance.rs`: the conformance suite on
//!   a 3-node cluster with TLS, mutual TLS between nodes and a user per contender.
//! - `tests/limits.rs`: 1,200 opens of one identity written at once on four connections open
//!   exactly the limit, and no more are ever live; a session's asks written at once on two
//!   connections likewise; on a node without users, a client that fills its connection's
//!   limit leaves another client room to open and lock, the cap on all sessions holds, a
//!   stranger's release, keep-alive, ask, observe, proclaim, close or keyless resume of
//!   another's session is refused with nothing committed and the holder still holds, the
//!   session's own client resumes with its key on a new connection, and a force-release by
//!   anyone tells the holder.
//! - `tests/metrics.rs`: a node's `/metrics` after grants, releases, a queued wait and an
//!   expiry (each counter's value, and `promtool check metrics` on the text), `/health` 200 on
//!   a single node and on every node of a cluster, 503 on a node of three started alone, and
//!   garbage, oversized and never-ending HTTP requests refused while the locks are served.
//! - `tests/nemesis.rs`: a CI-sized Jepsen-style run, the leader killed again and again
//!   under six contenders, every grant checked. The full run is a command of the harness
//!   (the workspace README's "leader killed every 8s"); its results are in
//!   `results/leader-kills/README.md`.

#![deny(missing_docs)]

pub mod auth;
pub mod client;
#[cfg(feature = "server")]
pub mod counts;
#[cfg(feature = "server")]
pub mod log;
pub mod proto;
#[cfg(feature = "server")]
pub mod raft;
#[cfg(feature = "server")]
pub mod server;
pub mod state;
pub mod tls;
#[cfg(feature = "server")]
pub mod wal;
