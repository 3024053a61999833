//! `--primitive`: what the contenders ask for. The mutex by default; or a reader-writer lock
//! (`rw:P`: each ask reads with probability P%, else writes), a semaphore (`semaphore:N`:
//! each ask takes one of N permits, `semaphore:N/K` takes K), or an election (`election`:
//! each ask is a campaign, the hold is the leadership, the release a resignation).
//!
//! Every grant of the run carries its [`Share`], so that one checker judges every primitive:
//! a hold **conflicts** with the holds open when it began if it is exclusive (a mutex hold, a
//! write, a leadership) and any hold is open, if it reads while a writer holds, or if its
//! permits and those held take the semaphore past its size. Each conflict is an overlapping
//! hold, as two holders of one mutex are.

use lock_core::election::Elector;
use lock_core::rwlock::{Access, RwLocker};
use lock_core::semaphore::Semaphore;
use lock_core::{LockError, LockGuard, Locker};
use rand::RngExt;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The largest semaphore `--primitive semaphore:N` takes: every engine keeps one entry per
/// holder, and the harness's runs have at most a few thousand contenders.
pub const MAX_PERMITS: u32 = 100_000;

/// What the contenders of a run ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Primitive {
    /// An exclusive lock.
    #[default]
    Mutex,
    /// A reader-writer lock: each ask reads with this probability, in percent.
    Rw {
        /// Reads among the asks, 0–100.
        read_percent: u8,
        /// Ask for the readers-first policy (a reader enters whenever no writer holds, so
        /// readers can keep a writer waiting), which only some engines have; FIFO otherwise.
        readers_first: bool,
    },
    /// A semaphore of `limit` permits; each ask takes `permits` of them.
    Semaphore {
        /// Its size.
        limit: u32,
        /// Permits per ask.
        permits: u32,
    },
    /// A leader election: each ask campaigns, holding is leading.
    Election,
}

/// The primitives besides the mutex, as an algorithm lists those its family has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrimitiveKind {
    /// A reader-writer lock.
    Rw,
    /// A reader-writer lock that can also let readers pass waiting writers
    /// (`rw:P/readers-first`).
    ReadersFirst,
    /// A semaphore.
    Semaphore,
    /// An election.
    Election,
}

impl PrimitiveKind {
    /// How `--primitive` names it.
    pub fn flag(self) -> &'static str {
        match self {
            PrimitiveKind::Rw => "rw:P",
            PrimitiveKind::ReadersFirst => "rw:P/readers-first",
            PrimitiveKind::Semaphore => "semaphore:N[/K]",
            PrimitiveKind::Election => "election",
        }
    }
}

/// Why `--primitive` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrimitiveError {
    /// Not one of the four forms.
    #[error("unknown primitive {0:?}: expected mutex, rw:P[/readers-first] (P from 0 to 100), semaphore:N[/K] or election")]
    Unknown(String),
    /// A number that does not parse or is out of range.
    #[error("{what} in {given:?} must be {range}")]
    OutOfRange {
        /// Which number.
        what: &'static str,
        /// The whole argument.
        given: String,
        /// What it may be.
        range: String,
    },
}

impl Primitive {
    /// True for the exclusive lock.
    pub fn is_mutex(self) -> bool {
        self == Primitive::Mutex
    }

    /// [`Primitive::is_mutex`] by reference, for serde's `skip_serializing_if`.
    pub fn is_mutex_ref(&self) -> bool {
        self.is_mutex()
    }

    /// Its kind, `None` for the mutex (every algorithm has one).
    pub fn other_kind(self) -> Option<PrimitiveKind> {
        match self {
            Primitive::Mutex => None,
            Primitive::Rw { readers_first: false, .. } => Some(PrimitiveKind::Rw),
            Primitive::Rw { readers_first: true, .. } => Some(PrimitiveKind::ReadersFirst),
            Primitive::Semaphore { .. } => Some(PrimitiveKind::Semaphore),
            Primitive::Election => Some(PrimitiveKind::Election),
        }
    }

    /// True when an algorithm whose family has `offered` runs it.
    pub fn offered_by(self, offered: &[PrimitiveKind]) -> bool {
        self.other_kind().is_none_or(|k| offered.contains(&k))
    }

