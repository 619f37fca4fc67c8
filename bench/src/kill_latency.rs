//! The `sigkill-to-unlink` workload of `shmrc bench`: how long the manager takes to
//! unlink a segment after its last holder is SIGKILLed (issue target: p99 ≤ 50 ms).
//!
//! Each round starts a victim (this binary again, as the hidden `bench-victim`), which
//! joins a manager of this run's own (`SHMRC_RUNTIME_DIR` in a temporary directory)
//! and becomes the last holder of a fresh segment: as its creator, or as the attacher
//! of a segment this process created and then released. This process watches
//! `/dev/shm` with inotify, SIGKILLs the victim and times the `IN_DELETE` of the name.
//! The baseline is the kernel's own part, in the same round: SIGKILL to `waitpid`.
//! With `others` live segments (held by this process, which stays off the manager) in
//! the namespace, every sweep has that many more segments to look at.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use shmrc::{CreateOptions, Error, Namespace, Result, ShareHandle, ShmBuf, Strategy};

/// How long one unlink may take before its round counts as failed.
pub const GIVE_UP: Duration = Duration::from_secs(5);
/// The segments' size.
const LEN: usize = 4096;

/// Who the victim is to the segment it is the last holder of.
#[derive(Copy, Clone, Debug)]
pub enum Victim {
    /// It created the segment (the name says so: the manager sweeps it first).
    Creator,
    /// It attached a segment this process created and then released.
    Attacher,
}

/// One measured row.
pub struct Latency {
    /// Live segments of others in the namespace.
    pub others: usize,
    /// Who was killed.
    pub victim: Victim,
    /// SIGKILL to unlink, sorted.
    pub unlink: Vec<Duration>,
    /// SIGKILL to `waitpid`, sorted.
    pub baseline: Vec<Duration>,
    /// Rounds whose segment was not unlinked within [`GIVE_UP`].
    pub failed: usize,
}

/// The `p`-th percentile of sorted `samples` (nearest rank); zero for no samples.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Runs `rounds` rounds per victim kind for each count of `others`, in namespace `ns`.
pub fn measure(ns: &Namespace, rounds: usize, others: &[usize]) -> Result<Vec<Latency>> {
    let runtime = std::env::temp_dir().join(format!("shmrc-bench-{}-rt", std::process::id()));
    let rows = measure_in(ns, &runtime, rounds, others);
    // The manager exits once its last client died and its grace period passed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while runtime.join(shmrc::manager::SOCKET_FILE).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&runtime);
    rows
}

fn measure_in(
    ns: &Namespace,
    runtime: &Path,
    rounds: usize,
    others: &[usize],
) -> Result<Vec<Latency>> {
    let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| Error::os("inotify_init", std::io::Error::from(e)))?;
    watch
        .add_watch("/dev/shm", AddWatchFlags::IN_DELETE)
        .map_err(|e| Error::os("inotify_add_watch /dev/shm", std::io::Error::from(e)))?;
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.clone());
    let mut rows = Vec::new();
    for &count in others {
        let kept: Vec<ShmBuf> = (0..count)
            .map(|_| ShmBuf::with_options(LEN, &options))
            .collect::<Result<_>>()?;
        for victim in [Victim::Creator, Victim::Attacher] {
            let mut row = Latency {
                others: kept.len(),
                victim,
                unlink: Vec::new(),
                baseline: Vec::new(),
                failed: 0,
            };
            for _ in 0..rounds {
                round(&mut row, &watch, ns, &options, runtime)?;
            }
            row.unlink.sort();
            row.baseline.sort();
            rows.push(row);
        }
    }
    Ok(rows)
}

fn round(
    row: &mut Latency,
    watch: &Inotify,
    ns: &Namespace,
    options: &CreateOptions,
    runtime: &Path,
) -> Result<()> {
    let mut victim = VictimProcess::start(runtime)?;
    let name = match row.victim {
        Victim::Creator => victim.ask(&format!("create {}", ns.prefix()))?,
        Victim::Attacher => {
            let ours = ShmBuf::with_options(LEN, options)?;
            let name = ours.name().unwrap_or_default().to_owned();
            let bytes = ours.share()?.into_bytes()?;
            victim.ask(&format!("attach {}", hex::encode(&bytes)))?;
            ours.release()?;
            name
        }
    };
    let _ = watch.read_events();
    let killed = Instant::now();
    victim.kill()?;
    row.baseline.push(killed.elapsed());
    match wait_unlinked(watch, &name)? {
        Some(at) => row.unlink.push(at - killed),
        None => row.failed += 1,
    }
    Ok(())
}

