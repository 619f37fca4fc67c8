//! This process and the others: its token (pid and start time, from `/proc`), whether
//! another token's process still runs (`/proc/<pid>/stat`, `kill(pid, 0)`, then a
//! process descriptor kept on it), its uid and pid namespace, the clock, random
//! numbers, and its process-local protocol state. Start times are read (`proc_stat.rs`)
//! shifted by this process's time namespace and unshifted by `timens.rs` before they are
//! compared.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::{LazyLock, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::unistd::geteuid;

use super::fork_guard::{Slot, keep, kept, this_pid, wiped_on_fork};
use super::pidfd::{Watched, pidfd_open};
use super::proc_stat::parse_proc_stat;
use super::timens::{self, Frame};
use crate::error::{Error, Result};
use crate::local::ProcessLocal;
use crate::token::Token;

/// This process's token, read from `/proc/self/stat`, its start time unshifted to the
/// initial time namespace's (as read where its frame is unknown: such a process holds
/// no slot, see [`timens::check`]).
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
    let start = timens::frame()
        .unshift(stat.start_ticks)
        .unwrap_or(stat.start_ticks);
    Token::new(pid, start).unwrap_or_else(|| panic!("pid {pid} does not fit a shmrc token"))
}

/// The token of this process as last computed (0: none yet). A forked child sees its
/// parent's token here, with another pid, and recomputes.
static CURRENT: crate::sync::process::AtomicU64 = crate::sync::process::AtomicU64::new(0);

/// The process-local protocol state of this process.
static LOCAL: LazyLock<ProcessLocal> = LazyLock::new(ProcessLocal::new);

/// [`Os::current`](crate::os::Os::current): read from `/proc/self/stat` once, and
/// again after a `fork`.
pub(super) fn current() -> Token {
    if let Some(token) = kept(Slot::Token).and_then(Token::from_word) {
        return token;
    }
    let pid = this_pid();
    // Without the wipe-on-fork page, the token is kept with its pid, and a forked child
    // tells its own from its parent's by the pid (fooled only by a recycled pid).
    if !wiped_on_fork() {
        let cached = Token::from_word(CURRENT.load(crate::sync::process::Ordering::Relaxed));
        if let Some(token) = cached.filter(|token| token.pid() == pid) {
            return token;
        }
    }
    let token = read_own_token(pid);
    if !keep(Slot::Token, token.word()) {
        CURRENT.store(token.word(), crate::sync::process::Ordering::Relaxed);
    }
    token
}

