//! What `troupe run` / `troupe resume` print at the end, and the exit code: the run's
//! [`RunOutcome`] (classified by the runtime) shown as the answer on stdout, the summary and the
//! hints on stderr, and the final `--json` line.

use std::io::Write;
use std::sync::Arc;

use anyhow::anyhow;
use serde_json::{Value, json};
use troupe_llm::ProviderKind;
use troupe_protocol::{ErrorCode, SessionId};
use troupe_runtime::ledger::LiveLedger;
use troupe_runtime::{
    Agent, JOURNAL_FAILED, LogFailure, RunEnd, RunFailure, RunOutcome, RunStatus, TeamReport,
    TeamReportProblem, log_failure_message,
};
use troupe_session::ledger::{Budget, Ledger, TEAM_BUDGET_EXCEEDED};
use troupe_team::MemberStatus;

use super::config::WorkConfig;
use super::model::LEAD;
use crate::exit::{Failure, WORK_FAILED};
use crate::framing::Ending;
use crate::hints::Hints;
use crate::output::{escape_controls, stats_text};
use crate::progress::{DoneStatus, OutputMode, Printer, stats_json};

/// What happened between starting (or reopening) the Lead and quiescence.
pub(super) struct Driven {
    pub(super) agent: Agent,
    /// The run's live ledger (its first budget refusal, if any).
    pub(super) ledger: Arc<LiveLedger>,
    pub(super) id: SessionId,
    /// The Lead's last turn number before this process gave it work.
    pub(super) turn_before: u64,
    /// A resume that found nothing for the Lead to run.
    pub(super) nothing_to_do: bool,
    /// Whether a signal stopped the run.
    pub(super) interrupted: bool,
    /// Why this process lost the Lead's lease while the run waited (a NATS store, DESIGN §7):
    /// the run fails as the Lead's log failure (`JOURNAL_FAILED`, `JOURNAL_LEASE_LOST`),
    /// resumable, even when no append of the Lead noticed it.
    pub(super) lease_lost: Option<String>,
    /// A resume whose Lead had nothing to run while its Team had work (a crash left it,
    /// [`troupe_runtime::team::crash_left_work`], or teammates the recovery continued): why.
    /// The run is then not reported as "nothing to resume".
    pub(super) team_work: Option<String>,
}

