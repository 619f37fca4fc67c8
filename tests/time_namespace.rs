//! Time namespaces against P1 (issue 26, item 3), run for real. The kernel shows a
//! process's start time (`/proc/<pid>/stat`) shifted by the boottime offset of the
//! *reader's* time namespace, so a token written in one time namespace and judged in
//! another named a live process as a dead one: a sweep outside unlinked a segment held
//! inside, and a manager inside unlinked, at its start sweep, one held outside. Here,
//! in both directions, with `unshare --time --boottime 100000` (a shift of 10^7 ticks):
//! - a holder inside, the library's sweep and a manager's start sweep outside;
//! - a holder outside, the library's sweep and a manager's start sweep inside;
//! - a holder inside that is a client of a manager outside (whose Hello was refused);
//! - with no privilege, as the issue ran it: a throwaway user (`useradd --system`,
//!   removed in every outcome) holds a segment inside
//!   `unshare --user --map-current-user --time`, and its own sweep runs outside;
//!
//! none unlinks the live holder's segment, both read the same token for it, and once
//! the holder is SIGKILLed the segment is reclaimed. A process whose shift cannot be
//! known to the tick (here: a time namespace whose offset is 100.005 s, half a tick past
//! whole ticks) is refused a slot with `Error::TimeNamespace` (and so is its subscriber
//! of a service published outside, and its publisher), and its sweep takes no live
//! process for dead. (The other causes of an unknown shift, a leader that called
//! `unshare` itself, its own start wrapped below zero, an unreadable `/proc`, are
//! checked by the unit tests of `src/os/posix/timens.rs`.)
//!
//! Every scene runs in a mount namespace of its own with a private `/dev/shm` (a
//! manager sweeps every namespace of its user: it must never meet another test's
//! segments, nor, on a build without the fix, unlink them), and a private runtime
//! directory. It needs root (to mount it and to make the throwaway user), util-linux's
//! `unshare` with `--time` (Linux 5.6), and, for the unprivileged scene, user
//! namespaces that an unprivileged user may make. Where one is missing the tests say
//! why and pass, unless `SHMRC_REQUIRE_ROOT=1`, which makes it a failure. Every child
//! runs under a time limit and is killed by its pid past it.
//!
//! # Safety
//! One `unsafe` block: the `pre_exec` closure that makes a time namespace with an
//! offset of part of a tick in a forked child before it `exec`s (system calls only).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use shmrc::checkers::os::Os;
use shmrc::checkers::os::posix::PosixOs;
use shmrc::checkers::token::TokenExt;
use shmrc::manager::RuntimeDir;
use shmrc::pubsub::{Publisher, PublisherOptions, Subscriber};
use shmrc::{CreateOptions, Error, Namespace, ShmBuf, Strategy, Token};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{
    Talker, copy_of_this_test, output_within, test_role, text_of, wait_gone,
};
use shmrc_testkit::users::ThrowawayUser;

/// The variable that tells a copy of this binary which role to play.
const ROLE: &str = "SHMRC_TIMENS_ROLE";
/// The namespace prefix a holder or sweeper works in.
const PREFIX: &str = "SHMRC_TIMENS_PREFIX";
/// The runtime directory a manager role serves.
const RUNTIME: &str = "SHMRC_TIMENS_RUNTIME";
/// The namespace of a publish/subscribe service the scene with an unknown shift runs.
const SERVICE_PREFIX: &str = "SHMRC_TIMENS_SERVICE_PREFIX";
/// Set for a holder that is a client of the manager at `$SHMRC_RUNTIME_DIR`.
const CONNECT: &str = "SHMRC_TIMENS_CONNECT";
/// The role test, which does nothing unless [`ROLE`] is set.
const ROLE_TEST: &str = "time_namespace_role";
/// The boottime offset of the time namespaces made here, in seconds.
const OFFSET_SECONDS: &str = "100000";
/// How long a scene (with everything it starts) may take.
const SCENE_LIMIT: Duration = Duration::from_secs(60);
/// How long one step of a scene may take.
const STEP_LIMIT: Duration = Duration::from_secs(20);
/// The grace period of the managers started here.
const GRACE: Duration = Duration::from_millis(200);

