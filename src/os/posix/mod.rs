//! The production backend: [`PosixOs`] implements [`Os`] with Linux system calls
//! (`shm_open`, `memfd_create`, `posix_fallocate`, `mmap`, `SCM_RIGHTS`, `/proc`) and
//! nothing else. It owns every `unsafe` line and every syscall shmrc makes; the protocol
//! modules only ever see it through the [`Os`] and [`Mapping`] traits.
//!
//! Memory of a mapping may be written at any moment by another process, so this module
//! never hands out `&[u8]` over it on its own: [`Mapping::read`] and [`Mapping::write`]
//! copy with volatile accesses, header words are [`AtomicU64`]s, and the zero-copy
//! [`DataRegion`] slices are `unsafe` with the caller's duty spelled out.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::fmt;
use std::fs;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::sync::{LazyLock, Once};
use std::time::{SystemTime, UNIX_EPOCH};

use memmap2::{MmapOptions, MmapRaw};
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SealFlag, fcntl, posix_fallocate};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::socket::{ControlMessage, MsgFlags, send, sendmsg};
use nix::sys::stat::{Mode, fchmod, fstat, stat};
use nix::unistd::{ftruncate, geteuid};

use super::{FileInfo, MAX_FDS_PER_SEND, Mapping, Os};
use crate::error::{Error, Result};
use crate::local::ProcessLocal;
use crate::sync::process::AtomicU8 as SharedByte;
use crate::sync::{AtomicU64, Ordering};
use crate::token::Token;

/// Where Linux shows the named shared-memory objects.
const SHM_DIR: &str = "/dev/shm";

/// The real kernel, seen from this process. Every value stands for the calling
/// process; it holds no state of its own (the process-wide state is in statics).
#[derive(Clone, Copy, Debug, Default)]
pub struct PosixOs;

impl PosixOs {
    /// The real kernel, for this process.
    pub const fn new() -> PosixOs {
        PosixOs
    }
}

/// An open shared-memory object or memfd: an owned file descriptor, closed on drop.
#[derive(Debug)]
pub struct PosixFile(OwnedFd);

impl PosixFile {
    /// The owned descriptor.
    pub fn into_inner(self) -> OwnedFd {
        self.0
    }
}

impl From<OwnedFd> for PosixFile {
    fn from(fd: OwnedFd) -> PosixFile {
        PosixFile(fd)
    }
}

impl AsFd for PosixFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for PosixFile {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Raises this process's `RLIMIT_NOFILE` soft limit to its hard limit (or to
/// `/proc/sys/fs/nr_open` when the hard limit is unlimited) and returns the new soft
/// limit. The file_descriptor strategy holds one descriptor per buffer, so the default
/// soft limit (often 1024) is reached quickly; [`PosixOs`] calls this once by itself
/// before its first `memfd_create` or `recv`.
pub fn raise_fd_limit() -> Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| Error::os("getrlimit", e))?;
    if soft >= hard {
        return Ok(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Ok(hard),
        Err(e) if hard == libc::RLIM_INFINITY => {
            // Linux caps RLIMIT_NOFILE at fs.nr_open, whatever the hard limit says.
            let nr_open = fs::read_to_string("/proc/sys/fs/nr_open")
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| Error::os("setrlimit", e))?;
            if nr_open <= soft {
                return Ok(soft);
            }
            setrlimit(Resource::RLIMIT_NOFILE, nr_open, hard)
                .map_err(|e| Error::os("setrlimit", e))?;
            Ok(nr_open)
        }
        Err(e) => Err(Error::os("setrlimit", e)),
    }
}

/// Raises the fd limit once per process, before the first call that creates many fds.
fn ensure_fd_limit_raised() {
    static RAISED: Once = Once::new();
    RAISED.call_once(|| {
        // Best effort: a process that cannot raise it gets TooManyFds later, with the
        // limit in the message.
        let _ = raise_fd_limit();
    });
}

/// The soft `RLIMIT_NOFILE` in force now (for error messages).
fn fd_limit() -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(soft, _)| soft)
}

