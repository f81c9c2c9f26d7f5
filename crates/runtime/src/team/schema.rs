//! The ten Team tools' model-facing definitions (REFERENCE d.3–d.4): names, descriptions,
//! snake_case argument schemas and declared output schemas (`additionalProperties: false`).

use serde_json::{Value, json};
use troupe_team::MAX_SAFE_INTEGER;

/// The ten Team tools (REFERENCE d.4), in the order they are registered. Each tool's name,
/// description, argument and output schemas ([`TeamToolName::definition`]), whether its
/// effect is a Team record in the Lead log ([`TeamToolName::writes`]) and the
/// [`super::TeamOp`] its arguments become are decided by this one enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TeamToolName {
    /// `spawn_teammate`.
    SpawnTeammate,
    /// `send_message`.
    SendMessage,
    /// `followup_task`.
    FollowupTask,
    /// `list_agents`.
    ListAgents,
    /// `wait_agent`.
    WaitAgent,
    /// `interrupt_agent`.
    InterruptAgent,
    /// `team_task_create`.
    TaskCreate,
    /// `team_task_list`.
    TaskList,
    /// `team_task_get`.
    TaskGet,
    /// `team_task_update`.
    TaskUpdate,
}

impl TeamToolName {
    /// Every Team tool, in registration order.
    pub const ALL: [TeamToolName; 10] = [
        TeamToolName::SpawnTeammate,
        TeamToolName::SendMessage,
        TeamToolName::FollowupTask,
        TeamToolName::ListAgents,
        TeamToolName::WaitAgent,
        TeamToolName::InterruptAgent,
        TeamToolName::TaskCreate,
        TeamToolName::TaskList,
        TeamToolName::TaskGet,
        TeamToolName::TaskUpdate,
    ];

    /// The tool's model-facing name.
    pub const fn name(self) -> &'static str {
        match self {
            TeamToolName::SpawnTeammate => "spawn_teammate",
            TeamToolName::SendMessage => "send_message",
            TeamToolName::FollowupTask => "followup_task",
            TeamToolName::ListAgents => "list_agents",
            TeamToolName::WaitAgent => "wait_agent",
            TeamToolName::InterruptAgent => "interrupt_agent",
            TeamToolName::TaskCreate => "team_task_create",
            TeamToolName::TaskList => "team_task_list",
            TeamToolName::TaskGet => "team_task_get",
            TeamToolName::TaskUpdate => "team_task_update",
        }
    }

    /// The Team tool called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// Whether the tool's effect is a Team record in the Lead log, linked to the call by
    /// `tool/effect` (DESIGN decision 10): `spawn_teammate`, `send_message`,
    /// `followup_task`, `team_task_create`, `team_task_update`.
    pub const fn writes(self) -> bool {
        matches!(
            self,
            TeamToolName::SpawnTeammate
                | TeamToolName::SendMessage
                | TeamToolName::FollowupTask
                | TeamToolName::TaskCreate
                | TeamToolName::TaskUpdate
        )
    }
}

/// The ten tool names, in the order they are registered ([`TeamToolName::ALL`]).
pub const TEAM_TOOL_NAMES: [&str; 10] = {
    let mut names = [""; 10];
    let mut i = 0;
    while i < names.len() {
        names[i] = TeamToolName::ALL[i].name();
        i += 1;
    }
    names
};

/// `MemberView` (REFERENCE d.3).
pub fn member_view_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "role": {"type": "string", "enum": ["lead", "teammate"]},
            "status": {"type": "string", "enum": ["running", "idle", "inactive", "provisioning", "failed"]},
            "description": {"type": "string"},
            "provider": {"type": "string"},
            "context": {"type": "string", "enum": ["fresh", "fork"]},
            "model": {"type": "string"},
            "diagnostics": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["id", "name", "role", "status", "diagnostics"],
        "additionalProperties": false
    })
}

