//! The running servers of one process: started once, their tools offered to every member,
//! stopped with the process.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, ClientRequest, CustomRequest, Implementation};
use rmcp::service::{ClientInitializeError, Peer, RoleClient, RunningService};
use rmcp::transport::IntoTransport;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServiceError, ServiceExt};
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStderr, Command};
use tokio::sync::watch;
use troupe_protocol::sync::lock;
use troupe_tools::SandboxPolicy;

use crate::config::{McpServers, ServerConfig, ServerName, Transport};
use crate::error::McpError;
use crate::tool::{McpTool, tool_name};

/// How long [`McpHub::shutdown`] waits for a server to exit after its stdin was closed, before
/// it kills the server's process group.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How long a failure waits for the server's exit status, to say how it ended.
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(2);

/// The end of a server's stderr kept for error messages: at most this many lines…
const STDERR_TAIL_LINES: usize = 5;
/// …and this many characters per line.
const STDERR_LINE_CHARS: usize = 300;

/// Where and how the servers run.
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// The workspace (absolute): every server's working directory, writable under the
    /// `workspace-write` sandbox.
    pub workspace: PathBuf,
    /// The sandbox every server process runs under — the session's (the Lead's) policy: the
    /// same Landlock ruleset as `bash` (see `troupe_tools::sandbox`).
    pub sandbox: SandboxPolicy,
    /// The servers' temporary directory (exported as `TMPDIR`, writable in every sandbox
    /// mode, created with mode 0700 when missing): the Lead session's.
    pub temp_dir: Option<PathBuf>,
    /// Variables removed from the servers' environment (the model's API key variables), unless
    /// a server's `env` sets them itself.
    pub secret_env: Vec<String>,
}

/// What [`McpHub::start`] started: the hub, the servers that failed to start (the run goes on
/// without their tools) and warnings about single tools left out.
pub struct Started {
    /// The servers that started, and their tools.
    pub hub: McpHub,
    /// One error per server that did not start (`MCP_SERVER_START_FAILED`,
    /// `MCP_SERVER_TIMEOUT`), in name order.
    pub failures: Vec<McpError>,
    /// One line per tool left out (an invalid `tools/list` entry or input schema, a name
    /// clash), naming it and why, and per
    /// `enabled_tools` entry the server does not offer, naming the server.
    pub warnings: Vec<String>,
}

/// The MCP servers of a process and their tools (`mcp__<server>__<tool>`).
///
/// # Crash behaviour
/// A streamable HTTP server is not ours: its session is ended (`DELETE`) by
/// [`McpHub::shutdown`], and simply abandoned by a crash. A stdio server is a child of this process in its own process group (so a terminal's Ctrl-C
/// reaches Troupe, which interrupts turns, and not the servers). It is stopped by
/// [`McpHub::shutdown`] (stdin closed, then `SIGKILL` to its group after 2 s) or, when the hub
/// is dropped, with `SIGKILL` to its group at once. If this process is killed (`kill -9`), a
/// server sees its stdin close and, as the MCP stdio transport expects, exits; one that does
/// not is left running (it is not recorded in any log). Servers hold no Troupe state: a
/// `troupe resume` starts them again from the recorded configuration.
#[derive(Default)]
pub struct McpHub {
    servers: Vec<Arc<Server>>,
    tools: Vec<Arc<McpTool>>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("McpHub")
            .field("servers", &self.server_names())
            .field("tools", &self.tool_names())
            .finish()
    }
}