    /// What it is, in words: "mutex", "reader-writer lock", "semaphore", "election".
    pub fn noun(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Rw { .. } => "reader-writer lock",
            Primitive::Semaphore { .. } => "semaphore",
            Primitive::Election => "election",
        }
    }

    /// The share of one ask, drawn with `rng` (a stream of its own: the mutex's runs draw
    /// nothing from it, so they stay the runs they were).
    pub fn draw(self, rng: &mut impl RngExt) -> Share {
        match self {
            Primitive::Mutex | Primitive::Election => Share::Exclusive,
            Primitive::Rw { read_percent, .. } => {
                if rng.random_range(0..100u32) < u32::from(read_percent) {
                    Share::Read
                } else {
                    Share::Write
                }
            }
            Primitive::Semaphore { limit, permits } => Share::Permits { held: permits, of: limit },
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Primitive::Mutex => write!(f, "mutex"),
            Primitive::Rw { read_percent, readers_first: false } => write!(f, "rw:{read_percent}"),
            Primitive::Rw { read_percent, readers_first: true } => {
                write!(f, "rw:{read_percent}/readers-first")
            }
            Primitive::Semaphore { limit, permits: 1 } => write!(f, "semaphore:{limit}"),
            Primitive::Semaphore { limit, permits } => write!(f, "semaphore:{limit}/{permits}"),
            Primitive::Election => write!(f, "election"),
        }
    }
}

impl FromStr for Primitive {
    type Err = PrimitiveError;

    fn from_str(s: &str) -> Result<Self, PrimitiveError> {
        let out_of_range =
            |what, range: String| PrimitiveError::OutOfRange { what, given: s.to_string(), range };
        let number = |text: &str, what, min: u32, max: u32| {
            text.parse::<u32>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| out_of_range(what, format!("a whole number from {min} to {max}")))
        };
        match s.split_once(':') {
            None if s == "mutex" => Ok(Primitive::Mutex),
            None if s == "election" => Ok(Primitive::Election),
            Some(("rw", p)) => {
                let (p, readers_first) = match p.split_once('/') {
                    None => (p, false),
                    Some((p, "readers-first")) => (p, true),
                    Some((p, "fifo")) => (p, false),
                    Some(_) => {
                        return Err(out_of_range(
                            "the policy after rw:P/",
                            "fifo or readers-first".into(),
                        ))
                    }
                };
                let read_percent = number(p, "the read percentage", 0, 100)? as u8;
                Ok(Primitive::Rw { read_percent, readers_first })
            }
            Some(("semaphore", n)) => {
                let (n, k) = n.split_once('/').unwrap_or((n, "1"));
                let limit = number(n, "the semaphore's size N", 1, MAX_PERMITS)?;
                let permits = number(k, "the permits per ask K", 1, MAX_PERMITS)?;
                if permits > limit {
                    return Err(out_of_range(
                        "the permits per ask K",
                        format!("at most the semaphore's size ({limit})"),
                    ));
                }
                Ok(Primitive::Semaphore { limit, permits })
            }
            _ => Err(PrimitiveError::Unknown(s.to_string())),
        }
    }
}

impl Serialize for Primitive {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Primitive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How one grant holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Share {
    /// Alone: a mutex, or a leadership.
    #[default]
    Exclusive,
    /// A reader-writer lock's read: shared with other readers.
    Read,
    /// A reader-writer lock's write: alone.
    Write,
    /// `held` permits of a semaphore of `of`.
    Permits {
        /// Permits held.
        held: u32,
        /// The semaphore's size.
        of: u32,
    },
}

impl Share {
    /// True when the holder holds alone (a mutex, a write, a leadership).
    pub fn is_exclusive(self) -> bool {
        matches!(self, Share::Exclusive | Share::Write)
    }

    /// True for a mutex's or a leader's hold, by reference (serde's `skip_serializing_if`:
    /// the mutex's records stay as they were).
    pub fn is_exclusive_ref(&self) -> bool {
        *self == Share::Exclusive
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Share::Exclusive => write!(f, "x"),
            Share::Read => write!(f, "r"),
            Share::Write => write!(f, "w"),
            Share::Permits { held, of } => write!(f, "{held}/{of}"),
        }
    }
}

impl FromStr for Share {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a share (x, r, w or HELD/OF)");
        match s {
            "x" => Ok(Share::Exclusive),
            "r" => Ok(Share::Read),
            "w" => Ok(Share::Write),
            _ => {
                let (held, of) = s.split_once('/').ok_or_else(bad)?;
                let held: u32 = held.parse().map_err(|_| bad())?;
                let of: u32 = of.parse().map_err(|_| bad())?;
                (held >= 1 && held <= of).then_some(Share::Permits { held, of }).ok_or_else(bad)
            }
        }
    }
}

