//! A member's conversation: the events of its own session file as the panel shows them.
//!
//! Pure: one [`Event`] in, at most one [`Item`] out. Only what the model saw or did is shown
//! (messages, answers, tool calls and results, turn boundaries, failed model attempts), as it
//! was logged: the runtime redacts secrets before anything is recorded, and nothing else
//! (configuration, requests, inbox bookkeeping, Team records) is served.

use serde::Serialize;
use serde_json::Value;
use troupe_protocol::{Event, UserMessage, event_types};
use troupe_session::events::{
    AssistantRecord, ModelAttemptRecord, ToolCallRecord, ToolResultRecord, TurnEnd, TurnEndReason,
    TurnStart,
};

/// At most this many characters of a tool result are served (the rest is cut, and
/// `truncated` says so): file reads can be large and the panel only shows a preview.
pub const TOOL_RESULT_MAX_CHARS: usize = 4000;

/// One entry of a conversation. Every item carries the `seq` and `time` (epoch ms) of the event
/// it shows.
///
/// Wire shape: `{"kind": "user" | "assistant" | "toolCall" | "toolResult" | "turnStart" |
/// "turnEnd" | "notice", "seq", "time", …}` with the fields of each variant in camelCase.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Item {
    /// A message the agent received: the user's prompt, a Team message (with its sender), a
    /// notice of a settled subagent, a continuation after a resume.
    User {
        /// Event seq.
        seq: u64,
        /// Event time, epoch ms.
        time: u64,
        /// The text blocks, joined by blank lines.
        text: String,
        /// The message source kind (`user`, `team-message`, `subagent-settled`, …).
        source: String,
        /// For a Team message: the sender's Team name.
        #[serde(skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    },
    /// The model's visible answer of one step (steps with only tool calls show as
    /// [`Item::ToolCall`]s instead).
    Assistant {
        /// Event seq.
        seq: u64,
        /// Event time, epoch ms.
        time: u64,
        /// The answer text.
        text: String,
        /// The reasoning text of reasoning models.
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    /// A tool call about to run.
    ToolCall {
        /// Event seq.
        seq: u64,
        /// Event time, epoch ms.
        time: u64,
        /// The model's call id.
        call_id: String,
        /// The tool.
        name: String,
        /// The arguments.
        arguments: Value,
    },
    /// A tool call's result as the model saw it (cut at [`TOOL_RESULT_MAX_CHARS`]).
    ToolResult {
        /// Event seq.
        seq: u64,
        /// Event time, epoch ms.
        time: u64,
        /// The call answered.
        call_id: String,
        /// The tool.
        name: String,
        /// Whether it is an error.
        is_error: bool,
        /// The stable error code of an error.
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        /// The result text.
        content: String,
        /// Whether `content` was cut.
        truncated: bool,
    },
    /// A turn began.
    TurnStart {
        /// Event seq.
        seq: u64,
        /// Event time, epoch ms.
        time: u64,
        /// The turn number.
        turn: u64,
    },
    /// A turn ended.
    TurnEnd {
        /// Event seq.
        seq: u64,
        /// Event time, epoch ms.
        time: u64,
        /// The turn number.
        turn: u64,
        /// `completed`, `aborted`, `interrupted` or `failed`.
        outcome: String,
        /// For a failed turn: `CODE: message`.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A failed model attempt (retried or not).
    Notice {
        /// Event seq.
        seq: u64,
        /// Event time, epoch ms.
        time: u64,
        /// What happened.
        text: String,
    },
}

impl Item {
    /// The seq of the event shown.
    pub fn seq(&self) -> u64 {
        match self {
            Item::User { seq, .. }
            | Item::Assistant { seq, .. }
            | Item::ToolCall { seq, .. }
            | Item::ToolResult { seq, .. }
            | Item::TurnStart { seq, .. }
            | Item::TurnEnd { seq, .. }
            | Item::Notice { seq, .. } => *seq,
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(event: &Event) -> Option<T> {
    serde_json::from_value(event.data.clone()).ok()
}

/// The item an event shows, if any. Events the panel does not show (and payloads it cannot
/// read) give `None`.
pub fn item_of(event: &Event) -> Option<Item> {
    let (seq, time) = (event.seq.0, event.time);
    match event.kind.as_str() {
        event_types::USER_MESSAGE => {
            let message: UserMessage = parse(event)?;
            let from = (message.source.kind == troupe_team::TEAM_MESSAGE_SOURCE_KIND)
                .then(|| message.source.extra.get("senderName"))
                .flatten()
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some(Item::User {
                seq,
                time,
                text: message.text_content(),
                source: message.source.kind,
                from,
            })
        }
        event_types::ASSISTANT_MESSAGE => {
            let record: AssistantRecord = parse(event)?;
            let text = record.message.content.unwrap_or_default();
            let reasoning = record.message.reasoning_content.filter(|r| !r.is_empty());
            if text.trim().is_empty() && reasoning.is_none() {
                return None;
            }
            Some(Item::Assistant {
                seq,
                time,
                text,
                reasoning,
            })
        }
        event_types::TOOL_CALL => {
            let record: ToolCallRecord = parse(event)?;
            Some(Item::ToolCall {
                seq,
                time,
                call_id: record.call_id,
                name: record.name,
                arguments: record.arguments,
            })
        }
        event_types::TOOL_RESULT => {
            let record: ToolResultRecord = parse(event)?;
            let truncated = record.content.chars().count() > TOOL_RESULT_MAX_CHARS;
            let content = if truncated {
                record.content.chars().take(TOOL_RESULT_MAX_CHARS).collect()
            } else {
                record.content
            };
            Some(Item::ToolResult {
                seq,
                time,
                call_id: record.call_id,
                name: record.name,
                is_error: record.is_error,
                code: record.code,
                content,
                truncated,
            })
        }
        event_types::TURN_START => {
            let record: TurnStart = parse(event)?;
            Some(Item::TurnStart {
                seq,
                time,
                turn: record.turn,
            })
        }
        event_types::TURN_END => {
            let record: TurnEnd = parse(event)?;
            let (outcome, detail) = match record.reason {
                TurnEndReason::Completed => ("completed", None),
                TurnEndReason::Aborted { .. } => ("aborted", None),
                TurnEndReason::Interrupted => ("interrupted", None),
                TurnEndReason::Failed { code, message } => {
                    ("failed", Some(format!("{code}: {message}")))
                }
            };
            Some(Item::TurnEnd {
                seq,
                time,
                turn: record.turn,
                outcome: outcome.to_owned(),
                detail,
            })
        }
        event_types::MODEL_ATTEMPT => {
            let record: ModelAttemptRecord = parse(event)?;
            let attempt = record.attempt;
            let error = attempt.error?;
            let retry = attempt
                .retry_delay_ms
                .map_or_else(String::new, |ms| format!(", retrying in {ms} ms"));
            Some(Item::Notice {
                seq,
                time,
                text: format!(
                    "model attempt {} failed: {}: {}{retry}",
                    attempt.number, error.code, error.message
                ),
            })
        }
        _ => None,
    }
}
