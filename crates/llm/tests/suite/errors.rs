//! Errors that are not retried, timeouts, cancellation and truncated tool calls.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_llm::{ClientOptions, EventLog, LlmError, ModelProvider, RetryPolicy, StreamEvent};
use troupe_protocol::ErrorCode;
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse, StreamEnd};

use super::common::{call, client, client_with, client_with_key, fast_options, simple_request};

/// Serves `response` once and returns the error of the call and the request count.
async fn error_of(response: FakeResponse) -> (LlmError, usize) {
    let server = FakeOpenAi::start().unwrap();
    server.push(response);
    server.push(FakeResponse::text("a retry must not happen"));
    let (result, _) = call(
        &client_with_key(&server, "sk-secret-value"),
        &simple_request(),
    )
    .await;
    (result.unwrap_err(), server.request_count())
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_says_to_check_the_key() {
    for status in [401, 403] {
        let (error, requests) = error_of(FakeResponse::openai_error(
            status,
            "Authentication Fails (no such user)",
            "invalid_request_error",
        ))
        .await;
        assert_eq!(error.code(), "LLM_AUTH");
        assert_eq!(requests, 1);
        let message = error.to_string();
        assert!(message.contains("check your API key"), "{message}");
        assert!(message.contains("TEST_KEY_ENV"), "{message}");
        assert!(message.contains("Authentication Fails"), "{message}");
        assert!(!message.contains("sk-secret-value"), "{message}");
        assert!(!format!("{error:?}").contains("sk-secret-value"));
    }
}

/// A 200 that is neither an event stream nor JSON (a wrong port, a proxy page) is
/// `LLM_PROTOCOL` after one request, naming the content type and the URL; it was taken for a
/// dropped stream and retried for seconds before.
#[tokio::test]
async fn an_html_page_is_a_protocol_error_at_once_naming_the_content_type_and_url() {
    for content_type in ["text/html; charset=utf-8", "text/plain"] {
        let server = FakeOpenAi::start().unwrap();
        server.push(FakeResponse::body(
            200,
            content_type,
            "<!doctype html><html><body>Welcome to nginx!</body></html>",
        ));
        server.push(FakeResponse::text("a retry must not happen"));
        let started = Instant::now();
        let (result, events) = call(&client(&server), &simple_request()).await;
        let error = result.unwrap_err();
        assert_eq!(error.code(), "LLM_PROTOCOL", "{error}");
        assert_eq!(server.request_count(), 1, "no retry");
        let message = error.to_string();
        let bare = content_type.split(';').next().unwrap();
        assert!(
            message.contains(&format!("with content type {bare},")),
            "{message}"
        );
        assert!(
            message.contains(&format!("{}/chat/completions", server.base_url())),
            "{message}"
        );
        assert!(message.contains("--base-url"), "{message}");
        let attempts = events
            .events
            .iter()
            .filter(|e| matches!(e, StreamEvent::AttemptFailed { .. }))
            .count();
        assert_eq!(attempts, 1, "one attempt, reported once");
        // Whatever the load, far from the ~13 s of backoff it took before.
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    // Both accepted shapes still work: an event stream, and JSON for a streaming request.
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("streamed"));
    server.push(FakeResponse::json(chunks::text_completion("as json")));
    let (first, _) = call(&client(&server), &simple_request()).await;
    assert_eq!(first.unwrap().message.content.as_deref(), Some("streamed"));
    let (second, _) = call(&client(&server), &simple_request()).await;
    assert_eq!(second.unwrap().message.content.as_deref(), Some("as json"));
}

/// A stream that ends before the answer says how many chunks came, in English: `1 chunk`.
#[tokio::test]
async fn a_dropped_stream_counts_its_chunks_in_words_that_agree() {
    for (sent, words) in [(1, "1 chunk received"), (2, "2 chunks received")] {
        let server = FakeOpenAi::start().unwrap();
        let chunk = chunks::delta(json!({"role": "assistant", "content": "Hel"}));
        for _ in 0..3 {
            server.push(FakeResponse::sse_without_done(vec![chunk.clone(); sent]));
        }
        let (result, _) = call(&client(&server), &simple_request()).await;
        let error = result.unwrap_err();
        assert_eq!(error.code(), "LLM_STREAM_DROPPED");
        assert!(error.to_string().contains(words), "{error}");
    }
}

#[tokio::test]
async fn a_server_echoing_the_key_gets_it_redacted_in_every_error_and_attempt() {
    let key = "sk-echoed-0123456789abcdef";
    let echo = format!("Incorrect API key provided: Bearer {key}");
    let server = FakeOpenAi::start().unwrap();
    // An answer that is not retried, and one that is (its failed attempt is reported first).
    server.push(FakeResponse::openai_error(401, &echo, "invalid_api_key"));
    server.push(FakeResponse::error(500, format!("upstream rejected {key}")));
    server.push(FakeResponse::error(503, format!("still {key}")));
    server.push(FakeResponse::error(400, format!("bad request from {key}")));
    let client = client_with_key(&server, key);
    let (auth, _) = call(&client, &simple_request()).await;
    let auth = auth.unwrap_err();
    assert_eq!(auth.code(), "LLM_AUTH");
    let message = auth.to_string();
    assert!(!message.contains(key), "{message}");
    assert!(message.contains("Bearer ***"), "{message}");

    let (result, events) = call(&client, &simple_request()).await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), "LLM_BAD_REQUEST");
    assert!(!error.to_string().contains(key), "{error}");
    assert!(error.to_string().contains("from ***"), "{error}");
    let failed: Vec<String> = events
        .events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::AttemptFailed { attempt } => {
                attempt.error.as_ref().map(|e| e.message.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    for message in &failed {
        assert!(!message.contains(key), "{message}");
        assert!(message.contains("***"), "{message}");
    }
}

#[tokio::test]
async fn unauthorized_without_a_key_says_how_to_pass_one() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::error(401, "unauthorized"));
    let (result, _) = call(&client(&server), &simple_request()).await;
    let message = result.unwrap_err().to_string();
    assert!(message.contains("check your API key"), "{message}");
    assert!(message.contains("--api-key-env"), "{message}");
}

