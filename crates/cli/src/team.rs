//! `troupe team show`, `troupe team log` and `troupe team verify`: the Team of a Lead, folded
//! offline from its log (`show --at`: up to a past point of it; `log`: one line per Team
//! event).
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

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use troupe_journal::{At, Journal, ScanSummary};
use troupe_protocol::SessionId;
use troupe_runtime::{Cut, LeadLog, LeadLogError, LeadRead, TimeTravelError, read_timeline};
use troupe_session::ledger::{Ledger, Prices, UsageTotals};
use troupe_team::{
    LogPoint, MemberPhase, MemberStatus, MessageReceipt, StallReason, TaskView, TeamShowFull,
};

use crate::args::resolve_session;
use crate::exit::Failure;
use crate::hints::not_a_root;
use crate::home::Home;
use crate::output::{Stdout, align_columns, count, eprint_line, escape_controls, format_time};
use crate::settings::{FlagValues, Settings};

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
    ///
    /// A task in progress is marked stalled when its owner is failed, or has no process (no
    /// one holds its session) and no followup_task waits for it, or has a process but logged
    /// nothing for --stall-after (`stalled` in --json). Nothing is released automatically.
    Show {
        /// The Lead's session id, or a unique prefix of it (see `troupe sessions`).
        session: String,
        /// Print one JSON object: {"teamId","members","tasks","pendingMessages",
        /// "writeConflicts"?,"messages"} (`messages`: every message with its receipts: queued,
        /// received, delivered, consumed; `writeConflicts`: files two members changed while
        /// one task was in progress, when any), and "at" with --at; without --at also "ledger"
        /// (model calls, tokens and cost per member and in all, folded from every member's log
        /// and priced as `troupe run` prices them).
        #[arg(long)]
        json: bool,
        /// Include deleted tasks.
        #[arg(long)]
        all: bool,
        /// Show the Team as it was at a past point of the Lead's log: SEQ, once the event with
        /// that seq was committed (after the batch it was appended with: events appended
        /// together are durable together), or TIME, after every whole batch up to that time.
        ///
        /// TIME is an RFC 3339 date and time: `2026-12-01T19:47:25Z`, with fractional seconds
        /// (`2026-12-01T19:47:25.250Z`) or a numeric offset (`2026-12-01T20:47:25+01:00`); a
        /// space instead of the `T` works too, and `z` for `Z`. The teammates' logs are read up to the same time (for
        /// SEQ, that event's time), so receipts show what had happened by then. A point after
        /// the last event, or before the session was created, is bad input (exit 2) naming the
        /// last seq; so is a value that is neither a seq nor such a time. Stalls are of the
        /// present: a past point shows none (--stall-after cannot be given with it).
        #[arg(long, value_name = "SEQ|TIME", value_parser = parse_at, conflicts_with = "stall_after",
              allow_negative_numbers = true)]
        at: Option<At>,
        #[command(flatten)]
        stall: crate::work::StallArgs,
    },
    /// Print the Team timeline: one line per Team event of the Lead's log.
    ///
    /// Each line: the event's seq, its time (RFC 3339, UTC) and what happened (a teammate
    /// created, active or failed; a task created or changed; a message sent or received).
    /// Pass a line's seq to `troupe team show SESSION --at SEQ` to see the Team right after
    /// it. Exit 1 naming the first bad event when the log breaks a Team rule or is damaged;
    /// exit 2 for an unknown session, a teammate's session or a session without a Team.
    Log {
        /// The Lead's session id, or a unique prefix of it (see `troupe sessions`).
        session: String,
        /// Print one JSON object per line (JSON Lines), one per Team event:
        /// {"seq","time","type","text","member"?,"taskId"?,"revision"?,"messageId"?}.
        #[arg(long)]
        json: bool,
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
    /// Merge a teammate's branch (a Team run with --worktree) into the Lead's checkout.
    ///
    /// First commits the teammate's uncommitted changes in its worktree (tracked and
    /// untracked files, not ignored ones) on its branch, as "NAME's uncommitted work (troupe
    /// team merge)"; then, in the Lead's checkout, merges the branch into BRANCH (default: the
    /// branch checked out there; another one is checked out first) with a merge commit. The
    /// Lead's checkout must have no uncommitted changes to tracked files. A conflict aborts
    /// the merge: exit 1 listing the conflicting paths, nothing committed to BRANCH, its index
    /// and tree as before. An unknown member or one without a worktree is bad input (exit 2).
    Merge {
        /// The Lead's session id, or a unique prefix of it (see `troupe sessions`).
        session: String,
        /// The teammate's name.
        name: String,
        /// The branch to merge into (default: the Lead's checkout's current branch).
        #[arg(long, value_name = "BRANCH")]
        into: Option<String>,
    },
    /// Remove the git worktrees of a --worktree Team's finished teammates (branches kept).
    ///
    /// Each teammate that is not running (its session not held by a process) has its
    /// worktree removed with `git worktree remove`; one with uncommitted changes is kept (run
    /// `troupe team merge` first, which commits them). One line per teammate: removed, kept
    /// (why) or already gone. A teammate woken later gets its worktree back from its branch.
    Clean {
        /// The Lead's session id, or a unique prefix of it (see `troupe sessions`).
        session: String,
    },
}

