//! # lock-zookeeper
//!
//! The ZooKeeper lock recipe of seed 004 against a real ZooKeeper server, through
//! the `zookeeper-client` crate, and on the same queue of znodes a reader-writer lock
//! ([`ZkRwLocker`]) and a counting semaphore ([`ZkSemaphore`]) that share their paths with
//! Curator's and kazoo's recipes (below, "The reader-writer lock and the semaphore"), and
//! leader election ([`ZkElector`]) on kazoo's `Election` layout (below, "Leader election").
//!
//! ## The protocol, step by step
//!
//! Seed 004 (a Russian article on ZooKeeper locks in Go) describes it as: client A creates
//! `/locks/lock-` and gets `/locks/lock-0`, which holds the lock; B gets `/locks/lock-1` and
//! waits; C gets `/locks/lock-2` and "waits even more patiently"; when A releases, B is
//! notified and takes the lock, then C. The nodes are **ephemeral** (they vanish when their
//! client's session ends, "no timeouts or cleanup jobs needed") and **sequential** (the server
//! appends an increasing counter, "a natural queue"). Here, per lock id:
//!
//! 1. Make sure `<root>/<lockId>` exists (persistent; parents created as needed; `root` is
//!    `/locks` by default).
//! 2. Create an **ephemeral sequential** znode `<root>/<lockId>/_c_<uuid>-lock-` (data: the
//!    owner id), a new random UUID per request; the server appends a 10-digit sequence number.
//!    This is Curator's protected name ([`NodeNaming::Protected`]); with [`NodeNaming::Plain`]
//!    the seed's `lock-` (below, "Other clients on the same path").
//! 3. List the children of `<root>/<lockId>`: every child whose name ends in a sequence number
//!    is a contender, whichever client made it. If ours has the lowest sequence number, the
//!    lock is ours.
//! 4. Otherwise set a watch on **only the immediate predecessor** (the contender with the
//!    greatest sequence below ours) with `exists`; if it is already gone go back to 3, else
//!    wait for the watch to fire and go back to 3. Watching the predecessor rather than the
//!    directory means a release wakes exactly one waiter: no herd effect.
//! 5. Release: delete our znode. The session's end (close, or expiry after the session timeout
//!    without heartbeats) deletes it too: that is how a crashed holder frees the lock.
//!
//! The mandatory lock with a timeout deletes its znode before returning
//! [`LockError::Timeout`], so nothing of it remains to delay the next contender. The soft
//! lock (not in the seed) runs steps 2–3 once and, not being first, deletes its znode and
//! returns "not held". It does not list the children first to skip the create when they look
//! taken: on an ensemble that list may come from a follower that has not yet applied another
//! client's release, and a lock freed a moment ago would be refused; the list after its own
//! create sees every write committed before it.
//!
//! ## Other clients on the same path
//! Other processes may take the same lock through another ZooKeeper client: Apache Curator's
//! `InterProcessMutex` (Java), kazoo's `Lock` (Python), or the seed's recipe. Each puts its own
//! text before the sequence number: Curator `_c_<uuid>-lock-<seq>`, kazoo
//! `<uuid hex>__lock__<seq>`, the seed `lock-<seq>`. The sequence number is the directory's
//! one counter whoever creates, so it alone orders the queue:
//! - **Seeing them.** Step 3 takes any child whose name ends in at least ten digits as a
//!   contender, by those digits, and ignores the text before them. So every client's znode
//!   queues, and so do the read-lock znodes of Curator's and kazoo's read-write locks, which an
//!   exclusive lock must wait for too. We wait on a foreign znode exactly as on our own.
//! - **Being seen.** Curator orders every child by what follows the last `lock-` in its name
//!   (`standardFixForSorting`): both our forms by their sequence number. kazoo only sees its
//!   own `__lock__` unless given more patterns: its
//!   `Lock(client, path, extra_lock_patterns=["lock-"])` (kazoo 2.7.1 and later) sees both our
//!   forms, and each side then waits for the other in sequence order (`tests/kazoo.rs` runs
//!   this against kazoo itself). A kazoo lock without the pattern ignores our znodes and takes
//!   the lock while we hold it: the one thing this crate cannot prevent.
//! - **Our names.** The default is Curator's protected form, the de-facto standard, which also
//!   settles a create whose answer was lost (below): the UUID of the request finds its znode.
//!   Its GUIDs come from the locker's [`Guids`], a seeded generator (seeded from the operating
//!   system by [`ZkBackend::locker`], or by the caller through [`ZkBackend::locker_with`]), never
//!   from a global one, so a test's names can be repeated. [`NodeNaming::Plain`] keeps the
//!   seed's `lock-<seq>` for clients that only recognise it, at the price of failing such a
//!   create instead.
//!
//! ## The reader-writer lock and the semaphore
//! Both run on the mutex's machinery: its sessions, its protected names and their search after
//! a lost create, its queue of sequential znodes whichever client made them, its guards (told
//! `Lost` at a disconnection or when a stranger deletes their znodes) and its retries. What
//! each adds is in its own docs; in short:
//! - **[`ZkRwLocker`]** ([`ZkBackend::rw_locker`]) queues readers and writers in the lock id's
//!   directory as Curator's `InterProcessReadWriteLock` does: `_c_<uuid>-__READ__<seq>` and
//!   `_c_<uuid>-__WRIT__<seq>`. A writer holds when its znode is the lowest; a reader when no
//!   exclusive znode is below its own. Asks are served in sequence order
//!   (`WriterPolicy::Fifo`): nobody starves. A write ask of a lock the locker reads is refused
//!   (`UsageError::Upgrade`).
//! - **[`ZkSemaphore`]** ([`ZkBackend::semaphore`]) is kazoo's `Semaphore` layout: the size N in
//!   the semaphore node's data (another size is refused, `UsageError::LimitMismatch`), one lease
//!   znode per permit as its children, and an admission lock at `<path>-__lock__` whose holder
//!   alone counts the leases and adds its own. A token per permit: its lease's `czxid`.
//!
//! ### What interoperates, and why
//! | on one path | with ours | why |
//! |---|---|---|
//! | Curator's `InterProcessReadWriteLock` | yes | the same names; Curator orders children by what follows `__READ__` or `__WRIT__` and takes a child naming `__WRIT__` for a writer, as we do |
//! | kazoo's `WriteLock` / `ReadLock` | yes, given `extra_lock_patterns=["__READ__", "__WRIT__"]` (writers) and `["__WRIT__"]` (readers) | kazoo sees only the names it is told; we see kazoo's `__lock__` (exclusive) and `__rlock__` (shared) by ourselves |
//! | kazoo's `Semaphore` | yes | the same node, size, admission lock (named `__lock__`, which kazoo's lock sees) and count of children |
//! | Curator's `InterProcessSemaphoreV2` | no | its leases and lock live under `leases/` and `locks/` inside the path, and it keeps no size; kazoo's layout and Curator's cannot both be followed |
//! | our mutex, Curator's `InterProcessMutex`, kazoo's `Lock` on a reader-writer lock's path | as writers | a reader takes any contender it does not know for a reader as exclusive; the mutexes wait for every contender |
//!
//! Curator's and kazoo's reader-writer locks on one path do not see each other (Curator sorts
//! kazoo's names as text, kazoo sees Curator's only if told); ours excludes with both. kazoo's
//! `ReadLock` before 2.9.0 waits for writers queued after it as well as before, so it can
//! deadlock with a later writer of any client once it has to wait (`tests/kazoo_rwlock.rs`
//! gives it later kazoo's rule).
//!
//! ## Leader election
//! [`ZkElector`] ([`ZkBackend::elector`], `lock_core::election::Elector`) runs on the mutex's
//! queue too: a campaign is a lock on the election's directory (`<root>/<election>`) held for
//! as long as the candidate leads, with its guard, its holder's watch and its fencing token
//! (the znode's `czxid`: the term). What it adds is the layout of kazoo's `Election`, a kazoo
//! `Lock` whose znodes hold the candidate's identifier: ours are named
//! `_c_<uuid>-<owner>__lock__<seq>` (the owner id escaped; kazoo sees only names ending in
//! `__lock__` and the sequence) and hold the candidate's value alone, so kazoo's
//! `contenders()` lists our values beside its identifiers and both clients elect one leader
//! at a time in sequence order (`tests/kazoo_election.rs`). A proclamation rewrites the
//! leader's znode, guarded by its data version; observers watch the leader's znode (and the
//! directory while nobody leads), so an observer can miss a leader that led for less than a
//! round trip. Curator's `LeaderLatch` cannot share a path with it; [`ZkElector`]'s docs say
//! why, and give the protocol.
//!
//! ## What a holder is told
//! The seed warns that after losing its connection for longer than the session timeout a
//! client's znode is gone "but your process may not know it yet". A guard therefore follows
//! the session's state and publishes `LeaseState::Lost` as soon
//! as the session **leaves the connected state** — on *disconnection*, not only on expiry.
//! While disconnected the holder cannot know whether the server still has its session (the
//! server may expire it at any moment), so it must stop acting under the lock; this is
//! Curator's standard policy too (SUSPENDED counts as lost). A `Lost` guard must still be
//! released (its znode may still exist if the session survives).
//!
//! It is also told when its **znode is deleted or rewritten by another client** while the
//! session is healthy. Any client whose identity the lock directory's ACL lets delete children
//! can do that (every client, on an open path: below), and ZooKeeper then hands the lock to the
//! next waiter at once; before this watch the holder's guard still said `Held` seconds later.
//! At the grant the holder sends one `exists` on its own znode, setting a watch (the request
//! leaves before the guard is returned, so the grant waits for no answer); the watch fires on
//! the znode's deletion or a change of its data, and the guard is told `Lost` with what
//! happened, within the one notification the server sends. The guard's own release marks it
//! `Released` before deleting, so its own delete is never taken for a stranger's, and lets
//! that delete consume the watch (a watch dropped unfired would cost a `removeWatches`
//! request). `tests/security.rs` checks it.
//!
//! ### What the holder's watch costs
//! One request per grant (4 instead of 3 uncontended, 6 instead of 5 after waiting: "Requests
//! per grant" below), sent without waiting for its answer, so the grant and the handoff to
//! the next waiter wait for no extra round trip. [`ZkConfig::watch_holder`] turns it off
//! (`--zookeeper-no-holder-watch` in the harness, to compare the two); the harness's
//! ZooKeeper runs, with the watch, are in results/engines/README.md.
//! Turning it off leaves a holder whose znode another client deletes uninformed while its
//! session lasts, as Curator's and kazoo's recipes do.
//!
//! ## Credentials and ACLs: what a stranger can do
//! ZooKeeper checks every request against the ACL of the znode it touches, and a `delete`
//! against the ACL of the znode's **parent**, the lock's directory. So the directory's ACL
//! decides who can take the lock from its holder:
//! - **Open** ([`NodeAcl::Open`], `world:anyone`, what every lock recipe creates by default and
//!   this crate's default without credentials): any client of the ensemble can delete the
//!   holder's znode, and the next waiter is granted while the holder works. The holder is told
//!   (above), but only fencing tokens protect the resource in between.
//! - **Creator only** ([`NodeAcl::Creator`], the default when [`ZkConfig::credentials`] is
//!   set): each session authenticates with digest credentials (`user:password`, sent with the
//!   connect; ZooKeeper accepts any pair and derives an identity from it), and the directory
//!   and every znode carry `auth` ACLs: only sessions of the same identity can list the queue,
//!   create in it, delete from it or rewrite a znode. A stranger, with other credentials or
//!   none, gets `NoAuth` for each; so does a contender with a wrong password, and its lock
//!   request fails with a [`LockError::Backend`] that names the path, says `not authorised
//!   (NoAuth)` and whose identity was refused (the user, never the password). Every contender
//!   of a lock must therefore use the same credentials; a service with several identities
//!   gives the ACL itself ([`NodeAcl::Given`]).
//!
//! What the ACL cannot cover: a directory made before, with another ACL (ZooKeeper keeps the
//! ACL a znode was created with; the lock does not change it), and the root above the
//! directories, which the lock makes with the same ACL if missing. An admin with the
//! ensemble's super digest bypasses every ACL. A secured server needs no configuration of its
//! own for this: digest authentication is always on, and `tests/security.rs` and
//! `tests/secured_conformance.rs` run against the same test server as the rest.
//!
//! ## TLS
//! ZooKeeper serves TLS on its `secureClientPort` (Netty's connection factory and the `ssl.*`
//! settings; `test_servers::ZkServer::start_tls` runs one from Debian's ZooKeeper 3.8 with PEM
//! files and `ssl.clientAuth` `need`, `want` or `none`). Give [`ZkConfig::tls`] the CA to
//! trust and, where the server wants one, the client's certificate and key
//! (`lock_core::tls::TlsFiles`): every server of the connect string is then dialled over
//! TLS (`zookeeper-client`'s `tls` feature), and must show a certificate the CA signed for the
//! host dialled (an IP address needs an IP SAN). The CA is required, since the client trusts
//! no system roots; a missing or unreadable file is a [`LockError::Config`] naming it before
//! anything connects. TLS guards the wire; who may touch the lock's znodes is still the ACL's
//! business (above), with credentials as on a plain port.
//!
//! The client's rustls uses ring, as every TLS client here does. `zookeeper-client`'s feature
//! brings rustls's other provider, aws-lc-rs, into the build too (a C library, built with the
//! C compiler Rust links with), and with two providers compiled in rustls has no default:
//! the backend installs ring as the process's default before its first TLS connection,
//! unless the application has installed one.
//!
//! What a refusal looks like. `zookeeper-client` takes a refused handshake for an outage and
//! tries again until the connect timeout, to end with "no session". So once a connect has gone
//! 0.5 s without a session, the backend asks each server of the connect string itself, and if
//! every one refuses, the connect fails at once with a [`LockError::Backend`] naming each
//! server and why, without waiting for the connect timeout (`tests/tls.rs` checks each):
//! - with TLS, a handshake of its own with the same files: "invalid peer certificate:
//!   UnknownIssuer" (a CA it does not trust), "certificate not valid for name" (one for another
//!   host), "refused this client's certificate, or its lack of one" (the server's alert), or
//!   "closed the connection at the TLS handshake ... a plain clientPort?";
//! - without TLS, a handshake trusting no CA and sending nothing of the backend's (no
//!   certificate, no credentials): a server that answers with a certificate speaks TLS there,
//!   "it speaks TLS there ... set ZkConfig::tls ... or use the server's plain clientPort".
//!
//! A server that is only down or slow refuses nothing: the connect goes on to its timeout as
//! before, and a plain server slower than 0.5 s to give a session gets a ClientHello it closes
//! as a malformed request.
//!
//! ## Server outages and restarts
//! The `zookeeper-client` crate reconnects by itself within a session: while disconnected it
//! holds requests and retries the servers until it reaches one or has not heard from any for
//! 1.4 session timeouts, when it gives the session up (`Expired`). A standalone server writes
//! sessions to its transaction log, and after a restart with its data directory reloads them
//! and gives each a whole session timeout again. What each party sees
//! (`tests/restart.rs`):
//! - A **request** during an outage waits for the reconnection, never longer than the session
//!   timeout, then fails with [`LockError::Backend`]. Once the session is over, the next
//!   request establishes a **new session** on the same backend (one attempt at a time; after a
//!   failed attempt requests fail at once for 100 ms, doubling up to 2 s), so the backend never
//!   has to be connected again; [`ZkBackend::sessions_made`] counts them.
//! - A **holder** is told `Lost` at the disconnection (above). If the outage is short the
//!   session survives it, and so does the znode: the lock is still the holder's until its
//!   guard is released, so a `Lost` guard must be released. A release whose delete fails in the
//!   outage returns [`LockError::Backend`] and keeps deleting in the background until it
//!   succeeds or the session is over; a waiting request dropped or failed mid-wait does the
//!   same for its znode.
//! - A **create whose answer is lost** (the connection broke while it was on its way) may or
//!   may not have made its znode; in a session that survives, an orphan would hold the lock
//!   forever (the restart test hit this). With protected names the request, once connected
//!   again within the session, lists the directory and looks for its own UUID: a znode of its
//!   session with that name is its place in the queue, taken without creating twice; none
//!   means the create never landed, so it creates again with the same UUID (up to 3 creates,
//!   then [`LockError::Backend`]). This is Curator's protection mode (`tests/lost_create.rs`).
//!   A create with no answer within the session timeout fails with [`LockError::Backend`].
//!   Either way, one session timeout later (when any such create must have landed) the backend
//!   deletes any znode with that UUID that the request does not hold. With plain names nothing
//!   tells the lost znode from a concurrent request's, so the request fails with
//!   [`LockError::Backend`] and, once connected again (after a session timeout when the answer
//!   was late rather than lost), the backend deletes every plain znode of its session in that
//!   lock's directory that none of its waiters or holders knows: a concurrent plain create of
//!   the same backend for the same lock id whose answer is still on its way can be swept too,
//!   and its waiter then fails with [`LockError::LeaseLost`] ("vanished while waiting").
//! - A **waiter** keeps its place across a short outage (the client sets its watch again on
//!   reconnecting, and a list or watch whose answer was lost with the connection is sent again
//!   once reconnected within the session). If its session ends while it waits, it fails with
//!   [`LockError::LeaseLost`] (its place in the queue was a znode of that session); it is not
//!   re-queued, since a new znode would go to the back of the queue: the caller decides.
//!   While the session lives, a transient failure of one of its steps (a create, a list, a
//!   watch without an answer in time) is retried after a backoff within the call's deadline
//!   ([`lock_core::retry`]), keeping its znode and so its place; the call reports the last
//!   error only once its deadline passes (or, without one, after 30 s of failures). A plain
//!   create ([`NodeNaming::Plain`]) whose answer was lost is not retried: the request fails.
//! - After an outage **longer** than 1.4 session timeouts the client has given the session up,
//!   but the restarted server has restored it, with a whole session timeout, and its znodes,
//!   the old holder's lock included. Left alone, new sessions would wait that long for the
//!   lock, and a server restarted again within each timeout would expire nothing until the
//!   restarts stopped (on a loaded machine, where the server takes seconds to serve after its
//!   port opens, restarts a few seconds apart are enough). So the backend connects to the
//!   session it gave up as soon as a server answers, and closes it, which deletes its znodes
//!   at once; a server that has expired it says so, and there is nothing to do (tried for
//!   ten session timeouts, at least a minute). After a short outage grants resume on the old
//!   sessions once the server answers again (`tests/restart.rs` checks both cases).
//!
//! ## What a failure says
//! Every [`LockError::Backend`] names what was being done, on which path, and carries a kind
//! (`lock_core::BackendErrorKind`) and, where the driver failed, `zookeeper-client`'s error as
//! its source (`BackendError::downcast_ref` reaches it). A lost connection, an ended session,
//! no reachable server or a throttled request are `Unavailable`; no answer in time is
//! `Timeout`: both may pass if asked again. An ACL's `NoAuth`, failed authentication and a TLS
//! handshake the servers refuse are `Refused`; an answer the recipe cannot use (a znode in a
//! state it did not leave it in, a quota, an unreadable reply, a GUID znode of another
//! session) is `Protocol`. A request refused during the backoff after a failed attempt at a
//! session has that attempt's kind.
//!
//! ## Fencing token
//! The znode's `czxid` (the zxid of the transaction that created it). Grants follow sequence
//! order, sequence order is creation order, and zxids increase with every transaction of the
//! ensemble, so tokens strictly increase in grant order; unlike the sequence number they keep
//! increasing even if the lock's directory is deleted and recreated.
//!
//! ## Requests per grant
//! A backend reports every request it sends to [`ZkConfig::requests`] (a [`RequestHook`]),
//! named as ZooKeeper's protocol names it: under `znodes`, each `create` (our znode, or a lock
//! directory), `delete`, `getChildren`, `getData` and `exists` (with or without a watch), a
//! request sent again after a lost answer included; under `session`, the `connect` that established each session and the
//! `closeSession` of one given up. Watch events the server sends are not requests. From the
//! protocol above:
//!
//! | what | requests |
//! |---|---|
//! | uncontended lock and release | 4: `create`, `getChildren`, `exists` (the holder's watch on its own znode), `delete` |
//! | the first lock of an id whose directory is missing (under an existing root) | 2 more: the `create` that finds no directory, and the directory's `create` (each missing parent costs two more: one that fails, one that makes it) |
//! | lock after waiting behind one or more holders, and release | 6: `create`, `getChildren`, `exists` (setting the watch on the predecessor), `getChildren` (ours is first now), `exists` (the holder's watch), `delete` |
//! | soft lock on a free lock, and release | 4: `create`, `getChildren`, `exists` (the holder's watch), `delete` |
//! | soft lock refused | 3: `create`, `getChildren`, `delete` |
//!
//! A waiter costs the same however long the queue ahead of it: it watches its predecessor
//! alone, whose deletion comes after every earlier znode's. More requests come from a
//! predecessor that went between the list and the watch (one more `getChildren`), from
//! requests sent again after a lost connection, and from the protected-name search after a
//! lost create. `tests/requests.rs` checks the table's rows on a real server, and that a server
//! of its own received (`mntr`'s `zk_packets_received`) exactly the requests the backends
//! reported, once the sessions' first pings (below) were in.
//!
//! **What the client sends unseen**: `zookeeper-client` keeps the session alive by itself and
//! does not tell its user. It pings once after connecting, and again whenever it has sent
//! nothing for `min(10 s, 3/20 of the session timeout)` (0.9 s for a 6 s session); on
//! reconnecting within a session it sends a new connect request and its watches again. None of
//! these is counted here. The pings are the session's renewal, ZooKeeper's counterpart of a
//! lease keep-alive: a client busy with requests sends none, an idle one (a waiter on a long
//! watch, a long hold) one per 3/20 session timeout.
//!
//! ## Invariants
//! - At most one session holds a lock id: the lowest live sequential child, whichever client
//!   made it.
//! - A waiter watches one znode, its predecessor; a release wakes one waiter.
//! - Grants are first come, first served, by creation order, across clients.
//! - A crashed holder's lock is free one session timeout after the server last heard from it
//!   (rounded up to the server's tick).
//! - Lock directories are never deleted by this crate (deleting one under a waiter would
//!   break the queue); they are empty persistent znodes once no one uses the lock.
//!
//! - A reader-writer lock's writer holds alone and its readers only beside readers, of any
//!   client that names readers `__READ__` or `__rlock__`; asks are granted in sequence order.
//! - A semaphore's leases are created only by the holder of its admission lock, after counting
//!   every child of the semaphore's node: they never number more than N, whichever client
//!   holds them.
//! - An election's leader is its lowest live sequential child, whichever client made it; a
//!   leader's proclamation lands only on its own znode, unrewritten since its last one.
//!
//! ## Conformance verdict
//! The whole shared suite (`lock_core::conformance_suite!`) passes against a real ZooKeeper
//! with a 2 s session timeout, each contender on its own session (`tests/conformance.rs`).
//! "Lease renewal" is ZooKeeper's own session heartbeat; "TTL" is the session timeout.
//! It passes on an ensemble of 3 too, with a connect string of all three servers
//! (`tests/ensemble_conformance.rs`). So do the reader-writer lock's and the semaphore's suites
//! (`lock_core::rwlock_conformance_suite!`, `lock_core::semaphore_conformance_suite!`), on one
//! server and on the ensemble (`tests/rwlock_semaphore_conformance.rs`,
//! `tests/ensemble_rwlock_semaphore_conformance.rs`), and each interoperates with kazoo's
//! recipe on one path (`tests/kazoo_rwlock.rs`, `tests/kazoo_semaphore.rs`). The election's
//! suite (`lock_core::election_conformance_suite!`) passes on one server and on the ensemble
//! (`tests/election_conformance.rs`, `tests/ensemble_election_conformance.rs`), and kazoo's
//! `Election` and ours elect one leader at a time on one path (`tests/kazoo_election.rs`).
//!
//! ## Example
//! ```no_run
//! use lock_core::Locker;
//! use lock_zookeeper::ZkBackend;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! let backend = ZkBackend::connect("127.0.0.1:2181", Duration::from_secs(6)).await?;
//! let locker = backend.locker("worker-1")?;
//! let guard = locker.lock("invoice-42", Some(Duration::from_secs(10))).await?;
//! tokio::select! {
//!     _ = guard.lost() => { /* the session is gone: stop, someone else may hold the lock */ }
//!     _ = async { /* the critical section, passing guard.token() downstream */ } => {}
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod acl;
mod config;
mod election;
mod error;
mod holder;
mod mutex;
mod naming;
mod observe;
mod op;
mod queue;
mod rwlock;
mod semaphore;
mod session;
mod tls;
mod znode;

