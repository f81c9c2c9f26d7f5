//! NATS store benchmarks; results and goals are recorded in BENCHMARKS.md. Every pair is
//! measured twice, alternating the two sides in one run (A B A B), on servers this bench
//! starts on loopback (`nats-server` on PATH; without it the bench prints why and measures
//! nothing). The servers run at their default `sync_interval` (see BENCHMARKS.md).
//!
//! - `append_latency`: one ~250-byte event appended and flushed through the writer on a
//!   stream of one replica, against one bare JetStream publish of the same line awaited for
//!   its acknowledgement (goal ≤ 1.3×); alternated with them, the same append on a writer
//!   with `pipeline_depth: 1`.
//! - `group_commit`: 16 threads each appending and flushing one event at a time, against one
//!   task doing serial publish-acks; reported per event (goal: 16 flushers ≥ 5× the serial
//!   rate), and the same 16 flushers as tokio tasks awaiting `flush` (as every flusher of
//!   the product is: a member's agent loop). Alternated with them, both kinds of flushers on
//!   a writer with `pipeline_depth: 1` (each round waited for before the next), so one run
//!   shows what keeping rounds in flight together gains.
//! - `cold_read`: the Team fold's selective scan (`read_selected_each`, `LineCheck::Prefix`,
//!   `StreamFold`) of a 100k-Team-event Lead log from `gen-lead-log.mjs`, on NATS against the
//!   same log in a JSONL file (goal ≤ 3×). `TEAM_BENCH_LOGS=DIR` or `TROUPE_GEN_LEAD_LOG`
//!   as in the Team fold bench.
//! - `replicas`: the append of `append_latency` on a stream of three replicas (a three-node
//!   cluster) against one replica (reported).
//!
//! `NATS_BENCH_ONLY=append_latency,group_commit,cold_read,replicas` runs a subset.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use troupe_journal::{Journal, JsonlBackend, LineCheck, LineUse, LogBackend, Selected};
use troupe_protocol::{EventDraft, SessionHeader, SessionId, SystemClock};
use troupe_store_nats::{NatsBackend, NatsOptions};
use troupe_team::{StreamFold, TeamId};
use troupe_test_support::NatsServer;

fn selected(name: &str) -> bool {
    std::env::var("NATS_BENCH_ONLY")
        .map(|only| only.split(',').any(|n| n.trim() == name))
        .unwrap_or(true)
}

fn have_server() -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("nats-server").is_file()))
        .unwrap_or(false);
    if !found {
        eprintln!("skipping the NATS benchmarks: nats-server is not on PATH");
    }
    found
}

/// A ~250-byte event once serialised (the journal bench's).
fn event_250() -> EventDraft {
    EventDraft::new(
        "assistant/chunk",
        json!({"turn": 3, "step": 1, "block": "text", "delta": "x".repeat(170)}),
    )
}

fn line_250() -> bytes::Bytes {
    let e = event_250().into_event(troupe_protocol::Seq(12345), 1_764_000_000_000);
    serde_json::to_vec(&e).unwrap().into()
}

fn journal_on(url: &str, options: NatsOptions) -> Journal {
    Journal::with_backend(
        Arc::new(NatsBackend::connect(url, options).unwrap()),
        Arc::new(SystemClock),
    )
}

struct Bare {
    rt: tokio::runtime::Runtime,
    js: jetstream::Context,
}

impl Bare {
    /// A plain client on `url`, publishing to `troupe.session.bare` (the stream exists: a
    /// backend was connected first).
    fn new(url: &str) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let addrs = troupe_store_nats::parse_url(url).unwrap();
        let js = rt.block_on(async { jetstream::new(async_nats::connect(addrs).await.unwrap()) });
        Self { rt, js }
    }

    fn publish_ack(&self, payload: &bytes::Bytes) {
        self.rt.block_on(async {
            self.js
                .publish("troupe.session.bare", payload.clone())
                .await
                .unwrap()
                .await
                .unwrap();
        });
    }
}

fn append_latency(c: &mut Criterion) {
    if !selected("append_latency") {
        return;
    }
    let server = NatsServer::single_relaxed().unwrap();
    let journal = journal_on(&server.url(), NatsOptions::default());
    let bare = Bare::new(&server.url());
    let line = line_250();
    eprintln!("event line: {} bytes", line.len() + 1);
    let w = journal
        .create(SessionHeader::new(SessionId::new("latency").unwrap(), 0))
        .unwrap();
    w.append(event_250()).unwrap();
    w.flush_blocking().unwrap();
    // The same on a writer that never keeps two rounds in flight (`pipeline_depth: 1`).
    let unpipelined = journal_on(
        &server.url(),
        NatsOptions {
            pipeline_depth: 1,
            ..NatsOptions::default()
        },
    );
    let u = unpipelined
        .create(SessionHeader::new(
            SessionId::new("latency-unpipelined").unwrap(),
            0,
        ))
        .unwrap();
    u.append(event_250()).unwrap();
    u.flush_blocking().unwrap();
    let mut group = c.benchmark_group("append_latency");
    group
        .sample_size(200)
        .measurement_time(Duration::from_secs(8));
    for round in 1..=2 {
        group.bench_function(BenchmarkId::new("bare_publish_ack", round), |b| {
            b.iter(|| bare.publish_ack(&line));
        });
        group.bench_function(BenchmarkId::new("journal_append_flush", round), |b| {
            b.iter(|| {
                w.append(event_250()).unwrap();
                w.flush_blocking().unwrap();
            });
        });
        group.bench_function(
            BenchmarkId::new("journal_append_flush_unpipelined", round),
            |b| {
                b.iter(|| {
                    u.append(event_250()).unwrap();
                    u.flush_blocking().unwrap();
                });
            },
        );
    }
    group.finish();
    eprintln!("append_latency: writer stats {:?}", w.stats());
}

