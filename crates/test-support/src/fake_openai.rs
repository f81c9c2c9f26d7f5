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
//! The fake can also mimic habits of real servers ([`Mimic`], set with [`FakeOpenAi::mimic`]):
//! llama-cpp-python's HTTP 500 for `"content": null`, its tools that need `tool_choice`, its
//! empty answer to a streamed `tool_choice: "auto"`, its streams without `usage` and
//! sse-starlette's `: ping` comments; `llama-server`'s `timings` and its refusals without
//! `--jinja` or (older builds) of streamed tools. Each habit is written from the servers'
//! source and issue reports, not recorded from a running server.
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

    /// A non-streaming tool-call completion in llama-cpp-python's shape: `content: null`, the
    /// `tool_calls`, and for a single call also the legacy `function_call` beside them;
    /// `finish_reason: tool_calls`, with usage.
    pub fn tool_call_completion(calls: &[(&str, &str, Value)]) -> Value {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, arguments)| {
                json!({"id": id, "type": "function",
                       "function": {"name": name, "arguments": arguments.to_string()}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": null, "tool_calls": tool_calls});
        if let [(_, name, arguments)] = calls {
            message["function_call"] = json!({"name": name, "arguments": arguments.to_string()});
        }
        completion(message, "tool_calls")
    }
}

/// How the fake answers a *streamed* request that offers tools, as servers that cannot stream
/// tool calls do ([`Mimic::streamed_tools`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamedTools {
    /// With `tool_choice: "auto"`: HTTP 200, `text/event-stream`, and an empty body (what the
    /// issue reports of llama-cpp-python).
    EmptyBodyWhenAuto,
    /// With `tool_choice: "auto"`: HTTP 500 `Automatic streaming tool choice is not supported`
    /// in llama-cpp-python's error shape (what its `chatml-function-calling` handler raises and
    /// its route error handler turns into a 500).
    RefuseWhenAuto,
    /// Whatever the `tool_choice`: HTTP 500 `Cannot use tools with stream` in `llama-server`'s
    /// error shape (builds before streamed tool calls, May 2025).
    RefuseAlways,
}

/// Habits of real servers the fake mimics; all off by default (the fake then serves its queue
/// exactly as scripted). A mimicked refusal or substitute answer is served *instead of* the
/// queue, which it leaves untouched; the request is recorded either way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mimic {
    /// llama-cpp-python: a request holding an assistant message with `"content": null` gets
    /// HTTP 500 with a pydantic validation error in its `internal_server_error` shape (its
    /// request type declares `content: NotRequired[str]`: absent or a string, never `null`).
    pub reject_null_content: bool,
    /// llama-cpp-python's `chatml-function-calling`: without `tool_choice` (or with `"none"`)
    /// the tools are left out of the prompt, so the model cannot call them; the request is
    /// answered with [`Mimic::TOOLS_IGNORED`] as plain text (streamed or not, as asked).
    pub ignore_tools_without_tool_choice: bool,
    /// How a streamed request with tools is answered; `None`: like any other.
    pub streamed_tools: Option<StreamedTools>,
    /// llama-cpp-python ignores `stream_options`: every streamed answer is served without
    /// `usage` (usage-only chunks are dropped, `usage` keys removed). Plain JSON answers keep
    /// theirs (llama-cpp-python reports usage there).
    pub streams_without_usage: bool,
    /// sse-starlette's keep-alive (llama-cpp-python's event streams): a comment line
    /// `: ping - 2025-01-01 00:00:00.000000+00:00` before every piece of a streamed answer.
    pub ping_comments: bool,
    /// `llama-server`: its `timings` object (and `system_fingerprint`) on the last JSON chunk
    /// of a stream, and on a plain JSON answer.
    pub timings: bool,
    /// `llama-server` started without `--jinja`: any request with tools gets HTTP 500
    /// `tools param requires --jinja flag` in its error shape.
    pub require_jinja: bool,
}

