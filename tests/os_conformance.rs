//! The contract of [`shmrc::checkers::os::Os`], written once and checked on every backend.
//!
//! Each behaviour is a generic function `fn behaviour<H: Harness>()`; the
//! [`conformance!`] macro instantiates all of them as `#[test]`s for one backend. A
//! [`Harness`] says how a backend makes its world, its processes and its sockets, so
//! the behaviours themselves assume nothing of the real kernel: the simulated backend
//! gets the very same suite by adding one `conformance!(sim, SimHarness)` line.
//!
//! Every test works in a namespace of its own (`shmrc-conf-<tag>-<pid>`) and leaves no
//! name behind: a [`Scratch`] unlinks whatever its namespace still holds when it is
//! dropped, also when the test fails.
//!
//! Checks that only make sense on the real kernel (zombies, the fd limit, `FD_CLOEXEC`,
//! a full `/dev/shm`) are in `mod posix_only` at the end.
//!
//! Under `--features loom` or `shuttle` the posix backend does not exist and the sim's
//! atomics only work inside a model checker, so the suite is compiled out.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::collections::HashSet;

use shmrc::Error;
use shmrc::checkers::namespace::{Namespace, NamespaceExt};
use shmrc::checkers::os::{MAX_FDS_PER_SEND, Mapping, Os};
use shmrc::checkers::sync::Ordering;
use shmrc::checkers::token::{Token, TokenExt};

type File<H> = <<H as Harness>::O as Os>::File;
type Stream<H> = <<H as Harness>::O as Os>::Stream;

/// What the suite needs from a backend beyond [`Os`] itself.
trait Harness {
    /// The backend.
    type O: Os;
    /// Whatever the backend's processes live in (the real machine: `()`; the simulated
    /// backend: its kernel).
    type World;

    /// A fresh world.
    fn world() -> Self::World;
    /// A process of `world` (the real backend: this test process).
    fn process(world: &Self::World) -> Self::O;
    /// A second live process of `world`, of the same user as `of`, if the backend can
    /// make one (the real backend cannot turn this test process into two).
    fn other_process(world: &Self::World, of: &Self::O) -> Option<Self::O>;
    /// A connected pair of streams: the first end for `a`, the second for `b`.
    fn stream_pair(
        world: &Self::World,
        a: &Self::O,
        b: &Self::O,
    ) -> (<Self::O as Os>::Stream, <Self::O as Os>::Stream);
    /// The token of a process of `world` that ran, exited and was reaped.
    fn exited_process(world: &Self::World) -> Token;
}

/// Another process when the backend has one, else `os` itself: for behaviours that
/// hold within one process as well as between two.
fn peer<H: Harness>(world: &H::World, os: &H::O) -> H::O {
    H::other_process(world, os).unwrap_or_else(|| os.clone())
}

/// A namespace of one test: fresh names, the listing of the namespace, and cleanup.
struct Scratch<'a, O: Os> {
    os: &'a O,
    ns: Namespace,
}

impl<'a, O: Os> Scratch<'a, O> {
    /// The namespace `shmrc-conf-<tag>-<pid>`, emptied of anything an earlier run of
    /// the same process id left.
    fn new(os: &'a O, tag: &str) -> Self {
        let ns = Namespace::new(format!("shmrc-conf-{tag}-{}", std::process::id()))
            .expect("a valid test namespace");
        let scratch = Scratch { os, ns };
        scratch.clear();
        scratch
    }

    /// A fresh name of this namespace (not created).
    fn name(&self) -> String {
        let nonce = self.os.random_u128().expect("random nonce");
        self.ns.segment_name(
            self.os.uid(),
            self.os.pid_namespace(),
            self.os.current(),
            nonce,
        )
    }

    /// Creates a fresh name and sizes it to `len` bytes (`len > 0`).
    fn create(&self, len: u64) -> (String, O::File) {
        let name = self.name();
        let file = self.os.shm_create(&name).expect("shm_create");
        if len > 0 {
            self.os.allocate(&file, len).expect("allocate");
        }
        (name, file)
    }

    /// What the backend lists under this namespace.
    fn listed(&self) -> Vec<String> {
        self.os
            .shm_list(&self.ns.name_start(self.os.uid()))
            .expect("shm_list")
    }

    fn clear(&self) {
        if let Ok(names) = self.os.shm_list(&self.ns.name_start(self.os.uid())) {
            for name in names {
                let _ = self.os.shm_unlink(&name);
            }
        }
    }
}

impl<O: Os> Drop for Scratch<'_, O> {
    fn drop(&mut self) {
        self.clear();
    }
}

// ---------------------------------------------------------------------------------
// Named objects
// ---------------------------------------------------------------------------------