/// The error for `errno` from `call`, with the fd-limit case made explicit.
fn fd_error(call: &'static str, errno: Errno) -> Error {
    match errno {
        Errno::EMFILE | Errno::ENFILE => Error::TooManyFds {
            call,
            limit: fd_limit(),
        },
        e => Error::os(call, e),
    }
}

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

/// Waits until `fd` can be written to (for a non-blocking stream that said `EAGAIN`).
fn wait_writable(fd: BorrowedFd<'_>) -> Result<()> {
    let mut pollfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    loop {
        // SAFETY: `pollfd` is a valid, exclusively borrowed array of one element for the
        // duration of the call, and `fd` is an open descriptor borrowed for it.
        let ret = unsafe { libc::poll(&mut pollfd, 1, -1) };
        if ret >= 0 {
            return Ok(());
        }
        match Errno::last() {
            Errno::EINTR => continue,
            e => return Err(Error::os("poll", e)),
        }
    }
}

/// The error of a failed `sendmsg`/`send`: a closed peer is [`Error::Disconnected`];
/// too many descriptors in flight (`ETOOMANYREFS`: the sender's `RLIMIT_NOFILE` bounds
/// the fds it may have queued in sockets) is [`Error::TooManyFds`].
fn send_error(call: &'static str, errno: Errno) -> Error {
    match errno {
        Errno::EPIPE | Errno::ECONNRESET => Error::Disconnected,
        Errno::ETOOMANYREFS => fd_error(call, Errno::EMFILE),
        e => Error::os(call, e),
    }
}

/// What shmrc reads of `/proc/<pid>/stat`.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
struct ProcStat {
    /// Field 1: the pid.
    pid: u32,
    /// Field 3: the state letter (`R`, `S`, `Z`, ...).
    state: u8,
    /// Field 22: the start time in clock ticks since boot.
    start_ticks: u64,
}

/// Parses the content of `/proc/<pid>/stat`. The command name (field 2) is in
/// parentheses and may itself contain spaces, parentheses and non-UTF-8 bytes, so the
/// fields after it are found after the *last* `)`.
fn parse_proc_stat(content: &[u8]) -> Option<ProcStat> {
    let open = content.iter().position(|&b| b == b'(')?;
    let close = content.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = std::str::from_utf8(&content[..open])
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let rest = std::str::from_utf8(&content[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = match fields.next()?.as_bytes() {
        &[state] => state,
        _ => return None,
    };
    // Fields 4..=21 come between the state and the start time.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        start_ticks,
    })
}

/// This process's token, read from `/proc/self/stat`.
///
/// # Panics
/// When `/proc` cannot tell this process's start time, or is the `/proc` of another
/// pid namespace: liveness checks could then only lie, and a lying liveness check
/// unlinks segments that are in use.
fn read_own_token(pid: u32) -> Token {
    let content = fs::read("/proc/self/stat")
        .unwrap_or_else(|e| panic!("shmrc needs /proc: reading /proc/self/stat failed: {e}"));
    let stat = parse_proc_stat(&content)
        .unwrap_or_else(|| panic!("shmrc cannot parse /proc/self/stat: {content:?}"));
    assert_eq!(
        stat.pid, pid,
        "/proc/self/stat names pid {} but getpid() is {pid}: /proc belongs to another pid \
         namespace, so shmrc cannot check holder liveness",
        stat.pid
    );
    Token::new(pid, stat.start_ticks)
        .unwrap_or_else(|| panic!("pid {pid} does not fit a shmrc token"))
}

/// The token of this process as last computed (0: none yet). A forked child sees its
/// parent's token here, with another pid, and recomputes.
static CURRENT: crate::sync::process::AtomicU64 = crate::sync::process::AtomicU64::new(0);

/// The process-local protocol state of this process.
static LOCAL: LazyLock<ProcessLocal> = LazyLock::new(ProcessLocal::new);

impl Os for PosixOs {
    type File = PosixFile;
    type Map = PosixMap;
    type Stream = UnixStream;

