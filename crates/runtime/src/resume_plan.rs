//! What a resume of a root session will do, and why (DESIGN decision 10: recovery decides from
//! the log): the [`ResumePlan`], read from the stored log *before* this process touches it.
//!
//! [`Runtime::resume_root`](crate::Runtime::resume_root) closes a cut turn and redelivers mail,
//! which may start turns at once; whether the Lead's last turn finished must therefore be read
//! first, without the lock, from the log as the stop left it. After the recovery,
//! [`ResumePlan::next_step`] decides what the Lead runs now ([`ResumeStep`]), from the plan and
//! the Lead's inbox as the recovery left it:
//!
//! 1. a new instruction (a prompt), if one was given;
//! 2. else, for a turn that did not finish and has no continuation waiting yet, a continuation
//!    message ([`continuation_message`]) — after the waking items already waiting, each of
//!    which keeps its own turn, so the Lead takes the same turns it would have taken without
//!    the stop;
//! 3. else the waking items waiting in the inbox (follow-ups, wakeup mail), in order;
//! 4. else, when the recovery's redelivered mail already started a Lead turn, that turn;
//! 5. else nothing: quiet mail waits in the next-step list for the Lead's next turn, whatever
//!    starts it (REFERENCE c.10: `send_message` never wakes its target).
//!
//! A Team's teammates are continued by the Team recovery itself (`resume_root`), not here.

use troupe_journal::Journal;
use troupe_llm::{ModelSpec, ProviderFactory};
use troupe_protocol::{Event, EventDraft, MessageSource, SessionHeader, SessionId, UserMessage};
use troupe_tools::SandboxPolicy;

use crate::agent::{Agent, AgentStatus};
use crate::error::RuntimeError;
use crate::runtime::Runtime;
use troupe_session::events::{AgentConfigRecord, Profile, TeammateModels, TurnEndReason};
use troupe_session::{CONTINUATION_SOURCE, ContinuationRule, OpenTurn, Transcript};
use troupe_session::{RoleProbe, SessionRole};

/// The text sent to the Lead when a resume continues an interrupted or failed turn; `{why}`
/// is replaced by the reason ([`ResumePlan::unfinished`]).
pub const CONTINUATION: &str = "The previous turn did not finish: {why}. Any tool call that was \
    running then has a result saying whether it ran. Check the current state first (re-read the \
    files you were changing, inspect the workspace), then continue the task from where it \
    stopped and answer when it is done.";

/// The message that continues a turn that did not finish because `why`: [`CONTINUATION`] with
/// `{why}` filled in, from source `{"kind": "resume", "reason": why}`.
pub fn continuation_message(why: &str) -> UserMessage {
    UserMessage::text(
        CONTINUATION.replace("{why}", why),
        MessageSource::kind(CONTINUATION_SOURCE).with("reason", why.to_owned()),
    )
}

/// Why a turn a crash or kill cut did not finish (the `{why}` of [`CONTINUATION`]).
const STOPPED: &str = "the process running it stopped";

/// What a stored session is, for a resume: a root with its [`ResumePlan`], or a subagent child
/// (a teammate or another child), which is resumed through its root only.
#[derive(Debug)]
pub enum StoredSession {
    /// A root session (a Lead, with or without a Team, or a fork) with an agent configuration.
    Root(Box<ResumePlan>),
    /// A subagent child: `role` is [`SessionRole::Teammate`] or [`SessionRole::Child`];
    /// `parent` is its header's `parentSession` (`None`: it has none, and cannot be resumed).
    Child {
        /// The child's role.
        role: SessionRole,
        /// The session to resume instead.
        parent: Option<SessionId>,
    },
}

/// Where a root session's Lead stopped, read from its log before a resume touches it (see the
/// module docs).
#[derive(Debug, Clone)]
pub struct ResumePlan {
    id: SessionId,
    config: AgentConfigRecord,
    last_turn: u64,
    unfinished: Option<String>,
    owed_continuations: usize,
    spent_model_calls: usize,
    teammate_specs: Vec<ModelSpec>,
}

