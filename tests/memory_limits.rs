//! An oversize create is `NoSpace`, not an OOM kill (issue 29, item 1).
//!
//! The test makes a memory cgroup of its own (512 MiB, under the one it runs in), moves
//! a child process into it, and has the child ask for 8 GiB with each strategy: each
//! must be `Error::NoSpace` naming the cgroup, with nothing left in `/dev/shm`, and the
//! child must live on (before, the OOM killer SIGKILLed it, leaving an 8 GiB
//! half-created name of the file_system try). A 64 MiB buffer, which fits, is still
//! made. The cgroup is removed in every outcome. Needs root and a writable memory
//! cgroup (v1 or v2): without them the test says so, and fails where
//! `SHMRC_REQUIRE_ROOT=1` (as `.ci/run` sets it).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{output_within, test_role, text_of};
use shmrc_testkit::users::cannot_attack;

const PREFIX: &str = "SHMRC_TEST_OVERSIZE_PREFIX";
const CGROUP: &str = "SHMRC_TEST_OVERSIZE_CGROUP";
const LIMIT: u64 = 512 << 20;

/// The child: joins the cgroup, then asks for 8 GiB with each strategy and 64 MiB
/// with file_system, printing each outcome.
#[test]
fn child() {
    let (Ok(prefix), Ok(cgroup)) = (std::env::var(PREFIX), std::env::var(CGROUP)) else {
        return;
    };
    std::fs::write(
        Path::new(&cgroup).join("cgroup.procs"),
        std::process::id().to_string(),
    )
    .expect("join the test's cgroup");
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let ns = Namespace::new(prefix).unwrap();
    for (strategy, len) in [
        (Strategy::FileSystem, 8u64 << 30),
        (Strategy::FileDescriptor, 8 << 30),
        (Strategy::FileSystem, 64 << 20),
    ] {
        let options = CreateOptions::new()
            .strategy(strategy)
            .namespace(ns.clone());
        match ShmBuf::with_options(len as usize, &options) {
            Ok(buf) => println!("child: {strategy} {len}: ok {}", buf.len()),
            Err(e) => println!("child: {strategy} {len}: {e:?} / {e}"),
        }
    }
    println!("child: alive");
}

/// A memory cgroup made for this test, removed on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    /// A child of this process's memory cgroup with `limit` bytes, or why not.
    fn create(limit: u64) -> Result<TestCgroup, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root: cannot make a memory cgroup".into());
        }
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let v1 = cgroups.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let controllers = parts.nth(1)?;
            let path = parts.next()?;
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_owned())
        });
        let (parent, limit_file) = match v1 {
            Some(path) => (
                Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')),
                "memory.limit_in_bytes",
            ),
            None => {
                let path = cgroups
                    .lines()
                    .find_map(|l| l.strip_prefix("0::"))
                    .ok_or("no memory cgroup in /proc/self/cgroup")?;
                (
                    Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')),
                    "memory.max",
                )
            }
        };
        let dir = parent.join(format!("shmrc-test-oversize-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let cgroup = TestCgroup(dir);
        std::fs::write(cgroup.0.join(limit_file), limit.to_string())
            .map_err(|e| format!("set {limit_file} in {}: {e}", cgroup.0.display()))?;
        Ok(cgroup)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Empty once the child exited; the kernel may take a moment to let it go.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.0.exists() {
            eprintln!(
                "warning: could not remove the test cgroup {}",
                self.0.display()
            );
        }
    }
}

#[test]
fn an_oversize_create_in_a_memory_cgroup_is_no_space_not_an_oom_kill() {
    const TEST: &str = "an_oversize_create_in_a_memory_cgroup";
    let cgroup = match TestCgroup::create(LIMIT) {
        Ok(cgroup) => cgroup,
        Err(why) => return cannot_attack(TEST, &why),
    };
    let t = TestNamespace::new("oversize");
    let mut command = test_role("child");
    command.env(PREFIX, t.ns.prefix()).env(CGROUP, &cgroup.0);
    let out = output_within(&mut command, Duration::from_secs(120));
    let said = text_of(&out);
    println!("{said}");
    assert_eq!(
        out.status.signal(),
        None,
        "the child was killed (the OOM killer?): {said}"
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("child: alive"), "{said}");
    for strategy in ["file_system", "file_descriptor"] {
        let line = said
            .lines()
            .find(|l| l.contains(&format!("child: {strategy} {}:", 8u64 << 30)))
            .unwrap_or_else(|| panic!("no outcome for {strategy}: {said}"));
        assert!(line.contains("NoSpace"), "{line}");
        assert!(line.contains("memory cgroup"), "names the cgroup: {line}");
    }
    assert!(
        said.contains(&format!("child: file_system {}: ok", 64u64 << 20)),
        "a buffer that fits is made: {said}"
    );
    assert!(t.names().is_empty(), "left in /dev/shm: {:?}", t.names());
    drop(cgroup);
}
