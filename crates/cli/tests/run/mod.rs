//! `troupe run` and `troupe resume` through the real binary: scripted and HTTP models (the
//! loopback fake OpenAI server), bad input, `--json`, Ctrl-C, and kill -9 then resume.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_protocol::SessionId;
use troupe_test_support::{FakeOpenAi, FakeResponse};

use super::{assert_bad_input, snapshot_settings, troupe};

/// A home, a workspace with `notes.txt`, and a place for scripts, all temporary.
pub(crate) struct Setup {
    _root: tempfile::TempDir,
    pub(crate) home: PathBuf,
    pub(crate) workspace: PathBuf,
    pub(crate) scripts: PathBuf,
}

impl Setup {
    pub(crate) fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let workspace = root.path().join("ws");
        let scripts = root.path().join("scripts");
        std::fs::create_dir(&workspace).unwrap();
        std::fs::create_dir(&scripts).unwrap();
        std::fs::write(workspace.join("notes.txt"), "hello world\n").unwrap();
        Self {
            _root: root,
            home,
            workspace,
            scripts,
        }
    }

    fn script(&self, name: &str, lead_steps: Value) -> PathBuf {
        self.script_agents(name, json!({"lead": lead_steps}))
    }

    /// A script file with the steps of several agents: `{"lead": […], "alpha": […]}`.
    pub(crate) fn script_agents(&self, name: &str, agents: Value) -> PathBuf {
        let path = self.scripts.join(name);
        std::fs::write(&path, json!({"agents": agents}).to_string()).unwrap();
        path
    }

    pub(crate) fn troupe(&self) -> assert_cmd::Command {
        troupe(&self.home)
    }

    /// `troupe run --workspace WS ARGS…`.
    pub(crate) fn run(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = self.troupe();
        cmd.arg("run")
            .arg("--workspace")
            .arg(&self.workspace)
            .args(args);
        cmd
    }

    /// The same, as a spawned child process (for signals).
    pub(crate) fn spawn_run(&self, args: &[&str]) -> Child {
        std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
            .arg("--home")
            .arg(&self.home)
            .env_remove("TROUPE_HOME")
            .arg("run")
            .arg("--workspace")
            .arg(&self.workspace)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The events of a session, as `troupe log ID --json` prints them.
    pub(crate) fn log(&self, id: &str) -> Vec<Value> {
        let out = self.troupe().args(["log", id, "--json"]).assert().success();
        stdout(&out)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Waits until `marker` in the workspace holds a pid (written by a scripted `bash` call).
    fn wait_for_marker(&self, marker: &str, child: &mut Child) -> i32 {
        let path = self.workspace.join(marker);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(pid) = text.trim().parse::<i32>()
            {
                return pid;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("troupe exited ({status}) before the marker appeared");
            }
            assert!(Instant::now() < deadline, "marker {marker} never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub(crate) fn stdout(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

pub(crate) fn stderr(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8(out.get_output().stderr.clone()).unwrap()
}

/// The summary a run ends with: its stderr from the Lead's statistics line (`lead: N turns, …`,
/// the last one) to the end.
pub(crate) fn summary(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| {
            l.strip_prefix("lead: ")
                .and_then(|rest| rest.split(' ').next())
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    lines[start..].iter().map(|l| format!("{l}\n")).collect()
}

/// The session id from the first stderr line, `session <id> (…)`.
pub(crate) fn session_id(stderr: &str) -> String {
    let first = stderr.lines().next().unwrap_or_default();
    let rest = first
        .strip_prefix("session ")
        .unwrap_or_else(|| panic!("stderr must start with the session id: {stderr:?}"));
    rest.split_whitespace().next().unwrap().to_owned()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// Asserts `wanted` appears in `events`' types in this order (not necessarily adjacent).
fn assert_in_order(events: &[Value], wanted: &[&str]) {
    let all = types(events);
    let mut at = 0;
    for want in wanted {
        match all[at..].iter().position(|t| t == want) {
            Some(i) => at += i + 1,
            None => panic!("{want} missing (in order {wanted:?}) from {all:?}"),
        }
    }
}

/// Sends `signal` to a process, or to a process group when `pid` is negative.
pub(crate) fn signal(pid: i32, signal: rustix::process::Signal) {
    let target = rustix::process::Pid::from_raw(pid.abs()).unwrap();
    let _ = if pid < 0 {
        rustix::process::kill_process_group(target, signal)
    } else {
        rustix::process::kill_process(target, signal)
    };
}

pub(crate) fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Read, edit, check with bash, answer.
fn edit_steps() -> Value {
    json!([
        {"tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]},
        {"tool_calls": [{"name": "edit", "arguments": {
            "path": "notes.txt", "old_string": "world", "new_string": "troupe"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "cat notes.txt"}}]},
        {"text": "notes.txt now says hello troupe."},
        {"text": "Second answer."}
    ])
}

/// A `bash` call that records its process-group id in `marker`, then sleeps; then an answer.
fn sleeping_steps(marker: &str) -> Value {
    json!([
        {"tool_calls": [{"name": "bash", "arguments": {"command": format!("echo $$ > {marker}; sleep 30")}}]},
        {"text": "Finished after the interruption."}
    ])
}

#[test]
fn run_with_a_script_edits_a_file_and_records_every_tool_call() {
    let s = Setup::new();
    let script = s.script("edit.json", edit_steps());
    let out = s
        .run(&[
            "--model",
            &format!("script:{}", script.display()),
            "change world to troupe",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "notes.txt now says hello troupe.\n");
    let err = stderr(&out);
    let id = session_id(&err);
    // `1 turn, 3 tool calls`, `troupe log ID`, `troupe resume ID`.
    let home = s.home.display().to_string();
    let scripts = s.scripts.display().to_string();
    let names = [
        (id.as_str(), "[SESSION]"),
        (&home, "[HOME]"),
        (&scripts, "[SCRIPTS]"),
    ];
    snapshot_settings(&names).bind(|| insta::assert_snapshot!("run_script_stderr", err));
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("notes.txt")).unwrap(),
        "hello troupe\n"
    );
    let events = s.log(&id);
    assert_in_order(
        &events,
        &[
            "agent/config",
            "turn/start",
            "user/message",
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result",
            "assistant/message",
            "turn/end",
        ],
    );
    let calls: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(calls, ["read", "edit", "bash"]);
    assert!(
        events
            .iter()
            .filter(|e| e["type"] == "tool/result")
            .all(|e| e["data"]["isError"] == false),
        "{events:?}"
    );
    let bash = events.iter().rfind(|e| e["type"] == "tool/result").unwrap();
    assert!(
        bash["data"]["content"]
            .as_str()
            .unwrap()
            .contains("hello troupe")
    );
    // The recorded config holds the canonical workspace and the absolute script path.
    let config = &events[0]["data"];
    assert_eq!(
        config["workspace"],
        s.workspace.canonicalize().unwrap().display().to_string()
    );
    assert_eq!(config["model"]["model"], script.display().to_string());

    // Nothing left to do: resume prints the last answer without a model call.
    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "notes.txt now says hello troupe.\n");
    let err = stderr(&out);
    snapshot_settings(&names).bind(|| insta::assert_snapshot!("resume_nothing_to_do", err));
    assert_eq!(
        s.log(&id).len(),
        events.len(),
        "a no-op resume writes nothing"
    );

    // With a prompt, resume runs a new turn (the script continues at its fifth step).
    let out = s
        .troupe()
        .args(["resume", &id, "anything", "else?"])
        .assert()
        .success();
    assert_eq!(stdout(&out), "Second answer.\n");
    let events = s.log(&id);
    let prompts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "user/message")
        .collect();
    assert_eq!(prompts[1]["data"]["content"][0]["text"], "anything else?");
}

#[test]
fn a_relative_script_path_is_recorded_absolute() {
    let s = Setup::new();
    s.script("edit.json", edit_steps());
    let out = s
        .run(&["--model", "script:edit.json", "go"])
        .current_dir(&s.scripts)
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let events = s.log(&id);
    assert_eq!(
        events[0]["data"]["model"]["model"],
        s.scripts.join("edit.json").display().to_string()
    );
}

#[test]
fn json_output_is_one_object_per_line_ending_with_done() {
    let s = Setup::new();
    let script = s.script("edit.json", edit_steps());
    let out = s
        .run(&[
            "--json",
            "--model",
            &format!("script:{}", script.display()),
            "change world to troupe",
        ])
        .assert()
        .success();
    let text = stdout(&out);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let id = session_id(&stderr(&out));
    assert_eq!(lines[0]["event"], "session");
    assert_eq!(lines[0]["session"], id.as_str());
    let done = lines.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["session"], id.as_str());
    assert_eq!(done["answer"], "notes.txt now says hello troupe.");
    assert_eq!(done["stats"]["toolCalls"], 3);
    let tools: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "toolStarted")
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["read", "edit", "bash"]);
    assert!(lines.iter().all(|l| l["event"].is_string()));
    assert!(
        lines
            .iter()
            .filter(|l| l["event"] == "turnEnded")
            .all(|l| l["agent"] == id.as_str() && l["agentName"] == "lead")
    );
    // The answer is only inside the done line.
    assert!(
        !text
            .lines()
            .any(|l| l == "notes.txt now says hello troupe.")
    );
}

#[test]
fn run_against_the_fake_server_sends_the_tool_results_back() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    // Tool-call argument strings split over several chunks, and the byte stream re-split at
    // odd sizes, so deltas straddle network reads.
    server.push(
        FakeResponse::tool_calls(&[("call_r", "read", json!({"path": "notes.txt"}))], 4).rechunk(7),
    );
    server.push(
        FakeResponse::tool_calls(
            &[(
                "call_e",
                "edit",
                json!({"path": "notes.txt", "old_string": "world", "new_string": "fake server"}),
            )],
            5,
        )
        .rechunk(11),
    );
    server.push(FakeResponse::text("Done: notes.txt edited."));
    let out = s
        .run(&[
            "--model",
            "compatible:test-model",
            "--base-url",
            &server.base_url(),
            "--api-key-env",
            "TROUPE_TEST_KEY",
            "edit the notes",
        ])
        .env("TROUPE_TEST_KEY", "sk-secret-123")
        .assert()
        .success();
    assert_eq!(stdout(&out), "Done: notes.txt edited.\n");
    let err = stderr(&out);
    let id = session_id(&err);
    // The usage is summed: tokens 30 in.
    let home = s.home.display().to_string();
    let names = [(id.as_str(), "[SESSION]"), (&home, "[HOME]")];
    snapshot_settings(&names)
        .bind(|| insta::assert_snapshot!("run_fake_server_summary", summary(&err)));
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("notes.txt")).unwrap(),
        "hello fake server\n"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].body["model"], "test-model");
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-secret-123")
    );
    let first = requests[0].messages();
    assert_eq!(first[0]["role"], "system");
    assert_eq!(first.last().unwrap()["content"], "edit the notes");
    // The second request carries the first call and its result.
    let second = requests[1].messages();
    let assistant = &second[second.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_r");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "read");
    let tool = second.last().unwrap();
    assert_eq!(tool["role"], "tool");
    assert_eq!(tool["tool_call_id"], "call_r");
    assert!(tool["content"].as_str().unwrap().contains("hello world"));
    // The third has the edit's result.
    let third = requests[2].messages();
    let tool = third.last().unwrap();
    assert_eq!(tool["tool_call_id"], "call_e");
    assert!(tool["content"].as_str().unwrap().contains("replacements"));
    // The key never reaches the session file.
    let file = std::fs::read_to_string(s.home.join(format!("sessions/{id}.jsonl"))).unwrap();
    assert!(!file.contains("sk-secret-123"));
    assert!(file.contains("TROUPE_TEST_KEY"));
}

