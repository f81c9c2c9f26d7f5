//! Batch atomicity on replay (DESIGN decision 9): a real log written through the writer with
//! batches of several sizes is cut at every byte offset, and every way of reading it must give
//! a whole-batch prefix — never part of a batch — with the cut bytes as the torn tail, which
//! opening for writing repairs before the sequence goes on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use troupe_journal::{
    Journal, JsonlBackend, LineCheck, LineUse, ScanPosition, Selected, read_path, scan_each,
    scan_events, scan_selected_each,
};
use troupe_protocol::{Event, EventDraft, FixedClock, Seq, SessionHeader, SessionId};

/// Batch sizes of the log written below, in order.
const BATCHES: &[usize] = &[1, 3, 1, 2, 5, 1, 1, 4];

/// Writes a session through the real writer, one flush per batch, and returns its file's bytes
/// and, for each batch, the byte offset where it ends.
fn written_log(dir: &Path) -> (Vec<u8>, Vec<u64>) {
    let journal = Journal::with_backend(
        Arc::new(JsonlBackend::new(dir)),
        Arc::new(FixedClock::new(1_764_000_000_000)),
    );
    let id = SessionId::new("cut").unwrap();
    let writer = journal
        .create(SessionHeader::new(id.clone(), 1_764_000_000_000))
        .unwrap();
    let path = dir.join("cut.jsonl");
    let mut ends = Vec::new();
    let mut n = 0;
    for &size in BATCHES {
        let drafts = (0..size)
            .map(|i| {
                n += 1;
                // Types of both kinds: selected ones (team/…) and others.
                let kind = if i % 2 == 0 {
                    "team/task"
                } else {
                    "user/message"
                };
                EventDraft::new(kind, json!({"n": n, "text": "x".repeat(n * 7)}))
            })
            .collect();
        writer.append_batch(drafts).unwrap();
        writer.flush_blocking().unwrap();
        ends.push(std::fs::metadata(&path).unwrap().len());
    }
    drop(writer);
    (std::fs::read(&path).unwrap(), ends)
}

/// The number of events in the batches wholly inside the first `cut` bytes.
fn whole_batch_events(cut: u64, ends: &[u64]) -> u64 {
    ends.iter()
        .zip(BATCHES)
        .take_while(|(end, _)| **end <= cut)
        .map(|(_, size)| *size as u64)
        .sum()
}

fn header_len(bytes: &[u8]) -> u64 {
    bytes.iter().position(|b| *b == b'\n').unwrap() as u64 + 1
}

#[test]
fn the_writer_frames_every_batch_of_several_events() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = written_log(dir.path());
    let replay = troupe_journal::scan(Path::new("cut.jsonl"), &bytes).unwrap();
    let mut seq = 0;
    for &size in BATCHES {
        let first = &replay.events[seq];
        let expected = (size > 1).then(|| Seq((seq + size - 1) as u64));
        assert_eq!(first.batch_last, expected, "batch starting at {seq}");
        for later in &replay.events[seq + 1..seq + size] {
            assert_eq!(later.batch_last, None);
        }
        seq += size;
    }
}

