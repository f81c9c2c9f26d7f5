//! One test per committed fixture file, each with its exact outcome (REFERENCE a.9).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_journal::{Journal, JournalError, JsonlBackend, read_path};
use troupe_protocol::{ErrorCode, EventDraft, FixedClock, Seq, SessionId};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// What reading a fixture must give.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Loaded: number of events, seqs skipped as unknown-ignorable, torn tail (offset, line).
    Loaded {
        events: usize,
        skipped: Vec<u64>,
        torn: Option<(u64, u64)>,
    },
    /// Refused with this code; for `JOURNAL_CORRUPT` also (line, offset).
    Refused {
        code: &'static str,
        at: Option<(u64, u64)>,
    },
}

fn outcome_of(result: Result<troupe_journal::Replay, JournalError>) -> Outcome {
    match result {
        Ok(replay) => {
            for (i, e) in replay.events.iter().enumerate() {
                assert_eq!(e.seq, Seq(i as u64), "events must be contiguous");
            }
            Outcome::Loaded {
                events: replay.events.len(),
                skipped: replay.skipped.iter().map(|s| s.0).collect(),
                torn: replay.torn_tail.map(|t| (t.offset, t.line)),
            }
        }
        Err(e) => {
            let at = match &e {
                JournalError::Corrupt { line, offset, .. } => Some((*line, *offset)),
                _ => None,
            };
            Outcome::Refused { code: e.code(), at }
        }
    }
}

fn check(name: &str, expected: Outcome) {
    let path = fixture(name);
    let before = std::fs::read(&path).unwrap();
    assert_eq!(outcome_of(read_path(&path)), expected, "{name}");
    // Reading never repairs or otherwise changes the file.
    assert_eq!(std::fs::read(&path).unwrap(), before, "{name} was modified");
}

#[test]
fn good_log_loads_every_event() {
    check(
        "good.jsonl",
        Outcome::Loaded {
            events: 8,
            skipped: vec![],
            torn: None,
        },
    );
}

#[test]
fn header_only_log_has_no_events() {
    check(
        "header_only.jsonl",
        Outcome::Loaded {
            events: 0,
            skipped: vec![],
            torn: None,
        },
    );
}

#[test]
fn torn_final_line_is_ignored() {
    check(
        "torn_tail.jsonl",
        Outcome::Loaded {
            events: 4,
            skipped: vec![],
            torn: Some((498, 6)),
        },
    );
}

#[test]
fn corrupt_line_before_a_completed_turn_is_refused_with_position() {
    check(
        "corrupt_before_completed_turn.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((7, 567)),
        },
    );
    let err = read_path(&fixture("corrupt_before_completed_turn.jsonl")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("corrupt_before_completed_turn.jsonl"), "{msg}");
    assert!(
        msg.contains("line 7") && msg.contains("byte offset 567"),
        "{msg}"
    );
}

#[test]
fn corrupt_line_inside_the_final_unfinished_turn_is_refused_too() {
    // DESIGN decision 9: only an unfinished final write is torn. A complete bad line with valid
    // lines after it is damage, even after the last completed turn.
    check(
        "corrupt_in_final_turn.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((7, 567)),
        },
    );
}

#[test]
fn out_of_sequence_seq_followed_by_a_completed_turn_is_refused() {
    check(
        "out_of_sequence.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((7, 567)),
        },
    );
}

#[test]
fn out_of_sequence_turn_end_itself_is_refused() {
    check(
        "out_of_sequence_turn_end.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((7, 567)),
        },
    );
}

#[test]
fn out_of_sequence_seq_inside_the_final_turn_is_refused_too() {
    check(
        "out_of_sequence_in_final_turn.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((7, 567)),
        },
    );
}

#[test]
fn a_seq_gap_before_valid_lines_is_refused() {
    check(
        "seq_gap_before_valid_lines.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((7, 581)),
        },
    );
    let msg = read_path(&fixture("seq_gap_before_valid_lines.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("seq 6 where 5 was expected"), "{msg}");
}

#[test]
fn a_complete_bad_final_line_is_refused() {
    // Terminated by its newline, so not a write a crash cut short.
    check(
        "bad_final_line.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((7, 581)),
        },
    );
}

#[test]
fn whole_batches_load() {
    check(
        "whole_batches.jsonl",
        Outcome::Loaded {
            events: 7,
            skipped: vec![],
            torn: None,
        },
    );
    let replay = read_path(&fixture("whole_batches.jsonl")).unwrap();
    assert_eq!(replay.events[4].batch_last, Some(Seq(6)));
    assert_eq!(replay.events[5].batch_last, None);
}

