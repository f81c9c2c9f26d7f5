//! Local model servers through the real binary, against the fake server mimicking them
//! (`Mimic`): the README's "Using a local model" settings for llama-cpp-python and
//! `llama-server`, `--tool-choice` recorded and kept by `troupe resume`, the plain-request
//! fallback recorded as a `model/attempt`, and "usage not reported by the server".

use serde_json::{Value, json};
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse, Mimic};

use super::run::{Setup, session_id, stderr, stdout};

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The README's llama-cpp-python settings (`--base-url …/v1 --model local --tool-choice auto`):
/// a tool-using turn works although every streamed request gets an empty body (each falls back
/// to a plain request, recorded as a `model/attempt`), the tool-call-only message goes back as
/// `"content": ""`, and `--tool-choice` is recorded with the model: a plain resume keeps it, a
/// resume with `--tool-choice omit` replaces it (and the server then ignores the tools).
#[test]
fn llama_cpp_python_settings_run_tools_and_resume_keeps_the_tool_choice() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_cpp_python());
    server.push(FakeResponse::json(chunks::tool_call_completion(&[(
        "call__0_read_cmpl-1",
        "read",
        json!({"path": "notes.txt"}),
    )])));
    server.push(FakeResponse::json(chunks::text_completion(
        "notes.txt says hello world.",
    )));
    let out = s
        .run(&[
            "--base-url",
            &server.base_url(),
            "--model",
            "local",
            "--tool-choice",
            "auto",
            "read the notes",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "notes.txt says hello world.\n");
    let err = stderr(&out);
    let id = session_id(&err);
    assert!(
        err.contains("lead: 1 turn, 1 tool call, tokens 20 in / 6 out"),
        "the plain answers carry usage: {err}"
    );
    let requests = server.requests();
    let shape: Vec<(Value, Value)> = requests
        .iter()
        .map(|r| (r.body["stream"].clone(), r.body["tool_choice"].clone()))
        .collect();
    assert_eq!(
        shape,
        [
            (json!(true), json!("auto")),
            (json!(false), json!("auto")),
            (json!(true), json!("auto")),
            (json!(false), json!("auto")),
        ],
        "each model call: an empty stream, then one plain request"
    );
    let history = requests[3].messages();
    let assistant = &history[history.len() - 2];
    assert_eq!(assistant["content"], "", "never null: {assistant}");
    assert_eq!(assistant["tool_calls"][0]["id"], "call__0_read_cmpl-1");

    let events = s.log(&id);
    assert_eq!(
        of_type(&events, "agent/config")[0]["data"]["model"],
        json!({"provider": "compatible", "model": "local",
               "baseUrl": server.base_url(), "toolChoice": "auto"})
    );
    let attempts = of_type(&events, "model/attempt");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    for attempt in attempts {
        assert_eq!(
            attempt["data"]["attempt"]["error"]["code"],
            "LLM_EMPTY_STREAM"
        );
        assert_eq!(attempt["data"]["attempt"]["status"], 200);
        assert_eq!(attempt["data"]["attempt"]["retryDelayMs"], 0);
    }

    // A plain resume sends the recorded tool choice.
    server.push(FakeResponse::json(chunks::text_completion("Still hello.")));
    let out = s
        .troupe()
        .args(["resume", &id, "and again"])
        .assert()
        .success();
    assert_eq!(stdout(&out), "Still hello.\n");
    assert_eq!(server.requests()[4].body["tool_choice"], "auto");

    // `--tool-choice omit` on resume replaces it, and is recorded: the mimicked server then
    // leaves the tools out, and a later plain resume still sends no tool_choice.
    let out = s
        .troupe()
        .args(["resume", &id, "--tool-choice", "omit", "one more"])
        .assert()
        .success();
    assert_eq!(stdout(&out), format!("{}\n", Mimic::TOOLS_IGNORED));
    let out = s.troupe().args(["resume", &id, "last"]).assert().success();
    assert_eq!(stdout(&out), format!("{}\n", Mimic::TOOLS_IGNORED));
    let requests = server.requests();
    assert_eq!(requests.len(), 8);
    assert!(requests[6].body.get("tool_choice").is_none());
    assert!(requests[7].body.get("tool_choice").is_none());
    let configs = of_type(&s.log(&id), "agent/config")
        .into_iter()
        .map(|c| c["data"]["model"].get("toolChoice").cloned())
        .collect::<Vec<_>>();
    assert_eq!(
        configs,
        [Some(json!("auto")), None],
        "the override is recorded once"
    );
}