impl McpHub {
    /// Starts every configured server at once (each under `options.sandbox`, in
    /// `options.workspace`), waits for each to answer `initialize` and `tools/list` within its
    /// `startup_timeout_sec`, and builds a tool per offered tool (filtered by
    /// `enabled_tools`).
    ///
    /// Never fails as a whole and never hangs: a server whose program cannot be started, that
    /// exits or breaks the protocol before it listed its tools, or that does not answer in
    /// time is stopped and reported in [`Started::failures`] (a server that answered, but not
    /// as MCP requires, is said to have been stopped; one that went away, how it ended). A
    /// `tools/list` entry that is not a tool (no `inputSchema`, say), a tool whose input schema
    /// is not an object schema, or whose name (after `mcp__<server>__`, with characters outside
    /// `[A-Za-z0-9_-]` replaced by `_` and long names shortened) clashes with an earlier
    /// one, is left out with a warning.
    pub async fn start(servers: &McpServers, options: &StartOptions) -> Started {
        let mut set = tokio::task::JoinSet::new();
        for (index, (name, config)) in servers.iter().enumerate() {
            let name = name.clone();
            let config = config.clone();
            let options = options.clone();
            set.spawn(async move { (index, start_server(name, config, options).await) });
        }
        let mut results = Vec::new();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(result) => results.push(result),
                Err(error) => results.push((
                    usize::MAX,
                    Err(McpError::StartFailed {
                        server: "?".to_owned(),
                        reason: format!("the start task failed: {error}"),
                    }),
                )),
            }
        }
        results.sort_by_key(|(index, _)| *index);
        let mut started = Started {
            hub: McpHub::default(),
            failures: Vec::new(),
            warnings: Vec::new(),
        };
        let mut taken = HashSet::new();
        for (_, result) in results {
            match result {
                Ok((server, listed)) => {
                    let server = Arc::new(server);
                    started
                        .hub
                        .add_tools(&server, listed, &mut taken, &mut started.warnings);
                    started.hub.servers.push(server);
                }
                Err(error) => started.failures.push(error),
            }
        }
        started
    }

    fn add_tools(
        &mut self,
        server: &Arc<Server>,
        listed: Listed,
        taken: &mut HashSet<String>,
        warnings: &mut Vec<String>,
    ) {
        let Listed { tools, enabled } = listed;
        let mut offered = BTreeSet::new();
        for entry in tools {
            let tool = match entry {
                Entry::Tool(tool) => tool,
                Entry::Invalid {
                    name: Some(remote),
                    why,
                } => {
                    offered.insert(remote.clone());
                    if enabled.as_ref().is_none_or(|list| list.contains(&remote)) {
                        warnings.push(format!(
                            "MCP server `{}`: tool `{remote}` left out: its tools/list entry \
                             is invalid ({why})",
                            server.name
                        ));
                    }
                    continue;
                }
                Entry::Invalid { name: None, why } => {
                    warnings.push(format!(
                        "MCP server `{}`: a tool left out: its tools/list entry is invalid \
                         ({why})",
                        server.name
                    ));
                    continue;
                }
            };
            let remote = tool.name.to_string();
            offered.insert(remote.clone());
            if enabled.as_ref().is_some_and(|list| !list.contains(&remote)) {
                continue;
            }
            let mut schema = Value::Object((*tool.input_schema).clone());
            match schema.get("type") {
                Some(Value::String(kind)) if kind == "object" => {}
                // No type: MCP requires "object", and an object schema is what it describes.
                None => {
                    schema["type"] = Value::String("object".to_owned());
                }
                Some(other) => {
                    warnings.push(format!(
                        "MCP server `{}`: tool `{remote}` left out: its input schema is not an \
                         object schema (type {other})",
                        server.name
                    ));
                    continue;
                }
            }
            let name = tool_name(&server.name, &remote);
            if !taken.insert(name.clone()) {
                warnings.push(format!(
                    "MCP server `{}`: tool `{remote}` left out: its name {name} is taken by \
                     another tool",
                    server.name
                ));
                continue;
            }
            let description = tool
                .description
                .as_deref()
                .or(tool.title.as_deref())
                .map(str::to_owned)
                .unwrap_or_else(|| format!("Tool `{remote}` of MCP server `{}`.", server.name));
            self.tools.push(Arc::new(McpTool::new(
                name,
                remote,
                description,
                schema,
                Arc::clone(server),
            )));
        }
        for wanted in enabled.iter().flatten() {
            if !offered.contains(wanted) {
                warnings.push(format!(
                    "MCP server `{}` offers no tool `{wanted}` (named in enabled_tools)",
                    server.name
                ));
            }
        }
    }

    /// The tools, for the runtime's `extra_tools`: in server name order, each server's in the
    /// order it listed them.
    pub fn tools(&self) -> Vec<Arc<dyn troupe_tools::Tool>> {
        self.tools
            .iter()
            .map(|tool| Arc::clone(tool) as Arc<dyn troupe_tools::Tool>)
            .collect()
    }

    /// The model-facing names of the tools, in order.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|tool| troupe_tools::Tool::name(tool.as_ref()).to_owned())
            .collect()
    }

    /// The names of the servers that started, in name order.
    pub fn server_names(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.name.clone()).collect()
    }

    /// The process id of the named server's process, while it runs.
    pub fn server_pid(&self, name: &str) -> Option<u32> {
        self.servers
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.pgid)
            .and_then(|pid| u32::try_from(pid.as_raw_nonzero().get()).ok())
    }

    /// Stops every server: closes its connection (its stdin), waits up to 2 s for it to exit,
    /// then kills its process group. Tools still held elsewhere fail with
    /// `MCP_SERVER_UNAVAILABLE` afterwards.
    pub async fn shutdown(self) {
        let mut set = tokio::task::JoinSet::new();
        for server in &self.servers {
            let server = Arc::clone(server);
            set.spawn(async move { server.stop().await });
        }
        while set.join_next().await.is_some() {}
    }
}

