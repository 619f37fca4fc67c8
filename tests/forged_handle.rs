//! Handle bytes forged from what every local user can see (issue 26, item 4).
//!
//! A file_system handle names a segment whose name, size and creator any user reads off
//! `ls -l /dev/shm` and `/proc`; the word of an in-flight reference is the sender's
//! token, also public. A forger, here a throwaway unprivileged user, builds handle bytes
//! from that alone and gives them to a service of the segment's owner (who would attach
//! whatever a peer sends). What the forger cannot read is the header (mode `0600`), and
//! so the share key in it.
//!
//! The service, given the forged bytes, must attach nothing, take over nothing and give
//! back nothing — in a process that already holds the segment (the local path) and in
//! one that does not — and the receiver the real handle was for must still find its
//! in-flight reference and attach. Needs root (for the throwaway user); without it the
//! test says so, and fails where `SHMRC_REQUIRE_ROOT=1` (as `.ci/run` sets it).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use shmrc::checkers::handle::{Decoded, HandleMeta, InFlight, encode};
use shmrc::checkers::local::SegmentKey;
use shmrc::checkers::namespace::NamespaceExt;
use shmrc::checkers::segment::{DEFAULT_CAPACITY, Layout};
use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
use shmrc_testkit::data::{fnv1a, hex, pattern, unhex};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{copy_of_this_test, output_within, test_role, text_of};
use shmrc_testkit::users::{ThrowawayUser, cannot_attack};

/// The namespace prefix the forger looks for, and the owner's uid.
const FORGER_PREFIX: &str = "SHMRC_TEST_FORGER_PREFIX";
const FORGER_OWNER: &str = "SHMRC_TEST_FORGER_OWNER";
/// Forged bytes, in hex, for the service role.
const SERVICE_BYTES: &str = "SHMRC_TEST_SERVICE_BYTES";

/// The forger: lists `/dev/shm`, finds the owner's segment of the namespace, and prints
/// `forged <hex>`: a handle with an in-flight reference in slot 1 (the first a sender
/// claims) from the creator, made from the name and the file's size. It also checks
/// that it cannot read the header. Returns at once in a normal test run.
#[test]
fn forger() {
    let (Ok(prefix), Ok(owner)) = (std::env::var(FORGER_PREFIX), std::env::var(FORGER_OWNER))
    else {
        return;
    };
    let owner: u32 = owner.parse().unwrap();
    let ns = Namespace::new(prefix).unwrap();
    let start = ns.name_start(owner);
    let entry = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().starts_with(&start))
        .expect("the owner's segment is listed");
    let name = entry.file_name().into_string().unwrap();
    let size = entry.metadata().unwrap().size() as usize; // what `ls -l` shows
    let header = std::fs::File::open(entry.path());
    println!(
        "forger: uid {} reads the header: {}",
        nixish_uid(),
        header.is_ok()
    );
    let (_, parts) = Namespace::of_segment(&name, owner).unwrap();
    // The default capacity, and the length that leaves for the data.
    let capacity = DEFAULT_CAPACITY;
    let data_len = size - Layout::new(1, capacity).unwrap().data_offset;
    let forged = encode(&Decoded {
        meta: HandleMeta {
            strategy: Strategy::FileSystem,
            key: SegmentKey {
                creator: parts.creator,
                nonce: parts.nonce,
            },
            data_len,
            capacity,
            generation: 0,
            // The one thing not to be read off a listing.
            share_key: 0,
        },
        name: Some(name),
        in_flight: Some(InFlight {
            slot: 1,
            word: shmrc::checkers::holders::in_flight_word(parts.creator),
        }),
    });
    println!("forged {}", hex(&forged));
}

