//! The `bash` tool: a shell command in its own process group, with a timeout, an output cap,
//! and a group kill on timeout, cancellation or drop.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::task::JoinHandle;
use troupe_protocol::sync::lock;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::process::{ProcessInfo, process_start_time};
use crate::sandbox;
use crate::tool::{Tool, ToolFuture, ToolOutcome, parse_arguments};

/// How long `bash` keeps collecting output after the process group was killed (a process
/// that left the group, e.g. through `setsid`, may still hold the pipes open).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// `bash {command, timeout_ms?}`: runs `bash -c <command>` in the workspace root.
///
/// The shell runs in a new process group, with stdin from `/dev/null`, `PAGER`/`GIT_PAGER`
/// set to `cat`, and without the context's [secret variables](ToolContext::secret_env). The
/// group is reported to the context's [process observer](ToolContext::with_process_observer)
/// as soon as it started. When the shell exits, times out (`timeout_ms`, default
/// [`ToolLimits::bash_default_timeout`](crate::ToolLimits::bash_default_timeout), at most
/// [`ToolLimits::bash_max_timeout`](crate::ToolLimits::bash_max_timeout)) or the context's
/// token is canceled, the whole group is killed with `SIGKILL` — background processes started
/// by the command do not outlive it (use `setsid`/`nohup` with redirected output to detach).
/// Dropping the call's future kills the group too.
///
/// The shell runs under the context's [sandbox](ToolContext::sandbox) (see
/// [`SandboxPolicy`]; applied in a short-lived thread that spawns it, never to the calling
/// process), with `TMPDIR` set to the session's [temporary directory](ToolContext::temp_dir),
/// created (mode 0700) when missing.
///
/// Result: `{"exit_code", "stdout", "stderr"}` plus `"signal": <n>` when the shell was killed
/// by a signal (then `exit_code` is null), `"timed_out": true` after a timeout,
/// `"truncated": true` when stdout + stderr exceeded
/// [`ToolLimits::output_cap_bytes`](crate::ToolLimits::output_cap_bytes): each cut stream
/// keeps its head and tail around a [`truncation_marker`], and `"sandbox_note": <text>` when a
/// confining policy was in force and the output reports a denied operation (see
/// [`sandbox_note`](crate::sandbox_note)). Output is decoded as UTF-8 (lossy).
///
/// **Escalation.** `escalate: true` (with a `justification`) asks to run this one command
/// outside the sandbox. The tool never loosens anything by itself: it runs such a call
/// unconfined only when the runtime has obtained the user's approval and says so through the
/// context ([`ToolContext::with_escalation`]); otherwise the call is refused with
/// `APPROVAL_DISABLED` and nothing runs. The arguments are accepted whatever the tool offers
/// (so a model that asks anyway gets that clear code, not an unknown-field error), but only
/// [`BashTool::with_escalation`] offers them in its schema and description.
///
/// Errors: `TOOL_CANCELED` (the group was killed), `BASH_SPAWN_FAILED`, `INVALID_ARGUMENTS`,
/// `SANDBOX_UNSUPPORTED` (this kernel cannot enforce the policy: the command did not run),
/// `SANDBOX_SETUP_FAILED` (a path of the rules or the temporary directory is unusable),
/// `APPROVAL_DISABLED` (`escalate: true` without an approval in the context).
#[derive(Debug, Default, Clone, Copy)]
pub struct BashTool {
    escalation: bool,
}

impl BashTool {
    /// The tool of a session that may ask the user to run a command outside the sandbox
    /// (`--approval on-request`): its schema offers `escalate` and `justification`.
    pub fn with_escalation() -> Self {
        Self { escalation: true }
    }

    /// Whether the schema offers `escalate`.
    pub fn offers_escalation(&self) -> bool {
        self.escalation
    }
}

/// The arguments of a `bash` call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BashArgs {
    command: String,
    timeout_ms: Option<u64>,
    #[serde(default)]
    escalate: Option<bool>,
    // Read by the runtime (`escalation_request`): accepted here so the call parses.
    #[serde(default, rename = "justification")]
    _justification: Option<String>,
}