impl ResumePlan {
    /// Reads the session `id` without locking it and plans its resume. Writes nothing.
    ///
    /// A subagent child (header `origin: "subagent"`, with or without a parent) is
    /// [`StoredSession::Child`], whatever its events hold (they are not replayed).
    ///
    /// # Errors
    /// The journal's read errors (`SESSION_NOT_FOUND`, `JOURNAL_CORRUPT`, …, wrapped in
    /// [`RuntimeError::Journal`]); `RUNTIME_INVALID_EVENT` for a runtime event that does not
    /// replay; `NOT_RESUMABLE` for a root without an `agent/config` ("it has no agent
    /// configuration (not created by troupe run)").
    pub fn read(journal: &Journal, id: &SessionId) -> Result<StoredSession, RuntimeError> {
        let replay = journal.read(id)?;
        Self::of(id, &replay.header, &replay.events)
    }

    /// [`ResumePlan::read`] over a log already in memory (`header` and its `events`).
    ///
    /// # Errors
    /// As [`ResumePlan::read`], without the journal's.
    pub fn of(
        id: &SessionId,
        header: &SessionHeader,
        events: &[Event],
    ) -> Result<StoredSession, RuntimeError> {
        if header.origin.as_deref() == Some(troupe_session::SUBAGENT_ORIGIN) {
            let mut probe = RoleProbe::new(header);
            for event in events {
                probe.observe(event);
            }
            return Ok(StoredSession::Child {
                role: probe.role(),
                parent: header.parent_session.clone(),
            });
        }
        let lead = Transcript::fold(header.seed_len(), events)?;
        let config = lead
            .config()
            .cloned()
            .ok_or_else(|| RuntimeError::NotResumable {
                id: id.to_string(),
                reason: "it has no agent configuration (not created by troupe run)".to_owned(),
            })?;
        // Every model a teammate of this Lead can run as its own: each was chosen from a
        // `teammateModels` its configuration recorded (the latest, or an earlier one).
        let mut teammate_specs: Vec<ModelSpec> = Vec::new();
        for event in events
            .iter()
            .skip(usize::try_from(header.seed_len()).unwrap_or(0))
        {
            if event.kind != troupe_protocol::event_types::AGENT_CONFIG {
                continue;
            }
            let Ok(recorded) = serde_json::from_value::<AgentConfigRecord>(event.data.clone())
            else {
                continue;
            };
            for spec in recorded
                .teammate_models
                .iter()
                .flat_map(TeammateModels::specs)
            {
                if !teammate_specs.contains(spec) {
                    teammate_specs.push(spec.clone());
                }
            }
        }
        Ok(StoredSession::Root(Box::new(Self {
            id: id.clone(),
            teammate_specs,
            config,
            last_turn: lead.last_turn(),
            unfinished: unfinished(&lead),
            owed_continuations: lead.owed_continuations(ContinuationRule::Root, OpenTurn::Cut),
            spent_model_calls: lead.spent_model_calls(),
        })))
    }

    /// The session.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The recorded configuration (the latest `agent/config`: an earlier resume's model
    /// override included).
    pub fn config(&self) -> &AgentConfigRecord {
        &self.config
    }

    /// Every model a teammate of this Lead may run as its own: the specs of every
    /// [`TeammateModels`] its log recorded (teammates keep the model they were created with,
    /// so earlier choices count too). A front end sets these up (API keys, scripts) before
    /// the resume writes anything.
    pub fn teammate_specs(&self) -> &[ModelSpec] {
        &self.teammate_specs
    }

    /// Whether the session is a Team root (its configuration has the Team profile).
    pub fn is_team(&self) -> bool {
        self.config.profile == Profile::Team
    }

    /// The Lead's last turn number when it stopped: turns after it are this resume's.
    pub fn last_turn(&self) -> u64 {
        self.last_turn
    }

    /// Why the Lead's last turn did not finish, when it did not: `the process running it
    /// stopped` (an open turn without its final answer, or one recovery closed as interrupted),
    /// `it was interrupted` (aborted), `it failed (CODE: message)`. An open turn whose final
    /// answer is already in the log ([`Transcript::answered_open_turn`]) lacks only its
    /// `turn/end`: its work is done, so it is not unfinished.
    pub fn unfinished(&self) -> Option<&str> {
        self.unfinished.as_deref()
    }

    /// Whether the Lead's last turn was cut because the process running it stopped (a crash,
    /// a kill -9, a lost host: [`ResumePlan::unfinished`] is `the process running it
    /// stopped`) — not interrupted by the user, not failed, not finished. What `troupe worker
    /// --adopt` takes over once the session's lease is free (DESIGN §7 "Failover").
    pub fn stopped_mid_turn(&self) -> bool {
        self.unfinished.as_deref() == Some(STOPPED)
    }