fn exclusive_create_refuses_an_existing_name<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let scratch = Scratch::new(&os, "excl");
    let name = scratch.name();
    let first = os.shm_create(&name).unwrap();
    match os.shm_create(&name) {
        Err(Error::Os { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists, "{source}")
        }
        other => panic!("second shm_create of {name}: {other:?}"),
    }
    // The name still names the first object.
    os.allocate(&first, 4096).unwrap();
    let again = os.shm_open(&name).unwrap();
    assert_eq!(os.stat(&again).unwrap().len, 4096);
    os.shm_unlink(&name).unwrap();
    assert!(scratch.listed().is_empty());
}

fn link_gives_a_second_name_exclusively<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let scratch = Scratch::new(&os, "link");
    let (name, file) = scratch.create(4096);
    let map = os.map(&file, 4096).unwrap();
    map.words(1).unwrap()[0].store(42, Ordering::SeqCst);
    let second = scratch.name();
    os.shm_link(&name, &second).unwrap();
    // Both names are the same object.
    let again = os.shm_open(&second).unwrap();
    let seen = os.map(&again, 4096).unwrap();
    assert_eq!(seen.words(1).unwrap()[0].load(Ordering::SeqCst), 42);
    // Exclusive: a name that exists is refused, and still names its own object.
    let (third, _other) = scratch.create(8192);
    match os.shm_link(&name, &third) {
        Err(Error::Os { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists, "{source}")
        }
        other => panic!("link over an existing name: {other:?}"),
    }
    assert_eq!(os.stat(&os.shm_open(&third).unwrap()).unwrap().len, 8192);
    // Unlinking the first name leaves the second.
    os.shm_unlink(&name).unwrap();
    let kept = os.shm_open(&second).unwrap();
    assert_eq!(os.stat(&kept).unwrap().len, 4096);
    // A missing name cannot be linked: gone.
    match os.shm_link(&name, &scratch.name()) {
        Err(Error::Gone { segment }) => assert_eq!(segment, name),
        other => panic!("link of a missing name: {other:?}"),
    }
    assert!(matches!(
        os.shm_link(&second, "a/b"),
        Err(Error::InvalidArgument(_))
    ));
    // Any other refusal of the kernel's is its errno, named: a name past NAME_MAX.
    match os.shm_link(&second, &"n".repeat(300)) {
        Err(Error::Os { call, source }) => {
            assert_eq!(call, "link");
            assert_eq!(source.raw_os_error(), Some(libc::ENAMETOOLONG), "{source}");
        }
        other => panic!("link to a name past NAME_MAX: {other:?}"),
    }
    os.shm_unlink(&second).unwrap();
    os.shm_unlink(&third).unwrap();
    assert!(scratch.listed().is_empty());
}

fn open_and_unlink_of_a_missing_name_are_gone<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let scratch = Scratch::new(&os, "gone");
    let name = scratch.name();
    match os.shm_open(&name) {
        Err(Error::Gone { segment }) => assert_eq!(segment, name),
        other => panic!("shm_open of a missing name: {other:?}"),
    }
    assert!(matches!(os.shm_unlink(&name), Err(Error::Gone { .. })));
    // Created and unlinked: gone again, for open and for a second unlink.
    let (name, _file) = scratch.create(0);
    os.shm_unlink(&name).unwrap();
    assert!(matches!(os.shm_open(&name), Err(Error::Gone { .. })));
    assert!(matches!(os.shm_unlink(&name), Err(Error::Gone { .. })));
    assert!(scratch.listed().is_empty());
}

fn list_finds_exactly_the_names_with_the_prefix<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let scratch = Scratch::new(&os, "list");
    // A namespace whose prefix extends this one's: its names must not be listed.
    let longer = Scratch::new(&os, "list-x");
    let mut mine: Vec<String> = (0..3).map(|_| scratch.create(64).0).collect();
    let theirs = longer.create(64).0;
    mine.sort();
    assert_eq!(scratch.listed(), mine, "sorted, and only this namespace's");
    assert_eq!(longer.listed(), vec![theirs.clone()]);
    let nothing = format!("shmrc-conf-none-{}.", std::process::id());
    assert!(os.shm_list(&nothing).unwrap().is_empty());
    for name in &mine {
        os.shm_unlink(name).unwrap();
    }
    os.shm_unlink(&theirs).unwrap();
    assert!(scratch.listed().is_empty());
    assert!(longer.listed().is_empty());
}

// ---------------------------------------------------------------------------------
// Sizing and mapping
// ---------------------------------------------------------------------------------

fn allocate_sets_the_length_and_stat_reports_len_uid_and_mode_0600<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let scratch = Scratch::new(&os, "alloc");
    let (name, file) = scratch.create(0);
    let info = os.stat(&file).unwrap();
    assert_eq!((info.len, info.uid, info.mode), (0, os.uid(), 0o600));
    os.allocate(&file, 4096 + 3).unwrap();
    assert_eq!(os.stat(&file).unwrap().len, 4099);
    os.allocate(&file, 3 * 4096).unwrap();
    let info = os.stat(&file).unwrap();
    assert_eq!((info.len, info.uid, info.mode), (3 * 4096, os.uid(), 0o600));
    // Another handle on the name sees the same object.
    let reopened = os.shm_open(&name).unwrap();
    assert_eq!(os.stat(&reopened).unwrap(), info);
    // A memfd is sized the same way.
    let memfd = os.memfd_create("conf-alloc").unwrap();
    assert_eq!(os.stat(&memfd).unwrap().len, 0);
    os.allocate(&memfd, 12_345).unwrap();
    let info = os.stat(&memfd).unwrap();
    assert_eq!((info.len, info.uid), (12_345, os.uid()));
    os.shm_unlink(&name).unwrap();
    assert!(scratch.listed().is_empty());
}