/// A `list_agents` row: [`member_view_schema`] with the live member's `host` (a Troupe
/// addition, DESIGN §7: `local` or the name of its host in another process) and its compact
/// `usage` (a Troupe addition, issue 17: model calls and tokens so far, `costUsd` when its
/// model is priced).
pub fn listed_member_schema() -> Value {
    let mut schema = member_view_schema();
    schema["properties"]["host"] = json!({"type": "string"});
    schema["properties"]["usage"] = json!({
        "type": "object",
        "properties": {
            "modelCalls": {"type": "integer"},
            "promptTokens": {"type": "integer"},
            "completionTokens": {"type": "integer"},
            "cachedTokens": {"type": "integer"},
            "costUsd": {"type": "number"}
        },
        "required": ["modelCalls", "promptTokens", "completionTokens", "cachedTokens"],
        "additionalProperties": false
    });
    if let Some(required) = schema["required"].as_array_mut() {
        required.push(json!("usage"));
    }
    schema
}

/// `TaskView` (REFERENCE d.3), with the optional derived `stalled` of a read (a Troupe
/// addition: `{"reason": "failed"|"inactive"|"no_activity", "since"?, "idleMs"?}`).
pub fn task_view_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "revision": {"type": "integer"},
            "subject": {"type": "string"},
            "description": {"type": "string"},
            "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "deleted"]},
            "blockedBy": {"type": "array", "items": {"type": "string"}},
            "writeScopes": {"type": "array", "items": {"type": "string"}},
            "ownerName": {"type": "string"},
            "ready": {"type": "boolean"},
            "writeScopeWarnings": {"type": "array", "items": {"type": "string"}},
            "stalled": {
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "enum": ["failed", "inactive", "no_activity"]},
                    "since": {"type": "integer"},
                    "idleMs": {"type": "integer"}
                },
                "required": ["reason"],
                "additionalProperties": false
            }
        },
        "required": ["id", "revision", "subject", "description", "status", "blockedBy", "writeScopes", "ready", "writeScopeWarnings"],
        "additionalProperties": false
    })
}

