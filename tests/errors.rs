//! Every cause of failure on the real kernel, one test each: attaching to a segment
//! that is gone, half-created, truncated, of another version, another user's or
//! corrupted is an `Error` naming that cause (property P4), and bad arguments are
//! refused without side effects. (Causes the real kernel cannot be made to produce on
//! demand, like another pid namespace or an fd limit hit mid-protocol, are checked on
//! the simulated kernel in `sim_protocol.rs`.)
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use shmrc::checkers::namespace::NamespaceExt;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::posix::PosixOs;
use shmrc::checkers::segment::{self, MAGIC};
use shmrc::checkers::token::TokenExt;
use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;

fn named(t: &TestNamespace, len: usize, capacity: usize) -> ShmBuf {
    ShmBuf::with_options(
        len,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(t.ns.clone())
            .capacity(capacity),
    )
    .unwrap()
}

/// Writes `bytes` at `offset` of the segment file, as a hostile peer could.
fn scribble(name: &str, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new()
        .write(true)
        .open(format!("/dev/shm/{name}"))
        .unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

/// Opens `name` as an attacher would.
fn open(t: &TestNamespace, name: &str) -> shmrc::Result<segment::Opened<PosixOs>> {
    segment::open_named(&PosixOs, &t.ns, name, PosixOs.uid())
}

#[test]
fn attaching_an_unlinked_segment_is_gone() {
    let t = TestNamespace::new("gone");
    let buf = named(&t, 4096, 4);
    let name = buf.name().unwrap().to_owned();
    let bytes = buf.share().unwrap().into_bytes().unwrap();
    // Our own reference goes (an attach in a holding process just returns it); the
    // in-flight one in `bytes` keeps the segment until an outsider unlinks it.
    drop(buf);
    PosixOs.shm_unlink(&name).unwrap();
    let err = ShmBuf::attach(ShareHandle::from_bytes(&bytes).unwrap()).unwrap_err();
    assert!(matches!(err, Error::Gone { .. }), "{err}");
    assert!(err.to_string().contains("gone"));
}

#[test]
fn a_segment_without_a_published_header_is_half_created() {
    let t = TestNamespace::new("half");
    let name =
        t.ns.segment_name(PosixOs.uid(), PosixOs.pid_namespace(), PosixOs.current(), 1);
    let file = PosixOs.shm_create(&name).unwrap();
    assert!(
        matches!(open(&t, &name), Err(Error::HalfCreated { .. })),
        "empty file"
    );
    PosixOs.allocate(&file, 4096).unwrap();
    assert!(
        matches!(open(&t, &name), Err(Error::HalfCreated { .. })),
        "sized, magic not yet published"
    );
    PosixOs.shm_unlink(&name).unwrap();
}

#[test]
fn a_sweep_removes_half_created_segments_only_once_their_creator_is_dead() {
    let t = TestNamespace::new("halfsweep");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = shmrc::checkers::token::Token::new(child.id(), 0).unwrap();
    child.wait().unwrap();
    let mine =
        t.ns.segment_name(PosixOs.uid(), PosixOs.pid_namespace(), PosixOs.current(), 1);
    let theirs =
        t.ns.segment_name(PosixOs.uid(), PosixOs.pid_namespace(), dead, 2);
    drop(PosixOs.shm_create(&mine).unwrap());
    drop(PosixOs.shm_create(&theirs).unwrap());
    let report = shmrc::sweep(&t.ns).unwrap();
    assert_eq!(report.unlinked, 1);
    assert_eq!(
        t.names(),
        vec![mine.clone()],
        "a live creator's segment stays"
    );
    PosixOs.shm_unlink(&mine).unwrap();
}

#[test]
fn a_shortened_segment_is_truncated() {
    let t = TestNamespace::new("trunc");
    let buf = named(&t, 8192, 4);
    let name = buf.name().unwrap().to_owned();
    let f = OpenOptions::new()
        .write(true)
        .open(format!("/dev/shm/{name}"))
        .unwrap();
    f.set_len(4096).unwrap();
    match open(&t, &name) {
        Err(Error::Truncated { need, have, .. }) => assert_eq!((have, need > have), (4096, true)),
        other => panic!("{other:?}"),
    }
    f.set_len(100).unwrap();
    assert!(matches!(
        open(&t, &name),
        Err(Error::Truncated { have: 100, .. })
    ));
    drop(buf);
}

#[test]
fn foreign_bytes_are_bad_magic() {
    let t = TestNamespace::new("magic");
    let buf = named(&t, 4096, 4);
    let name = buf.name().unwrap().to_owned();
    scribble(&name, 0, b"torch\0\0\0");
    assert!(matches!(open(&t, &name), Err(Error::BadMagic { .. })));
    scribble(&name, 0, &MAGIC.to_ne_bytes());
    assert!(open(&t, &name).is_ok(), "restored");
    drop(buf);
    assert!(t.names().is_empty());
}

#[test]
fn another_layout_version_is_refused_by_version() {
    let t = TestNamespace::new("version");
    let buf = named(&t, 4096, 4);
    let name = buf.name().unwrap().to_owned();
    // Version 2, the layout before the mark: its builds would claim slots without
    // raising the mark, and this build's finalize would pass over them, so neither may
    // open the other's (version 1, before tombstones named their finalizer, likewise).
    scribble(&name, 8, &2u64.to_ne_bytes());
    assert!(matches!(
        open(&t, &name),
        Err(Error::WrongVersion {
            found: 2,
            supported: 3,
            ..
        })
    ));
    scribble(&name, 8, &3u64.to_ne_bytes());
    drop(buf);
}

#[test]
fn a_scribbled_header_field_is_corrupted() {
    let t = TestNamespace::new("corrupt");
    let buf = named(&t, 4096, 4);
    let name = buf.name().unwrap().to_owned();
    let bytes = buf.share().unwrap().into_bytes().unwrap();
    scribble(&name, 3 * 8, &1u64.to_ne_bytes());
    assert!(
        matches!(open(&t, &name), Err(Error::Corrupted { .. })),
        "data length changed"
    );
    // The holder is unharmed: its own view was validated at creation.
    buf.write_at(0, b"still mine").unwrap();
    drop(buf);
    let err = ShmBuf::attach(ShareHandle::from_bytes(&bytes).unwrap()).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    // The segment stays (the in-flight reference of `bytes` is ours, and we live):
    // a sweep leaves it, the guard removes it.
    assert_eq!(shmrc::sweep(&t.ns).unwrap().unlinked, 0);
}

#[test]
fn another_users_segment_is_refused() {
    if PosixOs.uid() != 0 {
        eprintln!("skipped: needs root to chown a segment to another user");
        return;
    }
    let t = TestNamespace::new("otheruser");
    let buf = named(&t, 4096, 4);
    let name = buf.name().unwrap().to_owned();
    std::os::unix::fs::chown(format!("/dev/shm/{name}"), Some(65534), None).unwrap();
    assert!(matches!(
        open(&t, &name),
        Err(Error::OtherUser {
            owner: 65534,
            me: 0,
            ..
        })
    ));
    std::os::unix::fs::chown(format!("/dev/shm/{name}"), Some(0), None).unwrap();
    drop(buf);
}

#[test]
fn a_full_dev_shm_is_no_space_at_creation_and_leaves_nothing() {
    let t = TestNamespace::new("nospace");
    let err = ShmBuf::with_options(
        1 << 40,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(t.ns.clone()),
    )
    .unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert!(t.names().is_empty(), "the half-made segment was unlinked");
}

#[test]
fn a_full_segment_is_holders_full() {
    let t = TestNamespace::new("full");
    let buf = named(&t, 4096, 1);
    assert!(matches!(
        buf.share(),
        Err(Error::HoldersFull { capacity: 1, .. })
    ));
    drop(buf);
    assert!(t.names().is_empty());
}

#[test]
fn names_outside_the_namespace_are_never_opened() {
    let t = TestNamespace::new("outside");
    for name in [
        "torch_1_2_3",
        "shmrc-t-other.0.5.1.1.00000000000000000000000000000001",
        "../etc/passwd",
    ] {
        assert!(
            matches!(open(&t, name), Err(Error::OutsideNamespace { .. })),
            "{name}"
        );
    }
    assert!(matches!(
        Namespace::new("not-shmrc"),
        Err(Error::BadNamespace { .. })
    ));
}

#[test]
fn garbage_handles_are_malformed() {
    assert!(matches!(
        ShareHandle::from_bytes(b"garbage"),
        Err(Error::Malformed { .. })
    ));
}

#[test]
fn out_of_bounds_access_and_bad_sizes_are_refused() {
    let t = TestNamespace::new("bounds");
    for strategy in shmrc::all_sharing_strategies() {
        let opts = CreateOptions::new()
            .strategy(*strategy)
            .namespace(t.ns.clone());
        let buf = ShmBuf::with_options(100, &opts).unwrap();
        let mut out = [0u8; 8];
        assert!(matches!(
            buf.read_at(96, &mut out),
            Err(Error::OutOfBounds {
                offset: 96,
                len: 8,
                size: 100
            })
        ));
        assert!(matches!(
            buf.write_at(usize::MAX, b"x"),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(buf.write_at(92, &out).is_ok());
        assert!(matches!(
            ShmBuf::with_options(0, &opts),
            Err(Error::InvalidArgument(_))
        ));
    }
    let too_many = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone())
        .capacity(5000);
    assert!(matches!(
        ShmBuf::with_options(1, &too_many),
        Err(Error::InvalidArgument(_))
    ));
    assert!(t.names().is_empty());
}

#[test]
fn file_descriptor_handles_cannot_become_bytes() {
    let buf =
        ShmBuf::with_options(64, &CreateOptions::new().strategy(Strategy::FileDescriptor)).unwrap();
    let err = buf.share().unwrap().into_bytes().unwrap_err();
    assert!(matches!(
        err,
        Error::WrongStrategy {
            strategy: Strategy::FileDescriptor,
            ..
        }
    ));
}

#[test]
fn unknown_strategy_names_are_refused() {
    let unknown = "shared".parse::<Strategy>().unwrap_err();
    assert_eq!(unknown.0, "shared");
    let error = Error::from(unknown);
    assert!(matches!(error, Error::UnknownStrategy(_)));
    assert!(error.to_string().contains("\"shared\""), "{error}");
}

/// A file_descriptor handle whose descriptor is `fd` instead of its memfd, as a peer
/// (or Python's `ShareHandle(..., fd=N)`) could pass; attaching it.
fn attach_as_memfd(fd: std::os::fd::OwnedFd) -> Error {
    let buf =
        ShmBuf::with_options(64, &CreateOptions::new().strategy(Strategy::FileDescriptor)).unwrap();
    let (bytes, _memfd) = buf.share().unwrap().into_fd_parts().unwrap();
    // Gone from this process: an attach here would find it and never look at `fd`.
    drop(buf);
    ShmBuf::attach(ShareHandle::from_fd_parts(&bytes, fd).unwrap()).unwrap_err()
}

fn assert_not_shared_memory(err: Error, expected: &str) {
    assert!(
        matches!(err, Error::NotSharedMemory { what, .. } if what.starts_with(expected)),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(expected), "{message}");
    assert!(message.contains("received memfd"), "{message}");
    assert!(message.contains("not shared memory"), "{message}");
}

#[test]
fn a_pipe_passed_as_a_memfd_is_named_a_pipe() {
    let (read, write) = nix::unistd::pipe().unwrap();
    assert_not_shared_memory(attach_as_memfd(read), "a pipe");
    assert_not_shared_memory(attach_as_memfd(write), "a pipe");
}

#[test]
fn dev_null_passed_as_a_memfd_is_named_a_character_device() {
    let null = std::fs::File::open("/dev/null").unwrap();
    assert_not_shared_memory(attach_as_memfd(null.into()), "a character device");
}

#[test]
fn a_socket_or_a_directory_passed_as_a_memfd_is_named_for_what_it_is() {
    let (one, _other) = std::os::unix::net::UnixStream::pair().unwrap();
    assert_not_shared_memory(attach_as_memfd(one.into()), "a socket");
    let dir = std::fs::File::open("/").unwrap();
    assert_not_shared_memory(attach_as_memfd(dir.into()), "a directory");
}

#[test]
fn a_file_on_a_disk_passed_as_a_memfd_is_not_shared_memory() {
    // The first of these directories not in memory: a file there is on a disk.
    let on_disk = [
        env!("CARGO_TARGET_TMPDIR"),
        "/var/tmp",
        env!("CARGO_MANIFEST_DIR"),
    ]
    .into_iter()
    .find(|dir| {
        nix::sys::statfs::statfs(*dir)
            .is_ok_and(|fs| fs.filesystem_type() != nix::sys::statfs::TMPFS_MAGIC)
    })
    .expect("no directory on a disk to put a regular file in: this test cannot run");
    let file = tempfile::tempfile_in(on_disk).unwrap();
    // Long enough for a header, and shaped like one: only the file system tells.
    file.set_len(1 << 16).unwrap();
    assert_not_shared_memory(attach_as_memfd(file.into()), "a regular file outside");
}

#[test]
fn a_stale_memfd_handle_names_the_memfd_not_its_descriptor() {
    use shmrc::{PoolLimits, ShmPool};
    let pool = ShmPool::new(
        CreateOptions::new().strategy(Strategy::FileDescriptor),
        PoolLimits::default(),
    )
    .unwrap();
    let buf = pool.get(4096).unwrap();
    let (bytes, memfd) = buf.share().unwrap().into_fd_parts().unwrap();
    let again = memfd.try_clone().unwrap();
    // Never attached: its in-flight reference goes back, and the buffer is idle.
    drop(ShareHandle::from_fd_parts(&bytes, memfd).unwrap());
    drop(buf);
    let recycled = pool.get(4096).unwrap();
    assert_eq!(pool.stats().recycled, 1, "the same memfd, in its next use");
    let err = ShmBuf::attach(ShareHandle::from_fd_parts(&bytes, again).unwrap()).unwrap_err();
    assert!(matches!(err, Error::Stale { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("memfd"), "{message}");
    assert!(
        !message.contains("OwnedFd") && !message.contains("PosixFile"),
        "{message}"
    );
    drop(recycled);
}
