//! The `shmrc` command line on a segment whose only holder was SIGKILLed: `ls` shows
//! the dead holder, `sweep --dry-run` says what it would do and changes nothing,
//! `sweep` reclaims and unlinks; the same as JSON documents (`--json`); and a failure
//! exits 1 naming its cause. Each `shmrc` run has a time limit ([`common::LIMIT`]), and
//! every segment lives in the test's own namespace (emptied on drop).

mod common;

use common::{file_system_buf, held_only_by, listed, shmrc_ok, shmrc_within, start_workers};
use serde_json::Value;
use shmrc_testkit::names::TestNamespace;

#[test]
fn ls_and_sweep_show_and_clean_a_dead_holders_segment() {
    let t = TestNamespace::new("cli");
    let ns = t.ns.prefix().to_owned();
    let mut workers = start_workers("cli", 1);
    let name = held_only_by(&t, &workers[0], 10_000);
    // The last holder dies without releasing: the segment leaks until a sweep.
    workers.remove(0).kill();

    let ls = shmrc_ok(&["ls", "--namespace", &ns]);
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

    let dry = shmrc_ok(&["sweep", "--dry-run", "--namespace", &ns]);
    println!("{dry}");
    assert!(
        dry.contains("would reclaim 1 dead holder slot(s), would unlink 1 segment(s)"),
        "{dry}"
    );
    assert_eq!(t.names(), vec![name.clone()], "a dry run changes nothing");

    let swept = shmrc_ok(&["sweep", "--namespace", &ns]);
    println!("{swept}");
    assert!(
        swept.contains("reclaimed 1 dead holder slot(s), unlinked 1 segment(s)"),
        "{swept}"
    );
    assert!(t.names().is_empty());
    assert!(shmrc_ok(&["ls", "--namespace", &ns]).contains("no shmrc segments"));
}

#[test]
fn a_bad_namespace_is_a_clear_error() {
    let out = shmrc_within(&["ls", "--namespace", "torch"], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid namespace prefix \"torch\""), "{err}");
}

#[test]
fn a_failing_command_exits_1_naming_the_cause() {
    let args = ["ls", "--namespace", "bad/name"];
    let out = shmrc_within(&args, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "shmrc {args:?}: {err}");
    assert!(out.stdout.is_empty(), "shmrc {args:?} printed a result");
    assert!(
        err.starts_with("shmrc: ") && err.contains("\"bad/name\""),
        "the error names the namespace: {err}"
    );
    // Under --json the error is the JSON document, on stdout where the result was due.
    for args in [
        &["sweep", "--json", "--namespace", "bad/name"][..],
        &["ls", "--json", "--namespace", "bad/name"],
    ] {
        let out = shmrc_within(args, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "shmrc {args:?}: {stdout}");
        assert!(out.stderr.is_empty(), "shmrc {args:?}: {:?}", out.stderr);
        let doc: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("shmrc {args:?}: not JSON ({e}): {stdout}"));
        let error = doc["error"].as_str().expect("an error string");
        assert!(error.contains("\"bad/name\""), "{doc}");
    }
    // A cause of the CLI's own (no `shmrc-bench` to run): cli/tests/bench_forward.rs.
}

/// `shmrc args` (which must succeed) as JSON.
fn shmrc_json(args: &[&str]) -> Value {
    let out = shmrc_ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("shmrc {args:?}: not JSON ({e}): {out}"))
}

/// The only namespace of a `--json` document, which must be `t`'s.
fn only_namespace<'a>(doc: &'a Value, t: &TestNamespace) -> &'a Value {
    let namespaces = doc["namespaces"].as_array().expect("namespaces");
    assert_eq!(namespaces.len(), 1, "{doc:#}");
    assert_eq!(namespaces[0]["namespace"], t.ns.prefix(), "{doc:#}");
    &namespaces[0]
}

/// The segment `name` of a namespace of a `--json` document.
fn segment<'a>(ns: &'a Value, name: &str) -> &'a Value {
    listed(ns, "segments", name)
}

