//! Team runs (`troupe run --team`) and `troupe team show` / `troupe team verify` through the
//! real binary: a scripted Team, the same kind of run against the loopback fake OpenAI server,
//! hand-made malformed Lead logs, and bad input.
//!
//! Determinism: teammates run concurrently, and a script is static, so every scenario is built
//! so that each step has the same outcome under any interleaving (see each test's comment).

mod radar;

use std::path::Path;

use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_protocol::{EventDraft, SessionHeader, SessionId};
use troupe_test_support::{FakeOpenAi, FakeResponse};

use super::run::{Setup, session_id, stderr, stdout, summary};
use super::{assert_bad_input, clock_times, snapshot_settings, troupe};

mod stall;

/// The ten Team tools, in registration order (REFERENCE d.4).
const TEAM_TOOLS: [&str; 10] = [
    "spawn_teammate",
    "send_message",
    "followup_task",
    "list_agents",
    "wait_agent",
    "interrupt_agent",
    "team_task_create",
    "team_task_list",
    "team_task_get",
    "team_task_update",
];

const CORE_TOOLS: [&str; 6] = ["read", "write", "edit", "glob", "grep", "bash"];

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

fn text(answer: &str) -> Value {
    json!({"text": answer})
}

/// The child sessions of `lead` by name (from `troupe sessions --json` and each child's
/// `agent/config`).
fn teammates(s: &Setup, lead: &str) -> Vec<(String, String)> {
    let out = s.troupe().args(["sessions", "--json"]).assert().success();
    let rows: Value = serde_json::from_str(&stdout(&out)).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["parent"] == lead)
        .map(|r| {
            assert_eq!(r["role"], "teammate");
            let id = r["id"].as_str().unwrap().to_owned();
            // The session's own configuration: the last one (a fork's seed holds the Lead's).
            let name = s
                .log(&id)
                .iter()
                .rfind(|e| e["type"] == "agent/config")
                .map(|e| e["data"]["name"].as_str().unwrap().to_owned())
                .unwrap();
            (name, id)
        })
        .collect()
}

fn id_of<'a>(members: &'a [(String, String)], name: &str) -> &'a str {
    &members.iter().find(|(n, _)| n == name).unwrap().1
}