/// [`Os::is_alive`](crate::os::Os::is_alive). A process found running before is asked
/// with one `poll` of the process descriptor kept on it ([`Watched`]), which can only
/// say "runs"; anything else is answered from `/proc/<pid>/stat` (its start time and
/// state), and a descriptor opened just before that read is kept when the read finds
/// the token's process running. "Dead" is only ever `/proc`'s word, as before
/// descriptors were kept.
pub(super) fn is_alive(token: Token) -> bool {
    // `try_lock`: never wait for the table (nor for a lock a thread of the parent held
    // at `fork`, which no thread of this child will release): `/proc` answers instead.
    let me = this_pid();
    if let Ok(mut watched) = WATCHED.try_lock() {
        if watched_by(&mut watched, me).runs(token) {
            return true;
        }
    }
    // Opened first, checked second: if the stat read below names the token's start
    // time, the pid was not reused in between and the descriptor is on that process.
    let pidfd = match pidfd_open(token.pid()) {
        Ok(pidfd) => Some(pidfd),
        // No process has the pid, zombies included (the answer `kill(pid, 0)` gives
        // below when `/proc` has no entry): the token's is gone, two calls sooner.
        Err(Error::Os { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {
            return false;
        }
        // Refused (no such call, out of descriptors, a pid that is a thread's and not a
        // process's): `/proc` decides, as without descriptors.
        Err(_) => None,
    };
    match liveness(token) {
        Liveness::Running => {
            if let (Some(pidfd), Ok(mut watched)) = (pidfd, WATCHED.try_lock()) {
                watched_by(&mut watched, me).keep(token, pidfd);
            }
            true
        }
        Liveness::Presumed => true,
        Liveness::Dead => false,
    }
}

/// The processes [`is_alive`] watches by descriptor: at most this many (each holds a
/// descriptor, close-on-exec; one per distinct peer is all a pipeline needs), and at
/// most 1/16 of the descriptor limit ([`watched_capacity`]).
const WATCHED_PROCESSES: usize = 64;

/// How many processes the liveness table may watch: [`WATCHED_PROCESSES`], or 1/16 of
/// the `RLIMIT_NOFILE` soft limit when that is less (4 of a 64-descriptor budget).
fn watched_capacity() -> usize {
    let share = super::limits::fd_limit() / 16;
    WATCHED_PROCESSES.min(usize::try_from(share).unwrap_or(usize::MAX))
}

/// Closes every descriptor of this process's liveness table (it has hit its descriptor
/// limit: they are the ones shmrc can give back) and returns how many it closed. The
/// table fills again, one process at a time, as liveness is asked.
pub(super) fn release_watched() -> u32 {
    let me = this_pid();
    let mut table = match WATCHED.try_lock() {
        Ok(table) => table,
        // Held by this very thread's liveness check, or another's: nothing to count.
        Err(_) => return 0,
    };
    let released = watched_by(&mut table, me).release_all();
    u32::try_from(released).unwrap_or(u32::MAX)
}

/// Made on first need (a `const` empty lock, not a `LazyLock`: a child forked while a
/// thread of its parent was making it must not wait for a thread it does not have).
static WATCHED: Mutex<Option<Watched>> = Mutex::new(None);

/// The table of process `me`: made on first need, made afresh in a forked child (told
/// by the wipe-on-fork page, or without it by the owner's pid).
fn watched_by(table: &mut Option<Watched>, me: u32) -> &mut Watched {
    let watched = table.get_or_insert_with(|| Watched::new(watched_capacity(), me));
    if !wiped_on_fork() {
        return watched.for_process(me);
    }
    if kept(Slot::WatchedTable).is_none() {
        watched.start_afresh(me);
        keep(Slot::WatchedTable, 1);
    }
    watched
}

/// What `/proc` says of a token.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Liveness {
    /// Its stat names the token's start time, and the process is not a zombie.
    Running,
    /// Counted alive without having been seen: `/proc` hides or cannot show it (a
    /// possible leak, never a premature unlink), a zombie leader's threads still run,
    /// or its start time cannot be told in this process's time namespace.
    Presumed,
    /// Gone, reused by another process, or a zombie that takes no further step.
    Dead,
}

/// [`Liveness`] of `token`, from `/proc/<pid>/stat`. The start time read there is
/// shifted by this process's time namespace: it is compared with the token's once
/// unshifted, never as read. A difference is believed only after this process's frame
/// is read afresh (it may have `setns`ed into another time namespace since it was
/// kept); a start time that cannot be unshifted decides nothing.
fn liveness(token: Token) -> Liveness {
    let pid = token.pid();
    let mut stack = [0u8; STAT_BUF];
    let presumed_if = |alive: bool| {
        if alive {
            Liveness::Presumed
        } else {
            Liveness::Dead
        }
    };
    match read_stat(pid, &mut stack) {
        // No entry: dead, unless `/proc` hides it (`hidepid`, a non-dumpable
        // process): ask the kernel whether the pid exists at all.
        Err(e) if entry_gone(&e) => presumed_if(pid_exists(pid)),
        // Unreadable: assume alive (a possible leak, never a premature unlink).
        // Planted: unreadable taken for dead (`hidepid=1`'s EACCES).
        Err(_) if cfg!(shmrc_plant = "unreadable_stat_is_dead") => Liveness::Dead,
        Err(_) => Liveness::Presumed,
        Ok(content) => match parse_proc_stat(content.as_ref()) {
            Some(st) if st.pid == pid => {
                let same_start = |frame: Frame| {
                    frame
                        .unshift(st.start_ticks)
                        .map(|start| token.matches_start(start))
                };
                let same = match same_start(timens::frame()) {
                    Some(false) => same_start(timens::frame_again()),
                    same => same,
                };
                // A zombie or a dead task holds the pid: the token's process is that
                // one, or had the pid before it and is gone; either way it takes no
                // further step, except a zombie thread-group leader whose main thread
                // exited while other threads still run.
                if same == Some(false) || st.state == b'X' {
                    Liveness::Dead
                } else if st.state == b'Z' {
                    presumed_if(other_threads_run(pid))
                } else if same == Some(true) {
                    Liveness::Running
                } else {
                    Liveness::Presumed
                }
            }
            _ => Liveness::Presumed,
        },
    }
}

/// Room for a `/proc/<pid>/stat` line (52 fields, the longest 20 digits, and a command
/// name of at most 64 bytes: under 1.2 KiB), so that one `read` gets it all.
const STAT_BUF: usize = 1536;

/// `/proc/<pid>/stat`, read with `open`, one `read` into `stack` and `close` (not
/// `fs::read`'s `statx` and growing reads); a line that fills the buffer is read again
/// whole.
fn read_stat(pid: u32, stack: &mut [u8; STAT_BUF]) -> io::Result<std::borrow::Cow<'_, [u8]>> {
    use std::io::Read;
    let path = format!("/proc/{pid}/stat");
    let n = fs::File::open(&path)?.read(stack)?;
    if n < STAT_BUF {
        return Ok(std::borrow::Cow::Borrowed(&stack[..n]));
    }
    fs::read(&path).map(std::borrow::Cow::Owned)
}

