//! The benchmark generator (`bench/gen-lead-log.mjs`) is also the reference for payload
//! shapes: its Lead logs must fold, with the result its `.meta.json` predicts. Needs `node`
//! (CI installs it); without it the test fails unless `TROUPE_SKIP_NODE=1` skips it on purpose.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use troupe_protocol::{Event, SessionId};
use troupe_team::{MemberPhase, TeamId, TeamState};

fn generator() -> Option<PathBuf> {
    if std::env::var_os("TROUPE_SKIP_NODE").is_some_and(|v| v == "1") {
        return None;
    }
    let script = std::env::var_os("TROUPE_GEN_LEAD_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gen-lead-log.mjs")
        });
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        script.is_file(),
        "the generator {} is missing",
        script.display()
    );
    assert!(
        node_ok,
        "node is needed to run {} (install it, or set TROUPE_SKIP_NODE=1 to skip on purpose)",
        script.display()
    );
    Some(script)
}

fn generate(script: &Path, team_events: u64, profile: &str) -> (Vec<Event>, Value) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("team-generator-test");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("lead-{profile}-{team_events}.jsonl"));
    let status = Command::new("node")
        .arg(script)
        .args([
            "--team-events",
            &team_events.to_string(),
            "--profile",
            profile,
            "--seed",
            "1",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let events = text
        .lines()
        .map(|line| serde_json::from_str::<Event>(line).unwrap())
        .collect();
    let meta_path = format!("{}.meta.json", out.display());
    let meta = serde_json::from_str(&std::fs::read_to_string(meta_path).unwrap()).unwrap();
    (events, meta)
}

#[test]
fn generated_lead_logs_fold_to_the_predicted_state() {
    let Some(script) = generator() else {
        eprintln!("skipping on purpose (TROUPE_SKIP_NODE=1)");
        return;
    };
    for profile in ["capped", "growing"] {
        let (events, meta) = generate(&script, 4_000, profile);
        let root = TeamId::new(SessionId::new(meta["rootId"].as_str().unwrap()).unwrap());
        let state = TeamState::fold(root.clone(), &events).unwrap();
        state.verify_indexes().unwrap();
        let expected = &meta["expectedFold"];
        let delivered = state.messages().len() - state.pending_messages().count();
        assert_eq!(
            state.members().len() as u64,
            expected["members"].as_u64().unwrap()
        );
        assert!(
            state
                .members()
                .iter()
                .all(|m| m.phase == MemberPhase::Active)
        );
        assert_eq!(
            state.tasks().len() as u64,
            expected["tasks"].as_u64().unwrap(),
            "{profile}"
        );
        assert_eq!(
            state.messages().len() as u64,
            expected["messages"].as_u64().unwrap()
        );
        assert_eq!(delivered as u64, expected["delivered"].as_u64().unwrap());
        assert_eq!(
            state.next_task_number(),
            expected["nextTaskNumber"].as_u64().unwrap()
        );
        assert!(state.live_task_count() <= 256);
        // Prefix then rest equals the whole, at a few split points.
        for split in [1, events.len() / 3, events.len() / 2 + 7] {
            let mut partial = TeamState::fold(root.clone(), &events[..split]).unwrap();
            for event in &events[split..] {
                partial.apply(event).unwrap();
            }
            assert_eq!(partial, state, "{profile} split {split}");
        }
        // Every view can be built.
        let show = state.show(&troupe_team::ShowOptions::default());
        assert_eq!(show.tasks.len(), state.live_task_count());
    }
}
