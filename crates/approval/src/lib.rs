//! Approvals over the journal (issue 16, item 2): a member asks the user to run one `bash`
//! command outside the sandbox, the user answers wherever they are, and the answer is durable.
//! The records and the policy are the session model's (`troupe_session::approval`); this crate
//! holds what every decider shares — the decision logs, reading them, listing the pending
//! requests ([`pending`]) and deciding one ([`decide`]) — so the runtime (its waiting members,
//! the timeout), the `troupe` binary (`troupe approve`, the terminal, chat's `/approve`) and the
//! web panel (which links no runtime) decide the same way. Waiting for a decision is the
//! runtime's (`troupe_runtime::approval::Approvals`).
//!
//! # The records
//! - In the **member's log**: `approval/requested` ([`ApprovalRequested`]: `{id, callId,
//!   command, justification, member}`), appended in the same batch as the call's `tool/call`
//!   (DESIGN decision 9: a crash leaves both or neither), then `approval/decided`
//!   ([`ApprovalDecided`]: `{id, decision, by, decidedAt, rule?}`). The command runs outside the
//!   sandbox only once an `approve` or `always` decision is durable there; a denial is appended
//!   in the batch of the call's `tool/result`.
//! - A **decision log** per decided request: a session of its own, id
//!   [`decision_log_id`] (`approval-<member session>-<request id>`), header origin
//!   [`APPROVAL_ORIGIN`], whose one event is the `approval/decided` record (plus the member's
//!   `session`). Creating it *is* deciding: the journal creates a session only if no session
//!   has that id (the JSONL files publish a fully written file with `link(2)`; NATS fences the
//!   header on an empty subject), so exactly one decision per request ever wins — whether it
//!   comes from the terminal of `troupe run`, from `troupe approve` in another terminal, from
//!   the web panel, or from the timeout — even when two come at the same moment. Nobody needs
//!   the lock of the member's log (which the running process holds): the running process
//!   follows the decision log the way `troupe log --follow` follows a log (it reads it again
//!   every [`POLL_INTERVAL`]), and copies the decision into the member's log.
//!
//! # What survives a crash
//! | point | afterwards |
//! |---|---|
//! | before the `tool/call` + `approval/requested` batch is durable | neither: the call never started (`TOOL_NOT_STARTED`, asked again) |
//! | request durable, no decision log | the request is **pending**: `troupe approve` lists it, and the resume asks again (a fresh `--approval-timeout`) before it closes the cut turn |
//! | a decision log being created | none (a staging file, swept later) or the whole decision |
//! | decision log written, not yet in the member's log | decided: the resume copies it into the member's log, then runs the command (approved) or answers the call with the denial — without asking again |
//! | `approve`/`always` durable in the member's log, no `tool/result` | the command may have run: `TOOL_OUTCOME_UNKNOWN`, **never run again** |
//! | denial durable (its batch holds the `tool/result`) | closed: nothing to do |
//!
//! A request whose turn is cancelled while it waits (Ctrl-C, SIGTERM, the Lead's
//! `interrupt_agent`) is withdrawn: decided `deny` by `interrupt` (through its decision log,
//! so a concurrent `troupe approve` sees it decided) and answered `TOOL_CANCELED`. Only a
//! crash leaves a request pending.

use std::time::Duration;

use serde::Serialize;
use troupe_journal::{Journal, JournalError};
use troupe_protocol::{ErrorCode, Event, EventDraft, SessionHeader, SessionId, event_types as ty};
use troupe_session::approval::{
    ApprovalDecided, ApprovalEntry, ApprovalRequested, DecidedBy, Decision,
};

/// How often a waiting member reads the decision log of its request again (and how often
/// `troupe log --follow` reads a file again).
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The header `origin` of a decision log.
pub const APPROVAL_ORIGIN: &str = "approval";

/// A request nobody decided yet: listed by `troupe approve SESSION` and the panel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    /// The member's session.
    pub session: SessionId,
    /// The request.
    #[serde(flatten)]
    pub request: ApprovalRequested,
    /// When it was asked (epoch ms).
    pub requested_at: u64,
}

