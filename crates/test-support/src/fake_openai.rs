//! A loopback fake of an OpenAI-compatible chat-completions server.
//!
//! [`FakeOpenAi::start`] binds `127.0.0.1:0` and serves `POST /v1/chat/completions` and
//! `POST /chat/completions` from its own thread and tokio runtime, so it works from synchronous
//! tests, from async tests of any runtime flavour, and for a child process under test (e.g. the
//! `troupe` binary run by `assert_cmd`) that is pointed at [`FakeOpenAi::base_url`].
//!
//! The test scripts a queue of [`FakeResponse`]s, one popped per request: streamed SSE chunks
//! (optionally re-split into arbitrary byte pieces with delays), plain JSON, any body with any
//! content type ([`FakeResponse::body`], e.g. an HTML page), HTTP errors with
//! headers, a stream that ends without `[DONE]`, a connection aborted mid-stream, or a stream
//! that stalls. Every request is recorded ([`RecordedRequest`]: path, headers, parsed JSON body)
//! so tests can assert what the model was told. A request that finds the queue empty gets HTTP
//! 400 with a message saying so (the client does not retry 400).
//!
//! ```no_run
//! use troupe_test_support::fake_openai::{FakeOpenAi, FakeResponse};
//! let server = FakeOpenAi::start()?;
//! server.push(FakeResponse::text("Hello!"));
//! // … point the client at server.base_url(), call it …
//! let request = &server.requests()[0];
//! assert_eq!(request.body["stream"], true);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

/// How a scripted response body ends after its last piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The body ends cleanly (for a stream cut short, the client sees EOF without `[DONE]`).
    Finish,
    /// The connection is aborted: the client sees a broken body (a dropped stream).
    Abort,
    /// The server stops sending and keeps the connection open (for idle timeouts).
    Stall,
}

/// One piece of a response body, sent after waiting `delay_before`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Wait before sending this piece.
    pub delay_before: Duration,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// One scripted answer of the fake server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeResponse {
    /// The HTTP status.
    pub status: u16,
    /// Response headers (`content-type` included).
    pub headers: Vec<(String, String)>,
    /// The body pieces, sent in order.
    pub pieces: Vec<Piece>,
    /// What happens after the last piece.
    pub end: StreamEnd,
}