fn map_gives_words_that_two_mappings_of_the_same_file_see_alike<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let other = peer::<H>(&world, &os);
    let scratch = Scratch::new(&os, "words");
    let (name, file) = scratch.create(4096);
    let a = os.map(&file, 4096).unwrap();
    let theirs = other.shm_open(&name).unwrap();
    let b = other.map(&theirs, 4096).unwrap();
    assert_eq!((a.len(), b.len()), (4096, 4096));
    assert!(a.words(513).is_none(), "513 words are 4104 bytes");
    assert!(a.words(usize::MAX).is_none(), "no overflow");
    assert_eq!(a.words(0).map(<[_]>::len), Some(0));
    let wa = a.words(512).unwrap();
    let wb = b.words(512).unwrap();
    assert!(
        wb.iter().all(|w| w.load(Ordering::SeqCst) == 0),
        "zero-filled"
    );
    for (i, w) in wa.iter().enumerate().step_by(37) {
        w.store(0x5348_4d52_0000_0000 | i as u64, Ordering::Release);
    }
    for (i, w) in wb.iter().enumerate() {
        let want = if i % 37 == 0 {
            0x5348_4d52_0000_0000 | i as u64
        } else {
            0
        };
        assert_eq!(w.load(Ordering::Acquire), want, "word {i}");
    }
    // Atomic read-modify-write through one is seen by the other.
    assert_eq!(
        wb[511].compare_exchange(0, 7, Ordering::SeqCst, Ordering::SeqCst),
        Ok(0)
    );
    assert_eq!(wa[511].fetch_add(1, Ordering::SeqCst), 7);
    assert_eq!(wb[511].load(Ordering::SeqCst), 8);
    os.shm_unlink(&name).unwrap();
    assert!(scratch.listed().is_empty());
}

fn map_of_zero_bytes_or_beyond_the_file_is_refused<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let file = os.memfd_create("conf-map-len").unwrap();
    os.allocate(&file, 100).unwrap();
    assert!(matches!(os.map(&file, 0), Err(Error::InvalidArgument(_))));
    assert!(os.map(&file, 101).is_err(), "beyond the file's 100 bytes");
    assert_eq!(os.map(&file, 100).unwrap().len(), 100);
    assert_eq!(os.map(&file, 1).unwrap().len(), 1);
}

fn read_and_write_are_bounds_checked_and_round_trip<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let file = os.memfd_create("conf-rw").unwrap();
    os.allocate(&file, 100).unwrap();
    let map = os.map(&file, 100).unwrap();
    let data: Vec<u8> = (0..100u8).map(|b| b.wrapping_mul(31) ^ 0xa5).collect();
    assert!(map.write(0, &data));
    let mut all = [0u8; 100];
    assert!(map.read(0, &mut all));
    assert_eq!(all[..], data[..]);
    // Unaligned offsets and lengths, round trip and neighbours untouched.
    for (offset, len) in [(3, 37), (1, 1), (7, 9), (8, 16), (63, 37), (99, 1)] {
        let patch: Vec<u8> = (0..len).map(|i| 0xf0 ^ i as u8).collect();
        assert!(map.write(offset, &patch), "write {offset}+{len}");
        let mut back = vec![0u8; len];
        assert!(map.read(offset, &mut back), "read {offset}+{len}");
        assert_eq!(back, patch);
        let mut whole = [0u8; 100];
        assert!(map.read(0, &mut whole));
        assert_eq!(whole[..offset], data[..offset], "before {offset}+{len}");
        assert_eq!(
            whole[offset + len..],
            data[offset + len..],
            "after {offset}+{len}"
        );
        assert!(map.write(0, &data));
    }
    // Out of range: refused, and nothing written.
    assert!(!map.write(98, &[0xee; 3]));
    assert!(!map.write(101, &[]));
    assert!(!map.write(usize::MAX, &[1]));
    assert!(!map.read(98, &mut [0u8; 3]));
    assert!(!map.read(101, &mut []));
    assert!(!map.read(usize::MAX - 1, &mut [0u8; 4]));
    assert!(
        map.read(100, &mut []),
        "an empty range at the end is inside"
    );
    assert!(map.write(100, &[]));
    assert!(map.read(0, &mut all));
    assert_eq!(all[..], data[..], "refused writes wrote nothing");
}