    fn shm_create(&self, name: &str) -> Result<PosixFile> {
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

    fn shm_open(&self, name: &str) -> Result<PosixFile> {
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
                let me = self.uid();
                match stat(format!("{SHM_DIR}/{name}").as_str()) {
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

    fn shm_unlink(&self, name: &str) -> Result<()> {
        let path = shm_path(name)?;
        match nix::sys::mman::shm_unlink(path.as_str()) {
            Ok(()) => Ok(()),
            Err(Errno::ENOENT) => Err(Error::Gone {
                segment: name.to_owned(),
            }),
            Err(e) => Err(Error::os("shm_unlink", e)),
        }
    }

    fn shm_list(&self, start: &str) -> Result<Vec<String>> {
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

    fn memfd_create(&self, debug_name: &str) -> Result<PosixFile> {
        ensure_fd_limit_raised();
        memfd_create(
            debug_name,
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )
        .map(PosixFile)
        .map_err(|e| fd_error("memfd_create", e))
    }

    fn seal_size(&self, file: &PosixFile) -> Result<()> {
        fcntl(
            file,
            FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_SEAL),
        )
        .map(drop)
        .map_err(|e| Error::os("fcntl(F_ADD_SEALS)", e))
    }

    fn dup(&self, file: &PosixFile) -> Result<PosixFile> {
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

    fn allocate(&self, file: &PosixFile, len: u64) -> Result<()> {
        let off = libc::off_t::try_from(len).map_err(|_| {
            Error::InvalidArgument(format!("length {len} does not fit a file offset"))
        })?;
        let failed = |call: &'static str, errno: Errno| match errno {
            Errno::ENOSPC | Errno::EFBIG => Error::NoSpace {
                len,
                source: errno.into(),
            },
            e => Error::os(call, e),
        };
        retry_eintr(|| ftruncate(file, off)).map_err(|e| failed("ftruncate", e))?;
        if off > 0 {
            retry_eintr(|| posix_fallocate(file, 0, off))
                .map_err(|e| failed("posix_fallocate", e))?;
        }
        Ok(())
    }

    fn stat(&self, file: &PosixFile) -> Result<FileInfo> {
        let st = fstat(file).map_err(|e| Error::os("fstat", e))?;
        Ok(FileInfo {
            len: u64::try_from(st.st_size).unwrap_or(0),
            uid: st.st_uid,
            mode: st.st_mode & 0o7777,
        })
    }

    fn map(&self, file: &PosixFile, len: usize) -> Result<PosixMap> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "cannot map zero bytes of a segment".into(),
            ));
        }
        // Pages past the end of the file would SIGBUS on first touch: refuse them here.
        let have = self.stat(file)?.len;
        if len as u64 > have {
            return Err(Error::InvalidArgument(format!(
                "cannot map {len} bytes of a {have}-byte file"
            )));
        }
        let raw = MmapOptions::new()
            .len(len)
            .map_raw(&file.0)
            .map_err(|e| Error::os("mmap", e))?;
        Ok(PosixMap { raw })
    }

    fn send(&self, stream: &UnixStream, bytes: &[u8], files: &[&PosixFile]) -> Result<()> {
        if files.len() > MAX_FDS_PER_SEND {
            return Err(Error::InvalidArgument(format!(
                "{} files in one send; at most {MAX_FDS_PER_SEND}",
                files.len()
            )));
        }
        if bytes.is_empty() {
            if files.is_empty() {
                return Ok(());
            }
            return Err(Error::InvalidArgument(
                "files need at least one byte to travel with".into(),
            ));
        }
        let fd = stream.as_fd();
        let raw: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        let rights = [ControlMessage::ScmRights(&raw)];
        let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
        let flags = MsgFlags::MSG_NOSIGNAL;
        // The files travel with the first chunk the kernel accepts.
        let mut sent = loop {
            let iov = [io::IoSlice::new(bytes)];
            match sendmsg::<()>(fd.as_raw_fd(), &iov, cmsgs, flags, None) {
                Ok(n) => break n,
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => wait_writable(fd)?,
                Err(e) => return Err(send_error("sendmsg", e)),
            }
        };
        while sent < bytes.len() {
            match send(fd.as_raw_fd(), &bytes[sent..], flags) {
                Ok(0) => return Err(Error::os("send", io::ErrorKind::WriteZero)),
                Ok(n) => sent += n,
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => wait_writable(fd)?,
                Err(e) => return Err(send_error("send", e)),
            }
        }
        Ok(())
    }

    fn recv(
        &self,
        stream: &UnixStream,
        buf: &mut [u8],
        files: &mut Vec<PosixFile>,
    ) -> Result<usize> {
        ensure_fd_limit_raised();
        if buf.is_empty() {
            return Err(Error::InvalidArgument(
                "recv needs room for at least one byte".into(),
            ));
        }
        recv_with_fds(stream.as_fd(), buf, files)
    }

    fn current(&self) -> Token {
        let pid = std::process::id();
        if let Some(token) = Token::from_word(CURRENT.load(crate::sync::process::Ordering::Relaxed))
        {
            if token.pid() == pid {
                return token;
            }
        }
        let token = read_own_token(pid);
        CURRENT.store(token.word(), crate::sync::process::Ordering::Relaxed);
        token
    }

    fn is_alive(&self, token: Token) -> bool {
        let pid = token.pid();
        match fs::read(format!("/proc/{pid}/stat")) {
            // No entry: dead, unless `/proc` hides it (`hidepid`, a non-dumpable
            // process): ask the kernel whether the pid exists at all.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                pid_exists(pid)
            }
            // Unreadable: assume alive (a possible leak, never a premature unlink).
            Err(_) => true,
            Ok(content) => match parse_proc_stat(&content) {
                Some(st) if st.pid == pid => {
                    if !token.matches_start(st.start_ticks) || st.state == b'X' {
                        false
                    } else if st.state == b'Z' {
                        // A zombie takes no further step, except a thread-group leader
                        // whose main thread exited while other threads still run.
                        other_threads_run(pid)
                    } else {
                        true
                    }
                }
                _ => true,
            },
        }
    }

    fn uid(&self) -> u32 {
        geteuid().as_raw()
    }

    fn pid_namespace(&self) -> u64 {
        fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
    }

    fn now_unix_nanos(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    fn random_u128(&self) -> Result<u128> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| {
            let source = match e.raw_os_error() {
                Some(errno) => io::Error::from_raw_os_error(errno),
                None => io::Error::other(e.to_string()),
            };
            Error::Os {
                call: "getrandom",
                source,
            }
        })?;
        Ok(u128::from_ne_bytes(bytes))
    }

    fn local(&self) -> &ProcessLocal {
        &LOCAL
    }

    #[inline]
    fn crash_point(&self) -> Result<()> {
        Ok(())
    }
}

