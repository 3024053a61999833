//! Each contender of a conformance suite behind proxies of its own, one per member of the
//! cluster (or one for a single server), so that cutting one contender off (its crash or
//! partition) leaves the others' connections alone, wherever its client connects.

use crate::proxy::Proxy;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

/// The proxies of every contender, by name, in front of the same upstream addresses.
pub struct ContenderProxies {
    upstream: Vec<SocketAddr>,
    by_name: Mutex<HashMap<String, Vec<Proxy>>>,
}

impl ContenderProxies {
    /// Contenders will reach `upstream` (the members' client addresses) through proxies.
    pub fn new(upstream: Vec<SocketAddr>) -> ContenderProxies {
        ContenderProxies { upstream, by_name: Mutex::default() }
    }

    /// New proxies for contender `name`, one per upstream address in order, and their
    /// addresses; a contender of the same name made before is cut off for good.
    pub async fn open(&self, name: &str) -> Vec<SocketAddr> {
        let mut proxies = Vec::new();
        for upstream in &self.upstream {
            proxies.push(Proxy::start(*upstream).await);
        }
        let addrs = proxies.iter().map(Proxy::addr).collect();
        let old =
            self.by_name.lock().unwrap_or_else(|e| e.into_inner()).insert(name.into(), proxies);
        old.iter().flatten().for_each(Proxy::cut);
        addrs
    }

    /// Cut contender `name` off: every connection through its proxies is closed and refused.
    pub fn cut(&self, name: &str) {
        if let Some(proxies) = self.by_name.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
            proxies.iter().for_each(Proxy::cut);
        }
    }
}
