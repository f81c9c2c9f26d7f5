//! The configuration files through the real binary: `troupe config` (snapshots of what it
//! prints, table and JSON), precedence user < project < flag in what a run really sends the
//! model server, a resume keeping what the session recorded, and bad files (exit 2 naming
//! `FILE:LINE:COLUMN`, nothing written).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse};

use super::run::{Setup, session_id, stderr, stdout};
use super::{listing, snapshot_settings};

impl Setup {
    /// Writes the user's configuration file (`<home>/config.toml`).
    pub(crate) fn user_config(&self, text: &str) -> PathBuf {
        std::fs::create_dir_all(&self.home).unwrap();
        let path = self.home.join("config.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes the project's configuration file (`<workspace>/.troupe/config.toml`).
    pub(crate) fn project_config(&self, text: &str) -> PathBuf {
        let dir = self.workspace.join(".troupe");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `troupe config --workspace WS ARGS…`.
    fn config(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = self.troupe();
        cmd.arg("config")
            .arg("--workspace")
            .arg(&self.workspace)
            .args(args);
        cmd
    }

    /// Placeholders for the paths `troupe config` prints.
    fn names(&self) -> Vec<(String, &'static str)> {
        let workspace = std::fs::canonicalize(&self.workspace).unwrap();
        vec![
            (workspace.display().to_string(), "[WS]"),
            (self.home.display().to_string(), "[HOME]"),
        ]
    }
}

fn placeholders<'a>(names: &'a [(String, &'static str)]) -> Vec<(&'a str, &'static str)> {
    names.iter().map(|(t, p)| (t.as_str(), *p)).collect()
}

/// `troupe config` with both files and flags: every key with its value and source — a flag,
/// the project's file or the user's with line and column, or the default — and the AGENTS.md
/// files; the same as one JSON object.
#[test]
fn config_shows_every_value_with_its_source() {
    let s = Setup::new();
    // The user's key variable goes with the user's model, which the project's replaces.
    s.user_config(
        "# mine\nmodel = \"openai:gpt-4.1\"\napi_key_env = \"MY_OPENAI_KEY\"\nnetwork = \"off\"\n\n\
         [team]\nmax_members = 4\nteammate_model = \"deepseek-chat\"\n\n[team.models]\n\
         reviewer = \"gpt-4.1-mini\"\n",
    );
    s.project_config(
        "model = \"deepseek-chat\"\ntool_choice = \"auto\"\n[team]\n\
         teammate_model = \"deepseek-reasoner\"\nmax_members = 6\n[team.models]\n\
         reviewer = \"deepseek-reasoner\"\n\
         [mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"server\"]\n",
    );
    std::fs::write(s.workspace.join("AGENTS.md"), "Run the tests.\n").unwrap();
    let out = s
        .config(&["--max-tasks", "9", "--sandbox", "read-only"])
        .assert()
        .success();
    assert_eq!(stderr(&out), "");
    let names = s.names();
    snapshot_settings(&placeholders(&names))
        .bind(|| insta::assert_snapshot!("config_table", stdout(&out)));
    let out = s
        .config(&["--max-tasks", "9", "--sandbox", "read-only", "--json"])
        .assert()
        .success();
    let value: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(stdout(&out).lines().count(), 1);
    let pretty = serde_json::to_string_pretty(&value).unwrap();
    snapshot_settings(&placeholders(&names))
        .bind(|| insta::assert_snapshot!("config_json", pretty));
    // Nothing is written by looking.
    assert!(!s.home.join("sessions").exists());
}

/// Without any file: every value is the default, and both files are named as not found.
#[test]
fn config_without_files_shows_the_defaults() {
    let s = Setup::new();
    let out = s.config(&[]).assert().success();
    let names = s.names();
    snapshot_settings(&placeholders(&names))
        .bind(|| insta::assert_snapshot!("config_defaults", stdout(&out)));
    let out = s
        .config(&["--no-project-instructions", "--json"])
        .assert()
        .success();
    let value: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(value["projectInstructions"], Value::Null);
    assert_eq!(
        value["settings"]["project_instructions"],
        json!({"value": false, "source": {"kind": "flag", "flag": "--no-project-instructions"}})
    );
    assert_eq!(value["files"][0]["found"], false);
}

/// What a run sends the model server follows user < project < flag; the base URL, key
/// variable and tool choice go with the model they were written beside: a project's model
/// does not take the user's tool choice, its `openai:` model does not use the user's local
/// server, and `--model` (a script here) takes none of them from the files.
#[test]
fn a_run_uses_user_then_project_then_flag_values() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    let base = server.base_url();
    s.user_config(&format!(
        "model = \"compatible:user-model\"\nbase_url = \"{base}\"\ntool_choice = \"required\"\n"
    ));
    let run = |args: &[&str]| {
        server.push(FakeResponse::json(chunks::text_completion("ok")));
        let mut all = args.to_vec();
        all.push("hi");
        s.run(&all).assert().success();
        server.requests().pop().unwrap().body
    };
    let sent = run(&[]);
    assert_eq!(sent["model"], "user-model");
    assert_eq!(sent["tool_choice"], "required");

    s.project_config(&format!(
        "model = \"project-model\"\nbase_url = \"{base}\"\n"
    ));
    let sent = run(&[]);
    assert_eq!(sent["model"], "project-model");
    assert!(
        sent.get("tool_choice").is_none(),
        "the user's goes with the user's model"
    );

    let sent = run(&[
        "--model",
        "flag-model",
        "--base-url",
        &base,
        "--tool-choice",
        "auto",
    ]);
    assert_eq!(sent["model"], "flag-model");
    assert_eq!(sent["tool_choice"], "auto");

    // The user's base URL stays with the user's model.
    s.project_config("model = \"openai:gpt-4.1\"\n");
    let out = s.config(&["--json"]).assert().success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["base_url"]["value"],
        "https://api.openai.com/v1"
    );
    assert_eq!(shown["settings"]["base_url"]["source"]["kind"], "default");
    let script = s.script_agents("s.json", json!({"lead": [{"text": "scripted"}]}));
    let out = s
        .run(&["--model", &format!("script:{}", script.display()), "hi"])
        .assert()
        .success();
    assert_eq!(stdout(&out), "scripted\n");
}

/// `approval` and `approval_timeout` in the files, key by key: the user's under the
/// project's under the flags; the new session records the result and `troupe config` shows
/// where each came from. A bad value is exit 2 naming `FILE:LINE:COLUMN`, nothing written.
#[test]
fn approval_keys_come_from_the_files_under_the_flags() {
    let s = Setup::new();
    let script = s.script_agents("s.json", json!({"lead": [{"text": "ok"}]}));
    let model = format!("script:{}", script.display());
    let recorded = |extra: &[&str]| {
        let mut args = vec!["--model", model.as_str()];
        args.extend_from_slice(extra);
        args.push("hi");
        let out = s.run(&args).assert().success();
        let id = session_id(&stderr(&out));
        let config = s
            .log(&id)
            .into_iter()
            .find(|e| e["type"] == "agent/config")
            .unwrap();
        config["data"]["approval"].clone()
    };
    assert_eq!(
        recorded(&[]),
        json!({"mode": "never", "timeoutMs": 600_000})
    );
    let user = s.user_config("approval = \"on-request\"\napproval_timeout = \"90s\"\n");
    assert_eq!(
        recorded(&[]),
        json!({"mode": "on-request", "timeoutMs": 90_000})
    );
    let project = s.project_config("approval_timeout = \"2m\"\n");
    assert_eq!(
        recorded(&[]),
        json!({"mode": "on-request", "timeoutMs": 120_000})
    );
    assert_eq!(
        recorded(&["--approval", "never", "--approval-timeout", "5s"]),
        json!({"mode": "never", "timeoutMs": 5_000})
    );
    let out = s.config(&["--json"]).assert().success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let approval = &shown["settings"]["approval"];
    assert_eq!(approval["value"], "on-request");
    assert_eq!(approval["source"]["kind"], "user");
    assert_eq!(approval["source"]["path"], user.display().to_string());
    assert_eq!(approval["source"]["line"], 1);
    let timeout = &shown["settings"]["approval_timeout"];
    assert_eq!(timeout["value"], "2m");
    assert_eq!(timeout["source"]["kind"], "project");
    let out = s
        .config(&["--json", "--approval", "never"])
        .assert()
        .success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["approval"]["source"],
        json!({"kind": "flag", "flag": "--approval"})
    );

    let sessions = std::fs::read_dir(s.home.join("sessions")).unwrap().count();
    s.project_config("approval = \"ask\"\n");
    let out = s.run(&["--model", &model, "hi"]).assert().code(2);
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!("{}:1:12: approval: ", project.display()))
            || err.contains(&format!("{}:1:12: approval: ", project.display())),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    s.project_config("approval_timeout = \"forever\"\n");
    let out = s.config(&[]).assert().code(2);
    assert!(
        stderr(&out).contains(":1:20: approval_timeout \"forever\""),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_dir(s.home.join("sessions")).unwrap().count(),
        sessions,
        "nothing written"
    );
}

