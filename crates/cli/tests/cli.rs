//! End-to-end tests of the `troupe` binary: `sessions` and `log` here, `run` and `resume` in
//! `run/`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod run;

use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_protocol::{EventDraft, SessionHeader, SessionId};

fn troupe(home: &Path) -> Command {
    let mut cmd = Command::cargo_bin("troupe").unwrap();
    cmd.arg("--home").arg(home).env_remove("TROUPE_HOME");
    cmd
}

/// A lead session with one completed turn and a forked child.
fn seed_home(home: &Path) {
    let journal = Journal::open_home(home);
    let lead = journal
        .create(
            SessionHeader::new(SessionId::new("lead-1").unwrap(), 1_764_000_000_000)
                .with_cwd("/proj"),
        )
        .unwrap();
    lead.append(EventDraft::new("turn/start", json!({"turn": 0})))
        .unwrap();
    lead.append(EventDraft::new("user/message", json!({"text": "hello"})))
        .unwrap();
    lead.append(EventDraft::new("turn/end", json!({"turn": 0})))
        .unwrap();
    lead.flush_blocking().unwrap();
    drop(lead);
    let fork = journal
        .fork(
            &SessionId::new("lead-1").unwrap(),
            None,
            SessionId::new("fork-1").unwrap(),
        )
        .unwrap();
    fork.flush_blocking().unwrap();
}

fn listing(home: &Path) -> Vec<String> {
    let dir = home.join("sessions");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn help_works_everywhere() {
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["--help"][..],
        &["sessions", "--help"],
        &["log", "--help"],
        &["run", "--help"],
        &["resume", "--help"],
        &["help"],
    ] {
        troupe(home.path())
            .args(args)
            .assert()
            .success()
            .stdout(predicate::str::contains("Usage"));
    }
}

#[test]
fn bad_usage_exits_2() {
    let home = tempfile::tempdir().unwrap();
    troupe(home.path()).arg("nonsense").assert().code(2);
    troupe(home.path()).arg("log").assert().code(2);
    troupe(home.path())
        .args(["log", "x", "--from", "-1"])
        .assert()
        .code(2);
}

#[test]
fn sessions_on_an_empty_home() {
    let home = tempfile::tempdir().unwrap();
    troupe(home.path())
        .arg("sessions")
        .assert()
        .success()
        .stdout(predicate::str::contains("no sessions"));
    let out = troupe(home.path())
        .args(["sessions", "--json"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v, json!([]));
    // Listing writes nothing.
    assert!(!home.path().join("sessions").exists());
}

#[test]
fn sessions_lists_roles_parents_and_cwd() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    let out = troupe(home.path())
        .args(["sessions", "--json"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], "lead-1");
    assert_eq!(rows[0]["role"], "lead");
    assert_eq!(rows[0]["cwd"], "/proj");
    assert_eq!(rows[0]["parent"], Value::Null);
    assert_eq!(rows[1]["id"], "fork-1");
    assert_eq!(rows[1]["role"], "fork");
    assert_eq!(rows[1]["parent"], "lead-1");
    troupe(home.path())
        .arg("sessions")
        .assert()
        .success()
        .stdout(
            predicate::str::contains("lead-1")
                .and(predicate::str::contains("2025-11-24T16:00:00.000Z")),
        );
}

#[test]
fn log_prints_events_human_and_json_with_from() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    troupe(home.path())
        .args(["log", "lead-1"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("turn/start")
                .and(predicate::str::contains("user/message"))
                .and(predicate::str::contains(r#"{"text":"hello"}"#)),
        );
    let out = troupe(home.path())
        .args(["log", "lead-1", "--json", "--from", "1"])
        .assert()
        .success();
    let lines: Vec<Value> = String::from_utf8(out.get_output().stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["seq"], 1);
    assert_eq!(lines[0]["type"], "user/message");
    assert_eq!(lines[1]["type"], "turn/end");
    // The fork shows its seed and the end-seed marker.
    let out = troupe(home.path())
        .args(["log", "fork-1", "--json"])
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(text.lines().last().unwrap().contains("session/end-seed"));
}

#[test]
fn log_reads_a_session_another_writer_holds() {
    let home = tempfile::tempdir().unwrap();
    let journal = Journal::open_home(home.path());
    let w = journal
        .create(SessionHeader::new(SessionId::new("live").unwrap(), 0))
        .unwrap();
    w.append(EventDraft::new("turn/start", json!({}))).unwrap();
    w.flush_blocking().unwrap();
    troupe(home.path())
        .args(["log", "live"])
        .assert()
        .success()
        .stdout(predicate::str::contains("turn/start"));
    drop(w);
}

#[test]
fn log_reports_but_does_not_repair_a_torn_tail() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    let path = home.path().join("sessions/lead-1.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"seq":3,"time":1,"type":"turn/sta"#);
    std::fs::write(&path, &bytes).unwrap();
    troupe(home.path())
        .args(["log", "lead-1", "--json"])
        .assert()
        .success()
        .stderr(predicate::str::contains("unfinished write"));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

fn assert_bad_input(home: &Path, args: &[&str], message: &str) {
    let before = listing(home);
    let out = troupe(home).args(args).assert().code(2).stdout("");
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line expected, got {stderr:?}"
    );
    assert!(
        stderr.contains(message),
        "{stderr:?} should contain {message:?}"
    );
    assert_eq!(listing(home), before, "bad input must write nothing");
}

#[test]
fn bad_input_is_one_line_exit_2_and_writes_nothing() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    assert_bad_input(
        home.path(),
        &["log", "missing"],
        "session missing not found",
    );
    assert_bad_input(home.path(), &["log", "../etc/passwd"], "invalid session id");
    std::fs::create_dir(home.path().join("sessions/dir.jsonl")).unwrap();
    assert_bad_input(home.path(), &["log", "dir"], "is not a regular file");
    std::fs::write(home.path().join("sessions/garbage.jsonl"), "not json\n{}\n").unwrap();
    assert_bad_input(home.path(), &["log", "garbage"], "header is not JSON");
    std::fs::write(
        home.path().join("sessions/future.jsonl"),
        "{\"type\":\"session\",\"format\":7,\"id\":\"future\",\"createdAt\":0}\n",
    )
    .unwrap();
    assert_bad_input(home.path(), &["log", "future"], "format version 7");
}

#[test]
fn sessions_skips_unreadable_files_with_a_warning() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    std::fs::write(home.path().join("sessions/garbage.jsonl"), "not json\n").unwrap();
    troupe(home.path())
        .args(["sessions"])
        .assert()
        .success()
        .stdout(predicate::str::contains("lead-1"))
        .stderr(predicate::str::contains("garbage.jsonl"));
}

#[test]
fn troupe_home_env_is_the_default_home() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    Command::cargo_bin("troupe")
        .unwrap()
        .env("TROUPE_HOME", home.path())
        .args(["sessions", "--json"])
        .assert()
        .success()
        .stdout(predicate::str::contains("lead-1"));
}
