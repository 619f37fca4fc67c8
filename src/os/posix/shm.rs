//! Files: named shared-memory objects under `/dev/shm` (`shm_open`, `shm_unlink`, `link`, the
//! listing, with each wanted name's owner), memfds and their seals (size, and write for frozen buffers), `dup`, sizing (`ftruncate` then
//! `posix_fallocate`), `fstat`, and `fstatfs` (is a received descriptor in memory, or a
//! file on a disk?); and [`fd_error`], the error of a call (here or in `socket`) that
//! ran out of descriptors.

use std::fs;
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, FcntlArg, OFlag, SealFlag, fcntl, posix_fallocate};
use nix::sys::memfd::{MFdFlags, memfd_create as sys_memfd_create};
use nix::sys::stat::{Mode, fchmod, fstat, fstatat, stat as sys_stat};
use nix::sys::statfs::{HUGETLBFS_MAGIC, TMPFS_MAGIC, fstatfs};
use nix::unistd::ftruncate;

use super::limits::fd_limit;
use super::process::release_watched;
use super::{PosixFile, PosixOs};
use crate::error::{Error, Result};
use crate::os::{FileInfo, FileKind, Listed, Os};

/// Where Linux shows the named shared-memory objects.
const SHM_DIR: &str = "/dev/shm";

/// `/name` for `shm_open`, refusing names that are not one plain path component (so
/// `/dev/shm/<name>` never leaves `/dev/shm`).
fn shm_path(name: &str) -> Result<String> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(Error::InvalidArgument(format!(
            "{name:?} is not a valid shared-memory object name"
        )));
    }
    Ok(format!("/{name}"))
}

/// Runs `f` until it fails with something other than `EINTR`.
fn retry_eintr<T>(mut f: impl FnMut() -> nix::Result<T>) -> nix::Result<T> {
    loop {
        match f() {
            Err(Errno::EINTR) => continue,
            other => return other,
        }
    }
}

/// [`Os::shm_create`].
pub(super) fn create(name: &str) -> Result<PosixFile> {
    let path = shm_path(name)?;
    let fd = nix::sys::mman::shm_open(
        path.as_str(),
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_CLOEXEC,
        Mode::S_IRUSR | Mode::S_IWUSR,
    )
    .map_err(|e| fd_error("shm_open", e))?;
    // The umask may have taken bits away; the contract is mode 0600 exactly.
    if let Err(e) = fchmod(&fd, Mode::S_IRUSR | Mode::S_IWUSR) {
        let _ = nix::sys::mman::shm_unlink(path.as_str());
        return Err(Error::os("fchmod", e));
    }
    Ok(PosixFile(fd))
}

/// [`Os::shm_open`].
pub(super) fn open(os: &PosixOs, name: &str) -> Result<PosixFile> {
    let path = shm_path(name)?;
    let gone = || Error::Gone {
        segment: name.to_owned(),
    };
    match nix::sys::mman::shm_open(
        path.as_str(),
        OFlag::O_RDWR | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(PosixFile(fd)),
        Err(Errno::ENOENT) => Err(gone()),
        Err(Errno::EACCES) => {
            let me = os.uid();
            match sys_stat(format!("{SHM_DIR}/{name}").as_str()) {
                Ok(st) if st.st_uid != me => Err(Error::OtherUser {
                    segment: name.to_owned(),
                    owner: st.st_uid,
                    me,
                }),
                Err(Errno::ENOENT) => Err(gone()),
                _ => Err(Error::os("shm_open", Errno::EACCES)),
            }
        }
        Err(e) => Err(fd_error("shm_open", e)),
    }
}

/// [`Os::shm_unlink`].
pub(super) fn unlink(name: &str) -> Result<()> {
    let path = shm_path(name)?;
    match nix::sys::mman::shm_unlink(path.as_str()) {
        Ok(()) => Ok(()),
        Err(Errno::ENOENT) => Err(Error::Gone {
            segment: name.to_owned(),
        }),
        Err(e) => Err(Error::os("shm_unlink", e)),
    }
}

