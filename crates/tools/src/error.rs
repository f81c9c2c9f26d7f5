//! The tool error type and its model-facing JSON form.

use std::io;

use serde_json::{Value, json};
use troupe_protocol::ErrorCode;

use crate::sandbox::SandboxError;

/// The remedy appended to `FS_STALE_VERSION` messages shown to the model (REFERENCE a.12).
pub const STALE_VERSION_REMEDY: &str = " — re-read the file, then retry";

/// The remedy appended to `FS_NOT_OBSERVED` messages shown to the model (REFERENCE a.12).
pub const NOT_OBSERVED_REMEDY: &str = " — read the file, then retry";

/// Why a tool call failed.
///
/// Every variant has a stable `SCREAMING_SNAKE` code (see [`ErrorCode::code`]) that the model
/// sees in `{"code": "...", "message": "..."}` (built by [`ToolError::to_json`]). The
/// [`Display`](std::fmt::Display) text is the plain message; the model-facing message
/// ([`ToolError::model_message`]) adds a remedy for the two stale-version codes.
///
/// None of these errors is retried by the tool layer: they are returned to the model, which
/// decides what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The registry has no tool with this name (returned by
    /// [`ToolRegistry::dispatch`](crate::ToolRegistry::dispatch)). Code `UNKNOWN_TOOL`.
    #[error("unknown tool \"{name}\"")]
    UnknownTool {
        /// The name the model asked for.
        name: String,
    },

    /// The arguments are not a JSON object, miss a required field, carry an unknown field,
    /// have a value of the wrong type or out of range. The message names the field.
    /// Code `INVALID_ARGUMENTS`.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),

    /// The path resolves outside the workspace: a `..` escape, an absolute path elsewhere, or
    /// a symlink (possibly a parent directory of a not-yet-existing file) whose target leaves
    /// the workspace. Code `FS_PATH_OUTSIDE_WORKSPACE`.
    #[error(
        "path \"{path}\" is outside the workspace (it resolves to {resolved}); only paths inside {workspace} are allowed"
    )]
    PathOutsideWorkspace {
        /// The path as the model gave it.
        path: String,
        /// Where it resolves to.
        resolved: String,
        /// The canonical workspace root.
        workspace: String,
    },

    /// The file or directory does not exist. Code `FS_NOT_FOUND`.
    #[error("{path}: no such file or directory")]
    NotFound {
        /// The workspace-relative path.
        path: String,
    },

    /// A file was expected but the path is a directory. Code `FS_IS_DIRECTORY`.
    #[error("{path} is a directory, not a file")]
    IsDirectory {
        /// The workspace-relative path.
        path: String,
    },

    /// A directory was expected but the path is a file. Code `FS_NOT_A_DIRECTORY`.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// The workspace-relative path.
        path: String,
    },

    /// The path is neither a regular file nor a directory (a FIFO, socket or device), which
    /// the file tools never open. Code `FS_NOT_A_FILE`.
    #[error("{path} is not a regular file (FIFO, socket or device)")]
    NotAFile {
        /// The workspace-relative path.
        path: String,
    },

    /// The file is not UTF-8 text (it contains a NUL byte or invalid UTF-8), so `read` and
    /// `edit` refuse it. Code `FS_NOT_TEXT`.
    #[error("{path} is not UTF-8 text (binary file?); use bash to inspect it")]
    NotText {
        /// The workspace-relative path.
        path: String,
    },

    /// `edit` found no occurrence of `old_string`. Code `FS_EDIT_NOT_FOUND`.
    #[error(
        "old_string was not found in {path}; it must match the file exactly, including whitespace"
    )]
    EditNotFound {
        /// The workspace-relative path.
        path: String,
    },

    /// `edit` found several occurrences of `old_string` and `replace_all` was not set.
    /// Code `FS_AMBIGUOUS_EDIT`.
    #[error(
        "old_string occurs {count} times in {path}; include more surrounding context to make it unique, or set replace_all"
    )]
    AmbiguousEdit {
        /// The workspace-relative path.
        path: String,
        /// How many occurrences were found.
        count: usize,
    },

    /// The file changed, was created or was deleted since this session last observed it
    /// (REFERENCE a.12). Code `FS_STALE_VERSION`; the model-facing message appends
    /// [`STALE_VERSION_REMEDY`].
    #[error("{path} {reason} since this session last read it")]
    StaleVersion {
        /// The workspace-relative path.
        path: String,
        /// What happened, e.g. `"changed"` or `"was deleted"`.
        reason: &'static str,
    },

    /// A file exists for which this session has no read on record, so `write`/`edit` refuse to
    /// touch it (REFERENCE a.12). Code `FS_NOT_OBSERVED`; the model-facing message appends
    /// [`NOT_OBSERVED_REMEDY`].
    ///
    /// Observations live in memory; a runtime rebuilds them from its logs after a restart
    /// ([`crate::restore_observations`]), and a file that could not be checked then stays
    /// unseen, so the message speaks of the record rather than claiming the file was never
    /// read.
    #[error("{path} exists but no read of this file is on record for this agent")]
    NotObserved {
        /// The workspace-relative path.
        path: String,
    },

    /// An operating-system error while touching a file. Code `FS_IO`.
    #[error("{path}: {source}")]
    Io {
        /// The workspace-relative (or absolute) path involved.
        path: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// `bash` could not start the shell. Code `BASH_SPAWN_FAILED`.
    #[error("could not start bash: {0}")]
    BashSpawn(#[source] io::Error),

    /// The `bash` sandbox could not be applied, so the command did not run: this kernel cannot
    /// enforce the policy, or a path of its rules is unusable. Code: the inner error's
    /// (`SANDBOX_UNSUPPORTED`, `SANDBOX_SETUP_FAILED`, …).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),

    /// The call was canceled through the context's cancellation token (a running `bash`
    /// command's process group was killed). Code `TOOL_CANCELED`.
    #[error("the tool call was canceled")]
    Canceled,

    /// `bash` was asked to run a command outside the sandbox (`escalate: true`) without an
    /// approval in its context ([`ToolContext::with_escalation`](crate::ToolContext::with_escalation)):
    /// the session does not take approvals (`--approval never`), so nothing ran. Code
    /// `APPROVAL_DISABLED`.
    #[error(
        "escalate: true asks the user to run one command outside the sandbox, but this session \
         runs with --approval never, so nothing runs outside the sandbox (the command did not \
         run). Run it without escalate, inside the sandbox, or tell the user what needs more \
         (they can resume the session with --approval on-request)"
    )]
    EscalationRefused,

    /// A bug or a panic inside a tool. Code `TOOL_INTERNAL_ERROR`.
    #[error("internal tool error: {0}")]
    Internal(String),

    /// An error of a tool defined outside this crate, with its own stable code (for example a
    /// Team tool's `TEAM_TASK_STALE_REVISION`). Build it with [`ToolError::other`].
    #[error("{message}")]
    Other {
        /// The stable `SCREAMING_SNAKE` code.
        code: &'static str,
        /// The human-readable message.
        message: String,
    },
}

