//! The first hour of a new user (issue 11): stdin prompts, session id prefixes, honest hints
//! for scripted sessions, an HTML `--base-url`, words and numbers that agree, and the CLI's
//! small refusals. Output a person reads is pinned with insta snapshots (ids and paths
//! replaced by placeholders).

use std::path::Path;

use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_protocol::{EventDraft, SessionHeader, SessionId};
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse};

use super::assert_bad_input;
use super::run::{Setup, session_id, stderr, stdout};

/// `text` with every `(needle, placeholder)` replaced, for a stable snapshot.
fn redact(text: &str, replacements: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (needle, placeholder) in replacements {
        if !needle.is_empty() {
            text = text.replace(needle, placeholder);
        }
    }
    text
}

/// A session `id` with one user message, written through the journal.
fn stored_session(home: &Path, id: &str) {
    let journal = Journal::open_home(home);
    let writer = journal
        .create(SessionHeader::new(
            SessionId::new(id).unwrap(),
            1_764_000_000_000,
        ))
        .unwrap();
    writer
        .append(EventDraft::new("user/message", json!({"text": "hello"})))
        .unwrap();
    writer.flush_blocking().unwrap();
}

/// Bare `troupe` prints the short help on stderr and exits 2 (it printed one line naming the
/// commands before).
#[test]
fn bare_troupe_prints_the_short_help_and_exits_2() {
    let home = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("troupe")
        .unwrap()
        .env_remove("TROUPE_HOME")
        .env("HOME", home.path())
        .assert()
        .code(2)
        .stdout("");
    insta::assert_snapshot!("bare_troupe", stderr(&out));
    assert!(!home.path().join(".troupe").exists(), "nothing written");
}

/// A negative number for any numeric flag is named as such, in one line; clap alone called it
/// an unknown argument and suggested `-- -1`, which cannot work for a flag's value.
#[test]
fn a_negative_number_is_named_as_negative_for_every_numeric_flag() {
    let s = Setup::new();
    let ws = s.workspace.display().to_string();
    let mut lines = Vec::new();
    for args in [
        &["log", "x", "--from", "-1"][..],
        &["run", "--workspace", &ws, "--pace", "-5", "go"],
        &["demo", "--pace", "-400"],
        &[
            "run",
            "--team",
            "--workspace",
            &ws,
            "--max-members",
            "-1",
            "go",
        ],
        &[
            "run",
            "--team",
            "--workspace",
            &ws,
            "--disposal-timeout-ms",
            "-5000",
            "go",
        ],
        &["web", "--port", "-1"],
    ] {
        let out = s.troupe().args(args).assert().code(2).stdout("");
        let line = stderr(&out);
        assert_eq!(line.lines().count(), 1, "{args:?}: {line}");
        assert!(
            line.contains(" is negative: give a whole number of 0 or more"),
            "{line}"
        );
        assert!(!line.contains("-- -"), "{line}");
        lines.push(line);
    }
    insta::assert_snapshot!("negative_numbers", lines.concat());
    assert!(!s.home.exists(), "nothing written");
}

