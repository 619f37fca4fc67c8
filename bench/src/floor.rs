//! The raw-syscall floor that the benchmarks (the criterion benches and `shmrc bench`) measure shmrc
//! against: sharing memory with the bare system calls and no protocol at all — no
//! header, no holder slots, no validation, no refcount. A floor buffer is `memfd_create`
//! (or `shm_open` of a name) + `ftruncate` (+ `posix_fallocate` when asked) + `mmap`;
//! the descriptor travels with one `sendmsg` (`SCM_RIGHTS`), a name as plain bytes.
//!
//! Nothing here is used by shmrc itself: it is the yardstick. Who unlinks a named floor
//! object and when is the caller's business, exactly as with the raw calls.
//!
//! # Safety
//! This backend file owns the `unsafe` of the floor: `mmap`/`munmap` of a descriptor
//! it was handed, one-byte volatile accesses and 8-byte atomic compare-and-swaps inside such
//! a mapping. A [`FloorMap`]
//! is created only from a successful `mmap` of exactly its length, is unmapped once (on
//! drop), and every access is bounds-checked against that length first; the bytes may
//! be written concurrently by another process, so the safe accessors only touch them
//! with volatile one-byte accesses or aligned word atomics (torn values are possible,
//! undefined behaviour is not), as in shmrc's own POSIX backend. The two plain slices over a mapping
//! ([`FloorMap::as_slice`], [`FloorMap::as_mut_slice`], for the fill workload) are
//! `unsafe`: their caller promises, as with shmrc's `DataRegion`, that nothing writes
//! (or, for the mutable one, touches) the bytes while the slice lives. One more block
//! makes the raw `pidfd_open` system call (no safe wrapper in std or nix) and takes
//! ownership of the descriptor it returns.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io::{IoSlice, IoSliceMut};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;

use nix::errno::Errno;
use nix::fcntl::{OFlag, posix_fallocate};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap, shm_open, shm_unlink};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use nix::sys::stat::Mode;
use nix::unistd::ftruncate;

use shmrc::checkers::os::MAX_FDS_PER_SEND;
use shmrc::checkers::sync::{AtomicU64, Ordering};
use shmrc::{Error, Result};

/// Sizes a fresh object: `ftruncate`, then `posix_fallocate` when `reserve` (what
/// shmrc does, so that a full `/dev/shm` is an error and never a SIGBUS).
fn size(fd: &OwnedFd, len: usize, reserve: bool) -> Result<()> {
    let off = libc::off_t::try_from(len)
        .map_err(|_| Error::InvalidArgument(format!("length {len} does not fit a file offset")))?;
    ftruncate(fd, off).map_err(|e| Error::os("ftruncate", e))?;
    if reserve && off > 0 {
        posix_fallocate(fd, 0, off).map_err(|e| Error::os("posix_fallocate", e))?;
    }
    Ok(())
}

/// An anonymous object of `len` bytes (`memfd_create` + sizing).
pub fn memfd(len: usize, reserve: bool) -> Result<OwnedFd> {
    let fd = memfd_create("shmrc-floor", MFdFlags::MFD_CLOEXEC)
        .map_err(|e| Error::os("memfd_create", e))?;
    size(&fd, len, reserve)?;
    Ok(fd)
}

/// Creates the named object `/name` of `len` bytes, exclusively, mode 0600.
pub fn create_named(name: &str, len: usize, reserve: bool) -> Result<OwnedFd> {
    let fd = shm_open(
        format!("/{name}").as_str(),
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_CLOEXEC,
        Mode::S_IRUSR | Mode::S_IWUSR,
    )
    .map_err(|e| Error::os("shm_open", e))?;
    if let Err(e) = size(&fd, len, reserve) {
        let _ = unlink_named(name);
        return Err(e);
    }
    Ok(fd)
}

/// Opens the existing named object `/name` read-write; [`Error::Gone`] if there is none.
pub fn open_named(name: &str) -> Result<OwnedFd> {
    match shm_open(
        format!("/{name}").as_str(),
        OFlag::O_RDWR | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(fd),
        Err(Errno::ENOENT) => Err(Error::Gone {
            segment: name.to_owned(),
        }),
        Err(e) => Err(Error::os("shm_open", e)),
    }
}

