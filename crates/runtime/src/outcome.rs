//! How a run of a root session ended: the one classification behind what `troupe run` and
//! `troupe resume` report and the exit code they map it to ([`RunOutcome::classify`]).
//!
//! In order (the first that applies):
//!
//! 1. **A session log failed** ([`RunStatus::LogFailed`], `JOURNAL_FAILED`): any member's, the
//!    Lead's included (DESIGN decision 11: every member's failure is the run's failure) —
//!    whatever the Lead answered: work that could not be recorded was not done durably.
//! 2. **The Team's budget is spent** ([`RunStatus::BudgetExceeded`], `TEAM_BUDGET_EXCEEDED`):
//!    a model call of this run was refused by the budget (see [`crate::ledger`]) and no signal
//!    stopped the run. The session is resumable: a resume with a higher budget continues.
//! 3. **A teammate was parked elsewhere** ([`RunStatus::Parked`]): no signal stopped this
//!    run, yet a teammate's last turn ended `aborted` `{"kind":"shutdown"}`
//!    ([`TeamReport::parked`]) — the process hosting it (a `troupe worker` stopped with Ctrl-C
//!    or SIGTERM) parked it, and it still has work. Resumable, as an interrupted run.
//! 4. **The Lead answered** ([`RunStatus::Answered`]): its last turn ran in this run and
//!    completed, or a resume found nothing to run — and no signal stopped the run. The run
//!    still failed when an active teammate's session log cannot be read (damaged or missing:
//!    its work cannot go on; `JOURNAL_CORRUPT` or the read's own code), or else when a
//!    teammate's last turn failed and the Lead did not recover it (`TEAMMATE_FAILED`), or else
//!    when the command's own check of the result failed.
//! 5. **The Lead's turn failed** ([`RunStatus::LeadFailed`]): its last turn ran in this run and
//!    ended failed, with no signal.
//! 6. **Interrupted** ([`RunStatus::Interrupted`]): a signal, a shutdown, or a turn that never
//!    ran — even when the Lead had already answered and only teammates were still working.
//!    The session is resumable.
//!
//! Pure: the caller gathers the facts ([`RunEnd`]) after the runtime shut down.

use troupe_llm::ProviderFactory;
use troupe_protocol::SessionId;

use crate::lead_log::{FailedTurn, TeamReport, UnreadableLog};
use crate::resume_plan::takes_instruction;
use crate::runtime::LogFailure;
use troupe_session::events::TurnEndReason;
use troupe_session::{Transcript, TranscriptStats};

/// The facts a run's outcome is classified from, gathered once every agent stopped.
#[derive(Debug, Clone, Copy)]
pub struct RunEnd<'a> {
    /// The Lead's session.
    pub lead: &'a SessionId,
    /// The Lead's name (the scripted provider's agent key).
    pub lead_name: &'a str,
    /// The Lead's transcript after the shutdown.
    pub transcript: &'a Transcript,
    /// The failure that stopped the Lead's own log, if one did ([`crate::Agent::failure`]).
    pub lead_log_failure: Option<&'a str>,
    /// Every member whose log failed ([`crate::Runtime::log_failures`], complete after the
    /// shutdown).
    pub log_failures: &'a [LogFailure],
    /// The Lead's last turn number before this run gave it work.
    pub turn_before: u64,
    /// A resume that found nothing for the Lead to run.
    pub nothing_to_do: bool,
    /// Whether a signal (Ctrl-C, SIGTERM, SIGHUP) stopped the run.
    pub interrupted: bool,
    /// A Team run's report ([`TeamReport::read`]): its unrecovered teammate failures.
    pub team: Option<&'a TeamReport>,
    /// The command's own check of the result, when it has one and it failed (e.g. `troupe
    /// demo`'s `DEMO_TESTS_FAILED`): its code and message.
    pub check_failure: Option<(&'static str, &'a str)>,
    /// The run's model provider (whether the Lead can take a new instruction).
    pub models: &'a ProviderFactory,
    /// The first model call the Team's budget refused in this run: its message
    /// ([`crate::ledger::LiveLedger::refused`]; with a budget set, when this process refused
    /// nothing, a teammate's last turn the budget stopped in another process, e.g. on a
    /// worker: [`TeamReport::budget_stopped`]).
    pub budget_refused: Option<&'a str>,
}

/// How a run ended (see the module docs), with what the report of it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The classification.
    pub status: RunStatus,
    /// The Lead's statistics (its own turns, tool calls, tokens).
    pub stats: TranscriptStats,
    /// Whether the Lead can answer a new instruction ([`takes_instruction`]): a scripted
    /// Lead whose steps are used up cannot, so a `continue:` hint would be refused.
    pub takes_instruction: bool,
}

