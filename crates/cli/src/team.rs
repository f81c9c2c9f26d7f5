//! `troupe team show` and `troupe team verify`: the Team of a Lead, folded offline from its log.
//!
//! Both read the Lead's session file without taking its lock (so they work while a `troupe
//! run` writes it; an unfinished last line is ignored) and fold it with `troupe-team`'s
//! [`TeamState`], one event at a time, so memory does not grow with the length of the log.
//!
//! - A Lead log the fold refuses is a failure of the work (exit 1) naming the first bad event:
//!   `seq N (type): reason`; so is a log damaged at the journal level (a corrupt committed
//!   line): `seq N: corrupt session file F: line L, byte offset O: reason`.
//! - An id that is not a session, a child session, or a session without a Team is bad input
//!   (exit 2, one line).
//!
//! The same fold gives the Team summary `troupe run --team` prints at the end
//! ([`TeamSummary`]).

use std::collections::HashMap;
use std::io::Write;

use anyhow::{Context, anyhow};
use serde_json::{Value, json};
use troupe_journal::{Journal, JournalError, LineCheck, LineUse, ScanSummary, Selected};
use troupe_protocol::{MessageId, Seq, SessionId, event_types};
use troupe_runtime::events::{AgentConfigRecord, Profile, TurnEndReason};
use troupe_runtime::{SessionRole, Transcript, TranscriptStats};
use troupe_team::{
    MemberPhase, MemberStatus, MemberView, ShowOptions, StreamFold, TaskView, TeamId, TeamShow,
    TeamState,
};

use crate::exit::Failure;
use crate::output::{Stdout, align_columns, eprint_line, escape_controls};

/// `troupe team …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum TeamCommand {
    /// Show a Team's roster, task board and pending messages, folded from the Lead's log.
    ///
    /// Works offline and while the Team runs (the log is read without locking it). Offline, a
    /// teammate's status is `inactive`, `provisioning` or `failed`. Only the Team lines are
    /// decoded; of the other lines just the envelope (seq, time, type) is checked, so damage
    /// inside them is found by `team verify` only. Exit 1 naming the first bad event (`seq N
    /// (type): reason`) when the log breaks a Team rule or is damaged; exit 2 for an unknown
    /// session, a teammate's session or a session without a Team.
    Show {
        /// The Lead's session id, or a unique prefix of it (see `troupe sessions`).
        session: String,
        /// Print one JSON object: {"teamId","members","tasks","pendingMessages"}.
        #[arg(long)]
        json: bool,
        /// Include deleted tasks.
        #[arg(long)]
        all: bool,
    },
    /// Replay the Lead's log with every Team invariant and check each teammate's session.
    ///
    /// Checks every line of the Lead's log (as `troupe log` does), replays it as `troupe resume`
    /// would, then checks each active teammate's session. Exit 0 with a one-line summary, or
    /// exit 1 naming the first violation (`seq N (type): reason`); exit 2 for an unknown
    /// session, a teammate's session or a session without a Team.
    Verify {
        /// The Lead's session id, or a unique prefix of it (see `troupe sessions`).
        session: String,
    },
}

/// Runs a `troupe team …` command.
///
/// `home` is ` --home DIR` when the command was given one (repeated in the commands it
/// prints), else empty.
pub(crate) fn run(journal: &Journal, command: TeamCommand, home: &str) -> Result<(), Failure> {
    match command {
        TeamCommand::Show { session, json, all } => show(journal, &session, json, all, home),
        TeamCommand::Verify { session } => verify(journal, &session, home),
    }
}

/// A Lead log folded into its Team state.
struct LeadLog {
    id: SessionId,
    state: TeamState,
    /// The Lead's recorded configuration, when it has one.
    config: Option<AgentConfigRecord>,
    /// The seq of the last `team/member` record of each member (where a member's checks point).
    member_seqs: HashMap<SessionId, Seq>,
    /// When each message was queued (the event's time, epoch ms), if [`fold_lead`] was asked.
    queued_at: HashMap<MessageId, u64>,
    summary: ScanSummary,
}

/// The first event the fold refused, as `seq N (type): reason`.
struct FoldFailure {
    seq: Seq,
    event_type: String,
    reason: String,
}

impl std::fmt::Display for FoldFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seq {} ({}): {}",
            self.seq,
            escape_controls(&self.event_type),
            escape_controls(&self.reason)
        )
    }
}

