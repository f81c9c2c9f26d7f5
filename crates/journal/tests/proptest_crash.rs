//! Property: any sequence of appends, flushes and crashes replays to a prefix of what was
//! appended that includes every flushed event.
//!
//! A crash abandons the writer (unflushed events are lost) and then appends a random prefix of
//! the bytes the lost batch would have been written as — the most a crash mid-write can leave
//! behind. Reopening must repair that tail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::io::Write;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use troupe_journal::{Journal, JsonlBackend};
use troupe_protocol::{Event, EventDraft, FixedClock, SessionHeader, SessionId};

#[derive(Debug, Clone)]
enum Op {
    Append(u8),
    Flush,
    /// Crash, leaving this fraction (0..=100 %) of the lost batch's bytes on disk.
    Crash(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..4).prop_map(Op::Append),
        2 => Just(Op::Flush),
        1 => (0u8..=100).prop_map(Op::Crash),
    ]
}

fn draft(n: usize) -> EventDraft {
    let kind = if n % 5 == 4 {
        "turn/end"
    } else {
        "assistant/chunk"
    };
    EventDraft::new(kind, json!({"n": n, "text": "é\"\n\\".repeat(n % 4)}))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn replay_is_a_prefix_containing_every_flushed_event(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::with_backend(
            Arc::new(JsonlBackend::new(dir.path())),
            Arc::new(FixedClock::new(7)),
        );
        let id = SessionId::new("p").unwrap();
        let path = dir.path().join("p.jsonl");
        let mut writer = Some(journal.create(SessionHeader::new(id.clone(), 0)).unwrap());
        // Everything appended in the current incarnation's history, and how much is flushed.
        let mut appended: Vec<Event> = Vec::new();
        let mut flushed = 0usize;
        for op in ops {
            if writer.is_none() {
                if path.exists() {
                    let (w, replay) = journal.open(&id).unwrap();
                    // The replay is a prefix of what was appended and holds every flushed event.
                    prop_assert!(replay.events.len() >= flushed);
                    prop_assert!(replay.events.len() <= appended.len());
                    prop_assert_eq!(&replay.events[..], &appended[..replay.events.len()]);
                    appended.truncate(replay.events.len());
                    flushed = appended.len();
                    writer = Some(w);
                } else {
                    prop_assert_eq!(flushed, 0);
                    appended.clear();
                    writer = Some(journal.create(SessionHeader::new(id.clone(), 0)).unwrap());
                }
            }
            let w = writer.as_ref().unwrap();
            match op {
                Op::Append(k) => {
                    for _ in 0..k {
                        appended.push(w.append(draft(appended.len())).unwrap());
                    }
                }
                Op::Flush => {
                    w.flush_blocking().unwrap();
                    flushed = appended.len();
                }
                Op::Crash(percent) => {
                    writer.take().unwrap().abandon();
                    if path.exists() {
                        let mut lost = Vec::new();
                        for e in &appended[flushed..] {
                            serde_json::to_writer(&mut lost, e).unwrap();
                            lost.push(b'\n');
                        }
                        let keep = lost.len() * usize::from(percent) / 100;
                        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
                        f.write_all(&lost[..keep]).unwrap();
                    }
                }
            }
        }
        // Final check: a clean close keeps everything; after a crash, a prefix with every
        // flushed event.
        let clean = writer.is_some();
        if let Some(w) = writer.take() {
            w.flush_blocking().unwrap();
            flushed = appended.len();
            drop(w);
        }
        if path.exists() {
            let replay = journal.read(&id).unwrap();
            prop_assert!(replay.events.len() >= flushed);
            prop_assert!(replay.events.len() <= appended.len());
            prop_assert_eq!(&replay.events[..], &appended[..replay.events.len()]);
            if clean {
                prop_assert_eq!(replay.events.len(), appended.len());
            }
        } else {
            prop_assert_eq!(flushed, 0);
        }
    }
}