#[test]
fn http_401_exits_1_and_says_check_your_api_key() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::openai_error(
        401,
        "Incorrect API key provided",
        "invalid_api_key",
    ));
    let out = s
        .run(&[
            "--model",
            "compatible:test-model",
            "--base-url",
            &server.base_url(),
            "--api-key-env",
            "TROUPE_TEST_KEY",
            "hello",
        ])
        .env("TROUPE_TEST_KEY", "wrong")
        .assert()
        .code(1)
        .stdout("");
    let err = stderr(&out);
    let id = session_id(&err);
    // LLM_AUTH, "check your API key" naming TROUPE_TEST_KEY, `troupe resume ID`.
    let home = s.home.display().to_string();
    let base_url = server.base_url();
    let names = [
        (id.as_str(), "[SESSION]"),
        (&home, "[HOME]"),
        (&base_url, "[BASE URL]"),
    ];
    snapshot_settings(&names)
        .bind(|| insta::assert_snapshot!("run_http_401_summary", summary(&err)));
    assert_eq!(server.request_count(), 1, "401 is not retried");
    let events = s.log(&id);
    let end = events.iter().rfind(|e| e["type"] == "turn/end").unwrap();
    assert_eq!(end["data"]["reason"]["kind"], "failed");
    assert_eq!(end["data"]["reason"]["code"], "LLM_AUTH");

    // With the key fixed, resume retries the failed turn (the recorded server and key variable
    // are used), here with --json.
    server.push(FakeResponse::text("Hello after all."));
    let out = s
        .troupe()
        .args(["resume", &id, "--json"])
        .env("TROUPE_TEST_KEY", "right")
        .assert()
        .success();
    let last: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "done");
    assert_eq!(last["status"], "completed");
    assert_eq!(last["answer"], "Hello after all.");
    let requests = server.requests();
    assert_eq!(requests[1].header("authorization"), Some("Bearer right"));
    let continuation = requests[1].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(continuation.contains("LLM_AUTH"), "{continuation}");
}