/// Waits for `name`'s `IN_DELETE` in `/dev/shm`; `None` after [`GIVE_UP`].
pub fn wait_unlinked(watch: &Inotify, name: &str) -> Result<Option<Instant>> {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        for event in watch.read_events().unwrap_or_default() {
            if event.name.as_deref() == Some(OsStr::new(name)) {
                return Ok(Some(Instant::now()));
            }
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return Ok(None);
        };
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(watch.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(ms))
            .map_err(|e| Error::os("poll", std::io::Error::from(e)))?;
    }
}

/// A victim: this binary as `bench-victim`, driven over its stdin and stdout.
pub struct VictimProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl VictimProcess {
    fn start(runtime: &Path) -> Result<VictimProcess> {
        VictimProcess::start_as(runtime, None, 1000)
    }

    /// A victim whose manager is at `runtime` (started with a grace period of
    /// `grace_ms`), as the user `(uid, gid)` if one is given.
    pub fn start_as(
        runtime: &Path,
        user: Option<(u32, u32)>,
        grace_ms: u64,
    ) -> Result<VictimProcess> {
        let program = std::env::current_exe().map_err(|e| Error::os("current_exe", e))?;
        let mut command = Command::new(&program);
        if let Some((uid, gid)) = user {
            command.uid(uid).gid(gid);
        }
        let mut child = command
            .arg("bench-victim")
            .env("SHMRC_RUNTIME_DIR", runtime)
            .env("SHMRC_MANAGER", "auto")
            // The victim's own image serves its manager (shmrc's re-execution of the
            // program it is linked into): `shmrc-bench` has no `manager` command.
            .env_remove("SHMRC_MANAGER_PROGRAM")
            .env("SHMRC_MANAGER_GRACE_MS", grace_ms.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Error::os("spawn bench-victim", e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::InvalidArgument("bench-victim without pipes".into()));
        };
        Ok(VictimProcess {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// Sends one command line; its answer (an `error …` answer is an error).
    pub fn ask(&mut self, command: &str) -> Result<String> {
        writeln!(self.stdin, "{command}").map_err(|e| Error::os("write to bench-victim", e))?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| Error::os("read from bench-victim", e))?;
        let answer = line.trim_end().to_owned();
        match answer.strip_prefix("error ") {
            Some(why) => Err(Error::InvalidArgument(format!("bench-victim: {why}"))),
            None if answer.is_empty() => Err(Error::Disconnected),
            None => Ok(answer),
        }
    }

    /// SIGKILLs it (by pid: our child) and reaps it.
    pub fn kill(&mut self) -> Result<()> {
        self.child
            .kill()
            .map_err(|e| Error::os("kill bench-victim", e))?;
        self.child
            .wait()
            .map_err(|e| Error::os("wait bench-victim", e))?;
        Ok(())
    }
}

impl Drop for VictimProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The hidden `bench-victim` command: `create <namespace>` answers the new segment's
/// name, `attach <hex handle>` answers `attached`; it holds everything until killed,
/// and exits (releasing) at the end of its input.
pub fn serve_victim() -> Result<()> {
    let mut held = Vec::new();
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| Error::os("read stdin", e))?;
        let answer = match obey(&line, &mut held) {
            Ok(answer) => answer,
            Err(e) => format!("error {e}"),
        };
        writeln!(out, "{answer}").map_err(|e| Error::os("write stdout", e))?;
        out.flush().map_err(|e| Error::os("flush stdout", e))?;
    }
    Ok(())
}

fn obey(line: &str, held: &mut Vec<ShmBuf>) -> Result<String> {
    match line.split_once(' ') {
        Some(("create", prefix)) => {
            let options = CreateOptions::new()
                .strategy(Strategy::FileSystem)
                .namespace(Namespace::new(prefix)?);
            let buf = ShmBuf::with_options(LEN, &options)?;
            let name = buf.name().unwrap_or_default().to_owned();
            held.push(buf);
            Ok(name)
        }
        Some(("attach", text)) => {
            let bytes = hex::decode(text)
                .map_err(|e| Error::InvalidArgument(format!("not hex ({e}): {text:?}")))?;
            held.push(ShmBuf::attach(ShareHandle::from_bytes(&bytes)?)?);
            Ok("attached".into())
        }
        _ => Err(Error::InvalidArgument(format!("unknown command {line:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_victim_refuses_an_unknown_command_and_a_bad_handle() {
        let mut held = Vec::new();
        assert!(matches!(
            obey("dance", &mut held),
            Err(Error::InvalidArgument(_))
        ));
        for not_hex in ["attach 0g", "attach abc"] {
            assert!(matches!(
                obey(not_hex, &mut held),
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(obey("attach 00", &mut held).is_err(), "a truncated handle");
        assert!(held.is_empty());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&ms, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&ms, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&ms[..1], 99.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
