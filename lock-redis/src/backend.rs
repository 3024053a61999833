//! The connection to one Redis server, or to the master Redis Sentinel names, and its
//! configuration: what every lock of the crate is made from.

use crate::attempt;
use crate::link::{Conn, Identity, Link, Target};
use crate::sentinel::Sentinels;
use crate::tls::Transport;
use crate::tracking::Tracker;
use crate::wire::Wire;
use crate::{backend_err, said, JedisConfig, JedisLock, TokenConfig, TokenLock};
use crate::{RedisRwLock, RedisSemaphore, RwLockConfig, SemaphoreConfig};
use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use lock_core::tls::TlsFiles;
use lock_core::{BackendErrorKind, LockError, Locker};
use redis::{IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo, RedisError};
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

/// The target of the commands to the server, or to the master the Sentinels name
/// ([`RedisConnectConfig::requests`]).
const SERVER: &str = "redis";
/// How [`RedisBackend::connect_with`] connects, and how it names keys.
#[derive(Debug, Clone)]
pub struct RedisConnectConfig {
    /// Longest wait for the TCP connection and the first `PING` (default 5 s); through
    /// Sentinel, also for each Sentinel's answer.
    pub connect_timeout: Duration,
    /// Longest wait for any reply (default 2 s). A command without a reply in time fails with
    /// [`LockError::Backend`]; renewal retries it while the lease is still valid.
    pub response_timeout: Duration,
    /// Prepended to every lock id to form its key (default `"lock:"`), so that several
    /// benchmarks or tests can share one server without seeing each other's keys.
    pub key_prefix: String,
    /// The longest wait between two reconnect attempts while the server is unreachable
    /// (default 1 s). The first retry comes 50 ms after a failed attempt and the delay doubles
    /// up to this; between attempts requests fail at once with [`LockError::Backend`].
    pub max_reconnect_delay: Duration,
    /// Where each command the backend sends is reported (default: nowhere): under `redis` the
    /// server's (or the master's), under `sentinel` the Sentinels', under `master-<i>` those of
    /// Redlock's master `i`. The crate docs ("Requests per grant") say what one grant costs.
    pub requests: RequestHook,
    /// The Redis ACL user to connect as (default: none). When set it is used instead of any
    /// `user:password@` in the URL; through Sentinel it is the master's (the Sentinels are
    /// asked without credentials). Messages name the user, never the password. The crate docs
    /// ("ACL users") say what the user must be allowed.
    pub credentials: Option<Credentials>,
    /// Whether a token-lock holder is told at once when another client changes or deletes its
    /// key (default `true`): the connection speaks RESP3 and is armed with `CLIENT TRACKING ON
    /// NOLOOP` (Redis 6 or later, and the `client|tracking` command for an ACL user). Off, the
    /// holder learns it at its next renewal, and the connection speaks RESP2. The crate docs
    /// ("Told Lost at once") give the protocol and its cost. Redlock's masters never track.
    pub tracking: bool,
    /// The files of TLS (default: none): the CA to trust instead of the system's roots, and the
    /// client's certificate and key for a server that asks for one (mutual TLS). A `rediss://`
    /// URL speaks TLS with or without it (without: the system's roots, no client certificate);
    /// set, a `redis://` URL is refused, and through Sentinel the Sentinels and the master are
    /// reached over TLS. The files are read when the backend is made: a missing one is a
    /// [`LockError::Config`] naming it. The crate docs ("TLS") say what each error means.
    pub tls: Option<TlsFiles>,
}

impl Default for RedisConnectConfig {
    fn default() -> Self {
        RedisConnectConfig {
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(2),
            key_prefix: "lock:".into(),
            max_reconnect_delay: Duration::from_secs(1),
            requests: RequestHook::none(),
            credentials: None,
            tracking: true,
            tls: None,
        }
    }
}

