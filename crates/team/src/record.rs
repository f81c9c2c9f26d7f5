//! The four durable Team event types (REFERENCE c.3): snapshot types, their exact wire shapes
//! (`version: 1`, camelCase), strict decoding and encoding.

use std::fmt;

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use troupe_protocol::{EventDraft, MessageId, SessionId, event_types};

use crate::content::validate_content;
use crate::error::FoldError;
use crate::ids::{MAX_SAFE_INTEGER, MemberName, Revision, TaskId, TeamId};

/// The only payload version this build writes and folds.
pub const TEAM_EVENT_VERSION: u64 = 1;

/// How a teammate's Session was seeded (REFERENCE c.3). Wire: `"fresh"` | `"fork"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberContext {
    /// A new Session without the Lead's history.
    Fresh,
    /// A fork inheriting the Lead's completed turns.
    Fork,
}

impl MemberContext {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberContext::Fresh => "fresh",
            MemberContext::Fork => "fork",
        }
    }
}

/// The child provider a member was created with (REFERENCE c.3: immutable; trimmed, 1..200
/// UTF-16 units at creation). Troupe's runtime creates children with two providers, `spawn`
/// (a fresh Session) and `fork` (one seeded with the Lead's completed turns); REFERENCE keeps
/// the set open, so a log may name any other provider, which is kept as it is (such a member's
/// child never matches a Troupe descriptor, so recovery settles it `failed`).
///
/// Wire: the name as a JSON string (`"spawn"`, `"fork"`, any other string).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MemberProvider {
    /// `spawn`: a fresh child.
    Spawn,
    /// `fork`: a child seeded with the Lead's completed turns.
    Fork,
    /// Any other provider name (never `spawn` or `fork`, which are the variants above).
    Other(String),
}

impl MemberProvider {
    /// The provider called `name`.
    pub fn named(name: impl Into<String>) -> Self {
        let name = name.into();
        match name.as_str() {
            "spawn" => MemberProvider::Spawn,
            "fork" => MemberProvider::Fork,
            _ => MemberProvider::Other(name),
        }
    }

    /// The wire spelling (the provider's name).
    pub fn as_str(&self) -> &str {
        match self {
            MemberProvider::Spawn => "spawn",
            MemberProvider::Fork => "fork",
            MemberProvider::Other(name) => name,
        }
    }
}

impl fmt::Display for MemberProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for MemberProvider {
    /// Whether this is the provider called `other`.
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for MemberProvider {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for MemberProvider {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(MemberProvider::named)
    }
}

/// A member's durable lifecycle phase (REFERENCE c.3). The only edges are
/// `provisioning → active` and `provisioning → failed`.
/// Wire: `"provisioning"` | `"active"` | `"failed"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberPhase {
    /// Reserved; the child is being started.
    Provisioning,
    /// The child exists and accepted its initial prompt.
    Active,
    /// Provisioning failed; the name stays reserved forever.
    Failed,
}

impl MemberPhase {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberPhase::Provisioning => "provisioning",
            MemberPhase::Active => "active",
            MemberPhase::Failed => "failed",
        }
    }
}

impl fmt::Display for MemberPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task's status (REFERENCE c.3). Wire: `"pending"` | `"in_progress"` | `"completed"` |
/// `"deleted"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Waiting for an owner.
    Pending,
    /// Owned and being worked on.
    InProgress,
    /// Done (the owner is kept).
    Completed,
    /// A tombstone: kept forever, never mutated again, hidden from lists.
    Deleted,
}

impl TaskStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::Completed => "completed",
            TaskStatus::Deleted => "deleted",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a Team message is delivered (REFERENCE c.10): `quiet` (`send_message`, never wakes
/// the target) or `wakeup` (`followup_task`, runs a turn, cold-resumes). Wire: `"quiet"` |
/// `"wakeup"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Injected at the target's next step; never starts an idle target.
    Quiet,
    /// Queued as the target's next turn; starts or resumes it.
    Wakeup,
}

impl Delivery {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Quiet => "quiet",
            Delivery::Wakeup => "wakeup",
        }
    }
}

/// Deserializes a present optional field, refusing `null` (the original's schemas have
/// optional keys, not nullable ones).
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// A teammate's own git worktree (issue 17 item 6, `--worktree`; lifts REFERENCE g.1's "no
/// worktrees" only for a Team started with it): recorded in the member's `provisioning`
/// record, before `git worktree add` runs, and carried unchanged by its later edges.
///
/// Wire shape: `{"path","branch","base"}`: the worktree's absolute directory, the branch it
/// checks out (`troupe/<team-id-prefix>/<name>`, created for this member only) and the commit
/// of the Lead's `HEAD` the branch starts from (40 hexadecimal digits).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberWorktree {
    /// The worktree's absolute directory (the teammate's workspace).
    pub path: String,
    /// The branch it checks out.
    pub branch: String,
    /// The commit the branch was created from.
    pub base: String,
}

