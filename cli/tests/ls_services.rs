//! `shmrc ls` and `shmrc sweep` on publish/subscribe services: a live service (this
//! test publishes, with one subscriber joined and one sample made) is listed with its
//! publisher's pid and liveness, its subscribers, samples and size, in the table and
//! in `--json`; a dead publisher's service with no subscriber (a copy of the live
//! one's file whose publisher word names a reaped child) is listed as such, and
//! `sweep` removes it. Each `shmrc` run has a time limit ([`common::LIMIT`]); every
//! name lives in the test's own namespace (emptied on drop).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{listed, shmrc_ok};
use serde_json::Value;
use shmrc::checkers::token::TokenExt;
use shmrc::pubsub::{Publisher, PublisherOptions, Subscriber};
use shmrc_testkit::names::{TestNamespace, current_uid};

/// The service `service` of the only namespace of a `--json` document.
fn service<'a>(doc: &'a Value, name: &str) -> &'a Value {
    let namespaces = doc["namespaces"].as_array().expect("namespaces");
    assert_eq!(namespaces.len(), 1, "{doc:#}");
    listed(&namespaces[0], "services", name)
}

#[test]
fn ls_lists_services_with_publisher_subscribers_samples_and_size() {
    let t = TestNamespace::new("cli-svc");
    let prefix = t.ns.prefix().to_owned();
    let options = PublisherOptions::new()
        .namespace(t.ns.clone())
        .subscribers(3)
        .samples(4);
    let publisher = Publisher::create("live", options).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "live").unwrap();
    let mut loan = publisher.loan::<u64>(16).unwrap();
    loan.fill(1);
    assert_eq!(
        publisher.publish(loan).unwrap().sent().unwrap().delivered,
        1
    );
    let live = publisher.service_name().to_owned();
    let size = std::fs::metadata(format!("/dev/shm/{live}")).unwrap().len();
    // A dead publisher's service: the live one's words, its publisher word a reaped
    // child's token, and no subscriber.
    let mut bytes = std::fs::read(format!("/dev/shm/{live}")).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let dead_token = shmrc::Token::new(dead_pid, 0).unwrap().word();
    bytes[48..56].copy_from_slice(&dead_token.to_le_bytes());
    // Every entry free: the copy's would name this live subscriber.
    let dead = format!("{}service.dead", t.ns.name_start(current_uid()));
    let path = format!("/dev/shm/{dead}");
    std::fs::write(&path, zero_states(bytes, 4, 3, size)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();

    let table = shmrc_ok(&["ls", "--namespace", &prefix]);
    println!("{table}");
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} is not listed: {table}"))
            .to_owned()
    };
    let header = table
        .lines()
        .find(|l| l.starts_with("SERVICE"))
        .expect("a table of services");
    assert!(header.contains("SUBSCRIBERS live/max"), "{header}");
    let live_row = row(&live);
    assert!(
        live_row.contains(&format!("{} (alive)", std::process::id())),
        "{live_row}"
    );
    assert!(live_row.contains("1/3"), "one of 3 subscribers: {live_row}");
    assert!(
        live_row.contains("1/4"),
        "one of 4 samples made: {live_row}"
    );
    assert!(live_row.contains("published"), "{live_row}");
    let dead_row = row(&dead);
    assert!(
        dead_row.contains(&format!("{dead_pid} (dead)")),
        "{dead_row}"
    );
    assert!(dead_row.contains("0/3"), "{dead_row}");
    assert!(dead_row.contains("a sweep unlinks it"), "{dead_row}");

    let doc: Value =
        serde_json::from_str(&shmrc_ok(&["ls", "--json", "--namespace", &prefix])).unwrap();
    let seen = service(&doc, &live);
    assert_eq!(
        seen,
        &serde_json::json!({
            "name": live,
            "service": "live",
            "publisher": {"pid": std::process::id(), "alive": true},
            "subscribers": 1,
            "subscriber_entries": 3,
            "samples": 1,
            "sample_rows": 4,
            "size": size,
            "action": "kept",
            "state": "published",
            "error": null,
        }),
        "{doc:#}"
    );
    let seen = service(&doc, &dead);
    assert_eq!(
        seen["publisher"],
        serde_json::json!({"pid": dead_pid, "alive": false})
    );
    assert_eq!(
        (&seen["subscribers"], &seen["action"]),
        (&0.into(), &"would_unlink".into()),
        "{doc:#}"
    );

    let swept: Value =
        serde_json::from_str(&shmrc_ok(&["sweep", "--json", "--namespace", &prefix])).unwrap();
    assert_eq!(service(&swept, &dead)["action"], "unlinked", "{swept:#}");
    assert_eq!(service(&swept, &live)["action"], "kept", "{swept:#}");
    assert!(!t.names().contains(&dead), "{:?}", t.names());
    drop((subscriber, publisher));
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// `bytes`, a service file of `rows` sample rows and `entries` subscriber entries
/// (`size` bytes), with every entry's state word free.
fn zero_states(mut bytes: Vec<u8>, rows: usize, entries: usize, size: u64) -> Vec<u8> {
    let entries_start = (16 + 3 * rows).div_ceil(8) * 8;
    let entry_words = (size as usize / 8 - entries_start) / entries;
    for e in 0..entries {
        let at = (entries_start + e * entry_words) * 8;
        bytes[at..at + 8].copy_from_slice(&0u64.to_le_bytes());
    }
    bytes
}
