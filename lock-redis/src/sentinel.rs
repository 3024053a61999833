//! Finding the master through Redis Sentinel: the part of a [`Link`](crate::link::Link)'s
//! connect attempt that decides *where* to connect, as Redis's "Sentinel client guidelines"
//! give it.
//!
//! 1. Ask the Sentinels in turn `SENTINEL get-master-addr-by-name <name>`, each bounded by
//!    the connect timeout; an error, a timeout or a nil reply moves on to the next.
//! 2. The first that answers with an address wins, and is asked first at the next attempt
//!    (it goes to the head of the list: it was reachable a moment ago).
//! 3. Connect to that address and ask `ROLE`: anything but `master` (a replica a stale
//!    Sentinel still names, a demoted master) fails the attempt; the link's backoff spaces the
//!    next one, which starts again at step 1.
//!
//! Not the driver's `sentinel` feature: it resolves once per connection it hands out, with
//! timeouts and retries of its own, where the link needs every attempt bounded by the
//! configured timeouts and followed by its own backoff.

use crate::attempt::{attempt_error, AttemptError};
use crate::wire::{quiet_client, Wire};
use lock_core::LockError;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};
use redis::{RedisError, Value};
use std::fmt::{self, Display};
use std::sync::Mutex;
use std::time::Duration;

/// The target of the commands to the Sentinels ([`crate::RedisConnectConfig::requests`]).
const SENTINEL: &str = "sentinel";

/// A Sentinel's address, `host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Addr {
    host: String,
    port: u16,
}

impl Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

impl Addr {
    /// `host:port` or `redis://host:port[/]` (IPv6 hosts in brackets).
    fn parse(text: &str) -> Result<Addr, LockError> {
        let bad = |why: &str| {
            LockError::Config(format!(
                "Sentinel address {text:?} {why}: expected host:port or redis://host:port"
            ))
        };
        let rest = text.strip_prefix("redis://").unwrap_or(text);
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        if host.is_empty() || host.contains(['/', '@', ' ']) {
            return Err(bad("has no usable host"));
        }
        let port =
            port.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad("has a bad port"))?;
        Ok(Addr { host: host.to_string(), port })
    }

    /// A client of this address: a Sentinel's (plain), or with `settings` the master's.
    fn client(&self, settings: Option<&RedisConnectionInfo>) -> Result<redis::Client, String> {
        let addr = ConnectionAddr::Tcp(self.host.clone(), self.port);
        let client = match settings {
            None => quiet_client(addr),
            Some(s) => addr
                .into_connection_info()
                .and_then(|info| redis::Client::open(info.set_redis_settings(s.clone()))),
        };
        client.map_err(|e| format!("{self}: {e}"))
    }
}

/// The Sentinels that watch one master, and whom to ask first.
pub(crate) struct Sentinels {
    name: String,
    /// The master's connection settings: credentials, protocol (the Sentinels are asked
    /// without them).
    master_settings: RedisConnectionInfo,
    /// In the order to ask them: the last one that named the master first.
    order: Mutex<Vec<Addr>>,
    /// `sentinel master '<name>' via <addr>,<addr>`, in the order given.
    description: String,
}

/// What one Sentinel said.
enum Answer {
    Master(Addr),
    Unknown,
}

