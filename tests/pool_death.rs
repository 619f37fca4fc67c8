//! A pool's segments are reclaimed like any other when its process dies: a forked child
//! fills a pool (buffers in use, idle ones kept, one recycled) and is SIGKILLed; one
//! sweep then unlinks every segment it had, and nothing is left in /dev/shm. (A file of
//! its own: the test forks, so it must be the only test of its binary.)
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use shmrc::{CreateOptions, PoolLimits, ShmPool, Strategy};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::fork_and_wait;

/// The child's work: three buffers, two back in the pool, one of them reused, then a
/// SIGKILL of itself (no destructor runs). Returns only on failure.
fn fill_pool_then_die(options: CreateOptions) -> i32 {
    let Ok(pool) = ShmPool::new(options, PoolLimits::default()) else {
        return 2;
    };
    let (Ok(a), Ok(b), Ok(c)) = (pool.get(4096), pool.get(4096), pool.get(8192)) else {
        return 3;
    };
    drop((a, c));
    let Ok(again) = pool.get(4096) else { return 4 };
    if again.generation() != 1 || pool.stats().created != 3 {
        return 5;
    }
    let _ = kill(Pid::this(), Signal::SIGKILL);
    drop((b, again));
    6
}

#[test]
fn a_killed_pools_segments_are_swept_like_any_others() {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let t = TestNamespace::new("pooldeath");
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone());
    // SAFETY: this test binary runs this one test, so no other thread holds a lock the
    // child could need; the child runs only `fill_pool_then_die`, which ends by SIGKILL.
    let status = unsafe { fork_and_wait(Duration::from_secs(30), || fill_pool_then_die(options)) };
    assert!(
        matches!(status, WaitStatus::Signaled(_, Signal::SIGKILL, false)),
        "{status:?}"
    );
    assert_eq!(
        t.names().len(),
        3,
        "the dead pool's segments are still named"
    );
    let report = shmrc::sweep(&t.ns).unwrap();
    assert_eq!(report.segments.len(), 3);
    assert!(
        t.names().is_empty(),
        "left after the sweep: {:?}",
        t.names()
    );
}