fn a_mapping_stays_valid_after_unlink_and_after_the_file_is_closed<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let scratch = Scratch::new(&os, "survive");
    let (name, file) = scratch.create(8192);
    let map = os.map(&file, 8192).unwrap();
    assert!(map.write(5000, b"before"));
    drop(file);
    os.shm_unlink(&name).unwrap();
    assert!(scratch.listed().is_empty());
    let mut back = [0u8; 6];
    assert!(map.read(5000, &mut back));
    assert_eq!(&back, b"before");
    assert!(map.write(8186, b"after!"));
    assert!(map.read(8186, &mut back));
    assert_eq!(&back, b"after!");
    let words = map.words(1024).unwrap();
    words[1023].store(99, Ordering::SeqCst);
    assert_eq!(words[1023].load(Ordering::SeqCst), 99);
}

fn a_sealed_memfd_cannot_shrink_but_may_grow<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    // Unsealed, a memfd can shrink: the seal is what refuses it below.
    let loose = os.memfd_create("conf-loose").unwrap();
    os.allocate(&loose, 8192).unwrap();
    os.allocate(&loose, 4096).unwrap();
    assert_eq!(os.stat(&loose).unwrap().len, 4096);

    let file = os.memfd_create("conf-seal").unwrap();
    os.allocate(&file, 8192).unwrap();
    os.seal_size(&file).unwrap();
    let map = os.map(&file, 8192).unwrap();
    assert!(map.write(8000, b"tail"));
    assert!(
        os.allocate(&file, 4096).is_err(),
        "shrinking a sealed memfd"
    );
    assert_eq!(os.stat(&file).unwrap().len, 8192);
    let mut back = [0u8; 4];
    assert!(map.read(8000, &mut back), "the tail is still there");
    assert_eq!(&back, b"tail");
    // Growing a mapped object is outside the contract (the protocol sizes once, before
    // mapping): unmap first.
    drop(map);
    os.allocate(&file, 16_384).unwrap();
    assert_eq!(os.stat(&file).unwrap().len, 16_384, "growing is allowed");
    assert!(
        os.allocate(&file, 8192).is_err(),
        "still sealed after growing"
    );
}

fn dup_gives_a_second_handle_to_the_same_memory<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let file = os.memfd_create("conf-dup").unwrap();
    os.allocate(&file, 4096).unwrap();
    let first = os.map(&file, 4096).unwrap();
    assert!(first.write(10, b"through the original"));
    let copy = os.dup(&file).unwrap();
    drop(file);
    assert_eq!(os.stat(&copy).unwrap().len, 4096);
    let second = os.map(&copy, 4096).unwrap();
    let mut back = [0u8; 20];
    assert!(second.read(10, &mut back));
    assert_eq!(&back, b"through the original");
    assert!(second.write(100, b"through the dup"));
    let mut back = [0u8; 15];
    assert!(first.read(100, &mut back));
    assert_eq!(&back, b"through the dup");
}

// ---------------------------------------------------------------------------------
// Passing files
// ---------------------------------------------------------------------------------

fn send_and_recv_carry_bytes_and_files_that_map_to_the_same_memory<H: Harness>() {
    const LEN: usize = 4096;
    let world = H::world();
    let a = H::process(&world);
    let b = peer::<H>(&world, &a);
    let (sa, sb): (Stream<H>, Stream<H>) = H::stream_pair(&world, &a, &b);
    let files: Vec<File<H>> = (0..4)
        .map(|_| {
            let file = a.memfd_create("conf-pass").unwrap();
            a.allocate(&file, LEN as u64).unwrap();
            file
        })
        .collect();
    let maps: Vec<_> = files.iter().map(|f| a.map(f, LEN).unwrap()).collect();
    for (i, map) in maps.iter().enumerate() {
        assert!(map.write(100, &[i as u8 + 1; 16]));
    }
    let messages: [(&[u8], Vec<&File<H>>); 3] = [
        (
            b"first message, with three files",
            vec![&files[0], &files[1], &files[2]],
        ),
        (b"second, with one file", vec![&files[3]]),
        (b"third, with none", vec![]),
    ];
    for (bytes, attached) in &messages {
        a.send(&sa, bytes, attached).unwrap();
    }
    let starts: Vec<usize> = messages
        .iter()
        .scan(0, |at, (bytes, _)| {
            let start = *at;
            *at += bytes.len();
            Some(start)
        })
        .collect();
    let all: Vec<u8> = messages
        .iter()
        .flat_map(|(bytes, _)| bytes.to_vec())
        .collect();

    let mut got = Vec::new();
    let mut received: Vec<File<H>> = Vec::new();
    let mut buf = [0u8; 7];
    let mut calls = 0;
    while got.len() < all.len() {
        let n = b.recv(&sb, &mut buf, &mut received).unwrap();
        assert!((1..=buf.len()).contains(&n), "recv returned {n}");
        got.extend_from_slice(&buf[..n]);
        calls += 1;
        // Files travel with the first byte of their message: once it has arrived they
        // all have, and none arrives before it.
        let due: usize = messages
            .iter()
            .zip(&starts)
            .filter(|(_, start)| **start < got.len())
            .map(|((_, attached), _)| attached.len())
            .sum();
        assert_eq!(received.len(), due, "after {} bytes", got.len());
    }
    assert_eq!(got, all);
    assert!(calls >= all.len() / buf.len(), "partial reads");
    assert_eq!(received.len(), 4);
    for (i, file) in received.iter().enumerate() {
        let theirs = b.map(file, LEN).unwrap();
        let mut back = [0u8; 16];
        assert!(theirs.read(100, &mut back));
        assert_eq!(back, [i as u8 + 1; 16], "file {i} is the i-th file sent");
        assert!(theirs.write(200, &[0xa0 + i as u8; 8]));
        let mut seen = [0u8; 8];
        assert!(maps[i].read(200, &mut seen));
        assert_eq!(seen, [0xa0 + i as u8; 8], "file {i}: same memory");
    }
    drop(sa);
    assert_eq!(b.recv(&sb, &mut buf, &mut received).unwrap(), 0, "end");
    assert_eq!(received.len(), 4);
}

