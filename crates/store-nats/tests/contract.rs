//! The journal's contract, one suite on both stores (DESIGN decision 8): every test runs on
//! the JSONL files (`<test>::files`) and on a real NATS JetStream server (`<test>::nats`):
//! durability through the writer, creation, locking, conflicts, fork, listing, replay of every
//! committed fixture, batch atomicity at every cut, repair on open, and following.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod support;

use std::path::Path;

use serde_json::json;
use support::Fixture;
use troupe_journal::{JournalError, Replay, ScanPosition, scan};
use troupe_protocol::{ErrorCode, Event, EventDraft, Seq, SessionHeader, SessionId, event_types};

fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn chunk(n: u64) -> EventDraft {
    EventDraft::new(event_types::ASSISTANT_CHUNK, json!({"n": n}))
}

both!(
    append_is_in_memory_and_flush_makes_it_durable,
    a_never_appended_session_leaves_nothing,
    dropping_the_last_handle_writes_pending_events_and_releases_the_session,
    abandon_loses_only_unflushed_events,
    creating_an_existing_session_is_refused,
    a_concurrent_creator_of_the_same_id_never_overwrites,
    a_second_writer_is_refused_and_readers_still_read,
    missing_sessions_are_not_found,
    backend_append_checks_the_expected_seq,
    fork_seeds_a_completed_prefix_and_marks_its_end,
    a_long_fork_seed_is_stored_whole,
    listing_is_oldest_first_and_reports_bad_entries,
    close_flushes_and_releases_while_clones_remain,
    every_fixture_reads_as_its_file_does,
    every_cut_of_a_real_log_replays_as_a_whole_batch_prefix,
    opening_a_cut_log_drops_only_the_unfinished_batch_and_goes_on,
    committed_corruption_is_refused_with_the_files_line_and_offset,
    a_follower_reads_only_what_was_appended_and_never_part_of_a_batch,
    concurrent_flushes_share_rounds,
    an_image_is_the_valid_prefix_byte_for_byte_and_the_header_is_line_one,
    an_imported_image_reads_back_byte_for_byte_and_never_overwrites,
);

fn append_is_in_memory_and_flush_makes_it_durable(f: Fixture) {
    let w = f
        .journal
        .create(SessionHeader::new(id("s1"), 5).with_cwd("/w"))
        .unwrap();
    let e0 = w.append(chunk(0)).unwrap();
    let e1 = w.append(chunk(1)).unwrap();
    assert_eq!((e0.seq, e0.time, e1.seq), (Seq(0), 1_000, Seq(1)));
    // Nothing stored before the first flush.
    assert_eq!(
        f.journal.read(&id("s1")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(w.durable_seq(), Seq(0));
    assert_eq!(w.flush_blocking().unwrap(), Seq(2));
    // Another reader sees the flushed events while the writer still holds the session.
    let replay = f.journal.read(&id("s1")).unwrap();
    assert_eq!(replay.events, vec![e0, e1]);
    assert_eq!(replay.header.cwd.as_deref(), Some("/w"));
    assert!(replay.torn_tail.is_none());
    // The stored lines are the JSONL lines.
    let lines = f.raw_lines("s1");
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1], serde_json::to_vec(&replay.events[0]).unwrap());
}

