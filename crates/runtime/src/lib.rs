//! Troupe's agent runtime (DESIGN §4, REFERENCE a.9, a.11, b).
//!
//! - [`Agent`]: a session log + a durable inbox + a model + a tool scope, driven by one task;
//!   the turn loop records every request, coalesced stream chunk, answer, tool call and result,
//!   so the model history is the fold of the log (`troupe_session::Transcript`).
//! - [`Runtime`]: the registry of live agents, root sessions (create / cold resume with
//!   REFERENCE a.9's synthetic closers, each cut tool call decided from the logs where they
//!   tell — DESIGN decision 10: `troupe_session::CallResolution`), continuable children (spawn / fork providers,
//!   descriptor, exact-parent authorization, follow-ups to live or cold children, interrupt
//!   with keep-inbox, exact-child drain, settlement notices) and shutdown.
//! - The default profile's `subagent` / `subagent_fork` tools.
//!
//! What the log's events mean — their payloads, the plain data they embed, the transcript
//! fold, session roles — is the session model, `troupe_session`, beneath this crate: a reader
//! of logs (the web panel, `troupe log` / `sessions`) uses it without the runtime.
//!
//! - [`instructions`]: the `AGENTS.md` files a new session starts with, found and read (what
//!   is recorded of them is `troupe_session::instructions`).
//! - [`user_mail`]: messages from the user to a Team (`troupe send`), through the Team's
//!   mailbox: [`crate::team::TeamService::user_send`] in the running process, [`append_user_message`] to a
//!   stopped Team.
//! - [`ledger`]: the live ledger of a run ([`ledger::LiveLedger`]: every member's usage as it
//!   is recorded, priced) and the Team's budget (a spent budget refuses new model calls with
//!   `TEAM_BUDGET_EXCEEDED`; the Lead gets one notice at 80 %: [`deliver_budget_notice`]).
//! - [`LogFailure`]: every agent whose session log failed, collected by the runtime (DESIGN
//!   decision 11: every member's failure is the run's failure).
//!
//! The decisions a front end (the `troupe` binary) only calls and prints:
//! - [`ResumePlan`]: what a resume of a root session will do and why, read from its log before
//!   recovery touches it ([`ResumeStep`]: a prompt, a continuation of a cut turn, the waiting
//!   messages, or nothing).
//! - [`RunOutcome`]: how a run ended (`JOURNAL_FAILED`, answered — possibly with
//!   `TEAMMATE_FAILED` —, the Lead's turn failed, interrupted), from the facts gathered after
//!   the shutdown ([`RunEnd`]).
//! - [`LeadLog`]: the one Lead-log fold entry point (the journal's selective scan, the Team
//!   fold, the Lead's configuration, the replay `troupe team verify` checks), and
//!   [`TeamReport`], a Team run's summary folded from the logs; [`LeadLog::receipts`], each
//!   message's life read from the Lead's and the targets' logs.
//! - Time travel: [`Cut`] (a past point of a Lead log, [`troupe_journal::At`]: a seq or a time) folded with
//!   [`LeadLog::read_at`] (the teammates' logs cut at the same time), [`troupe_team::TeamShowFull`] (the
//!   object `troupe team show --json` prints), and [`read_timeline`], one line per Team event
//!   (`troupe team log`).
//!
//! Invariants: the runtime never prints (progress goes to a broadcast channel); accepted inbox
//! items are durable before an operation returns and are never dropped by settlement or
//! shutdown (DESIGN decision 2: inboxes are parked); a tool call is durable before it runs; a
//! turn's start and its first claim are one append; the configured secret values
//! ([`RuntimeOptions::secrets`]) are replaced by `***` in everything recorded or reported, and
//! the secret variables ([`RuntimeOptions::secret_env`]) are kept from tool processes; every
//! agent's `bash` runs under its recorded sandbox made at least as strict as
//! [`RuntimeOptions::sandbox`], and a child records its parent's effective sandbox (never
//! looser); process
//! groups a crash left running (`tool/process`) are stopped before recovery closes their calls,
//! also in the non-resident children of a resumed root.

mod agent;
pub mod approval;
mod control;
mod error;
pub mod instructions;
mod lead_log;
pub mod ledger;
mod line_pick;
mod outcome;
mod prompt;
mod radar;
mod record;
mod recovery;
mod resume_plan;
mod runtime;
mod subagent;
pub mod team;
mod teammate;
mod teammate_scan;
mod time_travel;
pub mod user_mail;
pub mod worktree;

pub use agent::{
    APPROVAL_DENIED, APPROVAL_TIMED_OUT, Agent, AgentProgress, AgentSetup, AgentStatus,
    ChunkPolicy, MAX_TRUNCATED_REPLIES_IN_A_ROW, Progress, SUMMARY_MAX_CHARS,
    TOOL_ARGUMENTS_TRUNCATED, deliver_budget_notice, give_due_budget_notice,
};
pub use control::{ChildControl, ChildSpec, ChildStart, ControlFuture};
pub use error::RuntimeError;
pub use instructions::{Discovery, SkippedFile};
pub use lead_log::{
    Cut, FailedTurn, FoldFailure, LeadLog, LeadLogError, LeadRead, TeamReport, TeamReportProblem,
    UnreadableLog, Violation,
};
pub use outcome::{
    Idle, JOURNAL_FAILED, RunEnd, RunFailure, RunOutcome, RunStatus, TEAMMATE_FAILED,
    log_failure_message,
};
pub use prompt::{TeamRole, TeamWorkspace, default_system_prompt, team_policy};
pub use radar::write_conflicts;
pub use resume_plan::{
    CONTINUATION, ResumePlan, ResumeStarted, ResumeStep, StoredSession, continuation_message,
    record_model_override, takes_instruction,
};
pub use runtime::{
    LogFailure, ModelSource, Runtime, RuntimeOptions, TeamLedgers, TeamLinkFactory, stored_config,
};
pub use teammate_scan::TeammateScans;
pub use time_travel::{TimeTravelError, read_timeline};
pub use user_mail::{UserMailError, UserMailReceipt, append_user_message, user_message_content};
