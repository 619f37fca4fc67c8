//! Sleeping on a shared word until another process changes it: `FUTEX_WAIT` and
//! `FUTEX_WAKE` on the low 32 bits of an [`AtomicU64`] (publish/subscribe's wake word,
//! `pubsub/mod.rs`). Shared futexes (no `FUTEX_PRIVATE_FLAG`): the word lives in a
//! mapping of several processes, and the kernel keys the waiters by the page behind
//! the address, so a wake in one process reaches the waiters of another.
//!
//! The comparison is on 32 bits: a waiter that read the word, then slept through
//! exactly 2^32 changes before its wait began, would sleep until its timeout (the
//! callers' timeouts bound it).
//!
//! # Safety
//! The two `unsafe` blocks make the `futex` system call on the address of an
//! [`AtomicU64`] that the caller lends for the call: valid, aligned (8 bytes, more than
//! the 4 a futex needs) and alive until the call returns. `FUTEX_WAIT` reads the 32
//! bits there atomically and writes nothing; `FUTEX_WAKE` touches no memory. The
//! timeout is a `timespec` on this stack frame.
#![allow(unsafe_code)]

use std::time::Duration;

use crate::sync::AtomicU64;

/// Where the low 32 bits of a `u64` sit inside it.
const LOW_HALF: usize = if cfg!(target_endian = "little") { 0 } else { 4 };

fn low_half(word: &AtomicU64) -> *const u32 {
    word.as_ptr()
        .cast::<u8>()
        .wrapping_add(LOW_HALF)
        .cast::<u32>()
}

/// How long a wait polls instead when the kernel refuses futexes (a seccomp filter, an
/// old kernel): a sleep this long, then the caller looks at the word again.
const POLL: Duration = Duration::from_millis(1);

/// Sleeps while the low 32 bits of `word` equal those of `seen`, until a
/// [`wake_all`] of it or `timeout`: `false` only when the timeout ran out (see
/// [`Os::wait_word`](crate::os::Os::wait_word)).
pub(crate) fn wait(word: &AtomicU64, seen: u64, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
    };
    // Truncation intended: the futex compares the low 32 bits.
    let expected = seen as u32;
    // SAFETY: the address is of a live, aligned AtomicU64 borrowed for the call (module
    // docs); `ts` lives on this frame; the last two arguments are unused by FUTEX_WAIT.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_half(word),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r == 0 {
        return true;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ETIMEDOUT) => false,
        // The word had changed already, or a signal: look again.
        Some(libc::EAGAIN | libc::EINTR) => true,
        // Futexes refused: poll.
        _ => {
            std::thread::sleep(timeout.min(POLL));
            true
        }
    }
}

/// Wakes every waiter of `word`, in every process.
pub(crate) fn wake_all(word: &AtomicU64) {
    // SAFETY: as in `wait`; FUTEX_WAKE only uses the address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_half(word),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::{wait, wake_all};
    use crate::sync::{AtomicU64, Ordering::SeqCst};

    /// Long enough that a wait that was not woken would make the test fail by its
    /// result, not by its time: a woken wait returns `true`, a timed-out one `false`.
    const LONG: Duration = Duration::from_secs(20);

    #[test]
    fn a_wait_on_a_word_that_changed_already_returns_at_once() {
        let word = AtomicU64::new(5);
        let started = Instant::now();
        assert!(wait(&word, 4, LONG));
        assert!(started.elapsed() < LONG);
    }

    #[test]
    fn a_wait_nobody_wakes_times_out() {
        let word = AtomicU64::new(5);
        assert!(!wait(&word, 5, Duration::from_millis(20)));
    }

    #[test]
    fn only_the_low_32_bits_are_compared() {
        // 2^32 changes later the low half is the same: the wait sleeps (to its timeout).
        let word = AtomicU64::new(5 + (1 << 32));
        assert!(!wait(&word, 5, Duration::from_millis(20)));
    }

    #[test]
    fn a_wake_ends_a_wait_before_its_timeout() {
        let word = Arc::new(AtomicU64::new(0));
        let waiter = {
            let word = Arc::clone(&word);
            std::thread::spawn(move || {
                while word.load(SeqCst) == 0 {
                    assert!(
                        wait(&word, 0, LONG),
                        "the wait timed out: the wake was lost"
                    );
                }
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        word.fetch_add(1, SeqCst);
        wake_all(&word);
        waiter.join().unwrap();
    }
}
