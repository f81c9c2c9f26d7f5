//! Stalled owners (issue 17 item 2) through the real binary: a scripted teammate that claims a
//! task and ends its turn is `stalled` in `team show` and in the Lead's next `team_task_list`
//! (told once, also across a restart); a reassign recovers the task and the old owner's next
//! update is `TEAM_TASK_STALE_REVISION`; with `$TROUPE_CLOCK` fixed, a resident owner is
//! stalled only beyond `--stall-after`; bad thresholds and clocks are bad input.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::super::run::{Setup, finish, session_id, stderr, stdout};
use super::super::{assert_bad_input, troupe};
use super::{call, id_of, show_json, teammates, text, tool_results};

/// The `team_task_list` results of a session, parsed, in order.
fn list_results(s: &Setup, id: &str) -> Vec<Value> {
    tool_results(s, id)
        .into_iter()
        .filter(|(name, _, _)| name == "team_task_list")
        .map(|(_, is_error, content)| {
            assert!(!is_error, "{content}");
            serde_json::from_str(&content).unwrap()
        })
        .collect()
}

/// The time of the last event of session `id` (epoch ms).
fn last_event_time(s: &Setup, id: &str) -> u64 {
    s.log(id).last().unwrap()["time"].as_u64().unwrap()
}

/// The scripted Team of the first test. Every step's outcome is the same under any
/// interleaving:
/// - run 1: the Lead creates task-1 *before* spawning alpha, so alpha's claim finds it at
///   revision 1; alpha then ends its turn holding it, and settles (inactive, no mail): stalled;
/// - resume 1: the Lead lists the board (alpha is not resident: nobody woke it): stalled, with
///   the notice;
/// - resume 2: the Lead lists again (the same episode: no notice), spawns beta, reassigns
///   task-1 to beta (revision 2 → 3), then wakes beta and alpha; beta's first turn only
///   answers, its second completes task-1 at revision 3 (the reassign is durable before the
///   wakeup is sent); alpha's second turn updates with its old revision 2: stale, whatever
///   beta did by then. The Lead's `team_task_get` after the wakeups sees task-1 with beta,
///   in progress (beta resident or about to be woken) or completed: never stalled.
fn stall_script(s: &Setup) -> std::path::PathBuf {
    s.script_agents(
        "stall.json",
        json!({
            "lead": [
                call("team_task_create", json!({"subject": "Write the notes", "description": "Write notes.txt"})),
                call("spawn_teammate", json!({"name": "alpha", "description": "Writes the notes", "prompt": "Take task-1."})),
                text("alpha is on it."),
                // Resume 1.
                call("team_task_list", json!({})),
                text("task-1 is stalled."),
                // Resume 2.
                call("team_task_list", json!({})),
                call("spawn_teammate", json!({"name": "beta", "description": "Finishes the notes", "prompt": "Wait for task-1."})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "reassign", "owner": "beta"})),
                call("followup_task", json!({"target": "beta", "message": "task-1 is yours now: complete it"})),
                call("followup_task", json!({"target": "alpha", "message": "finish task-1"})),
                call("team_task_get", json!({"task_id": "task-1"})),
                text("task-1 is beta's now."),
            ],
            "alpha": [
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
                text("claimed task-1"),
                // The Lead's wakeup, after the reassign.
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"})),
                text("my revision was stale"),
            ],
            "beta": [
                text("waiting"),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 3, "action": "complete"})),
                text("task-1 done"),
            ],
        }),
    )
}