fn a_closed_peer_is_disconnected_for_send_and_end_of_stream_for_recv<H: Harness>() {
    let world = H::world();
    let a = H::process(&world);
    let b = peer::<H>(&world, &a);
    let (sa, sb) = H::stream_pair(&world, &a, &b);
    drop(sb);
    assert!(matches!(
        a.send(&sa, b"anyone there?", &[]),
        Err(Error::Disconnected)
    ));

    let (sa, sb) = H::stream_pair(&world, &a, &b);
    a.send(&sa, b"last words", &[]).unwrap();
    drop(sa);
    let mut buf = [0u8; 64];
    let mut files = Vec::new();
    assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 10);
    assert_eq!(&buf[..10], b"last words");
    assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 0);
    assert!(files.is_empty());
}

fn send_refuses_too_many_files_and_files_without_bytes<H: Harness>() {
    let world = H::world();
    let a = H::process(&world);
    let b = peer::<H>(&world, &a);
    let (sa, sb) = H::stream_pair(&world, &a, &b);
    let file = a.memfd_create("conf-many").unwrap();
    let dups: Vec<File<H>> = (0..=MAX_FDS_PER_SEND)
        .map(|_| a.dup(&file).unwrap())
        .collect();
    let too_many: Vec<&File<H>> = dups.iter().collect();
    assert!(matches!(
        a.send(&sa, b"x", &too_many),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.send(&sa, b"", &[&file]),
        Err(Error::InvalidArgument(_))
    ));
    // Nothing went out; the most a send may carry does.
    a.send(&sa, b"y", &too_many[..MAX_FDS_PER_SEND]).unwrap();
    let mut buf = [0u8; 8];
    let mut files = Vec::new();
    assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 1);
    assert_eq!(buf[0], b'y');
    assert_eq!(files.len(), MAX_FDS_PER_SEND);
}

// ---------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------

fn current_is_alive_and_stable<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let me = os.current();
    assert_eq!(os.current(), me);
    assert_eq!(os.clone().current(), me, "a clone is the same process");
    assert!(os.is_alive(me));
    let from_thread = {
        let os = os.clone();
        std::thread::spawn(move || os.current()).join().unwrap()
    };
    assert_eq!(from_thread, me, "threads share their process's token");
    assert!(std::ptr::eq(os.local(), os.clone().local()));
    if let Some(other) = H::other_process(&world, &os) {
        let them = other.current();
        assert_ne!(them, me);
        assert!(os.is_alive(them) && other.is_alive(me));
        assert!(!std::ptr::eq(os.local(), other.local()));
        assert_eq!(other.uid(), os.uid());
        assert_eq!(other.pid_namespace(), os.pid_namespace());
    }
}

fn a_token_with_another_start_time_is_dead<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let me = os.current();
    let later = Token::new(me.pid(), me.start_ticks() + 1).unwrap();
    assert!(!os.is_alive(later));
    if me.start_ticks() > 0 {
        let earlier = Token::new(me.pid(), me.start_ticks() - 1).unwrap();
        assert!(!os.is_alive(earlier));
    }
    assert!(os.is_alive(me));
}

fn a_token_of_an_exited_and_reaped_process_is_dead<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let gone = H::exited_process(&world);
    assert_ne!(gone, os.current());
    assert!(!os.is_alive(gone));
}

fn random_u128_differs_between_calls<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    let values: HashSet<u128> = (0..16).map(|_| os.random_u128().unwrap()).collect();
    assert_eq!(values.len(), 16);
    assert!(!values.contains(&0));
}

fn crash_point_does_not_fail_a_live_process<H: Harness>() {
    let world = H::world();
    let os = H::process(&world);
    for _ in 0..3 {
        os.crash_point().unwrap();
    }
    assert!(
        os.now_unix_nanos() > 1_600_000_000_000_000_000,
        "after 2020"
    );
}

