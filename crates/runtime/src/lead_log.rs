//! The one Lead-log fold entry point: a Lead's session log read once and folded into its Team
//! ([`LeadLog::read`]), for `troupe team show`, `troupe team verify` and the summary of a Team
//! run ([`TeamReport`]).
//!
//! The log is read without its lock (so it works while another process writes it; an
//! unfinished last line is ignored and reported in [`LeadLog::summary`]), one line at a time,
//! with the journal's selective scan: `team/…` lines are decoded in one pass by the Team
//! crate's [`StreamFold`], `agent/config` lines are parsed; what else is read and checked is
//! the [`LeadRead`]'s choice. Memory does not grow with the length of the log beyond the
//! Team's own state.
//!
//! [`LeadLog::violation`] then checks what `troupe team verify` checks beyond the fold: the
//! Lead's own log replays as a resume would replay it, and every active teammate's child
//! session is a valid teammate. Pure reads: nothing here writes.

use std::collections::{BTreeMap, HashMap};

use troupe_journal::{Journal, JournalError, LineCheck, LineUse, ScanSummary, Selected};
use troupe_protocol::{ErrorCode, Event, MessageId, Seq, SessionId, event_types};
use troupe_team::{
    AtPoint, LogPoint, MemberPhase, MemberSnapshot, MemberStatus, MemberView, MessageReceipt,
    OwnerActivity, Receipts, ReplayError, ShowOptions, StallAfter, StallCheck, StreamFold,
    TEAM_MESSAGE_SOURCE_KIND, TaskView, TeamId, TeamShow, TeamShowFull, TeamState,
};

use crate::line_pick::{DeliveredPick, envelope_time, is_valid_event, pick_event, runtime_pick};
use crate::radar::LeadRadar;
use crate::teammate::{parent_problem, teammate_problem};
use crate::teammate_scan::{TeammateScans, Wants, error_chain};
use troupe_session::events::{AgentConfigRecord, TurnEndReason};
use troupe_session::ledger::{Ledger, Prices, SessionUsage};
use troupe_session::{InvalidEvent, ReplayCheck, SessionRole, is_event_line, is_team_session};
use troupe_session::{Transcript, TranscriptStats};

/// How much of the Lead log [`LeadLog::read`] reads besides its Team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadRead {
    /// Only the `team/…` and `agent/config` lines are decoded (Team lines in one pass, see
    /// [`StreamFold`]); of every other line just the envelope prefix is checked
    /// ([`LineCheck::Prefix`]): `troupe team show --json`, the run's summary.
    Team,
    /// As [`LeadRead::Team`], and the lines of each message's life in the Lead log are read —
    /// `team/message/queued` and `…/delivered`, and (the Lead being a target too) its
    /// `agent/inbox/spliced`, `user/message`, `turn/start` and `turn/end` — for when each
    /// message was queued ([`LeadLog::queued_at`]) and the receipts ([`LeadLog::receipts`]):
    /// `troupe team show` (both forms). A `…/queued` line still goes to the Team fold
    /// unparsed (its point: the line's seq and envelope time); a `user/message` that cannot
    /// hold a Team message's claim (no `team-message` and no `\u` escape in its text) is only
    /// checked as a valid event; a `…/delivered` goes to the Team fold unparsed too, its ids
    /// picked; the others (and the Lead's usage and own tool calls and results, for the ledger
    /// and the write radar) are read with only the payload members their readers take
    /// (`crate::line_pick`), an inbox splice or `agent/config` parsed.
    TeamAndMail,
    /// Every line is checked in full, and every non-Team event is also checked as a resume
    /// replays it (what [`Transcript::apply`] refuses, found by [`ReplayCheck`]), in the same
    /// single pass: `troupe team verify` ([`LeadLog::violation`]). Most lines are read once, by
    /// the replay check's one-pass reader ([`ReplayCheck::apply_line`]); a line it does not
    /// read plainly is parsed into an [`Event`] and checked from that.
    Verify,
}

/// A Lead log folded into its Team state (see the module docs).
#[derive(Debug)]
pub struct LeadLog {
    id: SessionId,
    state: TeamState,
    config: Option<AgentConfigRecord>,
    /// The model of the Lead's latest own `agent/config` (a resume's `--model` records a new
    /// one): the session's model, which teammates without a model of their own run.
    latest_model: Option<String>,
    /// The seq of the last `team/member` record of each member (where a member's checks point).
    member_seqs: HashMap<SessionId, Seq>,
    /// When each message was queued (the event's time, epoch ms), with
    /// [`LeadRead::TeamAndMail`].
    queued_at: HashMap<MessageId, u64>,
    /// The Lead-log half of the receipts fold, with [`LeadRead::TeamAndMail`].
    receipts: Option<Receipts>,
    /// Where the read stopped, for a read at a past point ([`LeadLog::read_at`]).
    cut: Option<Cut>,
    summary: ScanSummary,
    /// The one-pass replay's result ([`LeadRead::Verify`] only).
    replayed: Option<Option<Violation>>,
    /// The Lead's own usage, folded in the same pass ([`LeadRead::TeamAndMail`] of the whole
    /// log only): [`LeadLog::member_usage`] does not read the Lead's log a second time.
    lead_usage: Option<SessionUsage>,
    /// The Lead log's part of the write radar (its task records and the Lead's own file
    /// changes, up to the cut), folded in the same pass ([`LeadRead::TeamAndMail`] only):
    /// [`LeadLog::write_conflicts`] then reads only the teammates' logs.
    radar: Option<LeadRadar>,
}

/// A resolved point of a Lead log (`Cut::resolve`, in `time_travel.rs`): the prefix to fold
/// ([`LeadLog::read_at`]) and the time the other logs are cut at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// The last event of the prefix (a batch's last); `None` for the empty prefix.
    pub last_seq: Option<Seq>,
    /// The point's time (epoch ms); the teammates' logs are read up to it.
    pub time: u64,
    /// The log's last event (seq, time) when the point was resolved.
    pub log_last: Option<(Seq, u64)>,
}

impl Cut {
    /// The point as outputs show it.
    pub fn point(&self) -> AtPoint {
        AtPoint {
            seq: self.last_seq,
            time: self.time,
            last_seq: self.log_last.map(|(seq, _)| seq),
        }
    }
}

/// Why [`LeadLog::read`] could not fold a Lead log.
#[derive(Debug, thiserror::Error)]
pub enum LeadLogError {
    /// The journal could not read the log (an unknown session, an unreadable or unsupported
    /// file): the journal's code (`SESSION_NOT_FOUND`, `JOURNAL_IO`, `JOURNAL_UNSUPPORTED`, …).
    #[error(transparent)]
    Journal(JournalError),
    /// The log is damaged at the journal level (a corrupt committed line or header, REFERENCE
    /// a.9): a bad Team log like one the fold refuses, located at the first bad event.
    /// Code `JOURNAL_CORRUPT`.
    #[error("the Team log of session {id} is invalid at {at}: {error}")]
    Damaged {
        /// The Lead's session.
        id: SessionId,
        /// Where: `seq N` (line n ≥ 2 holds seq n − 2), or `its header`.
        at: String,
        /// The journal's error (file, line, byte offset, reason).
        error: JournalError,
    },
    /// The Team fold refused an event (a broken Team rule, REFERENCE c.4–c.5).
    /// Code `TEAM_LOG_INVALID`.
    #[error("the Team log of session {id} is invalid at {failure}")]
    Invalid {
        /// The Lead's session.
        id: SessionId,
        /// The first event refused.
        failure: Box<FoldFailure>,
    },
}

impl ErrorCode for LeadLogError {
    fn code(&self) -> &'static str {
        match self {
            LeadLogError::Journal(e) | LeadLogError::Damaged { error: e, .. } => e.code(),
            LeadLogError::Invalid { failure, .. } => failure.0.code(),
        }
    }
}

impl LeadLogError {
    /// Sorts a journal error of reading `id`: a corrupt line is [`LeadLogError::Damaged`].
    pub(crate) fn of(id: &SessionId, error: JournalError) -> Self {
        match &error {
            JournalError::Corrupt { line, .. } => {
                // Line 1 is the header; line n ≥ 2 holds seq n − 2.
                let at = if *line >= 2 {
                    format!("seq {}", line - 2)
                } else {
                    "its header".to_owned()
                };
                LeadLogError::Damaged {
                    id: id.clone(),
                    at,
                    error,
                }
            }
            _ => LeadLogError::Journal(error),
        }
    }
}

