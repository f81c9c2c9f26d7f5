//! Shared helpers: a client pointed at the fake server with fast, deterministic retries.

use tokio_util::sync::CancellationToken;
use troupe_llm::{
    ApiKey, ChatMessage, ChatRequest, ClientOptions, EventLog, HttpProviderConfig, LlmError,
    ModelProvider, ModelResponse, OpenAiClient, RetryPolicy, ToolSpec,
};
use troupe_test_support::FakeOpenAi;

/// Options for tests: 3 attempts, 5 ms then 10 ms backoff without jitter, 2 s idle timeout.
pub fn fast_options() -> ClientOptions {
    ClientOptions {
        idle_timeout_ms: 2_000,
        connect_timeout_ms: 1_000,
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff_ms: 5,
            max_backoff_ms: 20,
            jitter: false,
            max_retry_after_ms: 5_000,
        },
        ..ClientOptions::default()
    }
}

/// A keyless client of the fake server.
pub fn client(server: &FakeOpenAi) -> OpenAiClient {
    client_with(server, fast_options())
}

/// A keyless client of the fake server with these options.
pub fn client_with(server: &FakeOpenAi, options: ClientOptions) -> OpenAiClient {
    OpenAiClient::new(
        HttpProviderConfig::compatible(server.base_url(), "fake-model"),
        options,
    )
    .unwrap()
}

/// A client of the fake server sending `key`, read from `TEST_KEY_ENV`.
pub fn client_with_key(server: &FakeOpenAi, key: &str) -> OpenAiClient {
    OpenAiClient::new(
        HttpProviderConfig::compatible(server.base_url(), "fake-model")
            .with_api_key("TEST_KEY_ENV", ApiKey::new(key)),
        fast_options(),
    )
    .unwrap()
}

/// A small request: system + user, one tool.
pub fn simple_request() -> ChatRequest {
    ChatRequest::new(
        vec![
            ChatMessage::system("You are a coding agent."),
            ChatMessage::user("Say hello."),
        ],
        vec![read_tool()],
    )
}

/// The `read` tool spec.
pub fn read_tool() -> ToolSpec {
    ToolSpec::new(
        "read",
        "Read a file of the workspace.",
        serde_json::json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"]
        }),
    )
}

/// Runs one call with a fresh token, collecting the events.
pub async fn call(
    provider: &dyn ModelProvider,
    request: &ChatRequest,
) -> (Result<ModelResponse, LlmError>, EventLog) {
    let mut events = EventLog::new();
    let result = provider
        .complete(request, &mut events, &CancellationToken::new())
        .await;
    (result, events)
}
