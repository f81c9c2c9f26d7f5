//! The error type of model calls and configuration, with stable codes.

use std::time::Duration;

use troupe_protocol::ErrorCode;
use troupe_session::chat::{FinishReason, TruncatedCall};

/// Everything that can go wrong while configuring or calling a model.
///
/// Each variant has a stable `SCREAMING_SNAKE` code ([`ErrorCode::code`]). "Retried" says
/// whether the HTTP client retries it by itself (within
/// [`RetryPolicy::max_attempts`](crate::RetryPolicy::max_attempts)); an error that reaches the
/// caller has either exhausted its attempts or is not retried. Messages are one line and never
/// contain the client's API key: text taken from a server's answer (which may echo the key) is
/// redacted to `***` before an error leaves the client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// `LLM_CONFIG`: the model configuration is unusable — unknown provider, missing API key,
    /// bad base URL, unreadable script path. Returned by [`ModelSpec`](crate::ModelSpec)
    /// parsing/resolution and by client construction. Never retried.
    #[error("{message}")]
    Config {
        /// What is wrong, naming the flag or environment variable to fix.
        message: String,
    },

    /// `LLM_AUTH`: the server refused the credentials (HTTP 401 or 403). Returned by the HTTP
    /// client. Never retried. The message says to check the API key and names its environment
    /// variable.
    #[error("{message}")]
    Auth {
        /// The HTTP status (401 or 403).
        status: u16,
        /// "… check your API key (`VAR`)" plus the server's own words.
        message: String,
    },

    /// `LLM_RATE_LIMITED`: HTTP 429 (other than an exhausted quota). Returned by the HTTP client
    /// once its attempts are exhausted. Retried, after `Retry-After` when the server sends it.
    #[error("{message}")]
    RateLimited {
        /// The server's message.
        message: String,
        /// The server's `Retry-After` / `retry-after-ms`, in ms, when present.
        retry_after_ms: Option<u64>,
    },

    /// `LLM_QUOTA`: the account cannot pay for the call (HTTP 402, or 429 with
    /// `insufficient_quota`). Returned by the HTTP client. Never retried.
    #[error("{message}")]
    Quota {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },

    /// `LLM_CONTEXT_LENGTH`: the request is longer than the model's context window (OpenAI code
    /// `context_length_exceeded`, DeepSeek and others' "maximum context length" messages, HTTP
    /// 413). Returned by the HTTP client. Never retried: the caller must shorten the history.
    #[error("{message}")]
    ContextLength {
        /// The server's message.
        message: String,
    },

    /// `LLM_BAD_REQUEST`: any other refused request (HTTP 400, 404, 422, …): wrong model name,
    /// wrong base URL, a malformed history; also a server that says it cannot take tools
    /// until restarted (`llama-server` without `--jinja`: HTTP 500 naming the flag). Returned
    /// by the HTTP client. Never retried.
    #[error("{message}")]
    BadRequest {
        /// The HTTP status.
        status: u16,
        /// The server's message, with a hint for 404.
        message: String,
    },

    /// `LLM_SERVER`: the server failed (HTTP 5xx, 408, 409) or sent an error object inside a
    /// stream. Returned by the HTTP client once its attempts are exhausted. Retried.
    #[error("{message}")]
    Server {
        /// The HTTP status (200 when the error came inside a stream).
        status: u16,
        /// The server's message.
        message: String,
        /// The server's `Retry-After`, in ms, when present.
        retry_after_ms: Option<u64>,
    },

    /// `LLM_NETWORK`: the server could not be reached or the connection failed before a response
    /// (DNS, refused connection, TLS, reset). Returned by the HTTP client once its attempts are
    /// exhausted. Retried.
    #[error("{message}")]
    Network {
        /// What failed, with the URL (never the key).
        message: String,
    },

    /// `LLM_STREAM_DROPPED`: the response stream ended or broke before the model finished (no
    /// `[DONE]` and no `finish_reason`). Returned by the HTTP client once its attempts are
    /// exhausted. Retried.
    #[error("{message}")]
    StreamDropped {
        /// What was seen before the end.
        message: String,
    },

    /// `LLM_EMPTY_STREAM`: the server answered a streamed request with HTTP 200 but its event
    /// stream ended, or broke, before the first event (llama-cpp-python does this for a
    /// streamed request with `tool_choice: "auto"`). Not retried as such: the HTTP client
    /// records it as the failed attempt's error and at once asks once more *without*
    /// streaming, so a caller sees it only in [`Attempt`](crate::Attempt)s and
    /// [`StreamEvent::AttemptFailed`](crate::StreamEvent::AttemptFailed), never as the result.
    #[error("{message}")]
    EmptyStream {
        /// What arrived (the status) and what the client does next.
        message: String,
    },

    /// `LLM_IDLE_TIMEOUT`: no byte arrived for
    /// [`ClientOptions::idle_timeout_ms`](crate::ClientOptions::idle_timeout_ms) while waiting
    /// for the response or the next chunk. Returned by the HTTP client once its attempts are
    /// exhausted. Retried.
    #[error("the model server sent nothing for {idle_ms} ms (idle timeout)")]
    IdleTimeout {
        /// The idle timeout that expired, in ms.
        idle_ms: u64,
    },

    /// `LLM_CANCELLED`: the caller's cancellation token fired. Returned promptly by every
    /// provider, mid-stream or during a backoff wait. Never retried.
    #[error("the model call was cancelled")]
    Cancelled,

    /// `LLM_PROTOCOL`: the server answered something that is not a chat completion (bad JSON,
    /// no choices, a tool call without a name). Returned by the HTTP client. Never retried.
    #[error("{message}")]
    Protocol {
        /// What could not be understood.
        message: String,
    },

    /// `LLM_TRUNCATED_TOOL_CALL`: a tool call's argument string is not valid JSON. The call is
    /// never dispatched with made-up arguments. Returned by the HTTP client when the answer was
    /// *not* cut by the output token limit (a call cut by `finish_reason: length` is returned as
    /// a [`TruncatedCall`](crate::TruncatedCall) instead), and built by callers that give up on
    /// repeatedly truncated answers (`LlmError::from(&TruncatedCall)`).
    /// Never retried.
    #[error(
        "the model's call of tool `{name}` (id {id}) has truncated or invalid JSON arguments ({arguments_len} bytes{finish}): {reason}",
        finish = finish_reason.as_deref().map(|reason| format!(", finish_reason {reason}")).unwrap_or_default()
    )]
    TruncatedToolCall {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// Length of the raw argument string, in bytes.
        arguments_len: usize,
        /// The finish reason of the response, when there was one (`length` means the output
        /// token limit cut it).
        finish_reason: Option<String>,
        /// The JSON parser's complaint.
        reason: String,
    },

    /// `LLM_SCRIPT`: the scripted provider cannot answer — malformed script file, unknown agent,
    /// exhausted script, resume cursor past the end. Returned by
    /// [`ScriptedProvider`](crate::ScriptedProvider). Never retried.
    #[error("{message}")]
    Script {
        /// What is wrong, naming the file and the agent.
        message: String,
    },
}

