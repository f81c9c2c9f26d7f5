//! Messages from the user to a Team (`troupe send`, `troupe chat`): a Troupe addition to
//! REFERENCE c.10 that goes through the Team mailbox itself, so it is as durable as Team mail
//! and delivered by the same dispatch and recovery.
//!
//! A message from the user is a `team/message/queued` record in the Lead log whose sender is
//! the user (the Lead's session id, `senderName: "user"`: [`troupe_team::USER_SENDER_NAME`]);
//! its target sees it framed [`troupe_team::USER_FRAME_HEADER`] (`Message from the user:`)
//! instead of Team mail's `Team message <id> from <name>:`. Its id is chosen by the sender, so
//! a send retried after a lost answer finds the message already queued and is the same message
//! ([`troupe_team::UserSendDecision::AlreadyQueued`]): it is delivered exactly once.
//!
//! Two ways in, under the one-writer rule of the Lead log:
//! - **A running Team** (its process holds the Lead log's lock or lease): through
//!   [`crate::team::TeamService::user_send`] in that process, which the binary's control socket calls.
//! - **A stopped Team**: [`append_user_message`] takes the Lead log's writer (the lock or the
//!   lease: a running Team refuses it with `JOURNAL_LOCKED`, and then the message must go to
//!   the running process), appends the record and flushes; the next `troupe resume` delivers
//!   it with its mailbox recovery (REFERENCE c.9: a message to the Lead, and wakeup mail to a
//!   teammate, at once; quiet mail to a teammate when that teammate next runs).

use serde_json::{Value, json};
use troupe_journal::{Journal, JournalError, LineCheck, LineUse, Selected};
use troupe_protocol::{ErrorCode, MessageId, Seq, SessionId, event_types};
use troupe_team::{
    LEAD_NAME, ReplayError, TeamError, TeamId, TeamLimits, TeamRecord, TeamState, UserSend,
    UserSendDecision, js_trim,
};

use crate::error::RuntimeError;
use troupe_session::Transcript;
use troupe_session::events::Profile;

/// What a message from the user became (the answer to `troupe send`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMailReceipt {
    /// The message's id (`team-message-<the sender's id>`).
    pub message_id: MessageId,
    /// The target's Team name (`lead` for the Lead).
    pub target_name: String,
    /// The seq of its `team/message/queued` record in the Lead log.
    pub seq: Seq,
    /// Whether the target's log durably holds it now (`delivered`); otherwise it is queued in
    /// the Lead log and delivered later (the target's next run, or the next resume).
    pub delivered: bool,
    /// Whether an earlier send with the same id had queued it already (this send added
    /// nothing).
    pub repeated: bool,
}