/// The first event the Team fold refused, shown as `seq N (type): reason` (control characters
/// as stored: a printer escapes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldFailure(pub ReplayError);

impl std::fmt::Display for FoldFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seq {} ({}): {}",
            self.0.seq, self.0.event_type, self.0.source
        )
    }
}

/// What `troupe team verify` found wrong beyond the Team fold ([`LeadLog::violation`]).
/// Shown as `seq N (type): reason`; control characters as stored (a printer escapes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// An event of the Lead's own log that a resume cannot replay.
    Replay {
        /// Its seq.
        seq: u64,
        /// Its type.
        kind: String,
        /// Why it does not replay.
        reason: String,
    },
    /// The Lead's log could not be read a second time (a log with a seeded prefix is replayed
    /// in a second read; the file changed under it).
    Reread {
        /// Where the first read ended.
        seq: Seq,
        /// The journal's error.
        error: String,
    },
    /// An active teammate whose child session is not a valid teammate.
    Teammate {
        /// The seq of the member's last `team/member` record, when known.
        seq: Option<Seq>,
        /// The member's name.
        name: String,
        /// The member's session.
        id: SessionId,
        /// What is wrong with its child session.
        problem: String,
    },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::Replay { seq, kind, reason } => write!(
                f,
                "seq {seq} ({kind}): the event cannot be replayed by a resume: {reason}"
            ),
            Violation::Reread { seq, error } => {
                write!(f, "seq {seq}: the Lead's log cannot be read again: {error}")
            }
            Violation::Teammate {
                seq,
                name,
                id,
                problem,
            } => {
                let seq = seq.map_or_else(|| "?".to_owned(), |s| s.to_string());
                write!(
                    f,
                    "seq {seq} ({}): teammate {name} ({id}): {problem}",
                    event_types::TEAM_MEMBER
                )
            }
        }
    }
}

/// The Lead's own log checked as a resume replays it, alongside the Team fold: the first event
/// [`Transcript::apply`] would refuse, found by [`ReplayCheck`] (the same decoding and range
/// checks, without building the transcript), most lines by its one-pass reader
/// ([`ReplayCheck::apply_line`]).
struct LeadReplay {
    check: ReplayCheck,
    problem: Option<Violation>,
}

impl LeadReplay {
    /// A replay of a log without a seeded prefix (`seedLength` 0: every root session, so every
    /// Lead; a log with a seed is replayed again by [`replay_lead`]).
    fn new() -> Self {
        Self {
            check: ReplayCheck::new(0),
            problem: None,
        }
    }

    /// Replays one parsed event (after the first problem, nothing more: the first one is
    /// reported).
    fn apply(&mut self, event: &Event) {
        if self.problem.is_some() {
            return;
        }
        if let Err(e) = self.check.apply(event) {
            self.problem = Some(replay_violation(e));
        }
    }

    /// The fast path for a line of the known type `kind`: `true` when the line is a valid
    /// event that replays (after the first problem: a valid event) and was taken; `false`
    /// when it must be parsed and given to [`LeadReplay::apply`].
    fn line(&mut self, kind: &str, text: &str) -> bool {
        if self.problem.is_some() {
            return is_event_line(kind, text);
        }
        self.check.apply_line(kind, text)
    }

    /// Whether a line of type `kind` needs only to be a valid event (nothing of it is
    /// replayed that could refuse it).
    fn needs_only_validity(&self, kind: &str) -> bool {
        self.problem.is_some() || !Transcript::can_refuse(kind)
    }
}

/// The violation of an event `apply` refused with `error`.
fn replay_violation(InvalidEvent { seq, kind, reason }: InvalidEvent) -> Violation {
    Violation::Replay { seq, kind, reason }
}

impl LeadLog {
    /// Reads and folds the Lead log of `id` once (see the module docs and [`LeadRead`]).
    ///
    /// # Errors
    /// [`LeadLogError::Journal`] when the journal cannot read the log (`SESSION_NOT_FOUND`,
    /// `JOURNAL_IO`, `JOURNAL_UNSUPPORTED`, …); [`LeadLogError::Damaged`] (`JOURNAL_CORRUPT`)
    /// for a corrupt committed line; [`LeadLogError::Invalid`] (`TEAM_LOG_INVALID`) when the
    /// fold refuses an event.
    pub fn read(journal: &Journal, id: &SessionId, read: LeadRead) -> Result<Self, LeadLogError> {
        Self::read_at(journal, id, read, None)
    }