impl ToolError {
    /// An error with a caller-chosen stable code, for tools defined in other crates.
    pub fn other(code: &'static str, message: impl Into<String>) -> Self {
        ToolError::Other {
            code,
            message: message.into(),
        }
    }

    /// An [`InvalidArguments`](ToolError::InvalidArguments) error.
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        ToolError::InvalidArguments(message.into())
    }

    /// The remedy the model is told for this error, if any: [`STALE_VERSION_REMEDY`] for
    /// `FS_STALE_VERSION`, [`NOT_OBSERVED_REMEDY`] for `FS_NOT_OBSERVED`, none otherwise.
    pub fn remedy(&self) -> Option<&'static str> {
        match self {
            ToolError::StaleVersion { .. } => Some(STALE_VERSION_REMEDY),
            ToolError::NotObserved { .. } => Some(NOT_OBSERVED_REMEDY),
            _ => None,
        }
    }

    /// The message shown to the model: the plain message plus the [remedy](Self::remedy).
    pub fn model_message(&self) -> String {
        match self.remedy() {
            Some(remedy) => format!("{self}{remedy}"),
            None => self.to_string(),
        }
    }

    /// The model-facing JSON: `{"code": "<CODE>", "message": "<model message>"}`.
    pub fn to_json(&self) -> Value {
        json!({ "code": self.code(), "message": self.model_message() })
    }
}

impl ErrorCode for ToolError {
    fn code(&self) -> &'static str {
        match self {
            ToolError::UnknownTool { .. } => "UNKNOWN_TOOL",
            ToolError::InvalidArguments(_) => "INVALID_ARGUMENTS",
            ToolError::PathOutsideWorkspace { .. } => "FS_PATH_OUTSIDE_WORKSPACE",
            ToolError::NotFound { .. } => "FS_NOT_FOUND",
            ToolError::IsDirectory { .. } => "FS_IS_DIRECTORY",
            ToolError::NotADirectory { .. } => "FS_NOT_A_DIRECTORY",
            ToolError::NotAFile { .. } => "FS_NOT_A_FILE",
            ToolError::NotText { .. } => "FS_NOT_TEXT",
            ToolError::EditNotFound { .. } => "FS_EDIT_NOT_FOUND",
            ToolError::AmbiguousEdit { .. } => "FS_AMBIGUOUS_EDIT",
            ToolError::StaleVersion { .. } => "FS_STALE_VERSION",
            ToolError::NotObserved { .. } => "FS_NOT_OBSERVED",
            ToolError::Io { .. } => "FS_IO",
            ToolError::BashSpawn(_) => "BASH_SPAWN_FAILED",
            ToolError::Sandbox(error) => error.code(),
            ToolError::Canceled => "TOOL_CANCELED",
            ToolError::EscalationRefused => "APPROVAL_DISABLED",
            ToolError::Internal(_) => "TOOL_INTERNAL_ERROR",
            ToolError::Other { code, .. } => code,
        }
    }
}

/// Why [`ToolRegistry::register`](crate::ToolRegistry::register) refused a tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// A tool with the same name is already in the registry. Code `DUPLICATE_TOOL`.
    #[error("tool \"{0}\" is already registered")]
    Duplicate(String),

    /// The name is not 1–64 characters of `[A-Za-z0-9_-]` (what OpenAI-compatible servers
    /// accept). Code `INVALID_TOOL_NAME`.
    #[error("invalid tool name \"{0}\": use 1-64 characters from [A-Za-z0-9_-]")]
    InvalidName(String),
}

impl ErrorCode for RegistryError {
    fn code(&self) -> &'static str {
        match self {
            RegistryError::Duplicate(_) => "DUPLICATE_TOOL",
            RegistryError::InvalidName(_) => "INVALID_TOOL_NAME",
        }
    }
}
