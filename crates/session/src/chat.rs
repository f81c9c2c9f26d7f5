//! The chat data a session log records: messages, the model's answers with their tool calls,
//! token usage, finish reasons, model-call attempts and truncated calls.
//!
//! These serialize exactly as the OpenAI chat-completions wire format (snake_case, `role` tag,
//! `{"type":"function","function":{…}}` wrappers, tool-call `arguments` as a compact JSON
//! string) — what the log records is what a model is sent — except Troupe's own [`Attempt`],
//! [`AttemptError`] and [`TruncatedCall`] (camelCase, as every other Troupe wire type). The
//! model client (`troupe_llm`) re-exports them and sends them; this module holds no HTTP.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a chat history.
///
/// Serialized as the OpenAI wire format, tagged by `role`:
/// `{"role":"system","content":"…"}`, `{"role":"user","content":"…"}`,
/// `{"role":"assistant","content":"…"|null,"reasoning_content"?:"…","tool_calls"?:[…]}`,
/// `{"role":"tool","tool_call_id":"…","content":"…"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    /// Instructions for the model (the system prompt).
    System {
        /// The instruction text.
        content: String,
    },
    /// A message from the user (or from the harness speaking for the user).
    User {
        /// The message text.
        content: String,
    },
    /// A message the model produced.
    Assistant(AssistantMessage),
    /// The result of one tool call, answering the assistant message that requested it.
    Tool {
        /// The `id` of the [`ToolCall`] this message answers.
        tool_call_id: String,
        /// The tool result (Troupe sends compact JSON text).
        content: String,
    },
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// A tool-result message answering the call `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }
}

impl From<AssistantMessage> for ChatMessage {
    fn from(message: AssistantMessage) -> Self {
        Self::Assistant(message)
    }
}

/// What the model answered: text, reasoning and tool calls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The visible answer text; `None` when the model only called tools. Serialized (and
    /// recorded) as `null` when absent; the HTTP client sends such a message with
    /// `"content": ""` instead, which every server accepts (llama-cpp-python refuses `null`).
    #[serde(default)]
    pub content: Option<String>,
    /// The reasoning text of reasoning models (DeepSeek `deepseek-reasoner`), kept for the log.
    /// Whether it is sent back to the server is decided by the client's reasoning replay
    /// setting (`troupe_llm::ReasoningReplay`), not by this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The tool calls the model requested, in order; empty when it answered without tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

impl AssistantMessage {
    /// An assistant message with only text.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: Some(content.into()),
            reasoning_content: None,
            tool_calls: Vec::new(),
        }
    }
}

/// One tool call requested by the model, with its arguments already parsed.
///
/// Wire shape: `{"id":"…","type":"function","function":{"name":"…","arguments":"<compact JSON>"}}`.
/// Deserializing accepts `arguments` as a JSON string (the standard) or as an inline JSON value
/// (some servers); an empty string reads as `{}`. A string that is not valid JSON fails to
/// deserialize: a recorded call always has valid arguments, because the client never returns
/// a call with invalid ones as a `ToolCall` (a call cut by the output token limit is a
/// [`TruncatedCall`]; other invalid arguments fail the model call with
/// `LLM_TRUNCATED_TOOL_CALL`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "WireToolCall", into = "WireToolCall")]
pub struct ToolCall {
    /// The call id the tool result must echo in `tool_call_id`.
    pub id: String,
    /// The name of the tool to run.
    pub name: String,
    /// The parsed arguments (normally a JSON object).
    pub arguments: Value,
}

impl ToolCall {
    /// A tool call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct WireToolCall {
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireFunctionCall,
}

#[derive(Serialize, Deserialize)]
struct WireFunctionCall {
    name: String,
    #[serde(default)]
    arguments: Value,
}

fn function_type() -> String {
    "function".to_owned()
}

impl TryFrom<WireToolCall> for ToolCall {
    type Error = String;

    fn try_from(wire: WireToolCall) -> Result<Self, Self::Error> {
        let arguments = match wire.function.arguments {
            Value::String(text) if text.trim().is_empty() => Value::Object(Default::default()),
            Value::String(text) => serde_json::from_str(&text).map_err(|error| {
                format!(
                    "tool call {} ({}) has invalid JSON arguments: {error}",
                    wire.id, wire.function.name
                )
            })?,
            Value::Null => Value::Object(Default::default()),
            other => other,
        };
        Ok(Self {
            id: wire.id,
            name: wire.function.name,
            arguments,
        })
    }
}

impl From<ToolCall> for WireToolCall {
    fn from(call: ToolCall) -> Self {
        Self {
            id: call.id,
            kind: function_type(),
            function: WireFunctionCall {
                name: call.name,
                // Serializing a `Value` to a string cannot fail.
                arguments: Value::String(call.arguments.to_string()),
            },
        }
    }
}