    /// How many continuation turns the Lead is owed ([`Transcript::owed_continuations`] under
    /// [`ContinuationRule::Root`], an open turn counted as cut): one per turn that did not
    /// finish and that no continuation an earlier resume queued answers yet (a continuation
    /// already waiting in the inbox counts, so it is not queued twice).
    pub fn owed_continuations(&self) -> usize {
        self.owed_continuations
    }

    /// The Lead's model calls that count as taken ([`Transcript::spent_model_calls`]): where a
    /// scripted Lead's script continues.
    pub fn spent_model_calls(&self) -> usize {
        self.spent_model_calls
    }

    /// What the reopened Lead `agent` runs now (see the module docs): `prompt` when given,
    /// else a continuation of the unfinished turn, else the waking items of its inbox, else
    /// nothing. Reads the inbox as the recovery left it; changes nothing (see
    /// [`ResumeStep::take`]).
    pub fn next_step(&self, agent: &Agent, prompt: Option<String>) -> ResumeStep {
        let waiting = agent.with_transcript(|t| !t.next_turn().is_empty());
        if let Some(prompt) = prompt {
            return ResumeStep::Prompt(prompt);
        }
        if self.owed_continuations > 0 {
            return ResumeStep::Continue {
                why: self
                    .unfinished
                    .clone()
                    .unwrap_or_else(|| STOPPED.to_owned()),
                turns: self.owed_continuations,
                waiting_first: waiting,
            };
        }
        if waiting {
            ResumeStep::RunWaiting
        } else if agent.status() == AgentStatus::Running {
            ResumeStep::RecoveryStarted
        } else {
            ResumeStep::Nothing
        }
    }
}

/// What a resumed Lead runs now ([`ResumePlan::next_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeStep {
    /// A new instruction: queued as a follow-up from source `user`.
    Prompt(String),
    /// Every cut turn gets its own continuation turn ([`continuation_message`], `turns` of
    /// them: [`ResumePlan::owed_continuations`]); when `waiting_first`, the waking items
    /// already waiting run first, each in its own turn.
    Continue {
        /// Why the (last) turn did not finish ([`ResumePlan::unfinished`]).
        why: String,
        /// How many continuation turns are queued (at least 1).
        turns: usize,
        /// Whether waking items wait in the inbox (they run before the continuation).
        waiting_first: bool,
    },
    /// The waking items waiting in the inbox (e.g. a prompt the stopped run never claimed)
    /// run, in order; they carry the work on, so no continuation is added.
    RunWaiting,
    /// The recovery's redelivered mail already started a Lead turn (it claimed the mail, so
    /// nothing waits any more): that turn is this run's work, and the run waits for it like
    /// for any other (it must not be shut down under it).
    RecoveryStarted,
    /// Nothing for the Lead to run.
    Nothing,
}

/// What [`ResumeStep::take`] set going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeStarted {
    /// Whether the Lead has work now (a queued prompt or continuation, or waking items it
    /// started).
    pub lead_runs: bool,
    /// Whether other agents of the runtime are live (a Team's recovery may have woken
    /// teammates with waiting messages even when the Lead has nothing to do), or members of
    /// its Team run in other processes (a worker hosting a teammate of a Lead taken over
    /// after its process died): the run waits for them too.
    pub others_run: bool,
}

impl ResumeStarted {
    /// Whether the run has anything to wait for.
    pub fn any(self) -> bool {
        self.lead_runs || self.others_run
    }
}