/// [`Os::shm_link`]: `linkat` of `/dev/shm/<name>` to `/dev/shm/<new_name>`, not
/// following a symbolic link.
pub(super) fn link(name: &str, new_name: &str) -> Result<()> {
    let from = format!("{SHM_DIR}{}", shm_path(name)?);
    let to = format!("{SHM_DIR}{}", shm_path(new_name)?);
    let linked = retry_eintr(|| {
        nix::unistd::linkat(
            AT_FDCWD,
            from.as_str(),
            AT_FDCWD,
            to.as_str(),
            AtFlags::empty(),
        )
    });
    match linked {
        Ok(()) => Ok(()),
        Err(Errno::ENOENT) => Err(Error::Gone {
            segment: name.to_owned(),
        }),
        Err(e) => Err(Error::os("link", e)),
    }
}

/// [`Os::shm_list`].
pub(super) fn list(start: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(SHM_DIR).map_err(|e| Error::os("opendir", e))? {
        let entry = entry.map_err(|e| Error::os("readdir", e))?;
        if let Some(name) = entry.file_name().to_str() {
            if name.starts_with(start) {
                names.push(name.to_owned());
            }
        }
    }
    names.sort_unstable();
    Ok(names)
}

/// [`Os::shm_list_owned`]: one listing of `/dev/shm`, then an `fstatat` on a descriptor
/// of that directory for each name `wanted` accepted. A symbolic link is judged by its
/// own owner, never followed.
pub(super) fn list_owned(start: &str, wanted: &mut dyn FnMut(&str) -> bool) -> Result<Vec<Listed>> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let dir = retry_eintr(|| nix::fcntl::open(SHM_DIR, flags, Mode::empty()))
        .map_err(|e| fd_error("open /dev/shm", e))?;
    let mut names = Vec::new();
    for entry in fs::read_dir(SHM_DIR).map_err(|e| Error::os("opendir", e))? {
        let entry = entry.map_err(|e| Error::os("readdir", e))?;
        if let Some(name) = entry.file_name().to_str() {
            if name.starts_with(start) && wanted(name) {
                names.push(name.to_owned());
            }
        }
    }
    let mut listed = Vec::with_capacity(names.len());
    for name in names {
        match retry_eintr(|| fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)) {
            Ok(st) => listed.push(Listed {
                name,
                owner: st.st_uid,
            }),
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(Error::os("fstatat", e)),
        }
    }
    listed.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(listed)
}

/// [`Os::shm_owner`].
pub(super) fn owner(name: &str) -> Result<u32> {
    let path = format!("{SHM_DIR}{}", shm_path(name)?);
    match retry_eintr(|| fstatat(AT_FDCWD, path.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)) {
        Ok(st) => Ok(st.st_uid),
        Err(Errno::ENOENT) => Err(Error::Gone {
            segment: name.to_owned(),
        }),
        Err(e) => Err(Error::os("fstatat", e)),
    }
}

/// [`Os::memfd_create`].
pub(super) fn memfd_create(debug_name: &str) -> Result<PosixFile> {
    sys_memfd_create(
        debug_name,
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map(PosixFile)
    .map_err(|e| fd_error("memfd_create", e))
}

/// [`Os::seal_size`]. The seals stay open to more (no `F_SEAL_SEAL`): freezing adds
/// `F_SEAL_WRITE` later ([`seal_writes`]).
pub(super) fn seal_size(file: &PosixFile) -> Result<()> {
    fcntl(file, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK))
        .map(drop)
        .map_err(|e| Error::os("fcntl(F_ADD_SEALS)", e))
}