/// A session records what it started with; `troupe resume` does not read the files again (a
/// changed file changes nothing), only its own flags override the record.
#[test]
fn resume_keeps_the_recorded_configuration_whatever_the_files_say() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    s.project_config(&format!(
        "model = \"first-model\"\nbase_url = \"{}\"\n",
        server.base_url()
    ));
    server.push(FakeResponse::json(chunks::text_completion("one")));
    let out = s.run(&["hi"]).assert().success();
    let id = session_id(&stderr(&out));
    s.project_config("model = \"other-model\"\nbase_url = \"http://127.0.0.1:9/v1\"\n");
    server.push(FakeResponse::json(chunks::text_completion("two")));
    let out = s.troupe().args(["resume", &id, "again"]).assert().success();
    assert_eq!(stdout(&out), "two\n");
    assert_eq!(server.requests()[1].body["model"], "first-model");
    // Even a broken file does not stop a resume.
    s.project_config("model = \n");
    server.push(FakeResponse::json(chunks::text_completion("three")));
    s.troupe()
        .args([
            "resume",
            &id,
            "--model",
            "third-model",
            "--base-url",
            &server.base_url(),
        ])
        .arg("more")
        .assert()
        .success();
    assert_eq!(server.requests()[2].body["model"], "third-model");
}