/// What a `bash` call asks when it asks to run outside the sandbox: its `command` and
/// `justification` (see [`escalation_request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationRequest {
    /// The command, exactly as given.
    pub command: String,
    /// Why the model says it needs to run outside the sandbox (trimmed; may be empty when the
    /// model gave none, which a runtime refuses).
    pub justification: String,
}

/// The escalation a `bash` call's arguments ask for: `Some` when `escalate` is `true`, `None`
/// for every other call (including arguments that do not parse: the tool itself reports
/// those).
pub fn escalation_request(arguments: &Value) -> Option<EscalationRequest> {
    if arguments.get("escalate").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let command = arguments.get("command")?.as_str()?.to_owned();
    let justification = arguments
        .get("justification")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_owned();
    Some(EscalationRequest {
        command,
        justification,
    })
}

/// The marker that replaces the middle of a cut `bash` stream: `\n[... N bytes truncated ...]\n`.
pub fn truncation_marker(omitted_bytes: usize) -> String {
    format!("\n[... {omitted_bytes} bytes truncated ...]\n")
}

impl Tool for BashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        if self.escalation {
            "Run a bash command in the workspace root and return its exit code, stdout and \
             stderr. The command and any background processes it starts are killed when it \
             finishes or times out (timeout_ms, default 120000, max 600000). Long output is \
             truncated. Files changed by bash bypass the read/write version checks. Commands \
             run in a sandbox (writes only in the workspace and $TMPDIR, possibly no network); \
             an operation it denies fails as usual and the result gets a sandbox_note. When a \
             command truly needs more, set escalate: true with a justification: the user is \
             asked to approve running that one command outside the sandbox, and the call waits \
             for the answer (a denial or no answer in time is an error: do not retry the same \
             request)."
        } else {
            "Run a bash command in the workspace root and return its exit code, stdout and \
             stderr. The command and any background processes it starts are killed when it \
             finishes or times out (timeout_ms, default 120000, max 600000). Long output is \
             truncated. Files changed by bash bypass the read/write version checks. Commands \
             may run in a sandbox (writes only in the workspace and $TMPDIR, possibly no \
             network); an operation it denies fails as usual and the result gets a \
             sandbox_note."
        }
    }

    fn parameters(&self) -> Value {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command, run with bash -c."},
                "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 600_000, "description": "Timeout in milliseconds (default 120000)."}
            },
            "required": ["command"],
            "additionalProperties": false
        });
        if self.escalation {
            schema["properties"]["escalate"] = json!({
                "type": "boolean",
                "description": "Ask the user to run this one command outside the sandbox (default false)."
            });
            schema["properties"]["justification"] = json!({
                "type": "string",
                "description": "Required with escalate: why the command needs to run outside the sandbox, shown to the user."
            });
        }
        schema
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "exit_code": {"type": ["integer", "null"]},
                "signal": {"type": "integer"},
                "stdout": {"type": "string"},
                "stderr": {"type": "string"},
                "timed_out": {"type": "boolean"},
                "truncated": {"type": "boolean"},
                "sandbox_note": {"type": "string"}
            },
            "required": ["exit_code", "stdout", "stderr"],
            "additionalProperties": false
        }))
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: BashArgs = parse_arguments(args)?;
            run_bash(ctx, args).await
        })
    }
}

/// Kills a process group with `SIGKILL` when dropped (unless the group is already gone).
struct GroupKiller {
    pgid: Option<Pid>,
}

