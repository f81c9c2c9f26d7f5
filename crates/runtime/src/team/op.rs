//! The Team service's one entry point, as data: a request ([`TeamOp`]) and its result
//! ([`TeamReply`]), the call's context ([`OpContext`]) and the errors ([`TeamOpError`]).
//!
//! The ten Team tools turn their arguments into a [`TeamOp`] and render the [`TeamReply`]
//! (REFERENCE d.4); nothing else of a request travels between a tool and the service, so a
//! remote transport can carry the same request later.

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use troupe_protocol::{ErrorCode, MessageId, SessionId};
use troupe_team::{
    CreateTask, Delivery, FoldError, InvariantError, MemberContext, MemberView, ReplayError,
    TaskListQuery, TaskPage, TaskView, TeamError, UpdateTask,
};

use super::schema::TeamToolName;
use crate::error::RuntimeError;

/// One Team operation (REFERENCE c.7–c.13, d.4), the caller aside (the service resolves it).
#[derive(Debug, Clone, PartialEq)]
pub enum TeamOp {
    /// `spawn_teammate` (c.8): reserve `name`, start the child on `prompt`.
    SpawnTeammate {
        /// The member name (validated as given).
        name: String,
        /// The delegated job.
        description: String,
        /// The initial assignment (must not be blank).
        prompt: String,
        /// Fresh or fork.
        context: MemberContext,
    },
    /// `send_message` (quiet) / `followup_task` (wakeup) (c.10.1).
    Send {
        /// A member name, or `lead`.
        target: String,
        /// The message text (one text block).
        text: String,
        /// Quiet or wakeup.
        delivery: Delivery,
    },
    /// `list_agents` (c.7).
    ListAgents,
    /// `wait_agent` (c.12): `timeout_ms` as the model gave it, for the service's
    /// authoritative `TEAM_INVALID_TIMEOUT`.
    WaitAgent {
        /// The timeout, unvalidated.
        timeout_ms: Value,
    },
    /// `interrupt_agent` (c.13).
    InterruptAgent {
        /// A teammate's name.
        target: String,
    },
    /// `team_task_create` (c.11.3).
    CreateTask(CreateTask),
    /// `team_task_list` (d.4.2).
    ListTasks(TaskListQuery),
    /// `team_task_get` (c.11.2).
    GetTask {
        /// The task id as given.
        task_id: String,
    },
    /// `team_task_update` (c.11.4).
    UpdateTask(UpdateTask),
}

/// What a [`TeamOp`] returns, one variant per kind of result.
#[derive(Debug, Clone, PartialEq)]
pub enum TeamReply {
    /// The new member (`SpawnTeammate`).
    Member(MemberView),
    /// The stored message (`Send`): `accepted` when the target durably holds it now.
    Sent {
        /// The Team message id.
        message_id: MessageId,
        /// `accepted` (`true`) or `queued` (`false`; still stored: never resend).
        accepted: bool,
    },
    /// The roster, the Lead first (the Team views' rows).
    Members(Vec<MemberView>),
    /// The roster as `list_agents` answers (`ListAgents`): each row with its `usage`.
    Roster(Vec<ListedMember>),
    /// How the wait ended (`WaitAgent`).
    Waited(WaitOutcome),
    /// The target's status before the interrupt (`InterruptAgent`): `running`, `idle` or
    /// `inactive`.
    Interrupted {
        /// The previous status.
        previous_status: &'static str,
    },
    /// A task (`CreateTask`, `GetTask`, `UpdateTask`).
    Task(TaskView),
    /// A page of tasks (`ListTasks`).
    Tasks(TaskPage),
}

/// The context of one call: the caller's signal and the tool call the Team record is the
/// effect of.
#[derive(Debug, Clone, Default)]
pub struct OpContext {
    /// The caller's signal (the tool call's cancellation): stops a creation (c.8 step 3) and
    /// aborts a wait (`TEAM_WAIT_ABORTED`). `None`: never cancelled.
    pub cancel: Option<CancellationToken>,
    /// The member tool call, when the request comes from one: the Team record it appends is
    /// linked to it (`tool/effect`, DESIGN decision 10).
    pub origin: Option<CallOrigin>,
}

/// The member tool call a Team record is the effect of (linked by `tool/effect`, DESIGN
/// decision 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOrigin {
    /// The calling member's session.
    pub session: SessionId,
    /// The model's call id.
    pub call_id: String,
    /// The tool.
    pub tool: TeamToolName,
}