fn assert_refused(s: &Setup, args: &[&str], expected: &str) {
    let before = listing(&s.home);
    let out = s.run(args).assert().code(2).stdout("");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(expected),
        "{err:?} should contain {expected:?}"
    );
    assert_eq!(listing(&s.home), before, "bad input writes nothing");
}

/// A bad file is bad input for `run` and for `config`: exit 2, one line naming the file, the
/// line and the column, and nothing written.
#[test]
fn a_bad_file_is_exit_2_naming_file_line_and_column() {
    let s = Setup::new();
    let path = |p: &Path| p.display().to_string();
    let cases: [(&str, &str); 10] = [
        (
            "model = \"deepseek-chat\"\nmodle = \"x\"\n",
            "2:1: unknown field `modle`",
        ),
        (
            "[team]\nmax_members = 0\n",
            "2:15: team.max_members = 0: it must be a positive",
        ),
        (
            "[team]\nmax_tasks = \"many\"\n",
            "2:13: invalid type: string \"many\", expected a whole number",
        ),
        (
            "[team]\nmax_tasks = 1.5\n",
            "2:13: invalid type: floating point `1.5`, expected a whole number",
        ),
        (
            "tool_choice = \"sometimes\"\n",
            "1:15: tool_choice \"sometimes\" is not one of",
        ),
        ("sandbox = \"jail\"\n", "1:11: sandbox: "),
        (
            "[team.models]\nLead = \"x\"\n",
            "2:1: team.models: \"Lead\" is not a teammate name",
        ),
        ("model = \"x\n", "1:11: invalid basic string"),
        (
            "base_url = \"http://127.0.0.1:1/v1\"\n",
            "1:12: --model is required with --base-url",
        ),
        (
            "[team]\nteammate_model = \"compatible:x\"\n",
            "2:18: team.teammate_model \"compatible:x\": ",
        ),
    ];
    for (text, expected) in cases {
        let file = s.project_config(text);
        let expected = format!("{}:{expected}", path(&file));
        assert_refused(&s, &["--team", "go"], &expected);
        let out = s.config(&[]).assert().code(2).stdout("");
        assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    }
    std::fs::remove_file(s.workspace.join(".troupe/config.toml")).unwrap();
    // The user's file is checked the same way, and a file that is not UTF-8 is named too.
    let file = s.user_config("network = \"sometimes\"\n");
    assert_refused(&s, &["go"], &format!("{}:1:11: network: ", path(&file)));
    std::fs::write(&file, b"model = \"\xff\"\n").unwrap();
    assert_refused(
        &s,
        &["go"],
        &format!("{}:1:10: the file is not UTF-8 text", path(&file)),
    );
}

