//! Real-server interop, each habit mimicked by the fake server ([`Mimic`]): llama-cpp-python's
//! refusal of `"content": null`, its tools that need `tool_choice`, its empty answer to a
//! streamed `tool_choice: "auto"` (the client falls back to one plain request), streams without
//! usage, `: ping` comments; `llama-server`'s `timings`, its refusal without `--jinja` and
//! (older builds) of streamed tools; explicit `null`s, `finish_reason: length` without usage,
//! and HTTP 500 bodies that are not JSON.

use serde_json::{Value, json};
use troupe_llm::{
    AssistantMessage, Attempt, ChatMessage, ChatRequest, ClientOptions, FinishReason,
    HttpProviderConfig, LlmError, OpenAiClient, RetryPolicy, StreamEvent, ToolCall, ToolChoice,
};
use troupe_protocol::ErrorCode;
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse, Mimic, StreamEnd, StreamedTools};

use super::common::{call, fast_options, read_tool, simple_request};

/// A keyless client of the fake server sending `tool_choice` as `choice` says.
fn client_choosing(server: &FakeOpenAi, choice: ToolChoice) -> OpenAiClient {
    client_choosing_with(server, choice, fast_options())
}

fn client_choosing_with(
    server: &FakeOpenAi,
    choice: ToolChoice,
    options: ClientOptions,
) -> OpenAiClient {
    OpenAiClient::new(
        HttpProviderConfig::compatible(server.base_url(), "fake-model").with_tool_choice(choice),
        options,
    )
    .unwrap()
}

/// `(number, status, code, retry delay)` of each attempt.
fn summary(attempts: &[Attempt]) -> Vec<(u32, Option<u16>, String, Option<u64>)> {
    attempts
        .iter()
        .map(|attempt| {
            (
                attempt.number,
                attempt.status,
                attempt
                    .error
                    .as_ref()
                    .map_or_else(String::new, |error| error.code.clone()),
                attempt.retry_delay_ms,
            )
        })
        .collect()
}

fn attempt(
    number: u32,
    status: u16,
    code: &str,
    delay: Option<u64>,
) -> (u32, Option<u16>, String, Option<u64>) {
    (number, Some(status), code.to_owned(), delay)
}

/// The history after a tool-call-only answer: system, user, the call, its result.
fn history_after_a_call() -> ChatRequest {
    ChatRequest::new(
        vec![
            ChatMessage::system("You are a coding agent."),
            ChatMessage::user("Read a.txt."),
            ChatMessage::Assistant(AssistantMessage {
                content: None,
                reasoning_content: None,
                tool_calls: vec![ToolCall::new("call_1", "read", json!({"path": "a.txt"}))],
            }),
            ChatMessage::tool_result("call_1", r#"{"content":"hi"}"#),
        ],
        vec![read_tool()],
    )
}

fn post(server: &FakeOpenAi, body: &Value) -> (u16, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let response = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("{}/chat/completions", server.base_url()))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    })
}

/// The mimic itself: `"content": null` beside tool calls gets llama-cpp-python's HTTP 500 and
/// its pydantic message; the same message with `""` (or without `content`) reaches the queue.
#[test]
fn the_strict_fake_refuses_null_content_as_llama_cpp_python_does() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic {
        reject_null_content: true,
        ..Mimic::default()
    });
    server.push(FakeResponse::json(chunks::text_completion("ok")));
    server.push(FakeResponse::json(chunks::text_completion("ok too")));
    let call =
        json!([{"id": "c", "type": "function", "function": {"name": "read", "arguments": "{}"}}]);
    let with = |content: Option<Value>| {
        let mut assistant = json!({"role": "assistant", "tool_calls": call});
        if let Some(content) = content {
            assistant["content"] = content;
        }
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}, assistant,
               {"role": "tool", "tool_call_id": "c", "content": "{}"}]})
    };
    let (status, body) = post(&server, &with(Some(Value::Null)));
    assert_eq!(status, 500, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["type"], "internal_server_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("Input should be a valid string"),
        "{message}"
    );
    assert!(
        message.contains("'messages', 1,"),
        "names the message: {message}"
    );
    assert_eq!(server.pending(), 2, "a refusal leaves the queue alone");
    assert_eq!(post(&server, &with(Some(json!("")))).0, 200);
    assert_eq!(post(&server, &with(None)).0, 200);
}

