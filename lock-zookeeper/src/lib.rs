//! # lock-zookeeper
//!
//! The ZooKeeper lock recipe of seed 004 (SPEC 3.7) against a real ZooKeeper server, through
//! the `zookeeper-client` crate.
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
//! lock (not in the seed) first lists the children and returns "not held" at once if there
//! are any; if there are none it runs steps 2–3 once and, not being first, deletes its znode
//! and returns "not held".
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
//! request). `tests/security.rs` measures it.
//!
//! ### What the holder's watch costs
//! One request per grant (4 instead of 3 uncontended, 6 instead of 5 after waiting: "Requests
//! per grant" below) and no measurable handoff time: three alternating pairs of harness runs
//! on one server it started, 64 contenders, 10 s each, gave a median handoff gap of 0.71, 0.70
//! and 0.64 ms with the watch and 0.63, 0.65 and 0.69 ms with
//! [`ZkConfig::watch_holder`] off (`--zookeeper-no-holder-watch`), the third pair reversed;
//! store requests per grant 6.3 to 6.4 against 5.3 to 5.4; grants/s within 1.5%. (The 1.02 ms
//! of one results/engines run after the watch came in was that run's spread, not the watch.)
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
//! server and why (`tests/tls.rs` measures each in well under a second):
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
//! - After an outage **longer** than 1.4 session timeouts the client has given the session up,
//!   but the restarted server has restored it: its znodes, the old holder's lock included, stay
//!   until the server expires it one session timeout after the restart. New sessions wait that
//!   long for the lock. Measured with four contenders and a 0.5 s downtime (0.8 s with the JVM's
//!   start), grants resumed about 0.9 s after the server answered again, on the old sessions;
//!   after a long outage with a 2 s session, a new session was granted the lock 2.1 s after.
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
//! | soft lock on a free lock, and release | 5: `getChildren` (empty), `create`, `getChildren`, `exists` (the holder's watch), `delete` |
//! | soft lock refused | 1: `getChildren` |
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
//! ## Conformance verdict
//! The whole shared suite (`lock_core::conformance_suite!`) passes against a real ZooKeeper
//! with a 2 s session timeout, each contender on its own session (`tests/conformance.rs`).
//! "Lease renewal" is ZooKeeper's own session heartbeat; "TTL" is the session timeout.
//! It passes on an ensemble of 3 too, with a connect string of all three servers
//! (`tests/ensemble_conformance.rs`).
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

use async_trait::async_trait;
use lock_core::lock::{validate_id, LeaseLost, LeaseState, Release};
use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use lock_core::session::SessionSlot;
use lock_core::{BackendErrorKind, LockError, LockGuard, Locker};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

mod tls;

/// The backend name in [`LockError::Backend`].
pub const BACKEND: &str = "zookeeper";

/// The name our lock znodes end in before the sequence number the server appends: the lock name
/// of Curator's `InterProcessMutex` and of the seed's recipe.
const NODE_NAME: &str = "lock-";

/// The start of a name made in Curator's protected form, `_c_<uuid>-`.
const PROTECTED_PREFIX: &str = "_c_";

/// The fewest digits of the sequence number ZooKeeper appends (`%010d` of the directory's
/// child counter).
const SEQUENCE_DIGITS: usize = 10;

/// How many creates of one request may lose their answer before the request gives up: each one
/// is followed by a search for its znode by GUID, so only a connection that breaks again and
/// again gets this far.
const PROTECTED_ATTEMPTS: u32 = 3;

fn backend_err(message: impl Display) -> LockError {
    LockError::backend(BACKEND, BackendErrorKind::Other, message.to_string())
}

/// How [`ZkBackend::connect_with`] connects.
#[derive(Debug, Clone)]
pub struct ZkConfig {
    /// The session timeout asked of the server (default 6 s; the server clamps it to its
    /// `minSessionTimeout`..`maxSessionTimeout`). A crashed holder's lock is free this long
    /// after the server last heard from it.
    pub session_timeout: Duration,
    /// Longest wait for the session to be established (default 10 s).
    pub connect_timeout: Duration,
    /// Parent of the lock directories (default `/locks`).
    pub root: String,
    /// Where each request the backend sends is reported (default: nowhere). The crate docs
    /// ("Requests per grant") say what one grant costs, and what the client sends unseen.
    pub requests: RequestHook,
    /// Digest credentials every session authenticates with (`addauth digest user:password`;
    /// default none). ZooKeeper accepts any digest pair: what it decides is which znodes the
    /// session may touch, by their ACLs (crate docs, "Credentials and ACLs").
    pub credentials: Option<Credentials>,
    /// The ACL of every znode the lock creates. Default (`None`): [`NodeAcl::Creator`] with
    /// credentials, [`NodeAcl::Open`] without.
    pub acl: Option<NodeAcl>,
    /// TLS to the servers' `secureClientPort` (default `None`, plain text): the CA to trust
    /// (required: the client trusts no system roots) and, for servers with
    /// `ssl.clientAuth=need`, the client's certificate and key. Every server of the connect
    /// string is then dialled over TLS, and its certificate must name the host dialled (crate
    /// docs, "TLS").
    pub tls: Option<lock_core::tls::TlsFiles>,
    /// Whether each holder watches its own znode (default `true`): one `exists` per grant,
    /// and the holder is told `Lost` as soon as another client deletes or rewrites its znode
    /// (crate docs, "A holder told"). Off, a grant costs a request less and such a holder is
    /// told nothing while its session lasts, as with Curator's and kazoo's recipes: for a
    /// user whose ACLs leave no one else able to touch the znodes, and for measuring what the
    /// watch costs (crate docs, "What the holder's watch costs").
    pub watch_holder: bool,
}

