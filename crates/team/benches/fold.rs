//! Team fold benchmarks; results and targets are recorded in BENCHMARKS.md.
//!
//! Lead logs come from `node bench/gen-lead-log.mjs --team-events N --profile P
//! --seed 1`. With `TEAM_BENCH_LOGS=DIR` they are read from `DIR/lead-<P>-<N>-seed1.jsonl`
//! (with its `.meta.json`), generated beforehand; otherwise they are generated once into
//! Cargo's target tmp dir (needs `node` and the script: `TROUPE_GEN_LEAD_LOG`, default
//! `bench/gen-lead-log.mjs` in the repository) and reused. Sizes:
//! `TEAM_BENCH_SIZES` (comma-separated Team-event counts, default `10000,100000`; add
//! `1000000` for the 1M run). Without logs the benchmark prints why and measures nothing.
//!
//! Per profile (`capped`, `growing`) and size, these measurements over the same bytes (the
//! log as its session file holds it: a header line, then the generator's lines):
//! - `bare_parse`: `serde_json::from_str::<Value>` of every line (the baseline);
//! - `fold`: what `troupe team show` and a Team attach do — the journal's selective scan
//!   (`scan_selected_each`, `LineCheck::Prefix`: envelope prefixes only, `team/…` lines
//!   handed out unparsed) feeding a `StreamFold` (each Team line decoded in one pass); the
//!   folded state is the result, so its drop is not timed;
//! - `fold_and_drop`: the same, with the drop of the state timed too;
//! - `fold_verify`: `fold` with `LineCheck::Full` (what `troupe team verify` does: every
//!   other line parsed as an `Event` too);
//! - `scan_only`: the selective scan selecting nothing (the floor of `fold`);
//! - `event_fold`: the former path, every line parsed into an `Event` and `TeamState::apply`d
//!   (drop not timed, like `fold`).
//!
//! Throughput is reported in Team events per second (non-Team lines are scanned and skipped
//! but not counted). Goals (issue 4): fold ≥ 1M Team events/s and ≥ 50 % of the bare parse's
//! throughput; `growing` must stay linear (per-event cost independent of tasks ever created).
//! `TEAM_BENCH_ONLY` (comma-separated measurement names) runs a subset.
//!
//! The whole `troupe team show` / `troupe team verify` processes, interleaved with this
//! in-memory fold in the same run, are measured by `crates/cli/benches/team_cli.rs` (the
//! binary is only at hand in its own crate's benches).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::Value;
use troupe_journal::{LineCheck, LineUse, Selected, scan_selected_each};
use troupe_protocol::{Event, SessionHeader, SessionId};
use troupe_team::{StreamFold, TeamId, TeamState};

/// Where the logs come from: a directory of generated logs, or the generator.
enum Source {
    Dir(PathBuf),
    Generator(PathBuf),
}

fn source() -> Result<Source, String> {
    if let Some(dir) = std::env::var_os("TEAM_BENCH_LOGS") {
        return Ok(Source::Dir(PathBuf::from(dir)));
    }
    let script = std::env::var_os("TROUPE_GEN_LEAD_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gen-lead-log.mjs")
        });
    if !script.is_file() {
        return Err(format!(
            "generator {} not found (set TEAM_BENCH_LOGS or TROUPE_GEN_LEAD_LOG)",
            script.display()
        ));
    }
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(Source::Generator(script)),
        _ => Err("`node` is not on PATH (set TEAM_BENCH_LOGS)".to_owned()),
    }
}

struct LeadLog {
    /// Header line + the generator's lines.
    bytes: Vec<u8>,
    /// Where the event lines start in `bytes`.
    events_at: usize,
    root: TeamId,
    team_events: u64,
    lines: usize,
    tasks_created: u64,
}

impl LeadLog {
    fn event_text(&self) -> &str {
        std::str::from_utf8(&self.bytes[self.events_at..]).unwrap()
    }
}

