//! Receipts: each Team message's life, folded from the logs (issue 17 item 3; REFERENCE c.10,
//! a.11, b.2).
//!
//! A message's life has four points, each read from the log that records it:
//!
//! 1. **queued** — the Lead log's `team/message/queued` (c.10.1);
//! 2. **received** — the target's own log: the `agent/inbox/spliced` that inserted the framed
//!    message (id = the Team message id, source `team-message` of this Team; a.11, c.10.3);
//! 3. **delivered** — the Lead log's `team/message/delivered`, appended only once the target's
//!    receipt was durable (c.10.3 "Acknowledge");
//! 4. **consumed** — the target's own log: the claim that took it out of the inbox, i.e. the
//!    `user/message` holding it, in turn N (b.2's claim order; the turn is the `turn/start`
//!    that opened the turn the claim belongs to).
//!
//! The fold API: [`Receipts::apply_lead`] takes every event of the Lead log (it records the
//! Lead-side points, and — the Lead being a target too — the Lead's own inbox); for each
//! teammate, [`Receipts::apply_target`] takes the events of its *own suffix* (a fork's seeded
//! prefix is the Lead's history, not the teammate's: the caller leaves it out). Then
//! [`Receipts::list`] builds one [`MessageReceipt`] per queued message of a [`TeamState`], in
//! queue order. Order between the logs does not matter; within one log events come in order.
//!
//! Pure: no IO, no clock.

use foldhash::HashMap;
use serde::Serialize;
use serde_json::Value;
use troupe_protocol::{Event, MessageId, Seq, SessionId, event_types};

use crate::ids::TeamId;
use crate::mailbox::TEAM_MESSAGE_SOURCE_KIND;
use crate::record::Delivery;
use crate::state::TeamState;

/// A point in one session log: the event's `seq` and `time` (epoch ms).
///
/// Wire shape: `{"seq","time"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LogPoint {
    /// The event's seq in its log.
    pub seq: Seq,
    /// The event's time, epoch milliseconds.
    pub time: u64,
}

impl LogPoint {
    fn of(event: &Event) -> Self {
        Self {
            seq: event.seq,
            time: event.time,
        }
    }
}

/// Where the target claimed a message: the `user/message` that holds it, in the target's log,
/// and the turn it belongs to.
///
/// Wire shape: `{"seq","time","turn"?}` (`turn` absent only for a claim outside any turn,
/// which the runtime never writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Consumed {
    /// The `user/message`'s seq in the target's log.
    pub seq: Seq,
    /// Its time, epoch milliseconds.
    pub time: u64,
    /// The target's turn number that claimed it (from the last `turn/start` before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
}

/// One message's life (see the module docs).
///
/// Wire shape (camelCase, this key order): `{"id","senderName","targetName","delivery",
/// "queued":{"seq","time"},"received":{…}|null,"delivered":{…}|null,"consumed":{…}|null}`.
/// `queued` and `delivered` are seqs of the Lead log; `received` and `consumed` of the
/// target's log (the Lead's own when the Lead is the target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageReceipt {
    /// The Team message id.
    pub id: MessageId,
    /// The sender's Team name (`lead`, a roster name, or `user`).
    pub sender_name: String,
    /// The target's Team name (`lead`, a roster name, or the raw id if unknown).
    pub target_name: String,
    /// Quiet or wakeup.
    pub delivery: Delivery,
    /// The Lead log's `team/message/queued`.
    pub queued: LogPoint,
    /// The target log's `agent/inbox/spliced` that inserted it, when read.
    pub received: Option<LogPoint>,
    /// The Lead log's `team/message/delivered`, when appended.
    pub delivered: Option<LogPoint>,
    /// The target's claim, when it claimed it.
    pub consumed: Option<Consumed>,
}

/// What one target's log says of this Team's messages.
#[derive(Debug, Clone, Default)]
struct TargetMail {
    /// The turn open at the current point of the log.
    turn: Option<u64>,
    received: HashMap<MessageId, LogPoint>,
    consumed: HashMap<MessageId, Consumed>,
}

impl TargetMail {
    fn apply(&mut self, team: &TeamId, event: &Event) {
        match event.kind.as_str() {
            event_types::TURN_START => {
                self.turn = event.data.get("turn").and_then(Value::as_u64);
            }
            event_types::TURN_END => self.turn = None,
            event_types::AGENT_INBOX_SPLICED => {
                let inserted = event.data.get("inserted").and_then(Value::as_array);
                for message in inserted.into_iter().flatten() {
                    if let Some(id) = team_message_id(team, message) {
                        self.received
                            .entry(id)
                            .or_insert_with(|| LogPoint::of(event));
                    }
                }
            }
            event_types::USER_MESSAGE => {
                if let Some(id) = team_message_id(team, &event.data) {
                    self.consumed.entry(id).or_insert(Consumed {
                        seq: event.seq,
                        time: event.time,
                        turn: self.turn,
                    });
                }
            }
            _ => {}
        }
    }
}

