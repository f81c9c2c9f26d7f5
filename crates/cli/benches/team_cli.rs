//! `troupe team show` and `troupe team verify` as a user runs them, beside the in-memory fold
//! (results in BENCHMARKS.md, "Team fold"). A plain harness (`cargo bench -p troupe-cli
//! --bench team_cli`), not criterion: the measurements are interleaved round by round (ABAB…)
//! so that a busy machine slows every side alike, and each round's ratios are kept.
//!
//! Per round, on the same Lead log:
//! - `fold`: the journal's selective scan feeding `StreamFold` over the file's bytes in memory
//!   (what `team show` does after reading the file; the state's drop not timed);
//! - `show`: the whole `troupe team show ID --json` process — start, reading the file, the
//!   fold, the view, the output to a pipe, the exit;
//! - `verify`: the whole `troupe team verify ID` process (its one pass: every line checked,
//!   the Team folded and the Lead's log replayed as a resume does; then the teammate checks);
//! - `table`: the whole `troupe team show ID` process (the table);
//! - with `TEAM_CLI_OTHER_BIN=PATH`, `show (other)`, `table (other)`, `verify (other)`: each
//!   command run by another `troupe` binary (e.g. a build of an earlier commit) right after
//!   this one's, in the same rounds; the ratios `X (other) / X` and `X / X (other)` are per
//!   round.
//!
//! `TEAM_CLI_COMMANDS` (default `show,table,verify`) picks the commands.
//!
//! Logs: as `crates/team/benches/fold.rs` (`TEAM_BENCH_LOGS=DIR`, or generated once into the
//! target tmp dir with `node` and `TROUPE_GEN_LEAD_LOG`); `TEAM_BENCH_SIZES` (default
//! `100000`), `TEAM_BENCH_PROFILES` (default `growing`), `TEAM_CLI_ROUNDS` (default 5). Each
//! log is put behind a session header in a home under the target tmp dir. The generator's
//! non-Team payloads are not Troupe's runtime shapes, so `verify` reports the first one it
//! cannot replay (exit 1) — after checking every line and folding the whole Team, which is what
//! is timed; the bench prints the exit code and first line of each command once. For a log
//! that replays to the end, rewrite one with `benches/replayable-lead-log.py` into a directory
//! as `lead-replayable-<N>-seed1.jsonl` (+ the `.meta.json`) and run with `TEAM_BENCH_LOGS=DIR
//! TEAM_BENCH_PROFILES=replayable`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use troupe_journal::{LineCheck, scan_selected_each};
use troupe_protocol::{SessionHeader, SessionId};
use troupe_runtime::team::feed_stream_fold;
use troupe_team::{StreamFold, TeamId, TeamState};

fn generator() -> Option<PathBuf> {
    let script = std::env::var_os("TROUPE_GEN_LEAD_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gen-lead-log.mjs")
        });
    script.is_file().then_some(script)
}

/// The generated log `lead-<profile>-<n>-seed1.jsonl` (and its meta), made if missing.
fn log_file(profile: &str, n: u64) -> Option<(PathBuf, Value)> {
    let name = format!("lead-{profile}-{n}-seed1.jsonl");
    let path = match std::env::var_os("TEAM_BENCH_LOGS") {
        Some(dir) => PathBuf::from(dir).join(&name),
        None => {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("team-bench");
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(&name);
            if !PathBuf::from(format!("{}.meta.json", path.display())).is_file() {
                let Some(script) = generator() else {
                    eprintln!("no generator (set TEAM_BENCH_LOGS or TROUPE_GEN_LEAD_LOG)");
                    return None;
                };
                eprintln!("generating {} ...", path.display());
                let status = Command::new("node")
                    .arg(script)
                    .args(["--team-events", &n.to_string()])
                    .args(["--profile", profile, "--seed", "1", "--out"])
                    .arg(&path)
                    .status();
                if !status.is_ok_and(|s| s.success()) {
                    eprintln!("the generator failed (is `node` on PATH?)");
                    return None;
                }
            }
            path
        }
    };
    let meta = std::fs::read_to_string(format!("{}.meta.json", path.display())).ok()?;
    Some((path, serde_json::from_str(&meta).unwrap()))
}

/// A home holding the log as the session file of its Lead; returns (home, Lead id, bytes).
fn home_with(profile: &str, n: u64, log: &Path, meta: &Value) -> (PathBuf, String, Vec<u8>) {
    let id = meta["rootId"].as_str().unwrap().to_owned();
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("team-cli-{profile}-{n}"));
    let sessions = home.join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let header = SessionHeader::new(SessionId::new(&id).unwrap(), 1_767_225_600_000);
    let mut bytes = serde_json::to_vec(&header).unwrap();
    bytes.push(b'\n');
    bytes.extend_from_slice(&std::fs::read(log).unwrap());
    let file = sessions.join(format!("{id}.jsonl"));
    if std::fs::metadata(&file).map(|m| m.len()).ok() != Some(bytes.len() as u64) {
        std::fs::write(&file, &bytes).unwrap();
    }
    (home, id, bytes)
}

