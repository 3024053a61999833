//! The requests this crate sends to etcd, named as etcd's API names them: a leaf module, so
//! that the session ([`crate::session`]) and the authentication ([`crate::auth`]) both report
//! them without importing each other.

use lock_core::requests::RequestHook;

/// The requests this crate sends to etcd, as etcd's API names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rpc {
    /// `KV.Txn`: step 1's create-or-get with the read of the first key; a semaphore's create
    /// with its size check; an election's proclamation, its leader read, its observer's read;
    /// the release of a key with its owner record.
    Txn,
    /// `KV.Range`: a read of the predecessor, or of our own key.
    Range,
    /// `KV.DeleteRange`: a release, or a key deleted after a timeout, refusal or lost answer.
    DeleteRange,
    /// `Watch.Watch`, the create request that opens a watch stream: on the predecessor while
    /// waiting, on our own key while holding.
    Watch,
    /// `Lease.LeaseTimeToLive`: whether our lease still stands, asked once our key was deleted
    /// under a holder, to say who deleted it.
    LeaseTimeToLive,
    /// `Auth.Authenticate`: a token for the configured user, at connect and when etcd refused
    /// the last one.
    Authenticate,
    /// `Lease.LeaseGrant`: a new session.
    LeaseGrant,
    /// One message on the `Lease.LeaseKeepAlive` stream: a renewal.
    LeaseKeepAlive,
    /// `Lease.LeaseRevoke`: a session given up.
    LeaseRevoke,
}

impl Rpc {
    /// The service it belongs to, as the request's target: `kv`, `watch`, `lease` or `auth`.
    pub(crate) fn service(self) -> &'static str {
        match self {
            Rpc::Txn | Rpc::Range | Rpc::DeleteRange => "kv",
            Rpc::Watch => "watch",
            Rpc::LeaseGrant | Rpc::LeaseKeepAlive | Rpc::LeaseRevoke | Rpc::LeaseTimeToLive => {
                "lease"
            }
            Rpc::Authenticate => "auth",
        }
    }

    /// Its name in etcd's API.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Rpc::Txn => "Txn",
            Rpc::Range => "Range",
            Rpc::DeleteRange => "DeleteRange",
            Rpc::Watch => "Watch",
            Rpc::LeaseTimeToLive => "LeaseTimeToLive",
            Rpc::Authenticate => "Authenticate",
            Rpc::LeaseGrant => "LeaseGrant",
            Rpc::LeaseKeepAlive => "LeaseKeepAlive",
            Rpc::LeaseRevoke => "LeaseRevoke",
        }
    }

    /// What it does for the lock, for error messages.
    pub(crate) fn what(self) -> &'static str {
        match self {
            Rpc::Txn => "create",
            Rpc::Range => "read",
            Rpc::DeleteRange => "delete",
            Rpc::Watch => "watch",
            Rpc::LeaseTimeToLive => "ask the lease of",
            Rpc::Authenticate => "authenticate for",
            Rpc::LeaseGrant => "grant a lease for",
            Rpc::LeaseKeepAlive => "keep alive the lease of",
            Rpc::LeaseRevoke => "revoke the lease of",
        }
    }

    /// Report this request, about to be sent, to `hook`.
    pub(crate) fn sent(self, hook: &RequestHook) {
        hook.sent(self.service(), self.name());
    }
}