/// [`Os::uid`](crate::os::Os::uid): the effective uid.
pub(super) fn uid() -> u32 {
    geteuid().as_raw()
}

/// [`Os::pid_namespace`](crate::os::Os::pid_namespace): the inode of
/// `/proc/self/ns/pid` (0 if unreadable).
pub(super) fn pid_namespace() -> u64 {
    // A process's own pid namespace never changes (`unshare`/`setns` of a pid
    // namespace apply to its children): kept until the next fork, so a forked child
    // (maybe in another one) reads its own. Without the wipe-on-fork page, kept with
    // the pid it was read in (namespace inodes are 32-bit).
    if let Some(ns) = kept(Slot::PidNamespace) {
        return ns;
    }
    let pid = u64::from(this_pid());
    let cached = PID_NAMESPACE.load(crate::sync::process::Ordering::Relaxed);
    if !wiped_on_fork() && cached != 0 && cached >> 32 == pid {
        return cached & u64::from(u32::MAX);
    }
    let ns = fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino());
    if ns != 0 && keep(Slot::PidNamespace, ns) {
        return ns;
    }
    if let Ok(small) = u32::try_from(ns) {
        PID_NAMESPACE.store(
            pid << 32 | u64::from(small),
            crate::sync::process::Ordering::Relaxed,
        );
    }
    ns
}

/// `pid << 32 | namespace inode` of the last [`pid_namespace`] read (0: none yet).
static PID_NAMESPACE: crate::sync::process::AtomicU64 = crate::sync::process::AtomicU64::new(0);

/// [`Os::now_unix_nanos`](crate::os::Os::now_unix_nanos).
pub(super) fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// [`Os::random_u128`](crate::os::Os::random_u128), from `getrandom`.
pub(super) fn random_u128() -> Result<u128> {
    Ok(u128::from_ne_bytes(random_bytes()?))
}

/// [`Os::random_u128_and_u64`](crate::os::Os::random_u128_and_u64): the 192 bits from
/// one `getrandom`, the first 16 bytes for the nonce and the last 8 for the key.
pub(super) fn random_u128_and_u64() -> Result<(u128, u64)> {
    let bytes: [u8; 24] = random_bytes()?;
    let (nonce, key) = bytes.split_at(16);
    Ok((
        u128::from_ne_bytes(nonce.try_into().unwrap_or([0; 16])),
        u64::from_ne_bytes(key.try_into().unwrap_or([0; 8])),
    ))
}

/// `N` bytes from `getrandom` (one system call for up to 256 bytes); its failure is
/// [`Error::Os`] naming `getrandom` and the errno.
fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(random_error)?;
    Ok(bytes)
}

/// A `getrandom` failure as [`Error::Os`], with the errno when there is one.
fn random_error(e: getrandom::Error) -> Error {
    let source = match e.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::other(e.to_string()),
    };
    Error::Os {
        call: "getrandom",
        source,
    }
}

/// [`Os::local`](crate::os::Os::local): the process-local protocol state of this process.
pub(super) fn local() -> &'static ProcessLocal {
    &LOCAL
}

/// Whether a process with this pid exists (`kill(pid, 0)`: only ESRCH says no).
fn pid_exists(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    exists_per_kill(nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(raw),
        None,
    ))
}

/// What `kill(pid, 0)`'s answer says of the process: only `ESRCH` is "no such
/// process". `EPERM` is a live process of another user (a root service holding this
/// user's segment); any other error is doubt, and doubt keeps a holder.
fn exists_per_kill(answer: nix::Result<()>) -> bool {
    if cfg!(shmrc_plant = "eperm_is_no_process") {
        // Planted: another user's live process (EPERM) taken for no process.
        return !matches!(answer, Err(Errno::ESRCH | Errno::EPERM));
    }
    !matches!(answer, Err(Errno::ESRCH))
}

