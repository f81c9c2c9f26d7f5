//! The serialized shapes of the recorded types are the OpenAI wire format (chat types) or
//! camelCase (Troupe's own types), and round-trip.

use serde_json::json;
use troupe_llm::{
    AssistantMessage, Attempt, AttemptError, ChatMessage, ChatRequest, FinishReason, ModelResponse,
    StreamEvent, ToolCall, ToolSpec, TruncatedCall, Usage,
};

fn round_trip<T>(value: &T, expected: serde_json::Value)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_value(value).unwrap();
    assert_eq!(json, expected);
    let back: T = serde_json::from_value(json).unwrap();
    assert_eq!(&back, value);
}

#[test]
fn chat_messages_use_the_openai_wire_shape() {
    round_trip(
        &ChatMessage::system("s"),
        json!({"role": "system", "content": "s"}),
    );
    round_trip(
        &ChatMessage::user("u"),
        json!({"role": "user", "content": "u"}),
    );
    round_trip(
        &ChatMessage::tool_result("call_1", "{\"ok\":true}"),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"ok\":true}"}),
    );
    round_trip(
        &ChatMessage::Assistant(AssistantMessage {
            content: None,
            reasoning_content: Some("why".to_owned()),
            tool_calls: vec![ToolCall::new("call_1", "read", json!({"path": "a.rs"}))],
        }),
        json!({
            "role": "assistant",
            "content": null,
            "reasoning_content": "why",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "read", "arguments": "{\"path\":\"a.rs\"}"}}]
        }),
    );
    round_trip(
        &ChatMessage::Assistant(AssistantMessage::text("hi")),
        json!({"role": "assistant", "content": "hi"}),
    );
}

#[test]
fn lenient_reading_of_tool_calls_and_usage() {
    let call: ToolCall = serde_json::from_value(json!({
        "id": "c", "function": {"name": "n", "arguments": ""}
    }))
    .unwrap();
    assert_eq!(call.arguments, json!({}));
    let call: ToolCall = serde_json::from_value(json!({
        "id": "c", "type": "function", "function": {"name": "n", "arguments": {"a": 1}}
    }))
    .unwrap();
    assert_eq!(call.arguments, json!({"a": 1}));
    let invalid = serde_json::from_value::<ToolCall>(json!({
        "id": "c", "function": {"name": "n", "arguments": "{\"a\":"}
    }));
    assert!(invalid.is_err());

    let usage: Usage = serde_json::from_value(json!({})).unwrap();
    assert_eq!(usage, Usage::default());
    let usage: Usage =
        serde_json::from_value(json!({"prompt_tokens": 3, "completion_tokens": null, "extra": 1}))
            .unwrap();
    assert_eq!(usage.total(), 3);
}

#[test]
fn tool_specs_and_requests() {
    round_trip(
        &ToolSpec::new("read", "Read a file.", json!({"type": "object"})),
        json!({"type": "function", "function": {"name": "read", "description": "Read a file.", "parameters": {"type": "object"}}}),
    );
    round_trip(
        &ChatRequest::new(vec![ChatMessage::user("x")], Vec::new()),
        json!({"messages": [{"role": "user", "content": "x"}]}),
    );
}

#[test]
fn responses_events_and_finish_reasons() {
    round_trip(
        &ModelResponse {
            message: AssistantMessage::text("ok"),
            usage: Some(Usage {
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
                cached_tokens: 0,
            }),
            finish_reason: Some(FinishReason::Stop),
            model: Some("m".to_owned()),
            attempts: vec![
                Attempt {
                    number: 1,
                    status: Some(429),
                    error: Some(AttemptError {
                        code: "LLM_RATE_LIMITED".to_owned(),
                        message: "slow down".to_owned(),
                    }),
                    retry_delay_ms: Some(1000),
                },
                Attempt {
                    number: 2,
                    status: Some(200),
                    error: None,
                    retry_delay_ms: None,
                },
            ],
            truncated_calls: vec![TruncatedCall {
                position: 1,
                id: "c2".to_owned(),
                name: "write".to_owned(),
                arguments: "{\"path\":".to_owned(),
                reason: "EOF while parsing".to_owned(),
            }],
        },
        json!({
            "message": {"content": "ok"},
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            "finishReason": "stop",
            "model": "m",
            "attempts": [
                {"number": 1, "status": 429, "error": {"code": "LLM_RATE_LIMITED", "message": "slow down"}, "retryDelayMs": 1000},
                {"number": 2, "status": 200}
            ],
            "truncatedCalls": [
                {"position": 1, "id": "c2", "name": "write", "arguments": "{\"path\":", "reason": "EOF while parsing"}
            ]
        }),
    );
    round_trip(
        &StreamEvent::ToolCallDelta {
            index: 0,
            id: Some("c".to_owned()),
            name: None,
            arguments: "{".to_owned(),
        },
        json!({"type": "toolCallDelta", "index": 0, "id": "c", "arguments": "{"}),
    );
    for (reason, text) in [
        (FinishReason::Stop, "stop"),
        (FinishReason::Length, "length"),
        (FinishReason::ToolCalls, "tool_calls"),
        (FinishReason::ContentFilter, "content_filter"),
        (
            FinishReason::Other("insufficient_system_resource".to_owned()),
            "insufficient_system_resource",
        ),
    ] {
        round_trip(&reason, json!(text));
    }
    assert_eq!(FinishReason::parse(""), None);
}
