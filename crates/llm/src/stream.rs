//! Parsing of chat-completion answers: the incremental SSE decoder, the chunk accumulator, and
//! the non-streaming JSON body.
//!
//! The parser is pure (no IO, no clock) so that tests can feed it recorded streams split at any
//! byte boundary: the result, and the sequence of [`StreamEvent`]s it emits, never depend on how
//! the bytes were split.

use serde_json::Value;

use crate::classify::classify_error_object;
use crate::error::LlmError;
use crate::provider::StreamObserver;
use crate::types::{AssistantMessage, FinishReason, StreamEvent, ToolCall, TruncatedCall, Usage};

/// One dispatched server-sent event: its `event` name (if any) and its `data` lines joined by
/// `\n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the server set one.
    pub event: Option<String>,
    /// The `data:` lines of the event, joined by `\n`.
    pub data: String,
}

/// An incremental decoder of `text/event-stream` bytes (the WHATWG event-stream format).
///
/// Accepts `\n`, `\r\n` and `\r` line ends (also when a `\r\n` pair is split between two
/// chunks), comments (`: keep-alive`), `data:` with or without the space, multi-line data, and
/// UTF-8 characters split between chunks. Fields other than `data` and `event` are ignored.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    event: Option<String>,
    skip_next_lf: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes; every event completed by them is pushed to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) {
        while !bytes.is_empty() {
            if self.skip_next_lf {
                self.skip_next_lf = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match bytes
                .iter()
                .position(|byte| *byte == b'\n' || *byte == b'\r')
            {
                Some(end) => {
                    self.line.extend_from_slice(&bytes[..end]);
                    self.skip_next_lf = bytes[end] == b'\r';
                    bytes = &bytes[end + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, out);
                }
                None => {
                    self.line.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
        }
    }

    /// Ends the stream: an unterminated last line and a last event without its blank line are
    /// dispatched (lenient: some servers end with `data: [DONE]\n` and no blank line).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out);
        }
        self.dispatch(out);
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        // Lines end only at `\r`/`\n` bytes, which never occur inside a multi-byte UTF-8
        // sequence, so a complete line holds complete characters.
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.find(':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

/// What a completed stream (or JSON body) produced, before attempts are attached.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamOutcome {
    /// The assistant message, tool-call arguments parsed.
    pub message: AssistantMessage,
    /// Token counts, when reported.
    pub usage: Option<Usage>,
    /// The finish reason, when reported.
    pub finish_reason: Option<FinishReason>,
    /// The model name the server reported.
    pub model: Option<String>,
    /// Tool calls cut by the output token limit, not in `message` (see
    /// [`ModelResponse::truncated_calls`](crate::ModelResponse::truncated_calls)).
    pub truncated_calls: Vec<TruncatedCall>,
}

/// An incremental parser of a streamed chat completion (`stream: true`).
///
/// Feed it the response bytes as they arrive; it emits [`StreamEvent`]s for text, reasoning and
/// tool-call fragments, and [`ChatStreamParser::finish`] builds the final message. Leniency:
/// chunks without `choices` or `delta` (a usage-only or finish-only final chunk), `null` or
/// missing `content`, missing `role`, an empty `finish_reason`, `usage: {}` or `null`, tool-call
/// deltas without `index` (continued by `id`, or else the last call), `reasoning` as an alias of
/// `reasoning_content`, a `message` object in place of `delta`, and arguments sent as a JSON
/// value instead of a string. Only choice 0 is read.
#[derive(Debug, Default)]
pub struct ChatStreamParser {
    sse: SseDecoder,
    events: Vec<SseEvent>,
    accumulator: Accumulator,
    done: bool,
    /// Events with data dispatched so far (`[DONE]` included; comments are not events).
    frames: usize,
}

impl ChatStreamParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next response bytes. Fails on an error object sent inside the stream
    /// ([`LlmError::Server`] or [`LlmError::ContextLength`]) and on an event whose data is not
    /// JSON ([`LlmError::Protocol`]). Bytes after `data: [DONE]` are ignored.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        observer: &mut dyn StreamObserver,
    ) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        self.sse.feed(bytes, &mut self.events);
        self.drain_events(observer, true)
    }

    /// Whether `data: [DONE]` was seen (nothing more is expected).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// How many events carrying data the stream has delivered so far (`data: [DONE]`
    /// included; comment lines such as `: ping - …` and blank lines are not events).
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Whether a non-empty `finish_reason` was seen (the answer is complete; only usage and
    /// `[DONE]` may follow).
    pub fn saw_finish_reason(&self) -> bool {
        self.accumulator.finish_reason.is_some()
    }

    /// Ends the stream (the connection closed, or `[DONE]` arrived) and builds the outcome.
    ///
    /// Fails with [`LlmError::EmptyStream`] when the stream delivered no event at all, and with
    /// [`LlmError::StreamDropped`] when neither `[DONE]` nor a `finish_reason` was seen
    /// otherwise. A tool call whose argument string is not valid JSON is a
    /// [`TruncatedCall`] of the outcome when the finish reason is `length` (the output token
    /// limit cut it), and fails with [`LlmError::TruncatedToolCall`] otherwise; an empty
    /// argument string reads as `{}` only when the stream finished normally and not because of
    /// the output token limit. A tool call without a name fails with [`LlmError::Protocol`].
    pub fn finish(mut self, observer: &mut dyn StreamObserver) -> Result<StreamOutcome, LlmError> {
        if !self.done {
            self.sse.finish(&mut self.events);
            // A last event cut by the end of the stream is not an error by itself: the missing
            // `[DONE]`/`finish_reason` check below reports the drop.
            self.drain_events(observer, false)?;
        }
        if self.frames == 0 {
            return Err(LlmError::EmptyStream {
                message: "the model server answered the streamed request with an event stream that ended before its first event".to_owned(),
            });
        }
        if !self.done && self.accumulator.finish_reason.is_none() {
            return Err(LlmError::StreamDropped {
                message: format!(
                    "the model stream ended before the answer was complete (no [DONE] and no finish_reason; {} received)",
                    crate::plural(self.accumulator.chunks as u64, "chunk")
                ),
            });
        }
        self.accumulator.build()
    }

    fn drain_events(
        &mut self,
        observer: &mut dyn StreamObserver,
        strict: bool,
    ) -> Result<(), LlmError> {
        let events = std::mem::take(&mut self.events);
        for event in events {
            if self.done {
                break;
            }
            self.frames += 1;
            let data = event.data.trim();
            if data.is_empty() {
                continue;
            }
            if data == "[DONE]" {
                self.done = true;
                continue;
            }
            let chunk: Value = match serde_json::from_str(data) {
                Ok(chunk) => chunk,
                Err(_) if !strict => continue,
                Err(error) => {
                    return Err(LlmError::protocol(format!(
                        "the model stream sent an event that is not JSON ({error}): {}",
                        excerpt(data)
                    )));
                }
            };
            if event.event.as_deref() == Some("error") && chunk.get("error").is_none() {
                return Err(classify_error_object(200, &chunk, None));
            }
            self.accumulator.apply_chunk(&chunk, observer)?;
        }
        Ok(())
    }
}

