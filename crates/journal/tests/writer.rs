//! The writer actor and the JSONL backend: durability, group commit, poisoning, locking, fork.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use serde_json::json;
use troupe_journal::{FaultHook, Journal, JsonlBackend, LogBackend, read_path};
use troupe_protocol::{
    ErrorCode, Event, EventDraft, FixedClock, Seq, SessionHeader, SessionId, event_types,
};

fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn journal_at(dir: &Path, faults: Option<Arc<dyn FaultHook>>) -> Journal {
    let mut backend = JsonlBackend::new(dir);
    if let Some(f) = faults {
        backend = backend.with_faults(f);
    }
    Journal::with_backend(Arc::new(backend), Arc::new(FixedClock::new(1_000)))
}

fn chunk(n: u64) -> EventDraft {
    EventDraft::new(event_types::ASSISTANT_CHUNK, json!({"n": n}))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn append_is_in_memory_and_flush_makes_it_durable() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let w = journal
        .create(SessionHeader::new(id("s1"), 5).with_cwd("/w"))
        .unwrap();
    let e0 = w.append(chunk(0)).unwrap();
    let e1 = w.append(chunk(1)).unwrap();
    assert_eq!((e0.seq, e0.time, e1.seq), (Seq(0), 1_000, Seq(1)));
    // Nothing on disk before the first flush (lazy materialisation).
    assert!(!dir.path().join("s1.jsonl").exists());
    assert_eq!(w.durable_seq(), Seq(0));
    assert_eq!(w.flush_blocking().unwrap(), Seq(2));
    assert_eq!(w.durable_seq(), Seq(2));
    // Another reader sees the flushed events while the writer still holds the file.
    let replay = journal.read(&id("s1")).unwrap();
    assert_eq!(replay.events, vec![e0, e1]);
    assert_eq!(replay.header.cwd.as_deref(), Some("/w"));
    // No staging files are left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["s1.jsonl".to_owned()]);
}

#[test]
fn a_never_appended_session_leaves_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let w = journal.create(SessionHeader::new(id("empty"), 0)).unwrap();
    assert_eq!(w.flush_blocking().unwrap(), Seq(0));
    drop(w);
    assert_eq!(
        std::fs::read_dir(dir.path())
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
}

#[test]
fn dropping_the_last_handle_writes_pending_events_and_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    w.append(chunk(1)).unwrap();
    drop(w);
    let (w2, replay) = journal.open(&id("s")).unwrap();
    assert_eq!(replay.events.len(), 2);
    assert_eq!(w2.next_seq(), Seq(2));
}

#[test]
fn abandon_loses_only_unflushed_events() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    w.append(chunk(1)).unwrap();
    w.abandon();
    assert_eq!(journal.read(&id("s")).unwrap().events.len(), 1);
}

#[test]
fn creating_an_existing_session_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    let err = journal.create(SessionHeader::new(id("s"), 0)).unwrap_err();
    assert_eq!(err.code(), "SESSION_ALREADY_EXISTS");
}

#[test]
fn a_concurrent_creator_of_the_same_id_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    // Both pass the early existence check; publication decides.
    let a = journal.create(SessionHeader::new(id("s"), 1)).unwrap();
    let b = journal.create(SessionHeader::new(id("s"), 2)).unwrap();
    a.append(chunk(10)).unwrap();
    b.append(chunk(20)).unwrap();
    a.flush_blocking().unwrap();
    let before = std::fs::read(dir.path().join("s.jsonl")).unwrap();
    let err = b.flush_blocking().unwrap_err();
    assert_eq!(err.code(), "JOURNAL_POISONED");
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("s.jsonl")).unwrap(), before);
    assert_eq!(journal.read(&id("s")).unwrap().header.created_at, 1);
}

#[test]
fn a_second_writer_gets_journal_locked_and_readers_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    let err = journal.open(&id("s")).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_LOCKED");
    assert!(err.to_string().contains("s.jsonl"), "{err}");
    assert_eq!(journal.read(&id("s")).unwrap().events.len(), 1);
    drop(w);
    assert!(journal.open(&id("s")).is_ok());
}

