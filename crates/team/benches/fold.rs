//! Team fold benchmarks; results and targets are recorded in BENCHMARKS.md.
//!
//! Lead logs come from `node shared/bench/gen-lead-log.mjs --team-events N --profile P
//! --seed 1` (override the script with `TROUPE_GEN_LEAD_LOG`), generated once into Cargo's
//! target tmp dir and reused. Sizes: `TEAM_BENCH_SIZES` (comma-separated team-event counts,
//! default `10000,100000`; add `1000000` for the optional 1M run). Without `node` the
//! benchmark prints why and measures nothing.
//!
//! Per profile (`capped`, `growing`) and size, these measurements over the same lines:
//! - `bare_parse`: `serde_json::from_str::<Value>` of every line (the baseline);
//! - `raw_fold`: what `troupe team show/verify` and a Team attach do — the journal's streaming
//!   scan `troupe_journal::scan_raw_each` of the log (a session header line, then the lines;
//!   payloads left as `&RawValue`) with `TeamState::apply_raw` of every event (only `team/…`
//!   payloads are parsed, straight into the typed records);
//! - `raw_scan`: the same scan with nothing done per event (the floor of `raw_fold`);
//! - `fold`: parse every line into an `Event` and `TeamState::apply` it (the former path,
//!   kept for comparison);
//! - `apply_only`: `TeamState::apply` over pre-parsed events (below 1M only, as the parsed
//!   events of a 1M log need several GB).
//!
//! Throughput is reported in Team events per second (non-Team lines are scanned and skipped
//! but not counted). Goals (issue 4): fold ≥ 1M team events/s and ≥ 50 % of the bare parse's
//! throughput; `growing` must stay linear (per-event cost independent of tasks ever created).
//! `TEAM_BENCH_ONLY` (comma-separated measurement names) runs a subset.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::Value;
use troupe_protocol::{Event, SessionHeader, SessionId};
use troupe_team::{TeamId, TeamState};

fn generator() -> Result<PathBuf, String> {
    let script = std::env::var_os("TROUPE_GEN_LEAD_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/gen-lead-log.mjs")
        });
    if !script.is_file() {
        return Err(format!("generator {} not found", script.display()));
    }
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(script),
        _ => Err("`node` is not on PATH".to_owned()),
    }
}

struct LeadLog {
    text: String,
    root: TeamId,
    team_events: u64,
    lines: usize,
    tasks_created: u64,
}

