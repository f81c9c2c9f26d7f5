//! End-to-end tests of the `troupe` binary: `sessions` and `log` here, `run` and `resume` in
//! `run/`, Team runs and `troupe team show/verify` in `team/`, `troupe demo` and the crash and
//! resume of a scripted Team in `demo/`, local model servers (mimicked) in `local/`, the bash
//! sandbox in `sandbox/`, MCP servers in `mcp/`, approvals (`--approval on-request`, `troupe
//! approve`, kill -9 while a request waits) in `approval/`, the configuration files and
//! `troupe config` in `config/`, AGENTS.md project instructions in `instructions/`,
//! per-member models in `models/`.
//!
//! What a person reads — the `team show` table, the run summary, `troupe log`, `troupe
//! sessions` and every command's `--help` — is pinned with insta snapshots (`snapshots/` beside
//! each test file), with session ids, times and paths replaced by placeholders through insta
//! filters ([`snapshot_settings`]).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod approval;
mod config;
mod demo;
mod instructions;
mod layering;
mod ledger;
mod local;
mod mcp;
mod models;
mod recovery;
mod run;
mod sandbox;
mod send;
mod team;
mod timeline;
mod ux;
mod worktree;

use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_protocol::{EventDraft, SessionHeader, SessionId};

/// A regular expression matching `text` literally.
fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Insta settings for a snapshot of what a person reads: each `(text, placeholder)` replaced
/// (exact text, in order: name the longer texts first), then every remaining UUID by `[UUID]`.
/// Times stay as printed (a test's fixed times are part of what it checks); a time read from
/// the clock is replaced with [`clock_times`].
fn snapshot_settings(exact: &[(&str, &str)]) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(true);
    for (text, placeholder) in exact {
        if !text.is_empty() {
            settings.add_filter(&literal(text), *placeholder);
        }
    }
    settings.add_filter(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[UUID]",
    );
    settings
}

/// `settings` with every RFC 3339 time (with milliseconds, as Troupe prints them) replaced by
/// `[TIME]`: for the times a journal writer or a run took from the clock.
fn clock_times(mut settings: insta::Settings) -> insta::Settings {
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", "[TIME]");
    settings
}

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

/// Every command's `--help` (and `troupe help`), as snapshots (`run`, `resume`, `demo` and
/// `log` in the tests below, which say what those must say).
#[test]
fn help_works_everywhere() {
    let home = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("help_troupe", &["--help"][..]),
        ("help_sessions", &["sessions", "--help"]),
        ("help_team", &["team", "--help"]),
        ("help_team_show", &["team", "show", "--help"]),
        ("help_team_log", &["team", "log", "--help"]),
        ("help_team_verify", &["team", "verify", "--help"]),
        ("help_web", &["web", "--help"]),
        ("help_approve", &["approve", "--help"]),
        ("help_config", &["config", "--help"]),
        ("help_store_copy", &["store", "copy", "--help"]),
        ("help_send", &["send", "--help"]),
        ("help_chat", &["chat", "--help"]),
        ("help_worker", &["worker", "--help"]),
        ("help_help", &["help"]),
    ] {
        let out = troupe(home.path()).args(args).assert().success();
        let help = text(&out.get_output().stdout);
        snapshot_settings(&[]).bind(|| insta::assert_snapshot!(name, help));
    }
}