/// The outcome of `wait_agent` (REFERENCE c.12, d.4.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitOutcome {
    /// A change happened (`timed_out: false`) or the timeout passed (`true`).
    Waited {
        /// Whether the timeout passed first.
        timed_out: bool,
    },
    /// Nobody else is running or provisioning: waiting could not make progress.
    NoProgress,
}

/// The fixed `noProgress` text (REFERENCE d.4.1).
pub const NO_PROGRESS_MESSAGE: &str = "No other Team member is running or provisioning, so \
waiting cannot make progress and never wakes inactive teammates. Re-list with list_agents and \
team_task_list, then use followup_task to wake each inactive teammate you still need before \
waiting again.";

/// Errors of Team operations: a Team rule (REFERENCE c.16 codes), a lower layer, or the Lead
/// log itself.
#[derive(Debug, thiserror::Error)]
pub enum TeamOpError {
    /// A Team rule refused the operation (its code, e.g. `TEAM_TASK_STALE_REVISION`).
    #[error(transparent)]
    Team(#[from] TeamError),
    /// The runtime or journal failed (its code).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The Lead log does not fold (`TEAM_LOG_INVALID`), or a candidate event broke an
    /// invariant (`INVARIANT`): the team crate's typed error.
    #[error(transparent)]
    Log(#[from] LogError),
}

/// What is wrong with a Lead log or with an event about to be appended to it (the team
/// crate's typed errors, REFERENCE c.4–c.5).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The stored Lead log does not fold (at attach): the first refused event. Code
    /// `TEAM_LOG_INVALID`.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// A stored Team event the fold refused right after its append (only possible when the
    /// Lead's secret redaction changed the record). Code `TEAM_LOG_INVALID`.
    #[error(transparent)]
    Fold(#[from] FoldError),
    /// A candidate event refused before anything was appended (REFERENCE c.5). Code
    /// `INVARIANT`.
    #[error(transparent)]
    Invariant(#[from] InvariantError),
    /// A decision returned a record of another kind than it makes (a defect of the team
    /// crate; nothing was appended). Code `TEAM_LOG_INVALID`.
    #[error("internal: the decision did not produce a {expected} record")]
    Decision {
        /// The record type expected, e.g. `team/member`.
        expected: &'static str,
    },
}

impl ErrorCode for TeamOpError {
    fn code(&self) -> &'static str {
        match self {
            TeamOpError::Team(e) => e.code(),
            TeamOpError::Runtime(e) => e.code(),
            TeamOpError::Log(e) => e.code(),
        }
    }
}

impl ErrorCode for LogError {
    fn code(&self) -> &'static str {
        match self {
            LogError::Replay(e) => e.code(),
            LogError::Fold(e) => e.code(),
            LogError::Invariant(e) => e.code(),
            LogError::Decision { .. } => "TEAM_LOG_INVALID",
        }
    }
}

impl From<troupe_journal::JournalError> for TeamOpError {
    fn from(e: troupe_journal::JournalError) -> Self {
        TeamOpError::Runtime(RuntimeError::Journal(e))
    }
}

impl From<troupe_session::InvalidEvent> for TeamOpError {
    fn from(e: troupe_session::InvalidEvent) -> Self {
        TeamOpError::Runtime(RuntimeError::from(e))
    }
}

impl From<ReplayError> for TeamOpError {
    fn from(e: ReplayError) -> Self {
        TeamOpError::Log(LogError::Replay(e))
    }
}

impl From<InvariantError> for TeamOpError {
    fn from(e: InvariantError) -> Self {
        TeamOpError::Log(LogError::Invariant(e))
    }
}

impl From<FoldError> for TeamOpError {
    fn from(e: FoldError) -> Self {
        TeamOpError::Log(LogError::Fold(e))
    }
}

/// A `list_agents` row: the member view (REFERENCE c.7), the `host` of a live member (DESIGN
/// §7: `local` for the Lead's process — the Lead, and every teammate resident there —, else
/// the name its host in another process reports, a worker's `--name`; absent for a member
/// that is not live, or whose host has not reported yet), and a compact `usage` — what the
/// member's model calls spent so far, from the run's live ledger (`crate::ledger`):
/// `{"modelCalls","promptTokens","completionTokens","cachedTokens","costUsd"?}` (`costUsd`
/// only when its model has a price).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ListedMember {
    /// The member.
    #[serde(flatten)]
    pub member: MemberView,
    /// Where it runs, while it is live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its usage.
    pub usage: troupe_session::ledger::CompactUsage,
}