impl Sentinels {
    /// The Sentinels at `addrs` (refused if empty or malformed) watching master `name`, which
    /// is connected to with `master_settings`.
    pub(crate) fn new(
        addrs: &[String],
        name: &str,
        master_settings: RedisConnectionInfo,
    ) -> Result<Sentinels, LockError> {
        if addrs.is_empty() {
            return Err(LockError::Config(format!(
                "no Sentinel addresses given for master '{name}'"
            )));
        }
        if name.is_empty() || name.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(LockError::Config(format!(
                "Sentinel master name {name:?} must be non-empty, without spaces or control \
                 characters"
            )));
        }
        let order = addrs.iter().map(|a| Addr::parse(a)).collect::<Result<Vec<_>, _>>()?;
        let list = order.iter().map(Addr::to_string).collect::<Vec<_>>().join(",");
        let description = format!("sentinel master '{name}' via {list}");
        Ok(Sentinels {
            name: name.to_string(),
            master_settings,
            order: Mutex::new(order),
            description,
        })
    }

    /// How many Sentinels there are.
    pub(crate) fn len(&self) -> usize {
        self.order.lock().unwrap().len()
    }

    /// How the backend names its address: `sentinel master '<name>' via <addrs>`.
    pub(crate) fn description(&self) -> &str {
        &self.description
    }

    /// Steps 1 and 2: the master's address and the Sentinel that named it.
    async fn resolve(
        &self,
        config: &AsyncConnectionConfig,
        timeout: Duration,
        wire: &Wire,
    ) -> Result<(Addr, Addr), AttemptError> {
        let order = self.order.lock().unwrap().clone();
        let mut failures = Vec::new();
        let mut unknown = 0;
        for sentinel in order {
            let answer = tokio::time::timeout(timeout, self.ask(&sentinel, config, wire)).await;
            match answer {
                Ok(Ok(Answer::Master(master))) => {
                    self.prefer(&sentinel);
                    return Ok((master, sentinel));
                }
                Ok(Ok(Answer::Unknown)) => {
                    unknown += 1;
                    failures.push(format!("{sentinel}: no such master"));
                }
                Ok(Err(e)) => failures.push(format!("{sentinel}: {e}")),
                Err(_) => failures.push(format!("{sentinel}: no answer within {timeout:?}")),
            }
        }
        if unknown == failures.len() {
            return Err(AttemptError::UnknownMaster(format!(
                "no Sentinel knows a master named '{}' (each answered nil)",
                self.name
            )));
        }
        Err(AttemptError::Failed(format!(
            "no Sentinel named an address for master '{}' ({})",
            self.name,
            failures.join("; ")
        )))
    }

    /// One Sentinel's `SENTINEL get-master-addr-by-name`, on a connection of its own (a
    /// resolution is rare: at the first connect and after a break), reported to `wire`.
    async fn ask(
        &self,
        sentinel: &Addr,
        config: &AsyncConnectionConfig,
        wire: &Wire,
    ) -> Result<Answer, String> {
        let client = sentinel.client(None)?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(config)
            .await
            .map_err(|e| e.to_string())?;
        wire.connected(client.get_connection_info().redis_settings());
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.name)
            .query_async(&mut wire.on(&mut conn))
            .await
            .map_err(|e| e.to_string())?;
        Ok(match reply {
            Some((host, port)) => Answer::Master(Addr { host, port }),
            None => Answer::Unknown,
        })
    }

    /// Put `sentinel` at the head of the list, the others in their order.
    fn prefer(&self, sentinel: &Addr) {
        let mut order = self.order.lock().unwrap();
        if let Some(i) = order.iter().position(|s| s == sentinel) {
            let s = order.remove(i);
            order.insert(0, s);
        }
    }

    /// The whole attempt, steps 1 to 3: a connection to an instance that says it is the master.
    /// Each Sentinel is asked with `sentinel`'s driver settings and bounded by its timeout; the
    /// master is connected with `master` (a tracking link's push callback) and the
    /// credentials; the caller bounds the whole. The master's commands are reported to `wire`,
    /// the Sentinels' under `sentinel`.
    pub(crate) async fn connect(
        &self,
        sentinel: (&AsyncConnectionConfig, Duration),
        master: &AsyncConnectionConfig,
        wire: &Wire,
    ) -> Result<MultiplexedConnection, AttemptError> {
        let (config, timeout) = sentinel;
        let (addr, sentinel) = self.resolve(config, timeout, &wire.to(SENTINEL)).await?;
        let named = |e: &dyn Display| format!("master {addr} (named by Sentinel {sentinel}): {e}");
        let refused = |e: RedisError, step: &str| match attempt_error(&e, step) {
            AttemptError::Refused(why) => AttemptError::Refused(named(&why)),
            _ => AttemptError::Failed(named(&e)),
        };
        let client = addr.client(Some(&self.master_settings))?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(master)
            .await
            .map_err(|e| refused(e, "the connection"))?;
        wire.connected(client.get_connection_info().redis_settings());
        let role: Vec<Value> = redis::cmd("ROLE")
            .query_async(&mut wire.on(&mut conn))
            .await
            .map_err(|e| refused(e, "ROLE"))?;
        match role.into_iter().next().map(redis::from_redis_value::<String>) {
            Some(Ok(r)) if r == "master" => Ok(conn),
            Some(Ok(r)) => Err(named(&format!("its ROLE is '{r}', not master")).into()),
            _ => Err(named(&"ROLE answered no role").into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_in_both_forms() {
        let a = Addr::parse("127.0.0.1:26379").unwrap();
        assert_eq!(a, Addr { host: "127.0.0.1".into(), port: 26379 });
        assert_eq!(Addr::parse("redis://127.0.0.1:26379/").unwrap(), a);
        assert_eq!(Addr::parse("redis://127.0.0.1:26379").unwrap(), a);
        assert_eq!(Addr::parse("[::1]:5").unwrap().to_string(), "[::1]:5");
        for bad in ["127.0.0.1", "redis://:5", "h:0", "h:x", "redis://u:p@h:1/"] {
            assert!(matches!(Addr::parse(bad), Err(LockError::Config(_))), "{bad}");
        }
    }

    #[test]
    fn the_master_is_reached_with_the_credentials_and_the_sentinels_without() {
        let settings = RedisConnectionInfo::default()
            .set_username("locker")
            .set_password("pw")
            .set_protocol(redis::ProtocolVersion::RESP3);
        let a = Addr::parse("127.0.0.1:1").unwrap();
        let master = a.client(Some(&settings)).unwrap();
        let info = master.get_connection_info().redis_settings();
        assert_eq!((info.username(), info.password()), (Some("locker"), Some("pw")));
        assert!(info.protocol().supports_resp3());
        let sentinel = a.client(None).unwrap();
        let info = sentinel.get_connection_info().redis_settings();
        assert_eq!((info.username(), info.password()), (None, None));
    }

    #[test]
    fn the_sentinel_that_answered_is_asked_first() {
        let list = ["a:1", "b:2", "c:3"].map(String::from);
        let s = Sentinels::new(&list, "m", RedisConnectionInfo::default()).unwrap();
        assert_eq!(s.description(), "sentinel master 'm' via a:1,b:2,c:3");
        s.prefer(&Addr::parse("c:3").unwrap());
        let order: Vec<String> = s.order.lock().unwrap().iter().map(Addr::to_string).collect();
        assert_eq!(order, ["c:3", "a:1", "b:2"]);
        let settings = RedisConnectionInfo::default;
        assert!(matches!(Sentinels::new(&[], "m", settings()), Err(LockError::Config(_))));
        assert!(matches!(Sentinels::new(&list, "", settings()), Err(LockError::Config(_))));
    }
}