/// The mimics reshape what they serve: llama-cpp-python's streams lose their usage and gain
/// ping comments; `llama-server`'s last chunk and plain answers gain `timings`.
#[test]
fn the_mimics_reshape_what_they_serve() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_cpp_python());
    server.push(FakeResponse::text("hi"));
    let (status, body) = post(
        &server,
        &json!({"model": "m", "stream": true, "messages": []}),
    );
    assert_eq!(status, 200);
    assert!(!body.contains("usage"), "{body}");
    assert!(body.starts_with(": ping - "), "{body}");
    assert!(body.contains("\"finish_reason\":\"stop\""), "{body}");

    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_server());
    server.push(FakeResponse::text("hi"));
    server.push(FakeResponse::json(chunks::text_completion("hi")));
    let (_, body) = post(
        &server,
        &json!({"model": "m", "stream": true, "messages": []}),
    );
    let last = body
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .last()
        .unwrap();
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["timings"]["predicted_n"], 3, "{body}");
    assert!(last["usage"].is_object(), "usage stays: {body}");
    let (_, body) = post(&server, &json!({"model": "m", "messages": []}));
    assert!(serde_json::from_str::<Value>(&body).unwrap()["timings"].is_object());
}

/// The regression: a tool-call-only assistant message goes out as `"content": ""`, which the
/// strict fake (and every server) accepts, so the call succeeds at the first attempt.
#[tokio::test]
async fn tool_call_only_messages_are_sent_with_empty_content() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic {
        reject_null_content: true,
        ..Mimic::default()
    });
    server.push(FakeResponse::text("a.txt says hi."));
    let (result, _) = call(
        &client_choosing(&server, ToolChoice::Omit),
        &history_after_a_call(),
    )
    .await;
    let response = result.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("a.txt says hi."));
    assert_eq!(response.attempts.len(), 1);
    let requests = server.requests();
    let assistant = &requests[0].messages()[2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], "");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
}

/// `tool_choice` goes out as chosen, beside tools only; `omit` sends no key.
#[tokio::test]
async fn tool_choice_is_sent_as_chosen_beside_tools_only() {
    for (choice, wire) in [
        (ToolChoice::Auto, Some("auto")),
        (ToolChoice::Required, Some("required")),
        (ToolChoice::None, Some("none")),
        (ToolChoice::Omit, None),
    ] {
        let server = FakeOpenAi::start().unwrap();
        server.push(FakeResponse::text("with tools"));
        server.push(FakeResponse::text("without tools"));
        let client = client_choosing(&server, choice);
        call(&client, &simple_request()).await.0.unwrap();
        let mut bare = simple_request();
        bare.tools.clear();
        call(&client, &bare).await.0.unwrap();
        let requests = server.requests();
        assert_eq!(
            requests[0].body.get("tool_choice").and_then(Value::as_str),
            wire,
            "{choice}"
        );
        assert!(
            requests[1].body.get("tool_choice").is_none(),
            "{choice}: no tool_choice without tools"
        );
    }
}

