//! # lock-redis
//!
//! Three Redis locks against real `redis-server`s, side by side: the **jedis-lock** algorithm
//! of seed 001 ([`JedisLock`]) exactly as the seed describes it, the **token lock** that
//! replaced it in practice ([`TokenLock`]: `SET key token NX PX ttl`, token-checked Lua
//! scripts), and **Redlock** ([`Redlock`]), the token lock on a majority of N independent
//! masters, as the Redis documentation gives it (below, "Redlock"). The first two run on one
//! server ([`RedisBackend::connect`]) or on the master that Redis Sentinel names, following
//! its failovers ([`RedisBackend::connect_sentinel`]; below, "Through Redis Sentinel"). A
//! backend connects as a Redis ACL user ([`RedisConnectConfig::credentials`]; below, "ACL
//! users"), over TLS with a `rediss://` URL ([`RedisConnectConfig::tls`]; below, "TLS"), and a
//! token-lock holder is told at once when another client changes or deletes its key (below,
//! "Told Lost at once"). Beside the locks stand a **reader-writer lock** ([`RedisRwLock`]) and a
//! **counting semaphore** ([`RedisSemaphore`]) whose holds are leases kept by the server's clock,
//! on one server or through Sentinel (below, "The reader-writer lock and the semaphore").
//!
//! ## The jedis-lock protocol (seed 001)
//!
//! The seed (a Czech blog post by the author of `jedis-lock`) gives the acquisition as four
//! steps, with `lock timeout` the lock's expiry and the value a Unix timestamp:
//!
//! 1. `SETNX key <now + expiry + 1>`: reply 1 means the lock is acquired; otherwise go on.
//! 2. `GET key`: if the stored expiry is smaller than now the lock has expired, go on to 3;
//!    otherwise go to 4.
//! 3. `GETSET key <now + expiry + 1>`: if it returns the value read in step 2, the lock is
//!    acquired with a fresh expiry; otherwise go on.
//! 4. Sleep 100 ms and start over at 1, until the acquire timeout (default 10 s) has passed.
//!
//! Release is `DEL key`. The seed's example uses a 10 s acquire timeout and a 30 s expiry;
//! those are [`JedisConfig::default`]. Timestamps are milliseconds, as in the library
//! (`System.currentTimeMillis()`), read from an injected [`LocalClock`] so tests can skew a
//! client's clock.
//!
//! The seed names one drawback itself: a process that dies holding the lock makes the others
//! wait until its expiry. Two more are inherent and are **shown by tests, not hidden**
//! (`tests/faults.rs`):
//! - *it trusts the clients' clocks*: expiry is judged by the reader's clock, so a client whose
//!   clock runs ahead by more than the expiry sees a live lock as expired and takes it with
//!   `GETSET` while its holder still works under it;
//! - *a late release deletes someone else's lock*: `DEL` is unconditional, so a holder whose
//!   expiry passed (a pause, a slow critical section) and who then releases deletes the lock of
//!   the client that took it over, and a third client gets the lock beside the second.
//!
//! ### Additions to the seed (not in jedis-lock), each documented where it lives
//! The shared suite asks every lock for a lease that survives past its TTL, a signal when it is
//! lost, and a fencing token. The acquisition above stays exact; around it [`JedisLock`] adds:
//! - **renewal** every `expiry / 2`, in the algorithm's own terms: the value is the lock's only
//!   identity, so renewal is a compare-and-set of that value (Lua: if the key still holds the
//!   expiry we wrote, write a new one). It can be switched off
//!   ([`JedisConfig::without_renewal`]) to run the library as it was;
//! - **a lost-lease signal**: when the holder's own clock passes the expiry it last wrote
//!   without a successful renewal, or a renewal finds another value in the key;
//! - **a fencing token** from `INCR <key>/fence` right after the grant (a separate counter key,
//!   so the acquisition's commands are untouched).
//!
//! ## The token lock (the modern comparison)
//!
//! 1. Acquire: one Lua script runs `SET key <token> NX PX <ttl>` and, only if that set the key,
//!    `INCR <key>/fence`; the token is the owner id plus 64 random bits, unique per
//!    acquisition. The fencing counter moves in the same atomic step as the grant, so tokens
//!    are strictly increasing in grant order.
//! 2. Not acquired: the mandatory lock retries every [`TokenConfig::retry_interval`] (50 ms)
//!    until its timeout; the soft lock returns at once.
//! 3. Renewal every `ttl / 2`: a Lua script `PEXPIRE`s the key only while it holds our token,
//!    and otherwise says whether the key is gone or holds another token (the holder's reason).
//! 4. Release: a Lua script `DEL`s the key only while it holds our token.
//! 5. Told at once (on a tracking backend, the default): Redis pushes an invalidation when
//!    another client changes the key; the holder checks with a renewal at once (below, "Told
//!    Lost at once").
//!
//! Expiry is kept by the server's clock alone (`PX`), so client clocks are irrelevant, and a
//! late release finds another token and deletes nothing.
//!
//! ## Invariants
//! - At most one holder per key, as long as clocks agree (jedis) / always (token), **given one
//!   server that does not lose writes**: not a restart without persistence (below, "Server
//!   outages and restarts"), and not a Sentinel failover, which loses the writes its replicas
//!   had not received, grants among them (below, "Through Redis Sentinel": asserted there as a
//!   finding, two holders for seconds).
//! - A holder is told [`LeaseState::Lost`](lock_core::LeaseState::Lost) no later than the
//!   moment another client may take the lock: for the token lock, one TTL after the last
//!   renewal *was sent*; for jedis-lock, when its own clock passes the expiry it wrote. A
//!   token-lock holder whose key another client changes or deletes is told within a round trip
//!   of the change (a push and one renewal), while its backend's connection is up.
//! - Fencing tokens strictly increase in grant order per lock id, on the same condition (a
//!   failover or a restart that loses the counter's last increments hands a token out again).
//! - A mandatory lock that times out has written nothing (both variants write only when they
//!   win).
//! - A mandatory lock whose future is dropped while its winning command is in flight leaves a
//!   key no guard will release: it blocks the lock until its TTL (token) or expiry (jedis).
//!   Bound the wait with the `timeout` argument rather than by dropping the future.
//! - Keys: `<prefix><lock id>` and `<prefix><lock id>/fence`; lock ids cannot contain `/`
//!   ([`validate_id`]), so a fence key never collides with a
//!   lock key.
//!
//! ## Server outages and restarts
//! A [`RedisBackend`] re-establishes its connection by itself (`src/link.rs` says how and why
//! not with the driver's `ConnectionManager`): while the server cannot be reached every request
//! fails with [`LockError::Backend`], never later than the connect timeout plus the response
//! timeout, and at once between reconnect attempts (50 ms after a failure, doubling up to
//! [`RedisConnectConfig::max_reconnect_delay`], 1 s by default). Once the server answers again,
//! requests succeed on the same backend after at most that delay. Without tracking, the first
//! request on a connection that broke while idle fails too ("broken pipe": it is what
//! discovers the break); a tracking connection (RESP3) is reported closed by the driver, and
//! the next request reconnects at once instead.
//! `tests/restart.rs` shows it with four contenders and an outage of a second: they are granted
//! again on the same backends once the server answers, each on a connection of its own making,
//! and every request during the outage fails within its timeouts rather than hanging.
//!
//! What a **holder** sees during an outage: its renewals fail and are retried every retry
//! interval; if none succeeds before its lease runs out (one TTL after the last successful
//! renewal was sent, for jedis-lock its own expiry) it is told
//! [`LeaseState::Lost`](lock_core::LeaseState::Lost), "no renewal succeeded before the lease
//! ran out", with the last error. Releasing during the outage fails with
//! [`LockError::Backend`]; the key, if the server still has it, expires by its TTL (token) or
//! its expiry (jedis). A **waiter** (a mandatory lock in its retry loop) rides out an outage
//! within its own deadline: a transient failure (a timeout, a lost connection) counts as one
//! more failed attempt, retried after a backoff ([`lock_core::retry`]: 50 ms doubling to 1 s;
//! without a deadline, 30 s of consecutive failures), and the call fails only when its
//! deadline passes while the server still fails, with the server's last error rather than
//! [`LockError::Timeout`] (`tests/faults.rs`, `a_lock_call_retries_a_stall_within_its_deadline`).
//! A token-lock attempt whose answer was lost deletes its own key (if the script ran) in the
//! background, so the retry does not wait out a key no guard holds. `try_lock` makes one
//! attempt and reports its error.
//!
//! What happens **after** the restart depends on the server's persistence:
//! - **Without persistence** (Redis's default for a bare `redis-server`, and `save ""`), the
//!   restarted server has no keys: every lock is free at once, *while its holder's lease is
//!   still valid by the holder's reckoning*, and the fencing counter starts again from 0, so a
//!   new holder gets a **smaller** token than the old one. The old holder learns it at its next
//!   renewal (the key no longer holds its token, or value: `Lost`), up to `ttl / 2` later; until
//!   then two clients hold the lock, and fencing by token order cannot protect the resource.
//!   `tests/restart.rs` shows it. Run Redis with persistence, or keep a restarted server out of
//!   service for one TTL (Redlock's "delayed restart"), where that matters.
//! - **With an append-only file synced on every write** (`appendonly yes`, `appendfsync
//!   always`), keys and counters survive; their expiry times are absolute, so TTLs keep running
//!   while the server is down. A holder whose lease did not run out during the outage renews on
//!   the restarted server and keeps the lock; nobody else gets it. With a laxer fsync
//!   (`everysec`) the last second of grants and renewals may be lost, with the effects above.
//!
//! ## Through Redis Sentinel
//!
//! [`RedisBackend::connect_sentinel`] takes the Sentinels' addresses and the master's name
//! instead of a server's URL; everything above the connection (both locks, their keys, their
//! scripts) is unchanged. The backend's link (`src/link.rs`) makes every connection, the first
//! and every one after a break, in these steps (Redis's "Sentinel client guidelines"):
//!
//! 1. Ask the Sentinels in turn `SENTINEL get-master-addr-by-name <name>`, each on a connection
//!    of its own bounded by the connect timeout; a refusal, an error, a timeout or a nil reply
//!    moves on to the next.
//! 2. The first to answer with an address wins, and is asked first next time.
//! 3. Connect to that address and ask `ROLE`: anything but `master` (a stale Sentinel's answer,
//!    a demoted instance) fails the attempt, and the link's backoff (50 ms doubling to
//!    [`RedisConnectConfig::max_reconnect_delay`]) spaces the next, from step 1 again.
//! 4. Use the connection until it breaks, or until it shows it no longer reaches the master:
//!    a `READONLY` or `MASTERDOWN` reply, or a response timeout, drops it; the next request
//!    starts at step 1. Sentinel itself closes the clients of every instance it reconfigures
//!    (`CLIENT KILL` with the `REPLICAOF`), and a killed master closes them too.
//!
//! A request during a failover fails with [`LockError::Backend`], never later than one connect
//! timeout per Sentinel that does not answer, plus the master's connect and response timeouts,
//! plus its own response timeout; it succeeds on the promoted replica once the Sentinels name
//! it. A holder's renewals follow the same way; a waiter fails with the first error, as above.
//!
//! ### Choices the guidelines leave open
//! - **The first answer, not a majority.** One Sentinel's answer is trusted, as the guidelines
//!   say; `ROLE` catches the stale ones. A stale but reachable Sentinel stays first in line and
//!   costs attempts until it learns the new master (Sentinels share it every 2 s).
//! - **No connection kept to a Sentinel, no `+switch-master` subscription**: a failover shows on
//!   the master's connection anyway (closed, killed, timed out, `READONLY`), and a subscription
//!   would not close the windows below: the news of a failover reaches a subscriber no sooner
//!   than the failover itself.
//! - **A response timeout drops the connection** through Sentinel (not on one server): a master
//!   that does not answer is what Sentinel fails over. Kept, the connection to a paused master
//!   would carry the next requests to it once it resumes, deposed, until Sentinel demotes it.
//! - **`LOADING` keeps the connection**: the instance loading its data is the one the
//!   Sentinels name, and asking them again would only name it again.
//! - **Errors**: an empty or malformed list, or a name that every Sentinel answers nil for at
//!   `connect_sentinel`, is a [`LockError::Config`] (nothing will change by retrying); no
//!   Sentinel reachable is a [`LockError::Backend`] naming each with its error. The master is
//!   reached as [`RedisConnectConfig::credentials`] and in database 0; the Sentinels are asked
//!   without credentials.
//!
//! ### Findings (`tests/sentinel_failover.rs`, `tests/sentinel_safety.rs`; a master, 2
//! replicas, 3 Sentinels, down-after 2 s)
//! - **A killed master is followed**: requests fail quickly (refused or broken, never a hang)
//!   until the Sentinels promote a replica, and then the same backend is granted on it, on a
//!   connection of its own making.
//! - **A paused master is left**: requests time out (each after the response timeout),
//!   dropping their connections, until the Sentinels name the promoted replica. A request that
//!   timed out may sit in the paused master's socket buffer and run when it resumes: a grant
//!   nobody was told of, on a master about to be demoted (its data is replaced by the resync).
//! - **A resumed, deposed master grants beside the new one** (asserted as a finding): a backend
//!   that sent nothing during the pause keeps its connection to the old master, which, resumed,
//!   still calls itself master; it grants a lock another client holds on the new master, at
//!   once. Sentinel demotes it only once it has stayed up for a while after resuming; its
//!   `CLIENT KILL` moves the backend to the new master, and the deposed grant is told `Lost` at
//!   its first renewal there: two holders from the resume until that renewal, which can be
//!   longer than the TTL. `min-replicas-to-write` on the masters would shorten the window
//!   (a master without its replicas refuses writes after `min-replicas-max-lag`); nothing in
//!   the client can: the deposed master says `master` to `ROLE` until it is demoted.
//! - **A grant not yet replicated is lost in the failover** (Kleppmann's case for Redis with
//!   async replication; asserted as a finding). Both replicas' replication links held, A is
//!   granted `x` on the master alone, with the next fencing token; the master is killed; the
//!   promoted replica never had the grant nor the increment, and grants `x` to B **with A's
//!   token again**, while A holds it by its own reckoning. Equal tokens do not fence: a
//!   resource that refuses only tokens below the highest it accepted (so that a holder can
//!   write more than once) takes both holders' writes. A is told `Lost` at its first renewal
//!   (`ttl / 2` after its grant): two holders from B's grant until then. The overlap is the
//!   renewal interval minus the failover; a failover longer than the interval makes A's
//!   renewal race B's grant to the new master.
//! - **The control**: the same kill once A's grant had reached the replicas; B is refused on
//!   the promoted replica, and A's next renewal extends its key there.
//!   Redis's `WAIT` would make a grant wait for its replicas' acknowledgement, which narrows
//!   the case; its documentation says it does not make Redis strongly consistent (a failover
//!   can still lose an acknowledged write). Only a store whose writes go through consensus
//!   closes it.
//!
//! ## Redlock (the Redis documentation, "Distributed locks with Redis")
//!
//! [`Redlock`] runs on N independent masters ([`RedisMasters`]: no replication between them, no
//! Sentinel); a majority is `N / 2 + 1`, 3 of the documentation's 5. Its steps, as this crate
//! takes them (the documentation's numbering):
//!
//! 1. *Get the current time.* An instant of tokio's clock (monotonic, like rslock's `Instant`):
//!    every key's `PX` starts after it on its master.
//! 2. *Try to acquire the lock in all N instances, with the same key and random value*:
//!    `SET <prefix><lock id> <value> NX PX <ttl>`, where the value is the owner id plus 64 bits
//!    from the locker's seeded generator, new for every acquisition. Each master's answer is
//!    awaited at most [`RedlockConfig::master_timeout`] (default 50 ms, the top of the doc's
//!    "5-50 ms" for a 10 s TTL), so a dead master costs one timeout.
//! 3. *The lock is acquired iff a majority granted and the elapsed time is below the validity
//!    time.*
//! 4. *Its validity is the TTL minus the elapsed time*, minus the clock-drift allowance
//!    `ttl * 0.01 + 2 ms` ([`RedlockConfig::drift`]; the doc's `MIN_VALIDITY = TTL - (T2 - T1) -
//!    CLOCK_DRIFT`): the guard's lease is valid until step 1's instant `+ ttl - drift`.
//! 5. *Otherwise unlock all instances, even those it believed it could not lock* (a `SET` may
//!    have landed after its timeout): the token lock's compare-and-delete script on every
//!    master. Then *retry after a random delay*, drawn uniformly from `[0, retry_delay)`
//!    (default 200 ms, rslock's), so that contenders that split the votes do not meet again.
//!
//! - **Release**: compare-and-delete on every master.
//! - **A delete is not cut off by the master timeout.** The round waits for it no longer than
//!   for any request, but the delete itself runs to its end in the background. One delete can
//!   be three commands: the first script call on a master whose script cache is empty (after
//!   a restart, or `SCRIPT FLUSH`) is refused `NOSCRIPT`, and the script is loaded and called
//!   again. Cut off between them, a release or a step-5 undo left its key until the TTL, and
//!   a few such keys on a majority shut the lock for a TTL with nobody holding it
//!   (`tests/redlock_faults.rs` pauses a master past the timeout to show the delete complete).
//!   A `SET` without an answer in time is still dropped: sent late, it could land after the
//!   undo that follows it.
//! - **Extension** (the doc's "lock extension mechanism"): every `extend_every` (default
//!   `ttl / 2`) a compare-and-`PEXPIRE` script on every master; *the lock is re-acquired only if
//!   a majority extended*, and is then valid until the round's start `+ ttl - drift`.
//! - **Lost-lease signal**: the lease keeper of the other locks. The holder is told
//!   [`LeaseState::Lost`](lock_core::LeaseState::Lost) when its validity ends without a
//!   successful extension (failed rounds are retried every 50 ms until then), or at once when
//!   more than `N - majority` masters answer that the key no longer holds its value (a majority
//!   can no longer be had).
//!
//! ### Choices the documentation leaves open
//! - **In parallel, not in sequence.** Step 2 says "sequentially", and the same page advises to
//!   "send the SET commands to the N instances at the same time using multiplexing"; rslock
//!   goes in sequence, Redisson in parallel. Here every round (grant, extension, release, token)
//!   is sent to all masters at once: it costs one round trip instead of N, so less of the
//!   validity is spent, and a dead master costs one timeout, not its place in a sequence.
//! - **Retries**: rslock stops after 3 attempts, Redisson after a wait time; here
//!   [`Locker::lock`](lock_core::Locker::lock)'s timeout bounds the mandatory lock and [`Locker::try_lock`](lock_core::Locker::try_lock) makes one
//!   attempt.
//! - **No answer vs. no**: an attempt answered by a majority of which fewer than a majority
//!   granted is "not held" (`Ok(None)`); an attempt that fewer than a majority answered at all
//!   fails with [`LockError::Backend`] (nobody can tell who holds the lock), as the other locks'
//!   waiters fail on a backend error. A release is an error only when fewer than a majority
//!   answered (the keys of the others expire by their TTL).
//! - **Masters down at the start**: [`RedisMasters::connect_with`] needs a majority to answer;
//!   the others are connected at their first request, a vote less until then.
//! - **Time and randomness are injected**: elapsed time is tokio's clock (a paused runtime
//!   simulates it; a step of the client's wall clock does not move it), and the values and
//!   delays come from [`RedlockConfig::seed`] mixed with the owner id, never from a global
//!   generator. Values must be unique across runs too: give each run its own seed.
//! - **Clocks the drift allowance does not cover**: Redis expires keys by its own wall clock,
//!   so a master whose clock jumps ahead frees a key early; that is Kleppmann's other argument,
//!   not injected here.
//!
//! ### No fencing token
//! Redlock has no fencing token of its own (Kleppmann, "How to do distributed locking", 2016):
//! its value is random, not ordered. A plain Redlock guard's
//! [`LockGuard::token`](lock_core::LockGuard::token) is [`NO_FENCING_TOKEN`] (0), below every
//! real token: a resource that refuses tokens below the highest it has seen accepts every
//! write that carries it, so a Redlock holder's stale writes are *unfenced* (the benchmark
//! harness's fenced resource counts them so).
//!
//! ### A fencing token for Redlock (`redlock-fenced`, [`RedlockVariant::Fenced`])
//! *`INCR` on a majority and take the greatest answer* is **not** sound: with counters
//! `[5, 1, 1, 1, 1]`, A increments masters 0, 1, 2 and takes 6; B, later, increments 2, 3, 4 and
//! takes 3. The majorities intersect, but the master they share held a small count. What the
//! fenced variant does instead is a max-register on majorities, once the grant is won:
//!
//! 1. read `<prefix><lock id>/fence` on every master; a majority must answer; `t` = the
//!    greatest value read + 1;
//! 2. raise the counter to `t` on every master (a script that never lowers it); a majority must
//!    acknowledge;
//! 3. hand `t` out only if the grant's validity has not run out meanwhile (else the grant is
//!    undone, as in step 5).
//!
//! *Why it increases*: let A be granted, then B after A's validity ended (A released, expired,
//! or was paused past it: Kleppmann's case). A's step 2 completed at a majority W before A's
//! validity ended. B's grant majority shares a master with A's, where B's `SET` succeeded only
//! once A's key was gone, which is no earlier than the end of A's validity (given no master
//! loses a write and clocks drift within the allowance); B's step 1 runs after its grant, so
//! after A's step 2, and its read majority shares a master with W, which holds `>= t_A`: so
//! `t_B > t_A`. It costs two more round trips per grant.
//!
//! *Where it is not sound*: (a) two holders whose holds overlap (the lock itself failed) may read
//! the same greatest value and draw equal tokens, which a resource that accepts equal tokens
//! lets through; (b) a master that loses its data forgets the counter too, and the delayed
//! restart the documentation advises for lock keys does not bring a counter back. Since step 2
//! goes to every master, one wiped master hides `t_A` only from a read majority that meets W
//! nowhere else: `tests/redlock_faults.rs` shows both sides (below).
//!
//! ### Findings (`tests/redlock_faults.rs`, five real masters per test)
//! - **One master killed** in the middle of a contended run (8 contenders, 4 grants each):
//!   32 holds, no overlap; with the fenced variant, tokens strictly increase. A minority of dead
//!   masters costs votes, not safety, as the documentation and the literature say.
//! - **A master restarted without its data within the lock's validity lets a second client
//!   in** (Kleppmann's scenario; the test asserts it). A is granted by exactly masters 0, 1, 2
//!   (3 and 4 are cut off from it); master 2 is killed and restarted empty; B, reaching all
//!   five, is granted by 2, 3, 4 well within A's validity. A still holds by its own reckoning,
//!   and goes on holding: its extensions reach 2 of 5 (0 and 1 still hold its value, so it
//!   cannot tell it lost), and it is told `Lost` only when its validity ends. The lost-lease
//!   signal bounds the overlap by one validity; it cannot
//!   close it. The same restart **with** the data (append-only file, `appendfsync always`)
//!   keeps B out. The documentation's remedies are those: `fsync` always, or *delayed restarts*
//!   (keep a crashed master out of service for one TTL).
//! - **The fenced variant in that scenario**: B's token read reaches masters 0 and 1, which
//!   kept A's token, so `t_B > t_A` and a fenced resource refuses A's writes once B has
//!   written: the token protects the resource where the lock failed. When B reaches only 2, 3
//!   and 4, the wiped master 2 is all that its majorities share with A's, and B draws A's token
//!   again (`t_B == t_A`): the fence fails with the lock.
//!
//! - **Many clients: a congestion collapse.** An attempt costs a request to every master and,
//!   when it fails, an undo to every master; a master that answers after the master timeout
//!   is a lost vote, and the lost attempt is retried within the retry delay. Once the masters
//!   answer slower than the timeout, nearly every attempt fails and its retries load them
//!   further. `bench-harness scale` shows Redlock's grants per second falling to a small
//!   fraction from 64 to 256 and 1,000 clients, on one lock and on a hundred, with releases
//!   and attempts failing for want of a majority's answer in time, where the token lock on
//!   one server of the same kind keeps its rate (`results/scale/README.md`).
//!   The sweep runs the defaults of [`RedlockConfig`] (the documentation's master timeout,
//!   rslock's retry delay).
//!
//! ### Invariants the tests check
//! - With every master keeping its writes: at most one holder per lock, also with a minority of
//!   masters dead; the shared suite's scenarios, all of them.
//! - A holder is told `Lost` no later than its validity's end (step 1 of its last successful
//!   round `+ ttl - drift`) when no extension reached a majority.
//! - Plain guards carry [`NO_FENCING_TOKEN`]; fenced tokens strictly increase in grant order
//!   while no master loses data.
//! - A master restarted without its data within a validity can give a second holder the lock
//!   (asserted, as a finding).
//! - Keys: `<prefix><lock id>` and `<prefix><lock id>/fence` on every master.
//!
//! ## The reader-writer lock and the semaphore
//!
//! [`RedisRwLock`] ([`RedisBackend::rwlock`], a [`RwLocker`](lock_core::RwLocker)) and
//! [`RedisSemaphore`] ([`RedisBackend::semaphore`], a [`Semaphore`](lock_core::Semaphore)) share
//! one protocol: a line of *asks* per lock or semaphore, each ask with a lease kept by the
//! server's clock, polled, renewed and removed by three Lua scripts (`src/queue.rs`). They run
//! on any [`RedisBackend`], one server or the master the Sentinels name, unchanged.
//!
//! **Keys**, with `<base>` the lock's `<prefix><lock id>/rw` or the semaphore's
//! `<prefix><semaphore id>/sem` (apart from the mutexes' keys of the same id):
//! - `<base>`: a sorted set of ask ids scored by their place in line;
//! - `<base>/expiry`: the same ask ids scored by the end of their lease, in milliseconds of the
//!   server's `TIME` read inside the script;
//! - `<base>/asks`: a hash of what each ask wants (`r1` a read, `w1` a write, `p<k>` k permits)
//!   and, once granted, its last token after a colon;
//! - `<base>/fence`: the counter that numbers places in line (`INCR`) and tokens (`INCRBY k`);
//!   it never expires;
//! - `<base>/size` (a semaphore): the size N its holders and waiters use.
//!
//! **Protocol.**
//! 1. *Ask*: a `lock` or `acquire` call draws one ask id (the owner id plus 64 random bits) and
//!    runs the ask script: every ask whose lease ended is removed; the ask joins the line at
//!    the back if it is not in it; its lease is set to end one TTL after the server's now; and
//!    it is granted if its rule allows, its tokens drawn and written into it in the same
//!    script.
//! 2. *Rules*: a FIFO read when no write is ahead of it, a FIFO write when nothing is ahead of
//!    it; a readers-first read when no write holds, a readers-first write when nothing holds and
//!    no write waits ahead of it; k permits when the permits of the asks ahead of them (holders
//!    and waiters) plus k are at most N.
//! 3. *Wait*: not granted, the waiter polls again every retry interval, and each poll renews its
//!    place's lease. A poll whose answer was lost is repeated with the same ask id: a grant it
//!    made is found and returned with the same tokens.
//! 4. *Hold*: the lease keeper renews every `renew_every` with a script that extends the ask's
//!    lease only while the ask is in line; the holder is told
//!    [`LeaseState::Lost`](lock_core::LeaseState::Lost) one TTL after its last successful
//!    renewal was sent, or when a renewal finds its ask gone.
//! 5. *Leave*: release, a timeout, any failed call and a `lock` or `acquire` future dropped
//!    while it waits run the leave script, which removes that ask id and nothing else.
//!    `try_lock` and `try_acquire` make one poll whose ask leaves at once unless granted.
//!
//! **Invariants**, given one server that keeps its writes (as for the token lock: a failover or
//! a restart without persistence loses asks, grants and the counter's last increments):
//! - A write holds alone, and never more than N permits are held: new asks join at the back and
//!   the asks ahead of any ask only leave, so what a grant counted bounds what is held beside it
//!   (`src/queue.rs` gives the argument); readers first decides on the holders themselves, in
//!   the same atomic script.
//! - Tokens: a grant's tokens exceed every token drawn before it, so a write's token exceeds
//!   every earlier hold's and an ask made after a hold ended carries greater tokens than that
//!   hold's; the k tokens of one acquire are consecutive.
//! - Expiry is the server's: an ask's lease ends at the server's time plus the TTL, and every
//!   script removes the expired asks before it decides anything. Client clocks play no part.
//! - A refused request writes nothing: a bad id, an upgrade
//!   ([`UsageError::Upgrade`](lock_core::UsageError::Upgrade)), a bad number of permits, and a
//!   size other than the one in use
//!   ([`UsageError::LimitMismatch`](lock_core::UsageError::LimitMismatch)) are refused before
//!   the ask joins the line. A timed-out call removes its ask before it returns;
//!   if the server cannot be reached then, the ask's lease ends one TTL after its last poll.
//! - Every key but the counter expires with the latest lease in line, and the size goes with
//!   the last ask: a lock or semaphore whose clients all vanished leaves only its counter.
//!
//! **Choices and their cost.**
//! - *FIFO by default; readers first on request.* What Redis users run is Redisson's
//!   `RReadWriteLock`: a hash whose `mode` field says `read` or `write`, a reader entering
//!   whenever the mode is read. It **starves writers**, and without bound: a writer waits for
//!   as long as reads keep overlapping, since each new reader enters beside the last, and
//!   nothing in the lock ends that. [`RwLockConfig::policy`] offers that policy
//!   ([`WriterPolicy::ReadersFirst`](lock_core::WriterPolicy::ReadersFirst)), for comparison and
//!   for read-heavy loads that accept it; the default is
//!   [`WriterPolicy::Fifo`](lock_core::WriterPolicy::Fifo), where a writer waits only for the
//!   asks ahead of it and a reader asking after a waiting writer waits for it (sharing given up
//!   for a bound), as in every other reader-writer lock of this workspace.
//!   `tests/rwlock_policy.rs` measures both under a stream of overlapping readers: the
//!   readers-first writer is kept out until the stream ends, passed by every reader that asks
//!   meanwhile; the FIFO writer waits for the reads ahead of it only, and no later read passes
//!   it.
//! - *The semaphore is FIFO.* A later ask of fewer permits never passes a waiting ask of more,
//!   so an ask of k permits cannot starve (`tests/semaphore_queue.rs` shows an ask of every
//!   permit served under a stream of 1-permit acquires); permits may stay free while the head
//!   of the line waits for enough of them. Redisson's `RPermitExpirableSemaphore`, first fit and
//!   with expiry by the client's clock, keeps permits busier and can starve it.
//! - *Polling, not pub/sub.* A waiter polls every retry interval, one `EVALSHA` each, as the
//!   token lock's waiters do. Pub/sub would wake waiters sooner after a release, for a
//!   subscription per waiter and a channel in every ACL user, and waiters would still have to
//!   renew their places.
//! - *One script reads the whole line*: a poll's cost grows with the number of asks on its lock
//!   or semaphore, and the server serves nothing else meanwhile.
//! - *A waiter cut off from the server for a TTL loses its place*: its ask expires, and its next
//!   poll joins at the back.
//! - *Not told at once*: every ask changes the lock's keys, so tracking (below, "Told Lost at
//!   once") would ring every holder at every ask; a holder learns of its ask's removal at its
//!   next renewal.
//! - *Requests*: an uncontended grant and release cost two `EVALSHA` (ask, leave), a waiter's
//!   poll and a holder's renewal one each.
//!
//! ## ACL users
//!
//! A backend connects as a Redis ACL user: [`RedisConnectConfig::credentials`] (a
//! [`Credentials`](lock_core::secret::Credentials), whose password never prints), or the URL form
//! `redis://user:password@host:port/` (the config's credentials win when both are given;
//! [`RedisBackend::address`] and every message show the URL with its password redacted).
//! Through Sentinel the credentials are the master's. The user needs:
//! - the key pattern `~<key prefix>*`: the locks touch `<prefix><lock id>` and
//!   `<prefix><lock id>/fence`, the reader-writer lock and the semaphore the keys under
//!   `<prefix><id>/rw` and `<prefix><id>/sem` (above), and nothing else;
//! - the commands of [`ACL_COMMANDS`]: the locks' own and those their scripts call (Redis checks
//!   a script's inner calls, and their keys, against the caller's ACL), `ROLE` for Sentinel,
//!   `client|tracking` for tracking (no pub/sub channel: the invalidations come as RESP3 pushes,
//!   below). `tests/security.rs` and `tests/secured_conformance.rs` run on a user with exactly
//!   these.
//!
//! **A refusal is not an outage** (`src/link.rs`). It fails with a [`LockError::Backend`] of
//! kind [`Refused`](lock_core::BackendErrorKind::Refused) (an outage's is `Unavailable` or
//! `Timeout`, which [`is_transient`](lock_core::BackendErrorKind::is_transient) tells apart;
//! Redis's own error is kept as its source) that names the server, the user (`as user
//! 'locker'`, `without credentials`) and what was refused, with Redis's own words, never the
//! password, within the connect and response timeouts:
//! - a wrong password, or a user that does not exist or is off: `authentication refused
//!   (WRONGPASS ...)`, at `connect`;
//! - no credentials on a server whose default user is off or has a password: `the server asks
//!   for credentials (NOAUTH ...)`, at `connect`;
//! - a user whose ACL lacks a command (`client|tracking` included, at `connect`) or whose key
//!   pattern misses the lock's keys (at the first lock call, `connect` touches no key): `the
//!   user's ACL refused it (NOPERM ...)`, naming the pattern needed. A mandatory lock returns it
//!   at once instead of retrying until its timeout.
//!
//! A refused *reconnect* (the password changed, the user deleted while the backend runs) waits
//! the longest reconnect delay before the next attempt rather than the 50 ms of an outage; a
//! holder's renewals fail meanwhile and it is told `Lost` when its lease ends, with the refusal
//! as the last error.
//!
//! **What a stranger can do.** On a server whose default user is on without a password (Redis's
//! default), any client that reaches the port can `DEL` a lock's key (a waiter is granted beside
//! the holder), `SET` it (the holder's release and renewal find another token), `PERSIST` it (the
//! lock is never freed), `SET` the fencing counter back (tokens go backwards: fencing fails),
//! or read a holder's token and run the release script as the holder. The lock cannot stop
//! any of it: its safety assumes that only lock clients write its keys. Tracking (below) makes
//! the first two *visible* to the holder at once, not impossible. With an ACL user per
//! application, the default user off and key patterns that do not overlap, a client of
//! another identity gets `NOPERM` for all of it (`tests/security.rs`: the holder stays
//! `Held`, a waiter is not granted). What ACLs cannot separate: clients that share a user (one
//! application's processes, each of which can still do all of the above to the others' locks),
//! and anyone who can read the password. On a plain `redis://` connection passwords, tokens
//! and keys travel in clear, and anyone on the path can read or change them: use TLS (below).
//!
//! ## TLS
//!
//! A `rediss://` URL connects over TLS (rustls, its crypto from `ring`; `src/tls.rs`), for the
//! token lock, jedis-lock and each of Redlock's masters alike; through Sentinel, the Sentinels
//! and the master are reached over TLS when [`RedisConnectConfig::tls`] is set or the
//! Sentinels are given as `rediss://host:port` (the tests check the clients this makes; no
//! test runs a TLS Sentinel deployment). What the client trusts and presents:
//!
//! - [`RedisConnectConfig::tls`] unset: the system's root certificates, no client
//!   certificate (a server whose certificate a public CA signed);
//! - `tls: Some(TlsFiles::trusting("ca.pem"))`: the CA (or CAs) in that PEM file instead
//!   of the system's roots (a private CA);
//! - `TlsFiles::trusting("ca.pem").with_identity("client.pem", "client-key.pem")`: also
//!   present that certificate when the server asks for one (mutual TLS: the server's
//!   `tls-auth-clients yes`, its `tls-ca-cert-file` the CA that signed the client's).
//!
//! The URL's host (or the address a Sentinel names) must be one the server's certificate is
//! valid for (`127.0.0.1` needs an IP address entry, not a DNS name). TLS does not replace the
//! ACL user: the credentials are sent inside the TLS connection (`HELLO` or `AUTH`), and
//! [`ACL_COMMANDS`] needs nothing more. The server side (Redis 6 or later, built with TLS, as
//! Debian's is): `tls-port`, `tls-cert-file`, `tls-key-file`, `tls-ca-cert-file`,
//! `tls-auth-clients yes` or `optional`, and `port 0` so that nobody connects in clear.
//!
//! **What is refused at once** ([`LockError::Config`], before any connection): a `redis://`
//! URL with `tls` set (the two disagree; neither silently wins), `rediss://...#insecure` (a
//! connection that checks no certificate), a CA, certificate or key file that is missing,
//! unreadable, holds no PEM block of its kind or one that does not parse (the message names
//! the file, never a key's bytes), and Sentinel addresses that mix `redis://` with TLS.
//!
//! **What the server or the handshake refuses** fails `connect` with a [`LockError::Backend`]
//! that names the server, the user and what was refused, never a password or a key. Each is
//! a refusal, not an outage (as under "ACL users"): a reconnect that meets one waits the
//! longest reconnect delay before the next. The messages, with what they mean
//! (`tests/tls.rs` asserts each):
//!
//! - `TLS handshake with 127.0.0.1:6380 failed: invalid peer certificate: UnknownIssuer: the
//!   server's certificate is not signed by a CA the client trusts`: the server's certificate
//!   comes from another CA than `tls`'s (or, without it, than the system's roots).
//! - `... invalid peer certificate: certificate not valid for name "127.0.0.1"; certificate
//!   is only valid for ...: the server's certificate is not valid for the host the client
//!   connected to`: the URL names the server by a host its certificate does not list.
//! - `... received fatal alert: CertificateRequired: the server requires a client
//!   certificate`: `tls-auth-clients yes` and `tls` gives no certificate and key.
//! - `... received fatal alert: UnknownCA: the server refused the client's certificate`: the
//!   client's certificate is not signed by the server's `tls-ca-cert-file` (or the server
//!   finds it invalid: `BadCertificate`, `CertificateUnknown`, `DecryptError`).
//! - `... failed: no answer (timed out), and the port answers a plain PING: the server does
//!   not speak TLS on this port`: a `rediss://` URL at a plain port. Redis takes the TLS
//!   ClientHello for an inline command that never ends and says nothing, so this one comes
//!   after the connect timeout (5 s by default); the attempt then sends
//!   the port a plain `PING` (no credentials) to tell it from an outage.
//! - `127.0.0.1:6380 closed a plain connection (Connection reset by peer ...) and answers a TLS
//!   handshake: the server speaks only TLS on this port; use a rediss:// URL`: a `redis://`
//!   URL at a TLS-only port (whose server resets the connection at the first bytes that are
//!   not TLS; note that the `HELLO` or `AUTH` carrying the password was sent in clear before
//!   the reset). The attempt tells it from an outage with a TLS handshake of its own at the
//!   same port that trusts no CA and sends nothing of the backend's.
//!
//! Anything else that breaks a TLS connection (a reset, a timeout, a server going away) is an
//! outage, handled as under "Server outages and restarts". The two probes are not reported to
//! [`RedisConnectConfig::requests`] (they are made only after a failed attempt, and not on the
//! server's protocol). The driver hands rustls's error over as text only, so the refusals are
//! recognised by rustls's words (rustls 0.23), which the messages quote.
//!
//! **The crypto provider.** The driver builds its rustls configuration with the process's
//! default provider; the first TLS client this crate makes installs `ring`'s as that default,
//! unless the process chose one already (then that one is used, `aws-lc-rs` included). A
//! process that needs another default must install it before its first Redis connection.
//!
//! ## Told Lost at once (tracking)
//!
//! Without help a token-lock holder learns that another client deleted or overwrote its key
//! only at its next renewal, up to `ttl / 2` later. Redis can say so at once: client-side
//! caching's *tracking* (`CLIENT TRACKING`, Redis 6 and later, no server configuration) tells a
//! connection when a key it has read changes. With [`RedisConnectConfig::tracking`] (the
//! default):
//!
//! 1. Every connection the backend makes speaks RESP3 (the driver's `HELLO 3`, which carries the
//!    credentials) and is armed with `CLIENT TRACKING ON NOLOOP` right after its `PING` or
//!    `ROLE`, as part of the connect attempt (`src/link.rs`). `NOLOOP`: changes the connection
//!    makes itself (our renewals and releases) are not reported.
//! 2. A token lock's attempt registers its key with the backend's tracker before the acquire
//!    script goes (a push read off the connection before the grant's reply reaches the caller
//!    would otherwise find nobody), and drops it if not granted (`src/tracking.rs`).
//! 3. The acquire script reads the key right after its `SET`: a key read inside a script is
//!    tracked for the connection that ran it, so the grant itself starts the tracking, at no
//!    extra request.
//! 4. Tracking is one-shot: Redis forgets a key's tracking at its first change, *our own
//!    `PEXPIRE` included* (`NOLOOP` only keeps the report from us). So the renewal script reads
//!    the key again after its `PEXPIRE`, and the key stays tracked for the whole hold.
//! 5. When another client changes or deletes the key (or it expires, or is evicted, or the
//!    database is flushed), Redis pushes `invalidate [key]` on our connection; the driver hands
//!    it to a callback in its reader task, which rings the holder's bell and does nothing else.
//! 6. The holder's keeper, woken by the bell, renews at once: the renewal's token check decides.
//!    If the key is gone or holds another token, the holder is told
//!    [`LeaseState::Lost`](lock_core::LeaseState::Lost): "its key `<key>` was changed or
//!    deleted by another client: Redis reported the tracked key changed and it no longer exists
//!    (a DEL, a flush or an eviction; an expiry by its TTL is reported the same way, but this
//!    holder's lease, which ends before the key's TTL, had not run out)", or "... it now holds
//!    another client's token (overwritten, or deleted and granted again)". If the key is still
//!    ours (a key of the same name in another database, whose changes Redis reports too since
//!    its tracking table knows names only; a flush of another database; a push still in flight
//!    from an earlier grant of the same key), nothing changes but an extended lease.
//! 7. Release stops the keeper first and deletes the key on the same connection: `NOLOOP` keeps
//!    it silent, and nobody listens any more.
//!
//! `tests/security.rs` shows it: a stranger's `DEL` or `SET` of a key held with a 30 s TTL
//! is reported to the holder long before its next renewal (a round trip after the stranger's
//! reply, on loopback); the waiter is granted at once (`DEL`) or when the stranger's own key
//! expires.
//!
//! **Reconnects.** A new connection tracks nothing. The link announces each connection it
//! installs to the tracker, and every holder whose key was granted or last announced on an
//! older connection renews at once, which reads (and checks) its key on the new one (twice,
//! if its own due renewal made the connection: the announcement does not know). While
//! there is no connection (the driver reported the old one closed, and no request has made a
//! new one yet), no change can be pushed: a holder falls back to renewal-based detection, and
//! its next renewal both reconnects and finds a change made meanwhile (told "... no longer
//! exists (its TTL ran out, or another client deleted it)"). A holder is not made to renew
//! *because* its connection closed: during an outage that renewal would only fail, and after a
//! restart without persistence or a failover it would tell the holder earlier only when it
//! happened to reconnect before the second grant, a change to what the findings above and
//! `tests/restart.rs` measure, which tracking leaves as it was.
//!
//! **Why RESP3 pushes, not RESP2's `REDIRECT`.** RESP2 cannot carry pushes on a connection that
//! also answers commands, so tracking there redirects them to a second connection subscribed
//! to `__redis__:invalidate`: one more connection per backend, its client id fetched before it
//! subscribes, the pub/sub channel permitted in every ACL user, and a redirect that can break on
//! its own while the lock connection lives (RESP2 is not told). With RESP3 the pushes travel on
//! the lock connection itself, in order with its replies, and end with it; the `redis` crate
//! delivers them through a callback in the reader task it already runs. The cost: the
//! connection speaks RESP3 (the `HELLO 3` replaces RESP2's `AUTH`), which needs Redis 6; a
//! server without it is refused at `connect`, saying to switch tracking off.
//!
//! **Why not `BCAST`.** Broadcasting mode reports every change under a prefix with no read
//! needed, but to every backend: each grant and release would push to every contender.
//!
//! **What it costs.** Per connection, a `HELLO` and a `CLIENT` (tracking) more; per grant,
//! renewal and release nothing (the reads are inside the scripts); per reported change to a
//! held key, one renewal (`EVALSHA`); per new connection, one renewal per holder granted before
//! it. On the server,
//! one tracking-table entry per held key; pushes only for keys this backend read.
//!
//! **Which lock does what.** The token lock, as above. **jedis-lock** is not told: the seed's
//! command sequence is kept exact, and its keys change hands by design (`GETSET` of an expired
//! value by another client's clock), so a change is no news to it; it learns at its renewal. Its
//! `GET`s on a tracking backend are tracked all the same, and cost pushes nobody listens to: give
//! a backend that only runs jedis-lock `tracking: false`. **Redlock** is not told either: a
//! change on one master is not a lost majority, and a vote of invalidations across N masters is
//! not built; its masters never track ([`RedisMasters::connect_with`]). The **reader-writer
//! lock** and the **semaphore** are not told either (above, "The reader-writer lock and the
//! semaphore"); their scripts' reads are tracked all the same, and cost pushes nobody listens
//! to.
//!
//! ## Requests per grant
//! A backend reports every command it sends to [`RedisConnectConfig::requests`] (a
//! [`RequestHook`](lock_core::requests::RequestHook)), named by the command's first word (`SETNX`, `EVALSHA`, `SCRIPT`), under
//! the server it goes to: `redis` (one server, or the master the Sentinels name), `sentinel`,
//! or Redlock's `master-<i>` (`src/link.rs` is the one place they pass). One command is one
//! request: a script's `EVALSHA` is one whatever the script calls inside, and a pipeline of N
//! commands is N. From the protocols above, N masters for Redlock:
//!
//! | what | jedis-lock | token lock | Redlock | Redlock, fenced |
//! |---|---|---|---|---|
//! | uncontended lock and release | 3: `SETNX`, `INCR` (the fence), `DEL` | 2: `EVALSHA` (acquire), `EVALSHA` (release) | 2N: `SET` and `EVALSHA` on each master | 4N: also `GET` and `EVALSHA` (the fence) on each |
//! | an attempt that finds the lock held (soft lock refused; each retry of a waiter) | 2: `SETNX`, `GET` (3 with a `GETSET` when the expiry has passed) | 1: `EVALSHA` | 2N: `SET` and the undo's `EVALSHA` on each master | 2N |
//! | a holder's renewal, every expiry/2 or TTL/2 | 1: `EVALSHA` | 1: `EVALSHA` | N: `EVALSHA` on each master | N |
//! | a connection (tracking on, the default; Redlock never tracks) | 3: `HELLO`, `PING`, `CLIENT` | 3: `HELLO`, `PING`, `CLIENT` | N: `PING` on each master | N |
//! | another client's change to a held key (tracking) | 0: not told | 1: `EVALSHA` (the check) | 0: not told | 0 |
//! | a new connection while holders hold (tracking) | 3 | 3, and 1 `EVALSHA` per holder | N | N |
//!
//! A waiter pays its retries: one attempt every retry interval (jedis-lock 100 ms, the token
//! lock 50 ms, Redlock a random delay below 200 ms) for as long as it waits, so a grant costs
//! more the longer the queue ahead of it. The first use of a script on a server (since it
//! started, or since `SCRIPT FLUSH`) costs two more: the `EVALSHA` the server refuses
//! (`NOSCRIPT`) and the driver's `SCRIPT LOAD`, before the `EVALSHA` again. Each connection
//! costs a `PING` (through Sentinel, a `SENTINEL get-master-addr-by-name` to each Sentinel
//! asked until one answers, and a `ROLE` to the master instead of the `PING`); with tracking,
//! the driver's `HELLO 3` (carrying the credentials, if any) and the link's `CLIENT TRACKING`;
//! without it, an `AUTH` when there are credentials; and a `SELECT` when the URL names a
//! database other than 0. The driver's `CLIENT SETINFO` is not sent. `tests/requests.rs` checks
//! these rows, and that the server counts the same commands.
//!
//! ## Conformance verdict
//! Redlock's two variants run the whole suite on five real masters
//! (`tests/redlock_conformance.rs`, `tests/redlock_fenced_conformance.rs`; TTL 2 s): every
//! scenario passes. The plain variant hands out [`NO_FENCING_TOKEN`], on which the suite's
//! token checks fail by design, so it runs through a test wrapper that numbers its grants in
//! the test process; every other check is Redlock's own.
//!
//! The single-server variants run the whole shared suite (`lock_core::conformance_suite!`)
//! against a real `redis-server` with a 2 s TTL/expiry (`tests/jedis_conformance.rs`,
//! `tests/token_conformance.rs`): every scenario passes. For [`JedisLock`] this rests on the
//! additions above (renewal, lost signal, fencing) and on the suite's clients sharing one
//! clock; with skewed clocks it fails mutual exclusion, which `tests/faults.rs` demonstrates.
//! The token lock also runs the whole suite on a secured server (default user off), every
//! contender connecting as an ACL user allowed exactly [`ACL_COMMANDS`] on its key prefix, with
//! tracking on (`tests/secured_conformance.rs`): every scenario passes; and on a TLS-only
//! server secured the same way, every contender connecting through a proxy of its own with a
//! `rediss://` URL, the test CA and the ACL user's credentials (`tests/tls.rs`): every scenario
//! passes.
//! Through Sentinel both run the whole suite too, on a master with 2 replicas and 3 Sentinels
//! (`tests/sentinel_conformance.rs`): every scenario passes. The suite does not fail a master
//! over, so what a failover does is tested on its own (above, "Findings").
//!
//! The reader-writer lock runs the reader-writer suite (`lock_core::rwlock_conformance_suite!`)
//! in both policies, and the semaphore the semaphore suite
//! (`lock_core::semaphore_conformance_suite!`), against a real `redis-server`
//! (`tests/rwlock_conformance.rs`, `tests/semaphore_conformance.rs`), on the secured server as
//! the ACL user allowed exactly [`ACL_COMMANDS`] (`tests/secured_conformance.rs`), and through
//! Sentinel (`tests/sentinel_conformance.rs`, FIFO): every scenario passes. Beyond the suites,
//! `tests/rwlock_policy.rs` and `tests/semaphore_queue.rs` check what the policies promise
//! (above, "The reader-writer lock and the semaphore"), that nothing stays on the server, and
//! that leases end by the server's clock.
//!
//! ## Example
//! ```no_run
//! use lock_core::Locker;
//! use lock_redis::{JedisConfig, RedisBackend, RedisConnectConfig, TokenConfig, Variant};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
//! // The seed's example: acquire timeout 10 s, expiry 30 s.
//! let jedis = backend.jedis("worker-1", JedisConfig::default())?;
//! let guard = jedis.acquire("lock.name").await?;
//! // ... do some stuff, passing guard.token() to storage that can fence ...
//! guard.release().await?;
//!
//! // The modern variant, as a trait object for a benchmark.
//! let locker = backend.locker("worker-2", Variant::Token(TokenConfig::new(Duration::from_secs(10))))?;
//! if let Some(guard) = locker.try_lock("invoice-42").await? {
//!     guard.release().await?;
//! }
//!
//! // As an ACL user, the password read from the environment (never printed).
//! use lock_core::secret::{Credentials, Secret};
//! let password = Secret::from_env("LOCKS_REDIS_PASSWORD").map_err(lock_core::LockError::Config)?;
//! let config = RedisConnectConfig {
//!     credentials: password.map(|p| Credentials::new("locker", p)),
//!     ..RedisConnectConfig::default()
//! };
//! let secured = RedisBackend::connect_with("redis://127.0.0.1:6379/", config).await?;
//! let guard = secured.token("worker-3", TokenConfig::default())?.lock("invoice-42", None).await?;
//! tokio::select! {
//!     lost = guard.lost() => eprintln!("stop: {lost}"), // at once if another client DELs the key
//!     _ = tokio::time::sleep(Duration::from_secs(1)) => guard.release().await?,
//! }
//!
//! // Over TLS: a private CA, and a client certificate for a server with tls-auth-clients yes.
//! use lock_core::tls::TlsFiles;
//! let config = RedisConnectConfig {
//!     tls: Some(TlsFiles::trusting("/etc/locks/ca.pem")
//!         .with_identity("/etc/locks/client.pem", "/etc/locks/client-key.pem")),
//!     ..RedisConnectConfig::default()
//! };
//! let over_tls = RedisBackend::connect_with("rediss://redis.internal:6380/", config).await?;
//! let guard = over_tls.token("worker-4", TokenConfig::default())?.lock("invoice-42", None).await?;
//! guard.release().await?;
//!
//! // The same locks on the master the Sentinels name, following its failovers.
//! let sentinels = ["127.0.0.1:26379".to_string(), "redis://127.0.0.1:26380/".to_string()];
//! let config = RedisConnectConfig::default();
//! let ha = RedisBackend::connect_sentinel(&sentinels, "mymaster", config).await?;
//! assert_eq!(ha.address(), "sentinel master 'mymaster' via 127.0.0.1:26379,127.0.0.1:26380");
//! let guard = ha.token("worker-3", TokenConfig::default())?.lock("invoice-42", None).await?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

