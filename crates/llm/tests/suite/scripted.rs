//! The scripted provider (`script:FILE`).

use std::io::Write;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_llm::{
    AssistantMessage, ChatMessage, ChatRequest, ClientOptions, EventLog, FinishReason, LlmError,
    ModelProvider, ModelSpec, ModelSpecExt, ProviderConfig, ProviderFactory, ScriptedProvider,
    StreamEvent, ToolCall,
};
use troupe_protocol::ErrorCode;

use super::common::call;

const SCRIPT: &str = r#"{
  "agents": {
    "lead": [
      {"tool_calls": [
        {"name": "spawn_teammate", "arguments": {"name": "alice", "prompt": "write the parser"}},
        {"name": "list_tasks"}
      ]},
      {"reasoning": "alice is on it", "text": "Waiting for alice."},
      {"text": "All done."}
    ],
    "alice": [
      {"tool_calls": [{"name": "write", "arguments": {"path": "parser.rs", "content": "fn parse() {}"}}]},
      {"text": "I wrote parser.rs.", "tool_calls": [{"name": "send_message", "arguments": {"to": "lead"}}]},
      {"text": "Finished."}
    ]
  }
}"#;

fn script_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user("go")], Vec::new())
}

async fn next(provider: &dyn ModelProvider) -> Result<AssistantMessage, LlmError> {
    call(provider, &request())
        .await
        .0
        .map(|response| response.message)
}

#[tokio::test]
async fn each_agent_walks_its_own_steps_with_deterministic_ids() {
    let file = script_file(SCRIPT);
    let script = ScriptedProvider::load(file.path()).unwrap();
    assert_eq!(script.agent_names(), ["alice", "lead"]);
    let lead = script.for_agent("lead").unwrap();
    let alice = script.for_agent("alice").unwrap();

    let (first, events) = call(&lead, &request()).await;
    let first = first.unwrap();
    assert_eq!(
        first.message.tool_calls,
        vec![
            ToolCall::new(
                "call_lead_1",
                "spawn_teammate",
                json!({"name": "alice", "prompt": "write the parser"})
            ),
            ToolCall::new("call_lead_2", "list_tasks", json!({})),
        ]
    );
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(first.attempts.len(), 1);
    assert!(events.events.contains(&StreamEvent::ToolCallDelta {
        index: 0,
        id: Some("call_lead_1".to_owned()),
        name: Some("spawn_teammate".to_owned()),
        arguments: r#"{"name":"alice","prompt":"write the parser"}"#.to_owned(),
    }));

    // Alice's cursor is independent of the lead's.
    let alice_first = next(&alice).await.unwrap();
    assert_eq!(alice_first.tool_calls[0].id, "call_alice_1");
    let alice_second = next(&alice).await.unwrap();
    assert_eq!(alice_second.content.as_deref(), Some("I wrote parser.rs."));
    assert_eq!(alice_second.tool_calls[0].id, "call_alice_2");

    // The text goes through the observer like a streamed answer.
    let (second, events) = call(&lead, &request()).await;
    let second = second.unwrap();
    assert_eq!(
        second.message.content.as_deref(),
        Some("Waiting for alice.")
    );
    assert_eq!(
        second.message.reasoning_content.as_deref(),
        Some("alice is on it")
    );
    assert_eq!(second.finish_reason, Some(FinishReason::Stop));
    assert_eq!(events.text(), "Waiting for alice.");
    assert_eq!(events.reasoning(), "alice is on it");

    // A second provider of the same member shares the cursor (a later turn).
    let lead_again = script.for_agent("lead").unwrap();
    assert_eq!(
        next(&lead_again).await.unwrap(),
        AssistantMessage::text("All done.")
    );
    assert_eq!(script.calls_made("lead").unwrap(), 3);
}