#[test]
fn bad_input_is_one_line_exit_2_and_creates_nothing() {
    let s = Setup::new();
    let ws = s.workspace.display().to_string();
    let malformed = s.scripts.join("malformed.json");
    std::fs::write(&malformed, "{\"agents\": {\"lead\": [").unwrap();
    let malformed = format!("script:{}", malformed.display());
    let no_lead = s.scripts.join("no-lead.json");
    std::fs::write(
        &no_lead,
        json!({"agents": {"helper": [{"text": "hi"}]}}).to_string(),
    )
    .unwrap();
    let no_lead = format!("script:{}", no_lead.display());
    let good = format!("script:{}", s.script("good.json", edit_steps()).display());
    let missing = s.workspace.join("missing").display().to_string();
    let file = s.workspace.join("notes.txt").display().to_string();
    let home = s.home.as_path();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "--workspace", &ws, "--model", &good, "  "],
            "the prompt is empty",
        ),
        (
            vec!["run", "--workspace", &ws, "--model", &malformed, "go"],
            "not valid JSON",
        ),
        (
            vec!["run", "--workspace", &ws, "--model", &no_lead, "go"],
            "no steps for agent `lead`",
        ),
        (
            vec![
                "run",
                "--workspace",
                &ws,
                "--model",
                "script:/nonexistent/s.json",
                "go",
            ],
            "cannot read script",
        ),
        (
            vec!["run", "--workspace", &ws, "--model", "nosuch:model", "go"],
            "unknown model provider `nosuch`",
        ),
        (
            vec!["run", "--workspace", &ws, "--model", "llama3", "go"],
            "cannot tell which provider",
        ),
        (
            vec!["run", "--workspace", &missing, "--model", &good, "go"],
            "does not exist",
        ),
        (
            vec!["run", "--workspace", &file, "--model", &good, "go"],
            "is not a directory",
        ),
        (
            vec!["resume", "no-such-session"],
            "session no-such-session not found",
        ),
        (vec!["resume", "../etc/passwd"], "invalid session id"),
    ];
    for (args, message) in cases {
        assert_bad_input(home, &args, message);
        assert!(!home.exists(), "{args:?} created the home");
    }
    // No prompt at all, no session: clap's usage errors, also one line.
    assert_bad_input(
        home,
        &["run", "--workspace", &ws],
        // No PROMPT and a stdin that is not a terminal (empty here): the prompt is read from it.
        "the prompt read from stdin is empty: say what the agent should do",
    );
    assert_bad_input(
        home,
        &["resume", "--model", &good],
        "the following required arguments were not provided: <SESSION> (see 'troupe resume --help')",
    );
    assert!(!home.exists());
}

