//! `--faults FAULTS`: what to break, for how long, how often.
//!
//! FAULTS is a comma-separated list of `KIND:DURATION@PERIOD[/key=value...]`: a fault of KIND
//! lasts DURATION and starts every PERIOD, the first time at an offset drawn from the run's
//! seed in `[0, PERIOD)`. Some kinds take options after a `/`:
//!
//! - `replica-lag:5s@15s/lag=1s/drop=0.1`: how late the overloaded replica applies mutations
//!   (default 1 s) and which fraction it drops (default 0.1);
//! - `ring-loss:5s@15s/drop=0.5/lag=20ms`: the fraction of queue-push's doorbell rings lost
//!   (default 1: all) and the extra delay of the others (default none);
//! - `crash:2s@8s/who=holder`: the contender that dies holds a lock when one does (an
//!   election's leader); by default (`who=any`) any contender;
//! - `clock-jump:5s@20s`: DURATION is also the size of the jump (forwards or backwards, drawn
//!   from the seed); the clock steps back after DURATION, as NTP would correct it.
//!
//! `silent-partition:6s@10s` cuts one contender off without a word: its connections stay
//! open, nothing it sends arrives and nothing comes back until healed (then what was held
//! arrives, as TCP's retransmissions deliver it after a short outage), and it works on
//! meanwhile; a `partition` closes its connections instead, which its client notices at once.
//!
//! `stranger:1s@10s` hits the server's clients: once per PERIOD, as soon as someone holds, a
//! client of its own with no credentials deletes the holder's key or znode (DURATION only
//! spaces the faults). On an open server the next waiter is then granted while the holder
//! works; on a secured one (`--zookeeper-user`, `--etcd-user`, `--redis-user`) it is refused.
//!
//! `terminate:1s@5s` is the same moment for an administrator: once per PERIOD, as soon as
//! someone holds, a client logged in as the server's administrator ends the sessions holding
//! the run's locks (PostgreSQL's `pg_terminate_backend`, MariaDB's `KILL CONNECTION`), which
//! frees the locks; DURATION only spaces the faults. The administrator is the superuser of the
//! server the harness starts, or on the user's server the one `--postgres-admin-user` or
//! `--mariadb-admin-user` names.
//!
//! The member faults hit one member of a cluster the harness started:
//!
//! - on a cluster with a leader (`--spawn-etcd=3`, `--spawn-zookeeper=3`,
//!   `--spawn-redis=sentinel`): `leader-kill:2s@10s` kills whichever member leads when the
//!   fault starts and restarts it, with its data, DURATION later; `leader-pause` stops and
//!   continues it; `leader-cut` cuts it off from its peers and its clients and heals it;
//! - on PostgreSQL with a standby (`--spawn-postgres --postgres-standby`): `leader-kill` only,
//!   which kills the primary and promotes the standby at once, and DURATION later brings the
//!   killed server back as the new primary's standby;
//! - on Redis with Sentinel only: `lagged-leader-kill:12s@20s/lag=4s` holds back the master's
//!   replication stream to every replica, waits for the next grant (at most `lag`, default
//!   1 s), kills the master, and restarts it with its data DURATION later. That grant reached no
//!   replica, so the failover loses it while its holder works on: the window of Redis's
//!   asynchronous replication that a kill on a healthy loopback link almost never opens (a
//!   replica has the write within microseconds). DURATION must outlast the failover (Sentinel
//!   deems the master down after 2 s, then elects: 10 s is ample);
//! - on independent masters (`--backend redlock --spawn-redlock`): `master-kill:2s@10s` kills
//!   one master (each fault the next one, in turn) and restarts it with its data DURATION later;
//!   `master-wipe:200ms@5s` kills it and restarts it **without** its data DURATION later
//!   (Redlock's unsafe case: a master that forgets the key it granted); `master-pause` stops and
//!   continues one, `master-cut` cuts one off from its clients and heals it.

