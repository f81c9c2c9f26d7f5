//! The errors of the session model, each with a stable code: an event that does not decode
//! ([`InvalidEvent`]) and a name or setting that does not parse ([`ParseError`]).

use troupe_protocol::ErrorCode;

/// A runtime event in a log does not decode (or an inbox splice is out of range): what
/// [`Transcript::apply`](crate::Transcript::apply) refuses. The runtime reports it as its
/// `RuntimeError::InvalidEvent` (the same fields and code). Code `RUNTIME_INVALID_EVENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {seq} ({kind}) is invalid: {reason}")]
pub struct InvalidEvent {
    /// The event's seq.
    pub seq: u64,
    /// Its type.
    pub kind: String,
    /// What is wrong.
    pub reason: String,
}

impl ErrorCode for InvalidEvent {
    fn code(&self) -> &'static str {
        "RUNTIME_INVALID_EVENT"
    }
}

/// A name or setting of the session model spelled in a way this build does not know (typed by
/// a user or a model). Each variant has a stable `SCREAMING_SNAKE` code ([`ErrorCode::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A child provider name that is not `spawn` or `fork`
    /// ([`ChildProvider::parse`](crate::events::ChildProvider::parse)). Code `UNKNOWN_PROVIDER`.
    #[error("child provider {0:?} does not support continuable children (use spawn or fork)")]
    UnknownProvider(String),
    /// `--sandbox` or `--network` got a value it does not know
    /// ([`SandboxMode::parse`](crate::sandbox::SandboxMode::parse),
    /// [`NetworkAccess::parse`](crate::sandbox::NetworkAccess::parse)). Code
    /// `SANDBOX_UNKNOWN_MODE`.
    #[error("unknown sandbox setting \"{given}\" (expected one of: {allowed})")]
    UnknownSandboxSetting {
        /// The text given.
        given: String,
        /// The values allowed.
        allowed: &'static str,
    },
    /// `--tool-choice` got a value that is not `auto`, `required`, `none` or `omit` (the
    /// [`ToolChoice`](crate::model::ToolChoice) parser). Code `LLM_CONFIG`, as every other
    /// unusable model configuration.
    #[error("--tool-choice `{0}` is not one of auto, required, none, omit")]
    UnknownToolChoice(String),
    /// `--approval` (or the files' `approval`) got a value that is not `never` or `on-request`
    /// ([`ApprovalMode::parse`](crate::approval::ApprovalMode::parse)). Code
    /// `APPROVAL_UNKNOWN_MODE`.
    #[error("unknown approval mode {0:?}: use never or on-request")]
    UnknownApprovalMode(String),
}

impl ErrorCode for ParseError {
    fn code(&self) -> &'static str {
        match self {
            Self::UnknownProvider(_) => "UNKNOWN_PROVIDER",
            Self::UnknownSandboxSetting { .. } => "SANDBOX_UNKNOWN_MODE",
            Self::UnknownToolChoice(_) => "LLM_CONFIG",
            Self::UnknownApprovalMode(_) => "APPROVAL_UNKNOWN_MODE",
        }
    }
}
