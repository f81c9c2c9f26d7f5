//! The crash sweep of `troupe demo` (issue 10): SIGKILL right after each durable append of
//! every member's log, `troupe resume` (SIGKILLed once more after one of its own appends), a
//! second `troupe resume`, then the checks of [`sweep::check_team`]. See `sweep/mod.rs` for how
//! the kill points are found.
//!
//! `cargo test` runs the reduced sweep (every 7th point of the reference list). The full sweep
//! and single points (README "Crash sweep"):
//!
//! ```sh
//! TROUPE_SWEEP=full TROUPE_SWEEP_JOBS=2 TROUPE_SWEEP_REPORT=sweep.md \
//!     cargo test -p troupe-cli --test crash_sweep -- --nocapture
//! TROUPE_SWEEP=every:3 cargo test -p troupe-cli --test crash_sweep -- --nocapture
//! TROUPE_SWEEP=only:beta@31+2,lead@12 cargo test -p troupe-cli --test crash_sweep -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod sweep;

/// The checks that still fail at some kill points because of issue 10's recovery defects
/// (a Team or file tool cut after its `tool/call` is not retried, a cut spawn never starts or
/// burns the name, an extra Lead turn, a kill before the first prompt, a continuation queued
/// again by every resume: see the sweep results): they are run and reported at every point but
/// not yet required. **Empty this list when the recovery fixes land**; from then on the sweep
/// requires every check at every point it runs.
///
/// Required today, at every point: `troupe team verify` passes, no member is left
/// `provisioning`, `troupe team show` works, no message is delivered twice or to the wrong
/// log, and no resume panics, dies of a signal or hangs.
const NOT_YET_REQUIRED: &[&str] = &[];

#[test]
fn every_kill_point_of_the_demo_resumes_to_a_finished_team() {
    let mode = sweep::Mode::from_env();
    let jobs = std::env::var("TROUPE_SWEEP_JOBS")
        .ok()
        .map(|j| {
            j.parse::<usize>()
                .expect("TROUPE_SWEEP_JOBS takes a number")
        })
        .unwrap_or(1);
    let result = sweep::sweep(&mode, jobs);
    let report = result.markdown(&format!("Crash sweep of troupe demo ({mode:?})"));
    if let Ok(path) = std::env::var("TROUPE_SWEEP_REPORT") {
        std::fs::write(&path, &report).unwrap();
        eprintln!("crash sweep: report written to {path}");
    }
    assert!(!result.outcomes.is_empty(), "no kill point was run");
    let failed = result.failed();
    eprintln!(
        "crash sweep: {} of {} kill points clean",
        result.outcomes.len() - failed.len(),
        result.outcomes.len()
    );
    let required: Vec<String> = failed
        .iter()
        .flat_map(|o| {
            o.failures
                .iter()
                .filter(|f| !NOT_YET_REQUIRED.contains(&f.check))
                .map(move |f| {
                    format!(
                        "#{} {}: [{}] {}",
                        o.index,
                        o.point.spec(),
                        f.check,
                        f.detail
                    )
                })
        })
        .collect();
    assert!(
        required.is_empty(),
        "required checks failed:\n{}\n\n{report}",
        required.join("\n")
    );
}
