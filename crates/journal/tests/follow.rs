//! Following a session file another writer appends to: `Journal::read_each_from` reads only
//! what was appended since an earlier read, retries an unfinished write, and tells committed
//! corruption from a write in progress.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::io::Write;
use std::sync::Arc;

use serde_json::json;
use troupe_journal::{Journal, JsonlBackend, ScanPosition};
use troupe_protocol::{ErrorCode, Event, EventDraft, FixedClock, Seq, SessionHeader, SessionId};

fn setup() -> (tempfile::TempDir, Journal, SessionId) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::with_backend(
        Arc::new(JsonlBackend::new(dir.path())),
        Arc::new(FixedClock::new(7)),
    );
    (dir, journal, SessionId::new("s").unwrap())
}

/// Writes a session holding one `turn/start`, closes it, and reads it: the position after it.
fn one_turn_start(journal: &Journal, id: &SessionId) -> ScanPosition {
    let writer = journal.create(SessionHeader::new(id.clone(), 0)).unwrap();
    writer
        .append(EventDraft::new("turn/start", json!({"turn": 1})))
        .unwrap();
    writer.flush_blocking().unwrap();
    drop(writer);
    journal.read_each(id, &mut |_| {}).unwrap().position()
}

fn collect(journal: &Journal, id: &SessionId, from: ScanPosition) -> (Vec<Event>, ScanPosition) {
    let mut events = Vec::new();
    let tail = journal
        .read_each_from(id, from, &mut |e| events.push(e))
        .unwrap();
    (events, tail.next)
}

#[test]
fn each_read_returns_only_what_was_appended_since_the_last_one() {
    let (_dir, journal, id) = setup();
    let writer = journal.create(SessionHeader::new(id.clone(), 0)).unwrap();
    writer
        .append(EventDraft::new("turn/start", json!({"turn": 1})))
        .unwrap();
    writer.flush_blocking().unwrap();
    let summary = journal.read_each(&id, &mut |_| {}).unwrap();
    let mut at = summary.position();
    assert_eq!(at.next_seq, Seq(1));

    // Nothing new: nothing read, position unchanged.
    let (events, next) = collect(&journal, &id, at);
    assert!(events.is_empty());
    assert_eq!(next, at);

    for round in 0..3u64 {
        writer
            .append_batch(vec![
                EventDraft::new("step/start", json!({"turn": 1, "step": round + 1})),
                EventDraft::new("step/end", json!({"turn": 1, "step": round + 1})),
            ])
            .unwrap();
        writer.flush_blocking().unwrap();
        let (events, next) = collect(&journal, &id, at);
        let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, vec![1 + 2 * round, 2 + 2 * round]);
        at = next;
    }
    // Reading in pieces saw exactly what one whole read sees.
    let whole = journal.read(&id).unwrap();
    assert_eq!(at.offset, whole.valid_len);
    assert_eq!(at.next_seq, whole.next_seq());
}

#[test]
fn an_unfinished_line_is_read_once_it_is_complete() {
    let (dir, journal, id) = setup();
    let at = one_turn_start(&journal, &id);

    let line = r#"{"seq":1,"time":9,"type":"turn/end","data":{"turn":1}}"#;
    let path = dir.path().join("s.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(&line.as_bytes()[..20]).unwrap();
    let mut events = Vec::new();
    let tail = journal
        .read_each_from(&id, at, &mut |e| events.push(e))
        .unwrap();
    assert!(events.is_empty());
    assert_eq!(tail.next, at, "an unfinished line is not consumed");
    assert_eq!(tail.torn_tail.unwrap().bytes, 20);

    file.write_all(&line.as_bytes()[20..]).unwrap();
    file.write_all(b"\n").unwrap();
    let (events, next) = collect(&journal, &id, at);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "turn/end");
    assert_eq!(next.next_seq, Seq(2));
    assert_eq!(next.offset, std::fs::metadata(&path).unwrap().len());
}

#[test]
fn committed_corruption_after_the_position_is_an_error_with_the_whole_files_line() {
    let (dir, journal, id) = setup();
    let at = one_turn_start(&journal, &id);
    let path = dir.path().join("s.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"not json\n").unwrap();
    file.write_all(br#"{"seq":2,"time":9,"type":"turn/end","data":{}}"#)
        .unwrap();
    file.write_all(b"\n").unwrap();
    let err = journal.read_each_from(&id, at, &mut |_| {}).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_CORRUPT", "{err}");
    assert!(err.to_string().contains("line 3"), "{err}");
}

#[test]
fn a_file_shorter_than_what_was_read_is_refused() {
    let (dir, journal, id) = setup();
    let at = one_turn_start(&journal, &id);
    let path = dir.path().join("s.jsonl");
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(at.offset - 3).unwrap();
    let err = journal.read_each_from(&id, at, &mut |_| {}).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_CORRUPT", "{err}");
    assert!(err.to_string().contains("shorter"), "{err}");
}