#[tokio::test]
async fn context_length_errors_are_typed() {
    let cases = [
        // OpenAI.
        FakeResponse::openai_error(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
            "context_length_exceeded",
        ),
        // DeepSeek: the code is generic, the message says it.
        FakeResponse::error(
            400,
            r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (70000 in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
        ),
        // A local server with a plain-text body.
        FakeResponse::error(
            400,
            "the request exceeds the available context size, context length exceeded",
        ),
    ];
    for response in cases {
        let (error, requests) = error_of(response).await;
        assert_eq!(error.code(), "LLM_CONTEXT_LENGTH", "{error}");
        assert!(matches!(error, LlmError::ContextLength { .. }));
        assert_eq!(requests, 1);
    }
}

#[tokio::test]
async fn other_client_errors_are_bad_requests_and_not_retried() {
    let (error, requests) = error_of(FakeResponse::openai_error(
        400,
        "Model Not Exist",
        "invalid_request_error",
    ))
    .await;
    assert_eq!(error.code(), "LLM_BAD_REQUEST");
    assert!(error.to_string().contains("Model Not Exist"));
    assert_eq!(requests, 1);

    let (error, requests) = error_of(FakeResponse::error(404, "404 page not found")).await;
    assert_eq!(error.code(), "LLM_BAD_REQUEST");
    assert!(error.to_string().contains("check --base-url"), "{error}");
    assert_eq!(requests, 1);

    let (error, requests) = error_of(FakeResponse::openai_error(
        429,
        "You exceeded your current quota",
        "insufficient_quota",
    ))
    .await;
    assert_eq!(error.code(), "LLM_QUOTA");
    assert_eq!(requests, 1);
}

#[tokio::test]
async fn idle_timeout_when_the_stream_stalls() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("stalls after the role chunk").cut_after(2, StreamEnd::Stall));
    server.push(FakeResponse::text("stalls immediately").cut_after(0, StreamEnd::Stall));
    let options = ClientOptions {
        idle_timeout_ms: 200,
        retry: RetryPolicy {
            max_attempts: 2,
            ..fast_options().retry
        },
        ..fast_options()
    };
    let started = Instant::now();
    let (result, events) = call(&client_with(&server, options), &simple_request()).await;
    let error = result.unwrap_err();
    assert_eq!(error, LlmError::IdleTimeout { idle_ms: 200 });
    assert_eq!(error.code(), "LLM_IDLE_TIMEOUT");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.request_count(), 2);
    let failures = events
        .events
        .iter()
        .filter(|event| matches!(event, StreamEvent::AttemptFailed { .. }))
        .count();
    assert_eq!(failures, 2);
}