#[test]
fn an_unfinished_final_batch_is_the_torn_tail_from_its_first_line() {
    // Seqs 4..=6 were appended together; the file holds 4 and 5 as complete lines.
    for name in ["unfinished_batch.jsonl", "unfinished_batch_torn_line.jsonl"] {
        check(
            name,
            Outcome::Loaded {
                events: 4,
                skipped: vec![],
                torn: Some((512, 6)),
            },
        );
        let torn = read_path(&fixture(name)).unwrap().torn_tail.unwrap();
        assert!(
            torn.reason
                .contains("events 4..=6 were appended together and only 2 are in the file"),
            "{name}: {}",
            torn.reason
        );
    }
}

#[test]
fn a_batch_opened_inside_another_is_refused() {
    check(
        "batch_inside_batch.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((7, 595)),
        },
    );
}

#[test]
fn a_batch_longer_than_the_limit_is_refused() {
    check(
        "batch_too_long.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((6, 512)),
        },
    );
}

#[test]
fn unknown_required_event_type_refuses_the_load() {
    check(
        "unknown_required_type.jsonl",
        Outcome::Refused {
            code: "JOURNAL_UNSUPPORTED",
            at: None,
        },
    );
    let msg = read_path(&fixture("unknown_required_type.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("plugin/future") && msg.contains("line 6"),
        "{msg}"
    );
}

#[test]
fn unknown_ignorable_event_type_is_skipped() {
    check(
        "unknown_ignorable_type.jsonl",
        Outcome::Loaded {
            events: 6,
            skipped: vec![4],
            torn: None,
        },
    );
    let replay = read_path(&fixture("unknown_ignorable_type.jsonl")).unwrap();
    let known: Vec<u64> = replay.known_events().map(|e| e.seq.0).collect();
    assert_eq!(known, vec![0, 1, 2, 3, 5]);
}

#[test]
fn unsupported_header_version_is_refused() {
    check(
        "unsupported_version.jsonl",
        Outcome::Refused {
            code: "JOURNAL_UNSUPPORTED",
            at: None,
        },
    );
    let msg = read_path(&fixture("unsupported_version.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("format version 99"), "{msg}");
}

#[test]
fn non_json_header_is_corrupt_at_line_one() {
    check(
        "non_json_header.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((1, 0)),
        },
    );
}

#[test]
fn header_without_newline_is_corrupt() {
    check(
        "missing_header_newline.jsonl",
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((1, 0)),
        },
    );
}

/// Copies a fixture into a fresh sessions dir as session `fixture`.
fn journal_with(name: &str) -> (tempfile::TempDir, Journal, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixture.jsonl");
    std::fs::copy(fixture(name), &path).unwrap();
    let journal = Journal::with_backend(
        Arc::new(JsonlBackend::new(dir.path())),
        Arc::new(FixedClock::new(1_764_000_100_000)),
    );
    (dir, journal, path)
}

#[test]
fn opening_for_writing_repairs_a_torn_tail_and_continues_the_sequence() {
    for (name, valid_len, events) in [
        ("torn_tail.jsonl", 498, 4),
        ("unfinished_batch.jsonl", 512, 4),
        ("unfinished_batch_torn_line.jsonl", 512, 4),
    ] {
        let (_dir, journal, path) = journal_with(name);
        let id = SessionId::new("fixture").unwrap();
        // Read-only access leaves the damage in place.
        let replay = journal.read(&id).unwrap();
        assert!(replay.torn_tail.is_some());
        assert!(std::fs::metadata(&path).unwrap().len() > valid_len);

        let (writer, replay) = journal.open(&id).unwrap();
        assert_eq!(replay.events.len(), events);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), valid_len, "{name}");
        let e = writer
            .append(EventDraft::new("turn/end", serde_json::json!({})))
            .unwrap();
        assert_eq!(e.seq, Seq(events as u64));
        writer.flush_blocking().unwrap();
        drop(writer);
        let replay = journal.read(&id).unwrap();
        assert_eq!(replay.events.len(), events + 1, "{name}");
        assert!(replay.torn_tail.is_none());
    }
}

#[test]
fn opening_a_corrupt_log_for_writing_changes_nothing() {
    for name in [
        "corrupt_before_completed_turn.jsonl",
        "corrupt_in_final_turn.jsonl",
        "out_of_sequence_in_final_turn.jsonl",
        "seq_gap_before_valid_lines.jsonl",
        "bad_final_line.jsonl",
        "batch_inside_batch.jsonl",
    ] {
        let (_dir, journal, path) = journal_with(name);
        let before = std::fs::read(&path).unwrap();
        let err = journal
            .open(&SessionId::new("fixture").unwrap())
            .unwrap_err();
        assert_eq!(err.code(), "JOURNAL_CORRUPT", "{name}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "{name}");
    }
}

#[test]
fn a_file_under_another_session_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("good.jsonl"), dir.path().join("other.jsonl")).unwrap();
    let journal = Journal::with_backend(
        Arc::new(JsonlBackend::new(dir.path())),
        Arc::new(FixedClock::new(0)),
    );
    let err = journal.read(&SessionId::new("other").unwrap()).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_CORRUPT");
}
