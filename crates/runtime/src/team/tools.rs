//! The ten Team tools (REFERENCE d.4), installed only for Team members (DESIGN decision 3).
//!
//! Each tool resolves the calling agent from the tool context's owner session and passes it to
//! the service, which enforces authority. Success is the compact JSON of the declared output;
//! a failure is `{"code": "<TEAM_…>", "message": "Error: <message>"}` (REFERENCE d.2 in the
//! shape of DESIGN §4).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use troupe_protocol::ErrorCode;
use troupe_team::{
    CreateTask, Delivery, MemberContext, TaskAction, TaskListQuery, TaskStatus, UpdateTask,
};
use troupe_tools::{TextFuture, Tool, ToolContext, ToolError, ToolFuture, parse_arguments};

use super::schema::{TEAM_TOOL_NAMES, definition};
use super::{NO_PROGRESS_MESSAGE, TeamOpError, WaitOutcome};
use crate::agent::Agent;
use crate::runtime::{RtWeak, Runtime};

/// The ten Team tools for an agent of `runtime`.
pub(crate) fn team_tools(runtime: &RtWeak) -> Vec<Arc<dyn Tool>> {
    TEAM_TOOL_NAMES
        .iter()
        .filter_map(|name| {
            let (description, parameters, output) = definition(name)?;
            Some(Arc::new(TeamTool {
                runtime: runtime.clone(),
                name,
                description,
                parameters,
                output,
            }) as Arc<dyn Tool>)
        })
        .collect()
}

struct TeamTool {
    runtime: RtWeak,
    name: &'static str,
    description: &'static str,
    parameters: Value,
    output: Value,
}

fn op_error(e: &TeamOpError) -> ToolError {
    ToolError::other(e.code(), format!("Error: {e}"))
}

/// The compact JSON text of a typed result: keys in the order the types declare them, which is
/// the order of each tool's declared output schema (REFERENCE d.3).
fn to_text<T: serde::Serialize>(value: &T) -> Result<String, ToolError> {
    serde_json::to_string(value).map_err(|e| ToolError::other("TOOL_INTERNAL_ERROR", e.to_string()))
}

/// `spawn_teammate`'s output: `{member}`.
#[derive(Serialize)]
struct SpawnOutput<'a> {
    member: &'a troupe_team::MemberView,
}

/// `send_message` / `followup_task` output: `{messageId, status}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SendOutput<'a> {
    message_id: &'a troupe_protocol::MessageId,
    status: &'static str,
}

/// `wait_agent`'s output: `{timedOut, noProgress?}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WaitOutput {
    timed_out: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_progress: Option<NoProgressOutput>,
}

/// The `noProgress` object of `wait_agent`: `{reason, message}`.
#[derive(Serialize)]
struct NoProgressOutput {
    reason: &'static str,
    message: &'static str,
}

