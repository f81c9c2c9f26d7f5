//! The Team tools' outputs (REFERENCE d.3–d.4): the typed results a tool call renders, in
//! the key order of each tool's declared output schema, and the exact result texts recovery
//! rebuilds for a call whose effect is in the Lead log (DESIGN decision 10).

use serde::Serialize;
use troupe_protocol::MessageId;
use troupe_team::MemberView;
use troupe_tools::ToolError;

use super::op::{NO_PROGRESS_MESSAGE, TeamReply, WaitOutcome};

/// The compact JSON text of a typed result: keys in the order the types declare them, which is
/// the order of each tool's declared output schema (REFERENCE d.3).
fn to_text<T: serde::Serialize>(value: &T) -> Result<String, ToolError> {
    serde_json::to_string(value).map_err(|e| ToolError::other("TOOL_INTERNAL_ERROR", e.to_string()))
}

/// The exact text `spawn_teammate` returns for `member` (recovery rebuilds it, DESIGN
/// decision 10).
pub(crate) fn spawn_result_text(member: &MemberView) -> String {
    to_text(&SpawnOutput { member }).unwrap_or_default()
}

/// The exact text `send_message` / `followup_task` return (recovery rebuilds it).
pub(crate) fn send_result_text(id: &MessageId, status: &'static str) -> String {
    to_text(&SendOutput {
        message_id: id,
        status,
    })
    .unwrap_or_default()
}

/// The compact JSON text of a reply, in the tool's declared output shape (REFERENCE d.3).
pub(super) fn render(reply: &TeamReply) -> Result<String, ToolError> {
    match reply {
        TeamReply::Member(member) => to_text(&SpawnOutput { member }),
        TeamReply::Sent {
            message_id,
            accepted,
        } => to_text(&SendOutput {
            message_id,
            status: if *accepted { "accepted" } else { "queued" },
        }),
        TeamReply::Members(members) => to_text(members),
        TeamReply::Roster(rows) => to_text(rows),
        TeamReply::Waited(WaitOutcome::Waited { timed_out }) => to_text(&WaitOutput {
            timed_out: *timed_out,
            no_progress: None,
        }),
        TeamReply::Waited(WaitOutcome::NoProgress) => to_text(&WaitOutput {
            timed_out: false,
            no_progress: Some(NoProgressOutput {
                reason: "no-active-peer",
                message: NO_PROGRESS_MESSAGE,
            }),
        }),
        TeamReply::Interrupted { previous_status } => to_text(&InterruptOutput { previous_status }),
        TeamReply::Task(view) => to_text(view),
        TeamReply::Tasks(page) => to_text(page),
    }
}

/// `spawn_teammate`'s output: `{member}`.
#[derive(Serialize)]
struct SpawnOutput<'a> {
    member: &'a MemberView,
}

/// `send_message` / `followup_task` output: `{messageId, status}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SendOutput<'a> {
    message_id: &'a MessageId,
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
