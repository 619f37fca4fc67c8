//! Liveness judged by an unprivileged user about another user's processes (issue 31,
//! item 2, in part): `kill(pid, 0)` answers `EPERM` for a live process of another user,
//! under `hidepid=2` its `/proc/<pid>` is not there at all, and under `hidepid=1` it is
//! listed but its `stat` cannot be read (`EACCES`). All must read as *alive* (a root
//! service holding a user's segment is not dead), and a pid that no process has must
//! still read as dead.
//!
//! A probe (a copy of this test binary) runs as a throwaway user (`useradd --system`,
//! removed in every outcome): once with `/proc` as it is, and in a mount namespace of
//! its own with `/proc` mounted `hidepid=2`, then `hidepid=1`, and from a user and a
//! time namespace of its own. It judges the token of this test process
//! (root) and of a child of ours that was reaped (its pid unused since). Needs root and
//! util-linux's `unshare`, `mount` and `setpriv`; without them the test says so, and
//! fails where `SHMRC_REQUIRE_ROOT=1` (as `.ci/run` sets it).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use shmrc::Token;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::posix::PosixOs;
use shmrc::checkers::token::TokenExt;
use shmrc_testkit::process::{copy_of_this_test, output_within, text_of};
use shmrc_testkit::users::{ThrowawayUser, cannot_attack};

const LIVE: &str = "SHMRC_TEST_LIVENESS_LIVE";
const DEAD: &str = "SHMRC_TEST_LIVENESS_DEAD";

/// The probe: prints `live: BOOL`, `dead: BOOL` and whether it can see `/proc/<pid>`
/// of the live token's process. Returns at once in a normal test run.
#[test]
fn probe() {
    let (Ok(live), Ok(dead)) = (std::env::var(LIVE), std::env::var(DEAD)) else {
        return;
    };
    let token = |word: String| Token::from_word(word.parse().unwrap()).unwrap();
    let (live, dead) = (token(live), token(dead));
    println!(
        "probe: uid {} sees /proc/{}: {}",
        nix::unistd::geteuid(),
        live.pid(),
        std::path::Path::new(&format!("/proc/{}", live.pid())).exists()
    );
    println!(
        "probe: reads /proc/{}/stat: {}",
        live.pid(),
        std::fs::read(format!("/proc/{}/stat", live.pid())).is_ok()
    );
    let boottime = std::fs::read_to_string("/proc/self/timens_offsets")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("boottime"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_owned())
        });
    println!("probe: boottime offset: {}", boottime.unwrap_or_default());
    println!("probe: live: {}", PosixOs.is_alive(live));
    println!("probe: dead: {}", PosixOs.is_alive(dead));
}

/// A token of a process that existed and was reaped.
fn dead_token() -> Token {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let token = Token::new(pid, 1).unwrap();
    child.wait().unwrap();
    token
}

/// A throwaway user named after `name`, and a copy of this test binary it may run (in
/// a world-readable temporary folder, kept while the returned `TempDir` lives).
fn user_and_probe(
    name: &str,
) -> Result<(ThrowawayUser, tempfile::TempDir, std::path::PathBuf), String> {
    let user = ThrowawayUser::create(name)?;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = copy_of_this_test(dir.path());
    Ok((user, dir, probe))
}

/// Runs the probe as `user`: with `/proc` as it is, or (with `hidepid`) in a mount
/// namespace of its own with `/proc` mounted `hidepid=N`.
fn run(user: &ThrowawayUser, probe: &std::path::Path, hidepid: Option<u8>) -> String {
    let live = PosixOs.current();
    let dead = dead_token();
    let mut command = if let Some(hidepid) = hidepid {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount -t proc -o hidepid={hidepid} proc /proc && exec setpriv --reuid {} --regid {} \
             --clear-groups {} --exact probe --nocapture --test-threads=1",
                user.uid,
                user.gid,
                probe.display(),
            ));
        c
    } else {
        let mut c = Command::new(probe);
        c.args(["--exact", "probe", "--nocapture", "--test-threads=1"])
            .uid(user.uid)
            .gid(user.gid);
        c
    };
    command
        .env(LIVE, live.word().to_string())
        .env(DEAD, dead.word().to_string())
        .current_dir("/");
    let out = output_within(&mut command, Duration::from_secs(60));
    let said = text_of(&out);
    assert!(out.status.success(), "the probe failed: {said}");
    said
}

