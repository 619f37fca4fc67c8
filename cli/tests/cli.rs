//! The `shmrc` command line on a segment whose only holder was SIGKILLed: `ls` shows
//! the dead holder, `sweep --dry-run` says what it would do and changes nothing,
//! `sweep` reclaims and unlinks.
#![cfg(not(any(feature = "loom", feature = "shuttle")))]

mod common;

use std::process::Command;

use common::{TestNamespace, fnv1a, pattern, start_workers};
use shmrc::holders::Outcome;
use shmrc::{CreateOptions, ShmBuf, Strategy};

fn shmrc(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_shmrc"))
        .args(args)
        .output()
        .expect("run shmrc");
    assert!(
        out.status.success(),
        "shmrc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn ls_and_sweep_show_and_clean_a_dead_holders_segment() {
    let t = TestNamespace::new("cli");
    let ns = t.ns.prefix().to_owned();
    let buf = ShmBuf::with_options(
        10_000,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(t.ns.clone())
            .capacity(8),
    )
    .unwrap();
    let data = pattern(buf.len(), 5);
    buf.write_at(0, &data).unwrap();
    let name = buf.name().unwrap().to_owned();
    let mut workers = start_workers("cli", 1);
    let reply = workers[0].ask(
        &format!("hold {}", fnv1a(&data)),
        vec![buf.share().unwrap()],
    );
    assert_eq!(reply, "held 1");
    assert_eq!(
        buf.release().unwrap().unwrap().outcome,
        Outcome::InUse,
        "the worker holds it"
    );
    // The last holder dies without releasing: the segment leaks until a sweep.
    workers.remove(0).kill();

    let ls = shmrc(&["ls", "--namespace", &ns]);
    println!("{ls}");
    let row = ls
        .lines()
        .find(|l| l.starts_with(&name))
        .expect("the segment is listed");
    assert!(row.contains("9.8 KiB"), "{row}");
    assert!(
        row.contains("0/0/1/8"),
        "live/in-flight/dead/capacity: {row}"
    );
    assert!(
        row.contains("alive"),
        "the creator (this test) is alive: {row}"
    );
    assert!(row.contains("unheld"), "{row}");

    let dry = shmrc(&["sweep", "--dry-run", "--namespace", &ns]);
    println!("{dry}");
    assert!(
        dry.contains("would reclaim 1 dead holder slot(s), would unlink 1 segment(s)"),
        "{dry}"
    );
    assert_eq!(t.names(), vec![name.clone()], "a dry run changes nothing");

    let swept = shmrc(&["sweep", "--namespace", &ns]);
    println!("{swept}");
    assert!(
        swept.contains("reclaimed 1 dead holder slot(s), unlinked 1 segment(s)"),
        "{swept}"
    );
    assert!(t.names().is_empty());
    assert!(shmrc(&["ls", "--namespace", &ns]).contains("no shmrc segments"));
}

#[test]
fn a_bad_namespace_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmrc"))
        .args(["ls", "--namespace", "torch"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid namespace prefix \"torch\""), "{err}");
}