/// Room for the control messages of one receive: `MAX_FDS_PER_SEND` descriptors, and
/// slack for a credentials message (`SO_PASSCRED`) so that only dropped descriptors
/// can truncate it; in `u64`s so the buffer is aligned for `cmsghdr`.
const CONTROL_WORDS: usize = (MAX_FDS_PER_SEND * size_of::<c_int>()
    + 4 * size_of::<libc::cmsghdr>()
    + size_of::<libc::ucred>()
    + 64)
    .div_ceil(8);

/// `recvmsg` on `fd` into `buf`, pushing every descriptor that arrived onto `files`
/// before anything can fail, so none leaks.
fn recv_with_fds(fd: BorrowedFd<'_>, buf: &mut [u8], files: &mut Vec<PosixFile>) -> Result<usize> {
    let files_before = files.len();
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `msghdr` is a plain C struct for which all-zero bytes are a valid value
    // (null pointers, zero lengths, no flags).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    let received = loop {
        // SAFETY: `msg` points at one iovec covering `buf` (exclusively borrowed, live
        // for the call) and at `control` with its true length; `fd` is an open socket.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if let Ok(n) = usize::try_from(n) {
            break n;
        }
        match Errno::last() {
            Errno::EINTR => continue,
            Errno::ECONNRESET => return Err(Error::Disconnected),
            e => return Err(Error::os("recvmsg", e)),
        }
    };

    let control_end = (control.as_ptr() as usize).saturating_add(msg.msg_controllen as usize);
    // SAFETY: `msg` is the header the kernel just filled: `msg_control` points at
    // `control` and `msg_controllen` is the length the kernel wrote there.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR return null or a header that lies wholly
        // within `control[..msg_controllen]`, aligned (the buffer is u64-aligned and
        // headers are CMSG_ALIGNed), written by the kernel.
        let header = unsafe { cmsg.read() };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_DATA/CMSG_LEN only do pointer and size arithmetic on a valid
            // header pointer.
            let (data, header_len) = unsafe { (libc::CMSG_DATA(cmsg), libc::CMSG_LEN(0)) };
            let data_len = (header.cmsg_len as usize)
                .saturating_sub(header_len as usize)
                .min(control_end.saturating_sub(data as usize));
            for i in 0..data_len / size_of::<c_int>() {
                // SAFETY: `i < data_len / 4` keeps the read inside the header's data,
                // which is inside `control` (clamped to `control_end` above).
                let raw = unsafe { data.cast::<c_int>().add(i).read_unaligned() };
                if raw >= 0 {
                    // SAFETY: the kernel installed `raw` in this process's fd table
                    // for this message (SCM_RIGHTS); nothing else owns it yet.
                    files.push(PosixFile(unsafe { OwnedFd::from_raw_fd(raw) }));
                }
            }
        }
        // SAFETY: `cmsg` is a valid header of `msg` (see above); CMSG_NXTHDR checks the
        // next one against `msg_controllen`.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        // The kernel dropped descriptors it could not install (the fd limit): the
        // "received 0 items of ancdata" case. Those it did install are closed again:
        // on error nothing is handed out (the contract of `Os::recv`).
        files.truncate(files_before);
        return Err(Error::TooManyFds {
            call: "recvmsg",
            limit: fd_limit(),
        });
    }
    Ok(received)
}