/// Runs a `troupe team …` command.
///
/// `home` is ` --home DIR` when the command was given one (repeated in the commands it
/// prints), else empty.
pub(crate) fn run(home: &Home<'_>, command: TeamCommand) -> Result<(), Failure> {
    let journal = &home.store.journal;
    let args = home.args();
    match command {
        TeamCommand::Show {
            session,
            json,
            all,
            at,
            stall,
        } => show(
            home,
            &session,
            ShowFlags {
                json,
                all,
                at,
                stall,
            },
        ),
        TeamCommand::Log { session, json } => timeline(journal, &session, json, &args),
        TeamCommand::Verify { session } => verify(journal, &session, &args),
        TeamCommand::Merge {
            session,
            name,
            into,
        } => merge(home, &session, &name, into.as_deref()),
        TeamCommand::Clean { session } => clean(home, &session),
    }
}

/// The Lead's checkout (its repository's top level) and the worktree of teammate `name`.
fn member_worktree(
    lead: &LeadLog,
    name: &str,
) -> Result<(PathBuf, troupe_team::MemberWorktree), Failure> {
    let id = lead.id();
    let member = lead.state().member_named(name).ok_or_else(|| {
        Failure::bad_input(anyhow!(
            "TEAM_MEMBER_NOT_FOUND: session {id}'s Team has no teammate named {name}"
        ))
    })?;
    let worktree = member.worktree.clone().ok_or_else(|| {
        coded_bad_input(&troupe_runtime::worktree::WorktreeError::NoWorktree {
            name: name.to_owned(),
        })
    })?;
    Ok((lead_checkout(lead)?, *worktree))
}

/// The top level of the Lead's checkout (the repository holding its workspace).
fn lead_checkout(lead: &LeadLog) -> Result<PathBuf, Failure> {
    let workspace = lead
        .config()
        .map_or_else(PathBuf::new, |c| PathBuf::from(&c.workspace));
    troupe_runtime::worktree::top_level(&workspace).map_err(|e| coded_bad_input(&e))
}

/// Bad input (exit 2) of a worktree error, its code first.
fn coded_bad_input(e: &troupe_runtime::worktree::WorktreeError) -> Failure {
    Failure::bad_input(anyhow!("{}: {e}", troupe_protocol::ErrorCode::code(e)))
}

