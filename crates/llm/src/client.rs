//! The HTTP client of OpenAI-compatible chat-completions servers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use troupe_protocol::ErrorCode;

use crate::classify::{AuthHint, classify_http_error, retry_after_ms};
use crate::config::{ClientOptions, HttpProviderConfig, ProviderKind, ReasoningReplay};
use crate::error::LlmError;
use crate::provider::{BoxFuture, ModelProvider, StreamObserver};
use crate::stream::{ChatStreamParser, StreamOutcome, parse_completion_body};
use crate::types::{Attempt, AttemptError, ChatMessage, ChatRequest, ModelResponse, StreamEvent};

/// A client of one OpenAI-compatible chat-completions endpoint
/// (`POST {base_url}/chat/completions`), implementing [`ModelProvider`].
///
/// Cheap to share behind an `Arc`; calls may run concurrently.
#[derive(Debug)]
pub struct OpenAiClient {
    http: reqwest::Client,
    config: HttpProviderConfig,
    options: ClientOptions,
    endpoint: reqwest::Url,
    reasoning_replay: ReasoningReplay,
    jitter_state: AtomicU64,
}

/// How one attempt failed: the error and the HTTP status, if a response arrived.
struct AttemptFailure {
    status: Option<u16>,
    error: LlmError,
}

impl AttemptFailure {
    fn new(status: Option<u16>, error: LlmError) -> Self {
        Self { status, error }
    }
}

