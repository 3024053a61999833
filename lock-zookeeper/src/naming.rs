//! How our znodes are named, and how every contender's znode is recognised, whichever client made it.

#[cfg(doc)]
use crate::{ZkBackend, ZkLock, ZkRwLocker, ZkSemaphore};
use lock_core::LockError;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// The name our lock znodes end in before the sequence number the server appends: the lock name
/// of Curator's `InterProcessMutex` and of the seed's recipe.
pub(crate) const NODE_NAME: &str = "lock-";

/// The name of a reader's znode: Curator's `InterProcessReadWriteLock`'s read lock name.
pub(crate) const READ_NAME: &str = "__READ__";

/// The name of a writer's znode: Curator's `InterProcessReadWriteLock`'s write lock name.
pub(crate) const WRITE_NAME: &str = "__WRIT__";

/// The name of kazoo's read lock znodes (`<uuid hex>__rlock__<sequence>`), which are shared
/// too.
const KAZOO_READ_NAME: &str = "__rlock__";

/// The name of a semaphore's admission lock znodes: kazoo's lock name, the only one kazoo's
/// `Semaphore` sees in the admission lock's directory.
pub(crate) const ADMISSION_NAME: &str = "__lock__";

/// The suffix of a semaphore's admission lock directory after the semaphore's own path, as
/// kazoo's `Semaphore` names it (`<path>-__lock__`).
pub(crate) const ADMISSION_SUFFIX: &str = "-__lock__";

/// The name of an election's candidate znodes: kazoo's lock name, the only one kazoo's
/// `Election` (a `Lock` on the election's path) sees. Ours carry the owner id before it
/// ([`candidate_name`]).
pub(crate) const CANDIDATE_NAME: &str = "__lock__";

/// The name of a semaphore's lease znodes, one per permit: Curator's lease name.
pub(crate) const LEASE_NAME: &str = "lease-";

/// The start of a name made in Curator's protected form, `_c_<uuid>-`.
const PROTECTED_PREFIX: &str = "_c_";

/// The fewest digits of the sequence number ZooKeeper appends (`%010d` of the directory's
/// child counter).
const SEQUENCE_DIGITS: usize = 10;

/// How a [`ZkLock`] names the znodes it creates. Either way it recognises every contender's
/// znode, whichever client made it, by the sequence number the name ends in (crate docs, "Other
/// clients on the same path").
///
/// The reader-writer lock and the semaphore name theirs in the same two forms, with their own
/// names in place of `lock-`: `__READ__` and `__WRIT__` ([`ZkRwLocker`]), `lease-` and the
/// admission lock's `__lock__` ([`ZkSemaphore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeNaming {
    /// Curator's protected form, `_c_<uuid>-lock-<sequence>` (the default): what Curator's
    /// `InterProcessMutex` creates, so that a create whose answer was lost is found again by its
    /// GUID instead of being made twice. kazoo recognises it when told
    /// `extra_lock_patterns=["lock-"]`.
    #[default]
    Protected,
    /// The seed's form, `lock-<sequence>`, for a path shared with users of the seed's recipe
    /// (or earlier versions of this crate) that only recognise that form. A create whose answer
    /// was lost then fails, and the znode it may have made is deleted in the background.
    Plain,
}

/// Where the GUIDs of protected names come from: a generator with a seed, so that a run can be
/// repeated (a test's names are then the same every time). [`Guids::from_os`] seeds it from the
/// operating system's randomness, which is what [`ZkBackend::locker`] does.
///
/// Clones share one generator, so lockers given clones never make the same GUID. Two
/// generators given the same seed make the same GUIDs: lockers of one backend must not have
/// such twins, since after a lost answer a request could take its twin's znode for its own
/// (share a clone instead). Lockers of different backends may: a znode of another session is
/// never taken.
#[derive(Clone)]
pub struct Guids(Arc<std::sync::Mutex<StdRng>>);

impl Guids {
    /// A generator seeded with `seed`.
    pub fn seeded(seed: u64) -> Guids {
        Guids(Arc::new(std::sync::Mutex::new(StdRng::seed_from_u64(seed))))
    }

    /// A generator seeded from the operating system's randomness; fails only if the operating
    /// system has none to give.
    pub fn from_os() -> Result<Guids, LockError> {
        let rng = StdRng::try_from_rng(&mut rand::rngs::SysRng).map_err(|e| {
            LockError::Config(format!(
                "no randomness from the operating system to seed the GUIDs of protected znode \
                 names ({e}): give a seed with Guids::seeded"
            ))
        })?;
        Ok(Guids(Arc::new(std::sync::Mutex::new(rng))))
    }