use crate::dist::{format_duration, parse_duration};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// One contender (a holder when there is one) freezes: a GC pause or `SIGSTOP`.
    Pause,
    /// One contender dies where it is and comes back under a new owner id.
    Crash,
    /// One contender's clock steps forwards or backwards.
    ClockJump,
    /// One contender (a holder when there is one) is cut off from the store.
    Partition,
    /// One contender (a holder when there is one) is cut off from the store silently: what
    /// it sends and what is sent to it goes nowhere until healed (a cable pulled, a firewall
    /// dropping packets), no connection is closed, and it works on meanwhile.
    SilentPartition,
    /// One replica of the embedded store stops and misses what is written meanwhile.
    ReplicaStop,
    /// One replica of the embedded store applies mutations late and drops some.
    ReplicaLag,
    /// Doorbell rings (queue-push) are lost, or late.
    RingLoss,
    /// The server (Redis, ZooKeeper) stops and starts again.
    ServerRestart,
    /// One worker process (`--processes`) is stopped (`SIGSTOP`) and continued (`SIGCONT`).
    ProcessPause,
    /// Another client of the server, with no credentials, deletes the holder's key or znode
    /// (each lock's, when several are held): what any client can do on an open server, and
    /// what an ACL refuses.
    Stranger,
    /// An administrator of the server (PostgreSQL, MariaDB) ends the session holding each of
    /// the run's locks that is held: what an operator's `pg_terminate_backend` or `KILL` does.
    Terminate,
    /// The cluster's leader (etcd, ZooKeeper) is killed (`SIGKILL`) and started again, with
    /// its data, when the fault ends.
    LeaderKill,
    /// The cluster's leader is stopped (`SIGSTOP`) and continued (`SIGCONT`).
    LeaderPause,
    /// The cluster's leader is cut off from its peers and its clients, then healed.
    LeaderCut,
    /// Redis with Sentinel: the master's replication to every replica is held back, and the
    /// master is killed right after the next grant (at most the fault's `lag` later); started
    /// again, with its data, when the fault ends. That grant is lost in the failover.
    LaggedLeaderKill,
    /// One of independent masters (Redlock's), each time the next, is killed and started again
    /// with its data when the fault ends.
    MasterKill,
    /// One of independent masters, each time the next, is killed and started again **without**
    /// its data when the fault ends.
    MasterWipe,
    /// One of independent masters, each time the next, is stopped and continued.
    MasterPause,
    /// One of independent masters, each time the next, is cut off from its clients, then healed.
    MasterCut,
    /// One follower of the cluster's leader (etcd, ZooKeeper, the lock service) is stopped
    /// (`SIGSTOP`) and continued (`SIGCONT`).
    FollowerPause,
    /// Every member of the cluster is killed at once (a power cut) and started again, with its
    /// data, when the fault ends.
    ClusterRestart,
}

impl FaultKind {
    /// Every kind, in the order of the docs.
    pub const ALL: [FaultKind; 22] = [
        FaultKind::Pause,
        FaultKind::Crash,
        FaultKind::ClockJump,
        FaultKind::Partition,
        FaultKind::SilentPartition,
        FaultKind::ReplicaStop,
        FaultKind::ReplicaLag,
        FaultKind::RingLoss,
        FaultKind::ServerRestart,
        FaultKind::ProcessPause,
        FaultKind::Stranger,
        FaultKind::Terminate,
        FaultKind::LeaderKill,
        FaultKind::LeaderPause,
        FaultKind::LeaderCut,
        FaultKind::LaggedLeaderKill,
        FaultKind::MasterKill,
        FaultKind::MasterWipe,
        FaultKind::MasterPause,
        FaultKind::MasterCut,
        FaultKind::FollowerPause,
        FaultKind::ClusterRestart,
    ];

    /// The kinds an in-process store model injects itself: a contender's, a replica's and
    /// its doorbells' (the first of [`FaultKind::ALL`]).
    pub const MODEL: &[FaultKind] = FaultKind::ALL.split_at(8).0;

    /// The kinds that hit members of a cluster the harness started: the leader's, those of
    /// independent masters, then a follower's and the whole cluster's (the tail of
    /// [`FaultKind::ALL`]).
    pub const MEMBER: &[FaultKind] = FaultKind::ALL.split_at(12).1;

    /// The kinds that hit a cluster's leader, whoever it is when the fault starts (the head of
    /// [`FaultKind::MEMBER`]).
    pub const LEADER: &[FaultKind] = FaultKind::MEMBER.split_at(4).0;

