//! Errors of the Team domain (REFERENCE c.16, c.4, c.5).
//!
//! - [`TeamError`]: a typed rejection of a command (every code of REFERENCE c.16).
//! - [`FoldError`]: a Lead log that breaks a fold rule (REFERENCE c.4); code `TEAM_LOG_INVALID`.
//! - [`ReplayError`]: a [`FoldError`] located at an event's seq; code `TEAM_LOG_INVALID`.
//! - [`InvariantError`]: a candidate event refused before append (REFERENCE c.5); code
//!   `INVARIANT`.

use troupe_protocol::{ErrorCode, Seq};

use crate::graph::GraphViolation;

/// The package name an [`InvariantError`] reports (REFERENCE c.5 names the original's
/// package; Troupe names its own crate).
pub const INVARIANT_PACKAGE: &str = "troupe-team";

/// A typed rejection of a Team command. Each variant has one stable code (REFERENCE c.16),
/// returned by [`ErrorCode::code`]; messages are one line, name the offending value, and are
/// what the model sees after the code.
///
/// None of these is retried automatically: each describes the caller's input or the current
/// state, and repeating the same command against the same state gives the same answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TeamError {
    /// A limit is not a positive safe integer (REFERENCE c.15). Code `TEAM_INVALID_CONFIG`.
    #[error("invalid Agent Teams configuration {key} = {value}: {reason}")]
    InvalidConfig {
        /// The configuration key, e.g. `maxMembers`.
        key: String,
        /// The refused value as JSON text.
        value: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// The caller has no Team membership (REFERENCE c.2). Code `TEAM_NOT_MEMBER`.
    #[error("agent {id} is not a member of an Agent Team")]
    NotMember {
        /// The caller's session id.
        id: String,
    },
    /// A teammate called a Lead-only operation (spawn, interrupt, task `reassign`).
    /// Code `TEAM_LEAD_REQUIRED`.
    #[error("only the Team Lead may {action}")]
    LeadRequired {
        /// What was attempted, e.g. `spawn teammates`.
        action: String,
    },
    /// A member name fails the pattern, the length limit or equals `lead` (REFERENCE c.1).
    /// Code `TEAM_INVALID_MEMBER_NAME`.
    #[error(
        "invalid teammate name {name:?}: use 1-64 lowercase letters, digits and single inner hyphens, not \"lead\""
    )]
    InvalidMemberName {
        /// The refused name.
        name: String,
    },
    /// An empty or over-long text, `edit` without fields, `set_dependencies` without a list, a
    /// repeated blocker, or another malformed argument. Code `TEAM_INVALID_ARGUMENT`.
    #[error("{message}")]
    InvalidArgument {
        /// What is wrong.
        message: String,
    },
    /// The name is already reserved by a member in any phase (REFERENCE c.8).
    /// Code `TEAM_MEMBER_NAME_TAKEN`.
    #[error("teammate name {name:?} is already taken in this Team")]
    MemberNameTaken {
        /// The taken name.
        name: String,
    },
    /// The roster (failed members included) already has `maxMembers` entries.
    /// Code `TEAM_MEMBER_LIMIT`.
    #[error("the Team already has the maximum of {limit} teammates")]
    MemberLimit {
        /// The configured `maxMembers`.
        limit: u64,
    },
    /// Creation and recovery settled opposite terminal phases, or an initial prompt was not
    /// durably accepted (REFERENCE c.8). Code `TEAM_PROVISIONING_CONFLICT`.
    #[error("{message}")]
    ProvisioningConflict {
        /// What conflicted.
        message: String,
    },
    /// The Team runtime is disposed or the operation was aborted by it (REFERENCE c.14).
    /// Code `TEAM_DISPOSED`.
    #[error("{message}")]
    Disposed {
        /// What was refused or aborted.
        message: String,
    },
    /// A disposal step exceeded `disposalTimeoutMs` (REFERENCE c.14).
    /// Code `TEAM_DISPOSAL_TIMEOUT`.
    #[error("Agent Teams disposal step {step} exceeded {timeout_ms} ms")]
    DisposalTimeout {
        /// The step that timed out.
        step: String,
        /// The configured bound.
        timeout_ms: u64,
    },
    /// A target or assignee name is neither `lead` nor an active member.
    /// Code `TEAM_MEMBER_NOT_FOUND`.
    #[error("no active Team member named {name:?}")]
    MemberNotFound {
        /// The name as given (trimmed).
        name: String,
    },
    /// A member sent a message to itself. Code `TEAM_SELF_MESSAGE`.
    #[error("a Team member cannot send a message to itself ({name})")]
    SelfMessage {
        /// The caller's Team name.
        name: String,
    },
    /// The target already has `maxPendingMessagesPerMember` undelivered messages.
    /// Code `TEAM_MAILBOX_FULL`.
    #[error("mailbox of {target} is full: {limit} messages are still pending")]
    MailboxFull {
        /// The target's Team name.
        target: String,
        /// The configured limit.
        limit: u64,
    },
    /// The framed message is larger than `maxMessageBytes` (UTF-8 bytes of its compact JSON).
    /// Code `TEAM_MESSAGE_TOO_LARGE`.
    #[error("team message is {bytes} bytes once framed; the limit is {limit} bytes")]
    MessageTooLarge {
        /// The framed size in bytes.
        bytes: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The Lead tried to interrupt `lead` (REFERENCE c.13). Code `TEAM_INVALID_TARGET`.
    #[error("the Team Lead cannot interrupt itself")]
    InvalidTarget {
        /// The name as given.
        name: String,
    },
    /// A wait timeout outside `[10000, 3600000]` ms or not an integer (REFERENCE c.12). The
    /// message names `wait_agent`'s argument, `timeout_ms`. Code `TEAM_INVALID_TIMEOUT`.
    #[error(
        "timeout_ms must be an integer number of milliseconds in [10000, 3600000], got {value}"
    )]
    InvalidTimeout {
        /// The refused value as JSON text.
        value: String,
    },
    /// A wait was aborted with a non-error reason (REFERENCE c.12).
    /// Code `TEAM_WAIT_ABORTED`.
    #[error("wait_agent aborted: {reason}")]
    WaitAborted {
        /// The abort reason, printed raw.
        reason: String,
    },
    /// `maxTasks` non-deleted tasks exist, or the numeric id space is exhausted.
    /// Code `TEAM_TASK_LIMIT`.
    #[error("{message}")]
    TaskLimit {
        /// Which limit was hit.
        message: String,
    },
    /// An unknown task id, or a blocker that is unknown or deleted.
    /// Code `TEAM_TASK_NOT_FOUND`.
    #[error("{message}")]
    TaskNotFound {
        /// Which id was not found.
        message: String,
    },
    /// The compare-and-set token is stale. Code `TEAM_TASK_STALE_REVISION`.
    #[error(
        "stale team task revision: task {id} is at revision {current}, not {expected}; re-read it and retry"
    )]
    TaskStaleRevision {
        /// The task.
        id: String,
        /// The revision the caller sent.
        expected: u64,
        /// The task's current revision.
        current: u64,
    },
    /// A mutation of a deleted task (tombstone). Code `TEAM_TASK_DELETED`.
    #[error("task {id} is deleted")]
    TaskDeleted {
        /// The task.
        id: String,
    },
    /// An owner-or-Lead action by another member. Code `TEAM_TASK_UNAUTHORIZED`.
    #[error("only the Team Lead or the task's owner may {action} task {id}")]
    TaskUnauthorized {
        /// The task.
        id: String,
        /// The action name, e.g. `edit`.
        action: String,
    },
    /// A claim of a task owned by someone else. Code `TEAM_TASK_ALREADY_CLAIMED`.
    #[error("task {id} is already claimed by {owner}")]
    TaskAlreadyClaimed {
        /// The task.
        id: String,
        /// The current owner's Team name.
        owner: String,
    },
    /// A claim of a non-pending or unready task, or an assigning `reassign` of an unready
    /// task. Code `TEAM_TASK_BLOCKED`.
    #[error("{message}")]
    TaskBlocked {
        /// Why the task cannot be taken.
        message: String,
    },
    /// `release`/`complete` need `in_progress`, `reopen` needs `completed`, `reassign` needs
    /// `pending` or `in_progress`. Code `TEAM_TASK_INVALID_TRANSITION`.
    #[error("cannot {action} task {id} while it is {status}")]
    TaskInvalidTransition {
        /// The task.
        id: String,
        /// The action.
        action: String,
        /// The task's current status (wire spelling).
        status: String,
    },
    /// A self-blocker or a dependency cycle. Code `TEAM_TASK_DEPENDENCY_CYCLE`.
    #[error("{message}")]
    TaskDependencyCycle {
        /// Which edge closes the cycle.
        message: String,
    },
    /// A delete while a non-deleted task depends on the task. Code `TEAM_TASK_HAS_DEPENDENTS`.
    #[error("task {id} cannot be deleted: task {dependent} depends on it")]
    TaskHasDependents {
        /// The task.
        id: String,
        /// The first dependent in creation order.
        dependent: String,
    },
    /// A write scope fails normalization (REFERENCE c.11.7). Code `TEAM_INVALID_WRITE_SCOPE`.
    #[error("invalid write scope {scope:?}: {reason}")]
    InvalidWriteScope {
        /// The scope as given.
        scope: String,
        /// Which rule it breaks.
        reason: String,
    },
}