/// `[mcp_servers.<name>]` running the test MCP server, as a TOML table.
fn test_server_table(name: &str) -> String {
    let binary = troupe_test_support::mcp_server_binary();
    format!(
        "[mcp_servers.{name}]\ncommand = {}\n",
        serde_json::to_string(&binary.display().to_string()).unwrap()
    )
}

/// The `(name, isError, content)` of every tool result of session `id`.
fn tool_results(s: &Setup, id: &str) -> Vec<(String, bool, String)> {
    s.log(id)
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            let d = &e["data"];
            (
                d["name"].as_str().unwrap().to_owned(),
                d["isError"].as_bool().unwrap(),
                d["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// An MCP server named only in the project's file is started for a scripted run, its tool is
/// called and recorded, and it is recorded in the session (a resume starts it without the
/// file); the project's table replaces the user's of the same name; `troupe config` shows it
/// with its source; `--mcp-config FILE` replaces the files' servers, in the run and in what
/// `troupe config` shows.
#[test]
fn an_mcp_server_of_the_project_file_serves_a_run_and_troupe_config_shows_its_source() {
    let s = Setup::new();
    // The user's server of the same name would not start: the project's replaces it.
    s.user_config("[mcp_servers.test]\ncommand = \"/nonexistent/mcp\"\n");
    let project = s.project_config(&format!(
        "# the project's MCP servers\n\n{}",
        test_server_table("test")
    ));
    let script = s.script_agents(
        "mcp.json",
        json!({"lead": [
            {"tool_calls": [{"name": "mcp__test__add", "arguments": {"a": 20, "b": 22}}]},
            {"text": "The sum is 42."},
            {"tool_calls": [{"name": "mcp__test__echo", "arguments": {"text": "resumed"}}]},
            {"text": "Echoed."},
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s.run(&["--model", &model, "add"]).assert().success();
    assert_eq!(stdout(&out), "The sum is 42.\n");
    let err = stderr(&out);
    assert!(err.contains("mcp: server test runs ("), "{err}");
    assert!(!err.contains("did not start"), "{err}");
    let id = session_id(&err);
    let results = tool_results(&s, &id);
    assert_eq!(
        (results[0].0.as_str(), results[0].1),
        ("mcp__test__add", false)
    );
    let content: Value = serde_json::from_str(&results[0].2).unwrap();
    assert_eq!(content["structuredContent"], json!({"sum": 42}));
    let recorded = s
        .log(&id)
        .iter()
        .find(|e| e["type"] == "agent/config")
        .map(|e| e["data"]["mcpServers"].clone())
        .unwrap();
    assert_eq!(
        recorded["test"]["command"],
        json!(
            troupe_test_support::mcp_server_binary()
                .display()
                .to_string()
        )
    );

    // `troupe config` names it and where it was written.
    let out = s.config(&["--json"]).assert().success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let row = &shown["settings"]["mcp_servers.test"];
    assert_eq!(
        row["value"],
        json!({
            "command": troupe_test_support::mcp_server_binary().display().to_string(),
            "args": [],
            "env": {},
            "startup_timeout_sec": 10,
            "tool_timeout_sec": 60,
        })
    );
    assert_eq!(
        row["source"],
        json!({"kind": "project", "path": project.display().to_string(), "line": 3, "column": 1})
    );

    // The session keeps its record: a resume starts the server the file no longer names.
    // (The user's file still names the server that would not start.)
    std::fs::remove_file(&project).unwrap();
    let out = s.troupe().args(["resume", &id, "again"]).assert().success();
    assert_eq!(stdout(&out), "Echoed.\n");
    let results = tool_results(&s, &id);
    let last = results.last().unwrap();
    assert!(
        last.0 == "mcp__test__echo" && !last.1 && last.2.contains("resumed"),
        "{results:?}"
    );

    // `--mcp-config FILE` replaces the files' servers.
    s.project_config(&test_server_table("test"));
    let flag_file = s.scripts.join("mcp.toml");
    std::fs::write(&flag_file, test_server_table("other")).unwrap();
    let flag = flag_file.to_str().unwrap();
    let out = s
        .config(&["--mcp-config", flag, "--json"])
        .assert()
        .success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        shown["settings"].get("mcp_servers.test").is_none(),
        "{shown}"
    );
    assert_eq!(
        shown["settings"]["mcp_servers.other"]["source"],
        json!({"kind": "flag", "flag": "--mcp-config", "path": flag})
    );
    let out = s.config(&["--mcp-config", flag]).assert().success();
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("mcp_servers.other")
                && l.ends_with(&format!("flag --mcp-config {flag}"))),
        "{}",
        stdout(&out)
    );
    let script = s.script_agents("plain.json", json!({"lead": [{"text": "done"}]}));
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--model", &model, "--mcp-config", flag, "go"])
        .assert()
        .success();
    let err = stderr(&out);
    assert!(err.contains("mcp: server other runs ("), "{err}");
    assert!(!err.contains("mcp: server test"), "{err}");
}

/// A bad `[mcp_servers.<name>]` in either file is bad input for `run` and for `config`: exit
/// 2, one line naming the file, the line and the column, nothing written.
#[test]
fn a_bad_mcp_server_in_a_file_is_exit_2_naming_file_line_and_column() {
    let s = Setup::new();
    let path = |p: &Path| p.display().to_string();
    for (text, expected) in [
        (
            "[mcp_servers.files]\ncommand = \"npx\"\ncomand = \"x\"\n",
            "3:1: unknown field `comand`",
        ),
        (
            "model = \"x\"\n\n[mcp_servers.files]\nargs = [\"-y\"]\n",
            "3:1: missing `command` (a program to start) or `url`",
        ),
        (
            "[mcp_servers.\"my files\"]\ncommand = \"npx\"\n",
            "1:14: MCP server name \"my files\" may only hold letters",
        ),
        (
            "[mcp_servers.docs]\nurl = \"ftp://docs\"\n",
            "1:1: `url` must be an http:// or https:// URL",
        ),
    ] {
        let file = s.project_config(text);
        let expected = format!("{}:{expected}", path(&file));
        assert_refused(&s, &["go"], &expected);
        let out = s.config(&[]).assert().code(2).stdout("");
        assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    }
    std::fs::remove_file(s.workspace.join(".troupe/config.toml")).unwrap();
    let file = s.user_config("[mcp_servers.x]\ncommand = \"y\"\nstartup_timeout_sec = 0\n");
    assert_refused(
        &s,
        &["go"],
        &format!("{}:1:1: startup_timeout_sec must be", path(&file)),
    );
}

/// `store` and `replicas` are read by every command from the user's file, checked there
/// (exit 2 naming `FILE:LINE:COLUMN` for any command), and refused in a project's file.
/// The project's file lies in the workspace the members' `bash` may write: a value there that
/// loosens the sandbox is refused (so one run's command cannot switch later runs' sandbox off),
/// one that tightens it is taken.
#[test]
fn a_projects_file_may_tighten_the_sandbox_but_never_loosen_it() {
    let s = Setup::new();
    let path = |p: &Path| p.display().to_string();
    for (text, expected) in [
        (
            "sandbox = \"off\"\n",
            "1:11: sandbox = \"off\" cannot come from a project's file",
        ),
        (
            "network = \"on\"\n",
            "1:11: network = \"on\" cannot come from a project's file",
        ),
    ] {
        let file = s.project_config(text);
        let expected = format!("{}:{expected}", path(&file));
        assert_refused(&s, &["go"], &expected);
        let out = s.config(&[]).assert().code(2);
        assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    }
    // The same values from the user's file, and tighter ones from the project's, are taken.
    s.user_config("sandbox = \"off\"\nnetwork = \"on\"\n");
    s.project_config("sandbox = \"read-only\"\nnetwork = \"off\"\n");
    let out = s.config(&["--json"]).assert().success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["sandbox"]["value"], "read-only",
        "{shown}"
    );
    assert_eq!(shown["settings"]["network"]["value"], "off", "{shown}");
}

#[test]
fn store_keys_belong_to_the_users_file_and_every_command_checks_them() {
    let s = Setup::new();
    let path = |p: &Path| p.display().to_string();
    let file = s.project_config("store = \"nats://127.0.0.1:4222\"\n");
    let expected = format!(
        "{}:1:9: store belongs in the user's file ($TROUPE_HOME/config.toml)",
        path(&file)
    );
    assert_refused(&s, &["go"], &expected);
    std::fs::write(&file, "[team]\nmax_tasks = 3\nreplicas = 3\n").unwrap();
    assert_refused(&s, &["go"], "3:1: unknown field `replicas`");
    std::fs::write(&file, "replicas = 3\n").unwrap();
    assert_refused(&s, &["go"], "1:12: replicas belongs in the user's file");
    std::fs::remove_file(&file).unwrap();
    for (text, expected) in [
        (
            "store = \"file:/elsewhere\"\n",
            "1:9: store \"file:/elsewhere\" is not a NATS store",
        ),
        ("replicas = 0\n", "1:12: replicas = 0: give 1 to 5"),
        ("store = \"nats://\"\n", "1:9: store: "),
    ] {
        let file = s.user_config(text);
        let expected = format!("{}:{expected}", path(&file));
        // Every command reads the user's file, since it may name the store.
        for args in [&["sessions"][..], &["log", "x"], &["config"]] {
            let before = listing(&s.home);
            let out = s.troupe().args(args).assert().code(2).stdout("");
            let err = stderr(&out);
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(err.contains(&expected), "{args:?}: {err}");
            assert_eq!(listing(&s.home), before);
        }
        assert_refused(&s, &["go"], &expected);
    }
    // `--replicas` wins over the user's `replicas`; both shown with their source.
    let file = s.user_config("replicas = 3\n");
    let out = s.config(&["--json"]).assert().success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["replicas"],
        json!({"value": 3, "source": {"kind": "user", "path": path(&file), "line": 1, "column": 12}})
    );
    let out = s.config(&["--replicas", "2", "--json"]).assert().success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["replicas"],
        json!({"value": 2, "source": {"kind": "flag", "flag": "--replicas"}})
    );
    assert_eq!(
        shown["settings"]["store"]["source"],
        json!({"kind": "default"})
    );
}

/// A port of 127.0.0.1 that nothing listens on (bound, then closed again).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// `troupe config` shows a NATS store — the user's `store`, `$TROUPE_STORE` or `--store` — with
/// its source without connecting to it: nothing listens at the URL, and it still succeeds. A
/// URL that does not parse is still bad input.
#[test]
fn config_shows_a_nats_store_without_connecting_to_it() {
    let s = Setup::new();
    let url = format!("nats://127.0.0.1:{}", closed_port());
    let file = s.user_config(&format!("store = \"{url}\"\nreplicas = 3\n"));
    let out = s.config(&["--json"]).assert().success();
    assert_eq!(stderr(&out), "");
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["store"],
        json!({"value": url, "source": {"kind": "user", "path": file.display().to_string(), "line": 1, "column": 9}})
    );
    assert_eq!(shown["settings"]["replicas"]["value"], 3);
    let out = s.config(&[]).assert().success();
    let table = stdout(&out);
    assert!(
        table.lines().any(|l| l.starts_with("store ")
            && l.contains(&url)
            && l.ends_with(&format!("user {}:1:9", file.display()))),
        "{table}"
    );
    let other = format!("nats://127.0.0.1:{}", closed_port());
    let out = s
        .config(&["--json"])
        .env("TROUPE_STORE", &other)
        .assert()
        .success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["store"],
        json!({"value": other, "source": {"kind": "env", "variable": "TROUPE_STORE"}})
    );
    let out = s.config(&["--store", &other, "--json"]).assert().success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["store"]["source"],
        json!({"kind": "flag", "flag": "--store"})
    );
    // Checked, though not connected to.
    let out = s
        .config(&["--store", "nats://127.0.0.1:port"])
        .assert()
        .code(2)
        .stdout("");
    assert!(
        stderr(&out).contains("nats://127.0.0.1:port"),
        "{}",
        stderr(&out)
    );
    // Nothing is written by looking.
    assert!(!s.home.join("sessions").exists());
}