/// Token counts reported by the server. Missing fields read as 0 (`usage: {}` is accepted).
///
/// `cached_tokens` is the part of `prompt_tokens` the provider served from its prompt cache
/// (billed at the cached price, see `troupe_session::ledger`). It is read from any of the
/// names servers use: Troupe's own `cached_tokens` (what the log records, only when not 0),
/// OpenAI's `prompt_tokens_details.cached_tokens`, DeepSeek's `prompt_cache_hit_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WireUsage")]
pub struct Usage {
    /// Tokens in the prompt (the request's messages and tools), cached ones included.
    pub prompt_tokens: u64,
    /// Tokens the model generated (reasoning included).
    pub completion_tokens: u64,
    /// Total tokens; servers that omit it read as 0, see [`Usage::total`].
    pub total_tokens: u64,
    /// Of `prompt_tokens`, those served from the provider's prompt cache (0: none reported).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_tokens: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// What a server (or the log) sends as `usage`, every name [`Usage`] is read from.
#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "lenient_u64")]
    prompt_tokens: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    completion_tokens: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    total_tokens: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    cached_tokens: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    prompt_cache_hit_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<Value>,
}

impl From<WireUsage> for Usage {
    fn from(wire: WireUsage) -> Self {
        let details = wire
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.get("cached_tokens"))
            .map_or(0, |v| {
                v.as_u64()
                    .or_else(|| v.as_f64().map(|f| f.max(0.0) as u64))
                    .unwrap_or(0)
            });
        let cached = [wire.cached_tokens, details, wire.prompt_cache_hit_tokens]
            .into_iter()
            .find(|&c| c > 0)
            .unwrap_or(0);
        Self {
            prompt_tokens: wire.prompt_tokens,
            completion_tokens: wire.completion_tokens,
            total_tokens: wire.total_tokens,
            // Cached tokens are part of the prompt: a server that says otherwise is capped.
            cached_tokens: cached.min(wire.prompt_tokens),
        }
    }
}

impl Usage {
    /// `total_tokens`, or prompt + completion when the server did not report a total.
    pub fn total(&self) -> u64 {
        if self.total_tokens == 0 {
            self.prompt_tokens.saturating_add(self.completion_tokens)
        } else {
            self.total_tokens
        }
    }
}

/// Reads a count that a lenient server may send as a number, a float, a string or `null`.
fn lenient_u64<'de, D>(deserializer: D) -> Result<u64, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = Value::deserialize(deserializer)?;
    Ok(match value {
        Value::Number(number) => number
            .as_u64()
            .or_else(|| number.as_f64().map(|float| float.max(0.0) as u64))
            .unwrap_or(0),
        Value::String(text) => text.trim().parse().unwrap_or(0),
        _ => 0,
    })
}

/// Why the model stopped. Serialized as the server's string (`"stop"`, `"tool_calls"`, …).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// `"stop"`: a natural end of the answer.
    Stop,
    /// `"length"`: the output token limit cut the answer.
    Length,
    /// `"tool_calls"` (or the legacy `"function_call"`): the model wants tools run.
    ToolCalls,
    /// `"content_filter"`: the server's content filter stopped the answer.
    ContentFilter,
    /// Any other non-empty string a server sends, kept verbatim.
    Other(String),
}

impl FinishReason {
    /// Parses a server's finish reason; an empty string means "none" and gives `None`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "" => None,
            "stop" => Some(Self::Stop),
            "length" => Some(Self::Length),
            "tool_calls" | "function_call" => Some(Self::ToolCalls),
            "content_filter" => Some(Self::ContentFilter),
            other => Some(Self::Other(other.to_owned())),
        }
    }

    /// The wire string of this reason.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Other(text) => text,
        }
    }
}

impl Serialize for FinishReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FinishReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(Self::parse(&text).unwrap_or(Self::Other(String::new())))
    }
}

/// The outcome of one HTTP attempt (or one scripted step) of a model call.
///
/// The runtime records one per attempt (`model/attempt`): a failed attempt arrives through the
/// model client's `StreamEvent::AttemptFailed` as soon as it fails, and every attempt of a
/// successful call is also listed in its `ModelResponse::attempts` (`troupe_llm`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// 1-based attempt number within the call.
    pub number: u32,
    /// The HTTP status, when a response arrived; `None` for connect errors and scripted steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why the attempt failed; `None` when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AttemptError>,
    /// The wait (ms) before the next attempt, when this failed attempt is retried; `None` when it
    /// succeeded or was the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay_ms: Option<u64>,
}

/// A failed attempt's error, as recorded: the stable code and the one-line message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// The model client's error code (`troupe_llm::LlmError`), e.g. `LLM_RATE_LIMITED`.
    pub code: String,
    /// The error's message (never contains an API key).
    pub message: String,
}

/// A tool call the model started but could not finish: the answer was cut by the output token
/// limit (`finish_reason: length`) while the call's argument string was being written, so it
/// is not valid JSON (or is empty). Such a call must never run.
///
/// The runtime records it and answers it with a tool error (`TOOL_ARGUMENTS_TRUNCATED`), so the
/// model can retry with smaller arguments; `troupe_llm::LlmError::from(&call)` is the error a
/// caller reports when it gives up (`LLM_TRUNCATED_TOOL_CALL`). Serialized in camelCase:
/// `{"position","id","name","arguments","reason"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruncatedCall {
    /// Index of the call among all the calls of the answer, in stream order (complete and
    /// truncated ones counted together, from 0).
    pub position: usize,
    /// The call id (`call_<position>` when the server sent none).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The argument text exactly as it arrived (not valid JSON; possibly empty).
    pub arguments: String,
    /// The JSON parser's complaint, or `the argument string is empty`.
    pub reason: String,
}