impl ErrorCode for TeamError {
    fn code(&self) -> &'static str {
        match self {
            TeamError::InvalidConfig { .. } => "TEAM_INVALID_CONFIG",
            TeamError::NotMember { .. } => "TEAM_NOT_MEMBER",
            TeamError::LeadRequired { .. } => "TEAM_LEAD_REQUIRED",
            TeamError::InvalidMemberName { .. } => "TEAM_INVALID_MEMBER_NAME",
            TeamError::InvalidArgument { .. } => "TEAM_INVALID_ARGUMENT",
            TeamError::MemberNameTaken { .. } => "TEAM_MEMBER_NAME_TAKEN",
            TeamError::MemberLimit { .. } => "TEAM_MEMBER_LIMIT",
            TeamError::ProvisioningConflict { .. } => "TEAM_PROVISIONING_CONFLICT",
            TeamError::Disposed { .. } => "TEAM_DISPOSED",
            TeamError::DisposalTimeout { .. } => "TEAM_DISPOSAL_TIMEOUT",
            TeamError::MemberNotFound { .. } => "TEAM_MEMBER_NOT_FOUND",
            TeamError::SelfMessage { .. } => "TEAM_SELF_MESSAGE",
            TeamError::MailboxFull { .. } => "TEAM_MAILBOX_FULL",
            TeamError::MessageTooLarge { .. } => "TEAM_MESSAGE_TOO_LARGE",
            TeamError::InvalidTarget { .. } => "TEAM_INVALID_TARGET",
            TeamError::InvalidTimeout { .. } => "TEAM_INVALID_TIMEOUT",
            TeamError::WaitAborted { .. } => "TEAM_WAIT_ABORTED",
            TeamError::TaskLimit { .. } => "TEAM_TASK_LIMIT",
            TeamError::TaskNotFound { .. } => "TEAM_TASK_NOT_FOUND",
            TeamError::TaskStaleRevision { .. } => "TEAM_TASK_STALE_REVISION",
            TeamError::TaskDeleted { .. } => "TEAM_TASK_DELETED",
            TeamError::TaskUnauthorized { .. } => "TEAM_TASK_UNAUTHORIZED",
            TeamError::TaskAlreadyClaimed { .. } => "TEAM_TASK_ALREADY_CLAIMED",
            TeamError::TaskBlocked { .. } => "TEAM_TASK_BLOCKED",
            TeamError::TaskInvalidTransition { .. } => "TEAM_TASK_INVALID_TRANSITION",
            TeamError::TaskDependencyCycle { .. } => "TEAM_TASK_DEPENDENCY_CYCLE",
            TeamError::TaskHasDependents { .. } => "TEAM_TASK_HAS_DEPENDENTS",
            TeamError::InvalidWriteScope { .. } => "TEAM_INVALID_WRITE_SCOPE",
        }
    }
}