pub use acl::NodeAcl;
pub use config::ZkConfig;
pub use election::ZkElector;
pub use mutex::ZkLock;
pub use naming::{Guids, NodeNaming, ZkLockOptions};
pub use rwlock::ZkRwLocker;
pub use semaphore::ZkSemaphore;

use lock_core::lock::validate_id;
#[cfg(doc)]
use lock_core::requests::RequestHook;
use lock_core::session::SessionSlot;
use lock_core::{BackendError, BackendErrorKind, LockError};
use naming::ADMISSION_SUFFIX;
use session::{open_session, Session};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// The backend name in [`LockError::Backend`].
pub const BACKEND: &str = "zookeeper";

struct Inner {
    hosts: Arc<str>,
    root: String,
    config: ZkConfig,
    /// The session new requests use; a new one once it is over.
    slot: SessionSlot<Session>,
    /// The kind and source of the last failed attempt at a session, for the requests refused
    /// during the backoff that follows it (the slot keeps its text only).
    last_failure: std::sync::Mutex<Option<(BackendErrorKind, BackendError)>>,
}

impl Inner {
    fn current(&self) -> Arc<Session> {
        self.slot.current()
    }

    /// The session for a new request: the current one while it lives, else a new one (one
    /// attempt at a time; between failed attempts a backoff during which requests fail at
    /// once: [`SessionSlot`]).
    async fn session(&self) -> Result<Arc<Session>, LockError> {
        let refused = |last: &str, wait: Duration| {
            let sentence = format!(
                "no ZooKeeper session at {}: {last} (next attempt at a new session in {wait:?})",
                self.hosts
            );
            match self.last_failure.lock().unwrap_or_else(|e| e.into_inner()).clone() {
                Some((kind, source)) => error::caused(kind, sentence, source),
                None => error::backend_err(BackendErrorKind::Other, sentence),
            }
        };
        let open = || async {
            let opened = open_session(&self.hosts, &self.config).await;
            if let Err(LockError::Backend { kind, source, .. }) = &opened {
                let failure = Some((*kind, source.clone()));
                *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = failure;
            }
            opened
        };
        self.slot.get(open, refused).await
    }
}