impl Serialize for Share {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One contender's handle on the primitive it asks for.
#[derive(Clone)]
pub enum Asking {
    /// An exclusive lock.
    Mutex(Arc<dyn Locker>),
    /// A reader-writer lock.
    Rw(Arc<dyn RwLocker>),
    /// A semaphore.
    Semaphore(Arc<dyn Semaphore>),
    /// An elector (its campaign value is its owner id).
    Election(Arc<dyn Elector>),
}

impl fmt::Debug for Asking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, owner) = match self {
            Asking::Mutex(l) => ("mutex", l.owner()),
            Asking::Rw(l) => ("rw", l.owner()),
            Asking::Semaphore(l) => ("semaphore", l.owner()),
            Asking::Election(l) => ("election", l.owner()),
        };
        write!(f, "Asking::{kind}({owner})")
    }
}

impl Asking {
    /// Asks for `lock_id` with `share`, waiting at most `timeout`: the guard of the hold
    /// (releasing it releases the read, the permits, or resigns). A share the handle cannot
    /// take is a configuration error.
    pub async fn ask(
        &self,
        lock_id: &str,
        share: Share,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, LockError> {
        match (self, share) {
            (Asking::Mutex(l), Share::Exclusive) => l.lock(lock_id, timeout).await,
            (Asking::Rw(l), Share::Read) => l.lock(lock_id, Access::Read, timeout).await,
            (Asking::Rw(l), Share::Write) => l.lock(lock_id, Access::Write, timeout).await,
            (Asking::Semaphore(s), Share::Permits { held, of }) => {
                Ok(s.acquire(lock_id, of, held, timeout).await?.into_guard())
            }
            (Asking::Election(e), Share::Exclusive) => {
                let value = e.owner().as_bytes().to_vec();
                Ok(e.campaign(lock_id, value, timeout).await?.into_guard())
            }
            (asking, share) => {
                Err(LockError::Config(format!("{asking:?} cannot hold a {share} share")))
            }
        }
    }

    /// The exclusive lock, when this is one.
    pub fn mutex(&self) -> Option<&Arc<dyn Locker>> {
        match self {
            Asking::Mutex(l) => Some(l),
            _ => None,
        }
    }
}

impl From<Arc<dyn Locker>> for Asking {
    fn from(l: Arc<dyn Locker>) -> Self {
        Asking::Mutex(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn primitives_parse_and_print_back() {
        for text in [
            "mutex",
            "rw:90",
            "rw:90/readers-first",
            "rw:0",
            "rw:100",
            "semaphore:4",
            "semaphore:4/2",
            "election",
        ] {
            let p: Primitive = text.parse().unwrap();
            assert_eq!(p.to_string(), text);
        }
        assert_eq!("semaphore:4/1".parse::<Primitive>().unwrap().to_string(), "semaphore:4");
    }

    #[test]
    fn bad_primitives_say_what_is_wrong() {
        let err = |s: &str| s.parse::<Primitive>().unwrap_err().to_string();
        assert!(err("rw:101").contains("read percentage"), "{}", err("rw:101"));
        assert!(err("rw:50/writers-first").contains("fifo or readers-first"));
        assert!(err("semaphore:0").contains("size N"), "{}", err("semaphore:0"));
        assert!(err("semaphore:4/5").contains("at most the semaphore's size (4)"));
        assert!(err("semaphore:x").contains("whole number"));
        assert!(err("rwlock").contains("expected mutex"));
        assert!(err("election:3").contains("unknown primitive"));
    }

    #[test]
    fn rw_draws_reads_at_the_asked_rate() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let p = Primitive::Rw { read_percent: 90, readers_first: false };
        let reads = (0..10_000).filter(|_| p.draw(&mut rng) == Share::Read).count();
        assert!((8_800..9_200).contains(&reads), "{reads}");
        let all_reads = Primitive::Rw { read_percent: 100, readers_first: false };
        assert!((0..100).all(|_| all_reads.draw(&mut rng) == Share::Read));
    }

    #[test]
    fn shares_round_trip_through_text() {
        for s in [Share::Exclusive, Share::Read, Share::Write, Share::Permits { held: 2, of: 4 }] {
            assert_eq!(s.to_string().parse::<Share>().unwrap(), s);
        }
        assert!("0/4".parse::<Share>().is_err());
        assert!("5/4".parse::<Share>().is_err());
    }
}