    /// The next GUID: a random (version 4) UUID, the kind Curator makes.
    fn next(&self) -> uuid::Uuid {
        let mut bytes = [0u8; 16];
        self.0.lock().unwrap_or_else(|e| e.into_inner()).fill_bytes(&mut bytes);
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    /// The start of a protected name with the next GUID: `_c_<uuid>-`, as Curator's
    /// `ProtectedUtils` writes it.
    pub(crate) fn protected_tag(&self) -> String {
        format!("{PROTECTED_PREFIX}{}-", self.next())
    }
}

impl std::fmt::Debug for Guids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guids(..)")
    }
}

/// Settings of one locker ([`ZkBackend::locker_with`], [`ZkBackend::rw_locker_with`],
/// [`ZkBackend::semaphore_with`]).
#[derive(Debug, Clone)]
pub struct ZkLockOptions {
    /// How the locker names its znodes (default [`NodeNaming::Protected`]).
    pub naming: NodeNaming,
    /// Where the GUIDs of protected names come from.
    pub guids: Guids,
}

impl ZkLockOptions {
    /// Protected names, their GUIDs from `guids`.
    pub fn new(guids: Guids) -> ZkLockOptions {
        ZkLockOptions { naming: NodeNaming::default(), guids }
    }

    /// These options with `naming`.
    pub fn with_naming(self, naming: NodeNaming) -> ZkLockOptions {
        ZkLockOptions { naming, ..self }
    }
}

/// The sequence number ZooKeeper appended to a child's name: the trailing run of at least
/// [`SEQUENCE_DIGITS`] ASCII digits, whatever the client that made it put before it (`lock-`,
/// Curator's `_c_<uuid>-lock-`, kazoo's `<uuid>__lock__`). `None` for a name that does not end
/// in one, which no sequential create makes.
pub(crate) fn sequence_of(name: &str) -> Option<i64> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits < SEQUENCE_DIGITS {
        return None;
    }
    name[name.len() - digits..].parse().ok()
}

/// Whether a contender's znode asks to share the lock (a reader's: ours and Curator's
/// `__READ__`, kazoo's `__rlock__`, just before the sequence number). Every other contender is
/// exclusive, whichever client made it: writers, and the mutexes of every client, which an
/// unknown name is taken for, so that a reader never enters beside a holder it cannot classify.
pub(crate) fn is_shared(name: &str) -> bool {
    let text = name.trim_end_matches(|c: char| c.is_ascii_digit());
    text.ends_with(READ_NAME) || text.ends_with(KAZOO_READ_NAME)
}

/// The name our candidate znodes get before the sequence number (after the protected
/// `_c_<uuid>-`): `owner`, escaped, then [`CANDIDATE_NAME`]. Printable ASCII stays as it is, so
/// a listing shows who is who; `%`, `/` and every other byte are written `%XX`, since
/// ZooKeeper refuses some characters in a path (control characters, a range of non-ASCII ones)
/// that an owner id may contain.
pub(crate) fn candidate_name(owner: &str) -> String {
    let mut name = String::with_capacity(owner.len() + CANDIDATE_NAME.len());
    for b in owner.bytes() {
        match b {
            b'%' | b'/' => name.push_str(&format!("%{b:02X}")),
            b' '..=b'~' => name.push(b as char),
            _ => name.push_str(&format!("%{b:02X}")),
        }
    }
    name.push_str(CANDIDATE_NAME);
    name
}

/// Who a candidate is, from its znode's `name` and `data`: the owner id a candidate of ours
/// carries in its name (`_c_<uuid>-<owner>__lock__<seq>`, [`candidate_name`]), else the data as
/// text: the identifier kazoo's `Election` stores there, or the owner id a lock's znode holds.
pub(crate) fn candidate_owner(name: &str, data: &[u8]) -> String {
    let ours = name
        .strip_prefix(PROTECTED_PREFIX)
        .and_then(|rest| rest.get(..37).zip(rest.get(37..)))
        .filter(|(tag, _)| tag.ends_with('-') && uuid::Uuid::parse_str(&tag[..36]).is_ok())
        .map(|(_, rest)| rest.trim_end_matches(|c: char| c.is_ascii_digit()))
        .and_then(|rest| rest.strip_suffix(CANDIDATE_NAME))
        .filter(|owner| !owner.is_empty());
    match ours {
        Some(escaped) => String::from_utf8_lossy(&unescape(escaped)).into_owned(),
        None => String::from_utf8_lossy(data).into_owned(),
    }
}