impl LlmError {
    /// Whether the HTTP client retries this error by itself.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. }
                | Self::Server { .. }
                | Self::Network { .. }
                | Self::StreamDropped { .. }
                | Self::IdleTimeout { .. }
        )
    }

    /// The wait the server asked for (`Retry-After`), when it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after_ms, .. } | Self::Server { retry_after_ms, .. } => {
                retry_after_ms.map(Duration::from_millis)
            }
            _ => None,
        }
    }

    /// The same error with every occurrence of `secret` in its text replaced by `***`.
    /// Servers may echo what they were sent (e.g. a 401 body quoting `Bearer sk-…`), so the
    /// HTTP client applies this with its own key to every error before it leaves the client.
    /// An empty `secret` changes nothing.
    pub(crate) fn redacted(self, secret: &str) -> Self {
        if secret.is_empty() {
            return self;
        }
        let clean = |text: String| {
            if text.contains(secret) {
                text.replace(secret, "***")
            } else {
                text
            }
        };
        match self {
            Self::Config { message } => Self::Config {
                message: clean(message),
            },
            Self::Auth { status, message } => Self::Auth {
                status,
                message: clean(message),
            },
            Self::RateLimited {
                message,
                retry_after_ms,
            } => Self::RateLimited {
                message: clean(message),
                retry_after_ms,
            },
            Self::Quota { status, message } => Self::Quota {
                status,
                message: clean(message),
            },
            Self::ContextLength { message } => Self::ContextLength {
                message: clean(message),
            },
            Self::BadRequest { status, message } => Self::BadRequest {
                status,
                message: clean(message),
            },
            Self::Server {
                status,
                message,
                retry_after_ms,
            } => Self::Server {
                status,
                message: clean(message),
                retry_after_ms,
            },
            Self::Network { message } => Self::Network {
                message: clean(message),
            },
            Self::StreamDropped { message } => Self::StreamDropped {
                message: clean(message),
            },
            Self::EmptyStream { message } => Self::EmptyStream {
                message: clean(message),
            },
            Self::Protocol { message } => Self::Protocol {
                message: clean(message),
            },
            Self::TruncatedToolCall {
                id,
                name,
                arguments_len,
                finish_reason,
                reason,
            } => Self::TruncatedToolCall {
                id: clean(id),
                name: clean(name),
                arguments_len,
                finish_reason: finish_reason.map(clean),
                reason: clean(reason),
            },
            Self::Script { message } => Self::Script {
                message: clean(message),
            },
            Self::IdleTimeout { .. } | Self::Cancelled => self,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::Config {
            message: message.into(),
        }
    }

    pub(crate) fn script(message: impl Into<String>) -> Self {
        Self::Script {
            message: message.into(),
        }
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Self::Protocol {
            message: message.into(),
        }
    }
}