    /// [`LeadLog::read`] of the log's prefix up to `cut` (a point [`Cut::resolve`] found): the
    /// events after [`Cut::last_seq`] are checked as the scan checks every line, and not
    /// folded. `None` reads it all. The teammates' logs read later ([`LeadLog::receipts`],
    /// [`LeadLog::member_models`]) are cut at the same time ([`Cut::time`]).
    ///
    /// # Errors
    /// As [`LeadLog::read`] (a damaged line after the cut is still an error: the log is read
    /// to its end).
    pub fn read_at(
        journal: &Journal,
        id: &SessionId,
        read: LeadRead,
        cut: Option<Cut>,
    ) -> Result<Self, LeadLogError> {
        let beyond = |seq: Seq| {
            cut.as_ref()
                .is_some_and(|c| c.last_seq.is_none_or(|l| seq > l))
        };
        let mut fold = StreamFold::new(TeamId::new(id.clone()));
        let mut configs: Vec<(Seq, serde_json::Value)> = Vec::new();
        let mut member_seqs = HashMap::new();
        let mut queued_at = HashMap::new();
        let want_times = read == LeadRead::TeamAndMail;
        // The ledger is of the whole logs: the Lead's usage is folded in this pass when the
        // read is not cut.
        let want_usage = want_times && cut.is_none();
        let mut receipts = want_times.then(|| Receipts::new(TeamId::new(id.clone())));
        let mut seed_len: Option<u64> = None;
        let mut replay = (read == LeadRead::Verify).then(LeadReplay::new);
        let (check, everything) = match read {
            LeadRead::Team | LeadRead::TeamAndMail => (LineCheck::Prefix, false),
            LeadRead::Verify => (LineCheck::Full, true),
        };
        let select = |kind: &str| {
            everything
                || StreamFold::reads(kind)
                || kind == event_types::AGENT_CONFIG
                || (want_times && Receipts::reads(kind))
                || (want_usage && SessionUsage::reads(kind))
                || (want_times && LeadRadar::reads(kind))
        };
        // The Lead's own suffix begins after its seeded prefix (its header says how long).
        if want_times {
            seed_len = Some(
                journal
                    .header(id)
                    .map_err(|e| LeadLogError::of(id, e))?
                    .seed_len(),
            );
        }
        let mut lead_usage = want_usage.then(|| SessionUsage::new(seed_len.unwrap_or(0)));
        let mut radar = want_times.then(|| LeadRadar::new(id.clone(), seed_len.unwrap_or(0)));
        let summary = journal
            .read_selected_each(id, check, &select, &mut |selected| {
                // Past the cut: checked as the scan checks a line, never folded.
                match &selected {
                    Selected::Line(line) if beyond(line.seq) => {
                        return if is_valid_event(line.text) {
                            LineUse::Used
                        } else {
                            LineUse::NeedEvent
                        };
                    }
                    Selected::Event(event) if beyond(event.seq) => return LineUse::Used,
                    _ => {}
                }
                let event = match selected {
                    // A member record names where the member's checks point: read it parsed.
                    Selected::Line(line)
                        if line.kind == event_types::AGENT_CONFIG
                            || line.kind == event_types::TEAM_MEMBER =>
                    {
                        return LineUse::NeedEvent;
                    }
                    // A message queued: the Team fold applies the line unparsed, and its
                    // receipt point is the line's seq and envelope time.
                    Selected::Line(line)
                        if want_times && line.kind == event_types::TEAM_MESSAGE_QUEUED =>
                    {
                        let Some(time) = envelope_time(line.text) else {
                            return LineUse::NeedEvent;
                        };
                        let before = fold.state().messages().len();
                        if !fold.line(line.kind, line.text) {
                            return LineUse::NeedEvent;
                        }
                        let messages = fold.state().messages();
                        if !fold.is_refused()
                            && messages.len() > before
                            && let Some(message) = messages.last()
                        {
                            queued_at.insert(message.id.clone(), time);
                            if let Some(receipts) = &mut receipts
                                && line.seq.0 >= seed_len.unwrap_or(0)
                            {
                                receipts.record_queued(
                                    message.id.clone(),
                                    LogPoint {
                                        seq: line.seq,
                                        time,
                                    },
                                );
                            }
                        }
                        return LineUse::Used;
                    }
                    // A claim of a Team message names its source kind `team-message`: a
                    // `user/message` whose text holds neither that nor any `\u` escape (which
                    // could spell it) is none, and is only checked as a valid event.
                    Selected::Line(line)
                        if want_times
                            && line.kind == event_types::USER_MESSAGE
                            && !line.text.contains(TEAM_MESSAGE_SOURCE_KIND)
                            && !line.text.contains("\\u") =>
                    {
                        return if is_valid_event(line.text) {
                            LineUse::Used
                        } else {
                            LineUse::NeedEvent
                        };
                    }
                    // A message delivered: the Team fold applies the line unparsed, and the
                    // receipts take its `teamId` and `messageId` (the line checked as an
                    // `Event` in the same pass that picks them).
                    Selected::Line(line)
                        if want_times
                            && line.kind == event_types::TEAM_MESSAGE_DELIVERED
                            && !fold.is_refused() =>
                    {
                        let Some(event) = pick_event::<DeliveredPick>(line.text) else {
                            return LineUse::NeedEvent;
                        };
                        if !fold.line(line.kind, line.text) {
                            return LineUse::NeedEvent;
                        }
                        if let Some(receipts) = &mut receipts
                            && event.seq.0 >= seed_len.unwrap_or(0)
                        {
                            receipts.apply_lead(&event);
                        }
                        return LineUse::Used;
                    }
                    // The other lines of a message's life, the usage's (the model's answers)
                    // and the Lead's own tool calls and results (its file changes, for the
                    // radar): checked as an `Event` and read with only the payload members
                    // their readers take ([`runtime_pick`]), then folded below as a parsed event
                    // is. Not for `team verify`: its replay reads every member.
                    Selected::Line(line)
                        if replay.is_none()
                            && let Some(event) = runtime_pick(line.kind, line.text) =>
                    {
                        event
                    }
                    // Any other line of those (an inbox splice, which the usage reads whole)
                    // is parsed.
                    Selected::Line(line)
                        if (want_times && Receipts::reads(line.kind))
                            || (want_usage && SessionUsage::reads(line.kind))
                            || (radar.is_some() && LeadRadar::reads(line.kind)) =>
                    {
                        return LineUse::NeedEvent;
                    }
                    // A task record, for the radar: the Team fold applies the line unparsed
                    // and names the task it committed (its time: the envelope's).
                    Selected::Line(line)
                        if line.kind == event_types::TEAM_TASK
                            && let Some(radar) = &mut radar =>
                    {
                        let Some(time) = envelope_time(line.text) else {
                            return LineUse::NeedEvent;
                        };
                        if !fold.line(line.kind, line.text) {
                            return LineUse::NeedEvent;
                        }
                        if !fold.is_refused()
                            && let Some(task) = fold.state().last_task()
                        {
                            radar.task(time, task);
                        }
                        return LineUse::Used;
                    }
                    Selected::Line(line) if StreamFold::reads(line.kind) => {
                        return if fold.line(line.kind, line.text) {
                            LineUse::Used
                        } else {
                            LineUse::NeedEvent
                        };
                    }
                    // Any other line is selected only to be replayed: parsed when the replay
                    // can refuse it, else only checked as the scan would check it.
                    // `team verify`: the replay's one-pass reader takes most lines; one it does
                    // not read plainly is checked as a valid event when that is all it needs,
                    // else parsed and replayed.
                    Selected::Line(line) => {
                        let taken = match &mut replay {
                            Some(replay) => {
                                replay.line(line.kind, line.text)
                                    || (replay.needs_only_validity(line.kind)
                                        && is_valid_event(line.text))
                            }
                            None => false,
                        };
                        return if taken {
                            LineUse::Used
                        } else {
                            LineUse::NeedEvent
                        };
                    }
                    Selected::Event(event) => event,
                };
                if let Some(replay) = &mut replay
                    && !StreamFold::reads(&event.kind)
                {
                    replay.apply(&event);
                }
                if let Some(usage) = &mut lead_usage
                    && SessionUsage::reads(&event.kind)
                {
                    usage.apply(&event);
                }
                if let Some(radar) = &mut radar
                    && LeadRadar::reads(&event.kind)
                {
                    radar.event(&event);
                }
                if fold.is_refused() {
                    return LineUse::Used;
                }
                if event.kind == event_types::AGENT_CONFIG {
                    configs.push((event.seq, event.data));
                    return LineUse::Used;
                }
                if want_times
                    && event.kind == event_types::TEAM_MESSAGE_QUEUED
                    && let Some(message) = event.data["message"]["id"].as_str()
                    && let Ok(message) = MessageId::new(message)
                {
                    queued_at.insert(message, event.time);
                }
                if let Some(receipts) = &mut receipts
                    && event.seq.0 >= seed_len.unwrap_or(0)
                {
                    receipts.apply_lead(&event);
                }
                if !StreamFold::reads(&event.kind) {
                    return LineUse::Used;
                }
                let applied = fold.event(&event);
                if applied
                    && event.kind == event_types::TEAM_TASK
                    && let Some(radar) = &mut radar
                    && let Some(task) = fold.state().last_task()
                {
                    radar.task(event.time, task);
                }
                if applied
                    && event.kind == event_types::TEAM_MEMBER
                    && event.data["teamId"].as_str() == Some(id.as_str())
                    && let Some(member) = event.data["member"]["id"].as_str()
                    && let Ok(member) = SessionId::new(member)
                {
                    member_seqs.insert(member, event.seq);
                }
                LineUse::Used
            })
            .map_err(|e| LeadLogError::of(id, e))?;
        let state = fold.finish().map_err(|e| LeadLogError::Invalid {
            id: id.clone(),
            failure: Box::new(FoldFailure(e)),
        })?;
        // The Lead's own configuration: the first one after any seeded prefix.
        let own: Vec<_> = configs
            .into_iter()
            .filter(|(seq, _)| seq.0 >= summary.header.seed_len())
            .collect();
        let latest_model = own.last().and_then(|(_, data)| {
            serde_json::from_value::<AgentConfigRecord>(data.clone())
                .ok()
                .map(|c| c.model.model)
        });
        let config = own
            .into_iter()
            .next()
            .and_then(|(_, data)| serde_json::from_value::<AgentConfigRecord>(data).ok());
        Ok(Self {
            id: id.clone(),
            state,
            config,
            latest_model,
            member_seqs,
            queued_at,
            receipts,
            cut,
            summary,
            replayed: replay.map(|r| r.problem),
            lead_usage,
            radar,
        })
    }

    /// Where this read stopped, when it read a prefix ([`LeadLog::read_at`]).
    pub fn cut(&self) -> Option<&Cut> {
        self.cut.as_ref()
    }

    /// Each message's life ([`MessageReceipt`], in queue order): the Lead-log points from this
    /// read ([`LeadRead::TeamAndMail`]; without it, an empty list), and the target-side points
    /// (received, consumed) from each target's own log, read now (a selective scan of its
    /// own suffix, no lock; for a read at a past point, its longest prefix of whole batches up
    /// to [`Cut::time`], as the Lead's own TIME cut). A target whose
    /// log cannot be read shows neither point.
    pub fn receipts(&self, journal: &Journal) -> Vec<MessageReceipt> {
        let wants = Wants {
            receipts: true,
            ..Wants::default()
        };
        self.receipts_in(&self.read_teammates_for(journal, wants))
    }

    /// [`LeadLog::receipts`] with the targets' logs as `logs` read them.
    fn receipts_in(&self, logs: &TeammateScans) -> Vec<MessageReceipt> {
        let Some(lead_side) = &self.receipts else {
            return Vec::new();
        };
        let mut receipts = lead_side.clone();
        for target in self.receipt_targets() {
            let scan = logs.get(target);
            // A target whose header cannot be read shows neither point.
            let Some(seed) = scan.seed else {
                continue;
            };
            for event in &scan.receipts.events {
                if event.seq.0 >= seed {
                    receipts.apply_target(target, event);
                }
            }
        }
        receipts.list(&self.state)
    }