/// How much of the Lead log [`fold_lead`] reads besides its Team.
enum LeadRead<'r> {
    /// Only the `team/…` and `agent/config` lines are decoded (Team lines in one pass, see
    /// [`StreamFold`]); of every other line just the envelope prefix is checked
    /// ([`LineCheck::Prefix`]): `troupe team show`, the run's summary.
    TeamOnly,
    /// Every line is checked in full and every non-Team event is also replayed into `replay`
    /// as `troupe resume` would, in the same single pass: `troupe team verify`.
    Replay(&'r mut LeadReplay),
}

/// The Lead's own log replayed as a resume does ([`Transcript::apply`]), alongside the Team
/// fold: the first event that does not replay, as `seq N (type): reason`.
struct LeadReplay {
    transcript: Transcript,
    problem: Option<String>,
}

impl LeadReplay {
    /// A replay of a log without a seeded prefix (`seedLength` 0: every root session, so every
    /// Lead; a log with a seed is replayed again by [`replay_lead`]).
    fn new() -> Self {
        Self {
            transcript: Transcript::new(0),
            problem: None,
        }
    }

    /// Replays one event (after the first problem, nothing more: the first one is reported).
    fn apply(&mut self, event: &troupe_protocol::Event) {
        if self.problem.is_some() {
            return;
        }
        if let Err(e) = self.transcript.apply(event) {
            self.problem = Some(match e {
                troupe_runtime::RuntimeError::InvalidEvent { seq, kind, reason } => format!(
                    "seq {seq} ({}): the event cannot be replayed by a resume: {}",
                    escape_controls(&kind),
                    escape_controls(&reason)
                ),
                other => format!(
                    "seq {} ({}): the event cannot be replayed by a resume: {}",
                    event.seq,
                    escape_controls(&event.kind),
                    escape_controls(&other.to_string())
                ),
            });
        }
    }
}