/// `troupe team merge SESSION NAME [--into BRANCH]` (see [`troupe_runtime::worktree::merge`]).
fn merge(home: &Home<'_>, session: &str, name: &str, into: Option<&str>) -> Result<(), Failure> {
    use troupe_runtime::worktree::WorktreeError;
    let journal = &home.store.journal;
    let lead = load_team(journal, session, "merge", LeadRead::Team, &home.args())?;
    let (top, worktree) = member_worktree(&lead, name)?;
    // A running teammate may be writing in its worktree: its work is taken once it stopped.
    if let Some(id) = lead.state().member_named(name).map(|m| m.id.clone())
        && let Some(holder) = running(home, &id)
    {
        return Err(coded_bad_input(&WorktreeError::MemberRunning {
            name: name.to_owned(),
            holder,
        }));
    }
    let merged =
        troupe_runtime::worktree::merge(&top, name, &worktree, into).map_err(|e| match e {
            WorktreeError::MergeConflict { .. } | WorktreeError::Git { .. } => {
                Failure::work(anyhow!("{}: {e}", troupe_protocol::ErrorCode::code(&e)))
            }
            bad => coded_bad_input(&bad),
        })?;
    let mut out = Stdout::lock();
    if let Some(commit) = &merged.work_commit {
        writeln!(
            out,
            "committed {name}'s uncommitted work in {} on {}: {}",
            worktree.path,
            worktree.branch,
            short(commit)
        )
        .context("writing output")?;
    }
    match &merged.merge_commit {
        Some(commit) => writeln!(
            out,
            "merged {} into {} in {}: {}",
            worktree.branch,
            merged.into,
            top.display(),
            short(commit)
        ),
        None => writeln!(
            out,
            "{} already contains {}: nothing to merge",
            merged.into, worktree.branch
        ),
    }
    .context("writing output")?;
    out.flush().context("writing output")?;
    Ok(())
}

/// The first 12 hexadecimal digits of a commit.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// `troupe team clean SESSION`: removes the worktrees of teammates not running (see
/// [`troupe_runtime::worktree::remove`]); one line each.
fn clean(home: &Home<'_>, session: &str) -> Result<(), Failure> {
    use troupe_runtime::worktree::Cleaned;
    let journal = &home.store.journal;
    let lead = load_team(journal, session, "clean", LeadRead::Team, &home.args())?;
    let with_worktree: Vec<_> = lead
        .state()
        .members()
        .iter()
        .filter_map(|m| {
            m.worktree
                .clone()
                .map(|w| (m.name.to_string(), m.id.clone(), w))
        })
        .collect();
    if with_worktree.is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "TEAM_NO_WORKTREE: session {}'s Team has no teammate with a worktree (it was not \
             run with --worktree)",
            lead.id()
        )));
    }
    let top = lead_checkout(&lead)?;
    let mut out = Stdout::lock();
    for (name, id, worktree) in with_worktree {
        let line = match running(home, &id) {
            Some(holder) => format!(
                "{name}: kept {}: the teammate is running ({holder})",
                worktree.path
            ),
            None => match troupe_runtime::worktree::remove(&top, &worktree) {
                Ok(Cleaned::Removed) => format!(
                    "{name}: removed {} (branch {} kept)",
                    worktree.path, worktree.branch
                ),
                Ok(Cleaned::AlreadyGone) => {
                    format!(
                        "{name}: {} is already gone (branch {} kept)",
                        worktree.path, worktree.branch
                    )
                }
                Ok(Cleaned::KeptDirty(paths)) => format!(
                    "{name}: kept {}: it has uncommitted changes ({}); troupe team merge commits \
                     them",
                    worktree.path,
                    paths.join(", ")
                ),
                Err(e) => {
                    return Err(Failure::work(anyhow!(
                        "{name}: {}: {e}",
                        troupe_protocol::ErrorCode::code(&e)
                    )));
                }
            },
        };
        writeln!(out, "{line}").context("writing output")?;
    }
    out.flush().context("writing output")?;
    Ok(())
}

/// Who runs session `id` now, when someone does: the lease's holder on NATS, `its log is
/// locked` for the JSONL files (the kernel's lock table, which names no holder). A store that
/// cannot tell counts as not running (as before `team clean` asked: the worktree operations
/// are never forced, so a dirty worktree is kept either way).
fn running(home: &Home<'_>, id: &SessionId) -> Option<String> {
    if let Ok(Some(holder)) = home.store.journal.holder(id) {
        return Some(holder);
    }
    (home.store.resident(id) == Some(true)).then(|| "its log is locked".to_owned())
}

/// `troupe team show`'s flags.
struct ShowFlags {
    json: bool,
    all: bool,
    at: Option<At>,
    stall: crate::work::StallArgs,
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
    load_team_at(journal, raw, verb, read, None, home)
}