impl Default for ZkConfig {
    fn default() -> Self {
        ZkConfig {
            session_timeout: Duration::from_secs(6),
            connect_timeout: Duration::from_secs(10),
            root: "/locks".into(),
            requests: RequestHook::none(),
            credentials: None,
            acl: None,
            tls: None,
            watch_holder: true,
        }
    }
}

/// Who may do what to the znodes a lock creates: its directory and every contender's znode in
/// it (and the root, if the lock makes it). ZooKeeper checks a `delete` against the ACL of the
/// znode's *parent*, so the directory's ACL is what keeps a stranger from deleting a holder's
/// znode; the znode's own ACL keeps it from rewriting the znode's data.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeAcl {
    /// Anyone may do anything (`world:anyone`, ZooKeeper's `OPEN_ACL_UNSAFE`): what every lock
    /// client creates unless told otherwise, and what lets any client of the ensemble delete a
    /// holder's znode and so hand its lock to the next waiter.
    Open,
    /// Only the identities the creating session authenticated as (`auth` scheme,
    /// `CREATOR_ALL_ACL`): every contender must connect with the same credentials.
    Creator,
    /// The ACL the caller gives (for example read for anyone, all for the creator).
    Given(Vec<zk::Acl>),
}

impl NodeAcl {
    fn acls(&self) -> zk::Acls<'_> {
        match self {
            NodeAcl::Open => zk::Acls::anyone_all(),
            NodeAcl::Creator => zk::Acls::creator_all(),
            NodeAcl::Given(list) => zk::Acls::from(list.as_slice()),
        }
    }
}

/// The ACL `config` asks for, checked against its credentials.
fn node_acl(config: &ZkConfig) -> Result<NodeAcl, LockError> {
    if let Some(c) = &config.credentials {
        if c.user.is_empty() || c.user.contains(':') {
            return Err(LockError::Config(format!(
                "ZooKeeper digest user {:?} must be non-empty and contain no ':'",
                c.user
            )));
        }
    }
    match (&config.acl, &config.credentials) {
        (Some(NodeAcl::Creator), None) => Err(LockError::Config(
            "the ZooKeeper Creator ACL needs credentials: an unauthenticated session has no \
             identity to give the znodes it creates"
                .into(),
        )),
        (Some(acl), _) => Ok(acl.clone()),
        (None, Some(_)) => Ok(NodeAcl::Creator),
        (None, None) => Ok(NodeAcl::Open),
    }
}

/// How a [`ZkLock`] names the znodes it creates. Either way it recognises every contender's
/// znode, whichever client made it, by the sequence number the name ends in (crate docs, "Other
/// clients on the same path").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeNaming {
    /// Curator's protected form, `_c_<uuid>-lock-<sequence>` (the default): what Curator's
    /// `InterProcessMutex` creates, so that a create whose answer was lost is found again by its
    /// GUID instead of being made twice. kazoo recognises it when told
    /// `extra_lock_patterns=["lock-"]`.
    #[default]
    Protected,
    /// The seed's form, `lock-<sequence>`, for a path shared with users of the seed's recipe
    /// (or earlier versions of this crate) that only recognise that form. A create whose answer
    /// was lost then fails, and the znode it may have made is deleted in the background.
    Plain,
}

/// Where the GUIDs of protected names come from: a generator with a seed, so that a run can be
/// repeated (a test's names are then the same every time). [`Guids::from_os`] seeds it from the
/// operating system's randomness, which is what [`ZkBackend::locker`] does.
///
/// Clones share one generator, so lockers given clones never make the same GUID. Two
/// generators given the same seed make the same GUIDs: lockers of one backend must not have
/// such twins, since after a lost answer a request could take its twin's znode for its own
/// (share a clone instead). Lockers of different backends may: a znode of another session is
/// never taken.
#[derive(Clone)]
pub struct Guids(Arc<std::sync::Mutex<StdRng>>);

impl Guids {
    /// A generator seeded with `seed`.
    pub fn seeded(seed: u64) -> Guids {
        Guids(Arc::new(std::sync::Mutex::new(StdRng::seed_from_u64(seed))))
    }

    /// A generator seeded from the operating system's randomness; fails only if the operating
    /// system has none to give.
    pub fn from_os() -> Result<Guids, LockError> {
        let rng = StdRng::try_from_rng(&mut rand::rngs::SysRng).map_err(|e| {
            LockError::Config(format!(
                "no randomness from the operating system to seed the GUIDs of protected znode \
                 names ({e}): give a seed with Guids::seeded"
            ))
        })?;
        Ok(Guids(Arc::new(std::sync::Mutex::new(rng))))
    }

    /// The next GUID: a random (version 4) UUID, the kind Curator makes.
    fn next(&self) -> uuid::Uuid {
        let mut bytes = [0u8; 16];
        self.0.lock().unwrap_or_else(|e| e.into_inner()).fill_bytes(&mut bytes);
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    /// The start of a protected name with the next GUID: `_c_<uuid>-`, as Curator's
    /// `ProtectedUtils` writes it.
    fn protected_tag(&self) -> String {
        format!("{PROTECTED_PREFIX}{}-", self.next())
    }
}

impl std::fmt::Debug for Guids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guids(..)")
    }
}

