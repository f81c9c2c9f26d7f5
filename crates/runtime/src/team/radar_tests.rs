//! Tests of the write radar's kept state (`crate::radar::RadarTail`) against the whole reads
//! (`crate::radar::write_conflicts`), over Team logs folded by this module's
//! [`fold_team_log`](super::fold_team_log). They live here, not in `radar.rs`, because they
//! need the Team's fold, and `radar.rs` must not point at `team/` (the runtime's files have no
//! circle, `tests/suite/layering.rs`).

#![allow(clippy::unwrap_used)]
use std::collections::HashMap;

use troupe_journal::{Journal, LineCheck};
use troupe_protocol::SessionId;

use crate::radar::*;
use serde_json::{Value, json};
use troupe_protocol::{EventDraft, SessionHeader};

fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

/// A Team `lead-1` with teammates `mate-a` and `mate-b` whose three logs grow one event at
/// a time, interleaved by time: task windows, the Lead's and both teammates' `write` and
/// `bash` changes, another Team's task, a member that becomes active late. Each event:
/// (log, time, type, data).
fn growth() -> Vec<(&'static str, u64, &'static str, Value)> {
    let member = |id: &str, name: &str, phase: &str| {
        json!({"version": 1, "teamId": "lead-1", "member": {"id": id, "name": name,
            "description": "works", "provider": "spawn", "context": "fresh", "phase": phase}})
    };
    let task = |team: &str, id: &str, revision: u64, status: &str, owner: Option<&str>| {
        let mut data = json!({"version": 1, "teamId": team, "task": {"id": id,
            "revision": revision, "subject": format!("subject of {id}"), "description": "do it",
            "status": status, "blockedBy": [], "writeScopes": []}});
        if let Some(owner) = owner {
            data["task"]["ownerId"] = json!(owner);
        }
        data
    };
    let call = |id: &str, name: &str, path: Option<&str>| {
        let mut data = json!({"turn": 1, "step": 1, "callId": id, "name": name, "arguments": {}});
        if let Some(path) = path {
            data["effect"] = json!({"path": path, "preImage": null,
                "postImage": format!("sha256:{}", "0".repeat(64)), "result": {}});
        }
        data
    };
    let result = |id: &str, name: &str, changed: Option<&[&str]>| {
        let mut data = json!({"turn": 1, "step": 1, "callId": id, "name": name,
            "isError": false, "content": "{}"});
        if let Some(paths) = changed {
            data["changed"] = json!({"paths": paths, "complete": true});
        }
        data
    };
    vec![
        (
            "lead-1",
            1_000,
            "team/member",
            member("mate-a", "alpha", "provisioning"),
        ),
        (
            "lead-1",
            1_010,
            "team/member",
            member("mate-a", "alpha", "active"),
        ),
        ("mate-a", 1_011, "turn/start", json!({"turn": 1})),
        (
            "lead-1",
            1_020,
            "team/member",
            member("mate-b", "beta", "provisioning"),
        ),
        (
            "mate-b",
            1_021,
            "tool/call",
            call("b0", "write", Some("early.txt")),
        ),
        ("mate-b", 1_022, "tool/result", result("b0", "write", None)),
        (
            "lead-1",
            1_040,
            "team/task",
            task("lead-1", "task-1", 1, "pending", None),
        ),
        (
            "lead-1",
            1_050,
            "team/task",
            task("lead-1", "task-1", 2, "in_progress", Some("mate-a")),
        ),
        (
            "lead-1",
            1_055,
            "tool/call",
            call("l0", "write", Some("early.txt")),
        ),
        ("lead-1", 1_058, "tool/result", result("l0", "write", None)),
        (
            "lead-1",
            1_060,
            "tool/call",
            call("l1", "write", Some("shared.txt")),
        ),
        (
            "mate-a",
            1_062,
            "tool/call",
            call("a1", "write", Some("shared.txt")),
        ),
        ("lead-1", 1_070, "tool/result", result("l1", "write", None)),
        ("mate-a", 1_075, "tool/result", result("a1", "write", None)),
        (
            "lead-1",
            1_080,
            "team/task",
            task("other-team", "task-1", 1, "in_progress", Some("mate-b")),
        ),
        (
            "lead-1",
            1_085,
            "team/member",
            member("mate-b", "beta", "active"),
        ),
        (
            "lead-1",
            1_090,
            "team/task",
            task("lead-1", "task-2", 1, "pending", None),
        ),
        (
            "lead-1",
            1_100,
            "team/task",
            task("lead-1", "task-2", 2, "in_progress", Some("mate-b")),
        ),
        ("lead-1", 1_105, "tool/call", call("l2", "bash", None)),
        (
            "lead-1",
            1_115,
            "tool/result",
            result("l2", "bash", Some(&["other.txt"])),
        ),
        (
            "mate-a",
            1_120,
            "tool/call",
            call("a2", "edit", Some("other.txt")),
        ),
        ("mate-a", 1_130, "tool/result", result("a2", "edit", None)),
        (
            "mate-b",
            1_140,
            "tool/call",
            call("b1", "write", Some("other.txt")),
        ),
        ("mate-b", 1_150, "tool/result", result("b1", "write", None)),
        (
            "lead-1",
            1_170,
            "team/task",
            task("lead-1", "task-1", 3, "completed", Some("mate-a")),
        ),
        ("mate-b", 1_180, "tool/call", call("b2", "bash", None)),
        (
            "mate-b",
            1_190,
            "tool/result",
            result("b2", "bash", Some(&["shared.txt"])),
        ),
        (
            "lead-1",
            1_200,
            "team/task",
            task("lead-1", "task-2", 3, "completed", Some("mate-b")),
        ),
    ]
}