/// Prints the outcome (answer on stdout, summary on stderr) and picks the exit code.
///
/// A run in which any member's session log failed (`log_failures`, DESIGN decision 11) exits
/// 1 with `JOURNAL_FAILED` naming each of them and its OS error — on the last line, after the
/// summary and the resume hint — whatever the Lead answered: work that could not be recorded
/// was not done durably.
pub(super) fn report(
    driven: &Driven,
    config: &WorkConfig,
    printer: &mut Printer,
    log_failures: &[LogFailure],
) -> Result<(), Failure> {
    let (stats, model_calls) = driven
        .agent
        .with_transcript(|t| (t.stats(), t.model_calls()));
    // A scripted model spends no tokens: its zeros are counts, not missing usage.
    let server = config.spec.provider != ProviderKind::Script;
    let server_answers = if server { model_calls } else { 0 };
    let id = &driven.id;
    let hints = Hints::new(id, &config.home_args, config.team);
    // A Team run also reports every teammate's work, the board and the mail, folded from the
    // logs the runtime has just flushed.
    let team = config.team.then(|| {
        TeamReport::read(
            &config.store.journal,
            id,
            (stats, server_answers),
            server,
            &config.prices,
        )
    });
    let team_json = team.as_ref().map(team_json);
    let checked = config
        .framing
        .check
        .as_ref()
        .map(|check| check(team.as_ref()));
    let lead_log_failure = driven.agent.failure().or_else(|| {
        let reason = driven.lease_lost.clone()?;
        let lost = troupe_journal::JournalError::LeaseLost {
            id: id.clone(),
            reason,
        };
        Some(format!("{}: {lost}", lost.code()))
    });
    // A refusal of this process's ledger, or else (with a budget) a teammate whose last turn
    // the budget stopped: with `--placement workers` a worker refused that call, and its
    // ledger is not this process's — the stop is the same and is reported the same.
    let budget_refused = driven.ledger.refused().or_else(|| {
        config
            .budget
            .is_set()
            .then(|| team.as_ref()?.budget_stopped.first())
            .flatten()
            .map(|stop| stop.message.clone())
    });
    let outcome = driven.agent.with_transcript(|transcript| {
        RunOutcome::classify(RunEnd {
            lead: id,
            lead_name: LEAD,
            transcript,
            lead_log_failure: lead_log_failure.as_deref(),
            log_failures,
            turn_before: driven.turn_before,
            nothing_to_do: driven.nothing_to_do,
            interrupted: driven.interrupted,
            team: team.as_ref(),
            check_failure: checked
                .as_ref()
                .and_then(|c| c.failure.as_ref())
                .map(|(code, message)| (*code, message.as_str())),
            models: config.models.lead(),
            budget_refused: budget_refused.as_deref(),
        })
    });
    // `continue: troupe resume ID "…"` only when a new instruction can be answered (a script
    // whose Lead steps are used up cannot: that resume would be refused).
    let can_continue = outcome.takes_instruction;
    let mut summary = vec![format!("{LEAD}: {}", stats_text(&stats, server_answers))];
    if let Some(team) = &team {
        summary.extend(team_lines(team));
        if let Some(ledger) = &team.ledger {
            summary.push(ledger_line(ledger, config.budget));
        }
    }
    let print_summary = |printer: &mut Printer, completed: bool| {
        for line in &summary {
            printer.note(line);
        }
        if config.framing.run_hints {
            printer.note(&hints.inspect());
        }
        if let Some(epilogue) = &config.framing.epilogue {
            let ending = Ending {
                id,
                home: &hints.home,
                teammates: teammates_of(team_json.as_ref()),
                completed,
                check: checked.as_ref(),
            };
            for line in epilogue(&ending) {
                printer.note(&line);
            }
        }
    };

    match &outcome.status {
        RunStatus::LogFailed { failures } => {
            let message = escape_controls(&log_failure_message(id, failures)).into_owned();
            printer.done_json(
                id,
                &DoneStatus::Failed {
                    code: JOURNAL_FAILED,
                    message: &message,
                },
                None,
                stats,
                team_json.as_ref(),
            );
            print_summary(printer, false);
            // Every log holds everything up to its last flush, so the session stays resumable.
            let fix = log_failure_fix(
                failures.iter().map(|f| f.error.as_str()),
                driven.lease_lost.is_some(),
                config.store.is_nats(),
            );
            printer.note(&format!(
                "once the cause is fixed ({fix}), continue with: {}",
                hints.resume()
            ));
            Err(Failure::work(anyhow!("{JOURNAL_FAILED}: {message}")))
        }
        RunStatus::Answered {
            answer,
            failure,
            idle,
        } => {
            // The Lead answered; the run still failed when a teammate's last turn failed (the
            // Lead did not recover it) or the command's own check failed.
            let problem = failure.as_ref().map(|f| (f.code(), failure_message(f)));
            let status = match &problem {
                Some((code, message)) => DoneStatus::Failed { code, message },
                None => DoneStatus::Completed,
            };
            printer.done_json(id, &status, answer.as_deref(), stats, team_json.as_ref());
            if printer.mode() != OutputMode::Json
                && let Some(answer) = answer
            {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{answer}");
                let _ = out.flush();
            }
            if let Some(idle) = idle {
                let waiting = match idle.quiet_waiting {
                    0 => String::new(),
                    1 => "; 1 quiet message waits for the Lead's next turn".to_owned(),
                    n => format!("; {n} quiet messages wait for the Lead's next turn"),
                };
                let next = if can_continue {
                    "pass a PROMPT to continue the conversation"
                } else {
                    "the session's scripted model has no step left for a new instruction"
                };
                if let Some(why) = &driven.team_work {
                    printer.note(&format!(
                        "the Lead's last turn had completed; its Team's work was carried on \
                         ({why}){waiting}"
                    ));
                } else if !idle.turns_ever {
                    printer.note(&format!(
                        "nothing to resume: no turn ever ran and no prompt was recorded (the run \
                         stopped before its prompt was durable){waiting}; pass a PROMPT to start it"
                    ));
                } else {
                    printer.note(&format!(
                        "nothing to resume: the last turn completed and no messages are waiting to \
                         run{waiting} ({next})"
                    ));
                }
            } else if answer.is_none() {
                printer.note("(the Lead finished without a text answer)");
            }
            print_summary(printer, true);
            if let Some((_, message)) = problem {
                printer.note(&format!("troupe: {message}"));
                // A new instruction cannot repair a damaged teammate log: no hint to give one.
                let damaged = matches!(failure, Some(RunFailure::UnreadableLogs(_)));
                if config.framing.run_hints && can_continue && !damaged {
                    printer.note(&hints.continue_with());
                }
                return Err(Failure::reported(WORK_FAILED));
            }
            if config.framing.run_hints && can_continue {
                printer.note(&hints.continue_with());
            }
            Ok(())
        }
        RunStatus::BudgetExceeded { message } => {
            let message = escape_controls(message).into_owned();
            printer.done_json(
                id,
                &DoneStatus::Failed {
                    code: TEAM_BUDGET_EXCEEDED,
                    message: &message,
                },
                None,
                stats,
                team_json.as_ref(),
            );
            print_summary(printer, false);
            printer.note(&format!(
                "troupe: {TEAM_BUDGET_EXCEEDED}: {message}; new model calls were refused and the \
                 running turns ended. The session is resumable: continue with a higher budget: {} \
                 {}",
                hints.resume(),
                raise_hint(config.budget, driven.ledger.spent())
            ));
            Err(Failure::reported(WORK_FAILED))
        }
        RunStatus::LeadFailed { code, message } => {
            printer.done_json(
                id,
                &DoneStatus::Failed { code, message },
                None,
                stats,
                team_json.as_ref(),
            );
            print_summary(printer, false);
            printer.note(&format!(
                "troupe: the Lead's turn failed: {message} ({code}); fix it, then continue with: {}",
                hints.resume()
            ));
            Err(Failure::reported(WORK_FAILED))
        }
        RunStatus::Interrupted => {
            // Ctrl-C, a shutdown, or a turn that never ran: the session is resumable.
            printer.done_json(
                id,
                &DoneStatus::Interrupted,
                None,
                stats,
                team_json.as_ref(),
            );
            print_summary(printer, false);
            printer.note(&format!("interrupted — continue with: {}", hints.resume()));
            Err(Failure::reported(WORK_FAILED))
        }
        RunStatus::Parked { teammates } => {
            // No signal here, yet a teammate's last turn was parked: the worker hosting it was
            // stopped (Ctrl-C, SIGTERM). Its inbox is kept and a resume continues it.
            printer.done_json(
                id,
                &DoneStatus::Interrupted,
                None,
                stats,
                team_json.as_ref(),
            );
            print_summary(printer, false);
            let names = escape_controls(&teammates.join(", ")).into_owned();
            let (whose, parked, its, has, it) = if teammates.len() == 1 {
                ("teammate", "was", "its", "has", "it")
            } else {
                ("teammates", "were", "their", "have", "them")
            };
            printer.note(&format!(
                "troupe: {whose} {names} {parked} parked by {its} worker (the worker was \
                 stopped: the turn ended, the inbox kept) and still {has} work: {} continues {it}",
                hints.resume()
            ));
            printer.note(&format!("stopped — continue with: {}", hints.resume()));
            Err(Failure::reported(WORK_FAILED))
        }
    }
}

