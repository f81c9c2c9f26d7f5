//! The per-call [`ToolContext`] and its [`ToolLimits`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use troupe_protocol::SessionId;

use crate::effect::FilePlan;
use crate::error::ToolError;
use crate::observe::{FileObservations, FileSeen, SeenObserver};
use crate::process::{ProcessInfo, ProcessObserver};
use crate::sandbox::{SandboxPolicy, session_temp_dir};

/// Bounds on what the core tools do and return.
///
/// `Default` gives the values documented on each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLimits {
    /// `bash` timeout when the model gives no `timeout_ms`. Default 120 s.
    pub bash_default_timeout: Duration,
    /// The largest `timeout_ms` `bash` accepts; larger values are `INVALID_ARGUMENTS`.
    /// Default 600 s.
    pub bash_max_timeout: Duration,
    /// The most bytes of text one result carries: `bash` stdout + stderr together, and the
    /// `content` of one `read`. Longer output is cut with a truncation marker. Default 30 000.
    pub output_cap_bytes: usize,
    /// The most lines one `read` returns when the model gives no `limit`. Default 2 000.
    pub read_default_lines: usize,
    /// The most entries `glob` and `grep` return. Default 500.
    pub max_results: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            bash_default_timeout: Duration::from_millis(120_000),
            bash_max_timeout: Duration::from_millis(600_000),
            output_cap_bytes: 30_000,
            read_default_lines: 2_000,
            max_results: 500,
        }
    }
}

/// Everything a tool call needs to know about its caller.
///
/// A runtime builds one per agent (and clones it with a fresh
/// [cancellation token](ToolContext::with_cancellation) per turn). Cloning is cheap: the
/// observation store is shared through an [`Arc`].
#[derive(Debug, Clone)]
pub struct ToolContext {
    workspace_root: PathBuf,
    owner: SessionId,
    observations: Arc<FileObservations>,
    cancel: CancellationToken,
    limits: ToolLimits,
    secret_env: Arc<[String]>,
    process_observer: Option<ProcessObserver>,
    seen_observer: Option<SeenObserver>,
    call_id: Option<Arc<str>>,
    file_plan: Option<Arc<FilePlan>>,
    sandbox: SandboxPolicy,
    temp_dir: Option<PathBuf>,
    escalated: bool,
}

