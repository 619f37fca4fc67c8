//! Fd passing: bytes and open files over a Unix stream socket, the files as
//! `SCM_RIGHTS` descriptors attached to the first byte of a send, at most
//! [`MAX_FDS_PER_SEND`] at a time.
//!
//! # Safety
//! The `unsafe` here is three libc calls and the control-message walk of `recvmsg`.
//! It is sound because:
//! - `poll` and `recvmsg` get buffers that are live and exclusively borrowed for the
//!   call, with their true lengths, and descriptors that are open;
//! - the control messages are read only through `CMSG_FIRSTHDR`/`CMSG_NXTHDR`/
//!   `CMSG_DATA`, within the `msg_controllen` bytes the kernel wrote into a buffer
//!   aligned for `cmsghdr`, the descriptor data clamped to that buffer's end;
//! - each descriptor received is taken into an [`OwnedFd`] exactly once: the kernel
//!   installed it for this message and nothing else owns it.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use nix::sys::socket::{ControlMessage, MsgFlags, send as sys_send, sendmsg};

use super::PosixFile;
use super::limits::fd_limit;
use super::shm::fd_error;
use crate::error::{Error, Result};
use crate::os::MAX_FDS_PER_SEND;

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

/// [`Os::send`](crate::os::Os::send): `bytes` with `files` attached to the first of
/// them, waiting while a non-blocking stream is full.
pub(super) fn send(stream: &UnixStream, bytes: &[u8], files: &[&PosixFile]) -> Result<()> {
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
        match sys_send(fd.as_raw_fd(), &bytes[sent..], flags) {
            Ok(0) => return Err(Error::os("send", io::ErrorKind::WriteZero)),
            Ok(n) => sent += n,
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => wait_writable(fd)?,
            Err(e) => return Err(send_error("send", e)),
        }
    }
    Ok(())
}

/// [`Os::recv`](crate::os::Os::recv): at most `buf.len()` bytes, and the files that
/// came with them.
pub(super) fn recv(
    stream: &UnixStream,
    buf: &mut [u8],
    files: &mut Vec<PosixFile>,
) -> Result<usize> {
    if buf.is_empty() {
        return Err(Error::InvalidArgument(
            "recv needs room for at least one byte".into(),
        ));
    }
    recv_with_fds(stream.as_fd(), buf, files)
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
            liveness_fds: super::process::release_watched(),
        });
    }
    Ok(received)
}