/// llama-cpp-python leaves the tools out of the prompt without `tool_choice`: the model can only
/// answer text. With `auto` the call arrives (through the plain-request fallback).
#[tokio::test]
async fn llama_cpp_python_calls_tools_only_with_a_tool_choice() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_cpp_python());
    let calls = [("call__0_read_cmpl-1", "read", json!({"path": "a.txt"}))];
    server.push(FakeResponse::json(chunks::tool_call_completion(&calls)));

    let (ignored, _) = call(
        &client_choosing(&server, ToolChoice::Omit),
        &simple_request(),
    )
    .await;
    let ignored = ignored.unwrap();
    assert_eq!(
        ignored.message.content.as_deref(),
        Some(Mimic::TOOLS_IGNORED)
    );
    assert!(ignored.message.tool_calls.is_empty());
    assert_eq!(server.pending(), 1, "the tools were never offered");

    let (chosen, _) = call(
        &client_choosing(&server, ToolChoice::Auto),
        &simple_request(),
    )
    .await;
    let chosen = chosen.unwrap();
    // `tool_calls` and the legacy `function_call` beside it are one call, not two.
    assert_eq!(
        chosen.message.tool_calls,
        vec![ToolCall::new(
            "call__0_read_cmpl-1",
            "read",
            json!({"path": "a.txt"})
        )]
    );
    assert_eq!(chosen.finish_reason, Some(FinishReason::ToolCalls));
}

/// A streamed `tool_choice: "auto"` answered with an empty 200 body: the attempt is recorded
/// (`LLM_EMPTY_STREAM`, retried after 0 ms) and one plain request follows at once, with
/// `"stream": false` and no `stream_options`.
#[tokio::test]
async fn an_empty_stream_falls_back_to_one_plain_request() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_cpp_python());
    server.push(FakeResponse::json(chunks::tool_call_completion(&[(
        "call_x",
        "read",
        json!({"path": "b.txt"}),
    )])));
    let (result, events) = call(
        &client_choosing(&server, ToolChoice::Auto),
        &simple_request(),
    )
    .await;
    let response = result.unwrap();
    assert_eq!(
        summary(&response.attempts),
        vec![
            attempt(1, 200, "LLM_EMPTY_STREAM", Some(0)),
            attempt(2, 200, "", None)
        ]
    );
    let message = &response.attempts[0].error.as_ref().unwrap().message;
    assert!(message.contains("before its first event"), "{message}");
    assert_eq!(
        response.message.tool_calls[0].arguments,
        json!({"path": "b.txt"})
    );
    assert_eq!(
        response.usage.unwrap().total_tokens,
        13,
        "plain answers carry usage"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(requests[0].body["tool_choice"], "auto");
    assert_eq!(requests[1].body["stream"], false);
    assert!(requests[1].body.get("stream_options").is_none());
    assert_eq!(requests[1].header("accept"), Some("application/json"));
    assert_eq!(requests[1].body["messages"], requests[0].body["messages"]);
    let failed: Vec<&Attempt> = events
        .events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::AttemptFailed { attempt } => Some(attempt),
            _ => None,
        })
        .collect();
    assert_eq!(
        failed,
        vec![&response.attempts[0]],
        "reported as it happened"
    );
}

/// The fallback is not a retry: it happens with `max_attempts: 1`, and a plain request that then
/// fails with a retryable error is retried as a plain request, within the usual budget.
#[tokio::test]
async fn the_fallback_is_no_retry_and_later_retries_stay_plain() {
    let once = ClientOptions {
        retry: RetryPolicy {
            max_attempts: 1,
            ..fast_options().retry
        },
        ..fast_options()
    };
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse_raw(""));
    server.push(FakeResponse::json(chunks::text_completion("plain")));
    let (result, _) = call(
        &client_choosing_with(&server, ToolChoice::Omit, once.clone()),
        &simple_request(),
    )
    .await;
    assert_eq!(result.unwrap().message.content.as_deref(), Some("plain"));

    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse_raw(""));
    server.push(FakeResponse::error(503, "busy"));
    server.push(FakeResponse::error(503, "busy"));
    server.push(FakeResponse::json(chunks::text_completion("third time")));
    let (result, _) = call(
        &client_choosing(&server, ToolChoice::Omit),
        &simple_request(),
    )
    .await;
    let response = result.unwrap();
    assert_eq!(
        summary(&response.attempts),
        vec![
            attempt(1, 200, "LLM_EMPTY_STREAM", Some(0)),
            attempt(2, 503, "LLM_SERVER", Some(5)),
            attempt(3, 503, "LLM_SERVER", Some(10)),
            attempt(4, 200, "", None),
        ],
        "three attempts of the budget after the fallback"
    );
    let streams: Vec<Value> = server
        .requests()
        .iter()
        .map(|request| request.body["stream"].clone())
        .collect();
    assert_eq!(streams, [true, false, false, false]);

    // With the budget spent, the plain request's own error is the result.
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse_raw(""));
    server.push(FakeResponse::error(503, "still busy"));
    let (result, _) = call(
        &client_choosing_with(&server, ToolChoice::Omit, once),
        &simple_request(),
    )
    .await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), "LLM_SERVER");
    assert!(error.to_string().contains("still busy"), "{error}");
}