    /// The targets of the Team's messages other than the Lead (whose logs the receipts read).
    fn receipt_targets(&self) -> std::collections::BTreeSet<&SessionId> {
        self.state
            .messages()
            .iter()
            .map(|m| &m.target_id)
            .filter(|t| *t != &self.id)
            .collect()
    }

    /// The sessions whose logs the consumers `wants` read (each with what it is read for):
    /// the receipts' targets, the active teammates (models, changes), every roster member but
    /// a Lead whose usage this read folded (usage), the stalls' candidate owners
    /// (`last_event`).
    fn teammate_wants(&self, wants: Wants) -> Vec<(SessionId, Wants)> {
        let mut wanted = Vec::new();
        if wants.receipts && self.receipts.is_some() {
            let receipts = Wants {
                receipts: true,
                ..Wants::default()
            };
            wanted.extend(
                self.receipt_targets()
                    .into_iter()
                    .map(|t| (t.clone(), receipts)),
            );
        }
        if wants.models || wants.changes {
            let active = Wants {
                models: wants.models,
                changes: wants.changes,
                ..Wants::default()
            };
            wanted.extend(
                self.state
                    .members()
                    .iter()
                    .filter(|m| m.phase == MemberPhase::Active)
                    .map(|m| (m.id.clone(), active)),
            );
        }
        if wants.usage {
            let usage = Wants {
                usage: true,
                ..Wants::default()
            };
            wanted.extend(
                self.show(false)
                    .members
                    .into_iter()
                    .filter(|row| !(row.member.id == self.id && self.lead_usage.is_some()))
                    .map(|row| (row.member.id, usage)),
            );
        }
        if wants.last_event {
            let last = Wants {
                last_event: true,
                ..Wants::default()
            };
            wanted.extend(
                self.state
                    .stall_candidates()
                    .into_iter()
                    .map(|id| (id, last)),
            );
        }
        wanted
    }

    /// Reads the other logs for the consumers `wants` (up to `until`, epoch ms).
    /// (Up to [`Cut::time`] for a read at a past point.)
    fn read_teammates_for(&self, journal: &Journal, wants: Wants) -> TeammateScans {
        let until = self.cut.as_ref().map(|c| c.time);
        TeammateScans::read(journal, self.teammate_wants(wants), until)
    }

    /// Reads every teammate's log (and any other target of a message) once for all that
    /// `troupe team show` takes from it: the receipts, each teammate's own model and file
    /// changes (the write radar) and — with `now` (a read of the whole log, not a past
    /// point) — each member's usage (the ledger) and each stalled owner's last event (the
    /// stall check). For a read at a past point ([`LeadLog::read_at`]) the logs are read up to
    /// [`Cut::time`]. Then [`LeadLog::stall_check_in`], [`LeadLog::show_full_in`] and
    /// [`LeadLog::ledger_in`] take their parts from it, with the same results as
    /// [`LeadLog::stall_check`], [`LeadLog::show_full`] and [`LeadLog::ledger`] (which read
    /// the logs they need themselves). No lock; a log that cannot be read is each consumer's
    /// as before (see those methods).
    pub fn read_teammates(&self, journal: &Journal, now: bool) -> TeammateScans {
        let wants = Wants {
            receipts: true,
            models: true,
            changes: true,
            usage: now,
            last_event: now,
        };
        self.read_teammates_for(journal, wants)
    }

    /// The logs [`LeadLog::read_teammates`] reads, read the way each consumer read them
    /// before the one scan: one read per consumer and log, every line of the consumer's types
    /// parsed into an [`Event`]. The same results through [`LeadLog::show_full_in`],
    /// [`LeadLog::stall_check_in`] and [`LeadLog::ledger_in`] (the reference the one scan is
    /// tested against; each log is read up to five times).
    pub fn read_teammates_alone(&self, journal: &Journal, now: bool) -> TeammateScans {
        let wants = Wants {
            receipts: true,
            models: true,
            changes: true,
            usage: now,
            last_event: now,
        };
        let until = self.cut.as_ref().map(|c| c.time);
        TeammateScans::read_alone(journal, self.teammate_wants(wants), until)
    }

    /// `troupe team show --json`'s object (and the panel's view at a past event): DESIGN §6's
    /// view ([`LeadLog::show_with_models`], with each teammate's own model read from its log;
    /// with `stall`, stalled tasks carry `stalled`, [`LeadLog::stall_check`]) plus every
    /// message's receipt, the write radar's conflicts ([`LeadLog::write_conflicts`]) and, for
    /// a read at a past point, where it stopped.
    pub fn show_full(
        &self,
        journal: &Journal,
        include_deleted: bool,
        stall: Option<StallCheck>,
    ) -> TeamShowFull {
        let wants = Wants {
            receipts: true,
            models: true,
            changes: true,
            ..Wants::default()
        };
        let logs = self.read_teammates_for(journal, wants);
        self.show_full_in(journal, &logs, include_deleted, stall)
    }

    /// [`LeadLog::show_full`] with the other logs as `logs` read them
    /// ([`LeadLog::read_teammates`]).
    pub fn show_full_in(
        &self,
        journal: &Journal,
        logs: &TeammateScans,
        include_deleted: bool,
        stall: Option<StallCheck>,
    ) -> TeamShowFull {
        let mut show = self.show_with_models(include_deleted, self.member_models_in(logs), stall);
        show.write_conflicts = self.write_conflicts_in(journal, logs);
        TeamShowFull {
            show,
            messages: self.receipts_in(logs),
            at: self.cut.as_ref().map(|c| c.point()),
        }
    }

    /// The Lead's session.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The folded Team state.
    pub fn state(&self) -> &TeamState {
        &self.state
    }

    /// The Lead's own recorded configuration (the first `agent/config` after any seeded
    /// prefix), when it has a readable one.
    pub fn config(&self) -> Option<&AgentConfigRecord> {
        self.config.as_ref()
    }

    /// What the scan read: the header, the number of events (`next_seq`), an unfinished final
    /// write (`torn_tail`) that was not read.
    pub fn summary(&self) -> &ScanSummary {
        &self.summary
    }

    /// The number of events read.
    pub fn events(&self) -> u64 {
        self.summary.next_seq.0
    }

    /// When message `id` was queued (epoch ms), when [`LeadRead::TeamAndMail`] read it.
    pub fn queued_at(&self, id: &MessageId) -> Option<u64> {
        self.queued_at.get(id).copied()
    }

    /// The session's role from its header and its own configuration ([`SessionRole::of`]): a
    /// child session ([`SessionRole::is_child`]) leads no Team of its own.
    pub fn role(&self) -> SessionRole {
        SessionRole::of(
            &self.summary.header,
            self.config.as_ref().map(|c| c.profile),
        )
    }

    /// Whether the session is a Team session (`troupe_session::is_team_session`).
    pub fn is_team(&self) -> bool {
        is_team_session(
            self.config.as_ref().map(|c| c.profile),
            self.state.has_records(),
        )
    }

    /// DESIGN §6's view of the Team: the roster (the Lead row first, with its recorded model),
    /// the tasks (deleted ones with `include_deleted`), the pending messages.
    pub fn show(&self, include_deleted: bool) -> TeamShow {
        self.show_with_models(include_deleted, BTreeMap::new(), None)
    }

    /// [`LeadLog::show`] with the model of each teammate that runs one of its own
    /// (`member_models`, from [`LeadLog::member_models`]); the others show the Lead's latest
    /// recorded model, which they run; with `stall`, stalled tasks carry `stalled`
    /// ([`LeadLog::stall_check`]).
    pub fn show_with_models(
        &self,
        include_deleted: bool,
        member_models: BTreeMap<SessionId, String>,
        stall: Option<StallCheck>,
    ) -> TeamShow {
        self.state.show(&ShowOptions {
            include_deleted,
            lead_model: self
                .latest_model
                .clone()
                .or_else(|| self.config.as_ref().map(|c| c.model.model.clone())),
            member_models,
            stall,
        })
    }