/// A shared, read-write mapping of the first `len` bytes of a segment; unmapped on
/// drop. Its memory may be written by other processes at any time.
pub struct PosixMap {
    raw: MmapRaw,
}

impl PosixMap {
    /// The first byte of the mapping (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.raw.as_mut_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the mapping is empty (never: [`Os::map`] refuses zero bytes).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `len` bytes at `offset`, or `None` when they are not all inside the mapping.
    pub fn region(&self, offset: usize, len: usize) -> Option<DataRegion<'_>> {
        let end = offset.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        Some(DataRegion {
            // SAFETY: `offset <= end <= self.len()`, so the pointer stays inside the
            // mapping (or one past its end when `len == 0`).
            ptr: unsafe { self.as_ptr().add(offset) },
            len,
            map: PhantomData,
        })
    }

    /// `Some(base + offset)` when `len` bytes from `offset` lie inside the mapping.
    fn range(&self, offset: usize, len: usize) -> Option<*mut u8> {
        let end = offset.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        // SAFETY: `offset <= self.len()`, so the result is inside the mapping or one
        // past its end.
        Some(unsafe { self.as_ptr().add(offset) })
    }
}

impl fmt::Debug for PosixMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PosixMap")
            .field("ptr", &self.as_ptr())
            .field("len", &self.len())
            .finish()
    }
}

impl Mapping for PosixMap {
    fn len(&self) -> usize {
        self.raw.len()
    }