/// [`load_team`] up to the point `at` (`None`: the whole log): a point outside the log is bad
/// input naming the log's last seq (checked after the session is known to lead a Team).
fn load_team_at(
    journal: &Journal,
    raw: &str,
    verb: &str,
    read: LeadRead,
    at: Option<At>,
    home: &str,
) -> Result<LeadLog, Failure> {
    let id = resolve_session(journal, raw)?;
    let Some(at) = at else {
        let lead = LeadLog::read(journal, &id, read).map_err(lead_log_failure)?;
        check_team(&id, &lead, verb, home)?;
        note_torn_tail(lead.summary());
        return Ok(lead);
    };
    // The whole log first (is it a Team's, does it fold), then the point, then its prefix.
    let whole = LeadLog::read(journal, &id, LeadRead::Team).map_err(lead_log_failure)?;
    check_team(&id, &whole, verb, home)?;
    let cut = Cut::resolve(journal, &id, at).map_err(|e| match e {
        TimeTravelError::OutsideLog {
            at,
            last,
            created_at,
            ..
        } => Failure::bad_input(anyhow!("{}", outside_message(&id, at, last, created_at))),
        TimeTravelError::Log(e) => lead_log_failure(e),
    })?;
    let lead = LeadLog::read_at(journal, &id, read, Some(cut)).map_err(lead_log_failure)?;
    note_torn_tail(lead.summary());
    Ok(lead)
}

/// `--at …` outside the log, in one line: the point, and the log's last seq and its time.
fn outside_message(
    id: &SessionId,
    at: At,
    last: Option<(troupe_protocol::Seq, u64)>,
    created_at: u64,
) -> String {
    let asked = match at {
        At::Seq(seq) => format!("--at {seq}"),
        At::Time(ms) => format!("--at {}", format_time(ms)),
    };
    let end = match last {
        Some((seq, time)) => format!(
            "its last event is seq {seq} ({}): pass a seq up to {seq} or a time up to then",
            format_time(time)
        ),
        None => "it has no events yet".to_owned(),
    };
    match at {
        At::Time(ms) if ms < created_at => format!(
            "{asked} is before session {id} was created ({}); {end}",
            format_time(created_at)
        ),
        _ => format!("{asked} is beyond the log of session {id}: {end}"),
    }
}

/// What `--at` accepts, as its error says when a value is neither.
const AT_FORMS: &str = "neither a seq nor a time: pass a seq (like 17) or an RFC 3339 date and \
     time with its offset (like 2026-12-01T19:47:25Z, 2026-12-01T19:47:25.250Z or \
     2026-12-01T20:47:25+01:00)";

/// `--at SEQ|TIME`: a seq (decimal digits) or an RFC 3339 date and time (see `team show
/// --help`), as epoch milliseconds; anything else is [`AT_FORMS`].
fn parse_at(raw: &str) -> Result<At, String> {
    let raw = raw.trim();
    if raw.starts_with('-') && raw.len() > 1 && raw[1..].bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{raw} is negative: a seq counts from 0"));
    }
    if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
        return raw
            .parse::<u64>()
            .map(|seq| At::Seq(troupe_protocol::Seq(seq)))
            .map_err(|_| format!("{raw} is too large for a seq"));
    }
    // The parser's own words ("the 'year' component could not be parsed") are left out:
    // they name its internals, not what to type.
    let time = time::OffsetDateTime::parse(raw, &time::format_description::well_known::Rfc3339)
        .map_err(|_| AT_FORMS.to_owned())?;
    let ms = time.unix_timestamp_nanos() / 1_000_000;
    u64::try_from(ms)
        .map(At::Time)
        .map_err(|_| format!("{raw} is before 1970"))
}

