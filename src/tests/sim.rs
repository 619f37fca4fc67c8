//! The simulated kernel's unit tests: its processes, objects, mappings, sizing,
//! streams and test controls, then the holder protocol running on it, also under loom
//! and shuttle.

/// Ordinary tests: they create atomics outside any model, so they run without the
/// model-checker features only.
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod plain {
    use std::{fmt, io};

    use crate::error::{Error, Result};
    use crate::namespace::Namespace;
    use crate::os::sim::{FIRST_PID, MACHINE_BYTES, NAME_MAX, SimFile, SimKernel, SimOs};
    use crate::os::{FileInfo, MAX_FDS_PER_SEND, Mapping, Os};
    use crate::protocol::holders::{self, ClaimError, Outcome};
    use crate::protocol::segment::{self, Backing, Header};
    use crate::strategy::Strategy;
    use crate::sync::Ordering;
    use crate::token::Token;

    const UID: u32 = 1000;

    fn kind(e: &Error) -> Option<io::ErrorKind> {
        match e {
            Error::Os { source, .. } => Some(source.kind()),
            _ => None,
        }
    }

    fn ns() -> Namespace {
        Namespace::new("shmrc-simtest").unwrap()
    }

    /// A named object of `len` bytes created by `os`, its file closed.
    fn named(os: &SimOs, name: &str, len: u64) {
        let file = os.shm_create(name).unwrap();
        os.allocate(&file, len).unwrap();
    }

    #[test]
    fn processes_get_fresh_pids_distinct_tokens_and_their_own_local_state() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let b = k.spawn_in_namespace(UID + 1, 7);
        assert_eq!((a.pid(), b.pid()), (FIRST_PID, FIRST_PID + 1));
        assert_ne!(a.token(), b.token());
        assert_eq!(a.current(), a.token());
        assert_eq!((a.uid(), b.uid()), (UID, UID + 1));
        assert_eq!((a.pid_namespace(), b.pid_namespace()), (1, 7));
        assert!(std::ptr::eq(a.local(), a.clone().local()));
        assert!(!std::ptr::eq(a.local(), b.local()));
        assert!(a.is_alive(a.token()));
        assert!(
            !a.is_alive(b.token()),
            "another pid namespace is not visible"
        );
        let forged = Token::new(a.pid(), a.token().start_ticks() + 1).unwrap();
        assert!(
            !b.kernel().spawn(UID).is_alive(forged),
            "same pid, other start"
        );
        let t1 = a.now_unix_nanos();
        assert!(a.now_unix_nanos() > t1, "the logical clock advances");
    }

    #[test]
    fn the_random_generator_is_deterministic_per_seed() {
        let draw = |seed| {
            let os = SimKernel::new(seed).spawn(UID);
            [os.random_u128().unwrap(), os.random_u128().unwrap()]
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
        assert_ne!(draw(5)[0], draw(5)[1]);
    }

    #[test]
    fn created_objects_are_exclusive_and_missing_ones_are_gone() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let b = k.spawn(UID);
        let _f = a.shm_create("shmrc-x").unwrap();
        let err = b.shm_create("shmrc-x").unwrap_err();
        assert!(
            matches!(
                err,
                Error::Os {
                    call: "shm_open",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(kind(&err), Some(io::ErrorKind::AlreadyExists));
        assert!(b.shm_open("shmrc-missing").unwrap_err().is_gone());
        assert!(b.shm_unlink("shmrc-missing").unwrap_err().is_gone());
        // The names the posix backend refuses before asking the kernel.
        for bad in ["a/b", "/a", "", ".", "..", "a\0b"] {
            for err in [
                b.shm_create(bad).unwrap_err(),
                b.shm_open(bad).unwrap_err(),
                b.shm_unlink(bad).unwrap_err(),
            ] {
                assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err:?}");
            }
        }
        // What the kernel refuses: a component longer than NAME_MAX.
        let long = "x".repeat(NAME_MAX + 1);
        let err = b.shm_create(&long).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Os {
                    call: "shm_open",
                    ..
                }
            ),
            "{err:?}"
        );
        let err = b.shm_unlink(&long).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Os {
                    call: "shm_unlink",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(b.shm_create(&"x".repeat(NAME_MAX)).is_ok());
        assert_eq!(k.names().len(), 2);
        assert!(format!("{k:?}").contains("names: 2"), "{k:?}");
    }

    #[test]
    fn objects_are_private_to_their_owner() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let file = a.shm_create("shmrc-x").unwrap();
        let info = a.stat(&file).unwrap();
        assert_eq!(
            info,
            FileInfo {
                len: 0,
                uid: UID,
                mode: 0o600,
                kind: crate::os::FileKind::Regular,
                identity: info.identity,
            }
        );
        let second = a.shm_create("shmrc-y").unwrap();
        assert_ne!(
            a.stat(&second).unwrap().identity,
            info.identity,
            "another file"
        );
        let other = k.spawn(UID + 1);
        assert!(matches!(
            other.shm_open("shmrc-x"),
            Err(Error::OtherUser { owner: UID, me, .. }) if me == UID + 1
        ));
        assert!(k.set_owner("shmrc-x", UID + 1));
        assert!(other.shm_open("shmrc-x").is_ok());
        assert!(matches!(
            a.shm_open("shmrc-x"),
            Err(Error::OtherUser { .. })
        ));
    }

    #[test]
    fn list_returns_matching_names_sorted() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        for name in ["shmrc.b", "other", "shmrc.a", "shmrc-z", "shmrc.c"] {
            drop(a.shm_create(name).unwrap());
        }
        assert_eq!(
            a.shm_list("shmrc.").unwrap(),
            ["shmrc.a", "shmrc.b", "shmrc.c"]
        );
        assert_eq!(
            k.names(),
            ["other", "shmrc-z", "shmrc.a", "shmrc.b", "shmrc.c"]
        );
        assert_eq!(a.shm_list("").unwrap().len(), 5);
    }

    #[test]
    fn two_mappings_see_the_same_words_and_bytes() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let b = k.spawn(UID);
        named(&a, "shmrc-x", 20);
        let fa = a.shm_open("shmrc-x").unwrap();
        let fb = b.shm_open("shmrc-x").unwrap();
        let ma = a.map(&fa, 20).unwrap();
        let mb = b.map(&fb, 16).unwrap();
        assert_eq!((ma.len(), mb.len()), (20, 16));
        assert!(ma.words(3).is_none(), "24 bytes exceed a 20-byte mapping");
        assert_eq!(ma.words(2).unwrap().len(), 2);
        ma.words(2).unwrap()[1].store(42, Ordering::SeqCst);
        assert_eq!(mb.words(2).unwrap()[1].load(Ordering::SeqCst), 42);
        // Bytes across word boundaries, and a partial last word.
        assert!(ma.write(5, b"hello, world!!!"));
        let mut out = [0; 11];
        assert!(mb.read(5, &mut out));
        assert_eq!(&out, b"hello, worl");
        let mut tail = [0; 4];
        assert!(ma.read(16, &mut tail));
        assert_eq!(&tail, b"d!!!");
        assert_eq!(k.peek("shmrc-x", 5, 5).unwrap(), b"hello");
        assert!(k.poke("shmrc-x", 0, &7u64.to_ne_bytes()));
        assert_eq!(mb.words(1).unwrap()[0].load(Ordering::SeqCst), 7);
        // Out of range: nothing copied.
        assert!(!mb.write(10, b"1234567"));
        assert!(!mb.read(usize::MAX, &mut [0]));
        assert!(mb.write(16, b""));
        assert!(!k.poke("shmrc-x", 18, b"abc"));
        assert!(matches!(a.map(&fa, 21), Err(Error::InvalidArgument(_))));
        assert!(matches!(a.map(&fa, 0), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn unlink_keeps_mappings_valid_and_frees_memory_after_the_last_mapping_and_file() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let file = a.shm_create("shmrc-x").unwrap();
        a.allocate(&file, 64).unwrap();
        let map = a.map(&file, 64).unwrap();
        let other = a.dup(&file).unwrap();
        drop(file);
        a.shm_unlink("shmrc-x").unwrap();
        assert!(k.names().is_empty());
        assert!(a.shm_open("shmrc-x").unwrap_err().is_gone());
        assert!(a.shm_unlink("shmrc-x").unwrap_err().is_gone());
        assert_eq!(k.objects_alive(), 1);
        assert!(map.write(60, b"live"));
        let mut out = [0; 4];
        assert!(map.read(60, &mut out));
        assert_eq!(&out, b"live");
        drop(map);
        assert_eq!(k.objects_alive(), 1, "a file still references it");
        assert_eq!(a.stat(&other).unwrap().len, 64);
        drop(other);
        assert_eq!(k.objects_alive(), 0);
        assert_eq!(k.bytes_allocated(), 0);
        assert_eq!(k.open_files(a.pid()), 0);
    }

    #[test]
    fn memfds_are_anonymous_and_freed_with_their_last_file() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let f = a.memfd_create("shmrc").unwrap();
        a.allocate(&f, 100).unwrap();
        assert!(k.names().is_empty());
        assert_eq!(a.stat(&f).unwrap().len, 100);
        assert_eq!(k.objects_alive(), 1);
        drop(f);
        assert_eq!(k.objects_alive(), 0);
    }

    #[test]
    fn allocate_keeps_contents_and_a_seal_forbids_shrinking() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let f = a.memfd_create("shmrc").unwrap();
        a.allocate(&f, 12).unwrap();
        let m = a.map(&f, 12).unwrap();
        assert!(m.write(0, b"0123456789ab"));
        drop(m);
        a.allocate(&f, 8).unwrap();
        a.allocate(&f, 24).unwrap();
        let m = a.map(&f, 24).unwrap();
        let mut out = [0xff; 24];
        assert!(m.read(0, &mut out));
        assert_eq!(&out[..8], b"01234567");
        assert!(
            out[8..].iter().all(|&b| b == 0),
            "shrunk bytes come back as 0"
        );
        a.seal_size(&f).unwrap();
        let err = a.allocate(&f, 16).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Os {
                    call: "ftruncate",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(kind(&err), Some(io::ErrorKind::PermissionDenied));
        assert!(!k.set_file_len(&f, 16));
        assert!(k.set_file_len(&f, 24));
        assert_eq!(a.stat(&f).unwrap().len, 24);
        assert!(
            a.seal_size(&a.shm_create("shmrc-x").unwrap()).is_err(),
            "only memfds can be sealed"
        );
    }

    #[test]
    fn a_hostile_truncate_zeroes_what_it_cuts_off_and_is_seen_by_new_mappings() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        named(&a, "shmrc-x", 64);
        let f = a.shm_open("shmrc-x").unwrap();
        let m = a.map(&f, 64).unwrap();
        assert!(m.write(0, b"0123456789abcdef"));
        assert!(m.write(56, b"the tail"));
        assert!(k.set_len("shmrc-x", 10));
        assert_eq!(a.stat(&f).unwrap().len, 10);
        // Linux frees the pages cut off (touching them through `m` would be
        // SIGBUS); the sim keeps `m` mapped but its bytes from 10 on are zero.
        let mut out = [0xff; 64];
        assert!(m.read(0, &mut out));
        assert_eq!(&out[..10], b"0123456789");
        assert!(out[10..].iter().all(|&b| b == 0), "{out:?}");
        // A write there (SIGBUS on Linux) lands, but does not survive a growth.
        assert!(m.write(56, b"too late"));
        assert!(a.map(&f, 64).is_err());
        assert_eq!(a.map(&f, 10).unwrap().len(), 10);
        assert!(k.set_len("shmrc-x", 64), "growing back within its memory");
        assert_eq!(k.peek("shmrc-x", 56, 8).unwrap(), [0; 8], "grown back as 0");
        assert_eq!(k.peek("shmrc-x", 0, 16).unwrap(), b"0123456789\0\0\0\0\0\0");
        assert!(
            !k.set_len("shmrc-x", 128),
            "cannot grow memory under a mapping"
        );
        drop(m);
        assert!(k.set_len("shmrc-x", 128));
        assert_eq!(k.peek("shmrc-x", 0, 10).unwrap(), b"0123456789");
        assert_eq!(k.peek("shmrc-x", 10, 118).unwrap(), [0; 118]);
        // Unmapped, a shrink and a growth make new memory: the same zeros.
        assert!(k.poke("shmrc-x", 100, b"gone"));
        assert!(k.set_len("shmrc-x", 3));
        assert!(k.set_len("shmrc-x", 104));
        assert_eq!(k.peek("shmrc-x", 0, 104).unwrap()[3..], [0; 101]);
        assert!(!k.set_len("shmrc-missing", 1));
    }

    #[test]
    fn allocate_smaller_while_mapped_zeroes_the_bytes_cut_off() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let f = a.memfd_create("shmrc").unwrap();
        a.allocate(&f, 40).unwrap();
        let m = a.map(&f, 40).unwrap();
        let words = m.words(5).unwrap();
        for (i, w) in words.iter().enumerate() {
            w.store(u64::MAX - i as u64, Ordering::SeqCst);
        }
        a.allocate(&f, 13).unwrap();
        assert_eq!(k.bytes_allocated(), 13);
        assert_eq!(words[0].load(Ordering::SeqCst), u64::MAX);
        let mut second = (u64::MAX - 1).to_ne_bytes();
        second[5..].fill(0);
        assert_eq!(
            words[1].load(Ordering::SeqCst),
            u64::from_ne_bytes(second),
            "bytes 13.. of the word that holds the new end are zeroed"
        );
        assert!(words[2..].iter().all(|w| w.load(Ordering::SeqCst) == 0));
        // Grown back in place (the memory is still there): zeros, not the old words.
        a.allocate(&f, 40).unwrap();
        assert!(words[2..].iter().all(|w| w.load(Ordering::SeqCst) == 0));
        assert_eq!(k.bytes_allocated(), 40);
    }

    #[test]
    fn a_killed_process_is_dead_and_its_calls_return_killed() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let b = k.spawn(UID);
        let f = a.shm_create("shmrc-x").unwrap();
        a.allocate(&f, 8).unwrap();
        let m = a.map(&f, 8).unwrap();
        let (sa, _sb) = k.stream_pair(&a, &b);
        assert!(b.is_alive(a.token()));
        k.kill(a.pid());
        assert!(k.is_killed(a.pid()));
        assert!(!b.is_alive(a.token()));
        assert!(!a.is_alive(a.token()));
        assert!(matches!(a.crash_point(), Err(Error::Killed)));
        assert!(matches!(a.shm_create("shmrc-y"), Err(Error::Killed)));
        assert!(matches!(a.shm_open("shmrc-x"), Err(Error::Killed)));
        assert!(matches!(a.shm_unlink("shmrc-x"), Err(Error::Killed)));
        assert!(matches!(a.shm_list(""), Err(Error::Killed)));
        assert!(matches!(a.memfd_create("x"), Err(Error::Killed)));
        assert!(matches!(a.dup(&f), Err(Error::Killed)));
        assert!(matches!(a.allocate(&f, 16), Err(Error::Killed)));
        assert!(matches!(a.stat(&f), Err(Error::Killed)));
        assert!(matches!(a.map(&f, 8), Err(Error::Killed)));
        assert!(matches!(a.random_u128(), Err(Error::Killed)));
        assert!(matches!(a.send(&sa, b"x", &[]), Err(Error::Killed)));
        assert!(matches!(
            a.recv(&sa, &mut [0; 4], &mut Vec::new()),
            Err(Error::Killed)
        ));
        // Its files and mappings stay until the kernel reaps it.
        assert_eq!(k.names(), ["shmrc-x"]);
        assert_eq!(k.open_files(a.pid()), 1);
        assert!(m.write(0, b"x"));
        drop((f, m));
        assert_eq!(k.open_files(a.pid()), 0);
    }

    #[test]
    fn kill_at_step_kills_at_exactly_the_nth_crash_point() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        a.crash_point().unwrap();
        assert_eq!(k.steps(a.pid()), 1);
        k.kill_at_step(a.pid(), 2);
        a.crash_point().unwrap();
        a.crash_point().unwrap();
        assert!(a.is_alive(a.token()));
        assert!(matches!(a.crash_point(), Err(Error::Killed)));
        assert!(!a.is_alive(a.token()));
        assert_eq!(k.steps(a.pid()), 3, "the fatal point is not passed");
        assert!(matches!(a.crash_point(), Err(Error::Killed)));
        let b = k.spawn(UID);
        k.kill_at_step(b.pid(), 0);
        assert!(matches!(b.crash_point(), Err(Error::Killed)));
        assert_eq!(k.steps(b.pid()), 0);
    }

    /// `Error::Os { call, EBADF }`.
    fn ebadf(result: Result<impl fmt::Debug>, want: &str) {
        let err = result.unwrap_err();
        assert!(
            matches!(&err, Error::Os { call, source }
                if *call == want && source.raw_os_error() == Some(libc::EBADF)),
            "{want}: {err:?}"
        );
    }

    #[test]
    fn files_and_stream_ends_of_another_process_are_ebadf() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let b = k.spawn(UID);
        let (sa, sb) = k.stream_pair(&a, &b);
        let named_file = a.shm_create("shmrc-x").unwrap();
        let f = a.memfd_create("a's").unwrap();
        a.allocate(&f, 64).unwrap();
        let m = a.map(&f, 64).unwrap();
        assert!(m.write(0, b"a's bytes"));

        ebadf(b.seal_size(&f), "fcntl(F_ADD_SEALS)");
        ebadf(b.dup(&f), "fcntl(F_DUPFD_CLOEXEC)");
        ebadf(b.allocate(&f, 8), "ftruncate");
        ebadf(b.allocate(&named_file, 64), "ftruncate");
        ebadf(b.stat(&f), "fstat");
        ebadf(b.map(&f, 64), "mmap");
        ebadf(b.send(&sb, b"x", &[&f]), "sendmsg");
        ebadf(b.send(&sa, b"x", &[]), "sendmsg");
        ebadf(b.recv(&sa, &mut [0; 4], &mut Vec::new()), "recvmsg");
        ebadf(a.recv(&sb, &mut [0; 4], &mut Vec::new()), "recvmsg");
        // Nothing was done: no file opened, no length, seal or message changed.
        assert_eq!(k.open_files(b.pid()), 0);
        assert_eq!(a.stat(&f).unwrap().len, 64);
        assert_eq!(a.stat(&named_file).unwrap().len, 0);
        let err = b.recv(&sb, &mut [0; 4], &mut Vec::new()).unwrap_err();
        assert_eq!(kind(&err), Some(io::ErrorKind::WouldBlock), "nothing sent");
        assert!(matches!(
            b.recv(&sb, &mut [], &mut Vec::new()),
            Err(Error::InvalidArgument(_))
        ));

        // A file received is the receiver's, and no longer only the sender's.
        a.send(&sa, b"f", &[&f]).unwrap();
        let mut files = Vec::new();
        assert_eq!(b.recv(&sb, &mut [0; 4], &mut files).unwrap(), 1);
        let theirs = files.pop().unwrap();
        assert_eq!(b.stat(&theirs).unwrap().len, 64);
        let mut out = [0; 9];
        assert!(b.map(&theirs, 64).unwrap().read(0, &mut out));
        assert_eq!(&out, b"a's bytes");
        let dup = b.dup(&theirs).unwrap();
        b.seal_size(&dup).unwrap();
        ebadf(a.stat(&theirs), "fstat");
        ebadf(a.map(&dup, 8), "mmap");
        a.stat(&f).unwrap();
        // A dead process is `Killed`, whoever owns the file.
        k.kill(b.pid());
        assert!(matches!(b.stat(&f), Err(Error::Killed)));
    }

    #[test]
    fn the_fd_limit_produces_too_many_fds() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        k.set_fd_limit(a.pid(), 2);
        let f1 = a.memfd_create("1").unwrap();
        let f2 = a.shm_create("shmrc-x").unwrap();
        for err in [
            a.memfd_create("3").unwrap_err(),
            a.shm_create("shmrc-y").unwrap_err(),
            a.shm_open("shmrc-x").unwrap_err(),
            a.dup(&f1).unwrap_err(),
        ] {
            assert!(matches!(err, Error::TooManyFds { limit: 2, .. }), "{err:?}");
        }
        assert!(k.names() == ["shmrc-x"], "a refused create leaves no name");
        drop(f2);
        let f3 = a.dup(&f1).unwrap();
        assert_eq!(k.open_files(a.pid()), 2);
        drop((f1, f3));
        assert_eq!(k.open_files(a.pid()), 0);
    }

    #[test]
    fn the_space_limit_produces_no_space() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        k.set_space_limit(Some(100));
        let f1 = a.memfd_create("1").unwrap();
        a.allocate(&f1, 64).unwrap();
        let f2 = a.memfd_create("2").unwrap();
        let err = a.allocate(&f2, 64).unwrap_err();
        assert!(
            matches!(&err, Error::NoSpace { len: 64, source }
                if source.kind() == io::ErrorKind::StorageFull),
            "{err:?}"
        );
        assert_eq!(
            a.stat(&f2).unwrap().len,
            0,
            "a failed allocate sizes nothing"
        );
        a.allocate(&f1, 36).unwrap();
        a.allocate(&f2, 64).unwrap();
        assert_eq!(k.bytes_allocated(), 100);
        drop(f1);
        assert_eq!(k.bytes_allocated(), 64);
        k.set_space_limit(None);
        assert!(matches!(
            a.allocate(&f2, MACHINE_BYTES + 1),
            Err(Error::NoSpace { .. })
        ));
        // A segment that does not fit leaves no name behind.
        k.set_space_limit(Some(80));
        let err = segment::create(&a, Strategy::FileSystem, &ns(), 4096, 4).unwrap_err();
        assert!(matches!(err, Error::NoSpace { .. }), "{err:?}");
        assert!(k.names().is_empty());
        assert_eq!(k.objects_alive(), 1);
    }

    #[test]
    fn a_stream_carries_bytes_and_files_in_order_with_partial_reads() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let b = k.spawn(UID);
        let (sa, sb) = k.stream_pair(&a, &b);
        let f1 = a.memfd_create("1").unwrap();
        a.allocate(&f1, 8).unwrap();
        a.map(&f1, 8).unwrap().words(1).unwrap()[0].store(11, Ordering::SeqCst);
        let f2 = a.memfd_create("2").unwrap();
        a.send(&sa, b"abc", &[&f1]).unwrap();
        a.send(&sa, b"de", &[]).unwrap();
        a.send(&sa, b"fgh", &[&f2, &f1]).unwrap();
        a.send(&sa, b"ij", &[]).unwrap();
        drop((f1, f2));
        assert_eq!(k.objects_alive(), 2, "files in flight stay alive");

        let mut files = Vec::new();
        let mut buf = [0; 2];
        assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 2);
        assert_eq!(&buf, b"ab");
        assert_eq!(
            files.len(),
            1,
            "files come with the first byte of their send"
        );
        assert_eq!(k.open_files(b.pid()), 1);
        let map = b.map(&files[0], 8).unwrap();
        assert_eq!(map.words(1).unwrap()[0].load(Ordering::SeqCst), 11);

        let mut buf = [0; 16];
        assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 3);
        assert_eq!(&buf[..3], b"cde", "file-less sends are glued on");
        assert_eq!(files.len(), 1);
        assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 3);
        assert_eq!(&buf[..3], b"fgh", "a send with files starts a new read");
        assert_eq!(files.len(), 3);
        assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 2);
        assert_eq!(&buf[..2], b"ij");
        let err = b.recv(&sb, &mut buf, &mut files).unwrap_err();
        assert_eq!(kind(&err), Some(io::ErrorKind::WouldBlock));

        // Back the other way, then hang up.
        b.send(&sb, b"ok", &[]).unwrap();
        let mut back = [0; 2];
        assert_eq!(a.recv(&sa, &mut back, &mut Vec::new()).unwrap(), 2);
        assert_eq!(&back, b"ok");
        drop(sa);
        assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 0);
        assert!(matches!(b.send(&sb, b"x", &[]), Err(Error::Disconnected)));
        drop((files, map));
        assert_eq!(k.objects_alive(), 0);
    }

    #[test]
    fn a_closed_end_discards_its_queue_and_too_many_files_are_refused() {
        let k = SimKernel::new(1);
        let a = k.spawn(UID);
        let b = k.spawn(UID);
        let (sa, sb) = k.stream_pair(&a, &b);
        let f = a.memfd_create("1").unwrap();
        let many: Vec<&SimFile> = vec![&f; MAX_FDS_PER_SEND + 1];
        assert!(matches!(
            a.send(&sa, b"x", &many),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            a.send(&sa, b"", &[&f]),
            Err(Error::InvalidArgument(_))
        ));

        k.set_fd_limit(b.pid(), 1);
        a.send(&sa, b"xy", &[&f, &f]).unwrap();
        a.send(&sa, b"z", &[]).unwrap();
        let mut files = Vec::new();
        let mut buf = [0; 8];
        let err = b.recv(&sb, &mut buf, &mut files).unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooManyFds {
                    call: "recvmsg",
                    limit: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(files.is_empty());
        assert_eq!(k.open_files(b.pid()), 0);
        assert_eq!(
            b.recv(&sb, &mut buf, &mut files).unwrap(),
            1,
            "bytes were consumed"
        );
        assert_eq!(buf[0], b'z');

        a.send(&sa, b"q", &[&f]).unwrap();
        drop(f);
        assert_eq!(k.objects_alive(), 1);
        drop(sb);
        assert_eq!(k.objects_alive(), 0, "the queue of a closed end is purged");
        assert!(matches!(a.send(&sa, b"x", &[]), Err(Error::Disconnected)));
    }

    #[test]
    fn the_protocol_runs_and_frees_everything_once_the_last_holder_releases() {
        let k = SimKernel::new(42);
        let a = k.spawn(UID);
        let b = k.spawn(UID);
        let created = segment::create(&a, Strategy::FileSystem, &ns(), 100, 4).unwrap();
        let Backing::Named { name, slot: 0 } = &created.backing else {
            panic!("{:?}", created.backing);
        };
        let name = name.clone();
        assert_eq!(k.names(), std::slice::from_ref(&name));
        let layout = created.fields.layout;
        assert!(created.map.write(layout.data_offset, b"payload"));

        let opened = segment::open_named(&b, &ns(), &name, b.uid()).unwrap();
        assert_eq!(opened.fields, created.fields);
        let mut out = [0; 7];
        assert!(opened.map.read(layout.data_offset, &mut out));
        assert_eq!(&out, b"payload");
        let header = Header::of(&opened.map, layout.capacity).unwrap();
        let h = header.holders();
        let word = holders::held_word(b.current());
        let slot = holders::claim(&b, &h, word).unwrap().unwrap();
        assert_eq!(slot, 1);
        assert_eq!(h.slot_word(0), Some(holders::held_word(a.token())));

        k.kill(a.pid());
        assert!(!b.is_alive(a.token()));
        drop(created); // the kernel reaps A
        assert_eq!(k.objects_alive(), 1);

        let released = holders::release(&b, &h, slot, word, &name)
            .unwrap()
            .unwrap();
        assert_eq!(released.outcome, Outcome::Unlinked);
        assert_eq!(released.reclaimed, 1, "A's slot");
        assert!(k.names().is_empty());
        let again = holders::finalize(&b, &h, &name, holders::Reclaim::All).unwrap();
        assert_eq!(again.outcome, Outcome::AlreadyGone);
        assert_eq!(holders::claim(&b, &h, word).unwrap(), Err(ClaimError::Gone));
        assert!(
            segment::open_named(&b, &ns(), &name, b.uid())
                .unwrap_err()
                .is_gone()
        );

        assert_eq!(k.objects_alive(), 1, "B still maps it");
        drop(opened);
        assert_eq!(k.objects_alive(), 0);
        assert_eq!(k.open_files(b.pid()), 0);
    }

    #[test]
    fn a_release_killed_at_any_step_is_finished_by_a_later_finalize() {
        // One uninterrupted run counts the steps of B's release ...
        let run = |kill_at: Option<u64>| {
            let k = SimKernel::new(3);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            let created = segment::create(&a, Strategy::FileSystem, &ns(), 8, 3).unwrap();
            let Backing::Named { name, .. } = &created.backing else {
                unreachable!()
            };
            let name = name.clone();
            let opened = segment::open_named(&b, &ns(), &name, b.uid()).unwrap();
            let cap = opened.fields.layout.capacity;
            let h = Header::of(&opened.map, cap).unwrap().holders();
            let word = holders::held_word(b.current());
            let slot = holders::claim(&b, &h, word).unwrap().unwrap();
            k.kill(a.pid());
            drop(created);
            let start = k.steps(b.pid());
            if let Some(n) = kill_at {
                k.kill_at_step(b.pid(), n);
            }
            let result = holders::release(&b, &h, slot, word, &name);
            let steps = k.steps(b.pid()) - start;
            // ... and a sweeper C finishes whatever B left.
            let c = k.spawn(UID);
            if kill_at.is_some() {
                assert!(matches!(result, Err(Error::Killed)), "{result:?}");
                let opened = segment::open_named(&c, &ns(), &name, c.uid()).unwrap();
                let h = Header::of(&opened.map, cap).unwrap().holders();
                let fin = holders::finalize(&c, &h, &name, holders::Reclaim::All).unwrap();
                assert_eq!(fin.outcome, Outcome::Unlinked, "killed at {kill_at:?}");
            } else {
                assert_eq!(result.unwrap().unwrap().outcome, Outcome::Unlinked);
            }
            assert!(k.names().is_empty());
            drop(opened);
            assert_eq!(k.objects_alive(), 0);
            steps
        };
        let steps = run(None);
        assert!(steps > 5);
        for n in 0..steps {
            run(Some(n));
        }
    }

    #[test]
    fn damaged_segments_fail_with_the_error_that_names_the_cause() {
        let k = SimKernel::new(9);
        let a = k.spawn(UID);
        let b = k.spawn(UID);
        let created = segment::create(&a, Strategy::FileSystem, &ns(), 8, 2).unwrap();
        let Backing::Named { name, .. } = &created.backing else {
            unreachable!()
        };
        assert!(k.set_len(name, 64));
        assert!(matches!(
            segment::open_named(&b, &ns(), name, b.uid()),
            Err(Error::Truncated { .. })
        ));
        // Grown back, the segment has its length but not its contents: as on Linux,
        // everything past byte 64 was freed by the truncation and reads as zero:
        // header words 8..=10 (creation time and nonce, covered by the checksum),
        // 12..=15 and the holder slots. The checksum no longer matches.
        assert!(k.set_len(name, created.map.len() as u64));
        let err = segment::open_named(&b, &ns(), name, b.uid()).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupted { what, .. } if what.contains("checksum")),
            "{err:?}"
        );
        assert_eq!(k.peek(name, 64, 64).unwrap(), [0; 64]);
        // A fresh segment for the other damages.
        let created = segment::create(&a, Strategy::FileSystem, &ns(), 8, 2).unwrap();
        let Backing::Named { name, .. } = &created.backing else {
            unreachable!()
        };
        assert!(segment::open_named(&b, &ns(), name, b.uid()).is_ok());
        assert!(k.poke(name, 0, b"NOTSHMRC"));
        assert!(matches!(
            segment::open_named(&b, &ns(), name, b.uid()),
            Err(Error::BadMagic { .. })
        ));
        let stranger = k.spawn_in_namespace(UID, 2);
        assert!(k.poke(name, 0, &crate::protocol::segment::MAGIC.to_ne_bytes()));
        assert!(matches!(
            segment::open_named(&stranger, &ns(), name, stranger.uid()),
            Err(Error::OtherPidNamespace { .. })
        ));
    }

    #[test]
    fn a_dead_process_that_still_writes_is_seen_by_effects_after_death() {
        let k = SimKernel::new(7);
        let a = k.spawn(1000);
        let f = a.shm_create("shmrc-x").unwrap();
        a.allocate(&f, 16).unwrap();
        let m = a.map(&f, 16).unwrap();
        k.kill_at_step(a.pid(), 0);
        assert!(matches!(a.crash_point(), Err(Error::Killed)));
        // Dropping what the dead process owned is the kernel's doing: no effect.
        drop(f);
        assert_eq!(k.effects_after_death(), Vec::<String>::new());
        // A write to shared memory with no crash point before it would land after death:
        k.kill(a.pid());
        m.words(1).unwrap()[0].store(42, Ordering::SeqCst);
        let effects = k.effects_after_death();
        assert_eq!(effects.len(), 1, "{effects:?}");
        assert!(effects[0].contains("changed after pid"), "{effects:?}");
        // So would a name made or removed.
        let b = k.spawn(1000);
        k.kill(a.pid());
        b.shm_unlink("shmrc-x").unwrap();
        assert!(k.effects_after_death()[0].contains("names were"));
        assert_eq!(
            k.effects_after_death(),
            Vec::<String>::new(),
            "compared once"
        );
    }
}