/// Whether `line` is a valid [`troupe_protocol::Event`] — exactly what `serde_json` accepts as
/// one (same members, same duplicate and type rules, every value checked as a
/// `serde_json::Value` would be, the same recursion limit) — without building its payload.
/// The selective scan's contract for [`LineUse::Used`]: accept nothing `Event` refuses.
fn is_valid_event(line: &str) -> bool {
    /// Any JSON value, checked through `deserialize_any` as `serde_json::Value` is, and kept
    /// nowhere.
    #[derive(Default)]
    struct AnyValue;

    impl<'de> serde::Deserialize<'de> for AnyValue {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(AnyVisitor)
        }
    }

    struct AnyVisitor;

    impl<'de> serde::de::Visitor<'de> for AnyVisitor {
        type Value = AnyValue;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any valid JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<AnyValue, E> {
            Ok(AnyValue)
        }
        fn visit_i64<E>(self, _: i64) -> Result<AnyValue, E> {
            Ok(AnyValue)
        }
        fn visit_u64<E>(self, _: u64) -> Result<AnyValue, E> {
            Ok(AnyValue)
        }
        fn visit_f64<E>(self, _: f64) -> Result<AnyValue, E> {
            Ok(AnyValue)
        }
        fn visit_str<E>(self, _: &str) -> Result<AnyValue, E> {
            Ok(AnyValue)
        }
        fn visit_unit<E>(self) -> Result<AnyValue, E> {
            Ok(AnyValue)
        }
        fn visit_none<E>(self) -> Result<AnyValue, E> {
            Ok(AnyValue)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<AnyValue, D::Error> {
            serde::Deserialize::deserialize(d)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<AnyValue, A::Error> {
            while seq.next_element::<AnyValue>()?.is_some() {}
            Ok(AnyValue)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<AnyValue, A::Error> {
            while map.next_entry::<AnyValue, AnyValue>()?.is_some() {}
            Ok(AnyValue)
        }
    }

    /// `Event`'s members with `Event`'s types, the payload checked but not kept.
    #[derive(serde::Deserialize)]
    #[allow(dead_code)] // Only its acceptance matters.
    struct EventShape<'a> {
        seq: Seq,
        time: u64,
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
        #[serde(rename = "batchLast", default)]
        batch_last: Option<Seq>,
        #[serde(default)]
        data: AnyValue,
        #[serde(default)]
        ignorable: bool,
    }

    serde_json::from_str::<EventShape<'_>>(line).is_ok()
}

/// Reads and folds the Lead log of `id`: `Ok(Err(…))` when the fold refuses an event.
///
/// The log is read once, selectively: `team/…` lines are decoded in one pass by the fold,
/// `agent/config` lines are parsed; what else is read and checked is `read`'s choice (`show`
/// trusts the envelope prefix of the other lines, `verify` parses and replays every line).
///
/// # Errors
/// Journal errors (unknown session, unreadable or damaged file), as bad input.
fn fold_lead(
    journal: &Journal,
    id: &SessionId,
    mut read: LeadRead<'_>,
    times: QueueTimes,
) -> Result<Result<LeadLog, FoldFailure>, Failure> {
    let mut fold = StreamFold::new(TeamId::new(id.clone()));
    let mut configs: Vec<(Seq, Value)> = Vec::new();
    let mut member_seqs = HashMap::new();
    let mut queued_at = HashMap::new();
    let want_times = times == QueueTimes::Read;
    let (check, everything) = match read {
        LeadRead::TeamOnly => (LineCheck::Prefix, false),
        LeadRead::Replay(_) => (LineCheck::Full, true),
    };
    let select =
        |kind: &str| everything || StreamFold::reads(kind) || kind == event_types::AGENT_CONFIG;
    let summary = journal.read_selected_each(id, check, &select, &mut |selected| {
        let event = match selected {
            // A member record names where the member's checks point: read it parsed.
            Selected::Line(line)
                if line.kind == event_types::AGENT_CONFIG
                    || line.kind == event_types::TEAM_MEMBER
                    || (want_times && line.kind == event_types::TEAM_MESSAGE_QUEUED) =>
            {
                return LineUse::NeedEvent;
            }
            Selected::Line(line) if StreamFold::reads(line.kind) => {
                return if fold.line(line.kind, line.text) {
                    LineUse::Used
                } else {
                    LineUse::NeedEvent
                };
            }
            // Any other line is selected only to be replayed: parsed when the replay can
            // refuse it, else only checked as the scan would check it.
            Selected::Line(line) => {
                let needed = match &read {
                    LeadRead::Replay(replay) => {
                        replay.problem.is_none() && Transcript::can_refuse(line.kind)
                    }
                    LeadRead::TeamOnly => true,
                };
                return if !needed && is_valid_event(line.text) {
                    LineUse::Used
                } else {
                    LineUse::NeedEvent
                };
            }
            Selected::Event(event) => event,
        };
        if let LeadRead::Replay(replay) = &mut read
            && !StreamFold::reads(&event.kind)
        {
            replay.apply(&event);
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
        if !StreamFold::reads(&event.kind) {
            return LineUse::Used;
        }
        if fold.event(&event)
            && event.kind == event_types::TEAM_MEMBER
            && event.data["teamId"].as_str() == Some(id.as_str())
            && let Some(member) = event.data["member"]["id"].as_str()
            && let Ok(member) = SessionId::new(member)
        {
            member_seqs.insert(member, event.seq);
        }
        LineUse::Used
    })?;
    let state = match fold.finish() {
        Ok(state) => state,
        Err(e) => {
            return Ok(Err(FoldFailure {
                seq: e.seq,
                event_type: e.event_type.clone(),
                reason: e.source.to_string(),
            }));
        }
    };
    // The Lead's own configuration: the first one after any seeded prefix.
    let config = configs
        .into_iter()
        .find(|(seq, _)| seq.0 >= summary.header.seed_len())
        .and_then(|(_, data)| serde_json::from_value::<AgentConfigRecord>(data).ok());
    Ok(Ok(LeadLog {
        id: id.clone(),
        state,
        config,
        member_seqs,
        queued_at,
        summary,
    }))
}

/// Whether [`fold_lead`] reads when each message was queued (parsing those lines in full:
/// only the table of `troupe team show` needs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueueTimes {
    Read,
    Skip,
}

/// Folds the Lead log of the session named `raw` for `show`/`verify`: bad input for an unknown
/// id, a child session or a session without a Team; exit 1 for a log the fold refuses.
fn load_team(
    journal: &Journal,
    raw: &str,
    verb: &str,
    read: LeadRead<'_>,
    times: QueueTimes,
    home: &str,
) -> Result<LeadLog, Failure> {
    let id = crate::resolve_session(journal, raw)?;
    let lead = match fold_lead(journal, &id, read, times).map_err(|f| damaged_log(f, &id))? {
        Ok(lead) => lead,
        Err(failure) => {
            return Err(Failure::work(anyhow!(
                "the Team log of session {id} is invalid at {failure}"
            )));
        }
    };
    let header = &lead.summary.header;
    let role = SessionRole::of(header, lead.config.as_ref().map(|c| c.profile));
    if role.is_child()
        && let Some(parent) = &header.parent_session
    {
        let command = format!("troupe team {verb} {parent}{home}");
        return Err(crate::work::not_a_root(&id, role, parent, &command));
    }
    let is_team = lead
        .config
        .as_ref()
        .is_some_and(|c| c.profile == Profile::Team)
        || !lead.state.members().is_empty()
        || !lead.state.tasks().is_empty()
        || !lead.state.messages().is_empty();
    if !is_team {
        return Err(Failure::bad_input(anyhow!(
            "session {id} is not a Team session (start one with troupe run --team)"
        )));
    }
    note_torn_tail(&lead.summary);
    Ok(lead)
}

/// A Lead log damaged at the journal level (a corrupt committed line, REFERENCE a.9) is a bad
/// Team log like one the fold refuses: exit 1, naming the first bad event — its seq, and the
/// file, line and byte offset the journal reports. Every other failure passes unchanged (an
/// unknown session stays bad input, exit 2).
fn damaged_log(failure: Failure, id: &SessionId) -> Failure {
    let corrupt = failure.error.as_ref().and_then(|e| {
        e.chain()
            .find_map(|cause| match cause.downcast_ref::<JournalError>() {
                Some(JournalError::Corrupt { line, .. }) => Some(*line),
                _ => None,
            })
    });
    match (corrupt, failure.error) {
        (Some(line), Some(error)) => {
            // Line 1 is the header; line n ≥ 2 holds seq n − 2.
            let at = if line >= 2 {
                format!("seq {}", line - 2)
            } else {
                "its header".to_owned()
            };
            Failure::work(anyhow!(
                "the Team log of session {id} is invalid at {at}: {}",
                escape_controls(&error.to_string())
            ))
        }
        (_, error) => Failure {
            code: failure.code,
            error,
        },
    }
}

/// A torn final line is an unfinished write (a running or crashed writer): say so, once.
fn note_torn_tail(summary: &ScanSummary) {
    if let Some(torn) = &summary.torn_tail {
        eprint_line!(
            "troupe: note: {} bytes after line {} are an unfinished write ({}); they are not read",
            torn.bytes,
            torn.line.saturating_sub(1),
            escape_controls(&torn.reason)
        );
    }
}

fn show_of(lead: &LeadLog, include_deleted: bool) -> TeamShow {
    lead.state.show(&ShowOptions {
        include_deleted,
        lead_model: lead.config.as_ref().map(|c| c.model.model.clone()),
    })
}

/// `troupe team show SESSION [--json] [--all]`.
fn show(
    journal: &Journal,
    session: &str,
    json: bool,
    all: bool,
    home: &str,
) -> Result<(), Failure> {
    let times = if json {
        QueueTimes::Skip
    } else {
        QueueTimes::Read
    };
    let lead = load_team(journal, session, "show", LeadRead::TeamOnly, times, home)?;
    let view = show_of(&lead, all);
    let mut out = Stdout::lock();
    if json {
        let text = serde_json::to_string(&view).context("encoding the Team view")?;
        writeln!(out, "{text}").context("writing output")?;
    } else {
        for line in human_show(&view, &lead.state, &lead.queued_at, lead.summary.next_seq.0) {
            if out.is_closed() {
                break;
            }
            writeln!(out, "{line}").context("writing output")?;
        }
    }
    out.flush().context("writing output")?;
    Ok(())
}

/// At most this many characters of a description or subject in the table.
const TEXT_WIDTH: usize = 60;

fn cell(text: &str) -> String {
    let text = escape_controls(text);
    if text.chars().count() > TEXT_WIDTH {
        text.chars().take(TEXT_WIDTH - 1).collect::<String>() + "…"
    } else {
        text.into_owned()
    }
}

fn status_text(status: MemberStatus) -> &'static str {
    match status {
        MemberStatus::Running => "running",
        MemberStatus::Idle => "idle",
        MemberStatus::Inactive => "inactive",
        MemberStatus::Provisioning => "provisioning",
        MemberStatus::Failed => "failed",
    }
}

