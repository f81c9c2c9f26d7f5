//! The ten Team tools (REFERENCE d.4), installed only for Team members (DESIGN decision 3).
//!
//! Each tool resolves the calling agent from the tool context's owner session and passes it to
//! the service, which enforces authority. Success is the compact JSON of the declared output;
//! a failure is `{"code": "<TEAM_…>", "message": "Error: <message>"}` (REFERENCE d.2 in the
//! shape of DESIGN §4).
//!
//! Arguments follow the declared schemas exactly: a value a schema refuses — a wrong JSON
//! type (`null` included: no argument is nullable), a missing required field, an unknown
//! field (`additionalProperties: false`), an integer outside the declared bounds, an unknown
//! enum value, arguments that are not an object — is `INVALID_ARGUMENTS` naming the field,
//! before the service is asked, so nothing is appended. Integers are JSON Schema integers: a
//! number without a fractional part, in any spelling (`3`, `3.0`, `3e0`). The one exception
//! is `wait_agent`'s `timeout_ms`, which goes to the service as given for its authoritative
//! `TEAM_INVALID_TIMEOUT` (REFERENCE d.4.1). Values the schemas accept are judged by the
//! service (the REFERENCE c.16 codes).

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Number, Value, json};
use troupe_protocol::ErrorCode;
use troupe_team::{
    CreateTask, Delivery, MAX_SAFE_INTEGER, MemberContext, TaskAction, TaskListQuery, TaskStatus,
    UpdateTask,
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

/// `error` in the Team tools' form: its message starts `Error: ` (REFERENCE d.2), code kept.
fn prefixed(error: ToolError) -> ToolError {
    let message = error.to_string();
    if message.starts_with("Error: ") {
        error
    } else {
        ToolError::other(error.code(), format!("Error: {message}"))
    }
}

/// Deserializes an optional argument that is present. `null` is refused like any other value
/// of the wrong type (no declared schema allows it); an absent field stays `None` through
/// `#[serde(default)]`, which never calls this.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// Argument `field` as a JSON Schema integer in `min..=max`: any JSON number without a
/// fractional part (`3`, `3.0`, `3e0`), as the original's JavaScript numbers are.
///
/// # Errors
/// `INVALID_ARGUMENTS` naming the field, the bounds and the value given.
fn integer_in(field: &str, value: &Number, min: u64, max: u64) -> Result<u64, ToolError> {
    let integral = value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER as f64).contains(f))
            // In range and integral, so the conversion is exact.
            .map(|f| f as u64)
    });
    integral.filter(|v| (min..=max).contains(v)).ok_or_else(|| {
        ToolError::invalid_arguments(format!(
            "field `{field}`: expected an integer from {min} through {max}, got {value}"
        ))
    })
}

/// The compact JSON text of a typed result: keys in the order the types declare them, which is
/// the order of each tool's declared output schema (REFERENCE d.3).
fn to_text<T: serde::Serialize>(value: &T) -> Result<String, ToolError> {
    serde_json::to_string(value).map_err(|e| ToolError::other("TOOL_INTERNAL_ERROR", e.to_string()))
}

/// The exact text `spawn_teammate` returns for `member` (recovery rebuilds it, DESIGN
/// decision 10).
pub(crate) fn spawn_result_text(member: &troupe_team::MemberView) -> String {
    to_text(&SpawnOutput { member }).unwrap_or_default()
}

/// The exact text `send_message` / `followup_task` return (recovery rebuilds it).
pub(crate) fn send_result_text(id: &troupe_protocol::MessageId, status: &'static str) -> String {
    to_text(&SendOutput {
        message_id: id,
        status,
    })
    .unwrap_or_default()
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
    #[serde(default, deserialize_with = "present")]
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
    /// Kept raw (`null` included) so the service gives the authoritative
    /// `TEAM_INVALID_TIMEOUT` for anything but an integer in range (d.4.1).
    #[serde(default, deserialize_with = "present")]
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
    #[serde(default, deserialize_with = "present")]
    status: Option<ListStatus>,
    #[serde(default, deserialize_with = "present")]
    owner: Option<String>,
    #[serde(default, deserialize_with = "present")]
    ready: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    cursor: Option<Number>,
    #[serde(default, deserialize_with = "present")]
    limit: Option<Number>,
}

