//! MCP servers through the real binary (`--mcp-config FILE`, the test MCP server of
//! `troupe-test-support` over stdio, a scripted model): a Lead and a teammate call MCP tools
//! and the calls and results are in their logs; resume starts the recorded servers; a bad
//! configuration is refused before anything is written; a server that does not start or dies
//! mid-run is a clear message and the run goes on; kill -9 during an MCP call, then resume.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::assert_bad_input;
use super::run::{Setup, session_id, stderr, stdout};

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

fn text(answer: &str) -> Value {
    json!({"text": answer})
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// Writes `mcp.toml` with `[mcp_servers.<name>]` running the test server with `args`, plus
/// `extra` lines; returns its path.
fn mcp_config(s: &Setup, servers: &[(&str, &[&str], &str)]) -> PathBuf {
    let binary = troupe_test_support::mcp_server_binary();
    let mut toml = String::new();
    for (name, args, extra) in servers {
        let args: Vec<String> = args.iter().map(|a| toml_string(a)).collect();
        toml.push_str(&format!(
            "[mcp_servers.{name}]\ncommand = {}\nargs = [{}]\n{extra}\n",
            toml_string(&binary.display().to_string()),
            args.join(", ")
        ));
    }
    let path = s.scripts.join("mcp.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// The `(name, isError, code, content)` of every tool result of session `id`.
fn results(s: &Setup, id: &str) -> Vec<(String, bool, Option<String>, String)> {
    s.log(id)
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            let d = &e["data"];
            (
                d["name"].as_str().unwrap().to_owned(),
                d["isError"].as_bool().unwrap(),
                d["code"].as_str().map(str::to_owned),
                d["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The last `agent/config` of session `id`.
fn config(s: &Setup, id: &str) -> Value {
    s.log(id)
        .iter()
        .rfind(|e| e["type"] == "agent/config")
        .map(|e| e["data"].clone())
        .unwrap()
}

fn child_of(s: &Setup, lead: &str, name: &str) -> String {
    let out = s.troupe().args(["sessions", "--json"]).assert().success();
    let rows: Value = serde_json::from_str(&stdout(&out)).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["parent"] == lead)
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .find(|id| config(s, id)["name"] == name)
        .unwrap()
}

#[test]
fn every_member_calls_mcp_tools_and_the_calls_are_in_their_logs_and_resume_keeps_the_servers() {
    let s = Setup::new();
    let mcp = mcp_config(&s, &[("test", &[], "")]);
    let script = s.script_agents(
        "mcp-team.json",
        json!({
            "lead": [
                call("mcp__test__add", json!({"a": 2, "b": 40})),
                call("spawn_teammate", json!({"name": "alpha", "description": "echoes", "prompt": "echo hello"})),
                call("wait_agent", json!({"timeout_ms": 30000})),
                text("The sum is 42."),
                // `troupe resume ID "again"`: no --mcp-config; the recorded server is started.
                call("mcp__test__echo", json!({"text": "after resume"})),
                text("Echoed again."),
            ],
            "alpha": [
                call("mcp__test__echo", json!({"text": "hello from alpha"})),
                call("mcp__test__fail", json!({"message": "as asked"})),
                text("Echoed."),
            ],
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&[
            "--team",
            "--model",
            &model,
            "--mcp-config",
            mcp.to_str().unwrap(),
            "add",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "The sum is 42.\n");
    let err = stderr(&out);
    assert!(
        err.contains("mcp: server test runs (workspace-write, network on); its tools: mcp__test__{echo, add, fail, sleep, write_file, env, exit}"),
        "{err}"
    );
    let id = session_id(&err);

    // The Lead's call and result, recorded like any tool call.
    let lead = results(&s, &id);
    let (name, is_error, _, content) = &lead[0];
    assert_eq!((name.as_str(), *is_error), ("mcp__test__add", false));
    let content: Value = serde_json::from_str(content).unwrap();
    assert_eq!(content["structuredContent"], json!({"sum": 42}));
    let events = s.log(&id);
    let call_event = events.iter().find(|e| e["type"] == "tool/call").unwrap();
    assert_eq!(call_event["data"]["name"], "mcp__test__add");
    assert_eq!(call_event["data"]["arguments"], json!({"a": 2, "b": 40}));
    // Offered to the model with its schema's name; recorded in the Lead's configuration.
    let header = events
        .iter()
        .find(|e| e["type"] == "request/header")
        .unwrap();
    let offered: Vec<&str> = header["data"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(offered.contains(&"mcp__test__exit"), "{offered:?}");
    let recorded = &config(&s, &id)["mcpServers"]["test"];
    assert_eq!(
        recorded["command"],
        json!(
            troupe_test_support::mcp_server_binary()
                .display()
                .to_string()
        )
    );
    assert_eq!(recorded["toolTimeoutMs"], 60000);

    // The teammate got the same tools.
    let alpha = child_of(&s, &id, "alpha");
    let alpha_results = results(&s, &alpha);
    assert_eq!(alpha_results[0].0, "mcp__test__echo");
    assert!(
        alpha_results[0].3.contains("hello from alpha"),
        "{alpha_results:?}"
    );
    assert_eq!(alpha_results[1].0, "mcp__test__fail");
    assert_eq!(alpha_results[1].2.as_deref(), Some("MCP_TOOL_ERROR"));
    assert!(
        alpha_results[1]
            .3
            .contains("MCP tool `fail` of server `test` failed: as asked"),
        "{alpha_results:?}"
    );

    // A resume without the flag starts the recorded server again.
    let out = s.troupe().args(["resume", &id, "again"]).assert().success();
    assert_eq!(stdout(&out), "Echoed again.\n");
    assert!(
        stderr(&out).contains("mcp: server test runs"),
        "{}",
        stderr(&out)
    );
    let after = results(&s, &id);
    let last = after.iter().rfind(|r| r.0 == "mcp__test__echo").unwrap();
    assert!(!last.1 && last.3.contains("after resume"), "{after:?}");
    // And a resume naming another configuration records it (an empty one: no servers).
    let empty = s.scripts.join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let configs_before = s
        .log(&id)
        .iter()
        .filter(|e| e["type"] == "agent/config")
        .count();
    s.troupe()
        .args(["resume", &id, "--mcp-config", empty.to_str().unwrap()])
        .assert()
        .success();
    let events = s.log(&id);
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "agent/config")
            .count(),
        configs_before + 1
    );
    assert_eq!(config(&s, &id)["mcpServers"], json!({}));
}

#[test]
fn a_bad_mcp_config_is_one_line_exit_2_and_writes_nothing() {
    let s = Setup::new();
    let bad = s.scripts.join("bad.toml");
    std::fs::write(&bad, "[mcp_servers.x]\ncommand = \"y\"\ncomand = \"z\"\n").unwrap();
    let script = s.script_agents("t.json", json!({"lead": [text("hi")]}));
    let model = format!("script:{}", script.display());
    let ws = s.workspace.to_str().unwrap();
    let bad_flag = bad.to_str().unwrap();
    assert_bad_input(
        &s.home,
        &[
            "run",
            "--workspace",
            ws,
            "--model",
            &model,
            "--mcp-config",
            bad_flag,
            "hi",
        ],
        &format!("{bad_flag}:3:1: unknown field `comand`"),
    );
    let missing = s.scripts.join("missing.toml");
    assert_bad_input(
        &s.home,
        &[
            "run",
            "--workspace",
            ws,
            "--model",
            &model,
            "--mcp-config",
            missing.to_str().unwrap(),
            "hi",
        ],
        "No such file",
    );
    let names = s.scripts.join("names.toml");
    std::fs::write(&names, "[mcp_servers.\"my server\"]\ncommand = \"y\"\n").unwrap();
    assert_bad_input(
        &s.home,
        &["demo", "--mcp-config", names.to_str().unwrap()],
        "names.toml:1:14: MCP server name \"my server\" may only hold letters",
    );
    // A resume with a bad file changes nothing in the session.
    let out = s.run(&["--model", &model, "hi"]).assert().success();
    let id = session_id(&stderr(&out));
    let log = s.home.join(format!("sessions/{id}.jsonl"));
    let before = std::fs::read(&log).unwrap();
    assert_bad_input(
        &s.home,
        &["resume", &id, "--mcp-config", bad_flag],
        "unknown field",
    );
    assert_eq!(std::fs::read(&log).unwrap(), before);
}

#[test]
fn servers_that_do_not_start_or_die_mid_run_are_clear_errors_and_the_run_goes_on() {
    let s = Setup::new();
    let mcp = mcp_config(
        &s,
        &[
            ("dies", &[], ""),
            ("hangs", &["--hang"], "startup_timeout_sec = 1"),
            ("live", &[], ""),
        ],
    );
    std::fs::write(
        &mcp,
        format!(
            "{}[mcp_servers.missing]\ncommand = \"/nonexistent/mcp\"\n",
            std::fs::read_to_string(&mcp).unwrap()
        ),
    )
    .unwrap();
    let script = s.script_agents(
        "dies.json",
        json!({"lead": [
            call("mcp__dies__exit", json!({"code": 3})),
            call("mcp__dies__echo", json!({"text": "anyone?"})),
            call("mcp__missing__anything", json!({})),
            call("mcp__live__echo", json!({"text": "still here"})),
            text("Carried on."),
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&[
            "--model",
            &model,
            "--mcp-config",
            mcp.to_str().unwrap(),
            "go",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "Carried on.\n");
    let err = stderr(&out);
    for line in [
        "troupe: warning: MCP server `hangs` did not start within 1 s (startup_timeout_sec); it was stopped; the run goes on without its tools",
        "troupe: warning: MCP server `missing` did not start: cannot run `/nonexistent/mcp`: No such file or directory (os error 2); the run goes on without its tools",
        "mcp: server dies runs",
        "mcp: server live runs",
    ] {
        assert!(err.contains(line), "{line:?} missing from {err}");
    }
    let id = session_id(&err);
    let results = results(&s, &id);
    let codes: Vec<(&str, Option<&str>)> = results
        .iter()
        .map(|(name, _, code, _)| (name.as_str(), code.as_deref()))
        .collect();
    assert_eq!(
        codes,
        [
            ("mcp__dies__exit", Some("MCP_SERVER_UNAVAILABLE")),
            ("mcp__dies__echo", Some("MCP_SERVER_UNAVAILABLE")),
            ("mcp__missing__anything", Some("UNKNOWN_TOOL")),
            ("mcp__live__echo", None),
        ]
    );
    assert!(
        results[1]
            .3
            .contains("MCP server `dies` is not running: it exited with status 3"),
        "{results:?}"
    );
}

/// A server whose `tools/list` holds an entry without `inputSchema` keeps its other tools: the
/// run warns naming the tool and why, and a member calls another of its tools. A server that
/// refuses `tools/list` did not start, and the warning says Troupe stopped it (not "it exited
/// with status 0", which only followed from that).
#[test]
fn a_tool_without_an_input_schema_costs_its_server_only_that_tool() {
    let s = Setup::new();
    let mcp = mcp_config(
        &s,
        &[
            ("noschema", &["--no-schema"], ""),
            ("refuses", &["--refuse-list"], ""),
        ],
    );
    let script = s.script_agents(
        "noschema.json",
        json!({"lead": [
            call("mcp__noschema__echo", json!({"text": "still listed"})),
            text("Echoed."),
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&[
            "--model",
            &model,
            "--mcp-config",
            mcp.to_str().unwrap(),
            "go",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "Echoed.\n");
    let err = stderr(&out);
    for line in [
        "troupe: warning: MCP server `noschema`: tool `noschema` left out: its tools/list entry is \
         invalid (missing field `inputSchema`)\n",
        "troupe: warning: MCP server `refuses` did not start: listing its tools failed: the server \
         refused the request: tools/list refused (--refuse-list); it was stopped; the run goes \
         on without its tools\n",
        "mcp: server noschema runs",
    ] {
        assert!(err.contains(line), "{line:?} missing from {err}");
    }
    assert!(!err.contains("exited with status"), "{err}");
    let id = session_id(&err);
    let results = results(&s, &id);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        (results[0].0.as_str(), results[0].1),
        ("mcp__noschema__echo", false)
    );
    assert!(results[0].3.contains("still listed"), "{results:?}");
}

fn spawn(s: &Setup, args: &[&str]) -> Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&s.home)
        .env_remove("TROUPE_HOME")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `path` holds a pid.
fn wait_for_pid(path: &Path, child: &mut Child) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(child.try_wait().unwrap().is_none(), "troupe exited early");
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the only session file of the home ends with a durable `tool/call` of `tool`.
fn wait_for_call(s: &Setup, tool: &str, child: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(Ok(entry)) = std::fs::read_dir(s.home.join("sessions"))
            .ok()
            .and_then(|mut d| d.next())
        {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let last = text.lines().last().unwrap_or_default();
            if text.ends_with('\n')
                && last.contains("\"type\":\"tool/call\"")
                && last.contains(tool)
            {
                let name = entry.file_name().into_string().unwrap();
                return name.trim_end_matches(".jsonl").to_owned();
            }
        }
        assert!(child.try_wait().unwrap().is_none(), "troupe exited early");
        assert!(Instant::now() < deadline, "no tool/call of {tool} appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its new parent) has finished too.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(") ").next().unwrap_or("").starts_with('Z'))
}

/// kill -9 while an MCP call is in flight: the `tool/call` is durable, no result; the server
/// sees its stdin close and exits; `troupe resume` records the call's outcome as unknown (its
/// effect is the server's, outside Troupe's knowledge), does not run it again, starts the
/// recorded server again and finishes the turn.
#[test]
fn kill_9_during_an_mcp_call_then_resume_does_not_run_it_again() {
    let s = Setup::new();
    let pid_file = s.workspace.join("server.pid");
    let mcp = mcp_config(
        &s,
        &[("slow", &["--pid-file", pid_file.to_str().unwrap()], "")],
    );
    let script = s.script_agents(
        "slow.json",
        json!({"lead": [
            call("mcp__slow__sleep", json!({"ms": 600_000})),
            call("mcp__slow__echo", json!({"text": "resumed"})),
            text("Done after the crash."),
        ]}),
    );
    let model = format!("script:{}", script.display());
    let ws = s.workspace.to_str().unwrap();
    let mut child = spawn(
        &s,
        &[
            "run",
            "--workspace",
            ws,
            "--model",
            &model,
            "--mcp-config",
            mcp.to_str().unwrap(),
            "go",
        ],
    );
    let server = wait_for_pid(&pid_file, &mut child);
    let id = wait_for_call(&s, "mcp__slow__sleep", &mut child);
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    // The server noticed its client is gone and exited.
    let deadline = Instant::now() + Duration::from_secs(60);
    while alive(server) {
        assert!(Instant::now() < deadline, "the MCP server outlived troupe");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = s.log(&id);
    assert_eq!(before.last().unwrap()["type"], "tool/call");
    std::fs::remove_file(&pid_file).unwrap();

    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "Done after the crash.\n");
    assert!(stderr(&out).contains("recovered"), "{}", stderr(&out));
    // The recorded server was started again (it wrote a new pid file).
    assert!(pid_file.exists());
    let events = s.log(&id);
    let closer = &events[before.len()];
    assert_eq!(closer["type"], "tool/result");
    assert_eq!(closer["data"]["name"], "mcp__slow__sleep");
    assert_eq!(closer["data"]["code"], "TOOL_OUTCOME_UNKNOWN");
    let sleeps = events
        .iter()
        .filter(|e| e["type"] == "tool/call" && e["data"]["name"] == "mcp__slow__sleep")
        .count();
    assert_eq!(sleeps, 1, "the cut call is not run again");
    let results = results(&s, &id);
    let echo = results.iter().find(|r| r.0 == "mcp__slow__echo").unwrap();
    assert!(!echo.1 && echo.3.contains("resumed"), "{results:?}");
}

/// A streamable HTTP server (`url`, `bearer_token_env_var`): its tools are called with the
/// token from the environment, which is recorded nowhere.
#[test]
fn a_streamable_http_servers_tools_are_called_with_the_token_from_the_environment() {
    let s = Setup::new();
    let server = troupe_test_support::McpHttpServer::start(Some("s3cret-token")).unwrap();
    let mcp = s.scripts.join("http.toml");
    std::fs::write(
        &mcp,
        format!(
            "[mcp_servers.web]\nurl = {}\nbearer_token_env_var = \"WEB_MCP_TOKEN\"\n",
            toml_string(&server.url())
        ),
    )
    .unwrap();
    let script = s.script_agents(
        "http.json",
        json!({"lead": [call("mcp__web__echo", json!({"text": "over http"})), text("Done.")]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&[
            "--model",
            &model,
            "--mcp-config",
            mcp.to_str().unwrap(),
            "go",
        ])
        .env("WEB_MCP_TOKEN", "s3cret-token")
        .assert()
        .success();
    let err = stderr(&out);
    assert!(err.contains("mcp: server web runs"), "{err}");
    let id = session_id(&err);
    let results = results(&s, &id);
    assert_eq!(results[0].0, "mcp__web__echo");
    assert!(
        !results[0].1 && results[0].3.contains("over http"),
        "{results:?}"
    );
    assert!(
        server
            .authorizations()
            .iter()
            .all(|a| a.as_deref() == Some("Bearer s3cret-token")),
        "{:?}",
        server.authorizations()
    );
    let log = std::fs::read_to_string(s.home.join(format!("sessions/{id}.jsonl"))).unwrap();
    assert!(
        !log.contains("s3cret-token"),
        "the token must not be recorded"
    );
    assert!(log.contains("\"bearerTokenEnvVar\":\"WEB_MCP_TOKEN\""));
}
