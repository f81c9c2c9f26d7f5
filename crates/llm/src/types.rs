//! The model client's request and response types: tool specs, the chat request, the final
//! model response and the stream events of a call.
//!
//! The chat data a session log records ([`ChatMessage`], [`AssistantMessage`], [`ToolCall`],
//! [`Usage`], [`FinishReason`], [`Attempt`], [`TruncatedCall`]) is `troupe_session`'s
//! (`troupe_session::chat`), re-exported by this crate. [`ToolSpec`] serializes as the OpenAI
//! wire format like them; [`ChatRequest`], [`ModelResponse`] and [`StreamEvent`] are camelCase,
//! as every other Troupe wire type.

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use troupe_session::chat::{
    AssistantMessage, Attempt, AttemptError, ChatMessage, FinishReason, ToolCall, TruncatedCall,
    Usage,
};

/// A tool the model may call.
///
/// Wire shape: `{"type":"function","function":{"name":"…","description":"…","parameters":{…}}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "WireToolSpec", into = "WireToolSpec")]
pub struct ToolSpec {
    /// The tool name the model uses to call it.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// A JSON Schema (an `object` schema) for the tool's arguments.
    pub parameters: Value,
}

impl ToolSpec {
    /// A tool spec.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct WireToolSpec {
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireFunctionSpec,
}

#[derive(Serialize, Deserialize)]
struct WireFunctionSpec {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    parameters: Value,
}

fn function_type() -> String {
    "function".to_owned()
}

impl From<WireToolSpec> for ToolSpec {
    fn from(wire: WireToolSpec) -> Self {
        Self {
            name: wire.function.name,
            description: wire.function.description,
            parameters: wire.function.parameters,
        }
    }
}

impl From<ToolSpec> for WireToolSpec {
    fn from(spec: ToolSpec) -> Self {
        Self {
            kind: function_type(),
            function: WireFunctionSpec {
                name: spec.name,
                description: spec.description,
                parameters: spec.parameters,
            },
        }
    }
}

/// What the runtime asks of a model: the history and the tools. The model name, endpoint and
/// streaming mode come from the provider's configuration, not from the request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatRequest {
    /// The whole history, oldest first (system prompt first).
    pub messages: Vec<ChatMessage>,
    /// The tools the model may call; omitted from the wire body when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Sampling temperature; the server's default when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Output token limit; the server's default when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    /// A request with these messages and tools.
    pub fn new(messages: Vec<ChatMessage>, tools: Vec<ToolSpec>) -> Self {
        Self {
            messages,
            tools,
            temperature: None,
            max_tokens: None,
        }
    }
}

/// The final result of a successful model call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelResponse {
    /// The whole assistant message: text, reasoning and tool calls with parsed arguments.
    pub message: AssistantMessage,
    /// Token counts, when the server reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why the model stopped, when the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The model name the server reported, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Every attempt of this call, the successful last one included.
    pub attempts: Vec<Attempt>,
    /// The tool calls the output token limit cut (`finish_reason: length`) while their
    /// arguments were being written, in stream order; empty otherwise. They are *not* in
    /// [`ModelResponse::message`]'s `tool_calls` (which only ever holds calls with valid
    /// arguments); see [`TruncatedCall`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated_calls: Vec<TruncatedCall>,
}

/// A progress notification of a model call, delivered to a
/// [`StreamObserver`](crate::StreamObserver) as it happens.
///
/// Text and reasoning deltas arrive one per streamed chunk; the runtime is expected to coalesce
/// them. When an attempt fails after it already streamed deltas, [`StreamEvent::AttemptFailed`]
/// follows: the deltas of that attempt are void, and the next [`StreamEvent::AttemptStarted`]
/// starts the answer over.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum StreamEvent {
    /// Attempt `attempt` (1-based) is starting.
    AttemptStarted {
        /// 1-based attempt number.
        attempt: u32,
    },
    /// A piece of the answer text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// A piece of the reasoning text.
    ReasoningDelta {
        /// The new reasoning text.
        text: String,
    },
    /// A piece of a tool call. `id` and `name` are set on the first piece of a call (and repeated
    /// by some servers); `arguments` is the new fragment of the raw argument string.
    #[serde(rename_all = "camelCase")]
    ToolCallDelta {
        /// 0-based position of the call in the message.
        index: usize,
        /// The call id, when this piece carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool name, when this piece carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The new fragment of the raw JSON argument string (may be empty).
        arguments: String,
    },
    /// An attempt failed. `attempt.retry_delay_ms` says whether (and after how long) another
    /// attempt follows.
    AttemptFailed {
        /// The failed attempt, as it should be recorded.
        attempt: Attempt,
    },
}
