//! What a new user found by trying to break the journal: every case here once misbehaved.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use troupe_journal::{Journal, JsonlBackend, MAX_DATA_DEPTH, read_header, read_path};
use troupe_protocol::{ErrorCode, EventDraft, FixedClock, Seq, SessionHeader, SessionId};

fn journal_at(dir: &Path) -> Journal {
    Journal::with_backend(
        Arc::new(JsonlBackend::new(dir)),
        Arc::new(FixedClock::new(5)),
    )
}

fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn nested(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 1..levels {
        v = json!({ "a": v });
    }
    v
}

#[test]
fn the_writer_refuses_what_its_reader_could_not_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path());
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(EventDraft::new("turn/start", json!({}))).unwrap();
    for bad in [
        EventDraft::new("turn/start", nested(MAX_DATA_DEPTH + 1)),
        EventDraft::new("plugin/unknown", json!({})),
        EventDraft::ignorable("", json!({})),
        EventDraft::ignorable("a\nb", json!({})),
    ] {
        let err = w.append(bad).unwrap_err();
        assert_eq!(err.code(), "JOURNAL_INVALID_EVENT", "{err}");
    }
    // A refused batch appends nothing, not even its valid part.
    let err = w
        .append_batch(vec![
            EventDraft::new("turn/end", json!({})),
            EventDraft::new("plugin/unknown", json!({})),
        ])
        .unwrap_err();
    assert_eq!(err.code(), "JOURNAL_INVALID_EVENT");
    assert_eq!(w.next_seq(), Seq(1));
    // The deepest accepted payload and an unknown ignorable type round-trip.
    w.append(EventDraft::new("turn/end", nested(MAX_DATA_DEPTH)))
        .unwrap();
    w.append(EventDraft::ignorable("plugin/unknown", json!({"x": 1})))
        .unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    let replay = journal.read(&id("s")).unwrap();
    assert_eq!(replay.events.len(), 3);
    assert!(replay.torn_tail.is_none());
    assert_eq!(replay.skipped, vec![Seq(2)]);
}

#[test]
fn headers_are_read_with_bounded_memory_and_only_from_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.jsonl");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(read_header(&fifo).unwrap_err().code(), "JOURNAL_NOT_A_FILE");
    assert_eq!(read_path(&fifo).unwrap_err().code(), "JOURNAL_NOT_A_FILE");

    let long = dir.path().join("long.jsonl");
    std::fs::write(&long, "x".repeat(200_000)).unwrap();
    let err = read_header(&long).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_CORRUPT");
    assert!(err.to_string().contains("longer than 65536 bytes"), "{err}");

    let array = dir.path().join("array.jsonl");
    std::fs::write(&array, "[1,2]\n").unwrap();
    assert!(
        read_header(&array)
            .unwrap_err()
            .to_string()
            .contains("not a JSON object")
    );
}

#[test]
fn listing_skips_fifos_and_files_whose_header_names_another_session() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path());
    let w = journal.create(SessionHeader::new(id("real"), 0)).unwrap();
    w.append(EventDraft::new("turn/start", json!({}))).unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    std::fs::copy(dir.path().join("real.jsonl"), dir.path().join("copy.jsonl")).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe.jsonl"))
            .status()
            .unwrap()
            .success()
    );
    let mut errors = Vec::new();
    let listed = journal.list(&mut |e| errors.push(e.code())).unwrap();
    let ids: Vec<String> = listed.iter().map(|l| l.header.id.to_string()).collect();
    assert_eq!(ids, ["real"]);
    errors.sort_unstable();
    assert_eq!(errors, ["JOURNAL_CORRUPT", "JOURNAL_NOT_A_FILE"]);
}

#[test]
fn a_fresh_nested_home_is_created_on_the_first_flush() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("a/b/home");
    let journal = Journal::open_home(&home);
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(EventDraft::new("turn/start", json!({}))).unwrap();
    w.flush_blocking().unwrap();
    assert!(home.join("sessions/s.jsonl").is_file());
}

#[test]
fn staging_files_of_dead_creators_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join(".s.4000000000.abc.tmp");
    let ours = dir
        .path()
        .join(format!(".s.{}.keep.tmp", std::process::id()));
    let other_session = dir.path().join(".t.4000000000.abc.tmp");
    for p in [&dead, &ours, &other_session] {
        std::fs::write(p, "partial").unwrap();
    }
    let journal = journal_at(dir.path());
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(EventDraft::new("turn/start", json!({}))).unwrap();
    w.flush_blocking().unwrap();
    assert!(!dead.exists(), "a dead creator's staging file is removed");
    assert!(ours.exists(), "a live process's staging file is kept");
    assert!(
        !other_session.exists(),
        "a dead creator's staging file of another session is removed too"
    );
}

/// Issue 10 (defect 6): a crash during a creation leaves its staging file; the next process
/// that opens a session of the home for writing (a resume) removes it, whichever session it
/// was for (ids with dots included).
#[test]
fn opening_a_session_for_writing_sweeps_staging_files_a_crash_left() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path());
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(EventDraft::new("turn/start", json!({}))).unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    let dead = dir.path().join(".child.v2.4000000000.1a2b3c.tmp");
    let live = dir
        .path()
        .join(format!(".other.{}.9.tmp", std::process::id()));
    let unrelated = dir.path().join(".notes.tmp");
    for p in [&dead, &live, &unrelated] {
        std::fs::write(p, "partial").unwrap();
    }
    let (_writer, _) = journal.open(&id("s")).unwrap();
    assert!(!dead.exists(), "the crash's staging file is removed");
    assert!(live.exists(), "a live creator's staging file is kept");
    assert!(
        unrelated.exists(),
        "a file of another form is never touched"
    );
}

#[test]
fn streaming_reads_see_the_same_events_as_whole_reads() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path());
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    for n in 0..100 {
        w.append(EventDraft::new("assistant/chunk", json!({"n": n})))
            .unwrap();
    }
    w.flush_blocking().unwrap();
    let whole = journal.read(&id("s")).unwrap();
    let mut streamed = Vec::new();
    let summary = journal
        .read_each(&id("s"), &mut |e| streamed.push(e))
        .unwrap();
    assert_eq!(streamed, whole.events);
    assert_eq!(summary.next_seq, Seq(100));
    assert_eq!(summary.valid_len, whole.valid_len);
}

#[test]
fn io_errors_do_not_repeat_the_os_message_in_error_chains() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("afile");
    std::fs::write(&file, "").unwrap();
    let journal = Journal::open_home(&file);
    let err = journal.list(&mut |_| {}).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_IO");
    assert!(std::error::Error::source(&err).is_none());
    let text = err.to_string();
    assert_eq!(text.matches("Not a directory").count(), 1, "{text}");
}