impl ResumeStep {
    /// Carries the step out on the reopened Lead `agent` of `runtime`.
    ///
    /// Durability: a prompt or a continuation is durable in the Lead's inbox
    /// (`agent/inbox/spliced`, flushed) before this returns, so a crash right after leaves it
    /// waiting for the next resume — which then finds the continuation waiting
    /// ([`ResumePlan::owed_continuations`]) and does not queue it twice; a crash before the
    /// flush leaves the inbox as the recovery left it, and the next resume plans the same step
    /// again. Waking parked items writes nothing.
    ///
    /// # Errors
    /// The inbox append's errors (a journal failure, `AGENT_DISPOSED`).
    pub async fn take(
        self,
        runtime: &Runtime,
        agent: &Agent,
    ) -> Result<ResumeStarted, RuntimeError> {
        let lead_runs = match self {
            ResumeStep::Prompt(prompt) => {
                let msg = UserMessage::text(prompt, MessageSource::kind("user"));
                agent.followup(msg).await?;
                true
            }
            ResumeStep::Continue { why, turns, .. } => {
                for _ in 0..turns {
                    agent.followup(continuation_message(&why)).await?;
                }
                true
            }
            ResumeStep::RunWaiting => agent.wake_parked(),
            ResumeStep::RecoveryStarted => true,
            ResumeStep::Nothing => false,
        };
        Ok(ResumeStarted {
            lead_runs,
            others_run: runtime.live_ids().len() > 1
                || runtime.teams().running_elsewhere(agent.id()) > 0,
        })
    }
}

/// Whether the Lead named `agent` can answer a new instruction after `spent` model calls of its
/// own ([`Transcript::spent_model_calls`]): always with a real model; with a script, while the
/// script has a step left for it.
pub fn takes_instruction(models: &ProviderFactory, agent: &str, spent: usize) -> bool {
    match models {
        ProviderFactory::Http(_) => true,
        ProviderFactory::Scripted(script) => script.steps(agent).is_ok_and(|steps| spent < steps),
    }
}

/// Records a `--model`/`--base-url`/`--api-key-env`/`--tool-choice` override, a stricter
/// `--sandbox` / `--network`, other `--mcp-config` servers (`mcp_servers`, recorded as given),
/// a `--teammate-model` (`teammate_models`: `Some` replaces the recorded [`TeammateModels`]
/// of a Team root, for the teammates it creates from now on; existing teammates keep theirs),
/// or another `--approval` / `--approval-timeout` (`approval`) of a resumed session as a new
/// `agent/config` holding them (the latest one wins), so a later plain resume keeps using
/// them. Everything else of the recorded configuration — its project instructions included —
/// is copied unchanged. Nothing is written when all are the ones already recorded, or when
/// the session has no configuration.
///
/// Durability: one append, then a flush, before the Lead is given any work. A crash before the
/// flush completes loses only the record: that run's agents already ran under the stricter
/// policy (it is the runtime's option, [`RuntimeOptions::sandbox`](crate::RuntimeOptions)),
/// and a later plain resume runs with the previous record — pass the flag again. After the
/// flush the override is the session's model and the stricter policy the recorded one.
///
/// # Errors
/// The append's and the flush's journal errors.
pub async fn record_model_override(
    agent: &Agent,
    spec: &ModelSpec,
    sandbox: SandboxPolicy,
    mcp_servers: Option<serde_json::Value>,
    teammate_models: Option<&TeammateModels>,
    approval: troupe_session::approval::ApprovalPolicy,
) -> Result<(), RuntimeError> {
    let Some(mut config) = agent.with_transcript(|t| t.config().cloned()) else {
        return Ok(());
    };
    let teammates = teammate_models
        .map(|models| (!models.is_empty()).then(|| models.clone()))
        .unwrap_or_else(|| config.teammate_models.clone());
    if config.model == *spec
        && config.sandbox_policy() == sandbox
        && config.mcp_servers == mcp_servers
        && config.teammate_models == teammates
        && config.approval_policy() == approval
    {
        return Ok(());
    }
    config.model = spec.clone();
    config.mcp_servers = mcp_servers;
    if config.sandbox_policy() != sandbox {
        config.sandbox = Some(sandbox);
    }
    config.teammate_models = teammates;
    if config.approval_policy() != approval {
        config.approval = Some(approval);
    }
    agent.append_records(vec![EventDraft::new(
        troupe_protocol::event_types::AGENT_CONFIG,
        crate::record::to_value(&config),
    )])?;
    agent.writer().flush().await?;
    Ok(())
}

