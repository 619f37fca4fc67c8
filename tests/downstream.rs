//! shmrc in someone else's program: a fresh crate outside this workspace that depends
//! on the library with default features, built and run with no `shmrc` executable on
//! `PATH` and none of shmrc's environment variables, calling nothing but the user API.
//! It runs the README's file_system example (taken from README.md itself), then hands a
//! file_system buffer (as bytes) to a child of its own, releases its reference, and
//! SIGKILLs the child: the segment must leave `/dev/shm` within 1 s while the parent
//! lives and makes no further call (no sweep). That can only be the manager, started by
//! the library from the program's own image: the test checks that too.
//!
//! The same crate also builds as a shared library loaded into Python (`ctypes`): there
//! the executable is the interpreter, which cannot serve the manager, and a
//! file_system create must fail at once with an error that says so, instead of
//! re-executing the interpreter.
//!
//! The test isolates the manager with a runtime directory of its own
//! (`SHMRC_RUNTIME_DIR`), so that a manager some other program started cannot stand in
//! for the one this program must start by itself.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{output_within, wait_gone};

/// The downstream program. `README_EXAMPLE` is replaced by the README's Rust block.
const MAIN_RS: &str = r#"
use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shmrc::{CreateOptions, Namespace, ShareHandle, ShmBuf, Strategy};

fn readme() -> Result<(), Box<dyn Error>> {
    README_EXAMPLE
    Ok(())
}

/// Attaches the handle given as hex, says which segment, then waits to be killed.
fn child(hex: &str) -> Result<(), Box<dyn Error>> {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<_, _>>()?;
    let buf = ShmBuf::attach(ShareHandle::from_bytes(&bytes)?)?;
    let mut out = [0u8; 5];
    buf.read_at(0, &mut out)?;
    assert_eq!(&out, b"hello");
    println!("attached {}", buf.name().unwrap_or("?"));
    std::io::stdout().flush()?;
    // Until killed, or until the parent goes away (its end of our stdin closes).
    std::io::copy(&mut std::io::stdin(), &mut std::io::sink())?;
    Ok(())
}

fn parent(prefix: &str) -> Result<(), Box<dyn Error>> {
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(Namespace::new(prefix)?);
    let buf = ShmBuf::with_options(4096, &options)?;
    buf.write_at(0, b"hello")?;
    let name = buf.name().ok_or("a file_system buffer has a name")?.to_owned();
    let hex: String = buf.share()?.into_bytes()?.iter().map(|b| format!("{b:02x}")).collect();
    let mut kid = Command::new(std::env::current_exe()?)
        .args(["child", &hex])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(kid.stdout.take().ok_or("child stdout")?).read_line(&mut line)?;
    assert_eq!(line.trim(), format!("attached {name}"));
    drop(buf); // the parent's own reference is released: only the child holds it
    let path = std::path::Path::new("/dev/shm").join(&name);
    assert!(path.exists(), "the child still holds {name}");
    kid.kill()?; // SIGKILL, by pid
    kid.wait()?;
    let killed = Instant::now();
    // No shmrc call from here on: only the manager can remove it.
    while path.exists() && killed.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(1));
    }
    if path.exists() {
        return Err(format!("{name} still in /dev/shm 1 s after its last holder was killed").into());
    }
    println!("gone {} us after SIGKILL", killed.elapsed().as_micros());
    println!("manager {}", shmrc::manager::status()?.pid);
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("readme") => readme(),
        Some("parent") => parent(&args[2]),
        Some("child") => child(&args[2]),
        _ => Err("usage: downstream readme | parent PREFIX | child HEX".into()),
    }
}
"#;

/// The same crate as a shared library: `shmrc_probe` creates a file_system buffer in
/// the namespace `$PROBE_PREFIX` and prints the outcome.
const LIB_RS: &str = r#"
use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};

#[unsafe(no_mangle)]
pub extern "C" fn shmrc_probe() -> i32 {
    let prefix = std::env::var("PROBE_PREFIX").unwrap_or_default();
    let created = Namespace::new(prefix).and_then(|ns| {
        let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns);
        ShmBuf::with_options(64, &options)
    });
    match created {
        Ok(_) => {
            println!("created");
            0
        }
        Err(e) => {
            println!("error: {e}");
            1
        }
    }
}
"#;