/// Refuses a session that leads no Team for `troupe team VERB`: a child session (naming its
/// Lead's command), or a session without a Team.
fn check_team(id: &SessionId, lead: &LeadLog, verb: &str, home: &str) -> Result<(), Failure> {
    let header = &lead.summary().header;
    let role = lead.role();
    if role.is_child()
        && let Some(parent) = &header.parent_session
    {
        let command = format!("troupe team {verb} {parent}{home}");
        return Err(not_a_root(id, role, parent, &command));
    }
    if !lead.is_team() {
        return Err(Failure::bad_input(anyhow!(
            "session {id} is not a Team session (start one with troupe run --team)"
        )));
    }
    Ok(())
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

/// The prices of the Team's ledger: the built-in ones with the `[prices]` of the user's file
/// and of the project's (the Lead's workspace) over them. A configuration file that cannot be
/// read is noted and the built-in prices are used (`team show` works whatever the files say).
fn prices_of(lead: &LeadLog, home_dir: &Path) -> Prices {
    let workspace = lead
        .config()
        .map_or_else(PathBuf::new, |c| PathBuf::from(&c.workspace));
    match Settings::load(home_dir, &workspace, FlagValues::default()) {
        Ok(settings) => settings.prices(),
        Err(failure) => {
            if let Some(error) = &failure.error {
                eprint_line!(
                    "troupe: note: the configuration's [prices] are not used ({error:#}): the \
                     ledger uses the built-in prices"
                );
            }
            Prices::builtin()
        }
    }
}

/// `troupe team show SESSION [--json] [--all] [--at SEQ|TIME | --stall-after DURATION]`;
/// without `--at`, the Team's ledger and its stalled tasks too (both are of the present: the
/// ledger is of the whole logs, and a stall is judged at "now", which is the journal's clock —
/// `$TROUPE_CLOCK` when set — against who holds a session now; neither is folded up to a past
/// point).
fn show(home: &Home<'_>, session: &str, flags: ShowFlags) -> Result<(), Failure> {
    let journal = &home.store.journal;
    let ShowFlags {
        json,
        all,
        at,
        stall,
    } = flags;
    let now = at.is_none();
    let args = home.args();
    let lead = load_team_at(journal, session, "show", LeadRead::TeamAndMail, at, &args)?;
    // The threshold: the flag, else the user's file, else 10 minutes.
    let after = if now {
        Some(crate::settings::stall_after_in(
            &home.dir,
            stall.stall_after,
        )?)
    } else {
        None
    };
    let now_ms = journal.clock().now_ms();
    // Every teammate's log read once (up to the point's time with --at): teammates with a
    // model of their own show it, receipts their claims, the radar their changes, the ledger
    // their usage and the stall check their last event.
    let logs = lead.read_teammates(journal, now);
    let check =
        after.map(|after| lead.stall_check_in(&logs, now_ms, after, &|id| home.store.resident(id)));
    let mut view = lead.show_full_in(journal, &logs, all, check);
    // What each active teammate does now, as the panel shows it: a process holds its session
    // (the lock table, or a lease) — running with a turn open in its log, else idle.
    if now {
        for row in &mut view.show.members {
            if row.phase == MemberPhase::Active
                && row.member.status == MemberStatus::Inactive
                && home.store.resident(&row.member.id) == Some(true)
            {
                row.member.status = if turn_open(journal, &row.member.id) {
                    MemberStatus::Running
                } else {
                    MemberStatus::Idle
                };
            }
        }
    }
    // A teammate log that cannot be read in full shows only what comes before the damage:
    // say so on the member's row (and in --json's diagnostics) and once on stderr.
    for (id, error) in logs.damaged() {
        // A member with no log yet (a spawn cut before its first append) has nothing to show.
        if matches!(
            journal.header(id),
            Err(troupe_journal::JournalError::NotFound { .. })
        ) {
            continue;
        }
        let note = format!(
            "its log cannot be read in full ({error}): its usage, receipts and changes stop \
             there (troupe team verify checks it)"
        );
        let name = match view.show.members.iter_mut().find(|m| &m.member.id == id) {
            Some(row) => {
                row.member.diagnostics.push(note.clone());
                row.member.name.to_string()
            }
            None => id.to_string(),
        };
        eprint_line!(
            "troupe: note: {}: {}",
            escape_controls(&name),
            escape_controls(&note)
        );
    }
    let ledger = now.then(|| lead.ledger_in(&logs, &prices_of(&lead, &home.dir)));
    let hosts = if now {
        live_hosts(home, &view)
    } else {
        HashMap::new()
    };
    let mut out = Stdout::lock();
    if json {
        let mut value = serde_json::to_value(&view).context("encoding the Team view")?;
        if let Some(ledger) = &ledger {
            value["ledger"] = serde_json::to_value(ledger).context("encoding the ledger")?;
        }
        // Each live member's host (absent for a member no process holds).
        if let Some(members) = value["members"].as_array_mut() {
            for member in members {
                let host = member["id"].as_str().and_then(|id| hosts.get(id)).cloned();
                if let (Some(host), Some(object)) = (host, member.as_object_mut()) {
                    object.insert("host".to_owned(), serde_json::Value::String(host));
                }
            }
        }
        let text = serde_json::to_string(&value).context("encoding the Team view")?;
        writeln!(out, "{text}").context("writing output")?;
    } else {
        let ledger = ledger.as_ref().map(ledger_lines).unwrap_or_default();
        for line in human_show(&view, &lead, &hosts).into_iter().chain(ledger) {
            if out.is_closed() {
                break;
            }
            writeln!(out, "{line}").context("writing output")?;
        }
    }
    out.flush().context("writing output")?;
    Ok(())
}

/// Whether the log of `id` ends in an open turn (a `turn/start` after its last `turn/end`): a
/// selective scan of the two types, no lock; a log that cannot be read says no.
fn turn_open(journal: &Journal, id: &SessionId) -> bool {
    use troupe_journal::{LineCheck, LineUse, Selected};
    let mut open = false;
    use troupe_protocol::event_types::{TURN_END, TURN_START};
    let turns = |kind: &str| kind == TURN_START || kind == TURN_END;
    let read = journal.read_selected_each(id, LineCheck::Prefix, &turns, &mut |selected| {
        let kind = match &selected {
            Selected::Line(line) => line.kind,
            Selected::Event(event) => event.kind.as_str(),
        };
        open = kind == TURN_START;
        match selected {
            Selected::Line(_) => LineUse::NeedEvent,
            Selected::Event(_) => LineUse::Used,
        }
    });
    read.is_ok() && open
}

/// The host of each live member of `view` (DESIGN §7: `team show` shows each live member's
/// host), by session id: `local` when the process holding its lease holds the Lead's too, a
/// worker's name when a live worker of the NATS store is that process, else the holder as
/// the lease names it (`host H pid P`). A member no process holds has none. On files every
/// holder is a local process: `local`.
fn live_hosts(home: &Home<'_>, view: &TeamShowFull) -> HashMap<String, String> {
    let journal = &home.store.journal;
    let holder = |id: &SessionId| -> Option<String> {
        let desc = journal.holder(id).ok().flatten()?;
        Some(desc.split(" (").next().unwrap_or(&desc).to_owned())
    };
    let held: Vec<(String, String)> = view
        .show
        .members
        .iter()
        .filter_map(|row| holder(&row.member.id).map(|h| (row.member.id.to_string(), h)))
        .collect();
    if held.is_empty() {
        return HashMap::new();
    }
    let Some(nats) = home.store.nats_backend() else {
        return held
            .into_iter()
            .map(|(id, _)| (id, "local".to_owned()))
            .collect();
    };
    let lead = holder(view.show.team_id.lead_id());
    let workers = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()
        .and_then(|rt| rt.block_on(troupe_store_nats::live_workers(nats)).ok())
        .unwrap_or_default();
    held.into_iter()
        .map(|(id, h)| {
            let host = if lead.as_deref() == Some(h.as_str()) {
                "local".to_owned()
            } else {
                workers
                    .iter()
                    .find(|w| h == format!("host {} pid {}", w.host, w.pid))
                    .map_or(h, |w| w.name.clone())
            };
            (id, host)
        })
        .collect()
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
fn human_show(full: &TeamShowFull, lead: &LeadLog, hosts: &HashMap<String, String>) -> Vec<String> {
    let view = &full.show;
    let state = lead.state();
    let events = lead.events();
    let mut lines = vec![match &full.at {
        None => format!(
            "team {} (Lead log: {})",
            escape_controls(view.team_id.as_str()),
            count(events, "event")
        ),
        Some(at) => format!(
            "team {} at {} ({}) (Lead log: {}; the teammates' logs up to the same time)",
            escape_controls(view.team_id.as_str()),
            at.seq
                .map_or_else(|| "its start".to_owned(), |seq| format!("seq {seq}")),
            format_time(at.time),
            count(events, "event")
        ),
    }];
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
    // A HOST column while some member is live (the process holding it: `local` or a worker).
    let with_hosts = !hosts.is_empty();
    if with_hosts {
        rows[0].insert(4, "HOST".to_owned());
    }
    let mut notes: Vec<(usize, Vec<String>)> = Vec::new();
    for row in &view.members {
        let member = &row.member;
        let host = hosts
            .get(member.id.as_str())
            .map_or_else(|| "-".to_owned(), |h| cell(h));
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
        if with_hosts && let Some(cells) = rows.last_mut() {
            cells.insert(4, host);
        }
        let mut member_notes: Vec<String> = member
            .diagnostics
            .iter()
            .map(|d| format!("    ! {}", escape_controls(d)))
            .collect();
        if let Some(worktree) = &member.worktree {
            member_notes.push(format!(
                "    worktree: {} (branch {})",
                escape_controls(&worktree.path),
                escape_controls(&worktree.branch)
            ));
        }
        if !member_notes.is_empty() {
            notes.push((rows.len() - 1, member_notes));
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
            let mut task_notes: Vec<String> = stall_note(task).into_iter().collect();
            task_notes.extend(overlaps.iter().map(|o| {
                format!(
                    "    ⚠ write scopes overlap with {} ({})",
                    escape_controls(o.task_id.as_str()),
                    o.status.as_str()
                )
            }));
            if !task_notes.is_empty() {
                notes.push((rows.len() - 1, task_notes));
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
    lines.push(String::new());
    lines.extend(human_receipts(&full.messages));
    lines
}

/// The receipts table of `troupe team show`: each message's life, one row per message in
/// queue order. QUEUED and DELIVERED are seqs of the Lead log; RECEIVED and CONSUMED of the
/// target's log (the Lead's own when the Lead is the target).
fn human_receipts(messages: &[MessageReceipt]) -> Vec<String> {
    if messages.is_empty() {
        return vec!["messages: none".to_owned()];
    }
    let mut lines = vec![format!(
        "messages ({}; RECEIVED and CONSUMED are seqs of the target's log):",
        messages.len()
    )];
    let seq = |point: Option<LogPoint>| {
        point.map_or_else(|| "-".to_owned(), |p| format!("seq {}", p.seq))
    };
    let mut rows = vec![
        [
            "QUEUED",
            "FROM",
            "TO",
            "DELIVERY",
            "RECEIVED",
            "DELIVERED",
            "CONSUMED",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for message in messages {
        rows.push(vec![
            seq(Some(message.queued)),
            cell(&message.sender_name),
            cell(&message.target_name),
            message.delivery.as_str().to_owned(),
            seq(message.received),
            seq(message.delivered),
            message.consumed.map_or_else(
                || "-".to_owned(),
                |c| match c.turn {
                    Some(turn) => format!("turn {turn} (seq {})", c.seq),
                    None => format!("seq {}", c.seq),
                },
            ),
        ]);
    }
    lines.extend(align_columns(&rows).into_iter().map(|l| format!("  {l}")));
    lines
}

/// `troupe team log SESSION [--json]`: the Team timeline ([`read_timeline`]).
fn timeline(journal: &Journal, session: &str, json: bool, home: &str) -> Result<(), Failure> {
    let lead = load_team(journal, session, "log", LeadRead::Team, home)?;
    let (entries, _) = read_timeline(journal, lead.id()).map_err(lead_log_failure)?;
    let mut out = Stdout::lock();
    for entry in &entries {
        if out.is_closed() {
            break;
        }
        let line = if json {
            serde_json::to_string(entry).context("encoding a timeline entry")?
        } else {
            format!(
                "{:>6}  {}  {}",
                entry.seq,
                format_time(entry.time),
                escape_controls(&entry.text)
            )
        };
        writeln!(out, "{line}").context("writing output")?;
    }
    if entries.is_empty() && !json && !out.is_closed() {
        writeln!(out, "no Team events yet").context("writing output")?;
    }
    out.flush().context("writing output")?;
    Ok(())
}

/// The ledger section of the table: one row per member and the Team's total — model calls,
/// prompt / cached / completion tokens, cost (`-`: no price for its model).
fn ledger_lines(ledger: &Ledger) -> Vec<String> {
    let mut lines = vec![
        String::new(),
        format!(
            "ledger (prices as of {}; [prices] in the configuration overrides them):",
            ledger.prices_as_of
        ),
    ];
    let mut rows = vec![
        [
            "NAME",
            "CALLS",
            "PROMPT",
            "CACHED",
            "COMPLETION",
            "TOKENS",
            "COST",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    let row = |name: String, u: &UsageTotals, cost: Option<f64>| {
        vec![
            name,
            u.model_calls.to_string(),
            u.prompt_tokens.to_string(),
            u.cached_tokens.to_string(),
            u.completion_tokens.to_string(),
            u.tokens.to_string(),
            cost.map_or_else(|| "-".to_owned(), |c| format!("${c:.4}")),
        ]
    };
    for member in &ledger.members {
        rows.push(row(cell(&member.name), &member.usage, member.cost_usd));
    }
    rows.push(row("(team)".to_owned(), &ledger.usage, ledger.cost_usd));
    lines.extend(align_columns(&rows).into_iter().map(|l| format!("  {l}")));
    if !ledger.unpriced_models.is_empty() {
        lines.push(format!(
            "  no price for: {} (add [prices] \"<model>\" = {{input, output, cached}}, USD per \
             million tokens)",
            cell(&ledger.unpriced_models.join(", "))
        ));
    }
    lines
}

/// The note under a stalled task: why, and since when its owner logged nothing.
fn stall_note(task: &TaskView) -> Option<String> {
    let stall = task.stalled?;
    let owner = task
        .owner_name
        .as_deref()
        .map_or_else(|| "?".to_owned(), cell);
    let why = match stall.reason {
        StallReason::Failed => format!("its owner {owner} failed"),
        StallReason::Inactive => {
            format!("its owner {owner} is inactive and no followup_task waits for it")
        }
        StallReason::NoActivity => match stall.idle_ms {
            Some(ms) => format!("its owner {owner} logged nothing for {}", idle_text(ms)),
            None => format!("its owner {owner} logged nothing for a while"),
        },
    };
    let since = stall
        .since
        .map(|t| format!(" (last active {})", format_time(t)))
        .unwrap_or_default();
    Some(format!(
        "    ◷ stalled: {why}{since}; reassign it or wake {owner} (nothing is released \
         automatically)"
    ))
}

/// A stalled owner's idle time, to the minute once it is a minute or more: `45s`, `12m`,
/// `1h 5m`, `2d 3h`.
fn idle_text(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d {h}h"),
    }
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
        // Its code first, as on every failure line: an event a resume cannot replay, a log
        // changed under the second read, or a teammate session that is not a valid teammate.
        let code = match &violation {
            troupe_runtime::Violation::Replay { .. } => "RUNTIME_INVALID_EVENT",
            troupe_runtime::Violation::Reread { .. } => "TEAM_LOG_INVALID",
            troupe_runtime::Violation::Teammate { .. } => "TEAM_LOG_INVALID",
        };
        return Err(Failure::work(anyhow!(
            "{code}: team verify {}: FAILED at {violation}",
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
    fn idle_times_read_to_the_minute() {
        let min = 60_000;
        assert_eq!(idle_text(45_900), "45s");
        assert_eq!(idle_text(11 * min), "11m");
        assert_eq!(idle_text(60 * min), "1h");
        assert_eq!(idle_text(65 * min + 30_000), "1h 5m");
        assert_eq!(idle_text(24 * 60 * min), "1d");
        assert_eq!(idle_text(51 * 60 * min + 7 * min), "2d 3h");
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
        let Err(failure) = load_team(&journal, "lead-x", "show", LeadRead::Team, "") else {
            panic!("the fold must refuse the log");
        };
        assert_eq!(failure.code, crate::exit::WORK_FAILED);
        let text = format!("{:#}", failure.error.unwrap());
        assert!(text.contains("seq 0 (team/task)"), "{text}");
        assert!(text.contains("must begin at revision 1"), "{text}");
    }
}