/// The readable form of `troupe team show`: roster (phase and status), tasks (with every
/// write-scope overlap on each task it concerns), pending messages (when each was queued).
fn human_show(
    view: &TeamShow,
    state: &TeamState,
    queued_at: &HashMap<MessageId, u64>,
    events: u64,
) -> Vec<String> {
    let mut lines = vec![format!(
        "team {} (Lead log: {})",
        escape_controls(view.team_id.as_str()),
        crate::work::count(events, "event")
    )];
    lines.push(String::new());
    lines.push(format!(
        "members ({}):",
        crate::work::count(view.members.len().saturating_sub(1) as u64, "teammate")
    ));
    let mut rows = vec![
        [
            "NAME",
            "ROLE",
            "PHASE",
            "STATUS",
            "CONTEXT",
            "ID",
            "DESCRIPTION",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    let mut notes: Vec<(usize, Vec<String>)> = Vec::new();
    for row in &view.members {
        let member = &row.member;
        rows.push(vec![
            cell(&member.name),
            match member.role {
                troupe_team::Role::Lead => "lead".to_owned(),
                troupe_team::Role::Teammate => "teammate".to_owned(),
            },
            row.phase.as_str().to_owned(),
            status_text(member.status).to_owned(),
            member
                .context
                .map_or_else(|| "-".to_owned(), |c| c.as_str().to_owned()),
            escape_controls(member.id.as_str()).into_owned(),
            member
                .description
                .as_deref()
                .map_or_else(|| "-".to_owned(), cell),
        ]);
        if !member.diagnostics.is_empty() {
            notes.push((
                rows.len() - 1,
                member
                    .diagnostics
                    .iter()
                    .map(|d| format!("    ! {}", escape_controls(d)))
                    .collect(),
            ));
        }
    }
    lines.extend(with_notes(align_columns(&rows), &notes));
    lines.push(String::new());
    if view.tasks.is_empty() {
        lines.push("tasks: none".to_owned());
    } else {
        lines.push(format!("tasks ({}):", view.tasks.len()));
        let mut rows = vec![
            [
                "ID",
                "STATUS",
                "OWNER",
                "READY",
                "BLOCKED BY",
                "REV",
                "SUBJECT",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        let mut notes: Vec<(usize, Vec<String>)> = Vec::new();
        for task in &view.tasks {
            let blockers: Vec<&str> = task.blocked_by.iter().map(|b| b.as_str()).collect();
            rows.push(vec![
                escape_controls(task.id.as_str()).into_owned(),
                task.status.as_str().to_owned(),
                task.owner_name
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), cell),
                if task.ready { "yes" } else { "no" }.to_owned(),
                if blockers.is_empty() {
                    "-".to_owned()
                } else {
                    cell(&blockers.join(","))
                },
                task.revision.to_string(),
                cell(&task.subject),
            ]);
            // Every overlap on each task it concerns (the task in progress and the pending one
            // that would collide with it), not the REFERENCE field's placement.
            let overlaps = state
                .task(task.id.as_str())
                .map(|t| state.scope_overlaps(t))
                .unwrap_or_default();
            if !overlaps.is_empty() {
                notes.push((
                    rows.len() - 1,
                    overlaps
                        .iter()
                        .map(|o| {
                            format!(
                                "    ⚠ write scopes overlap with {} ({})",
                                escape_controls(o.task_id.as_str()),
                                o.status.as_str()
                            )
                        })
                        .collect(),
                ));
            }
        }
        lines.extend(with_notes(align_columns(&rows), &notes));
    }
    lines.push(String::new());
    if view.pending_messages.is_empty() {
        lines.push("pending messages: none".to_owned());
    } else {
        lines.push(format!(
            "pending messages ({}):",
            view.pending_messages.len()
        ));
        // Who sent what to whom and when; the internal message id is in `--json`.
        let mut rows = vec![
            ["QUEUED", "FROM", "TO", "DELIVERY"]
                .map(str::to_owned)
                .to_vec(),
        ];
        for message in &view.pending_messages {
            rows.push(vec![
                queued_at
                    .get(&message.id)
                    .map_or_else(|| "-".to_owned(), |ms| crate::format_time(*ms)),
                cell(&message.sender_name),
                cell(&message.target_name),
                message.delivery.as_str().to_owned(),
            ]);
        }
        lines.extend(align_columns(&rows).into_iter().map(|l| format!("  {l}")));
    }
    lines
}

/// Indents table rows by two spaces and puts each row's notes under it.
fn with_notes(rows: Vec<String>, notes: &[(usize, Vec<String>)]) -> Vec<String> {
    let mut out = Vec::with_capacity(rows.len());
    for (index, row) in rows.into_iter().enumerate() {
        out.push(format!("  {row}"));
        if let Some((_, lines)) = notes.iter().find(|(at, _)| *at == index) {
            out.extend(lines.iter().cloned());
        }
    }
    out
}

/// `troupe team verify SESSION`.
fn verify(journal: &Journal, session: &str, home: &str) -> Result<(), Failure> {
    // One pass: every line checked in full, the Team folded and the Lead's own log replayed
    // as a resume would, together. A log with a seeded prefix (not a Lead's: those are forks,
    // refused above as child sessions) is replayed again with its seed length.
    let mut replay = LeadReplay::new();
    let lead = load_team(
        journal,
        session,
        "verify",
        LeadRead::Replay(&mut replay),
        QueueTimes::Skip,
        home,
    )?;
    let replayed = if lead.summary.header.seed_len() == 0 {
        replay.problem
    } else {
        replay_lead(journal, &lead)
    };
    let violation = match replayed {
        Some(violation) => Some(violation),
        None => check_teammates(journal, &lead),
    };
    if let Some(violation) = violation {
        return Err(Failure::work(anyhow!(
            "team verify {}: FAILED at {violation}",
            lead.id
        )));
    }
    let state = &lead.state;
    let by_phase = |phase: MemberPhase| state.members().iter().filter(|m| m.phase == phase).count();
    // The roster's word is the phase (what `team show` lists under PHASE); every active
    // teammate's session is checked below.
    let mut roster = vec![format!("phase: {} active", by_phase(MemberPhase::Active))];
    for (phase, word) in [
        (MemberPhase::Provisioning, "provisioning"),
        (MemberPhase::Failed, "failed"),
    ] {
        let n = by_phase(phase);
        if n > 0 {
            roster.push(format!("{n} {word}"));
        }
    }
    let tasks = state.tasks();
    let completed = tasks
        .iter()
        .filter(|t| t.status == troupe_team::TaskStatus::Completed)
        .count();
    let deleted = tasks
        .iter()
        .filter(|t| t.status == troupe_team::TaskStatus::Deleted)
        .count();
    let pending = state.pending_messages().count();
    let messages = state.messages().len();
    let line = format!(
        "team {}: OK: {} ({}), {} ({completed} completed, {deleted} deleted), {} ({} delivered, \
         {pending} pending); {} checked",
        lead.id,
        crate::work::count(state.members().len() as u64, "teammate"),
        roster.join(", "),
        crate::work::count(tasks.len() as u64, "task"),
        crate::work::count(messages as u64, "message"),
        messages - pending,
        crate::work::count(lead.summary.next_seq.0, "event"),
    );
    let mut out = Stdout::lock();
    writeln!(out, "{line}").context("writing output")?;
    out.flush().context("writing output")?;
    Ok(())
}

/// Replays the Lead's own log as `troupe resume` does (every runtime event's payload decoded
/// into the model history, the inbox and the turns), so a log that `verify` passes can be
/// resumed. Returns the first event that does not replay, as `seq N (type): reason`.
///
/// A second, streamed read of the log, for a log with a seeded prefix only (`verify` replays
/// every other log in its one pass, see [`LeadRead::Replay`]); a journal error here (the file
/// changed under us) is reported the same way, at the seq the first pass ended.
fn replay_lead(journal: &Journal, lead: &LeadLog) -> Option<String> {
    let mut transcript = Transcript::new(lead.summary.header.seed_len());
    let mut problem: Option<String> = None;
    let read = journal.read_each(&lead.id, &mut |event| {
        if problem.is_some() || event.seq.0 >= lead.summary.next_seq.0 {
            return;
        }
        if let Err(e) = transcript.apply(&event) {
            problem = Some(match e {
                troupe_runtime::RuntimeError::InvalidEvent { seq, kind, reason } => format!(
                    "seq {seq} ({}): the event cannot be replayed by a resume: {}",
                    escape_controls(&kind),
                    escape_controls(&reason)
                ),
                other => format!(
                    "seq {} ({}): the event cannot be replayed by a resume: {}",
                    event.seq,
                    escape_controls(&event.kind),
                    escape_controls(&other.to_string())
                ),
            });
        }
    });
    match read {
        Ok(_) => problem,
        Err(e) => problem.or_else(|| {
            Some(format!(
                "seq {}: the Lead's log cannot be read again: {}",
                lead.summary.next_seq,
                escape_controls(&e.to_string())
            ))
        }),
    }
}

/// Checks every `active` teammate's child session: it exists, names the Lead as its
/// `parentSession`, carries a continuable `subagent/descriptor` of the roster's provider, and
/// an `agent/config` with the Team profile (so a cold resume gets the Team tools back). Members
/// still `provisioning` are settled by recovery on the next resume, and `failed` ones need no
/// session: neither is checked. Returns the first violation, located at the member's last
/// `team/member` record.
fn check_teammates(journal: &Journal, lead: &LeadLog) -> Option<String> {
    for member in lead.state.members() {
        if member.phase != MemberPhase::Active {
            continue;
        }
        let problem = check_teammate(journal, &lead.id, member);
        if let Some(problem) = problem {
            let seq = lead
                .member_seqs
                .get(&member.id)
                .map_or_else(|| "?".to_owned(), Seq::to_string);
            return Some(format!(
                "seq {seq} ({}): teammate {} ({}): {}",
                event_types::TEAM_MEMBER,
                escape_controls(member.name.as_str()),
                member.id,
                escape_controls(&problem)
            ));
        }
    }
    None
}

fn check_teammate(
    journal: &Journal,
    lead: &SessionId,
    member: &troupe_team::MemberSnapshot,
) -> Option<String> {
    let replay = match journal.read(&member.id) {
        Ok(replay) => replay,
        Err(JournalError::NotFound { .. }) => {
            return Some("its child session does not exist".to_owned());
        }
        Err(e) => return Some(format!("its child session cannot be read: {e}")),
    };
    match &replay.header.parent_session {
        Some(parent) if parent == lead => {}
        Some(parent) => {
            return Some(format!(
                "its child session's parentSession is {parent}, not the Lead {lead}"
            ));
        }
        None => return Some("its child session has no parentSession".to_owned()),
    }
    let transcript = match Transcript::fold(replay.header.seed_len(), &replay.events) {
        Ok(t) => t,
        Err(e) => return Some(format!("its child session cannot be replayed: {e}")),
    };
    match transcript.descriptor() {
        None => return Some("its child session has no subagent/descriptor".to_owned()),
        Some(d) if d.mode != "continuable" => {
            return Some(format!(
                "its child session's descriptor mode is {:?}, not \"continuable\"",
                d.mode
            ));
        }
        Some(d) if d.provider != member.provider => {
            return Some(format!(
                "its child session's descriptor provider {:?} differs from the roster's {:?}",
                d.provider, member.provider
            ));
        }
        Some(_) => {}
    }
    match transcript.config() {
        None => Some("its child session has no agent/config, so it cannot be resumed".to_owned()),
        Some(c) if c.profile != Profile::Team => Some(
            "its child session's agent/config does not have the Team profile, so a resume \
             would not give it the Team tools"
                .to_owned(),
        ),
        Some(_) => None,
    }
}

/// What `troupe run --team` reports at the end: each member's work, the board and the mail.
pub(crate) struct TeamSummary {
    /// The Lead row first, then every teammate, with the stats of its session when readable
    /// and its count of answers from a model server (0 with a scripted model, which spends no
    /// tokens; see `work::tokens_text`).
    members: Vec<(MemberView, Option<(TranscriptStats, usize)>)>,
    /// Teammates whose last turn failed (name, code, message), in creation order: a failure
    /// the Lead did not recover from (no later turn of that teammate completed).
    failed_turns: Vec<(String, String, String)>,
    tasks: Vec<TaskView>,
    sent: usize,
    delivered: usize,
    pending: usize,
    /// Set when the Lead log could not be folded (the summary is then empty).
    problem: Option<String>,
}

impl TeamSummary {
    /// Folds the Lead log and every teammate's session (after the runtime shut down).
    /// `lead_stats`: the Lead's stats and server answers; `server`: whether the model is a
    /// server (its answers should carry usage) rather than a script.
    pub(crate) fn read(
        journal: &Journal,
        lead: &SessionId,
        lead_stats: (TranscriptStats, usize),
        server: bool,
    ) -> Self {
        let mut summary = Self {
            members: Vec::new(),
            failed_turns: Vec::new(),
            tasks: Vec::new(),
            sent: 0,
            delivered: 0,
            pending: 0,
            problem: None,
        };
        let folded = match fold_lead(journal, lead, LeadRead::TeamOnly, QueueTimes::Skip) {
            Ok(Ok(folded)) => folded,
            Ok(Err(failure)) => {
                summary.problem = Some(format!("the Team log is invalid at {failure}"));
                return summary;
            }
            Err(Failure { error, .. }) => {
                summary.problem = Some(error.map_or_else(String::new, |e| format!("{e:#}")));
                return summary;
            }
        };
        let view = show_of(&folded, false);
        for member in view.members.into_iter().map(|row| row.member) {
            let stats = if member.id == *lead {
                Some(lead_stats)
            } else {
                let folded = journal.read(&member.id).ok().and_then(|replay| {
                    Transcript::fold(replay.header.seed_len(), &replay.events).ok()
                });
                if let Some(Some(TurnEndReason::Failed { code, message })) =
                    folded.as_ref().map(Transcript::last_turn_end)
                {
                    summary.failed_turns.push((
                        member.name.to_string(),
                        code.clone(),
                        message.clone(),
                    ));
                }
                folded.map(|t| (t.stats(), if server { t.model_calls() } else { 0 }))
            };
            summary.members.push((member, stats));
        }
        summary.tasks = view.tasks;
        summary.sent = folded.state.messages().len();
        summary.pending = folded.state.pending_messages().count();
        summary.delivered = summary.sent - summary.pending;
        summary
    }

    /// Teammates whose last turn failed, as (name, code, message) in creation order. A
    /// teammate's failed turn counts until a later turn of it completes (the Lead recovers it
    /// with a `followup_task` that the teammate then finishes); a teammate whose creation
    /// failed is not listed here (the Lead got that error from `spawn_teammate`).
    pub(crate) fn failed_turns(&self) -> &[(String, String, String)] {
        &self.failed_turns
    }

    /// The `team` object of the final `--json` line. A teammate whose last turn failed has
    /// `"lastTurnFailed": {"code", "message"}`.
    pub(crate) fn to_json(&self) -> Value {
        let members: Vec<Value> = self
            .members
            .iter()
            .map(|(member, stats)| {
                let mut row = serde_json::to_value(member).unwrap_or(Value::Null);
                if let (Some((stats, _)), Some(object)) = (stats, row.as_object_mut()) {
                    object.insert("stats".to_owned(), crate::progress::stats_json(*stats));
                }
                if let Some((_, code, message)) =
                    self.failed_turns.iter().find(|(n, ..)| *n == member.name)
                    && let Some(object) = row.as_object_mut()
                {
                    object.insert(
                        "lastTurnFailed".to_owned(),
                        json!({"code": code, "message": message}),
                    );
                }
                row
            })
            .collect();
        let mut value = json!({
            "members": members,
            "tasks": self.tasks,
            "messages": {"sent": self.sent, "delivered": self.delivered, "pending": self.pending},
        });
        if let Some(problem) = &self.problem {
            value["error"] = json!(problem);
        }
        value
    }

    /// The stderr lines after the Lead's: one per teammate, the tasks, the mail.
    pub(crate) fn lines(&self) -> Vec<String> {
        const MAX_TASKS: usize = 20;
        if let Some(problem) = &self.problem {
            return vec![format!("team: {}", escape_controls(problem))];
        }
        let mut lines = Vec::new();
        for (member, stats) in self.members.iter().skip(1) {
            let name = escape_controls(&member.name);
            let work = stats.map_or_else(
                || "no readable session".to_owned(),
                |(stats, model_calls)| crate::work::stats_text(&stats, model_calls),
            );
            let status = match member.status {
                MemberStatus::Failed => format!(
                    " [failed: {}]",
                    escape_controls(&member.diagnostics.join("; "))
                ),
                MemberStatus::Provisioning => " [provisioning]".to_owned(),
                _ => self
                    .failed_turns
                    .iter()
                    .find(|(n, ..)| *n == member.name)
                    .map_or_else(String::new, |(_, code, message)| {
                        format!(
                            " [last turn failed: {}: {}]",
                            escape_controls(code),
                            escape_controls(message)
                        )
                    }),
            };
            lines.push(format!("{name}: {work}{status}"));
        }
        if self.tasks.is_empty() {
            lines.push("tasks: none".to_owned());
        } else {
            let shown: Vec<String> = self
                .tasks
                .iter()
                .take(MAX_TASKS)
                .map(|t| {
                    let owner = t
                        .owner_name
                        .as_deref()
                        .map_or_else(String::new, |o| format!(" ({})", escape_controls(o)));
                    format!("{} {}{owner}", t.id, t.status)
                })
                .collect();
            let more = self.tasks.len().saturating_sub(MAX_TASKS);
            let tail = if more > 0 {
                format!(", … and {more} more")
            } else {
                String::new()
            };
            lines.push(format!("tasks: {}{tail}", shown.join(", ")));
        }
        lines.push(format!(
            "messages: {} sent, {} delivered, {} pending",
            self.sent, self.delivered, self.pending
        ));
        lines
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use troupe_protocol::{EventDraft, SessionHeader};

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

    #[test]
    fn a_task_that_starts_at_revision_2_is_reported_with_its_seq() {
        let home = tempfile::tempdir().unwrap();
        let journal = Journal::open_home(home.path());
        let id = SessionId::new("lead-x").unwrap();
        let writer = journal.create(SessionHeader::new(id.clone(), 1)).unwrap();
        writer
            .append(EventDraft::new(
                "team/task",
                json!({"version": 1, "teamId": "lead-x", "task": {
                    "id": "task-1", "revision": 2, "subject": "s", "description": "d",
                    "status": "pending", "blockedBy": [], "writeScopes": []}}),
            ))
            .unwrap();
        writer.flush_blocking().unwrap();
        drop(writer);
        let Err(failure) = load_team(
            &journal,
            "lead-x",
            "show",
            LeadRead::TeamOnly,
            QueueTimes::Skip,
            "",
        ) else {
            panic!("the fold must refuse the log");
        };
        assert_eq!(failure.code, crate::exit::WORK_FAILED);
        let text = format!("{:#}", failure.error.unwrap());
        assert!(text.contains("seq 0 (team/task)"), "{text}");
        assert!(text.contains("must begin at revision 1"), "{text}");
    }
}
