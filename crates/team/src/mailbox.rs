//! Mailbox bookkeeping (REFERENCE c.10, pure parts): the send decision with its limits,
//! framing, the target-side source (the de-duplication key) and the delivery record.

use std::io;

use serde_json::{Value, json};
use troupe_protocol::{MessageId, MessageSource, SessionId, UserMessage};

use crate::content::validate_content;
use crate::error::TeamError;
use crate::ids::TeamId;
use crate::limits::TeamLimits;
use crate::record::{Delivery, MessageSnapshot, TeamEvent, TeamRecord};
use crate::state::{Caller, TeamState};

/// The source kind of a delivered Team message (REFERENCE c.3 `TeamMessageSource`).
pub const TEAM_MESSAGE_SOURCE_KIND: &str = "team-message";

/// The `senderName` of a message from the user (`troupe send`, `troupe chat`). A message from
/// the user is queued with the Lead's session id as `senderId` (the user speaks to the Team
/// through the Lead's session, where their prompts are) and this name; the Lead itself always
/// sends as [`crate::LEAD_NAME`] and no teammate has the Lead's id, so the pair names the user
/// and nobody else (a teammate may be named `user`: its `senderId` is its own).
pub const USER_SENDER_NAME: &str = "user";

/// The header line every delivered message from the user opens with, so members can tell it
/// from Team mail (whose header is [`frame_header`]).
pub const USER_FRAME_HEADER: &str = "Message from the user:";

/// A message from the user to one member (`troupe send`): what [`TeamState::decide_user_send`]
/// decides on. Unlike [`SendMessage`] it has no caller: the user is no member.
#[derive(Debug, Clone, PartialEq)]
pub struct UserSend {
    /// `lead` or an active member's name (trimmed before resolution).
    pub target: String,
    /// The content blocks (validated like replayed content, REFERENCE c.3).
    pub content: Vec<Value>,
    /// Quiet (read at the target's next step, never wakes it) or wakeup (runs a turn,
    /// cold-resumes an inactive teammate).
    pub delivery: Delivery,
}

/// What [`TeamState::decide_user_send`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum UserSendDecision {
    /// Append this `team/message/queued` event.
    Append(TeamEvent),
    /// The message id is already queued as a message from the user to the same target: a
    /// retried send, which is the same message (nothing to append).
    AlreadyQueued {
        /// The message as queued (its `content` is empty once delivered).
        message: MessageSnapshot,
        /// Whether it has its `team/message/delivered` record.
        delivered: bool,
    },
}

impl MessageSnapshot {
    /// Whether this message of Team `team` is from the user (see [`USER_SENDER_NAME`]).
    pub fn is_from_user(&self, team: &TeamId) -> bool {
        self.sender_name == USER_SENDER_NAME && self.sender_id == *team.lead_id()
    }
}

/// `sendMessage` (REFERENCE c.10.1): one message from the caller to `target`.
#[derive(Debug, Clone, PartialEq)]
pub struct SendMessage {
    /// A member name or `lead` (trimmed before resolution).
    pub target: String,
    /// The sender's content blocks (validated like replayed content, REFERENCE c.3).
    pub content: Vec<Value>,
    /// Quiet (`send_message`) or wakeup (`followup_task`).
    pub delivery: Delivery,
}