#[test]
fn ls_json_and_sweep_json_report_sizes_holders_and_counts() {
    let t = TestNamespace::new("clijson");
    let prefix = t.ns.prefix().to_owned();
    // `dead`: held only by a worker that is then SIGKILLed; `kept`: held by this test.
    let mut workers = start_workers("clijson", 1);
    let dead_name = held_only_by(&t, &workers[0], 10_000);
    let kept = file_system_buf(&t, 10_000);
    let kept_name = kept.name().unwrap().to_owned();
    workers.remove(0).kill();

    let ls = shmrc_json(&["ls", "--json", "--namespace", &prefix]);
    let ns = only_namespace(&ls, &t);
    assert_eq!(ns["segments"].as_array().unwrap().len(), 2, "{ls:#}");
    let seg = segment(ns, &dead_name);
    assert_eq!(seg["size"], 10_000, "{seg:#}");
    assert_eq!(
        seg["holders"],
        serde_json::json!({
            "live": 0,
            "in_flight": 0,
            "dead": 1,
            "capacity": 8,
            "finalizer_pid": null,
            "finalizer_deferrals": 0
        }),
        "{seg:#}"
    );
    assert_eq!(
        seg["creator"],
        serde_json::json!({"pid": std::process::id(), "alive": true}),
        "the creator is this test: {seg:#}"
    );
    assert!(
        seg["created_at_unix_nanos"].as_u64().unwrap() > 0,
        "{seg:#}"
    );
    assert!(seg["age_ms"].is_u64(), "{seg:#}");
    assert_eq!(
        seg["action"], "would_unlink",
        "what a sweep would do: {seg:#}"
    );
    assert_eq!(seg["reclaimed"], 1, "{seg:#}");
    assert!(seg["error"].is_null(), "{seg:#}");
    let seg = segment(ns, &kept_name);
    assert_eq!(seg["holders"]["live"], 1, "{seg:#}");
    assert_eq!(seg["holders"]["dead"], 0, "{seg:#}");
    assert_eq!(
        (&seg["action"], &seg["state"]),
        (&"kept".into(), &"held".into())
    );

    let dry = shmrc_json(&["sweep", "--json", "--dry-run", "--namespace", &prefix]);
    assert_eq!(dry["dry_run"], true, "{dry:#}");
    assert_eq!(
        (&dry["reclaimed"], &dry["unlinked"]),
        (&1.into(), &1.into()),
        "{dry:#}"
    );
    let ns = only_namespace(&dry, &t);
    assert_eq!(
        (&ns["reclaimed"], &ns["unlinked"]),
        (&1.into(), &1.into()),
        "{dry:#}"
    );
    assert_eq!(
        t.names(),
        {
            let mut both = vec![dead_name.clone(), kept_name.clone()];
            both.sort();
            both
        },
        "a dry run changes nothing"
    );

    let swept = shmrc_json(&["sweep", "--json", "--namespace", &prefix]);
    assert_eq!(swept["dry_run"], false, "{swept:#}");
    assert_eq!(
        (&swept["reclaimed"], &swept["unlinked"]),
        (&1.into(), &1.into()),
        "{swept:#}"
    );
    let ns = only_namespace(&swept, &t);
    let seg = segment(ns, &dead_name);
    assert_eq!(
        (&seg["action"], &seg["state"]),
        (&"unlinked".into(), &"unlinked".into())
    );
    assert_eq!(segment(ns, &kept_name)["action"], "kept", "{swept:#}");
    assert_eq!(
        t.names(),
        vec![kept_name],
        "only the live holder's segment is left"
    );

    kept.release().unwrap();
    assert!(t.names().is_empty());
    let empty = shmrc_json(&["sweep", "--json", "--namespace", &prefix]);
    assert_eq!(
        (&empty["reclaimed"], &empty["unlinked"]),
        (&0.into(), &0.into()),
        "{empty:#}"
    );
    assert_eq!(
        only_namespace(&empty, &t)["segments"],
        serde_json::json!([])
    );
}

/// The manager roles are read by the library's constructor before `main`: a role it
/// does not know stops the program there with the cause, before any command runs.
#[test]
fn an_unknown_manager_role_stops_the_program_before_main_naming_it() {
    let out = shmrc_within(&["ls"], &[("SHMRC_MANAGER_ROLE", "bogus".into())]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SHMRC_MANAGER_ROLE=\"bogus\": expected start or serve"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "main ran: {out:?}");
}

/// No manager is the normal idle state: `status` says so and exits 0, as text or as
/// `{"running": false}`; `ls` keeps its notice about the manager off stdout.
#[test]
fn status_without_a_manager_is_an_answer_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    // A runtime directory must be this user's alone.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let env = [("SHMRC_RUNTIME_DIR", dir.path().display().to_string())];
    let out = shmrc_within(&["status"], &env);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("no manager running"), "{text}");

    let out = shmrc_within(&["status", "--json"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc, serde_json::json!({"running": false}));

    let t = TestNamespace::new("cli-notice");
    let out = shmrc_within(&["ls", "--namespace", t.ns.prefix()], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stderr.contains("no manager running"), "{stderr}");
    assert!(!stdout.contains("manager"), "{stdout}");
}

/// A manager that cannot be asked is a failure: a runtime directory that is a file.
#[test]
fn status_that_cannot_ask_fails() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let env = [("SHMRC_RUNTIME_DIR", file.path().display().to_string())];
    for args in [&["status"][..], &["status", "--json"]] {
        let out = shmrc_within(args, &env);
        println!("{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            out.status.code(),
            Some(1),
            "shmrc {args:?}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = shmrc_within(&["status", "--json"], &env);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("the error as JSON");
    assert!(doc["error"].is_string(), "{doc}");
}