/// Removes the name `/name`; [`Error::Gone`] if there is none.
pub fn unlink_named(name: &str) -> Result<()> {
    match shm_unlink(format!("/{name}").as_str()) {
        Ok(()) => Ok(()),
        Err(Errno::ENOENT) => Err(Error::Gone {
            segment: name.to_owned(),
        }),
        Err(e) => Err(Error::os("shm_unlink", e)),
    }
}

/// The least a sweep that must map can do with one listed name of `len` bytes or more:
/// open it, `fstat` it (its owner and length), map `len` bytes, take one word of it by
/// compare-and-swap (a holder slot), unlink it, unmap it and close it. A sweep of
/// shmrc's protocol cannot do less per segment: a dead holder's slot is a shared word
/// that a live attacher may take at the same moment, so it is reclaimed by a CAS in a
/// mapping (reading the file and unlinking it would destroy a segment a process had
/// just claimed, `docs/PROTOCOL.md` §6, P1). [`Error::Gone`] if there is no such name.
pub fn map_claim_unlink_named(name: &str, len: usize) -> Result<()> {
    let fd = open_checked(name, len, nix::unistd::geteuid().as_raw())?;
    let map = FloorMap::new(fd.as_fd(), len)?;
    drop(fd);
    map.compare_exchange_word(0, 0, 1)?;
    unlink_named(name)?;
    drop(map);
    Ok(())
}

/// Opens the named object `name` and checks on the descriptor (`fstat`), as shmrc does
/// before it maps a segment, that it belongs to the user `me` and is at least `len`
/// bytes long. [`Error::Gone`] if there is no such name.
pub fn open_checked(name: &str, len: usize, me: u32) -> Result<OwnedFd> {
    let fd = open_named(name)?;
    let stat = nix::sys::stat::fstat(&fd).map_err(|e| Error::os("fstat", e))?;
    if stat.st_uid != me || (stat.st_size as u64) < len as u64 {
        return Err(Error::InvalidArgument(format!(
            "floor object {name} is not this user's or is shorter than {len} bytes"
        )));
    }
    Ok(fd)
}

/// Sets the mode of `fd`'s object to 0600 (its owner reads and writes) whatever the
/// umask left of it, as shmrc does for a named segment it creates.
pub fn set_owner_only(fd: &OwnedFd) -> Result<()> {
    nix::sys::stat::fchmod(fd, Mode::S_IRUSR | Mode::S_IWUSR).map_err(|e| Error::os("fchmod", e))
}