/// `--budget-tokens N` / `--budget-usd X` with twice the budget, or twice what was spent
/// (`spent`: tokens, USD) when that is more — what a resume's hint suggests: always above what
/// was used, so the resume can make a call.
fn raise_hint(budget: Budget, spent: (u64, f64)) -> String {
    let mut flags = Vec::new();
    if let Some(tokens) = budget.tokens {
        flags.push(format!(
            "--budget-tokens {}",
            tokens.max(spent.0).saturating_mul(2)
        ));
    }
    if let Some(usd) = budget.usd {
        // To the hundredth of a cent, rounded up (no float noise in the hint).
        let usd = (usd.max(spent.1) * 2.0 * 10_000.0).ceil() / 10_000.0;
        flags.push(format!("--budget-usd {usd}"));
    }
    flags.join(" ")
}

/// `$0.0123`, or `-` when nothing is priced.
pub(crate) fn cost_text(cost: Option<f64>) -> String {
    cost.map_or_else(|| "-".to_owned(), |c| format!("${c:.4}"))
}

/// The run summary's ledger line: the Team's model calls, tokens and cost, and the budget.
fn ledger_line(ledger: &Ledger, budget: Budget) -> String {
    let u = &ledger.usage;
    let mut line = format!(
        "ledger: {} model calls, {} tokens ({} prompt, {} cached, {} completion), cost {}",
        u.model_calls,
        u.tokens,
        u.prompt_tokens,
        u.cached_tokens,
        u.completion_tokens,
        cost_text(ledger.cost_usd)
    );
    if !ledger.unpriced_models.is_empty() {
        line.push_str(&format!(
            " (no price for {})",
            escape_controls(&ledger.unpriced_models.join(", "))
        ));
    }
    let mut limits = Vec::new();
    if let Some(tokens) = budget.tokens {
        limits.push(format!("{} of {tokens} tokens", u.tokens));
    }
    if let Some(usd) = budget.usd {
        limits.push(format!(
            "{} of ${usd:.4}",
            cost_text(Some(ledger.cost_usd.unwrap_or(0.0)))
        ));
    }
    if !limits.is_empty() {
        line.push_str(&format!("; budget: {}", limits.join(", ")));
    }
    line
}