impl TeamError {
    /// Every code of REFERENCE c.16, in its table order (for documentation and tests).
    pub const ALL_CODES: [&'static str; 28] = [
        "TEAM_INVALID_CONFIG",
        "TEAM_NOT_MEMBER",
        "TEAM_LEAD_REQUIRED",
        "TEAM_INVALID_MEMBER_NAME",
        "TEAM_INVALID_ARGUMENT",
        "TEAM_MEMBER_NAME_TAKEN",
        "TEAM_MEMBER_LIMIT",
        "TEAM_PROVISIONING_CONFLICT",
        "TEAM_DISPOSED",
        "TEAM_DISPOSAL_TIMEOUT",
        "TEAM_MEMBER_NOT_FOUND",
        "TEAM_SELF_MESSAGE",
        "TEAM_MAILBOX_FULL",
        "TEAM_MESSAGE_TOO_LARGE",
        "TEAM_INVALID_TARGET",
        "TEAM_INVALID_TIMEOUT",
        "TEAM_WAIT_ABORTED",
        "TEAM_TASK_LIMIT",
        "TEAM_TASK_NOT_FOUND",
        "TEAM_TASK_STALE_REVISION",
        "TEAM_TASK_DELETED",
        "TEAM_TASK_UNAUTHORIZED",
        "TEAM_TASK_ALREADY_CLAIMED",
        "TEAM_TASK_BLOCKED",
        "TEAM_TASK_INVALID_TRANSITION",
        "TEAM_TASK_DEPENDENCY_CYCLE",
        "TEAM_TASK_HAS_DEPENDENTS",
        "TEAM_INVALID_WRITE_SCOPE",
    ];

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Self {
        TeamError::InvalidArgument {
            message: message.into(),
        }
    }

    pub(crate) fn task_not_found(id: &str) -> Self {
        TeamError::TaskNotFound {
            message: format!("task {id:?} not found"),
        }
    }
}