/// [`Locker`] for a Redis lock (a struct with `owner`, `config.retry_interval` and
/// `async fn attempt(&self, lock_id) -> Result<Option<LockGuard>, LockError>`): `lock` repeats
/// `attempt` every retry interval until it wins or the timeout passes ([`poll_until`]),
/// `try_lock` makes one attempt.
macro_rules! polling_locker {
    ($lock:ty, $algorithm:literal) => {
        #[async_trait::async_trait]
        impl lock_core::Locker for $lock {
            fn algorithm(&self) -> &str {
                $algorithm
            }
            fn owner(&self) -> &str {
                &self.owner
            }
            async fn lock(
                &self,
                lock_id: &str,
                timeout: Option<std::time::Duration>,
            ) -> Result<lock_core::LockGuard, lock_core::LockError> {
                lock_core::lock::validate_id("lock id", lock_id)?;
                crate::poll_until(
                    lock_id,
                    timeout,
                    || self.config.retry_interval,
                    || self.attempt(lock_id),
                )
                .await
            }
            async fn try_lock(
                &self,
                lock_id: &str,
            ) -> Result<Option<lock_core::LockGuard>, lock_core::LockError> {
                lock_core::lock::validate_id("lock id", lock_id)?;
                self.attempt(lock_id).await
            }
        }
    };
}