/// Why time namespaces (with a private `/dev/shm`) cannot be made here, if they cannot.
fn time_namespaces_unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root: cannot mount a private /dev/shm for the scene".into());
    }
    let tries: [&[&str]; 2] = [
        &["--time", "--boottime", OFFSET_SECONDS, "--fork", "true"],
        &["--mount", "true"],
    ];
    for args in tries {
        let out = Command::new("unshare")
            .args(args)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return Some(format!(
                    "`unshare {}` failed (a kernel before 5.6, or not allowed): {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Err(e) => return Some(format!("util-linux's unshare cannot run: {e}")),
        }
    }
    None
}

/// Whether the test can run; panics when it cannot and `SHMRC_REQUIRE_ROOT=1`.
fn can_make_time_namespaces(test: &str) -> bool {
    let Some(why) = time_namespaces_unavailable() else {
        return true;
    };
    skip(test, &why);
    false
}

/// Says loudly that `test` could not set up its attack, and why; fails the test
/// instead when `SHMRC_REQUIRE_ROOT=1`.
fn skip(test: &str, why: &str) {
    let required = std::env::var("SHMRC_REQUIRE_ROOT").is_ok_and(|v| v == "1");
    assert!(!required, "SHMRC_REQUIRE_ROOT=1 but {why}");
    eprintln!("{test}: SKIPPED, the attack could not be set up: {why}");
}

/// This binary as `role`, with `env`, run under `unshare ARGS` (none: directly).
fn role_under(unshare: &[&str], role: &str, env: &[(&str, String)]) -> Command {
    let inner = test_role(ROLE_TEST);
    let mut command = if unshare.is_empty() {
        Command::new(inner.get_program())
    } else {
        let mut command = Command::new("unshare");
        command.args(unshare).arg(inner.get_program());
        command
    };
    command.args(inner.get_args()).env(ROLE, role);
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// `unshare` arguments for a time namespace whose boottime runs [`OFFSET_SECONDS`]
/// ahead; the process in it is killed when `unshare` is.
const IN_TIME_NAMESPACE: &[&str] = &[
    "--time",
    "--boottime",
    OFFSET_SECONDS,
    "--fork",
    "--kill-child",
];

/// Runs `scene` in a mount namespace of its own whose `/dev/shm` is a fresh tmpfs,
/// and fails the test (with its output) unless it succeeded.
fn run_scene(scene: &str) {
    let inner = test_role(ROLE_TEST);
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg("mount -t tmpfs -o mode=1777 shmrc-timens /dev/shm && exec \"$@\"")
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args())
        .env(ROLE, scene);
    let out = output_within(&mut command, SCENE_LIMIT);
    let said = text_of(&out);
    assert!(out.status.success(), "the scene {scene} failed:\n{said}");
    if let Some(at) = said.find(SCENE_SKIPPED) {
        let why = said[at + SCENE_SKIPPED.len()..]
            .lines()
            .next()
            .unwrap_or_default();
        skip(scene, why);
        return;
    }
    assert!(said.contains("scene done"), "{said}");
}

/// What a scene prints when the machine cannot run it, before the reason.
const SCENE_SKIPPED: &str = "scene cannot run: ";

#[test]
fn a_sweep_outside_keeps_a_segment_held_inside_a_time_namespace() {
    if can_make_time_namespaces("a_sweep_outside_keeps_a_segment_held_inside_a_time_namespace") {
        run_scene("scene-holder-inside");
    }
}

