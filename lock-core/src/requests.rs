//! Counting the requests a backend sends to its server, for the backends whose client library
//! keeps no count of its own (Redis, ZooKeeper, etcd).
//!
//! Why a hook and not a counter: what one request *is* depends on the backend (a Redis command,
//! a ZooKeeper operation, an etcd RPC), and what is done with it depends on the caller (the
//! benchmark harness files each request under a table and a kind of its own; a test tallies
//! exact commands). So a backend takes a [`RequestHook`] in its connect settings and calls it
//! once for every request it puts on the wire, at the one place where it sends them, naming the
//! [`Request`]'s target and command. The default hook does nothing. [`RequestTally`] is the
//! plain counter behind a hook: a count per target and command.
//!
//! What counts as one request, in every backend: one message from the client that the server
//! must handle and answer. A command is one (a Lua script's `EVALSHA` is one, whatever the
//! script calls inside; a pipeline of N commands is N), an operation is one, an RPC is one, and
//! so is each message on a stream (an etcd lease keep-alive). A request that fails counts: it
//! loaded the server, or the network, all the same. What the server sends of its own accord (a
//! watch event) is not a request. Each backend's crate docs say which requests one grant costs,
//! and what its client sends that the backend cannot see (and therefore cannot count).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// One request a backend sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Where it went, as the backend names it: a server's role (`redis`, `sentinel`,
    /// `master-2`), or the part of the server's API it addresses (`kv`, `lease`, `znodes`).
    pub target: &'a str,
    /// The command or RPC, as the server's protocol names it (`SETNX`, `EVALSHA`, `create`,
    /// `getChildren`, `Txn`, `LeaseKeepAlive`).
    pub command: &'a str,
}

type Hook = dyn Fn(Request<'_>) + Send + Sync;

/// What a backend calls for every request it sends (see the module docs). Cheap to clone;
/// clones call the same function. The default calls nothing.
#[derive(Clone, Default)]
pub struct RequestHook(Option<Arc<Hook>>);

impl RequestHook {
    /// A hook that calls `f` once per request.
    pub fn new(f: impl Fn(Request<'_>) + Send + Sync + 'static) -> RequestHook {
        RequestHook(Some(Arc::new(f)))
    }

    /// A hook that counts nothing (the default).
    pub fn none() -> RequestHook {
        RequestHook(None)
    }

    /// True when requests are reported to a function.
    pub fn is_counting(&self) -> bool {
        self.0.is_some()
    }

    /// Report one request of `command` sent to `target`.
    pub fn sent(&self, target: &str, command: &str) {
        if let Some(f) = &self.0 {
            f(Request { target, command });
        }
    }
}

impl fmt::Debug for RequestHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_counting() { "RequestHook(counting)" } else { "RequestHook(none)" })
    }
}

/// A count of requests per target and command, fed by its [`RequestTally::hook`].
#[derive(Debug, Default)]
pub struct RequestTally {
    counts: Mutex<BTreeMap<(String, String), u64>>,
}

impl RequestTally {
    /// An empty tally, shared.
    pub fn new() -> Arc<RequestTally> {
        Arc::new(RequestTally::default())
    }

    /// A hook that counts into this tally.
    pub fn hook(self: &Arc<Self>) -> RequestHook {
        let me = Arc::clone(self);
        RequestHook::new(move |r| me.count(r))
    }

    /// Count one request.
    pub fn count(&self, r: Request<'_>) {
        let mut counts = self.lock();
        match counts.iter_mut().find(|((t, c), _)| t == r.target && c == r.command) {
            Some((_, n)) => *n += 1,
            None => {
                counts.insert((r.target.to_string(), r.command.to_string()), 1);
            }
        }
    }

    /// Requests of `command` sent to `target`.
    pub fn of(&self, target: &str, command: &str) -> u64 {
        self.lock().iter().find(|((t, c), _)| t == target && c == command).map_or(0, |(_, n)| *n)
    }

    /// Requests of any command sent to `target`.
    pub fn to(&self, target: &str) -> u64 {
        self.lock().iter().filter(|((t, _), _)| t == target).map(|(_, n)| n).sum()
    }

    /// Every request.
    pub fn total(&self) -> u64 {
        self.lock().values().sum()
    }

    /// The counts, by (target, command).
    pub fn counts(&self) -> BTreeMap<(String, String), u64> {
        self.lock().clone()
    }

    /// Forget every count.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), u64>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_what_its_hooks_report_and_the_default_hook_nothing() {
        let tally = RequestTally::new();
        let (hook, twin) = (tally.hook(), tally.hook().clone());
        hook.sent("redis", "SETNX");
        twin.sent("redis", "SETNX");
        hook.sent("sentinel", "SENTINEL");
        RequestHook::default().sent("redis", "DEL");
        assert!(hook.is_counting() && !RequestHook::none().is_counting());
        assert_eq!((tally.of("redis", "SETNX"), tally.of("redis", "DEL")), (2, 0));
        assert_eq!((tally.to("redis"), tally.to("sentinel"), tally.total()), (2, 1, 3));
        assert_eq!(tally.counts().len(), 2);
        tally.reset();
        assert_eq!(tally.total(), 0);
        assert_eq!(format!("{hook:?}"), "RequestHook(counting)");
    }
}
