//! Tool trait, registry, JSON schemas and the core coding tools (read, write, edit, glob, grep,
//! bash) of DESIGN §4.
//!
//! # Shape
//! - [`Tool`]: an object-safe trait (name, description, JSON-schema parameters, optional
//!   output schema, and a boxed-future [`call`](Tool::call)); registries hold
//!   `Arc<dyn Tool>`.
//! - [`ToolRegistry`]: the tools of one agent, in a stable order; [`ToolRegistry::dispatch`]
//!   turns a model's tool call (name + raw JSON arguments) into a [`ToolOutcome`].
//! - [`ToolContext`]: who is calling and where — the canonical workspace root, the owner
//!   session, the shared [`FileObservations`] store, a cancellation token, [`ToolLimits`], the
//!   environment variables kept from child processes, an optional [`ProcessObserver`], the
//!   [`SandboxPolicy`] of `bash` and the session's temporary directory.
//! - [`ToolError`]: every failure has a stable `SCREAMING_SNAKE` code
//!   ([`troupe_protocol::ErrorCode`]); the model sees `{"code","message"}`
//!   ([`ToolError::to_json`]), with the REFERENCE a.12 remedies appended to
//!   `FS_STALE_VERSION` and `FS_NOT_OBSERVED`.
//!
//! # Using it from a runtime
//! ```no_run
//! use std::sync::Arc;
//! use troupe_protocol::SessionId;
//! use troupe_tools::{FileObservations, ToolContext, ToolRegistry, render_outcome};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // One observation store per team (or process), shared by every member.
//! let observations = Arc::new(FileObservations::new());
//! // Per agent: its registry and its context (the owner is the agent's session).
//! let registry = ToolRegistry::with_core_tools();
//! let ctx = ToolContext::new("/path/to/workspace", SessionId::random(), observations)?;
//! // Per turn: a context with the turn's cancellation token.
//! let turn_ctx = ctx.clone().with_cancellation(tokio_util::sync::CancellationToken::new());
//! // Per tool call: the model's name and raw argument text.
//! let outcome = registry.dispatch(&turn_ctx, "read", r#"{"path":"src/lib.rs"}"#).await;
//! let text_for_the_model = render_outcome(&outcome); // compact JSON
//! # let _ = text_for_the_model;
//! # Ok(())
//! # }
//! ```
//!
//! # Invariants
//! - Every path a file tool touches resolves (symlinks followed) inside the workspace root;
//!   anything else is `FS_PATH_OUTSIDE_WORKSPACE`.
//! - Every `bash` process runs under the context's [`SandboxPolicy`] (a Landlock ruleset, see
//!   [`sandbox`]); the policy is applied in a short-lived thread that spawns the shell, never
//!   to the calling process, and never weaker than asked: a kernel that cannot enforce it
//!   fails the call (`SANDBOX_UNSUPPORTED`) instead of running the command unconfined.
//! - `write` and `edit` never replace content their owner session has not seen in its current
//!   version (REFERENCE a.12); the check and the publication happen under one in-process lock
//!   per target. External writers (bash, other processes) bypass the lock, but are detected by
//!   the version token.
//! - This crate knows nothing of teams, session logs or models. The plain data a log records of
//!   a tool call — [`FileEffect`], [`FileSeen`] — and the recorded [`SandboxPolicy`] (with
//!   [`SandboxMode`], [`NetworkAccess`]) are the session model's (`troupe_session::{effect,
//!   sandbox}`), re-exported here unchanged.

mod bash;
mod changes;
mod context;
mod effect;
mod error;
mod files;
mod fsops;
mod observe;
mod path;
mod process;
mod registry;
pub mod sandbox;
mod search;
mod tool;

pub use bash::{BashTool, EscalationRequest, escalation_request, truncation_marker};
pub use changes::{GIT_TIMEOUT, SCAN_MAX_FILES, WorkspaceScan};
pub use context::{ToolContext, ToolLimits};
pub use effect::{FileEffect, FileEffectState, FilePlan, file_effect_state};
pub use error::{NOT_OBSERVED_REMEDY, RegistryError, STALE_VERSION_REMEDY, ToolError};
pub use files::{EditTool, LINE_TRUNCATED_MARKER, READ_MAX_LINE_BYTES, ReadTool, WriteTool};
pub use observe::{
    FileObservations, FileSeen, FileVersion, Observation, SeenObserver, restore_observations,
};
pub use process::{ProcessInfo, ProcessObserver, process_start_time, stop_leftover_group};
pub use registry::{ToolArguments, ToolRegistry, core_tools};
pub use sandbox::{
    NetworkAccess, SandboxError, SandboxMode, SandboxPolicy, guard_tcp_ports, guarded_tcp_ports,
    probe as probe_sandbox, sandbox_note, session_temp_dir,
};
pub use search::{GREP_MAX_LINE_BYTES, GlobTool, GrepTool};
pub use tool::{
    PlanFuture, TextFuture, TextOutcome, Tool, ToolFuture, ToolOutcome, ToolSpec, parse_arguments,
    render_outcome, render_text_outcome,
};
