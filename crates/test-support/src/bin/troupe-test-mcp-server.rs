//! A small real MCP server on stdio (rmcp's server side), for the tests of `troupe-mcp` and of
//! the `troupe` binary. Never shipped.
//!
//! Tools:
//! - `echo {text}` → a text block with `text`;
//! - `add {a, b}` → a text block with the sum of two integers, and `{"sum": n}` as structured
//!   content;
//! - `fail {message}` → a tool error (`isError: true`) whose text is `message`;
//! - `sleep {ms}` → waits `ms` milliseconds, then a text block `slept <ms> ms` (a cancelled
//!   call writes `cancelled <ms>` to stderr);
//! - `write_file {path, text}` → writes `text` to `path` (relative to the working directory),
//!   a text block `wrote <path>` or a tool error with the OS error (the sandbox tests);
//! - `env {name}` → a text block with the variable's value, or `unset`;
//! - `exit {code}` → writes `exiting with <code>` to stderr and exits the process at once, so
//!   the call never gets an answer (a server dying mid-call).
//!
//! Flags: `--hang` (never answers: starts, then only sleeps — a server that hangs at start),
//! `--bad-schema` (adds a tool `bad` whose input schema is `{"type": "string"}`),
//! `--stderr TEXT` (writes `TEXT` to stderr first), `--fail-start` (writes why to stderr and
//! exits 7 before reading anything), `--pid-file PATH` (writes its process id to `PATH`
//! first, so a test can watch the process).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone)]
struct TestServer {
    bad_schema: bool,
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tool(name: &'static str, description: &'static str, input: Value) -> Tool {
    Tool::new(name, description, schema(input))
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "echo",
                "Returns its text.",
                object(json!({"text": {"type": "string"}}), &["text"]),
            ),
            tool(
                "add",
                "Adds two integers.",
                object(
                    json!({"a": {"type": "integer"}, "b": {"type": "integer"}}),
                    &["a", "b"],
                ),
            ),
            tool(
                "fail",
                "Always fails with the given message.",
                object(json!({"message": {"type": "string"}}), &["message"]),
            ),
            tool(
                "sleep",
                "Sleeps for ms milliseconds.",
                object(json!({"ms": {"type": "integer", "minimum": 0}}), &["ms"]),
            ),
            tool(
                "write_file",
                "Writes text to a file.",
                object(
                    json!({"path": {"type": "string"}, "text": {"type": "string"}}),
                    &["path", "text"],
                ),
            ),
            tool(
                "env",
                "Reads an environment variable.",
                object(json!({"name": {"type": "string"}}), &["name"]),
            ),
            tool(
                "exit",
                "Exits the server process at once.",
                object(json!({"code": {"type": "integer"}}), &["code"]),
            ),
        ];
        if self.bad_schema {
            tools.push(tool(
                "bad",
                "Has a schema that is not an object.",
                json!({"type": "string"}),
            ));
        }
        tools
    }
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn str_arg<'a>(args: &'a JsonObject, name: &str) -> Result<&'a str, ErrorData> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be a string"), None))
}

fn int_arg(args: &JsonObject, name: &str) -> Result<i64, ErrorData> {
    args.get(name)
        .and_then(Value::as_i64)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be an integer"), None))
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("troupe-test-mcp-server", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => text(str_arg(&args, "text")?),
            "add" => {
                let sum = int_arg(&args, "a")? + int_arg(&args, "b")?;
                let mut result = text(sum.to_string());
                result.structured_content = Some(json!({"sum": sum}));
                result
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text(str_arg(&args, "message")?)]),
            "sleep" => {
                let ms = u64::try_from(int_arg(&args, "ms")?).unwrap_or(0);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => text(format!("slept {ms} ms")),
                    () = context.ct.cancelled() => {
                        eprintln!("cancelled {ms}");
                        return Err(ErrorData::internal_error("cancelled", None));
                    }
                }
            }
            "write_file" => {
                let path = str_arg(&args, "path")?;
                match std::fs::write(path, str_arg(&args, "text")?) {
                    Ok(()) => text(format!("wrote {path}")),
                    Err(e) => {
                        CallToolResult::error(vec![ContentBlock::text(format!("{path}: {e}"))])
                    }
                }
            }
            "env" => {
                text(std::env::var(str_arg(&args, "name")?).unwrap_or_else(|_| "unset".to_owned()))
            }
            "exit" => {
                let code = int_arg(&args, "code")?;
                eprintln!("exiting with {code}");
                std::process::exit(i32::try_from(code).unwrap_or(1));
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut bad_schema = false;
    let mut hang = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bad-schema" => bad_schema = true,
            "--hang" => hang = true,
            "--stderr" => eprintln!("{}", args.next().unwrap_or_default()),
            "--pid-file" => {
                let path = args.next().unwrap_or_default();
                if let Err(e) = std::fs::write(&path, std::process::id().to_string()) {
                    eprintln!("cannot write {path}: {e}");
                    std::process::exit(2);
                }
            }
            "--fail-start" => {
                eprintln!("refusing to start: --fail-start");
                std::process::exit(7);
            }
            other => {
                eprintln!("unknown flag {other}");
                std::process::exit(2);
            }
        }
    }
    if hang {
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }
    let server = TestServer { bad_schema };
    match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => {
            eprintln!("serving failed: {e}");
            std::process::exit(1);
        }
    }
}