#[test]
fn a_sweep_inside_a_time_namespace_keeps_a_segment_held_outside() {
    if can_make_time_namespaces("a_sweep_inside_a_time_namespace_keeps_a_segment_held_outside") {
        run_scene("scene-holder-outside");
    }
}

#[test]
fn a_manager_outside_watches_a_client_inside_a_time_namespace() {
    if can_make_time_namespaces("a_manager_outside_watches_a_client_inside_a_time_namespace") {
        run_scene("scene-client-inside");
    }
}

#[test]
fn an_unprivileged_users_time_namespace_does_not_fool_the_users_sweep() {
    if can_make_time_namespaces("an_unprivileged_users_time_namespace_does_not_fool") {
        run_scene("scene-unprivileged");
    }
}

#[test]
fn a_process_whose_shift_is_unknown_holds_no_slot_and_judges_no_one_dead() {
    if can_make_time_namespaces("a_process_whose_shift_is_unknown_holds_no_slot") {
        run_scene("scene-unknown-shift");
    }
}

/// The roles: nothing unless [`ROLE`] is set.
#[test]
fn time_namespace_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "scene-holder-inside" => scene_holder_inside(),
        "scene-holder-outside" => scene_holder_outside(),
        "scene-unknown-shift" => scene_unknown_shift(),
        "scene-client-inside" => scene_client_inside(),
        "scene-unprivileged" => scene_unprivileged(),
        "holder" => holder(),
        "sweep" => sweep_role(),
        "manager" => manager_role(),
        "part-of-a-tick" => part_of_a_tick_role(),
        other => panic!("unknown role {other}"),
    }
}

/// A live holder started with `unshare` arguments `unshare` (none: here).
struct Holder {
    talker: Talker,
    pid: u32,
    token: Token,
}

impl Holder {
    /// Started with `extra` in its environment besides [`PREFIX`].
    fn start(unshare: &[&str], t: &TestNamespace, extra: &[(&str, String)]) -> Holder {
        let mut env = vec![(PREFIX, t.ns.prefix().to_owned())];
        env.extend_from_slice(extra);
        Holder::of(&mut role_under(unshare, "holder", &env))
    }

    /// Started by `command` (the holder role, maybe under `unshare`).
    fn of(command: &mut Command) -> Holder {
        let talker = Talker::start(command, STEP_LIMIT);
        let said = talker.expect("holding");
        let mut words = said.split_ascii_whitespace().skip(1);
        let mut next = |what: &str| -> u64 {
            words
                .next()
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| panic!("no {what} in {said:?}"))
        };
        let pid = u32::try_from(next("pid")).expect("a pid");
        let token = Token::from_word(next("token")).expect("a token");
        assert_eq!(token.pid(), pid);
        Holder { talker, pid, token }
    }

    /// SIGKILLs the holder itself, by its pid: our child is reaped here; `unshare`'s
    /// child is reaped by `unshare`, which then ends too.
    fn kill(self) {
        if self.talker.id() == self.pid {
            self.talker.kill();
            return;
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.pid).expect("a pid")),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill the holder");
        wait_gone(self.pid, STEP_LIMIT);
        drop(self.talker);
    }
}

/// Runs the role `role` over namespace `t` (under `unshare` arguments `unshare`) to
/// its end and returns what it printed; fails unless it succeeded.
fn run_role(unshare: &[&str], role: &str, t: &TestNamespace, runtime: &RuntimeDir) -> String {
    let env = [
        (PREFIX, t.ns.prefix().to_owned()),
        (RUNTIME, runtime.path().display().to_string()),
    ];
    let out = output_within(&mut role_under(unshare, role, &env), STEP_LIMIT);
    let said = text_of(&out);
    assert!(out.status.success(), "role {role} failed:\n{said}");
    said
}

/// The number a role printed after `what` (as `what N`).
fn said_number(said: &str, what: &str) -> u32 {
    let at = said
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in:\n{said}"));
    said[at + what.len()..]
        .split_ascii_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number after {what:?} in:\n{said}"))
}