/// A stream that breaks, or holds only comments, before its first event falls back too; one
/// that broke after an event is a dropped stream, retried as a stream.
#[tokio::test]
async fn streams_without_a_first_event_fall_back_but_dropped_ones_retry() {
    for (name, first) in [
        ("broken", FakeResponse::sse_raw("").ending(StreamEnd::Abort)),
        (
            "comments only",
            FakeResponse::sse_raw(": ping - 2025-01-01 00:00:00.000000+00:00\n\n"),
        ),
    ] {
        let server = FakeOpenAi::start().unwrap();
        server.push(first);
        server.push(FakeResponse::json(chunks::text_completion("plain")));
        let (result, _) = call(
            &client_choosing(&server, ToolChoice::Omit),
            &simple_request(),
        )
        .await;
        let response = result.unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(response.message.content.as_deref(), Some("plain"), "{name}");
        assert_eq!(
            response.attempts[0].error.as_ref().unwrap().code,
            "LLM_EMPTY_STREAM",
            "{name}"
        );
        assert_eq!(server.requests()[1].body["stream"], false, "{name}");
    }
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("half an answer").cut_after(2, StreamEnd::Abort));
    server.push(FakeResponse::text("whole answer"));
    let (result, _) = call(
        &client_choosing(&server, ToolChoice::Omit),
        &simple_request(),
    )
    .await;
    let response = result.unwrap();
    assert_eq!(
        response.attempts[0].error.as_ref().unwrap().code,
        "LLM_STREAM_DROPPED"
    );
    assert_eq!(server.requests()[1].body["stream"], true);
}

/// Refusals that name streaming with tools fall back as well: llama-cpp-python's
/// "Automatic streaming tool choice is not supported" and older `llama-server`s' "Cannot use
/// tools with stream" (both HTTP 500, otherwise retried as server errors).
#[tokio::test]
async fn refusals_of_streamed_tools_fall_back_to_a_plain_request() {
    for (streamed, choice, said) in [
        (
            StreamedTools::RefuseWhenAuto,
            ToolChoice::Auto,
            "Automatic streaming tool choice is not supported",
        ),
        (
            StreamedTools::RefuseAlways,
            ToolChoice::Omit,
            "Cannot use tools with stream",
        ),
    ] {
        let server = FakeOpenAi::start().unwrap();
        server.mimic(Mimic {
            streamed_tools: Some(streamed),
            ..Mimic::default()
        });
        server.push(FakeResponse::json(chunks::text_completion("plain")));
        let (result, _) = call(&client_choosing(&server, choice), &simple_request()).await;
        let response = result.unwrap_or_else(|error| panic!("{said}: {error}"));
        assert_eq!(
            summary(&response.attempts),
            vec![
                attempt(1, 500, "LLM_SERVER", Some(0)),
                attempt(2, 200, "", None)
            ],
            "{said}"
        );
        let message = &response.attempts[0].error.as_ref().unwrap().message;
        assert!(message.contains(said), "{message}");
        assert_eq!(server.request_count(), 2, "{said}");
    }
}

