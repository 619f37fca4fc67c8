//! The `planted-names` workload of `shmrc bench` (issue 26, item 2): what names that
//! another user plants in `/dev/shm`, parsing as the victim's segments, cost the
//! victim. Targets: with 10,000 planted names, each in a namespace of its own, the
//! victim's first file_system create (which starts its manager) within 0.5 s; with
//! 100,000 planted in the victim's own namespace, SIGKILL to the unlink of its segment
//! (the manager's death sweep) within 100 ms at p99. Each against the same rounds with
//! nothing planted, in the same run.
//!
//! The victim is the user `nobody` and the planter this process, root: the planted
//! files are root's, named as `nobody`'s segments, so that no manager on the machine
//! but the victim's has any business with them (a root manager ignores names of
//! another uid). Without root there is no other user to be, and the rows are skipped,
//! saying so. Every planted file is removed in every outcome.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use shmrc::{Error, Namespace, Result};

use crate::kill_latency::{GIVE_UP, VictimProcess, wait_unlinked};

/// Planted names for the first-create rows: each in a namespace of its own.
pub const NAMESPACES: usize = 10_000;
/// Planted names for the death rows: all in the victim's namespace.
pub const IN_NAMESPACE: usize = 100_000;
const SHM: &str = "/dev/shm";

/// The victim's first create, with `planted` names planted, one sample per round.
pub struct FirstCreate {
    pub planted: usize,
    pub samples: Vec<Duration>,
}

/// SIGKILL of the victim, which created its segment, to that segment's unlink, with
/// `planted` names in its namespace.
pub struct Death {
    pub planted: usize,
    pub unlink: Vec<Duration>,
}

/// The user the victim runs as, or why there is none.
pub fn victim_user() -> std::result::Result<(u32, u32), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("not root: no other user to run the victim as".into());
    }
    let user = match nix::unistd::User::from_name("nobody") {
        Ok(Some(user)) => (user.uid.as_raw(), user.gid.as_raw()),
        other => return Err(format!("no user nobody ({other:?})")),
    };
    let program = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    if !anyone_can_run(&program) {
        return Err(format!(
            "nobody cannot run {} (a directory above it, or the file, is not \
             executable by others)",
            program.display()
        ));
    }
    Ok(user)
}

/// Whether a user with no special rights can run `program`: it, and every directory
/// above it, has the execute bit for others.
fn anyone_can_run(program: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    program.ancestors().all(|path| {
        path.as_os_str().is_empty()
            || std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
    })
}

/// The first-create rows: `rounds` rounds with nothing planted, then as many with
/// [`NAMESPACES`] names planted. Each round has a runtime directory, and so a manager,
/// of its own, and waits for that manager to exit before the next.
pub fn first_create(ns: &Namespace, victim: (u32, u32), rounds: usize) -> Result<Vec<FirstCreate>> {
    let pid_namespace = pid_namespace()?;
    let mut rows = Vec::new();
    for planted in [0, NAMESPACES] {
        let _planted = Planted::new(
            ns.prefix(),
            (0..planted).map(|i| {
                let prefix = format!("{}n{i}", ns.prefix());
                planted_name(&prefix, victim.0, pid_namespace, i)
            }),
        )?;
        let mut samples = Vec::new();
        for round in 0..rounds {
            let runtime = Runtime::new(ns, victim, &format!("first-{planted}-{round}"))?;
            let mut process = VictimProcess::start_as(&runtime.0, Some(victim), 200)?;
            let asked = Instant::now();
            process.ask(&format!("create {}", ns.prefix()))?;
            samples.push(asked.elapsed());
            process.kill()?;
            runtime.wait_for_its_manager()?;
        }
        samples.sort();
        rows.push(FirstCreate { planted, samples });
    }
    Ok(rows)
}