/// Seals a memfd against every write, for good (`F_SEAL_WRITE`, `F_SEAL_SHRINK`,
/// `F_SEAL_GROW`, then `F_SEAL_SEAL`). The kernel refuses (`EBUSY`) while any process
/// still has a writable shared mapping of it: that is [`Error::CannotFreeze`], and
/// nothing changed.
pub(super) fn seal_writes(file: &PosixFile, segment: &str) -> Result<()> {
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SEAL;
    match fcntl(file, FcntlArg::F_ADD_SEALS(seals)) {
        Ok(_) => Ok(()),
        Err(Errno::EBUSY) => Err(Error::CannotFreeze {
            segment: segment.to_owned(),
            why: "another process (or a forked child) still maps it writable".into(),
        }),
        Err(Errno::EPERM) => Err(Error::CannotFreeze {
            segment: segment.to_owned(),
            why: "its seals were closed without F_SEAL_WRITE".into(),
        }),
        Err(e) => Err(Error::os("fcntl(F_ADD_SEALS)", e)),
    }
}

/// Whether the file carries `F_SEAL_WRITE` and `F_SEAL_SHRINK` (`F_GET_SEALS`): then no
/// process can change or shrink its bytes any more, ever. A file that allows no seals
/// (a named segment) has none.
pub(super) fn is_write_sealed(file: &PosixFile) -> Result<bool> {
    match fcntl(file, FcntlArg::F_GET_SEALS) {
        Ok(bits) => {
            let seals = SealFlag::from_bits_truncate(bits);
            Ok(seals.contains(SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_SHRINK))
        }
        Err(Errno::EINVAL) => Ok(false),
        Err(e) => Err(Error::os("fcntl(F_GET_SEALS)", e)),
    }
}

/// [`Os::dup`].
pub(super) fn dup(file: &PosixFile) -> Result<PosixFile> {
    // `try_clone_to_owned` is `fcntl(F_DUPFD_CLOEXEC)`.
    file.0
        .as_fd()
        .try_clone_to_owned()
        .map(PosixFile)
        .map_err(|e| match e.raw_os_error().map(Errno::from_raw) {
            Some(errno) => fd_error("fcntl(F_DUPFD_CLOEXEC)", errno),
            None => Error::os("fcntl(F_DUPFD_CLOEXEC)", e),
        })
}

/// [`Os::allocate`].
pub(super) fn allocate(file: &PosixFile, len: u64) -> Result<()> {
    // Before anything is reserved: a reservation memory cannot back is an OOM kill.
    super::capacity::check_fits(file, len)?;
    let off = libc::off_t::try_from(len)
        .map_err(|_| Error::InvalidArgument(format!("length {len} does not fit a file offset")))?;
    let failed = |call: &'static str, errno: Errno| match errno {
        Errno::ENOSPC | Errno::EFBIG => Error::NoSpace {
            len,
            source: errno.into(),
        },
        e => Error::os(call, e),
    };
    retry_eintr(|| ftruncate(file, off)).map_err(|e| failed("ftruncate", e))?;
    if off > 0 {
        retry_eintr(|| posix_fallocate(file, 0, off)).map_err(|e| failed("posix_fallocate", e))?;
    }
    Ok(())
}

/// [`Os::stat`].
pub(super) fn stat(file: &PosixFile) -> Result<FileInfo> {
    let st = fstat(file).map_err(|e| Error::os("fstat", e))?;
    Ok(FileInfo {
        len: u64::try_from(st.st_size).unwrap_or(0),
        uid: st.st_uid,
        mode: st.st_mode & 0o7777,
        kind: file_kind(st.st_mode),
        // `from`: dev_t and ino_t are u64 on the usual targets (a no-op there).
        #[allow(clippy::useless_conversion)]
        identity: (u64::from(st.st_dev), u64::from(st.st_ino)),
    })
}

/// The type of a file whose `st_mode` is `mode`.
fn file_kind(mode: u32) -> FileKind {
    match mode & libc::S_IFMT {
        libc::S_IFREG => FileKind::Regular,
        libc::S_IFDIR => FileKind::Directory,
        libc::S_IFIFO => FileKind::Pipe,
        libc::S_IFSOCK => FileKind::Socket,
        libc::S_IFCHR => FileKind::CharacterDevice,
        libc::S_IFBLK => FileKind::BlockDevice,
        _ => FileKind::Other,
    }
}