impl TeamState {
    /// Decides `sendMessage`'s durable part (REFERENCE c.10.1 step 3). Checks, in order:
    /// membership; content blocks valid; `message_id` not already queued; target resolves to
    /// `lead` or an active member; target ≠ caller; target's pending count <
    /// `maxPendingMessagesPerMember`; framed size ≤ `maxMessageBytes`. Returns the
    /// `team/message/queued` event.
    ///
    /// `message_id` is minted by the caller (see [`crate::team_message_id`]).
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER`, `TEAM_INVALID_ARGUMENT`, `TEAM_MEMBER_NOT_FOUND`,
    /// `TEAM_SELF_MESSAGE`, `TEAM_MAILBOX_FULL`, `TEAM_MESSAGE_TOO_LARGE`.
    pub fn decide_send(
        &self,
        caller: &Caller,
        request: &SendMessage,
        message_id: MessageId,
        limits: &TeamLimits,
    ) -> Result<TeamEvent, TeamError> {
        self.require_member(caller)?;
        validate_content(&request.content).map_err(TeamError::invalid_argument)?;
        if self.message(&message_id).is_some() {
            return Err(TeamError::invalid_argument(format!(
                "team message id {message_id} is already queued"
            )));
        }
        let (target_id, target_name) = self.resolve_target(&request.target)?;
        if target_id == *caller.id() {
            return Err(TeamError::SelfMessage {
                name: caller.name().to_owned(),
            });
        }
        if self.pending_count_for(&target_id) as u64 >= limits.max_pending_messages_per_member {
            return Err(TeamError::MailboxFull {
                target: target_name,
                limit: limits.max_pending_messages_per_member,
            });
        }
        let snapshot = MessageSnapshot {
            id: message_id,
            sender_id: caller.id().clone(),
            sender_name: caller.name().to_owned(),
            target_id,
            delivery: request.delivery,
            content: request.content.clone(),
        };
        let bytes = framed_size(self.id(), &snapshot);
        if bytes > limits.max_message_bytes {
            return Err(TeamError::MessageTooLarge {
                bytes,
                limit: limits.max_message_bytes,
            });
        }
        Ok(TeamEvent {
            team_id: self.id().clone(),
            record: TeamRecord::MessageQueued(snapshot),
        })
    }

    /// Decides a message from the user (`troupe send`; a Troupe addition to REFERENCE c.10,
    /// delivered through the same mailbox): checks, in order, the content blocks, the message
    /// id (already queued as a message from the user to the same target: the same message,
    /// [`UserSendDecision::AlreadyQueued`]; queued as anything else: `TEAM_INVALID_ARGUMENT`),
    /// the target (`lead` or an active member), the target's pending count and the framed size,
    /// as [`TeamState::decide_send`] does. The snapshot's sender is the user
    /// ([`USER_SENDER_NAME`], the Lead's session id); a message to the Lead is no self-message.
    ///
    /// # Errors
    /// `TEAM_INVALID_ARGUMENT`, `TEAM_MEMBER_NOT_FOUND`, `TEAM_MAILBOX_FULL`,
    /// `TEAM_MESSAGE_TOO_LARGE`.
    pub fn decide_user_send(
        &self,
        request: &UserSend,
        message_id: MessageId,
        limits: &TeamLimits,
    ) -> Result<UserSendDecision, TeamError> {
        validate_content(&request.content).map_err(TeamError::invalid_argument)?;
        let (target_id, target_name) = self.resolve_target(&request.target)?;
        if let Some(queued) = self.message(&message_id) {
            if queued.is_from_user(self.id()) && queued.target_id == target_id {
                return Ok(UserSendDecision::AlreadyQueued {
                    message: queued.clone(),
                    delivered: self.is_delivered(&message_id),
                });
            }
            return Err(TeamError::invalid_argument(format!(
                "message id {message_id} is already used by another message"
            )));
        }
        if self.pending_count_for(&target_id) as u64 >= limits.max_pending_messages_per_member {
            return Err(TeamError::MailboxFull {
                target: target_name,
                limit: limits.max_pending_messages_per_member,
            });
        }
        let snapshot = MessageSnapshot {
            id: message_id,
            sender_id: self.id().lead_id().clone(),
            sender_name: USER_SENDER_NAME.to_owned(),
            target_id,
            delivery: request.delivery,
            content: request.content.clone(),
        };
        let bytes = framed_size(self.id(), &snapshot);
        if bytes > limits.max_message_bytes {
            return Err(TeamError::MessageTooLarge {
                bytes,
                limit: limits.max_message_bytes,
            });
        }
        Ok(UserSendDecision::Append(TeamEvent {
            team_id: self.id().clone(),
            record: TeamRecord::MessageQueued(snapshot),
        }))
    }

    /// Decides `markDelivered` (REFERENCE c.10.3): the `team/message/delivered` event, or
    /// `None` (a no-op) when the message is unknown, already delivered, or queued for another
    /// target.
    pub fn decide_delivered(
        &self,
        message_id: &MessageId,
        target_id: &SessionId,
    ) -> Option<TeamEvent> {
        let message = self.message(message_id)?;
        if message.target_id != *target_id || self.is_delivered(message_id) {
            return None;
        }
        Some(TeamEvent {
            team_id: self.id().clone(),
            record: TeamRecord::MessageDelivered {
                message_id: message_id.clone(),
                target_id: target_id.clone(),
            },
        })
    }
}

/// The header line every delivered Team message opens with (REFERENCE c.10.2):
/// `Team message <messageId> from <senderName>:`.
pub fn frame_header(message_id: &MessageId, sender_name: &str) -> String {
    format!("Team message {message_id} from {sender_name}:")
}

/// The header block of `message` of Team `team`: [`USER_FRAME_HEADER`] for a message from the
/// user, else [`frame_header`].
fn header_block(team: &TeamId, message: &MessageSnapshot) -> Value {
    let text = if message.is_from_user(team) {
        USER_FRAME_HEADER.to_owned()
    } else {
        frame_header(&message.id, &message.sender_name)
    };
    json!({"type": "text", "text": text})
}

/// The delivered content (REFERENCE c.10.2): a text block with [`frame_header`] — or
/// [`USER_FRAME_HEADER`] for a message from the user —, then the sender's blocks unchanged.
pub fn frame_content(team: &TeamId, message: &MessageSnapshot) -> Vec<Value> {
    let mut framed = Vec::with_capacity(message.content.len() + 1);
    framed.push(header_block(team, message));
    framed.extend(message.content.iter().cloned());
    framed
}

/// UTF-8 bytes of the compact JSON of [`frame_content`] (what `maxMessageBytes` bounds),
/// computed without building the framed array.
pub fn framed_size(team: &TeamId, message: &MessageSnapshot) -> u64 {
    let header = header_block(team, message);
    // Brackets, the header, then a comma and the block for every content block.
    let mut total = 2 + json_len(&header);
    for block in &message.content {
        total += 1 + json_len(block);
    }
    total
}

fn json_len(value: &Value) -> u64 {
    struct Counter(u64);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` into an infallible sink cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// The source stored on the delivered message (REFERENCE c.3 `TeamMessageSource`):
/// `{kind:"team-message", teamId, messageId, senderId, senderName}`. It is the target-side
/// de-duplication key. A message from the user carries `senderName: "user"` and the Lead's id
/// ([`USER_SENDER_NAME`]).
pub fn team_message_source(team_id: &TeamId, message: &MessageSnapshot) -> MessageSource {
    MessageSource::kind(TEAM_MESSAGE_SOURCE_KIND)
        .with("teamId", team_id.as_str())
        .with("messageId", message.id.as_str())
        .with("senderId", message.sender_id.as_str())
        .with("senderName", message.sender_name.as_str())
}

/// The user message a target receives: id = the Team message id (so "accepted" checks look
/// for that id), framed content, [`team_message_source`].
pub fn delivered_user_message(team_id: &TeamId, message: &MessageSnapshot) -> UserMessage {
    UserMessage {
        id: message.id.clone(),
        role: "user".to_owned(),
        content: frame_content(team_id, message),
        source: team_message_source(team_id, message),
    }
}

/// The smallest `wait_agent` timeout, in milliseconds (REFERENCE c.12).
pub const WAIT_TIMEOUT_MIN_MS: u64 = 10_000;
/// The largest `wait_agent` timeout, in milliseconds.
pub const WAIT_TIMEOUT_MAX_MS: u64 = 3_600_000;
/// The `wait_agent` timeout when none is given (REFERENCE d.4.1).
pub const WAIT_TIMEOUT_DEFAULT_MS: u64 = 30_000;

/// Validates a `waitForChange` timeout (REFERENCE c.12 step 2): a JSON number without a
/// fractional part (`10000` or `10000.0`, as JavaScript's safe integers are) in
/// `[10000, 3600000]` milliseconds.
///
/// # Errors
/// [`TeamError::InvalidTimeout`] (`TEAM_INVALID_TIMEOUT`) for anything else: another JSON
/// type (`null` included), a fraction, or a number out of range.
pub fn validate_wait_timeout(value: &Value) -> Result<u64, TeamError> {
    let range = WAIT_TIMEOUT_MIN_MS..=WAIT_TIMEOUT_MAX_MS;
    value
        .as_u64()
        .or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..=WAIT_TIMEOUT_MAX_MS as f64).contains(f))
                // Integral and in range, so the conversion is exact.
                .map(|f| f as u64)
        })
        .filter(|ms| range.contains(ms))
        .ok_or_else(|| TeamError::InvalidTimeout {
            value: value.to_string(),
        })
}