#[tokio::test]
async fn an_exhausted_script_names_the_agent() {
    let file = script_file(r#"{"agents": {"solo": [{"text": "only answer"}]}}"#);
    let script = ScriptedProvider::load(file.path()).unwrap();
    let solo = script.for_agent("solo").unwrap();
    next(&solo).await.unwrap();
    let error = next(&solo).await.unwrap_err();
    assert_eq!(error.code(), "LLM_SCRIPT");
    let message = error.to_string();
    assert!(message.contains("`solo`"), "{message}");
    assert!(message.contains("no step left"), "{message}");
    // One step is "its only step", not "its 1 steps".
    assert!(message.contains("(its only step is used up;"), "{message}");
    assert_eq!(script.steps("solo").unwrap(), 1);
    assert!(
        message.contains(&file.path().display().to_string()),
        "{message}"
    );
}

#[tokio::test]
async fn the_cursor_can_be_moved_for_a_resumed_session() {
    let file = script_file(SCRIPT);
    // A fresh load, as after a restart: the log says the lead already made two model calls.
    let script = ScriptedProvider::load(file.path()).unwrap();
    let lead = script.for_agent("lead").unwrap();
    lead.set_calls_made(2).unwrap();
    assert_eq!(
        next(&lead).await.unwrap(),
        AssistantMessage::text("All done.")
    );

    // Through the trait object, as the runtime does, and ids stay those of a fresh run.
    let factory = ProviderFactory::new(
        ProviderConfig::Script {
            path: file.path().to_owned(),
        },
        ClientOptions::default(),
    )
    .unwrap();
    let alice = factory.for_agent("alice").unwrap();
    alice.set_calls_made(1).unwrap();
    let message = next(alice.as_ref()).await.unwrap();
    assert_eq!(message.tool_calls[0].id, "call_alice_2");
    assert!(alice.label().ends_with("#alice"), "{}", alice.label());

    // Moving to the end is allowed (the next call reports the exhausted script); past it is not.
    alice.set_calls_made(3).unwrap();
    assert_eq!(next(alice.as_ref()).await.unwrap_err().code(), "LLM_SCRIPT");
    let error = alice.set_calls_made(4).unwrap_err();
    assert_eq!(error.code(), "LLM_SCRIPT");
    assert!(error.to_string().contains("only 3 steps"), "{error}");
}

#[tokio::test]
async fn unknown_agents_and_cancelled_calls() {
    let file = script_file(SCRIPT);
    let script = ScriptedProvider::load(file.path()).unwrap();
    let error = script.for_agent("bob").unwrap_err();
    assert_eq!(error.code(), "LLM_SCRIPT");
    assert!(error.to_string().contains("`bob`"), "{error}");
    assert!(error.to_string().contains("alice, lead"), "{error}");

    // A cancelled call does not consume a step.
    let lead = script.for_agent("lead").unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let result = lead
        .complete(&request(), &mut EventLog::new(), &cancel)
        .await;
    assert_eq!(result.unwrap_err(), LlmError::Cancelled);
    assert_eq!(script.calls_made("lead").unwrap(), 0);
}

/// With paused time, a timer wait advances the clock by exactly its length, so the elapsed
/// time counts the waits: one pace per model call, none without a pace.
#[tokio::test(start_paused = true)]
async fn a_pace_waits_before_every_model_reply() {
    use std::time::Duration;
    use tokio::time::Instant;
    let file = script_file(SCRIPT);
    let pace = Duration::from_millis(400);
    let factory = ProviderFactory::new(
        ProviderConfig::Script {
            path: file.path().to_path_buf(),
        },
        ClientOptions::default(),
    )
    .unwrap()
    .with_script_pace(pace);
    let ProviderFactory::Scripted(script) = &factory else {
        panic!("a script gives a scripted factory");
    };
    assert_eq!(script.pace(), pace);
    let lead = factory.for_agent("lead").unwrap();
    let alice = factory.for_agent("alice").unwrap();
    let start = Instant::now();
    next(lead.as_ref()).await.unwrap();
    assert_eq!(start.elapsed(), pace);
    next(alice.as_ref()).await.unwrap();
    next(lead.as_ref()).await.unwrap();
    assert_eq!(start.elapsed(), pace * 3, "one wait per model reply");
    assert_eq!(script.calls_made("lead").unwrap(), 2);

    // A call cancelled while it waits returns at once and takes no step.
    let cancel = CancellationToken::new();
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    };
    let before = Instant::now();
    let mut events = EventLog::new();
    let request = request();
    let (result, ()) = tokio::join!(lead.complete(&request, &mut events, &cancel), canceller);
    assert_eq!(result.unwrap_err(), LlmError::Cancelled);
    assert_eq!(before.elapsed(), Duration::from_millis(100));
    assert_eq!(script.calls_made("lead").unwrap(), 2);

    // Without a pace (the default) nothing waits; HTTP factories ignore it.
    let unpaced = ScriptedProvider::load(file.path()).unwrap();
    assert_eq!(unpaced.pace(), Duration::ZERO);
    let before = Instant::now();
    next(&unpaced.for_agent("lead").unwrap()).await.unwrap();
    assert_eq!(before.elapsed(), Duration::ZERO);
}

