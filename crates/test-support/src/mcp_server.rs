//! The test MCP server: a small real MCP server built with rmcp's server side, for the tests of
//! `troupe-mcp` and of the `troupe` binary. Never shipped.
//!
//! - On stdio: the binary `troupe-test-mcp-server` (`src/bin/`), whose path
//!   [`mcp_server_binary`] returns, building it on first use: Cargo only builds the binaries of
//!   the package under test, so it builds this one once per test process with the Cargo that
//!   builds the tests, into the same target directory and profile (`cargo build -p
//!   troupe-test-support --bin troupe-test-mcp-server`; a no-op when it is up to date).
//! - Over streamable HTTP: [`McpHttpServer`], in-process on `127.0.0.1` (its own thread and
//!   runtime, like the fake OpenAI server), optionally requiring a bearer token.
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
//! Flags of the stdio binary: `--hang` (never answers: starts, then only sleeps — a server that hangs at start),
//! `--bad-schema` (adds a tool `bad` whose input schema is `{"type": "string"}`),
//! `--no-schema` (adds an entry `noschema` without `inputSchema` to `tools/list`, which MCP
//! requires), `--refuse-list` (answers `tools/list` with a JSON-RPC error),
//! `--stderr TEXT` (writes `TEXT` to stderr first), `--fail-start` (writes why to stderr and
//! exits 7 before reading anything), `--pid-file PATH` (writes its process id to `PATH`
//! first, so a test can watch the process).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification, ClientRequest,
    ContentBlock, CustomResult, ErrorData, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use troupe_protocol::sync::lock;

/// The binary's name.
pub const MCP_SERVER_BIN: &str = "troupe-test-mcp-server";

/// The path of the test MCP server binary, built (once per process) if needed.
///
/// # Panics
/// When the target directory cannot be found from the running test's path or the build
/// fails (the panic shows Cargo's output).
pub fn mcp_server_binary() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(build) {
        Ok(path) => path.clone(),
        Err(why) => panic!("building the test MCP server failed: {why}"),
    }
}

fn build() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // Tests run from <target>/<profile dir>/deps/<test>-<hash>.
    let mut profile_dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if profile_dir.file_name().is_some_and(|name| name == "deps") {
        profile_dir.pop();
    }
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("no target directory above {}", profile_dir.display()))?;
    let profile = match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    };
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--locked", "--manifest-path", manifest])
        .arg("--target-dir")
        .arg(target_dir)
        .args([
            "--profile",
            &profile,
            "-p",
            "troupe-test-support",
            "--bin",
            MCP_SERVER_BIN,
        ])
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo build exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let binary = profile_dir.join(MCP_SERVER_BIN);
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!("{} is missing after the build", binary.display()))
    }
}

/// The test server's tools (see the module docs).
#[derive(Clone, Default)]
pub struct TestServer {
    /// Whether `tools/list` includes `bad`, whose input schema is `{"type": "string"}`.
    pub bad_schema: bool,
    /// Whether the server runs inside the test's process ([`McpHttpServer`]): then it offers no
    /// `exit` (which would end the test).
    pub in_process: bool,
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
        if self.in_process {
            tools.retain(|tool| tool.name != "exit");
        }
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
            "exit" if !self.in_process => {
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

/// The stdio server: [`TestServer`] with its `tools/list` answer written as JSON, so that
/// `--no-schema` can break it as rmcp's typed answer cannot (every `Tool` has an input schema).
struct StdioServer {
    server: TestServer,
    /// `--no-schema`: a `tools/list` entry `noschema` without `inputSchema`.
    no_schema: bool,
    /// `--refuse-list`: `tools/list` is answered with an error.
    refuse_list: bool,
}

impl rmcp::Service<RoleServer> for StdioServer {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        if !matches!(request, ClientRequest::ListToolsRequest(_)) {
            return rmcp::Service::handle_request(&self.server, request, context).await;
        }
        if self.refuse_list {
            return Err(ErrorData::internal_error(
                "tools/list refused (--refuse-list)",
                None,
            ));
        }
        let mut listed = serde_json::to_value(ListToolsResult::with_all_items(self.server.tools()))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        if self.no_schema
            && let Some(Value::Array(tools)) = listed.get_mut("tools")
        {
            tools.push(json!({"name": "noschema", "description": "Has no input schema."}));
        }
        Ok(ServerResult::CustomResult(CustomResult::new(listed)))
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        rmcp::Service::handle_notification(&self.server, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.server)
    }
}

/// The stdio server's `main`: reads the flags (see the module docs) from the command line and
/// serves on stdin and stdout until stdin closes.
pub async fn serve_stdio() {
    let mut bad_schema = false;
    let mut no_schema = false;
    let mut refuse_list = false;
    let mut hang = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bad-schema" => bad_schema = true,
            "--no-schema" => no_schema = true,
            "--refuse-list" => refuse_list = true,
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
    let server = StdioServer {
        server: TestServer {
            bad_schema,
            in_process: false,
        },
        no_schema,
        refuse_list,
    };
    use rmcp::ServiceExt;
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

/// The test server over streamable HTTP on `127.0.0.1:<port>/mcp`, served from its own thread
/// and runtime (so synchronous tests and child processes can use it). With a token, every
/// request must carry `Authorization: Bearer <token>` (HTTP 401 otherwise). Dropping it (or
/// [`McpHttpServer::stop`]) stops it; later requests fail to connect.
pub struct McpHttpServer {
    address: SocketAddr,
    authorizations: Arc<Mutex<Vec<Option<String>>>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone)]
struct Gate {
    token: Option<String>,
    authorizations: Arc<Mutex<Vec<Option<String>>>>,
}

async fn check_token(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let seen = request
        .headers()
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    lock(&gate.authorizations).push(seen.clone());
    if let Some(token) = &gate.token
        && seen.as_deref() != Some(format!("Bearer {token}").as_str())
    {
        return (StatusCode::UNAUTHORIZED, "a bearer token is required").into_response();
    }
    next.run(request).await
}

impl McpHttpServer {
    /// Binds `127.0.0.1:0` and serves; `token`: the bearer token every request must carry.
    ///
    /// # Errors
    /// When the socket cannot be bound or the thread cannot start.
    pub fn start(token: Option<&str>) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let gate = Gate {
            token: token.map(str::to_owned),
            authorizations: Arc::clone(&authorizations),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let (shutdown, shutdown_received) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("test-mcp-http-{}", address.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let service: StreamableHttpService<TestServer, LocalSessionManager> =
                        StreamableHttpService::new(
                            || {
                                Ok(TestServer {
                                    bad_schema: false,
                                    in_process: true,
                                })
                            },
                            Arc::default(),
                            StreamableHttpServerConfig::default(),
                        );
                    let app = axum::Router::new()
                        .nest_service("/mcp", service)
                        .layer(axum::middleware::from_fn_with_state(gate, check_token));
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = shutdown_received => {}
                    }
                });
                // Dropping the runtime closes every open connection and SSE stream.
            })?;
        Ok(Self {
            address,
            authorizations,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The server's URL: `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    /// The `Authorization` header of every request so far (`None`: none sent).
    pub fn authorizations(&self) -> Vec<Option<String>> {
        lock(&self.authorizations).clone()
    }

    /// Stops serving (waits up to the thread's end).
    pub fn stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}