/// Errors of approvals. Each has a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// The session (and its direct children) holds no request with this id. Code
    /// `APPROVAL_NOT_FOUND`.
    #[error(
        "session {session} holds no approval request {request} (troupe approve {session} lists the pending ones)"
    )]
    NotFound {
        /// The session searched.
        session: SessionId,
        /// The id given.
        request: String,
    },
    /// The request was decided already. Code `APPROVAL_ALREADY_DECIDED`.
    #[error("approval request {request} of {member} was already decided: {} {} (nothing changed)", .decided.decision.as_str(), .decided.by.described())]
    AlreadyDecided {
        /// The request.
        request: String,
        /// The member who asked.
        member: String,
        /// The decision that stands.
        decided: Box<ApprovalDecided>,
    },
    /// A record of a log does not decode. Code `RUNTIME_INVALID_EVENT`.
    #[error("event {seq} ({kind}) of session {session} is invalid: {reason}")]
    InvalidEvent {
        /// The session.
        session: SessionId,
        /// The event's seq.
        seq: u64,
        /// Its type.
        kind: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing a log failed (the journal's code).
    #[error(transparent)]
    Journal(#[from] JournalError),
}

impl ErrorCode for ApprovalError {
    fn code(&self) -> &'static str {
        match self {
            ApprovalError::NotFound { .. } => "APPROVAL_NOT_FOUND",
            ApprovalError::AlreadyDecided { .. } => "APPROVAL_ALREADY_DECIDED",
            ApprovalError::InvalidEvent { .. } => "RUNTIME_INVALID_EVENT",
            ApprovalError::Journal(e) => e.code(),
        }
    }
}

/// The id of the decision log of request `request` of the member session `member`:
/// `approval-<member>-<request>`.
pub fn decision_log_id(member: &SessionId, request: &str) -> Result<SessionId, ApprovalError> {
    SessionId::new(format!("approval-{member}-{request}")).map_err(|_| ApprovalError::NotFound {
        session: member.clone(),
        request: request.to_owned(),
    })
}

/// Whether a session header is a decision log's (hidden from session lists).
pub fn is_decision_log(header: &SessionHeader) -> bool {
    header.origin.as_deref() == Some(APPROVAL_ORIGIN)
}

/// A fresh request id: 8 hex digits.
pub fn new_request_id() -> String {
    SessionId::random().as_str().chars().take(8).collect()
}

fn decode<T: serde::de::DeserializeOwned>(
    session: &SessionId,
    event: &Event,
) -> Result<T, ApprovalError> {
    T::deserialize(&event.data).map_err(|e| ApprovalError::InvalidEvent {
        session: session.clone(),
        seq: event.seq.0,
        kind: event.kind.clone(),
        reason: e.to_string(),
    })
}

/// The decision of request `request` of `member`, if its decision log exists.
///
/// # Errors
/// The journal's read errors other than "not found"; `RUNTIME_INVALID_EVENT` for a decision log
/// whose event does not decode.
pub fn read_decision(
    journal: &Journal,
    member: &SessionId,
    request: &str,
) -> Result<Option<ApprovalDecided>, ApprovalError> {
    let id = decision_log_id(member, request)?;
    let replay = match journal.read(&id) {
        Ok(replay) => replay,
        Err(JournalError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(event) = replay
        .events
        .iter()
        .find(|e| e.kind == ty::APPROVAL_DECIDED)
    else {
        return Ok(None);
    };
    decode(&id, event).map(Some)
}

/// Records `decided` (a decision on request `decided.id` of `member`) by creating its decision
/// log, unless another decision was recorded first. Returns the decision that stands: `decided`
/// itself, or the earlier one.
///
/// **What survives a crash**: the decision log is created by its first flush, which the journal
/// publishes whole (a staging file linked into place once fsynced; on NATS a header fenced on an
/// empty subject): no decision, or this one, complete. Two deciders racing: one creation
/// succeeds, the other finds the id taken and reads the winner (waiting up to 2 s for a
/// winner whose creation is still under way).
///
/// # Errors
/// The journal's errors (the log could neither be created nor read).
pub async fn record_decision(
    journal: &Journal,
    member: &SessionId,
    decided: ApprovalDecided,
) -> Result<ApprovalDecided, ApprovalError> {
    let id = decision_log_id(member, &decided.id)?;
    let mut record = decided.clone();
    record.session = Some(member.clone());
    let header =
        SessionHeader::new(id.clone(), journal.clock().now_ms()).with_origin(APPROVAL_ORIGIN);
    let created = match journal.create(header) {
        Ok(writer) => {
            let data = serde_json::to_value(&record).unwrap_or(serde_json::Value::Null);
            match writer.append_batch(vec![EventDraft::new(ty::APPROVAL_DECIDED, data)]) {
                Ok(_) => {
                    let flushed = writer.flush().await;
                    let _ = writer.close().await;
                    flushed.map(|_| ())
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    let Err(error) = created else {
        return Ok(decided);
    };
    // The id was taken (or the outcome is unclear): what the decision log says stands. A
    // winner still creating it (on NATS it holds the new session's lease before its first
    // append lands) is given a moment.
    for attempt in 0..10 {
        if let Some(mut standing) = read_decision(journal, member, &decided.id)? {
            standing.session = None;
            return Ok(standing);
        }
        if attempt < 9 {
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
    Err(error.into())
}

/// The approval requests of one stored session's own events, with their decisions there.
fn entries_of(
    journal: &Journal,
    id: &SessionId,
) -> Result<(Vec<ApprovalEntry>, SessionHeader), ApprovalError> {
    let replay = journal.read(id)?;
    let seed = replay.header.seed_len();
    let mut entries: Vec<ApprovalEntry> = Vec::new();
    // Undecided requests whose call was answered all the same (the wait itself failed: its
    // error is the call's result) can never be decided: they are left out.
    let mut orphaned: Vec<usize> = Vec::new();
    for event in replay.events.iter().filter(|e| e.seq.0 >= seed) {
        match event.kind.as_str() {
            ty::TOOL_RESULT => {
                let call = event.data["callId"].as_str().unwrap_or_default();
                if let Some(at) = entries
                    .iter()
                    .rposition(|e| e.request.call_id == call && e.decided.is_none())
                {
                    orphaned.push(at);
                }
            }
            ty::APPROVAL_REQUESTED => entries.push(ApprovalEntry {
                request: decode(id, event)?,
                requested_at: event.time,
                decided: None,
            }),
            ty::APPROVAL_DECIDED => {
                let decided: ApprovalDecided = decode(id, event)?;
                if let Some(entry) = entries.iter_mut().find(|e| e.request.id == decided.id) {
                    entry.decided = Some(decided);
                }
            }
            _ => {}
        }
    }
    orphaned.sort_unstable();
    orphaned.dedup();
    for at in orphaned.into_iter().rev() {
        if entries[at].decided.is_none() {
            entries.remove(at);
        }
    }
    Ok((entries, replay.header))
}

/// `session` and the sessions whose parent it is (a Lead's teammates, a root's subagents).
fn family(journal: &Journal, session: &SessionId) -> Result<Vec<SessionId>, ApprovalError> {
    let mut ids = vec![session.clone()];
    let listing = journal.list(&mut |_| {})?;
    for listed in listing {
        if listed.header.parent_session.as_ref() == Some(session)
            && !is_decision_log(&listed.header)
        {
            ids.push(listed.header.id);
        }
    }
    Ok(ids)
}

/// The requests of `session` and of its direct children (a Lead's teammates) that nobody has
/// decided: no decision in the member's log and no decision log. Oldest first. Reads only.
///
/// # Errors
/// The journal's read errors (`SESSION_NOT_FOUND` for an unknown session); `RUNTIME_INVALID_EVENT`.
pub fn pending(
    journal: &Journal,
    session: &SessionId,
) -> Result<Vec<PendingApproval>, ApprovalError> {
    let mut out = Vec::new();
    for id in family(journal, session)? {
        let (entries, _) = match entries_of(journal, &id) {
            Ok(read) => read,
            // A child that cannot be read is not the caller's problem here.
            Err(_) if id != *session => continue,
            Err(e) => return Err(e),
        };
        for entry in entries.into_iter().filter(|e| e.decided.is_none()) {
            if read_decision(journal, &id, &entry.request.id)?.is_none() {
                out.push(PendingApproval {
                    session: id.clone(),
                    request: entry.request,
                    requested_at: entry.requested_at,
                });
            }
        }
    }
    out.sort_by_key(|p| p.requested_at);
    Ok(out)
}

/// Decides request `request` — of `session` or of one of its direct children — as `decision`
/// by `by` (`troupe approve`, the panel): checks that the request exists and is undecided, then
/// records the decision ([`record_decision`]). The running member (if any) sees it within
/// [`POLL_INTERVAL`]; a stopped one on its next resume. Returns the member's session and the
/// decision.
///
/// # Errors
/// `APPROVAL_NOT_FOUND` (no such request), `APPROVAL_ALREADY_DECIDED` (decided in the member's
/// log, or by a decision log — including one that won a race with this call): nothing is
/// changed; the journal's errors.
pub async fn decide(
    journal: &Journal,
    session: &SessionId,
    request: &str,
    decision: Decision,
    by: DecidedBy,
) -> Result<(SessionId, ApprovalDecided), ApprovalError> {
    let mut found = None;
    for id in family(journal, session)? {
        let Ok((entries, _)) = entries_of(journal, &id) else {
            continue;
        };
        if let Some(entry) = entries.into_iter().find(|e| e.request.id == request) {
            found = Some((id, entry));
            break;
        }
    }
    let Some((member, entry)) = found else {
        return Err(ApprovalError::NotFound {
            session: session.clone(),
            request: request.to_owned(),
        });
    };
    let already = |decided: ApprovalDecided| ApprovalError::AlreadyDecided {
        request: request.to_owned(),
        member: entry.request.member.clone(),
        decided: Box::new(decided),
    };
    if let Some(decided) = entry.decided.clone() {
        return Err(already(decided));
    }
    if let Some(decided) = read_decision(journal, &member, request)? {
        return Err(already(decided));
    }
    let mine = ApprovalDecided {
        id: request.to_owned(),
        decision,
        by,
        decided_at: journal.clock().now_ms(),
        session: None,
        rule: None,
    };
    let standing = record_decision(journal, &member, mine.clone()).await?;
    if standing != mine {
        return Err(already(standing));
    }
    Ok((member, standing))
}