/// Every tool result of a session: (tool name, isError, content).
fn tool_results(s: &Setup, id: &str) -> Vec<(String, bool, String)> {
    s.log(id)
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            (
                e["data"]["name"].as_str().unwrap().to_owned(),
                e["data"]["isError"].as_bool().unwrap(),
                e["data"]["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn assert_no_tool_errors(s: &Setup, id: &str, who: &str) {
    for (name, is_error, content) in tool_results(s, id) {
        assert!(!is_error, "{who}'s {name} failed: {content}");
    }
}

/// The texts of the `user/message` events of a session, in order.
fn user_texts(s: &Setup, id: &str) -> Vec<String> {
    s.log(id)
        .iter()
        .filter(|e| e["type"] == "user/message")
        .map(|e| e["data"]["content"].to_string())
        .collect()
}

fn position(texts: &[String], needle: &str) -> usize {
    texts
        .iter()
        .position(|t| t.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in {texts:#?}"))
}

fn show_json(s: &Setup, id: &str, extra: &[&str]) -> Value {
    let out = s
        .troupe()
        .args(["team", "show", id, "--json"])
        .args(extra)
        .assert()
        .success();
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "one JSON line: {text}");
    serde_json::from_str(&text).unwrap()
}

fn teammate_row(id: &str, name: &str, description: &str, model: &str) -> Value {
    json!({
        "id": id, "name": name, "role": "teammate", "status": "inactive",
        "description": description, "provider": "spawn", "context": "fresh",
        "model": model, "diagnostics": [], "phase": "active"
    })
}

fn task_row(id: &str, subject: &str, description: &str, blocked_by: &[&str], owner: &str) -> Value {
    json!({
        "id": id, "revision": 3, "subject": subject, "description": description,
        "status": "completed", "blockedBy": blocked_by, "writeScopes": [],
        "ownerName": owner, "ready": false, "writeScopeWarnings": []
    })
}

/// The scripted Team. Every step's outcome is the same under any interleaving:
/// - the Lead creates both tasks *before* spawning anyone, and spawns beta before alpha, so
///   alpha's hand-over to beta always finds beta on the roster;
/// - beta's first turn only answers; it acts only in the turn alpha's `followup_task` gives it
///   (exactly one more turn, whether beta is still running, idle or already inactive), and by
///   then task-1 is complete, so task-2 is ready at revision 1;
/// - nobody else touches a task between its owner's `team_task_get` and its claim and
///   complete, so the revisions are known (1 → 2 → 3);
/// - each member's number of turns is fixed: 1 + the wakeups it receives (alpha none, beta one
///   from alpha, the Lead one from beta); quiet messages never add a turn or a step;
/// - quiet mail is always delivered: to the Lead it is injected at once (the Lead is resident);
///   to beta it is injected while beta is resident, or delivered ahead of alpha's wakeup when
///   that wakeup cold-resumes beta.
fn team_script(s: &Setup) -> std::path::PathBuf {
    s.script_agents(
        "team.json",
        json!({
            "lead": [
                call("team_task_create", json!({"subject": "Write the notes", "description": "Write notes.txt"})),
                call("team_task_create", json!({"subject": "Review the notes", "description": "Review notes.txt", "blocked_by": ["task-1"]})),
                call("spawn_teammate", json!({"name": "beta", "description": "Reviews the notes", "prompt": "Wait until alpha hands task-2 over to you."})),
                call("spawn_teammate", json!({"name": "alpha", "description": "Writes the notes", "prompt": "Do task-1, then hand task-2 to beta."})),
                call("wait_agent", json!({"timeout_ms": 10000})),
                text("The team is at work."),
                // Turn 2: beta's followup_task.
                call("team_task_list", json!({})),
                text("Both tasks are done."),
                // Turn 3: `troupe resume ID "who is on the team?"`.
                call("list_agents", json!({})),
                text("alpha and beta are inactive."),
            ],
            "alpha": [
                call("team_task_get", json!({"task_id": "task-1"})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
                call("write", json!({"path": "notes.txt", "content": "notes by alpha\n"})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"})),
                call("send_message", json!({"target": "beta", "message": "notes.txt is written"})),
                call("followup_task", json!({"target": "beta", "message": "task-1 is complete: take task-2"})),
                text("task-1 done; task-2 handed to beta."),
            ],
            "beta": [
                text("Waiting for alpha."),
                call("team_task_get", json!({"task_id": "task-2"})),
                call("team_task_update", json!({"task_id": "task-2", "expected_revision": 1, "action": "claim"})),
                call("read", json!({"path": "notes.txt"})),
                call("team_task_update", json!({"task_id": "task-2", "expected_revision": 2, "action": "complete"})),
                call("send_message", json!({"target": "lead", "message": "review: the notes are fine"})),
                call("followup_task", json!({"target": "lead", "message": "task-2 is complete"})),
                text("task-2 reviewed."),
            ],
        }),
    )
}

#[test]
fn a_scripted_team_works_through_dependent_tasks_and_the_lead_answers() {
    let s = Setup::new();
    // The file alpha writes must not exist yet (write needs no prior read then).
    std::fs::remove_file(s.workspace.join("notes.txt")).unwrap();
    let script = team_script(&s);
    let model = script.display().to_string();
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{model}"),
            "write and review the notes",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "Both tasks are done.\n");
    let err = stderr(&out);
    let id = session_id(&err);
    // Teammates' progress is shown, named.
    for line in [
        "alpha: team_task_update",
        "beta: followup_task",
        "beta: turn 2 completed",
        "alpha: turn 1 completed",
    ] {
        assert!(err.contains(line), "{line:?} missing from {err}");
    }
    // The summary: every member's work, the board with owners, the mail, `troupe team show
    // ID` and `watch: troupe web`.
    let home = s.home.display().to_string();
    let names = [(id.as_str(), "[LEAD]"), (&home, "[HOME]")];
    snapshot_settings(&names).bind(|| insta::assert_snapshot!("team_run_summary", summary(&err)));
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("notes.txt")).unwrap(),
        "notes by alpha\n"
    );

    let members = teammates(&s, &id);
    assert_eq!(members.len(), 2, "{members:?}");
    let (alpha, beta) = (id_of(&members, "alpha"), id_of(&members, "beta"));
    // Every tool call of every member succeeded: the script held under this interleaving.
    assert_no_tool_errors(&s, &id, "lead");
    assert_no_tool_errors(&s, alpha, "alpha");
    assert_no_tool_errors(&s, beta, "beta");
    // Mail arrives framed, quiet before the wakeup sent after it.
    let beta_inbox = user_texts(&s, beta);
    let quiet = position(&beta_inbox, "notes.txt is written");
    let wakeup = position(&beta_inbox, "task-1 is complete: take task-2");
    assert!(quiet < wakeup, "{beta_inbox:#?}");
    assert!(
        beta_inbox[quiet].contains("from alpha:"),
        "{}",
        beta_inbox[quiet]
    );
    let lead_inbox = user_texts(&s, &id);
    assert!(
        position(&lead_inbox, "review: the notes are fine")
            < position(&lead_inbox, "task-2 is complete"),
        "{lead_inbox:#?}"
    );

    // The offline view: everyone inactive, both tasks completed with their owners, no mail
    // left; each of the four messages received, delivered and consumed by its target; the
    // ledger counts every member's model calls (the script reports no usage).
    let mut view = show_json(&s, &id, &[]);
    let messages = view.as_object_mut().unwrap().remove("messages").unwrap();
    let messages = messages.as_array().unwrap();
    assert_eq!(messages.len(), 4, "{messages:?}");
    for message in messages {
        for point in ["queued", "received", "delivered", "consumed"] {
            assert!(message[point]["seq"].is_u64(), "{point}: {message}");
        }
    }
    let ledger = view.as_object_mut().unwrap().remove("ledger").unwrap();
    assert_eq!(ledger["modelCalls"], 23, "{ledger}");
    assert_eq!(ledger["tokens"], 0, "{ledger}");
    assert_eq!(ledger["members"].as_array().unwrap().len(), 3, "{ledger}");
    assert_eq!(
        view,
        json!({
            "teamId": id,
            "members": [
                {"id": id, "name": "lead", "role": "lead", "status": "inactive", "model": model, "diagnostics": [], "phase": "active"},
                teammate_row(beta, "beta", "Reviews the notes", &model),
                teammate_row(alpha, "alpha", "Writes the notes", &model),
            ],
            "tasks": [
                task_row("task-1", "Write the notes", "Write notes.txt", &[], "alpha"),
                task_row("task-2", "Review the notes", "Review notes.txt", &["task-1"], "beta"),
            ],
            "pendingMessages": [],
        })
    );
    let mut all = show_json(&s, &id, &["--all"]);
    all.as_object_mut().unwrap().remove("messages");
    assert_eq!(all.as_object_mut().unwrap().remove("ledger"), Some(ledger));
    assert_eq!(all, view, "no deleted tasks");
    // `members (2 teammates):`, `task-2  completed  beta`, `pending messages: none`.
    let out = s.troupe().args(["team", "show", &id]).assert().success();
    let table = stdout(&out);
    let scripts = s.scripts.display().to_string();
    let names = [
        (id.as_str(), "[LEAD]"),
        (alpha, "[ALPHA]"),
        (beta, "[BETA]"),
        (&scripts, "[SCRIPTS]"),
    ];
    snapshot_settings(&names).bind(|| insta::assert_snapshot!("team_show_table", table));
    let out = s.troupe().args(["team", "verify", &id]).assert().success();
    assert_eq!(
        stdout(&out),
        format!(
            "team {id}: OK: 2 teammates (phase: 2 active), 2 tasks (2 completed, 0 deleted), 4 messages \
             (4 delivered, 0 pending); {} checked\n",
            {
                let n = s.log(&id).len();
                format!("{n} events")
            }
        )
    );
    // A teammate's session is not a Team Lead.
    assert_bad_input(
        &s.home,
        &["team", "show", alpha],
        &format!("is a teammate of {id}, not a Team Lead: run troupe team show {id}"),
    );

    // Resume keeps the Team: the Lead still has the Team tools, and nobody had mail waiting,
    // so the teammates stay inactive.
    let out = s
        .troupe()
        .args(["resume", &id, "who is on the team?"])
        .assert()
        .success();
    assert_eq!(stdout(&out), "alpha and beta are inactive.\n");
    let (name, is_error, content) = tool_results(&s, &id).pop().unwrap();
    assert_eq!(
        (name.as_str(), is_error),
        ("list_agents", false),
        "{content}"
    );
    let rows: Value = serde_json::from_str(&content).unwrap();
    let statuses: Vec<(&str, &str)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("lead", "running"),
            ("beta", "inactive"),
            ("alpha", "inactive")
        ]
    );
    s.troupe().args(["team", "verify", &id]).assert().success();
}

