//! The open-file limit is the program's: shmrc creates, sends and receives
//! file_descriptor buffers without touching `RLIMIT_NOFILE`, and raises it only when
//! asked (`shmrc::raise_fd_limit`). One test in its own binary: it changes this
//! process's limit.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::net::UnixStream;

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, ShmBuf, Strategy, transport};

#[test]
fn the_limit_changes_only_when_the_program_asks() {
    set_manager_mode(ManagerMode::Off);
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    // A soft limit below the hard one, so that a raise would show.
    let soft = 256.min(hard.saturating_sub(1)).max(64);
    assert!(
        soft < hard,
        "hard limit {hard} leaves no room to see a raise"
    );
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();

    let (a, b) = UnixStream::pair().unwrap();
    let opts = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let buf = ShmBuf::with_options(4096, &opts).unwrap();
    buf.write_at(0, b"limit").unwrap();
    transport::send(&a, b"", vec![buf.share().unwrap()]).unwrap();
    let msg = transport::recv(&b).unwrap();
    let received = ShmBuf::attach(msg.handles.into_iter().next().unwrap()).unwrap();
    let mut out = [0u8; 5];
    received.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"limit");
    assert_eq!(
        getrlimit(Resource::RLIMIT_NOFILE).unwrap(),
        (soft, hard),
        "creating, sending and attaching changed the process's open-file limit"
    );

    let raised = shmrc::raise_fd_limit().unwrap();
    assert!(
        raised > soft,
        "raise_fd_limit left the soft limit at {raised}"
    );
    assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap().0, raised);
}