impl FakeResponse {
    fn new(status: u16, content_type: &str, pieces: Vec<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            pieces: pieces
                .into_iter()
                .map(|bytes| Piece {
                    delay_before: Duration::ZERO,
                    bytes,
                })
                .collect(),
            end: StreamEnd::Finish,
        }
    }

    /// A 200 `text/event-stream` answer: one `data: <chunk>\n\n` piece per chunk, then
    /// `data: [DONE]\n\n`.
    pub fn sse(chunks: impl IntoIterator<Item = Value>) -> Self {
        let mut pieces: Vec<Vec<u8>> = chunks
            .into_iter()
            .map(|chunk| format!("data: {chunk}\n\n").into_bytes())
            .collect();
        pieces.push(b"data: [DONE]\n\n".to_vec());
        Self::new(200, "text/event-stream", pieces)
    }

    /// Like [`FakeResponse::sse`] without the final `data: [DONE]`.
    pub fn sse_without_done(chunks: impl IntoIterator<Item = Value>) -> Self {
        let mut response = Self::sse(chunks);
        response.pieces.pop();
        response
    }

    /// A 200 `text/event-stream` answer with this exact body text, in one piece.
    pub fn sse_raw(text: impl Into<String>) -> Self {
        Self::new(200, "text/event-stream", vec![text.into().into_bytes()])
    }

    /// A streamed text answer (see [`chunks::text_answer`]).
    pub fn text(text: &str) -> Self {
        Self::sse(chunks::text_answer(text))
    }

    /// A streamed tool-call answer, each call's arguments split over `pieces` chunks (see
    /// [`chunks::tool_call_answer`]).
    pub fn tool_calls(calls: &[(&str, &str, Value)], pieces: usize) -> Self {
        Self::sse(chunks::tool_call_answer(calls, pieces))
    }

    /// A 200 `application/json` answer with this body (a non-streaming completion).
    pub fn json(body: Value) -> Self {
        Self::new(200, "application/json", vec![body.to_string().into_bytes()])
    }

    /// Any answer: `status` with this `content_type` and body, in one piece (e.g. the HTML
    /// page a wrong port or a proxy serves: `FakeResponse::body(200, "text/html", "<html>…")`).
    pub fn body(status: u16, content_type: &str, body: impl Into<String>) -> Self {
        Self::new(status, content_type, vec![body.into().into_bytes()])
    }

    /// An error answer: `status` with this body (`application/json` when it parses as JSON,
    /// `text/plain` otherwise).
    pub fn error(status: u16, body: impl Into<String>) -> Self {
        let body = body.into();
        let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
            "application/json"
        } else {
            "text/plain"
        };
        Self::new(status, content_type, vec![body.into_bytes()])
    }

    /// An error answer in OpenAI's shape: `{"error":{"message","type","code"}}`.
    pub fn openai_error(status: u16, message: &str, code: &str) -> Self {
        Self::error(
            status,
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": code}})
                .to_string(),
        )
    }

    /// Adds (or replaces) a response header, e.g. `("retry-after", "1")`.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        let name = name.to_ascii_lowercase();
        self.headers.retain(|(existing, _)| *existing != name);
        self.headers.push((name, value.to_owned()));
        self
    }

    /// The whole body, concatenated.
    pub fn body_bytes(&self) -> Vec<u8> {
        self.pieces
            .iter()
            .flat_map(|piece| piece.bytes.iter().copied())
            .collect()
    }

    /// Re-splits the body into pieces of `size` bytes (the last may be shorter), ignoring the
    /// previous split and delays. Pieces may split UTF-8 characters and CRLF pairs.
    pub fn rechunk(mut self, size: usize) -> Self {
        let body = self.body_bytes();
        self.pieces = body
            .chunks(size.max(1))
            .map(|bytes| Piece {
                delay_before: Duration::ZERO,
                bytes: bytes.to_vec(),
            })
            .collect();
        self
    }

    /// Re-splits the body at these byte offsets (sorted, out-of-range ones ignored).
    pub fn split_at(mut self, offsets: &[usize]) -> Self {
        let body = self.body_bytes();
        let mut cuts: Vec<usize> = offsets
            .iter()
            .copied()
            .filter(|offset| *offset > 0 && *offset < body.len())
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().chain([body.len()]) {
            pieces.push(Piece {
                delay_before: Duration::ZERO,
                bytes: body[start..cut].to_vec(),
            });
            start = cut;
        }
        self.pieces = pieces;
        self
    }

    /// Waits `ms` before every piece but the first.
    pub fn with_delay_ms(mut self, ms: u64) -> Self {
        for piece in self.pieces.iter_mut().skip(1) {
            piece.delay_before = Duration::from_millis(ms);
        }
        self
    }

    /// Keeps only the first `pieces` pieces, then ends as `end`.
    pub fn cut_after(mut self, pieces: usize, end: StreamEnd) -> Self {
        self.pieces.truncate(pieces);
        self.end = end;
        self
    }

    /// Sends every piece, then ends as `end` instead of finishing.
    pub fn ending(mut self, end: StreamEnd) -> Self {
        self.end = end;
        self
    }
}

/// Builders of streamed chunks and completion bodies, in the shape OpenAI sends.
pub mod chunks {
    use serde_json::{Value, json};

    /// The model name the builders report.
    pub const MODEL: &str = "fake-model";