/// Whether the zombie leader `pid` still has running threads (more than its own entry
/// in `/proc/<pid>/task`). Its entry gone by now (no such directory, or the listing
/// stopped short for that reason) means its parent reaped it since its `stat` was read,
/// which it does only once every thread has exited: dead. Unreadable for another
/// reason: assume it has (never a premature unlink).
fn other_threads_run(pid: u32) -> bool {
    let tasks = match fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => tasks,
        Err(e) => return !entry_gone(&e),
    };
    let mut count = 0;
    for task in tasks {
        match task {
            Ok(_) => count += 1,
            Err(e) => return !entry_gone(&e),
        }
    }
    count > 1
}

/// Whether a read of `/proc/<pid>/...` failed because the process has no entry (any
/// more): `ENOENT` at open, `ESRCH` from a read once it was reaped.
fn entry_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::Os;
    use crate::os::posix::PosixOs;

    #[test]
    fn only_esrch_from_kill_says_no_process() {
        // Every answer `kill(pid, 0)` can give (and a few it should not): a live
        // process of another user (EPERM), doubt (the rest) and success all keep a
        // holder; only ESRCH lets it go. tests/liveness_other_user.rs meets EPERM for
        // real, as an unprivileged user.
        assert!(exists_per_kill(Ok(())));
        assert!(!exists_per_kill(Err(Errno::ESRCH)));
        for doubt in [
            Errno::EPERM,
            Errno::EINVAL,
            Errno::EINTR,
            Errno::EAGAIN,
            Errno::ENOMEM,
        ] {
            assert!(exists_per_kill(Err(doubt)), "{doubt} read as no process");
        }
    }

    /// A token whose pid is a thread's (not a process's): `pidfd_open` refuses it with
    /// something other than `ESRCH`, so `/proc` decides (the branch that keeps no
    /// descriptor): alive while the thread runs, dead once it has exited.
    #[test]
    fn a_pid_that_pidfd_open_refuses_is_judged_by_proc() {
        let (to_main, from_thread) = std::sync::mpsc::channel();
        let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            to_main.send(nix::unistd::gettid().as_raw()).unwrap();
            let _ = from_main.recv_timeout(std::time::Duration::from_secs(30));
        });
        let tid = u32::try_from(from_thread.recv().unwrap()).unwrap();
        let stat = parse_proc_stat(&fs::read(format!("/proc/{tid}/stat")).unwrap()).unwrap();
        let start = timens::frame().unshift(stat.start_ticks).unwrap();
        let token = Token::new(tid, start).unwrap();
        match pidfd_open(tid) {
            Err(Error::Os { source, .. }) => {
                assert_ne!(source.raw_os_error(), Some(libc::ESRCH), "{source}")
            }
            other => panic!("pidfd_open of a thread's id: {:?}", other.map(|_| ())),
        }
        assert!(
            PosixOs::new().is_alive(token),
            "a running thread's token is dead"
        );
        to_thread.send(()).unwrap();
        thread.join().unwrap();
        assert!(
            !PosixOs::new().is_alive(token),
            "an exited thread's token is alive"
        );
    }

    #[test]
    fn own_stat_parses_and_names_this_process() {
        let st = parse_proc_stat(&fs::read("/proc/self/stat").unwrap()).unwrap();
        assert_eq!(st.pid, std::process::id());
        assert!(matches!(st.state, b'R' | b'S'));
        let os = PosixOs::new();
        let unshifted = timens::frame().unshift(st.start_ticks).unwrap();
        assert!(os.current().matches_start(unshifted));
    }

    #[test]
    fn a_token_of_another_start_time_or_an_unused_pid_is_dead() {
        let os = PosixOs::new();
        let me = os.current();
        assert!(os.is_alive(me));
        let other = Token::new(me.pid(), me.start_ticks() + 1).unwrap();
        assert!(!os.is_alive(other));
        assert!(
            !watches(other),
            "a token whose start time differs is not watched"
        );
        // pid_max is at most 2^22: this pid never exists.
        let never = Token::new((1 << 22) - 1, 1).unwrap();
        assert!(!os.is_alive(never) || fs::metadata("/proc/4194303").is_ok());
    }

    /// `pidfd_open`'s "no such process" is a death, its other refusals are not: a
    /// running thread's id (not a process's, so `pidfd_open` refuses it: `EINVAL`, or
    /// `ENOENT` on recent kernels) with the thread's start time is judged by `/proc`,
    /// running.
    #[test]
    fn only_no_such_process_from_pidfd_open_counts_as_dead() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            let _ = stopped.recv();
        });
        let tid = u32::try_from(rx.recv().unwrap()).unwrap();
        let stat = fs::read(format!("/proc/self/task/{tid}/stat")).unwrap();
        let start = parse_proc_stat(&stat).unwrap().start_ticks;
        let err = pidfd_open(tid).unwrap_err();
        assert!(
            matches!(&err, Error::Os { source, .. } if source.raw_os_error() != Some(libc::ESRCH)),
            "{err}"
        );
        assert!(PosixOs::new().is_alive(Token::new(tid, start).unwrap()));
        stop.send(()).unwrap();
        thread.join().unwrap();
        // `join` returns once the thread's user code is done; the kernel may still be
        // tearing the task down (its `/proc` entry readable) for a moment after. Wait
        // for the entry to go (bounded), as a sweep would meet the task later anyway.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fs::metadata(format!("/proc/self/task/{tid}")).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "thread {tid} never went"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Gone, the thread's id names no process: dead (or a process that took it since,
        // whose start time differs).
        assert!(!PosixOs::new().is_alive(Token::new(tid, start).unwrap()));
    }

    /// Issue 13: a parent reaps its dead child the moment it dies (a DataLoader joins
    /// its workers, a shell waits for its job), possibly after the manager read the
    /// zombie's `stat` and before it listed its threads. The gone task list is that of a
    /// reaped process, not a reason to think it runs: it counted as alive, and the
    /// manager kept a segment only the dead held, with no sweep to come.
    #[test]
    fn a_zombie_reaped_between_its_stat_and_its_task_list_counts_as_dead() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let zombie = loop {
            let st = parse_proc_stat(&fs::read(format!("/proc/{pid}/stat")).unwrap()).unwrap();
            if st.state == b'Z' {
                break st;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`true` (pid {pid}) did not exit within 30 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        let token = Token::new(pid, zombie.start_ticks).unwrap();
        assert!(!other_threads_run(pid), "a zombie alone: no thread runs");
        assert!(!PosixOs::new().is_alive(token));
        // What `is_alive` read so far said "zombie"; now the parent reaps it.
        child.wait().expect("reap true");
        assert!(
            !other_threads_run(pid),
            "reaped since its stat was read: no thread runs"
        );
        assert!(!PosixOs::new().is_alive(token));
    }

    /// Whether [`is_alive`] watches `token` (the table is shared by the tests running
    /// beside this one: wait for it).
    fn watches(token: Token) -> bool {
        WATCHED
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|w| w.watches(token))
    }

    /// A live peer is watched by descriptor once found running, and its death is then
    /// seen through that descriptor (a zombie has exited), which is closed.
    #[test]
    fn a_peer_found_running_is_watched_until_it_dies() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let start = parse_proc_stat(&fs::read(format!("/proc/{pid}/stat")).unwrap())
            .unwrap()
            .start_ticks;
        let token = Token::new(pid, start).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let within_deadline = |what: &str| {
            assert!(std::time::Instant::now() < deadline, "{what} within 10 s");
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        // A test beside this one may hold the table for a moment: `is_alive` then
        // answers from /proc without keeping a descriptor.
        while !watches(token) {
            assert!(is_alive(token));
            within_deadline("watched");
        }
        assert!(is_alive(token), "asked through its descriptor");
        child.kill().unwrap();
        while is_alive(token) {
            within_deadline("the kill seen");
        }
        // Dropped by the first question that gets the table (a test beside this one
        // may hold it for a moment).
        while watches(token) {
            assert!(!is_alive(token));
            within_deadline("dropped once dead");
        }
        assert!(!is_alive(token));
        child.wait().unwrap();
    }

    #[test]
    fn one_draw_gives_a_nonce_and_a_key_that_share_no_bits() {
        // The key must appear in no name: no part of it may come from the nonce's bytes
        // (which the name shows), nor repeat across draws.
        let os = PosixOs::new();
        let draws: Vec<(u128, u64)> = (0..64).map(|_| os.random_u128_and_u64().unwrap()).collect();
        let mut keys: Vec<u64> = draws.iter().map(|&(_, key)| key).collect();
        let mut nonces: Vec<u128> = draws.iter().map(|&(nonce, _)| nonce).collect();
        for &(nonce, key) in &draws {
            let bytes = nonce.to_ne_bytes();
            for window in bytes.windows(8) {
                assert_ne!(window, key.to_ne_bytes(), "the key is nonce bytes");
            }
            assert_ne!(nonce >> 64, 0, "the nonce's high half was drawn");
            assert_ne!(nonce as u64, 0, "the nonce's low half was drawn");
        }
        keys.sort_unstable();
        keys.dedup();
        nonces.sort_unstable();
        nonces.dedup();
        assert_eq!((keys.len(), nonces.len()), (64, 64), "every draw is fresh");
    }
}