/// The classification of a run (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub enum RunStatus {
    /// A session log failed: `JOURNAL_FAILED`. Each member once, the Lead first when it is one
    /// of them; the session stays resumable (every log holds everything up to its last flush).
    LogFailed {
        /// The failed logs.
        failures: Vec<LogFailure>,
    },
    /// The Lead answered (or a resume had nothing to run).
    Answered {
        /// The Lead's last answer, if it gave one in text.
        answer: Option<String>,
        /// Set when the run failed anyway ([`RunFailure`]).
        failure: Option<RunFailure>,
        /// Set when a resume ran nothing for the Lead and no turn of it ran.
        idle: Option<Idle>,
    },
    /// The Team's budget refused a model call: `TEAM_BUDGET_EXCEEDED`. Resumable with a
    /// higher budget.
    BudgetExceeded {
        /// Which budget, and what was used.
        message: String,
    },
    /// The Lead's last turn failed.
    LeadFailed {
        /// The turn's error code.
        code: String,
        /// The turn's error message.
        message: String,
    },
    /// Interrupted: resumable.
    Interrupted,
    /// Teammates were parked by the process hosting them elsewhere (their last turn ended
    /// `aborted` `{"kind":"shutdown"}` while this run had no signal): stopped, resumable.
    Parked {
        /// The parked teammates' names, in creation order.
        teammates: Vec<String>,
    },
}

/// Why a run whose Lead answered failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunFailure {
    /// Active teammates' session logs cannot be read or replayed (damaged, unsupported or
    /// missing): the first one's code (`JOURNAL_CORRUPT`, `JOURNAL_UNSUPPORTED`,
    /// `SESSION_NOT_FOUND`, …). Nothing was repaired.
    UnreadableLogs(Vec<UnreadableLog>),
    /// Teammates' last turns failed and the Lead did not recover them: `TEAMMATE_FAILED`.
    Teammates(Vec<FailedTurn>),
    /// The command's own check failed, with its code and message.
    Check {
        /// The check's code (e.g. `DEMO_TESTS_FAILED`).
        code: &'static str,
        /// What it found.
        message: String,
    },
}

impl RunFailure {
    /// The failure's stable code: the first unreadable log's, `TEAMMATE_FAILED`, or the
    /// check's.
    pub fn code(&self) -> &'static str {
        match self {
            RunFailure::UnreadableLogs(logs) => logs.first().map_or("JOURNAL_CORRUPT", |l| l.code),
            RunFailure::Teammates(_) => TEAMMATE_FAILED,
            RunFailure::Check { code, .. } => code,
        }
    }

    /// The failure's message: for teammates, `a teammate's last turn failed and the Lead did
    /// not recover it: NAME (CODE: message)` (`teammates' last turns failed … them: A (…), B
    /// (…)` for several); for unreadable logs, `the session log of teammate NAME (session S)
    /// cannot be read, so its work cannot go on (nothing was repaired): CODE: error` (`; `
    /// between several); for a check, its message. Control characters as stored.
    pub fn message(&self) -> String {
        match self {
            RunFailure::UnreadableLogs(logs) => {
                let each: Vec<String> = logs
                    .iter()
                    .map(|l| {
                        format!(
                            "the session log of teammate {} (session {}) cannot be read, so its \
                             work cannot go on (nothing was repaired): {}: {}",
                            l.name, l.session, l.code, l.error
                        )
                    })
                    .collect();
                each.join("; ")
            }
            RunFailure::Teammates(failed) => {
                let each: Vec<String> = failed
                    .iter()
                    .map(|f| format!("{} ({}: {})", f.name, f.code, f.message))
                    .collect();
                let whose = if failed.len() == 1 {
                    "a teammate's last turn failed and the Lead did not recover it"
                } else {
                    "teammates' last turns failed and the Lead did not recover them"
                };
                format!("{whose}: {}", each.join(", "))
            }
            RunFailure::Check { message, .. } => message.clone(),
        }
    }
}

/// A resume that ran nothing for the Lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idle {
    /// Whether any turn of the Lead ever ran (`false`: the run that created the session
    /// stopped before its prompt was durable).
    pub turns_ever: bool,
    /// Quiet messages waiting for the Lead's next turn (they start none).
    pub quiet_waiting: usize,
}

/// The code of a run whose Lead answered while a teammate's last turn failed unrecovered.
pub const TEAMMATE_FAILED: &str = "TEAMMATE_FAILED";

/// The code of a run in which a member's session log failed (DESIGN decision 11).
pub const JOURNAL_FAILED: &str = "JOURNAL_FAILED";