/// A server that omits `usage` (llama-cpp-python's streams: it ignores `stream_options`): the
/// summary and the turn's progress line say "usage not reported by the server", never
/// "tokens 0 in / 0 out".
#[test]
fn a_server_without_usage_is_reported_as_such() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_cpp_python());
    let out = s
        .run(&["--base-url", &server.base_url(), "--model", "local", "hi"])
        .assert()
        .success();
    assert_eq!(stdout(&out), format!("{}\n", Mimic::TOOLS_IGNORED));
    let err = stderr(&out);
    assert!(
        err.contains("lead: 1 turn, 0 tool calls, usage not reported by the server"),
        "{err}"
    );
    assert!(
        err.contains(
            "lead: turn 1 completed (0 tool calls, usage not reported by the server so far)"
        ),
        "{err}"
    );
    assert!(!err.contains("tokens 0 in"), "{err}");
    assert_eq!(
        server.requests()[0].body["stream_options"],
        json!({"include_usage": true})
    );
}

/// The README's `llama-server --jinja` settings (no `--tool-choice` needed): a tool-using turn
/// with usage counted; started without `--jinja`, the run fails at once (not retried) with a
/// message naming the flag.
#[test]
fn llama_server_settings_and_its_jinja_refusal() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_server());
    server.push(FakeResponse::tool_calls(
        &[("call_1", "read", json!({"path": "notes.txt"}))],
        3,
    ));
    server.push(FakeResponse::text("It says hello world."));
    let out = s
        .run(&[
            "--base-url",
            &server.base_url(),
            "--model",
            "local",
            "read the notes",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "It says hello world.\n");
    let err = stderr(&out);
    assert!(err.contains("tokens 20 in / 11 out"), "{err}");
    assert_eq!(server.request_count(), 2, "no fallback needed");

    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic {
        require_jinja: true,
        ..Mimic::llama_server()
    });
    let out = s
        .run(&["--base-url", &server.base_url(), "--model", "local", "hi"])
        .assert()
        .code(1);
    let err = stderr(&out);
    assert!(err.contains("LLM_BAD_REQUEST"), "{err}");
    assert!(err.contains("restart llama-server with --jinja"), "{err}");
    assert_eq!(server.request_count(), 1, "not retried");
}

/// `--tool-choice` takes one of four values, and only for a model server.
#[test]
fn tool_choice_bad_input_is_refused() {
    let s = Setup::new();
    let script = s.scripts.join("s.json");
    std::fs::write(&script, r#"{"agents": {"lead": [{"text": "hi"}]}}"#).unwrap();
    let ws = s.workspace.display().to_string();
    let home = s.home.display().to_string();
    super::assert_bad_input(
        &s.home,
        &[
            "run",
            "--workspace",
            &ws,
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tool-choice",
            "maybe",
            "hi",
        ],
        "auto, required, none, omit",
    );
    super::assert_bad_input(
        &s.home,
        &[
            "run",
            "--workspace",
            &ws,
            "--model",
            &format!("script:{}", script.display()),
            "--tool-choice",
            "auto",
            "hi",
        ],
        "--tool-choice cannot be used with a script: model",
    );
    assert!(!std::path::Path::new(&home).join("sessions").exists());
}