    /// A `chat.completion.chunk` with one choice carrying `delta` and no finish reason.
    pub fn delta(delta: Value) -> Value {
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": null}]
        })
    }

    /// A chunk with an empty delta and this finish reason.
    pub fn finish(reason: &str) -> Value {
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]
        })
    }

    /// The usage-only final chunk of `stream_options.include_usage` (empty `choices`).
    pub fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens
            }
        })
    }

    /// Splits `text` into about `pieces` parts on character boundaries (at least one part).
    pub fn split_text(text: &str, pieces: usize) -> Vec<String> {
        let characters: Vec<char> = text.chars().collect();
        if characters.is_empty() {
            return vec![String::new()];
        }
        let size = characters.len().div_ceil(pieces.max(1));
        characters
            .chunks(size.max(1))
            .map(|part| part.iter().collect())
            .collect()
    }

    /// A streamed text answer: a role chunk, the text in word-sized pieces, `finish_reason:
    /// stop`, and a usage chunk (10 prompt tokens, one completion token per piece).
    pub fn text_answer(text: &str) -> Vec<Value> {
        let words: Vec<String> = text
            .split_inclusive(' ')
            .map(str::to_owned)
            .collect::<Vec<_>>();
        let mut chunks = vec![delta(json!({"role": "assistant", "content": ""}))];
        chunks.extend(words.iter().map(|word| delta(json!({"content": word}))));
        chunks.push(finish("stop"));
        chunks.push(usage(10, words.len() as u64));
        chunks
    }

    /// A streamed DeepSeek-reasoner answer: `reasoning_content` pieces (with `content: null`),
    /// then the text, `stop` and usage.
    pub fn reasoning_answer(reasoning: &str, text: &str) -> Vec<Value> {
        let mut chunks = vec![delta(
            json!({"role": "assistant", "content": null, "reasoning_content": ""}),
        )];
        chunks.extend(
            split_text(reasoning, 3)
                .into_iter()
                .map(|part| delta(json!({"content": null, "reasoning_content": part}))),
        );
        chunks.extend(
            split_text(text, 2)
                .into_iter()
                .map(|part| delta(json!({"content": part, "reasoning_content": null}))),
        );
        chunks.push(finish("stop"));
        chunks.push(usage(10, 5));
        chunks
    }

    /// A streamed tool-call answer: for each `(id, name, arguments)`, a first chunk with the
    /// call's `index`, `id`, `type` and `name`, then its compact JSON argument string split into
    /// `pieces` chunks; then `finish_reason: tool_calls` and usage.
    pub fn tool_call_answer(calls: &[(&str, &str, Value)], pieces: usize) -> Vec<Value> {
        let mut chunks = vec![delta(json!({"role": "assistant", "content": null}))];
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            chunks.push(delta(json!({"tool_calls": [{
                "index": index,
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": ""}
            }]})));
            for part in split_text(&arguments.to_string(), pieces) {
                chunks.push(delta(json!({"tool_calls": [{
                    "index": index,
                    "function": {"arguments": part}
                }]})));
            }
        }
        chunks.push(finish("tool_calls"));
        chunks.push(usage(10, 7));
        chunks
    }

    /// A non-streaming `chat.completion` body with this assistant `message`.
    pub fn completion(message: Value, finish_reason: &str) -> Value {
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        })
    }

    /// A non-streaming completion answering `text`.
    pub fn text_completion(text: &str) -> Value {
        completion(json!({"role": "assistant", "content": text}), "stop")
    }
}

/// One request the fake server received.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    /// The HTTP method.
    pub method: String,
    /// The request path (e.g. `/v1/chat/completions`).
    pub path: String,
    /// The headers, names lowercased (repeated headers joined by `, `).
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON (`Value::Null` when it is not JSON; see `raw_body`).
    pub body: Value,
    /// The body as text.
    pub raw_body: String,
}

