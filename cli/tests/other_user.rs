//! Another user is locked out. As root, the test creates a file_system buffer and starts
//! a manager whose runtime directory it lets the manager create; then it runs a probe (a
//! copy of this test binary) as an unprivileged user, which must fail to:
//! - open the segment in `/dev/shm` (mode 0600), to read or to write;
//! - attach it from its handle bytes (refused before anything is opened: the name is of
//!   another user's namespace);
//! - unlink it (`/dev/shm` is sticky);
//! - connect to the manager's socket (its directory is 0700);
//! - get a sweep of the namespace to touch it;
//! - stop the owner's sweeps by planting an empty file under one of the owner's names
//!   (it is reported as another user's and the sweep goes on).
//!
//! Afterwards the segment is still there with its bytes unchanged and the manager still
//! runs, having refused nothing because nothing reached it.
//!
//! It needs root and an unprivileged user: `SHMRC_OTHER_USER` (default `shmrc-other`;
//! `.ci/run` creates it). Where either is missing the test says so and passes, unless
//! `SHMRC_REQUIRE_OTHER_USER=1` (set by `.ci/run`), which makes that a failure.

mod common;

use shmrc_testkit::names::TestNamespace;

use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
use shmrc_testkit::data::{fnv1a, hex, pattern, unhex};
use shmrc_testkit::process::copy_of_this_test;

/// The variables that carry the probe's orders.
const PROBE_SEGMENT: &str = "SHMRC_PROBE_SEGMENT";
const PROBE_HANDLE: &str = "SHMRC_PROBE_HANDLE";
const PROBE_SOCKET: &str = "SHMRC_PROBE_SOCKET";
const PROBE_NAMESPACE: &str = "SHMRC_PROBE_NAMESPACE";

/// The unprivileged user, if this run can use one.
fn other_user() -> Option<nix::unistd::User> {
    let name = std::env::var("SHMRC_OTHER_USER").unwrap_or_else(|_| "shmrc-other".into());
    let required = std::env::var("SHMRC_REQUIRE_OTHER_USER").is_ok_and(|v| v == "1");
    let why = if !nix::unistd::geteuid().is_root() {
        format!("not root: cannot run a process as {name}")
    } else {
        match nix::unistd::User::from_name(&name) {
            Ok(Some(user)) if !user.uid.is_root() => return Some(user),
            Ok(_) => format!("no unprivileged user {name} (useradd --system {name})"),
            Err(e) => format!("looking up {name}: {e}"),
        }
    };
    assert!(!required, "SHMRC_REQUIRE_OTHER_USER=1 but {why}");
    eprintln!("other_user: skipped: {why}");
    None
}

#[test]
fn another_user_can_neither_open_attach_unlink_nor_reach_the_manager() {
    let Some(user) = other_user() else { return };
    let t = TestNamespace::new("otheruser");
    // This process stays off the manager; the one under test is started below.
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let buf = ShmBuf::with_options(
        64 << 10,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(t.ns.clone()),
    )
    .unwrap();
    let data = pattern(buf.len(), 3);
    buf.write_at(0, &data).unwrap();
    let name = buf.name().unwrap().to_owned();
    let handle = buf.share().unwrap().into_bytes().unwrap();

    // A world-traversable place; the manager creates its runtime directory inside.
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let runtime = open.path().join("runtime");
    let manager = Manager::start(&runtime);
    let socket = manager.socket();
    let mode = std::fs::metadata(&runtime).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the manager's runtime directory");

    let probe = copy_of_this_test(open.path());
    let mut probe_command = Command::new(&probe);
    probe_command
        .args([
            "--exact",
            "probe_as_another_user",
            "--ignored",
            "--nocapture",
        ])
        .env(PROBE_SEGMENT, &name)
        .env(PROBE_HANDLE, hex(&handle))
        .env(PROBE_SOCKET, &socket)
        .env(PROBE_NAMESPACE, t.ns.prefix())
        .env("SHMRC_MANAGER", "off")
        .env_remove("SHMRC_RUNTIME_DIR")
        .uid(user.uid.as_raw())
        .gid(user.gid.as_raw())
        .current_dir(open.path());
    let out = shmrc_testkit::process::output_within(&mut probe_command, Duration::from_secs(60));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{said}");
    assert!(out.status.success(), "the probe failed: {said}");
    assert!(said.contains("probe: locked out 6 ways"), "{said}");

    // Nothing changed: the segment is there, its bytes intact, the manager alive.
    assert!(t.names().contains(&name));
    // The planted file stops no sweep: it is reported as another user's and left.
    let planted = said
        .lines()
        .find_map(|l| l.strip_prefix("probe: planted "))
        .expect("the probe planted a file")
        .to_owned();
    let report = shmrc::sweep(&t.ns).unwrap();
    let seen = report.segments.iter().find(|s| s.name == planted).unwrap();
    assert!(
        matches!(
            seen.action,
            shmrc::checkers::sweep::Action::Skipped(Error::OtherUser { owner, .. }) if owner == user.uid.as_raw()
        ),
        "{seen:?}"
    );
    std::fs::remove_file(Path::new("/dev/shm").join(&planted)).unwrap();
    let mut now = vec![0u8; buf.len()];
    buf.read_at(0, &mut now).unwrap();
    assert_eq!(fnv1a(&now), fnv1a(&data));
    assert!(manager.running(), "the manager still runs");
    // The handle's in-flight reference went with the bytes, which the probe could not
    // use: give it back (dropping an unattached handle), then release ours.
    drop(ShareHandle::from_bytes(&handle).unwrap());
    buf.release().unwrap();
    assert!(t.names().is_empty());
    manager.stop();
}