impl Mimic {
    /// The text a request gets when [`Mimic::ignore_tools_without_tool_choice`] drops its tools.
    pub const TOOLS_IGNORED: &'static str =
        "(fake llama-cpp-python) No tool_choice was sent, so no tools were in my prompt.";

    /// llama-cpp-python's server with `--chat_format chatml-function-calling`, as the issue
    /// describes it: null content refused, tools ignored without `tool_choice`, an empty body
    /// for a streamed `tool_choice: "auto"`, streams without usage, ping comments.
    pub fn llama_cpp_python() -> Self {
        Self {
            reject_null_content: true,
            ignore_tools_without_tool_choice: true,
            streamed_tools: Some(StreamedTools::EmptyBodyWhenAuto),
            streams_without_usage: true,
            ping_comments: true,
            ..Self::default()
        }
    }

    /// llama.cpp's `llama-server --jinja` (a build that streams tool calls): OpenAI's shapes
    /// with `timings` added; `tool_choice` and `stream_options` honoured, `null` content
    /// accepted.
    pub fn llama_server() -> Self {
        Self {
            timings: true,
            ..Self::default()
        }
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

/// A function that answers a request from its parsed JSON body ([`FakeOpenAi::respond_with`]):
/// a model played by the test, deciding each answer from what the conversation holds.
pub type Responder = Arc<dyn Fn(&Value) -> Option<FakeResponse> + Send + Sync>;

#[derive(Default)]
struct ServerState {
    queue: VecDeque<FakeResponse>,
    /// Responses for requests naming one model (`push_for`), served before `queue`.
    by_model: BTreeMap<String, VecDeque<FakeResponse>>,
    requests: Vec<RecordedRequest>,
    mimic: Mimic,
    /// Asked first when set; the requests it answers are counted, not recorded.
    responder: Option<Responder>,
    /// How many requests the responder answered.
    responded: usize,
}

impl std::fmt::Debug for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerState")
            .field("queue", &self.queue)
            .field("by_model", &self.by_model)
            .field("requests", &self.requests)
            .field("mimic", &self.mimic)
            .field("responder", &self.responder.is_some())
            .field("responded", &self.responded)
            .finish()
    }
}

type SharedState = Arc<Mutex<ServerState>>;