/// [`Os::is_in_memory`](crate::os::Os::is_in_memory): tmpfs holds memfds and
/// `/dev/shm`, hugetlbfs a memfd of huge pages.
pub(super) fn is_in_memory(file: &PosixFile) -> Result<bool> {
    let fs = fstatfs(file).map_err(|e| Error::os("fstatfs", e))?;
    Ok(matches!(
        fs.filesystem_type(),
        TMPFS_MAGIC | HUGETLBFS_MAGIC
    ))
}

/// The error for `errno` from `call`, with the fd-limit case made explicit.
pub(super) fn fd_error(call: &'static str, errno: Errno) -> Error {
    match errno {
        Errno::EMFILE | Errno::ENFILE => Error::TooManyFds {
            call,
            limit: fd_limit(),
            liveness_fds: release_watched(),
        },
        e => Error::os(call, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of every name test `test` makes in `/dev/shm`.
    fn start(test: &str) -> String {
        format!("shmrc-shm-test-{}-{test}-", std::process::id())
    }

    /// A name of test `test` in `/dev/shm`, unlinked when dropped.
    struct Named(String);

    impl Named {
        fn new(test: &str, what: &str) -> Named {
            let name = format!("{}{what}", start(test));
            drop(create(&name).unwrap());
            Named(name)
        }
    }

    impl Drop for Named {
        fn drop(&mut self) {
            let _ = unlink(&self.0);
        }
    }

    #[test]
    fn a_listing_gives_each_wanted_names_owner_and_asks_of_every_name_once() {
        let test = "wanted";
        let (mine, unwanted) = (Named::new(test, "mine"), Named::new(test, "unwanted"));
        let mut asked = Vec::new();
        let listed = list_owned(&start(test), &mut |name| {
            asked.push(name.to_owned());
            name != unwanted.0
        })
        .unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let expected = Listed {
            name: mine.0.clone(),
            owner: me,
        };
        assert_eq!(listed, vec![expected]);
        asked.sort();
        assert_eq!(asked, vec![mine.0.clone(), unwanted.0.clone()]);
    }

    #[test]
    fn a_listed_name_removed_before_its_look_up_is_left_out() {
        let test = "vanish";
        let (gone, stays) = (Named::new(test, "gone"), Named::new(test, "stays"));
        let listed = list_owned(&start(test), &mut |name| {
            if name == gone.0 {
                unlink(name).unwrap();
            }
            true
        })
        .unwrap();
        let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, vec![stays.0.as_str()]);
    }

    #[test]
    fn an_objects_owner_is_looked_up_and_a_missing_one_is_gone() {
        let test = "owner";
        let named = Named::new(test, "x");
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(owner(&named.0).unwrap(), me);
        unlink(&named.0).unwrap();
        assert!(matches!(owner(&named.0), Err(Error::Gone { .. })));
        assert!(matches!(owner("a/b"), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn another_users_object_is_listed_with_its_owner() {
        if !nix::unistd::geteuid().is_root() {
            let required = std::env::var("SHMRC_REQUIRE_ROOT").is_ok_and(|v| v == "1");
            assert!(!required, "SHMRC_REQUIRE_ROOT=1 but not root: cannot chown");
            eprintln!("another_users_object_is_listed_with_its_owner: SKIPPED, not root");
            return;
        }
        let theirs = Named::new("theirs", "x");
        std::os::unix::fs::lchown(format!("{SHM_DIR}/{}", theirs.0), Some(65534), None).unwrap();
        let listed = list_owned(&start("theirs"), &mut |_| true).unwrap();
        assert_eq!(owner(&theirs.0).unwrap(), 65534);
        let expected = Listed {
            name: theirs.0.clone(),
            owner: 65534,
        };
        assert_eq!(listed, vec![expected]);
    }
}
