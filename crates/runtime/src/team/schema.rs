//! The ten Team tools' model-facing definitions (REFERENCE d.3–d.4): names, descriptions,
//! snake_case argument schemas and declared output schemas (`additionalProperties: false`).

use serde_json::{Value, json};
use troupe_team::MAX_SAFE_INTEGER;

/// The ten tool names, in the order they are registered.
pub const TEAM_TOOL_NAMES: [&str; 10] = [
    "spawn_teammate",
    "send_message",
    "followup_task",
    "list_agents",
    "wait_agent",
    "interrupt_agent",
    "team_task_create",
    "team_task_list",
    "team_task_get",
    "team_task_update",
];

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

/// `TaskView` (REFERENCE d.3).
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
            "writeScopeWarnings": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["id", "revision", "subject", "description", "status", "blockedBy", "writeScopes", "ready", "writeScopeWarnings"],
        "additionalProperties": false
    })
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

/// `(description, parameters, output schema)` of tool `name`, or `None` for another name.
pub fn definition(name: &str) -> Option<(&'static str, Value, Value)> {
    Some(match name {
        "spawn_teammate" => (
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
        "send_message" => (
            "Store a durable message for another member without starting it if it is idle (it \
             reads the message at its next step or turn). Status `queued` still means stored: \
             never resend.",
            send_params(),
            send_output(),
        ),
        "followup_task" => (
            "Store durable follow-up work for another member and start a turn for it if needed \
             (an inactive teammate is resumed). Status `queued` still means stored: never resend.",
            send_params(),
            send_output(),
        ),
        "list_agents" => (
            "List the Lead and every durable teammate with its current status (running, idle, \
             inactive, provisioning or failed).",
            object(json!({}), &[]),
            json!({"type": "array", "items": member_view_schema()}),
        ),
        "wait_agent" => (
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
        "interrupt_agent" => (
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
        "team_task_create" => (
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
        "team_task_list" => (
            "Browse tasks with readiness, owner, revision, blockers and write-scope overlap \
             warnings.",
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
                    "nextCursor": {"type": "integer"}
                }),
                &["tasks"],
            ),
        ),
        "team_task_get" => (
            "Fetch the latest full value of one task (deleted tasks included) before acting on it.",
            object(json!({"task_id": {"type": "string"}}), &["task_id"]),
            task_view_schema(),
        ),
        "team_task_update" => (
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
        _ => return None,
    })
}