/// Why the last turn of the log folded into `t` did not finish, if it did not.
fn unfinished(t: &Transcript) -> Option<String> {
    if t.open_turn().is_some() {
        // An open turn whose final answer is already in the log lacks only its `turn/end`
        // (another flush of the same log, e.g. a Team commit, made the answer durable just
        // before the stop): its work is done, so it gets no continuation.
        return (!t.answered_open_turn()).then(|| STOPPED.to_owned());
    }
    match t.last_turn_end() {
        Some(TurnEndReason::Interrupted) => Some(STOPPED.to_owned()),
        Some(TurnEndReason::Aborted { reason }) if reason["kind"] == "budget" => Some(format!(
            "the Team's budget stopped it ({}: {})",
            reason["code"].as_str().unwrap_or("TEAM_BUDGET_EXCEEDED"),
            reason["message"].as_str().unwrap_or("the budget is spent")
        )),
        Some(TurnEndReason::Aborted { .. }) => Some("it was interrupted".to_owned()),
        Some(TurnEndReason::Failed { code, message }) => {
            Some(format!("it failed ({code}: {message})"))
        }
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use troupe_llm::{AssistantMessage, ToolCall};
    use troupe_protocol::{Seq, event_types as ty};
    use troupe_session::events::{AssistantRecord, ToolResultRecord, TurnEnd, TurnStart};

    fn events(kinds: &[(&str, Value)]) -> Vec<Event> {
        kinds
            .iter()
            .enumerate()
            .map(|(seq, (kind, data))| {
                EventDraft::new(*kind, data.clone()).into_event(Seq(seq as u64), 1)
            })
            .collect()
    }

    fn assistant(calls: &[&str]) -> Value {
        crate::record::to_value(&AssistantRecord {
            turn: 1,
            step: 1,
            message: AssistantMessage {
                content: calls.is_empty().then(|| "done".to_owned()),
                reasoning_content: None,
                tool_calls: calls
                    .iter()
                    .map(|id| ToolCall {
                        id: (*id).to_owned(),
                        name: "read".to_owned(),
                        arguments: json!({}),
                    })
                    .collect(),
            },
            usage: None,
            finish_reason: None,
            truncated_calls: Vec::new(),
        })
    }

    fn turn_start(turn: u64) -> Value {
        crate::record::to_value(&TurnStart { turn })
    }

    /// Whether the last turn of `events` holds its final answer, as the plan reads it.
    fn answered(events: &[Event]) -> bool {
        Transcript::fold(0, events).unwrap().answered_open_turn()
    }

    /// (Moved from the CLI, where a second definition scanned the events; the plan now uses
    /// [`Transcript::answered_open_turn`].)
    #[test]
    fn an_open_turn_with_its_final_answer_needs_no_continuation() {
        let call = assistant(&["c1"]);
        let text = assistant(&[]);
        let result = crate::record::to_value(&ToolResultRecord {
            turn: 1,
            step: 1,
            call_id: "c1".to_owned(),
            name: "read".to_owned(),
            is_error: false,
            code: None,
            content: "{}".to_owned(),
            message_id: None,
            source_event_seqs: Vec::new(),
            seen: None,
            changed: None,
        });
        let end = crate::record::to_value(&TurnEnd {
            turn: 1,
            reason: TurnEndReason::Completed,
        });
        let open_after_call = events(&[
            (ty::TURN_START, turn_start(1)),
            (ty::ASSISTANT_MESSAGE, call.clone()),
        ]);
        assert!(!answered(&open_after_call));
        let open_after_answer = events(&[
            (ty::TURN_START, turn_start(1)),
            (ty::ASSISTANT_MESSAGE, call),
            (ty::TOOL_RESULT, result),
            (ty::ASSISTANT_MESSAGE, text.clone()),
        ]);
        assert!(answered(&open_after_answer));
        // An answer of an earlier turn does not count for a new one.
        let new_turn = events(&[
            (ty::TURN_START, turn_start(1)),
            (ty::ASSISTANT_MESSAGE, text),
            (ty::TURN_END, end),
            (ty::TURN_START, turn_start(2)),
        ]);
        assert!(!answered(&new_turn));
        // The plan agrees: only the open turn without its answer is unfinished.
        let t = Transcript::fold(0, &open_after_call).unwrap();
        assert_eq!(
            unfinished(&t).as_deref(),
            Some("the process running it stopped")
        );
        let t = Transcript::fold(0, &open_after_answer).unwrap();
        assert_eq!(unfinished(&t), None);
    }

    #[test]
    fn the_continuation_names_why() {
        let text = continuation_message("it was interrupted").content[0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(text.starts_with("The previous turn did not finish: it was interrupted."));
    }
}