mod attempt;
mod backend;
mod jedis;
mod keeper;
mod link;
mod queue;
mod redlock;
mod rwlock;
mod semaphore;
mod sentinel;
mod tls;
mod token;
mod tracking;
mod wire;

pub use backend::{RedisBackend, RedisConnectConfig, Variant, ACL_COMMANDS};
pub use jedis::{JedisConfig, JedisLock};
pub use lock_core::time::LocalClock;
pub use redlock::{RedisMasters, Redlock, RedlockConfig, RedlockVariant, NO_FENCING_TOKEN};
pub use rwlock::{RedisRwLock, RwLockConfig};
pub use semaphore::{RedisSemaphore, SemaphoreConfig};
pub use token::{TokenConfig, TokenLock};

use lock_core::lock::validate_id;
use lock_core::{BackendError, BackendErrorKind, LockError};
use redis::RedisError;
use std::fmt::Display;
use std::time::Duration;

/// The backend name in [`LockError::Backend`].
pub const BACKEND: &str = "redis";

/// The backend's error of `kind`, in the client's own words (no driver error to keep).
pub(crate) fn backend_err(kind: BackendErrorKind, message: impl Display) -> LockError {
    LockError::backend(BACKEND, kind, message.to_string())
}

/// The backend's error of `kind` reading `text`, which quotes the driver's error `driver`,
/// kept as the source: when `text` ends with `": {driver}"`, as
/// [`BackendError::context`], which [`BackendError::downcast_ref`] sees through; otherwise
/// (a refusal that explains the driver's words) as the source of a sentence.
pub(crate) fn said(kind: BackendErrorKind, text: String, driver: Option<RedisError>) -> LockError {
    let Some(driver) = driver else { return backend_err(kind, text) };
    let quoted = driver.to_string();
    let source = match text.strip_suffix(&quoted).and_then(|t| t.strip_suffix(": ")) {
        Some(what) => BackendError::context(what, driver),
        None => BackendError::new(Quoting { text, driver }),
    };
    LockError::backend(BACKEND, kind, source)
}

