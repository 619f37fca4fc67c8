//! The `shmrc-bench` program (what `shmrc bench` runs): a real (short) run prints one JSON document with each result's ratio
//! to its baseline; bad arguments and a peer started
//! without its configuration fail with errors that say why. No timing is asserted.

use std::process::{Command, Output};
use std::time::Duration;

/// Runs `shmrc-bench` (killed, failing the test, past 5 minutes: a quick run takes seconds).
fn shmrc_bench(args: &[&str], env: &[(&str, &str)]) -> Output {
    shmrc_testkit::process::output_within(
        Command::new(env!("CARGO_BIN_EXE_shmrc-bench"))
            .args(args)
            .envs(env.iter().copied()),
        Duration::from_secs(300),
    )
}

#[test]
fn a_quick_json_run_reports_each_contender_with_its_ratio_to_the_baseline() {
    let out = shmrc_bench(&["--quick", "--json", "--only", "clone/drop"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(doc["quick"], true, "{stdout}");
    let results = doc["results"].as_array().expect("results");
    let contenders: Vec<&str> = results
        .iter()
        .map(|r| r["contender"].as_str().expect("contender"))
        .collect();
    assert_eq!(
        contenders,
        ["shmrc ShmBuf", "floor Arc<mapping>"],
        "{stdout}"
    );
    for result in results {
        assert_eq!(result["workload"], "clone/drop", "{stdout}");
        assert!(
            result["nanos_per_op"].as_f64().expect("nanos") > 0.0,
            "{stdout}"
        );
        let ratios = result["ratios"].as_array().expect("ratios");
        assert_eq!(ratios.len(), 1, "{stdout}");
        assert_eq!(ratios[0]["baseline"], "floor Arc<mapping>", "{stdout}");
    }
    assert_eq!(
        results[1]["ratios"][0]["ratio"], 1.0,
        "the baseline against itself: {stdout}"
    );
}

#[test]
fn a_run_judges_the_goals_of_its_workload_met_or_missed_with_the_reason() {
    let out = shmrc_bench(&["--quick", "--json", "--only", "channel ping-pong"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    let goals = doc["goals"].as_array().expect("goals");
    // Issue 34's channel goal, once per strategy, and nothing of the workloads not run.
    assert_eq!(goals.len(), 2, "{stdout}");
    for goal in goals {
        assert_eq!(goal["workload"], "channel ping-pong", "{stdout}");
        assert_eq!(goal["limit"], 1.1, "{stdout}");
        // The channel's goals have no bound row; the key is there, null.
        assert!(goal["bound"].is_null(), "{stdout}");
        assert!(goal.get("bound").is_some(), "{stdout}");
        let ratio = goal["ratio"].as_f64().expect("both rows were measured");
        let reason = goal["reason"].as_str().expect("reason");
        match goal["verdict"].as_str() {
            Some("met") => assert!(ratio <= 1.1 && reason.is_empty(), "{stdout}"),
            Some("missed") => assert!(
                ratio > 1.1 && reason.starts_with(&format!("{ratio:.2}x > 1.1x")),
                "{stdout}"
            ),
            other => panic!("verdict {other:?}: {stdout}"),
        }
    }
}

#[test]
fn the_growth_sweep_takes_no_only() {
    let out = shmrc_bench(&["--growth", "--only", "fill"], &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("takes no --only"), "{stderr}");
}

#[test]
fn an_unknown_workload_is_refused_with_the_list_of_known_ones() {
    let out = shmrc_bench(&["--only", "ping"], &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown workload \"ping\"") && stderr.contains("ping-pong"),
        "{stderr}"
    );
}

#[test]
fn a_peer_without_a_known_contender_or_mode_says_so() {
    let out = shmrc_bench(&["bench-peer"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown contender"));

    let out = shmrc_bench(
        &["bench-peer"],
        &[
            ("SHMRC_BENCH_CONTENDER", "floor memfd"),
            ("SHMRC_BENCH_MODE", "pong"),
            ("SHMRC_BENCH_SOCKET", "/nonexistent/peer.sock"),
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown peer mode \"pong\""));

    let out = shmrc_bench(
        &["bench-peer"],
        &[
            ("SHMRC_BENCH_CONTENDER", "floor memfd"),
            ("SHMRC_BENCH_MODE", "ping"),
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("SHMRC_BENCH_SOCKET is not set"));
}
