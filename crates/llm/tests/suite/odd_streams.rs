//! Streams from odd servers parse, through the real client and the fake server.

use serde_json::{Value, json};
use troupe_llm::{AssistantMessage, FinishReason, ToolCall, Usage};
use troupe_test_support::{FakeOpenAi, FakeResponse};

use super::common::{call, client, simple_request};

/// One SSE body from the given `data:` payloads (each followed by a blank line).
fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect()
}

/// Serves `body` as a stream, re-split into 3-byte pieces, and checks the parsed answer.
async fn check(
    body: &str,
    expected: AssistantMessage,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
) {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse_raw(body).rechunk(3));
    let (result, events) = call(&client(&server), &simple_request()).await;
    let response = result.unwrap_or_else(|error| panic!("{error}\n{body}"));
    assert_eq!(response.message, expected, "{body}");
    assert_eq!(response.finish_reason, finish_reason, "{body}");
    assert_eq!(response.usage, usage, "{body}");
    assert_eq!(
        events.text(),
        expected.content.clone().unwrap_or_default(),
        "{body}"
    );
}

fn text(content: &str) -> AssistantMessage {
    AssistantMessage::text(content)
}

fn calls(calls: Vec<ToolCall>) -> AssistantMessage {
    AssistantMessage {
        content: None,
        reasoning_content: None,
        tool_calls: calls,
    }
}

#[tokio::test]
async fn empty_finish_reason_usage_object_and_final_chunk_without_delta() {
    let body = sse(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": ""}], "usage": {}}),
        json!({"choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": ""}]}),
        json!({"choices": [{"index": 0, "finish_reason": "stop"}], "usage": {}}),
    ]) + "data: [DONE]\n\n";
    check(
        &body,
        text("Hi there"),
        Some(FinishReason::Stop),
        Some(Usage::default()),
    )
    .await;
}

#[tokio::test]
async fn null_content_missing_role_and_data_without_space() {
    let body = [
        r#"data:{"choices":[{"delta":{"content":null}}]}"#,
        r#"data:{"choices":[{"delta":{"content":"ok"},"finish_reason":null}],"usage":null}"#,
        r#"data:{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}"#,
        "data:[DONE]",
    ]
    .map(|line| format!("{line}\n\n"))
    .concat();
    check(&body, text("ok"), Some(FinishReason::Stop), None).await;
}

#[tokio::test]
async fn tool_call_deltas_without_index_continue_by_id_or_the_last_call() {
    let body = sse(&[
        json!({"choices": [{"delta": {"tool_calls": [{"id": "a", "type": "function", "function": {"name": "read", "arguments": "{\"pa"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "th\":\"x\"}"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"id": "b", "function": {"name": "bash", "arguments": "{\"command\":"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"id": "b", "function": {"arguments": "\"ls\"}"}}]}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
    ]) + "data: [DONE]\n\n";
    check(
        &body,
        calls(vec![
            ToolCall::new("a", "read", json!({"path": "x"})),
            ToolCall::new("b", "bash", json!({"command": "ls"})),
        ]),
        Some(FinishReason::ToolCalls),
        None,
    )
    .await;
}

#[tokio::test]
async fn parallel_calls_sharing_index_zero_are_told_apart_by_id() {
    let body = sse(&[
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "read", "arguments": "{\"path\":\"1\"}"}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "b", "function": {"name": "read", "arguments": "{\"path\":\"2\"}"}}]}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    check(
        &body,
        calls(vec![
            ToolCall::new("a", "read", json!({"path": "1"})),
            ToolCall::new("b", "read", json!({"path": "2"})),
        ]),
        Some(FinishReason::ToolCalls),
        None,
    )
    .await;
}

#[tokio::test]
async fn whole_calls_in_one_delta_without_index_or_id() {
    // Some servers send every call complete in one chunk, with neither index nor id, and
    // arguments as a JSON object instead of a string.
    let body = sse(&[
        json!({"choices": [{"delta": {"role": "assistant", "tool_calls": [
            {"function": {"name": "glob", "arguments": {"pattern": "*.rs"}}},
            {"function": {"name": "grep", "arguments": "{\"pattern\":\"x\"}"}}
        ]}, "finish_reason": "tool_calls"}]}),
    ]) + "data: [DONE]\n\n";
    check(
        &body,
        calls(vec![
            ToolCall::new("call_0", "glob", json!({"pattern": "*.rs"})),
            ToolCall::new("call_1", "grep", json!({"pattern": "x"})),
        ]),
        Some(FinishReason::ToolCalls),
        None,
    )
    .await;
}

#[tokio::test]
async fn empty_arguments_of_a_finished_call_read_as_an_empty_object() {
    let body = sse(&[
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "list_tasks", "arguments": ""}}]}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
    ]) + "data: [DONE]\n\n";
    check(
        &body,
        calls(vec![ToolCall::new("c", "list_tasks", json!({}))]),
        Some(FinishReason::ToolCalls),
        None,
    )
    .await;
}

#[tokio::test]
async fn done_without_finish_reason_and_finish_reason_without_done() {
    let body = sse(&[json!({"choices": [{"delta": {"content": "a"}}]})]) + "data: [DONE]\n\n";
    check(&body, text("a"), None, None).await;
    let body = sse(&[
        json!({"choices": [{"delta": {"content": "b"}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
    ]);
    check(&body, text("b"), Some(FinishReason::Stop), None).await;
}

#[tokio::test]
async fn comments_crlf_other_choices_reasoning_alias_and_unknown_finish_reason() {
    let body = [
        ": OPENROUTER PROCESSING",
        "event: message",
        r#"data: {"choices":[{"index":1,"delta":{"content":"IGNORED"}}]}"#,
        "",
        r#"data: {"choices":[{"index":0,"delta":{"reasoning":"hmm"}}]}"#,
        "",
        r#"data: {"choices":[{"index":0,"delta":{"content":"yes"}}]}"#,
        "",
        r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"eos"}],"usage":{"prompt_tokens":"5","completion_tokens":2.0}}"#,
        "",
        "data: [DONE]",
        "",
    ]
    .join("\r\n");
    let mut expected = text("yes");
    expected.reasoning_content = Some("hmm".to_owned());
    check(
        &body,
        expected,
        Some(FinishReason::Other("eos".to_owned())),
        Some(Usage {
            prompt_tokens: 5,
            completion_tokens: 2,
            total_tokens: 0,
            cached_tokens: 0,
        }),
    )
    .await;
}

#[tokio::test]
async fn legacy_function_call_delta() {
    let body = sse(&[
        json!({"choices": [{"delta": {"function_call": {"name": "read", "arguments": "{\"path\""}}}]}),
        json!({"choices": [{"delta": {"function_call": {"arguments": ":\"z\"}"}}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "function_call"}]}),
    ]);
    check(
        &body,
        calls(vec![ToolCall::new("call_0", "read", json!({"path": "z"}))]),
        Some(FinishReason::ToolCalls),
        None,
    )
    .await;
}
