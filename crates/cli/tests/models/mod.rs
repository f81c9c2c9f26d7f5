//! Per-member models through the real binary, against the loopback fake server (its requests
//! name the model each member asked for): `--teammate-model`, `[team.models]` by name, what
//! `list_agents` and `team show` say, what each teammate's `agent/config` records, and what a
//! resume keeps; bad teammate models refused before anything is written.

use serde_json::{Value, json};
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse, RecordedRequest};

use super::listing;
use super::run::{Setup, session_id, stderr, stdout};

fn tool_call(id: &str, name: &str, arguments: Value) -> FakeResponse {
    FakeResponse::json(chunks::tool_call_completion(&[(id, name, arguments)]))
}

fn text(answer: &str) -> FakeResponse {
    FakeResponse::json(chunks::text_completion(answer))
}

fn of_model(server: &FakeOpenAi, model: &str) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.body["model"] == model)
        .collect()
}

fn spawn(name: &str) -> FakeResponse {
    tool_call(
        &format!("call_spawn_{name}"),
        "spawn_teammate",
        json!({"name": name, "description": format!("{name} helps"), "prompt": format!("{name}, say hi")}),
    )
}

fn wait() -> FakeResponse {
    tool_call("call_wait", "wait_agent", json!({"timeout_ms": 10000}))
}

