//! Team fold benchmarks; results and targets are recorded in BENCHMARKS.md.
//!
//! Lead logs come from `node shared/bench/gen-lead-log.mjs --team-events N --profile P
//! --seed 1` (override the script with `TROUPE_GEN_LEAD_LOG`), generated once into Cargo's
//! target tmp dir and reused. Sizes: `TEAM_BENCH_SIZES` (comma-separated team-event counts,
//! default `10000,100000`; add `1000000` for the optional 1M run). Without `node` the
//! benchmark prints why and measures nothing.
//!
//! Per profile (`capped`, `growing`) and size, three measurements over the same lines:
//! - `bare_parse`: `serde_json::from_str::<Value>` of every line (the baseline);
//! - `fold`: parse every line into an `Event` and `TeamState::apply` it (what a replay does);
//! - `apply_only`: `TeamState::apply` over pre-parsed events (the fold's own cost; below 1M
//!   only, as the parsed events of a 1M log need several GB).
//!
//! Throughput is reported in Team events per second (non-Team lines are parsed and skipped
//! but not counted). Goals (issue 4): fold ≥ 1M team events/s and ≥ 50 % of the bare parse's
//! throughput; `growing` must stay linear (per-event cost independent of tasks ever created).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::Value;
use troupe_protocol::{Event, SessionId};
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
            let state = fold_text(&log.root, &log.text);
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
            let events: Vec<Event> = if n < 1_000_000 {
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
            group.bench_with_input(BenchmarkId::new("bare_parse", n), &log.text, |b, text| {
                b.iter(|| {
                    for line in text.lines() {
                        let value: Value = serde_json::from_str(line).unwrap();
                        std::hint::black_box(value);
                    }
                });
            });
            group.bench_with_input(BenchmarkId::new("fold", n), &log.text, |b, text| {
                b.iter(|| std::hint::black_box(fold_text(&log.root, text)));
            });
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