#[test]
fn a_missing_api_key_names_the_variable() {
    let s = Setup::new();
    let ws = s.workspace.display().to_string();
    let mut cmd = s.troupe();
    cmd.env_remove("DEEPSEEK_API_KEY").args([
        "run",
        "--workspace",
        &ws,
        "--model",
        "deepseek:deepseek-chat",
        "hi",
    ]);
    let out = cmd.assert().code(2).stdout("");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("DEEPSEEK_API_KEY"), "{err}");
    assert!(!s.home.exists());
}

/// Bad input is reported in one order, whatever else is wrong: the command line itself, then
/// the workspace, then the model (provider, API key, script), then the home.
#[test]
fn the_workspace_is_checked_before_the_model_and_its_key() {
    let s = Setup::new();
    let missing = s.workspace.join("missing").display().to_string();
    let malformed = s.scripts.join("malformed.json");
    std::fs::write(&malformed, "{").unwrap();
    let malformed = format!("script:{}", malformed.display());
    for model in [
        &["--model", "deepseek:deepseek-chat"][..],
        &[],
        &["--model", "nosuch:model"],
        &["--model", &malformed],
    ] {
        for team in [true, false] {
            let mut args = vec!["run"];
            if team {
                args.push("--team");
            }
            args.extend(["--workspace", &missing]);
            args.extend(model);
            args.push("hi");
            let out = s
                .troupe()
                .env_remove("DEEPSEEK_API_KEY")
                .args(&args)
                .assert()
                .code(2)
                .stdout("");
            let err = stderr(&out);
            assert_eq!(
                err,
                format!("troupe: workspace {missing} does not exist\n"),
                "{args:?}"
            );
        }
    }
    // A workspace that is fine: then the model's problem is the one reported.
    let ws = s.workspace.display().to_string();
    let out = s
        .troupe()
        .env_remove("DEEPSEEK_API_KEY")
        .args(["run", "--team", "--workspace", &ws, "hi"])
        .assert()
        .code(2);
    assert!(
        stderr(&out).contains("DEEPSEEK_API_KEY"),
        "{}",
        stderr(&out)
    );
    // The command line comes first: an empty prompt, a limit flag without --team, a pace for
    // a model that is not a script.
    for (args, message) in [
        (
            vec!["run", "--workspace", &missing, " "],
            "the prompt is empty",
        ),
        (
            vec!["run", "--workspace", &missing, "--max-tasks", "3", "hi"],
            "--max-tasks applies to Team runs only",
        ),
    ] {
        assert_bad_input(&s.home, &args, message);
    }
    assert_bad_input(
        &s.home,
        &["run", "--workspace", &ws, "--pace", "5", "hi"],
        "--pace applies to a scripted model only (--model script:FILE), not to deepseek:deepseek-chat",
    );
    assert!(!s.home.exists());
}