/// llama-cpp-python ignores `stream_options`: its streams carry no usage, and none is made up
/// (the runtime and the CLI then say "usage not reported by the server").
#[tokio::test]
async fn streams_without_usage_report_none() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_cpp_python());
    server.push(FakeResponse::text("no usage here"));
    let (result, events) = call(
        &client_choosing(&server, ToolChoice::Omit),
        &ChatRequest::new(vec![ChatMessage::user("hi")], Vec::new()),
    )
    .await;
    let response = result.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("no usage here"));
    assert_eq!(response.usage, None);
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(events.text(), "no usage here");
    // Asked for, as always: the server is the one ignoring it.
    assert_eq!(
        server.requests()[0].body["stream_options"],
        json!({"include_usage": true})
    );
}

/// sse-starlette's `: ping - …` comments before every event change nothing, for text and for
/// tool calls whose arguments are split over several chunks.
#[tokio::test]
async fn ping_comments_between_events_are_skipped() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic {
        ping_comments: true,
        ..Mimic::default()
    });
    server.push(FakeResponse::text("pinged but whole"));
    server.push(FakeResponse::tool_calls(
        &[("call_p", "read", json!({"path": "src/lib.rs", "limit": 40}))],
        5,
    ));
    let client = client_choosing(&server, ToolChoice::Omit);
    let (text, _) = call(&client, &simple_request()).await;
    let text = text.unwrap();
    assert_eq!(text.message.content.as_deref(), Some("pinged but whole"));
    assert_eq!(text.usage.unwrap().prompt_tokens, 10);
    let (tools, _) = call(&client, &simple_request()).await;
    assert_eq!(
        tools.unwrap().message.tool_calls,
        vec![ToolCall::new(
            "call_p",
            "read",
            json!({"path": "src/lib.rs", "limit": 40})
        )]
    );
}

/// Explicit `null`s in every delta field, served re-split into 3-byte pieces, parse as absent.
#[tokio::test]
async fn explicit_nulls_in_deltas_read_as_absent() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse_raw(include_str!("../fixtures/explicit_nulls.sse")).rechunk(3));
    let (result, events) = call(
        &client_choosing(&server, ToolChoice::Omit),
        &simple_request(),
    )
    .await;
    let response = result.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("Reading it."));
    assert_eq!(
        response.message.tool_calls,
        vec![
            ToolCall::new("call_n1", "read", json!({"path": "a.txt"})),
            ToolCall::new("call_n2", "list_tasks", json!({})),
        ]
    );
    assert_eq!(response.usage, None);
    assert_eq!(events.text(), "Reading it.");
}

/// `finish_reason: length` without usage (and without `[DONE]`): the cut text is the answer, a
/// call cut mid-arguments is a truncated call, and no usage is made up.
#[tokio::test]
async fn length_without_usage_returns_what_arrived() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse_without_done([
        chunks::delta(json!({"role": "assistant", "content": ""})),
        chunks::delta(json!({"content": "cut he"})),
        chunks::finish("length"),
    ]));
    server.push(FakeResponse::sse_without_done([
        chunks::delta(
            json!({"tool_calls": [{"index": 0, "id": "call_c", "type": "function",
            "function": {"name": "write", "arguments": "{\"path\":\"a\",\"content\":\"lo"}}]}),
        ),
        chunks::finish("length"),
    ]));
    let client = client_choosing(&server, ToolChoice::Omit);
    let (text, _) = call(&client, &simple_request()).await;
    let text = text.unwrap();
    assert_eq!(text.message.content.as_deref(), Some("cut he"));
    assert_eq!(text.finish_reason, Some(FinishReason::Length));
    assert_eq!(text.usage, None);
    let (tools, _) = call(&client, &simple_request()).await;
    let tools = tools.unwrap();
    assert!(tools.message.tool_calls.is_empty());
    assert_eq!(tools.truncated_calls.len(), 1);
    assert_eq!(tools.truncated_calls[0].name, "write");
    assert_eq!(tools.usage, None);
    assert_eq!(server.request_count(), 2, "nothing was retried");
}

