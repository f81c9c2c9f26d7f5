//! The default profile's `subagent` and `subagent_fork` tools (DESIGN decision 4): a one-shot
//! child works a task and its final answer is returned to the caller as the tool result.

use serde::Deserialize;
use serde_json::{Value, json};
use troupe_tools::{Tool, ToolContext, ToolError, ToolFuture, parse_arguments};

use crate::agent::AgentStatus;
use crate::events::{Profile, TurnEndReason};
use crate::runtime::{ChildProvider, ChildSpec, RtWeak};

/// `subagent {prompt, label?}` (fresh child) or `subagent_fork {prompt, label?}` (a child
/// seeded with the caller's completed turns). Result:
/// `{"childId","status":"completed"|"stopped"|"failed","answer"?,"error"?}`.
pub(crate) struct SubagentTool {
    runtime: RtWeak,
    provider: ChildProvider,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    prompt: String,
    #[serde(default)]
    label: Option<String>,
}

impl SubagentTool {
    pub(crate) fn new(runtime: RtWeak, provider: ChildProvider) -> Self {
        Self { runtime, provider }
    }
}

impl Tool for SubagentTool {
    fn name(&self) -> &str {
        match self.provider {
            ChildProvider::Spawn => "subagent",
            ChildProvider::Fork => "subagent_fork",
        }
    }

    fn description(&self) -> &str {
        match self.provider {
            ChildProvider::Spawn => {
                "Run a fresh helper agent on a self-contained task in the same workspace and \
                 return its final answer. The helper sees none of this conversation: put \
                 everything it needs in `prompt`."
            }
            ChildProvider::Fork => {
                "Run a helper agent that starts from a copy of this conversation (its completed \
                 turns) on a side task, and return its final answer."
            }
        }
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "The task for the helper."},
                "label": {"type": "string", "description": "A short name for the helper (default: subagent)."}
            },
            "required": ["prompt"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "childId": {"type": "string"},
                "status": {"type": "string", "enum": ["completed", "stopped", "failed"]},
                "answer": {"type": "string"},
                "error": {"type": "string"}
            },
            "required": ["childId", "status"],
            "additionalProperties": false
        }))
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = parse_arguments(args)?;
            if args.prompt.trim().is_empty() {
                return Err(ToolError::invalid_arguments("`prompt` must not be empty"));
            }
            let rt = self
                .runtime
                .upgrade()
                .ok_or_else(|| ToolError::other("AGENT_DISPOSED", "the runtime is shutting down"))?
                .runtime();
            let caller = rt
                .agent(ctx.owner())
                .ok_or_else(|| ToolError::other("UNAUTHORIZED", "the calling agent is not live"))?;
            let label = args.label.unwrap_or_else(|| "subagent".to_owned());
            let started = rt
                .start_child(
                    &caller,
                    ChildSpec {
                        provider: self.provider,
                        label,
                        child_id: None,
                        prompt: args.prompt,
                        continuable: false,
                        notify_parent: false,
                        profile: Profile::Default,
                        cancel: Some(ctx.cancellation().clone()),
                    },
                )
                .await?;
            let child = rt.agent(&started.child_id).ok_or_else(|| {
                ToolError::other("AGENT_DISPOSED", "the helper stopped before it started")
            })?;
            let mut status = child.subscribe_status();
            let cancelled = tokio::select! {
                _ = status.wait_for(|s| *s == AgentStatus::Idle) => false,
                () = ctx.cancellation().cancelled() => true,
            };
            if cancelled {
                let _ = child.cancel(json!({"kind": "parent"}), false).await;
            }
            let (reason, answer) = child.with_transcript(|t| {
                (
                    t.last_turn_end().cloned(),
                    t.last_answer().map(str::to_owned),
                )
            });
            if let Err(e) = rt
                .drain_children(&caller, std::slice::from_ref(&started.child_id))
                .await
            {
                tracing::warn!(error = %e, "helper teardown failed");
            }
            if cancelled {
                return Err(ToolError::Canceled);
            }
            let mut out = json!({"childId": started.child_id});
            match reason {
                Some(TurnEndReason::Completed) => {
                    out["status"] = json!("completed");
                    out["answer"] = json!(answer.unwrap_or_default());
                }
                Some(TurnEndReason::Failed { code, message }) => {
                    out["status"] = json!("failed");
                    out["error"] = json!(format!("{code}: {message}"));
                }
                _ => out["status"] = json!("stopped"),
            }
            Ok(out)
        })
    }
}

impl std::fmt::Debug for SubagentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentTool")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}