/// `--pace` is accepted by a scripted `run` (and `resume`) and changes nothing in the log: a
/// paced run writes the same event types in the same order as an unpaced one.
#[test]
fn a_scripted_run_takes_a_pace_that_is_recorded_nowhere() {
    let s = Setup::new();
    let script = format!("script:{}", s.script("edit.json", edit_steps()).display());
    let kinds = |id: &str| -> Vec<String> {
        let out = s.troupe().args(["log", id, "--json"]).assert().success();
        stdout(&out)
            .lines()
            .map(|l| {
                let e: Value = serde_json::from_str(l).unwrap();
                assert!(!l.contains("\"pace"), "{l}");
                e["type"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    let paced = s
        .run(&["--model", &script, "--pace", "1", "go"])
        .assert()
        .success();
    let paced = session_id(&stderr(&paced));
    std::fs::write(s.workspace.join("notes.txt"), "hello world\n").unwrap();
    let plain = s.run(&["--model", &script, "go"]).assert().success();
    let plain = session_id(&stderr(&plain));
    assert_eq!(kinds(&paced), kinds(&plain));
    // A resume of a scripted session takes it too (nothing left to do here).
    s.troupe()
        .args(["resume", &paced, "--pace", "1"])
        .assert()
        .success();
}

#[test]
fn resume_refuses_a_session_locked_by_another_process() {
    let s = Setup::new();
    let script = s.script("edit.json", edit_steps());
    let out = s
        .run(&["--model", &format!("script:{}", script.display()), "go"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let before = std::fs::read(s.home.join(format!("sessions/{id}.jsonl"))).unwrap();
    let (writer, _) = Journal::open_home(&s.home)
        .open(&SessionId::new(id.as_str()).unwrap())
        .unwrap();
    assert_bad_input(
        &s.home,
        &["resume", &id, "more"],
        "session is locked by another process",
    );
    drop(writer);
    let after = std::fs::read(s.home.join(format!("sessions/{id}.jsonl"))).unwrap();
    assert_eq!(before, after);
}

#[test]
fn kill_9_during_a_tool_call_then_resume_finishes_the_work() {
    let s = Setup::new();
    let script = s.script("sleep.json", sleeping_steps("marker"));
    let mut child = s.spawn_run(&["--model", &format!("script:{}", script.display()), "work"]);
    let group = s.wait_for_marker("marker", &mut child);
    signal(child.id() as i32, rustix::process::Signal::KILL);
    let (code, _, err) = finish(child);
    // The orphaned `sleep` is ours to clean up.
    signal(-group, rustix::process::Signal::KILL);
    assert_eq!(code, -1, "killed by a signal");
    let id = session_id(&err);
    let before = s.log(&id);
    // The log ends with the call (and the `tool/process` record of the process group it
    // started, when the runtime wrote one before the kill).
    let call = before
        .iter()
        .rposition(|e| e["type"] == "tool/call")
        .unwrap();
    assert!(
        types(&before[call + 1..])
            .iter()
            .all(|t| *t == "tool/process"),
        "{:?}",
        types(&before)
    );

    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "Finished after the interruption.\n");
    // `recovered: …`, then the continuation and its turn, then the summary.
    let err = stderr(&out);
    let home = s.home.display().to_string();
    let scripts = s.scripts.display().to_string();
    let names = [
        (id.as_str(), "[SESSION]"),
        (&home, "[HOME]"),
        (&scripts, "[SCRIPTS]"),
    ];
    snapshot_settings(&names).bind(|| insta::assert_snapshot!("resume_after_kill_9", err));
    let events = s.log(&id);
    let call_seq = before[call]["seq"].as_u64().unwrap();
    let closer = &events[before.len()];
    assert_eq!(closer["type"], "tool/result");
    assert_eq!(closer["data"]["code"], "TOOL_OUTCOME_UNKNOWN");
    assert_eq!(closer["data"]["sourceEventSeqs"], json!([call_seq]));
    assert_in_order(
        &events[before.len()..],
        &[
            "tool/result",
            "step/end",
            "turn/end",
            "turn/start",
            "user/message",
            "turn/end",
        ],
    );
    let ends: Vec<&Value> = events.iter().filter(|e| e["type"] == "turn/end").collect();
    assert_eq!(ends[0]["data"]["reason"]["kind"], "interrupted");
    assert_eq!(ends[1]["data"]["reason"]["kind"], "completed");
    let resume_msg = events
        .iter()
        .filter(|e| e["type"] == "user/message")
        .nth(1)
        .unwrap();
    assert_eq!(resume_msg["data"]["source"]["kind"], "resume");
}

#[test]
fn kill_9_then_resume_sends_the_model_a_coherent_history() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::tool_calls(
        &[(
            "call_sleep",
            "bash",
            json!({"command": "echo $$ > marker; sleep 30"}),
        )],
        3,
    ));
    let mut child = s.spawn_run(&[
        "--model",
        "compatible:test-model",
        "--base-url",
        &server.base_url(),
        "work",
    ]);
    let group = s.wait_for_marker("marker", &mut child);
    signal(child.id() as i32, rustix::process::Signal::KILL);
    let (_, _, err) = finish(child);
    signal(-group, rustix::process::Signal::KILL);
    let id = session_id(&err);

    // The recorded model and base URL are used: no flags needed.
    server.push(FakeResponse::text("Checked the state; all done."));
    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "Checked the state; all done.\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].messages();
    // Every assistant tool call is answered by a tool message before the next non-tool message.
    for (i, message) in messages.iter().enumerate() {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let id = &call["id"];
            let answered = messages[i + 1..]
                .iter()
                .take_while(|m| m["role"] == "tool")
                .any(|m| &m["tool_call_id"] == id);
            assert!(answered, "call {id} unanswered in {messages:?}");
        }
    }
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert!(
        messages[3]["content"]
            .as_str()
            .unwrap()
            .contains("TOOL_OUTCOME_UNKNOWN")
    );
    assert!(
        messages[4]["content"]
            .as_str()
            .unwrap()
            .contains("did not finish")
    );
}

#[test]
fn ctrl_c_interrupts_the_turn_and_resume_completes_it() {
    let s = Setup::new();
    let script = s.script("sleep.json", sleeping_steps("marker"));
    let mut child = s.spawn_run(&["--model", &format!("script:{}", script.display()), "work"]);
    let group = s.wait_for_marker("marker", &mut child);
    signal(child.id() as i32, rustix::process::Signal::INT);
    let (code, out, err) = finish(child);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "");
    let id = session_id(&err);
    // The last line: `interrupted — continue with: troupe resume ID`.
    let home = s.home.display().to_string();
    let names = [(id.as_str(), "[SESSION]"), (&home, "[HOME]")];
    snapshot_settings(&names)
        .bind(|| insta::assert_snapshot!("run_interrupted_summary", summary(&err)));
    // The bash process group was killed with the turn (allowing a moment for reaping).
    let group = rustix::process::Pid::from_raw(group).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rustix::process::test_kill_process_group(group).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the tool's process group survived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let events = s.log(&id);
    let end = events.iter().rfind(|e| e["type"] == "turn/end").unwrap();
    assert_eq!(end["data"]["reason"]["kind"], "aborted");
    assert_eq!(end["data"]["reason"]["reason"]["kind"], "user");

    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "Finished after the interruption.\n");
    let events = s.log(&id);
    let end = events.iter().rfind(|e| e["type"] == "turn/end").unwrap();
    assert_eq!(end["data"]["reason"]["kind"], "completed");
}

