//! Every stable code Troupe publishes, in one list: [`STABLE_CODES`].
//!
//! A code is what [`ErrorCode::code`](crate::ErrorCode::code) returns for a library error (of
//! every crate: protocol, journal, session, llm, tools, team, runtime, web — and the NATS store, which
//! reports through the journal's error), what a tool result or a synthetic closer carries as
//! its `code`, and the few codes of a run's outcome (`TEAMMATE_FAILED`, `JOURNAL_FAILED`,
//! `DEMO_TESTS_FAILED`). Codes never change meaning once published: tools return them to the
//! model as `{"code", "message"}`, the `--json` output and the web API carry them, tests match
//! on them, and the `troupe` binary maps them to exit codes.
//!
//! The list is checked against the sources (`crates/protocol/tests/codes.rs`): a code returned
//! anywhere and missing here, a code listed here and used nowhere, or a README list that
//! differs from this one fails the test.

/// One stable code: the code, the crate that defines it, and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StableCode {
    /// The `SCREAMING_SNAKE` code, e.g. `JOURNAL_LOCKED`.
    pub code: &'static str,
    /// The crate whose sources define it (its directory under `crates/`: `journal`, `llm`, …,
    /// `cli` for the binary's own).
    pub origin: &'static str,
    /// What it means, in one sentence.
    pub meaning: &'static str,
}

const fn c(code: &'static str, origin: &'static str, meaning: &'static str) -> StableCode {
    StableCode {
        code,
        origin,
        meaning,
    }
}