/// What a server listed at start, with its `enabled_tools`.
struct Listed {
    tools: Vec<Entry>,
    enabled: Option<Vec<String>>,
}

/// One entry of a `tools/list` answer.
enum Entry {
    /// A tool as MCP describes one.
    Tool(rmcp::model::Tool),
    /// An entry that is not (no `inputSchema`, say): left out alone, with a warning.
    Invalid {
        /// Its `name`, when it has one (a string).
        name: Option<String>,
        /// Why it is not a tool, e.g. ``missing field `inputSchema` ``.
        why: String,
    },
}

impl Entry {
    fn parse(raw: Value) -> Self {
        let name = raw.get("name").and_then(Value::as_str).map(str::to_owned);
        match serde_json::from_value::<rmcp::model::Tool>(raw) {
            Ok(tool) => Self::Tool(tool),
            Err(error) => Self::Invalid {
                name,
                why: error.to_string(),
            },
        }
    }
}

/// One running server.
pub(crate) struct Server {
    pub(crate) name: String,
    peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, ClientConfig>>>,
    pub(crate) tool_timeout: Duration,
    /// Where and how it runs, for the sandbox note of a denied operation.
    pub(crate) options: StartOptions,
    pgid: Option<Pid>,
    /// `Some(how it ended)` once the process exited (never, for a URL).
    exit: watch::Receiver<Option<String>>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// The URL of a streamable HTTP server; `None` for a process.
    url: Option<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        kill_group(self.pgid);
    }
}

fn kill_group(pgid: Option<Pid>) {
    if let Some(pgid) = pgid {
        // ESRCH (the group is gone) is the expected outcome after a clean exit.
        let _ = kill_process_group(pgid, Signal::KILL);
    }
}

impl Server {
    #[allow(clippy::too_many_arguments)] // One call per transport, each naming every part.
    fn new(
        name: String,
        service: RunningService<RoleClient, ClientConfig>,
        tools: Vec<Entry>,
        config: ServerConfig,
        options: StartOptions,
        pgid: Option<Pid>,
        exit: watch::Receiver<Option<String>>,
        stderr: Arc<Mutex<Vec<String>>>,
        url: Option<String>,
    ) -> (Self, Listed) {
        let peer = service.peer().clone();
        (
            Self {
                name,
                peer,
                service: tokio::sync::Mutex::new(Some(service)),
                tool_timeout: config.tool_timeout,
                options,
                pgid,
                exit,
                stderr,
                url,
            },
            Listed {
                tools,
                enabled: config.enabled_tools,
            },
        )
    }

    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// How the process ended, if it did.
    pub(crate) fn exited(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// Why the server cannot answer: for a process, how it ended (waiting up to 2 s for its
    /// exit status), with the end of its stderr; for a URL, the connection's `error`.
    pub(crate) async fn unavailable(&self, error: Option<&ServiceError>) -> McpError {
        if let Some(url) = &self.url {
            let why = error.map_or_else(|| "it was stopped".to_owned(), describe_service_error);
            return McpError::Unavailable {
                server: self.name.clone(),
                reason: format!("the connection to {url} failed ({why})"),
            };
        }
        let ended = wait_for_exit(self.exit.clone()).await;
        let reason = ended.unwrap_or_else(|| "it closed its connection".to_owned());
        McpError::Unavailable {
            server: self.name.clone(),
            reason: format!("{reason}{}", stderr_suffix(&self.stderr)),
        }
    }

    async fn stop(&self) {
        if let Some(mut service) = self.service.lock().await.take() {
            let _ = service.close_with_timeout(EXIT_GRACE).await;
        }
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(EXIT_GRACE, exit.wait_for(Option::is_some)).await;
        kill_group(self.pgid);
    }
}

/// `: <last lines of stderr>` (joined by ` | `), or empty when it wrote nothing.
fn stderr_suffix(stderr: &Mutex<Vec<String>>) -> String {
    let lines = lock(stderr);
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends: {}", lines.join(" | "))
    }
}

/// Keeps the last lines of a server's stderr (the pipe is always drained, so a chatty server
/// never blocks on it). The task ends at the pipe's end of file.
fn drain_stderr(pipe: ChildStderr, tail: Arc<Mutex<Vec<String>>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line: String = line.chars().take(STDERR_LINE_CHARS).collect();
            if line.trim().is_empty() {
                continue;
            }
            let mut tail = lock(&tail);
            if tail.len() == STDERR_TAIL_LINES {
                tail.remove(0);
            }
            tail.push(line);
        }
    })
}

fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("troupe", env!("CARGO_PKG_VERSION")),
    )
}

async fn start_server(
    name: ServerName,
    config: ServerConfig,
    options: StartOptions,
) -> Result<(Server, Listed), McpError> {
    match &config.transport {
        Transport::Stdio { command, args, env } => {
            let (command, args, env) = (command.clone(), args.clone(), env.clone());
            start_stdio(name, &command, &args, &env, config, options).await
        }
        Transport::Http {
            url,
            bearer_token_env_var,
        } => {
            let (url, token_var) = (url.clone(), bearer_token_env_var.clone());
            start_http(name, url, token_var, config, options).await
        }
    }
}

/// Why the handshake failed.
struct HandshakeFailure {
    /// What went wrong, on one line.
    reason: String,
    /// Whether the server is still connected (it answered, but not as MCP requires): then
    /// Troupe stops it, and how it ends says nothing about the failure.
    connected: bool,
}

/// `initialize`, then `tools/list` (every page).
async fn handshake<T, E, A>(
    transport: T,
) -> Result<(RunningService<RoleClient, ClientConfig>, Vec<Entry>), HandshakeFailure>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let service = client_info().serve(transport).await.map_err(|e| {
        let connected = !matches!(
            e,
            ClientInitializeError::TransportError { .. }
                | ClientInitializeError::ConnectionClosed(_)
                | ClientInitializeError::ExpectedInitResponse(None)
        );
        let why = match &e {
            ClientInitializeError::TransportError { error, context } => {
                format!(
                    "{}, when it tried to {context}",
                    error_chain(error.error.as_ref())
                )
            }
            other => other.to_string(),
        };
        HandshakeFailure {
            reason: format!("the MCP handshake failed: {why}"),
            connected,
        }
    })?;
    let tools = list_tools(service.peer()).await?;
    Ok((service, tools))
}

/// The most pages of `tools/list` read (a server whose cursors never end is refused).
const MAX_TOOL_PAGES: usize = 1000;

/// Every page of `tools/list`, each entry parsed on its own: an entry that is not a tool (no
/// `inputSchema`, say) does not cost the server its other tools. rmcp's typed `list_tools`
/// refuses the whole answer then, so the request is sent as a custom request (the same
/// JSON-RPC `tools/list`) and its result read as JSON.
async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Entry>, HandshakeFailure> {
    let failed = |reason: String, connected: bool| HandshakeFailure {
        reason: format!("listing its tools failed: {reason}"),
        connected,
    };
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = cursor.take().map(|c| serde_json::json!({ "cursor": c }));
        let request = ClientRequest::CustomRequest(CustomRequest::new("tools/list", params));
        let result = peer
            .send_request(request)
            .await
            .map_err(|e| failed(describe_service_error(&e), !is_disconnect(&e)))?;
        let mut page = serde_json::to_value(&result)
            .map_err(|e| failed(format!("its answer cannot be read: {e}"), true))?;
        let Some(Value::Array(tools)) = page.get_mut("tools").map(Value::take) else {
            return Err(failed("its answer holds no `tools` list".to_owned(), true));
        };
        entries.extend(tools.into_iter().map(Entry::parse));
        match page.get("nextCursor") {
            Some(Value::String(next)) => cursor = Some(next.clone()),
            None | Some(Value::Null) => return Ok(entries),
            Some(other) => {
                return Err(failed(
                    format!("its answer's nextCursor is not a string ({other})"),
                    true,
                ));
            }
        }
    }
    Err(failed(
        format!("it gave more than {MAX_TOOL_PAGES} pages"),
        true,
    ))
}