    /// The [`StallCheck`] of this Team at `now_ms` with threshold `after`, read offline: for
    /// each teammate owner of a task in progress, whether a process holds its session
    /// (`resident(id)`: the lock table of the JSONL files, a NATS lease; `None`, unknown, is
    /// taken as not resident) and the time of the last event of its log (a streamed read of
    /// it, no lock; unknown when it cannot be read).
    pub fn stall_check(
        &self,
        journal: &Journal,
        now_ms: u64,
        after: StallAfter,
        resident: &dyn Fn(&SessionId) -> Option<bool>,
    ) -> StallCheck {
        let wants = Wants {
            last_event: true,
            ..Wants::default()
        };
        let logs = TeammateScans::read(journal, self.teammate_wants(wants), None);
        self.stall_check_in(&logs, now_ms, after, resident)
    }

    /// [`LeadLog::stall_check`] with the owners' logs as `logs` read them
    /// ([`LeadLog::read_teammates`] with `now`).
    pub fn stall_check_in(
        &self,
        logs: &TeammateScans,
        now_ms: u64,
        after: StallAfter,
        resident: &dyn Fn(&SessionId) -> Option<bool>,
    ) -> StallCheck {
        let owners = self
            .state
            .stall_candidates()
            .into_iter()
            .map(|id| {
                let activity = OwnerActivity {
                    resident: resident(&id).unwrap_or(false),
                    last_event_ms: logs.get(&id).last_event_ms,
                };
                (id, activity)
            })
            .collect();
        StallCheck {
            now_ms,
            after,
            owners,
        }
    }

    /// The model of every active teammate that runs a model of its own (`ownModel` in its
    /// latest `agent/config`), read from its session (a selective scan of its `agent/config`
    /// lines, no lock). A teammate whose log cannot be read, or that runs the session's model,
    /// is left out. For a read at a past point, only the configurations recorded by then
    /// ([`Cut::time`]) count.
    pub fn member_models(&self, journal: &Journal) -> BTreeMap<SessionId, String> {
        let wants = Wants {
            models: true,
            ..Wants::default()
        };
        self.member_models_in(&self.read_teammates_for(journal, wants))
    }

    /// [`LeadLog::member_models`] with the teammates' logs as `logs` read them.
    fn member_models_in(&self, logs: &TeammateScans) -> BTreeMap<SessionId, String> {
        let mut models = BTreeMap::new();
        for member in self.state.members() {
            if member.phase != MemberPhase::Active {
                continue;
            }
            let scan = logs.get(&member.id);
            if !scan.models.is_ok() {
                continue;
            }
            let latest = scan.models.events.iter().rev().find_map(|event| {
                serde_json::from_value::<AgentConfigRecord>(event.data.clone()).ok()
            });
            // A fork's seed holds the Lead's configurations; its own come after them (a child
            // is created with one), so the last one read is its own.
            if let Some(config) = latest
                && config.own_model
            {
                models.insert(member.id.clone(), config.model.model);
            }
        }
        models
    }

    /// The usage each member's session log recorded ([`SessionUsage`]: its own answers'
    /// `usage` per model, and for the Lead whether it was given the budget notice), the Lead
    /// first, then every teammate in first-provisioning order: (name, session, the fold, or the
    /// read's error as text when the log cannot be read — a `provisioning` or `failed` teammate
    /// may have none). A selective scan of each log (no lock; an unfinished last line is not
    /// read).
    pub fn member_usage(
        &self,
        journal: &Journal,
    ) -> Vec<(String, SessionId, Result<SessionUsage, String>)> {
        let wants = Wants {
            usage: true,
            ..Wants::default()
        };
        let logs = TeammateScans::read(journal, self.teammate_wants(wants), None);
        self.member_usage_in(&logs)
    }

    /// [`LeadLog::member_usage`] with the members' logs as `logs` read them.
    fn member_usage_in(
        &self,
        logs: &TeammateScans,
    ) -> Vec<(String, SessionId, Result<SessionUsage, String>)> {
        self.show(false)
            .members
            .into_iter()
            .map(|row| {
                let usage = match &self.lead_usage {
                    Some(usage) if row.member.id == self.id => Ok(usage.clone()),
                    _ => logs.get(&row.member.id).usage(),
                };
                (row.member.name, row.member.id, usage)
            })
            .collect()
    }

    /// The Team's ledger at `prices` ([`Ledger::fold`] of [`LeadLog::member_usage`]): a
    /// member whose log cannot be read counts nothing.
    pub fn ledger(&self, journal: &Journal, prices: &Prices) -> Ledger {
        let wants = Wants {
            usage: true,
            ..Wants::default()
        };
        let logs = TeammateScans::read(journal, self.teammate_wants(wants), None);
        self.ledger_in(&logs, prices)
    }

    /// [`LeadLog::ledger`] with the members' logs as `logs` read them
    /// ([`LeadLog::read_teammates`] with `now`).
    ///
    /// A teammate log damaged in its middle counts what it recorded before the damage (the
    /// usage read stops there; `troupe team show` names the damage).
    pub fn ledger_in(&self, logs: &TeammateScans, prices: &Prices) -> Ledger {
        let usage: Vec<(String, SessionId, SessionUsage)> = self
            .member_usage_in(logs)
            .into_iter()
            .map(|(name, id, usage)| {
                let usage = usage.unwrap_or_else(|_| logs.get(&id).usage_so_far());
                (name, id, usage)
            })
            .collect();
        Ledger::fold(
            usage
                .iter()
                .map(|(name, id, usage)| (name.clone(), id.clone(), usage.by_model())),
            prices,
        )
    }

    /// The write radar's conflicts of this Team ([`crate::write_conflicts`]'s result): after
    /// [`LeadRead::TeamAndMail`], the Lead log's part (its task windows and the Lead's own
    /// file changes) comes from this read's one pass and only every active teammate's log is
    /// read now from `journal`; after another read, the Lead's log is read again too. With a
    /// past point ([`LeadLog::read_at`]), the logs are read up to it (the Lead's up to
    /// [`Cut::last_seq`], the teammates' up to [`Cut::time`]).
    pub fn write_conflicts(&self, journal: &Journal) -> Vec<troupe_team::WriteConflict> {
        match &self.radar {
            Some(radar) => {
                radar
                    .clone()
                    .conflicts(journal, &self.state, self.cut.as_ref().map(|c| c.time))
            }
            None => crate::radar::write_conflicts(
                journal,
                &self.state,
                self.cut.as_ref().map(|c| (c.last_seq, c.time)),
            ),
        }
    }

    /// [`LeadLog::write_conflicts`] with the teammates' logs as `logs` read them.
    /// (The Lead's log is read again from `journal` after a read without the radar.)
    fn write_conflicts_in(
        &self,
        journal: &Journal,
        logs: &TeammateScans,
    ) -> Vec<troupe_team::WriteConflict> {
        match &self.radar {
            Some(radar) => radar.clone().conflicts_in(logs, &self.state),
            None => {
                let cut = self.cut.as_ref().map(|c| c.last_seq);
                LeadRadar::read(journal, self.state.id().lead_id(), cut)
                    .conflicts_in(logs, &self.state)
            }
        }
    }

    /// What `troupe team verify` checks beyond the fold, in order: the Lead's own log replays
    /// as `troupe resume` replays it (every runtime event's payload decoded into the model
    /// history, the inbox and the turns: from the one pass of [`LeadRead::Verify`], or — for a
    /// log with a seeded prefix, or another read — a second, streamed read), then every active
    /// teammate's child session ([`Violation::Teammate`]). Returns the first violation.
    pub fn violation(&self, journal: &Journal) -> Option<Violation> {
        let replayed = match &self.replayed {
            Some(problem) if self.summary.header.seed_len() == 0 => problem.clone(),
            _ => replay_lead(journal, self),
        };
        replayed.or_else(|| check_teammates(journal, self))
    }
}

/// Replays the Lead's own log as `troupe resume` does, in a second, streamed read (see
/// [`LeadLog::violation`]); a journal error here (the file changed under us) is reported at the
/// seq the first read ended.
fn replay_lead(journal: &Journal, lead: &LeadLog) -> Option<Violation> {
    let mut transcript = Transcript::new(lead.summary.header.seed_len());
    let mut problem: Option<Violation> = None;
    let read = journal.read_each(&lead.id, &mut |event| {
        if problem.is_some() || event.seq.0 >= lead.summary.next_seq.0 {
            return;
        }
        if let Err(e) = transcript.apply(&event) {
            problem = Some(replay_violation(e));
        }
    });
    match read {
        Ok(_) => problem,
        Err(e) => problem.or_else(|| {
            Some(Violation::Reread {
                seq: lead.summary.next_seq,
                error: e.to_string(),
            })
        }),
    }
}