/// A process descriptor on the process `pid` (`pidfd_open`, Linux 5.3): readable once
/// that process has exited.
pub fn pidfd_of(pid: u32) -> Result<OwnedFd> {
    let raw_pid = libc::pid_t::try_from(pid)
        .map_err(|_| Error::InvalidArgument(format!("pid {pid} is out of range")))?;
    // SAFETY: pidfd_open takes a pid and a flags word (0) and returns a new descriptor
    // or -1; it reads and writes no memory of this process.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, 0 as libc::c_uint) };
    if ret < 0 {
        return Err(Error::os("pidfd_open", std::io::Error::last_os_error()));
    }
    let raw = RawFd::try_from(ret).map_err(|_| {
        Error::InvalidArgument(format!("pidfd_open returned {ret}, not a descriptor"))
    })?;
    // SAFETY: `raw` is the descriptor pidfd_open just returned; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Whether the process of the process descriptor `pidfd` has exited: one `poll` that
/// does not wait.
pub fn has_exited(pidfd: BorrowedFd<'_>) -> Result<bool> {
    let mut fds = [PollFd::new(pidfd, PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).map_err(|e| Error::os("poll", e))?;
    Ok(fds[0]
        .revents()
        .is_some_and(|r| r.contains(PollFlags::POLLIN)))
}

/// A shared read-write mapping; dropping it unmaps it.
#[derive(Debug)]
pub struct FloorMap {
    ptr: NonNull<c_void>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it is only accessed
// with volatile one-byte operations (see the module's Safety header), from any thread.
unsafe impl Send for FloorMap {}
// SAFETY: as for Send: no access through `&FloorMap` can cause a data race that is UB.
unsafe impl Sync for FloorMap {}

impl FloorMap {
    /// Maps the first `len` bytes of `fd` shared, read-write. The caller sized `fd` to
    /// at least `len` (pages past its end would fault on first touch).
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> Result<FloorMap> {
        let length = NonZeroUsize::new(len).ok_or_else(|| {
            Error::InvalidArgument("cannot map zero bytes of a floor object".into())
        })?;
        // SAFETY: a fresh mapping chosen by the kernel (no address given) cannot alias
        // any Rust object; `fd` is a valid open descriptor for the call's duration.
        let ptr = unsafe {
            mmap(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| Error::os("mmap", e))?;
        Ok(FloorMap { ptr, len })
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: a zero-length map is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn byte(&self, offset: usize) -> Result<*mut u8> {
        if offset >= self.len {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} outside a {}-byte mapping",
                self.len
            )));
        }
        Ok(self.ptr.as_ptr().cast::<u8>().wrapping_add(offset))
    }

    /// Writes one byte at `offset`.
    pub fn write_byte(&self, offset: usize, value: u8) -> Result<()> {
        let p = self.byte(offset)?;
        // SAFETY: `p` lies inside the live mapping (checked by `byte`); volatile, so a
        // concurrent writer in another process tears nothing we rely on.
        unsafe { p.write_volatile(value) };
        Ok(())
    }

    /// Reads one byte at `offset`.
    pub fn read_byte(&self, offset: usize) -> Result<u8> {
        let p = self.byte(offset)?;
        // SAFETY: as in `write_byte`.
        Ok(unsafe { p.read_volatile() })
    }

    /// Compare-and-swap of the 8-byte word at `offset` (a multiple of 8) from `current`
    /// to `new`, sequentially consistent (as shmrc's slot words); whether it swapped.
    pub fn compare_exchange_word(&self, offset: usize, current: u64, new: u64) -> Result<bool> {
        if offset % 8 != 0 || offset.checked_add(8).is_none_or(|end| end > self.len) {
            return Err(Error::InvalidArgument(format!(
                "word offset {offset} unaligned or outside a {}-byte mapping",
                self.len
            )));
        }
        Ok(self
            .word(offset)
            .compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok())
    }

    /// The least a finalize of shmrc's protocol does per holder slot, for the `count`
    /// words from byte `offset` (a multiple of 8): load each, then CAS each from what
    /// was read to all ones (its tombstone), sequentially consistent. Whether every
    /// CAS swapped.
    pub fn tombstone_words(&self, offset: usize, count: usize) -> Result<bool> {
        let end = count
            .checked_mul(8)
            .and_then(|bytes| offset.checked_add(bytes))
            .filter(|end| offset % 8 == 0 && *end <= self.len);
        if end.is_none() {
            return Err(Error::InvalidArgument(format!(
                "{count} words from offset {offset} unaligned or outside a {}-byte mapping",
                self.len
            )));
        }
        let words: Vec<u64> = (0..count)
            .map(|i| self.word(offset + 8 * i).load(Ordering::SeqCst))
            .collect();
        Ok(words.iter().enumerate().all(|(i, seen)| {
            self.word(offset + 8 * i)
                .compare_exchange(*seen, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        }))
    }

    /// The word at `offset`, which the caller checked is a multiple of 8 with its 8
    /// bytes inside the mapping.
    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset + 8 <= self.len);
        let p = self
            .ptr
            .as_ptr()
            .cast::<u8>()
            .wrapping_add(offset)
            .cast::<u64>();
        // SAFETY: `p` is 8-aligned (the mapping is page-aligned, `offset` a multiple of
        // 8) and its 8 bytes lie inside the live mapping (every caller checks), which
        // outlives the borrow of `self`; the facade's `AtomicU64` is a transparent
        // wrapper of `std`'s (the layout of a `u64`), as shmrc views its own words;
        // other processes touch shared words only atomically or with volatile byte
        // accesses, which cannot make an atomic access undefined behaviour here.
        unsafe { &*p.cast::<AtomicU64>() }
    }

    /// The mapping as a shared slice.
    ///
    /// # Safety
    /// No thread of any process may write these bytes while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr`/`len` are one live mapping (unmapped only on drop, which the
        // borrow of `self` prevents), at most isize::MAX bytes (mmap cannot map more);
        // the caller excludes writers, as `&[u8]` requires.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>(), self.len) }
    }

    /// The mapping as a mutable slice.
    ///
    /// # Safety
    /// Nothing else may read or write these bytes, in any process, while the slice
    /// lives.
    #[allow(clippy::mut_from_ref)] // shared memory: exclusivity is the caller's promise
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, the mapping writable; the caller promises exclusive
        // access, as `&mut [u8]` requires.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<u8>(), self.len) }
    }
}

