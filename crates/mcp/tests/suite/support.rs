//! Shared helpers: a configuration naming the test server, a workspace, a tool context.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use troupe_mcp::{McpHub, McpServers, StartOptions, Started};
use troupe_protocol::{ErrorCode, SessionId};
use troupe_tools::{FileObservations, SandboxPolicy, ToolContext, ToolRegistry};

/// A TOML string literal of `text`.
pub fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// `[mcp_servers.<name>]` running the test server with `args`, plus the lines of `extra`.
pub fn server_table(name: &str, args: &[&str], extra: &str) -> String {
    let binary = troupe_test_support::mcp_server_binary();
    let args: Vec<String> = args.iter().map(|a| toml_string(a)).collect();
    format!(
        "[mcp_servers.{name}]\ncommand = {}\nargs = [{}]\n{extra}\n",
        toml_string(&binary.display().to_string()),
        args.join(", ")
    )
}

pub fn servers(toml: &str) -> McpServers {
    McpServers::from_toml_str(toml, "test.toml").unwrap()
}

pub fn options(workspace: &Path, sandbox: SandboxPolicy) -> StartOptions {
    StartOptions {
        workspace: workspace.to_path_buf(),
        sandbox,
        temp_dir: Some(workspace.join(".tmp-mcp")),
        secret_env: vec!["TROUPE_TEST_SECRET".to_owned()],
    }
}

pub async fn start(toml: &str, workspace: &Path) -> Started {
    McpHub::start(&servers(toml), &options(workspace, SandboxPolicy::OFF)).await
}

/// A registry holding the hub's tools, and a context in `workspace`.
pub fn registry(hub: &McpHub, workspace: &Path) -> (ToolRegistry, ToolContext) {
    let mut registry = ToolRegistry::new();
    for tool in hub.tools() {
        registry.register(tool).unwrap();
    }
    let ctx = ToolContext::new(
        workspace,
        SessionId::random(),
        Arc::new(FileObservations::new()),
    )
    .unwrap();
    (registry, ctx)
}

/// The outcome of one call: `Ok(value)` or `Err((code, message))`.
pub async fn call(
    registry: &ToolRegistry,
    ctx: &ToolContext,
    name: &str,
    args: Value,
) -> Result<Value, (String, String)> {
    registry
        .dispatch(ctx, name, args)
        .await
        .map_err(|e| (e.code().to_owned(), e.to_string()))
}