/// `team show --json`'s members as (name, model).
fn shown_models(s: &Setup, id: &str) -> Vec<(String, Value)> {
    let out = s
        .troupe()
        .args(["team", "show", id, "--json"])
        .assert()
        .success();
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    view["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap().to_owned(), m["model"].clone()))
        .collect()
}

/// The latest own `agent/config` of session `id`.
fn config_of(s: &Setup, id: &str) -> Value {
    s.log(id)
        .iter()
        .rfind(|e| e["type"] == "agent/config")
        .unwrap()["data"]
        .clone()
}

fn member_id(s: &Setup, lead: &str, name: &str) -> String {
    let out = s
        .troupe()
        .args(["team", "show", lead, "--json"])
        .assert()
        .success();
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    view["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `--teammate-model` gives every teammate its model and `[team.models]` one by name; each
/// teammate's requests carry its model's name, its `agent/config` records it as its own, and
/// `list_agents` and `team show` show it. A resume with another `--model` changes the Lead's
/// model only: alpha, woken again, still asks for its own; a resume with another
/// `--teammate-model` gives it to a teammate created then, and is recorded for the next.
#[test]
fn teammates_run_their_own_models_and_keep_them_across_resumes() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    s.project_config("[team.models]\nbeta = \"beta-model\"\n");
    for response in [
        spawn("alpha"),
        spawn("beta"),
        wait(),
        tool_call("call_list", "list_agents", json!({})),
        text("Both said hi."),
    ] {
        server.push_for("lead-model", response);
    }
    server.push_for("mate-model", text("alpha: hi"));
    server.push_for("beta-model", text("beta: hi"));
    let out = s
        .run(&[
            "--team",
            "--model",
            "lead-model",
            "--teammate-model",
            "mate-model",
            "--base-url",
            &server.base_url(),
            "get two helpers to say hi",
        ])
        .assert()
        .success();
    assert_eq!(stdout(&out), "Both said hi.\n");
    let id = session_id(&stderr(&out));
    let first_user = |r: &RecordedRequest| r.messages()[1]["content"].to_string();
    let alpha_requests = of_model(&server, "mate-model");
    assert_eq!(alpha_requests.len(), 1);
    assert!(first_user(&alpha_requests[0]).contains("alpha, say hi"));
    let beta_requests = of_model(&server, "beta-model");
    assert_eq!(beta_requests.len(), 1);
    assert!(first_user(&beta_requests[0]).contains("beta, say hi"));
    assert_eq!(of_model(&server, "lead-model").len(), 5);

    // Recorded: the Lead's choice, and each teammate's own model.
    let lead_config = config_of(&s, &id);
    assert_eq!(
        lead_config["teammateModels"]["default"]["model"],
        "mate-model"
    );
    assert_eq!(
        lead_config["teammateModels"]["byName"]["beta"]["model"],
        "beta-model"
    );
    assert_eq!(
        lead_config["teammateModels"]["byName"]["beta"]["baseUrl"],
        server.base_url(),
        "on the Lead's server"
    );
    let alpha = member_id(&s, &id, "alpha");
    let alpha_config = config_of(&s, &alpha);
    assert_eq!(alpha_config["model"]["model"], "mate-model");
    assert_eq!(alpha_config["ownModel"], true);
    let descriptor = s
        .log(&alpha)
        .into_iter()
        .find(|e| e["type"] == "subagent/descriptor")
        .unwrap();
    assert_eq!(descriptor["data"]["agentModel"], "mate-model");

    // list_agents (the Lead's tool result) and team show.
    let listed = s
        .log(&id)
        .into_iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["name"] == "list_agents")
        .unwrap();
    let rows: Value = serde_json::from_str(listed["data"]["content"].as_str().unwrap()).unwrap();
    let listed_models: Vec<(&str, &str)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["model"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed_models,
        [
            ("lead", "lead-model"),
            ("alpha", "mate-model"),
            ("beta", "beta-model")
        ]
    );
    let expected = |lead: &str| {
        vec![
            ("lead".to_owned(), json!(lead)),
            ("alpha".to_owned(), json!("mate-model")),
            ("beta".to_owned(), json!("beta-model")),
        ]
    };
    assert_eq!(shown_models(&s, &id), expected("lead-model"));

    // Resume with another Lead model: alpha, woken by a follow-up, keeps its own.
    for response in [
        tool_call(
            "call_again",
            "followup_task",
            json!({"target": "alpha", "message": "say hi again"}),
        ),
        wait(),
        text("alpha said hi again."),
    ] {
        server.push_for("lead-2", response);
    }
    server.push_for("mate-model", text("alpha: hi again"));
    let out = s
        .troupe()
        .args([
            "resume",
            &id,
            "--model",
            "lead-2",
            "--base-url",
            &server.base_url(),
        ])
        .arg("ask alpha again")
        .assert()
        .success();
    assert_eq!(stdout(&out), "alpha said hi again.\n");
    assert_eq!(of_model(&server, "mate-model").len(), 2);
    assert_eq!(of_model(&server, "lead-2").len(), 3);
    assert_eq!(shown_models(&s, &id), expected("lead-2"));

    // Resume with another teammate model: gamma gets it; it is recorded for later spawns.
    for response in [spawn("gamma"), wait(), text("gamma said hi.")] {
        server.push_for("lead-2", response);
    }
    server.push_for("mate-2", text("gamma: hi"));
    s.troupe()
        .args(["resume", &id, "--teammate-model", "mate-2", "add gamma"])
        .assert()
        .success();
    assert_eq!(of_model(&server, "mate-2").len(), 1);
    let mut models = expected("lead-2");
    models.push(("gamma".to_owned(), json!("mate-2")));
    assert_eq!(shown_models(&s, &id), models);
    let lead_config = config_of(&s, &id);
    assert_eq!(lead_config["teammateModels"]["default"]["model"], "mate-2");
    assert_eq!(
        lead_config["teammateModels"]["byName"]["beta"]["model"],
        "beta-model"
    );
    assert_eq!(lead_config["model"]["model"], "lead-2");
}

/// A teammate model that cannot work is refused before anything is written: outside a Team,
/// beside a script without a server for it, or without its API key.
#[test]
fn a_bad_teammate_model_is_refused_before_anything_is_written() {
    let s = Setup::new();
    let script = s.script_agents("s.json", json!({"lead": [{"text": "hi"}]}));
    let model = format!("script:{}", script.display());
    for (args, expected) in [
        (
            vec!["--model", model.as_str(), "--teammate-model", "other", "go"],
            "--teammate-model applies to Team runs only: add --team",
        ),
        (
            vec![
                "--team",
                "--model",
                model.as_str(),
                "--teammate-model",
                "compatible:x",
                "go",
            ],
            "--teammate-model compatible:x: --model compatible:M needs --base-url URL",
        ),
        (
            vec![
                "--team",
                "--model",
                model.as_str(),
                "--teammate-model",
                "openai:gpt-4.1-mini",
                "go",
            ],
            "teammate model openai:gpt-4.1-mini: missing API key for openai: set the \
             environment variable OPENAI_API_KEY",
        ),
    ] {
        let before = listing(&s.home);
        let out = s
            .run(&args)
            .env_remove("OPENAI_API_KEY")
            .assert()
            .code(2)
            .stdout("");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(expected),
            "{err:?} should contain {expected:?}"
        );
        assert_eq!(listing(&s.home), before);
    }
}
