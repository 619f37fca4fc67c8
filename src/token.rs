//! Process tokens: one `u64` that names a process for the life of the machine.
//!
//! A token packs the pid (22 bits, Linux's largest `pid_max`) and the process start
//! time in clock ticks since boot (40 bits: centuries at 100 Hz), as the initial time
//! namespace reads it: `/proc` shows it shifted by the reader's time namespace, and the
//! production backend takes that shift off (`os/posix/timens.rs`), so a token means
//! the same in every time namespace. A pid is reused, a
//! (pid, start time) pair is not, so `is_alive(token)` is true exactly while that very
//! process runs. Bit 62 is always 0 and bit 63 is left to the holder protocol (its
//! in-flight flag), so a token is never 0 (free slot) nor all ones (tombstone).
//!
//! Tokens are only compared within one pid namespace: a segment records its creator's
//! namespace and refuses holders from another (see `segment.rs`).

use std::fmt;

const PID_BITS: u32 = 22;
const START_BITS: u32 = 40;
const PID_MASK: u64 = (1 << PID_BITS) - 1;
const START_MASK: u64 = (1 << START_BITS) - 1;
/// Bits a token may use: 0..62.
const TOKEN_MASK: u64 = (1 << (PID_BITS + START_BITS)) - 1;

/// A process identity: pid plus start time.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-token")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let segment = shmrc::inspect(&ns)?.segments.remove(0);
/// let creator = segment.parts.creator;
/// assert_eq!(creator.pid(), std::process::id());
/// assert!(creator.start_ticks() > 0);
/// drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(u64);

impl Token {
    /// The token of process `pid` started `start_ticks` clock ticks after boot.
    /// Returns `None` for pid 0 or a pid beyond 22 bits.
    pub(crate) fn new(pid: u32, start_ticks: u64) -> Option<Token> {
        let pid = u64::from(pid);
        if pid == 0 || pid > PID_MASK {
            return None;
        }
        Some(Token(pid | ((start_ticks & START_MASK) << PID_BITS)))
    }

    /// Decodes a slot or header word; `None` when no token encodes to it (0, or bits
    /// above 61 set).
    pub(crate) fn from_word(word: u64) -> Option<Token> {
        if word & !TOKEN_MASK != 0 || word & PID_MASK == 0 {
            return None;
        }
        Some(Token(word))
    }

    /// The word stored in slots and headers.
    pub(crate) fn word(self) -> u64 {
        self.0
    }

    /// The process id.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    /// let ns = Namespace::new("shmrc-doc-token-pid")?;
    /// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let creator = shmrc::inspect(&ns)?.segments[0].parts.creator;
    /// assert_eq!(creator.pid(), std::process::id());
    /// drop(buf);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn pid(self) -> u32 {
        (self.0 & PID_MASK) as u32
    }

    /// The start time in clock ticks since boot (as the initial time namespace reads
    /// it), truncated to 40 bits.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    /// let ns = Namespace::new("shmrc-doc-token-start")?;
    /// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let creator = shmrc::inspect(&ns)?.segments[0].parts.creator;
    /// assert!(creator.start_ticks() > 0); // clock ticks after boot
    /// drop(buf);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn start_ticks(self) -> u64 {
        (self.0 >> PID_BITS) & START_MASK
    }

    /// Whether `start_ticks` (read from `/proc`, its time namespace's shift taken off)
    /// names the same start as this token.
    #[cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]
    pub(crate) fn matches_start(self, start_ticks: u64) -> bool {
        self.start_ticks() == start_ticks & START_MASK
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(pid {} start {})", self.pid(), self.start_ticks())
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.pid(), self.start_ticks())
    }
}

/// [`Token`]'s encoding, for the checkers' seam (feature `checkers`, not API):
/// `shmrc::checkers::token::TokenExt`, to make the token of any pid and start time and
/// to read and forge the words the protocol stores. Each is the crate's own
/// `pub(crate)` method of the same name.
#[cfg(feature = "checkers")]
pub trait TokenExt: Sized {
    /// The token of process `pid` started `start_ticks` clock ticks after boot.
    /// Returns `None` for pid 0 or a pid beyond 22 bits.
    fn new(pid: u32, start_ticks: u64) -> Option<Self>;
    /// Decodes a slot or header word; `None` when no token encodes to it (0, or bits
    /// above 61 set).
    fn from_word(word: u64) -> Option<Self>;
    /// The word stored in slots and headers.
    fn word(self) -> u64;
}

#[cfg(feature = "checkers")]
impl TokenExt for Token {
    fn new(pid: u32, start_ticks: u64) -> Option<Token> {
        Token::new(pid, start_ticks)
    }

    fn from_word(word: u64) -> Option<Token> {
        Token::from_word(word)
    }

    fn word(self) -> u64 {
        Token::word(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trips_pid_and_start() {
        let t = Token::new(4_194_303, (1 << 40) - 1).unwrap();
        assert_eq!(t.pid(), 4_194_303);
        assert_eq!(t.start_ticks(), (1 << 40) - 1);
        assert_eq!(Token::from_word(t.word()), Some(t));
        assert_eq!(t.word() >> 62, 0, "bits 62 and 63 stay free");
    }

    #[test]
    fn invalid_tokens_are_refused() {
        assert_eq!(Token::new(0, 5), None);
        assert_eq!(Token::new(1 << 22, 5), None);
        assert_eq!(Token::from_word(0), None);
        assert_eq!(Token::from_word(u64::MAX), None);
        assert_eq!(Token::from_word(1 << 63 | 7), None);
        assert_eq!(Token::from_word(5 << 22), None, "pid 0");
    }

    #[test]
    fn start_time_is_compared_modulo_its_width() {
        let t = Token::new(7, (1 << 40) + 3).unwrap();
        assert!(t.matches_start(3));
        assert!(t.matches_start((1 << 40) + 3));
        assert!(!t.matches_start(4));
    }
}
