//! What a crash left a stopped Team to do, read from its logs without touching them (DESIGN §7
//! "Failover", decision 10): the question `troupe worker --adopt` asks of a Team whose Lead
//! finished its own last turn and whose process then died while it waited for its teammates.
//!
//! The answer is the Team recovery's own decisions (`roster::continue_teammates` and the
//! mailbox recovery, REFERENCE c.9), limited to the work only a *crash* leaves behind, so that a
//! Team its user stopped on purpose is not taken over: a park (Ctrl-C, SIGTERM, `troupe chat`'s
//! Ctrl-D) settles the creations and deliveries in flight and ends every turn of its process
//! `aborted` (`{"kind":"shutdown"}` or `{"kind":"user"}`), so the continuations such turns are
//! owed wait for the user's `troupe resume`. Mail the user appended to a stopped Team (`troupe
//! send`) waits for that resume too.

use std::collections::HashSet;

use troupe_journal::{Journal, LineCheck};
use troupe_protocol::{MessageId, SessionId};
use troupe_session::Transcript;
use troupe_session::events::TurnEndReason;
use troupe_team::{Delivery, MemberPhase, TEAM_MESSAGE_SOURCE_KIND, TeamId, USER_SENDER_NAME};

use super::journal::{fold_team_log, stored_transcript};
use super::op::TeamOpError;
use crate::recovery::teammate_recovery;

/// Why the stopped Team of Lead `lead` still has work a crash
/// left and a `troupe resume` would carry on, or `None` when it has none. The first of, in
/// roster order:
///
/// - a member still `provisioning` (a creation the crash cut: the roster reconciliation
///   settles it);
/// - an active teammate owed work by the Team recovery ([`teammate_recovery`], the rule the
///   recovery applies) because of a crash: its stored log shows a turn open without its final
///   answer (its process died mid-turn, or it still runs in a live worker that needs this
///   Team's service), or its last turn closed `interrupted` (by a crash recovery whose process
///   died before continuing it), or parked items the recovery wakes it for (a first prompt
///   that never ran, a continuation or wakeup mail waiting);
/// - a wakeup message a member sent that is queued and not delivered (the Lead's process
///   died in between; the mailbox recovery delivers it and it wakes its target);
/// - Team mail from a member waiting to start a Lead turn (delivered, not yet claimed).
///
/// A teammate whose log cannot be read is skipped, as the recovery skips it. Reads only; holds
/// no lock or lease (the answer may be stale by the time the resume takes the lease; the
/// resume decides again from the logs).
///
/// # Errors
/// The Lead log's read and fold errors (journal errors, `TEAM_LOG_INVALID`,
/// `RUNTIME_INVALID_EVENT`).
pub fn crash_left_work(journal: &Journal, lead: &SessionId) -> Result<Option<String>, TeamOpError> {
    let state = fold_team_log(journal, lead, LineCheck::Prefix)?;
    let team = TeamId::new(lead.clone());
    let wakeups: HashSet<MessageId> = state
        .messages()
        .iter()
        .filter(|m| m.delivery == Delivery::Wakeup)
        .map(|m| m.id.clone())
        .collect();
    for member in state.members() {
        let name = member.name.as_str();
        match member.phase {
            MemberPhase::Provisioning => {
                return Ok(Some(format!("teammate {name} was still being created")));
            }
            MemberPhase::Active => {}
            _ => continue,
        }
        let Some(t) = stored_transcript(journal, &member.id) else {
            continue;
        };
        let plan = teammate_recovery(&t, &wakeups);
        if plan.wake {
            return Ok(Some(format!(
                "teammate {name} has work waiting in its inbox"
            )));
        }
        if plan.notes == 0 {
            continue;
        }
        if let Some(turn) = t.open_turn().filter(|_| !t.answered_open_turn()) {
            return Ok(Some(format!(
                "teammate {name}'s turn {turn} is open (its process died, or it still runs on \
                 a worker)"
            )));
        }
        if t.last_turn_end() == Some(&TurnEndReason::Interrupted) {
            return Ok(Some(format!(
                "teammate {name}'s last turn was cut by a crash and not continued yet"
            )));
        }
    }
    if let Some(message) = state
        .pending_messages()
        .find(|m| m.delivery == Delivery::Wakeup && !m.is_from_user(&team))
    {
        return Ok(Some(format!(
            "a wakeup message from {} is not delivered yet",
            message.sender_name
        )));
    }
    let lead_log = journal.read(lead)?;
    let lead_log = Transcript::fold(lead_log.header.seed_len(), &lead_log.events)
        .map_err(crate::RuntimeError::from)?;
    let lead_mail = lead_log.next_turn().iter().any(|m| {
        m.source.kind == TEAM_MESSAGE_SOURCE_KIND
            && m.source
                .extra
                .get("senderName")
                .and_then(serde_json::Value::as_str)
                != Some(USER_SENDER_NAME)
    });
    if lead_mail {
        return Ok(Some(
            "Team mail waits in the Lead's inbox to start its next turn".to_owned(),
        ));
    }
    Ok(None)
}
