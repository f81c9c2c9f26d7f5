//! Test helpers: loopback fake OpenAI server, real NATS servers, temp workspaces, fixed clock
//! and ids. Never shipped in the binary.
//!
//! - [`fake_openai`]: a fake OpenAI-compatible chat-completions server on `127.0.0.1` with a
//!   scripted response queue and a record of every request.
//! - [`nats`]: real `nats-server` processes (one node, or a three-node cluster) on free
//!   loopback ports with temporary store directories, killed when dropped.
//! - [`mcp_server`]: the test MCP server (a real MCP server built with rmcp's server side:
//!   `echo`, `add`, `fail`, `sleep`, `write_file`, `env`, `exit`): a stdio binary, built on
//!   first use by [`mcp_server_binary`], and [`McpHttpServer`] over streamable HTTP.
//! - [`layering`]: the arrows between a crate's source files and whether they form a circle.

pub mod fake_openai;
pub mod layering;
pub mod mcp_server;
pub mod nats;

pub use fake_openai::{FakeOpenAi, FakeResponse, Mimic, RecordedRequest, StreamEnd, StreamedTools};
pub use mcp_server::{MCP_SERVER_BIN, McpHttpServer, mcp_server_binary};
pub use nats::NatsServer;