fn group_commit(c: &mut Criterion) {
    if !selected("group_commit") {
        return;
    }
    let server = NatsServer::single_relaxed().unwrap();
    let journal = journal_on(&server.url(), NatsOptions::default());
    let bare = Bare::new(&server.url());
    let line = line_250();
    let w = journal
        .create(SessionHeader::new(SessionId::new("group").unwrap(), 0))
        .unwrap();
    w.append(event_250()).unwrap();
    w.flush_blocking().unwrap();
    // The same flushers on a writer that waits for each round before the next (as before
    // rounds were pipelined), alternated with the others in this run.
    let unpipelined = journal_on(
        &server.url(),
        NatsOptions {
            pipeline_depth: 1,
            ..NatsOptions::default()
        },
    );
    let u = unpipelined
        .create(SessionHeader::new(
            SessionId::new("group-unpipelined").unwrap(),
            0,
        ))
        .unwrap();
    u.append(event_250()).unwrap();
    u.flush_blocking().unwrap();
    // The flushers as the product has them: tokio tasks awaiting `flush` (each member's
    // agent loop), on a runtime of two workers.
    let tasks = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("group_commit");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    for round in 1..=2 {
        group.bench_function(
            BenchmarkId::new("serial_publish_ack_per_event", round),
            |b| {
                b.iter(|| bare.publish_ack(&line));
            },
        );
        group.bench_function(BenchmarkId::new("flushers_16_per_event", round), |b| {
            b.iter_custom(|iters| flushers(&w, iters));
        });
        group.bench_function(BenchmarkId::new("tasks_16_per_event", round), |b| {
            b.iter_custom(|iters| flusher_tasks(&tasks, &w, iters));
        });
        group.bench_function(
            BenchmarkId::new("flushers_16_unpipelined_per_event", round),
            |b| {
                b.iter_custom(|iters| flushers(&u, iters));
            },
        );
        group.bench_function(
            BenchmarkId::new("tasks_16_unpipelined_per_event", round),
            |b| {
                b.iter_custom(|iters| flusher_tasks(&tasks, &u, iters));
            },
        );
    }
    group.finish();
    for (name, w) in [("pipelined", &w), ("unpipelined", &u)] {
        let stats = w.stats();
        eprintln!(
            "group_commit ({name}): {} sink rounds for {} events, {} sent while another was in flight",
            stats.rounds,
            w.durable_seq().0,
            stats.pipelined_rounds
        );
    }
}