/// Instantiates every behaviour above as a `#[test]` of `mod $backend`.
macro_rules! conformance {
    ($backend:ident, $harness:ty) => {
        conformance!(@tests $backend, $harness;
            exclusive_create_refuses_an_existing_name,
            link_gives_a_second_name_exclusively,
            open_and_unlink_of_a_missing_name_are_gone,
            list_finds_exactly_the_names_with_the_prefix,
            allocate_sets_the_length_and_stat_reports_len_uid_and_mode_0600,
            map_gives_words_that_two_mappings_of_the_same_file_see_alike,
            map_of_zero_bytes_or_beyond_the_file_is_refused,
            read_and_write_are_bounds_checked_and_round_trip,
            a_mapping_stays_valid_after_unlink_and_after_the_file_is_closed,
            a_sealed_memfd_cannot_shrink_but_may_grow,
            dup_gives_a_second_handle_to_the_same_memory,
            send_and_recv_carry_bytes_and_files_that_map_to_the_same_memory,
            a_closed_peer_is_disconnected_for_send_and_end_of_stream_for_recv,
            send_refuses_too_many_files_and_files_without_bytes,
            current_is_alive_and_stable,
            a_token_with_another_start_time_is_dead,
            a_token_of_an_exited_and_reaped_process_is_dead,
            random_u128_differs_between_calls,
            crash_point_does_not_fail_a_live_process,
        );
    };
    (@tests $backend:ident, $harness:ty; $($behaviour:ident),* $(,)?) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $behaviour() {
                    super::$behaviour::<$harness>()
                }
            )*
        }
    };
}

// ---------------------------------------------------------------------------------
// The real kernel
// ---------------------------------------------------------------------------------

/// The real kernel: one world (this machine), one process (this test process).
struct PosixHarness;

impl Harness for PosixHarness {
    type O = shmrc::checkers::os::posix::PosixOs;
    type World = ();

    fn world() {}

    fn process(_: &()) -> Self::O {
        shmrc::checkers::os::posix::PosixOs::new()
    }

    fn other_process(_: &(), _: &Self::O) -> Option<Self::O> {
        None
    }

    fn stream_pair(
        _: &(),
        _: &Self::O,
        _: &Self::O,
    ) -> (
        std::os::unix::net::UnixStream,
        std::os::unix::net::UnixStream,
    ) {
        std::os::unix::net::UnixStream::pair().expect("socketpair")
    }

    fn exited_process(_: &()) -> Token {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        // Until it is reaped, /proc keeps the child (running or zombie).
        let token = posix_only::token_of(child.id()).expect("the child's /proc entry");
        assert!(child.wait().expect("wait").success());
        token
    }
}

conformance!(posix, PosixHarness);

// ---------------------------------------------------------------------------------
// The simulated kernel
// ---------------------------------------------------------------------------------

/// The simulated kernel: a fresh kernel per test, processes spawned in it.
struct SimHarness;

impl Harness for SimHarness {
    type O = shmrc::checkers::os::sim::SimOs;
    type World = shmrc::checkers::os::sim::SimKernel;

    fn world() -> Self::World {
        shmrc::checkers::os::sim::SimKernel::new(0x5eed)
    }

    fn process(world: &Self::World) -> Self::O {
        world.spawn(1000)
    }

    fn other_process(world: &Self::World, of: &Self::O) -> Option<Self::O> {
        Some(world.spawn(of.uid()))
    }

    fn stream_pair(
        world: &Self::World,
        a: &Self::O,
        b: &Self::O,
    ) -> (
        shmrc::checkers::os::sim::SimStream,
        shmrc::checkers::os::sim::SimStream,
    ) {
        world.stream_pair(a, b)
    }

    fn exited_process(world: &Self::World) -> Token {
        let gone = world.spawn(1000);
        world.kill(gone.pid());
        gone.token()
    }
}

conformance!(sim, SimHarness);

mod posix_only {
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::process::Command;
    use std::time::{Duration, Instant};

    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    use shmrc::Error;
    use shmrc::checkers::os::Os;
    use shmrc::checkers::os::posix::{PosixOs, raise_fd_limit};
    use shmrc::checkers::token::{Token, TokenExt};

    use super::Scratch;

    /// `(state, token)` of `pid` from its `/proc/<pid>/stat`.
    fn proc_state(pid: u32) -> Option<(u8, Token)> {
        let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
        let close = stat.iter().rposition(|&b| b == b')')?;
        let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = *fields.first()?.as_bytes().first()?;
        let start = fields.get(19)?.parse().ok()?;
        Some((state, Token::new(pid, start)?))
    }

    /// The token of the running or unreaped process `pid`.
    pub(super) fn token_of(pid: u32) -> Option<Token> {
        proc_state(pid).map(|(_, token)| token)
    }