impl RunStatus {
    /// The word of the final `--json` line: `completed`, `failed` or `interrupted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Answered { failure: None, .. } => "completed",
            RunStatus::LogFailed { .. }
            | RunStatus::Answered {
                failure: Some(_), ..
            }
            | RunStatus::LeadFailed { .. }
            | RunStatus::BudgetExceeded { .. } => "failed",
            RunStatus::Interrupted | RunStatus::Parked { .. } => "interrupted",
        }
    }

    /// Whether the run succeeded (exit 0): the Lead answered and nothing failed.
    pub fn succeeded(&self) -> bool {
        matches!(self, RunStatus::Answered { failure: None, .. })
    }
}

/// The `JOURNAL_FAILED` message for `failures` (DESIGN decision 11): each member by name, role
/// (`the Lead` when its session is `lead`, else `teammate`) and session id with its first
/// failure (the operation, the file and the OS error), e.g. `a session log failed: beta
/// (teammate, session S): write …`. Control characters as stored.
pub fn log_failure_message(lead: &SessionId, failures: &[LogFailure]) -> String {
    let each: Vec<String> = failures
        .iter()
        .map(|f| {
            let role = if f.session == *lead {
                "the Lead"
            } else {
                "teammate"
            };
            format!("{} ({role}, session {}): {}", f.name, f.session, f.error)
        })
        .collect();
    let whose = if failures.len() == 1 {
        "a session log failed"
    } else {
        "session logs failed"
    };
    format!("{whose}: {}", each.join("; "))
}

impl RunOutcome {
    /// Classifies a run from `end` (see the module docs).
    pub fn classify(end: RunEnd<'_>) -> Self {
        let t = end.transcript;
        let stats = t.stats();
        let takes_instruction = takes_instruction(end.models, end.lead_name, t.spent_model_calls());
        let status = classify_status(&end);
        Self {
            status,
            stats,
            takes_instruction,
        }
    }
}

fn classify_status(end: &RunEnd<'_>) -> RunStatus {
    let t = end.transcript;
    let mut failures = end.log_failures.to_vec();
    if let Some(failure) = end.lead_log_failure
        && failures.iter().all(|f| f.session != *end.lead)
    {
        failures.insert(
            0,
            LogFailure {
                session: end.lead.clone(),
                name: end.lead_name.to_owned(),
                error: failure.to_owned(),
            },
        );
    }
    if !failures.is_empty() {
        return RunStatus::LogFailed { failures };
    }
    if let Some(message) = end.budget_refused
        && !end.interrupted
    {
        return RunStatus::BudgetExceeded {
            message: message.to_owned(),
        };
    }
    if !end.interrupted
        && let Some(team) = end.team
        && !team.parked.is_empty()
    {
        return RunStatus::Parked {
            teammates: team.parked.clone(),
        };
    }
    let last_turn = t.last_turn();
    let last_end = t.last_turn_end();
    let ran = last_turn > end.turn_before;
    let completed = ran && last_end == Some(&TurnEndReason::Completed) && !end.interrupted;
    if completed || (end.nothing_to_do && !end.interrupted) {
        let failure = unreadable(end.team)
            .or_else(|| unrecovered(end.team))
            .or_else(|| {
                let (code, message) = end.check_failure?;
                Some(RunFailure::Check {
                    code,
                    message: message.to_owned(),
                })
            });
        let idle = (end.nothing_to_do && !ran).then(|| Idle {
            turns_ever: last_turn > 0,
            quiet_waiting: t.next_step().len(),
        });
        return RunStatus::Answered {
            answer: t.last_answer().map(str::to_owned),
            failure,
            idle,
        };
    }
    if ran
        && !end.interrupted
        && let Some(TurnEndReason::Failed { code, message }) = last_end
    {
        return RunStatus::LeadFailed {
            code: code.clone(),
            message: message.clone(),
        };
    }
    RunStatus::Interrupted
}

/// The failure of a Team run whose Lead answered: every active teammate whose session log
/// cannot be read (a damaged log is reported, never passed over).
fn unreadable(team: Option<&TeamReport>) -> Option<RunFailure> {
    let logs = &team?.unreadable;
    (!logs.is_empty()).then(|| RunFailure::UnreadableLogs(logs.clone()))
}

/// The failure of a Team run whose Lead answered: every teammate whose last turn failed (the
/// Lead did not recover it).
fn unrecovered(team: Option<&TeamReport>) -> Option<RunFailure> {
    let failed = &team?.failed_turns;
    (!failed.is_empty()).then(|| RunFailure::Teammates(failed.clone()))
}