/// Checks every `active` teammate's child session: it exists, names the Lead as its
/// `parentSession`, carries a continuable `subagent/descriptor` of the roster's provider, and
/// an `agent/config` with the Team profile (so a cold resume gets the Team tools back). Members
/// still `provisioning` are settled by recovery on the next resume, and `failed` ones need no
/// session: neither is checked. Returns the first violation, located at the member's last
/// `team/member` record.
fn check_teammates(journal: &Journal, lead: &LeadLog) -> Option<Violation> {
    for member in lead.state.members() {
        if member.phase != MemberPhase::Active {
            continue;
        }
        let problem = check_teammate(journal, &lead.id, member);
        if let Some(problem) = problem {
            return Some(Violation::Teammate {
                seq: lead.member_seqs.get(&member.id).copied(),
                name: member.name.to_string(),
                id: member.id.clone(),
                problem,
            });
        }
    }
    None
}

fn check_teammate(journal: &Journal, lead: &SessionId, member: &MemberSnapshot) -> Option<String> {
    let replay = match journal.read(&member.id) {
        Ok(replay) => replay,
        Err(JournalError::NotFound { .. }) => {
            return Some("its child session does not exist".to_owned());
        }
        Err(e) => return Some(format!("its child session cannot be read: {e}")),
    };
    // The parent is checked before the fold (a foreign log that does not replay is named by
    // its parent first).
    if let Some(problem) = parent_problem(&replay.header, lead) {
        return Some(problem.to_string());
    }
    let transcript = match Transcript::fold(replay.header.seed_len(), &replay.events) {
        Ok(t) => t,
        Err(e) => return Some(format!("its child session cannot be replayed: {e}")),
    };
    teammate_problem(&replay.header, &transcript, lead, &member.provider).map(|p| p.to_string())
}

/// A teammate whose last turn failed and was not recovered (no later turn of it completed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedTurn {
    /// The teammate's name.
    pub name: String,
    /// The turn's error code.
    pub code: String,
    /// The turn's error message.
    pub message: String,
}

/// A teammate whose session log could not be read or replayed after a Team run: its work
/// cannot go on from that log, so the run failed ([`crate::RunFailure::UnreadableLogs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableLog {
    /// The teammate's name.
    pub name: String,
    /// Its session id.
    pub session: SessionId,
    /// The error's stable code: `JOURNAL_CORRUPT` or `JOURNAL_UNSUPPORTED` (a damaged line,
    /// named by file, line and byte offset), `SESSION_NOT_FOUND` (the file is gone), or a
    /// replay code such as `TRANSCRIPT_INVALID`.
    pub code: &'static str,
    /// The error and its causes, `: `-joined (file, line and offset for a damaged line).
    pub error: String,
}

/// Why a [`TeamReport`] is empty: the Lead log could not be folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeamReportProblem {
    /// The Team fold refused an event.
    Invalid(FoldFailure),
    /// The journal could not read the log: the error and its causes, `: `-joined.
    Unreadable(String),
}

/// What a Team run did, folded from the logs after the runtime shut down: each member's work,
/// the board and the mail (what `troupe run --team` reports at the end).
#[derive(Debug, Clone)]
pub struct TeamReport {
    /// The Lead row first, then every teammate in first-provisioning order, each with the
    /// statistics of its session when readable and its count of answers from a model server
    /// (0 with a scripted model, which spends no tokens).
    pub members: Vec<(MemberView, Option<(TranscriptStats, usize)>)>,
    /// Teammates whose last turn failed, in creation order: a failure the Lead did not recover
    /// from (no later turn of that teammate completed). A teammate whose creation failed is not
    /// listed here (the Lead got that error from `spawn_teammate`).
    pub failed_turns: Vec<FailedTurn>,
    /// Teammates whose last turn the Team's budget stopped (`turn/end` aborted with reason
    /// `{"kind":"budget","code":"TEAM_BUDGET_EXCEEDED","message"}`), in creation order: the
    /// refusal's code and message as the process that ran the teammate wrote them (with
    /// `--placement workers`, a worker's: the Lead's process never saw that refusal).
    pub budget_stopped: Vec<FailedTurn>,
    /// Teammates whose last turn a park stopped (`turn/end` aborted with reason
    /// `{"kind":"shutdown"}`), by name in creation order: their inboxes are kept and a
    /// `troupe resume` continues them. A run that reached quiescence without a signal parked
    /// none itself, so such a teammate was parked by the process hosting it elsewhere (a
    /// `troupe worker` stopped with Ctrl-C or SIGTERM) — the run is reported as stopped
    /// ([`crate::RunStatus::Parked`]).
    pub parked: Vec<String>,
    /// Teammates in the roster's `active` phase whose session log cannot be read or replayed
    /// (damaged, unsupported or missing), in creation order.
    pub unreadable: Vec<UnreadableLog>,
    /// The non-deleted tasks.
    pub tasks: Vec<TaskView>,
    /// Messages sent.
    pub sent: usize,
    /// Messages delivered.
    pub delivered: usize,
    /// Messages queued and not yet delivered.
    pub pending: usize,
    /// Set when the Lead log could not be folded (the report is then empty).
    pub problem: Option<TeamReportProblem>,
    /// The Team's ledger ([`LeadLog::ledger`]), folded from every member's log (`None` when
    /// the Lead log could not be folded).
    pub ledger: Option<Ledger>,
}

impl TeamReport {
    /// Folds the Lead log of `lead` ([`LeadRead::Team`]) and every teammate's session; the Lead
    /// row gets `lead_stats` (its statistics and server answers). `server`: whether the model
    /// is a server (its answers should carry usage) rather than a script. A log that cannot be
    /// folded gives an empty report with its [`TeamReport::problem`]; a teammate's session that
    /// cannot be read or replayed has no statistics, and an `active` one is listed in
    /// [`TeamReport::unreadable`]. The ledger is priced at `prices`.
    pub fn read(
        journal: &Journal,
        lead: &SessionId,
        lead_stats: (TranscriptStats, usize),
        server: bool,
        prices: &Prices,
    ) -> Self {
        let mut report = Self {
            members: Vec::new(),
            failed_turns: Vec::new(),
            budget_stopped: Vec::new(),
            parked: Vec::new(),
            unreadable: Vec::new(),
            tasks: Vec::new(),
            sent: 0,
            delivered: 0,
            pending: 0,
            problem: None,
            ledger: None,
        };
        let folded = match LeadLog::read(journal, lead, LeadRead::Team) {
            Ok(folded) => folded,
            Err(LeadLogError::Invalid { failure, .. }) => {
                report.problem = Some(TeamReportProblem::Invalid(*failure));
                return report;
            }
            Err(LeadLogError::Journal(e) | LeadLogError::Damaged { error: e, .. }) => {
                report.problem = Some(TeamReportProblem::Unreadable(error_chain(&e)));
                return report;
            }
        };
        let view = folded.show(false);
        for mut member in view.members.into_iter().map(|row| row.member) {
            let stats = if member.id == *lead {
                Some(lead_stats)
            } else {
                let folded = journal
                    .read(&member.id)
                    .map_err(|e| (e.code(), error_chain(&e)))
                    .and_then(|replay| {
                        Transcript::fold(replay.header.seed_len(), &replay.events)
                            .map_err(|e| (e.code(), error_chain(&e)))
                    });
                // Only an `active` teammate has a log to go on from (a `provisioning` or
                // `failed` one may have none).
                let folded = match folded {
                    Ok(t) => Some(t),
                    Err((code, error)) => {
                        if !matches!(
                            member.status,
                            MemberStatus::Failed | MemberStatus::Provisioning
                        ) {
                            report.unreadable.push(UnreadableLog {
                                name: member.name.to_string(),
                                session: member.id.clone(),
                                code,
                                error,
                            });
                        }
                        None
                    }
                };
                if let Some(Some(TurnEndReason::Failed { code, message })) =
                    folded.as_ref().map(Transcript::last_turn_end)
                {
                    report.failed_turns.push(FailedTurn {
                        name: member.name.to_string(),
                        code: code.clone(),
                        message: message.clone(),
                    });
                }
                if let Some(Some(TurnEndReason::Aborted { reason })) =
                    folded.as_ref().map(Transcript::last_turn_end)
                    && reason["kind"] == "budget"
                {
                    report.budget_stopped.push(FailedTurn {
                        name: member.name.to_string(),
                        code: reason["code"]
                            .as_str()
                            .unwrap_or(troupe_session::ledger::TEAM_BUDGET_EXCEEDED)
                            .to_owned(),
                        message: reason["message"]
                            .as_str()
                            .unwrap_or("the Team's budget is spent")
                            .to_owned(),
                    });
                }
                if let Some(Some(TurnEndReason::Aborted { reason })) =
                    folded.as_ref().map(Transcript::last_turn_end)
                    && reason["kind"] == "shutdown"
                {
                    report.parked.push(member.name.to_string());
                }
                if let Some(config) = folded.as_ref().and_then(Transcript::config)
                    && config.own_model
                {
                    member.model = Some(config.model.model.clone());
                }
                folded.map(|t| (t.stats(), if server { t.model_calls() } else { 0 }))
            };
            report.members.push((member, stats));
        }
        report.tasks = view.tasks;
        report.sent = folded.state.messages().len();
        report.pending = folded.state.pending_messages().count();
        report.delivered = report.sent - report.pending;
        report.ledger = Some(folded.ledger(journal, prices));
        report
    }