fn lead_log(script: &Path, team_events: u64, profile: &str) -> LeadLog {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("team-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("lead-{profile}-{team_events}-seed1.jsonl"));
    let meta_path = PathBuf::from(format!("{}.meta.json", out.display()));
    if !meta_path.is_file() {
        eprintln!("generating {} ...", out.display());
        let status = Command::new("node")
            .arg(script)
            .args(["--team-events", &team_events.to_string()])
            .args(["--profile", profile, "--seed", "1", "--out"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "generator failed");
    }
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let root = TeamId::new(SessionId::new(meta["rootId"].as_str().unwrap()).unwrap());
    LeadLog {
        lines: text.lines().count(),
        text,
        root,
        team_events: meta["teamEvents"].as_u64().unwrap(),
        tasks_created: meta["tasksCreated"].as_u64().unwrap(),
    }
}

fn fold_text(root: &TeamId, text: &str) -> TeamState {
    let mut state = TeamState::new(root.clone());
    for line in text.lines() {
        let event: Event = serde_json::from_str(line).unwrap();
        state.apply(&event).unwrap();
    }
    state
}

/// The log as its session file holds it: a header line, then the event lines.
fn session_header(root: &TeamId) -> Vec<u8> {
    let header = SessionHeader::new(root.lead_id().clone(), 1_767_225_600_000);
    let mut line = serde_json::to_vec(&header).unwrap();
    line.push(b'\n');
    line
}

/// `troupe team show`'s fold: the streaming raw scan plus `apply_raw`.
fn raw_fold(root: &TeamId, header: &[u8], text: &str) -> TeamState {
    let mut state = TeamState::new(root.clone());
    let mut refused = None;
    let reader = std::io::Read::chain(header, text.as_bytes());
    let summary = troupe_journal::scan_raw_each(Path::new("lead.jsonl"), reader, &mut |event| {
        if refused.is_none()
            && let Err(e) = state.apply_raw(event.seq, event.kind, event.data)
        {
            refused = Some(e);
        }
    })
    .unwrap();
    assert!(refused.is_none() && summary.torn_tail.is_none());
    state
}

fn selected(name: &str) -> bool {
    std::env::var("TEAM_BENCH_ONLY")
        .map(|only| only.split(',').any(|n| n.trim() == name))
        .unwrap_or(true)
}

fn sizes() -> Vec<u64> {
    std::env::var("TEAM_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn fold_benches(c: &mut Criterion) {
    let script = match generator() {
        Ok(script) => script,
        Err(why) => {
            eprintln!("skipping the Team fold benchmarks: {why}");
            return;
        }
    };
    for profile in ["capped", "growing"] {
        for n in sizes() {
            let log = lead_log(&script, n, profile);
            let header = session_header(&log.root);
            let state = fold_text(&log.root, &log.text);
            assert!(
                raw_fold(&log.root, &header, &log.text) == state,
                "raw fold differs"
            );
            eprintln!(
                "{profile} {n}: {} lines, {} bytes, {} tasks created, {} live, {} messages",
                log.lines,
                log.text.len(),
                log.tasks_created,
                state.live_task_count(),
                state.messages().len()
            );
            // Holding every parsed event of the 1M logs would need several GB; `apply_only`
            // runs below that size.
            let events: Vec<Event> = if n < 1_000_000 && selected("apply_only") {
                log.text
                    .lines()
                    .map(|line| serde_json::from_str(line).unwrap())
                    .collect()
            } else {
                Vec::new()
            };
            let mut group = c.benchmark_group(format!("team_fold_{profile}"));
            let (warm_up, measure) = match n {
                0..100_000 => (1, 5),
                100_000..1_000_000 => (3, 20),
                _ => (5, 40),
            };
            group
                .sample_size(10)
                .warm_up_time(Duration::from_secs(warm_up))
                .measurement_time(Duration::from_secs(measure))
                .throughput(Throughput::Elements(log.team_events));
            if selected("bare_parse") {
                group.bench_with_input(BenchmarkId::new("bare_parse", n), &log.text, |b, text| {
                    b.iter(|| {
                        for line in text.lines() {
                            let value: Value = serde_json::from_str(line).unwrap();
                            std::hint::black_box(value);
                        }
                    });
                });
            }
            if selected("raw_fold") {
                group.bench_with_input(BenchmarkId::new("raw_fold", n), &log.text, |b, text| {
                    b.iter(|| std::hint::black_box(raw_fold(&log.root, &header, text)));
                });
            }
            if selected("raw_scan") {
                group.bench_with_input(BenchmarkId::new("raw_scan", n), &log.text, |b, text| {
                    b.iter(|| {
                        let reader = std::io::Read::chain(&header[..], text.as_bytes());
                        let summary = troupe_journal::scan_raw_each(
                            Path::new("lead.jsonl"),
                            reader,
                            &mut |event| {
                                std::hint::black_box(event);
                            },
                        )
                        .unwrap();
                        std::hint::black_box(summary)
                    });
                });
            }
            if selected("fold") {
                group.bench_with_input(BenchmarkId::new("fold", n), &log.text, |b, text| {
                    b.iter(|| std::hint::black_box(fold_text(&log.root, text)));
                });
            }
            if !events.is_empty() {
                group.bench_with_input(BenchmarkId::new("apply_only", n), &events, |b, events| {
                    b.iter(|| {
                        let mut state = TeamState::new(log.root.clone());
                        for event in events {
                            state.apply(event).unwrap();
                        }
                        std::hint::black_box(state)
                    });
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, fold_benches);
criterion_main!(benches);