/// `interrupt_agent`'s output: `{previousStatus}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InterruptOutput {
    previous_status: &'static str,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnArgs {
    name: String,
    description: String,
    prompt: String,
    #[serde(default)]
    context: Option<MemberContext>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendArgs {
    target: String,
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitArgs {
    /// Kept raw so the service gives the authoritative `TEAM_INVALID_TIMEOUT` (d.4.1).
    #[serde(default)]
    timeout_ms: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetArgs {
    target: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateArgs {
    subject: String,
    description: String,
    #[serde(default)]
    blocked_by: Vec<String>,
    #[serde(default)]
    write_scopes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    status: Option<TaskStatus>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    ready: Option<bool>,
    #[serde(default)]
    cursor: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    task_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    task_id: String,
    expected_revision: u64,
    action: TaskAction,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    blocked_by: Option<Vec<String>>,
    #[serde(default)]
    write_scopes: Option<Vec<String>>,
    #[serde(default)]
    owner: Option<String>,
}

impl TeamTool {
    async fn run(
        &self,
        rt: &Runtime,
        caller: &Agent,
        ctx: &ToolContext,
        args: Value,
    ) -> Result<String, ToolError> {
        match self.name {
            "spawn_teammate" => {
                let a: SpawnArgs = parse_arguments(args)?;
                let member = rt
                    .team_spawn(
                        caller,
                        &a.name,
                        &a.description,
                        &a.prompt,
                        a.context.unwrap_or(MemberContext::Fresh),
                        Some(ctx.cancellation().clone()),
                    )
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&SpawnOutput { member: &member })
            }
            "send_message" | "followup_task" => {
                let a: SendArgs = parse_arguments(args)?;
                let delivery = if self.name == "send_message" {
                    Delivery::Quiet
                } else {
                    Delivery::Wakeup
                };
                let (id, accepted) = rt
                    .team_send(caller, &a.target, &a.message, delivery)
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&SendOutput {
                    message_id: &id,
                    status: if accepted { "accepted" } else { "queued" },
                })
            }
            "list_agents" => {
                let _: NoArgs = parse_arguments(args)?;
                let members = rt
                    .team_list_members(caller)
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&members)
            }
            "wait_agent" => {
                let a: WaitArgs = parse_arguments(args)?;
                let timeout = a
                    .timeout_ms
                    .unwrap_or_else(|| json!(troupe_team::WAIT_TIMEOUT_DEFAULT_MS));
                match rt
                    .team_wait(caller, &timeout, ctx.cancellation())
                    .await
                    .map_err(|e| op_error(&e))?
                {
                    WaitOutcome::Waited { timed_out } => to_text(&WaitOutput {
                        timed_out,
                        no_progress: None,
                    }),
                    WaitOutcome::NoProgress => to_text(&WaitOutput {
                        timed_out: false,
                        no_progress: Some(NoProgressOutput {
                            reason: "no-active-peer",
                            message: NO_PROGRESS_MESSAGE,
                        }),
                    }),
                }
            }
            "interrupt_agent" => {
                let a: TargetArgs = parse_arguments(args)?;
                let previous = rt
                    .team_interrupt(caller, &a.target)
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&InterruptOutput {
                    previous_status: previous,
                })
            }
            "team_task_create" => {
                let a: CreateArgs = parse_arguments(args)?;
                let request = CreateTask {
                    subject: a.subject,
                    description: a.description,
                    blocked_by: a.blocked_by,
                    write_scopes: a.write_scopes,
                };
                let view = rt
                    .team_create_task(caller, &request)
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&view)
            }
            "team_task_list" => {
                let a: ListArgs = parse_arguments(args)?;
                let cursor = a.cursor.unwrap_or(0);
                let limit = a.limit.unwrap_or(50);
                if cursor < 0 {
                    return Err(ToolError::invalid_arguments(
                        "cursor must be an integer >= 0",
                    ));
                }
                if !(1..=100).contains(&limit) {
                    return Err(ToolError::invalid_arguments(
                        "limit must be an integer from 1 through 100",
                    ));
                }
                let query = TaskListQuery {
                    status: a.status,
                    owner: a.owner,
                    ready: a.ready,
                    cursor: cursor.unsigned_abs(),
                    limit: limit.unsigned_abs(),
                };
                let page = rt
                    .team_list_tasks(caller, &query)
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&page)
            }
            "team_task_get" => {
                let a: GetArgs = parse_arguments(args)?;
                let view = rt
                    .team_get_task(caller, &a.task_id)
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&view)
            }
            "team_task_update" => {
                let a: UpdateArgs = parse_arguments(args)?;
                let mut request = UpdateTask::new(a.task_id, a.expected_revision, a.action);
                request.subject = a.subject;
                request.description = a.description;
                request.blocked_by = a.blocked_by;
                request.write_scopes = a.write_scopes;
                request.owner = a.owner;
                let view = rt
                    .team_update_task(caller, &request)
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&view)
            }
            other => Err(ToolError::UnknownTool {
                name: other.to_owned(),
            }),
        }
    }
}

impl Tool for TeamTool {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn output_schema(&self) -> Option<Value> {
        Some(self.output.clone())
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let text = self.call_text(ctx, args).await?;
            serde_json::from_str(&text)
                .map_err(|e| ToolError::other("TOOL_INTERNAL_ERROR", e.to_string()))
        })
    }

    /// The typed result serialized directly, so its keys keep the declared schema order
    /// (REFERENCE d.2–d.3: one compact JSON text).
    fn call_text<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> TextFuture<'a> {
        Box::pin(async move {
            self.call_inner(ctx, args).await.map_err(|e| {
                // Every Team tool failure reads `Error: <message>` (REFERENCE d.2), including
                // argument errors raised before the service is reached.
                let message = e.to_string();
                if message.starts_with("Error: ") {
                    e
                } else {
                    ToolError::other(e.code(), format!("Error: {message}"))
                }
            })
        })
    }
}

impl TeamTool {
    async fn call_inner(&self, ctx: &ToolContext, args: Value) -> Result<String, ToolError> {
        {
            let rt = self
                .runtime
                .upgrade()
                .ok_or_else(|| {
                    ToolError::other("TEAM_DISPOSED", "Error: the runtime is shut down")
                })?
                .runtime();
            let caller = rt
                .agent(ctx.owner())
                .ok_or_else(|| ToolError::UnknownTool {
                    name: self.name.to_owned(),
                })?;
            self.run(&rt, &caller, ctx, args).await
        }
    }
}