#[tokio::test]
async fn a_stall_after_the_finish_reason_still_delivers_the_answer() {
    let server = FakeOpenAi::start().unwrap();
    // Role chunk, one word, finish: then nothing (no usage, no [DONE]) and no EOF.
    server.push(FakeResponse::text("done").cut_after(3, StreamEnd::Stall));
    let options = ClientOptions {
        idle_timeout_ms: 200,
        ..fast_options()
    };
    let (result, _) = call(&client_with(&server, options), &simple_request()).await;
    assert_eq!(result.unwrap().message.content.as_deref(), Some("done"));
}

#[tokio::test]
async fn cancellation_mid_stream_returns_promptly() {
    let server = FakeOpenAi::start().unwrap();
    let long_text = "word ".repeat(200);
    server.push(FakeResponse::text(&long_text).with_delay_ms(20));
    let client = client(&server);
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    let mut seen = 0usize;
    // The observer cancels the call as soon as the third text delta arrives.
    let mut observer = |event: StreamEvent| {
        if matches!(event, StreamEvent::TextDelta { .. }) {
            seen += 1;
            if seen == 3 {
                canceller.cancel();
            }
        }
    };
    let started = Instant::now();
    let result = client
        .complete(&simple_request(), &mut observer, &cancel)
        .await;
    assert_eq!(result.unwrap_err().code(), "LLM_CANCELLED");
    // The whole stream would take 4 s; cancellation must not wait for it.
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(seen, 3);
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn cancellation_from_another_task_mid_stream() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("a b c").cut_after(2, StreamEnd::Stall));
    let client = client(&server);
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let mut events = EventLog::new();
    let result = client
        .complete(&simple_request(), &mut events, &cancel)
        .await;
    assert_eq!(result.unwrap_err(), LlmError::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(events.text(), "a ");
}

#[tokio::test]
async fn an_already_cancelled_call_sends_nothing() {
    let server = FakeOpenAi::start().unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let result = client(&server)
        .complete(&simple_request(), &mut EventLog::new(), &cancel)
        .await;
    assert_eq!(result.unwrap_err(), LlmError::Cancelled);
    assert_eq!(server.request_count(), 0);
}