#[test]
fn team_limit_flags_reach_the_team() {
    let s = Setup::new();
    // Both spawns are the Lead's own sequential steps, and alpha only answers: deterministic.
    let script = s.script_agents(
        "limits.json",
        json!({
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "say hi"})),
                call("spawn_teammate", json!({"name": "beta", "description": "helps too", "prompt": "say hi"})),
                text("Only one teammate fits."),
            ],
            "alpha": [text("hi")],
        }),
    );
    let out = s
        .run(&[
            "--team",
            "--max-members",
            "1",
            "--model",
            &format!("script:{}", script.display()),
            "try two teammates",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "Only one teammate fits.\n");
    let id = session_id(&stderr(&out));
    let results = tool_results(&s, &id);
    assert!(!results[0].1, "{results:?}");
    assert!(results[1].1, "{results:?}");
    assert!(results[1].2.contains("TEAM_MEMBER_LIMIT"), "{results:?}");
    assert_eq!(
        show_json(&s, &id, &[])["members"].as_array().unwrap().len(),
        2
    );
}

/// The same kind of Team run against the loopback fake OpenAI server, which answers requests in
/// arrival order whoever sends them, so the run is kept strictly sequential:
/// - the Lead's first answer creates the task, spawns alpha and then calls `wait_agent` twelve
///   times in the same step. Each wait returns at the next Team change (a commit or a status
///   edge) or at once with `noProgress` when no other member is running; alpha's whole turn
///   makes at most 8 such changes (2 task updates, 2 × queued + delivered, 2 status edges), so
///   the later waits can only return `noProgress`, i.e. once alpha is idle. The Lead's next
///   request therefore always follows alpha's last one;
/// - alpha's two requests are its whole turn; its wakeup to the Lead gives the Lead exactly one
///   more turn.
///
/// Request order: lead 1, alpha 1, alpha 2, lead 2, lead 3.
#[test]
fn a_team_run_against_the_fake_server_tells_each_member_its_role_and_tools() {
    const WAITS: usize = 12;
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    let mut lead_calls: Vec<(String, &str, Value)> = vec![
        (
            "call_create".to_owned(),
            "team_task_create",
            json!({"subject": "Count the words", "description": "Count the words of notes.txt", "write_scopes": ["count.txt"]}),
        ),
        (
            "call_spawn".to_owned(),
            "spawn_teammate",
            json!({"name": "alpha", "description": "Counts words", "prompt": "Take task-1 and report to the lead."}),
        ),
    ];
    for i in 1..=WAITS {
        lead_calls.push((
            format!("call_wait_{i}"),
            "wait_agent",
            json!({"timeout_ms": 10000}),
        ));
    }
    let lead_calls: Vec<(&str, &str, Value)> = lead_calls
        .iter()
        .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
        .collect();
    // Tool-call arguments split over several deltas, and the byte stream re-split at odd
    // sizes, so deltas straddle network reads.
    server.push(FakeResponse::tool_calls(&lead_calls, 3).rechunk(13));
    server.push(
        FakeResponse::tool_calls(
            &[
                ("call_get", "team_task_get", json!({"task_id": "task-1"})),
                (
                    "call_claim",
                    "team_task_update",
                    json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
                ),
                (
                    "call_done",
                    "team_task_update",
                    json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"}),
                ),
                (
                    "call_note",
                    "send_message",
                    json!({"target": "lead", "message": "notes.txt has 2 words"}),
                ),
                (
                    "call_report",
                    "followup_task",
                    json!({"target": "lead", "message": "task-1 is complete"}),
                ),
            ],
            4,
        )
        .rechunk(7),
    );
    server.push(FakeResponse::text("Reported to the lead."));
    server.push(FakeResponse::text("alpha is on it."));
    server.push(FakeResponse::text("alpha counted 2 words."));
    let out = s
        .run(&[
            "--team",
            "--json",
            "--model",
            "compatible:test-model",
            "--base-url",
            &server.base_url(),
            "count the words with a teammate",
        ])
        .assert()
        .success();
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let id = session_id(&stderr(&out));
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        5,
        "{:#?}",
        requests
            .iter()
            .map(|r| r.messages().len())
            .collect::<Vec<_>>()
    );
    assert_eq!(server.pending(), 0);

    let system = |i: usize| {
        requests[i].messages()[0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let tools = |i: usize| -> Vec<String> {
        requests[i]
            .tools()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let expected_tools: Vec<String> = CORE_TOOLS
        .iter()
        .chain(TEAM_TOOLS.iter())
        .map(|t| (*t).to_owned())
        .collect();
    // The Lead: Team tools, no subagent tools, the policy ending with its identity line.
    assert_eq!(tools(0), expected_tools);
    assert!(
        system(0).ends_with(&format!(
            "Your Team role is lead; your Team name is lead; your Team id is {id}."
        )),
        "{}",
        system(0)
    );
    // alpha's first request: the ten Team tools, its identity line, its prompt.
    assert_eq!(tools(1), expected_tools);
    assert!(
        system(1).ends_with(&format!(
            "Your Team role is teammate; your Team name is alpha; your Team id is {id}."
        )),
        "{}",
        system(1)
    );
    let alpha_first = requests[1].messages();
    assert_eq!(alpha_first.len(), 2);
    assert_eq!(
        alpha_first[1]["content"],
        "Take task-1 and report to the lead."
    );
    // alpha's second request carries its five results: the claim got revision 2, the complete
    // revision 3, both messages were accepted.
    let alpha_results: Vec<Value> = requests[2]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(alpha_results.len(), 5);
    assert_eq!(alpha_results[0]["revision"], 1);
    assert_eq!(alpha_results[1]["revision"], 2);
    assert_eq!(alpha_results[1]["status"], "in_progress");
    assert_eq!(alpha_results[2]["revision"], 3);
    assert_eq!(alpha_results[2]["status"], "completed");
    assert_eq!(alpha_results[3]["status"], "accepted");
    assert_eq!(alpha_results[4]["status"], "accepted");
    // The Lead's second request: the spawn, all waits (the last ones noProgress), and alpha's
    // quiet note injected as the next step.
    let lead_second = requests[3].messages();
    let waits: Vec<Value> = lead_second
        .iter()
        .filter(|m| {
            m["role"] == "tool" && m["tool_call_id"].as_str().unwrap().starts_with("call_wait")
        })
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(waits.len(), WAITS);
    assert_eq!(
        waits.last().unwrap()["noProgress"]["reason"],
        "no-active-peer"
    );
    let last = lead_second.last().unwrap();
    assert_eq!(last["role"], "user");
    let note = last["content"].to_string();
    assert!(note.contains("Team message team-message-"), "{note}");
    assert!(
        note.contains("from alpha:") && note.contains("notes.txt has 2 words"),
        "{note}"
    );
    // The third: a new turn for alpha's wakeup.
    let report = requests[4].messages().last().unwrap()["content"].to_string();
    assert!(
        report.contains("from alpha:") && report.contains("task-1 is complete"),
        "{report}"
    );

    // --json progress names every member's tool calls; the done line has the Team summary.
    let alpha_tools: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "toolStarted" && l["agentName"] == "alpha")
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        alpha_tools,
        [
            "team_task_get",
            "team_task_update",
            "team_task_update",
            "send_message",
            "followup_task"
        ]
    );
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "turnEnded" && l["agentName"] == "alpha")
    );
    let done = lines.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["answer"], "alpha counted 2 words.");
    let team = &done["team"];
    assert_eq!(team["members"][0]["name"], "lead");
    assert_eq!(team["members"][0]["stats"]["turns"], 2);
    assert_eq!(team["members"][1]["name"], "alpha");
    assert_eq!(team["members"][1]["status"], "inactive");
    assert_eq!(
        team["members"][1]["stats"],
        json!({"turns": 1, "toolCalls": 5, "tokensIn": 20, "tokensOut": 11})
    );
    assert_eq!(team["tasks"][0]["ownerName"], "alpha");
    assert_eq!(team["tasks"][0]["status"], "completed");
    assert_eq!(
        team["messages"],
        json!({"sent": 2, "delivered": 2, "pending": 0})
    );

    let view = show_json(&s, &id, &[]);
    assert_eq!(view["members"][1]["name"], "alpha");
    assert_eq!(view["members"][1]["model"], "test-model");
    assert_eq!(view["tasks"][0]["writeScopes"], json!(["count.txt"]));
    assert_eq!(view["pendingMessages"], json!([]));
    s.troupe().args(["team", "verify", &id]).assert().success();
}

