//! What a backend is told when it connects.

use crate::NodeAcl;
#[cfg(doc)]
use crate::ZkBackend;
use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use std::time::Duration;

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
