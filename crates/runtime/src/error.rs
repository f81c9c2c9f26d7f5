use troupe_journal::JournalError;
use troupe_llm::LlmError;
use troupe_protocol::ErrorCode;
use troupe_session::InvalidEvent;

/// Errors of the agent runtime. Each maps to a stable code (see [`ErrorCode`]).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The session log failed (see the wrapped error's code, e.g. `JOURNAL_POISONED`).
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The model provider could not be set up or failed for good (the wrapped code, e.g.
    /// `LLM_AUTH`).
    #[error(transparent)]
    Model(#[from] LlmError),
    /// A runtime event in a log does not decode (or an inbox splice is out of range): the
    /// session model's [`InvalidEvent`] as the runtime reports it. Code
    /// `RUNTIME_INVALID_EVENT`.
    #[error("event {seq} ({kind}) is invalid: {reason}")]
    InvalidEvent {
        /// The event's seq.
        seq: u64,
        /// Its type.
        kind: String,
        /// What is wrong.
        reason: String,
    },
    /// The session has no `agent/config` record, so it cannot be resumed as an agent.
    /// Code `NOT_RESUMABLE`.
    #[error("session {id} cannot be resumed: {reason}")]
    NotResumable {
        /// The session.
        id: String,
        /// Why.
        reason: String,
    },
    /// A Team root whose Lead log breaks a Team rule (REFERENCE c.4–c.5): it is not resumed,
    /// and nothing is written to it. Code `TEAM_LOG_INVALID`.
    #[error("session {id} cannot be resumed: its Team log is invalid: {reason}")]
    TeamLog {
        /// The Lead's session.
        id: String,
        /// The broken rule, naming the event.
        reason: String,
    },
    /// A child id already names a live agent or a stored session (REFERENCE b.3).
    /// Code `DUPLICATE_CHILD`.
    #[error("child {id} already exists")]
    DuplicateChild {
        /// The id.
        id: String,
    },
    /// The caller is not the exact live parent (or ancestor) the operation requires
    /// (REFERENCE b.6–b.9). Code `UNAUTHORIZED`.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The caller cancelled the operation before it took effect. Code `CANCELLED`.
    #[error("{0}")]
    Cancelled(String),
    /// The agent or runtime was disposed. Code `AGENT_DISPOSED`.
    #[error("agent {0} is disposed")]
    Disposed(String),
    /// The workspace is unusable. Code `WORKSPACE_INVALID`.
    #[error("workspace {path}: {reason}")]
    Workspace {
        /// The path given.
        path: String,
        /// Why it is unusable.
        reason: String,
    },
    /// Disposing one or more child activations failed (REFERENCE b.8–b.9); every branch was
    /// still released. Code `ACTIVATION_TEARDOWN_FAILED`.
    #[error("activation teardown failed: {}", .0.join("; "))]
    TeardownFailed(Vec<String>),
    /// A teammate's git worktree could not be made (`--worktree`; the wrapped code, e.g.
    /// `WORKTREE_GIT_FAILED`).
    #[error(transparent)]
    Worktree(#[from] crate::worktree::WorktreeError),
    /// `interrupt_agent` of a teammate hosted by another process that stopped answering: its
    /// lease expired and its log shows the turn the host's death cut, so the interrupt did not
    /// reach it (the Team continues it as after a crash; interrupt it again there). Code
    /// `TEAM_HOST_LOST`.
    #[error("the host of teammate {id} stopped answering before it was interrupted: {reason}")]
    HostLost {
        /// The teammate.
        id: String,
        /// What was seen (the lease, the log).
        reason: String,
    },
}

impl ErrorCode for RuntimeError {
    fn code(&self) -> &'static str {
        match self {
            RuntimeError::Journal(e) => e.code(),
            RuntimeError::Model(e) => e.code(),
            RuntimeError::InvalidEvent { .. } => "RUNTIME_INVALID_EVENT",
            RuntimeError::NotResumable { .. } => "NOT_RESUMABLE",
            RuntimeError::TeamLog { .. } => "TEAM_LOG_INVALID",
            RuntimeError::DuplicateChild { .. } => "DUPLICATE_CHILD",
            RuntimeError::Unauthorized(_) => "UNAUTHORIZED",
            RuntimeError::Cancelled(_) => "CANCELLED",
            RuntimeError::Disposed(_) => "AGENT_DISPOSED",
            RuntimeError::Workspace { .. } => "WORKSPACE_INVALID",
            RuntimeError::Worktree(e) => e.code(),
            RuntimeError::TeardownFailed(_) => "ACTIVATION_TEARDOWN_FAILED",
            RuntimeError::HostLost { .. } => "TEAM_HOST_LOST",
        }
    }
}

impl From<InvalidEvent> for RuntimeError {
    fn from(InvalidEvent { seq, kind, reason }: InvalidEvent) -> Self {
        RuntimeError::InvalidEvent { seq, kind, reason }
    }
}

/// The text that says why a session log failed: for a writer poisoned by an earlier failure,
/// that first failure (the file and the OS error), else the error itself.
pub(crate) fn log_failure_text(error: &RuntimeError) -> String {
    match error {
        RuntimeError::Journal(JournalError::Poisoned { cause, .. }) => cause.clone(),
        other => other.to_string(),
    }
}

/// Whether `error` is a failure of the session log itself (a write, a sync or the file), as
/// opposed to a refusal of the operation.
pub(crate) fn is_log_failure(error: &RuntimeError) -> bool {
    matches!(
        error,
        RuntimeError::Journal(JournalError::Poisoned { .. } | JournalError::Io { .. })
    )
}