/// `zookeeper-client`'s TLS options for `files`, as the backend makes them for
/// [`ZkConfig::tls`] (the CA is required; a file that cannot be used is a
/// [`LockError::Config`] naming it), for a client of the same servers outside the lock. Installs
/// ring as rustls's process default provider if none is (crate docs, "TLS").
pub fn tls_options(files: &lock_core::tls::TlsFiles) -> Result<zk::TlsOptions, LockError> {
    tls::options(files)
}

/// A ZooKeeper backend, from which lockers are made: one session at a time.
///
/// All lockers of one backend share its session: if it expires, every lock they hold is
/// gone at once. Give each contender of a benchmark its own backend when they must fail
/// independently. Once the session is over (expired, or given up by the client after it could
/// not reach a server for 1.4 session timeouts), the next request establishes a new one: the
/// backend need not be connected again. Dropping the last clone of a backend (and every guard
/// and locker made from it) closes the session, which deletes its znodes.
#[derive(Clone)]
pub struct ZkBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("hosts", &self.inner.hosts)
            .field("root", &self.inner.root)
            .field("session_timeout", &self.session_timeout())
            .finish()
    }
}

impl ZkBackend {
    /// Connect to `hosts` (`host:port[,host:port...]`) asking for `session_timeout`, with
    /// the other settings of [`ZkConfig::default`]. An unreachable ensemble fails within the
    /// connect timeout (10 s) with a [`LockError::Backend`] naming the hosts.
    pub async fn connect(hosts: &str, session_timeout: Duration) -> Result<Self, LockError> {
        Self::connect_with(hosts, ZkConfig { session_timeout, ..ZkConfig::default() }).await
    }