/// The whole value of a roster member, written on every lifecycle edge (REFERENCE c.3).
///
/// Wire shape: `{"id","name","description","provider","context","phase","error"?,
/// "worktree"?}`; `worktree` (a [`MemberWorktree`]) only for a member of a Team run with
/// `--worktree` (a Troupe extension of REFERENCE c.3, absent otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberSnapshot {
    /// The teammate's child SessionId (its persistent identity).
    pub id: SessionId,
    /// Immutable, never reused.
    pub name: MemberName,
    /// What the teammate was created for (trimmed, 1..200 UTF-16 units at creation).
    pub description: String,
    /// The child provider (trimmed, 1..200); immutable.
    pub provider: MemberProvider,
    /// Fresh or fork; immutable.
    pub context: MemberContext,
    /// The lifecycle phase.
    pub phase: MemberPhase,
    /// Why provisioning failed (written on the `failed` edge).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub error: Option<String>,
    /// The member's own git worktree, when the Team runs with worktrees (immutable; boxed:
    /// most members have none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub worktree: Option<Box<MemberWorktree>>,
}

/// The whole value of a task, written on every mutation (REFERENCE c.3).
///
/// Wire shape: `{"id","revision","subject","description","status","ownerId"?,"blockedBy",
/// "writeScopes"}`; `ownerId` is omitted when unowned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaskSnapshot {
    /// The task id.
    pub id: TaskId,
    /// 1 at creation, +1 per mutation.
    pub revision: Revision,
    /// Trimmed, 1..200 UTF-16 units.
    pub subject: String,
    /// Trimmed, 1..16384 UTF-16 units.
    pub description: String,
    /// The status.
    pub status: TaskStatus,
    /// The owner's SessionId (the Lead's or a teammate's); absent when unowned.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub owner_id: Option<SessionId>,
    /// Tasks that must be completed before this one is ready.
    pub blocked_by: Vec<TaskId>,
    /// Normalized advisory path prefixes (REFERENCE c.11.7).
    pub write_scopes: Vec<String>,
}

/// A queued Team message (REFERENCE c.3).
///
/// Wire shape: `{"id","senderId","senderName","targetId","delivery","content"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MessageSnapshot {
    /// `team-message-<uuid>`.
    pub id: MessageId,
    /// The sender's SessionId.
    pub sender_id: SessionId,
    /// The sender's Team name (`lead` for the Lead).
    pub sender_name: String,
    /// The target's SessionId.
    pub target_id: SessionId,
    /// Quiet or wakeup.
    pub delivery: Delivery,
    /// The sender's original content blocks, unframed; plugin blocks kept verbatim.
    pub content: Vec<Value>,
}

/// The body of one durable Team event (the part after `version` and `teamId`).
#[derive(Debug, Clone, PartialEq)]
pub enum TeamRecord {
    /// `team/member {version, teamId, member}`.
    Member(MemberSnapshot),
    /// `team/task {version, teamId, task}`.
    Task(TaskSnapshot),
    /// `team/message/queued {version, teamId, message}`.
    MessageQueued(MessageSnapshot),
    /// `team/message/delivered {version, teamId, messageId, targetId}`.
    MessageDelivered {
        /// The delivered message.
        message_id: MessageId,
        /// Its target (must equal the queued target).
        target_id: SessionId,
    },
}

impl TeamRecord {
    /// The event type this record is stored as (one of the `team/…` constants of
    /// [`troupe_protocol::event_types`]).
    pub fn kind(&self) -> &'static str {
        match self {
            TeamRecord::Member(_) => event_types::TEAM_MEMBER,
            TeamRecord::Task(_) => event_types::TEAM_TASK,
            TeamRecord::MessageQueued(_) => event_types::TEAM_MESSAGE_QUEUED,
            TeamRecord::MessageDelivered { .. } => event_types::TEAM_MESSAGE_DELIVERED,
        }
    }
}