/// SIGTERM (and SIGHUP) stop the run like Ctrl-C: a resumable session, no stray processes.
#[test]
fn sigterm_and_sighup_interrupt_cleanly_and_resume_completes() {
    for (n, sig) in [rustix::process::Signal::TERM, rustix::process::Signal::HUP]
        .into_iter()
        .enumerate()
    {
        let s = Setup::new();
        let marker = format!("marker{n}");
        let script = s.script("sleep.json", sleeping_steps(&marker));
        let mut child = s.spawn_run(&["--model", &format!("script:{}", script.display()), "work"]);
        let group = s.wait_for_marker(&marker, &mut child);
        signal(child.id() as i32, sig);
        let (code, _out, err) = finish(child);
        assert_eq!(code, 1, "{sig:?}: {err}");
        let id = session_id(&err);
        // `interrupted — continue with: troupe resume ID`, as for Ctrl-C.
        let home = s.home.display().to_string();
        let names = [(id.as_str(), "[SESSION]"), (&home, "[HOME]")];
        snapshot_settings(&names)
            .bind(|| insta::assert_snapshot!("run_interrupted_summary", summary(&err)));
        let group = rustix::process::Pid::from_raw(group).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while rustix::process::test_kill_process_group(group).is_ok() {
            assert!(
                Instant::now() < deadline,
                "{sig:?}: the tool's process group survived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = s.troupe().args(["resume", &id]).assert().success();
        assert_eq!(stdout(&out), "Finished after the interruption.\n");
    }
}

/// API keys in the environment never reach the model, the tools or the session files.
#[test]
fn api_keys_in_the_environment_stay_out_of_tools_and_logs() {
    let s = Setup::new();
    let secret = "sk-test-SECRET-4242";
    let script = s.script(
        "env.json",
        json!([
            {"tool_calls": [{"name": "bash", "arguments": {"command": "env; echo key=$OPENAI_API_KEY; echo $MY_KEY"}}]},
            {"text": "checked the environment"}
        ]),
    );
    s.run(&[
        "--model",
        &format!("script:{}", script.display()),
        "show env",
    ])
    .env("OPENAI_API_KEY", secret)
    .env("DEEPSEEK_API_KEY", secret)
    .assert()
    .success();
    let mut leaked = Vec::new();
    for entry in walk(&s.home) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        if text.contains(secret) {
            leaked.push(entry);
        }
    }
    assert!(leaked.is_empty(), "the key leaked into {leaked:?}");
    // The tool really ran: its output is in the log, without the key.
    let id = s
        .troupe()
        .args(["sessions", "--json"])
        .output()
        .map(|o| {
            serde_json::from_slice::<Value>(&o.stdout).unwrap()[0]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .unwrap();
    let result = s
        .log(&id)
        .into_iter()
        .find(|e| e["type"] == "tool/result")
        .unwrap();
    let content = result["data"]["content"].as_str().unwrap();
    assert!(
        content.contains("key=\\n") || content.contains("key=\n"),
        "{content}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// A model override on resume is recorded: a later plain resume keeps using it.
#[test]
fn a_resume_model_override_sticks() {
    let s = Setup::new();
    let a = s.script("a.json", json!([{"text": "from a"}]));
    let b = s.script(
        "b.json",
        json!([{"text": "unused"}, {"text": "from b"}, {"text": "b again"}]),
    );
    let out = s
        .run(&["--model", &format!("script:{}", a.display()), "first"])
        .assert()
        .success();
    let id = session_id(&String::from_utf8(out.get_output().stderr.clone()).unwrap());
    let out = s
        .troupe()
        .args([
            "resume",
            &id,
            "--model",
            &format!("script:{}", b.display()),
            "second",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "from b\n");
    let out = s.troupe().args(["resume", &id, "third"]).assert().success();
    assert_eq!(stdout(&out), "b again\n");
}

/// A signal while only a teammate is still working (the Lead already answered) is reported as
/// an interruption (exit 1, resume hint), never as success; resume then continues the teammate.
#[test]
fn a_signal_while_only_teammates_run_is_an_interruption() {
    let s = Setup::new();
    let script = s.script_agents(
        "team.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {
                    "name": "slow", "description": "sleeps", "prompt": "sleep"}}]},
                {"text": "Lead done."}
            ],
            "slow": [
                {"tool_calls": [{"name": "bash", "arguments": {"command": "echo $$ > marker; sleep 30"}}]},
                {"text": "slow done after the stop"},
                {"text": "slow done"}
            ]
        }),
    );
    let mut child = s.spawn_run(&[
        "--team",
        "--model",
        &format!("script:{}", script.display()),
        "go",
    ]);
    s.wait_for_marker("marker", &mut child);
    signal(child.id() as i32, rustix::process::Signal::INT);
    let (code, _out, err) = finish(child);
    assert_eq!(code, 1, "{err}");
    let id = session_id(&err);
    assert!(err.contains(&format!("troupe resume {id}")), "{err}");
    s.troupe().args(["resume", &id]).assert().success();
    s.troupe().args(["team", "verify", &id]).assert().success();
}