/// Settings of one locker ([`ZkBackend::locker_with`]).
#[derive(Debug, Clone)]
pub struct ZkLockOptions {
    /// How the locker names its znodes (default [`NodeNaming::Protected`]).
    pub naming: NodeNaming,
    /// Where the GUIDs of protected names come from.
    pub guids: Guids,
}

impl ZkLockOptions {
    /// Protected names, their GUIDs from `guids`.
    pub fn new(guids: Guids) -> ZkLockOptions {
        ZkLockOptions { naming: NodeNaming::default(), guids }
    }

    /// These options with `naming`.
    pub fn with_naming(self, naming: NodeNaming) -> ZkLockOptions {
        ZkLockOptions { naming, ..self }
    }
}

/// The requests this crate sends through a session, each with its name in ZooKeeper's protocol
/// and what it does for the lock (for error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `create` of our ephemeral sequential znode.
    Create,
    /// `create` of a lock directory or one of its parents (step 1).
    Mkdir,
    /// `delete` of our znode.
    Delete,
    /// `getChildren` of a lock directory.
    List,
    /// `getData` of a znode (its stat: whose session made it).
    Read,
    /// `exists` of a znode, without a watch.
    Stat,
    /// `exists` of the predecessor, setting a watch on it.
    Watch,
    /// `exists` of the holder's own znode, setting a watch on it: how a holder learns that
    /// someone else deleted or rewrote it.
    Guard,
}

impl Op {
    /// Its name in ZooKeeper's protocol, as the request's command.
    fn request(self) -> &'static str {
        match self {
            Op::Create | Op::Mkdir => "create",
            Op::Delete => "delete",
            Op::List => "getChildren",
            Op::Read => "getData",
            Op::Stat | Op::Watch | Op::Guard => "exists",
        }
    }

    /// What it does, for error messages.
    fn what(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Delete => "delete",
            Op::List => "list",
            Op::Read => "read",
            Op::Stat => "stat",
            Op::Watch => "watch",
            Op::Guard => "watch own znode",
        }
    }
}

/// The target of the requests on znodes.
const ZNODES: &str = "znodes";
/// The target of the requests that open and close sessions.
const SESSIONS: &str = "session";

/// One ZooKeeper session: its client and what the server granted.
struct Session {
    client: zk::Client,
    /// The session timeout the server granted.
    timeout: Duration,
    hosts: Arc<str>,
    /// The znodes this session created and has not deleted yet, as far as the backend knows:
    /// what an orphan sweep ([`sweep_orphans`]) must leave alone.
    known: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Where each request is reported.
    requests: RequestHook,
    /// The ACL of the znodes it creates.
    acl: Arc<NodeAcl>,
    /// Whom it authenticated as, for refusals (`digest user 'u'`, or `no credentials`).
    identity: Arc<str>,
    /// Whether holders watch their own znodes ([`ZkConfig::watch_holder`]).
    watch_holder: bool,
}

impl Session {
    fn err(&self, what: &str, path: &str, e: impl Display) -> LockError {
        backend_err(format!("{what} {path} on ZooKeeper at {}: {e}", self.hosts))
    }

    /// The error of a request that failed with `e`: a refusal by an ACL says whose it was,
    /// since that is what the user must change.
    fn refused(&self, what: &str, path: &str, e: zk::Error) -> LockError {
        if e == zk::Error::NoAuth {
            return self.err(
                what,
                path,
                format!(
                    "not authorised (NoAuth): the ACL of {} does not allow this to {}",
                    if matches!(what, "create" | "mkdir" | "delete") { "its parent" } else { "it" },
                    self.identity
                ),
            );
        }
        self.err(what, path, e)
    }

