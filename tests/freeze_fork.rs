//! A freeze while another process maps the buffer writable: the kernel refuses the
//! seal (`EBUSY`), the buffer comes back unchanged, and once that process is gone the
//! freeze succeeds. The other process is a forked child (it inherits the writable
//! mapping); this file holds one test so that no other test thread runs at the fork.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#![allow(unsafe_code)]

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, fork};
use shmrc::{Error, ShmBuf};
use shmrc_testkit::names::TestNamespace;

#[test]
fn a_freeze_is_refused_while_another_process_maps_the_buffer_writable() {
    let _t = TestNamespace::new("freeze-fork");
    let buf = ShmBuf::new(4096).unwrap();
    buf.write_at(0, b"data").unwrap();
    // SAFETY: this test binary runs this one test, so no other thread holds a lock the
    // child could need; the child only sleeps and is killed.
    let child = match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            std::thread::sleep(Duration::from_secs(30));
            // SAFETY: leave at once, running no destructor of the parent's state.
            unsafe { nix::libc::_exit(0) }
        }
        ForkResult::Parent { child } => child,
    };
    let failed = buf.freeze().unwrap_err();
    let refused = matches!(failed.error(), Error::CannotFreeze { why, .. } if why.contains("maps it writable"));
    kill(child, Signal::SIGKILL).unwrap();
    waitpid(child, None).unwrap();
    assert!(refused, "{failed}");
    let buf = failed.into_buf().expect("handed back");
    let mut out = [0u8; 4];
    buf.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"data");
    let frozen = buf.freeze().unwrap();
    assert_eq!(&frozen[..4], b"data");
}