    /// Connect to `hosts` with `config`.
    pub async fn connect_with(hosts: &str, config: ZkConfig) -> Result<Self, LockError> {
        let root = config.root.trim_end_matches('/').to_string();
        if !config.root.starts_with('/') || root.is_empty() || root.contains("//") {
            return Err(LockError::Config(format!(
                "ZooKeeper lock root {:?} must be an absolute path other than /",
                config.root
            )));
        }
        if config.session_timeout.is_zero() || config.connect_timeout.is_zero() {
            return Err(LockError::Config(
                "ZooKeeper session and connect timeouts must be positive".into(),
            ));
        }
        let hosts: Arc<str> = hosts.into();
        let session = open_session(&hosts, &config).await?;
        Ok(ZkBackend {
            inner: Arc::new(Inner {
                hosts,
                root,
                config,
                slot: SessionSlot::new(session),
                last_failure: Default::default(),
            }),
        })
    }

    /// A locker for `owner` on this backend's sessions, with the default [`ZkLockOptions`]:
    /// Curator's protected names, their GUIDs from a generator seeded from the operating
    /// system's randomness ([`Guids::from_os`]).
    pub fn locker(&self, owner: &str) -> Result<ZkLock, LockError> {
        self.locker_with(owner, ZkLockOptions::new(Guids::from_os()?))
    }

