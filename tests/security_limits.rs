//! The known limits that stay (docs/SECURITY.md), each shown as it is, so that a change
//! in them is noticed:
//! - a process of the same user that truncates a file_system segment's file makes a
//!   reader of the mapping die of SIGBUS (the kernel's rule for a mapping past the end
//!   of its file; shmrc checks lengths when it maps, not on every access);
//! - another user can take `/tmp/shmrc-<uid>` first; the victim's manager then refuses
//!   that directory (`UnsafeRuntimeDir`, naming it and the way out) instead of using it.
//!
//! The second needs root (for two throwaway users); without it the test says so, and
//! fails where `SHMRC_REQUIRE_ROOT=1` (as `.ci/run` sets it).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::time::Duration;

use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{copy_of_this_test, output_within, test_role, text_of};
use shmrc_testkit::users::{ThrowawayUser, cannot_attack};

const ROLE_PREFIX: &str = "SHMRC_TEST_LIMITS_PREFIX";
const ROLE_ACTION: &str = "SHMRC_TEST_LIMITS_ACTION";

/// The role: `truncate_then_read` creates a file_system buffer, truncates its file as a
/// hostile process of the same user would, and reads it; `create` makes a file_system
/// buffer with the manager on and prints the outcome. Returns at once in a normal run.
#[test]
fn role() {
    let (Ok(prefix), Ok(action)) = (std::env::var(ROLE_PREFIX), std::env::var(ROLE_ACTION)) else {
        return;
    };
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(Namespace::new(prefix).unwrap());
    match action.as_str() {
        "truncate_then_read" => {
            shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
            let buf = ShmBuf::with_options(1 << 20, &options).unwrap();
            let name = buf.name().unwrap().to_owned();
            std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/dev/shm/{name}"))
                .unwrap()
                .set_len(0)
                .unwrap();
            println!("role: truncated {name}; reading");
            let mut out = vec![0u8; 4096];
            let read = buf.read_at(buf.len() - 4096, &mut out);
            println!("role: read returned {read:?}");
        }
        "create" => match ShmBuf::with_options(4096, &options) {
            Ok(_) => println!("role: created"),
            Err(e) => println!("role: error: {e:?} / {e}"),
        },
        other => panic!("unknown action {other}"),
    }
}

#[test]
fn a_same_user_truncate_makes_a_file_system_reader_die_of_sigbus() {
    let t = TestNamespace::new("limtrunc");
    let mut command = test_role("role");
    command
        .env(ROLE_PREFIX, t.ns.prefix())
        .env(ROLE_ACTION, "truncate_then_read");
    let out = output_within(&mut command, Duration::from_secs(60));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains("role: truncated"), "{said}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "the limit changed: a reader of a truncated segment {:?} ({said})",
        out.status
    );
    // The dead creator's segment is TestNamespace's to remove.
}

#[test]
fn another_user_squatting_the_default_runtime_dir_is_refused_by_name() {
    const TEST: &str = "another_user_squatting_the_default_runtime_dir";
    let (victim, squatter) = match (
        ThrowawayUser::create("victim"),
        ThrowawayUser::create("squat"),
    ) {
        (Ok(v), Ok(s)) => (v, s),
        (Err(why), _) | (_, Err(why)) => return cannot_attack(TEST, &why),
    };
    let squatted = std::path::PathBuf::from(format!("/tmp/shmrc-{}", victim.uid));
    let _ = std::fs::remove_dir_all(&squatted);
    let cleanup = RemoveOnDrop(squatted.clone());
    // The squatter takes the victim's default directory first.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&squatted)
        .unwrap();
    nix::unistd::chown(
        &squatted,
        Some(nix::unistd::Uid::from_raw(squatter.uid)),
        Some(nix::unistd::Gid::from_raw(squatter.gid)),
    )
    .unwrap();

    // The victim, with no runtime directory of its own set, creates a file_system
    // buffer (which starts or joins its manager there).
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = copy_of_this_test(dir.path());
    let mut command = Command::new(&probe);
    command
        .args(["--exact", "role", "--nocapture", "--test-threads=1"])
        .env(
            ROLE_PREFIX,
            format!("shmrc-t-limsquat-{}", std::process::id()),
        )
        .env(ROLE_ACTION, "create")
        .env("SHMRC_MANAGER", "auto")
        .env_remove("SHMRC_RUNTIME_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir(dir.path())
        .uid(victim.uid)
        .gid(victim.gid);
    let out = output_within(&mut command, Duration::from_secs(60));
    let said = text_of(&out);
    assert!(out.status.success(), "{said}");
    let line = said
        .lines()
        .find_map(|l| l.find("role: ").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no outcome: {said}"));
    assert!(line.contains("UnsafeRuntimeDir"), "{line}");
    assert!(line.contains(&squatted.display().to_string()), "{line}");
    assert!(
        line.contains("SHMRC_RUNTIME_DIR"),
        "says the way out: {line}"
    );
    // Nothing of the victim's was made in /dev/shm (refused before the create).
    let victim_names = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("shmrc-t-limsquat-{}.", std::process::id())))
        .count();
    assert_eq!(victim_names, 0);
    drop(cleanup);
    drop((victim, squatter));
}

/// Removes a directory tree when dropped, whatever the outcome.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