    /// The failed turn of the member named `name`, if it is listed in
    /// [`TeamReport::failed_turns`].
    pub fn failed_turn_of(&self, name: &str) -> Option<&FailedTurn> {
        self.failed_turns.iter().find(|f| f.name == name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A home with a Lead log `lead-1` (two active teammates, task windows, the Lead's own
    /// `write` and `bash` changes, another Team's task record) and both teammates' logs, one
    /// event per batch at the given times (epoch ms). Returns the journal and the Lead log's
    /// (seq, time) of every event.
    fn radar_home(dir: &std::path::Path) -> (Journal, Vec<(Seq, u64)>) {
        use serde_json::json;
        use troupe_protocol::{EventDraft, SessionHeader};
        let journal = Journal::open_home(dir);
        let sid = |s: &str| SessionId::new(s).unwrap();
        let member = |id: &str, name: &str, phase: &str| {
            json!({"version": 1, "teamId": "lead-1", "member": {"id": id, "name": name,
                "description": "works", "provider": "spawn", "context": "fresh", "phase": phase}})
        };
        let task = |team: &str, id: &str, revision: u64, status: &str, owner: Option<&str>| {
            let mut data = json!({"version": 1, "teamId": team, "task": {"id": id,
                "revision": revision, "subject": format!("subject of {id}"), "description": "do it",
                "status": status, "blockedBy": [], "writeScopes": []}});
            if let Some(owner) = owner {
                data["task"]["ownerId"] = json!(owner);
            }
            data
        };
        let call = |id: &str, name: &str, path: Option<&str>| {
            let mut data =
                json!({"turn": 1, "step": 1, "callId": id, "name": name, "arguments": {}});
            if let Some(path) = path {
                data["effect"] = json!({"path": path, "preImage": null,
                    "postImage": format!("sha256:{}", "0".repeat(64)), "result": {}});
            }
            data
        };
        let result = |id: &str, name: &str, changed: Option<&[&str]>| {
            let mut data = json!({"turn": 1, "step": 1, "callId": id, "name": name,
                "isError": false, "content": "{}"});
            if let Some(paths) = changed {
                data["changed"] = json!({"paths": paths, "complete": true});
            }
            data
        };
        let write = |header: SessionHeader, events: Vec<(u64, &str, serde_json::Value)>| {
            let writer = journal.create(header).unwrap();
            let mut points = Vec::new();
            for (time, kind, data) in events {
                let event = writer
                    .append_batch_at(vec![EventDraft::new(kind, data)], time)
                    .unwrap();
                points.push((event[0].seq, event[0].time));
            }
            writer.flush_blocking().unwrap();
            points
        };
        let lead = write(
            SessionHeader::new(sid("lead-1"), 1),
            vec![
                (
                    1_000,
                    "team/member",
                    member("mate-a", "alpha", "provisioning"),
                ),
                (1_010, "team/member", member("mate-a", "alpha", "active")),
                (
                    1_020,
                    "team/member",
                    member("mate-b", "beta", "provisioning"),
                ),
                (1_030, "team/member", member("mate-b", "beta", "active")),
                (
                    1_040,
                    "team/task",
                    task("lead-1", "task-1", 1, "pending", None),
                ),
                (
                    1_050,
                    "team/task",
                    task("lead-1", "task-1", 2, "in_progress", Some("mate-a")),
                ),
                (1_060, "tool/call", call("l1", "write", Some("shared.txt"))),
                (1_070, "tool/result", result("l1", "write", None)),
                (
                    1_080,
                    "team/task",
                    task("other-team", "task-1", 1, "in_progress", Some("mate-b")),
                ),
                (
                    1_090,
                    "team/task",
                    task("lead-1", "task-2", 1, "pending", None),
                ),
                (
                    1_100,
                    "team/task",
                    task("lead-1", "task-2", 2, "in_progress", Some("mate-b")),
                ),
                (1_105, "tool/call", call("l2", "bash", None)),
                (
                    1_115,
                    "tool/result",
                    result("l2", "bash", Some(&["other.txt"])),
                ),
                (
                    1_170,
                    "team/task",
                    task("lead-1", "task-1", 3, "completed", Some("mate-a")),
                ),
                (
                    1_200,
                    "team/task",
                    task("lead-1", "task-2", 3, "completed", Some("mate-b")),
                ),
            ],
        );
        let mate = |id: &str| {
            SessionHeader::new(sid(id), 1)
                .with_parent(sid("lead-1"))
                .with_origin("subagent")
        };
        // alpha writes shared.txt inside task-1's window (the Lead wrote it too) and
        // other.txt inside task-2's; beta writes other.txt inside task-2's.
        write(
            mate("mate-a"),
            vec![
                (1_062, "tool/call", call("a1", "write", Some("shared.txt"))),
                (1_075, "tool/result", result("a1", "write", None)),
                (1_120, "tool/call", call("a2", "edit", Some("other.txt"))),
                (1_130, "tool/result", result("a2", "edit", None)),
            ],
        );
        write(
            mate("mate-b"),
            vec![
                (1_140, "tool/call", call("b1", "write", Some("other.txt"))),
                (1_150, "tool/result", result("b1", "write", None)),
                (1_180, "tool/call", call("b2", "write", Some("shared.txt"))),
                (1_190, "tool/result", result("b2", "write", None)),
            ],
        );
        (journal, lead)
    }

    /// The write radar fed in `team show`'s one pass (`LeadRead::TeamAndMail`: the Lead log's
    /// task records through the Team fold's fast path, the Lead's own tool events) gives what
    /// `crate::write_conflicts`'s own read of the Lead log gives, for the whole log and cut at
    /// every event of it (and before the first), and the other reads still get it by the
    /// separate read.
    #[test]
    fn the_one_pass_radar_equals_write_conflicts_whole_and_at_every_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, points) = radar_home(dir.path());
        let id = SessionId::new("lead-1").unwrap();
        let lead = LeadLog::read(&journal, &id, LeadRead::TeamAndMail).unwrap();
        assert!(lead.radar.is_some(), "the one pass fed the radar");
        let whole = lead.write_conflicts(&journal);
        assert_eq!(whole, crate::write_conflicts(&journal, lead.state(), None));
        let found: Vec<(String, Vec<String>, Vec<String>)> = whole
            .iter()
            .map(|c| {
                (
                    c.path.clone(),
                    c.members.clone(),
                    c.tasks.iter().map(ToString::to_string).collect(),
                )
            })
            .collect();
        let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            found,
            [
                (
                    "other.txt".to_owned(),
                    names(&["lead", "alpha", "beta"]),
                    names(&["task-1", "task-2"])
                ),
                (
                    "shared.txt".to_owned(),
                    names(&["lead", "alpha"]),
                    names(&["task-1"])
                ),
            ]
        );
        for read in [LeadRead::Team, LeadRead::Verify] {
            let other = LeadLog::read(&journal, &id, read).unwrap();
            assert!(other.radar.is_none());
            assert_eq!(other.write_conflicts(&journal), whole, "{read:?}");
        }
        let last = points.last().copied();
        let cuts =
            std::iter::once((None, 999)).chain(points.iter().map(|&(seq, time)| (Some(seq), time)));
        let mut differing = std::collections::BTreeSet::new();
        for (last_seq, time) in cuts {
            let cut = Cut {
                last_seq,
                time,
                log_last: last,
            };
            let at = LeadLog::read_at(&journal, &id, LeadRead::TeamAndMail, Some(cut)).unwrap();
            let conflicts = at.write_conflicts(&journal);
            assert_eq!(
                conflicts,
                crate::write_conflicts(&journal, at.state(), Some((last_seq, time))),
                "cut at {last_seq:?}"
            );
            differing.insert(format!("{conflicts:?}"));
        }
        // The cuts see the conflicts grow: none at first, the whole set at the end.
        assert!(differing.len() >= 3, "{differing:#?}");
    }