    /// A locker for `owner` on this backend's sessions, with `options`.
    pub fn locker_with(&self, owner: &str, options: ZkLockOptions) -> Result<ZkLock, LockError> {
        Ok(ZkLock { c: self.contender(owner, options)? })
    }

    /// A reader-writer lock for `owner` on this backend's sessions ([`ZkRwLocker`]), with the
    /// default [`ZkLockOptions`], as [`ZkBackend::locker`].
    pub fn rw_locker(&self, owner: &str) -> Result<ZkRwLocker, LockError> {
        self.rw_locker_with(owner, ZkLockOptions::new(Guids::from_os()?))
    }

    /// A reader-writer lock for `owner` on this backend's sessions, with `options`.
    pub fn rw_locker_with(
        &self,
        owner: &str,
        options: ZkLockOptions,
    ) -> Result<ZkRwLocker, LockError> {
        Ok(ZkRwLocker::new(self.contender(owner, options)?))
    }

    /// A counting semaphore for `owner` on this backend's sessions ([`ZkSemaphore`]), with the
    /// default [`ZkLockOptions`], as [`ZkBackend::locker`].
    pub fn semaphore(&self, owner: &str) -> Result<ZkSemaphore, LockError> {
        self.semaphore_with(owner, ZkLockOptions::new(Guids::from_os()?))
    }