/// Parses a non-streaming chat completion body (`stream: false`, or a server that answered a
/// streaming request with `application/json`). The answer is also emitted to `observer` as
/// deltas, so progress display works the same in both modes.
pub fn parse_completion_body(
    body: &[u8],
    observer: &mut dyn StreamObserver,
) -> Result<StreamOutcome, LlmError> {
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        LlmError::protocol(format!(
            "the model server's answer is not JSON ({error}): {}",
            excerpt(&String::from_utf8_lossy(body))
        ))
    })?;
    let has_choices = value
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(|choices| !choices.is_empty());
    if !has_choices && value.get("error").is_none_or(Value::is_null) {
        return Err(LlmError::protocol(format!(
            "the model server's answer has no choices: {}",
            excerpt(&value.to_string())
        )));
    }
    let mut accumulator = Accumulator::default();
    accumulator.apply_chunk(&value, observer)?;
    accumulator.build()
}

/// A short one-line excerpt of a server text for error messages.
pub(crate) fn excerpt(text: &str) -> String {
    const LIMIT: usize = 300;
    let one_line: String = text
        .chars()
        .map(|character| {
            if character.is_control() {
                ' '
            } else {
                character
            }
        })
        .collect();
    let one_line = one_line.trim();
    if one_line.chars().count() <= LIMIT {
        one_line.to_owned()
    } else {
        let cut: String = one_line.chars().take(LIMIT).collect();
        format!("{cut}…")
    }
}