    /// Run one request, `op` on `path`, which the client sent as `fut` was made: report it to
    /// the backend's hook (every request on a znode passes here), and bound it by the session
    /// timeout: while disconnected the client holds requests until it reconnects or the
    /// session expires, and a caller must not hang that long unannounced.
    async fn op<T>(
        &self,
        op: Op,
        path: &str,
        fut: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<Result<T, zk::Error>, LockError> {
        self.requests.sent(ZNODES, op.request());
        tokio::time::timeout(self.timeout, fut).await.map_err(|_| {
            let why = format!("no answer within the session timeout {:?}", self.timeout);
            self.err(op.what(), path, why)
        })
    }

    /// [`Session::op`] for a read that can be repeated (a list, a watch): one whose answer was
    /// lost with the connection is sent again once the client has reconnected within the
    /// session, so that a waiter keeps its place across a short outage even with a request on
    /// its way. A session that ends meanwhile answers `SessionExpired`.
    async fn read<T, F, Fut>(
        &self,
        op: Op,
        path: &str,
        request: F,
    ) -> Result<Result<T, zk::Error>, LockError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, zk::Error>>,
    {
        loop {
            match self.op(op, path, request()).await? {
                Err(zk::Error::ConnectionLoss) => {
                    if !connected(self).await {
                        return Ok(Err(zk::Error::SessionExpired));
                    }
                }
                other => return Ok(other),
            }
        }
    }

    /// Whether the session can never be used again (expired, closed, or refused).
    fn is_over(&self) -> bool {
        self.client.state().is_terminated()
    }
}

impl lock_core::session::Ending for Session {
    fn is_over(&self) -> bool {
        Session::is_over(self)
    }
}

impl Drop for Session {
    /// The last user of the session is gone: the client, dropped with it, closes the session
    /// (a `closeSession` request), which deletes its znodes at once.
    fn drop(&mut self) {
        if !self.is_over() {
            self.requests.sent(SESSIONS, "closeSession");
        }
    }
}

/// The pause before a failed delete or list is tried again while connected.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

struct Inner {
    hosts: Arc<str>,
    root: String,
    config: ZkConfig,
    /// The session new requests use; a new one once it is over.
    slot: SessionSlot<Session>,
}

/// Establish a session with `hosts`, or say why not within the connect timeout.
async fn open_session(hosts: &Arc<str>, config: &ZkConfig) -> Result<Session, LockError> {
    let acl = Arc::new(node_acl(config)?);
    let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
    let identity: Arc<str> = match &config.credentials {
        Some(c) => {
            let pair = format!("{}:{}", c.user, c.password.expose());
            connector = connector.with_auth("digest", pair.as_bytes());
            format!("digest user '{}'", c.user).into()
        }
        None => "an unauthenticated session".into(),
    };
    let secure = match &config.tls {
        Some(files) => {
            connector = connector.with_tls(tls::options(files)?);
            true
        }
        None => false,
    };
    let connect = async move {
        match secure {
            true => connector.secure_connect(hosts).await,
            false => connector.connect(hosts).await,
        }
    };
    let connect = tokio::time::timeout(config.connect_timeout, connect);
    // A connect that has no session soon: do the servers refuse this client's TLS, or its
    // plain text (crate docs, "TLS")?
    let attempt = tokio::select! {
        attempt = connect => attempt,
        refusal = tls::refusal(hosts, config.tls.as_ref()) => return Err(backend_err(refusal)),
    };
    let client = match attempt {
        Ok(Ok(c)) => c,
        Ok(Err(zk::Error::Timeout)) => {
            return Err(backend_err(format!(
                "cannot connect to ZooKeeper at {hosts}: no session established within the session timeout {:?}",
                config.session_timeout
            )))
        }
        Ok(Err(e)) => return Err(backend_err(format!("cannot connect to ZooKeeper at {hosts}: {e}"))),
        Err(_) => {
            return Err(backend_err(format!(
                "cannot connect to ZooKeeper at {hosts}: no session within {:?}",
                config.connect_timeout
            )))
        }
    };
    // The client's connect request, counted once the session is established: attempts that
    // reach no server send none.
    config.requests.sent(SESSIONS, "connect");
    let timeout = client.session_timeout();
    let requests = config.requests.clone();
    Ok(Session {
        client,
        timeout,
        hosts: hosts.clone(),
        known: Default::default(),
        requests,
        acl,
        identity,
        watch_holder: config.watch_holder,
    })
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
            backend_err(format!(
                "no ZooKeeper session at {}: {last} (next attempt at a new session in {wait:?})",
                self.hosts
            ))
        };
        self.slot.get(|| open_session(&self.hosts, &self.config), refused).await
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
            inner: Arc::new(Inner { hosts, root, config, slot: SessionSlot::new(session) }),
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
        validate_id("owner id", owner)?;
        Ok(ZkLock { inner: self.inner.clone(), owner: owner.to_string(), options })
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

    /// The directory of `lock_id`'s znodes.
    pub fn lock_dir(&self, lock_id: &str) -> String {
        format!("{}/{lock_id}", self.inner.root)
    }
}

/// The ZooKeeper lock recipe for one owner. See the crate docs for the protocol.
pub struct ZkLock {
    inner: Arc<Inner>,
    owner: String,
    options: ZkLockOptions,
}

impl std::fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkLock")
            .field("owner", &self.owner)
            .field("hosts", &self.inner.hosts)
            .field("naming", &self.options.naming)
            .finish()
    }
}

/// The sequence number ZooKeeper appended to a child's name: the trailing run of at least
/// [`SEQUENCE_DIGITS`] ASCII digits, whatever the client that made it put before it (`lock-`,
/// Curator's `_c_<uuid>-lock-`, kazoo's `<uuid>__lock__`). `None` for a name that does not end
/// in one, which no sequential create makes.
fn sequence_of(name: &str) -> Option<i64> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits < SEQUENCE_DIGITS {
        return None;
    }
    name[name.len() - digits..].parse().ok()
}

/// The last component of a znode's path.
fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Our znode while we wait for the lock. If the waiting future is dropped (cancelled by a
/// caller's timeout, say) the znode is deleted in the background: left behind it would block
/// the lock for as long as the session lives.
struct Pending {
    session: Arc<Session>,
    path: String,
    armed: bool,
}

impl Pending {
    async fn delete(mut self) -> Result<(), LockError> {
        self.armed = false;
        delete_node(&self.session, &self.path).await
    }
    fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let (session, path) = (self.session.clone(), std::mem::take(&mut self.path));
                handle.spawn(delete_until_done(session, path));
            }
        }
    }
}

/// Delete our znode. Gone already is success: the session ended (expired or closed), which
/// removed it for us, or someone removed it by hand.
async fn delete_node(session: &Session, path: &str) -> Result<(), LockError> {
    match session.op(Op::Delete, path, session.client.delete(path, None)).await? {
        Ok(()) | Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => {
            session.known.lock().unwrap().remove(path);
            Ok(())
        }
        Err(e) => Err(session.refused("delete", path, e)),
    }
}