/// Trial finding: a fork teammate's log numbers its turns after the turns its seed inherited
/// from the Lead; progress and summary both count its own turns (its first is turn 1).
#[test]
fn a_fork_teammates_progress_counts_its_own_turns_like_its_summary() {
    let s = Setup::new();
    let script = s.script_agents(
        "fork.json",
        json!({
            "lead": [
                text("hello"),
                call("spawn_teammate", json!({"name": "forky", "description": "d", "prompt": "p", "context": "fork"})),
                call("wait_agent", json!({"timeout_ms": 10000})),
                text("done"),
            ],
            "forky": [call("list_agents", json!({})), text("fork done")],
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "first"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let out = s
        .troupe()
        .args(["resume", &id, "--model", &model, "spawn a fork"])
        .assert()
        .success();
    let err = stderr(&out);
    // The summary: `forky: 1 turn, 1 tool call`.
    let home = s.home.display().to_string();
    let names = [(id.as_str(), "[LEAD]"), (&home, "[HOME]")];
    snapshot_settings(&names)
        .bind(|| insta::assert_snapshot!("fork_teammate_summary", summary(&err)));
    // Its log: the Lead's turn inherited, then its own turn, numbered 2.
    let members = teammates(&s, &id);
    let fork_log = s.log(id_of(&members, "forky"));
    let turns: Vec<u64> = fork_log
        .iter()
        .filter(|e| e["type"] == "turn/start")
        .map(|e| e["data"]["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [1, 2], "one inherited turn, one own");
    assert!(
        err.contains("forky: turn 1 completed (1 tool call"),
        "{err}"
    );
    assert!(!err.contains("forky: turn 2"), "{err}");
}

// ---- Hand-made Lead logs ----

const LEAD: &str = "lead-hand";

fn member(id: &str, name: &str, phase: &str) -> (&'static str, Value) {
    let mut member = json!({"id": id, "name": name, "description": "helps", "provider": "spawn", "context": "fresh", "phase": phase});
    if phase == "failed" {
        member["error"] = json!("provisioning did not leave a resumable child Session");
    }
    (
        "team/member",
        json!({"version": 1, "teamId": LEAD, "member": member}),
    )
}

fn task(id: &str, revision: u64, status: &str, blocked_by: &[&str]) -> (&'static str, Value) {
    (
        "team/task",
        json!({"version": 1, "teamId": LEAD, "task": {
            "id": id, "revision": revision, "subject": format!("do {id}"), "description": "work",
            "status": status, "blockedBy": blocked_by, "writeScopes": []}}),
    )
}

fn queued(id: &str, target: &str, delivery: &str) -> (&'static str, Value) {
    (
        "team/message/queued",
        json!({"version": 1, "teamId": LEAD, "message": {
            "id": id, "senderId": LEAD, "senderName": "lead", "targetId": target,
            "delivery": delivery, "content": [{"type": "text", "text": "hello"}]}}),
    )
}

fn delivered(id: &str, target: &str) -> (&'static str, Value) {
    (
        "team/message/delivered",
        json!({"version": 1, "teamId": LEAD, "messageId": id, "targetId": target}),
    )
}

/// A Lead log: a Team `agent/config`, one user turn, then `events`.
fn write_lead(home: &Path, events: &[(&str, Value)]) {
    let journal = Journal::open_home(home);
    let writer = journal
        .create(
            SessionHeader::new(SessionId::new(LEAD).unwrap(), 1_764_000_000_000).with_cwd("/proj"),
        )
        .unwrap();
    let config = json!({"name": "lead", "model": {"provider": "script", "model": "/s.json"}, "profile": "team", "workspace": "/proj", "depth": 0});
    writer
        .append(EventDraft::new("agent/config", config))
        .unwrap();
    writer
        .append(EventDraft::new("turn/start", json!({"turn": 1})))
        .unwrap();
    for (kind, data) in events {
        writer.append(EventDraft::new(*kind, data.clone())).unwrap();
    }
    writer
        .append(EventDraft::new(
            "turn/end",
            json!({"turn": 1, "reason": {"kind": "completed"}}),
        ))
        .unwrap();
    writer.flush_blocking().unwrap();
    // Stop the writer and release the file's lock now, not when its thread gets to it.
    writer.abandon();
}

/// A continuable Team child of `parent` named `name`.
fn write_child(home: &Path, id: &str, parent: &str, name: &str, mode: &str) {
    let journal = Journal::open_home(home);
    let writer = journal
        .create(
            SessionHeader::new(SessionId::new(id).unwrap(), 1_764_000_000_000)
                .with_parent(SessionId::new(parent).unwrap())
                .with_origin("subagent"),
        )
        .unwrap();
    writer
        .append(EventDraft::new(
            "subagent/descriptor",
            json!({"version": 2, "mode": mode, "provider": "spawn", "label": name}),
        ))
        .unwrap();
    writer
        .append(EventDraft::new(
            "agent/config",
            json!({"name": name, "model": {"provider": "script", "model": "/s.json"}, "profile": "team", "workspace": "/proj", "depth": 1}),
        ))
        .unwrap();
    writer.flush_blocking().unwrap();
    // Stop the writer and release the file's lock now, not when its thread gets to it.
    writer.abandon();
}

/// Opens `id` for writing (taking its lock). A `troupe` child that another test is spawning
/// right now may briefly share the file's descriptor (and so its lock) between fork and exec:
/// retry for a while.
fn lock_session(home: &Path, id: &str) -> troupe_journal::SessionWriter {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match Journal::open_home(home).open(&SessionId::new(id).unwrap()) {
            Ok((writer, _)) => return writer,
            Err(troupe_journal::JournalError::Locked { .. })
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// `team show` and `team verify` both exit 1 naming the first bad event.
fn assert_bad_log(home: &Path, message: &str) {
    for command in ["show", "verify"] {
        let out = troupe(home)
            .args(["team", command, LEAD])
            .assert()
            .code(1)
            .stdout("");
        let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(message),
            "team {command}: {err:?} should contain {message:?}"
        );
    }
}

#[test]
fn a_task_that_starts_at_revision_2_is_reported_at_its_seq() {
    let home = tempfile::tempdir().unwrap();
    // seq 0 config, 1 turn/start, 2 a good task, 3 the bad one.
    write_lead(
        home.path(),
        &[
            task("task-1", 1, "pending", &[]),
            task("task-2", 2, "pending", &[]),
        ],
    );
    assert_bad_log(
        home.path(),
        "seq 3 (team/task): team task task-2 must begin at revision 1, not 2",
    );
}

#[test]
fn a_message_delivered_before_it_was_queued_is_reported_at_its_seq() {
    let home = tempfile::tempdir().unwrap();
    write_lead(
        home.path(),
        &[
            queued("team-message-1", LEAD, "quiet"),
            delivered("team-message-1", LEAD),
            delivered("team-message-2", LEAD),
        ],
    );
    assert_bad_log(
        home.path(),
        "seq 4 (team/message/delivered): team message team-message-2 delivered before queueing",
    );
}

#[test]
fn other_fold_violations_name_their_event_too() {
    let cases: Vec<(Vec<(&str, Value)>, &str)> = vec![
        (
            vec![
                task("task-1", 1, "pending", &[]),
                task("task-1", 3, "pending", &[]),
            ],
            "seq 3 (team/task): team task task-1 revision is not contiguous: 1 -> 3",
        ),
        (
            vec![member("child-1", "alpha", "active")],
            "seq 2 (team/member): team member child-1 must begin provisioning, not active",
        ),
        (
            vec![(
                "team/task",
                json!({"version": 1, "teamId": LEAD, "task": {"id": "task-1"}}),
            )],
            "seq 2 (team/task): persisted Agent Teams team/task payload is invalid",
        ),
        (
            vec![task("task-1", 1, "pending", &["task-9"])],
            "seq 2 (team/task):",
        ),
    ];
    for (events, message) in cases {
        let home = tempfile::tempdir().unwrap();
        write_lead(home.path(), &events);
        assert_bad_log(home.path(), message);
    }
}

#[test]
fn a_corrupt_committed_line_of_the_lead_log_is_reported_at_its_seq_with_exit_1() {
    let home = tempfile::tempdir().unwrap();
    // seq 0 config, 1 turn/start, 2 task-1, 3 turn/end: damage seq 2 (line 4), before the
    // completed turn, so it is corruption, not a torn tail.
    write_lead(home.path(), &[task("task-1", 1, "pending", &[])]);
    let path = home.path().join(format!("sessions/{LEAD}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let offset: usize = lines[..3].iter().map(|l| l.len() + 1).sum();
    lines[3] = "{\"seq\":2,\"time\":1,\"type\":\"team/task\",\"data\":";
    std::fs::write(&path, format!("{}\n", lines.join("\n"))).unwrap();
    assert_bad_log(
        home.path(),
        &format!(
            "JOURNAL_CORRUPT: the Team log of session {LEAD} is invalid at seq 2: corrupt session file {}: line 4, byte offset {offset}:",
            path.display()
        ),
    );
    // An unknown session stays bad input (exit 2).
    assert_bad_input(
        home.path(),
        &["team", "verify", "nosuch"],
        "session nosuch not found",
    );
}

#[test]
fn verify_checks_every_active_teammates_session() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let roster = [
        member("child-a", "alpha", "provisioning"),
        member("child-a", "alpha", "active"),
        member("child-b", "beta", "provisioning"),
        member("child-b", "beta", "active"),
        member("child-f", "gamma", "provisioning"),
        member("child-f", "gamma", "failed"),
    ];
    write_lead(h, &roster);
    write_child(h, "child-a", LEAD, "alpha", "continuable");
    // beta's session is missing; gamma failed and needs none.
    let out = troupe(h)
        .args(["team", "verify", LEAD])
        .assert()
        .code(1)
        .stdout("");
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(
        err.contains(
            "seq 5 (team/member): teammate beta (child-b): its child session does not exist"
        ),
        "{err}"
    );
    // show still works, and shows the failed member's diagnostics.
    // `gamma  teammate  failed` with `! provisioning did not leave a resumable child Session`.
    let out = troupe(h).args(["team", "show", LEAD]).assert().success();
    let table = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    snapshot_settings(&[]).bind(|| insta::assert_snapshot!("team_show_failed_member", table));

    // A session with another parent, then a one-shot descriptor.
    write_child(h, "child-b", "someone-else", "beta", "continuable");
    let out = troupe(h).args(["team", "verify", LEAD]).assert().code(1);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(
        err.contains("parentSession is someone-else, not the Lead lead-hand"),
        "{err}"
    );
    std::fs::remove_file(h.join("sessions/child-b.jsonl")).unwrap();
    write_child(h, "child-b", LEAD, "beta", "one-shot");
    let out = troupe(h).args(["team", "verify", LEAD]).assert().code(1);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(
        err.contains("descriptor mode is \"one-shot\", not \"continuable\""),
        "{err}"
    );
    std::fs::remove_file(h.join("sessions/child-b.jsonl")).unwrap();
    write_child(h, "child-b", LEAD, "beta", "continuable");
    let out = troupe(h).args(["team", "verify", LEAD]).assert().success();
    let line = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        line.contains("OK: 3 teammates (phase: 2 active, 1 failed)"),
        "{line}"
    );
}

/// `team verify` checks every line of the Lead log as a replay does; `team show` (like a Team
/// attach) reads only the envelope of the lines it does not fold (the Team lines, and for the
/// receipts the Lead's inbox, claim and turn lines), so damage inside one is its blind spot.
#[test]
fn verify_checks_every_line_and_show_reads_only_the_envelope_of_non_team_lines() {
    let home = tempfile::tempdir().unwrap();
    write_lead(
        home.path(),
        &[
            ("step/start", json!({"turn": 1, "step": 1})),
            task("task-1", 1, "pending", &[]),
        ],
    );
    let path = home.path().join(format!("sessions/{LEAD}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    // The payload of the `step/start` line (seq 2) is broken; valid lines follow.
    let damaged = text.replacen(
        r#""data":{"step":1,"turn":1}}"#,
        r#""data":{"step":1,"turn":1,}}"#,
        1,
    );
    assert_ne!(damaged, text);
    std::fs::write(&path, damaged).unwrap();
    // A Lead log damaged at the journal level is a failed check (exit 1, README "Inspecting a
    // Team"), named by the seq where the damage starts.
    let out = troupe(home.path())
        .args(["team", "verify", LEAD])
        .assert()
        .code(1)
        .stdout("");
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("invalid at seq 2:")
            && err.contains("line 4")
            && err.contains("unparseable event line"),
        "{err}"
    );
    let out = troupe(home.path())
        .args(["team", "show", LEAD, "--json"])
        .assert()
        .success();
    let view: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(view["tasks"][0]["id"], "task-1");
}

/// A non-Team line whose envelope and JSON are fine but whose payload a resume cannot decode:
/// `troupe resume` refuses the log, so `team verify` fails on it too (exit 1, naming the
/// event), while `team show`, which decodes only the Team lines, still shows the board.
#[test]
fn verify_fails_on_a_line_a_resume_could_not_replay() {
    let home = tempfile::tempdir().unwrap();
    write_lead(
        home.path(),
        &[
            task("task-1", 1, "pending", &[]),
            ("tool/result", json!({"bogus": true})),
            task("task-1", 2, "deleted", &[]),
        ],
    );
    let out = troupe(home.path())
        .args(["team", "verify", LEAD])
        .assert()
        .code(1)
        .stdout("");
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "troupe: RUNTIME_INVALID_EVENT: team verify {LEAD}: FAILED at seq 3 (tool/result): the event cannot be \
             replayed by a resume: missing field"
        )),
        "{err}"
    );
    let out = troupe(home.path())
        .args(["team", "show", LEAD, "--json", "--all"])
        .assert()
        .success();
    let view: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(view["tasks"][0]["status"], "deleted");
}

#[test]
fn show_reads_a_lead_log_another_process_is_writing() {
    let home = tempfile::tempdir().unwrap();
    write_lead(
        home.path(),
        &[
            task("task-1", 1, "pending", &[]),
            task("task-2", 1, "pending", &["task-1"]),
            task("task-2", 2, "deleted", &[]),
            queued("team-message-1", LEAD, "wakeup"),
        ],
    );
    // Another writer holds the lock, and its last line is unfinished.
    let writer = lock_session(home.path(), LEAD);
    let path = home.path().join(format!("sessions/{LEAD}.jsonl"));
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, br#"{"seq":7,"time":1,"type":"team/ta"#).unwrap();
    let out = troupe(home.path())
        .args(["team", "show", LEAD, "--json"])
        .assert()
        .success();
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(err.contains("unfinished write"), "{err}");
    let view: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let ids: Vec<&str> = view["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["task-1"]);
    assert_eq!(view["tasks"][0]["ready"], true);
    assert_eq!(
        view["pendingMessages"],
        json!([{"id": "team-message-1", "senderName": "lead", "targetName": "lead", "delivery": "wakeup"}])
    );
    let out = troupe(home.path())
        .args(["team", "show", LEAD, "--json", "--all"])
        .assert()
        .success();
    let view: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(view["tasks"][1]["status"], "deleted");
    let out = troupe(home.path())
        .args(["team", "show", LEAD])
        .assert()
        .success();
    let table = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    // A person reads when and from whom, not the internal id `team-message-1` (that is in
    // --json).
    clock_times(snapshot_settings(&[]))
        .bind(|| insta::assert_snapshot!("team_show_pending_message", table));
    drop(writer);
}

#[test]
fn bad_input_is_one_line_exit_2_and_writes_nothing() {
    let s = Setup::new();
    let ws = s.workspace.display().to_string();
    let script = s.script_agents("one.json", json!({"lead": [text("hi")]}));
    let model = format!("script:{}", script.display());
    let home = s.home.as_path();
    let run = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["run", "--team", "--workspace", &ws, "--model", &model]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (run(&["  "]), "the prompt is empty"),
        (
            run(&["--max-members", "0", "go"]),
            "--max-members 0: it must be a positive safe integer",
        ),
        (
            run(&["--max-tasks", "9007199254740992", "go"]),
            "--max-tasks 9007199254740992: it must be a positive safe integer",
        ),
        (
            run(&["--disposal-timeout-ms", "soon", "go"]),
            "invalid value 'soon' for '--disposal-timeout-ms <N>'",
        ),
        (
            vec![
                "run".into(),
                "--workspace".into(),
                ws.clone(),
                "--model".into(),
                model.clone(),
                "--max-members".into(),
                "3".into(),
                "go".into(),
            ],
            "--max-members applies to Team runs only: add --team",
        ),
        (
            vec!["team".into(), "show".into(), "nosuch".into()],
            "session nosuch not found",
        ),
        (
            vec!["team".into(), "verify".into(), "nosuch".into()],
            "session nosuch not found",
        ),
        (
            vec!["team".into(), "show".into(), "../etc/passwd".into()],
            "invalid session id",
        ),
    ];
    for (args, message) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_bad_input(home, &args, message);
        assert!(!home.exists(), "{args:?} created the home");
    }
    assert_bad_input(
        home,
        &["run", "--team", "--workspace", &ws, "--model", &model],
        // No PROMPT and a stdin that is not a terminal (empty here): the prompt is read from it.
        "the prompt read from stdin is empty: say what the agent should do",
    );
    // `troupe team` alone: its short help on stderr, exit 2, nothing written.
    let out = s.troupe().arg("team").assert().code(2).stdout("");
    // `Usage: troupe team [OPTIONS] <COMMAND>`, the `show` command.
    let help = stderr(&out);
    snapshot_settings(&[]).bind(|| insta::assert_snapshot!("bare_team_short_help", help));
    assert_bad_input(
        home,
        &["team", "show"],
        "the following required arguments were not provided: <SESSION> (see 'troupe team show --help')",
    );
    // A global option's value before the subcommand is not taken for a subcommand.
    assert_bad_input(
        home,
        &["--replicas", "3", "team", "show"],
        "(see 'troupe team show --help')",
    );
    assert!(!home.exists());

    // A session without a Team: show and verify refuse it; resume refuses the limit flags.
    let out = s.run(&["--model", &model, "hello"]).assert().success();
    let id = session_id(&stderr(&out));
    for command in ["show", "verify"] {
        assert_bad_input(
            home,
            &["team", command, &id],
            &format!("session {id} is not a Team session (start one with troupe run --team)"),
        );
    }
    assert_bad_input(
        home,
        &["resume", &id, "--max-members", "2", "more"],
        &format!("--max-members applies to Team sessions only, and session {id} is not one"),
    );
}

/// A teammate whose last turn failed (its model call failed: here its script is used up) and
/// that the Lead does not recover makes the run fail (exit 1) even though the Lead answered:
/// the summary names the teammate with the error, and the `--json` `done` line is `failed`
/// with `TEAMMATE_FAILED`. A later resume in which the Lead gets the teammate to finish a turn
/// exits 0.
///
/// Determinism: alpha's first turn (its prompt) takes its only step; the Lead's wakeup gives
/// it a second turn whatever the interleaving, and that turn's model call fails.
#[test]
fn a_teammate_failure_the_lead_does_not_recover_fails_the_run() {
    let s = Setup::new();
    let lead_steps = vec![
        call(
            "spawn_teammate",
            json!({"name": "alpha", "description": "Says hello", "prompt": "Say hello."}),
        ),
        call("wait_agent", json!({"timeout_ms": 10000})),
        call(
            "followup_task",
            json!({"target": "alpha", "message": "Say it again."}),
        ),
        call("wait_agent", json!({"timeout_ms": 10000})),
        text("alpha said hello."),
    ];
    let script = s.script_agents(
        "fail.json",
        json!({"lead": lead_steps, "alpha": [text("hello")]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--json", "--model", &model, "say hello twice"])
        .assert()
        .code(1);
    let err = stderr(&out);
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let done = lines.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["answer"], "alpha said hello.");
    assert_eq!(done["error"]["code"], "TEAMMATE_FAILED");
    let message = done["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "a teammate's last turn failed and the Lead did not recover it: alpha (LLM_SCRIPT: "
        ),
        "{message}"
    );
    let alpha = done["team"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "alpha")
        .unwrap();
    assert_eq!(alpha["lastTurnFailed"]["code"], "LLM_SCRIPT", "{alpha}");
    assert!(
        err.contains(&format!("troupe: {message}")),
        "the failure is on stderr too: {err}"
    );

    // Without --json: the summary line of alpha shows the failure; a plain resume (nothing to
    // do) still reports it and exits 1.
    let id = done["session"].as_str().unwrap().to_owned();
    let out = s.troupe().args(["resume", &id]).assert().code(1);
    let err = stderr(&out);
    assert_eq!(stdout(&out), "alpha said hello.\n");
    // `alpha: 2 turns, 0 tool calls, … [last turn failed: LLM_SCRIPT: …]`, then `troupe: a
    // teammate's last turn failed and the Lead did not recover it: …`.
    let home = s.home.display().to_string();
    let scripts = s.scripts.display().to_string();
    let names = [
        (id.as_str(), "[LEAD]"),
        (&home, "[HOME]"),
        (&scripts, "[SCRIPTS]"),
    ];
    snapshot_settings(&names)
        .bind(|| insta::assert_snapshot!("teammate_failed_resume_summary", summary(&err)));

    // The Lead recovers alpha: a follow-up that alpha now finishes (a script with one more
    // step for each; the override is recorded and serves every member). The Lead's cursor
    // continues after the five steps it took.
    let mut recover_steps = lead_steps.clone();
    recover_steps.extend([
        call(
            "followup_task",
            json!({"target": "alpha", "message": "Try once more."}),
        ),
        call("wait_agent", json!({"timeout_ms": 10000})),
        text("alpha is fine now."),
    ]);
    let recover = s.script_agents(
        "recover.json",
        json!({"lead": recover_steps, "alpha": [text("hello"), text("hello again")]}),
    );
    let out = s
        .troupe()
        .args(["resume", &id, "--model"])
        .arg(format!("script:{}", recover.display()))
        .arg("get alpha to finish")
        .assert()
        .success();
    assert_eq!(stdout(&out), "alpha is fine now.\n");
    let err = stderr(&out);
    // `alpha: 3 turns`, no `last turn failed`.
    snapshot_settings(&names)
        .bind(|| insta::assert_snapshot!("teammate_recovered_summary", summary(&err)));
}