async fn start_stdio(
    name: ServerName,
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    config: ServerConfig,
    options: StartOptions,
) -> Result<(Server, Listed), McpError> {
    let server = name.to_string();
    let failed = |reason: String| McpError::StartFailed {
        server: server.clone(),
        reason,
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(&options.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for variable in &options.secret_env {
        command.env_remove(variable);
    }
    if let Some(dir) = &options.temp_dir {
        troupe_tools::sandbox::prepare_temp_dir(dir).map_err(|e| failed(e.to_string()))?;
        command.env("TMPDIR", dir);
    }
    command.envs(env);
    let mut child = troupe_tools::sandbox::spawn_confined(
        command,
        options.sandbox,
        options.workspace.clone(),
        options.temp_dir.clone(),
    )
    .await
    .map_err(|e| failed(e.to_string()))?
    .map_err(|e| failed(format!("cannot run `{program}`: {e}")))?;
    let pgid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(Pid::from_raw);
    // From here on, every early return kills the group (the guard) and the child (dropped).
    let mut guard = GroupGuard(pgid);
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let mut drained = child
        .stderr
        .take()
        .map(|pipe| drain_stderr(pipe, Arc::clone(&stderr)));
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(failed("its stdin or stdout is not a pipe".to_owned()));
    };
    let (exit_sender, exit) = watch::channel(None);
    tokio::spawn(async move {
        let ended = match child.wait().await {
            Ok(status) => describe_exit(status),
            Err(error) => format!("waiting for it failed: {error}"),
        };
        let _ = exit_sender.send(Some(ended));
    });
    let (service, tools) =
        match tokio::time::timeout(config.startup_timeout, handshake((stdout, stdin))).await {
            Ok(Ok(started)) => started,
            Ok(Err(HandshakeFailure { reason, connected })) => {
                // A server that answered wrongly is stopped by Troupe (when this returns):
                // how it ends then says nothing. One that went away: how it ended does.
                let ended = if connected {
                    "; it was stopped".to_owned()
                } else {
                    wait_for_exit(exit.clone())
                        .await
                        .map_or(String::new(), |how| format!(" ({how})"))
                };
                // What it wrote before it exited is read to the pipe's end first (bounded: a
                // process it left behind may hold the pipe open).
                if let Some(drain) = drained.as_mut() {
                    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
                }
                return Err(failed(format!("{reason}{ended}{}", stderr_suffix(&stderr))));
            }
            Err(_) => {
                return Err(McpError::StartTimeout {
                    server,
                    seconds: config.startup_timeout.as_secs_f64(),
                    stderr: stderr_suffix(&stderr),
                });
            }
        };
    // Started: the server's own drop kills the group from now on.
    guard.0 = None;
    Ok(Server::new(
        server, service, tools, config, options, pgid, exit, stderr, None,
    ))
}

async fn start_http(
    name: ServerName,
    url: String,
    token_var: Option<String>,
    config: ServerConfig,
    options: StartOptions,
) -> Result<(Server, Listed), McpError> {
    let server = name.to_string();
    let failed = |reason: String| McpError::StartFailed {
        server: server.clone(),
        reason,
    };
    let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    if let Some(var) = &token_var {
        let token = std::env::var(var)
            .ok()
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                failed(format!(
                    "its bearer_token_env_var {var} is not set in the environment"
                ))
            })?;
        transport_config = transport_config.auth_header(token);
    }
    // The HTTP client's TLS needs a process-wide crypto provider (ring, as the model client
    // uses); installing it again is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = StreamableHttpClientTransport::from_config(transport_config);
    let (service, tools) =
        match tokio::time::timeout(config.startup_timeout, handshake(transport)).await {
            Ok(Ok(started)) => started,
            Ok(Err(HandshakeFailure { reason, .. })) => {
                return Err(failed(format!("{url}: {reason}")));
            }
            Err(_) => {
                return Err(McpError::StartTimeout {
                    server,
                    seconds: config.startup_timeout.as_secs_f64(),
                    stderr: String::new(),
                });
            }
        };
    // Nobody ever sends: an HTTP server has no process of ours to end.
    let (_never, exit) = watch::channel(None);
    let stderr = Arc::new(Mutex::new(Vec::new()));
    Ok(Server::new(
        server,
        service,
        tools,
        config,
        options,
        None,
        exit,
        stderr,
        Some(url),
    ))
}

async fn wait_for_exit(mut exit: watch::Receiver<Option<String>>) -> Option<String> {
    tokio::time::timeout(EXIT_STATUS_WAIT, exit.wait_for(Option::is_some))
        .await
        .ok()
        .and_then(Result::ok)
        .and_then(|status| status.clone())
}

/// Kills a process group when dropped: a server that did not finish starting.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with status {code}"),
        (None, Some(signal)) => format!("it was killed by signal {signal}"),
        (None, None) => format!("it ended ({status})"),
    }
}

/// An error and its sources in one line (`a: b: c`), leaving out a source whose text the line
/// already holds.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = inner.source();
    }
    line
}

/// A request's error in one line; a transport's failure as its cause chain (without the
/// transport's Rust type name).
pub(crate) fn describe_service_error(error: &ServiceError) -> String {
    match error {
        ServiceError::TransportSend(inner) => error_chain(inner.error.as_ref()),
        ServiceError::McpError(data) => format!("the server refused the request: {}", data.message),
        other => other.to_string(),
    }
}

/// Whether a call's error means the connection is gone.
pub(crate) fn is_disconnect(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}
