//! MCP servers as tools: the `[mcp_servers.<name>]` configuration, the servers' processes and
//! their tools, offered to every member as `mcp__<server>__<tool>`.
//!
//! # Shape
//! - [`McpServers`] ([`config`]): the configured servers, read from TOML
//!   ([`McpServers::load`], [`McpServers::from_toml_str`]; bad input is
//!   [`McpConfigError`], `MCP_CONFIG_INVALID` with `file:line:column`) and recorded in a
//!   session's `agent/config` ([`McpServers::to_record`] / [`McpServers::from_record`]), so a
//!   resume starts the same servers.
//! - [`McpHub`]: the servers of one process. [`McpHub::start`] connects to each through
//!   `rmcp`'s client — stdio (a program Troupe starts under the session's sandbox with
//!   `troupe_tools::sandbox::spawn_confined`, the spawn path of `bash`; JSON-RPC on its stdin
//!   and stdout) or streamable HTTP (a URL, with an optional bearer token from the
//!   environment) — and lists their tools; [`McpHub::tools`] are [`McpTool`]s for the runtime's
//!   `extra_tools`; [`McpHub::shutdown`] stops them.
//! - [`McpError`]: why a server or a call failed, always naming the server
//!   (`MCP_SERVER_START_FAILED`, `MCP_SERVER_TIMEOUT`, `MCP_SERVER_UNAVAILABLE`,
//!   `MCP_TOOL_TIMEOUT`, `MCP_TOOL_ERROR`, `MCP_REQUEST_FAILED`).
//!
//! # Invariants
//! - Nothing here hangs: a start is bounded by each server's `startup_timeout_sec`, a call by
//!   its `tool_timeout_sec` and the member's cancellation; a server that dies makes its calls
//!   fail with `MCP_SERVER_UNAVAILABLE` at once.
//! - Every server process runs under the policy it was given, never weaker (the same
//!   Landlock ruleset as `bash`; a kernel that cannot enforce it fails the start).
//! - This crate writes no log and knows no session: the runtime records MCP calls like any
//!   tool call, and recovery treats them as effects outside Troupe's knowledge
//!   (`TOOL_OUTCOME_UNKNOWN`, never run again).
//! - A bearer token is read from the environment when the server is started and is never
//!   recorded or shown.

pub mod config;
mod error;
mod hub;
mod tool;

pub use config::{
    DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, MAX_CONFIG_BYTES, McpServers, ServerConfig,
    ServerName, Transport, plain_message,
};
pub use error::{McpConfigError, McpError};
pub use hub::{McpHub, StartOptions, Started};
pub use tool::{McpTool, TOOL_PREFIX, tool_name};