fn cut(finish: &str, arguments: &str) -> FakeResponse {
    FakeResponse::sse(vec![
        chunks::delta(
            json!({"tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                             "function": {"name": "write", "arguments": arguments}}]}),
        ),
        chunks::finish(finish),
    ])
}

#[tokio::test]
async fn invalid_tool_call_arguments_not_cut_by_the_output_limit_are_typed_errors() {
    let cases = [
        cut("tool_calls", r#"{"path":"src/lib.rs""#),
        cut("tool_calls", "not json"),
        cut("stop", r#"{"path":"#),
    ];
    for response in cases {
        let (error, requests) = error_of(response).await;
        assert_eq!(error.code(), "LLM_TRUNCATED_TOOL_CALL", "{error}");
        match &error {
            LlmError::TruncatedToolCall { id, name, .. } => {
                assert_eq!((id.as_str(), name.as_str()), ("call_x", "write"));
            }
            other => panic!("{other:?}"),
        }
        assert!(error.to_string().contains("`write`"), "{error}");
        assert_eq!(requests, 1);
    }
}

#[tokio::test]
async fn calls_cut_by_the_output_limit_are_returned_apart_with_their_raw_arguments() {
    // Alone, with unparseable or empty arguments (empty is `{}` only when not cut by `length`).
    for arguments in [r#"{"path":"src/lib.rs","content":"fn ma"#, ""] {
        let server = FakeOpenAi::start().unwrap();
        server.push(cut("length", arguments));
        let (result, _) = call(&client(&server), &simple_request()).await;
        let response = result.unwrap();
        assert!(response.message.tool_calls.is_empty());
        assert_eq!(
            response.finish_reason,
            Some(troupe_llm::FinishReason::Length)
        );
        assert_eq!(
            response.truncated_calls,
            vec![troupe_llm::TruncatedCall {
                position: 0,
                id: "call_x".to_owned(),
                name: "write".to_owned(),
                arguments: arguments.to_owned(),
                reason: response.truncated_calls[0].reason.clone(),
            }]
        );
        assert!(!response.truncated_calls[0].reason.is_empty());
        let error = LlmError::from(&response.truncated_calls[0]);
        assert_eq!(error.code(), "LLM_TRUNCATED_TOOL_CALL");
        assert!(
            error.to_string().contains("finish_reason length"),
            "{error}"
        );
        assert_eq!(server.request_count(), 1);
    }
    // After a complete call: the complete one is returned as usual, in its place.
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse(vec![
        chunks::delta(json!({"content": "writing both"})),
        chunks::delta(json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                            "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]})),
        chunks::delta(json!({"tool_calls": [{"index": 1, "id": "c2", "type": "function",
                            "function": {"name": "write", "arguments": "{\"path\":\"b\",\"content\":\"x"}}]})),
        chunks::finish("length"),
    ]));
    let (result, _) = call(&client(&server), &simple_request()).await;
    let response = result.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("writing both"));
    assert_eq!(
        response.message.tool_calls,
        vec![troupe_llm::ToolCall::new(
            "c1",
            "read",
            json!({"path": "a"})
        )]
    );
    assert_eq!(response.truncated_calls.len(), 1);
    let cut_call = &response.truncated_calls[0];
    assert_eq!(
        (
            cut_call.position,
            cut_call.id.as_str(),
            cut_call.arguments.as_str()
        ),
        (1, "c2", r#"{"path":"b","content":"x"#)
    );
}

#[tokio::test]
async fn unparseable_answers_are_protocol_errors() {
    let (error, requests) = error_of(FakeResponse::sse_raw("data: {not json\n\n")).await;
    assert_eq!(error.code(), "LLM_PROTOCOL");
    assert_eq!(requests, 1);

    let (error, _) = error_of(FakeResponse::json(json!({"object": "list", "data": []}))).await;
    assert_eq!(error.code(), "LLM_PROTOCOL");
    assert!(error.to_string().contains("no choices"), "{error}");

    let (error, _) = error_of(FakeResponse::sse(vec![
        chunks::delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})),
        chunks::finish("tool_calls"),
    ]))
    .await;
    assert_eq!(error.code(), "LLM_PROTOCOL");
    assert!(error.to_string().contains("no tool name"), "{error}");
}

#[test]
fn codes_and_retry_classes() {
    let cases: [(LlmError, &str, bool); 6] = [
        (LlmError::Cancelled, "LLM_CANCELLED", false),
        (
            LlmError::IdleTimeout { idle_ms: 1 },
            "LLM_IDLE_TIMEOUT",
            true,
        ),
        (
            LlmError::StreamDropped {
                message: String::new(),
            },
            "LLM_STREAM_DROPPED",
            true,
        ),
        (
            LlmError::ContextLength {
                message: String::new(),
            },
            "LLM_CONTEXT_LENGTH",
            false,
        ),
        (
            LlmError::Script {
                message: String::new(),
            },
            "LLM_SCRIPT",
            false,
        ),
        (
            LlmError::Config {
                message: String::new(),
            },
            "LLM_CONFIG",
            false,
        ),
    ];
    for (error, code, retryable) in cases {
        assert_eq!(error.code(), code);
        assert_eq!(error.is_retryable(), retryable, "{code}");
    }
}