/// The sim under loom: two simulated processes, each driven by a loom thread, claim
/// slots of one segment concurrently; loom explores every interleaving.
#[cfg(shmrc_loom)]
#[test]
fn sim_processes_claim_distinct_slots_under_loom() {
    use crate::namespace::Namespace;
    use crate::os::Os;
    use crate::os::sim::SimKernel;
    use crate::protocol::holders;
    use crate::protocol::segment::{self, Backing, Header};
    use crate::strategy::Strategy;

    loom::model(|| {
        let k = SimKernel::new(1);
        let ns = Namespace::new("shmrc-simtest").unwrap();
        let creator = k.spawn(1000);
        let created = segment::create(&creator, Strategy::FileSystem, &ns, 8, 3).unwrap();
        let Backing::Named { name, .. } = &created.backing else {
            unreachable!()
        };
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let os = k.spawn(1000);
                let (ns, name) = (ns.clone(), name.clone());
                loom::thread::spawn(move || {
                    let opened = segment::open_named(&os, &ns, &name, os.uid()).unwrap();
                    let cap = opened.fields.layout.capacity;
                    let h = Header::of(&opened.map, cap).unwrap().holders();
                    let word = holders::held_word(os.current());
                    let slot = holders::claim(&os, &h, word).unwrap().unwrap();
                    assert_eq!(h.slot_word(slot), Some(word));
                    slot
                })
            })
            .collect();
        let mut slots: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        slots.sort_unstable();
        assert_eq!(slots, [1, 2]);
        drop(created);
        assert_eq!(k.objects_alive(), 1, "the name keeps it");
    });
}