#[test]
fn an_owner_that_stopped_is_stalled_the_lead_is_told_once_and_a_reassign_recovers_the_task() {
    let s = Setup::new();
    let script = stall_script(&s);
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "write the notes"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let members = teammates(&s, &id);
    let alpha = id_of(&members, "alpha").to_owned();

    // Offline: alpha holds task-1 and nobody runs it, nor will: stalled since its last event.
    let since = last_event_time(&s, &alpha);
    let view = show_json(&s, &id, &[]);
    let task = &view["tasks"][0];
    assert_eq!(task["status"], "in_progress");
    assert_eq!(task["ownerName"], "alpha");
    assert_eq!(task["stalled"]["reason"], "inactive", "{task}");
    assert_eq!(task["stalled"]["since"], since);
    assert!(task["stalled"]["idleMs"].as_u64().is_some(), "{task}");
    // The table says it under the task.
    let table = stdout(&s.troupe().args(["team", "show", &id]).assert().success());
    assert!(
        table.contains("◷ stalled: its owner alpha is inactive and no followup_task waits for it"),
        "{table}"
    );

    // Resume 1: the Lead's next team_task_list carries the stall and the one-time notice.
    s.troupe()
        .args(["resume", &id, "how is the board?"])
        .assert()
        .success()
        .stdout("task-1 is stalled.\n");
    let lists = list_results(&s, &id);
    assert_eq!(lists.len(), 1);
    assert_eq!(lists[0]["tasks"][0]["stalled"]["reason"], "inactive");
    let notice = lists[0]["stallNotice"].as_str().unwrap();
    assert!(
        notice.starts_with(
            "task-1 (revision 2) is stalled: its owner alpha is inactive and no followup_task \
             waits for it."
        ),
        "{notice}"
    );
    assert!(notice.contains("reassign"), "{notice}");

    // Resume 2 (a new process): the same episode is not told again — the notice the Lead got
    // is in its log — but the field still marks the task; then the reassign recovers it.
    s.troupe()
        .args(["resume", &id, "fix it"])
        .assert()
        .success()
        .stdout("task-1 is beta's now.\n");
    let lists = list_results(&s, &id);
    assert_eq!(lists.len(), 2);
    assert_eq!(lists[1]["tasks"][0]["stalled"]["reason"], "inactive");
    assert!(lists[1].get("stallNotice").is_none(), "{}", lists[1]);
    let results = tool_results(&s, &id);
    let (_, is_error, got) = results
        .iter()
        .rfind(|(name, _, _)| name == "team_task_get")
        .unwrap();
    assert!(!is_error, "{got}");
    let got: Value = serde_json::from_str(got).unwrap();
    assert_eq!(got["ownerName"], "beta");
    assert!(got.get("stalled").is_none(), "{got}");

    // The old owner's next update is refused: its revision is stale.
    let (name, is_error, refused) = tool_results(&s, &alpha).pop().unwrap();
    assert_eq!(name, "team_task_update");
    assert!(is_error, "{refused}");
    assert!(refused.contains("TEAM_TASK_STALE_REVISION"), "{refused}");

    // Offline again: completed by its new owner, not stalled.
    let view = show_json(&s, &id, &[]);
    let task = &view["tasks"][0];
    assert_eq!(task["status"], "completed");
    assert_eq!(task["ownerName"], "beta");
    assert!(task.get("stalled").is_none(), "{task}");
}

/// 2026-12-01T00:00:00Z, the frozen clock of the second test.
const T0: u64 = 1_764_547_200_000;
const MINUTE: u64 = 60_000;

/// `troupe team show ID --json` with `$TROUPE_CLOCK` at `now` and `extra` flags.
fn show_at(s: &Setup, id: &str, now: u64, extra: &[&str]) -> Value {
    let out = s
        .troupe()
        .env("TROUPE_CLOCK", now.to_string())
        .args(["team", "show", id, "--json"])
        .args(extra)
        .assert()
        .success();
    serde_json::from_str(&stdout(&out)).unwrap()
}

