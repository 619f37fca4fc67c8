//! [`TestNamespace`]: a `/dev/shm` namespace of one test in one process, emptied when
//! the test ends whatever its outcome (after the test has had its chance to assert that
//! nothing was left). It lists and unlinks with plain file calls, so it works in every
//! build of shmrc, loom and shuttle included.

use std::path::Path;

use shmrc::Namespace;

/// Where the kernel keeps named shared memory.
const SHM_DIR: &str = "/dev/shm";

/// A namespace unique to this test and process; on drop, everything left in it is
/// unlinked.
pub struct TestNamespace {
    pub ns: Namespace,
}

impl TestNamespace {
    /// The namespace `shmrc-t-<test>-<pid>`. Also turns the manager off in this
    /// process: these tests sweep by themselves, and a manager's sweeps at its start
    /// and exit would race with files a test plants on purpose.
    pub fn new(test: &str) -> TestNamespace {
        shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
        let prefix = format!("shmrc-t-{test}-{}", std::process::id());
        TestNamespace {
            ns: Namespace::new(prefix).expect("valid test prefix"),
        }
    }

    /// Names of this namespace in `/dev/shm`, sorted.
    pub fn names(&self) -> Vec<String> {
        let start = self.ns.name_start(current_uid());
        let mut names: Vec<String> = std::fs::read_dir(SHM_DIR)
            .expect("list /dev/shm")
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(&start))
            .collect();
        names.sort();
        names
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        for name in self.names() {
            let _ = std::fs::remove_file(Path::new(SHM_DIR).join(name));
        }
    }
}

/// This process's effective uid (the owner part of every segment name).
pub fn current_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}