    /// A counting semaphore for `owner` on this backend's sessions, with `options`.
    pub fn semaphore_with(
        &self,
        owner: &str,
        options: ZkLockOptions,
    ) -> Result<ZkSemaphore, LockError> {
        Ok(ZkSemaphore { c: self.contender(owner, options)? })
    }

    /// A leader-election candidate (and observer) for `owner` on this backend's sessions
    /// ([`ZkElector`]), its znodes' GUIDs from a generator seeded from the operating system's
    /// randomness.
    pub fn elector(&self, owner: &str) -> Result<ZkElector, LockError> {
        self.elector_with(owner, Guids::from_os()?)
    }

    /// A leader-election candidate for `owner` on this backend's sessions, its znodes' GUIDs
    /// from `guids`. Its znodes are always in the protected form: the owner id rides in the
    /// name between the GUID and kazoo's `__lock__`, and the GUID's fixed length is what tells
    /// where it starts ([`ZkElector`], "Layout").
    pub fn elector_with(&self, owner: &str, guids: Guids) -> Result<ZkElector, LockError> {
        Ok(ZkElector::new(self.contender(owner, ZkLockOptions::new(guids))?))
    }

    fn contender(&self, owner: &str, options: ZkLockOptions) -> Result<Contender, LockError> {
        validate_id("owner id", owner)?;
        Ok(Contender { inner: self.inner.clone(), owner: owner.to_string(), options })
    }

