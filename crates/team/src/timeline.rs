//! The Team timeline: one entry per Team event of the Lead log, in a words a person reads
//! (issue 17 item 4; `troupe team log`, the web panel's slider).
//!
//! The fold API: for each event of the Lead log, [`TeamState::describe`] on the state *before*
//! the event (so a task update can say what changed and a message can name its target), then
//! [`TeamState::apply`]. An event that is not a valid record of this Team has no entry (the
//! fold skips or refuses it).
//!
//! Pure: no IO, no clock.

use serde::Serialize;
use troupe_protocol::{Event, MessageId, Seq};

use crate::ids::TaskId;
use crate::record::{Decoded, MemberPhase, TaskSnapshot, TeamRecord, decode};
use crate::state::TeamState;

/// One Team event of the Lead log, described.
///
/// Wire shape (camelCase): `{"seq","time","type","text","member"?,"taskId"?,"revision"?,
/// "messageId"?}`: `text` is one human-readable line (no line breaks); `member` (a roster
/// name) on `team/member`, `taskId` and `revision` on `team/task`, `messageId` on the two
/// message types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEntry {
    /// The event's seq in the Lead log.
    pub seq: Seq,
    /// The event's time, epoch milliseconds.
    pub time: u64,
    /// The event type (`team/member`, `team/task`, `team/message/queued`,
    /// `team/message/delivered`).
    #[serde(rename = "type")]
    pub kind: String,
    /// What happened, in one line.
    pub text: String,
    /// The member a `team/member` record concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// The task a `team/task` record concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// The task's revision after a `team/task` record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// The message a message record concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<MessageId>,
}

/// At most this many characters of a subject or description in an entry's text.
const QUOTE_MAX: usize = 80;

fn quote(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() > QUOTE_MAX {
        let cut: String = one_line.chars().take(QUOTE_MAX - 1).collect();
        format!("\"{cut}…\"")
    } else {
        format!("\"{one_line}\"")
    }
}

impl TeamState {
    /// The timeline entry of `event` against this state, the state before it (see the module
    /// docs): `None` for an event that is not a valid `version: 1` record of this Team, or one
    /// the fold would refuse.
    pub fn describe(&self, event: &Event) -> Option<TimelineEntry> {
        let Ok(Decoded::Record { team_id, record }) = decode(&event.kind, &event.data) else {
            return None;
        };
        if team_id != self.id().as_str() || self.check_candidate(&event.kind, &event.data).is_err()
        {
            return None;
        }
        let mut entry = TimelineEntry {
            seq: event.seq,
            time: event.time,
            kind: event.kind.clone(),
            text: String::new(),
            member: None,
            task_id: None,
            revision: None,
            message_id: None,
        };
        entry.text = match record {
            TeamRecord::Member(member) => {
                entry.member = Some(member.name.to_string());
                match member.phase {
                    MemberPhase::Provisioning => format!(
                        "teammate {} is being created ({} context): {}",
                        member.name,
                        member.context.as_str(),
                        quote(&member.description)
                    ),
                    MemberPhase::Active => format!("teammate {} is active", member.name),
                    MemberPhase::Failed => format!(
                        "teammate {} failed{}",
                        member.name,
                        member
                            .error
                            .as_deref()
                            .map(|e| format!(": {}", quote(e)))
                            .unwrap_or_default()
                    ),
                }
            }
            TeamRecord::Task(task) => {
                entry.task_id = Some(task.id.clone());
                entry.revision = Some(task.revision.get());
                match self.task_by_id(&task.id) {
                    None => self.describe_new_task(&task),
                    Some(before) => self.describe_task_change(before, &task),
                }
            }
            TeamRecord::MessageQueued(message) => {
                let target = self
                    .name_of(&message.target_id)
                    .map_or_else(|| message.target_id.to_string(), str::to_owned);
                entry.message_id = Some(message.id.clone());
                format!(
                    "{} sent {} a {} message ({})",
                    message.sender_name,
                    target,
                    message.delivery.as_str(),
                    message.id
                )
            }
            TeamRecord::MessageDelivered {
                message_id,
                target_id,
            } => {
                let target = self
                    .name_of(&target_id)
                    .map_or_else(|| target_id.to_string(), str::to_owned);
                let sender = self
                    .message(&message_id)
                    .map_or("?", |m| m.sender_name.as_str());
                let text = format!("{target} received the message from {sender} ({message_id})");
                entry.message_id = Some(message_id);
                text
            }
        };
        Some(entry)
    }