/// A sentence that quotes the driver's error inside it: reads as the sentence, and its source
/// is the driver's error.
#[derive(Debug)]
struct Quoting {
    text: String,
    driver: RedisError,
}

impl Display for Quoting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Quoting {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.driver)
    }
}

pub(crate) fn check_owner(owner: &str) -> Result<(), LockError> {
    validate_id("owner id", owner)
}

/// `attempt` until it wins: again after `retry()` while the lock is taken, and after a
/// backoff while the server fails transiently (a timeout, a lost connection:
/// [`lock_core::retry`]), until `timeout` passes. A last attempt is made at the deadline
/// itself, so a lock freed just before it is not missed. Then it reports
/// [`LockError::Timeout`] if the last attempt was answered, or the server's last error if it
/// was not; a final error (refused, invalid) ends it at once.
pub(crate) async fn poll_until<F, Fut, T>(
    lock_id: &str,
    timeout: Option<Duration>,
    mut retry: impl FnMut() -> Duration,
    mut attempt: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, LockError>>,
{
    let start = tokio::time::Instant::now();
    let deadline = timeout.map(|t| start + t);
    let mut retries = lock_core::retry::Retries::new(Default::default(), deadline);
    loop {
        let wait = match attempt().await {
            Ok(Some(won)) => return Ok(won),
            Ok(None) => {
                retries.answered();
                retry()
            }
            Err(e) => retries.failed(e, tokio::time::Instant::now())?,
        };
        let now = tokio::time::Instant::now();
        let wake = match deadline {
            Some(d) if now >= d => {
                return Err(LockError::Timeout {
                    lock_id: lock_id.to_string(),
                    waited: start.elapsed(),
                })
            }
            Some(d) => (now + wait).min(d),
            None => now + wait,
        };
        tokio::time::sleep_until(wake).await;
    }
}
