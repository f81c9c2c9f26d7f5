//! Journal benchmarks; results and targets are recorded in BENCHMARKS.md.
//!
//! - `flush_latency`: append + flush of one ~250-byte event through the writer actor, against
//!   one bare `write` + `fdatasync` of the same bytes on the same disk, in the same run
//!   (target: ≤ 1.2×).
//! - `group_commit`: flushed events per second with 1, 4 and 16 threads each appending and
//!   flushing one event at a time (target: 16 flushers ≥ 5× the serial fsync rate).
//! - `replay`: scanning a 1,000,000-event file against a bare `serde_json` parse of the same
//!   lines (target: ≥ 50 % of the bare parse's throughput).
//!
//! Files live under Cargo's target tmp dir, i.e. on the project's disk, not a tmpfs.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use troupe_journal::{Journal, JsonlBackend, scan};
use troupe_protocol::{EventDraft, SessionHeader, SessionId, SystemClock};

fn bench_dir() -> tempfile::TempDir {
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn journal(dir: &Path) -> Journal {
    Journal::with_backend(Arc::new(JsonlBackend::new(dir)), Arc::new(SystemClock))
}

/// A ~250-byte event once serialised.
fn event_250() -> EventDraft {
    EventDraft::new(
        "assistant/chunk",
        json!({"turn": 3, "step": 1, "block": "text", "delta": "x".repeat(170)}),
    )
}

fn flush_latency(c: &mut Criterion) {
    let dir = bench_dir();
    let mut group = c.benchmark_group("flush_latency");
    group
        .sample_size(200)
        .measurement_time(Duration::from_secs(8));

    let line = {
        let e = event_250().into_event(troupe_protocol::Seq(12345), 1_764_000_000_000);
        let mut v = serde_json::to_vec(&e).unwrap();
        v.push(b'\n');
        v
    };
    eprintln!("event line: {} bytes", line.len());
    let bare_path = dir.path().join("bare.jsonl");
    let mut bare = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&bare_path)
        .unwrap();
    bare.write_all(&line).unwrap();
    bare.sync_all().unwrap();
    group.bench_function("bare_write_fdatasync", |b| {
        b.iter(|| {
            bare.write_all(&line).unwrap();
            bare.sync_data().unwrap();
        });
    });

    let j = journal(dir.path());
    let w = j
        .create(SessionHeader::new(SessionId::new("latency").unwrap(), 0))
        .unwrap();
    w.append(event_250()).unwrap();
    w.flush_blocking().unwrap();
    group.bench_function("journal_append_flush", |b| {
        b.iter(|| {
            w.append(event_250()).unwrap();
            w.flush_blocking().unwrap();
        });
    });
    group.finish();
}

fn group_commit(c: &mut Criterion) {
    let dir = bench_dir();
    let j = journal(dir.path());
    let mut group = c.benchmark_group("group_commit");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for flushers in [1usize, 4, 16] {
        let w = j
            .create(SessionHeader::new(
                SessionId::new(format!("group-{flushers}")).unwrap(),
                0,
            ))
            .unwrap();
        w.append(event_250()).unwrap();
        w.flush_blocking().unwrap();
        group.throughput(Throughput::Elements(flushers as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(flushers),
            &flushers,
            |b, &flushers| {
                // One iteration = every flusher appends and flushes one event.
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for _ in 0..flushers {
                            let w = w.clone();
                            s.spawn(move || {
                                for _ in 0..iters {
                                    w.append(event_250()).unwrap();
                                    w.flush_blocking().unwrap();
                                }
                            });
                        }
                    });
                    start.elapsed()
                });
            },
        );
        eprintln!(
            "group_commit/{flushers}: {} rounds for {} events",
            w.stats().rounds,
            w.next_seq().0
        );
    }
    group.finish();
}

fn replay(c: &mut Criterion) {
    const EVENTS: u64 = 1_000_000;
    let dir = bench_dir();
    let j = journal(dir.path());
    let id = SessionId::new("replay").unwrap();
    let w = j.create(SessionHeader::new(id.clone(), 0)).unwrap();
    for n in 0..EVENTS {
        let draft = match n % 10 {
            0 => EventDraft::new("turn/start", json!({"turn": n / 10})),
            9 => EventDraft::new(
                "turn/end",
                json!({"turn": n / 10, "reason": {"kind": "completed"}}),
            ),
            5 => EventDraft::new(
                "tool/call",
                json!({"callId": format!("call-{n}"), "name": "read", "arguments": {"path": "src/lib.rs"}}),
            ),
            _ => EventDraft::new(
                "assistant/chunk",
                json!({"turn": n / 10, "delta": "some streamed text "}),
            ),
        };
        w.append(draft).unwrap();
        if n % 100_000 == 99_999 {
            w.flush_blocking().unwrap();
        }
    }
    w.flush_blocking().unwrap();
    drop(w);
    let path = dir.path().join("replay.jsonl");
    let bytes = std::fs::read(&path).unwrap();
    eprintln!("replay file: {} events, {} bytes", EVENTS, bytes.len());

    let mut group = c.benchmark_group("replay_1m");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(30));
    group.throughput(Throughput::Elements(EVENTS));
    group.bench_function("bare_serde_json_value_parse", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for line in bytes.split(|&b| b == b'\n').skip(1) {
                if !line.is_empty() {
                    let v: serde_json::Value = serde_json::from_slice(line).unwrap();
                    n += u64::from(v.is_object());
                }
            }
            assert_eq!(n, EVENTS);
        });
    });
    group.bench_function("journal_scan", |b| {
        b.iter(|| {
            let replay = scan(&path, &bytes).unwrap();
            assert_eq!(replay.events.len() as u64, EVENTS);
        });
    });
    group.finish();
}

criterion_group!(benches, flush_latency, group_commit, replay);
criterion_main!(benches);