/// The start time of process `pid` as this process reads it.
fn start_read_here(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("its stat");
    let after = &stat[stat.rfind(')').expect("a command name") + 1..];
    after
        .split_ascii_whitespace()
        .nth(19)
        .and_then(|w| w.parse().ok())
        .expect("field 22")
}

/// A private runtime directory for the scene's managers.
fn private_runtime() -> (tempfile::TempDir, RuntimeDir) {
    let parent = tempfile::tempdir().expect("a temporary directory");
    let runtime = RuntimeDir::at(parent.path().join("rt"));
    (parent, runtime)
}

/// A holder inside a time namespace; outside, the library's sweep and a manager's
/// start (and grace-over) sweep keep its segment; once it is killed, a manager's start
/// sweep outside reclaims it.
fn scene_holder_inside() {
    let t = TestNamespace::new("timens-in");
    let (_parent, runtime) = private_runtime();
    let holder = Holder::start(IN_TIME_NAMESPACE, &t, &[]);
    let names = t.names();
    assert_eq!(names.len(), 1, "the holder's segment: {names:?}");
    // Its token carries the start time this namespace reads, 10^7 ticks less than the
    // one it read itself.
    assert_eq!(
        holder.token.start_ticks(),
        start_read_here(holder.pid),
        "the holder's token is written in the initial time namespace's terms"
    );
    assert!(PosixOs.is_alive(holder.token), "the holder counts as alive");

    let report = shmrc::sweep(&t.ns).expect("sweep");
    assert_eq!(report.unlinked, 0, "the sweep outside unlinked: {report:?}");
    assert_eq!(t.names(), names, "the sweep outside kept the segment");

    let said = run_role(&[], "manager", &t, &runtime);
    assert_eq!(
        t.names(),
        names,
        "a manager outside kept the segment:\n{said}"
    );

    holder.kill();
    let said = run_role(&[], "manager", &t, &runtime);
    assert!(
        t.names().is_empty(),
        "a manager outside reclaims the dead holder's segment:\n{said}"
    );
    println!("scene done");
}

/// A holder outside; inside a time namespace, the library's sweep and a manager's
/// start sweep keep its segment; once it is killed, a sweep inside reclaims it.
fn scene_holder_outside() {
    let t = TestNamespace::new("timens-out");
    let (_parent, runtime) = private_runtime();
    let holder = Holder::start(&[], &t, &[]);
    let names = t.names();
    assert_eq!(names.len(), 1, "the holder's segment: {names:?}");
    assert_eq!(holder.token.start_ticks(), start_read_here(holder.pid));

    let said = run_role(IN_TIME_NAMESPACE, "sweep", &t, &runtime);
    assert_eq!(said_number(&said, "holder alive"), 1, "{said}");
    assert_eq!(said_number(&said, "unlinked"), 0, "{said}");
    assert_eq!(
        t.names(),
        names,
        "the sweep inside kept the segment:\n{said}"
    );

    let said = run_role(IN_TIME_NAMESPACE, "manager", &t, &runtime);
    assert_eq!(
        t.names(),
        names,
        "a manager inside kept the segment:\n{said}"
    );

    holder.kill();
    let said = run_role(IN_TIME_NAMESPACE, "sweep", &t, &runtime);
    assert_eq!(said_number(&said, "unlinked"), 1, "{said}");
    assert!(
        t.names().is_empty(),
        "the sweep inside reclaims it:\n{said}"
    );
    println!("scene done");
}