impl OpenAiClient {
    /// A client for `config`. Fails with [`LlmError::Config`] when the base URL is not a valid
    /// http(s) URL or the HTTP client cannot be built. Loopback base URLs bypass any system
    /// proxy.
    pub fn new(config: HttpProviderConfig, options: ClientOptions) -> Result<Self, LlmError> {
        let endpoint_text = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let endpoint = reqwest::Url::parse(&endpoint_text).map_err(|error| {
            LlmError::config(format!(
                "--base-url `{}` is not a URL: {error}",
                config.base_url
            ))
        })?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(LlmError::config(format!(
                "--base-url `{}` must be an http:// or https:// URL",
                config.base_url
            )));
        }
        let host = endpoint
            .host_str()
            .unwrap_or_default()
            .trim_matches(['[', ']']);
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|address| address.is_loopback());
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(options.connect_timeout_ms));
        if loopback {
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|error| LlmError::config(format!("cannot build the HTTP client: {error}")))?;
        let reasoning_replay = options.reasoning_replay.unwrap_or(match config.provider {
            ProviderKind::Deepseek => ReasoningReplay::CurrentTurn,
            _ => ReasoningReplay::Never,
        });
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9_7f4a_7c15, |elapsed| elapsed.as_nanos() as u64);
        Ok(Self {
            http,
            config,
            options,
            endpoint,
            reasoning_replay,
            jitter_state: AtomicU64::new(seed | 1),
        })
    }

    /// The configuration this client was built with.
    pub fn config(&self) -> &HttpProviderConfig {
        &self.config
    }

    /// The options this client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    /// The JSON body this client first sends for `request`: `model`, `messages` (reasoning
    /// filtered by [`ReasoningReplay`]; an assistant message without text has `"content": ""`),
    /// `tools` and `tool_choice` ([`HttpProviderConfig::tool_choice`]) when tools are offered,
    /// `stream` (+ `stream_options`), and the optional sampling fields. (A fallback attempt
    /// without streaming sends the same body with `"stream": false` and no `stream_options`.)
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        self.request_body_for(request, self.options.stream)
    }

    /// [`OpenAiClient::request_body`] with `stream` as given.
    fn request_body_for(&self, request: &ChatRequest, stream: bool) -> Value {
        let last_user = request
            .messages
            .iter()
            .rposition(|message| matches!(message, ChatMessage::User { .. }));
        let messages: Vec<Value> = request
            .messages
            .iter()
            .enumerate()
            .map(|(position, message)| {
                let mut value = serde_json::to_value(message).unwrap_or(Value::Null);
                if matches!(message, ChatMessage::Assistant(_)) {
                    let keep_reasoning = match self.reasoning_replay {
                        ReasoningReplay::Never => false,
                        ReasoningReplay::Always => true,
                        ReasoningReplay::CurrentTurn => {
                            last_user.is_none_or(|user| position > user)
                        }
                    };
                    if let Some(object) = value.as_object_mut() {
                        if !keep_reasoning {
                            object.remove("reasoning_content");
                        }
                        // Servers expect the key present. A message that only called tools is
                        // sent `"content": ""`, not `null`: llama-cpp-python types the field as
                        // a string and answers `null` with HTTP 500 (a pydantic validation
                        // error), while every server accepts the empty string.
                        if !object.get("content").is_some_and(Value::is_string) {
                            object.insert("content".to_owned(), Value::String(String::new()));
                        }
                    }
                }
                value
            })
            .collect();
        let mut body = Map::new();
        body.insert("model".to_owned(), Value::String(self.config.model.clone()));
        body.insert("messages".to_owned(), Value::Array(messages));
        if !request.tools.is_empty() {
            body.insert(
                "tools".to_owned(),
                serde_json::to_value(&request.tools).unwrap_or(Value::Null),
            );
            // Only beside tools: servers refuse a `tool_choice` without `tools`.
            if let Some(choice) = self.config.tool_choice.wire_value() {
                body.insert("tool_choice".to_owned(), Value::String(choice.to_owned()));
            }
        }
        body.insert("stream".to_owned(), Value::Bool(stream));
        if stream && self.options.include_usage {
            body.insert(
                "stream_options".to_owned(),
                json!({ "include_usage": true }),
            );
        }
        if let Some(temperature) = request.temperature {
            body.insert("temperature".to_owned(), json!(temperature));
        }
        if let Some(max_tokens) = request.max_tokens {
            body.insert("max_tokens".to_owned(), json!(max_tokens));
        }
        Value::Object(body)
    }

    async fn run(
        &self,
        request: &ChatRequest,
        observer: &mut dyn StreamObserver,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, LlmError> {
        let mut stream = self.options.stream;
        let mut body = bytes::Bytes::from(self.request_body_for(request, stream).to_string());
        let max_attempts = self.options.retry.max_attempts.max(1);
        let mut attempts = Vec::new();
        let mut number = 1;
        // Attempts repeated because of a retryable error: the budget of `max_attempts`. The
        // one fallback from a stream to a plain request is not a retry and is not counted.
        let mut retried = 0;
        loop {
            if cancel.is_cancelled() {
                return Err(LlmError::Cancelled);
            }
            observer.on_event(StreamEvent::AttemptStarted { attempt: number });
            match self.attempt(body.clone(), stream, observer, cancel).await {
                Ok((status, outcome)) => {
                    attempts.push(Attempt {
                        number,
                        status: Some(status),
                        error: None,
                        retry_delay_ms: None,
                    });
                    return Ok(ModelResponse {
                        message: outcome.message,
                        usage: outcome.usage,
                        finish_reason: outcome.finish_reason,
                        model: outcome.model,
                        attempts,
                        truncated_calls: outcome.truncated_calls,
                    });
                }
                Err(AttemptFailure { status, error }) => {
                    // Server text may quote the key it was sent: never let it out.
                    let error = match &self.config.api_key {
                        Some(key) => error.redacted(key.expose_secret()),
                        None => error,
                    };
                    if error == LlmError::Cancelled {
                        return Err(error);
                    }
                    // A server that cannot stream this request (an empty event stream, or a
                    // refusal naming streaming) is asked once more at once, without streaming.
                    let fall_back = stream && needs_plain_request(&error);
                    let retry = !fall_back && error.is_retryable() && retried + 1 < max_attempts;
                    let delay = if fall_back {
                        Some(Duration::ZERO)
                    } else {
                        retry.then(|| self.retry_delay(retried + 1, &error))
                    };
                    let attempt = Attempt {
                        number,
                        status,
                        error: Some(AttemptError {
                            code: error.code().to_owned(),
                            message: error.to_string(),
                        }),
                        retry_delay_ms: delay.map(|delay| delay.as_millis() as u64),
                    };
                    observer.on_event(StreamEvent::AttemptFailed {
                        attempt: attempt.clone(),
                    });
                    attempts.push(attempt);
                    let Some(delay) = delay else {
                        return Err(error);
                    };
                    if fall_back {
                        stream = false;
                        body =
                            bytes::Bytes::from(self.request_body_for(request, false).to_string());
                    } else {
                        retried += 1;
                        tokio::select! {
                            biased;
                            () = cancel.cancelled() => return Err(LlmError::Cancelled),
                            () = tokio::time::sleep(delay) => {}
                        }
                    }
                    number += 1;
                }
            }
        }
    }

    /// The wait before retrying after failed attempt `number`: the server's `Retry-After`
    /// (capped), else the exponential backoff with optional jitter.
    fn retry_delay(&self, number: u32, error: &LlmError) -> Duration {
        let policy = &self.options.retry;
        if let Some(retry_after) = error.retry_after() {
            return retry_after.min(Duration::from_millis(policy.max_retry_after_ms));
        }
        let backoff = policy.backoff_ms(number);
        if !policy.jitter || backoff < 2 {
            return Duration::from_millis(backoff);
        }
        let half = backoff / 2;
        Duration::from_millis(half + self.next_random() % (backoff - half + 1))
    }

    /// A xorshift64* step; randomness quality does not matter for jitter.
    fn next_random(&self) -> u64 {
        let mut state = self.jitter_state.load(Ordering::Relaxed);
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        self.jitter_state.store(state, Ordering::Relaxed);
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// One HTTP exchange: `stream` says whether `body` asks for an event stream.
    async fn attempt(
        &self,
        body: bytes::Bytes,
        stream: bool,
        observer: &mut dyn StreamObserver,
        cancel: &CancellationToken,
    ) -> Result<(u16, StreamOutcome), AttemptFailure> {
        let idle = Duration::from_millis(self.options.idle_timeout_ms);
        let idle_error = || LlmError::IdleTimeout {
            idle_ms: self.options.idle_timeout_ms,
        };
        let mut builder = self
            .http
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("troupe/", env!("CARGO_PKG_VERSION")))
            .header(
                ACCEPT,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .body(body);
        if let Some(key) = &self.config.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose_secret()))
                .map_err(|_| {
                    AttemptFailure::new(
                        None,
                        LlmError::config(format!(
                            "the API key in {} contains characters not allowed in an HTTP header",
                            self.config
                                .api_key_env
                                .as_deref()
                                .unwrap_or("the configuration")
                        )),
                    )
                })?;
            value.set_sensitive(true);
            builder = builder.header(AUTHORIZATION, value);
        }

        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(AttemptFailure::new(None, LlmError::Cancelled)),
            result = tokio::time::timeout(idle, builder.send()) => match result {
                Err(_) => return Err(AttemptFailure::new(None, idle_error())),
                Ok(Err(error)) => return Err(AttemptFailure::new(None, LlmError::Network {
                    message: describe_reqwest_error("cannot reach the model server", &error),
                })),
                Ok(Ok(response)) => response,
            },
        };
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase());
        let is_json = content_type
            .as_deref()
            .is_some_and(|ct| ct.contains("json"));

        if !response.status().is_success() {
            let retry_after = retry_after_ms(response.headers());
            let body = self
                .read_body(response, self.options.max_error_body_bytes, cancel, status)
                .await
                .unwrap_or_else(|_| Vec::new());
            let hint = AuthHint {
                key_env: self.config.api_key_env.clone(),
                has_key: self.config.api_key.is_some(),
            };
            let error =
                classify_http_error(status, retry_after, &body, self.endpoint.as_str(), &hint);
            return Err(AttemptFailure::new(Some(status), error));
        }

        // A success that is neither an event stream nor JSON (an HTML page: a wrong port, a
        // proxy's login page) is not a chat completion, and asking again will not make it one:
        // `LLM_PROTOCOL` at once, naming what came back and from where. (No content type at all
        // is read as the mode asks for.)
        if let Some(ct) = content_type.as_deref()
            && !is_json
            && !ct.starts_with("text/event-stream")
        {
            let ct = ct.split(';').next().unwrap_or(ct).trim();
            return Err(AttemptFailure::new(
                Some(status),
                LlmError::Protocol {
                    message: format!(
                        "the model server at {} answered HTTP {status} with content type {ct}, \
                         not an event stream or JSON: is --base-url the address of an \
                         OpenAI-compatible API (usually ending in /v1)?",
                        self.endpoint
                    ),
                },
            ));
        }

        if is_json || !stream {
            let body = self.read_body(response, usize::MAX, cancel, status).await?;
            return parse_completion_body(&body, observer)
                .map(|outcome| (status, outcome))
                .map_err(|error| AttemptFailure::new(Some(status), error));
        }

        let mut parser = ChatStreamParser::new();
        let mut chunks = response.bytes_stream();
        loop {
            let next = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(AttemptFailure::new(Some(status), LlmError::Cancelled)),
                next = tokio::time::timeout(idle, chunks.next()) => next,
            };
            match next {
                Ok(Some(Ok(bytes))) => {
                    parser
                        .feed(&bytes, observer)
                        .map_err(|error| AttemptFailure::new(Some(status), error))?;
                    if parser.is_done() {
                        break;
                    }
                }
                Ok(None) => break,
                // After the finish reason only usage and `[DONE]` are missing: a connection that
                // breaks or stalls then still delivered the whole answer.
                Ok(Some(Err(_))) | Err(_) if parser.saw_finish_reason() => break,
                // Broken before its first event: the server could not stream this request
                // (uvicorn drops the connection when the app fails after the headers).
                Ok(Some(Err(error))) if parser.frames() == 0 => {
                    return Err(AttemptFailure::new(
                        Some(status),
                        LlmError::EmptyStream {
                            message: describe_reqwest_error(
                                "the model server answered the streamed request with an event stream that broke before its first event",
                                &error,
                            ),
                        },
                    ));
                }
                Ok(Some(Err(error))) => {
                    return Err(AttemptFailure::new(
                        Some(status),
                        LlmError::StreamDropped {
                            message: describe_reqwest_error(
                                "the model stream broke before the answer was complete",
                                &error,
                            ),
                        },
                    ));
                }
                Err(_) => return Err(AttemptFailure::new(Some(status), idle_error())),
            }
        }
        parser
            .finish(observer)
            .map(|outcome| (status, outcome))
            .map_err(|error| AttemptFailure::new(Some(status), error))
    }

    /// Reads a whole body (up to `limit` bytes), with the idle timeout per chunk and the
    /// cancellation token.
    async fn read_body(
        &self,
        response: reqwest::Response,
        limit: usize,
        cancel: &CancellationToken,
        status: u16,
    ) -> Result<Vec<u8>, AttemptFailure> {
        let idle = Duration::from_millis(self.options.idle_timeout_ms);
        let mut stream = response.bytes_stream();
        let mut body = Vec::new();
        loop {
            let next = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(AttemptFailure::new(Some(status), LlmError::Cancelled)),
                next = tokio::time::timeout(idle, stream.next()) => next,
            };
            match next {
                Ok(Some(Ok(bytes))) => {
                    let room = limit.saturating_sub(body.len());
                    body.extend_from_slice(&bytes[..bytes.len().min(room)]);
                    if body.len() >= limit {
                        return Ok(body);
                    }
                }
                Ok(None) => return Ok(body),
                Ok(Some(Err(error))) => {
                    return Err(AttemptFailure::new(
                        Some(status),
                        LlmError::StreamDropped {
                            message: describe_reqwest_error(
                                "the model server's answer broke off",
                                &error,
                            ),
                        },
                    ));
                }
                Err(_) => {
                    return Err(AttemptFailure::new(
                        Some(status),
                        LlmError::IdleTimeout {
                            idle_ms: self.options.idle_timeout_ms,
                        },
                    ));
                }
            }
        }
    }
}