impl RecordedRequest {
    /// A header by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The `messages` array of the body (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The `tools` array of the body (empty when absent).
    pub fn tools(&self) -> &[Value] {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

#[derive(Debug, Default)]
struct ServerState {
    queue: VecDeque<FakeResponse>,
    requests: Vec<RecordedRequest>,
}

type SharedState = Arc<Mutex<ServerState>>;

fn lock(state: &SharedState) -> MutexGuard<'_, ServerState> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running fake server. Dropping it stops the server (open connections are closed).
#[derive(Debug)]
pub struct FakeOpenAi {
    address: SocketAddr,
    state: SharedState,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeOpenAi {
    /// Binds `127.0.0.1:0` and starts serving on a background thread.
    pub fn start() -> std::io::Result<Self> {
        Self::start_with(Vec::new())
    }

    /// Starts a server whose queue already holds `responses`.
    pub fn start_with(responses: Vec<FakeResponse>) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let state: SharedState = Arc::new(Mutex::new(ServerState {
            queue: responses.into(),
            requests: Vec::new(),
        }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (shutdown, shutdown_received) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .route("/chat/completions", post(handle))
            .fallback(handle)
            .with_state(Arc::clone(&state));
        let thread = std::thread::Builder::new()
            .name(format!("fake-openai-{}", address.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = shutdown_received => {}
                    }
                });
                // Dropping the runtime here cancels every open connection, stalled ones too.
            })?;
        Ok(Self {
            address,
            state,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The bound address (`127.0.0.1:<port>`).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The base URL to give a client: `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// Queues a response (served after those queued earlier).
    pub fn push(&self, response: FakeResponse) -> &Self {
        lock(&self.state).queue.push_back(response);
        self
    }

    /// Queues several responses.
    pub fn push_all(&self, responses: impl IntoIterator<Item = FakeResponse>) -> &Self {
        lock(&self.state).queue.extend(responses);
        self
    }

    /// How many queued responses are still unserved.
    pub fn pending(&self) -> usize {
        lock(&self.state).queue.len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// How many requests were received so far.
    pub fn request_count(&self) -> usize {
        lock(&self.state).requests.len()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn handle(
    State(state): State<SharedState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut recorded_headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        recorded_headers
            .entry(name.as_str().to_owned())
            .and_modify(|existing| {
                existing.push_str(", ");
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let known_path = matches!(uri.path(), "/v1/chat/completions" | "/chat/completions");
    let (number, response) = {
        let mut state = lock(&state);
        state.requests.push(RecordedRequest {
            method: method.to_string(),
            path: uri.path().to_owned(),
            headers: recorded_headers,
            body: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
            raw_body,
        });
        let number = state.requests.len();
        let response = if known_path && method == Method::POST {
            state.queue.pop_front()
        } else {
            None
        };
        (number, response)
    };
    match response {
        Some(response) => build_response(response),
        None if !known_path || method != Method::POST => {
            build_response(FakeResponse::openai_error(
                404,
                &format!("fake server: no route {method} {}", uri.path()),
                "not_found",
            ))
        }
        None => build_response(FakeResponse::openai_error(
            400,
            &format!("fake server: no response scripted for request #{number}"),
            "fake_queue_empty",
        )),
    }
}

fn build_response(response: FakeResponse) -> Response {
    let FakeResponse {
        status,
        headers,
        pieces,
        end,
    } = response;
    let simple = end == StreamEnd::Finish
        && pieces.iter().all(|piece| piece.delay_before.is_zero())
        && pieces.len() <= 1;
    let body = if simple {
        Body::from(
            pieces
                .into_iter()
                .flat_map(|piece| piece.bytes)
                .collect::<Vec<u8>>(),
        )
    } else {
        let stream = futures_util::stream::unfold(
            (pieces.into_iter(), false),
            move |(mut pieces, ended)| async move {
                if ended {
                    return None;
                }
                match pieces.next() {
                    Some(piece) => {
                        if !piece.delay_before.is_zero() {
                            tokio::time::sleep(piece.delay_before).await;
                        }
                        Some((Ok(Bytes::from(piece.bytes)), (pieces, false)))
                    }
                    None => match end {
                        StreamEnd::Finish => None,
                        StreamEnd::Abort => {
                            // Let the pieces already sent reach the client first, so that the
                            // abort breaks the body rather than the whole response.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            Some((
                                Err(std::io::Error::new(
                                    std::io::ErrorKind::ConnectionAborted,
                                    "fake server: stream aborted",
                                )),
                                (pieces, true),
                            ))
                        }
                        StreamEnd::Stall => {
                            futures_util::future::pending::<()>().await;
                            None
                        }
                    },
                }
            },
        );
        Body::from_stream(stream)
    };
    let mut built = Response::new(body);
    *built.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            built.headers_mut().insert(name, value);
        }
    }
    built
}