/// A Team event ready to append to the Lead's log: what every decision of this crate
/// returns. The runtime stages it ([`crate::TeamState::stage`]: the one invariant check),
/// appends [`TeamEvent::to_draft`], flushes, then applies the staged event.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamEvent {
    /// The Team (the Lead's SessionId).
    pub team_id: TeamId,
    /// The record.
    pub record: TeamRecord,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MemberOut<'a> {
    version: u64,
    team_id: &'a TeamId,
    member: &'a MemberSnapshot,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskOut<'a> {
    version: u64,
    team_id: &'a TeamId,
    task: &'a TaskSnapshot,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QueuedOut<'a> {
    version: u64,
    team_id: &'a TeamId,
    message: &'a MessageSnapshot,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeliveredOut<'a> {
    version: u64,
    team_id: &'a TeamId,
    message_id: &'a MessageId,
    target_id: &'a SessionId,
}

impl TeamEvent {
    /// The event type (`team/member`, `team/task`, `team/message/queued` or
    /// `team/message/delivered`).
    pub fn kind(&self) -> &'static str {
        self.record.kind()
    }

    /// The event's `data`: `{"version":1,"teamId":…, <body>}` with the exact field names of
    /// REFERENCE c.3.
    pub fn to_data(&self) -> Value {
        let team_id = &self.team_id;
        let version = TEAM_EVENT_VERSION;
        let encoded = match &self.record {
            TeamRecord::Member(member) => serde_json::to_value(MemberOut {
                version,
                team_id,
                member,
            }),
            TeamRecord::Task(task) => serde_json::to_value(TaskOut {
                version,
                team_id,
                task,
            }),
            TeamRecord::MessageQueued(message) => serde_json::to_value(QueuedOut {
                version,
                team_id,
                message,
            }),
            TeamRecord::MessageDelivered {
                message_id,
                target_id,
            } => serde_json::to_value(DeliveredOut {
                version,
                team_id,
                message_id,
                target_id,
            }),
        };
        // Serializing these plain structs (strings, integers, arrays and JSON values with
        // string keys) cannot fail; fall back to an empty object rather than panic.
        encoded.unwrap_or_else(|_| Value::Object(serde_json::Map::new()))
    }

    /// A required (not ignorable, REFERENCE a.2) event draft of this record.
    pub fn to_draft(&self) -> EventDraft {
        EventDraft::new(self.kind(), self.to_data())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MemberIn {
    // Already checked by the loose selector; listed so strict decoding accepts them.
    #[serde(rename = "version")]
    _version: IgnoredAny,
    #[serde(rename = "teamId")]
    _team_id: IgnoredAny,
    member: MemberSnapshot,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaskIn {
    // Already checked by the loose selector; listed so strict decoding accepts them.
    #[serde(rename = "version")]
    _version: IgnoredAny,
    #[serde(rename = "teamId")]
    _team_id: IgnoredAny,
    task: TaskSnapshot,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QueuedIn {
    // Already checked by the loose selector; listed so strict decoding accepts them.
    #[serde(rename = "version")]
    _version: IgnoredAny,
    #[serde(rename = "teamId")]
    _team_id: IgnoredAny,
    message: MessageSnapshot,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeliveredIn {
    // Already checked by the loose selector; listed so strict decoding accepts them.
    #[serde(rename = "version")]
    _version: IgnoredAny,
    #[serde(rename = "teamId")]
    _team_id: IgnoredAny,
    message_id: MessageId,
    target_id: SessionId,
}

/// The result of decoding one event's payload (REFERENCE c.4 steps 1–4).
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded<'a> {
    /// Not one of the four Team types: the fold skips it.
    NotTeam,
    /// A Team record with a version other than 1 (only its loose selector was read).
    OtherVersion {
        /// The record's `teamId`.
        team_id: &'a str,
        /// The record's `version`.
        version: u64,
    },
    /// A valid `version: 1` record (of this Team or another).
    Record {
        /// The record's `teamId`.
        team_id: &'a str,
        /// The strictly decoded body.
        record: TeamRecord,
    },
}

/// Decodes the payload of one event of type `kind` (REFERENCE c.4 steps 1–4): non-Team types
/// are [`Decoded::NotTeam`]; the loose selector `{version: int 0..2^53-1, teamId: non-empty
/// string}` is read first; a version other than 1 stops there; a `version: 1` payload is
/// decoded strictly (unknown keys and wrong types refused, content blocks validated), whatever
/// its `teamId`.
///
/// # Errors
/// [`FoldError::InvalidPayload`] ("persisted Agent Teams `<type>` payload is invalid").
pub fn decode<'a>(kind: &str, data: &'a Value) -> Result<Decoded<'a>, FoldError> {
    if !event_types::is_team(kind) {
        return Ok(Decoded::NotTeam);
    }
    let invalid = |detail: String| FoldError::InvalidPayload {
        event_type: kind.to_owned(),
        detail,
    };
    let Some(object) = data.as_object() else {
        return Err(invalid("the payload must be an object".to_owned()));
    };
    let version = object
        .get("version")
        .and_then(Value::as_u64)
        .filter(|v| *v <= MAX_SAFE_INTEGER)
        .ok_or_else(|| invalid("version must be a safe non-negative integer".to_owned()))?;
    let team_id = match object.get("teamId") {
        Some(Value::String(team_id)) if !team_id.is_empty() => team_id.as_str(),
        _ => return Err(invalid("teamId must be a non-empty string".to_owned())),
    };
    if version != TEAM_EVENT_VERSION {
        return Ok(Decoded::OtherVersion { team_id, version });
    }
    let detail = |e: serde_json::Error| invalid(e.to_string());
    let record = match kind {
        event_types::TEAM_MEMBER => {
            TeamRecord::Member(MemberIn::deserialize(data).map_err(detail)?.member)
        }
        event_types::TEAM_TASK => TeamRecord::Task(TaskIn::deserialize(data).map_err(detail)?.task),
        event_types::TEAM_MESSAGE_QUEUED => {
            let message = QueuedIn::deserialize(data).map_err(detail)?.message;
            validate_content(&message.content).map_err(invalid)?;
            TeamRecord::MessageQueued(message)
        }
        _ => {
            let delivered = DeliveredIn::deserialize(data).map_err(detail)?;
            TeamRecord::MessageDelivered {
                message_id: delivered.message_id,
                target_id: delivered.target_id,
            }
        }
    };
    Ok(Decoded::Record { team_id, record })
}