#[test]
fn missing_sessions_and_directories_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    assert_eq!(
        journal.read(&id("nope")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(
        journal.open(&id("nope")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    std::fs::create_dir(dir.path().join("d.jsonl")).unwrap();
    assert_eq!(
        journal.read(&id("d")).unwrap_err().code(),
        "JOURNAL_NOT_A_FILE"
    );
    assert_eq!(
        journal.open(&id("d")).unwrap_err().code(),
        "JOURNAL_NOT_A_FILE"
    );
    assert_eq!(
        read_path(&dir.path().join("d.jsonl")).unwrap_err().code(),
        "JOURNAL_NOT_A_FILE"
    );
}

#[test]
fn backend_append_checks_the_expected_seq() {
    let dir = tempfile::tempdir().unwrap();
    let backend = JsonlBackend::new(dir.path());
    let mut sink = backend.create(SessionHeader::new(id("s"), 0)).unwrap();
    let e = |seq| EventDraft::new("turn/start", json!({})).into_event(Seq(seq), 0);
    sink.append(Seq(0), &[e(0), e(1)]).unwrap();
    let err = sink.append(Seq(1), &[e(1)]).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_SEQ_CONFLICT");
    let err = sink.append(Seq(2), &[e(3)]).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_INVALID_BATCH");
    sink.append(Seq(2), &[e(2)]).unwrap();
    assert_eq!(sink.next_seq(), Seq(3));
    assert_eq!(backend.read(&id("s")).unwrap().events.len(), 3);
}

/// Blocks the `gate_at`-th sync (0-based) until released, and counts syncs.
#[derive(Debug)]
struct Gate {
    syncs: AtomicUsize,
    gate_at: usize,
    entered: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl FaultHook for Gate {
    fn fail_sync(&self) -> bool {
        if self.syncs.fetch_add(1, Ordering::SeqCst) == self.gate_at {
            self.entered.lock().unwrap().send(()).unwrap();
            self.release.lock().unwrap().recv().unwrap();
        }
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_flushes_share_one_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        syncs: AtomicUsize::new(0),
        gate_at: 1,
        entered: Mutex::new(entered_tx),
        release: Mutex::new(release_rx),
    });
    let journal = journal_at(dir.path(), Some(gate.clone()));
    let w = journal.create(SessionHeader::new(id("g"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush().await.unwrap(); // sync #0: publication
    assert_eq!(w.stats().rounds, 1);

    w.append(chunk(1)).unwrap();
    let first = tokio::spawn({
        let w = w.clone();
        async move { w.flush().await }
    });
    // The actor is now inside sync #1; everything below must wait for it.
    tokio::task::spawn_blocking(move || entered_rx.recv().unwrap())
        .await
        .unwrap();
    let mut group = Vec::new();
    for n in 2..17 {
        w.append(chunk(n)).unwrap();
        let w = w.clone();
        group.push(tokio::spawn(async move { w.flush().await }));
    }
    while w.stats().waiting_flushes < 15 {
        tokio::task::yield_now().await;
    }
    release_tx.send(()).unwrap();
    assert_eq!(first.await.unwrap().unwrap(), Seq(2));
    for flush in group {
        assert_eq!(flush.await.unwrap().unwrap(), Seq(17));
    }
    // 1 publication + 1 round for the first flush + 1 round for the 15 concurrent flushes.
    assert_eq!(w.stats().rounds, 3);
    assert_eq!(gate.syncs.load(Ordering::SeqCst), 3);
    assert_eq!(journal.read(&id("g")).unwrap().events.len(), 17);
}

#[tokio::test]
async fn durable_watch_only_moves_after_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let w = journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    let mut rx = w.subscribe_durable();
    w.append(chunk(0)).unwrap();
    assert_eq!(*rx.borrow_and_update(), Seq(0));
    w.flush().await.unwrap();
    rx.changed().await.unwrap();
    assert_eq!(*rx.borrow(), Seq(1));
}

/// Fails the `n`-th sync, or cuts the `n`-th write short (both 0-based, counted separately).
#[derive(Debug, Default)]
struct FailAt {
    syncs: AtomicUsize,
    writes: AtomicUsize,
    fail_sync: Option<usize>,
    short_write: Option<(usize, usize)>,
}

impl FaultHook for FailAt {
    fn short_write(&self, len: usize) -> Option<usize> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        match self.short_write {
            Some((at, keep)) if at == n => Some(keep.min(len - 1)),
            _ => None,
        }
    }
    fn fail_sync(&self) -> bool {
        Some(self.syncs.fetch_add(1, Ordering::SeqCst)) == self.fail_sync
    }
}

fn poisoned_after(fault: FailAt) {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), Some(Arc::new(fault)));
    let path = dir.path().join("p.jsonl");
    let w = journal.create(SessionHeader::new(id("p"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    let durable_len = file_len(&path);
    let durable_bytes = std::fs::read(&path).unwrap();

    w.append(chunk(1)).unwrap();
    w.append(chunk(2)).unwrap();
    let err = w.flush_blocking().unwrap_err();
    assert_eq!(err.code(), "JOURNAL_POISONED");
    assert!(err.to_string().contains("injected fault"), "{err}");
    // Rolled back to the last durable length: no partial batch is left behind.
    assert_eq!(file_len(&path), durable_len);
    assert_eq!(std::fs::read(&path).unwrap(), durable_bytes);
    // No silent retry: every later append and flush fails.
    assert_eq!(w.append(chunk(3)).unwrap_err().code(), "JOURNAL_POISONED");
    assert_eq!(w.flush_blocking().unwrap_err().code(), "JOURNAL_POISONED");
    drop(w);
    let replay = journal.read(&id("p")).unwrap();
    assert_eq!(replay.events.len(), 1);
    assert!(replay.torn_tail.is_none());
}

#[test]
fn a_failed_fsync_poisons_the_writer_and_rolls_back() {
    poisoned_after(FailAt {
        fail_sync: Some(1),
        ..FailAt::default()
    });
}

#[test]
fn a_short_write_poisons_the_writer_and_rolls_back() {
    poisoned_after(FailAt {
        short_write: Some((1, 30)),
        ..FailAt::default()
    });
}

#[test]
fn a_failed_first_flush_publishes_nothing() {
    for fault in [
        FailAt {
            fail_sync: Some(0),
            ..FailAt::default()
        },
        FailAt {
            short_write: Some((0, 10)),
            ..FailAt::default()
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal_at(dir.path(), Some(Arc::new(fault)));
        let w = journal.create(SessionHeader::new(id("p"), 0)).unwrap();
        w.append(chunk(0)).unwrap();
        assert_eq!(w.flush_blocking().unwrap_err().code(), "JOURNAL_POISONED");
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}

fn two_turns(journal: &Journal, name: &str) -> Vec<Event> {
    let w = journal
        .create(SessionHeader::new(id(name), 0).with_cwd("/proj"))
        .unwrap();
    let mut out = Vec::new();
    for turn in 0..2 {
        out.push(
            w.append(EventDraft::new("turn/start", json!({"turn": turn})))
                .unwrap(),
        );
        out.push(w.append(chunk(turn)).unwrap());
        out.push(
            w.append(EventDraft::new("turn/end", json!({"turn": turn})))
                .unwrap(),
        );
    }
    out.push(
        w.append(EventDraft::new("turn/start", json!({"turn": 2})))
            .unwrap(),
    );
    w.flush_blocking().unwrap();
    out
}

#[test]
fn fork_seeds_a_completed_prefix_and_marks_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let source = two_turns(&journal, "src");

    let fork = journal.fork(&id("src"), Some(Seq(2)), id("child")).unwrap();
    assert_eq!(fork.next_seq(), Seq(4));
    fork.flush_blocking().unwrap();
    let replay = journal.read(&id("child")).unwrap();
    assert_eq!(replay.header.parent_session, Some(id("src")));
    assert_eq!(replay.header.seed_length, Some(3));
    assert_eq!(replay.header.cwd.as_deref(), Some("/proj"));
    assert_eq!(&replay.events[..3], &source[..3]);
    assert_eq!(replay.events[3].kind, "session/end-seed");
    assert_eq!(replay.own_suffix().len(), 1);

    // Default boundary: the whole log, which here ends inside an open turn.
    let err = journal.fork(&id("src"), None, id("c2")).unwrap_err();
    assert_eq!(err.code(), "OPEN_TURN");
    let err = journal
        .fork(&id("src"), Some(Seq(3)), id("c2"))
        .unwrap_err();
    assert_eq!(err.code(), "OPEN_TURN");
    let err = journal
        .fork(&id("src"), Some(Seq(7)), id("c2"))
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_BOUNDARY");
    let err = journal.fork(&id("nope"), None, id("c2")).unwrap_err();
    assert_eq!(err.code(), "SESSION_NOT_FOUND");
    let err = journal
        .fork(&id("src"), Some(Seq(2)), id("child"))
        .unwrap_err();
    assert_eq!(err.code(), "SESSION_ALREADY_EXISTS");
    // Nothing was written for the refused forks.
    assert!(!dir.path().join("c2.jsonl").exists());
}

#[test]
fn listing_is_oldest_first_and_reports_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    for (name, created) in [("b", 2), ("a", 3), ("c", 1)] {
        let w = journal
            .create(SessionHeader::new(id(name), created))
            .unwrap();
        w.append(chunk(0)).unwrap();
        w.flush_blocking().unwrap();
    }
    std::fs::write(dir.path().join("bad.jsonl"), "not json\n").unwrap();
    let mut errors = Vec::new();
    let listed = journal.list(&mut |e| errors.push(e.code())).unwrap();
    let ids: Vec<_> = listed.iter().map(|l| l.header.id.to_string()).collect();
    assert_eq!(ids, ["c", "b", "a"]);
    assert_eq!(errors, ["JOURNAL_CORRUPT"]);
}

#[tokio::test]
async fn close_flushes_and_releases_the_file_while_clones_remain() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_at(dir.path(), None);
    let w = journal.create(SessionHeader::new(id("c"), 0)).unwrap();
    let clone = w.clone();
    w.append(chunk(0)).unwrap();
    assert_eq!(w.close().await.unwrap(), Seq(1));
    assert_eq!(w.close().await.unwrap(), Seq(1), "closing twice is a no-op");
    // The lock is gone although `clone` is still alive.
    let (reopened, replay) = journal.open(&id("c")).unwrap();
    assert_eq!(replay.events.len(), 1);
    assert_eq!(clone.append(chunk(1)).unwrap_err().code(), "JOURNAL_CLOSED");
    assert_eq!(clone.flush().await.unwrap_err().code(), "JOURNAL_CLOSED");
    drop(reopened);
}