/// The ACL command rules a Redis user needs for every lock of this crate, Sentinel and
/// tracking included: `ACL SETUSER <user> on ><password> ~<key prefix>*` followed by these
/// (`tests/security.rs` runs the locks on a user with exactly these). The scripts' inner
/// commands (`SET`, `GET`, `INCR`, `PEXPIRE`, `DEL`; for the reader-writer lock and the
/// semaphore also `TIME`, their sorted-set and hash commands, `INCRBY` and `PEXPIREAT`) are
/// checked against the user's ACL too, and so are their keys: the key pattern must cover
/// `<key prefix>*`. `HELLO` and `AUTH` need no rule.
pub const ACL_COMMANDS: &str = "-@all +ping +role +client|tracking +evalsha +script|load +get \
                                +set +setnx +getset +incr +pexpire +del +time +incrby \
                                +pexpireat +zadd +zrem +zrange +zrangebyscore +zscore +zcard \
                                +hget +hset +hdel";

/// Which Redis lock a [`RedisBackend::locker`] runs.
#[derive(Debug, Clone)]
pub enum Variant {
    /// The jedis-lock algorithm of seed 001.
    Jedis(JedisConfig),
    /// The token lock (`SET NX PX` + Lua).
    Token(TokenConfig),
}

/// One connection to a Redis server, or to the master Redis Sentinel names, from which
/// lockers are made.
///
/// All lockers made from one backend share its multiplexed connection; give each contender of
/// a benchmark its own backend when they must fail independently. A broken connection (a server
/// restart, a reset) is re-established by the backend itself: requests fail with
/// [`LockError::Backend`] while the server cannot be reached, within the connect and response
/// timeouts and at once between reconnect attempts, and succeed again once it answers. See the
/// crate docs, "Server outages and restarts", for what holders and waiters see, and "Through
/// Redis Sentinel" for a backend that follows failovers.
#[derive(Clone)]
pub struct RedisBackend {
    link: Arc<Link>,
    addr: Arc<str>,
    prefix: Arc<str>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("addr", &self.addr)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// The URL with any password replaced, fit for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

impl RedisBackend {
    /// Connect to `url` (`redis://host:port/[db]`, or `redis://user:password@host:port/` as an
    /// ACL user; `rediss://` for TLS, trusting the system's roots) with the default
    /// [`RedisConnectConfig`].
    /// An unreachable server fails within about 5 s with a [`LockError::Backend`] naming the
    /// address.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::connect_with(url, RedisConnectConfig::default()).await
    }

    /// Connect to `url` with `config`. Refused credentials or permissions fail at once with a
    /// [`LockError::Backend`] naming the server and the user (the crate docs, "ACL users"), and
    /// so does a refused TLS handshake (the crate docs, "TLS").
    pub async fn connect_with(url: &str, config: RedisConnectConfig) -> Result<Self, LockError> {
        Self::connect_as(url, config, SERVER).await
    }

    /// [`RedisBackend::connect_with`], its commands reported under `target`.
    pub(crate) async fn connect_as(
        url: &str,
        config: RedisConnectConfig,
        target: &str,
    ) -> Result<Self, LockError> {
        let (client, identity, addr) = Self::client(url, &config)?;
        let wire = Wire::new(config.requests.clone(), target);
        let link = Link::connect(Target::Fixed(client), &config, identity, addr.clone(), wire);
        Ok(Self::on(link.await?, addr, &config))
    }

