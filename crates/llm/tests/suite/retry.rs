//! Retries: 429 with `Retry-After`, 5xx, dropped streams and connect errors; every attempt is
//! recorded and reported.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_llm::{
    Attempt, AttemptError, ClientOptions, EventLog, HttpProviderConfig, LlmError, ModelProvider,
    OpenAiClient, RetryPolicy, StreamEvent,
};
use troupe_protocol::ErrorCode;
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse, StreamEnd};

use super::common::{call, client, client_with, fast_options, simple_request};

fn failed(
    number: u32,
    status: Option<u16>,
    code: &str,
    delay: Option<u64>,
) -> (u32, Option<u16>, String, Option<u64>) {
    (number, status, code.to_owned(), delay)
}

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

fn reported_failures(events: &EventLog) -> Vec<Attempt> {
    events
        .events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::AttemptFailed { attempt } => Some(attempt.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn rate_limit_waits_for_retry_after_seconds() {
    let server = FakeOpenAi::start().unwrap();
    server.push(
        FakeResponse::openai_error(429, "Rate limit reached", "rate_limit_exceeded")
            .with_header("retry-after", "1"),
    );
    server.push(FakeResponse::text("after the wait"));
    let started = Instant::now();
    let (result, events) = call(&client(&server), &simple_request()).await;
    let response = result.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(1_000));
    assert_eq!(response.message.content.as_deref(), Some("after the wait"));
    assert_eq!(
        summary(&response.attempts),
        vec![
            failed(1, Some(429), "LLM_RATE_LIMITED", Some(1_000)),
            failed(2, Some(200), "", None),
        ]
    );
    assert_eq!(reported_failures(&events), response.attempts[..1].to_vec());
    let message = &response.attempts[0].error.as_ref().unwrap().message;
    assert!(message.contains("Rate limit reached"), "{message}");
    assert_eq!(server.request_count(), 2);
    // The failed attempt was reported between the two attempt starts.
    let kinds: Vec<&str> = events
        .events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::AttemptStarted { .. } => Some("start"),
            StreamEvent::AttemptFailed { .. } => Some("failed"),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["start", "failed", "start"]);
}

#[tokio::test]
async fn retry_after_ms_is_honoured_and_retry_after_is_capped() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::error(429, "slow").with_header("retry-after-ms", "30"));
    server.push(FakeResponse::error(503, "busy").with_header("retry-after", "100"));
    server.push(FakeResponse::text("ok"));
    let options = ClientOptions {
        retry: RetryPolicy {
            max_retry_after_ms: 40,
            ..fast_options().retry
        },
        ..fast_options()
    };
    let (result, _) = call(&client_with(&server, options), &simple_request()).await;
    assert_eq!(
        summary(&result.unwrap().attempts),
        vec![
            failed(1, Some(429), "LLM_RATE_LIMITED", Some(30)),
            failed(2, Some(503), "LLM_SERVER", Some(40)),
            failed(3, Some(200), "", None),
        ]
    );
}

#[tokio::test]
async fn server_errors_back_off_exponentially() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::error(500, "internal error"));
    server.push(FakeResponse::openai_error(
        502,
        "bad gateway",
        "server_error",
    ));
    server.push(FakeResponse::text("third time lucky"));
    let (result, events) = call(&client(&server), &simple_request()).await;
    let response = result.unwrap();
    assert_eq!(
        summary(&response.attempts),
        vec![
            failed(1, Some(500), "LLM_SERVER", Some(5)),
            failed(2, Some(502), "LLM_SERVER", Some(10)),
            failed(3, Some(200), "", None),
        ]
    );
    assert_eq!(reported_failures(&events).len(), 2);
    assert_eq!(events.text(), "third time lucky");
}

#[tokio::test]
async fn exhausted_attempts_return_the_last_error() {
    let server = FakeOpenAi::start().unwrap();
    for _ in 0..3 {
        server.push(FakeResponse::error(503, "overloaded"));
    }
    let (result, events) = call(&client(&server), &simple_request()).await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), "LLM_SERVER");
    assert!(error.to_string().contains("overloaded"), "{error}");
    assert_eq!(server.request_count(), 3);
    assert_eq!(
        summary(&reported_failures(&events)),
        vec![
            failed(1, Some(503), "LLM_SERVER", Some(5)),
            failed(2, Some(503), "LLM_SERVER", Some(10)),
            failed(3, Some(503), "LLM_SERVER", None),
        ]
    );
}