/// Step 1: `dir` and its missing parents, as `mkdir -p` (persistent, with the session's ACL). The
/// client's own `mkdir` sends its creates out of this crate's sight; these go through
/// [`Session::op`], one request each: `dir` first; if its parent is missing, the nearest
/// ancestor that can be made, then each level below it.
async fn make_dirs(session: &Session, dir: &str) -> Result<(), LockError> {
    let persistent = zk::CreateMode::Persistent.with_acls(session.acl.acls());
    let mut end = dir.len();
    loop {
        let path = &dir[..end];
        let made = session.op(Op::Mkdir, path, session.client.create(path, &[], &persistent));
        match made.await? {
            Ok(_) | Err(zk::Error::NodeExists) if end == dir.len() => return Ok(()),
            Ok(_) | Err(zk::Error::NodeExists) => {
                end = dir[end + 1..].find('/').map_or(dir.len(), |i| end + 1 + i);
            }
            Err(zk::Error::NoNode) if path.rfind('/').is_some_and(|i| i > 0) => {
                end = path.rfind('/').unwrap_or(0);
            }
            Err(e) => return Err(session.refused("mkdir", path, e)),
        }
    }
}

/// Wait until `session` is connected; false if it ended instead.
async fn connected(session: &Session) -> bool {
    let mut states = session.client.state_watcher();
    let mut state = states.peek_state();
    while state != zk::SessionState::SyncConnected {
        if state.is_terminated() {
            return false;
        }
        state = states.changed().await;
    }
    true
}

/// Delete the znodes of `session` in `dir` whose names start with `prefix` and that no waiter
/// or holder of this backend knows: a create whose answer was lost (the connection broke, or
/// the answer came too late) may still have made its znode, and that orphan, in a session that
/// lives on, would block the lock for good. With a protected create's `_c_<uuid>-` as `prefix`
/// only that request's znodes are candidates. With the plain `lock-`, every plain znode of the
/// session is, and a concurrent plain create of the same backend whose answer is still on its
/// way can be swept too. `settle` is how long the lost request may still be on its way.
async fn sweep_orphans(session: Arc<Session>, dir: String, settle: Duration, prefix: String) {
    tokio::time::sleep(settle).await;
    loop {
        if !connected(&session).await {
            return; // The session ended: its znodes are gone.
        }
        let ours = session.client.session_id().0;
        let Ok(Ok(children)) = session.op(Op::List, &dir, session.client.list_children(&dir)).await
        else {
            tokio::time::sleep(RETRY_PAUSE).await;
            continue;
        };
        for name in children {
            if !name.starts_with(&prefix) {
                continue;
            }
            let path = format!("{dir}/{name}");
            if session.known.lock().unwrap().contains(&path) {
                continue;
            }
            if let Ok(Ok((_, stat))) =
                session.op(Op::Read, &path, session.client.get_data(&path)).await
            {
                if stat.ephemeral_owner == ours && !session.known.lock().unwrap().contains(&path) {
                    delete_until_done(session.clone(), path).await;
                }
            }
        }
        return;
    }
}

/// [`delete_node`] until it succeeds or the session is over (which deletes the znode for us):
/// a znode whose delete failed in an outage would otherwise block the lock for as long as the
/// session lives, and a session that survives the outage lives on.
async fn delete_until_done(session: Arc<Session>, path: String) {
    while delete_node(&session, &path).await.is_err() {
        // Retry once connected again; a session that ends on the way took the znode with it.
        // The pause keeps a failure while connected (a slow server) from spinning.
        tokio::time::sleep(RETRY_PAUSE).await;
        if !connected(&session).await {
            return;
        }
    }
}

impl ZkLock {
    /// How this locker names its znodes.
    pub fn naming(&self) -> NodeNaming {
        self.options.naming
    }

    fn dir(&self, lock_id: &str) -> String {
        format!("{}/{lock_id}", self.inner.root)
    }

    /// Our znode, created: one the backend knows (the orphan sweep leaves it alone), and one
    /// that is deleted if the request is dropped before it is granted.
    fn adopt(&self, session: &Arc<Session>, path: String) -> Pending {
        session.known.lock().unwrap().insert(path.clone());
        Pending { session: session.clone(), path, armed: true }
    }

    /// Step 2 (and 1 when the directory is missing): our ephemeral sequential znode, and its
    /// stat (the fencing token is its `czxid`).
    async fn create_node(
        &self,
        session: &Arc<Session>,
        dir: &str,
    ) -> Result<(Pending, zk::Stat), LockError> {
        let NodeNaming::Protected = self.options.naming else {
            return self.create_plain(session, dir).await;
        };
        // A GUID per request, not per locker: two requests of one locker on one lock (from two
        // tasks) must not take each other's znode for their own.
        let tag = self.options.guids.protected_tag();
        let (result, lost) = self.create_protected(session, dir, &tag).await;
        if lost > 0 {
            // The search sees every create that reached the server before the connection
            // broke, as Curator's does; on an ensemble a create that reached only the old
            // server could still commit after it, and one without an answer in time may still
            // be on its way. Once such a create must have landed, delete any znode with this
            // request's GUID other than the one we hold (known, so left alone).
            tokio::spawn(sweep_orphans(session.clone(), dir.into(), session.timeout, tag));
        }
        result
    }

