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

use crate::attempt::{AttemptError, Said};
use crate::tls::{connect_error, Transport};
use crate::wire::{quiet, Wire};
use lock_core::{BackendErrorKind, LockError};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, IntoConnectionInfo, RedisConnectionInfo};
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
    /// `host:port`, `redis://host:port[/]` or `rediss://host:port[/]` (IPv6 hosts in
    /// brackets), and whether the scheme asks for TLS (`None`: no scheme).
    fn parse(text: &str) -> Result<(Addr, Option<bool>), LockError> {
        let bad = |why: &str| {
            LockError::Config(format!(
                "Sentinel address {text:?} {why}: expected host:port, redis://host:port or \
                 rediss://host:port"
            ))
        };
        let (rest, tls) = match (text.strip_prefix("rediss://"), text.strip_prefix("redis://")) {
            (Some(rest), _) => (rest, Some(true)),
            (None, Some(rest)) => (rest, Some(false)),
            (None, None) => (text, None),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        if host.is_empty() || host.contains(['/', '@', ' ']) {
            return Err(bad("has no usable host"));
        }
        let port =
            port.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad("has a bad port"))?;
        Ok((Addr { host: host.to_string(), port }, tls))
    }

    /// A client of this address, over TLS when `tls` (with `transport`'s certificates): a
    /// Sentinel's (no credentials), or with `settings` the master's.
    fn client(
        &self,
        settings: Option<&RedisConnectionInfo>,
        transport: &Transport,
        tls: bool,
    ) -> Result<redis::Client, String> {
        let settings = settings.cloned().unwrap_or_else(quiet);
        Transport::addr(&self.host, self.port, tls)
            .into_connection_info()
            .map_err(|e| e.to_string())
            .and_then(|info| transport.client(info.set_redis_settings(settings)))
            .map_err(|e| format!("{self}: {e}"))
    }
}

