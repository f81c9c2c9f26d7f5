//! A tool-using turn through the real HTTP client against the loopback fake OpenAI server,
//! asserting on what the model was sent.

use std::sync::Arc;

use serde_json::json;
use troupe_journal::Journal;
use troupe_llm::{ModelFlags, ModelSpec, ModelSpecExt, ProviderFactory};
use troupe_protocol::SessionId;
use troupe_runtime::{ChunkPolicy, Runtime, RuntimeOptions};
use troupe_session::events::Profile;
use troupe_test_support::fake_openai::{FakeOpenAi, FakeResponse};
use troupe_tools::ToolLimits;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_model_edits_a_file_and_is_sent_the_tool_results() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("app.py"), "print('helo')\n").unwrap();
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::tool_calls(
        &[("c1", "read", json!({"path": "app.py"}))],
        3,
    ));
    server.push(FakeResponse::tool_calls(
        &[(
            "c2",
            "edit",
            json!({"path": "app.py", "old_string": "helo", "new_string": "hello"}),
        )],
        4,
    ));
    server.push(FakeResponse::text("fixed the typo"));
    let spec = ModelSpec::from_flags(&ModelFlags {
        model: Some("test-model".to_owned()),
        base_url: Some(server.base_url()),
        api_key_env: None,
        tool_choice: None,
    })
    .unwrap();
    let config = spec.resolve(&|_| None).unwrap();
    let models = ProviderFactory::new(config, Default::default()).unwrap();
    let rt = Runtime::new(
        Journal::open_home(home.path()),
        RuntimeOptions {
            workspace: ws.path().to_path_buf(),
            models: Arc::new(models),
            model_spec: spec,
            chunks: ChunkPolicy::default(),
            tool_limits: ToolLimits::default(),
            max_depth: 1,
            team_limits: troupe_team::TeamLimits::default(),
            stall_after: troupe_team::StallAfter::default(),
            extra_tools: Vec::new(),
            secret_env: Vec::new(),
            secrets: Vec::new(),
            teammate_models: Default::default(),
            project_instructions: None,
            sandbox: troupe_tools::SandboxPolicy::default(),
            mcp_servers: None,
            approval: troupe_session::approval::ApprovalPolicy::default(),
            ledger: Default::default(),
            worktree_root: None,
            placement: Default::default(),
        },
    );
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    lead.followup(user("fix the typo in app.py")).await.unwrap();
    idle(&lead).await;

    assert_eq!(
        std::fs::read_to_string(ws.path().join("app.py")).unwrap(),
        "print('hello')\n"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let third = requests[2].messages();
    let roles: Vec<&str> = third.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "tool"]
    );
    assert_eq!(third[2]["tool_calls"][0]["id"], "c1");
    assert_eq!(third[3]["tool_call_id"], "c1");
    assert!(
        third[3]["content"]
            .as_str()
            .unwrap()
            .contains("print('helo')")
    );
    assert_eq!(third[5]["tool_call_id"], "c2");
    assert!(
        third[5]["content"]
            .as_str()
            .unwrap()
            .contains("\"replacements\":1")
    );
    let tools: Vec<&str> = requests[0]
        .tools()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"edit") && tools.contains(&"bash"));
    assert_eq!(
        lead.with_transcript(|t| t.last_answer().map(str::to_owned))
            .as_deref(),
        Some("fixed the typo")
    );
    // The streamed tool-call arguments were coalesced, not one event per chunk.
    let chunks = Journal::open_home(home.path())
        .read(lead.id())
        .unwrap()
        .events
        .iter()
        .filter(|e| e.kind == "assistant/chunk")
        .count();
    assert!(chunks <= 4, "{chunks} chunk events");
}