/// Every command that takes a SESSION takes a unique prefix of its id (as git does; the panel
/// shows 8 characters), and an ambiguous prefix is one line listing the candidates.
#[test]
fn a_unique_id_prefix_names_a_session_everywhere_and_an_ambiguous_one_lists_candidates() {
    let s = Setup::new();
    let script = s.script_agents(
        "team.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "team_task_create", "arguments": {"subject": "s", "description": "d"}}]},
                {"text": "planned"},
                {"text": "again"},
            ],
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "plan"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let prefix = &id[..8];
    // log, team show, team verify, resume: all with the 8-character prefix.
    let out = s
        .troupe()
        .args(["log", prefix, "--json"])
        .assert()
        .success();
    assert_eq!(
        stdout(&out),
        s.troupe()
            .args(["log", &id, "--json"])
            .output()
            .map(|o| String::from_utf8(o.stdout).unwrap())
            .unwrap()
    );
    let out = s.troupe().args(["team", "show", prefix]).assert().success();
    assert!(
        stdout(&out).starts_with(&format!("team {id} (Lead log:")),
        "{}",
        stdout(&out)
    );
    let out = s
        .troupe()
        .args(["team", "verify", prefix])
        .assert()
        .success();
    assert!(
        stdout(&out).starts_with(&format!("team {id}: OK:")),
        "{}",
        stdout(&out)
    );
    let out = s
        .troupe()
        .args(["resume", prefix, "once more"])
        .assert()
        .success();
    assert!(
        stderr(&out).starts_with(&format!("session {id} (resumed")),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "again\n");

    // Two sessions sharing a prefix: every command refuses it and names both.
    stored_session(&s.home, "cafe-1");
    stored_session(&s.home, "cafe-2");
    stored_session(&s.home, "cab");
    let listing = |home: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(home.join("sessions"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let before = listing(&s.home);
    let mut refusals = Vec::new();
    for args in [
        &["log", "caf"][..],
        &["team", "show", "caf"],
        &["team", "verify", "caf"],
        &["resume", "caf"],
    ] {
        let out = s.troupe().args(args).assert().code(2).stdout("");
        let line = stderr(&out);
        assert_eq!(line.lines().count(), 1, "{args:?}: {line}");
        refusals.push(line);
    }
    assert!(refusals.iter().all(|r| *r == refusals[0]), "{refusals:#?}");
    insta::assert_snapshot!("ambiguous_prefix", refusals[0]);
    assert_eq!(listing(&s.home), before, "nothing written");
    // A prefix that matches one session only works, and a full id that is also the prefix of
    // another is that session.
    s.troupe().args(["log", "cafe-1"]).assert().success();
    s.troupe().args(["log", "cab"]).assert().success();
    let out = s.troupe().args(["log", "nosuch"]).assert().code(2);
    assert!(
        stderr(&out).contains("session nosuch not found"),
        "{}",
        stderr(&out)
    );
}

/// `troupe run -` and `troupe run` with a piped stdin read the prompt from stdin; `troupe
/// resume ID -` too. (They sent the literal `-` before, or refused the missing PROMPT.)
#[test]
fn the_prompt_is_read_from_stdin_with_a_dash_or_a_pipe() {
    let s = Setup::new();
    let script = s.script_agents(
        "echo.json",
        json!({"lead": [{"text": "first"}, {"text": "second"}, {"text": "third"}]}),
    );
    let model = format!("script:{}", script.display());
    let prompt_of = |id: &str, n: usize| -> Value {
        let prompts: Vec<Value> = s
            .log(id)
            .into_iter()
            .filter(|e| e["type"] == "user/message")
            .collect();
        prompts[n]["data"]["content"][0]["text"].clone()
    };
    let out = s
        .run(&["--model", &model, "-"])
        .write_stdin("fix the parser\nand add a test\n")
        .assert()
        .success();
    assert_eq!(stdout(&out), "first\n");
    let id = session_id(&stderr(&out));
    assert_eq!(prompt_of(&id, 0), "fix the parser\nand add a test");

    let out = s
        .run(&["--model", &model])
        .write_stdin("from a pipe")
        .assert()
        .success();
    let piped = session_id(&stderr(&out));
    assert_eq!(prompt_of(&piped, 0), "from a pipe");

    let out = s
        .troupe()
        .args(["resume", &id, "-"])
        .write_stdin("now the docs\n")
        .assert()
        .success();
    assert_eq!(stdout(&out), "second\n");
    assert_eq!(prompt_of(&id, 1), "now the docs");
    // A plain resume never reads stdin: it prints the last answer.
    let out = s
        .troupe()
        .args(["resume", &id])
        .write_stdin("ignored")
        .assert()
        .success();
    assert_eq!(stdout(&out), "second\n");
    assert_eq!(
        s.log(&id)
            .iter()
            .filter(|e| e["type"] == "user/message")
            .count(),
        2
    );
    // An empty stdin is an empty prompt: bad input, nothing written.
    assert_bad_input(
        &s.home,
        &[
            "run",
            "--workspace",
            &s.workspace.display().to_string(),
            "--model",
            &model,
            "-",
        ],
        "the prompt read from stdin is empty: say what the agent should do",
    );
}

/// A scripted session whose Lead has no step left cannot take a new instruction: the resume
/// that asks is refused (exit 2, one line, nothing appended), and no `continue:` hint offers
/// it. (Following the printed hint after `troupe demo` ended in LLM_SCRIPT, and every plain
/// resume after it failed too.)
#[test]
fn a_scripted_session_without_steps_left_takes_no_new_instruction_and_offers_none() {
    let s = Setup::new();
    let one = s.script_agents("one.json", json!({"lead": [{"text": "done"}]}));
    let model = format!("script:{}", one.display());
    let out = s.run(&["--model", &model, "do it"]).assert().success();
    let err = stderr(&out);
    let id = session_id(&err);
    assert!(
        !err.contains("continue:"),
        "no hint that cannot work:\n{err}"
    );
    let events = s.log(&id).len();

    let out = s
        .troupe()
        .args(["resume", &id, "and more"])
        .assert()
        .code(2)
        .stdout("");
    let line = stderr(&out);
    assert_eq!(line.lines().count(), 1, "{line}");
    insta::assert_snapshot!(
        "scripted_no_new_instruction",
        redact(
            &line,
            &[(&id, "<ID>"), (&one.display().to_string(), "<SCRIPT>")]
        )
    );
    assert_eq!(s.log(&id).len(), events, "nothing appended");
    // The plain resume still works (the last answer), says why no PROMPT helps, offers none.
    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "done\n");
    let err = stderr(&out);
    assert!(err.contains("no step left for a new instruction"), "{err}");
    assert!(!err.contains("continue:"), "{err}");
    assert_eq!(s.log(&id).len(), events, "nothing appended");

    // With steps left, the hint is printed and the instruction is taken.
    let two = s.script_agents(
        "two.json",
        json!({"lead": [{"text": "one"}, {"text": "two"}]}),
    );
    let model = format!("script:{}", two.display());
    let out = s.run(&["--model", &model, "do it"]).assert().success();
    let err = stderr(&out);
    let id = session_id(&err);
    assert!(
        err.contains(&format!("continue: troupe resume {id}")),
        "{err}"
    );
    let out = s.troupe().args(["resume", &id, "next"]).assert().success();
    assert_eq!(stdout(&out), "two\n");
    assert!(!stderr(&out).contains("continue:"), "{}", stderr(&out));
}

/// A `--base-url` that answers an HTML page fails at once with LLM_PROTOCOL naming the
/// content type and the URL: one request, no retries (it was retried for ~13 s as a dropped
/// stream before).
#[test]
fn an_html_base_url_fails_at_once_naming_the_content_type_and_the_url() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::body(
        200,
        "text/html; charset=utf-8",
        "<!doctype html><title>Router login</title>",
    ));
    server.push(FakeResponse::text("a retry must not happen"));
    let out = s
        .run(&[
            "--model",
            "compatible:m",
            "--base-url",
            &server.base_url(),
            "hello",
        ])
        .assert()
        .code(1)
        .stdout("");
    let err = stderr(&out);
    assert_eq!(server.request_count(), 1, "no retry:\n{err}");
    let line = err.lines().last().unwrap();
    let id = session_id(&err);
    insta::assert_snapshot!(
        "html_base_url",
        redact(
            line,
            &[
                (&id, "<ID>"),
                (&server.base_url(), "<BASE_URL>"),
                (&s.home.display().to_string(), "<HOME>")
            ]
        )
    );
}