fn nixish_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The service: attaches the bytes it is given (as a service that trusts its peers
/// would), prints `service: attached` or `service: refused: WHY`, then decodes them
/// again and drops the handle unattached. Returns at once in a normal test run.
#[test]
fn service() {
    let Ok(bytes) = std::env::var(SERVICE_BYTES) else {
        return;
    };
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let bytes = unhex(&bytes);
    match ShareHandle::from_bytes(&bytes).and_then(ShmBuf::attach) {
        Ok(buf) => println!("service: attached {} bytes", buf.len()),
        Err(e) => println!("service: refused: {e}"),
    }
    drop(ShareHandle::from_bytes(&bytes));
}

fn in_flight_count(ns: &Namespace) -> u32 {
    let report = shmrc::inspect(ns).unwrap();
    assert_eq!(report.segments.len(), 1, "{report:?}");
    report.segments[0].census.expect("a census").in_flight
}

#[test]
fn handle_bytes_forged_from_a_listing_attach_nothing_and_take_nothing() {
    const TEST: &str = "handle_bytes_forged_from_a_listing";
    let user = match ThrowawayUser::create("forge") {
        Ok(user) => user,
        Err(why) => return cannot_attack(TEST, &why),
    };
    let t = TestNamespace::new("forged");
    let buf = ShmBuf::with_options(
        64 << 10,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(t.ns.clone()),
    )
    .unwrap();
    let data = pattern(buf.len(), 9);
    buf.write_at(0, &data).unwrap();
    // The real handle, in flight to its receiver: slot 1 holds its reference.
    let real = buf.share().unwrap().into_bytes().unwrap();
    assert_eq!(in_flight_count(&t.ns), 1);

    // The forger, another user, sees the listing.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = copy_of_this_test(dir.path());
    let mut command = Command::new(&probe);
    command
        .args(["--exact", "forger", "--nocapture", "--test-threads=1"])
        .env(FORGER_PREFIX, t.ns.prefix())
        .env(FORGER_OWNER, nixish_uid().to_string())
        .env("SHMRC_MANAGER", "off")
        .current_dir(dir.path())
        .uid(user.uid)
        .gid(user.gid);
    let out = output_within(&mut command, Duration::from_secs(60));
    let said = text_of(&out);
    assert!(out.status.success(), "the forger failed: {said}");
    assert!(
        said.contains(&format!("forger: uid {} reads the header: false", user.uid)),
        "the forger ran as the other user and could not read the header: {said}"
    );
    let forged = said
        .lines()
        .find_map(|l| l.strip_prefix("forged "))
        .map(unhex)
        .unwrap_or_else(|| panic!("no forged bytes: {said}"));
    // The forgery is right in everything but the share key.
    let real_decoded = shmrc::checkers::handle::decode(&real, nixish_uid()).unwrap();
    let mut forged_decoded = shmrc::checkers::handle::decode(&forged, nixish_uid()).unwrap();
    assert_ne!(forged_decoded.meta.share_key, real_decoded.meta.share_key);
    forged_decoded.meta.share_key = real_decoded.meta.share_key;
    assert_eq!(
        forged_decoded, real_decoded,
        "the forgery is exact but for the key"
    );

    // 1. A service process that does not hold the segment.
    let mut service = test_role("service");
    service.env(SERVICE_BYTES, hex(&forged));
    let out = output_within(&mut service, Duration::from_secs(60));
    let said = text_of(&out);
    assert!(out.status.success(), "the service failed: {said}");
    assert!(
        said.contains("service: refused: ") && said.contains("share key"),
        "the forged bytes were not refused for their share key: {said}"
    );
    assert_eq!(
        in_flight_count(&t.ns),
        1,
        "the real reference is still in flight"
    );

    // 2. This process, which holds the segment (the local path).
    let refused = ShareHandle::from_bytes(&forged).and_then(ShmBuf::attach);
    assert!(
        matches!(&refused, Err(Error::Malformed { why, .. }) if why.contains("share key")),
        "{refused:?}"
    );
    drop(ShareHandle::from_bytes(&forged).unwrap());
    assert_eq!(
        in_flight_count(&t.ns),
        1,
        "the real reference is still in flight"
    );

    // The real receiver attaches, taking over its in-flight reference, and reads.
    let received = ShmBuf::attach(ShareHandle::from_bytes(&real).unwrap()).unwrap();
    let mut out = vec![0u8; received.len()];
    received.read_at(0, &mut out).unwrap();
    assert_eq!(fnv1a(&out), fnv1a(&data));
    assert_eq!(in_flight_count(&t.ns), 0, "taken over");
    drop(received);
    drop(buf);
    assert!(t.names().is_empty(), "left {:?}", t.names());
    drop(user);
}