    /// [`ZkLock::create_node`] in the plain form. A create whose answer is lost may or may not
    /// have made its znode, and nothing in its name tells it from another request's: the
    /// request fails, and a sweep deletes the znode once connected again if it was made (and
    /// any other plain znode of the session no request knows; protected ones are left alone).
    async fn create_plain(
        &self,
        session: &Arc<Session>,
        dir: &str,
    ) -> Result<(Pending, zk::Stat), LockError> {
        let prefix = format!("{dir}/{NODE_NAME}");
        let sweep = |settle| {
            tokio::spawn(sweep_orphans(session.clone(), dir.into(), settle, NODE_NAME.into()))
        };
        match self.create_in(session, dir, &prefix).await {
            Ok(Ok((stat, seq))) => Ok((self.adopt(session, format!("{prefix}{seq}")), stat)),
            Ok(Err(e)) => {
                if matches!(e, zk::Error::ConnectionLoss) {
                    sweep(Duration::ZERO);
                }
                Err(session.refused("create", &prefix, e))
            }
            Err(e) => {
                // No answer in time: the create may still land; sweep once it must have.
                sweep(session.timeout);
                Err(e)
            }
        }
    }

    /// [`ZkLock::create_node`] in Curator's protected form, `tag` being `_c_<uuid>-`: after a
    /// create whose answer was lost with the connection, look for our GUID among the children
    /// once connected again and take the znode if it is there, else create again with the same
    /// GUID (Curator's protection mode), at most [`PROTECTED_ATTEMPTS`] times. Also returns how
    /// many creates lost their answer.
    async fn create_protected(
        &self,
        session: &Arc<Session>,
        dir: &str,
        tag: &str,
    ) -> (Result<(Pending, zk::Stat), LockError>, u32) {
        let prefix = format!("{dir}/{tag}{NODE_NAME}");
        let mut lost = 0;
        loop {
            match self.create_in(session, dir, &prefix).await {
                Ok(Ok((stat, seq))) => {
                    return (Ok((self.adopt(session, format!("{prefix}{seq}")), stat)), lost)
                }
                Ok(Err(zk::Error::ConnectionLoss)) => lost += 1,
                Ok(Err(e)) => return (Err(session.refused("create", &prefix, e)), lost),
                // No answer within the session timeout: a connection that slow is not worth
                // another try, and the create may still land (the caller sweeps).
                Err(e) => return (Err(e), lost + 1),
            }
            match self.find_protected(session, dir, tag).await {
                Ok(Some((name, stat))) => {
                    return (Ok((self.adopt(session, format!("{dir}/{name}")), stat)), lost)
                }
                Ok(None) if lost < PROTECTED_ATTEMPTS => {}
                Ok(None) => {
                    let why = format!("the connection broke under {lost} creates in a row");
                    return (Err(session.err("create", &prefix, why)), lost);
                }
                Err(e) => return (Err(e), lost),
            }
        }
    }

    /// One ephemeral sequential create of `prefix` (data: the owner id), making the lock's
    /// directory first if it is missing (step 1): directories are made on first use only, so
    /// that a lock costs nothing until it is used.
    async fn create_in(
        &self,
        session: &Session,
        dir: &str,
        prefix: &str,
    ) -> Result<Result<(zk::Stat, zk::CreateSequence), zk::Error>, LockError> {
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(session.acl.acls());
        let create = || {
            let request = session.client.create(prefix, self.owner.as_bytes(), &ephemeral);
            session.op(Op::Create, prefix, request)
        };
        match create().await? {
            Err(zk::Error::NoNode) => {
                make_dirs(session, dir).await?;
                create().await
            }
            other => Ok(other),
        }
    }

    /// After a create whose answer was lost: the znode it made, found by the request's GUID
    /// (`tag`, `_c_<uuid>-`), with its stat; `None` if the server never made it. The list is
    /// sent once the client has reconnected within the session ([`Session::read`]).
    async fn find_protected(
        &self,
        session: &Session,
        dir: &str,
        tag: &str,
    ) -> Result<Option<(String, zk::Stat)>, LockError> {
        let children =
            match session.read(Op::List, dir, || session.client.list_children(dir)).await? {
                Ok(c) => c,
                Err(zk::Error::NoNode) => return Ok(None),
                Err(e) => return Err(session.refused("list", dir, e)),
            };
        // A znode another request of this backend holds is not ours, even with our GUID (lockers
        // given the same seed make the same GUIDs): a cheap guard, not a full one (see Guids).
        let known =
            |name: &String| session.known.lock().unwrap().contains(&format!("{dir}/{name}"));
        let Some(name) = children.into_iter().find(|c| c.starts_with(tag) && !known(c)) else {
            return Ok(None);
        };
        let path = format!("{dir}/{name}");
        match session.read(Op::Stat, &path, || session.client.check_stat(&path)).await? {
            // Every request of ours runs on one session, so the znode is of this one; checked
            // all the same, as Curator does, since a znode of another session is not our place.
            Ok(Some(stat)) if stat.ephemeral_owner == session.client.session_id().0 => {
                Ok(Some((name, stat)))
            }
            Ok(Some(_)) => Err(session.err(
                "create",
                &path,
                "the znode with this request's GUID belongs to another session",
            )),
            // Deleted since the list (by hand): not there, so create again.
            Ok(None) => Ok(None),
            Err(e) => Err(session.err("stat", &path, e)),
        }
    }

    /// Step 3: every contender's znode in the lock's directory, whichever client made it, by
    /// ascending sequence number (children whose names end in no sequence number are no
    /// contenders). Sequence numbers are unique in a directory; the name only breaks the tie
    /// that never happens, so that the order is total.
    async fn queue(&self, session: &Session, dir: &str) -> Result<Vec<(i64, String)>, LockError> {
        let children =
            match session.read(Op::List, dir, || session.client.list_children(dir)).await? {
                Ok(c) => c,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(session.refused("list", dir, e)),
            };
        let mut queue: Vec<(i64, String)> =
            children.into_iter().filter_map(|name| sequence_of(&name).map(|s| (s, name))).collect();
        queue.sort();
        Ok(queue)
    }