#[derive(Debug, Default)]
struct PartialCall {
    /// The server's `index`, when it sent one.
    server_index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

#[derive(Debug, Default)]
struct Accumulator {
    text: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    last_call: Option<usize>,
    usage: Option<Usage>,
    finish_reason: Option<FinishReason>,
    model: Option<String>,
    chunks: usize,
}

impl Accumulator {
    fn apply_chunk(
        &mut self,
        chunk: &Value,
        observer: &mut dyn StreamObserver,
    ) -> Result<(), LlmError> {
        self.chunks += 1;
        if chunk.get("error").is_some_and(|error| !error.is_null()) {
            return Err(classify_error_object(200, chunk, None));
        }
        if self.model.is_none()
            && let Some(model) = chunk.get("model").and_then(Value::as_str)
            && !model.is_empty()
        {
            self.model = Some(model.to_owned());
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object())
            && let Ok(usage) = serde_json::from_value::<Usage>(usage.clone())
        {
            self.usage = Some(usage);
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        for choice in choices {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            if index != 0 {
                continue;
            }
            let delta = choice
                .get("delta")
                .filter(|delta| delta.is_object())
                .or_else(|| choice.get("message").filter(|message| message.is_object()));
            if let Some(delta) = delta {
                self.apply_delta(delta, observer);
            }
            if let Some(reason) = choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .and_then(FinishReason::parse)
            {
                self.finish_reason = Some(reason);
            }
        }
        Ok(())
    }

    fn apply_delta(&mut self, delta: &Value, observer: &mut dyn StreamObserver) {
        let reasoning = delta
            .get("reasoning_content")
            .and_then(Value::as_str)
            .or_else(|| delta.get("reasoning").and_then(Value::as_str));
        if let Some(reasoning) = reasoning.filter(|text| !text.is_empty()) {
            self.reasoning.push_str(reasoning);
            observer.on_event(StreamEvent::ReasoningDelta {
                text: reasoning.to_owned(),
            });
        }
        if let Some(content) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
        {
            self.text.push_str(content);
            observer.on_event(StreamEvent::TextDelta {
                text: content.to_owned(),
            });
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            // A `null` element (or any non-object) is no fragment at all.
            for (position, call) in calls.iter().filter(|call| call.is_object()).enumerate() {
                self.apply_tool_call_delta(call, position > 0, observer);
            }
        } else if let Some(call) = delta.get("function_call").filter(|call| call.is_object()) {
            // The legacy single-function form: `{"function_call": {"name", "arguments"}}`.
            let wrapped = serde_json::json!({ "function": call });
            self.apply_tool_call_delta(&wrapped, false, observer);
        }
    }

    /// Merges one tool-call fragment. `sibling` is true for the second and later elements of one
    /// delta's `tool_calls` array: a single delta never carries two fragments of the same call, so
    /// a sibling without `index` or `id` starts a new call.
    fn apply_tool_call_delta(
        &mut self,
        call: &Value,
        sibling: bool,
        observer: &mut dyn StreamObserver,
    ) {
        let server_index = call.get("index").and_then(Value::as_u64);
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let function = call.get("function");
        let name = function
            .and_then(|function| function.get("name"))
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty());
        let fragment = match function.and_then(|function| function.get("arguments")) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        };