/// The radar kept between lists answers exactly what the whole reads answer after every
/// event appended to any of the Team's logs (the Lead's and both teammates', one of
/// which becomes active late, with changes from before), and the conflicts do grow.
#[test]
fn the_kept_radar_equals_write_conflicts_as_the_logs_grow() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_home(dir.path());
    let mate = |id: &str| {
        SessionHeader::new(sid(id), 1)
            .with_parent(sid("lead-1"))
            .with_origin("subagent")
    };
    let writers: HashMap<&str, _> = [
        (
            "lead-1",
            journal
                .create(SessionHeader::new(sid("lead-1"), 1))
                .unwrap(),
        ),
        ("mate-a", journal.create(mate("mate-a")).unwrap()),
        ("mate-b", journal.create(mate("mate-b")).unwrap()),
    ]
    .into_iter()
    .collect();
    let kept = RadarTail::default();
    let mut seen = std::collections::BTreeSet::new();
    for (log, time, kind, data) in growth() {
        let writer = &writers[log];
        writer
            .append_batch_at(vec![EventDraft::new(kind, data)], time)
            .unwrap();
        writer.flush_blocking().unwrap();
        let state =
            crate::team::fold_team_log(&journal, &sid("lead-1"), LineCheck::Prefix).unwrap();
        let whole = write_conflicts(&journal, &state, None);
        assert_eq!(
            kept.write_conflicts(&journal, &state),
            whole,
            "after {log} {time}"
        );
        seen.insert(format!("{whole:?}"));
    }
    assert!(kept.is_kept(), "the folds are kept");
    assert!(seen.len() >= 4, "{seen:#?}");
}

/// A teammate log damaged after the radar was kept (a line that is no event, then more
/// events) makes the list answer the whole reads' conflicts — what they read up to the
/// damage — and drops the kept folds.
#[test]
fn a_log_damaged_after_the_radar_was_kept_answers_the_whole_reads() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_home(dir.path());
    let mate = SessionHeader::new(sid("mate-a"), 1)
        .with_parent(sid("lead-1"))
        .with_origin("subagent");
    let lead = journal
        .create(SessionHeader::new(sid("lead-1"), 1))
        .unwrap();
    let alpha = journal.create(mate).unwrap();
    let events: Vec<_> = growth()
        .into_iter()
        .filter(|(log, _, _, data)| *log != "mate-b" && data["member"]["id"] != "mate-b")
        .collect();
    let (before, after) = events.split_at(12);
    for (log, time, kind, data) in before {
        let writer = if *log == "lead-1" { &lead } else { &alpha };
        writer
            .append_batch_at(vec![EventDraft::new(*kind, data.clone())], *time)
            .unwrap();
        writer.flush_blocking().unwrap();
    }
    let kept = RadarTail::default();
    let state = crate::team::fold_team_log(&journal, &sid("lead-1"), LineCheck::Prefix).unwrap();
    assert_eq!(
        kept.write_conflicts(&journal, &state),
        write_conflicts(&journal, &state, None)
    );
    assert!(kept.is_kept());
    let path = dir.path().join("sessions").join("mate-a.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, b"{\"not\":\"an event\"}\n").unwrap();
    drop(file);
    for (log, time, kind, data) in after {
        let writer = if *log == "lead-1" { &lead } else { &alpha };
        writer
            .append_batch_at(vec![EventDraft::new(*kind, data.clone())], *time)
            .unwrap();
        writer.flush_blocking().unwrap();
    }
    let state = crate::team::fold_team_log(&journal, &sid("lead-1"), LineCheck::Prefix).unwrap();
    let whole = write_conflicts(&journal, &state, None);
    assert_eq!(kept.write_conflicts(&journal, &state), whole);
    assert!(!kept.is_kept(), "the kept folds are dropped");
    assert_eq!(kept.write_conflicts(&journal, &state), whole);
}