#[tokio::test]
async fn aborted_stream_is_retried_and_its_partial_text_discarded() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("partial answer that breaks").cut_after(3, StreamEnd::Abort));
    server.push(FakeResponse::text("complete answer"));
    let (result, events) = call(&client(&server), &simple_request()).await;
    let response = result.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("complete answer"));
    assert_eq!(
        summary(&response.attempts),
        vec![
            failed(1, Some(200), "LLM_STREAM_DROPPED", Some(5)),
            failed(2, Some(200), "", None),
        ]
    );
    // The first attempt's text was observable, then voided by the failure.
    assert!(events.events.contains(&StreamEvent::TextDelta {
        text: "partial ".to_owned()
    }));
    assert_eq!(events.text(), "complete answer");
}

#[tokio::test]
async fn stream_closed_without_done_or_finish_reason_is_retried() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::text("cut short").cut_after(2, StreamEnd::Finish));
    server.push(FakeResponse::text("whole"));
    let (result, _) = call(&client(&server), &simple_request()).await;
    let response = result.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("whole"));
    assert_eq!(
        summary(&response.attempts),
        vec![
            failed(1, Some(200), "LLM_STREAM_DROPPED", Some(5)),
            failed(2, Some(200), "", None),
        ]
    );
}

#[tokio::test]
async fn error_object_inside_a_stream_is_a_retried_server_error() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::sse_raw(
        "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"error\":{\"message\":\"upstream overloaded\",\"code\":\"server_error\"}}\n\n",
    ));
    server.push(FakeResponse::text("fine"));
    let (result, _) = call(&client(&server), &simple_request()).await;
    let response = result.unwrap();
    assert_eq!(
        response.attempts[0]
            .error
            .as_ref()
            .map(|error| error.code.as_str()),
        Some("LLM_SERVER")
    );
    assert_eq!(response.message.content.as_deref(), Some("fine"));
}

#[tokio::test]
async fn connect_errors_are_retried_then_reported_as_network() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = OpenAiClient::new(
        HttpProviderConfig::compatible(format!("http://127.0.0.1:{port}/v1"), "m"),
        fast_options(),
    )
    .unwrap();
    let (result, events) = call(&client, &simple_request()).await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), "LLM_NETWORK");
    assert!(
        error.to_string().contains("cannot reach the model server"),
        "{error}"
    );
    assert_eq!(
        summary(&reported_failures(&events)),
        vec![
            failed(1, None, "LLM_NETWORK", Some(5)),
            failed(2, None, "LLM_NETWORK", Some(10)),
            failed(3, None, "LLM_NETWORK", None),
        ]
    );
}

#[tokio::test]
async fn jitter_keeps_delays_between_half_and_full_backoff() {
    let server = FakeOpenAi::start().unwrap();
    for _ in 0..4 {
        server.push(FakeResponse::error(500, "x"));
    }
    let options = ClientOptions {
        retry: RetryPolicy {
            max_attempts: 4,
            initial_backoff_ms: 8,
            max_backoff_ms: 20,
            jitter: true,
            max_retry_after_ms: 1_000,
        },
        ..fast_options()
    };
    let (_, events) = call(&client_with(&server, options), &simple_request()).await;
    let delays: Vec<u64> = reported_failures(&events)
        .iter()
        .filter_map(|attempt| attempt.retry_delay_ms)
        .collect();
    assert_eq!(delays.len(), 3);
    for (delay, full) in delays.iter().zip([8, 16, 20]) {
        assert!(
            (full / 2..=full).contains(delay),
            "{delay} not in [{}, {full}]",
            full / 2
        );
    }
}

#[tokio::test]
async fn cancellation_during_a_backoff_wait_is_prompt() {
    let server = FakeOpenAi::start().unwrap();
    server.push(FakeResponse::error(503, "busy").with_header("retry-after", "3"));
    let client = client(&server);
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let mut events = EventLog::new();
    let result = client
        .complete(&simple_request(), &mut events, &cancel)
        .await;
    assert_eq!(result.unwrap_err(), LlmError::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        reported_failures(&events)[0].error,
        Some(AttemptError {
            code: "LLM_SERVER".to_owned(),
            message: "the model server failed (HTTP 503): busy".to_owned()
        })
    );
}

#[tokio::test]
async fn truncated_tool_call_is_not_retried() {
    let server = FakeOpenAi::start().unwrap();
    let mut stream = chunks::tool_call_answer(
        &[("c1", "write", json!({"path": "a", "content": "long text"}))],
        3,
    );
    // Drop the last argument fragment and end with `length`, as an output-token limit does.
    let finish = stream.len() - 2;
    stream.remove(finish - 1);
    stream[finish - 1] = chunks::finish("length");
    server.push(FakeResponse::sse(stream));
    server.push(FakeResponse::text("never requested"));
    let (result, _) = call(&client(&server), &simple_request()).await;
    // Returned as a truncated call (the caller decides), not retried.
    let response = result.unwrap();
    assert!(response.message.tool_calls.is_empty());
    assert_eq!(response.truncated_calls.len(), 1);
    assert_eq!(response.truncated_calls[0].id, "c1");
    assert_eq!(server.request_count(), 1);
}