/// Why [`append_user_message`] appended nothing.
#[derive(Debug, thiserror::Error)]
pub enum UserMailError {
    /// The journal refused: `JOURNAL_LOCKED` when a process holds the Lead log (the Team is
    /// running: send through it), `SESSION_NOT_FOUND`, `JOURNAL_IO`, … (its own code).
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A Team rule refused the message (`TEAM_MEMBER_NOT_FOUND`, `TEAM_INVALID_ARGUMENT`,
    /// `TEAM_MAILBOX_FULL`, `TEAM_MESSAGE_TOO_LARGE`).
    #[error(transparent)]
    Team(#[from] TeamError),
    /// The session is not the Lead of a Team (a session without the Team profile, or a
    /// teammate's or child's session). Code `NOT_A_TEAM`.
    #[error("session {id} is not a Team's Lead: {reason}")]
    NotATeam {
        /// The session.
        id: SessionId,
        /// Why.
        reason: String,
    },
    /// The Lead log does not replay (`RUNTIME_INVALID_EVENT`, …) or its Team does not fold
    /// (`TEAM_LOG_INVALID`): nothing was written.
    #[error("{message}")]
    Log {
        /// The code.
        code: &'static str,
        /// What is wrong, naming the event.
        message: String,
    },
}

impl ErrorCode for UserMailError {
    fn code(&self) -> &'static str {
        match self {
            UserMailError::Journal(e) => e.code(),
            UserMailError::Team(e) => e.code(),
            UserMailError::NotATeam { .. } => "NOT_A_TEAM",
            UserMailError::Log { code, .. } => code,
        }
    }
}

/// The content of a message from the user whose text is `text` (one text block).
pub fn user_message_content(text: &str) -> Vec<Value> {
    vec![json!({"type": "text", "text": text})]
}

/// Whether a message's blocks hold no text but whitespace (JavaScript's `trim`, as every Team
/// text): such a message is refused (`TEAM_INVALID_ARGUMENT`).
pub(crate) fn user_message_text_is_empty(content: &[Value]) -> bool {
    content.iter().all(|block| {
        block["type"] == "text"
            && block["text"]
                .as_str()
                .is_some_and(|t| js_trim(t).is_empty())
    })
}

/// Appends a message from the user to the **stopped** Team of `lead` (see the module docs):
/// takes the Lead log's writer (its lock, or its lease on a shared store), folds the log, lets
/// [`TeamState::decide_user_send`] decide, appends the `team/message/queued` record, flushes
/// and releases the log. A message id already queued as this message is not appended again
/// (the receipt says `repeated`). `while_held` runs once the log is held, before anything is
/// read or appended (the binary removes a control socket a dead process left there: only the
/// holder of the log may). Blocking: call it outside async code.
///
/// What survives a crash at each point: before the writer is taken, nothing changed; after it
/// (the journal may have cut an unfinished final write of a crashed writer, as every open
/// does), until the flush returns, the record is either wholly in the log or not at all
/// (DESIGN decision 9), and the caller has reported nothing — a retry with the same id
/// decides from the log again, so the message is queued once; after the flush, the message
/// is durable and the next resume delivers it once (the target's log is checked before every
/// delivery). Nothing but that one record is ever written.
///
/// # Errors
/// [`UserMailError::Journal`] — `JOURNAL_LOCKED` when a process holds the Lead log (the Team
/// runs: use its control socket), `SESSION_NOT_FOUND`, `JOURNAL_IO`, …;
/// [`UserMailError::NotATeam`] (`NOT_A_TEAM`); [`UserMailError::Team`] for a Team rule;
/// [`UserMailError::Log`] for a log that does not replay or fold. Nothing is appended on any
/// error.
pub fn append_user_message(
    journal: &Journal,
    lead: &SessionId,
    message_id: MessageId,
    request: &UserSend,
    while_held: &mut dyn FnMut(),
) -> Result<UserMailReceipt, UserMailError> {
    if user_message_text_is_empty(&request.content) {
        return Err(TeamError::InvalidArgument {
            message: "message must not be empty".to_owned(),
        }
        .into());
    }
    let (writer, replay) = journal.open(lead)?;
    while_held();
    // Dropping the writer releases the log (a writer with nothing appended writes nothing).
    let transcript = Transcript::fold(replay.header.seed_len(), &replay.events).map_err(|e| {
        UserMailError::Log {
            code: ErrorCode::code(&e),
            message: e.to_string(),
        }
    })?;
    let config = transcript.config().ok_or_else(|| UserMailError::NotATeam {
        id: lead.clone(),
        reason: "it has no agent configuration".to_owned(),
    })?;
    if config.profile != Profile::Team || transcript.descriptor().is_some() {
        return Err(UserMailError::NotATeam {
            id: lead.clone(),
            reason: if transcript.descriptor().is_some() {
                "it is a child session (send to its Lead, with --to NAME)".to_owned()
            } else {
                "it was not run with --team".to_owned()
            },
        });
    }
    let limits = config
        .team_limits
        .as_ref()
        .and_then(|v| TeamLimits::from_json(v).ok())
        .unwrap_or_default();
    let team = TeamId::new(lead.clone());
    let state = TeamState::fold(team.clone(), &replay.events).map_err(fold_error)?;
    let (event, message) = match state.decide_user_send(request, message_id, &limits)? {
        UserSendDecision::AlreadyQueued { message, delivered } => {
            let seq = replay
                .events
                .iter()
                .find(|e| {
                    e.kind == event_types::TEAM_MESSAGE_QUEUED
                        && e.data["message"]["id"].as_str() == Some(message.id.as_str())
                })
                .map_or(Seq(0), |e| e.seq);
            return Ok(UserMailReceipt {
                target_name: target_name(&state, &message.target_id),
                message_id: message.id,
                seq,
                delivered,
                repeated: true,
            });
        }
        UserSendDecision::Append(event) => {
            let TeamRecord::MessageQueued(message) = &event.record else {
                return Err(UserMailError::Log {
                    code: "TEAM_LOG_INVALID",
                    message: "internal: the decision did not produce a queued message".to_owned(),
                });
            };
            let message = message.clone();
            (event, message)
        }
    };
    state.check_event(&event).map_err(|e| UserMailError::Log {
        code: "INVARIANT",
        message: e.to_string(),
    })?;
    let stored = writer.append(event.to_draft())?;
    writer.flush_blocking()?;
    drop(writer);
    Ok(UserMailReceipt {
        target_name: target_name(&state, &message.target_id),
        message_id: message.id,
        seq: stored.seq,
        delivered: false,
        repeated: false,
    })
}

fn fold_error(e: ReplayError) -> UserMailError {
    UserMailError::Log {
        code: "TEAM_LOG_INVALID",
        message: e.to_string(),
    }
}

fn target_name(state: &TeamState, id: &SessionId) -> String {
    if id == state.id().lead_id() {
        return LEAD_NAME.to_owned();
    }
    state
        .member(id)
        .map_or_else(|| id.to_string(), |m| m.name.to_string())
}

/// The seq of the `team/message/queued` record of `message` in the Lead log of `lead`, read
/// without a lock (the live process's own log may be read while it writes).
///
/// # Errors
/// The journal's read error.
pub(crate) fn queued_seq(
    journal: &Journal,
    lead: &SessionId,
    message: &MessageId,
) -> Result<Option<Seq>, RuntimeError> {
    let mut found = None;
    journal.read_selected_each(
        lead,
        LineCheck::Prefix,
        &|kind| kind == event_types::TEAM_MESSAGE_QUEUED,
        &mut |selected| match selected {
            Selected::Line(_) => LineUse::NeedEvent,
            Selected::Event(event) => {
                if found.is_none() && event.data["message"]["id"].as_str() == Some(message.as_str())
                {
                    found = Some(event.seq);
                }
                LineUse::Used
            }
        },
    )?;
    Ok(found)
}