/// Issue 10 defect 1 (DESIGN decision 9): a turn's start and its claim of the prompt (the
/// inbox removal, then the `user/message`) are one batch. A log cut anywhere inside that batch
/// — here inside the `user/message` line, as a crash between pages of the write would leave
/// it — replays without any of it, so the prompt is still waiting and `troupe resume` runs it:
/// the model is asked with the prompt.
#[test]
fn a_log_cut_inside_a_claim_loses_no_prompt() {
    for cut_at in [
        "\"type\":\"user/message\"",
        "\"type\":\"agent/inbox/spliced\",\"data\":{\"inserted\":[],",
    ] {
        let s = Setup::new();
        let server = FakeOpenAi::start().unwrap();
        server.push(FakeResponse::text("First answer."));
        let args = [
            "--model",
            "compatible:test-model",
            "--base-url",
            &server.base_url(),
            "count the words in notes.txt",
        ];
        let out = s.run(&args).assert().success();
        let id = session_id(&stderr(&out));
        let path = s.home.join(format!("sessions/{id}.jsonl"));
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        // The claim's lines (after the prompt's arrival in the inbox).
        let at = text
            .find(cut_at)
            .unwrap_or_else(|| panic!("{cut_at} in {text}"))
            + 3;
        std::fs::write(&path, &bytes[..at]).unwrap();

        server.push(FakeResponse::text("Counted after the crash."));
        let out = s.troupe().args(["resume", &id]).assert().success();
        assert_eq!(
            stdout(&out),
            "Counted after the crash.\n",
            "cut at {cut_at}"
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "cut at {cut_at}");
        let asked: Vec<String> = requests[1]
            .messages()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].to_string())
            .collect();
        assert_eq!(asked.len(), 1, "cut at {cut_at}: {asked:?}");
        assert!(
            asked[0].contains("count the words in notes.txt"),
            "{asked:?}"
        );
        // The resumed log is whole: one claim of the prompt, no torn bytes left.
        let events = s.log(&id);
        let prompts = events
            .iter()
            .filter(|e| e["type"] == "user/message")
            .count();
        assert_eq!(prompts, 1, "cut at {cut_at}");
    }
}
