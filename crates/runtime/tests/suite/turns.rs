//! The turn loop: tools, history as a fold of the log, errors reaching the model.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use troupe_journal::{Journal, JsonlBackend};
use troupe_llm::{
    ApiKey, AssistantMessage, Attempt, AttemptError, BoxFuture, ChatMessage, ChatRequest,
    FinishReason, HttpProviderConfig, LlmError, ModelProvider, ModelResponse, ProviderConfig,
    ProviderFactory, StreamEvent, StreamObserver, ToolCall,
};
use troupe_protocol::{Clock, ErrorCode, SessionId};
use troupe_runtime::{ModelSource, Runtime, RuntimeOptions};
use troupe_session::Transcript;
use troupe_session::events::{Profile, TurnEndReason};
use troupe_test_support::{FakeOpenAi, FakeResponse};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_step_turn_edits_a_file_and_the_history_is_the_fold_of_the_log() {
    let h = Harness::new();
    std::fs::write(h.path("hello.txt"), "hello world\n").unwrap();
    let model = h.models.model("lead");
    model.push([
        call("read", json!({"path": "hello.txt"})),
        call(
            "edit",
            json!({"path": "hello.txt", "old_string": "world", "new_string": "troupe"}),
        ),
        call("bash", json!({"command": "cat hello.txt"})),
        text("done: the file now greets troupe"),
    ]);
    let lead = h.lead().await;
    lead.followup(user("change world to troupe")).await.unwrap();
    idle(&lead).await;

    assert_eq!(
        std::fs::read_to_string(h.path("hello.txt")).unwrap(),
        "hello troupe\n"
    );
    let answer = lead.with_transcript(|t| t.last_answer().map(str::to_owned));
    assert_eq!(answer.as_deref(), Some("done: the file now greets troupe"));

    // What the model was told at the last step: system, task, and each call with its result.
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    let last = &requests[3].messages;
    assert!(
        matches!(&last[0], ChatMessage::System { content } if content.contains("coding agent"))
    );
    assert!(
        matches!(&last[1], ChatMessage::User { content } if content == "change world to troupe")
    );
    let tool_results: Vec<&String> = last
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(tool_results.len(), 3);
    assert!(tool_results[0].contains("hello world"));
    assert!(tool_results[1].contains("\"replacements\":1"));
    assert!(tool_results[2].contains("hello troupe"));
    assert_eq!(
        requests[3].tools.len(),
        8,
        "core tools + subagent + subagent_fork"
    );

    // The live state is exactly the fold of the file.
    let events = h.events(lead.id());
    let folded = Transcript::fold(0, &events).unwrap();
    let live = lead.with_transcript(|t| t.history().to_vec());
    assert_eq!(folded.history(), &live[..]);
    // The last request preceded the final answer, which the log holds as its last message.
    assert_eq!(&folded.history()[..folded.history().len() - 1], &last[1..]);
    let stats = folded.stats();
    assert_eq!(
        (
            stats.turns,
            stats.tool_calls,
            stats.tokens_in,
            stats.tokens_out
        ),
        (1, 3, 400, 40)
    );
    // The event sequence of a tool step: the call is recorded (and flushed) before its result.
    let kinds = h.kinds(lead.id());
    let first_call = kinds.iter().position(|k| k == "tool/call").unwrap();
    assert_eq!(kinds[first_call + 1], "tool/result");
    assert_eq!(kinds.first().unwrap(), "agent/config");
    assert_eq!(kinds.last().unwrap(), "turn/end");
    assert_eq!(turn_end_kinds(&events), ["completed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_and_invalid_arguments_go_back_to_the_model_as_errors() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([
        Step::Calls(vec![
            ("no_such_tool".to_owned(), json!({})),
            ("read".to_owned(), json!({"path": 5})),
            ("read".to_owned(), json!({"path": "x", "bogus": true})),
        ]),
        text("ok"),
    ]);
    let lead = h.lead().await;
    lead.followup(user("try")).await.unwrap();
    idle(&lead).await;
    let results: Vec<serde_json::Value> = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind == "tool/result")
        .map(|e| e.data)
        .collect();
    let codes: Vec<&str> = results
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["UNKNOWN_TOOL", "INVALID_ARGUMENTS", "INVALID_ARGUMENTS"]
    );
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("unknown tool \\\"no_such_tool\\\"")
    );
    assert!(results[2]["content"].as_str().unwrap().contains("bogus"));
    assert_eq!(turn_end_kinds(&h.events(lead.id())), ["completed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_call_ends_the_turn_as_failed_and_keeps_the_message() {
    let h = Harness::new();
    // No steps queued: the test model fails with LLM_SCRIPT.
    let lead = h.lead().await;
    lead.followup(user("hello")).await.unwrap();
    idle(&lead).await;
    let (reason, history) =
        lead.with_transcript(|t| (t.last_turn_end().cloned(), t.history().to_vec()));
    match reason {
        Some(TurnEndReason::Failed { code, message }) => {
            assert_eq!(code, "LLM_SCRIPT");
            assert!(message.contains("no step 0"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(history, vec![ChatMessage::user("hello")]);
    // The agent stays usable.
    h.models.model("lead").push([text("second try works")]);
    lead.followup(user("again")).await.unwrap();
    idle(&lead).await;
    assert_eq!(
        lead.with_transcript(|t| t.last_answer().map(str::to_owned))
            .as_deref(),
        Some("second try works")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_text_is_coalesced_into_few_chunk_events() {
    let h = Harness::new();
    h.models.model("lead").push([text("a short answer")]);
    let lead = h.lead().await;
    lead.followup(user("hi")).await.unwrap();
    idle(&lead).await;
    let chunks: Vec<_> = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind == "assistant/chunk")
        .collect();
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].data["delta"], "a short answer");
    assert_eq!(chunks[0].data["block"], "text");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_operations_after_dispose_are_refused() {
    let h = Harness::new();
    let lead = h.lead().await;
    lead.dispose(json!({"kind": "test"})).await.unwrap();
    let err = lead.followup(user("late")).await.unwrap_err();
    assert_eq!(err.code(), "AGENT_DISPOSED");
}

/// A runtime over the harness's files with other options.
fn runtime_with(h: &Harness, change: impl FnOnce(&mut RuntimeOptions)) -> Runtime {
    let mut options = h.runtime.options().clone();
    change(&mut options);
    Runtime::new(h.journal(), options)
}

/// Every recorded event of a session as one string (what `troupe log --json` would show).
fn log_text(h: &Harness, id: &SessionId) -> String {
    h.events(id)
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

const FAKE_KEY_VAR: &str = "TROUPE_TEST_FAKE_KEY_7F3A9C";
const FAKE_KEY: &str = "sk-fake-7f3a9c-never-logged";

/// The test process never changes its own environment: it reruns this test in a child process
/// whose environment holds a fake key, which the agent's `bash` would inherit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variables_listed_in_secret_env_never_reach_bash_the_log_or_the_model() {
    if std::env::var_os(FAKE_KEY_VAR).is_none() {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "suite::turns::variables_listed_in_secret_env_never_reach_bash_the_log_or_the_model",
                "--test-threads=1",
            ])
            .env(FAKE_KEY_VAR, FAKE_KEY)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(stdout.contains("1 passed"), "{stdout}");
        return;
    }
    let command = format!("env | grep {FAKE_KEY_VAR} || echo none");
    // Control: without the list, bash does inherit the variable.
    let h = Harness::new();
    let plain = runtime_with(&h, |_| {});
    h.models
        .model("lead")
        .push([call("bash", json!({"command": command})), text("done")]);
    let lead = plain
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    lead.followup(user("show the environment")).await.unwrap();
    idle(&lead).await;
    assert!(log_text(&h, lead.id()).contains(FAKE_KEY));
    plain.shutdown().await.unwrap();

    let h = Harness::new();
    let guarded = runtime_with(&h, |o| o.secret_env = vec![FAKE_KEY_VAR.to_owned()]);
    let model = h.models.model("lead");
    model.push([call("bash", json!({"command": command})), text("done")]);
    let lead = guarded
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    lead.followup(user("show the environment")).await.unwrap();
    idle(&lead).await;
    let log = log_text(&h, lead.id());
    assert!(!log.contains(FAKE_KEY), "{log}");
    let result = h
        .events(lead.id())
        .into_iter()
        .find(|e| e.kind == "tool/result")
        .unwrap();
    assert!(
        result.data["content"].as_str().unwrap().contains("none"),
        "{result:?}"
    );
    let told = format!("{:?}", model.requests());
    assert!(!told.contains(FAKE_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_values_in_tool_output_are_replaced_in_the_log_the_model_and_progress() {
    const SECRET: &str = "sk-live-0123456789-secret";
    let h = Harness::new();
    let rt = runtime_with(&h, |o| {
        o.secrets = vec![String::new(), SECRET.to_owned()];
    });
    let mut progress = rt.subscribe_progress();
    let model = h.models.model("lead");
    model.push([
        call("bash", json!({"command": format!("echo key={SECRET}")})),
        text("done"),
    ]);
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    lead.followup(user("print the key")).await.unwrap();
    idle(&lead).await;
    let log = log_text(&h, lead.id());
    assert!(!log.contains(SECRET), "{log}");
    let result = h
        .events(lead.id())
        .into_iter()
        .find(|e| e.kind == "tool/result")
        .unwrap();
    assert!(
        result.data["content"].as_str().unwrap().contains("key=***"),
        "{result:?}"
    );
    // The model is sent what was recorded.
    let told = format!("{:?}", model.requests());
    assert!(!told.contains(SECRET) && told.contains("key=***"), "{told}");
    // Progress: the tool's argument summary too.
    let mut seen = Vec::new();
    while let Ok(event) = progress.try_recv() {
        seen.push(serde_json::to_string(&event).unwrap());
    }
    let seen = seen.join("\n");
    assert!(seen.contains("toolStarted"), "{seen}");
    assert!(!seen.contains(SECRET), "{seen}");
    // The live history is still the fold of the log.
    let folded = Transcript::fold(0, &h.events(lead.id())).unwrap();
    assert_eq!(
        folded.history(),
        &lead.with_transcript(|t| t.history().to_vec())[..]
    );
}

/// A model whose failures quote a secret, as a server echoing a key would.
#[derive(Debug)]
struct LeakyModel(&'static str);

impl ModelProvider for LeakyModel {
    fn complete<'a>(
        &'a self,
        _request: &'a ChatRequest,
        observer: &'a mut dyn StreamObserver,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, LlmError>> {
        Box::pin(async move {
            let message = format!("upstream said: Bearer {}", self.0);
            observer.on_event(StreamEvent::AttemptStarted { attempt: 1 });
            observer.on_event(StreamEvent::AttemptFailed {
                attempt: Attempt {
                    number: 1,
                    status: Some(500),
                    error: Some(AttemptError {
                        code: "LLM_SERVER".to_owned(),
                        message: message.clone(),
                    }),
                    retry_delay_ms: Some(1),
                },
            });
            Err(LlmError::Server {
                status: 500,
                message,
                retry_after_ms: None,
            })
        })
    }

    fn label(&self) -> String {
        "leaky".to_owned()
    }
}

#[derive(Debug)]
struct LeakySource(&'static str);

impl ModelSource for LeakySource {
    fn for_agent(&self, _name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        Ok(Arc::new(LeakyModel(self.0)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_values_in_model_errors_are_replaced_in_attempts_turn_ends_and_progress() {
    const SECRET: &str = "sk-proj-abcdef0123456789";
    let h = Harness::new();
    let rt = runtime_with(&h, |o| {
        o.models = Arc::new(LeakySource(SECRET));
        o.secrets = vec![SECRET.to_owned()];
    });
    let mut progress = rt.subscribe_progress();
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    lead.followup(user("hi")).await.unwrap();
    idle(&lead).await;
    let events = h.events(lead.id());
    let attempt = events.iter().find(|e| e.kind == "model/attempt").unwrap();
    assert_eq!(
        attempt.data["attempt"]["error"]["message"],
        "upstream said: Bearer ***"
    );
    let end = events.iter().find(|e| e.kind == "turn/end").unwrap();
    assert_eq!(end.data["reason"]["message"], "upstream said: Bearer ***");
    assert!(!log_text(&h, lead.id()).contains(SECRET));
    let mut seen = Vec::new();
    while let Ok(event) = progress.try_recv() {
        seen.push(serde_json::to_value(&event).unwrap());
    }
    let failed = seen.iter().find(|p| p["event"] == "attemptFailed").unwrap();
    assert_eq!(failed["message"], "upstream said: Bearer ***");
    assert_eq!(failed["retryDelayMs"], 1);
    let ended = seen.iter().find(|p| p["event"] == "turnEnded").unwrap();
    assert_eq!(ended["reason"]["message"], "upstream said: Bearer ***");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_401_echoing_the_key_is_recorded_with_the_key_replaced() {
    const KEY: &str = "sk-fake-401-echo-0123456789";
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::openai_error(
        401,
        &format!("Incorrect API key provided: Bearer {KEY}"),
        "invalid_api_key",
    ));
    let config = HttpProviderConfig::compatible(server.base_url(), "m")
        .with_api_key("FAKE_KEY_ENV", ApiKey::new(KEY));
    let spec = config.spec();
    let models = ProviderFactory::new(ProviderConfig::Http(config), Default::default()).unwrap();
    let h = Harness::new();
    // No `secrets` here: the client itself must not let its key out.
    let rt = runtime_with(&h, |o| {
        o.models = Arc::new(models);
        o.model_spec = spec;
    });
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    lead.followup(user("hi")).await.unwrap();
    idle(&lead).await;
    let events = h.events(lead.id());
    let attempt = events.iter().find(|e| e.kind == "model/attempt").unwrap();
    let message = attempt.data["attempt"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("Bearer ***"), "{message}");
    let end = events.iter().find(|e| e.kind == "turn/end").unwrap();
    assert_eq!(end.data["reason"]["code"], "LLM_AUTH");
    let message = end.data["reason"]["message"].as_str().unwrap();
    assert!(message.contains("Bearer ***"), "{message}");
    assert!(!log_text(&h, lead.id()).contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_json_is_camel_case_and_pairs_tool_events_by_call_id() {
    let h = Harness::new();
    let mut progress = h.runtime.subscribe_progress();
    h.models
        .model("lead")
        .push([call("read", json!({"path": "missing.txt"})), text("done")]);
    let lead = h.lead().await;
    lead.followup(user("read it")).await.unwrap();
    idle(&lead).await;
    let mut seen = Vec::new();
    while let Ok(event) = progress.try_recv() {
        seen.push(serde_json::to_value(&event).unwrap());
    }
    let answered = seen.iter().find(|p| p["event"] == "modelAnswered").unwrap();
    assert_eq!(answered["tokensIn"], 100);
    assert_eq!(answered["tokensOut"], 10);
    assert_eq!(answered["toolCalls"], 1);
    let started = seen.iter().find(|p| p["event"] == "toolStarted").unwrap();
    let finished = seen.iter().find(|p| p["event"] == "toolFinished").unwrap();
    assert_eq!(started["callId"], "call-lead-0-0");
    assert_eq!(finished["callId"], "call-lead-0-0");
    assert_eq!(finished["isError"], true);
    assert_eq!(finished["code"], "FS_NOT_FOUND");
    for p in &seen {
        let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
        assert!(
            keys.iter().all(|k| !k.contains('_')),
            "snake_case key in {p}"
        );
    }
}

/// A model that streams two tool calls with interleaved argument fragments.
#[derive(Debug)]
struct InterleavedCalls;

impl ModelProvider for InterleavedCalls {
    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        observer: &'a mut dyn StreamObserver,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, LlmError>> {
        Box::pin(async move {
            observer.on_event(StreamEvent::AttemptStarted { attempt: 1 });
            let answered = request
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }));
            if answered {
                observer.on_event(StreamEvent::TextDelta {
                    text: "done".to_owned(),
                });
                return Ok(ModelResponse {
                    message: AssistantMessage::text("done"),
                    usage: None,
                    finish_reason: Some(FinishReason::Stop),
                    model: None,
                    attempts: Vec::new(),
                    truncated_calls: Vec::new(),
                });
            }
            for (index, part) in [
                (0, "{\"path\":"),
                (1, "{\"pattern\":"),
                (0, "\"a.txt\"}"),
                (1, "\"*.rs\"}"),
            ] {
                observer.on_event(StreamEvent::ToolCallDelta {
                    index,
                    id: None,
                    name: None,
                    arguments: part.to_owned(),
                });
            }
            Ok(ModelResponse {
                message: AssistantMessage {
                    content: None,
                    reasoning_content: None,
                    tool_calls: vec![
                        ToolCall::new("c0", "read", json!({"path": "a.txt"})),
                        ToolCall::new("c1", "glob", json!({"pattern": "*.rs"})),
                    ],
                },
                usage: None,
                finish_reason: Some(FinishReason::ToolCalls),
                model: None,
                attempts: Vec::new(),
                truncated_calls: Vec::new(),
            })
        })
    }

    fn label(&self) -> String {
        "interleaved".to_owned()
    }
}

#[derive(Debug)]
struct InterleavedSource;

impl ModelSource for InterleavedSource {
    fn for_agent(&self, _name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        Ok(Arc::new(InterleavedCalls))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_chunks_are_coalesced_per_call_index() {
    let h = Harness::new();
    let rt = runtime_with(&h, |o| o.models = Arc::new(InterleavedSource));
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    lead.followup(user("go")).await.unwrap();
    idle(&lead).await;
    let chunks: Vec<(Value, Value)> = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind == "assistant/chunk" && e.data["block"] == "toolCall")
        .map(|e| (e.data["index"].clone(), e.data["delta"].clone()))
        .collect();
    assert_eq!(
        chunks,
        [
            (json!(0), json!("{\"path\":\"a.txt\"}")),
            (json!(1), json!("{\"pattern\":\"*.rs\"}")),
        ]
    );
    // Each delta is one call's arguments, valid JSON on its own.
    for (_, delta) in &chunks {
        serde_json::from_str::<Value>(delta.as_str().unwrap()).unwrap();
    }
}

/// A clock that advances on every reading: events appended in one batch share a time, events
/// of separate batches never do.
#[derive(Debug, Default)]
struct TickingClock(AtomicU64);

impl Clock for TickingClock {
    fn now_ms(&self) -> u64 {
        1_000 + self.0.fetch_add(1, Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_start_and_its_first_claim_are_one_append_batch() {
    let h = Harness::new();
    let journal = Journal::with_backend(
        Arc::new(JsonlBackend::new(h.home.path().join("sessions"))),
        Arc::new(TickingClock::default()),
    );
    let rt = Runtime::new(journal, h.runtime.options().clone());
    h.models.model("lead").push([text("one"), text("two")]);
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    lead.followup(user("first")).await.unwrap();
    idle(&lead).await;
    lead.followup(user("second")).await.unwrap();
    idle(&lead).await;
    let events = h.events(lead.id());
    let starts: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == "turn/start")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(starts.len(), 2);
    for i in starts {
        let batch: Vec<&str> = events[i..]
            .iter()
            .take_while(|e| e.time == events[i].time)
            .map(|e| e.kind.as_str())
            .collect();
        assert_eq!(
            batch,
            ["turn/start", "agent/inbox/spliced", "user/message"],
            "a crash between them would leave a started turn with an unclaimed prompt"
        );
    }
}
