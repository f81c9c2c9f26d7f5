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

use std::sync::{Arc, Weak};

use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value, json};
use troupe_protocol::ErrorCode;
use troupe_team::{
    CreateTask, Delivery, MAX_SAFE_INTEGER, MemberContext, TaskAction, TaskListQuery, TaskStatus,
    UpdateTask,
};
use troupe_tools::{TextFuture, Tool, ToolContext, ToolError, ToolFuture, parse_arguments};

use super::op::{CallOrigin, OpContext, TeamOp, TeamOpError};
use super::output::render;
use super::schema::TeamToolName;
use super::service::TeamService;

/// The ten Team tools of the Team service `service` (DESIGN decision 3: installed for the
/// Team profile).
pub(crate) fn team_tools(service: &Weak<TeamService>) -> Vec<Arc<dyn Tool>> {
    TeamToolName::ALL
        .into_iter()
        .map(|name| {
            let (description, parameters, output) = name.definition();
            Arc::new(TeamTool {
                service: service.clone(),
                name,
                description,
                parameters,
                output,
            }) as Arc<dyn Tool>
        })
        .collect()
}

/// One Team tool: its arguments become a [`TeamOp`] for the Team service, its result the
/// rendered [`TeamReply`].
struct TeamTool {
    /// The Team service (weak: the service owns the Teams whose Leads own these tools).
    service: Weak<TeamService>,
    name: TeamToolName,
    description: &'static str,
    parameters: Value,
    output: Value,
}

pub(super) fn op_error(e: &TeamOpError) -> ToolError {
    ToolError::other(e.code(), format!("Error: {e}"))
}

/// `error` in the Team tools' form: its message starts `Error: ` (REFERENCE d.2), code kept.
pub(super) fn prefixed(error: ToolError) -> ToolError {
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

impl TeamToolName {
    /// The [`TeamOp`] of this tool's arguments, checked against its declared schema (see the
    /// module docs).
    ///
    /// # Errors
    /// `INVALID_ARGUMENTS` naming the field.
    pub(super) fn request(self, args: Value) -> Result<TeamOp, ToolError> {
        Ok(match self {
            TeamToolName::SpawnTeammate => {
                let a: SpawnArgs = parse_arguments(args)?;
                TeamOp::SpawnTeammate {
                    name: a.name,
                    description: a.description,
                    prompt: a.prompt,
                    context: a.context.unwrap_or(MemberContext::Fresh),
                }
            }
            TeamToolName::SendMessage | TeamToolName::FollowupTask => {
                let a: SendArgs = parse_arguments(args)?;
                TeamOp::Send {
                    target: a.target,
                    text: a.message,
                    delivery: if self == TeamToolName::SendMessage {
                        Delivery::Quiet
                    } else {
                        Delivery::Wakeup
                    },
                }
            }
            TeamToolName::ListAgents => {
                let _: NoArgs = parse_arguments(args)?;
                TeamOp::ListAgents
            }
            TeamToolName::WaitAgent => {
                let a: WaitArgs = parse_arguments(args)?;
                TeamOp::WaitAgent {
                    timeout_ms: a
                        .timeout_ms
                        .unwrap_or_else(|| json!(troupe_team::WAIT_TIMEOUT_DEFAULT_MS)),
                }
            }
            TeamToolName::InterruptAgent => {
                let a: TargetArgs = parse_arguments(args)?;
                TeamOp::InterruptAgent { target: a.target }
            }
            TeamToolName::TaskCreate => {
                let a: CreateArgs = parse_arguments(args)?;
                TeamOp::CreateTask(CreateTask {
                    subject: a.subject,
                    description: a.description,
                    blocked_by: a.blocked_by,
                    write_scopes: a.write_scopes,
                })
            }
            TeamToolName::TaskList => {
                TeamOp::ListTasks(parse_arguments::<ListArgs>(args)?.query()?)
            }
            TeamToolName::TaskGet => {
                let a: GetArgs = parse_arguments(args)?;
                TeamOp::GetTask { task_id: a.task_id }
            }
            TeamToolName::TaskUpdate => {
                TeamOp::UpdateTask(parse_arguments::<UpdateArgs>(args)?.request()?)
            }
        })
    }
}

impl ListArgs {
    /// The query, its integers checked against their declared bounds (REFERENCE d.4.2 step
    /// 3: plain argument errors, before the service).
    fn query(self) -> Result<TaskListQuery, ToolError> {
        let cursor = match &self.cursor {
            Some(n) => integer_in("cursor", n, 0, MAX_SAFE_INTEGER)?,
            None => 0,
        };
        let limit = match &self.limit {
            Some(n) => integer_in("limit", n, 1, 100)?,
            None => 50,
        };
        Ok(TaskListQuery {
            status: self.status.map(TaskStatus::from),
            owner: self.owner,
            ready: self.ready,
            cursor,
            limit,
        })
    }
}

impl UpdateArgs {
    /// The update, its revision checked: a positive safe integer (REFERENCE c.3) — anything
    /// else can never be a compare-and-set token, so it is malformed, not stale.
    fn request(self) -> Result<UpdateTask, ToolError> {
        let revision = integer_in(
            "expected_revision",
            &self.expected_revision,
            1,
            MAX_SAFE_INTEGER,
        )?;
        let mut request = UpdateTask::new(self.task_id, revision, self.action);
        request.subject = self.subject;
        request.description = self.description;
        request.blocked_by = self.blocked_by;
        request.write_scopes = self.write_scopes;
        request.owner = self.owner;
        Ok(request)
    }
}

impl TeamTool {
    /// One call: the caller resolved from the tool context's owner session, the arguments
    /// turned into the request, the service asked, the reply rendered.
    async fn run(&self, ctx: &ToolContext, args: Value) -> Result<String, ToolError> {
        let service = self
            .service
            .upgrade()
            .ok_or_else(|| ToolError::other("TEAM_DISPOSED", "Error: the runtime is shut down"))?;
        let caller = service
            .resident(ctx.owner())
            .ok_or_else(|| ToolError::UnknownTool {
                name: self.name.name().to_owned(),
            })?;
        let op = self.name.request(args)?;
        // A Team record is linked to the tool call that made it (DESIGN decision 10).
        let origin = ctx
            .call_id()
            .filter(|_| self.name.writes())
            .map(|call_id| CallOrigin {
                session: caller.id().clone(),
                call_id: call_id.to_owned(),
                tool: self.name,
            });
        let context = OpContext {
            cancel: Some(ctx.cancellation().clone()),
            origin,
        };
        let reply = service
            .call(&caller, op, context)
            .await
            .map_err(|e| op_error(&e))?;
        render(&reply)
    }
}

impl Tool for TeamTool {
    fn name(&self) -> &str {
        self.name.name()
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
        Box::pin(async move { self.run(ctx, args).await.map_err(prefixed) })
    }

    /// The registry's own refusals (arguments that are not an object, a call cancelled before
    /// it started) read `Error: <message>` too.
    fn shape_error(&self, error: ToolError) -> ToolError {
        prefixed(error)
    }
}