/// The sim under shuttle: a holder releases while another process claims, under
/// PCT schedules; whoever ends up holding keeps the segment alive. Both outcomes
/// (the claimer wins, the claimer is too late) must occur, or the schedules did
/// not explore the race.
#[cfg(shmrc_shuttle)]
#[test]
fn sim_release_and_claim_race_under_shuttle() {
    use crate::namespace::Namespace;
    use crate::os::Os;
    use crate::os::sim::SimKernel;
    use crate::protocol::holders::{self, Outcome};
    use crate::protocol::segment::{self, Backing, Header};
    use crate::strategy::Strategy;
    use crate::sync::process::{AtomicU64, Ordering::Relaxed};

    static CLAIMER_WON: AtomicU64 = AtomicU64::new(0);
    static CLAIMER_LATE: AtomicU64 = AtomicU64::new(0);
    shuttle::check_pct(
        || {
            let k = SimKernel::new(1);
            let ns = Namespace::new("shmrc-simtest").unwrap();
            let a = k.spawn(1000);
            let created = segment::create(&a, Strategy::FileSystem, &ns, 8, 2).unwrap();
            let Backing::Named { name, slot } = created.backing else {
                unreachable!()
            };
            let b = k.spawn(1000);
            let (ns_b, name_b) = (ns.clone(), name.clone());
            let claimer = shuttle::thread::spawn(move || {
                let opened = segment::open_named(&b, &ns_b, &name_b, b.uid())?;
                let cap = opened.fields.layout.capacity;
                let h = Header::of(&opened.map, cap).unwrap().holders();
                let claimed = holders::claim(&b, &h, holders::held_word(b.current()))?;
                Ok::<_, crate::Error>((claimed, opened))
            });
            let cap = created.fields.layout.capacity;
            let h = Header::of(&created.map, cap).unwrap().holders();
            let word = holders::held_word(a.current());
            let released = holders::release(&a, &h, slot, word, &name).unwrap();
            let outcome = released.unwrap().outcome;
            match claimer.join().unwrap() {
                Ok((Ok(_slot), _opened)) => {
                    assert_eq!(outcome, Outcome::InUse);
                    assert_eq!(k.names(), [name]);
                    CLAIMER_WON.fetch_add(1, Relaxed);
                }
                // Too late: the name was gone before the open, or every slot was
                // a tombstone by the claim. Nothing else may happen.
                Ok((Err(holders::ClaimError::Gone), _)) => {
                    assert_eq!(outcome, Outcome::Unlinked);
                    assert!(k.names().is_empty());
                    CLAIMER_LATE.fetch_add(1, Relaxed);
                }
                Err(e) if e.is_gone() => {
                    assert_eq!(outcome, Outcome::Unlinked);
                    assert!(k.names().is_empty());
                    CLAIMER_LATE.fetch_add(1, Relaxed);
                }
                other => panic!("the claimer saw {other:?}"),
            }
        },
        1000,
        3,
    );
    let (won, late) = (CLAIMER_WON.load(Relaxed), CLAIMER_LATE.load(Relaxed));
    assert!(
        won > 0 && late > 0,
        "the race was not explored: won {won}, late {late}"
    );
}