/// Waits (up to two minutes, on a loaded machine) until `done` holds.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn with_a_fixed_clock_a_resident_owner_is_stalled_only_beyond_stall_after() {
    let s = Setup::new();
    // alpha claims task-1, then runs a command that waits for the test: it stays resident,
    // in its turn, and logs nothing until the test lets it go.
    let script = s.script_agents(
        "busy.json",
        json!({
            "lead": [
                call("team_task_create", json!({"subject": "Build", "description": "Build it"})),
                call("spawn_teammate", json!({"name": "alpha", "description": "Builds", "prompt": "Take task-1."})),
                text("alpha builds."),
            ],
            "alpha": [
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
                call("bash", json!({"command": "while [ ! -e release ]; do sleep 0.05; done; echo released"})),
                text("built"),
            ],
        }),
    );
    // Every event of the run is stamped T0.
    let child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&s.home)
        .env_remove("TROUPE_HOME")
        .env("TROUPE_CLOCK", T0.to_string())
        .args(["run", "--team", "--workspace"])
        .arg(&s.workspace)
        .args(["--model", &format!("script:{}", script.display()), "build"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lead = {
        let mut lead = None;
        wait_for("the Lead's session", || {
            let out = s.troupe().args(["sessions", "--json"]).output().unwrap();
            let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or(json!([]));
            lead = rows
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["role"] == "lead")
                .map(|r| r["id"].as_str().unwrap().to_owned());
            lead.is_some()
        });
        lead.unwrap()
    };
    // Once alpha holds task-1 it is resident until the test releases its command.
    wait_for("alpha's claim", || {
        let out = s
            .troupe()
            .args(["team", "show", &lead, "--json"])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout)
            .is_ok_and(|v| v["tasks"][0]["ownerName"] == "alpha")
    });

    // 11 minutes after its last event: beyond the default 10 minutes, stalled.
    let task = show_at(&s, &lead, T0 + 11 * MINUTE, &[])["tasks"][0].clone();
    assert_eq!(
        task["stalled"],
        json!({"reason": "no_activity", "since": T0, "idleMs": 11 * MINUTE}),
        "{task}"
    );
    // The table says for how long.
    let out = s
        .troupe()
        .env("TROUPE_CLOCK", (T0 + 11 * MINUTE).to_string())
        .args(["team", "show", &lead])
        .assert()
        .success();
    assert!(
        stdout(&out).contains("stalled: its owner alpha logged nothing for 11m"),
        "{}",
        stdout(&out)
    );
    // The same with --stall-after 11m (the threshold itself is stalled), not with 12m.
    let at_threshold = show_at(&s, &lead, T0 + 11 * MINUTE, &["--stall-after", "11m"]);
    assert_eq!(at_threshold["tasks"][0]["stalled"]["reason"], "no_activity");
    let below = show_at(&s, &lead, T0 + 11 * MINUTE, &["--stall-after", "12m"]);
    assert!(below["tasks"][0].get("stalled").is_none(), "{below}");
    // 9 minutes after: below the default, not stalled.
    let early = show_at(&s, &lead, T0 + 9 * MINUTE, &[]);
    assert!(early["tasks"][0].get("stalled").is_none(), "{early}");
    // The user's stall_after is the threshold when no flag is given; the flag wins over it.
    std::fs::write(s.home.join("config.toml"), "stall_after = \"5m\"\n").unwrap();
    let configured = show_at(&s, &lead, T0 + 9 * MINUTE, &[]);
    assert_eq!(configured["tasks"][0]["stalled"]["reason"], "no_activity");
    let flagged = show_at(&s, &lead, T0 + 9 * MINUTE, &["--stall-after", "10m"]);
    assert!(flagged["tasks"][0].get("stalled").is_none(), "{flagged}");
    std::fs::remove_file(s.home.join("config.toml")).unwrap();

    // Let alpha go: its turn ends holding task-1, and it settles — stalled at once.
    std::fs::write(s.workspace.join("release"), "").unwrap();
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "alpha builds.\n");
    let task = show_at(&s, &lead, T0 + MINUTE, &[])["tasks"][0].clone();
    assert_eq!(task["stalled"]["reason"], "inactive", "{task}");
    assert_eq!(task["stalled"]["since"], T0);
}

#[test]
fn a_bad_stall_threshold_or_clock_is_bad_input() {
    let s = Setup::new();
    let home = s.home.as_path();
    for args in [
        ["run", "--team", "--stall-after", "0", "go"].as_slice(),
        ["run", "--team", "--stall-after", "0s", "go"].as_slice(),
        ["run", "--team", "--stall-after", "soon", "go"].as_slice(),
        ["team", "show", "any", "--stall-after", "0"].as_slice(),
        ["demo", "--stall-after", "500ms"].as_slice(),
        ["web", "--stall-after", "31days"].as_slice(),
    ] {
        assert_bad_input(home, args, "--stall-after");
    }
    assert_bad_input(
        home,
        &["run", "--stall-after", "5m", "go"],
        "--stall-after applies to Team runs only: add --team",
    );
    // Stalls are of the present: a past point shows none, so a threshold with it is refused.
    assert_bad_input(
        home,
        &["team", "show", "any", "--at", "3", "--stall-after", "5m"],
        "the argument '--at <SEQ|TIME>' cannot be used with '--stall-after <DURATION>'",
    );
    // A bad `$TROUPE_CLOCK` is refused by every command, before anything is read.
    let out = troupe(home)
        .env("TROUPE_CLOCK", "yesterday")
        .args(["sessions"])
        .assert()
        .code(2)
        .stdout("");
    assert_eq!(
        stderr(&out).trim_end(),
        "troupe: TROUPE_CLOCK=\"yesterday\" is not a time: give epoch milliseconds or an RFC \
         3339 time (e.g. 2026-12-01T12:00:00Z)"
    );
    // A file's stall_after is checked like the flag, naming where it is.
    std::fs::create_dir_all(home).unwrap();
    std::fs::write(home.join("config.toml"), "stall_after = \"0s\"\n").unwrap();
    assert_bad_input(
        home,
        &["team", "show", "any"],
        "config.toml:1:15: stall_after \"0s\": it must be from 1s to 30days",
    );
}
