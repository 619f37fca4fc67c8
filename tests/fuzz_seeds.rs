//! The fuzz targets' bodies (`fuzz/src/attacks.rs`) run in `cargo test` on the seed
//! corpus committed under `fuzz/seeds/`, so the checks the fuzzers make cannot rot
//! between fuzzing runs, and the seeds stay the valid inputs the fuzzers should start
//! from. `SHMRC_WRITE_FUZZ_SEEDS=1 cargo test --test fuzz_seeds` rewrites the seeds
//! after a format change.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use shmrc_testkit::attacks;

use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::handle::ShareHandleExt;
use std::path::PathBuf;

fn seed_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target)
}

fn attack(target: &str) -> fn(&[u8]) -> usize {
    match target {
        "handle" => attacks::handle,
        "header" => attacks::header,
        "wire" => attacks::wire,
        other => panic!("no attack for target {other}"),
    }
}

#[test]
fn committed_seeds_are_what_the_worlds_make_now() {
    let write = std::env::var_os("SHMRC_WRITE_FUZZ_SEEDS").is_some();
    for (target, file, bytes) in attacks::seeds() {
        let path = seed_dir(target).join(file);
        if write {
            std::fs::create_dir_all(seed_dir(target)).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (SHMRC_WRITE_FUZZ_SEEDS=1 writes it)",
                path.display()
            )
        });
        assert_eq!(
            committed,
            bytes,
            "{} is stale: SHMRC_WRITE_FUZZ_SEEDS=1 cargo test --test fuzz_seeds rewrites it",
            path.display()
        );
    }
}

#[test]
fn every_seed_is_accepted_and_its_truncations_are_refused_cleanly() {
    for (target, file, bytes) in attacks::seeds() {
        let run = attack(target);
        assert_eq!(run(&bytes), 1, "seed {target}/{file} attaches one buffer");
        for cut in [0, 1, bytes.len() / 2, bytes.len().saturating_sub(1)] {
            run(&bytes[..cut]);
        }
    }
}

#[test]
fn a_seed_handle_attaches_the_owners_segment() {
    let world = attacks::World::new();
    let receiver = world.kernel.spawn(attacks::UID);
    let handle = shmrc::ShareHandle::from_bytes_with(&receiver, &world.in_flight_handle).unwrap();
    let buf = shmrc::ShmBuf::attach(handle).unwrap();
    assert_eq!(buf.key(), world.buf.key());
    let census = world.buf.census().unwrap();
    assert_eq!(
        (census.live, census.in_flight),
        (2, 0),
        "the in-flight slot was taken over"
    );
}

/// A handle the `handle` fuzzer found (CI, 2026-11-23): a committed seed with its
/// generation changed. The attach must refuse it as `Error::Stale` (a handle of
/// another use of the segment), which the attack accepts as a clean refusal.
#[test]
fn a_handle_of_another_generation_is_refused_cleanly() {
    let bytes = std::fs::read(seed_dir("handle").join("stale-generation")).unwrap();
    assert_eq!(
        attacks::handle(&bytes),
        0,
        "a stale handle attaches nothing"
    );
}