fn fold(root: &TeamId, bytes: &[u8]) -> TeamState {
    let mut fold = StreamFold::new(root.clone());
    scan_selected_each(
        Path::new("lead.jsonl"),
        bytes,
        LineCheck::Prefix,
        &StreamFold::reads,
        &mut |selected| feed_stream_fold(&mut fold, selected),
    )
    .unwrap();
    fold.finish().unwrap()
}

/// Runs `bin --home HOME ARGS…` to its end with stdout to a pipe that is read and dropped;
/// returns the wall time, the exit code and the first line of its output.
fn run(bin: &Path, home: &Path, args: &[&str]) -> (Duration, Option<i32>, String) {
    let start = Instant::now();
    let out = Command::new(bin)
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("TROUPE_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed();
    let text = String::from_utf8_lossy(if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    });
    let first: String = text
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(160)
        .collect();
    (took, out.status.code(), first)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs the harness with no such
    // flag: then nothing is measured.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_troupe"));
    let other = std::env::var_os("TEAM_CLI_OTHER_BIN").map(PathBuf::from);
    let rounds: usize = std::env::var("TEAM_CLI_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let wanted = env_list("TEAM_CLI_COMMANDS", "show,table,verify");
    let uptime = || {
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    for profile in env_list("TEAM_BENCH_PROFILES", "growing") {
        for n in env_list("TEAM_BENCH_SIZES", "100000") {
            let n: u64 = n.parse().unwrap();
            let Some((log, meta)) = log_file(&profile, n) else {
                eprintln!("skipping {profile} {n}: no log");
                continue;
            };
            let team_events = meta["teamEvents"].as_f64().unwrap();
            let (home, id, bytes) = home_with(&profile, n, &log, &meta);
            let root = TeamId::new(SessionId::new(&id).unwrap());
            let show_args = ["team", "show", id.as_str(), "--json"];
            let table_args = ["team", "show", id.as_str()];
            let verify_args = ["team", "verify", id.as_str()];
            println!(
                "{profile} {n}: {} bytes, {team_events} Team events; load average before: {}",
                bytes.len(),
                uptime()
            );
            // The commands measured, each by this binary and (with `TEAM_CLI_OTHER_BIN`) by
            // the other one, right after it in the same round.
            let mut commands: Vec<(String, &PathBuf, &[&str])> = Vec::new();
            for (name, args) in [
                ("show", &show_args[..]),
                ("table", &table_args[..]),
                ("verify", &verify_args[..]),
            ] {
                if !wanted.iter().any(|w| w == name) {
                    continue;
                }
                commands.push((name.to_owned(), &bin, args));
                if let Some(o) = &other {
                    commands.push((format!("{name} (other)"), o, args));
                }
            }
            // Warm the page cache and show what each command answers.
            for (label, b, args) in &commands {
                let (_, code, first) = run(b, &home, args);
                println!("  {label}: exit {code:?}: {first}");
            }
            let mut cols: Vec<(String, Vec<f64>)> = vec![("fold".to_owned(), vec![])];
            cols.extend(commands.iter().map(|(label, _, _)| (label.clone(), vec![])));
            for _ in 0..rounds {
                let start = Instant::now();
                let state = fold(&root, &bytes);
                cols[0].1.push(start.elapsed().as_secs_f64());
                drop(state);
                for (i, (_, b, args)) in commands.iter().enumerate() {
                    cols[i + 1].1.push(run(b, &home, args).0.as_secs_f64());
                }
            }
            // Ratios of the same round: each command ÷ the fold, this binary's verify ÷ its
            // show, and each command of the other binary ÷ the same command of this one.
            let column = |name: &str| cols.iter().find(|(n, _)| n == name).map(|(_, v)| v);
            let mut ratios: Vec<(String, Vec<f64>)> = Vec::new();
            let mut ratio = |top: &str, bottom: &str| {
                if let (Some(a), Some(b)) = (column(top), column(bottom)) {
                    ratios.push((
                        format!("{top} / {bottom}"),
                        a.iter().zip(b).map(|(a, b)| a / b).collect(),
                    ));
                }
            };
            ratio("show", "fold");
            ratio("verify", "show");
            for name in ["show", "table", "verify"] {
                ratio(&format!("{name} (other)"), name);
                ratio(name, &format!("{name} (other)"));
            }
            for (name, samples) in &cols {
                let (lo, hi) = samples
                    .iter()
                    .fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
                let m = median(samples.clone());
                println!(
                    "  {name:>15}: median {:>8.1} ms (min {:.1}, max {:.1}), {:.2}M Team events/s",
                    m * 1e3,
                    lo * 1e3,
                    hi * 1e3,
                    team_events / m / 1e6
                );
            }
            for (name, r) in ratios {
                println!(
                    "  {name:>25}: median {:.2}x  (rounds: {:?})",
                    median(r.clone()),
                    r.iter()
                        .map(|x| (x * 100.0).round() / 100.0)
                        .collect::<Vec<_>>()
                );
            }
            println!("  load average after: {}", uptime());
        }
    }
}