/// A failure's message as shown: the teammates' names, codes and messages with control
/// characters escaped; a command's own check's message as it is.
fn failure_message(failure: &RunFailure) -> String {
    match failure {
        RunFailure::Teammates(_) | RunFailure::UnreadableLogs(_) => {
            escape_controls(&failure.message()).into_owned()
        }
        RunFailure::Check { .. } => failure.message(),
    }
}

/// Why the Team summary is empty, as shown (the `error` of its JSON).
fn problem_text(problem: &TeamReportProblem) -> String {
    match problem {
        TeamReportProblem::Invalid(failure) => {
            escape_controls(&format!("the Team log is invalid at {failure}")).into_owned()
        }
        TeamReportProblem::Unreadable(error) => error.clone(),
    }
}

/// The `team` object of the final `--json` line. A teammate whose last turn failed has
/// `"lastTurnFailed": {"code", "message"}`.
fn team_json(team: &TeamReport) -> Value {
    let members: Vec<Value> = team
        .members
        .iter()
        .map(|(member, stats)| {
            let mut row = serde_json::to_value(member).unwrap_or(Value::Null);
            if let (Some((stats, _)), Some(object)) = (stats, row.as_object_mut()) {
                object.insert("stats".to_owned(), stats_json(*stats));
            }
            if let Some(failed) = team.failed_turn_of(&member.name)
                && let Some(object) = row.as_object_mut()
            {
                object.insert(
                    "lastTurnFailed".to_owned(),
                    json!({"code": failed.code, "message": failed.message}),
                );
            }
            row
        })
        .collect();
    let mut value = json!({
        "members": members,
        "tasks": team.tasks,
        "messages": {"sent": team.sent, "delivered": team.delivered, "pending": team.pending},
    });
    if let Some(ledger) = &team.ledger {
        value["ledger"] = serde_json::to_value(ledger).unwrap_or(Value::Null);
    }
    if let Some(problem) = &team.problem {
        value["error"] = json!(problem_text(problem));
    }
    value
}

/// The stderr lines of a Team run after the Lead's: one per teammate, the tasks, the mail.
fn team_lines(team: &TeamReport) -> Vec<String> {
    const MAX_TASKS: usize = 20;
    if let Some(problem) = &team.problem {
        return vec![format!("team: {}", escape_controls(&problem_text(problem)))];
    }
    let mut lines = Vec::new();
    for (member, stats) in team.members.iter().skip(1) {
        let name = escape_controls(&member.name);
        let work = stats.map_or_else(
            || "no readable session".to_owned(),
            |(stats, model_calls)| stats_text(&stats, model_calls),
        );
        let status = match member.status {
            MemberStatus::Failed => format!(
                " [failed: {}]",
                escape_controls(&member.diagnostics.join("; "))
            ),
            MemberStatus::Provisioning => " [provisioning]".to_owned(),
            _ => team
                .failed_turn_of(&member.name)
                .map_or_else(String::new, |failed| {
                    format!(
                        " [last turn failed: {}: {}]",
                        escape_controls(&failed.code),
                        escape_controls(&failed.message)
                    )
                }),
        };
        lines.push(format!("{name}: {work}{status}"));
    }
    if team.tasks.is_empty() {
        lines.push("tasks: none".to_owned());
    } else {
        let shown: Vec<String> = team
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
        let more = team.tasks.len().saturating_sub(MAX_TASKS);
        let tail = if more > 0 {
            format!(", … and {more} more")
        } else {
            String::new()
        };
        lines.push(format!("tasks: {}{tail}", shown.join(", ")));
    }
    lines.push(format!(
        "messages: {} sent, {} delivered, {} pending",
        team.sent, team.delivered, team.pending
    ));
    lines
}