/// The Team message id of a `UserMessage` payload delivered by `team`'s mailbox (source kind
/// `team-message` with this Team's `teamId`; the message id is the Team message id, REFERENCE
/// c.10.2), else `None`.
fn team_message_id(team: &TeamId, message: &Value) -> Option<MessageId> {
    let source = message.get("source")?;
    if source.get("kind").and_then(Value::as_str) != Some(TEAM_MESSAGE_SOURCE_KIND)
        || source.get("teamId").and_then(Value::as_str) != Some(team.as_str())
    {
        return None;
    }
    let id = source
        .get("messageId")
        .and_then(Value::as_str)
        .or_else(|| message.get("id").and_then(Value::as_str))?;
    MessageId::new(id).ok()
}

/// The receipts fold of one Team (see the module docs).
#[derive(Debug, Clone)]
pub struct Receipts {
    team: TeamId,
    queued: HashMap<MessageId, LogPoint>,
    delivered: HashMap<MessageId, LogPoint>,
    targets: HashMap<SessionId, TargetMail>,
}

impl Receipts {
    /// The empty fold of the Team `team`.
    pub fn new(team: TeamId) -> Self {
        Self {
            team,
            queued: HashMap::default(),
            delivered: HashMap::default(),
            targets: HashMap::default(),
        }
    }

    /// The event types [`Receipts::apply_lead`] and [`Receipts::apply_target`] read; every
    /// other event may be left out.
    pub fn reads(kind: &str) -> bool {
        matches!(
            kind,
            event_types::TEAM_MESSAGE_QUEUED
                | event_types::TEAM_MESSAGE_DELIVERED
                | event_types::AGENT_INBOX_SPLICED
                | event_types::USER_MESSAGE
                | event_types::TURN_START
                | event_types::TURN_END
        )
    }

    /// Folds one event of the Lead log: its `team/message/queued` and `…/delivered` records
    /// of this Team (the first of each per message; the Team fold refuses a second one), and
    /// — the Lead being a target — its own inbox and claims (as [`Receipts::apply_target`]).
    /// Give the Lead log's whole suffix after any seeded prefix.
    pub fn apply_lead(&mut self, event: &Event) {
        let record_of_team =
            || event.data.get("teamId").and_then(Value::as_str) == Some(self.team.as_str());
        match event.kind.as_str() {
            event_types::TEAM_MESSAGE_QUEUED if record_of_team() => {
                if let Some(id) = event.data["message"]["id"]
                    .as_str()
                    .and_then(|id| MessageId::new(id).ok())
                {
                    self.queued.entry(id).or_insert_with(|| LogPoint::of(event));
                }
            }
            event_types::TEAM_MESSAGE_DELIVERED if record_of_team() => {
                if let Some(id) = event.data["messageId"]
                    .as_str()
                    .and_then(|id| MessageId::new(id).ok())
                {
                    self.delivered
                        .entry(id)
                        .or_insert_with(|| LogPoint::of(event));
                }
            }
            _ => {
                let lead = self.team.lead_id().clone();
                self.apply_target(&lead, event);
            }
        }
    }

    /// Records message `id` as queued at `point` of the Lead log: what [`Receipts::apply_lead`]
    /// takes from a `team/message/queued` event, for a reader that had the Team fold apply
    /// the line without parsing it into an [`Event`] (so the record is this Team's; the first
    /// point per message counts, as there).
    pub fn record_queued(&mut self, id: MessageId, point: LogPoint) {
        self.queued.entry(id).or_insert(point);
    }

    /// Folds one event of `target`'s own log (its own suffix: not a fork's seeded prefix):
    /// inbox insertions of this Team's messages (received), the turns, and the `user/message`
    /// claims (consumed). Other events are ignored.
    pub fn apply_target(&mut self, target: &SessionId, event: &Event) {
        if !Self::reads(&event.kind) {
            return;
        }
        let team = &self.team;
        self.targets
            .entry(target.clone())
            .or_default()
            .apply(team, event);
    }

    /// One receipt per message `state` holds, in queue order. A target's points count only
    /// when they were read from that message's target's log (a message id found in another
    /// member's log is not this message's receipt).
    pub fn list(&self, state: &TeamState) -> Vec<MessageReceipt> {
        state
            .messages()
            .iter()
            .filter_map(|message| {
                let queued = *self.queued.get(&message.id)?;
                let target = self.targets.get(&message.target_id);
                Some(MessageReceipt {
                    id: message.id.clone(),
                    sender_name: message.sender_name.clone(),
                    target_name: state
                        .name_of(&message.target_id)
                        .map_or_else(|| message.target_id.to_string(), str::to_owned),
                    delivery: message.delivery,
                    queued,
                    received: target.and_then(|t| t.received.get(&message.id).copied()),
                    delivered: self.delivered.get(&message.id).copied(),
                    consumed: target.and_then(|t| t.consumed.get(&message.id).copied()),
                })
            })
            .collect()
    }
}