    /// Find the master `master_name` through the Sentinels at `sentinels` (each `host:port`
    /// or `redis://host:port[/]`; `rediss://host:port[/]` for TLS), connect to it, and follow
    /// failovers.
    ///
    /// Every connection, the first and every one after a break, is made to the address the
    /// Sentinels give at that moment and checked with `ROLE`; the crate docs ("Through Redis
    /// Sentinel") give the steps and what a failover does to locks. An empty or malformed
    /// list, or a name that every Sentinel answers it does not know, is a
    /// [`LockError::Config`]; no Sentinel reachable, or no master where they point, a
    /// [`LockError::Backend`] naming them, within one connect timeout per Sentinel plus the
    /// master's connect and response timeouts. [`RedisBackend::address`] reads
    /// `sentinel master '<name>' via <host:port>,<host:port>`. The master is connected to
    /// with [`RedisConnectConfig::credentials`], in database 0.
    pub async fn connect_sentinel(
        sentinels: &[String],
        master_name: &str,
        config: RedisConnectConfig,
    ) -> Result<RedisBackend, LockError> {
        check_timeouts(&config)?;
        let transport = Transport::new(&config)?;
        let settings = settings(RedisConnectionInfo::default(), &config);
        let identity = identity(&settings, &config);
        let sentinels = Sentinels::new(sentinels, master_name, settings, transport)?;
        let addr: Arc<str> = sentinels.description().into();
        let wire = Wire::new(config.requests.clone(), SERVER);
        let target = Target::Sentinel(sentinels);
        let link = Link::connect(target, &config, identity, addr.clone(), wire).await?;
        Ok(Self::on(link, addr, &config))
    }

    /// A backend for `url` that connects at its first request (a Redlock master that is down
    /// when the lock starts); a bad URL or setting is still refused at once.
    pub(crate) fn unconnected(
        url: &str,
        config: RedisConnectConfig,
        target: &str,
    ) -> Result<Self, LockError> {
        let (client, identity, addr) = Self::client(url, &config)?;
        let wire = Wire::new(config.requests.clone(), target);
        let link = Link::unconnected(Target::Fixed(client), &config, identity, addr.clone(), wire);
        Ok(Self::on(link, addr, &config))
    }

    fn on(link: Arc<Link>, addr: Arc<str>, config: &RedisConnectConfig) -> Self {
        RedisBackend { link, addr, prefix: config.key_prefix.as_str().into() }
    }

    /// The driver's client for `url` with the config's credentials, protocol and TLS files,
    /// who it connects as, and the URL fit for messages.
    fn client(
        url: &str,
        config: &RedisConnectConfig,
    ) -> Result<(redis::Client, Identity, Arc<str>), LockError> {
        let addr = redact(url);
        check_timeouts(config)?;
        let transport = Transport::new(config)?;
        let invalid = |e: &dyn Display| LockError::Config(format!("invalid Redis URL {addr}: {e}"));
        let info = url.into_connection_info().map_err(|e| invalid(&e))?;
        let settings = settings(info.redis_settings().clone(), config);
        let identity = identity(&settings, config);
        let client =
            transport.client(info.set_redis_settings(settings)).map_err(|e| invalid(&e))?;
        Ok((client, identity, addr.into()))
    }

    /// How many connections this backend has made to the server: 1 after `connect`, one more
    /// for every reconnection after a broken connection (through Sentinel, to whichever master
    /// the Sentinels named; connections to the Sentinels are not counted).
    pub fn connections_made(&self) -> u64 {
        self.link.connects()
    }

    /// The server's address (password redacted), or through Sentinel
    /// `sentinel master '<name>' via <host:port>,<host:port>`.
    pub fn address(&self) -> &str {
        &self.addr
    }

    /// A [`JedisLock`] for `owner`.
    pub fn jedis(&self, owner: &str, config: JedisConfig) -> Result<JedisLock, LockError> {
        JedisLock::new(self.clone(), owner, config)
    }

    /// A [`TokenLock`] for `owner`.
    pub fn token(&self, owner: &str, config: TokenConfig) -> Result<TokenLock, LockError> {
        TokenLock::new(self.clone(), owner, config)
    }

    /// A [`RedisRwLock`] for `owner`.
    pub fn rwlock(&self, owner: &str, config: RwLockConfig) -> Result<RedisRwLock, LockError> {
        RedisRwLock::new(self.clone(), owner, config)
    }

