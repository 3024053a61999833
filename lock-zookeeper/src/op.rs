//! The requests this crate sends to ZooKeeper, named as its protocol names them.

/// The requests this crate sends through a session, each with its name in ZooKeeper's protocol
/// and what it does for the lock (for error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `create` of our ephemeral sequential znode.
    Create,
    /// `create` of a lock directory or one of its parents (step 1), or of a semaphore's node
    /// with its size.
    Mkdir,
    /// `delete` of our znode.
    Delete,
    /// `getChildren` of a lock directory.
    List,
    /// `getChildren` setting a watch: of a semaphore's leases, or of an election without a
    /// leader.
    WatchChildren,
    /// `getData` of a znode (its stat: whose session made it).
    Read,
    /// `exists` of a znode, without a watch.
    Stat,
    /// `setData` of a leader's own znode: its proclamation.
    Proclaim,
    /// `getData` of an election's leader's znode, setting a watch on it: how an observer
    /// learns of the leader's proclamations and of its end.
    WatchData,
    /// `exists` setting a watch: of the predecessor, or of an election's missing directory.
    Watch,
    /// `exists` of the holder's own znode, setting a watch on it: how a holder learns that
    /// someone else deleted or rewrote it.
    Guard,
}

impl Op {
    /// Its name in ZooKeeper's protocol, as the request's command.
    pub(crate) fn request(self) -> &'static str {
        match self {
            Op::Create | Op::Mkdir => "create",
            Op::Delete => "delete",
            Op::List | Op::WatchChildren => "getChildren",
            Op::Read | Op::WatchData => "getData",
            Op::Proclaim => "setData",
            Op::Stat | Op::Watch | Op::Guard => "exists",
        }
    }

    /// What it does, for error messages.
    pub(crate) fn what(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Delete => "delete",
            Op::List => "list",
            Op::WatchChildren => "watch children",
            Op::Read => "read",
            Op::Stat => "stat",
            Op::Proclaim => "proclaim",
            Op::WatchData => "watch data",
            Op::Watch => "watch",
            Op::Guard => "watch own znode",
        }
    }
}

/// The target of the requests on znodes.
pub(crate) const ZNODES: &str = "znodes";
/// The target of the requests that open and close sessions.
pub(crate) const SESSIONS: &str = "session";