/// The README's complete example file ("Configuration"), as it is written there.
fn readme_example() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let section = &readme[readme
        .find("\n## Configuration\n")
        .expect("a Configuration section")..];
    let start = section.find("```toml\n").expect("a TOML block") + "```toml\n".len();
    let block = &section[start..];
    block[..block.find("\n```").unwrap() + 1].to_owned()
}

/// README's complete example is what it says: `troupe config` takes it whole as the user's
/// file (its `store` names a NATS server that is not running: not connected to), and as a
/// project's file without the two lines it marks "your file only" — every key it sets shown
/// with the line it is on.
#[test]
fn the_readme_example_is_a_valid_user_file_and_without_the_store_keys_a_project_file() {
    let example = readme_example();
    // `network = "on"` loosens the sandbox, which a project's file may not do.
    let user_only = ["store", "replicas", "network"];
    let key_of = |line: &str| line.split('=').next().unwrap().trim().to_owned();
    for key in user_only {
        let line = example
            .lines()
            .find(|l| key_of(l) == key)
            .unwrap_or_else(|| panic!("the example sets {key}"));
        assert!(
            line.contains("your file only"),
            "{line:?} says where it belongs"
        );
    }
    let s = Setup::new();
    let file = s.user_config(&example);
    let out = s.config(&["--json"]).assert().success();
    assert_eq!(stderr(&out), "");
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let settings = &shown["settings"];
    let line_of = |text: &str, key: &str| {
        1 + text
            .lines()
            .position(|l| key_of(l) == key)
            .unwrap_or_else(|| panic!("{key} in {text}"))
    };
    for key in [
        "model",
        "base_url",
        "api_key_env",
        "tool_choice",
        "sandbox",
        "network",
        "project_instructions",
        "store",
        "replicas",
    ] {
        assert_eq!(settings[key]["source"]["kind"], "user", "{key}: {shown}");
        assert_eq!(
            settings[key]["source"]["line"],
            line_of(&example, key),
            "{key}"
        );
    }
    assert_eq!(settings["store"]["value"], "nats://127.0.0.1:4222");
    for key in [
        "team.teammate_model",
        "team.max_members",
        "team.max_tasks",
        "team.max_pending_messages",
        "team.max_message_bytes",
        "team.disposal_timeout_ms",
        "team.models.reviewer",
        "mcp_servers.files",
        "mcp_servers.docs",
    ] {
        assert_eq!(settings[key]["source"]["kind"], "user", "{key}: {shown}");
        assert_eq!(settings[key]["source"]["path"], file.display().to_string());
    }
    std::fs::remove_file(&file).unwrap();

    // As the project's file, less the lines it marks "your file only".
    let project: String = example
        .lines()
        .filter(|l| !user_only.contains(&key_of(l).as_str()))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(project.lines().count() + 3, example.lines().count());
    s.project_config(&project);
    let out = s.config(&["--json"]).assert().success();
    assert_eq!(stderr(&out), "");
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let settings = &shown["settings"];
    for key in [
        "model",
        "tool_choice",
        "sandbox",
        "team.max_tasks",
        "mcp_servers.docs",
    ] {
        assert_eq!(settings[key]["source"]["kind"], "project", "{key}: {shown}");
    }
    assert_eq!(
        settings["model"]["source"]["line"],
        line_of(&project, "model")
    );
    assert_eq!(settings["store"]["source"], json!({"kind": "default"}));
    // Whole, it is refused there, as the README says.
    s.project_config(&example);
    let out = s.config(&[]).assert().code(2).stdout("");
    assert!(
        stderr(&out).contains("store belongs in the user's file"),
        "{}",
        stderr(&out)
    );
}