/// `team_task_list`'s `status` filter: the statuses a listed task can have (deleted tasks are
/// never listed, so `deleted` is not a filter, REFERENCE d.4).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ListStatus {
    Pending,
    InProgress,
    Completed,
}

impl From<ListStatus> for TaskStatus {
    fn from(status: ListStatus) -> Self {
        match status {
            ListStatus::Pending => TaskStatus::Pending,
            ListStatus::InProgress => TaskStatus::InProgress,
            ListStatus::Completed => TaskStatus::Completed,
        }
    }
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
    expected_revision: Number,
    action: TaskAction,
    #[serde(default, deserialize_with = "present")]
    subject: Option<String>,
    #[serde(default, deserialize_with = "present")]
    description: Option<String>,
    #[serde(default, deserialize_with = "present")]
    blocked_by: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    write_scopes: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    owner: Option<String>,
}

/// The call a Team record will be linked to (`tool/effect`), when the runtime named it.
fn origin(tool: &'static str, caller: &Agent, ctx: &ToolContext) -> Option<super::CallOrigin> {
    ctx.call_id().map(|call_id| super::CallOrigin {
        session: caller.id().clone(),
        call_id: call_id.to_owned(),
        tool,
    })
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
                    .team_spawn_as(
                        caller,
                        &a.name,
                        &a.description,
                        &a.prompt,
                        a.context.unwrap_or(MemberContext::Fresh),
                        Some(ctx.cancellation().clone()),
                        origin(self.name, caller, ctx).as_ref(),
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
                    .team_send_as(
                        caller,
                        &a.target,
                        &a.message,
                        delivery,
                        origin(self.name, caller, ctx).as_ref(),
                    )
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
                    .team_create_task_as(caller, &request, origin(self.name, caller, ctx).as_ref())
                    .await
                    .map_err(|e| op_error(&e))?;
                to_text(&view)
            }
            "team_task_list" => {
                let a: ListArgs = parse_arguments(args)?;
                // REFERENCE d.4.2 step 3: plain (argument) errors, before the service.
                let cursor = match &a.cursor {
                    Some(n) => integer_in("cursor", n, 0, MAX_SAFE_INTEGER)?,
                    None => 0,
                };
                let limit = match &a.limit {
                    Some(n) => integer_in("limit", n, 1, 100)?,
                    None => 50,
                };
                let query = TaskListQuery {
                    status: a.status.map(TaskStatus::from),
                    owner: a.owner,
                    ready: a.ready,
                    cursor,
                    limit,
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
                // A revision is a positive safe integer (REFERENCE c.3); anything else can
                // never be a compare-and-set token, so it is malformed, not stale.
                let revision = integer_in(
                    "expected_revision",
                    &a.expected_revision,
                    1,
                    MAX_SAFE_INTEGER,
                )?;
                let mut request = UpdateTask::new(a.task_id, revision, a.action);
                request.subject = a.subject;
                request.description = a.description;
                request.blocked_by = a.blocked_by;
                request.write_scopes = a.write_scopes;
                request.owner = a.owner;
                let view = rt
                    .team_update_task_as(caller, &request, origin(self.name, caller, ctx).as_ref())
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
        // Every Team tool failure reads `Error: <message>` (REFERENCE d.2), including
        // argument errors raised before the service is reached.
        Box::pin(async move { self.call_inner(ctx, args).await.map_err(prefixed) })
    }

    /// The registry's own refusals (arguments that are not an object, a call cancelled before
    /// it started) read `Error: <message>` too.
    fn shape_error(&self, error: ToolError) -> ToolError {
        prefixed(error)
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