    #[test]
    fn a_running_child_is_alive_and_a_zombie_or_reaped_child_is_dead() {
        let os = PosixOs::new();
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let token = token_of(child.id()).unwrap();
        assert!(os.is_alive(token));
        child.kill().unwrap();
        // Not reaped yet: wait for the zombie.
        let deadline = Instant::now() + Duration::from_secs(10);
        while proc_state(child.id()).is_some_and(|(state, _)| state != b'Z') {
            assert!(Instant::now() < deadline, "the child never became a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(proc_state(child.id()).map(|(s, _)| s), Some(b'Z'));
        assert!(!os.is_alive(token), "a zombie takes no further step");
        child.wait().unwrap();
        assert!(!os.is_alive(token));
    }

    /// How many zombies [`a_zombie_reaped_while_its_liveness_is_asked_never_counts_as_alive`]
    /// reaps.
    const REAPED_ZOMBIES: u64 = 100;

    /// Issue 13: a parent reaps its dead child at any moment (a DataLoader joins its
    /// workers, `subprocess.run` waits for its job), also while the manager is asking
    /// whether that child lives. Asked between the read of the zombie's `stat` and the
    /// listing of its threads, the answer was "alive" (the listing failed, and a failed
    /// listing counted as running threads), and the manager kept a segment only the
    /// dead held. Here a thread asks over and over while this one reaps the zombie, at
    /// a moment that differs each time: no answer may be "alive".
    #[test]
    fn a_zombie_reaped_while_its_liveness_is_asked_never_counts_as_alive() {
        use shmrc::checkers::sync::process::{AtomicBool, Ordering};
        let os = PosixOs::new();
        let mut wrong = Vec::new();
        for round in 0..REAPED_ZOMBIES {
            let mut child = Command::new("true").spawn().expect("spawn true");
            let pid = child.id();
            let deadline = Instant::now() + Duration::from_secs(10);
            let token = loop {
                match proc_state(pid) {
                    Some((b'Z', token)) => break token,
                    _ if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        panic!("`true` (pid {pid}) never became a zombie");
                    }
                    _ => std::thread::sleep(Duration::from_millis(1)),
                }
            };
            let (asking, reaped) = (AtomicBool::new(false), AtomicBool::new(false));
            let answers = std::thread::scope(|s| {
                let asker = s.spawn(|| {
                    let (mut asked, mut alive) = (0u32, 0u32);
                    // Until the reap, and a few times after it.
                    let mut after = 0;
                    while after < 50 {
                        if reaped.load(Ordering::SeqCst) {
                            after += 1;
                        }
                        asked += 1;
                        alive += u32::from(os.is_alive(token));
                        asking.store(true, Ordering::SeqCst);
                    }
                    (asked, alive)
                });
                while !asking.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                // Reap after 0 to about 200 µs of asking.
                let pause = Instant::now() + Duration::from_micros(round * 2);
                while Instant::now() < pause {
                    std::hint::spin_loop();
                }
                child.wait().expect("reap true");
                reaped.store(true, Ordering::SeqCst);
                asker.join().expect("the asking thread")
            });
            if answers.1 > 0 {
                wrong.push((pid, answers));
            }
        }
        assert!(
            wrong.is_empty(),
            "zombies or reaped processes counted as alive ((pid, (asked, alive)) each): {wrong:?}"
        );
    }

    /// Runs the calling test again in a child process of its own (for tests that change
    /// process-wide state, or fork), returning `true` in that child. In the parent it
    /// waits for the child, asserts that it passed, and returns `false`.
    fn in_own_process(test: &str) -> bool {
        if std::env::var(CHILD).is_ok_and(|name| name == test) {
            return true;
        }
        let output = shmrc_testkit::process::output_within(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    &format!("posix_only::{test}"),
                    "--test-threads=1",
                ])
                .env(CHILD, test),
            Duration::from_secs(60),
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the child run of {test} failed: {}\n{stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        false
    }

    const CHILD: &str = "SHMRC_CONF_POSIX_CHILD";

    #[test]
    fn current_matches_proc_and_a_forked_child_gets_its_own_token() {
        if !in_own_process("current_matches_proc_and_a_forked_child_gets_its_own_token") {
            return;
        }
        let os = PosixOs::new();
        let me = os.current();
        assert_eq!(me.pid(), std::process::id());
        assert_eq!(token_of(std::process::id()), Some(me));
        // SAFETY: this process runs only this test; the child calls nothing but
        // `current`/`is_alive` (getpid, reading /proc).
        let status = unsafe {
            shmrc_testkit::process::fork_and_wait(std::time::Duration::from_secs(30), || {
                let mine = os.current();
                let ok = mine.pid() == std::process::id()
                    && mine != me
                    && os.current() == mine
                    && os.is_alive(mine)
                    && os.is_alive(me);
                i32::from(!ok)
            })
        };
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
            "{status:?}"
        );
        assert_eq!(os.current(), me, "the parent keeps its token");
    }

