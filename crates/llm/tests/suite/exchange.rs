//! A multi-step exchange through the real client against the fake server, asserting on the
//! outbound requests.

use serde_json::json;
use troupe_llm::{
    AssistantMessage, ChatMessage, ChatRequest, ClientOptions, FinishReason, HttpProviderConfig,
    OpenAiClient, ReasoningReplay, StreamEvent, ToolCall, Usage,
};
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse};

use super::common::{call, client, client_with_key, fast_options, read_tool, simple_request};

#[tokio::test]
async fn tool_using_turn_sends_the_whole_history() {
    let server = FakeOpenAi::start().unwrap();
    // Step 1: two parallel tool calls, arguments split over several chunks, the whole body
    // re-split into 7-byte pieces on the wire.
    server.push(
        FakeResponse::tool_calls(
            &[
                ("call_1", "read", json!({"path": "src/main.rs"})),
                (
                    "call_2",
                    "bash",
                    json!({"command": "cargo test", "timeout_ms": 5000}),
                ),
            ],
            4,
        )
        .rechunk(7),
    );
    // Step 2: the final answer.
    server.push(FakeResponse::text("All tests pass. Done!"));

    let client = client_with_key(&server, "sk-test-123");
    let mut request = ChatRequest::new(
        vec![
            ChatMessage::system("You are a coding agent."),
            ChatMessage::user("Fix the tests."),
        ],
        vec![read_tool()],
    );

    let (first, events) = call(&client, &request).await;
    let first = first.unwrap();
    assert_eq!(
        first.message.tool_calls,
        vec![
            ToolCall::new("call_1", "read", json!({"path": "src/main.rs"})),
            ToolCall::new(
                "call_2",
                "bash",
                json!({"command": "cargo test", "timeout_ms": 5000})
            ),
        ]
    );
    assert_eq!(first.message.content, None);
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        first.usage,
        Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 7,
            total_tokens: 17,
            cached_tokens: 0,
        })
    );
    assert_eq!(first.model.as_deref(), Some("fake-model"));
    assert_eq!(first.attempts.len(), 1);
    assert_eq!(first.attempts[0].status, Some(200));
    // The tool-call fragments were observable as they arrived.
    let fragments: String = events
        .events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolCallDelta {
                index: 1,
                arguments,
                ..
            } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fragments, r#"{"command":"cargo test","timeout_ms":5000}"#);
    assert!(events.events.len() > 8, "{:?}", events.events);

    request.messages.push(first.message.clone().into());
    request.messages.push(ChatMessage::tool_result(
        "call_1",
        r#"{"content":"fn main() {}"}"#,
    ));
    request
        .messages
        .push(ChatMessage::tool_result("call_2", r#"{"exit_code":0}"#));
    let (second, events) = call(&client, &request).await;
    let second = second.unwrap();
    assert_eq!(
        second.message,
        AssistantMessage::text("All tests pass. Done!")
    );
    assert_eq!(events.text(), "All tests pass. Done!");
    assert_eq!(second.finish_reason, Some(FinishReason::Stop));

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for recorded in &requests {
        assert_eq!(recorded.path, "/v1/chat/completions");
        assert_eq!(recorded.header("authorization"), Some("Bearer sk-test-123"));
        assert_eq!(recorded.header("content-type"), Some("application/json"));
        assert_eq!(recorded.body["model"], "fake-model");
        assert_eq!(recorded.body["stream"], true);
        assert_eq!(
            recorded.body["stream_options"],
            json!({"include_usage": true})
        );
        assert_eq!(
            recorded.tools(),
            &[json!({
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "Read a file of the workspace.",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"]
                    }
                }
            })]
        );
    }
    assert_eq!(
        requests[0].messages(),
        &[
            json!({"role": "system", "content": "You are a coding agent."}),
            json!({"role": "user", "content": "Fix the tests."}),
        ]
    );
    assert_eq!(
        requests[1].messages(),
        &[
            json!({"role": "system", "content": "You are a coding agent."}),
            json!({"role": "user", "content": "Fix the tests."}),
            // `""`, not `null`, beside the calls: llama-cpp-python refuses `null` (see
            // `interop.rs`).
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read", "arguments": "{\"path\":\"src/main.rs\"}"}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "bash", "arguments": "{\"command\":\"cargo test\",\"timeout_ms\":5000}"}},
            ]}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"content\":\"fn main() {}\"}"}),
            json!({"role": "tool", "tool_call_id": "call_2", "content": "{\"exit_code\":0}"}),
        ]
    );
}

#[tokio::test]
async fn no_authorization_header_without_a_key() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("hi"));
    let (result, _) = call(&client(&server), &simple_request()).await;
    assert_eq!(result.unwrap().message.content.as_deref(), Some("hi"));
    let requests = server.requests();
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(requests[0].header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn tools_are_omitted_when_empty_and_sampling_fields_are_sent() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("ok"));
    let mut request = ChatRequest::new(vec![ChatMessage::user("hi")], Vec::new());
    request.temperature = Some(0.5);
    request.max_tokens = Some(100);
    call(&client(&server), &request).await.0.unwrap();
    let body = &server.requests()[0].body;
    assert!(body.get("tools").is_none(), "{body}");
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(body["max_tokens"], 100);
}