/// (name, session id) of every teammate in a Team summary's JSON, in creation order.
fn teammates_of(team: Option<&Value>) -> Vec<(String, SessionId)> {
    let members = team.and_then(|t| t["members"].as_array());
    members
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "teammate")
        .filter_map(|m| {
            let id = SessionId::new(m["id"].as_str()?).ok()?;
            Some((m["name"].as_str()?.to_owned(), id))
        })
        .collect()
}

/// What to fix before `troupe resume` after the logs failed (`JOURNAL_FAILED`), read from the
/// failures' own texts (`errors`), in this order: a full disk (the NATS server's answer
/// `insufficient resources`, or the OS's "No space left"), whose failure may also surface
/// as a lost lease (its renewal is refused too); another writer's append (a log's next seq
/// was not this writer's: a takeover after this process stalled or was cut off past the
/// lease TTL, or a foreign message on the subject); a lease another writer took over (the
/// Team runs in that process now); a lost lease (`lease_lost`, or a failure
/// naming it: the store unreachable or this process stalled past the TTL); else where the
/// logs are (the NATS server, `nats`, or the home's disk).
pub(crate) fn log_failure_fix<'a>(
    errors: impl Iterator<Item = &'a str>,
    lease_lost: bool,
    nats: bool,
) -> &'static str {
    let errors: Vec<&str> = errors.collect();
    let any = |needle: &str| errors.iter().any(|e| e.contains(needle));
    if any("insufficient resources") || any("No space left") || any("out of space") {
        if nats {
            "free space on the NATS server and restart it"
        } else {
            "free space"
        }
    } else if any("expected next seq") {
        "another process wrote to the log meanwhile — a takeover after this one stalled or was \
         cut off past the lease TTL, or a foreign message; `troupe team verify` tells which, \
         and a Team taken over and finished has nothing left to resume"
    } else if any("another writer took it over") {
        "another process took the Team over after this one stalled or was cut off past the lease \
         TTL and runs it now — troupe team show names the hosts; only once that process stops \
         too"
    } else if lease_lost || any("JOURNAL_LEASE_LOST") || any("lost its lease") {
        "the store reachable and this process not stalled past the lease TTL — a NATS server \
         whose disk filled also refuses the lease: free space there and restart it; a Team \
         another process took over meanwhile has nothing left to resume"
    } else if nats {
        "the NATS server reachable; one whose disk filled needs free space and a restart"
    } else {
        "free space, a writable home"
    }
}

#[cfg(test)]
mod tests {
    use crate::work::report::log_failure_fix;

    /// The hint follows the failure's cause: a full disk first (also when it cost the lease),
    /// then another writer, then a lost lease, then where the logs are.
    #[test]
    fn the_resume_hint_names_what_failed() {
        let full = "journal writer for session s lost its lease: insufficient resources (code \
                    503, error code 10023)";
        assert_eq!(
            log_failure_fix([full].into_iter(), true, true),
            "free space on the NATS server and restart it"
        );
        assert_eq!(
            log_failure_fix(
                ["write s: No space left on device (os error 28)"].into_iter(),
                false,
                false
            ),
            "free space"
        );
        let conflict = "append to session s expected next seq 38 but the log's next seq is 1000";
        assert!(
            log_failure_fix([conflict].into_iter(), false, true)
                .starts_with("another process wrote to the log meanwhile")
        );
        let taken = "journal writer for session s lost its lease: its key changed under it \
                     (another writer took it over): wrong last revision";
        assert!(
            log_failure_fix([taken].into_iter(), true, true)
                .starts_with("another process took the Team over")
        );
        let lost = "journal writer for session s lost its lease: wrong last sequence: 144";
        assert!(
            log_failure_fix([lost].into_iter(), false, true)
                .starts_with("the store reachable and this process not stalled past")
        );
        assert!(
            log_failure_fix(["anything"].into_iter(), true, true)
                .starts_with("the store reachable and this process not stalled past")
        );
        assert_eq!(
            log_failure_fix(["cannot reach"].into_iter(), false, true),
            "the NATS server reachable; one whose disk filled needs free space and a restart"
        );
        assert_eq!(
            log_failure_fix(["EIO"].into_iter(), false, false),
            "free space, a writable home"
        );
    }
}