/// `WriteConflict` (the write radar, a Troupe addition): `{"path","members","tasks"}`.
fn write_conflict_schema() -> Value {
    object(
        json!({
            "path": {"type": "string"},
            "members": {"type": "array", "items": {"type": "string"}},
            "tasks": {"type": "array", "items": {"type": "string"}}
        }),
        &["path", "members", "tasks"],
    )
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

fn send_output() -> Value {
    object(
        json!({
            "messageId": {"type": "string"},
            "status": {"type": "string", "enum": ["accepted", "queued"]}
        }),
        &["messageId", "status"],
    )
}

fn send_params() -> Value {
    object(
        json!({
            "target": {"type": "string", "description": "A teammate's name, or `lead`."},
            "message": {"type": "string", "description": "The message; make it self-contained."}
        }),
        &["target", "message"],
    )
}

impl TeamToolName {
    /// `(description, parameters, output schema)` of the tool (REFERENCE d.3–d.4).
    pub fn definition(self) -> (&'static str, Value, Value) {
        definition(self)
    }
}

fn definition(tool: TeamToolName) -> (&'static str, Value, Value) {
    match tool {
        TeamToolName::SpawnTeammate => (
            "Lead only. Create one persistent, named teammate that works in the same workspace and \
             starts on `prompt` at once. Teammates are durable: they survive restarts and can be \
             messaged, followed up and interrupted by name.",
            object(
                json!({
                    "name": {"type": "string", "description": "Unique lower-kebab-case name, e.g. `test-writer` (not `lead`)."},
                    "description": {"type": "string", "description": "A short statement of the delegated job."},
                    "prompt": {"type": "string", "description": "The full initial assignment."},
                    "context": {"type": "string", "enum": ["fresh", "fork"], "description": "`fresh` (default): the teammate sees none of your conversation. `fork`: it starts from your completed turns."}
                }),
                &["name", "description", "prompt"],
            ),
            object(json!({"member": member_view_schema()}), &["member"]),
        ),
        TeamToolName::SendMessage => (
            "Store a durable message for another member without starting it if it is idle (it \
             reads the message at its next step or turn). Status `queued` still means stored: \
             never resend.",
            send_params(),
            send_output(),
        ),
        TeamToolName::FollowupTask => (
            "Store durable follow-up work for another member and start a turn for it if needed \
             (an inactive teammate is resumed). Status `queued` still means stored: never resend.",
            send_params(),
            send_output(),
        ),
        TeamToolName::ListAgents => (
            "List the Lead and every durable teammate with its current status (running, idle, \
             inactive, provisioning or failed).",
            object(json!({}), &[]),
            json!({"type": "array", "items": listed_member_schema()}),
        ),
        TeamToolName::WaitAgent => (
            "Block until the next teammate-status, mailbox or task change that happens after this \
             call begins, or the timeout. It never wakes inactive members and answers noProgress \
             at once when no other member is running or provisioning; list again afterwards \
             instead of polling.",
            object(
                json!({
                    "timeout_ms": {"type": "integer", "minimum": 10000, "maximum": 3600000, "description": "10000-3600000, default 30000."}
                }),
                &[],
            ),
            object(
                json!({
                    "timedOut": {"type": "boolean"},
                    "noProgress": object(
                        json!({
                            "reason": {"type": "string", "enum": ["no-active-peer"]},
                            "message": {"type": "string"}
                        }),
                        &["reason", "message"],
                    )
                }),
                &["timedOut"],
            ),
        ),
        TeamToolName::InterruptAgent => (
            "Lead only. Stop one teammate's current turn; its pending messages are kept for its \
             next turn.",
            object(
                json!({"target": {"type": "string", "description": "The teammate's name."}}),
                &["target"],
            ),
            object(
                json!({"previousStatus": {"type": "string", "enum": ["running", "idle", "inactive"]}}),
                &["previousStatus"],
            ),
        ),
        TeamToolName::TaskCreate => (
            "Add one unowned pending task to the shared board.",
            object(
                json!({
                    "subject": {"type": "string", "description": "A short title."},
                    "description": {"type": "string", "description": "Full details, including acceptance criteria."},
                    "blocked_by": {"type": "array", "items": {"type": "string"}, "description": "Ids of tasks that must complete first."},
                    "write_scopes": {"type": "array", "items": {"type": "string"}, "description": "Advisory workspace-relative path prefixes this task expects to change."}
                }),
                &["subject", "description"],
            ),
            task_view_schema(),
        ),
        TeamToolName::TaskList => (
            "Browse tasks with readiness, owner, revision, blockers and write-scope overlap \
             warnings; `writeConflicts` (when present) names files two members actually changed \
             while the same task was in progress (advisory: review them).",
            object(
                json!({
                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                    "owner": {"type": "string", "description": "A member name, or `unowned`."},
                    "ready": {"type": "boolean"},
                    "cursor": {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "description": "Zero-based offset, default 0."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "1-100, default 50."}
                }),
                &[],
            ),
            object(
                json!({
                    "tasks": {"type": "array", "items": task_view_schema()},
                    "nextCursor": {"type": "integer"},
                    "stallNotice": {"type": "string"},
                    "writeConflicts": {"type": "array", "items": write_conflict_schema()}
                }),
                &["tasks"],
            ),
        ),
        TeamToolName::TaskGet => (
            "Fetch the latest full value of one task (deleted tasks included) before acting on it.",
            object(json!({"task_id": {"type": "string"}}), &["task_id"]),
            task_view_schema(),
        ),
        TeamToolName::TaskUpdate => (
            "Compare-and-set one action on a task, using its newest revision from get or list. \
             `subject`/`description`/`write_scopes` replace fields for `edit`; `blocked_by` is the \
             whole new list for `set_dependencies`; `owner` names the assignee for the Lead-only \
             `reassign` (omit it to unassign).",
            object(
                json!({
                    "task_id": {"type": "string"},
                    "expected_revision": {"type": "integer", "minimum": 1, "maximum": MAX_SAFE_INTEGER, "description": "The task's current revision, from get or list."},
                    "action": {"type": "string", "enum": ["claim", "release", "edit", "set_dependencies", "complete", "reopen", "reassign", "delete"]},
                    "subject": {"type": "string"},
                    "description": {"type": "string"},
                    "blocked_by": {"type": "array", "items": {"type": "string"}},
                    "write_scopes": {"type": "array", "items": {"type": "string"}},
                    "owner": {"type": "string"}
                }),
                &["task_id", "expected_revision", "action"],
            ),
            task_view_schema(),
        ),
    }
}
