//! OpenAI-compatible chat-completions client (streaming, tool calls, retries) and the scripted
//! provider.
//!
//! This crate knows nothing of session logs: the runtime records what it returns. The plain
//! data it sends and returns that a log records — the chat types ([`ChatMessage`],
//! [`AssistantMessage`], [`ToolCall`], [`Usage`], [`FinishReason`], [`Attempt`],
//! [`TruncatedCall`]) and the model choice ([`ModelSpec`], [`ProviderKind`], [`ToolChoice`]) —
//! is the session model's (`troupe_session::{chat, model}`), re-exported here unchanged.
//!
//! # How the runtime uses it
//! 1. Parse the flags into a [`ModelSpec`] ([`ModelSpecExt::from_flags`]; record it in the
//!    session: it holds no key), resolve it with [`ModelSpecExt::resolve`] into a
//!    [`ProviderConfig`], and build a [`ProviderFactory`].
//! 2. For each agent, [`ProviderFactory::for_agent`] gives an `Arc<dyn ModelProvider>`. On a
//!    cold resume, call [`ModelProvider::set_calls_made`] with the number of model calls the
//!    agent's log already holds (the scripted provider then continues its script; HTTP ignores
//!    it).
//! 3. Each step: [`ModelProvider::complete`] with the [`ChatRequest`], a [`StreamObserver`]
//!    (progress: text, reasoning and tool-call deltas, and every failed attempt) and the turn's
//!    `CancellationToken`. The [`ModelResponse`] holds the whole [`AssistantMessage`] (tool-call
//!    arguments parsed), usage, finish reason and the list of [`Attempt`]s.
//!
//! Errors are [`LlmError`], each with a stable code (`troupe_protocol::ErrorCode`).
//!
//! # Invariants
//! - An API key appears only in the `Authorization` header: [`ApiKey`] prints `***`, and no
//!   serializable type holds one.
//! - A tool call whose arguments are not valid JSON is never returned as a [`ToolCall`]. When the
//!   output token limit cut it (`finish_reason: length`), the call is returned in
//!   [`ModelResponse::truncated_calls`] (a [`TruncatedCall`]: raw text, never to be run) and the
//!   rest of the answer is returned as usual; any other invalid argument string fails the call
//!   with [`LlmError::TruncatedToolCall`]. An *empty* argument string is read as `{}` only when
//!   the stream finished normally (`[DONE]` or a finish reason) and not with
//!   `finish_reason: length`.
//! - Stream parsing does not depend on how the bytes were split into chunks.
//! - No request carries `"content": null` (a message that only called tools is sent
//!   `"content": ""`) or a `tool_choice` without `tools`; usage is never made up.
//! - A streamed attempt that yields no event, or that a server refuses naming streamed tools,
//!   is recorded as a failed [`Attempt`] and asked once more without streaming; that fallback
//!   is not a retry ([`RetryPolicy::max_attempts`] counts the others).

mod classify;
mod client;
mod config;
mod error;
mod provider;
mod script;
pub mod stream;
mod types;

use std::sync::Arc;

pub use client::OpenAiClient;
pub use config::{
    ApiKey, ClientOptions, DEEPSEEK_API_KEY_ENV, DEEPSEEK_BASE_URL, DEEPSEEK_DEFAULT_MODEL,
    HttpProviderConfig, ModelFlags, ModelSpec, ModelSpecExt, OPENAI_API_KEY_ENV, OPENAI_BASE_URL,
    OPENAI_DEFAULT_MODEL, ProviderConfig, ProviderKind, ReasoningReplay, RetryPolicy, ToolChoice,
    resolve_model,
};
pub use error::LlmError;
pub use provider::{BoxFuture, EventLog, ModelProvider, NoopObserver, StreamObserver};
pub use script::{MAX_SCRIPT_BYTES, ScriptedAgent, ScriptedProvider};
pub use types::{
    AssistantMessage, Attempt, AttemptError, ChatMessage, ChatRequest, FinishReason, ModelResponse,
    StreamEvent, ToolCall, ToolSpec, TruncatedCall, Usage,
};

/// Gives each agent its model provider, from one resolved configuration.
///
/// HTTP: every agent shares one [`OpenAiClient`]. Script: each agent gets its
/// [`ScriptedAgent`] (one shared cursor per member name).
#[derive(Clone, Debug)]
pub enum ProviderFactory {
    /// An OpenAI-compatible server.
    Http(Arc<OpenAiClient>),
    /// A loaded script.
    Scripted(ScriptedProvider),
}

impl ProviderFactory {
    /// Builds the client or loads the script. Fails with [`LlmError::Config`] (bad base URL) or
    /// [`LlmError::Script`] (unreadable or malformed script).
    pub fn new(config: ProviderConfig, options: ClientOptions) -> Result<Self, LlmError> {
        match config {
            ProviderConfig::Http(config) => {
                Ok(Self::Http(Arc::new(OpenAiClient::new(config, options)?)))
            }
            ProviderConfig::Script { path } => Ok(Self::Scripted(ScriptedProvider::load(path)?)),
        }
    }

    /// The same factory whose scripted providers wait `pace` before each model call
    /// ([`ScriptedProvider::with_pace`]); an HTTP factory is returned unchanged.
    #[must_use]
    pub fn with_script_pace(self, pace: std::time::Duration) -> Self {
        match self {
            Self::Scripted(script) => Self::Scripted(script.with_pace(pace)),
            http @ Self::Http(_) => http,
        }
    }

    /// The provider for member `agent`. Fails with [`LlmError::Script`] when a script has no
    /// steps for that member.
    pub fn for_agent(&self, agent: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        match self {
            Self::Http(client) => Ok(Arc::clone(client) as Arc<dyn ModelProvider>),
            Self::Scripted(script) => Ok(Arc::new(script.for_agent(agent)?)),
        }
    }
}

/// `1 chunk`, `2 chunks`: a count with its noun, for messages.
pub(crate) fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