    /// The lock is ours: a guard that follows both the session ([`lost_reason`]) and our own
    /// znode ([`watch_own_node`]), and publishes `Lost` at the first sign of either.
    fn grant(&self, lock_id: &str, pending: Pending, stat: &zk::Stat) -> LockGuard {
        let session = pending.session.clone();
        let (tx, rx) = watch::channel(LeaseState::Held);
        let tx = Arc::new(tx);
        let states = session.client.state_watcher();
        let own: OwnNode = if session.watch_holder {
            watch_own_node(&session, &pending.path)
        } else {
            Box::pin(std::future::pending())
        };
        tokio::spawn(follow(states, own, tx.clone(), session.hosts.clone()));
        let path = pending.path.clone();
        pending.keep();
        let release = ZkRelease { session, path, state: tx };
        LockGuard::new(lock_id, &self.owner, stat.czxid as u64, rx, Box::new(release))
    }
}

/// Watch the session's state and our own znode until either says the lock is no longer ours;
/// then publish `Lost` with why (once: a guard already released stays released).
async fn follow(
    mut states: zk::StateWatcher,
    own: OwnNode,
    tx: Arc<watch::Sender<LeaseState>>,
    hosts: Arc<str>,
) {
    // Checked after subscribing, so a change in between is not missed.
    let mut state = states.peek_state();
    let session_ends = async {
        loop {
            if let Some(reason) = lost_reason(state, &hosts) {
                return reason;
            }
            state = states.changed().await;
        }
    };
    let reason = tokio::select! {
        reason = session_ends => reason,
        reason = own => reason,
    };
    tx.send_if_modified(|s| {
        if *s == LeaseState::Held {
            *s = LeaseState::Lost(LeaseLost { reason });
            true
        } else {
            false
        }
    });
}

/// What ends a holder's znode while it holds, as the reason its guard is told.
type OwnNode = Pin<Box<dyn Future<Output = String> + Send>>;

/// Set a watch on the holder's own znode (`exists` with a watch), and return what it reports:
/// a future that ends with a reason when the znode is deleted or rewritten by anyone but this
/// guard's release (which stops the guard's monitor before it deletes), and never otherwise.
///
/// Whatever the ACLs, this is how a holder learns that another client deleted its znode, which
/// hands the lock to the next waiter: without it the session stays healthy and nothing tells
/// the holder (issue 25's measurement: still `Held` 2 s later). A session that ends fires the
/// watch too, but the session's state says that first and better; a failed `exists` (the
/// connection broke) is left to the state too, since a disconnection already makes the guard
/// `Lost`.
///
/// The request leaves before the guard is returned (the future is polled once here), so the
/// grant waits for no extra round trip and every grant sends exactly one `exists`, counted as
/// `Op::Guard`.
fn watch_own_node(session: &Arc<Session>, path: &str) -> OwnNode {
    session.requests.sent(ZNODES, Op::Guard.request());
    let (session, path) = (session.clone(), path.to_string());
    let mut own: OwnNode = Box::pin(async move {
        let watcher = match session.client.check_and_watch_stat(&path).await {
            Ok((Some(_), watcher)) => watcher,
            Ok((None, _)) => {
                return format!(
                    "its znode {path} was gone when the holder set its watch: another client \
                     deleted it, and the next waiter may hold the lock now"
                )
            }
            Err(_) => return std::future::pending().await,
        };
        match watcher.changed().await.event_type {
            zk::EventType::NodeDeleted => format!(
                "its znode {path} was deleted by another client while held (not by this guard's \
                 release): the next waiter may hold the lock now"
            ),
            zk::EventType::NodeDataChanged => format!(
                "its znode {path} was rewritten by another client while held: the lock can no \
                 longer be trusted to be this holder's alone"
            ),
            _ => std::future::pending().await,
        }
    });
    // The first poll sends the request (the client queues it synchronously) and parks on its
    // answer; the monitor task polls it from then on, with its own waker.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match own.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(reason) => Box::pin(std::future::ready(reason)),
        std::task::Poll::Pending => own,
    }
}

fn lost_reason(state: zk::SessionState, hosts: &str) -> Option<String> {
    use zk::SessionState::*;
    match state {
        SyncConnected | ConnectedReadOnly => None,
        Disconnected => Some(format!(
            "disconnected from ZooKeeper at {hosts}: the server may expire the session, and delete the lock's znode, at any moment"
        )),
        Expired => Some("ZooKeeper session expired: its ephemeral znode, and with it the lock, is gone".into()),
        Closed => Some("ZooKeeper session closed: its ephemeral znode, and with it the lock, is gone".into()),
        AuthFailed => Some("ZooKeeper authentication failed: the session is unusable".into()),
    }
}

struct ZkRelease {
    session: Arc<Session>,
    path: String,
    state: Arc<watch::Sender<LeaseState>>,
}

#[async_trait]
impl Release for ZkRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        // Released first, so that the monitor, which sees our own delete fire the watch on our
        // znode, does not take it for a stranger's. The monitor is left to end by itself on
        // that event: stopped early, its dropped watch would make the client send a
        // `removeWatches` request, one more per grant.
        self.state.send_replace(LeaseState::Released);
        let result = delete_node(&self.session, &self.path).await;
        if result.is_err() {
            // The session may outlive the outage that failed the delete, and with it the znode
            // that holds the lock: keep deleting in the background until one of them is gone.
            tokio::spawn(delete_until_done(self.session.clone(), self.path.clone()));
        }
        result
    }
}