    /// The name on the command line and in `faults.csv`.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::Crash => "crash",
            FaultKind::ClockJump => "clock-jump",
            FaultKind::Partition => "partition",
            FaultKind::SilentPartition => "silent-partition",
            FaultKind::ReplicaStop => "replica-stop",
            FaultKind::ReplicaLag => "replica-lag",
            FaultKind::ServerRestart => "server-restart",
            FaultKind::ProcessPause => "process-pause",
            FaultKind::RingLoss => "ring-loss",
            FaultKind::Stranger => "stranger",
            FaultKind::Terminate => "terminate",
            FaultKind::LeaderKill => "leader-kill",
            FaultKind::LeaderPause => "leader-pause",
            FaultKind::LeaderCut => "leader-cut",
            FaultKind::LaggedLeaderKill => "lagged-leader-kill",
            FaultKind::MasterKill => "master-kill",
            FaultKind::MasterWipe => "master-wipe",
            FaultKind::MasterPause => "master-pause",
            FaultKind::MasterCut => "master-cut",
            FaultKind::FollowerPause => "follower-pause",
            FaultKind::ClusterRestart => "cluster-restart",
        }
    }

    /// True for the kinds that hit one contender (the others hit the store or server).
    pub fn hits_a_contender(self) -> bool {
        matches!(
            self,
            FaultKind::Pause
                | FaultKind::Crash
                | FaultKind::ClockJump
                | FaultKind::Partition
                | FaultKind::SilentPartition
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown fault kind '{s}' (expected one of {})", names.join(", "))
        })
    }
}

/// One entry of `--faults`.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    /// What breaks.
    pub kind: FaultKind,
    /// How long each fault lasts (for `clock-jump`, also the size of the jump).
    pub duration: Duration,
    /// How often a fault starts.
    pub period: Duration,
    /// `replica-lag`: how late mutations are applied; `lagged-leader-kill`: the longest wait
    /// for a grant while the replication stream is held back, before the kill.
    pub lag: Duration,
    /// `replica-lag`: the fraction of mutations dropped.
    pub drop: f64,
    /// `crash/who=holder`: the contender that dies is one that holds a lock (a leader, in an
    /// election) when one does; by default any contender.
    pub holder: bool,
}

impl FaultSpec {
    /// The default lag of `replica-lag`.
    pub const DEFAULT_LAG: Duration = Duration::from_secs(1);
    /// The default drop fraction of `replica-lag`.
    pub const DEFAULT_DROP: f64 = 0.1;
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}@{}",
            self.kind,
            format_duration(self.duration),
            format_duration(self.period)
        )?;
        if matches!(self.kind, FaultKind::ReplicaLag | FaultKind::RingLoss) {
            write!(f, "/lag={}/drop={}", format_duration(self.lag), self.drop)?;
        }
        if self.kind == FaultKind::LaggedLeaderKill {
            write!(f, "/lag={}", format_duration(self.lag))?;
        }
        if self.holder {
            write!(f, "/who=holder")?;
        }
        Ok(())
    }
}

impl FromStr for FaultSpec {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!("fault '{text}': {why} (expected KIND:DURATION@PERIOD, e.g. pause:5s@20s)")
        };
        let mut parts = text.trim().split('/');
        let head = parts.next().unwrap_or_default();
        let (kind, timing) = head.split_once(':').ok_or_else(|| bad("no ':'"))?;
        let (duration, period) = timing.split_once('@').ok_or_else(|| bad("no '@'"))?;
        let mut spec = FaultSpec {
            kind: kind.parse()?,
            duration: parse_duration(duration).map_err(|e| bad(&e))?,
            period: parse_duration(period).map_err(|e| bad(&e))?,
            lag: Self::DEFAULT_LAG,
            drop: Self::DEFAULT_DROP,
            holder: false,
        };
        if spec.kind == FaultKind::RingLoss {
            // Every ring lost, none delayed, unless the options say otherwise.
            (spec.lag, spec.drop) = (Duration::ZERO, 1.0);
        }
        if spec.duration.is_zero() || spec.period.is_zero() {
            return Err(bad("DURATION and PERIOD must be positive"));
        }
        if spec.duration >= spec.period {
            return Err(bad(
                "DURATION must be shorter than PERIOD, so that faults of one entry do not overlap",
            ));
        }
        for option in parts {
            let (key, value) =
                option.split_once('=').ok_or_else(|| bad("an option is KEY=VALUE"))?;
            match (spec.kind, key) {
                (
                    FaultKind::ReplicaLag | FaultKind::RingLoss | FaultKind::LaggedLeaderKill,
                    "lag",
                ) => spec.lag = parse_duration(value).map_err(|e| bad(&e))?,
                (FaultKind::ReplicaLag | FaultKind::RingLoss, "drop") => {
                    spec.drop = value
                        .parse::<f64>()
                        .ok()
                        .filter(|d| (0.0..=1.0).contains(d))
                        .ok_or_else(|| bad("drop is a fraction between 0 and 1"))?
                }
                (FaultKind::Crash, "who") => {
                    spec.holder = match value {
                        "holder" => true,
                        "any" => false,
                        _ => return Err(bad("who is holder or any")),
                    }
                }
                _ => return Err(bad(&format!("{} takes no option '{key}'", spec.kind))),
            }
        }
        if spec.kind == FaultKind::LaggedLeaderKill && spec.lag >= spec.duration {
            return Err(bad("lag must be shorter than DURATION: the kill comes within lag"));
        }
        Ok(spec)
    }
}