/// What the unprivileged user tries. Run only by the test above, as that user.
#[test]
#[ignore = "run as another user by another_user_can_neither_open_attach_unlink_nor_reach_the_manager"]
fn probe_as_another_user() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
    let (segment, socket, prefix) = (var(PROBE_SEGMENT), var(PROBE_SOCKET), var(PROBE_NAMESPACE));
    assert!(!nix::unistd::geteuid().is_root(), "the probe runs as root");
    let path = Path::new("/dev/shm").join(&segment);
    let denied = |what: &str, r: std::io::Result<()>| match r {
        Err(e) if e.kind() == ErrorKind::PermissionDenied => println!("probe: {what}: {e}"),
        other => panic!("{what}: expected permission denied, got {other:?}"),
    };
    denied("open to read", std::fs::File::open(&path).map(drop));
    denied(
        "open to write",
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map(drop),
    );
    denied("unlink", std::fs::remove_file(&path));
    denied(
        "connect to the manager",
        UnixStream::connect(&socket).map(drop),
    );

    let bytes = unhex(&var(PROBE_HANDLE));
    match ShareHandle::from_bytes(&bytes).and_then(ShmBuf::attach) {
        Err(e @ (Error::OutsideNamespace { .. } | Error::OtherUser { .. })) => {
            println!("probe: attach: {e}");
        }
        other => panic!("attach: expected another user's segment refused, got {other:?}"),
    }
    let report = shmrc::sweep(&Namespace::new(prefix).unwrap()).unwrap();
    assert_eq!(
        (report.segments.len(), report.unlinked),
        (0, 0),
        "a sweep as another user sees and touches nothing"
    );
    println!("probe: sweep: saw 0 segments, unlinked 0");
    // Last, an attack on the owner's sweeps: an empty file, writable by all, under a
    // name of the owner's namespace with a dead "creator", where a sweep would look for
    // a half-created segment it may remove.
    let pid_namespace = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    // Root's (uid 0) namespace; pid 1 with start time 1 is nobody alive.
    let nonce = "0".repeat(32);
    let planted = format!("{}.0.{pid_namespace}.1.1.{nonce}", var(PROBE_NAMESPACE));
    let file = std::fs::File::create(Path::new("/dev/shm").join(&planted)).unwrap();
    file.set_permissions(std::fs::Permissions::from_mode(0o666))
        .unwrap();
    println!("probe: planted {planted}");
    println!("probe: locked out 6 ways");
}

/// A manager of this test, in the foreground: our child, killed by pid and reaped.
struct Manager {
    child: Child,
    runtime: PathBuf,
}

impl Manager {
    fn start(runtime: &Path) -> Manager {
        let child = Command::new(env!("CARGO_BIN_EXE_shmrc"))
            .args(["manager", "--foreground", "--grace-ms", "60000"])
            .env("SHMRC_RUNTIME_DIR", runtime)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the manager");
        let manager = Manager {
            child,
            runtime: runtime.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !manager.running() {
            assert!(Instant::now() < deadline, "the manager did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        manager
    }

    fn socket(&self) -> PathBuf {
        self.runtime.join(shmrc::manager::SOCKET_FILE)
    }

    fn running(&self) -> bool {
        let out = shmrc_testkit::process::output_within(
            Command::new(env!("CARGO_BIN_EXE_shmrc"))
                .args(["status", "--json"])
                .env("SHMRC_RUNTIME_DIR", &self.runtime),
            Duration::from_secs(60),
        );
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|doc| doc["running"] == true)
    }

    fn stop(mut self) {
        self.child.kill().expect("kill the manager");
        self.child.wait().expect("reap the manager");
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
