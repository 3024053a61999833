//! Who may touch the znodes a lock creates.

use crate::ZkConfig;
use lock_core::LockError;
use zookeeper_client as zk;

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
    pub(crate) fn acls(&self) -> zk::Acls<'_> {
        match self {
            NodeAcl::Open => zk::Acls::anyone_all(),
            NodeAcl::Creator => zk::Acls::creator_all(),
            NodeAcl::Given(list) => zk::Acls::from(list.as_slice()),
        }
    }
}

/// The ACL `config` asks for, checked against its credentials.
pub(crate) fn node_acl(config: &ZkConfig) -> Result<NodeAcl, LockError> {
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