    /// A [`RedisSemaphore`] for `owner`.
    pub fn semaphore(
        &self,
        owner: &str,
        config: SemaphoreConfig,
    ) -> Result<RedisSemaphore, LockError> {
        RedisSemaphore::new(self.clone(), owner, config)
    }

    /// A locker of either variant, as the benchmark harness takes it.
    pub fn locker(&self, owner: &str, variant: Variant) -> Result<Arc<dyn Locker>, LockError> {
        Ok(match variant {
            Variant::Jedis(c) => Arc::new(self.jedis(owner, c)?),
            Variant::Token(c) => Arc::new(self.token(owner, c)?),
        })
    }

    /// The key of `lock_id`.
    pub fn key(&self, lock_id: &str) -> String {
        format!("{}{lock_id}", self.prefix)
    }

    /// The key of `lock_id`'s fencing counter.
    pub fn fence_key(&self, lock_id: &str) -> String {
        format!("{}{lock_id}/fence", self.prefix)
    }

    /// A connection for one request (re-established if it broke), or a [`LockError::Backend`].
    pub(crate) async fn conn(&self) -> Result<Conn, LockError> {
        self.link.get().await
    }

    /// The holders' bells, when the backend's connections track keys.
    pub(crate) fn tracker(&self) -> Option<&Arc<Tracker>> {
        self.link.tracker()
    }

    /// The error of `what` on `key`, the driver's error `e` kept as its source: a refusal by
    /// the server's ACL names the user and what the user must be allowed.
    pub(crate) fn err(&self, what: &str, key: &str, e: RedisError) -> LockError {
        match attempt::refusal(&e, "it") {
            Some(why) => said(
                BackendErrorKind::Refused,
                format!(
                    "{what} {key} at {} {}: {why}; the user's key pattern must cover '{}*' and \
                     its commands include lock_redis::ACL_COMMANDS",
                    self.addr,
                    self.link.who(),
                    self.prefix
                ),
                Some(e),
            ),
            None => {
                said(attempt::kind_of(&e), format!("{what} {key} at {}: {e}", self.addr), Some(e))
            }
        }
    }

    /// The error of `what` on `key`, said by `e`: the client's own finding, of `kind`.
    pub(crate) fn err_text(
        &self,
        kind: BackendErrorKind,
        what: &str,
        key: &str,
        e: impl Display,
    ) -> LockError {
        backend_err(kind, format!("{what} {key} at {}: {e}", self.addr))
    }
}

/// The driver's settings from the URL's `base`: [`RedisConnectConfig::credentials`] over the
/// URL's, RESP3 for tracking, and no `CLIENT SETINFO` ([`wire::quiet`] says why).
fn settings(base: RedisConnectionInfo, config: &RedisConnectConfig) -> RedisConnectionInfo {
    let mut settings = base.set_skip_set_lib_name();
    if let Some(c) = &config.credentials {
        settings = settings.set_username(&c.user).set_password(c.password.expose());
    }
    if config.tracking {
        settings = settings.set_protocol(ProtocolVersion::RESP3);
    }
    settings
}

/// Who connections with `settings` connect as, for messages: a user name never hides a
/// password, and the password is never part of it.
fn identity(settings: &RedisConnectionInfo, config: &RedisConnectConfig) -> Identity {
    let who = match (settings.username(), settings.password()) {
        (Some(user), _) => format!("as user '{user}'"),
        (None, Some(_)) => "as user 'default' (a password without a user name)".to_string(),
        (None, None) => "without credentials".to_string(),
    };
    Identity { who, tracking: config.tracking }
}

pub(crate) fn check_timeouts(config: &RedisConnectConfig) -> Result<(), LockError> {
    if config.connect_timeout.is_zero() || config.response_timeout.is_zero() {
        return Err(LockError::Config(
            "Redis connect and response timeouts must be positive".into(),
        ));
    }
    Ok(())
}