    #[test]
    fn every_descriptor_shmrc_makes_is_close_on_exec() {
        let os = PosixOs::new();
        let scratch = Scratch::new(&os, "cloexec");
        let (name, named) = scratch.create(0);
        let opened = os.shm_open(&name).unwrap();
        let memfd = os.memfd_create("conf-cloexec").unwrap();
        let dup = os.dup(&memfd).unwrap();
        let (sa, sb) = UnixStream::pair().unwrap();
        os.send(&sa, b"f", &[&memfd]).unwrap();
        let mut received = Vec::new();
        assert_eq!(os.recv(&sb, &mut [0u8; 4], &mut received).unwrap(), 1);
        for file in [&named, &opened, &memfd, &dup, &received[0]] {
            let flags = FdFlag::from_bits_truncate(fcntl(file, FcntlArg::F_GETFD).unwrap());
            assert!(
                flags.contains(FdFlag::FD_CLOEXEC),
                "fd {}",
                file.as_raw_fd()
            );
        }
        os.shm_unlink(&name).unwrap();
    }

    #[test]
    fn a_full_dev_shm_is_no_space_at_allocation() {
        let os = PosixOs::new();
        // Only on a size-limited tmpfs, which refuses an oversized fallocate at once; a
        // disk file system or an unlimited tmpfs would try to reserve it all first.
        let on_tmpfs = nix::sys::statfs::statfs("/dev/shm")
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        let Ok(fs) = nix::sys::statvfs::statvfs("/dev/shm") else {
            return;
        };
        let capacity = fs.blocks().saturating_mul(fs.fragment_size());
        if !on_tmpfs || capacity == 0 {
            eprintln!("skipped: /dev/shm is not a size-limited tmpfs");
            return;
        }
        let scratch = Scratch::new(&os, "nospace");
        let (name, file) = scratch.create(0);
        let len = capacity.saturating_mul(4).max(1 << 40);
        match os.allocate(&file, len) {
            Err(Error::NoSpace { len: asked, .. }) => assert_eq!(asked, len),
            other => panic!("allocating {len} bytes in /dev/shm: {other:?}"),
        }
        os.shm_unlink(&name).unwrap();
        assert!(scratch.listed().is_empty());
    }

    #[test]
    fn the_fd_limit_is_raised_to_the_hard_limit() {
        let soft = raise_fd_limit().unwrap();
        let (now, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, now);
        assert!(soft == hard || hard == nix::libc::RLIM_INFINITY);
    }

    /// The descriptors open in this process.
    fn open_fds() -> Vec<i32> {
        let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        // The listing included read_dir's own descriptor, closed again by now.
        listed
            .into_iter()
            // SAFETY: F_GETFD only reads the flags of a descriptor number, open or not.
            .filter(|&fd| unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) } != -1)
            .collect()
    }

    /// A process whose main thread exited (`pthread_exit`) while another thread runs
    /// shows as a zombie in `/proc/<pid>/stat`, yet it runs: it must count as alive.
    #[test]
    fn a_zombie_leader_with_running_threads_is_alive() {
        let script = "import threading, time, ctypes\n\
                      threading.Thread(target=time.sleep, args=(30,)).start()\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let Ok(mut child) = Command::new("python3").args(["-c", script]).spawn() else {
            eprintln!("skipped: needs python3 to make a process whose main thread exits");
            return;
        };
        let os = PosixOs::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let token = loop {
            match proc_state(child.id()) {
                Some((b'Z', token)) => break token,
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                other => panic!("the main thread never exited: {other:?}"),
            }
        };
        assert!(os.is_alive(token), "its other thread still runs");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!os.is_alive(token));
    }

    /// PyTorch's "received 0 items of ancdata": the receiver is at its fd limit, the
    /// kernel drops the descriptors it cannot install. That must be `TooManyFds`, and
    /// the ones it did install must be closed again (on error nothing is handed out,
    /// as on the sim), not leaked. Runs in a child process, since it lowers the
    /// process-wide fd limit.
    #[test]
    fn recv_past_the_fd_limit_is_too_many_fds_and_leaks_nothing() {
        if !in_own_process("recv_past_the_fd_limit_is_too_many_fds_and_leaks_nothing") {
            return;
        }
        let os = PosixOs::new();
        let (sa, sb) = UnixStream::pair().unwrap();
        let memfd = os.memfd_create("conf-limit").unwrap();
        let eight: Vec<_> = (0..8).map(|_| os.dup(&memfd).unwrap()).collect();
        let refs: Vec<_> = eight.iter().collect();
        os.send(&sa, b"eight files", &refs).unwrap();
        drop(refs);
        drop(eight);
        // The lowest limit that leaves exactly three free descriptor numbers.
        let open = open_fds();
        let mut free = 0;
        let mut limit = 0;
        while free < 3 {
            if !open.contains(&(limit as i32)) {
                free += 1;
            }
            limit += 1;
        }
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, limit, hard).unwrap();
        let mut files = Vec::new();
        let result = os.recv(&sb, &mut [0u8; 32], &mut files);
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
        match result {
            Err(Error::TooManyFds {
                call, limit: said, ..
            }) => {
                assert_eq!(call, "recvmsg");
                assert_eq!(said, limit);
            }
            other => panic!("recv past the fd limit: {other:?}"),
        }
        assert!(files.is_empty(), "nothing is handed out on error");
        assert_eq!(
            open_fds(),
            open,
            "the three the kernel installed were closed again"
        );
    }
}
