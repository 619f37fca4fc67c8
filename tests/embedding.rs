//! What a program that embeds shmrc in a shared object (the Python package) uses from
//! the library: a manager command of its own ([`set_manager_command`]), which
//! [`start_detached`] runs as `PROGRAM ARGS... manager --foreground`, and a
//! file_descriptor handle split into bytes and a descriptor for a channel of its own
//! ([`ShareHandle::into_fd_parts`]). One test per process state: this file is its own
//! test binary, so the command set here reaches no other test.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use shmrc::manager::RuntimeDir;
use shmrc::manager::set_manager_command;
use shmrc::manager::start_detached;
use shmrc::{CreateOptions, Error, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;

#[test]
fn start_detached_runs_the_command_set_and_names_it_when_it_fails() {
    let dir = tempfile::tempdir().unwrap();
    let said = dir.path().join("argv");
    // A "manager" that writes down how it was called and fails.
    let script = format!("echo \"$@\" > {}; exit 3", said.display());
    set_manager_command(
        PathBuf::from("/bin/sh"),
        vec![OsString::from("-c"), OsString::from(script), "sh".into()],
    );
    let runtime = RuntimeDir::at(dir.path().join("shmrc"));
    match start_detached(&runtime, Duration::from_secs(1)) {
        Err(Error::ManagerStart { program, why }) => {
            assert_eq!(program, PathBuf::from("/bin/sh"));
            assert!(why.contains("exited"), "{why}");
        }
        other => panic!("expected ManagerStart, got {other:?}"),
    }
    let argv = std::fs::read_to_string(&said).unwrap();
    assert_eq!(argv.trim(), "manager --foreground");
}

#[test]
fn fd_parts_round_trip_and_refuse_a_file_system_handle() {
    let ns = TestNamespace::new("embedding"); // and the manager off
    let fd_buf =
        ShmBuf::with_options(64, &CreateOptions::new().strategy(Strategy::FileDescriptor)).unwrap();
    fd_buf.write_at(0, b"parts").unwrap();
    let (bytes, fd) = fd_buf.share().unwrap().into_fd_parts().unwrap();
    let again = ShmBuf::attach(shmrc::ShareHandle::from_fd_parts(&bytes, fd).unwrap()).unwrap();
    let mut out = [0u8; 5];
    again.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"parts");

    let named = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.ns.clone());
    let fs_buf = ShmBuf::with_options(64, &named).unwrap();
    assert!(matches!(
        fs_buf.share().unwrap().into_fd_parts(),
        Err(Error::WrongStrategy { .. })
    ));
    drop(fs_buf);
    assert!(ns.names().is_empty());
}