/// A Lead log that breaks a fold rule (REFERENCE c.4). The original raises plain errors; the
/// messages keep its wording (the fragments quoted in CASES §1). Code `TEAM_LOG_INVALID` for
/// every variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    /// The payload is not a JSON object with a valid loose selector (`version` a safe
    /// non-negative integer, `teamId` a non-empty string), or (for `version: 1`) does not match
    /// the strict schema of its type: unknown keys, wrong types, invalid ids or content blocks.
    #[error("persisted Agent Teams {event_type} payload is invalid: {detail}")]
    InvalidPayload {
        /// The event type, e.g. `team/task`.
        event_type: String,
        /// What is wrong, e.g. ``unknown field `extra` ``.
        detail: String,
    },
    /// A record of this Team with a version other than 1.
    #[error("unsupported Agent Teams event version {version} ({event_type})")]
    UnsupportedVersion {
        /// The event type.
        event_type: String,
        /// The version found.
        version: u64,
    },
    /// Two member ids claim the same name.
    #[error("team member name {name:?} reused by {id} (already reserved by {owner})")]
    MemberNameReused {
        /// The name.
        name: String,
        /// The id of the new record.
        id: String,
        /// The id that reserved the name first.
        owner: String,
    },
    /// The first record of a member is not `provisioning`.
    #[error("team member {id} must begin provisioning, not {phase}")]
    MemberMustBeginProvisioning {
        /// The member id.
        id: String,
        /// The phase found.
        phase: String,
    },
    /// A later record changed `name`, `provider` or `context`.
    #[error("team member {id} changed immutable identity fields")]
    MemberIdentityChanged {
        /// The member id.
        id: String,
    },
    /// A phase edge other than `provisioning -> active|failed`.
    #[error("team member {id} has an invalid {from} -> {to} transition")]
    MemberInvalidTransition {
        /// The member id.
        id: String,
        /// The prior phase.
        from: String,
        /// The new phase.
        to: String,
    },
    /// The first snapshot of a task has a revision other than 1.
    #[error("team task {id} must begin at revision 1, not {revision}")]
    TaskMustBeginAtRevisionOne {
        /// The task id.
        id: String,
        /// The revision found.
        revision: u64,
    },
    /// A later snapshot's revision is not the prior + 1.
    #[error("team task {id} revision is not contiguous: {current} -> {revision}")]
    TaskRevisionNotContiguous {
        /// The task id.
        id: String,
        /// The stored revision.
        current: u64,
        /// The revision found.
        revision: u64,
    },
    /// The task graph with the candidate snapshot is invalid (REFERENCE c.11.5).
    #[error("{0}")]
    TaskGraph(GraphViolation),
    /// A message id queued a second time.
    #[error("team message {id} queued twice")]
    MessageQueuedTwice {
        /// The message id.
        id: String,
    },
    /// A delivery record for a message id never queued.
    #[error("team message {id} delivered before queueing")]
    MessageDeliveredBeforeQueueing {
        /// The message id.
        id: String,
    },
    /// A delivery record naming another target than the queued message.
    #[error("team message {id} target changed from {queued} to {delivered}")]
    MessageTargetChanged {
        /// The message id.
        id: String,
        /// The queued target id.
        queued: String,
        /// The target id of the delivery record.
        delivered: String,
    },
    /// A second delivery record for one message.
    #[error("team message {id} delivered twice")]
    MessageDeliveredTwice {
        /// The message id.
        id: String,
    },
}

impl ErrorCode for FoldError {
    fn code(&self) -> &'static str {
        "TEAM_LOG_INVALID"
    }
}

/// A [`FoldError`] located in a log: the first bad event (what `troupe team verify` reports).
/// Code `TEAM_LOG_INVALID`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {seq} ({event_type}): {source}")]
pub struct ReplayError {
    /// The seq of the first event the fold refused.
    pub seq: Seq,
    /// Its type.
    pub event_type: String,
    /// Why it was refused.
    pub source: FoldError,
}

impl ErrorCode for ReplayError {
    fn code(&self) -> &'static str {
        "TEAM_LOG_INVALID"
    }
}

/// A candidate Team event refused before append because the fold of the committed log plus
/// the candidate fails (REFERENCE c.5). The log is unchanged. Code `INVARIANT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{INVARIANT_PACKAGE} invariant violated by {event_type}: {source}")]
pub struct InvariantError {
    /// The candidate's type.
    pub event_type: String,
    /// The fold rule it breaks.
    pub source: FoldError,
}

impl InvariantError {
    /// The package that owns the invariant ([`INVARIANT_PACKAGE`]).
    pub fn package(&self) -> &'static str {
        INVARIANT_PACKAGE
    }
}

impl ErrorCode for InvariantError {
    fn code(&self) -> &'static str {
        "INVARIANT"
    }
}