    fn words(&self, n: usize) -> Option<&[AtomicU64]> {
        if n.checked_mul(size_of::<AtomicU64>())? > self.len() {
            return None;
        }
        // SAFETY: the mapping is page-aligned, so aligned for AtomicU64, and its first
        // `8 * n` bytes are mapped read-write for as long as `self` lives (the borrow).
        // AtomicU64 has the layout of u64, every bit pattern is a valid value, and all
        // access through it is atomic, so other processes writing the words
        // concurrently is what atomics are for.
        Some(unsafe { std::slice::from_raw_parts(self.as_ptr().cast::<AtomicU64>(), n) })
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        let Some(src) = self.range(offset, out.len()) else {
            return false;
        };
        // SAFETY: `src..src + out.len()` is inside the live mapping (checked by
        // `range`), and `out` is a distinct, exclusively borrowed local buffer.
        unsafe { copy_from_shared(src, out) };
        true
    }

    fn write(&self, offset: usize, data: &[u8]) -> bool {
        let Some(dst) = self.range(offset, data.len()) else {
            return false;
        };
        // SAFETY: `dst..dst + data.len()` is inside the live, writable mapping (checked
        // by `range`). `data` does not overlap it: a `&[u8]` into the mapping exists
        // only through `DataRegion::as_slice`, whose caller promised no writes meanwhile.
        unsafe { copy_to_shared(dst, data) };
        true
    }
}

/// Whether a process with this pid exists (`kill(pid, 0)`: only ESRCH says no).
fn pid_exists(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
        Err(Errno::ESRCH)
    )
}

/// Whether the zombie leader `pid` still has running threads (more than its own entry
/// in `/proc/<pid>/task`). Unreadable: assume it has (never a premature unlink).
fn other_threads_run(pid: u32) -> bool {
    fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |tasks| tasks.count() > 1)
}

/// The byte at `p` as a relaxed atomic.
///
/// # Safety
/// `p` must be mapped for the lifetime the caller picks (the whole copy).
unsafe fn shared_byte<'a>(p: *const u8) -> &'a SharedByte {
    // SAFETY: `SharedByte` is a `repr(transparent)` wrapper of `AtomicU8`, which has
    // the size and alignment of `u8`; `p` is mapped per the caller. Every access to
    // shared data in this process goes through atomics (here and in `words`), so a
    // concurrent access by another thread is no data race; another process's writes
    // are outside this program and at worst tear the copy.
    unsafe { &*p.cast::<SharedByte>() }
}

/// The 8-aligned word at `p` as a relaxed atomic.
///
/// # Safety
/// `p` must be 8-aligned and mapped for the lifetime the caller picks.
unsafe fn shared_word<'a>(p: *const u8) -> &'a AtomicU64 {
    // SAFETY: `crate::sync::AtomicU64` is a `repr(transparent)` wrapper of std's, with
    // the size of `u64` and alignment 8; `p` is 8-aligned and mapped per the caller;
    // concurrency as in `shared_byte`.
    unsafe { &*p.cast::<AtomicU64>() }
}

/// Copies `out.len()` bytes from shared memory at `src` into `out` with relaxed atomic
/// loads: single bytes up to 8-byte alignment, then aligned words, then bytes. A
/// concurrent writer (a thread of this process or another process) gives a torn copy,
/// never undefined behaviour, and every bit pattern is a valid `u8`.
///
/// # Safety
/// `src..src + out.len()` must be mapped and readable for the whole call.
unsafe fn copy_from_shared(src: *const u8, out: &mut [u8]) {
    let len = out.len();
    let head = src.align_offset(8).min(len);
    let words = (len - head) / 8;
    for (i, byte) in out[..head].iter_mut().enumerate() {
        // SAFETY: `i < head <= len`: in bounds, mapped per the caller.
        *byte = unsafe { shared_byte(src.wrapping_add(i)) }.load(Ordering::Relaxed);
    }
    for w in 0..words {
        let at = head + 8 * w;
        // SAFETY: `src + head` is 8-aligned and `at + 8 <= len`: in bounds, mapped.
        let word = unsafe { shared_word(src.wrapping_add(at)) }.load(Ordering::Relaxed);
        out[at..at + 8].copy_from_slice(&word.to_ne_bytes());
    }
    for (i, byte) in out.iter_mut().enumerate().skip(head + 8 * words) {
        // SAFETY: `i < len`: in bounds, mapped per the caller.
        *byte = unsafe { shared_byte(src.wrapping_add(i)) }.load(Ordering::Relaxed);
    }
}