#[test]
fn another_users_live_process_is_alive_even_when_proc_hides_it() {
    const TEST: &str = "another_users_live_process_is_alive";
    let (user, _dir, probe) = match user_and_probe("live") {
        Ok(made) => made,
        Err(why) => return cannot_attack(TEST, &why),
    };

    let plain = run(&user, &probe, None);
    println!("{plain}");
    assert!(
        plain.contains(&format!("probe: uid {} ", user.uid)),
        "{plain}"
    );
    assert!(
        plain.contains("probe: live: true"),
        "EPERM is not death: {plain}"
    );
    assert!(plain.contains("probe: dead: false"), "{plain}");

    let hidden = run(&user, &probe, Some(2));
    println!("{hidden}");
    if !hidden.contains(": false\n") || !hidden.contains("probe: live:") {
        return cannot_attack(
            TEST,
            &format!("/proc with hidepid=2 did not hide root's process: {hidden}"),
        );
    }
    assert!(
        hidden.contains("probe: live: true"),
        "a hidden process is not dead: {hidden}"
    );
    assert!(hidden.contains("probe: dead: false"), "{hidden}");
    drop(user);
}

/// The probe, as a throwaway user, in a user namespace of its own (mapped to itself)
/// and a time namespace whose boottime is 100,000 s ahead: root's process, outside both,
/// must still be alive (its start time read shifted, then unshifted), and the reaped pid
/// dead. Needs unprivileged user namespaces and `unshare --time` (Linux 5.6).
#[test]
fn another_users_live_process_is_alive_seen_from_a_user_and_time_namespace() {
    const TEST: &str = "another_users_process_from_a_user_and_time_namespace";
    let (user, _dir, probe) = match user_and_probe("nsprobe") {
        Ok(made) => made,
        Err(why) => return cannot_attack(TEST, &why),
    };
    let live = PosixOs.current();
    let dead = dead_token();
    let mut command = {
        let mut c = Command::new("unshare");
        c.args([
            "--user",
            "--map-current-user",
            "--time",
            "--boottime",
            "100000",
            "--fork",
        ])
        .arg(&probe)
        .args(["--exact", "probe", "--nocapture", "--test-threads=1"])
        .uid(user.uid)
        .gid(user.gid);
        c
    };
    command
        .env(LIVE, live.word().to_string())
        .env(DEAD, dead.word().to_string())
        .current_dir("/");
    let out = output_within(&mut command, Duration::from_secs(60));
    let said = text_of(&out);
    println!("{said}");
    if !said.contains("probe: boottime offset: 100000\n") {
        return cannot_attack(
            TEST,
            &format!("unshare --user --time as an unprivileged user failed: {said}"),
        );
    }
    assert!(
        said.contains("probe: live: true"),
        "root's live process, judged from another user and time namespace, is dead: {said}"
    );
    assert!(said.contains("probe: dead: false"), "{said}");
    drop(user);
}

/// `hidepid=1` leaves `/proc/<pid>` listed but its files unreadable for another user:
/// the probe's read of root's `/proc/<pid>/stat` fails with `EACCES`, the branch of
/// the liveness code that must doubt (alive), never conclude "dead". A pid nobody has
/// is still dead (no entry).
#[test]
fn another_users_live_process_is_alive_when_its_proc_stat_is_unreadable() {
    const TEST: &str = "another_users_process_with_unreadable_stat_is_alive";
    let (user, _dir, probe) = match user_and_probe("unread") {
        Ok(made) => made,
        Err(why) => return cannot_attack(TEST, &why),
    };
    let said = run(&user, &probe, Some(1));
    println!("{said}");
    // hidepid=1 lists the directory (it "sees" it) but refuses its files.
    let me = std::process::id();
    if !said.contains(&format!("sees /proc/{me}: true"))
        || !said.contains(&format!("reads /proc/{me}/stat: false"))
        || !said.contains(&format!("probe: uid {} ", user.uid))
    {
        return cannot_attack(
            TEST,
            &format!("/proc with hidepid=1 hid root's process: {said}"),
        );
    }
    assert!(
        said.contains("probe: live: true"),
        "an unreadable /proc/<pid>/stat is not death: {said}"
    );
    assert!(said.contains("probe: dead: false"), "{said}");
    drop(user);
}