#[test]
fn every_cut_of_a_real_log_replays_as_a_whole_batch_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = written_log(dir.path());
    let header = header_len(&bytes);
    let path = Path::new("cut.jsonl");
    let full: Vec<Event> = troupe_journal::scan(path, &bytes).unwrap().events;
    for cut in header..=bytes.len() as u64 {
        let prefix = &bytes[..cut as usize];
        let expected = whole_batch_events(cut, &ends);
        let valid_len = if expected == 0 {
            header
        } else {
            ends[ends
                .iter()
                .zip(BATCHES)
                .scan(0, |sum, (_, size)| {
                    *sum += *size as u64;
                    Some(*sum)
                })
                .position(|sum| sum == expected)
                .unwrap()]
        };

        // The full scan.
        let mut events = Vec::new();
        let summary = scan_each(path, BufReader::new(prefix), &mut |e| events.push(e))
            .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(events.len() as u64, expected, "cut at {cut}");
        assert_eq!(events[..], full[..expected as usize], "cut at {cut}");
        assert_eq!(summary.valid_len, valid_len, "cut at {cut}");
        assert_eq!(
            summary.torn_tail.is_some(),
            cut > valid_len,
            "cut at {cut}: {:?}",
            summary.torn_tail
        );
        if let Some(torn) = &summary.torn_tail {
            assert_eq!(torn.offset, valid_len, "cut at {cut}");
            assert_eq!(torn.bytes, cut - valid_len, "cut at {cut}");
        }

        // The selective scans, through a small buffer so lines straddle refills.
        for check in [LineCheck::Prefix, LineCheck::Full] {
            let mut seqs = Vec::new();
            let summary = scan_selected_each(
                path,
                BufReader::with_capacity(64, prefix),
                check,
                &|kind| kind.starts_with("team/"),
                &mut |selected| {
                    match selected {
                        Selected::Line(line) => seqs.push(line.seq.0),
                        Selected::Event(event) => seqs.push(event.seq.0),
                    }
                    LineUse::Used
                },
            )
            .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            let want: Vec<u64> = full[..expected as usize]
                .iter()
                .filter(|e| e.kind.starts_with("team/"))
                .map(|e| e.seq.0)
                .collect();
            assert_eq!(seqs, want, "cut at {cut}, {check:?}");
            assert_eq!(summary.valid_len, valid_len, "cut at {cut}, {check:?}");
        }

        // A follower that read the whole-batch prefix before sees nothing more.
        let from = ScanPosition {
            offset: valid_len,
            next_seq: Seq(expected),
        };
        let mut more = 0;
        let tail = scan_events(
            path,
            BufReader::new(&prefix[valid_len as usize..]),
            from,
            &mut |_| more += 1,
        )
        .unwrap();
        assert_eq!(more, 0, "cut at {cut}");
        assert_eq!(tail.next, from, "cut at {cut}");
    }
}

#[test]
fn a_follower_reading_as_the_file_grows_never_sees_part_of_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = written_log(dir.path());
    let header = header_len(&bytes);
    let path = Path::new("cut.jsonl");
    // Reads the file after every byte written, continuing where the last read stopped.
    let mut position = ScanPosition {
        offset: header,
        next_seq: Seq::ZERO,
    };
    let mut seen = Vec::new();
    for cut in header..=bytes.len() as u64 {
        let tail = scan_events(
            path,
            BufReader::new(&bytes[position.offset as usize..cut as usize]),
            position,
            &mut |e| seen.push(e.seq.0),
        )
        .unwrap();
        position = tail.next;
        assert_eq!(
            seen.len() as u64,
            whole_batch_events(cut, &ends),
            "after {cut} bytes"
        );
    }
    assert_eq!(
        seen,
        (0..BATCHES.iter().sum::<usize>() as u64).collect::<Vec<_>>()
    );
}

#[test]
fn opening_a_cut_log_drops_only_the_unfinished_batch_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = written_log(dir.path());
    // Cut inside the last batch at every line boundary and in the middle of every line.
    let last_start = ends[ends.len() - 2];
    let mut cuts: Vec<u64> = (last_start..*ends.last().unwrap())
        .filter(|at| bytes[*at as usize - 1] == b'\n')
        .collect();
    cuts.extend(cuts.clone().iter().map(|at| at + 5));
    for cut in cuts {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join("cut.jsonl");
        std::fs::write(&path, &bytes[..cut as usize]).unwrap();
        let journal = Journal::with_backend(
            Arc::new(JsonlBackend::new(home.path())),
            Arc::new(FixedClock::new(1_764_000_000_500)),
        );
        let id = SessionId::new("cut").unwrap();
        let (writer, replay) = journal.open(&id).unwrap();
        let kept = whole_batch_events(cut, &ends);
        assert_eq!(replay.events.len() as u64, kept, "cut at {cut}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), last_start);
        writer
            .append_batch(vec![
                EventDraft::new("turn/start", json!({"turn": 1})),
                EventDraft::new("turn/end", json!({"turn": 1})),
            ])
            .unwrap();
        writer.flush_blocking().unwrap();
        drop(writer);
        let replay = read_path(&path).unwrap();
        assert!(replay.torn_tail.is_none(), "cut at {cut}");
        assert_eq!(replay.events.len() as u64, kept + 2, "cut at {cut}");
        assert_eq!(replay.events[kept as usize].batch_last, Some(Seq(kept + 1)));
    }
}