/// Copies `data` into shared memory at `dst` with relaxed atomic stores (see
/// [`copy_from_shared`]).
///
/// # Safety
/// `dst..dst + data.len()` must be mapped and writable for the whole call and must not
/// overlap `data`.
unsafe fn copy_to_shared(dst: *mut u8, data: &[u8]) {
    let len = data.len();
    let head = dst.align_offset(8).min(len);
    let words = (len - head) / 8;
    for (i, byte) in data[..head].iter().enumerate() {
        // SAFETY: `i < head <= len`: in bounds, mapped and writable per the caller.
        unsafe { shared_byte(dst.wrapping_add(i)) }.store(*byte, Ordering::Relaxed);
    }
    for w in 0..words {
        let at = head + 8 * w;
        let mut word = [0u8; 8];
        word.copy_from_slice(&data[at..at + 8]);
        // SAFETY: `dst + head` is 8-aligned and `at + 8 <= len`: in bounds, writable.
        unsafe { shared_word(dst.wrapping_add(at)) }
            .store(u64::from_ne_bytes(word), Ordering::Relaxed);
    }
    for (i, byte) in data.iter().enumerate().skip(head + 8 * words) {
        // SAFETY: `i < len`: in bounds, mapped and writable per the caller.
        unsafe { shared_byte(dst.wrapping_add(i)) }.store(*byte, Ordering::Relaxed);
    }
}

/// A bounds-checked window of a [`PosixMap`] (from [`PosixMap::region`]), for callers
/// who want the bytes of a buffer without copying them.
///
/// The window lives no longer than the mapping. The safe methods hand out only its
/// address and length; turning it into a slice is `unsafe`, because another process
/// may write the same bytes at any time.
#[derive(Clone, Copy, Debug)]
pub struct DataRegion<'a> {
    ptr: *mut u8,
    len: usize,
    map: PhantomData<&'a PosixMap>,
}

// SAFETY: a DataRegion is a borrowed address range of a PosixMap, which is Send and
// Sync; it gives no safe access to the bytes, and the unsafe accessors put the burden
// of synchronization on their caller.
unsafe impl Send for DataRegion<'_> {}
// SAFETY: as for Send: sharing the window shares only its address and length.
unsafe impl Sync for DataRegion<'_> {}