/// The Rust block of README.md's "Use" section.
fn readme_example() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let at = readme
        .find("\n## Use\n")
        .expect("a Use section in README.md");
    let section = &readme[at..];
    let start = section
        .find("```rust\n")
        .expect("a ```rust block under ## Use")
        + 8;
    let len = section[start..].find("```").expect("its end");
    section[start..start + len].to_owned()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes the downstream crate (a program and a shared library) and builds it, at most
/// once at a time (both tests call this; cargo's own lock serializes them).
fn build_downstream(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"downstream\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n\
         [dependencies]\nshmrc = {{ path = {:?} }}\n\n[workspace]\n",
        repo()
    );
    write_if_changed(&dir.join("Cargo.toml"), &manifest);
    let main = MAIN_RS.replace("README_EXAMPLE", &readme_example());
    write_if_changed(&dir.join("src/main.rs"), &main);
    write_if_changed(&dir.join("src/lib.rs"), LIB_RS);
    // The workspace's lock file pins the same versions; `--offline` uses the crates
    // this workspace's build already fetched.
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    write_if_changed(&dir.join("Cargo.lock"), &lock);
    let built = output_within(
        Command::new(env!("CARGO"))
            .args(["build", "--offline", "--quiet", "--manifest-path"])
            .arg(dir.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .env_remove("RUSTFLAGS"),
        Duration::from_secs(600),
    );
    assert!(
        built.status.success(),
        "the downstream crate does not build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    dir.join("target/debug/downstream")
}

/// Writes `text` to `path` unless it holds it already (a rewrite while the other test
/// builds would make cargo build again, or see a half-written file).
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}

/// `PATH` without any directory that holds a `shmrc` program.
fn path_without_shmrc() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.join("shmrc").exists())
        .collect();
    std::env::join_paths(kept).unwrap()
}

/// `command` with a clean environment: `PATH` without `shmrc`, no `SHMRC_*` variable but
/// the runtime directory of this test.
fn clean(mut command: Command, runtime: &Path) -> Command {
    command.env("PATH", path_without_shmrc());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SHMRC_") {
            command.env_remove(key);
        }
    }
    command.env("SHMRC_RUNTIME_DIR", runtime);
    command
}

/// Runs `command` with a time limit; returns its stdout, failing with its output when
/// it did not succeed.
fn succeed(mut command: Command) -> String {
    let out = output_within(&mut command, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?} {}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_program_that_only_depends_on_the_library_shares_and_is_swept_without_a_shmrc_program() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("downstream");
    let program = build_downstream(&dir);
    let runtime = tempfile::tempdir().unwrap();
    let runtime_dir = runtime.path().join("rt");
    let run = |args: &[&str]| {
        let mut command = Command::new(&program);
        command.args(args);
        succeed(clean(command, &runtime_dir))
    };

    run(&["readme"]);

    // Emptied on drop, should the test fail with something left.
    let t = TestNamespace::new("downstream");
    let out = run(&["parent", t.ns.prefix()]);
    assert!(out.contains("gone "), "{out}");
    let manager: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("manager "))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no manager pid in {out}"));
    // The manager is the downstream program's own image, not some `shmrc` binary.
    let exe = std::fs::read_link(format!("/proc/{manager}/exe"))
        .expect("the manager runs for its grace period after its last client");
    assert_eq!(
        exe,
        program.canonicalize().unwrap(),
        "the manager runs {exe:?}"
    );
    wait_gone(manager, Duration::from_secs(10));
    assert_eq!(t.names(), Vec::<String>::new());
    eprintln!("{out}");
}

#[test]
fn a_program_that_loads_the_library_as_a_plugin_gets_a_clear_error_not_a_copy_of_itself() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("downstream");
    build_downstream(&dir);
    let plugin = dir.join("target/debug/libdownstream.so");
    let runtime = tempfile::tempdir().unwrap();
    let runtime_dir = runtime.path().join("rt");
    let t = TestNamespace::new("plugin");
    let mut python = Command::new("python3");
    python
        .arg("-c")
        .arg("import ctypes, sys; sys.exit(ctypes.CDLL(sys.argv[1]).shmrc_probe())")
        .arg(&plugin)
        .env("PROBE_PREFIX", t.ns.prefix());
    let out = output_within(&mut clean(python, &runtime_dir), Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{out:?}");
    assert!(
        stdout.contains("shmrc is linked into a shared object")
            && stdout.contains("SHMRC_MANAGER_PROGRAM"),
        "{stdout}"
    );
    let socket = runtime_dir.join(shmrc::manager::SOCKET_FILE);
    assert!(!socket.exists(), "no manager was started");
    assert_eq!(t.names(), Vec::<String>::new());
}