/// Every stable code, grouped by the crate that defines it (bottom crates first), each once.
pub const STABLE_CODES: &[StableCode] = &[
    // protocol
    c(
        "INVALID_SESSION_ID",
        "protocol",
        "A session id that is not 1-128 characters of [A-Za-z0-9._-] (not starting with . or -).",
    ),
    c(
        "INVALID_MESSAGE_ID",
        "protocol",
        "A message id that is empty or longer than 256 bytes.",
    ),
    // journal
    c(
        "JOURNAL_LOCKED",
        "journal",
        "Another writer holds the session's lock (a file lock, or a lease on a shared store).",
    ),
    c(
        "JOURNAL_POISONED",
        "journal",
        "An earlier write or sync of this writer failed: it refuses every later append and flush.",
    ),
    c(
        "JOURNAL_CORRUPT",
        "journal",
        "A session file damaged other than by a crash (a bad line before later events, a bad header); nothing is repaired.",
    ),
    c(
        "JOURNAL_UNSUPPORTED",
        "journal",
        "A file of another format version, or a required event type this build does not know.",
    ),
    c(
        "SESSION_NOT_FOUND",
        "journal",
        "No session with this id (or id prefix) is stored.",
    ),
    c(
        "SESSION_ID_AMBIGUOUS",
        "journal",
        "A session id prefix that matches more than one stored session.",
    ),
    c(
        "SESSION_ALREADY_EXISTS",
        "journal",
        "A session with this id already exists; creation never overwrites.",
    ),
    c(
        "JOURNAL_NOT_A_FILE",
        "journal",
        "The session path exists but is not a regular file.",
    ),
    c(
        "JOURNAL_SEQ_CONFLICT",
        "journal",
        "An append expected another next seq than the log's (another writer got there first).",
    ),
    c(
        "JOURNAL_INVALID_BATCH",
        "journal",
        "A batch or seed whose events are not contiguous from the expected seq.",
    ),
    c(
        "OPEN_TURN",
        "journal",
        "A fork prefix that ends inside an open turn.",
    ),
    c(
        "INVALID_BOUNDARY",
        "journal",
        "A fork boundary past the end of the source log.",
    ),
    c(
        "JOURNAL_INVALID_EVENT",
        "journal",
        "An event refused at append (an unknown required type, a malformed type, a payload nested too deep).",
    ),
    c(
        "JOURNAL_CLOSED",
        "journal",
        "The writer was closed; nothing more can be appended.",
    ),
    c(
        "JOURNAL_LEASE_LOST",
        "journal",
        "A shared store's lease could not be renewed or was taken over: the writer is poisoned.",
    ),
    c(
        "STORE_INVALID_URL",
        "journal",
        "A store URL that cannot be parsed (raised by the NATS store, crates/store-nats).",
    ),
    c(
        "STORE_UNREACHABLE",
        "journal",
        "No store server answers at the URL (raised by the NATS store).",
    ),
    c(
        "STORE_UNSUPPORTED",
        "journal",
        "The store server lacks what the store needs, e.g. JetStream (raised by the NATS store).",
    ),
    c(
        "STORE_MISCONFIGURED",
        "journal",
        "The store's existing configuration cannot hold session logs (raised by the NATS store).",
    ),
    c(
        "STORE_IO",
        "journal",
        "A request to a connected store failed or timed out; nothing it would have written counts as written (raised by the NATS store).",
    ),
    c(
        "JOURNAL_IO",
        "journal",
        "An operating-system error reading or writing a session file or directory.",
    ),
    // session
    c(
        "UNKNOWN_PROVIDER",
        "session",
        "A child provider other than spawn or fork.",
    ),
    c(
        "SANDBOX_UNKNOWN_MODE",
        "session",
        "A --sandbox or --network value that is not one of the known settings.",
    ),
    c(
        "TOOL_NOT_STARTED",
        "session",
        "A tool call a stop cut had no effect (it never started, or only reads): call it again if needed.",
    ),
    c(
        "TOOL_OUTCOME_UNKNOWN",
        "session",
        "A tool call a stop cut may or may not have taken effect: check before repeating it.",
    ),
    c(
        "TEAM_BUDGET_EXCEEDED",
        "session",
        "The Team's --budget-tokens or --budget-usd is spent: new model calls are refused and the run stops, resumable with a higher budget.",
    ),
    // llm
    c(
        "LLM_CONFIG",
        "llm",
        "The model configuration is unusable: unknown provider, missing API key, bad base URL.",
    ),
    c(
        "LLM_AUTH",
        "llm",
        "The model server refused the credentials (HTTP 401 or 403): check the API key.",
    ),
    c(
        "LLM_RATE_LIMITED",
        "llm",
        "HTTP 429 after every attempt (retried, after Retry-After when sent).",
    ),
    c(
        "LLM_QUOTA",
        "llm",
        "The account cannot pay for the call (HTTP 402, or 429 insufficient_quota).",
    ),
    c(
        "LLM_CONTEXT_LENGTH",
        "llm",
        "The request is longer than the model's context window.",
    ),
    c(
        "LLM_BAD_REQUEST",
        "llm",
        "Any other refused request (HTTP 400, 404, 422): wrong model name or base URL, a malformed history.",
    ),
    c(
        "LLM_SERVER",
        "llm",
        "The model server failed (HTTP 5xx, 408, 409, an error inside the stream) after every attempt.",
    ),
    c(
        "LLM_NETWORK",
        "llm",
        "The model server could not be reached, or the connection failed before a response, after every attempt.",
    ),
    c(
        "LLM_STREAM_DROPPED",
        "llm",
        "The response stream ended before the model finished, after every attempt.",
    ),
    c(
        "LLM_EMPTY_STREAM",
        "llm",
        "A streamed answer (HTTP 200) ended or broke before its first event; asked once more without streaming, not retried as such.",
    ),
    c(
        "LLM_IDLE_TIMEOUT",
        "llm",
        "No byte of the response arrived within the idle timeout, after every attempt.",
    ),
    c(
        "LLM_CANCELLED",
        "llm",
        "The model call was cancelled by its caller.",
    ),
    c(
        "LLM_PROTOCOL",
        "llm",
        "The server answered something that is not a chat completion.",
    ),
    c(
        "LLM_TRUNCATED_TOOL_CALL",
        "llm",
        "The output token limit cut tool calls in too many answers in a row: the turn fails.",
    ),
    c(
        "LLM_SCRIPT",
        "llm",
        "The scripted model cannot answer: malformed script, unknown agent, script used up.",
    ),
    // tools
    c(
        "UNKNOWN_TOOL",
        "tools",
        "The model called a tool the agent does not have.",
    ),
    c(
        "INVALID_ARGUMENTS",
        "tools",
        "A tool's arguments are not an object, miss a field, have an unknown field or a value of the wrong type.",
    ),
    c(
        "FS_PATH_OUTSIDE_WORKSPACE",
        "tools",
        "A path that leaves the workspace.",
    ),
    c(
        "FS_NOT_FOUND",
        "tools",
        "The file or directory does not exist.",
    ),
    c(
        "FS_IS_DIRECTORY",
        "tools",
        "A file was expected, the path is a directory.",
    ),
    c(
        "FS_NOT_A_DIRECTORY",
        "tools",
        "A directory was expected, the path is a file.",
    ),
    c(
        "FS_NOT_A_FILE",
        "tools",
        "The path is neither a regular file nor a directory (a FIFO, a socket, a device).",
    ),
    c("FS_NOT_TEXT", "tools", "The file is not UTF-8 text."),
    c(
        "FS_EDIT_NOT_FOUND",
        "tools",
        "edit found no occurrence of old_string.",
    ),
    c(
        "FS_AMBIGUOUS_EDIT",
        "tools",
        "edit found old_string more than once without replace_all.",
    ),
    c(
        "FS_STALE_VERSION",
        "tools",
        "The file changed, was created or deleted since this session last read it: read it again.",
    ),
    c(
        "FS_NOT_OBSERVED",
        "tools",
        "The file was not read since the agent (re)started, so it cannot be edited or overwritten yet.",
    ),
    c(
        "FS_IO",
        "tools",
        "An operating-system error while touching a file.",
    ),
    c(
        "BASH_SPAWN_FAILED",
        "tools",
        "bash could not start the shell.",
    ),
    c(
        "TOOL_CANCELED",
        "tools",
        "The call was cancelled (a running bash command's process group was killed).",
    ),
    c(
        "TOOL_INTERNAL_ERROR",
        "tools",
        "A bug or a panic inside a tool.",
    ),
    c(
        "DUPLICATE_TOOL",
        "tools",
        "A tool with the same name is already registered.",
    ),
    c(
        "INVALID_TOOL_NAME",
        "tools",
        "A tool name that is not 1-64 characters of [A-Za-z0-9_-].",
    ),
    c(
        "SANDBOX_UNSUPPORTED",
        "tools",
        "This kernel cannot enforce the sandbox policy (Landlock missing, disabled or too old): the flags that lift the missing rules are named.",
    ),
    c(
        "SANDBOX_SETUP_FAILED",
        "tools",
        "A path the sandbox rules name could not be opened or prepared (the workspace removed, a temporary directory not this user's).",
    ),
    c(
        "SANDBOX_LOOSER",
        "tools",
        "A sandbox looser than the recorded or inherited one: a resumed session or a new teammate may only be confined more.",
    ),
    c(
        "APPROVAL_DISABLED",
        "tools",
        "A bash call asked to run outside the sandbox (escalate: true) in a session run with --approval never: nothing ran.",
    ),
    // mcp
    c(
        "MCP_CONFIG_UNREADABLE",
        "mcp",
        "An MCP configuration file that cannot be opened or read, is not a regular file or is larger than 1 MiB.",
    ),
    c(
        "MCP_CONFIG_INVALID",
        "mcp",
        "An MCP configuration that is not valid ([mcp_servers.<name>] tables): the message names file, line and column.",
    ),
    c(
        "MCP_SERVER_START_FAILED",
        "mcp",
        "An MCP server that could not be started, or exited or failed the handshake before listing its tools; the run goes on without it.",
    ),
    c(
        "MCP_SERVER_TIMEOUT",
        "mcp",
        "An MCP server that did not answer initialize and tools/list within its startup_timeout_sec; it was stopped.",
    ),
    c(
        "MCP_SERVER_UNAVAILABLE",
        "mcp",
        "A call to an MCP server that is no longer running (it exited, or its connection failed): not made, or not answered.",
    ),
    c(
        "MCP_TOOL_TIMEOUT",
        "mcp",
        "An MCP tool call that took longer than the server's tool_timeout_sec; it was cancelled and its effect is unknown.",
    ),
    c(
        "MCP_TOOL_ERROR",
        "mcp",
        "An MCP tool that ran and reported an error (isError): its text.",
    ),
    c(
        "MCP_REQUEST_FAILED",
        "mcp",
        "An MCP server that refused a tool call (a JSON-RPC error, e.g. invalid parameters) or answered no tool result.",
    ),
    // team
    c(
        "TEAM_INVALID_CONFIG",
        "team",
        "A Team limit that is not a positive safe integer.",
    ),
    c(
        "TEAM_NOT_MEMBER",
        "team",
        "The caller has no Team membership.",
    ),
    c(
        "TEAM_LEAD_REQUIRED",
        "team",
        "A teammate called a Lead-only operation (spawn, interrupt, task reassign).",
    ),
    c(
        "TEAM_INVALID_MEMBER_NAME",
        "team",
        "A teammate name that is not 1-64 lowercase letters, digits and inner hyphens, or is lead.",
    ),
    c(
        "TEAM_INVALID_ARGUMENT",
        "team",
        "An empty or over-long text, or another malformed Team tool argument.",
    ),
    c(
        "TEAM_MEMBER_NAME_TAKEN",
        "team",
        "The name is already reserved by a member in any phase.",
    ),
    c(
        "TEAM_MEMBER_LIMIT",
        "team",
        "The roster (failed members included) already has maxMembers entries.",
    ),
    c(
        "TEAM_PROVISIONING_CONFLICT",
        "team",
        "Creation and recovery settled opposite phases, or an initial prompt was not durably accepted.",
    ),
    c(
        "TEAM_DISPOSED",
        "team",
        "The Team is disposed, or the operation was aborted by its disposal.",
    ),
    c(
        "TEAM_DISPOSAL_TIMEOUT",
        "team",
        "A disposal step took longer than disposalTimeoutMs.",
    ),
    c(
        "TEAM_MEMBER_NOT_FOUND",
        "team",
        "A target or assignee that is neither lead nor an active member.",
    ),
    c(
        "TEAM_SELF_MESSAGE",
        "team",
        "A member sent a message to itself.",
    ),
    c(
        "TEAM_MAILBOX_FULL",
        "team",
        "The target already has maxPendingMessagesPerMember undelivered messages.",
    ),
    c(
        "TEAM_MESSAGE_TOO_LARGE",
        "team",
        "The message is larger than maxMessageBytes.",
    ),
    c(
        "TEAM_INVALID_TARGET",
        "team",
        "The Lead tried to interrupt itself.",
    ),
    c(
        "TEAM_INVALID_TIMEOUT",
        "team",
        "A wait_agent timeout_ms that is not an integer in [10000, 3600000].",
    ),
    c(
        "TEAM_WAIT_ABORTED",
        "team",
        "A wait was aborted (the caller's turn was cancelled or the Team stopped).",
    ),
    c(
        "TEAM_TASK_LIMIT",
        "team",
        "maxTasks non-deleted tasks exist.",
    ),
    c(
        "TEAM_TASK_NOT_FOUND",
        "team",
        "An unknown task id, or a blocker that is unknown or deleted.",
    ),
    c(
        "TEAM_TASK_STALE_REVISION",
        "team",
        "The task's revision is not the one given (compare-and-set): get it again.",
    ),
    c("TEAM_TASK_DELETED", "team", "A change to a deleted task."),
    c(
        "TEAM_TASK_UNAUTHORIZED",
        "team",
        "An owner-or-Lead action by another member.",
    ),
    c(
        "TEAM_TASK_ALREADY_CLAIMED",
        "team",
        "A claim of a task someone else owns.",
    ),
    c(
        "TEAM_TASK_BLOCKED",
        "team",
        "A claim of a task that is not pending or not ready.",
    ),
    c(
        "TEAM_TASK_INVALID_TRANSITION",
        "team",
        "A task action its status does not allow.",
    ),
    c(
        "TEAM_TASK_DEPENDENCY_CYCLE",
        "team",
        "A task blocked by itself, or a dependency cycle.",
    ),
    c(
        "TEAM_TASK_HAS_DEPENDENTS",
        "team",
        "A delete while another task depends on the task.",
    ),
    c(
        "TEAM_INVALID_WRITE_SCOPE",
        "team",
        "A write scope that fails normalization.",
    ),
    c(
        "TEAM_LOG_INVALID",
        "team",
        "A Lead log that breaks a Team rule (the fold refuses an event); the session is not resumed.",
    ),
    c(
        "INVARIANT",
        "team",
        "A Team event refused before append: the fold of the log plus the candidate fails.",
    ),
    // runtime
    c(
        "RUNTIME_INVALID_EVENT",
        "runtime",
        "A runtime event in a log whose payload does not decode, or an inbox splice out of range.",
    ),
    c(
        "NOT_RESUMABLE",
        "runtime",
        "A session that cannot be resumed as an agent (it has no agent configuration).",
    ),
    c(
        "TEAM_AT_OUTSIDE_LOG",
        "runtime",
        "A past point of a Team (--at) outside its Lead log: after its last event, or before it was created.",
    ),
    c(
        "DUPLICATE_CHILD",
        "runtime",
        "A child id that already names a live agent or a stored session.",
    ),
    c(
        "UNAUTHORIZED",
        "runtime",
        "The caller is not the exact parent (or ancestor) the operation requires.",
    ),
    c(
        "CANCELLED",
        "runtime",
        "The caller cancelled the operation before it took effect.",
    ),
    c(
        "AGENT_DISPOSED",
        "runtime",
        "The agent or the runtime was disposed.",
    ),
    c(
        "WORKSPACE_INVALID",
        "runtime",
        "The workspace does not exist, is not a directory or is not writable.",
    ),
    c(
        "WORKTREE_NOT_A_REPOSITORY",
        "runtime",
        "--worktree for a workspace outside a git repository with a commit (or without git installed).",
    ),
    c(
        "WORKTREE_DIRTY_INDEX",
        "runtime",
        "--worktree while the repository's index holds staged or unmerged changes.",
    ),
    c(
        "WORKTREE_DIRTY_CHECKOUT",
        "runtime",
        "team merge while the Lead's checkout has uncommitted changes to tracked files.",
    ),
    c(
        "WORKTREE_UNKNOWN_BRANCH",
        "runtime",
        "team merge into a branch that does not exist, or of a teammate branch that is gone.",
    ),
    c(
        "TEAM_NO_WORKTREE",
        "runtime",
        "team merge or team clean of a teammate (or a Team) without a worktree.",
    ),
    c(
        "WORKTREE_MEMBER_RUNNING",
        "runtime",
        "team merge of a teammate that is running (its log is held): merge once it has stopped.",
    ),
    c(
        "TEAM_MERGE_CONFLICT",
        "runtime",
        "team merge conflicts: the merge was aborted, nothing was committed, the paths are listed.",
    ),
    c(
        "WORKTREE_GIT_FAILED",
        "runtime",
        "A git command of a teammate's worktree (add, commit, merge, remove) failed.",
    ),
    c(
        "ACTIVATION_TEARDOWN_FAILED",
        "runtime",
        "Disposing one or more child activations failed (every branch was still released).",
    ),
    c(
        "TEAM_NOT_AUTHORIZED",
        "runtime",
        "A Team service request whose caller's lease is not its session's current one (a process acting for a member it does not host), or that names the Lead.",
    ),
    c(
        "TEAM_MEMBER_NOT_HOSTED",
        "runtime",
        "A Team message or interrupt reached the process holding a teammate's lease while it runs no agent of it (starting or settling); the Team's serializer asks again.",
    ),
    c(
        "TEAM_HOST_LOST",
        "runtime",
        "interrupt_agent of a teammate whose host stopped answering and whose log shows the turn its death cut: the interrupt did not reach it; the Team continues it as after a crash.",
    ),
    c(
        "WORKER_NAME_TAKEN",
        "store-nats",
        "troupe worker --name NAME when a live worker is already registered under NAME in the store's worker registry.",
    ),
    c(
        "WORKER_BUSY",
        "cli",
        "A request to host a teammate reached a worker with no free slot; the Lead's process places it elsewhere or runs it locally.",
    ),
    c(
        "TEAM_LEAD_MOVED",
        "runtime",
        "A Team service request reached a process that no longer holds the Lead's lease, and no new holder answered within the bounded retry.",
    ),
    c(
        "TOOL_ARGUMENTS_TRUNCATED",
        "runtime",
        "The output token limit cut the call's arguments: it did not run; retry with smaller arguments.",
    ),
    c(
        "TEAMMATE_FAILED",
        "runtime",
        "The Lead answered, but a teammate's last turn failed and was not recovered: the run failed.",
    ),
    c(
        "JOURNAL_FAILED",
        "runtime",
        "A member's session log failed while the run wrote it: the run failed, the session stays resumable.",
    ),
    c(
        "APPROVAL_DENIED",
        "runtime",
        "The user denied running a command outside the sandbox (at the terminal, with troupe approve --deny or in the panel): it did not run.",
    ),
    c(
        "APPROVAL_TIMED_OUT",
        "runtime",
        "Nobody answered an approval request within --approval-timeout: it was denied and the command did not run.",
    ),
    c(
        "APPROVAL_NOT_FOUND",
        "approval",
        "troupe approve (or the panel) named an approval request the session does not hold.",
    ),
    c(
        "APPROVAL_ALREADY_DECIDED",
        "approval",
        "An approval request that was already decided (by whom and how is named): nothing changed.",
    ),
    c(
        "APPROVAL_UNKNOWN_MODE",
        "session",
        "An --approval value that is not never or on-request.",
    ),
    c(
        "NOT_A_TEAM",
        "runtime",
        "A message from the user (troupe send) to a session that is not a Team's Lead.",
    ),
    // web
    c(
        "WEB_NOT_A_LEAD",
        "web",
        "A Team asked of a teammate's or subagent's session (its Team is its Lead's).",
    ),
    c("WEB_NOT_FOUND", "web", "No such route."),
    c(
        "WEB_UNAUTHORIZED",
        "web",
        "A request without the access token of a remote bind.",
    ),
    c(
        "WEB_FORBIDDEN_HOST",
        "web",
        "A request naming another host than the one served (DNS rebinding).",
    ),
    c(
        "WEB_METHOD_NOT_ALLOWED",
        "web",
        "A method the route does not serve (reads are GET; the one write is POST of an approval).",
    ),
    c(
        "WEB_TOKEN_REQUIRED",
        "web",
        "A write (an approval) without the panel's token, or from another origin: refused (403), nothing changed.",
    ),
    c(
        "WEB_BAD_REQUEST",
        "web",
        "A write whose body is not the JSON the route takes, or `…/team/show?at=` that is not a whole number.",
    ),
    c(
        "WEB_REMOTE_REFUSED",
        "web",
        "A non-loopback address without --allow-remote.",
    ),
    c("WEB_IO", "web", "Reading the session store failed."),
    // cli
    c(
        "DEMO_TESTS_FAILED",
        "cli",
        "troupe demo (or a resumed demo) ended with the project's tests still failing.",
    ),
    c(
        "DEMO_TASKS_OPEN",
        "cli",
        "troupe demo (or a resumed demo) ended with tasks still open on its board (its tests pass): a teammate's Team call failed while the scripted model went on.",
    ),
    c(
        "CONTROL_UNREACHABLE",
        "cli",
        "troupe send found the Team held by a running process that did not answer on its control socket in time: nothing was sent.",
    ),
    c(
        "CONTROL_BAD_REQUEST",
        "cli",
        "A line on a Team's control socket that is not a request (or an answer that is not one): nothing was done.",
    ),
    c(
        "CONTROL_PEER_REFUSED",
        "cli",
        "A connection to a Team's control socket from another user or from a command the running Team started (a member's bash, an MCP server): refused, nothing was done.",
    ),
];

/// The entry of `code` in [`STABLE_CODES`], if it is listed.
pub fn stable_code(code: &str) -> Option<&'static StableCode> {
    STABLE_CODES.iter().find(|c| c.code == code)
}
