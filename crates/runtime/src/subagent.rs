//! The default profile's `subagent` and `subagent_fork` tools (DESIGN decision 4): a one-shot
//! child works a task and its final answer is returned to the caller as the tool result.

use std::sync::Weak;

use serde::Deserialize;
use serde_json::{Value, json};
use troupe_tools::{Tool, ToolContext, ToolError, ToolFuture, parse_arguments};

use crate::agent::AgentStatus;
use crate::control::{ChildControl, ChildSpec};
use troupe_session::events::{ChildProvider, Profile, TurnEndReason};

/// `subagent {prompt, label?}` (fresh child) or `subagent_fork {prompt, label?}` (a child
/// seeded with the caller's completed turns). Result:
/// `{"childId","status":"completed"|"stopped"|"failed","answer"?,"error"?}`.
pub(crate) struct SubagentTool {
    /// The runtime's children (weak: the runtime owns the agents that own this tool).
    control: Weak<dyn ChildControl>,
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
    pub(crate) fn new(control: Weak<dyn ChildControl>, provider: ChildProvider) -> Self {
        Self { control, provider }
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
                "label": {"type": "string", "description": "A short name for the helper: lowercase letters, digits and single hyphens, at most 64 characters, not `lead` (default: subagent)."}
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
            let control = self.control.upgrade().ok_or_else(|| {
                ToolError::other("AGENT_DISPOSED", "the runtime is shutting down")
            })?;
            let caller = control
                .agent(ctx.owner())
                .ok_or_else(|| ToolError::other("UNAUTHORIZED", "the calling agent is not live"))?;
            let label = helper_label(args.label)?;
            let started = control
                .start(
                    &caller,
                    ChildSpec {
                        provider: self.provider,
                        label,
                        child_id: None,
                        prompt: args.prompt,
                        continuable: false,
                        notify_parent: false,
                        profile: Profile::Default,
                        model: None,
                        cancel: Some(ctx.cancellation().clone()),
                        workspace: None,
                    },
                )
                .await?;
            let child = control.agent(&started.child_id).ok_or_else(|| {
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
            if let Err(e) = control
                .drain(&caller, std::slice::from_ref(&started.child_id))
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

/// The most characters a helper's label may have (as a Team member name).
const LABEL_MAX_LEN: usize = 64;

/// A helper's name: the model's `label` when valid, `subagent` when absent or empty. A label
/// follows the member-name rule (`^[a-z0-9]+(?:-[a-z0-9]+)*$`, at most 64 characters, not
/// `lead`): it names the child's session and script, and is printed to terminals, so control
/// characters and the root's name are refused (`INVALID_ARGUMENTS`).
fn helper_label(label: Option<String>) -> Result<String, ToolError> {
    let label = match label {
        None => return Ok("subagent".to_owned()),
        Some(label) if label.is_empty() => return Ok("subagent".to_owned()),
        Some(label) => label,
    };
    let well_formed = label.len() <= LABEL_MAX_LEN
        && label.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !well_formed {
        return Err(ToolError::invalid_arguments(format!(
            "field `label`: {:?} is not a valid helper name (lowercase letters and digits in \
             words joined by single hyphens, at most {LABEL_MAX_LEN} characters)",
            label.chars().take(LABEL_MAX_LEN + 1).collect::<String>()
        )));
    }
    if label == "lead" {
        return Err(ToolError::invalid_arguments(
            "field `label`: `lead` is reserved for the root agent; choose another name",
        ));
    }
    Ok(label)
}

impl std::fmt::Debug for SubagentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentTool")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::ErrorCode;

    use super::*;

    #[test]
    fn labels_follow_the_member_name_rule() {
        for (given, expected) in [
            (None, Some("subagent")),
            (Some(""), Some("subagent")),
            (Some("helper"), Some("helper")),
            (Some("my-helper-2"), Some("my-helper-2")),
            (Some("7"), Some("7")),
            (Some("lead"), None),
            (Some("Helper"), None),
            (Some("-a"), None),
            (Some("a-"), None),
            (Some("a--b"), None),
            (Some("a b"), None),
            (Some(" "), None),
            (Some("x\u{1b}[31m"), None),
            (Some("two\nlines"), None),
            (Some("caf\u{e9}"), None),
        ] {
            let result = helper_label(given.map(str::to_owned));
            match expected {
                Some(name) => assert_eq!(result.ok().as_deref(), Some(name), "{given:?}"),
                None => assert_eq!(
                    result.err().map(|e| e.code()),
                    Some("INVALID_ARGUMENTS"),
                    "{given:?}"
                ),
            }
        }
        assert!(helper_label(Some("a".repeat(64))).is_ok());
        assert!(helper_label(Some("a".repeat(65))).is_err());
    }
}