/// A whole `--faults` list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan(pub Vec<FaultSpec>);

impl FaultPlan {
    /// True when nothing is injected.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The kinds in the plan.
    pub fn kinds(&self) -> impl Iterator<Item = FaultKind> + '_ {
        self.0.iter().map(|s| s.kind)
    }
}

impl FromStr for FaultPlan {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() || text.trim() == "none" {
            return Ok(FaultPlan::default());
        }
        text.split(',').map(str::parse).collect::<Result<_, _>>().map(FaultPlan)
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

crate::dist::serde_as_text!(FaultPlan);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_and_leader_kinds_are_the_ones_named_so() {
        let names = |kinds: &[FaultKind]| kinds.iter().map(|k| k.name()).collect::<Vec<_>>();
        assert_eq!(
            names(FaultKind::MEMBER),
            [
                "leader-kill",
                "leader-pause",
                "leader-cut",
                "lagged-leader-kill",
                "master-kill",
                "master-wipe",
                "master-pause",
                "master-cut",
                "follower-pause",
                "cluster-restart"
            ]
        );
        assert!(names(FaultKind::LEADER).iter().all(|n| n.contains("leader")));
        assert_eq!(FaultKind::LEADER.len(), 4);
        assert_eq!(
            names(FaultKind::MODEL),
            [
                "pause",
                "crash",
                "clock-jump",
                "partition",
                "silent-partition",
                "replica-stop",
                "replica-lag",
                "ring-loss"
            ]
        );
    }

    #[test]
    fn specs_parse_and_print_back() {
        let plan: FaultPlan =
            "replica-stop:5s@15s,replica-lag:5s@15s,pause:5s@20s".parse().unwrap();
        assert_eq!(plan.0.len(), 3);
        assert_eq!(plan.0[0].kind, FaultKind::ReplicaStop);
        assert_eq!(plan.0[2].duration, Duration::from_secs(5));
        assert_eq!(
            plan.to_string(),
            "replica-stop:5s@15s,replica-lag:5s@15s/lag=1s/drop=0.1,pause:5s@20s"
        );
        assert_eq!(plan.to_string().parse::<FaultPlan>().unwrap(), plan);
        let lag: FaultSpec = "replica-lag:2s@10s/lag=300ms/drop=0.5".parse().unwrap();
        assert_eq!((lag.lag, lag.drop), (Duration::from_millis(300), 0.5));
        assert!("none".parse::<FaultPlan>().unwrap().is_empty());
        let terminate: FaultSpec = "terminate:1s@5s".parse().unwrap();
        assert_eq!(terminate.kind, FaultKind::Terminate);
        assert_eq!(terminate.to_string(), "terminate:1s@5s");
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        crate::dist::assert_refused::<FaultPlan>(&[
            ("pause", "no ':'"),
            ("pause:5s", "no '@'"),
            ("nap:5s@20s", "unknown fault kind 'nap'"),
            ("pause:20s@5s", "shorter than PERIOD"),
            ("pause:0s@5s", "positive"),
            ("pause:1s@5s/lag=1s", "takes no option 'lag'"),
            ("replica-lag:1s@5s/drop=2", "between 0 and 1"),
            ("terminate:1s@5s/who=holder", "takes no option 'who'"),
        ]);
    }
}