impl Drop for FloorMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what `mmap` returned, unmapped only here, and
        // no reference into the mapping outlives `self` (accesses copy single bytes).
        let _ = unsafe { munmap(self.ptr, self.len) };
    }
}

/// Sends all of `bytes` (at least one) with `fds` attached (`SCM_RIGHTS`, at most
/// [`MAX_FDS_PER_SEND`]) in one `sendmsg`; a short send is an error (the floor's
/// messages are small enough never to be split on a Unix stream).
pub fn send(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    if bytes.is_empty() || fds.len() > MAX_FDS_PER_SEND {
        return Err(Error::InvalidArgument(format!(
            "a floor message needs 1+ bytes and at most {MAX_FDS_PER_SEND} fds ({} bytes, {} fds given)",
            bytes.len(),
            fds.len()
        )));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
    let iov = [IoSlice::new(bytes)];
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| Error::os("sendmsg", e))?;
    if sent != bytes.len() {
        return Err(Error::os("sendmsg", std::io::ErrorKind::WriteZero));
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes with one `recvmsg`, appending the descriptors that
/// came with them to `fds`. `Ok(0)`: the peer closed the stream.
pub fn recv(stream: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<usize> {
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS_PER_SEND]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        stream.as_fd().as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| Error::os("recvmsg", e))?;
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    let mut arrived = Vec::new();
    for cmsg in msg.cmsgs().map_err(|e| Error::os("recvmsg", e))? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: descriptors that arrive with SCM_RIGHTS are fresh in this process
            // and owned by nobody else.
            arrived.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
        }
    }
    if truncated {
        return Err(Error::os("recvmsg", Errno::EMFILE));
    }
    fds.extend(arrived);
    Ok(msg.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memfd_byte_written_through_one_mapping_is_read_through_another() {
        let fd = memfd(4096, true).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, b"x", &[fd.as_fd()]).unwrap();
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        assert_eq!(recv(&b, &mut byte, &mut got).unwrap(), 1);
        let theirs = FloorMap::new(got[0].as_fd(), 4096).unwrap();
        let ours = FloorMap::new(fd.as_fd(), 4096).unwrap();
        ours.write_byte(4095, 7).unwrap();
        assert_eq!(theirs.read_byte(4095).unwrap(), 7);
    }

    #[test]
    fn a_word_cas_swaps_once_and_refuses_unaligned_or_outside_offsets() {
        let fd = memfd(4096, true).unwrap();
        let map = FloorMap::new(fd.as_fd(), 4096).unwrap();
        assert!(map.compare_exchange_word(8, 0, 7).unwrap());
        assert!(!map.compare_exchange_word(8, 0, 9).unwrap());
        assert_eq!(map.read_byte(8).unwrap(), 7);
        for bad in [4, 4096, 4092, usize::MAX - 7] {
            let e = map.compare_exchange_word(bad, 0, 1).unwrap_err();
            assert!(e.to_string().contains("unaligned or outside"), "{bad}: {e}");
        }
    }

    #[test]
    fn tombstoning_words_turns_each_to_all_ones_and_refuses_a_range_outside() {
        let fd = memfd(4096, true).unwrap();
        let map = FloorMap::new(fd.as_fd(), 4096).unwrap();
        map.write_byte(16, 5).unwrap();
        assert!(map.tombstone_words(8, 511).unwrap());
        assert!((8..4096).all(|i| map.read_byte(i).unwrap() == 0xff));
        assert_eq!(map.read_byte(0).unwrap(), 0);
        for (offset, count) in [(4, 1), (8, 512), (0, usize::MAX), (usize::MAX - 7, 1)] {
            let e = map.tombstone_words(offset, count).unwrap_err();
            assert!(
                e.to_string().contains("unaligned or outside"),
                "{offset}: {e}"
            );
        }
    }

    #[test]
    fn the_mapping_sweep_floor_unlinks_its_object_and_refuses_a_short_one() {
        let name = format!("shmrc-floor-test-sweep-{}", std::process::id());
        drop(create_named(&name, 4096, true).unwrap());
        let e = map_claim_unlink_named(&name, 8192).unwrap_err();
        assert!(e.to_string().contains("shorter than 8192"), "{e}");
        map_claim_unlink_named(&name, 4096).unwrap();
        assert!(open_named(&name).unwrap_err().is_gone());
        assert!(map_claim_unlink_named(&name, 4096).unwrap_err().is_gone());
    }

    #[test]
    fn a_checked_open_refuses_another_users_object_and_a_missing_one() {
        let name = format!("shmrc-floor-test-checked-{}", std::process::id());
        let fd = create_named(&name, 4096, true).unwrap();
        // The mode is 0600 after set_owner_only whatever it was before.
        nix::sys::stat::fchmod(&fd, Mode::empty()).unwrap();
        set_owner_only(&fd).unwrap();
        let mode = nix::sys::stat::fstat(&fd).unwrap().st_mode & 0o7777;
        assert_eq!(mode, 0o600);
        drop(fd);
        let me = nix::unistd::geteuid().as_raw();
        let e = open_checked(&name, 4096, me.wrapping_add(1)).unwrap_err();
        assert!(e.to_string().contains("not this user's"), "{e}");
        drop(open_checked(&name, 4096, me).unwrap());
        unlink_named(&name).unwrap();
        assert!(open_checked(&name, 4096, me).unwrap_err().is_gone());
    }

    #[test]
    fn a_process_descriptor_reads_exited_once_its_process_has_and_a_bad_pid_is_an_error() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pidfd = pidfd_of(child.id()).unwrap();
        assert!(!has_exited(pidfd.as_fd()).unwrap());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(has_exited(pidfd.as_fd()).unwrap());
        let e = pidfd_of(u32::MAX).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        // A pid no process has (the largest the kernel can give is 2^22).
        let e = pidfd_of(1 << 23).unwrap_err();
        assert!(e.to_string().contains("pidfd_open"), "{e}");
    }

    #[test]
    fn named_floor_objects_open_while_named_and_are_gone_after_unlink() {
        let name = format!("shmrc-t-floor-{}", std::process::id());
        let fd = create_named(&name, 8192, false).unwrap();
        let again = open_named(&name).unwrap();
        let map = FloorMap::new(again.as_fd(), 8192).unwrap();
        map.write_byte(0, 3).unwrap();
        assert_eq!(
            FloorMap::new(fd.as_fd(), 1).unwrap().read_byte(0).unwrap(),
            3
        );
        unlink_named(&name).unwrap();
        assert!(open_named(&name).unwrap_err().is_gone());
        assert!(unlink_named(&name).unwrap_err().is_gone());
        assert!(matches!(
            create_named("no/slash-allowed", 1, false),
            Err(Error::Os {
                call: "shm_open",
                ..
            })
        ));
    }

    #[test]
    fn out_of_range_accesses_and_empty_maps_and_messages_are_refused() {
        let fd = memfd(4096, false).unwrap();
        assert!(matches!(
            FloorMap::new(fd.as_fd(), 0),
            Err(Error::InvalidArgument(_))
        ));
        let map = FloorMap::new(fd.as_fd(), 4096).unwrap();
        assert!(matches!(
            map.read_byte(4096),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            map.write_byte(usize::MAX, 1),
            Err(Error::InvalidArgument(_))
        ));
        let (a, _b) = UnixStream::pair().unwrap();
        assert!(matches!(send(&a, b"", &[]), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            memfd(usize::MAX, false),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_closed_peer_reads_as_zero_bytes_and_a_send_to_it_fails() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let mut buf = [0u8; 4];
        assert_eq!(recv(&a, &mut buf, &mut Vec::new()).unwrap(), 0);
        assert!(matches!(
            send(&a, b"x", &[]),
            Err(Error::Os {
                call: "sendmsg",
                ..
            })
        ));
    }
}