/// A manager outside and a holder inside a time namespace that is its client: the
/// manager takes the holder's Hello (its token names it, as read outside), watches it,
/// and once the holder is SIGKILLed sweeps its segment at once.
fn scene_client_inside() {
    let t = TestNamespace::new("timens-client");
    let (_parent, runtime) = private_runtime();
    let manager = shmrc::manager::start_detached(&runtime, Duration::from_secs(1))
        .expect("start a manager outside");
    let env = [
        ("SHMRC_RUNTIME_DIR", runtime.path().display().to_string()),
        (CONNECT, "1".to_owned()),
    ];
    let holder = Holder::start(IN_TIME_NAMESPACE, &t, &env);
    assert_eq!(holder.token.start_ticks(), start_read_here(holder.pid));
    let status = shmrc::manager::status_at(&runtime).expect("the manager's status");
    assert_eq!(status.pid, manager);
    assert_eq!(
        status.clients, 1,
        "the manager watches the holder: {status:?}"
    );
    assert_eq!(status.refused, 0, "{status:?}");
    assert_eq!(t.names().len(), 1);
    holder.kill();
    let deadline = std::time::Instant::now() + STEP_LIMIT;
    while !t.names().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the manager did not sweep the dead client's segment"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    reap_within(manager, STEP_LIMIT);
    println!("scene done");
}

