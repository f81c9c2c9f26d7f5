//! The write radar through the real binary: two scripted teammates change the same file while
//! task-1 is in progress for one of them → `writeConflicts` in `troupe team show --json`, its
//! table, and the Lead's next `team_task_list` result (in its log).
//!
//! Determinism: the Lead reassigns task-1 to alpha *before* it wakes alpha; alpha's and
//! beta's first turns only answer; alpha changes `shared.txt` in the turn the Lead's
//! `followup_task` gives it, then wakes beta, which reads and writes it, then wakes the Lead,
//! whose second turn lists the tasks. Every change falls after the reassign and task-1 is
//! never completed, so both are inside its window under any interleaving.

use serde_json::{Value, json};

use super::super::run::{Setup, session_id, stderr, stdout};
use super::{assert_no_tool_errors, call, id_of, show_json, teammates, text, tool_results};

/// The script: alpha changes `shared.txt` with `alpha_change`, beta then writes it.
fn radar_script(s: &Setup, alpha_change: Value) -> std::path::PathBuf {
    s.script_agents(
        "radar.json",
        json!({
            "lead": [
                call("team_task_create", json!({"subject": "Share", "description": "Write shared.txt"})),
                call("spawn_teammate", json!({"name": "alpha", "description": "Writes", "prompt": "Wait for the go."})),
                call("spawn_teammate", json!({"name": "beta", "description": "Writes too", "prompt": "Wait for alpha."})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "reassign", "owner": "alpha"})),
                call("followup_task", json!({"target": "alpha", "message": "go"})),
                text("The team is at work."),
                // Turn 2: beta's followup_task.
                call("team_task_list", json!({})),
                text("Checked the board."),
            ],
            "alpha": [
                text("Waiting."),
                alpha_change,
                call("followup_task", json!({"target": "beta", "message": "your turn"})),
                text("alpha done."),
            ],
            "beta": [
                text("Waiting."),
                call("read", json!({"path": "shared.txt"})),
                call("write", json!({"path": "shared.txt", "content": "beta\n"})),
                call("followup_task", json!({"target": "lead", "message": "both wrote"})),
                text("beta done."),
            ],
        }),
    )
}

/// Runs the radar script and checks the conflict everywhere it is shown; returns the Lead
/// and alpha's session ids.
fn run_and_check_conflict(s: &Setup, alpha_change: Value) -> (String, String) {
    let script = radar_script(s, alpha_change);
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{}", script.display()),
            "share a file",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "Checked the board.\n");
    let id = session_id(&stderr(&out));
    let members = teammates(s, &id);
    let (alpha, beta) = (id_of(&members, "alpha"), id_of(&members, "beta"));
    assert_no_tool_errors(s, &id, "lead");
    assert_no_tool_errors(s, alpha, "alpha");
    assert_no_tool_errors(s, beta, "beta");
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("shared.txt")).unwrap(),
        "beta\n"
    );

    let expected =
        json!([{"path": "shared.txt", "members": ["alpha", "beta"], "tasks": ["task-1"]}]);
    // `troupe team show --json`: advisory, the task still alpha's and in progress.
    let view = show_json(s, &id, &[]);
    assert_eq!(view["writeConflicts"], expected, "{view:#}");
    assert_eq!(view["tasks"][0]["status"], "in_progress");
    assert_eq!(view["tasks"][0]["ownerName"], "alpha");
    // The table.
    let table = s.troupe().args(["team", "show", &id]).assert().success();
    let table = stdout(&table);
    assert!(
        table.contains("⚠ shared.txt changed by alpha, beta (during task-1)"),
        "{table}"
    );
    // The Lead's `team_task_list` (after both changes) carried it.
    let (_, _, listed) = tool_results(s, &id)
        .into_iter()
        .rfind(|(name, _, _)| name == "team_task_list")
        .expect("the Lead listed the tasks");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["writeConflicts"], expected, "{listed:#}");
    (id, alpha.to_owned())
}

#[test]
fn two_teammates_writing_one_file_while_a_task_is_in_progress_are_reported() {
    let s = Setup::new();
    run_and_check_conflict(
        &s,
        call("write", json!({"path": "shared.txt", "content": "alpha\n"})),
    );
}

#[test]
fn a_file_one_teammates_bash_changed_and_another_wrote_is_reported_too() {
    let s = Setup::new();
    let (_, alpha) = run_and_check_conflict(
        &s,
        call("bash", json!({"command": "printf 'alpha\\n' > shared.txt"})),
    );
    // The bash call's result records what the command changed (the workspace compared
    // before and after it).
    let bash = s
        .log(&alpha)
        .into_iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["name"] == "bash")
        .expect("alpha's bash result");
    assert_eq!(
        bash["data"]["changed"],
        json!({"paths": ["shared.txt"], "complete": true}),
        "{bash:#}"
    );
}