        let existing = match (server_index, id) {
            (Some(server_index), _) => self
                .calls
                .iter()
                .rposition(|partial| partial.server_index == Some(server_index))
                .filter(|&slot| {
                    // Some servers reuse index 0 for every parallel call: a different id on the
                    // same index starts a new call.
                    let known = &self.calls[slot].id;
                    id.is_none_or(|id| known.is_empty() || known == id)
                }),
            (None, Some(id)) => self.calls.iter().position(|partial| partial.id == id),
            (None, None) if sibling => None,
            (None, None) => self.last_call,
        };
        let slot = match existing {
            Some(slot) => slot,
            None => {
                self.calls.push(PartialCall {
                    server_index,
                    ..PartialCall::default()
                });
                self.calls.len() - 1
            }
        };
        self.last_call = Some(slot);
        let partial = &mut self.calls[slot];
        if let Some(id) = id
            && partial.id.is_empty()
        {
            partial.id = id.to_owned();
        }
        if let Some(name) = name
            && partial.name.is_empty()
        {
            partial.name = name.to_owned();
        }
        partial.arguments.push_str(&fragment);
        observer.on_event(StreamEvent::ToolCallDelta {
            index: slot,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: fragment,
        });
    }

    fn build(self) -> Result<StreamOutcome, LlmError> {
        let cut_by_length = self.finish_reason == Some(FinishReason::Length);
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        let mut truncated_calls = Vec::new();
        for (position, partial) in self.calls.into_iter().enumerate() {
            let id = if partial.id.is_empty() {
                format!("call_{position}")
            } else {
                partial.id
            };
            if partial.name.is_empty() {
                return Err(LlmError::protocol(format!(
                    "the model's tool call #{position} (id {id}) has no tool name"
                )));
            }
            let raw = partial.arguments.trim();
            let arguments = if raw.is_empty() && !cut_by_length {
                // An empty argument string of a call that finished normally means "no
                // arguments": some servers send nothing for argument-less tools.
                Value::Object(Default::default())
            } else {
                match serde_json::from_str::<Value>(raw) {
                    Ok(arguments) => arguments,
                    Err(error) => {
                        let reason = if raw.is_empty() {
                            "the argument string is empty".to_owned()
                        } else {
                            error.to_string()
                        };
                        if cut_by_length {
                            // The output limit cut this call: the caller decides what to do
                            // with it; it is never returned as a runnable call.
                            truncated_calls.push(TruncatedCall {
                                position,
                                id,
                                name: partial.name,
                                arguments: partial.arguments,
                                reason,
                            });
                            continue;
                        }
                        return Err(LlmError::TruncatedToolCall {
                            id,
                            name: partial.name,
                            arguments_len: partial.arguments.len(),
                            finish_reason: self
                                .finish_reason
                                .as_ref()
                                .map(|reason| reason.as_str().to_owned()),
                            reason,
                        });
                    }
                }
            };
            tool_calls.push(ToolCall {
                id,
                name: partial.name,
                arguments,
            });
        }
        Ok(StreamOutcome {
            message: AssistantMessage {
                content: (!self.text.is_empty()).then_some(self.text),
                reasoning_content: (!self.reasoning.is_empty()).then_some(self.reasoning),
                tool_calls,
            },
            usage: self.usage,
            finish_reason: self.finish_reason,
            model: self.model,
            truncated_calls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(pieces: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        for piece in pieces {
            decoder.feed(piece, &mut out);
        }
        decoder.finish(&mut out);
        out
    }

    fn data(text: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: text.to_owned(),
        }
    }

    #[test]
    fn sse_line_endings_comments_and_multiline_data() {
        let events = decode(&[b": keep-alive\r\ndata: a\r\n\r\ndata:b\rdata: c\r\rdata: d\n\n"]);
        assert_eq!(events, vec![data("a"), data("b\nc"), data("d")]);
    }

    #[test]
    fn sse_crlf_split_between_chunks() {
        let events = decode(&[b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]);
        assert_eq!(events, vec![data("a"), data("b")]);
    }

    #[test]
    fn sse_event_name_and_unterminated_tail() {
        let events = decode(&[b"event: error\ndata: {}\n\ndata: [DONE]"]);
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: Some("error".to_owned()),
                    data: "{}".to_owned()
                },
                data("[DONE]")
            ]
        );
    }

    #[test]
    fn sse_split_utf8() {
        let text = "data: héllo 🎭\n\n".as_bytes();
        let events = decode(&[&text[..9], &text[9..14], &text[14..]]);
        assert_eq!(events, vec![data("héllo 🎭")]);
    }
}