impl GroupKiller {
    fn kill(&self) {
        if let Some(pgid) = self.pgid {
            // ESRCH (the group is already empty) is the expected outcome after a clean exit.
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

enum Ending {
    Exited(std::process::ExitStatus),
    TimedOut,
    Canceled,
}

async fn run_bash(ctx: &ToolContext, args: BashArgs) -> ToolOutcome {
    let limits = ctx.limits();
    let timeout = match args.timeout_ms {
        None => limits.bash_default_timeout,
        Some(0) => {
            return Err(ToolError::invalid_arguments(
                "field `timeout_ms`: must be at least 1",
            ));
        }
        Some(ms) if u128::from(ms) > limits.bash_max_timeout.as_millis() => {
            return Err(ToolError::invalid_arguments(format!(
                "field `timeout_ms`: must be at most {}",
                limits.bash_max_timeout.as_millis()
            )));
        }
        Some(ms) => Duration::from_millis(ms),
    };
    if args.escalate == Some(true) && !ctx.is_escalated() {
        return Err(ToolError::EscalationRefused);
    }
    if ctx.cancellation().is_cancelled() {
        return Err(ToolError::Canceled);
    }

    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(&args.command)
        .current_dir(ctx.workspace_root())
        .env("PAGER", "cat")
        .env("GIT_PAGER", "cat")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for name in ctx.secret_env() {
        command.env_remove(name);
    }
    if let Some(dir) = ctx.temp_dir() {
        sandbox::prepare_temp_dir(dir).map_err(ToolError::Sandbox)?;
        command.env("TMPDIR", dir);
    }
    let policy = *ctx.sandbox();
    let mut child = sandbox::spawn_confined(
        command,
        policy,
        ctx.workspace_root().to_path_buf(),
        ctx.temp_dir().map(Path::to_path_buf),
    )
    .await?
    .map_err(ToolError::BashSpawn)?;
    // With process_group(0) the group id is the child's pid.
    let pgid = child.id().and_then(|pid| i32::try_from(pid).ok());
    let killer = GroupKiller {
        pgid: pgid.and_then(Pid::from_raw),
    };
    // Report the group (identified by its leader's start time) so that a runtime can record
    // it and stop it after a crash of this process.
    if let Some(pgid) = pgid
        && let Some(start_time) = process_start_time(pgid)
    {
        ctx.report_process(ProcessInfo { pgid, start_time });
    }

    let cap = limits.output_cap_bytes;
    let stdout = Arc::new(Mutex::new(Capture::new(cap)));
    let stderr = Arc::new(Mutex::new(Capture::new(cap)));
    let stdout_reader = child
        .stdout
        .take()
        .map(|pipe| spawn_reader(pipe, Arc::clone(&stdout)));
    let stderr_reader = child
        .stderr
        .take()
        .map(|pipe| spawn_reader(pipe, Arc::clone(&stderr)));

    let ending = tokio::select! {
        status = child.wait() => match status {
            Ok(status) => Ending::Exited(status),
            Err(error) => {
                killer.kill();
                return Err(ToolError::Internal(format!("waiting for bash failed: {error}")));
            }
        },
        () = tokio::time::sleep(timeout) => Ending::TimedOut,
        () = ctx.cancellation().cancelled() => Ending::Canceled,
    };
    // Kill whatever is left of the group: background processes after a normal exit, the whole
    // tree after a timeout or cancellation. Then reap the shell.
    killer.kill();
    let status = match ending {
        Ending::Exited(status) => Some(status),
        Ending::TimedOut | Ending::Canceled => child.wait().await.ok(),
    };
    // Once the group is dead the pipes close; a process that escaped the group may keep them
    // open, so the drain is bounded.
    for reader in [stdout_reader, stderr_reader].into_iter().flatten() {
        let abort = reader.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, reader).await.is_err() {
            abort.abort();
        }
    }
    if matches!(ending, Ending::Canceled) {
        return Err(ToolError::Canceled);
    }

    let stdout = std::mem::take(&mut *lock(&stdout));
    let stderr = std::mem::take(&mut *lock(&stderr));
    let (stdout_budget, stderr_budget) = split_budget(cap, stdout.total, stderr.total);
    let truncated = stdout.total > stdout_budget || stderr.total > stderr_budget;

    let mut result = Map::new();
    let exit_code = status.and_then(|status| status.code());
    result.insert("exit_code".into(), json!(exit_code));
    if let Some(signal) = status.and_then(|status| {
        use std::os::unix::process::ExitStatusExt;
        status.signal()
    }) {
        result.insert("signal".into(), json!(signal));
    }
    let stdout = stdout.render(stdout_budget);
    let stderr = stderr.render(stderr_budget);
    let note = sandbox::sandbox_note(
        &policy,
        ctx.workspace_root(),
        ctx.temp_dir(),
        &[&stdout, &stderr],
    );
    result.insert("stdout".into(), json!(stdout));
    result.insert("stderr".into(), json!(stderr));
    if matches!(ending, Ending::TimedOut) {
        result.insert("timed_out".into(), json!(true));
    }
    if truncated {
        result.insert("truncated".into(), json!(true));
    }
    if let Some(note) = note {
        result.insert("sandbox_note".into(), json!(note));
    }
    Ok(Value::Object(result))
}

fn spawn_reader<R>(mut pipe: R, capture: Arc<Mutex<Capture>>) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 8192];
        loop {
            match pipe.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => lock(&capture).push(&buffer[..read]),
            }
        }
    })
}