/// The bytes [`candidate_name`] escaped: `%XX` back to its byte; anything else as it is.
fn unescape(escaped: &str) -> Vec<u8> {
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// The last component of a znode's path.
pub(crate) fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_clients_names_are_ordered_by_the_sequence_they_end_in() {
        let names = [
            ("lock-0000000007", Some(7)),
            ("_c_0f9d3a4e-5b8c-4d2e-9a71-3c6b2e1f0a9d-lock-0000000003", Some(3)),
            ("8e4f0c2d9b7a4e1f8c3d2b1a0f9e8d7c__lock__0000000012", Some(12)),
            // Curator's read-write lock and kazoo's read lock: contenders too (an exclusive lock
            // excludes them all).
            ("_c_0f9d3a4e-5b8c-4d2e-9a71-3c6b2e1f0a9d-__READ__0000000004", Some(4)),
            ("8e4f0c2d9b7a4e1f8c3d2b1a0f9e8d7c__rlock__0000000005", Some(5)),
            // A 64-bit sequence, as ZOOKEEPER-4706 proposes (19 digits).
            ("lock-0000000004294967296", Some(4_294_967_296)),
            // Not made by a sequential create: no place in the queue.
            ("lock-", None),
            ("lock-123456789", None),
            ("config", None),
            ("", None),
        ];
        for (name, seq) in names {
            assert_eq!(sequence_of(name), seq, "{name}");
        }
    }

    #[test]
    fn readers_of_every_client_share_and_everyone_else_excludes() {
        let shared = [
            "_c_0f9d3a4e-5b8c-4d2e-9a71-3c6b2e1f0a9d-__READ__0000000004",
            "__READ__0000000004",
            "8e4f0c2d9b7a4e1f8c3d2b1a0f9e8d7c__rlock__0000000005",
        ];
        for name in shared {
            assert!(is_shared(name), "{name}");
        }
        let exclusive = [
            "_c_0f9d3a4e-5b8c-4d2e-9a71-3c6b2e1f0a9d-__WRIT__0000000006",
            "8e4f0c2d9b7a4e1f8c3d2b1a0f9e8d7c__lock__0000000007",
            "_c_0f9d3a4e-5b8c-4d2e-9a71-3c6b2e1f0a9d-lock-0000000008",
            "lock-0000000009",
            // A reader's name anywhere but just before the sequence: not a reader's.
            "__READ__x-0000000010",
            "someone-else-0000000011",
        ];
        for name in exclusive {
            assert!(!is_shared(name), "{name}");
        }
    }

    #[test]
    fn a_candidates_owner_is_in_our_names_and_in_the_data_of_everyone_elses() {
        let tag = Guids::seeded(7).protected_tag();
        for owner in ["worker-1", "a b%c", "ünïcödé 中文", "__lock__0000000001", "_c_x"] {
            let name = format!("{tag}{}0000000042", candidate_name(owner));
            assert!(name.is_ascii(), "{name}");
            assert_eq!(sequence_of(&name), Some(42), "{name}");
            assert!(name.ends_with("__lock__0000000042"), "kazoo must see it: {name}");
            assert_eq!(candidate_owner(&name, b"the value"), owner, "{name}");
        }
        // kazoo's Election: its identifier is the data.
        let kazoo = "8e4f0c2d9b7a4e1f8c3d2b1a0f9e8d7c__lock__0000000012";
        assert_eq!(candidate_owner(kazoo, b"kazoo-1"), "kazoo-1");
        // Our mutex's znode and the protected admission lock's (no owner in the name): the data.
        let mutex = format!("{tag}{NODE_NAME}0000000003");
        assert_eq!(candidate_owner(&mutex, b"locker"), "locker");
        let admission = format!("{tag}{ADMISSION_NAME}0000000004");
        assert_eq!(candidate_owner(&admission, b"sem"), "sem");
        // Not a UUID where ours has one.
        assert_eq!(candidate_owner("_c_not-a-uuid-owner__lock__0000000005", b"d"), "d");
    }

    #[test]
    fn the_protected_form_is_curators() {
        // Curator's ProtectedUtils: "_c_", a UUID's canonical text (36 characters), "-".
        let tag = Guids::seeded(1).protected_tag();
        assert_eq!(tag.len(), 3 + 36 + 1);
        assert!(tag.starts_with("_c_") && tag.ends_with('-'), "{tag}");
        let name = format!("{tag}{NODE_NAME}0000000042");
        assert_eq!(sequence_of(&name), Some(42));
        assert_eq!(name_of(&format!("/locks/x/{name}")), name);
    }
}