/// The Sentinels that watch one master, and whom to ask first.
pub(crate) struct Sentinels {
    name: String,
    /// The master's connection settings: credentials, protocol (the Sentinels are asked
    /// without them).
    master_settings: RedisConnectionInfo,
    /// How the Sentinels and the master are reached: over TLS when `tls`.
    transport: Transport,
    tls: bool,
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
    /// is connected to with `master_settings`. The Sentinels and the master are reached over
    /// TLS when `transport` has TLS set or the addresses are `rediss://` (refused if some
    /// addresses say `redis://` then).
    pub(crate) fn new(
        addrs: &[String],
        name: &str,
        master_settings: RedisConnectionInfo,
        transport: Transport,
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
        let parsed = addrs.iter().map(|a| Addr::parse(a)).collect::<Result<Vec<_>, _>>()?;
        let schemes: Vec<bool> = parsed.iter().filter_map(|(_, tls)| *tls).collect();
        let tls = transport.configured() || schemes.contains(&true);
        if tls && schemes.contains(&false) {
            return Err(LockError::Config(format!(
                "Sentinel addresses {addrs:?} mix redis:// with TLS ({}): give every Sentinel \
                 as rediss:// or host:port",
                match transport.configured() {
                    true => "RedisConnectConfig::tls is set",
                    false => "rediss://",
                }
            )));
        }
        let order: Vec<Addr> = parsed.into_iter().map(|(addr, _)| addr).collect();
        let list = order.iter().map(Addr::to_string).collect::<Vec<_>>().join(",");
        let description = format!("sentinel master '{name}' via {list}");
        Ok(Sentinels {
            name: name.to_string(),
            master_settings,
            transport,
            tls,
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
        let (mut unknown, mut refused, mut timed_out) = (0, 0, 0);
        for sentinel in order {
            let ask = self.ask(&sentinel, config, wire, timeout);
            let answer = tokio::time::timeout(timeout, ask).await;
            match answer {
                Ok(Ok(Answer::Master(master))) => {
                    self.prefer(&sentinel);
                    return Ok((master, sentinel));
                }
                Ok(Ok(Answer::Unknown)) => {
                    unknown += 1;
                    failures.push(format!("{sentinel}: no such master"));
                }
                Ok(Err(e)) => {
                    refused += matches!(e, AttemptError::Refused(_)) as usize;
                    let timeout = BackendErrorKind::Timeout;
                    timed_out +=
                        matches!(&e, AttemptError::Failed(s) if s.kind == timeout) as usize;
                    failures.push(format!("{sentinel}: {e}"));
                }
                Err(_) => {
                    timed_out += 1;
                    failures.push(format!("{sentinel}: no answer within {timeout:?}"));
                }
            }
        }
        if unknown == failures.len() {
            return Err(AttemptError::UnknownMaster(format!(
                "no Sentinel knows a master named '{}' (each answered nil)",
                self.name
            )));
        }
        let message = format!(
            "no Sentinel named an address for master '{}' ({})",
            self.name,
            failures.join("; ")
        );
        // Every Sentinel refused the handshake: nothing changes by asking again soon.
        if refused == failures.len() {
            return Err(AttemptError::Refused(Said::own(BackendErrorKind::Refused, message)));
        }
        let kind = match timed_out == failures.len() {
            true => BackendErrorKind::Timeout,
            false => BackendErrorKind::Unavailable,
        };
        Err(AttemptError::Failed(Said::own(kind, message)))
    }

    /// One Sentinel's `SENTINEL get-master-addr-by-name`, on a connection of its own (a
    /// resolution is rare: at the first connect and after a break), reported to `wire`.
    async fn ask(
        &self,
        sentinel: &Addr,
        config: &AsyncConnectionConfig,
        wire: &Wire,
        timeout: Duration,
    ) -> Result<Answer, AttemptError> {
        let client = sentinel.client(None, &self.transport, self.tls)?;
        let conn = client.get_multiplexed_async_connection_with_config(config).await;
        let mut conn = match conn {
            Ok(conn) => conn,
            Err(e) => return Err(connect_error(&e, "the connection", &client, timeout).await),
        };
        wire.connected(client.get_connection_info().redis_settings());
        let reply = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.name)
            .query_async(&mut wire.on(&mut conn))
            .await;
        let reply: Option<(String, u16)> = match reply {
            Ok(reply) => reply,
            Err(e) => return Err(connect_error(&e, "SENTINEL", &client, timeout).await),
        };
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
        let client = addr.client(Some(&self.master_settings), &self.transport, self.tls)?;
        let refused =
            async |e: RedisError, step: &str| match connect_error(&e, step, &client, timeout).await
            {
                AttemptError::Refused(why) => AttemptError::Refused(why.map(|w| named(&w))),
                _ => AttemptError::Failed(Said::driver(&e).map(|w| named(&w))),
            };
        let conn = client.get_multiplexed_async_connection_with_config(master).await;
        let mut conn = match conn {
            Ok(conn) => conn,
            Err(e) => return Err(refused(e, "the connection").await),
        };
        wire.connected(client.get_connection_info().redis_settings());
        let role = redis::cmd("ROLE").query_async(&mut wire.on(&mut conn)).await;
        let role: Vec<Value> = match role {
            Ok(role) => role,
            Err(e) => return Err(refused(e, "ROLE").await),
        };
        match role.into_iter().next().map(redis::from_redis_value::<String>) {
            Some(Ok(r)) if r == "master" => Ok(conn),
            Some(Ok(r)) => Err(named(&format!("its ROLE is '{r}', not master")).into()),
            _ => {
                let odd = named(&"ROLE answered no role");
                Err(AttemptError::Failed(Said::own(BackendErrorKind::Protocol, odd)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_in_every_form() {
        let a = Addr { host: "127.0.0.1".into(), port: 26379 };
        assert_eq!(Addr::parse("127.0.0.1:26379").unwrap(), (a.clone(), None));
        assert_eq!(Addr::parse("redis://127.0.0.1:26379/").unwrap(), (a.clone(), Some(false)));
        assert_eq!(Addr::parse("redis://127.0.0.1:26379").unwrap(), (a.clone(), Some(false)));
        assert_eq!(Addr::parse("rediss://127.0.0.1:26379/").unwrap(), (a, Some(true)));
        assert_eq!(Addr::parse("[::1]:5").unwrap().0.to_string(), "[::1]:5");
        for bad in ["127.0.0.1", "redis://:5", "h:0", "h:x", "redis://u:p@h:1/", "rediss://h"] {
            assert!(matches!(Addr::parse(bad), Err(LockError::Config(_))), "{bad}");
        }
    }

    #[test]
    fn the_master_is_reached_with_the_credentials_and_the_sentinels_without() {
        let settings = RedisConnectionInfo::default()
            .set_username("locker")
            .set_password("pw")
            .set_protocol(redis::ProtocolVersion::RESP3);
        let (a, _) = Addr::parse("127.0.0.1:1").unwrap();
        let plain = Transport::plain();
        let master = a.client(Some(&settings), &plain, false).unwrap();
        let info = master.get_connection_info().redis_settings();
        assert_eq!((info.username(), info.password()), (Some("locker"), Some("pw")));
        assert!(info.protocol().supports_resp3());
        let sentinel = a.client(None, &plain, false).unwrap();
        let info = sentinel.get_connection_info().redis_settings();
        assert_eq!((info.username(), info.password()), (None, None));
        // Over TLS, both: the same settings, a TLS address.
        let master = a.client(Some(&settings), &plain, true).unwrap();
        let tls =
            matches!(master.get_connection_info().addr(), redis::ConnectionAddr::TcpTls { .. });
        assert!(tls, "{:?}", master.get_connection_info().addr());
        let sentinel = a.client(None, &plain, true).unwrap();
        let tls =
            matches!(sentinel.get_connection_info().addr(), redis::ConnectionAddr::TcpTls { .. });
        assert!(tls, "{:?}", sentinel.get_connection_info().addr());
    }

    #[test]
    fn rediss_sentinels_speak_tls_and_schemes_do_not_mix() {
        let settings = RedisConnectionInfo::default;
        let tls = ["rediss://a:1".to_string(), "b:2".to_string()];
        assert!(Sentinels::new(&tls, "m", settings(), Transport::plain()).unwrap().tls);
        let plain = ["redis://a:1".to_string(), "b:2".to_string()];
        assert!(!Sentinels::new(&plain, "m", settings(), Transport::plain()).unwrap().tls);
        let mixed = ["rediss://a:1".to_string(), "redis://b:2".to_string()];
        let Err(LockError::Config(e)) = Sentinels::new(&mixed, "m", settings(), Transport::plain())
        else {
            panic!("mixed schemes accepted")
        };
        assert!(e.contains("mix redis:// with TLS"), "{e}");
    }

    #[test]
    fn the_sentinel_that_answered_is_asked_first() {
        let list = ["a:1", "b:2", "c:3"].map(String::from);
        let plain = Transport::plain;
        let s = Sentinels::new(&list, "m", RedisConnectionInfo::default(), plain()).unwrap();
        assert_eq!(s.description(), "sentinel master 'm' via a:1,b:2,c:3");
        s.prefer(&Addr::parse("c:3").unwrap().0);
        let order: Vec<String> = s.order.lock().unwrap().iter().map(Addr::to_string).collect();
        assert_eq!(order, ["c:3", "a:1", "b:2"]);
        let settings = RedisConnectionInfo::default;
        let none = Sentinels::new(&[], "m", settings(), plain());
        assert!(matches!(none, Err(LockError::Config(_))));
        assert!(matches!(
            Sentinels::new(&list, "", settings(), plain()),
            Err(LockError::Config(_))
        ));
    }
}