/// The attack as the issue ran it, with no privilege: a throwaway unprivileged user
/// makes a user and time namespace of its own
/// (`unshare --user --map-current-user --time --boottime 100000`) and holds a segment
/// there; the same user's sweep outside keeps it, and reclaims it once the holder is
/// SIGKILLed.
fn scene_unprivileged() {
    let user = ThrowawayUser::create("tns").unwrap_or_else(|why| panic!("{why}"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the directory");
    let copy = copy_of_this_test(dir.path());
    let prefix = format!("shmrc-t-timens-user-{}", std::process::id());
    let as_user = |command: &mut Command, role: &str| {
        command
            .args(["--exact", ROLE_TEST, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(PREFIX, &prefix)
            .uid(user.uid)
            .gid(user.gid)
            .current_dir(dir.path());
    };
    // The kernel (or a security module) may forbid unprivileged user namespaces.
    let mut probe = Command::new("unshare");
    probe
        .args(["--user", "--map-current-user"])
        .args(IN_TIME_NAMESPACE)
        .arg("true")
        .uid(user.uid)
        .gid(user.gid)
        .current_dir(dir.path());
    let out = output_within(&mut probe, STEP_LIMIT);
    if !out.status.success() {
        println!(
            "{SCENE_SKIPPED}an unprivileged user cannot make a user and time namespace: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    }
    let mut command = Command::new("unshare");
    command
        .args(["--user", "--map-current-user"])
        .args(IN_TIME_NAMESPACE)
        .arg(&copy);
    as_user(&mut command, "holder");
    let holder = Holder::of(&mut command);
    let names = names_with(&prefix);
    assert_eq!(names.len(), 1, "the holder's segment: {names:?}");
    println!(
        "uid {} holds {names:?} in a user and time namespace",
        user.uid
    );
    assert_eq!(holder.token.start_ticks(), start_read_here(holder.pid));

    let sweep = || {
        let mut command = Command::new(&copy);
        as_user(&mut command, "sweep");
        let out = output_within(&mut command, STEP_LIMIT);
        let said = text_of(&out);
        assert!(out.status.success(), "the user's sweep failed:\n{said}");
        said
    };
    let said = sweep();
    assert_eq!(said_number(&said, "holder alive"), 1, "{said}");
    assert_eq!(said_number(&said, "unlinked"), 0, "{said}");
    assert_eq!(
        names_with(&prefix),
        names,
        "the user's sweep kept it:\n{said}"
    );

    holder.kill();
    let said = sweep();
    assert_eq!(said_number(&said, "unlinked"), 1, "{said}");
    assert!(names_with(&prefix).is_empty(), "reclaimed:\n{said}");
    println!("scene done");
}

/// The names in `/dev/shm` (the scene's own) that start with `prefix`, sorted.
fn names_with(prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
        .expect("list /dev/shm")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// Reaps our child `pid` (a manager started with `start_detached`, which exits once its
/// grace period is over), failing the test if it has not exited within `limit`.
fn reap_within(pid: u32, limit: Duration) {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    let deadline = std::time::Instant::now() + limit;
    while let WaitStatus::StillAlive =
        waitpid(pid, Some(WaitPidFlag::WNOHANG)).expect("wait for the manager")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the manager {pid} still runs after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A process whose shift is not known to the tick (in a namespace whose offset is
/// 100.005 s) is refused a slot and takes no live process for dead; once the holder is
/// killed, a sweep here reclaims the segment.
fn scene_unknown_shift() {
    let t = TestNamespace::new("timens-unknown");
    let holder = Holder::start(&[], &t, &[]);
    let names = t.names();
    // A service published here, which the process in it must not subscribe to.
    let service = TestNamespace::new("timens-service");
    let publisher = Publisher::create(
        "timens",
        PublisherOptions::new().namespace(service.ns.clone()),
    )
    .expect("publish a service");
    let env = [
        (PREFIX, t.ns.prefix().to_owned()),
        (SERVICE_PREFIX, service.ns.prefix().to_owned()),
    ];
    let mut command = role_under(&[], "part-of-a-tick", &env);
    in_time_namespace_with_offsets(&mut command, c"boottime 100 5000000");
    let out = output_within(&mut command, STEP_LIMIT);
    let said = text_of(&out);
    assert!(out.status.success() && said.contains("role done"), "{said}");
    assert_eq!(
        t.names(),
        names,
        "the process in it changed nothing:\n{said}"
    );
    let loan = publisher.loan::<u64>(8).expect("a loan");
    let delivery = publisher.publish(loan).expect("publish");
    assert_eq!(
        delivery.sent().expect("sent").delivered,
        0,
        "the refused subscriber holds no entry:\n{said}"
    );
    drop(publisher);
    holder.kill();
    let report = shmrc::sweep(&t.ns).expect("sweep");
    assert_eq!(report.unlinked, 1, "{report:?}");
    println!("scene done");
}

/// Creates a file_system segment in [`PREFIX`], says `holding <pid> <token>`, and
/// holds it until its stdin closes. With [`CONNECT`] set, it is a client of the
/// manager that runs at `$SHMRC_RUNTIME_DIR`; otherwise it talks to no manager.
fn holder() {
    let mode = if std::env::var_os(CONNECT).is_some() {
        shmrc::manager::ManagerMode::Connect
    } else {
        shmrc::manager::ManagerMode::Off
    };
    shmrc::manager::set_manager_mode(mode);
    let ns = Namespace::new(std::env::var(PREFIX).expect("a prefix")).expect("a namespace");
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns);
    let buf = ShmBuf::with_options(4096, &options).expect("create a segment");
    let me = PosixOs.current();
    println!("holding {} {}", me.pid(), me.word());
    let mut line = String::new();
    while std::io::stdin()
        .lock()
        .read_line(&mut line)
        .is_ok_and(|n| n > 0)
    {
        line.clear();
    }
    drop(buf);
}

/// Sweeps [`PREFIX`] and says how many segments it unlinked and how many holders it
/// found alive.
fn sweep_role() {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let ns = Namespace::new(std::env::var(PREFIX).expect("a prefix")).expect("a namespace");
    let report = shmrc::sweep(&ns).expect("sweep");
    let alive: u32 = report
        .segments
        .iter()
        .filter_map(|s| s.census)
        .map(|c| c.live)
        .sum();
    println!(
        "holder alive {alive} unlinked {} {report:?}",
        report.unlinked
    );
}

/// Serves the manager of [`RUNTIME`] here until its grace period passes with no client
/// (it sweeps every namespace of this user at its start and when the grace is over).
fn manager_role() {
    let runtime = RuntimeDir::at(std::env::var(RUNTIME).expect("a runtime directory"));
    shmrc::manager::serve_here(runtime, GRACE).expect("serve the manager");
}

/// In a time namespace whose boottime offset is 100.005 s: refused a slot, and judging
/// a live holder alive.
fn part_of_a_tick_role() {
    // Neither a subscriber nor a publisher writes its token anywhere.
    let cause = "whole number of clock ticks";
    let service =
        Namespace::new(std::env::var(SERVICE_PREFIX).expect("a prefix")).expect("a namespace");
    match Subscriber::join_in(&service, "timens") {
        Err(e @ Error::TimeNamespace { .. }) => {
            assert!(e.to_string().contains(cause), "{e}");
            println!("subscriber refused: {e}");
        }
        other => panic!("subscriber not refused: {other:?}"),
    }
    match Publisher::create("mine", PublisherOptions::new().namespace(service)) {
        Err(e @ Error::TimeNamespace { .. }) => {
            assert!(e.to_string().contains(cause), "{e}");
            println!("publisher refused: {e}");
        }
        other => panic!("publisher not refused: {other:?}"),
    }
    expect_refused_and_harmless(cause);
}

/// Makes `command` run in a new time namespace whose boottime offset is `offsets`
/// (`timens_offsets` syntax, with nanoseconds, which `unshare --boottime` cannot
/// set), made in the forked child before it `exec`s: its only thread is then the
/// leader whose children's offsets `/proc/self/timens_offsets` sets, and the `exec`
/// enters the namespace.
fn in_time_namespace_with_offsets(command: &mut Command, offsets: &'static CStr) {
    let new_time = nix::sched::CloneFlags::from_bits_retain(libc::CLONE_NEWTIME);
    // SAFETY: the closure runs in the forked child before `exec` and makes system calls
    // only (unshare, open, write, close), on memory made before the fork: nothing that
    // could wait for a lock a thread of the parent held.
    unsafe {
        command.pre_exec(move || {
            nix::sched::unshare(new_time)?;
            let file = nix::fcntl::open(
                c"/proc/self/timens_offsets",
                nix::fcntl::OFlag::O_WRONLY,
                nix::sys::stat::Mode::empty(),
            )?;
            nix::unistd::write(&file, offsets.to_bytes())?;
            Ok(())
        });
    }
}

/// This process cannot hold a slot (the error names `cause`), and its liveness checks
/// and sweep take the live holder of [`PREFIX`]'s segment for alive.
fn expect_refused_and_harmless(cause: &str) {
    let ns = Namespace::new(std::env::var(PREFIX).expect("a prefix")).expect("a namespace");
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.clone());
    match ShmBuf::with_options(4096, &options) {
        Err(e @ Error::TimeNamespace { .. }) => {
            let message = e.to_string();
            assert!(message.contains(cause), "{message}");
            println!("refused: {message}");
        }
        other => panic!("not refused: {other:?}"),
    }
    // A plain memfd has no slots: nothing to refuse.
    let fd = CreateOptions::new().strategy(Strategy::FileDescriptor);
    ShmBuf::with_options(64, &fd).expect("a file_descriptor buffer");
    // The holder runs; the sweep finds its segment and leaves it, as attaching it would
    // be refused.
    let report = shmrc::sweep(&ns).expect("sweep");
    assert_eq!(report.unlinked, 0, "{report:?}");
    assert!(
        matches!(
            &report.segments[0].action,
            shmrc::Action::Skipped(Error::TimeNamespace { .. })
        ),
        "{report:?}"
    );
    let creator = report.segments[0].parts.creator;
    assert!(PosixOs.is_alive(creator), "the live holder counts as alive");
    // A process that ran and was reaped counts as dead here too.
    let mut gone = Command::new("true").spawn().expect("spawn true");
    let pid = gone.id();
    gone.wait().expect("reap true");
    if std::fs::metadata(format!("/proc/{pid}")).is_err() {
        assert!(!PosixOs.is_alive(Token::new(pid, 1).expect("a token")));
    }
    println!("role done");
}