/// 16 tokio tasks on `rt` each appending one event at a time and awaiting its flush on `w`,
/// `iters` events in all: the time per event.
fn flusher_tasks(
    rt: &tokio::runtime::Runtime,
    w: &troupe_journal::SessionWriter,
    iters: u64,
) -> Duration {
    const FLUSHERS: u64 = 16;
    let per = iters.div_ceil(FLUSHERS);
    let start = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..FLUSHERS)
            .map(|_| {
                let w = w.clone();
                tokio::spawn(async move {
                    for _ in 0..per {
                        w.append(event_250()).unwrap();
                        w.flush().await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    start
        .elapsed()
        .mul_f64(iters as f64 / (per * FLUSHERS) as f64)
}

/// 16 threads each appending and flushing one event at a time on `w`, `iters` events in all:
/// the time per event.
fn flushers(w: &troupe_journal::SessionWriter, iters: u64) -> Duration {
    const FLUSHERS: u64 = 16;
    let per = iters.div_ceil(FLUSHERS);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..FLUSHERS {
            let w = w.clone();
            s.spawn(move || {
                for _ in 0..per {
                    w.append(event_250()).unwrap();
                    w.flush_blocking().unwrap();
                }
            });
        }
    });
    // Time per event, for the events actually written.
    start
        .elapsed()
        .mul_f64(iters as f64 / (per * FLUSHERS) as f64)
}

/// The 100k-Team-event Lead log (header + the generator's lines), and its Team id.
fn lead_log() -> Result<(TeamId, Vec<u8>), String> {
    let name = "lead-growing-100000-seed1.jsonl";
    let out = if let Some(dir) = std::env::var_os("TEAM_BENCH_LOGS") {
        PathBuf::from(dir).join(name)
    } else {
        let script = std::env::var_os("TROUPE_GEN_LEAD_LOG")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gen-lead-log.mjs")
            });
        if !script.is_file() {
            return Err(format!("generator {} not found", script.display()));
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("team-bench");
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join(name);
        if !PathBuf::from(format!("{}.meta.json", out.display())).is_file() {
            let status = Command::new("node")
                .arg(&script)
                .args([
                    "--team-events",
                    "100000",
                    "--profile",
                    "growing",
                    "--seed",
                    "1",
                    "--out",
                ])
                .arg(&out)
                .status()
                .map_err(|e| format!("node: {e}"))?;
            if !status.success() {
                return Err("the generator failed".to_owned());
            }
        }
        out
    };
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.meta.json", out.display()))
            .map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let root = TeamId::new(SessionId::new(meta["rootId"].as_str().unwrap()).unwrap());
    let header = SessionHeader::new(root.lead_id().clone(), 1_767_225_600_000);
    let mut bytes = serde_json::to_vec(&header).unwrap();
    bytes.push(b'\n');
    bytes.extend_from_slice(&std::fs::read(&out).map_err(|e| e.to_string())?);
    Ok((root, bytes))
}

/// `team show`'s fold through a backend; returns the live task count (so nothing is
/// optimised away).
fn fold(backend: &dyn LogBackend, root: &TeamId) -> usize {
    let mut fold = StreamFold::new(root.clone());
    let summary = backend
        .read_selected_each(
            root.lead_id(),
            LineCheck::Prefix,
            &StreamFold::reads,
            &mut |selected| match selected {
                Selected::Line(line) => {
                    if fold.line(line.kind, line.text) {
                        LineUse::Used
                    } else {
                        LineUse::NeedEvent
                    }
                }
                Selected::Event(event) => {
                    fold.event(&event);
                    LineUse::Used
                }
            },
        )
        .unwrap();
    assert!(summary.torn_tail.is_none());
    fold.finish().unwrap().live_task_count()
}

fn cold_read(c: &mut Criterion) {
    if !selected("cold_read") {
        return;
    }
    let (root, bytes) = match lead_log() {
        Ok(log) => log,
        Err(why) => {
            eprintln!("skipping cold_read: {why}");
            return;
        }
    };
    let lines: Vec<&[u8]> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    eprintln!("cold_read: {} lines, {} bytes", lines.len(), bytes.len());
    // The file store.
    let dir = tempfile::tempdir_in({
        std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
        env!("CARGO_TARGET_TMPDIR")
    })
    .unwrap();
    std::fs::write(dir.path().join(format!("{}.jsonl", root.lead_id())), &bytes).unwrap();
    let files = JsonlBackend::new(dir.path());
    // The NATS store: one message per line, published pipelined.
    let server = NatsServer::single_relaxed().unwrap();
    let nats = NatsBackend::connect(&server.url(), NatsOptions::default()).unwrap();
    let bare = Bare::new(&server.url());
    let subject = NatsBackend::subject(root.lead_id());
    bare.rt.block_on(async {
        for window in lines.chunks(2_000) {
            let mut acks = Vec::with_capacity(window.len());
            for line in window {
                acks.push(
                    bare.js
                        .publish(subject.clone(), bytes::Bytes::copy_from_slice(line))
                        .await
                        .unwrap(),
                );
            }
            for ack in acks {
                ack.await.unwrap();
            }
        }
    });
    let tasks = fold(&files, &root);
    assert_eq!(
        fold(&nats, &root),
        tasks,
        "the stores fold to different states"
    );
    let mut group = c.benchmark_group("cold_read_100k");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    for round in 1..=2 {
        group.bench_function(BenchmarkId::new("files", round), |b| {
            b.iter(|| fold(&files, &root));
        });
        group.bench_function(BenchmarkId::new("nats", round), |b| {
            b.iter(|| fold(&nats, &root));
        });
    }
    group.finish();
}

fn replicas(c: &mut Criterion) {
    if !selected("replicas") {
        return;
    }
    let single = NatsServer::single_relaxed().unwrap();
    let cluster = NatsServer::cluster_relaxed().unwrap();
    let r1 = journal_on(&single.url(), NatsOptions::default());
    let r3 = journal_on(
        &cluster.url(),
        NatsOptions {
            replicas: 3,
            ..NatsOptions::default()
        },
    );
    let writers: Vec<_> = [&r1, &r3]
        .iter()
        .map(|j| {
            let w = j
                .create(SessionHeader::new(SessionId::new("replicas").unwrap(), 0))
                .unwrap();
            w.append(event_250()).unwrap();
            w.flush_blocking().unwrap();
            w
        })
        .collect();
    let mut group = c.benchmark_group("replicas");
    group
        .sample_size(200)
        .measurement_time(Duration::from_secs(8));
    for round in 1..=2 {
        for (name, w) in [
            ("r1_append_flush", &writers[0]),
            ("r3_append_flush", &writers[1]),
        ] {
            group.bench_function(BenchmarkId::new(name, round), |b| {
                b.iter(|| {
                    w.append(event_250()).unwrap();
                    w.flush_blocking().unwrap();
                });
            });
        }
    }
    group.finish();
}

fn all(c: &mut Criterion) {
    if !have_server() {
        return;
    }
    append_latency(c);
    group_commit(c);
    cold_read(c);
    replicas(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