#[tokio::test]
async fn reasoning_content_is_streamed_kept_and_replayed_only_in_the_current_turn() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse(chunks::reasoning_answer(
        "The user greets me; I should greet back.",
        "Hello there!",
    )));
    server.push(FakeResponse::text("Second answer."));
    let options = ClientOptions {
        reasoning_replay: Some(ReasoningReplay::CurrentTurn),
        ..fast_options()
    };
    let client = OpenAiClient::new(
        HttpProviderConfig::compatible(server.base_url(), "deepseek-reasoner"),
        options,
    )
    .unwrap();

    let mut request = ChatRequest::new(vec![ChatMessage::user("Hi")], Vec::new());
    let (response, events) = call(&client, &request).await;
    let response = response.unwrap();
    assert_eq!(
        response.message.reasoning_content.as_deref(),
        Some("The user greets me; I should greet back.")
    );
    assert_eq!(response.message.content.as_deref(), Some("Hello there!"));
    assert_eq!(
        events.reasoning(),
        "The user greets me; I should greet back."
    );
    assert_eq!(events.text(), "Hello there!");

    // Current turn: an assistant message after the last user message keeps its reasoning.
    let with_reasoning = AssistantMessage {
        content: None,
        reasoning_content: Some("I need the file.".to_owned()),
        tool_calls: vec![ToolCall::new("call_9", "read", json!({"path": "a"}))],
    };
    request.messages.push(response.message.clone().into());
    request.messages.push(ChatMessage::user("And now?"));
    request.messages.push(with_reasoning.into());
    request
        .messages
        .push(ChatMessage::tool_result("call_9", "{}"));
    call(&client, &request).await.0.unwrap();

    let sent = server.requests()[1].messages().to_vec();
    assert_eq!(sent[1]["role"], "assistant");
    assert!(sent[1].get("reasoning_content").is_none(), "{}", sent[1]);
    assert_eq!(sent[3]["reasoning_content"], "I need the file.");
}

#[tokio::test]
async fn reasoning_is_never_sent_to_other_providers_by_default() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("ok"));
    let request = ChatRequest::new(
        vec![
            ChatMessage::user("Hi"),
            AssistantMessage {
                content: Some("x".to_owned()),
                reasoning_content: Some("secret thoughts".to_owned()),
                tool_calls: Vec::new(),
            }
            .into(),
        ],
        Vec::new(),
    );
    call(&client(&server), &request).await.0.unwrap();
    let sent = server.requests()[0].messages().to_vec();
    assert_eq!(sent[1], json!({"role": "assistant", "content": "x"}));
}

#[tokio::test]
async fn non_streaming_mode_parses_the_json_body_and_emits_deltas() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::json(chunks::completion(
        json!({
            "role": "assistant",
            "content": "Reading it.",
            "reasoning_content": "think",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "read", "arguments": "{\"path\":\"x\"}"}}]
        }),
        "tool_calls",
    )));
    let client = super::common::client_with(
        &server,
        ClientOptions {
            stream: false,
            ..fast_options()
        },
    );
    let (response, events) = call(&client, &simple_request()).await;
    let response = response.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("Reading it."));
    assert_eq!(response.message.reasoning_content.as_deref(), Some("think"));
    assert_eq!(
        response.message.tool_calls,
        vec![ToolCall::new("c1", "read", json!({"path": "x"}))]
    );
    assert_eq!(response.usage.unwrap().total_tokens, 13);
    assert_eq!(events.text(), "Reading it.");
    let body = &server.requests()[0].body;
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
    assert_eq!(
        server.requests()[0].header("accept"),
        Some("application/json")
    );
}

#[tokio::test]
async fn json_answer_to_a_streaming_request_is_accepted() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::json(chunks::text_completion("plain JSON")));
    let (response, events) = call(&client(&server), &simple_request()).await;
    assert_eq!(
        response.unwrap().message.content.as_deref(),
        Some("plain JSON")
    );
    assert_eq!(events.text(), "plain JSON");
    assert_eq!(server.requests()[0].body["stream"], true);
}

#[tokio::test]
async fn chat_completions_path_without_v1_is_served_too() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("root path"));
    let client = OpenAiClient::new(
        HttpProviderConfig::compatible(format!("http://{}/", server.address()), "m"),
        fast_options(),
    )
    .unwrap();
    assert_eq!(
        client.endpoint(),
        format!("http://{}/chat/completions", server.address())
    );
    call(&client, &simple_request()).await.0.unwrap();
    assert_eq!(server.requests()[0].path, "/chat/completions");
}