impl<'a> DataRegion<'a> {
    /// Length of the window in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte of the window.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The window as a shared slice.
    ///
    /// # Safety
    /// While the returned slice lives, no thread of any process may write these bytes
    /// (through [`Mapping::write`], another slice, or another process's mapping of the
    /// same segment); the caller guarantees it, typically by a protocol of its own
    /// ("the producer finished before it sent the handle").
    pub unsafe fn as_slice(&self) -> &'a [u8] {
        // SAFETY: the window is inside a mapping that outlives 'a, `len` bytes long and
        // at most isize::MAX (mmap cannot map more); the caller promises no writes while
        // the slice lives, as `&[u8]` requires.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The window as a mutable slice.
    ///
    /// # Safety
    /// While the returned slice lives, nothing else may access these bytes at all: no
    /// other slice of them (shared or mutable, from this or another region), no
    /// [`Mapping::read`] or [`Mapping::write`] of them, and no other process reading or
    /// writing them through its own mapping.
    #[allow(clippy::mut_from_ref)] // shared memory: exclusivity is the caller's promise
    pub unsafe fn as_mut_slice(&self) -> &'a mut [u8] {
        // SAFETY: the window is inside a writable mapping that outlives 'a, `len` bytes
        // long; the caller promises exclusive access while the slice lives, as
        // `&mut [u8]` requires.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(comm: &[u8], state: &str, start: u64) -> Vec<u8> {
        let mut line = b"4242 (".to_vec();
        line.extend_from_slice(comm);
        line.extend_from_slice(
            format!(
                ") {state} 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 {start} \
                 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
            )
            .as_bytes(),
        );
        line
    }

    #[test]
    fn proc_stat_fields_are_found_after_the_command_name() {
        let st = parse_proc_stat(&stat_line(b"cat", "S", 987_654)).unwrap();
        assert_eq!(
            st,
            ProcStat {
                pid: 4242,
                state: b'S',
                start_ticks: 987_654
            }
        );
    }

    #[test]
    fn a_command_name_with_spaces_and_parens_does_not_shift_the_fields() {
        let st = parse_proc_stat(&stat_line(b"a) b (c", "Z", 77)).unwrap();
        assert_eq!((st.pid, st.state, st.start_ticks), (4242, b'Z', 77));
        let st = parse_proc_stat(&stat_line(b") ) 1 2 3 (", "R", 5)).unwrap();
        assert_eq!((st.state, st.start_ticks), (b'R', 5));
    }

    #[test]
    fn a_command_name_that_is_not_utf8_is_fine() {
        let st = parse_proc_stat(&stat_line(b"\xff\xfe)x", "S", 9)).unwrap();
        assert_eq!(st.start_ticks, 9);
    }

    #[test]
    fn malformed_stat_lines_are_refused() {
        for bad in [
            &b""[..],
            b"4242 cat S 1",
            b"4242 (cat) S 1 2 3",
            b") 4242 (cat",
            b"x (cat) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
        ] {
            assert_eq!(parse_proc_stat(bad), None, "{bad:?}");
        }
        assert_eq!(parse_proc_stat(&stat_line(b"cat", "SS", 1)), None);
        assert_eq!(parse_proc_stat(&stat_line(b"cat", "S", 1)[..60]), None);
    }

    #[test]
    fn own_stat_parses_and_names_this_process() {
        let st = parse_proc_stat(&fs::read("/proc/self/stat").unwrap()).unwrap();
        assert_eq!(st.pid, std::process::id());
        assert!(matches!(st.state, b'R' | b'S'));
        let os = PosixOs::new();
        assert!(os.current().matches_start(st.start_ticks));
    }

    #[test]
    fn volatile_copies_match_plain_copies_at_every_alignment() {
        let mut backing = vec![0u64; 8];
        let base = backing.as_mut_ptr().cast::<u8>();
        let total = size_of_val(backing.as_slice());
        let pattern: Vec<u8> = (0..total as u8)
            .map(|b| b.wrapping_mul(37) ^ 0x5a)
            .collect();
        for offset in 0..17 {
            for len in 0..(total - offset).min(40) {
                // SAFETY: `base..base + total` is the live, exclusively owned `backing`.
                unsafe { std::ptr::write_bytes(base, 0, total) };
                // SAFETY: `offset + len <= total`, inside `backing`; `pattern` is
                // another allocation.
                unsafe { copy_to_shared(base.add(offset), &pattern[..len]) };
                let mut out = vec![0xeeu8; len];
                // SAFETY: as above.
                unsafe { copy_from_shared(base.add(offset), &mut out) };
                assert_eq!(out, pattern[..len], "offset {offset} len {len}");
                // SAFETY: `backing` is not otherwise borrowed while this slice lives.
                let all = unsafe { std::slice::from_raw_parts(base, total) };
                assert!(all[..offset].iter().all(|&b| b == 0), "no write before");
                assert!(
                    all[offset + len..].iter().all(|&b| b == 0),
                    "no write after"
                );
            }
        }
    }

    #[test]
    fn a_token_of_another_start_time_or_an_unused_pid_is_dead() {
        let os = PosixOs::new();
        let me = os.current();
        assert!(os.is_alive(me));
        let other = Token::new(me.pid(), me.start_ticks() + 1).unwrap();
        assert!(!os.is_alive(other));
        // pid_max is at most 2^22: this pid never exists.
        let never = Token::new((1 << 22) - 1, 1).unwrap();
        assert!(!os.is_alive(never) || fs::metadata("/proc/4194303").is_ok());
    }
}