impl From<&TruncatedCall> for LlmError {
    /// The call as [`LlmError::TruncatedToolCall`] (`LLM_TRUNCATED_TOOL_CALL`), with finish
    /// reason `length`: what a caller reports when it gives up on truncated answers.
    fn from(call: &TruncatedCall) -> Self {
        Self::TruncatedToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments_len: call.arguments.len(),
            finish_reason: Some(FinishReason::Length.as_str().to_owned()),
            reason: call.reason.clone(),
        }
    }
}

impl ErrorCode for LlmError {
    fn code(&self) -> &'static str {
        match self {
            Self::Config { .. } => "LLM_CONFIG",
            Self::Auth { .. } => "LLM_AUTH",
            Self::RateLimited { .. } => "LLM_RATE_LIMITED",
            Self::Quota { .. } => "LLM_QUOTA",
            Self::ContextLength { .. } => "LLM_CONTEXT_LENGTH",
            Self::BadRequest { .. } => "LLM_BAD_REQUEST",
            Self::Server { .. } => "LLM_SERVER",
            Self::Network { .. } => "LLM_NETWORK",
            Self::StreamDropped { .. } => "LLM_STREAM_DROPPED",
            Self::EmptyStream { .. } => "LLM_EMPTY_STREAM",
            Self::IdleTimeout { .. } => "LLM_IDLE_TIMEOUT",
            Self::Cancelled => "LLM_CANCELLED",
            Self::Protocol { .. } => "LLM_PROTOCOL",
            Self::TruncatedToolCall { .. } => "LLM_TRUNCATED_TOOL_CALL",
            Self::Script { .. } => "LLM_SCRIPT",
        }
    }
}
