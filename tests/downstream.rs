//! shmrc in someone else's program: a fresh crate outside this workspace that depends
//! on the library with default features, built and run with no `shmrc` executable on
//! `PATH` and none of shmrc's environment variables, calling nothing but the user API.
//! It runs the README's file_system example (taken from README.md itself), then hands a
//! file_system buffer (as bytes) to a child of its own, releases its reference, and
//! SIGKILLs the child: the segment must leave `/dev/shm` within 1 s while the parent
//! lives and makes no further call (no sweep). That can only be the manager, started by
//! the library from the program's own image: the test checks that too.
//!
//! The test isolates the manager with a runtime directory of its own
//! (`SHMRC_RUNTIME_DIR`), so that a manager some other program started cannot stand in
//! for the one this program must start by itself.
#![cfg(not(any(feature = "loom", feature = "shuttle")))]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    std::thread::sleep(Duration::from_secs(60));
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

/// The Rust block of README.md's "Use" section.
fn readme_example() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let start = readme
        .find("```rust\n")
        .expect("a ```rust block in README.md")
        + 8;
    let len = readme[start..].find("```").expect("its end");
    readme[start..start + len].to_owned()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes the downstream crate (once per build of this test) and builds it.
fn build_downstream(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"downstream\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\nshmrc = {{ path = {:?} }}\n\n[workspace]\n",
        repo()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    let main = MAIN_RS.replace("README_EXAMPLE", &readme_example());
    std::fs::write(dir.join("src/main.rs"), main).unwrap();
    // The workspace's lock file pins the same versions; `--offline` uses the crates
    // this workspace's build already fetched.
    std::fs::copy(repo().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let status = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTFLAGS")
        .status()
        .expect("run cargo");
    assert!(status.success(), "the downstream crate does not build");
    dir.join("target/debug/downstream")
}

/// `PATH` without any directory that holds a `shmrc` program.
fn path_without_shmrc() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.join("shmrc").exists())
        .collect();
    std::env::join_paths(kept).unwrap()
}

/// Runs the downstream program with a clean environment and a time limit.
fn run(program: &Path, runtime: &Path, args: &[&str]) -> String {
    let mut command = Command::new(program);
    command.args(args).env("PATH", path_without_shmrc());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SHMRC_") {
            command.env_remove(key);
        }
    }
    let mut child = command
        .env("SHMRC_RUNTIME_DIR", runtime)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the downstream program");
    wait_with_limit(&mut child, Duration::from_secs(60))
}

/// Waits for `child` at most `limit` (then kills it, by pid, and fails); returns its
/// stdout, failing with its stderr when it did not succeed.
fn wait_with_limit(child: &mut Child, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the downstream program ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        stdout.push_str(&line.unwrap());
        stdout.push('\n');
    }
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        stderr.push_str(&line.unwrap());
        stderr.push('\n');
    }
    assert!(status.success(), "downstream {status}: {stdout}{stderr}");
    stdout
}

/// Waits (at most 10 s) until process `pid` has exited: the manager must not linger.
fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "manager {pid} still runs 10 s later"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_program_that_only_depends_on_the_library_shares_and_is_swept_without_a_shmrc_program() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("downstream");
    let program = build_downstream(&dir);
    let runtime = tempfile::tempdir().unwrap();
    let runtime_dir = runtime.path().join("rt");

    run(&program, &runtime_dir, &["readme"]);

    let prefix = format!("shmrc-t-downstream-{}", std::process::id());
    let out = run(&program, &runtime_dir, &["parent", &prefix]);
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
    wait_gone(manager);
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
    eprintln!("{out}");
}