fn a_never_appended_session_leaves_nothing(f: Fixture) {
    let w = f
        .journal
        .create(SessionHeader::new(id("empty"), 0))
        .unwrap();
    assert_eq!(w.flush_blocking().unwrap(), Seq(0));
    drop(w);
    assert!(f.journal.list(&mut |e| panic!("{e}")).unwrap().is_empty());
    assert_eq!(
        f.journal.read(&id("empty")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
}

fn dropping_the_last_handle_writes_pending_events_and_releases_the_session(f: Fixture) {
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    w.append(chunk(1)).unwrap();
    drop(w);
    let (w2, replay) = f.journal.open(&id("s")).unwrap();
    assert_eq!(replay.events.len(), 2);
    assert_eq!(w2.next_seq(), Seq(2));
    w2.append(chunk(2)).unwrap();
    w2.flush_blocking().unwrap();
    drop(w2);
    assert_eq!(f.journal.read(&id("s")).unwrap().events.len(), 3);
}

fn abandon_loses_only_unflushed_events(f: Fixture) {
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    w.append(chunk(1)).unwrap();
    w.abandon();
    assert_eq!(f.journal.read(&id("s")).unwrap().events.len(), 1);
}

fn creating_an_existing_session_is_refused(f: Fixture) {
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    let err = f
        .journal
        .create(SessionHeader::new(id("s"), 0))
        .unwrap_err();
    assert_eq!(err.code(), "SESSION_ALREADY_EXISTS");
}

fn a_concurrent_creator_of_the_same_id_never_overwrites(f: Fixture) {
    // Both pass the early existence check; the first append decides.
    let other = f.reconnect();
    let a = f.journal.create(SessionHeader::new(id("s"), 1)).unwrap();
    let b = other.create(SessionHeader::new(id("s"), 2)).unwrap();
    a.append(chunk(10)).unwrap();
    b.append(chunk(20)).unwrap();
    a.flush_blocking().unwrap();
    let before = f.raw_lines("s");
    let err = b.flush_blocking().unwrap_err();
    assert_eq!(err.code(), "JOURNAL_POISONED");
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(f.raw_lines("s"), before);
    assert_eq!(f.journal.read(&id("s")).unwrap().header.created_at, 1);
}

fn a_second_writer_is_refused_and_readers_still_read(f: Fixture) {
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    let other = f.reconnect();
    let err = other.open(&id("s")).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_LOCKED");
    if f.is_nats() {
        // The holder is named: this host and this process.
        let pid = format!("pid {}", std::process::id());
        assert!(err.to_string().contains(&pid), "{err}");
        assert!(err.to_string().contains("nats://127.0.0.1:"), "{err}");
    } else {
        assert!(err.to_string().contains("s.jsonl"), "{err}");
    }
    assert_eq!(other.read(&id("s")).unwrap().events.len(), 1);
    drop(w);
    let (w, _) = other.open(&id("s")).unwrap();
    drop(w);
}

fn missing_sessions_are_not_found(f: Fixture) {
    assert_eq!(
        f.journal.read(&id("nope")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(
        f.journal.open(&id("nope")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(
        f.journal
            .read_each_from(
                &id("nope"),
                ScanPosition {
                    offset: 0,
                    next_seq: Seq::ZERO
                },
                &mut |_| {}
            )
            .unwrap_err()
            .code(),
        "SESSION_NOT_FOUND"
    );
    // A refused open leaves the session free: it can be created.
    let w = f.journal.create(SessionHeader::new(id("nope"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
}

fn backend_append_checks_the_expected_seq(f: Fixture) {
    let mut sink = f.backend.create(SessionHeader::new(id("s"), 0)).unwrap();
    let e = |seq| EventDraft::new("turn/start", json!({})).into_event(Seq(seq), 0);
    sink.append(Seq(0), &[e(0), e(1)]).unwrap();
    let err = sink.append(Seq(1), &[e(1)]).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_SEQ_CONFLICT");
    let err = sink.append(Seq(2), &[e(3)]).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_INVALID_BATCH");
    sink.append(Seq(2), &[e(2)]).unwrap();
    assert_eq!(sink.next_seq(), Seq(3));
    assert_eq!(f.backend.read(&id("s")).unwrap().events.len(), 3);
}

fn two_turns(f: &Fixture, name: &str) -> Vec<Event> {
    let w = f
        .journal
        .create(SessionHeader::new(id(name), 0).with_cwd("/proj"))
        .unwrap();
    let mut out = Vec::new();
    for turn in 0..2 {
        out.extend(
            w.append_batch(vec![
                EventDraft::new("turn/start", json!({"turn": turn})),
                chunk(turn),
            ])
            .unwrap(),
        );
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

fn fork_seeds_a_completed_prefix_and_marks_its_end(f: Fixture) {
    let source = two_turns(&f, "src");
    let fork = f
        .journal
        .fork(&id("src"), Some(Seq(2)), id("child"))
        .unwrap();
    assert_eq!(fork.next_seq(), Seq(4));
    fork.flush_blocking().unwrap();
    let replay = f.journal.read(&id("child")).unwrap();
    assert_eq!(replay.header.parent_session, Some(id("src")));
    assert_eq!(replay.header.seed_length, Some(3));
    assert_eq!(replay.header.cwd.as_deref(), Some("/proj"));
    // The seed is stored without the source's batch framing.
    assert_eq!(replay.events[0].batch_last, None);
    assert_eq!(replay.events[1..3], source[1..3]);
    assert_eq!(replay.events[3].kind, "session/end-seed");
    for (code, boundary, new) in [
        ("OPEN_TURN", None, "c2"),
        ("OPEN_TURN", Some(Seq(3)), "c2"),
        ("INVALID_BOUNDARY", Some(Seq(7)), "c2"),
        ("SESSION_ALREADY_EXISTS", Some(Seq(2)), "child"),
    ] {
        let err = f.journal.fork(&id("src"), boundary, id(new)).unwrap_err();
        assert_eq!(err.code(), code);
    }
    assert_eq!(
        f.journal
            .fork(&id("nope"), None, id("c2"))
            .unwrap_err()
            .code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(
        f.journal.read(&id("c2")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
}

fn a_long_fork_seed_is_stored_whole(f: Fixture) {
    // More events than one atomic batch may hold on NATS (1000): the first append is cut
    // into several publishes and still appears whole.
    let w = f.journal.create(SessionHeader::new(id("long"), 0)).unwrap();
    for n in 0..1500 {
        w.append(chunk(n)).unwrap();
    }
    w.flush_blocking().unwrap();
    drop(w);
    let fork = f.journal.fork(&id("long"), None, id("copy")).unwrap();
    assert_eq!(fork.flush_blocking().unwrap(), Seq(1501));
    drop(fork);
    let replay = f.journal.read(&id("copy")).unwrap();
    assert_eq!(replay.events.len(), 1501);
    assert_eq!(replay.header.seed_length, Some(1500));
}

fn listing_is_oldest_first_and_reports_bad_entries(f: Fixture) {
    for (name, created) in [("b", 2), ("a", 3), ("c", 1)] {
        let w = f
            .journal
            .create(SessionHeader::new(id(name), created))
            .unwrap();
        w.append(chunk(0)).unwrap();
        w.flush_blocking().unwrap();
    }
    f.put_raw("bad", &[b"not json".to_vec()]);
    let mut errors = Vec::new();
    let listed = f.journal.list(&mut |e| errors.push(e.code())).unwrap();
    let ids: Vec<_> = listed.iter().map(|l| l.header.id.to_string()).collect();
    assert_eq!(ids, ["c", "b", "a"]);
    assert_eq!(errors, ["JOURNAL_CORRUPT"]);
}

fn close_flushes_and_releases_while_clones_remain(f: Fixture) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let w = f.journal.create(SessionHeader::new(id("c"), 0)).unwrap();
    let clone = w.clone();
    w.append(chunk(0)).unwrap();
    rt.block_on(async {
        assert_eq!(w.close().await.unwrap(), Seq(1));
        assert_eq!(w.close().await.unwrap(), Seq(1), "closing twice is a no-op");
    });
    let (reopened, replay) = f.journal.open(&id("c")).unwrap();
    assert_eq!(replay.events.len(), 1);
    assert_eq!(clone.append(chunk(1)).unwrap_err().code(), "JOURNAL_CLOSED");
    drop(reopened);
}

/// What reading gives, comparable across stores.
#[derive(Debug, PartialEq)]
enum Outcome {
    Loaded {
        events: usize,
        skipped: Vec<u64>,
        torn: Option<(u64, u64)>,
        valid_len: u64,
    },
    Refused {
        code: &'static str,
        at: Option<(u64, u64)>,
    },
}

fn outcome(result: Result<Replay, JournalError>) -> Outcome {
    match result {
        Ok(r) => Outcome::Loaded {
            events: r.events.len(),
            skipped: r.skipped.iter().map(|s| s.0).collect(),
            torn: r.torn_tail.map(|t| (t.offset, t.line)),
            valid_len: r.valid_len,
        },
        Err(e) => Outcome::Refused {
            code: e.code(),
            at: match &e {
                JournalError::Corrupt { line, offset, .. } => Some((*line, *offset)),
                _ => None,
            },
        },
    }
}

fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|b| *b == b'\n')
        .filter(|l| l.ends_with(b"\n"))
        .map(|l| l[..l.len() - 1].to_vec())
        .collect()
}

fn every_fixture_reads_as_its_file_does(f: Fixture) {
    // Each committed fixture's complete lines (a store of whole messages cannot hold a line
    // without its newline), stored as a session and read back, give exactly what the file
    // scan of the same bytes gives: events, skipped, torn tail, or the error's line and offset.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../journal/tests/fixtures");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(names.len() >= 15, "{names:?}");
    for (n, name) in names.iter().enumerate() {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let lines = split_lines(&bytes);
        if lines.is_empty() {
            continue;
        }
        // Each fixture gets a session of its own (several fixtures share an id).
        let header_id = format!("fixture{n}");
        let mut lines = lines;
        if let Ok(mut header) = serde_json::from_slice::<serde_json::Value>(&lines[0])
            && header.get("id").is_some()
        {
            header["id"] = json!(header_id);
            lines[0] = serde_json::to_vec(&header).unwrap();
        }
        let joined: Vec<u8> = lines
            .iter()
            .flat_map(|l| [&l[..], b"\n"].concat())
            .collect();
        let expected = outcome(scan(Path::new(name), &joined));
        let sid = id(&header_id);
        f.put_raw(&header_id, &lines);
        assert_eq!(outcome(f.journal.read(&sid)), expected, "{name}");
        let mut count = 0;
        let streamed = f.journal.read_each(&sid, &mut |_| count += 1);
        match (&expected, streamed) {
            (Outcome::Loaded { events, .. }, Ok(_)) => assert_eq!(count, *events, "{name}"),
            (Outcome::Refused { code, .. }, Err(e)) => assert_eq!(e.code(), *code, "{name}"),
            (expected, got) => panic!("{name}: {expected:?} vs {got:?}"),
        }
    }
}

/// Batch sizes of the log written below, in order.
const BATCHES: &[usize] = &[1, 3, 1, 2, 5, 1, 1, 4];

/// A real log written through the writer (one flush per batch) on the files: its lines.
fn written_lines() -> Vec<Vec<u8>> {
    let f = Fixture::files();
    let w = f
        .journal
        .create(SessionHeader::new(id("cut"), 1_764_000_000_000))
        .unwrap();
    let mut n = 0;
    for &size in BATCHES {
        let drafts = (0..size)
            .map(|i| {
                n += 1;
                let kind = if i % 2 == 0 {
                    "team/task"
                } else {
                    "user/message"
                };
                EventDraft::new(kind, json!({"n": n, "text": "x".repeat(n * 7)}))
            })
            .collect();
        w.append_batch(drafts).unwrap();
        w.flush_blocking().unwrap();
    }
    drop(w);
    f.raw_lines("cut")
}

/// Events in the batches wholly inside the first `k` event lines.
fn whole_batch_events(k: usize) -> usize {
    let mut sum = 0;
    for &size in BATCHES {
        if sum + size > k {
            break;
        }
        sum += size;
    }
    sum
}

fn every_cut_of_a_real_log_replays_as_a_whole_batch_prefix(f: Fixture) {
    let lines = written_lines();
    for k in 0..lines.len() {
        let name = format!("cut{k}");
        let mut cut = lines[..=k].to_vec();
        // The header names the session.
        let mut header: serde_json::Value = serde_json::from_slice(&cut[0]).unwrap();
        header["id"] = json!(name);
        cut[0] = serde_json::to_vec(&header).unwrap();
        f.put_raw(&name, &cut);
        let replay = f.journal.read(&id(&name)).unwrap();
        assert_eq!(
            replay.events.len(),
            whole_batch_events(k),
            "cut after {k} events"
        );
        assert_eq!(
            replay.torn_tail.is_some(),
            replay.events.len() < k,
            "cut after {k} events"
        );
        // The selective scan agrees.
        let mut selected = 0;
        let summary = f
            .journal
            .read_selected_each(
                &id(&name),
                troupe_journal::LineCheck::Prefix,
                &|kind| kind.starts_with("team/"),
                &mut |_| {
                    selected += 1;
                    troupe_journal::LineUse::Used
                },
            )
            .unwrap();
        assert_eq!(summary.next_seq, replay.next_seq());
        assert_eq!(
            selected,
            replay
                .events
                .iter()
                .filter(|e| e.kind.starts_with("team/"))
                .count()
        );
    }
}

fn opening_a_cut_log_drops_only_the_unfinished_batch_and_goes_on(f: Fixture) {
    let lines = written_lines();
    let total: usize = BATCHES.iter().sum();
    let last = *BATCHES.last().unwrap();
    // Cut inside the last batch after each of its lines but the last.
    for keep in 1..last {
        let k = total - last + keep;
        let name = format!("open{keep}");
        let mut cut = lines[..=k].to_vec();
        let mut header: serde_json::Value = serde_json::from_slice(&cut[0]).unwrap();
        header["id"] = json!(name);
        cut[0] = serde_json::to_vec(&header).unwrap();
        f.put_raw(&name, &cut);
        let (writer, replay) = f.journal.open(&id(&name)).unwrap();
        assert_eq!(replay.events.len(), total - last, "keep {keep}");
        assert!(replay.torn_tail.is_some());
        writer
            .append_batch(vec![
                EventDraft::new("turn/start", json!({"turn": 1})),
                EventDraft::new("turn/end", json!({"turn": 1})),
            ])
            .unwrap();
        writer.flush_blocking().unwrap();
        drop(writer);
        let replay = f.journal.read(&id(&name)).unwrap();
        assert!(replay.torn_tail.is_none(), "keep {keep}");
        assert_eq!(replay.events.len(), total - last + 2);
        assert_eq!(
            replay.events[total - last].batch_last,
            Some(Seq((total - last + 1) as u64))
        );
        // The unfinished batch is gone from the store itself.
        assert_eq!(f.raw_lines(&name).len(), 1 + total - last + 2);
    }
}

fn committed_corruption_is_refused_with_the_files_line_and_offset(f: Fixture) {
    let lines = written_lines();
    let mut damaged = lines[..6].to_vec();
    damaged[3] = b"{\"seq\":2,\"time\":1,\"type\":\"team/task\",\"data\":".to_vec();
    let joined: Vec<u8> = damaged
        .iter()
        .flat_map(|l| [&l[..], b"\n"].concat())
        .collect();
    let expected = outcome(scan(Path::new("x"), &joined));
    assert!(matches!(
        expected,
        Outcome::Refused {
            code: "JOURNAL_CORRUPT",
            at: Some((4, _))
        }
    ));
    f.put_raw("cut", &damaged);
    assert_eq!(outcome(f.journal.read(&id("cut"))), expected);
    let err = f.journal.open(&id("cut")).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_CORRUPT");
    // Refusing changed nothing.
    assert_eq!(f.raw_lines("cut"), damaged);
}

fn a_follower_reads_only_what_was_appended_and_never_part_of_a_batch(f: Fixture) {
    let writer = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    writer
        .append(EventDraft::new("turn/start", json!({"turn": 1})))
        .unwrap();
    writer.flush_blocking().unwrap();
    let follower = f.reconnect();
    let mut at = follower
        .read_each(&id("s"), &mut |_| {})
        .unwrap()
        .position();
    assert_eq!(at.next_seq, Seq(1));
    let read = |at: &mut ScanPosition| {
        let mut seqs = Vec::new();
        let tail = follower
            .read_each_from(&id("s"), *at, &mut |e| seqs.push(e.seq.0))
            .unwrap();
        *at = tail.next;
        (seqs, tail.torn_tail.is_some())
    };
    assert_eq!(read(&mut at), (vec![], false));
    for round in 0..3u64 {
        writer
            .append_batch(vec![
                EventDraft::new("step/start", json!({"turn": 1, "step": round + 1})),
                EventDraft::new("step/end", json!({"turn": 1, "step": round + 1})),
            ])
            .unwrap();
        writer.flush_blocking().unwrap();
        assert_eq!(read(&mut at), (vec![1 + 2 * round, 2 + 2 * round], false));
    }
    drop(writer);
    // A batch being written by another writer: its first line alone is not read...
    let batch_first =
        json!({"seq": 7, "time": 9, "type": "step/start", "batchLast": 8, "data": {}});
    f.append_raw("s", &[serde_json::to_vec(&batch_first).unwrap()]);
    assert_eq!(read(&mut at), (vec![], true));
    assert_eq!(at.next_seq, Seq(7));
    // ...and the whole batch is, once its last line is there.
    let batch_last = json!({"seq": 8, "time": 9, "type": "step/end", "data": {}});
    f.append_raw("s", &[serde_json::to_vec(&batch_last).unwrap()]);
    assert_eq!(read(&mut at), (vec![7, 8], false));
    // Reading in pieces saw what one whole read sees.
    let whole = follower.read(&id("s")).unwrap();
    assert_eq!(at.offset, whole.valid_len);
    assert_eq!(at.next_seq, whole.next_seq());
    // Committed corruption after the position is an error naming the whole log's line.
    f.append_raw("s", &[b"not json".to_vec(), b"{}".to_vec()]);
    let err = follower
        .read_each_from(&id("s"), at, &mut |_| {})
        .unwrap_err();
    assert_eq!(err.code(), "JOURNAL_CORRUPT", "{err}");
    assert!(err.to_string().contains("line 11"), "{err}");
}

fn concurrent_flushes_share_rounds(f: Fixture) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let w = f.journal.create(SessionHeader::new(id("g"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    rt.block_on(async {
        let mut flushes = Vec::new();
        for n in 1..65 {
            w.append(chunk(n)).unwrap();
            let w = w.clone();
            flushes.push(tokio::spawn(async move { w.flush().await }));
        }
        for flush in flushes {
            assert!(flush.await.unwrap().unwrap() >= Seq(2));
        }
    });
    // 64 flushes made durable in fewer sink rounds than flushes (group commit).
    assert!(w.stats().rounds < 65, "{:?}", w.stats());
    assert_eq!(f.journal.read(&id("g")).unwrap().events.len(), 65);
}

fn an_image_is_the_valid_prefix_byte_for_byte_and_the_header_is_line_one(f: Fixture) {
    let mut lines = written_lines();
    // A batch cut short at the end: an unfinished write, not part of the image.
    let next = lines.len() as u64 - 1;
    let cut =
        json!({"seq": next, "time": 9, "type": "step/start", "batchLast": next + 1, "data": {}});
    lines.push(serde_json::to_vec(&cut).unwrap());
    f.put_raw("cut", &lines);
    let image = f.journal.read_image(&id("cut")).unwrap();
    let valid: Vec<u8> = lines[..lines.len() - 1]
        .iter()
        .flat_map(|l| [&l[..], b"\n"].concat())
        .collect();
    assert_eq!(image.bytes(), &valid[..]);
    assert_eq!(image.events(), next);
    let torn = image.torn_tail().unwrap();
    assert_eq!(torn.offset, valid.len() as u64);
    assert_eq!(image.lines().count() as u64, next + 1);
    let replay = f.journal.read(&id("cut")).unwrap();
    assert_eq!(f.journal.header(&id("cut")).unwrap(), replay.header);
    assert_eq!(image.header(), &replay.header);
    for missing in ["nope", "cu"] {
        assert_eq!(
            f.journal.read_image(&id(missing)).unwrap_err().code(),
            "SESSION_NOT_FOUND"
        );
        assert_eq!(
            f.journal.header(&id(missing)).unwrap_err().code(),
            "SESSION_NOT_FOUND"
        );
    }
    // Damage is refused, as by a read.
    let mut damaged = lines[..4].to_vec();
    damaged[2] = b"not json".to_vec();
    f.put_raw("bad", &damaged);
    assert_eq!(
        f.journal.read_image(&id("bad")).unwrap_err().code(),
        "JOURNAL_CORRUPT"
    );
}

fn an_imported_image_reads_back_byte_for_byte_and_never_overwrites(f: Fixture) {
    let lines = written_lines();
    let bytes: Vec<u8> = lines
        .iter()
        .flat_map(|l| [&l[..], b"\n"].concat())
        .collect();
    let image =
        troupe_journal::SessionImage::from_bytes(Path::new("cut.jsonl"), bytes.clone()).unwrap();
    f.backend.import(&image).unwrap();
    assert_eq!(
        f.journal.read_image(&id("cut")).unwrap().bytes(),
        &bytes[..]
    );
    assert_eq!(f.raw_lines("cut"), lines);
    // The imported session is a session like any other: listed, opened, appended to.
    let listed = f.journal.list(&mut |e| panic!("{e}")).unwrap();
    assert_eq!(listed.len(), 1);
    let (w, replay) = f.journal.open(&id("cut")).unwrap();
    assert_eq!(replay.events.len(), lines.len() - 1);
    w.append(chunk(99)).unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    let err = f.backend.import(&image).unwrap_err();
    assert_eq!(err.code(), "SESSION_ALREADY_EXISTS", "{err}");
    assert_eq!(f.raw_lines("cut").len(), lines.len() + 1);
}