    /// The session timeout the server granted to the current session.
    pub fn session_timeout(&self) -> Duration {
        self.inner.current().timeout
    }

    /// How many sessions this backend has established: 1 after `connect`, one more for every
    /// session that replaced an expired one.
    pub fn sessions_made(&self) -> u64 {
        self.inner.slot.made()
    }

    /// The connect string.
    pub fn hosts(&self) -> &str {
        &self.inner.hosts
    }

    /// The directory of `lock_id`'s znodes (a mutex's or a reader-writer lock's; a semaphore's
    /// lease znodes, its size in the directory's data).
    pub fn lock_dir(&self, lock_id: &str) -> String {
        format!("{}/{lock_id}", self.inner.root)
    }

    /// The directory of the admission lock of semaphore `semaphore_id` ([`ZkSemaphore`]): a
    /// sibling of its own, `<root>/<semaphore_id>-__lock__`, as kazoo's `Semaphore` names it.
    pub fn admission_dir(&self, semaphore_id: &str) -> String {
        format!("{}{ADMISSION_SUFFIX}", self.lock_dir(semaphore_id))
    }
}

/// What every primitive of one owner shares: the backend's sessions, the owner id, and how its
/// znodes are named.
#[derive(Clone)]
pub(crate) struct Contender {
    inner: Arc<Inner>,
    owner: String,
    options: ZkLockOptions,
}

impl Contender {
    /// The directory of `id`'s znodes.
    fn dir(&self, id: &str) -> String {
        format!("{}/{id}", self.inner.root)
    }

    /// The session for a new request.
    async fn session(&self) -> Result<Arc<Session>, LockError> {
        self.inner.session().await
    }
}
