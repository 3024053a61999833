//! Running a server as a system user when the tests run as root: who that user is, and the
//! files and directories it must own or reach.

use crate::ServerError;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The user and group a process that must not be root runs as.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunAs {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// System user `name`, if there is one.
pub(crate) fn system_user(name: &str) -> Option<RunAs> {
    let name = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: getpwnam_r writes into `entry` and `buf`, both ours and large enough (it says
    // ERANGE otherwise), and `found` points into them or is null.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        libc::getpwnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found);
        (!found.is_null()).then_some(RunAs { uid: entry.pw_uid, gid: entry.pw_gid })
    }
}

/// Make `path` `who`'s (when given) with `mode`.
pub(crate) fn own(path: &Path, who: Option<RunAs>, mode: u32) -> std::io::Result<()> {
    if let Some(who) = who {
        std::os::unix::fs::chown(path, Some(who.uid), Some(who.gid))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Write `text` to a new file `path` that only `who` (or this user) may read: mode `0600`.
pub(crate) fn write_owned(path: &Path, text: &str, who: Option<RunAs>) -> std::io::Result<()> {
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())?;
    own(path, who, 0o600)
}

/// Let `who` (system user `name`) search every directory above `path`: on each it could not
/// search, the search bit of the class it is in (others' `o+x`, in practice).
pub(crate) fn searchable_by(path: &Path, who: RunAs, name: &str) -> Result<(), ServerError> {
    for dir in path.ancestors().skip(1) {
        let meta = std::fs::metadata(dir)
            .map_err(|e| ServerError::io(format!("stat {}", dir.display()), e))?;
        // The permission bits that apply to the user: its own, its group's or others'.
        let bit = match (meta.uid() == who.uid, meta.gid() == who.gid) {
            (true, _) => 0o100,
            (_, true) => 0o010,
            _ => 0o001,
        };
        if meta.mode() & bit == 0 {
            let searchable = std::fs::Permissions::from_mode((meta.mode() & 0o7777) | bit);
            std::fs::set_permissions(dir, searchable).map_err(|e| {
                ServerError::io(format!("let the {name} user search {}", dir.display()), e)
            })?;
        }
    }
    Ok(())
}
