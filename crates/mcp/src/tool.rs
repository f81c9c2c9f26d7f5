//! One MCP server tool as a Troupe [`Tool`].

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use troupe_tools::{Tool, ToolContext, ToolError, ToolFuture, truncation_marker};

use crate::error::McpError;
use crate::hub::{Server, describe_service_error, is_disconnect};

/// The prefix of every MCP tool's name.
pub const TOOL_PREFIX: &str = "mcp__";

/// The longest tool name models accept (OpenAI's function names: `^[A-Za-z0-9_-]{1,64}$`).
const MAX_TOOL_NAME: usize = 64;

/// The name a member calls the server's tool by: `mcp__<server>__<tool>` — the form Codex and
/// Claude Code use, so their users recognise it; server names cannot contain `__` or end in
/// `_`, so the name says which server a tool belongs to. Characters of the tool's own name
/// outside `[A-Za-z0-9_-]` become `_`; a name longer than 64 characters keeps its first 55 and
/// ends with `_` and 8 hex digits of the SHA-256 of the server's tool name, so it stays unique.
pub fn tool_name(server: &str, tool: &str) -> String {
    let cleaned: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let full = format!("{TOOL_PREFIX}{server}__{cleaned}");
    if full.len() <= MAX_TOOL_NAME {
        return full;
    }
    let digest = Sha256::digest(tool.as_bytes());
    let hex: String = digest
        .iter()
        .take(4)
        .map(|byte| format!("{byte:02x}"))
        .collect();
    // `full` is ASCII, so any byte index is a character boundary.
    format!("{}_{hex}", &full[..MAX_TOOL_NAME - 9])
}

/// A tool of a running MCP server, offered to every member under [`tool_name`].
///
/// Its parameters are the server's input schema as the server gave it (the model sees it; the
/// server checks the arguments). A call is one `tools/call` request with the member's JSON
/// object as `arguments`, bounded by the server's `tool_timeout_sec`, cancelled
/// (`notifications/cancelled`) when the member's turn is.
///
/// Result: the server's `CallToolResult` without `isError`, `resultType` and `_meta`, i.e.
/// `{"content": [<content blocks>], "structuredContent"?: …}`; when that is longer than the
/// context's `output_cap_bytes`, `{"truncated": true, "text": <its head and tail around a
/// truncation marker>}`.
///
/// Errors: `MCP_TOOL_ERROR` (the tool reported an error: its text, plus the sandbox note of
/// `troupe_tools::sandbox_note` when it reports a denied operation), `MCP_REQUEST_FAILED`
/// (the server refused the request), `MCP_TOOL_TIMEOUT`, `MCP_SERVER_UNAVAILABLE` (the server
/// exited: how, and the end of its stderr), `TOOL_CANCELED`, `INVALID_ARGUMENTS` (not an
/// object; raised by the registry).
///
/// Durability (the runtime's, DESIGN decision 10): the member's `tool/call` is durable before
/// the request is sent; a crash before its `tool/result` is durable leaves the outcome
/// `TOOL_OUTCOME_UNKNOWN` on resume (the effect is the server's, outside Troupe's knowledge),
/// and the call is not repeated.
pub struct McpTool {
    name: String,
    remote: String,
    description: String,
    parameters: Value,
    server: Arc<Server>,
}

impl McpTool {
    pub(crate) fn new(
        name: String,
        remote: String,
        description: String,
        parameters: Value,
        server: Arc<Server>,
    ) -> Self {
        Self {
            name,
            remote,
            description,
            parameters,
            server,
        }
    }

    async fn run(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        if ctx.cancellation().is_cancelled() {
            return Err(ToolError::Canceled);
        }
        let server = &self.server;
        if server.exited().is_some() {
            return Err(server.unavailable(None).await.into());
        }
        let Value::Object(arguments) = args else {
            return Err(ToolError::invalid_arguments(
                "arguments must be a JSON object",
            ));
        };
        let mut params = CallToolRequestParams::new(self.remote.clone());
        params.arguments = Some(arguments);
        // Dropping the request future (timeout, cancellation) tells the server with
        // `notifications/cancelled`.
        let answer = tokio::select! {
            answer = tokio::time::timeout(server.tool_timeout, server.peer().call_tool(params)) => answer,
            () = ctx.cancellation().cancelled() => return Err(ToolError::Canceled),
        };
        let result = match answer {
            Err(_) => {
                return Err(McpError::ToolTimeout {
                    server: server.name.clone(),
                    tool: self.remote.clone(),
                    seconds: server.tool_timeout.as_secs_f64(),
                }
                .into());
            }
            Ok(Err(error)) if is_disconnect(&error) || server.exited().is_some() => {
                return Err(server.unavailable(Some(&error)).await.into());
            }
            Ok(Err(error)) => {
                return Err(McpError::RequestFailed {
                    server: server.name.clone(),
                    tool: self.remote.clone(),
                    message: describe_service_error(&error),
                }
                .into());
            }
            Ok(Ok(result)) => result,
        };
        if result.is_error == Some(true) {
            let mut message = content_text(&result.content);
            // As for `bash`: a denial under a confining sandbox says which rules were in force.
            let options = &server.options;
            if let Some(note) = troupe_tools::sandbox_note(
                &options.sandbox,
                &options.workspace,
                options.temp_dir.as_deref(),
                &[&message],
            ) {
                message = format!("{message} ({note})");
            }
            return Err(McpError::ToolError {
                server: server.name.clone(),
                tool: self.remote.clone(),
                message,
            }
            .into());
        }
        Ok(render(result, ctx.limits().output_cap_bytes))
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(self.run(ctx, args))
    }
}

/// The text of a result's content: the text blocks joined by newlines, other blocks as JSON.
fn content_text(content: &[ContentBlock]) -> String {
    let parts: Vec<String> = content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => text.text.clone(),
            None => serde_json::to_string(block).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty() {
        "(no message)".to_owned()
    } else {
        parts.join("\n")
    }
}

fn render(result: CallToolResult, cap: usize) -> Value {
    let mut value = serde_json::to_value(&result).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut value {
        for key in ["isError", "resultType", "_meta"] {
            map.remove(key);
        }
    }
    let text = value.to_string();
    if text.len() <= cap {
        return value;
    }
    let half = cap / 2;
    let head_end = floor_char_boundary(&text, half);
    let tail_start = ceil_char_boundary(&text, text.len() - half);
    json!({
        "truncated": true,
        "text": format!(
            "{}{}{}",
            &text[..head_end],
            truncation_marker(tail_start - head_end),
            &text[tail_start..]
        ),
    })
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_namespaced_cleaned_and_at_most_64_characters() {
        assert_eq!(tool_name("files", "read_file"), "mcp__files__read_file");
        assert_eq!(tool_name("gh", "repo.list/all"), "mcp__gh__repo_list_all");
        let long = "x".repeat(80);
        let name = tool_name("server", &long);
        assert_eq!(name.len(), 64);
        assert!(name.starts_with("mcp__server__xxx"));
        // Two long names with the same start stay apart.
        assert_ne!(name, tool_name("server", &format!("{long}y")));
    }

    #[test]
    fn long_results_are_cut_around_a_marker() {
        let result = CallToolResult::success(vec![ContentBlock::text("é".repeat(400))]);
        let value = render(result, 100);
        assert_eq!(value["truncated"], json!(true));
        let text = value["text"].as_str().unwrap_or_default();
        assert!(text.contains("bytes truncated"), "{text}");
        let short = render(CallToolResult::success(vec![ContentBlock::text("hi")]), 100);
        assert_eq!(short, json!({"content": [{"type": "text", "text": "hi"}]}));
    }
}