fn lock(state: &SharedState) -> MutexGuard<'_, ServerState> {
    troupe_protocol::sync::lock(state)
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
            by_model: BTreeMap::new(),
            requests: Vec::new(),
            mimic: Mimic::default(),
            responder: None,
            responded: 0,
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

    /// Mimics these real-server habits from the next request on (see [`Mimic`]).
    pub fn mimic(&self, mimic: Mimic) -> &Self {
        lock(&self.state).mimic = mimic;
        self
    }

    /// Queues a response (served after those queued earlier).
    pub fn push(&self, response: FakeResponse) -> &Self {
        lock(&self.state).queue.push_back(response);
        self
    }

    /// Queues a response for the next request whose `model` is `model` (each model has its
    /// own queue, served before the shared one): how a test scripts members that run
    /// different models and call the server concurrently.
    pub fn push_for(&self, model: &str, response: FakeResponse) -> &Self {
        lock(&self.state)
            .by_model
            .entry(model.to_owned())
            .or_default()
            .push_back(response);
        self
    }

    /// How many responses queued for `model` ([`FakeOpenAi::push_for`]) are still unserved.
    pub fn pending_for(&self, model: &str) -> usize {
        lock(&self.state)
            .by_model
            .get(model)
            .map_or(0, VecDeque::len)
    }

    /// Queues several responses.
    pub fn push_all(&self, responses: impl IntoIterator<Item = FakeResponse>) -> &Self {
        lock(&self.state).queue.extend(responses);
        self
    }

    /// From now on, asks `responder` first for every `POST` to the completions path: the
    /// response it returns is served (before the mimicked habits and the queues); `None` falls
    /// through to them. Requests it answers are not recorded ([`FakeOpenAi::requests`] would
    /// hold every long conversation's every request), only counted
    /// ([`FakeOpenAi::responded`]). It runs on the server's thread, one request at a time.
    pub fn respond_with(
        &self,
        responder: impl Fn(&Value) -> Option<FakeResponse> + Send + Sync + 'static,
    ) -> &Self {
        lock(&self.state).responder = Some(Arc::new(responder));
        self
    }

    /// How many requests the responder of [`FakeOpenAi::respond_with`] answered.
    pub fn responded(&self) -> usize {
        lock(&self.state).responded
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
    let parsed: Value = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
    let responder = lock(&state).responder.clone();
    if known_path
        && method == Method::POST
        && let Some(response) = responder.and_then(|respond| respond(&parsed))
    {
        lock(&state).responded += 1;
        return build_response(response);
    }
    let (number, response) = {
        let mut state = lock(&state);
        state.requests.push(RecordedRequest {
            method: method.to_string(),
            path: uri.path().to_owned(),
            headers: recorded_headers,
            body: parsed.clone(),
            raw_body,
        });
        let number = state.requests.len();
        let response = if known_path && method == Method::POST {
            let mimic = state.mimic.clone();
            match mimicked_answer(&mimic, &parsed) {
                Some(answer) => Some(answer),
                None => parsed["model"]
                    .as_str()
                    .and_then(|model| state.by_model.get_mut(model))
                    .and_then(VecDeque::pop_front)
                    .or_else(|| state.queue.pop_front())
                    .map(|response| mimic.reshape(response)),
            }
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

/// The answer a mimicked server gives `request` instead of the queue's, if any.
fn mimicked_answer(mimic: &Mimic, request: &Value) -> Option<FakeResponse> {
    let streamed = request["stream"] == true;
    let has_tools = request["tools"]
        .as_array()
        .is_some_and(|tools| !tools.is_empty());
    let tool_choice = request
        .get("tool_choice")
        .filter(|choice| !choice.is_null());
    if mimic.require_jinja && has_tools {
        return Some(llama_server_error("tools param requires --jinja flag"));
    }
    if mimic.reject_null_content {
        let messages = request["messages"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        if let Some(position) = messages.iter().position(|message| {
            message["role"] == "assistant" && message.get("content").is_some_and(Value::is_null)
        }) {
            // pydantic's message for `content: NotRequired[str]` given `None`, as FastAPI's
            // validation error prints it; llama-cpp-python's route handler wraps any exception
            // in a 500.
            return Some(llama_cpp_python_error(&format!(
                "1 validation error:\n  {{'type': 'string_type', 'loc': ('body', 'messages', {position}, 'typed-dict', 'content'), 'msg': 'Input should be a valid string', 'input': None}}\n"
            )));
        }
    }
    let auto = tool_choice.is_some_and(|choice| choice == "auto");
    if streamed && has_tools {
        match mimic.streamed_tools {
            Some(StreamedTools::EmptyBodyWhenAuto) if auto => {
                return Some(FakeResponse::sse_raw(""));
            }
            Some(StreamedTools::RefuseWhenAuto) if auto => {
                return Some(llama_cpp_python_error(
                    "Automatic streaming tool choice is not supported",
                ));
            }
            Some(StreamedTools::RefuseAlways) => {
                return Some(llama_server_error("Cannot use tools with stream"));
            }
            _ => {}
        }
    }
    let tools_ignored = tool_choice.is_none_or(|choice| choice == "none");
    if mimic.ignore_tools_without_tool_choice && has_tools && tools_ignored {
        let answer = if streamed {
            FakeResponse::text(Mimic::TOOLS_IGNORED)
        } else {
            FakeResponse::json(chunks::text_completion(Mimic::TOOLS_IGNORED))
        };
        return Some(mimic.reshape(answer));
    }
    None
}

/// llama-cpp-python's error answer: HTTP 500 `{"error":{"message","type":"internal_server_error","param":null,"code":null}}`.
fn llama_cpp_python_error(message: &str) -> FakeResponse {
    FakeResponse::error(
        500,
        json!({"error": {"message": message, "type": "internal_server_error", "param": null, "code": null}})
            .to_string(),
    )
}

/// `llama-server`'s error answer: HTTP 500 `{"error":{"code":500,"message","type":"server_error"}}`.
fn llama_server_error(message: &str) -> FakeResponse {
    FakeResponse::error(
        500,
        json!({"error": {"code": 500, "message": message, "type": "server_error"}}).to_string(),
    )
}

impl Mimic {
    /// A queued (or substitute) answer as this server would send it: usage removed from
    /// streams, ping comments added, `timings` added. Pieces that are not whole `data:`
    /// events (re-split bodies) are left as they are, apart from the ping comments.
    fn reshape(&self, mut response: FakeResponse) -> FakeResponse {
        let is_stream = response
            .headers
            .iter()
            .any(|(name, value)| name == "content-type" && value.starts_with("text/event-stream"));
        let is_json = response
            .headers
            .iter()
            .any(|(name, value)| name == "content-type" && value.contains("json"));
        if is_json && self.timings && response.status == 200 {
            let body = response.body_bytes();
            if let Ok(mut value) = serde_json::from_slice::<Value>(&body)
                && value.is_object()
            {
                value["timings"] = timings_json();
                response.pieces = vec![Piece {
                    delay_before: Duration::ZERO,
                    bytes: value.to_string().into_bytes(),
                }];
            }
        }
        if !is_stream {
            return response;
        }
        if self.streams_without_usage {
            response
                .pieces
                .retain_mut(|piece| match event_json(&piece.bytes) {
                    Some(mut chunk) => {
                        let usage_only = chunk.get("usage").is_some()
                            && chunk["choices"].as_array().is_some_and(Vec::is_empty);
                        if usage_only {
                            return false;
                        }
                        if let Some(object) = chunk.as_object_mut()
                            && object.remove("usage").is_some()
                        {
                            piece.bytes = format!("data: {chunk}\n\n").into_bytes();
                        }
                        true
                    }
                    None => true,
                });
        }
        if self.timings
            && let Some((position, mut chunk)) =
                response
                    .pieces
                    .iter()
                    .enumerate()
                    .rev()
                    .find_map(|(position, piece)| {
                        event_json(&piece.bytes).map(|chunk| (position, chunk))
                    })
            && chunk.is_object()
        {
            chunk["timings"] = timings_json();
            chunk["system_fingerprint"] = json!("b0000-fake");
            response.pieces[position].bytes = format!("data: {chunk}\n\n").into_bytes();
        }
        if self.ping_comments {
            // Only where an event may start: a comment inside a line would corrupt it.
            let mut at_boundary = true;
            for piece in &mut response.pieces {
                let ends_event = piece.bytes.ends_with(b"\n\n");
                if at_boundary {
                    let mut bytes = b": ping - 2025-01-01 00:00:00.000000+00:00\n\n".to_vec();
                    bytes.append(&mut piece.bytes);
                    piece.bytes = bytes;
                }
                at_boundary = ends_event;
            }
        }
        response
    }
}

/// The JSON of a piece that is exactly one `data: {…}` event, if it is one.
fn event_json(bytes: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(bytes).ok()?;
    let data = text.strip_prefix("data: ")?.strip_suffix("\n\n")?;
    if data.contains('\n') {
        return None;
    }
    serde_json::from_str(data).ok()
}

/// A `llama-server` `timings` object.
fn timings_json() -> Value {
    json!({
        "prompt_n": 10, "prompt_ms": 12.5, "prompt_per_token_ms": 1.25, "prompt_per_second": 800.0,
        "predicted_n": 3, "predicted_ms": 30.0, "predicted_per_token_ms": 10.0, "predicted_per_second": 100.0
    })
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