/// Splits the output cap between stdout and stderr: a stream that needs less than half leaves
/// the rest to the other.
fn split_budget(cap: usize, stdout_total: usize, stderr_total: usize) -> (usize, usize) {
    if stdout_total + stderr_total <= cap {
        return (stdout_total, stderr_total);
    }
    let half = cap / 2;
    if stdout_total <= half {
        (stdout_total, cap - stdout_total)
    } else if stderr_total <= half {
        (cap - stderr_total, stderr_total)
    } else {
        (half, cap - half)
    }
}

/// One output stream: its first `cap` bytes, its last `cap` bytes, and its total length.
#[derive(Debug, Default)]
struct Capture {
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: usize,
}

impl Capture {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            ..Self::default()
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        if self.head.len() < self.cap {
            let take = bytes.len().min(self.cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.tail.extend(bytes);
        if self.tail.len() > self.cap {
            let excess = self.tail.len() - self.cap;
            self.tail.drain(..excess);
        }
    }

    /// The stream within `budget` bytes (plus the marker when cut), decoded lossily.
    fn render(&self, budget: usize) -> String {
        if self.total <= budget {
            let mut all = self.head.clone();
            all.extend(self.tail.iter());
            return String::from_utf8_lossy(&all).into_owned();
        }
        let head_len = (budget / 2).min(self.head.len());
        let tail_len = budget - head_len;
        // The last `tail_len` bytes: from the tail ring, topped up from the head when the
        // stream was short enough for head and tail to be contiguous.
        let mut tail: Vec<u8> = Vec::with_capacity(tail_len);
        let from_tail = tail_len.min(self.tail.len());
        let from_head = tail_len - from_tail;
        tail.extend_from_slice(&self.head[self.head.len() - from_head..]);
        tail.extend(self.tail.iter().skip(self.tail.len() - from_tail));
        format!(
            "{}{}{}",
            String::from_utf8_lossy(&self.head[..head_len]),
            truncation_marker(self.total - head_len - tail_len),
            String::from_utf8_lossy(&tail)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut capture = Capture::new(10);
        for chunk in [b"0123".as_slice(), b"456789abcd", b"efghij"] {
            capture.push(chunk);
        }
        assert_eq!(capture.total, 20);
        assert_eq!(capture.render(20), "0123456789abcdefghij");
        assert_eq!(
            capture.render(6),
            format!("012{}hij", truncation_marker(14))
        );
    }

    #[test]
    fn short_stream_tail_comes_from_head() {
        let mut capture = Capture::new(10);
        capture.push(b"0123456789ab");
        assert_eq!(capture.render(4), format!("01{}ab", truncation_marker(8)));
        assert_eq!(
            capture.render(10),
            format!("01234{}789ab", truncation_marker(2))
        );
    }

    #[test]
    fn budget_goes_to_the_stream_that_needs_it() {
        assert_eq!(split_budget(100, 10, 20), (10, 20));
        assert_eq!(split_budget(100, 10, 500), (10, 90));
        assert_eq!(split_budget(100, 500, 10), (90, 10));
        assert_eq!(split_budget(100, 500, 500), (50, 50));
    }
}