/// A long MCP server command line is cut (ending with `…`) in the table, so that it does not
/// widen every row; `--json` has it whole.
#[test]
fn a_long_mcp_command_is_cut_in_the_table_and_whole_in_json() {
    let s = Setup::new();
    let long_arg = format!("--root=/srv/{}", "deep/".repeat(16));
    s.project_config(&format!(
        "[mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-filesystem\", \"{long_arg}\"]\n"
    ));
    let out = s.config(&[]).assert().success();
    let table = stdout(&out);
    let row = table
        .lines()
        .find(|l| l.starts_with("mcp_servers.files "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(!row.contains(&long_arg), "{row}");
    assert!(
        row.contains("npx -y @modelcontextprotocol/server-"),
        "{row}"
    );
    let value_column = table
        .lines()
        .find(|l| l.starts_with("KEY "))
        .unwrap()
        .find("VALUE")
        .unwrap();
    let source_column = table
        .lines()
        .find(|l| l.starts_with("KEY "))
        .unwrap()
        .find("SOURCE")
        .unwrap();
    // The cut value is 48 columns, ending with the ellipsis.
    let value: String = row
        .chars()
        .skip(value_column)
        .take(source_column - value_column)
        .collect();
    assert_eq!(value.trim_end().chars().count(), 48, "{row}");
    assert!(value.trim_end().ends_with('…'), "{row}");
    let out = s.config(&["--json"]).assert().success();
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        shown["settings"]["mcp_servers.files"]["value"]["args"][2],
        long_arg.as_str()
    );
}