    /// What `troupe team show` takes from the other logs, through the one scan
    /// (`LeadLog::read_teammates`) and through each consumer's own reads
    /// (`LeadLog::read_teammates_alone`): the view with its models, radar and receipts, the
    /// stall check, the ledger, as JSON.
    fn show_parts(journal: &Journal, lead: &LeadLog, logs: &TeammateScans) -> String {
        let now = lead.cut().is_none();
        let check = now.then(|| {
            lead.stall_check_in(logs, 10_000, StallAfter::from_ms(1).unwrap(), &|id| {
                Some(id.as_str().ends_with('b'))
            })
        });
        let view = lead.show_full_in(journal, logs, true, check.clone());
        let ledger = now.then(|| lead.ledger_in(logs, &Prices::builtin()));
        format!(
            "{}\n{check:?}\n{}",
            serde_json::to_string(&view).unwrap(),
            serde_json::to_string(&ledger).unwrap()
        )
    }

    /// The one scan of each teammate's log gives every consumer what its own read gives:
    /// for the whole logs and cut at every event of the Lead's, and with a teammate's log
    /// damaged (a bad line of a type one consumer reads, a bad line of a type none reads).
    #[test]
    fn the_one_scan_per_teammate_equals_the_consumers_own_reads() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, points) = radar_home(dir.path());
        let id = SessionId::new("lead-1").unwrap();
        let lead = LeadLog::read(&journal, &id, LeadRead::TeamAndMail).unwrap();
        let one = show_parts(&journal, &lead, &lead.read_teammates(&journal, true));
        let alone = show_parts(&journal, &lead, &lead.read_teammates_alone(&journal, true));
        assert_eq!(one, alone);
        assert!(one.contains("shared.txt"), "{one}");
        let last = points.last().copied();
        let cuts =
            std::iter::once((None, 999)).chain(points.iter().map(|&(seq, time)| (Some(seq), time)));
        for (last_seq, time) in cuts {
            let cut = Cut {
                last_seq,
                time,
                log_last: last,
            };
            let at = LeadLog::read_at(&journal, &id, LeadRead::TeamAndMail, Some(cut)).unwrap();
            assert_eq!(
                show_parts(&journal, &at, &at.read_teammates(&journal, false)),
                show_parts(&journal, &at, &at.read_teammates_alone(&journal, false)),
                "cut at {last_seq:?}"
            );
        }
        // Damage in a teammate's log: a `tool/call` line (the radar's) and, separately, a line
        // of a type no consumer reads but the stall check's whole read does.
        let path = dir.path().join("sessions").join("mate-a.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        let damaged = [
            text.replacen("\"callId\":\"a2\"", "\"callId\":\"a2\",\"callId\"", 1),
            text.replacen(
                "\"type\":\"tool/result\",\"data\":{",
                "\"type\":\"tool/result\",\"data\":{\"x\":1e999,",
                1,
            ),
        ];
        for bad in damaged {
            assert_ne!(bad, text);
            std::fs::write(&path, &bad).unwrap();
            let lead = LeadLog::read(&journal, &id, LeadRead::TeamAndMail).unwrap();
            assert_eq!(
                show_parts(&journal, &lead, &lead.read_teammates(&journal, true)),
                show_parts(&journal, &lead, &lead.read_teammates_alone(&journal, true)),
                "{bad}"
            );
        }
    }

    /// `envelope_time` reads the envelope's `time` in any member order the scan reads (and
    /// not a `time` inside the payload); a text without a number there gives `None`.
    #[test]
    fn envelope_time_reads_the_envelopes_time() {
        for line in [
            r#"{"seq":4,"time":1767225610507,"type":"team/message/queued","data":{"time":9}}"#,
            r#"{"type":"team/message/queued","seq":4,"time":1767225610507,"data":{"time":9}}"#,
            r#"{"seq":4, "time" : 1767225610507 ,"type":"team/message/queued"}"#,
        ] {
            assert_eq!(envelope_time(line), Some(1_767_225_610_507), "{line}");
        }
        for line in [
            r#"{"seq":4,"time":"1","type":"t"}"#,
            r#"{"seq":4,"time":-1,"type":"t"}"#,
            r#"{"seq":4,"type":"t"}"#,
        ] {
            assert_eq!(envelope_time(line), None, "{line}");
        }
    }

    /// `is_valid_event` agrees with `serde_json::from_str::<Event>`: on hand-picked edge
    /// cases, and on every line made by replacing, inserting or deleting one byte of real
    /// lines (with each of a set of JSON-significant bytes).
    #[test]
    fn is_valid_event_accepts_exactly_what_event_accepts() {
        let same = |line: &str| {
            let event = serde_json::from_str::<troupe_protocol::Event>(line).is_ok();
            assert_eq!(is_valid_event(line), event, "{line:?}");
        };
        let deep = format!(
            r#"{{"seq":1,"time":2,"type":"x","data":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for line in [
            r#"{"seq":1,"time":2,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":1,"time":2,"type":"turn/start"}"#,
            r#"{"seq":1,"time":2,"type":"turn/start","data":null,"ignorable":true}"#,
            r#"{"seq":1,"time":2,"type":"t","data":"\ud800"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":"\ud83d\ude00"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":"\udc00\ud800"}"#,
            r#"{"seq":1,"time":2,"type":"t","extra":"\ud800"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":1e400}"#,
            r#"{"seq":1,"time":2,"type":"t","data":-1e-400}"#,
            r#"{"seq":1,"time":2,"type":"t","data":123456789012345678901234567890}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"a":1,"a":2}}"#,
            r#"{"seq":1,"seq":1,"time":2,"type":"t"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{},"data":{}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":"\x"}"#,
            "{\"seq\":1,\"time\":2,\"type\":\"t\",\"data\":\"a\tb\"}",
            r#"{"seq":-1,"time":2,"type":"t"}"#,
            r#"{"seq":1.0,"time":2,"type":"t"}"#,
            r#"{"seq":1,"time":2,"type":"t\u0000"}"#,
            r#"{"seq":1,"time":2,"type":7}"#,
            r#"{"seq":1,"time":2,"type":"t","ignorable":"yes"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":[1,2,]}"#,
            r#"{"seq":1,"time":2,"type":"t"} x"#,
            r#"[1,2,"t",{}]"#,
            &deep,
        ] {
            same(line);
        }
        let real = [
            r#"{"seq":9,"time":1796118561321,"type":"assistant/message","data":{"finishReason":"tool_calls","message":{"content":null,"tool_calls":[{"function":{"arguments":"{\"path\":\"wordstats/counting.py\"}","name":"read"},"id":"call_beta_1","type":"function"}]},"step":1,"turn":1}}"#,
            r#"{"seq":3,"time":1,"type":"request/header","data":{"n":-0.5e3,"ok":true,"none":null,"s":"caf\u00e9 \ud83d\ude00"},"ignorable":false}"#,
        ];
        let bytes_to_try = *br#""\{}[],:1e-un "#;
        for line in real {
            let bytes = line.as_bytes();
            for at in 0..bytes.len() {
                let mut candidates = Vec::new();
                for b in bytes_to_try {
                    let mut replaced = bytes.to_vec();
                    replaced[at] = b;
                    candidates.push(replaced);
                    let mut inserted = bytes.to_vec();
                    inserted.insert(at, b);
                    candidates.push(inserted);
                }
                let mut deleted = bytes.to_vec();
                deleted.remove(at);
                candidates.push(deleted);
                for candidate in candidates {
                    if let Ok(text) = std::str::from_utf8(&candidate) {
                        same(text);
                    }
                }
            }
        }
    }
}
