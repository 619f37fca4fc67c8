//! Throwaway unprivileged users for attack tests: [`ThrowawayUser`] creates a system
//! user (no home, no login shell) that only one test uses, and removes it when dropped,
//! whatever the test's outcome. [`cannot_attack`] is how a test that could not set up
//! its attack says so: loudly, and as a failure where the run requires the attack
//! (`SHMRC_REQUIRE_ROOT=1`, as `.ci/run` sets it). [`namespaces_unavailable`] says why
//! a test cannot make the pid or mount namespaces it isolates itself in, if it cannot.

use std::process::Command;
use std::time::{Duration, Instant};

/// A system user made for one test, deleted on drop.
pub struct ThrowawayUser {
    /// Its login name, `shmrc-<purpose>-<pid>`.
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl ThrowawayUser {
    /// Creates the user `shmrc-<purpose>-<pid>` (`useradd --system`, no home, shell
    /// `nologin`), or says why it cannot: not root, no `useradd`, a name too long.
    /// `/etc/passwd` may be locked by another test's `useradd` for a moment: it
    /// retries for a few seconds.
    pub fn create(purpose: &str) -> Result<ThrowawayUser, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root: cannot create a throwaway user".into());
        }
        let name = format!("shmrc-{purpose}-{}", std::process::id());
        if name.len() > 32 {
            return Err(format!("{name:?} is longer than a login name may be (32)"));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                ])
                .arg(&name)
                .output()
                .map_err(|e| format!("cannot run useradd: {e}"))?;
            if out.status.success() {
                break;
            }
            let said = String::from_utf8_lossy(&out.stderr).into_owned();
            // Exit 10: cannot lock the password file (another useradd holds it).
            if out.status.code() == Some(10) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            return Err(format!("useradd {name} failed ({}): {said}", out.status));
        }
        // From here on, drop deletes the user whatever happens.
        let mut user = ThrowawayUser {
            name,
            uid: 0,
            gid: 0,
        };
        let entry = nix::unistd::User::from_name(&user.name)
            .map_err(|e| format!("looking up {}: {e}", user.name))?
            .ok_or_else(|| format!("{} was created but cannot be found", user.name))?;
        user.uid = entry.uid.as_raw();
        user.gid = entry.gid.as_raw();
        if user.uid == 0 {
            return Err(format!("{} got uid 0", user.name));
        }
        Ok(user)
    }
}

impl Drop for ThrowawayUser {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match Command::new("userdel").arg(&self.name).output() {
                Ok(out) if out.status.success() => return,
                // Exit 10: cannot lock the password file for a moment.
                Ok(out) if out.status.code() == Some(10) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(out) => {
                    eprintln!(
                        "warning: userdel {} failed ({}): {}",
                        self.name,
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                    return;
                }
                Err(e) => {
                    eprintln!("warning: cannot run userdel {}: {e}", self.name);
                    return;
                }
            }
        }
    }
}

/// Whether this run requires every attack to be set up (`SHMRC_REQUIRE_ROOT=1`).
pub fn attacks_required() -> bool {
    std::env::var("SHMRC_REQUIRE_ROOT").is_ok_and(|v| v == "1")
}

/// Says, loudly, that `test` could not set up its attack because of `why`; a failure
/// (panic) where the run requires attacks ([`attacks_required`]), a skip otherwise.
pub fn cannot_attack(test: &str, why: &str) {
    assert!(
        !attacks_required(),
        "{test}: SHMRC_REQUIRE_ROOT=1 but the attack could not be set up: {why}"
    );
    eprintln!("{test}: SKIPPED, the attack was NOT run: {why}");
}

/// Why pid or mount namespaces cannot be made here, if they cannot: they need root and
/// util-linux's `unshare` and `mount`.
pub fn namespaces_unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root: cannot make pid or mount namespaces".into());
    }
    for tool in ["unshare", "mount"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("util-linux's {tool} is not installed"));
        }
    }
    None
}