/// The death rows: `rounds` rounds with nothing planted, then as many with
/// [`IN_NAMESPACE`] names planted in the victim's namespace.
pub fn death(ns: &Namespace, victim: (u32, u32), rounds: usize) -> Result<Vec<Death>> {
    let pid_namespace = pid_namespace()?;
    let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| Error::os("inotify_init", std::io::Error::from(e)))?;
    watch
        .add_watch(SHM, AddWatchFlags::IN_DELETE)
        .map_err(|e| Error::os("inotify_add_watch /dev/shm", std::io::Error::from(e)))?;
    let mut rows = Vec::new();
    for planted in [0, IN_NAMESPACE] {
        let _planted = Planted::new(
            ns.prefix(),
            (0..planted).map(|i| planted_name(ns.prefix(), victim.0, pid_namespace, i)),
        )?;
        let runtime = Runtime::new(ns, victim, &format!("death-{planted}"))?;
        let mut unlink = Vec::new();
        for _ in 0..rounds {
            let mut process = VictimProcess::start_as(&runtime.0, Some(victim), 1000)?;
            let name = process.ask(&format!("create {}", ns.prefix()))?;
            let _ = watch.read_events();
            let killed = Instant::now();
            process.kill()?;
            match wait_unlinked(&watch, &name)? {
                Some(at) => unlink.push(at - killed),
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "planted-names: {name} was not unlinked within {GIVE_UP:?} of its \
                         holder's SIGKILL ({planted} planted)"
                    )));
                }
            }
        }
        runtime.wait_for_its_manager()?;
        unlink.sort();
        rows.push(Death { planted, unlink });
    }
    Ok(rows)
}

/// A name of the victim's shape under `prefix`, creator pid 1 with start time 1
/// (nobody alive).
fn planted_name(prefix: &str, uid: u32, pid_namespace: u64, i: usize) -> String {
    format!("{prefix}.{uid}.{pid_namespace}.1.1.{i:032x}")
}

fn pid_namespace() -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino())
        .map_err(|e| Error::os("stat /proc/self/ns/pid", e))
}

/// Empty files planted under names that start with `prefix`: removed, with whatever
/// else starts with it, when dropped.
struct Planted(String);

impl Planted {
    fn new(prefix: &str, names: impl Iterator<Item = String>) -> Result<Planted> {
        let planted = Planted(prefix.to_owned());
        for name in names {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(Path::new(SHM).join(&name))
                .map_err(|e| Error::os("plant a name in /dev/shm", e))?;
        }
        Ok(planted)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(SHM) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&self.0) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// A runtime directory of the victim's, removed when dropped.
struct Runtime(PathBuf);

impl Runtime {
    fn new(ns: &Namespace, (uid, gid): (u32, u32), what: &str) -> Result<Runtime> {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("{}-{what}-rt", ns.prefix()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).map_err(|e| Error::os("mkdir runtime dir", e))?;
        let runtime = Runtime(path);
        std::os::unix::fs::chown(&runtime.0, Some(uid), Some(gid))
            .map_err(|e| Error::os("chown runtime dir", e))?;
        std::fs::set_permissions(&runtime.0, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::os("chmod runtime dir", e))?;
        Ok(runtime)
    }

    /// Waits until its manager has gone (its grace period after its last client).
    fn wait_for_its_manager(&self) -> Result<()> {
        let socket = self.0.join(shmrc::manager::SOCKET_FILE);
        let deadline = Instant::now() + Duration::from_secs(30);
        while socket.exists() {
            if Instant::now() > deadline {
                return Err(Error::InvalidArgument(format!(
                    "planted-names: the manager at {} did not exit",
                    socket.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_program_under_a_closed_directory_cannot_be_run_by_anyone() {
        let dir = std::env::temp_dir().join(format!("shmrc-planted-test-{}", std::process::id()));
        let inner = dir.join("inner");
        std::fs::create_dir_all(&inner).unwrap();
        let program = inner.join("program");
        std::fs::write(&program, b"").unwrap();
        let mode = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        mode(&program, 0o755);
        mode(&inner, 0o755);
        mode(&dir, 0o755);
        let open = anyone_can_run(&program);
        mode(&inner, 0o700);
        let closed_directory = anyone_can_run(&program);
        mode(&inner, 0o755);
        mode(&program, 0o700);
        let closed_file = anyone_can_run(&program);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!((open, closed_directory, closed_file), (true, false, false));
    }
}
