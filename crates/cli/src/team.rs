//! `troupe team show` and `troupe team verify`: the Team of a Lead, folded offline from its log.
//!
//! Both read the Lead's session file once through the runtime's one Lead-log fold entry point,
//! [`LeadLog::read`] (without the file's lock, so they work while a `troupe run` writes it; an
//! unfinished last line is ignored and noted), and print what it folded; `verify` then asks
//! [`LeadLog::violation`] for the first problem beyond the fold. This file decides nothing
//! about the log: it refuses what the command cannot show and prints.
//!
//! - A Lead log the fold refuses is a failure of the work (exit 1) naming the first bad event:
//!   `seq N (type): reason`; so is a log damaged at the journal level (a corrupt committed
//!   line): `seq N: corrupt session file F: line L, byte offset O: reason`.
//! - An id that is not a session, a child session, or a session without a Team is bad input
//!   (exit 2, one line).

use std::io::Write;

use anyhow::{Context, anyhow};
use troupe_journal::{Journal, ScanSummary};
use troupe_runtime::{LeadLog, LeadLogError, LeadRead};
use troupe_team::{MemberPhase, MemberStatus, TeamShow};

use crate::args::resolve_session;
use crate::exit::Failure;
use crate::hints::not_a_root;
use crate::output::{Stdout, align_columns, count, eprint_line, escape_controls, format_time};

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
        /// Print one JSON object: {"teamId","members","tasks","pendingMessages","writeConflicts"?}
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

/// Folds the Lead log of the session named `raw` for `show`/`verify` ([`LeadLog::read`]): bad
/// input for an unknown id, a child session or a session without a Team; exit 1 for a log the
/// fold refuses or a damaged one.
fn load_team(
    journal: &Journal,
    raw: &str,
    verb: &str,
    read: LeadRead,
    home: &str,
) -> Result<LeadLog, Failure> {
    let id = resolve_session(journal, raw)?;
    let lead = LeadLog::read(journal, &id, read).map_err(lead_log_failure)?;
    let header = &lead.summary().header;
    let role = lead.role();
    if role.is_child()
        && let Some(parent) = &header.parent_session
    {
        let command = format!("troupe team {verb} {parent}{home}");
        return Err(not_a_root(&id, role, parent, &command));
    }
    if !lead.is_team() {
        return Err(Failure::bad_input(anyhow!(
            "session {id} is not a Team session (start one with troupe run --team)"
        )));
    }
    note_torn_tail(lead.summary());
    Ok(lead)
}

/// A Lead log damaged at the journal level (a corrupt committed line, REFERENCE a.9) is a bad
/// Team log like one the fold refuses: exit 1, naming the first bad event — its seq, and the
/// file, line and byte offset the journal reports. Every other journal error keeps its code (an
/// unknown session stays bad input, exit 2).
fn lead_log_failure(error: LeadLogError) -> Failure {
    match error {
        LeadLogError::Journal(e) => e.into(),
        damaged_or_invalid => Failure::work(damaged_or_invalid),
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

/// `troupe team show SESSION [--json] [--all]`.
fn show(
    journal: &Journal,
    session: &str,
    json: bool,
    all: bool,
    home: &str,
) -> Result<(), Failure> {
    let read = if json {
        LeadRead::Team
    } else {
        LeadRead::TeamAndQueueTimes
    };
    let lead = load_team(journal, session, "show", read, home)?;
    // Teammates with a model of their own show it (read from their logs).
    let mut view = lead.show_with_models(all, lead.member_models(journal));
    // The write radar: files two members changed within the same window of work (read from
    // every member's log; advisory).
    view.write_conflicts = lead.write_conflicts(journal);
    let mut out = Stdout::lock();
    if json {
        let text = serde_json::to_string(&view).context("encoding the Team view")?;
        writeln!(out, "{text}").context("writing output")?;
    } else {
        for line in human_show(&view, &lead) {
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
fn human_show(view: &TeamShow, lead: &LeadLog) -> Vec<String> {
    let state = lead.state();
    let events = lead.events();
    let mut lines = vec![format!(
        "team {} (Lead log: {})",
        escape_controls(view.team_id.as_str()),
        count(events, "event")
    )];
    lines.push(String::new());
    lines.push(format!(
        "members ({}):",
        count(view.members.len().saturating_sub(1) as u64, "teammate")
    ));
    let mut rows = vec![
        [
            "NAME",
            "ROLE",
            "PHASE",
            "STATUS",
            "CONTEXT",
            "MODEL",
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
            member.model.as_deref().map_or_else(|| "-".to_owned(), cell),
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
                lead.queued_at(&message.id)
                    .map_or_else(|| "-".to_owned(), format_time),
                cell(&message.sender_name),
                cell(&message.target_name),
                message.delivery.as_str().to_owned(),
            ]);
        }
        lines.extend(align_columns(&rows).into_iter().map(|l| format!("  {l}")));
    }
    // The write radar, only when it found something (advisory, like write scopes).
    if !view.write_conflicts.is_empty() {
        lines.push(String::new());
        lines.push(format!(
            "write conflicts ({}): files two members changed while the same task was in progress",
            view.write_conflicts.len()
        ));
        for conflict in &view.write_conflicts {
            let tasks: Vec<&str> = conflict.tasks.iter().map(|t| t.as_str()).collect();
            lines.push(format!(
                "  ⚠ {} changed by {} (during {})",
                cell(&conflict.path),
                conflict
                    .members
                    .iter()
                    .map(|m| cell(m))
                    .collect::<Vec<_>>()
                    .join(", "),
                tasks.join(", ")
            ));
        }
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
    // as a resume would, together ([`LeadRead::Verify`]); then the teammates' sessions.
    let lead = load_team(journal, session, "verify", LeadRead::Verify, home)?;
    if let Some(violation) = lead.violation(journal) {
        return Err(Failure::work(anyhow!(
            "team verify {}: FAILED at {violation}",
            lead.id()
        )));
    }
    let state = lead.state();
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
        lead.id(),
        count(state.members().len() as u64, "teammate"),
        roster.join(", "),
        count(tasks.len() as u64, "task"),
        count(messages as u64, "message"),
        messages - pending,
        count(lead.events(), "event"),
    );
    let mut out = Stdout::lock();
    writeln!(out, "{line}").context("writing output")?;
    out.flush().context("writing output")?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use troupe_protocol::{EventDraft, SessionHeader, SessionId};

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
        let Err(failure) = load_team(&journal, "lead-x", "show", LeadRead::Team, "") else {
            panic!("the fold must refuse the log");
        };
        assert_eq!(failure.code, crate::exit::WORK_FAILED);
        let text = format!("{:#}", failure.error.unwrap());
        assert!(text.contains("seq 0 (team/task)"), "{text}");
        assert!(text.contains("must begin at revision 1"), "{text}");
    }
}