    fn owner_name(&self, task: &TaskSnapshot) -> Option<String> {
        task.owner_id.as_ref().map(|owner| {
            self.name_of(owner)
                .map_or_else(|| owner.to_string(), str::to_owned)
        })
    }

    fn describe_new_task(&self, task: &TaskSnapshot) -> String {
        let mut text = format!("{} created: {}", task.id, quote(&task.subject));
        if !task.blocked_by.is_empty() {
            let blockers: Vec<&str> = task.blocked_by.iter().map(TaskId::as_str).collect();
            text.push_str(&format!(", blocked by {}", blockers.join(", ")));
        }
        if let Some(owner) = self.owner_name(task) {
            text.push_str(&format!(", owner {owner}"));
        }
        if task.status != crate::record::TaskStatus::Pending {
            text.push_str(&format!(", {}", task.status));
        }
        text
    }

    fn describe_task_change(&self, before: &TaskSnapshot, after: &TaskSnapshot) -> String {
        let mut changes = Vec::new();
        if before.status != after.status {
            changes.push(format!("{} → {}", before.status, after.status));
        }
        if before.owner_id != after.owner_id {
            changes.push(match self.owner_name(after) {
                Some(owner) => format!("owner {owner}"),
                None => "unowned".to_owned(),
            });
        }
        if before.subject != after.subject {
            changes.push(format!("subject {}", quote(&after.subject)));
        }
        if before.description != after.description {
            changes.push("description changed".to_owned());
        }
        if before.blocked_by != after.blocked_by {
            let blockers: Vec<&str> = after.blocked_by.iter().map(TaskId::as_str).collect();
            changes.push(if blockers.is_empty() {
                "no blockers".to_owned()
            } else {
                format!("blocked by {}", blockers.join(", "))
            });
        }
        if before.write_scopes != after.write_scopes {
            changes.push(if after.write_scopes.is_empty() {
                "no write scopes".to_owned()
            } else {
                format!("write scopes {}", after.write_scopes.join(", "))
            });
        }
        if changes.is_empty() {
            changes.push("unchanged".to_owned());
        }
        format!(
            "{} rev {}: {}",
            after.id,
            after.revision.get(),
            changes.join(", ")
        )
    }
}

/// The timeline fold of a whole Lead log: [`Timeline::event`] for each event in order, then
/// [`Timeline::finish`]. Each event is described against the state before it and then folded;
/// the first refusal is kept and ends the timeline (a log that does not fold has none).
#[derive(Debug, Clone)]
pub struct Timeline {
    fold: crate::state::StreamFold,
    entries: Vec<TimelineEntry>,
}

impl Timeline {
    /// The empty timeline of the Team `team`.
    pub fn new(team: crate::ids::TeamId) -> Self {
        Self {
            fold: crate::state::StreamFold::new(team),
            entries: Vec::new(),
        }
    }

    /// Describes and folds one event of the Lead log (only `team/…` events matter: the others
    /// may be left out, see [`crate::StreamFold::reads`]).
    pub fn event(&mut self, event: &Event) {
        if self.fold.is_refused() {
            return;
        }
        if let Some(entry) = self.fold.state().describe(event) {
            self.entries.push(entry);
        }
        self.fold.event(event);
    }

    /// The entries in log order.
    ///
    /// # Errors
    /// [`crate::ReplayError`] (`TEAM_LOG_INVALID`) naming the first event the fold refused.
    pub fn finish(self) -> Result<Vec<TimelineEntry>, crate::ReplayError> {
        self.fold.finish().map(|_| self.entries)
    }
}

/// Where a view of a past point stopped (`troupe team show --at`).
///
/// Wire shape: `{"seq"?,"time","lastSeq"?}`: `seq` the last Lead event folded (absent for the
/// empty prefix), `time` the point's time (epoch ms), `lastSeq` the Lead log's last seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AtPoint {
    /// The last Lead event folded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<Seq>,
    /// The point's time, epoch ms.
    pub time: u64,
    /// The Lead log's last seq.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seq: Option<Seq>,
}

/// `troupe team show --json`'s object (and the panel's `…/team/show`): DESIGN §6's view, every
/// message's receipt, and for a view at a past point, where it stopped.
///
/// Wire shape: `{"teamId","members","tasks","pendingMessages","messages":[MessageReceipt…],
/// "at"?:AtPoint}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TeamShowFull {
    /// The view (roster, board, pending mail).
    #[serde(flatten)]
    pub show: crate::view::TeamShow,
    /// Every message queued (up to the point), in queue order, with its life.
    pub messages: Vec<crate::receipts::MessageReceipt>,
    /// Where the read stopped, for a view at a past point.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<AtPoint>,
}