/// `troupe run --help` says when a run ends as DESIGN §6 does, and offers `--pace`.
#[test]
fn run_help_says_when_the_run_ends() {
    let home = tempfile::tempdir().unwrap();
    let out = troupe(home.path())
        .args(["run", "--help"])
        .assert()
        .success();
    // "Runs until the Lead has answered and every teammate (with --team) or subagent is idle
    // or inactive", and `--pace <MS>` in all three.
    let help = text(&out.get_output().stdout);
    snapshot_settings(&[]).bind(|| insta::assert_snapshot!("help_run", help));
    for command in ["demo", "resume"] {
        let out = troupe(home.path())
            .args([command, "--help"])
            .assert()
            .success();
        let help = text(&out.get_output().stdout);
        let name = format!("help_{command}");
        snapshot_settings(&[]).bind(|| insta::assert_snapshot!(name, help));
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
    // A note on stderr, not output: stdout stays empty (`troupe sessions | wc -l` is 0).
    troupe(home.path())
        .arg("sessions")
        .assert()
        .success()
        .stdout("")
        .stderr(predicate::str::starts_with("troupe: no sessions in "));
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
    // The fork's creation time is the clock's: the only one redacted.
    let fork_created = (r"(?m)^(fork-1\s+lead-1\s+)\S+", "$1[FORK CREATED]");
    let with_fork = || {
        let mut settings = snapshot_settings(&[]);
        settings.add_filter(fork_created.0, fork_created.1);
        settings
    };
    let out = troupe(home.path()).arg("sessions").assert().success();
    let table = text(&out.get_output().stdout);
    with_fork().bind(|| insta::assert_snapshot!("sessions_lead_and_fork", table));

    // Subagent children: a Team member's session is a teammate, any other a child.
    let journal = Journal::open_home(home.path());
    for (id, profile, created) in [
        ("mate-1", "team", 1_764_000_000_100_u64),
        ("child-1", "default", 1_764_000_000_200),
    ] {
        let w = journal
            .create(
                SessionHeader::new(SessionId::new(id).unwrap(), created)
                    .with_parent(SessionId::new("lead-1").unwrap())
                    .with_origin("subagent"),
            )
            .unwrap();
        w.append(EventDraft::new(
            "subagent/descriptor",
            json!({"version": 2, "mode": "continuable", "provider": "spawn", "label": id}),
        ))
        .unwrap();
        w.append(EventDraft::new(
            "agent/config",
            json!({"name": id, "model": {"provider": "script", "model": "/s.json"}, "profile": profile, "workspace": "/proj", "depth": 1}),
        ))
        .unwrap();
        w.flush_blocking().unwrap();
        w.abandon();
    }
    let out = troupe(home.path())
        .args(["sessions", "--json"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let mut roles: Vec<(&str, &str)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["role"].as_str().unwrap()))
        .collect();
    roles.sort_unstable();
    assert_eq!(
        roles,
        [
            ("child-1", "child"),
            ("fork-1", "fork"),
            ("lead-1", "lead"),
            ("mate-1", "teammate"),
        ]
    );
    let out = troupe(home.path()).arg("sessions").assert().success();
    let table = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    with_fork().bind(|| insta::assert_snapshot!("sessions_every_role", table));
}

#[test]
fn log_prints_events_human_and_json_with_from() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    let out = troupe(home.path())
        .args(["log", "lead-1"])
        .assert()
        .success();
    let log = text(&out.get_output().stdout);
    // The events were appended with the clock's times.
    clock_times(snapshot_settings(&[])).bind(|| insta::assert_snapshot!("log_human", log));
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
    let out = troupe(home.path()).args(["log", "live"]).assert().success();
    let log = text(&out.get_output().stdout);
    clock_times(snapshot_settings(&[]))
        .bind(|| insta::assert_snapshot!("log_of_a_held_session", log));
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
    let out = troupe(home.path())
        .args(["log", "lead-1", "--json"])
        .assert()
        .success();
    let note = text(&out.get_output().stderr);
    snapshot_settings(&[]).bind(|| insta::assert_snapshot!("log_torn_tail_note", note));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

fn assert_bad_input(home: &Path, args: &[&str], message: &str) -> String {
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
    stderr
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
    std::fs::write(
        home.path().join("sessions/future.jsonl"),
        "{\"type\":\"session\",\"format\":7,\"id\":\"future\",\"createdAt\":0}\n",
    )
    .unwrap();
    // A file this build cannot read is a failure of the work (the one exit-code rule: its
    // content, not what was typed, is the problem), one line, nothing changed.
    let out = troupe(home.path())
        .args(["log", "future"])
        .assert()
        .code(1)
        .stdout("");
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(stderr.contains("format version 7"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// A session log damaged before a completed turn: seq 0 and 1 are valid, the line of seq 2 is
/// not JSON, and a completed turn follows it.
fn damaged_session(home: &Path, id: &str) -> std::path::PathBuf {
    let path = write_session(
        home,
        id,
        &[
            header(id, 1_764_000_000_000),
            event(0, 1, "turn/start", json!({"turn": 1})),
            event(1, 2, "user/message", json!({"text": "hello"})),
            json!("placeholder"),
            event(3, 4, "turn/end", json!({"turn": 1})),
        ],
    );
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("\"placeholder\"", "{\"seq\":2,\"ti")).unwrap();
    path
}

#[test]
fn a_damaged_log_is_exit_1_after_the_events_before_the_damage() {
    let home = tempfile::tempdir().unwrap();
    let path = damaged_session(home.path(), "dmg");
    let before = std::fs::read(&path).unwrap();
    for json in [false, true] {
        let mut args = vec!["log", "dmg"];
        if json {
            args.push("--json");
        }
        let out = troupe(home.path()).args(&args).assert().code(1);
        let stdout = text(&out.get_output().stdout);
        assert_eq!(stdout.lines().count(), 2, "{stdout}");
        let stderr = text(&out.get_output().stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
        // The events before the damage (turn/start, user/message; no turn/end); then where
        // they stop, the file, line, byte offset and reason.
        let offset = text(&before)
            .lines()
            .take(3)
            .map(|l| l.len() + 1)
            .sum::<usize>();
        let offset = offset.to_string();
        let shown = format!("{stdout}{stderr}");
        let home_dir = home.path().display().to_string();
        let name = if json {
            "log_damaged_json"
        } else {
            "log_damaged"
        };
        snapshot_settings(&[
            (&home_dir, "[HOME]"),
            (&format!("offset {offset}"), "offset [OFFSET OF LINE 4]"),
        ])
        .bind(|| insta::assert_snapshot!(name, shown));
    }
    // A damaged header: nothing to show, the same exit code as troupe team show.
    std::fs::write(home.path().join("sessions/garbage.jsonl"), "not json\n{}\n").unwrap();
    let out = troupe(home.path())
        .args(["log", "garbage"])
        .assert()
        .code(1)
        .stdout("");
    let stderr = text(&out.get_output().stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    let home_dir = home.path().display().to_string();
    snapshot_settings(&[(&home_dir, "[HOME]")])
        .bind(|| insta::assert_snapshot!("log_damaged_header", stderr));
    troupe(home.path())
        .args(["team", "show", "garbage"])
        .assert()
        .code(1);
    // Nothing is repaired; an unknown session stays bad input.
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_bad_input(
        home.path(),
        &["log", "missing"],
        "session missing not found",
    );
}

#[test]
fn sessions_lists_a_damaged_log_with_a_note() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    damaged_session(home.path(), "dmg");
    std::fs::write(home.path().join("sessions/garbage.jsonl"), "not json\n").unwrap();
    for json in [false, true] {
        let mut args = vec!["sessions"];
        if json {
            args.push("--json");
        }
        let out = troupe(home.path()).args(&args).assert().success();
        let stdout = text(&out.get_output().stdout);
        let stderr = text(&out.get_output().stderr);
        let notes: Vec<&str> = stderr.lines().collect();
        assert_eq!(notes.len(), 2, "{stderr:?}");
        // lead-1, its fork and dmg are listed, garbage is not; one note names dmg's damage
        // (line 4, unparseable), the other the unlisted garbage.jsonl.
        let home_dir = home.path().display().to_string();
        let mut settings = snapshot_settings(&[(&home_dir, "[HOME]")]);
        settings.add_filter(r"(?m)^(fork-1\s+lead-1\s+)\S+", "$1[FORK CREATED]");
        settings.add_filter(
            r#""createdAt":\d+,"cwd":([^,]*),"id":"fork-1""#,
            r#""createdAt":[FORK CREATED],"cwd":$1,"id":"fork-1""#,
        );
        let name = if json {
            "sessions_damaged_json"
        } else {
            "sessions_damaged"
        };
        let shown = format!("{stdout}--- stderr ---\n{stderr}");
        settings.bind(|| insta::assert_snapshot!(name, shown));
    }
}

#[test]
fn sessions_skips_unreadable_files_with_a_warning() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    std::fs::write(home.path().join("sessions/garbage.jsonl"), "not json\n").unwrap();
    let out = troupe(home.path()).args(["sessions"]).assert().success();
    let shown = format!(
        "{}--- stderr ---\n{}",
        text(&out.get_output().stdout),
        text(&out.get_output().stderr)
    );
    let home_dir = home.path().display().to_string();
    let mut settings = snapshot_settings(&[(&home_dir, "[HOME]")]);
    settings.add_filter(r"(?m)^(fork-1\s+lead-1\s+)\S+", "$1[FORK CREATED]");
    settings.bind(|| insta::assert_snapshot!("sessions_skip_unreadable", shown));
}

#[test]
fn troupe_home_env_is_the_default_home() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    let out = Command::cargo_bin("troupe")
        .unwrap()
        .env("TROUPE_HOME", home.path())
        .args(["sessions", "--json"])
        .assert()
        .success();
    let listed = text(&out.get_output().stdout);
    let home_dir = home.path().display().to_string();
    let mut settings = snapshot_settings(&[(&home_dir, "[HOME]")]);
    settings.add_filter(
        r#""createdAt":\d+,"cwd":([^,]*),"id":"fork-1""#,
        r#""createdAt":[FORK CREATED],"cwd":$1,"id":"fork-1""#,
    );
    settings.bind(|| insta::assert_snapshot!("sessions_from_troupe_home", listed));
}

/// Writes a session file by hand: `lines` are the header and the events, one JSON value each.
fn write_session(home: &Path, id: &str, lines: &[Value]) -> std::path::PathBuf {
    let dir = home.join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{id}.jsonl"));
    let mut text = String::new();
    for line in lines {
        text.push_str(&line.to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn header(id: &str, created_at: u64) -> Value {
    json!({"type": "session", "format": 1, "id": id, "createdAt": created_at})
}

fn event(seq: u64, time: u64, kind: &str, data: Value) -> Value {
    json!({"seq": seq, "time": time, "type": kind, "data": data})
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn times_humantime_cannot_show_are_printed_as_raw_milliseconds() {
    let home = tempfile::tempdir().unwrap();
    write_session(
        home.path(),
        "far",
        &[
            header("far", 253_402_300_800_000),
            event(0, 253_402_300_799_999, "turn/start", json!({"turn": 0})),
            event(
                1,
                253_402_300_800_000,
                "user/message",
                json!({"text": "hi"}),
            ),
            event(2, u64::MAX, "turn/end", json!({"turn": 0})),
        ],
    );
    write_session(home.path(), "max", &[header("max", u64::MAX)]);
    // 9999-12-31T23:59:59.999Z, then raw milliseconds: no time is redacted here.
    let out = troupe(home.path()).args(["log", "far"]).assert().success();
    let stdout = text(&out.get_output().stdout);
    insta::assert_snapshot!("log_far_times", stdout);
    let out = troupe(home.path()).arg("sessions").assert().success();
    let stdout = text(&out.get_output().stdout);
    insta::assert_snapshot!("sessions_far_times", stdout);
}

#[test]
fn an_unusable_home_is_bad_input() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("afile");
    std::fs::write(&file, "not a home").unwrap();
    let file_home = file.display().to_string();
    for args in [
        &["sessions"][..],
        &["sessions", "--json"],
        &["log", "s"],
        &["resume", "s"],
        &["run", "--model", "script:/nonexistent.json", "go"],
    ] {
        assert_bad_input(
            &file,
            args,
            &format!("--home {file_home} is not a directory"),
        );
    }
    // A home below a regular file.
    assert_bad_input(&file.join("sub"), &["sessions"], "Not a directory");
    assert_bad_input(&file.join("sub"), &["log", "s"], "Not a directory");
    // `sessions` inside the home is a regular file.
    let home = root.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("sessions"), "").unwrap();
    assert_bad_input(&home, &["sessions"], "sessions (in --home");
    assert_bad_input(&home, &["log", "s"], "is not a directory");
    // A home where no directory can be created (procfs refuses mkdir, even for root): a run
    // and the demo are refused before anything is written (the demo's workspace included).
    let script = root.path().join("s.json");
    std::fs::write(&script, r#"{"agents": {"lead": [{"text": "hi"}]}}"#).unwrap();
    let model = format!("script:{}", script.display());
    let ws = root.path().join("ws");
    for args in [
        vec!["run", "--model", &model, "go"],
        vec!["run", "--team", "--model", &model, "go"],
        vec!["demo", "--workspace", ws.to_str().unwrap()],
    ] {
        assert_bad_input(
            Path::new("/proc/troupe-no-home"),
            &args,
            "--home /proc/troupe-no-home cannot hold sessions: creating /proc/troupe-no-home \
             failed (",
        );
        assert!(!ws.exists(), "{args:?}: the demo workspace was left behind");
    }
    // The home named by TROUPE_HOME is named that way.
    Command::cargo_bin("troupe")
        .unwrap()
        .env("TROUPE_HOME", &file)
        .arg("sessions")
        .assert()
        .code(2)
        .stderr(format!(
            "troupe: TROUPE_HOME {file_home} is not a directory\n"
        ));
}

/// Permission bits do not stop root, so this runs only as another user.
#[test]
fn unreadable_sessions_are_bad_input() {
    use std::os::unix::fs::PermissionsExt;
    if rustix::process::geteuid().is_root() {
        eprintln!("skipped: permission bits do not apply to root");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    let file = home.path().join("sessions/lead-1.jsonl");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    assert_bad_input(home.path(), &["log", "lead-1"], "Permission denied");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dir = home.path().join("sessions");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
    let denied = |args: &[&str]| {
        let out = troupe(home.path()).args(args).assert().code(2).stdout("");
        let stderr = text(&out.get_output().stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
        assert!(stderr.contains("Permission denied"), "{stderr:?}");
    };
    denied(&["sessions"]);
    denied(&["log", "lead-1"]);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// Spawns `troupe --home HOME ARGS…` with stdout piped, reads `keep` bytes (or one line when
/// `keep` is `None`), closes the pipe and returns the exit code and stderr.
fn read_then_close(home: &Path, args: &[&str], keep: Option<usize>) -> (Option<i32>, String) {
    use std::io::{BufRead, Read};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("TROUPE_HOME")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    match keep {
        Some(n) => {
            let mut buf = vec![0; n];
            let mut stdout = stdout;
            stdout.read_exact(&mut buf).unwrap();
        }
        None => {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .unwrap();
            assert!(line.ends_with('\n'));
        }
    }
    // The pipe is closed here, with far more output still to come.
    let out = child.wait_with_output().unwrap();
    (out.status.code(), text(&out.stderr))
}

#[test]
fn a_closed_stdout_is_success() {
    let home = tempfile::tempdir().unwrap();
    // About 1 MB of listing: far more than a pipe buffer holds.
    let cwd = "/w".repeat(500);
    for i in 0..1000 {
        let id = format!("s-{i:04}");
        let mut h = header(&id, 1_764_000_000_000 + i);
        h["cwd"] = json!(cwd);
        write_session(home.path(), &id, &[h]);
    }
    let mut lines = vec![header("big", 0)];
    for seq in 0..5000 {
        lines.push(event(
            seq,
            0,
            "user/message",
            json!({"text": "x".repeat(150)}),
        ));
    }
    write_session(home.path(), "big", &lines);
    for (args, keep) in [
        (&["sessions"][..], None),
        (&["sessions", "--json"], Some(10)),
        (&["log", "big"], None),
        (&["log", "big", "--json"], Some(10)),
    ] {
        let (code, stderr) = read_then_close(home.path(), args, keep);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn usage_errors_are_one_line_exit_2() {
    let home = tempfile::tempdir().unwrap();
    let one_line = |args: &[&str]| -> String {
        let out = troupe(home.path()).args(args).assert().code(2).stdout("");
        let stderr = text(&out.get_output().stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr:?}");
        assert!(stderr.starts_with("troupe: "), "{args:?}: {stderr:?}");
        stderr
    };
    assert_eq!(
        one_line(&["log"]),
        "troupe: the following required arguments were not provided: <SESSION> \
         (see 'troupe log --help')\n"
    );
    // A negative number is named as such (clap alone would call it an unknown flag and
    // suggest `-- -1`, which does not work for a flag's value).
    assert_eq!(
        one_line(&["log", "x", "--from", "-1"]),
        "troupe: invalid value '-1' for '--from <SEQ>': -1 is negative: give a whole number of \
         0 or more (see 'troupe log --help')\n"
    );
    for (args, wanted) in [
        (
            &["nonsense"][..],
            "unrecognized subcommand 'nonsense' (see 'troupe --help')",
        ),
        (&["sesions"], "a similar subcommand exists: 'sessions'"),
        (
            &["log", "x", "--from", "abc"],
            "invalid value 'abc' for '--from <SEQ>'",
        ),
        (&["log", "a", "b"], "unexpected argument 'b'"),
        (&["sessions", "--bogus"], "(see 'troupe sessions --help')"),
        (&["--home"], "a value is required for '--home <DIR>'"),
        (&["run"], "the prompt read from stdin is empty"),
        (&["run", "--model"], "a value is required for '--model <M>'"),
        (&["resume"], "<SESSION> (see 'troupe resume --help')"),
        (
            &["--home", "log", "sessions", "x"],
            "(see 'troupe sessions --help')",
        ),
        (&["help", "nonsense"], "unrecognized subcommand 'nonsense'"),
    ] {
        let line = one_line(args);
        assert!(
            line.contains(wanted),
            "{args:?}: {line:?} should contain {wanted:?}"
        );
    }
    // No arguments at all: the short help, on stderr (bare_troupe_prints_the_short_help).
    // --help and --version are unchanged: clap's output on stdout, exit 0.
    let out = troupe(home.path())
        .args(["log", "--help"])
        .assert()
        .success();
    assert!(text(&out.get_output().stdout).lines().count() > 5);
    troupe(home.path())
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with("troupe "));
}

#[test]
fn stored_control_characters_are_shown_escaped() {
    let home = tempfile::tempdir().unwrap();
    let mut h = header("evil", 1_764_000_000_000);
    h["cwd"] = json!("/a\nb\u{1b}[31mred\u{9b}");
    let mut unknown = event(1, 0, "x\u{1b}[31m\n/y", json!({"k": "\u{9b}2J"}));
    unknown["ignorable"] = json!(true);
    write_session(
        home.path(),
        "evil",
        &[
            h,
            event(0, 0, "user/message", json!({"text": "a\u{1b}b"})),
            unknown,
        ],
    );
    let raw = |s: &str| s.contains(['\u{1b}', '\u{9b}']);
    let out = troupe(home.path()).args(["log", "evil"]).assert().success();
    let stdout = text(&out.get_output().stdout);
    assert!(!raw(&stdout), "{stdout:?}");
    assert_eq!(stdout.lines().count(), 2, "{stdout:?}");
    // The type `x\u{1b}[31m\n/y` and the payload's `\u{9b}2J`, escaped.
    insta::assert_snapshot!("log_escaped_controls", stdout);
    let out = troupe(home.path()).arg("sessions").assert().success();
    let stdout = text(&out.get_output().stdout);
    assert!(!raw(&stdout), "{stdout:?}");
    assert_eq!(stdout.lines().count(), 2, "{stdout:?}");
    // The cwd `/a\nb\u{1b}[31mred\u{9b}`, escaped.
    insta::assert_snapshot!("sessions_escaped_controls", stdout);
    // The JSON outputs keep the data, JSON-escaped.
    let out = troupe(home.path())
        .args(["sessions", "--json"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v[0]["cwd"], "/a\nb\u{1b}[31mred\u{9b}");
    // An invalid id in a header: skipped with a one-line warning.
    write_session(home.path(), "bad", &[header("bad\n\u{1b}[2J", 0)]);
    let out = troupe(home.path()).arg("sessions").assert().success();
    let stderr = text(&out.get_output().stderr);
    assert!(!raw(&stderr), "{stderr:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    // An unknown required type is refused in one line.
    write_session(
        home.path(),
        "req",
        &[header("req", 0), event(0, 0, "x\n\u{1b}[2J", json!({}))],
    );
    let out = troupe(home.path()).args(["log", "req"]).assert().code(1);
    let stderr = text(&out.get_output().stderr);
    assert!(!raw(&stderr), "{stderr:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
}

#[test]
fn columns_line_up() {
    let home = tempfile::tempdir().unwrap();
    let long = "a-session-id-longer-than-thirty-six-bytes-0123456789";
    let mut child = header("c", 1_764_000_000_001);
    child["parentSession"] = json!(long);
    child["origin"] = json!("subagent");
    child["cwd"] = json!("/c");
    write_session(home.path(), "c", &[child]);
    let mut lead = header(long, 1_764_000_000_000);
    lead["cwd"] = json!("/l");
    write_session(home.path(), long, &[lead]);
    write_session(home.path(), "far", &[header("far", u64::MAX)]);
    let out = troupe(home.path()).arg("sessions").assert().success();
    let stdout = text(&out.get_output().stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    let starts: Vec<usize> = ["PARENT", "CREATED", "ROLE", "CWD"]
        .iter()
        .map(|h| lines[0].find(h).unwrap())
        .collect();
    let rows = [
        [long, "-", "2025-11-24T16:00:00.000Z", "lead", "/l"],
        ["c", long, "2025-11-24T16:00:00.001Z", "child", "/c"],
        ["far", "-", "t=18446744073709551615ms", "lead", "-"],
    ];
    for (line, cells) in lines[1..].iter().zip(rows) {
        assert!(line.starts_with(cells[0]), "{line:?}");
        for (start, cell) in starts.iter().zip(&cells[1..]) {
            assert_eq!(&line[*start..*start + cell.len()], *cell, "{stdout}");
            assert_eq!(&line[*start - 2..*start], "  ", "{stdout}");
        }
    }
    // `log`: seq right-aligned in 6 columns, the time and the type padded to 24.
    write_session(
        home.path(),
        "s",
        &[
            header("s", 0),
            event(0, 0, "turn/start", json!({"turn": 0})),
            event(1, 253_402_300_800_000, "turn/end", json!({"turn": 0})),
        ],
    );
    let expected = format!(
        "{:>6}  {:<24}  {:<24} {{\"turn\":0}}\n{:>6}  {:<24}  {:<24} {{\"turn\":0}}\n",
        0, "1970-01-01T00:00:00.000Z", "turn/start", 1, "t=253402300800000ms", "turn/end"
    );
    troupe(home.path())
        .args(["log", "s"])
        .assert()
        .success()
        .stdout(expected);
}

/// `/dev/full`: every write fails with ENOSPC.
fn dev_full() -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .ok()
}

#[test]
fn a_failing_stderr_does_not_panic() {
    let Some(_) = dev_full() else {
        eprintln!("skipped: no /dev/full");
        return;
    };
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    let path = home.path().join("sessions/lead-1.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"seq":3,"time":1,"type":"turn/sta"#);
    std::fs::write(&path, &bytes).unwrap();
    std::fs::write(home.path().join("sessions/garbage.jsonl"), "not json\n").unwrap();
    for (args, code) in [
        (&["log", "lead-1"][..], 0),
        (&["log", "lead-1", "--from", "99"], 0),
        (&["sessions"], 0),
        (&["log", "missing"], 2),
        (&["log"], 2),
        (&["run", "--model", "nosuch:model", "go"], 2),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
            .arg("--home")
            .arg(home.path())
            .args(args)
            .env_remove("TROUPE_HOME")
            .stdin(std::process::Stdio::null())
            .stderr(dev_full().unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}");
    }
}

#[test]
fn unknown_ignorable_events_are_labelled_as_such() {
    let home = tempfile::tempdir().unwrap();
    let mut future = event(0, 0, "future/thing", json!({}));
    future["ignorable"] = json!(true);
    write_session(home.path(), "s", &[header("s", 0), future]);
    // `future/thing` labelled `(unknown type, ignorable)`, not said to be skipped.
    let out = troupe(home.path()).args(["log", "s"]).assert().success();
    let stdout = text(&out.get_output().stdout);
    insta::assert_snapshot!("log_unknown_ignorable", stdout);
}

#[test]
fn an_empty_selection_says_so() {
    let home = tempfile::tempdir().unwrap();
    seed_home(home.path());
    for json in [false, true] {
        let mut cmd = troupe(home.path());
        cmd.args(["log", "lead-1", "--from", "3"]);
        if json {
            cmd.arg("--json");
        }
        cmd.assert()
            .success()
            .stdout("")
            .stderr("troupe: note: no events at or after seq 3 (the log has 3 events)\n");
    }
    write_session(home.path(), "empty", &[header("empty", 0)]);
    troupe(home.path())
        .args(["log", "empty"])
        .assert()
        .success()
        .stdout("")
        .stderr("troupe: note: no events at or after seq 0 (the log has 0 events)\n");
    // A selection that is not empty has no note.
    troupe(home.path())
        .args(["log", "lead-1", "--from", "2"])
        .assert()
        .success()
        .stderr("");
}

#[test]
fn log_help_says_json_is_re_encoded() {
    let home = tempfile::tempdir().unwrap();
    let out = troupe(home.path())
        .args(["log", "--help"])
        .assert()
        .success();
    // "compact JSON", "re-encoded"; not "stored JSON line".
    let help = text(&out.get_output().stdout);
    snapshot_settings(&[]).bind(|| insta::assert_snapshot!("help_log", help));
}
