//! Files: named shared-memory objects under `/dev/shm` (`shm_open`, `shm_unlink`, the
//! listing), memfds and their seals (size, and write for frozen buffers), `dup`, sizing (`ftruncate` then
//! `posix_fallocate`), `fstat`, and `fstatfs` (is a received descriptor in memory, or a
//! file on a disk?).

use std::fs;
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SealFlag, fcntl, posix_fallocate};
use nix::sys::memfd::{MFdFlags, memfd_create as sys_memfd_create};
use nix::sys::stat::{Mode, fchmod, fstat, stat as sys_stat};
use nix::sys::statfs::{HUGETLBFS_MAGIC, TMPFS_MAGIC, fstatfs};
use nix::unistd::ftruncate;

use super::limits::{ensure_fd_limit_raised, fd_error};
use super::{PosixFile, PosixOs};
use crate::error::{Error, Result};
use crate::os::{FileInfo, FileKind, Os};

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

/// [`Os::memfd_create`].
pub(super) fn memfd_create(debug_name: &str) -> Result<PosixFile> {
    ensure_fd_limit_raised();
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
