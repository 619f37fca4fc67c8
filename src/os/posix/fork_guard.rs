//! Telling a forked child from its parent without a system call: [`this_pid`] keeps the
//! pid in a word of a page marked `MADV_WIPEONFORK`, which the kernel hands to the
//! child of any `fork` zero-filled (libc's `fork`, `_Fork`, a raw `clone` without
//! `CLONE_VM` alike); a `pthread_atfork` child handler clears it as well, for a kernel
//! or emulator that accepts the advice without acting on it. A word that reads 0 was
//! never set in this process, so `getpid` is asked and the answer kept.
//!
//! # Safety
//! `unsafe` blocks for: mapping one private anonymous page and advising it
//! `MADV_WIPEONFORK` (or unmapping it again when the kernel refuses); unmapping a page
//! that lost the race to be published; registering the `pthread_atfork` child handler;
//! viewing the published page's first eight bytes as an `AtomicU64` that lives as long
//! as the process; in the unit tests, a `fork` and a raw `clone` whose children only
//! read that word, and their `_exit`.
#![allow(unsafe_code)]

use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::sys::mman::{MapFlags, MmapAdvise, ProtFlags, madvise, mmap_anonymous, munmap};

use crate::sync::process::{AtomicU64, Ordering};

/// The address of the word's page: 0 until the first call maps it, [`UNSUPPORTED`] when
/// the kernel cannot wipe a page on fork (before Linux 4.14; every call then asks
/// `getpid`). An atomic rather than a `LazyLock`: a child forked while a thread of its
/// parent was setting the page up must not wait for a thread it does not have.
static PAGE: AtomicU64 = AtomicU64::new(0);
const UNSUPPORTED: u64 = 1;
const PAGE_LEN: usize = 4096;

/// This process's pid: `getpid` the first time, and again only in a forked child.
pub(super) fn this_pid() -> u32 {
    let Some(word) = word() else {
        return std::process::id();
    };
    // Relaxed: only this process writes the word (a child starts from 0), and every
    // thread that sets it sets the same pid.
    match u32::try_from(word.load(Ordering::Relaxed)) {
        Ok(pid) if pid != 0 => pid,
        _ => {
            let pid = std::process::id();
            word.store(u64::from(pid), Ordering::Relaxed);
            pid
        }
    }
}

/// The word, mapped by the first call (two threads racing to map it keep the first
/// page published and unmap the other). The thread that publishes it also registers
/// [`forget_in_child`] to run in the child of every libc `fork`: a second line, for a
/// kernel (or an emulator) that accepts the advice without acting on it.
fn word() -> Option<&'static AtomicU64> {
    // Acquire: pairs with the AcqRel publish below, so the page is mapped and advised
    // before its address is used.
    if PAGE.load(Ordering::Acquire) == 0 {
        let mine = wipe_on_fork_page();
        let address = mine.map_or(UNSUPPORTED, |p| p.as_ptr() as u64);
        match PAGE.compare_exchange(0, address, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) if mine.is_some() => {
                // SAFETY: registers a handler that only stores to an atomic (async-
                // signal-safe, as a child handler must be); a failure (ENOMEM) leaves
                // the page's wiping alone.
                let _ = unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
            }
            Ok(_) => {}
            Err(_) => {
                if let Some(mine) = mine {
                    // SAFETY: this page was mapped just above and its address was never
                    // published: nothing else refers to it.
                    let _ = unsafe { munmap(mine, PAGE_LEN) };
                }
            }
        }
    }
    published()
}

/// The published word, if a page is published.
fn published() -> Option<&'static AtomicU64> {
    let page = PAGE.load(Ordering::Acquire);
    if page == 0 || page == UNSUPPORTED {
        return None;
    }
    // SAFETY: `page` is a published page: readable and writable, zero-filled when
    // mapped (and in every forked child), page-aligned (so aligned for the facade's
    // AtomicU64, a transparent wrapper of std's), never unmapped (so valid for
    // 'static), and accessed only through this atomic.
    Some(unsafe { &*(page as usize as *const AtomicU64) })
}

/// Run by libc in the child of a `fork`: the pid kept is the parent's.
extern "C" fn forget_in_child() {
    if let Some(word) = published() {
        word.store(0, Ordering::Relaxed);
    }
}

/// A fresh page the kernel zeroes in every forked child; `None` when it cannot.
fn wipe_on_fork_page() -> Option<NonNull<std::ffi::c_void>> {
    let len = NonZeroUsize::new(PAGE_LEN)?;
    // SAFETY: a fresh private anonymous mapping overlaps nothing of this process; the
    // advice changes only what a child sees of it. Refused, the page is unmapped again
    // before anyone saw it.
    unsafe {
        let page = mmap_anonymous(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE,
        )
        .ok()?;
        if madvise(page, PAGE_LEN, MmapAdvise::MADV_WIPEONFORK).is_err() {
            let _ = munmap(page, PAGE_LEN);
            return None;
        }
        Some(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_is_this_processs_and_a_forked_child_sees_its_own() {
        assert!(
            word().is_some(),
            "this kernel wipes pages on fork (Linux 4.14+)"
        );
        assert_eq!(this_pid(), std::process::id());
        assert_eq!(this_pid(), std::process::id(), "asked again");
        // SAFETY: the child only loads a word, calls getpid and `_exit`s.
        let forked = match unsafe { nix::unistd::fork() }.expect("fork") {
            nix::unistd::ForkResult::Child => None,
            nix::unistd::ForkResult::Parent { child } => Some(child),
        };
        assert_the_child_sees_its_own_pid(forked);
    }

    /// A raw `clone` (no `CLONE_VM`), which runs no `pthread_atfork` handler: only the
    /// page's wiping tells the child it is not its parent.
    #[test]
    fn a_child_of_a_raw_clone_sees_its_own_pid_too() {
        assert_eq!(this_pid(), std::process::id());
        // SAFETY: `clone` with SIGCHLD alone is a `fork` that bypasses libc's handlers;
        // the child only loads a word, calls getpid and `_exit`s.
        let ret =
            unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) };
        let forked = (ret != 0)
            .then(|| nix::unistd::Pid::from_raw(i32::try_from(ret).expect("clone failed")));
        assert_the_child_sees_its_own_pid(forked);
    }

    /// In the child of a fork (`forked` is `None`): exits 0 when [`this_pid`] is the
    /// child's own pid, 1 if not, doing only async-signal-safe work (a load, `getpid`,
    /// `_exit`). In the parent: reaps the child and asserts it exited 0.
    fn assert_the_child_sees_its_own_pid(forked: Option<nix::unistd::Pid>) {
        let Some(child) = forked else {
            let right = this_pid() == std::process::id();
            // SAFETY: `_exit` ends the child at once: no destructor, no atexit handler,
            // nothing of the parent's test harness runs in it.
            unsafe { libc::_exit(if right { 0 } else { 1 }) }
        };
        let status = nix::sys::wait::waitpid(child, None).expect("reap the child");
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(child, 0),
            "the child read its parent's pid"
        );
    }

    /// The libc child handler clears the word: the next question asks `getpid` again.
    #[test]
    fn the_child_handler_forgets_the_pid() {
        assert_eq!(this_pid(), std::process::id());
        forget_in_child();
        assert_eq!(published().unwrap().load(Ordering::Relaxed), 0);
        assert_eq!(this_pid(), std::process::id());
    }
}
