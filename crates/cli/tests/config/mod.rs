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
    let cases: [(&str, &str); 9] = [
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
            "2:13: invalid type: string \"many\", expected i64",
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