fn lead_log(source: &Source, team_events: u64, profile: &str) -> LeadLog {
    let name = format!("lead-{profile}-{team_events}-seed1.jsonl");
    let out = match source {
        Source::Dir(dir) => dir.join(&name),
        Source::Generator(script) => {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("team-bench");
            std::fs::create_dir_all(&dir).unwrap();
            let out = dir.join(&name);
            if !PathBuf::from(format!("{}.meta.json", out.display())).is_file() {
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
            out
        }
    };
    let meta_path = PathBuf::from(format!("{}.meta.json", out.display()));
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    let root = TeamId::new(SessionId::new(meta["rootId"].as_str().unwrap()).unwrap());
    let header = SessionHeader::new(root.lead_id().clone(), 1_767_225_600_000);
    let mut bytes = serde_json::to_vec(&header).unwrap();
    bytes.push(b'\n');
    let events_at = bytes.len();
    bytes.extend_from_slice(&std::fs::read(&out).unwrap());
    let lines = bytes[events_at..].iter().filter(|b| **b == b'\n').count();
    LeadLog {
        bytes,
        events_at,
        root,
        lines,
        team_events: meta["teamEvents"].as_u64().unwrap(),
        tasks_created: meta["tasksCreated"].as_u64().unwrap(),
    }
}

/// The former path: every line parsed into an `Event` and applied.
fn event_fold(root: &TeamId, text: &str) -> TeamState {
    let mut state = TeamState::new(root.clone());
    for line in text.lines() {
        let event: Event = serde_json::from_str(line).unwrap();
        state.apply(&event).unwrap();
    }
    state
}

/// `troupe team show`'s fold (`LineCheck::Prefix`) or `troupe team verify`'s (`Full`).
fn fold(root: &TeamId, bytes: &[u8], check: LineCheck) -> TeamState {
    let mut fold = StreamFold::new(root.clone());
    let summary = scan_selected_each(
        Path::new("lead.jsonl"),
        bytes,
        check,
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
    fold.finish().unwrap()
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
    let source = match source() {
        Ok(source) => source,
        Err(why) => {
            eprintln!("skipping the Team fold benchmarks: {why}");
            return;
        }
    };
    for profile in ["capped", "growing"] {
        for n in sizes() {
            let log = lead_log(&source, n, profile);
            let state = fold(&log.root, &log.bytes, LineCheck::Prefix);
            assert!(
                state == event_fold(&log.root, log.event_text()),
                "the fast fold differs from the event fold"
            );
            eprintln!(
                "{profile} {n}: {} lines, {} bytes, {} tasks created, {} live, {} messages",
                log.lines,
                log.bytes.len() - log.events_at,
                log.tasks_created,
                state.live_task_count(),
                state.messages().len()
            );
            drop(state);
            let mut group = c.benchmark_group(format!("team_fold_{profile}"));
            let (warm_up, measure) = match n {
                0..100_000 => (1, 5),
                100_000..1_000_000 => (3, 15),
                _ => (5, 30),
            };
            group
                .sample_size(10)
                .warm_up_time(Duration::from_secs(warm_up))
                .measurement_time(Duration::from_secs(measure))
                .throughput(Throughput::Elements(log.team_events));
            if selected("bare_parse") {
                group.bench_with_input(BenchmarkId::new("bare_parse", n), &log, |b, log| {
                    b.iter(|| {
                        for line in log.event_text().lines() {
                            let value: Value = serde_json::from_str(line).unwrap();
                            std::hint::black_box(value);
                        }
                    });
                });
            }
            // The fold's result is the state its caller goes on to use: its drop is not timed
            // (`fold_and_drop` times it too).
            if selected("fold") {
                group.bench_with_input(BenchmarkId::new("fold", n), &log, |b, log| {
                    b.iter_with_large_drop(|| fold(&log.root, &log.bytes, LineCheck::Prefix));
                });
            }
            if selected("fold_and_drop") {
                group.bench_with_input(BenchmarkId::new("fold_and_drop", n), &log, |b, log| {
                    b.iter(|| drop(fold(&log.root, &log.bytes, LineCheck::Prefix)));
                });
            }
            if selected("fold_verify") {
                group.bench_with_input(BenchmarkId::new("fold_verify", n), &log, |b, log| {
                    b.iter_with_large_drop(|| fold(&log.root, &log.bytes, LineCheck::Full));
                });
            }
            if selected("scan_only") {
                group.bench_with_input(BenchmarkId::new("scan_only", n), &log, |b, log| {
                    b.iter(|| {
                        let summary = scan_selected_each(
                            Path::new("lead.jsonl"),
                            &log.bytes[..],
                            LineCheck::Prefix,
                            &|_| false,
                            &mut |_| LineUse::Used,
                        )
                        .unwrap();
                        std::hint::black_box(summary)
                    });
                });
            }
            if selected("event_fold") {
                group.bench_with_input(BenchmarkId::new("event_fold", n), &log, |b, log| {
                    b.iter_with_large_drop(|| event_fold(&log.root, log.event_text()));
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, fold_benches);
criterion_main!(benches);
