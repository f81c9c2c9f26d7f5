//! The errors of the MCP crate, each with a stable code.

use troupe_protocol::ErrorCode;

/// Why an MCP configuration was refused. A front end reports it as bad input (exit 2) before
/// it writes anything.
#[derive(Debug, thiserror::Error)]
pub enum McpConfigError {
    /// The file could not be opened or read, is not a regular file, or is too large
    /// ([`MAX_CONFIG_BYTES`](crate::MAX_CONFIG_BYTES)). Code `MCP_CONFIG_UNREADABLE`.
    #[error("MCP config {path}: {reason}")]
    Unreadable {
        /// The path as given.
        path: String,
        /// The OS error or the reason.
        reason: String,
    },

    /// The text is not a valid configuration: `origin:line:column: message` (1-based). Code
    /// `MCP_CONFIG_INVALID`.
    #[error("{origin}:{line}:{column}: {message}")]
    Invalid {
        /// The file (or `the session's recorded MCP configuration`).
        origin: String,
        /// The line of the problem.
        line: usize,
        /// The column of the problem, in characters.
        column: usize,
        /// What is wrong, on one line.
        message: String,
    },
}

impl ErrorCode for McpConfigError {
    fn code(&self) -> &'static str {
        match self {
            Self::Unreadable { .. } => "MCP_CONFIG_UNREADABLE",
            Self::Invalid { .. } => "MCP_CONFIG_INVALID",
        }
    }
}

/// Why a server could not be used. Every message names the server.
///
/// A server that fails to start is reported by [`start`](crate::McpHub::start) and the run
/// goes on without its tools; a failed call is the tool call's error, seen by the model as
/// `{"code", "message"}`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    /// The server's program could not be started (it does not exist, is not executable, the
    /// sandbox could not be applied), or it exited or broke the protocol before it had listed
    /// its tools. Code `MCP_SERVER_START_FAILED`.
    #[error("MCP server `{server}` did not start: {reason}")]
    StartFailed {
        /// The server's name.
        server: String,
        /// Why, with the end of what it wrote to stderr when it wrote something.
        reason: String,
    },

    /// The server did not answer `initialize` and `tools/list` within its startup timeout; it
    /// was stopped. Code `MCP_SERVER_TIMEOUT`.
    #[error(
        "MCP server `{server}` did not start within {seconds} s (startup_timeout_sec); it was \
         stopped{stderr}"
    )]
    StartTimeout {
        /// The server's name.
        server: String,
        /// The timeout, in seconds.
        seconds: f64,
        /// `: <the end of its stderr>`, or empty.
        stderr: String,
    },

    /// The server is no longer running (it exited or closed its stdout): the call was not
    /// made, or got no answer. Troupe does not restart it within a run; `troupe resume`
    /// starts it again. Code `MCP_SERVER_UNAVAILABLE`.
    #[error("MCP server `{server}` is not running: {reason}")]
    Unavailable {
        /// The server's name.
        server: String,
        /// How it ended (exit status, end of its stderr).
        reason: String,
    },

    /// The call took longer than the server's `tool_timeout_sec`; it was cancelled
    /// (`notifications/cancelled`). Its effect, if any, is unknown. Code `MCP_TOOL_TIMEOUT`.
    #[error(
        "MCP tool `{tool}` of server `{server}` did not answer within {seconds} s \
         (tool_timeout_sec); the call was cancelled"
    )]
    ToolTimeout {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// The timeout, in seconds.
        seconds: f64,
    },

    /// The tool ran and reported an error (`isError: true`): its text. Code
    /// `MCP_TOOL_ERROR`.
    #[error("MCP tool `{tool}` of server `{server}` failed: {message}")]
    ToolError {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// The text the tool returned.
        message: String,
    },

    /// The server refused the request (a JSON-RPC error, e.g. invalid parameters) or answered
    /// something that is not a tool result. Code `MCP_REQUEST_FAILED`.
    #[error("MCP tool `{tool}` of server `{server}`: {message}")]
    RequestFailed {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// The server's error.
        message: String,
    },
}

impl ErrorCode for McpError {
    fn code(&self) -> &'static str {
        match self {
            Self::StartFailed { .. } => "MCP_SERVER_START_FAILED",
            Self::StartTimeout { .. } => "MCP_SERVER_TIMEOUT",
            Self::Unavailable { .. } => "MCP_SERVER_UNAVAILABLE",
            Self::ToolTimeout { .. } => "MCP_TOOL_TIMEOUT",
            Self::ToolError { .. } => "MCP_TOOL_ERROR",
            Self::RequestFailed { .. } => "MCP_REQUEST_FAILED",
        }
    }
}

impl From<McpError> for troupe_tools::ToolError {
    fn from(error: McpError) -> Self {
        troupe_tools::ToolError::other(error.code(), error.to_string())
    }
}