#[test]
fn malformed_scripts_are_refused_with_the_path_and_the_problem() {
    let cases = [
        ("{\"agents\": {\"lead\": [", "not valid JSON"),
        ("[]", "expected an object"),
        ("{}", "missing \"agents\""),
        ("{\"agents\": [], \"x\": 1}", "unknown key `x`"),
        ("{\"agents\": []}", "\"agents\" must be an object"),
        ("{\"agents\": {\"lead\": {}}}", "agents.lead must be a list"),
        (
            "{\"agents\": {\"lead\": [{}]}}",
            "agents.lead[0]: a step needs \"text\" or \"tool_calls\"",
        ),
        (
            "{\"agents\": {\"lead\": [{\"txt\": \"hi\"}]}}",
            "agents.lead[0]: unknown key `txt`",
        ),
        (
            "{\"agents\": {\"lead\": [{\"text\": 3}]}}",
            "\"text\" must be a string",
        ),
        (
            "{\"agents\": {\"lead\": [{\"text\": \"a\"}, {\"tool_calls\": [{\"arguments\": {}}]}]}}",
            "agents.lead[1]: tool_calls[0] needs a non-empty \"name\"",
        ),
        (
            "{\"agents\": {\"lead\": [{\"tool_calls\": []}]}}",
            "must be a non-empty list",
        ),
        (
            "{\"agents\": {\"helper\": [{\"text\": \"a\"}], \"lead\": []}}",
            "agents.lead has no steps",
        ),
    ];
    for (text, expected) in cases {
        let file = script_file(text);
        let error = ScriptedProvider::load(file.path()).unwrap_err();
        assert_eq!(error.code(), "LLM_SCRIPT", "{text}");
        let message = error.to_string();
        assert!(message.contains(expected), "{text}: {message}");
        assert!(
            message.contains(&file.path().display().to_string()),
            "{message}"
        );
        assert!(!message.contains('\n'), "one line: {message}");
    }
    let missing = ScriptedProvider::load("/nonexistent/troupe-script.json").unwrap_err();
    assert_eq!(missing.code(), "LLM_SCRIPT");
    assert!(
        missing
            .to_string()
            .contains("/nonexistent/troupe-script.json")
    );
}

/// Issue 10 (defect 8): a script path that is not a small regular file is refused at once,
/// naming it, without reading it whole (`/dev/zero` never ends).
#[test]
fn a_device_or_an_oversized_script_is_refused_at_once() {
    let device = ScriptedProvider::load("/dev/zero").unwrap_err();
    assert_eq!(device.code(), "LLM_SCRIPT");
    let message = device.to_string();
    assert!(message.contains("/dev/zero"), "{message}");
    assert!(message.contains("not a regular file"), "{message}");
    let dir = tempfile::tempdir().unwrap();
    let directory = ScriptedProvider::load(dir.path()).unwrap_err();
    assert!(
        directory.to_string().contains("not a regular file"),
        "{directory}"
    );
    // One byte over the cap (a sparse file: nothing is really written).
    let big = dir.path().join("big.json");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(troupe_llm::MAX_SCRIPT_BYTES + 1).unwrap();
    let error = ScriptedProvider::load(&big).unwrap_err();
    assert_eq!(error.code(), "LLM_SCRIPT");
    let message = error.to_string();
    assert!(message.contains("larger than 16 MiB"), "{message}");
    assert!(message.contains("big.json"), "{message}");
    // At the cap exactly, the size is fine and the content is judged (NUL bytes are no JSON).
    file.set_len(troupe_llm::MAX_SCRIPT_BYTES).unwrap();
    let error = ScriptedProvider::load(&big).unwrap_err().to_string();
    assert!(!error.contains("larger than"), "{error}");
}

#[test]
fn an_unknown_agent_names_the_scripted_ones_or_says_there_are_none() {
    let some = ScriptedProvider::from_json_str(
        "{\"agents\": {\"b\": [{\"text\": \"x\"}], \"a\": [{\"text\": \"y\"}]}}",
        "s.json",
    )
    .unwrap();
    let message = some.for_agent("lead").unwrap_err().to_string();
    assert!(message.ends_with("(it scripts: a, b)"), "{message}");
    let none = ScriptedProvider::from_json_str("{\"agents\": {}}", "s.json").unwrap();
    let error = none.for_agent("lead").unwrap_err();
    assert_eq!(error.code(), "LLM_SCRIPT");
    let message = error.to_string();
    assert!(message.contains("it scripts no agent"), "{message}");
    assert!(!message.contains("scripts: )"), "{message}");
}

#[test]
fn script_models_resolve_without_any_key() {
    let spec = ModelSpec::from_flags(&troupe_llm::ModelFlags {
        model: Some("script:demo/team.json".to_owned()),
        ..Default::default()
    })
    .unwrap();
    let config = spec.resolve(&|_| None).unwrap();
    assert_eq!(
        config,
        ProviderConfig::Script {
            path: "demo/team.json".into()
        }
    );
    assert_eq!(config.spec(), spec);
}