/// The words that disagreed: the unknown provider lists `compatible`; `resume`, `team show`
/// and `team verify` refuse a teammate's id in the same words, each with the exact command.
#[test]
fn refusals_use_one_wording_and_name_the_exact_command() {
    let s = Setup::new();
    let ws = s.workspace.display().to_string();
    let out = s
        .troupe()
        .args([
            "run",
            "--workspace",
            &ws,
            "--model",
            "anthropic:claude",
            "go",
        ])
        .assert()
        .code(2);
    insta::assert_snapshot!("unknown_provider", stderr(&out));

    let script = s.script_agents(
        "team.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "helps", "prompt": "say hi"}}]},
                {"tool_calls": [{"name": "wait_agent", "arguments": {"timeout_ms": 10000}}]},
                {"text": "alpha said hi"},
            ],
            "alpha": [{"text": "hi"}],
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "go"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let view: Value = serde_json::from_slice(
        &s.troupe()
            .args(["team", "show", &id, "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let alpha = view["members"][1]["id"].as_str().unwrap().to_owned();
    let home = s.home.display().to_string();
    let mut refusals = Vec::new();
    for args in [
        &["resume", &alpha][..],
        &["team", "show", &alpha],
        &["team", "verify", &alpha],
    ] {
        let out = s.troupe().args(args).assert().code(2).stdout("");
        refusals.push(redact(
            &stderr(&out),
            &[(&alpha, "<ALPHA>"), (&id, "<LEAD>"), (&home, "<HOME>")],
        ));
    }
    insta::assert_snapshot!("teammate_refusals", refusals.concat());
}

/// `team show` and `team verify` use one vocabulary: the roster's *phase* (`active`) and what
/// a member is doing, its *status* (offline `inactive`), both named as such; pending messages
/// say when they were queued, not their internal id.
#[test]
fn team_show_and_verify_name_phase_and_status() {
    let s = Setup::new();
    let script = s.script_agents(
        "team.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "helps", "prompt": "wait"}}]},
                {"text": "alpha is there"},
                {"tool_calls": [{"name": "send_message", "arguments": {"target": "alpha", "message": "for later"}}]},
                {"text": "alpha will read it later"},
            ],
            "alpha": [{"text": "waiting"}],
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "go"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    // The quiet message is sent in a later run, when alpha is surely inactive, so it stays
    // queued (sent in the same run it could reach alpha while alpha still ran).
    s.troupe()
        .args(["resume", &id, "leave alpha a note"])
        .assert()
        .success();
    let view: Value = serde_json::from_slice(
        &s.troupe()
            .args(["team", "show", &id, "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let alpha = view["members"][1]["id"].as_str().unwrap().to_owned();
    assert_eq!(view["members"][1]["phase"], "active");
    assert_eq!(view["members"][1]["status"], "inactive");
    let out = s.troupe().args(["team", "show", &id]).assert().success();
    let table = stdout(&out);
    // The queued time is the only thing that varies: replace it.
    let table: String = table
        .lines()
        .map(|l| {
            if let Some(rest) = l.strip_prefix(&format!("team {id} (Lead log: ")) {
                // The count of the Lead's events is not what this pins.
                format!(
                    "team {id} (Lead log: <N>{}",
                    &rest[rest.find(' ').unwrap()..]
                )
            } else if l.starts_with("  20") && l.contains("Z  ") {
                format!("  <QUEUED>{}", &l[l.find("Z  ").unwrap() + 1..])
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(
        "team_show_phase_and_status",
        redact(
            &table,
            &[
                (&alpha, "<ALPHA>"),
                (&id, "<LEAD>"),
                (&model["script:".len()..], "<SCRIPT>")
            ]
        )
    );
    let out = s.troupe().args(["team", "verify", &id]).assert().success();
    let line = stdout(&out);
    assert!(line.contains("OK: 1 teammate (phase: 1 active)"), "{line}");
}

/// The printed panel address does not pretend to know the port: it names the default one as
/// such.
#[test]
fn the_demo_names_the_panel_port_as_the_default_one() {
    let s = Setup::new();
    let demo = s.workspace.join("demo");
    let out = s
        .troupe()
        .args(["demo", "--workspace", &demo.display().to_string()])
        .assert()
        .success();
    let err = stderr(&out);
    let id = session_id(&err);
    let line = err
        .lines()
        .find(|l| l.contains("watch it in a browser"))
        .unwrap_or_else(|| panic!("{err}"));
    insta::assert_snapshot!(
        "demo_panel_line",
        redact(
            line,
            &[(&id, "<ID>"), (&s.home.display().to_string(), "<HOME>")]
        )
    );
}

/// A failed turn counts the same tool calls in its own line and in the summary: calls cut by
/// the output limit never ran, so neither counts them (its line said 2, the summary 0).
#[test]
fn a_failed_turns_line_and_the_summary_count_the_same_tool_calls() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    let cut = |id: &str| {
        FakeResponse::sse(vec![
            chunks::delta(json!({"role": "assistant", "content": null})),
            chunks::delta(
                json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": "write", "arguments": "{\"path\":\"big.py\",\"content\":\"def"}}]}),
            ),
            chunks::finish("length"),
            chunks::usage(10, 4096),
        ])
    };
    server.push_all([cut("c1"), cut("c2"), cut("c3")]);
    let out = s
        .run(&[
            "--model",
            "compatible:m",
            "--base-url",
            &server.base_url(),
            "write big.py",
        ])
        .assert()
        .code(1);
    let err = stderr(&out);
    let turn = err
        .lines()
        .find(|l| l.starts_with("lead: turn 1 failed (LLM_TRUNCATED_TOOL_CALL)"))
        .unwrap_or_else(|| panic!("{err}"));
    let summary = err
        .lines()
        .find(|l| l.starts_with("lead: 1 turn,"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(turn.contains("(0 tool calls,"), "{turn}\n{err}");
    assert!(
        summary.starts_with("lead: 1 turn, 0 tool calls,"),
        "{summary}"
    );
    // Both cut calls are still shown as they were attempted.
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("lead: write (arguments cut after"))
            .count(),
        2,
        "{err}"
    );
}

/// `--json` tool summaries are cut at a value boundary and marked, never in the middle of a
/// value or an escape.
#[test]
fn json_tool_summaries_are_cut_at_a_value_boundary() {
    let s = Setup::new();
    let content = "def main():\n    print(\"hello\")\n".repeat(10);
    let script = s.script_agents(
        "write.json",
        json!({"lead": [
            {"tool_calls": [{"name": "write", "arguments": {"path": "big.py", "content": content}}]},
            {"text": "written"},
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--model", &model, "--json", "write"])
        .assert()
        .success();
    let started: Value = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"] == "toolStarted")
        .unwrap();
    let summary = started["summary"].as_str().unwrap();
    assert!(summary.chars().count() <= 120, "{summary}");
    // Still JSON: the long string was shortened inside its quotes, the short one kept whole.
    let parsed: Value = serde_json::from_str(summary).unwrap_or_else(|e| panic!("{summary}: {e}"));
    assert_eq!(parsed["path"], "big.py");
    let shown = parsed["content"].as_str().unwrap();
    assert!(shown.ends_with('…'), "{summary}");
    assert!(
        content.starts_with(shown.trim_end_matches('…')),
        "{summary}"
    );
}

/// `team show` puts a write-scope overlap on every task it concerns — the task in progress and
/// the pending task that would collide with it — and never on a completed task; `--json`
/// keeps the REFERENCE c.11.1 field as it is (on the pending task only).
#[test]
fn team_show_puts_an_overlap_on_every_task_it_concerns() {
    let s = Setup::new();
    let create = |subject: &str, scope: &str| {
        json!({"tool_calls": [{"name": "team_task_create", "arguments": {
            "subject": subject, "description": "d", "write_scopes": [scope]}}]})
    };
    let script = s.script_agents(
        "overlap.json",
        json!({"lead": [
            create("Fix counting", "wordstats/counting.py"),
            create("Extend the package", "wordstats"),
            create("Write docs", "docs"),
            create("Old fix", "wordstats/counting.py"),
            {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-4", "expected_revision": 1, "action": "claim"}}]},
            {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-4", "expected_revision": 2, "action": "complete"}}]},
            {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-1", "expected_revision": 1, "action": "claim"}}]},
            {"text": "task-1 is in progress"},
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "plan"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let out = s.troupe().args(["team", "show", &id]).assert().success();
    let table = stdout(&out);
    let tasks: String = table
        .lines()
        .skip_while(|l| !l.starts_with("tasks"))
        .take_while(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    insta::assert_snapshot!("team_show_overlaps", tasks);
    let view: Value = serde_json::from_slice(
        &s.troupe()
            .args(["team", "show", &id, "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let warnings: Vec<&Value> = view["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["writeScopeWarnings"])
        .collect();
    assert_eq!(
        warnings,
        [
            &json!([]),
            &json!(["write scopes overlap with task-1"]),
            &json!([]),
            &json!(["write scopes overlap with task-1"]),
        ]
    );
}
