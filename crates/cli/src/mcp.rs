//! `--mcp-config FILE` (`run`, `resume`, `demo`): which MCP servers a run starts, and starting
//! them. The configuration itself is read by `troupe_mcp::McpServers` (one module for every
//! source of it); this is only the command's side.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use serde_json::Value;
use troupe_mcp::{McpHub, McpServers, StartOptions};
use troupe_tools::SandboxPolicy;

use crate::exit::Failure;

/// How long stopping the servers may take at the end of a run.
pub(crate) const STOP_LIMIT: Duration = Duration::from_secs(10);

/// The servers of a new session: those of `--mcp-config FILE`, or none. An unreadable or
/// invalid file is bad input (exit 2, one line naming file:line:column), before anything is
/// written.
pub(crate) fn for_new(flag: Option<&Path>) -> Result<Option<McpServers>, Failure> {
    flag.map(McpServers::load)
        .transpose()
        .map_err(Failure::bad_input)
}

/// The servers of a resumed session: those of `--mcp-config FILE` when given (recorded from
/// then on), otherwise the recorded ones. A recorded configuration this build cannot read is
/// damaged session content (exit 1).
pub(crate) fn for_resume(
    flag: Option<&Path>,
    recorded: Option<&Value>,
) -> Result<Option<McpServers>, Failure> {
    if flag.is_some() {
        return for_new(flag);
    }
    recorded
        .map(McpServers::from_record)
        .transpose()
        .map_err(|e| Failure::work(anyhow!("the session's MCP servers cannot be read: {e}")))
}

/// Starts `servers` (nothing when `None`) in `workspace`, under `sandbox` (the Lead's
/// policy), with the Lead's temporary directory, without the API key variables. Returns the
/// hub and the lines to show: one per server that did not start (the run goes on without its
/// tools), one per tool left out, and one per server that started, with its tools.
pub(crate) async fn start(
    servers: Option<&McpServers>,
    workspace: PathBuf,
    sandbox: SandboxPolicy,
    temp_dir: PathBuf,
    secret_env: Vec<String>,
) -> (McpHub, Vec<String>) {
    let Some(servers) = servers.filter(|s| !s.is_empty()) else {
        return (McpHub::default(), Vec::new());
    };
    let options = StartOptions {
        workspace,
        sandbox,
        temp_dir: Some(temp_dir),
        secret_env,
    };
    let started = McpHub::start(servers, &options).await;
    let mut lines: Vec<String> = started
        .failures
        .iter()
        .map(|e| format!("troupe: warning: {e}; the run goes on without its tools"))
        .collect();
    lines.extend(
        started
            .warnings
            .iter()
            .map(|w| format!("troupe: warning: {w}")),
    );
    let names = started.hub.tool_names();
    for server in started.hub.server_names() {
        let prefix = format!("{}{server}__", troupe_mcp::TOOL_PREFIX);
        let tools: Vec<&str> = names
            .iter()
            .filter_map(|name| name.strip_prefix(&prefix))
            .collect();
        lines.push(format!(
            "mcp: server {server} runs ({sandbox}); its tools: {}",
            if tools.is_empty() {
                "none".to_owned()
            } else {
                format!("{prefix}{{{}}}", tools.join(", "))
            }
        ));
    }
    (started.hub, lines)
}
