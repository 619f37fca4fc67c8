//! What a process keeps about itself and a fork must forget (its pid, its token, its
//! pid namespace, the shift of its time namespace, whether its table of watched
//! processes is its own: [`Slot`]), kept without a system call to check it: in words
//! of a page marked `MADV_WIPEONFORK`, which the kernel hands to the child of any
//! `fork` zero-filled (libc's `fork`, `_Fork`, a raw `clone` without `CLONE_VM` alike);
//! a `pthread_atfork` child handler clears it as well, for a kernel or emulator that
//! accepts the advice without acting on it. A word that reads 0 was not set in this process, whose pid may even be one
//! its parent's parent had: the value is computed again and kept. [`this_pid`] is
//! `getpid` asked once per process.
//!
//! # Safety
//! `unsafe` blocks for: mapping one private anonymous page and advising it
//! `MADV_WIPEONFORK` (or unmapping it again when the kernel refuses); unmapping a page
//! that lost the race to be published; registering the `pthread_atfork` child handler;
//! viewing the published page's first words as `AtomicU64`s that live as long as the
//! process; in the unit tests, a `fork` and a raw `clone` whose children only
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

/// What a process keeps about itself that a fork must forget: one word each in the
/// page, 0 meaning "not kept since this process last forked" (or ever).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Slot {
    /// Its pid.
    Pid = 0,
    /// Its token (pid and start time).
    Token = 1,
    /// The inode of its pid namespace.
    PidNamespace = 2,
    /// Set once its table of watched processes was made in this process.
    WatchedTable = 3,
    /// The shift of its readings of start times, once known (`timens.rs`).
    TimeShift = 4,
}
const SLOTS: usize = 5;

/// The value kept in `slot` since this process last forked; `None` when none is (or
/// the kernel cannot wipe the page: [`wiped_on_fork`] is then `false`).
pub(super) fn kept(slot: Slot) -> Option<u64> {
    // Relaxed: only this process writes its words (a child starts from 0), and every
    // thread that keeps a value keeps the same one.
    Some(word(slot)?.load(Ordering::Relaxed)).filter(|value| *value != 0)
}

/// Keeps `value` in `slot` until this process forks (0 forgets what was kept);
/// `false` when there is no page to keep it in.
pub(super) fn keep(slot: Slot, value: u64) -> bool {
    match word(slot) {
        Some(word) => {
            word.store(value, Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// Whether values kept here are forgotten by every fork (the page exists).
pub(super) fn wiped_on_fork() -> bool {
    page().is_some()
}

/// This process's pid: `getpid` the first time, and again only in a forked child.
pub(super) fn this_pid() -> u32 {
    if let Some(pid) = kept(Slot::Pid).and_then(|pid| u32::try_from(pid).ok()) {
        return pid;
    }
    let pid = std::process::id();
    keep(Slot::Pid, u64::from(pid));
    pid
}

/// The word of `slot` in the page.
fn word(slot: Slot) -> Option<&'static AtomicU64> {
    page().map(|words| &words[slot as usize])
}

/// The page's words, mapped by the first call (two threads racing to map it keep the
/// first page published and unmap the other). The thread that publishes it also registers
/// [`forget_in_child`] to run in the child of every libc `fork`: a second line, for a
/// kernel (or an emulator) that accepts the advice without acting on it.
fn page() -> Option<&'static [AtomicU64; SLOTS]> {
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

/// The published page's words, if a page is published.
fn published() -> Option<&'static [AtomicU64; SLOTS]> {
    let page = PAGE.load(Ordering::Acquire);
    if page == 0 || page == UNSUPPORTED {
        return None;
    }
    // SAFETY: `page` is a published page: readable and writable, zero-filled when
    // mapped (and in every forked child), page-aligned (so aligned for the facade's
    // AtomicU64, a transparent wrapper of std's), longer than SLOTS words, never
    // unmapped (so valid for 'static), and accessed only through these atomics.
    Some(unsafe { &*(page as usize as *const [AtomicU64; SLOTS]) })
}

/// Run by libc in the child of a `fork`: what is kept is the parent's.
extern "C" fn forget_in_child() {
    if let Some(words) = published() {
        for word in words {
            word.store(0, Ordering::Relaxed);
        }
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
        super::super::process::current(); // keeps the token: the child must not see it
        assert!(
            wiped_on_fork(),
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
        super::super::process::current(); // keeps the token: the child must not see it
        // SAFETY: `clone` with SIGCHLD alone is a `fork` that bypasses libc's handlers;
        // the child only loads a word, calls getpid and `_exit`s.
        let ret =
            unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) };
        assert!(
            ret >= 0,
            "clone failed: {}",
            std::io::Error::last_os_error()
        );
        let forked =
            (ret != 0).then(|| nix::unistd::Pid::from_raw(i32::try_from(ret).expect("a pid")));
        assert_the_child_sees_its_own_pid(forked);
    }

    /// In the child of a fork (`forked` is `None`): exits 0 when [`this_pid`] is the
    /// child's own pid and the parent's token is not kept, 1 if not, doing only async-signal-safe work (a load, `getpid`,
    /// `_exit`). In the parent: reaps the child and asserts it exited 0.
    fn assert_the_child_sees_its_own_pid(forked: Option<nix::unistd::Pid>) {
        let Some(child) = forked else {
            let right = this_pid() == std::process::id() && kept(Slot::Token).is_none();
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
        assert_eq!(kept(Slot::Pid), None);
        assert_eq!(this_pid(), std::process::id());
        assert_eq!(kept(Slot::Pid), Some(u64::from(std::process::id())));
    }
}