/// HTTP 500 with a body that is not JSON is a server error, retried by the policy, with a
/// message that says what came back: the text, an HTML page's title, or `(empty body)`.
#[tokio::test]
async fn http_500_with_a_non_json_body_is_retried_with_a_clear_message() {
    let four_attempts = || ClientOptions {
        retry: RetryPolicy {
            max_attempts: 4,
            ..fast_options().retry
        },
        ..fast_options()
    };
    let bodies = [
        FakeResponse::error(500, "Internal Server Error"),
        FakeResponse::body(
            502,
            "text/html",
            "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>",
        ),
        FakeResponse::body(
            500,
            "text/html",
            "<html><body><p>Upstream <b>died</b></p></body></html>",
        ),
    ];
    let server = FakeOpenAi::start().unwrap();
    server.push_all(bodies.clone());
    server.push(FakeResponse::text("recovered"));
    let (result, _) = call(
        &client_choosing_with(&server, ToolChoice::Omit, four_attempts()),
        &simple_request(),
    )
    .await;
    let response = result.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("recovered"));
    let messages: Vec<&str> = response.attempts[..3]
        .iter()
        .map(|attempt| attempt.error.as_ref().unwrap().message.as_str())
        .collect();
    assert_eq!(
        messages,
        [
            "the model server failed (HTTP 500): Internal Server Error",
            "the model server failed (HTTP 502): an HTML page titled \"502 Bad Gateway\"",
            "the model server failed (HTTP 500): an HTML page: Upstream died",
        ]
    );

    // Once the budget is spent, the last error is the result.
    let server = FakeOpenAi::start().unwrap();
    server.push_all(bodies);
    server.push(FakeResponse::body(500, "text/plain", ""));
    let (result, _) = call(
        &client_choosing_with(&server, ToolChoice::Omit, four_attempts()),
        &simple_request(),
    )
    .await;
    let error = result.unwrap_err();
    assert_eq!(server.request_count(), 4, "every attempt of the budget");
    assert!(
        matches!(error, LlmError::Server { status: 500, .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "the model server failed (HTTP 500): (empty body)"
    );
}

/// `llama-server` without `--jinja` refuses tools with HTTP 500: not retried (asking again will
/// not help), and the message says to restart it with `--jinja`.
#[tokio::test]
async fn llama_server_without_jinja_is_a_clear_unretried_error() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic {
        require_jinja: true,
        ..Mimic::llama_server()
    });
    let (result, _) = call(
        &client_choosing(&server, ToolChoice::Omit),
        &simple_request(),
    )
    .await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), "LLM_BAD_REQUEST");
    let message = error.to_string();
    assert!(
        message.contains("restart llama-server with --jinja"),
        "{message}"
    );
    assert!(
        message.contains("tools param requires --jinja flag"),
        "{message}"
    );
    assert_eq!(server.request_count(), 1);
}

/// `llama-server --jinja`: `timings` and `system_fingerprint` on the last chunk (and on a plain
/// answer) are ignored; its usage is read; `null` content is accepted there.
#[tokio::test]
async fn llama_server_answers_parse_with_their_timings() {
    let server = FakeOpenAi::start().unwrap();
    server.mimic(Mimic::llama_server());
    server.push(FakeResponse::tool_calls(
        &[("call_ls", "read", json!({"path": "x"}))],
        3,
    ));
    server.push(FakeResponse::json(chunks::text_completion(
        "plain with timings",
    )));
    let client = client_choosing(&server, ToolChoice::Auto);
    let (streamed, _) = call(&client, &history_after_a_call()).await;
    let streamed = streamed.unwrap();
    assert_eq!(streamed.message.tool_calls[0].id, "call_ls");
    assert_eq!(streamed.usage.unwrap().completion_tokens, 7);
    let plain = client_choosing_with(
        &server,
        ToolChoice::Auto,
        ClientOptions {
            stream: false,
            ..fast_options()
        },
    );
    let (json_answer, _) = call(&plain, &simple_request()).await;
    assert_eq!(
        json_answer.unwrap().message.content.as_deref(),
        Some("plain with timings")
    );
}