impl ToolContext {
    /// A context for the agent whose session is `owner`, working in `workspace` (canonicalized
    /// here), recording file observations in `observations` (share one store among all
    /// members of a team; it keeps observations per owner). It has a fresh, never-canceled
    /// token, default limits, the default [sandbox](SandboxPolicy) (`workspace-write`, network
    /// on) and [`session_temp_dir(owner)`](crate::session_temp_dir) as its temporary directory.
    ///
    /// # Errors
    /// `FS_NOT_FOUND` when `workspace` does not exist, `FS_NOT_A_DIRECTORY` when it is not a
    /// directory, `FS_IO` when it cannot be canonicalized.
    pub fn new(
        workspace: impl AsRef<Path>,
        owner: SessionId,
        observations: Arc<FileObservations>,
    ) -> Result<Self, ToolError> {
        let workspace = workspace.as_ref();
        let shown = workspace.display().to_string();
        let workspace_root = std::fs::canonicalize(workspace).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ToolError::NotFound {
                    path: shown.clone(),
                }
            } else {
                ToolError::Io {
                    path: shown.clone(),
                    source,
                }
            }
        })?;
        if !workspace_root.is_dir() {
            return Err(ToolError::NotADirectory { path: shown });
        }
        let temp_dir = Some(session_temp_dir(&owner));
        Ok(Self {
            workspace_root,
            owner,
            observations,
            cancel: CancellationToken::new(),
            limits: ToolLimits::default(),
            secret_env: Arc::from(Vec::new()),
            process_observer: None,
            seen_observer: None,
            call_id: None,
            file_plan: None,
            sandbox: SandboxPolicy::default(),
            temp_dir,
            escalated: false,
        })
    }

    /// The same context for the model's tool call `id` (a runtime sets it per call; tools
    /// that record their effect elsewhere — the Team tools — name the call with it).
    #[must_use]
    pub fn with_call_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.call_id = Some(id.into());
        self
    }

    /// The model's id of the call being run, when the runtime set one.
    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_deref()
    }

    /// The same context carrying `plan`, the [`FilePlan`] that [`crate::Tool::plan`] made
    /// for this very call: `write`/`edit` then carry out exactly that plan.
    #[must_use]
    pub fn with_file_plan(mut self, plan: FilePlan) -> Self {
        self.file_plan = Some(Arc::new(plan));
        self
    }

    /// The plan this call runs with, if any (see [`ToolContext::with_file_plan`]).
    pub fn file_plan(&self) -> Option<&FilePlan> {
        self.file_plan.as_deref()
    }

    /// The same context with `cancel` as its cancellation token (typically a turn's token).
    #[must_use]
    pub fn with_cancellation(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// The same context with other limits.
    #[must_use]
    pub fn with_limits(mut self, limits: ToolLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The same context with `names` as the environment variables removed from every process
    /// a tool starts (`bash`), e.g. the variables holding API keys, so a command cannot print
    /// them into a result the model sees. Replaces any earlier list; names that are not set
    /// are harmless. Default: none.
    #[must_use]
    pub fn with_secret_env(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.secret_env = names.into_iter().collect();
        self
    }

    /// The same context with `observer` told about every process group a tool call starts
    /// (see [`ProcessObserver`]), e.g. to record it so a restarted runtime can stop a group
    /// that outlived a crash. Replaces any earlier observer. Default: none.
    #[must_use]
    pub fn with_process_observer(mut self, observer: ProcessObserver) -> Self {
        self.process_observer = Some(observer);
        self
    }

    /// The same context with `observer` told what a `read` saw of its file ([`FileSeen`]),
    /// e.g. to record it with the call's result so a restarted runtime can rebuild the
    /// session's observations ([`crate::restore_observations`]). Replaces any earlier
    /// observer. Default: none.
    #[must_use]
    pub fn with_seen_observer(mut self, observer: SeenObserver) -> Self {
        self.seen_observer = Some(observer);
        self
    }

    /// Tells the seen observer, if any, what a call saw of a file.
    pub fn report_seen(&self, seen: FileSeen) {
        if let Some(observer) = &self.seen_observer {
            observer.notify(seen);
        }
    }

    /// The same context with `policy` confining every process a tool starts (`bash`; see
    /// [`SandboxPolicy`]). Replaces the earlier policy. Default: `workspace-write`, network on.
    #[must_use]
    pub fn with_sandbox(mut self, policy: SandboxPolicy) -> Self {
        self.sandbox = policy;
        self
    }

    /// The same context with `dir` as the session's temporary directory: `bash` creates it
    /// (mode 0700) when missing, exports it as `TMPDIR`, and the sandbox lets commands write
    /// there in every mode. `None` exports nothing and leaves no temporary directory writable
    /// under a confining policy. Default: [`session_temp_dir(owner)`](crate::session_temp_dir).
    #[must_use]
    pub fn with_temp_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.temp_dir = dir;
        self
    }

    /// The same context for one call the user approved to run outside the sandbox (a `bash`
    /// call with `escalate: true`): its processes run with [`SandboxPolicy::OFF`], and `bash`
    /// accepts `escalate`. A runtime sets it only after the approval is durably recorded;
    /// never on a context that other calls share.
    #[must_use]
    pub fn with_escalation(mut self) -> Self {
        self.sandbox = SandboxPolicy::OFF;
        self.escalated = true;
        self
    }

    /// Whether this context carries an approval to run outside the sandbox (see
    /// [`ToolContext::with_escalation`]).
    pub fn is_escalated(&self) -> bool {
        self.escalated
    }

    /// The sandbox policy of the processes tools start.
    pub fn sandbox(&self) -> &SandboxPolicy {
        &self.sandbox
    }

    /// The session's temporary directory, if any (see [`ToolContext::with_temp_dir`]).
    pub fn temp_dir(&self) -> Option<&Path> {
        self.temp_dir.as_deref()
    }

    /// The environment variables removed from the processes tools start.
    pub fn secret_env(&self) -> &[String] {
        &self.secret_env
    }

    /// Tells the process observer, if any, about a started process group.
    pub fn report_process(&self, info: ProcessInfo) {
        if let Some(observer) = &self.process_observer {
            observer.notify(info);
        }
    }

    /// The canonical workspace root: every path tools touch lies under it.
    pub fn workspace_root(&self) -> &Path {
        &self.workspace_root
    }

    /// The session whose file observations `read`/`write`/`edit` use and record.
    pub fn owner(&self) -> &SessionId {
        &self.owner
    }

    /// The shared observation store.
    pub fn observations(&self) -> &Arc<FileObservations> {
        &self.observations
    }

    /// The token that cancels running tool calls.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The limits in force.
    pub fn limits(&self) -> &ToolLimits {
        &self.limits
    }
}