#[async_trait]
impl Locker for ZkLock {
    fn algorithm(&self) -> &str {
        "zookeeper"
    }
    fn owner(&self) -> &str {
        &self.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let timed_out = |pending: Pending| async move {
            // Our znode goes before we report: a waiter behind us must not wait on it.
            pending.delete().await?;
            Err(LockError::Timeout { lock_id: lock_id.to_string(), waited: start.elapsed() })
        };
        // The whole wait runs on one session: our place in the queue is a znode of it.
        let session = self.inner.session().await?;
        let place_lost = |pending: &Pending| {
            LockError::LeaseLost {
            lock_id: lock_id.to_string(),
            reason: format!(
                "the ZooKeeper session ended while waiting, and with it our znode {} (our place in the queue); \
                 a new request runs on a new session",
                pending.path
            ),
        }
        };
        let dir = self.dir(lock_id);
        let (pending, stat) = self.create_node(&session, &dir).await?;
        // Our sequence number is our place in line: no request made after this instant can
        // be served first.
        let queued_at = Instant::now();
        let ours = name_of(&pending.path).to_string();
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return timed_out(pending).await;
            }
            if session.is_over() {
                return Err(place_lost(&pending));
            }
            let queue = match self.queue(&session, &dir).await {
                Ok(q) => q,
                Err(_) if session.is_over() => return Err(place_lost(&pending)),
                Err(e) => return Err(e),
            };
            let Some(place) = queue.iter().position(|(_, name)| *name == ours) else {
                return Err(LockError::LeaseLost {
                    lock_id: lock_id.to_string(),
                    reason: format!(
                        "our znode {} vanished while waiting: the session expired",
                        pending.path
                    ),
                });
            };
            // Our immediate predecessor: the contender with the greatest sequence below ours,
            // whichever client made it.
            let Some((_, predecessor)) = place.checked_sub(1).map(|p| &queue[p]) else {
                return Ok(self.grant(lock_id, pending, &stat).with_queued_at(queued_at));
            };
            let pred = format!("{dir}/{predecessor}");
            let (exists, watcher) = match session
                .read(Op::Watch, &pred, || session.client.check_and_watch_stat(&pred))
                .await
            {
                Ok(Ok(answer)) => answer,
                _ if session.is_over() => return Err(place_lost(&pending)),
                Ok(Err(e)) => return Err(session.refused("watch", &pred, e)),
                Err(e) => return Err(e),
            };
            if exists.is_none() {
                continue;
            }
            // A oneshot watch fires on its znode's change, and on the session's end (expired,
            // closed); a disconnection alone does not fire it, and the client sets it again
            // on reconnecting, so a waiter keeps its place across a short outage.
            let event = match deadline {
                None => watcher.changed().await,
                Some(d) => {
                    tokio::select! {
                        event = watcher.changed() => event,
                        _ = tokio::time::sleep_until(d) => return timed_out(pending).await,
                    }
                }
            };
            if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                return Err(place_lost(&pending));
            }
        }
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        let session = self.inner.session().await?;
        let dir = self.dir(lock_id);
        // Someone is there already: no need to queue (and wake a successor) only to leave.
        if !self.queue(&session, &dir).await?.is_empty() {
            return Ok(None);
        }
        let (pending, stat) = self.create_node(&session, &dir).await?;
        let queued_at = Instant::now();
        let queue = self.queue(&session, &dir).await?;
        if queue.first().is_some_and(|(_, name)| name == name_of(&pending.path)) {
            Ok(Some(self.grant(lock_id, pending, &stat).with_queued_at(queued_at)))
        } else {
            pending.delete().await?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_clients_names_are_ordered_by_the_sequence_they_end_in() {
        let names = [
            ("lock-0000000007", Some(7)),
            ("_c_0f9d3a4e-5b8c-4d2e-9a71-3c6b2e1f0a9d-lock-0000000003", Some(3)),
            ("8e4f0c2d9b7a4e1f8c3d2b1a0f9e8d7c__lock__0000000012", Some(12)),
            // Curator's read-write lock and kazoo's read lock: contenders too (an exclusive lock
            // excludes them all).
            ("_c_0f9d3a4e-5b8c-4d2e-9a71-3c6b2e1f0a9d-__READ__0000000004", Some(4)),
            ("8e4f0c2d9b7a4e1f8c3d2b1a0f9e8d7c__rlock__0000000005", Some(5)),
            // A 64-bit sequence, as ZOOKEEPER-4706 proposes (19 digits).
            ("lock-0000000004294967296", Some(4_294_967_296)),
            // Not made by a sequential create: no place in the queue.
            ("lock-", None),
            ("lock-123456789", None),
            ("config", None),
            ("", None),
        ];
        for (name, seq) in names {
            assert_eq!(sequence_of(name), seq, "{name}");
        }
    }

    #[test]
    fn the_protected_form_is_curators() {
        // Curator's ProtectedUtils: "_c_", a UUID's canonical text (36 characters), "-".
        let tag = Guids::seeded(1).protected_tag();
        assert_eq!(tag.len(), 3 + 36 + 1);
        assert!(tag.starts_with("_c_") && tag.ends_with('-'), "{tag}");
        let name = format!("{tag}{NODE_NAME}0000000042");
        assert_eq!(sequence_of(&name), Some(42));
        assert_eq!(name_of(&format!("/locks/x/{name}")), name);
    }
}