/// Whether a failed *streamed* attempt is repeated once without streaming: the stream ended
/// or broke before its first event ([`LlmError::EmptyStream`]: llama-cpp-python with
/// `tool_choice: "auto"`), or the server refused streaming with tools by name
/// (llama-cpp-python's HTTP 500 "Automatic streaming tool choice is not supported", older
/// `llama-server` builds' HTTP 500 "Cannot use tools with stream").
fn needs_plain_request(error: &LlmError) -> bool {
    match error {
        LlmError::EmptyStream { .. } => true,
        LlmError::Server {
            status, message, ..
        } if *status >= 500 => {
            let message = message.to_ascii_lowercase();
            message.contains("streaming tool choice is not supported")
                || message.contains("cannot use tools with stream")
        }
        _ => false,
    }
}

/// `context: error: cause: cause…` on one line. reqwest errors name the URL, never headers, so
/// no key can leak through them.
fn describe_reqwest_error(context: &str, error: &reqwest::Error) -> String {
    let mut text = format!("{context}: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl ModelProvider for OpenAiClient {
    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        observer: &'a mut dyn StreamObserver,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, LlmError>> {
        Box::pin(self.run(request, observer, cancel))
    }

    fn label(&self) -> String {
        format!("{}:{}", self.config.provider, self.config.model)
    }
}
