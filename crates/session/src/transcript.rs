//! The fold of a session log into what an agent needs: the model history, the pending inbox,
//! the turn/step state, recovery closers and statistics.
//!
//! The live agent applies every event it appends, so its state is always the fold of its log;
//! a cold resume folds the file. Pure: no IO, no clock.

use std::collections::{HashMap, HashSet};

use serde::de::DeserializeOwned;
use serde_json::json;
use troupe_protocol::{Event, EventDraft, MessageId, UserMessage, event_types as ty};

use crate::approval::{ApprovalDecided, ApprovalEntry, ApprovalRequested, Decision};
use crate::chat::{ChatMessage, ToolCall};
use crate::effect::FileEffect;
use crate::error::InvalidEvent;
use crate::events::{
    AgentConfigRecord, AssistantRecord, Descriptor, InboxSplice, InboxTarget, StepMark,
    ToolCallRecord, ToolProcessRecord, ToolResultRecord, TurnEnd, TurnEndReason, TurnStart,
};

/// Per-agent counters over the own suffix (for summaries and progress).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TranscriptStats {
    /// Turns started.
    pub turns: u64,
    /// Tool calls made.
    pub tool_calls: u64,
    /// Prompt tokens reported by the model, summed over calls.
    pub tokens_in: u64,
    /// Completion tokens reported by the model, summed over calls.
    pub tokens_out: u64,
}

/// The folded state of one session log (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    seed_len: u64,
    next_seq: u64,
    last_time: u64,
    history: Vec<ChatMessage>,
    next_turn: Vec<UserMessage>,
    next_step: Vec<UserMessage>,
    last_turn: u64,
    open_turn: Option<u64>,
    open_step: Option<u64>,
    step_calls: Vec<ToolCall>,
    /// The open step's calls that have a `tool/call`: its seq and recorded file effect.
    started: HashMap<String, (u64, Option<FileEffect>)>,
    /// The open turn's latest `assistant/message` asked for no tool call: its final answer is
    /// recorded and only its `turn/end` may be missing.
    final_answer: bool,
    call_processes: HashMap<String, ToolProcessRecord>,
    answered: HashSet<String>,
    model_calls: usize,
    /// Own model calls whose tool calls all ended without effect (see [`Transcript::spent_model_calls`]).
    void_model_calls: usize,
    /// The latest own model call's tool calls still without a result, and how the results so
    /// far stand (see [`VoidCandidate`]).
    void_candidate: Option<VoidCandidate>,
    config: Option<AgentConfigRecord>,
    descriptor: Option<Descriptor>,
    last_turn_end: Option<TurnEndReason>,
    last_text: Option<String>,
    last_answer: Option<String>,
    accepted: HashSet<MessageId>,
    accepted_user: bool,
    /// Consecutive `assistant/message`s of the open turn with truncated tool calls.
    truncated_streak: usize,
    /// How many own closed turns that did not finish no continuation answered yet, per
    /// [`ContinuationRule`] (see [`Transcript::owed_continuations`]).
    owed_root: usize,
    owed_teammate: usize,
    /// Per workspace-relative path, what the own session last saw of the file (see
    /// [`Transcript::seen_files`]).
    seen_files: HashMap<String, Option<String>>,
    /// The own approval requests, in order, with their decisions (see
    /// [`Transcript::approvals`]).
    approvals: Vec<ApprovalEntry>,
    /// Commands an own `always` decision lets run outside the sandbox, with that request's id.
    always: HashMap<String, String>,
    stats: TranscriptStats,
}

/// The source kind of a continuation: the message `troupe resume` (for a root) or the Team
/// recovery (for a teammate) queues to continue a turn that did not finish.
pub const CONTINUATION_SOURCE: &str = "resume";

/// Which turns a resume continues ([`Transcript::owed_continuations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContinuationRule {
    /// A root (a Lead, a `troupe run` session), continued by `troupe resume`: every turn that
    /// did not complete — cut by a stop (`interrupted`), cancelled (`aborted`, any cause) or
    /// failed.
    Root,
    /// A teammate, continued by the Team recovery: a turn cut by a stop (`interrupted`, or
    /// `aborted` by the user, a shutdown or the Team's budget — `{"kind":"budget"}`, see
    /// [`crate::ledger`]). A turn the Lead interrupted on purpose (`aborted`
    /// `{"kind":"parent"}`) or that failed is not (the Lead decides what follows).
    Teammate,
}

impl ContinuationRule {
    fn owes(self, reason: &TurnEndReason) -> bool {
        match reason {
            TurnEndReason::Completed => false,
            TurnEndReason::Interrupted => true,
            TurnEndReason::Aborted { reason } => {
                self == Self::Root
                    || reason["kind"] == "user"
                    || reason["kind"] == "shutdown"
                    || reason["kind"] == "budget"
            }
            TurnEndReason::Failed { .. } => self == Self::Root,
        }
    }
}

/// What an open turn of a transcript is, for [`Transcript::owed_continuations`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenTurn {
    /// The log is a stopped process's (a stored log read before recovery): an open turn
    /// without its final answer was cut, and the recovery closes it as `interrupted`.
    Cut,
    /// The transcript is a live agent's: an open turn is running, not cut.
    Running,
}

/// Tool-result codes that say a call had no effect: it was cancelled or never started (see
/// [`Transcript::spent_model_calls`]).
const VOID_CODES: [&str; 4] = [
    "TOOL_CANCELED",
    "TOOL_NOT_STARTED",
    "TEAM_WAIT_ABORTED",
    "CANCELLED",
];

/// Tools that change nothing (DESIGN decision 10): the core readers and the Team tools that
/// only read or wait. Running one again has the effect of running it once — none — so after a
/// crash such a call is resolved as not run, and a step cut short whose other calls were such
/// reads is asked again whole (see [`Transcript::spent_model_calls`]).
pub const READ_ONLY_TOOLS: [&str; 7] = [
    "read",
    "glob",
    "grep",
    "list_agents",
    "team_task_get",
    "team_task_list",
    "wait_agent",
];

/// A call of the open step that has no `tool/result` (what recovery must resolve).
#[derive(Debug, Clone, PartialEq)]
pub struct UnansweredCall {
    /// The call as the model asked for it.
    pub call: ToolCall,
    /// The seq of its `tool/call`, when it started (`None`: it never started).
    pub call_seq: Option<u64>,
    /// The file effect its `tool/call` recorded (`write`/`edit`).
    pub effect: Option<FileEffect>,
}

/// How recovery resolves a started call a crash cut (DESIGN decision 10), and so the
/// `tool/result` it writes for it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallResolution {
    /// The logs show it had no effect: `TOOL_NOT_STARTED` ("it had no effect: `why`; call it
    /// again if still needed"), so it is asked again.
    NotRun {
        /// Why it had no effect, e.g. "it only reads".
        why: String,
    },
    /// The logs show it took effect: its result, rebuilt from them.
    Done {
        /// The result as the call returned it (compact JSON text).
        content: String,
        /// Whether that result is an error.
        is_error: bool,
        /// Its error code, when it is one.
        code: Option<String>,
    },
    /// Nothing in the logs tells (a `bash` command, a tool outside Troupe's knowledge):
    /// `TOOL_OUTCOME_UNKNOWN`, with `detail` added to the usual advice.
    Unknown {
        /// A sentence on why it is unknown, if there is more to say.
        detail: Option<String>,
    },
}

/// How the results of one model call's tool calls stand, while they come in (see
/// [`Transcript::spent_model_calls`]).
#[derive(Debug, Clone, Default)]
struct VoidCandidate {
    /// Calls still without a result.
    waiting: HashSet<String>,
    /// Every result so far is a no-effect code or a read-only tool's.
    effect_free: bool,
    /// Some result is a no-effect code.
    any_void: bool,
}

fn decode<T: DeserializeOwned>(event: &Event) -> Result<T, InvalidEvent> {
    // Deserialized from the borrowed payload: no copy of the `Value` tree.
    T::deserialize(&event.data).map_err(|e| InvalidEvent {
        seq: event.seq.0,
        kind: event.kind.clone(),
        reason: e.to_string(),
    })
}

impl Transcript {
    /// An empty transcript for a log whose first `seed_len` events are inherited
    /// (`seedLength`): inherited events shape the history but not the inbox, config,
    /// descriptor or statistics.
    pub fn new(seed_len: u64) -> Self {
        Self {
            seed_len,
            ..Self::default()
        }
    }

    /// Folds a whole log.
    ///
    /// # Errors
    /// `RUNTIME_INVALID_EVENT` for a runtime event whose payload does not decode, or an inbox
    /// splice out of range.
    pub fn fold<'a>(
        seed_len: u64,
        events: impl IntoIterator<Item = &'a Event>,
    ) -> Result<Self, InvalidEvent> {
        let mut t = Self::new(seed_len);
        for e in events {
            t.apply(e)?;
        }
        Ok(t)
    }

    /// Whether [`Transcript::apply`] can refuse an event of type `kind`: it decodes the
    /// payload of these types (and checks an inbox splice's range); an event of any other
    /// type never makes `apply` fail, so a reader that only wants the first event a resume
    /// would refuse (`troupe team verify`) may skip those.
    pub fn can_refuse(kind: &str) -> bool {
        matches!(
            kind,
            ty::USER_MESSAGE
                | ty::ASSISTANT_MESSAGE
                | ty::TOOL_CALL
                | ty::TOOL_PROCESS
                | ty::TOOL_RESULT
                | ty::TURN_START
                | ty::STEP_START
                | ty::TURN_END
                | ty::AGENT_INBOX_SPLICED
                | ty::AGENT_CONFIG
                | ty::SUBAGENT_DESCRIPTOR
                | ty::APPROVAL_REQUESTED
                | ty::APPROVAL_DECIDED
        )
    }

    /// Applies one event (events must come in seq order).
    ///
    /// # Errors
    /// As [`Transcript::fold`].
    pub fn apply(&mut self, event: &Event) -> Result<(), InvalidEvent> {
        let own = event.seq.0 >= self.seed_len;
        self.next_seq = event.seq.0 + 1;
        self.last_time = event.time;
        match event.kind.as_str() {
            ty::USER_MESSAGE => {
                let msg: UserMessage = decode(event)?;
                self.history.push(ChatMessage::user(msg.text_content()));
                if own {
                    self.accepted_user |= msg.source.kind == "user";
                    self.accepted.insert(msg.id);
                }
            }
            ty::ASSISTANT_MESSAGE => {
                let rec: AssistantRecord = decode(event)?;
                if own {
                    self.model_calls += 1;
                    self.void_candidate =
                        (!rec.message.tool_calls.is_empty()).then(|| VoidCandidate {
                            waiting: rec
                                .message
                                .tool_calls
                                .iter()
                                .map(|c| c.id.clone())
                                .collect(),
                            effect_free: true,
                            any_void: false,
                        });
                    if let Some(u) = &rec.usage {
                        self.stats.tokens_in += u.prompt_tokens;
                        self.stats.tokens_out += u.completion_tokens;
                    }
                }
                self.truncated_streak = if rec.truncated_calls.is_empty() {
                    0
                } else {
                    self.truncated_streak + 1
                };
                self.step_calls.clone_from(&rec.message.tool_calls);
                self.final_answer = rec.message.tool_calls.is_empty();
                if let Some(text) = rec.message.content.as_ref().filter(|t| !t.is_empty()) {
                    self.last_text = Some(text.clone());
                }
                self.history.push(ChatMessage::Assistant(rec.message));
            }
            ty::TOOL_CALL => {
                let rec: ToolCallRecord = decode(event)?;
                self.started.insert(rec.call_id, (event.seq.0, rec.effect));
                if own {
                    self.stats.tool_calls += 1;
                }
            }
            ty::TOOL_PROCESS => {
                let rec: ToolProcessRecord = decode(event)?;
                self.call_processes.insert(rec.call_id.clone(), rec);
            }
            ty::TOOL_RESULT => {
                let rec: ToolResultRecord = decode(event)?;
                if own {
                    if let Some(seen) = &rec.seen {
                        self.seen_files
                            .insert(seen.path.clone(), seen.image.clone());
                    } else if !rec.is_error
                        && let Some((_, Some(effect))) = self.started.get(&rec.call_id)
                    {
                        // A `write`/`edit` that took effect: its owner saw what it wrote.
                        self.seen_files
                            .insert(effect.path.clone(), Some(effect.post_image.clone()));
                    }
                }
                if own && let Some(candidate) = &mut self.void_candidate {
                    if candidate.waiting.remove(&rec.call_id) {
                        let void = rec.code.as_deref().is_some_and(|c| VOID_CODES.contains(&c));
                        candidate.any_void |= void;
                        candidate.effect_free &=
                            void || READ_ONLY_TOOLS.contains(&rec.name.as_str());
                    }
                    if candidate.waiting.is_empty() {
                        let void = candidate.effect_free && candidate.any_void;
                        self.void_model_calls += usize::from(void);
                        self.void_candidate = None;
                    }
                }
                self.history
                    .push(ChatMessage::tool_result(rec.call_id.clone(), rec.content));
                self.answered.insert(rec.call_id);
            }
            ty::TURN_START => {
                let rec: TurnStart = decode(event)?;
                self.last_turn = self.last_turn.max(rec.turn);
                self.open_turn = Some(rec.turn);
                self.open_step = None;
                self.final_answer = false;
                self.last_text = None;
                self.truncated_streak = 0;
                if own {
                    self.stats.turns += 1;
                }
            }
            ty::STEP_START => {
                let rec: StepMark = decode(event)?;
                self.open_step = Some(rec.step);
                self.step_calls.clear();
                self.started.clear();
                self.call_processes.clear();
                self.answered.clear();
            }
            ty::STEP_END => {
                self.open_step = None;
                self.step_calls.clear();
                self.started.clear();
                self.call_processes.clear();
                self.answered.clear();
            }
            ty::TURN_END => {
                let rec: TurnEnd = decode(event)?;
                self.open_turn = None;
                self.open_step = None;
                self.final_answer = false;
                if rec.reason == TurnEndReason::Completed {
                    self.last_answer = self.last_text.clone();
                }
                if own {
                    self.owed_root += usize::from(ContinuationRule::Root.owes(&rec.reason));
                    self.owed_teammate += usize::from(ContinuationRule::Teammate.owes(&rec.reason));
                }
                self.last_turn_end = Some(rec.reason);
            }
            ty::AGENT_INBOX_SPLICED if own => {
                let splice: InboxSplice = decode(event)?;
                let list = match splice.target {
                    InboxTarget::NextTurn => &mut self.next_turn,
                    InboxTarget::NextStep => &mut self.next_step,
                };
                let end = splice.start.checked_add(splice.removed_count);
                if splice.start > list.len() || end.is_none_or(|end| end > list.len()) {
                    return Err(InvalidEvent {
                        seq: event.seq.0,
                        kind: event.kind.clone(),
                        reason: format!(
                            "splice {}+{} out of range for {} items",
                            splice.start,
                            splice.removed_count,
                            list.len()
                        ),
                    });
                }
                for m in &splice.inserted {
                    self.accepted_user |= m.source.kind == "user";
                    self.accepted.insert(m.id.clone());
                    // A continuation answers one owed turn; a user's prompt answers them all
                    // (see `owed_continuations`).
                    if m.source.kind == CONTINUATION_SOURCE {
                        self.owed_root = self.owed_root.saturating_sub(1);
                        self.owed_teammate = self.owed_teammate.saturating_sub(1);
                    } else if m.source.kind == "user" {
                        self.owed_root = 0;
                        self.owed_teammate = 0;
                    }
                }
                list.splice(
                    splice.start..splice.start + splice.removed_count,
                    splice.inserted,
                );
            }
            // The latest record wins: `troupe resume --model …` records its override so that
            // later resumes keep it.
            ty::AGENT_CONFIG if own => {
                self.config = Some(decode(event)?);
            }
            ty::SUBAGENT_DESCRIPTOR if own && self.descriptor.is_none() => {
                self.descriptor = Some(decode(event)?);
            }
            ty::APPROVAL_REQUESTED if own => {
                let request: ApprovalRequested = decode(event)?;
                self.approvals.push(ApprovalEntry {
                    request,
                    requested_at: event.time,
                    decided: None,
                });
            }
            ty::APPROVAL_DECIDED if own => {
                let decided: ApprovalDecided = decode(event)?;
                if let Some(entry) = self
                    .approvals
                    .iter_mut()
                    .rev()
                    .find(|e| e.request.id == decided.id)
                {
                    if decided.decision == Decision::Always {
                        self.always
                            .insert(entry.request.command.clone(), decided.id.clone());
                    }
                    entry.decided = Some(decided);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// How many continuation turns this session is owed under `rule` (DESIGN decision 10:
    /// recovery decides from the log): one per own turn that did not finish under `rule` and
    /// that no continuation answered yet, plus the open turn when `open` is [`OpenTurn::Cut`]
    /// and it holds no final answer. A continuation answers one owed turn as soon as it is in
    /// the inbox (an own `agent/inbox/spliced` inserting a message of source kind
    /// [`CONTINUATION_SOURCE`]), even while it still waits to run; a user's prompt answers
    /// them all. So a resume stopped after it queued a continuation is not continued twice,
    /// and a turn a recovery's redelivered wakeup started before the continuation of the turn
    /// before it was queued leaves both owed (each gets its own turn, as without the stop).
    pub fn owed_continuations(&self, rule: ContinuationRule, open: OpenTurn) -> usize {
        let closed = match rule {
            ContinuationRule::Root => self.owed_root,
            ContinuationRule::Teammate => self.owed_teammate,
        };
        let cut_open = open == OpenTurn::Cut && self.open_turn.is_some() && !self.final_answer;
        closed + usize::from(cut_open)
    }

    /// What the own session last saw of each file it read, wrote or edited, per
    /// workspace-relative path: the image (`sha256:<hex>`) of the content it last read (a
    /// `tool/result`'s `seen`) or wrote (the post-image of a `write`/`edit` whose result is
    /// not an error), or `None` when its last read found no file. A restarted agent's file
    /// observations are rebuilt from it (`troupe_tools::restore_observations`).
    pub fn seen_files(&self) -> &HashMap<String, Option<String>> {
        &self.seen_files
    }

    /// The own approval requests (`approval/requested`), oldest first, each with its
    /// `approval/decided` when the log holds one.
    pub fn approvals(&self) -> &[ApprovalEntry] {
        &self.approvals
    }

    /// The request of the `bash` call `call_id`, if it asked for approval.
    pub fn approval_for_call(&self, call_id: &str) -> Option<&ApprovalEntry> {
        self.approvals
            .iter()
            .rev()
            .find(|e| e.request.call_id == call_id)
    }

    /// The request whose `always` decision lets `command` (exactly) run outside the sandbox
    /// without asking, if there is one.
    pub fn always_approved(&self, command: &str) -> Option<&str> {
        self.always.get(command).map(String::as_str)
    }

    /// The model history: user, assistant and tool messages in log order (no system prompt).
    pub fn history(&self) -> &[ChatMessage] {
        &self.history
    }

    /// Pending follow-ups (claimed one per turn).
    pub fn next_turn(&self) -> &[UserMessage] {
        &self.next_turn
    }

    /// Pending steered/injected items (all claimed at the next step).
    pub fn next_step(&self) -> &[UserMessage] {
        &self.next_step
    }

    /// The seq the next event gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The highest turn number seen.
    pub fn last_turn(&self) -> u64 {
        self.last_turn
    }

    /// The turn currently open (started, not ended), if any.
    pub fn open_turn(&self) -> Option<u64> {
        self.open_turn
    }

    /// The step currently open, if any.
    pub fn open_step(&self) -> Option<u64> {
        self.open_step
    }

    /// Model calls completed in the own suffix (`assistant/message` events).
    pub fn model_calls(&self) -> usize {
        self.model_calls
    }

    /// Model calls of the own suffix that count as taken, for a scripted model's cursor
    /// (`troupe_llm::ModelProvider::set_calls_made`): every `assistant/message`, except one that
    /// asked for tool calls of which at least one says the call had no effect — it was
    /// cancelled (`TOOL_CANCELED`: not started, or a `bash` group killed mid-run;
    /// `TEAM_WAIT_ABORTED`; `CANCELLED`: a teammate creation stopped) or did not run
    /// (`TOOL_NOT_STARTED`, a recovery closer) — while every other one only read
    /// ([`READ_ONLY_TOOLS`]). Such a step is asked again whole (its reads are run again, which
    /// changes nothing), as a real model, seeing those results, would repeat the work. A call
    /// that changed something or may have (any other tool's own result, success or error, or
    /// an outcome a crash left unknown, `TOOL_OUTCOME_UNKNOWN`) makes its step count as taken;
    /// so does a step whose calls all only read and returned.
    pub fn spent_model_calls(&self) -> usize {
        self.model_calls - self.void_model_calls
    }

    /// How many model answers in a row, ending with the latest one of the current (or last)
    /// turn, had tool calls cut by the output token limit (`truncatedCalls` of
    /// `assistant/message`); 0 when the latest answer had none or no answer followed the last
    /// `turn/start`. The turn loop fails the turn instead of recording one more such answer
    /// when this would reach `troupe_runtime::MAX_TRUNCATED_REPLIES_IN_A_ROW`.
    pub fn truncated_replies_in_a_row(&self) -> usize {
        self.truncated_streak
    }

    /// The agent's recorded configuration (the latest `agent/config` of the own suffix).
    pub fn config(&self) -> Option<&AgentConfigRecord> {
        self.config.as_ref()
    }

    /// The child descriptor from the own suffix, if any.
    pub fn descriptor(&self) -> Option<&Descriptor> {
        self.descriptor.as_ref()
    }

    /// How the last turn ended.
    pub fn last_turn_end(&self) -> Option<&TurnEndReason> {
        self.last_turn_end.as_ref()
    }

    /// The final answer text of the last *completed* turn.
    pub fn last_answer(&self) -> Option<&str> {
        self.last_answer.as_deref()
    }

    /// Counters over the own suffix.
    pub fn stats(&self) -> TranscriptStats {
        self.stats
    }

    /// The "message accepted" predicate of REFERENCE a.11: the id entered the model history
    /// (own suffix) or was ever inserted into the inbox.
    pub fn accepted(&self, id: &MessageId) -> bool {
        self.accepted.contains(id)
    }

    /// Whether the own suffix ever accepted a message whose source kind is `user` (history or
    /// inbox) — the "initial prompt accepted" test of roster reconciliation (REFERENCE c.9).
    pub fn accepted_user_message(&self) -> bool {
        self.accepted_user
    }

    /// Tool calls of the open step without a result, with their `tool/call` seq if recorded.
    pub fn unanswered_calls(&self) -> Vec<(ToolCall, Option<u64>)> {
        if self.open_step.is_none() {
            return Vec::new();
        }
        self.step_calls
            .iter()
            .filter(|c| !self.answered.contains(&c.id))
            .map(|c| (c.clone(), self.started.get(&c.id).map(|(seq, _)| *seq)))
            .collect()
    }

    /// [`Transcript::unanswered_calls`] with each started call's recorded file effect.
    pub fn unanswered(&self) -> Vec<UnansweredCall> {
        if self.open_step.is_none() {
            return Vec::new();
        }
        self.step_calls
            .iter()
            .filter(|c| !self.answered.contains(&c.id))
            .map(|c| {
                let started = self.started.get(&c.id);
                UnansweredCall {
                    call: c.clone(),
                    call_seq: started.map(|(seq, _)| *seq),
                    effect: started.and_then(|(_, effect)| effect.clone()),
                }
            })
            .collect()
    }

    /// Whether the open turn already holds its final answer (an `assistant/message` without
    /// tool calls after its last step started): a crash came between the answer and its
    /// `turn/end`, and recovery closes the turn as completed with that answer.
    pub fn answered_open_turn(&self) -> bool {
        self.open_turn.is_some() && self.final_answer
    }

    /// The process groups (`tool/process` records) started by calls of the open step that have
    /// no result: after a crash they may still be running. Recovery stops the ones that do
    /// before it writes the closers ([`Transcript::recovery_closers_after`]).
    pub fn leftover_processes(&self) -> Vec<ToolProcessRecord> {
        self.unanswered_calls()
            .iter()
            .filter_map(|(call, _)| self.call_processes.get(&call.id).cloned())
            .collect()
    }

    /// The synthetic closers that end a turn a crash interrupted (REFERENCE a.9), in order:
    /// a `tool/result` per unanswered call (`TOOL_OUTCOME_UNKNOWN` when its `tool/call` was
    /// recorded, citing that seq; `TOOL_NOT_STARTED` otherwise), `step/end` if a step is open,
    /// `turn/end {reason: interrupted}`. Empty when no turn is open. Append them with
    /// [`Transcript::last_time`] as their time.
    ///
    /// A turn that was interrupted before it claimed anything is closed the same way, and
    /// nothing else is added: its inbox items stay pending. A turn whose final answer is
    /// already recorded ([`Transcript::answered_open_turn`]) is closed as it would have been:
    /// `step/end` and `turn/end {reason: completed}`, so that answer is the turn's.
    pub fn recovery_closers(&self) -> Vec<EventDraft> {
        self.recovery_closers_after(&[])
    }

    /// [`Transcript::recovery_closers`] after recovery stopped the leftover process groups of
    /// the calls in `stopped` (call ids): their `TOOL_OUTCOME_UNKNOWN` results say so, since
    /// the model must know that the work stopped and not where.
    pub fn recovery_closers_after(&self, stopped: &[String]) -> Vec<EventDraft> {
        self.recovery_closers_resolved(stopped, &mut |_| CallResolution::Unknown { detail: None })
    }

    /// The closers of [`Transcript::recovery_closers_after`], with every *started* unanswered
    /// call resolved by `resolve` (DESIGN decision 10: recovery decides from the logs); a call
    /// that never started is `TOOL_NOT_STARTED` whatever `resolve` says. Each synthetic result
    /// has the message id `interrupted-tool-result-<callId>-<seq>` and cites its `tool/call`.
    pub fn recovery_closers_resolved(
        &self,
        stopped: &[String],
        resolve: &mut dyn FnMut(&UnansweredCall) -> CallResolution,
    ) -> Vec<EventDraft> {
        let Some(turn) = self.open_turn else {
            return Vec::new();
        };
        let step = self.open_step.unwrap_or(0);
        let mut drafts = Vec::new();
        for (offset, unanswered) in self.unanswered().into_iter().enumerate() {
            let seq = self.next_seq + offset as u64;
            let call = &unanswered.call;
            let resolution = match unanswered.call_seq {
                None => CallResolution::NotRun { why: String::new() },
                Some(_) => resolve(&unanswered),
            };
            let (is_error, code, content) = match resolution {
                CallResolution::NotRun { why } => {
                    let message = if unanswered.call_seq.is_none() {
                        format!(
                            "The process stopped before tool \"{}\" started; it did not run. \
                             Retry it if it is still needed.",
                            call.name
                        )
                    } else {
                        format!(
                            "The process stopped while tool \"{}\" was running, but it had no \
                             effect: {why}. Call it again if it is still needed.",
                            call.name
                        )
                    };
                    (
                        true,
                        Some("TOOL_NOT_STARTED".to_owned()),
                        json!({"code": "TOOL_NOT_STARTED", "message": message}).to_string(),
                    )
                }
                CallResolution::Done {
                    content,
                    is_error,
                    code,
                } => (is_error, code, content),
                CallResolution::Unknown { detail } => {
                    let message = format!(
                        "The process stopped while tool \"{}\" was running; its outcome is \
                         unknown.{}{} Retry only read-only or idempotent operations; otherwise \
                         check the current state (re-read files, inspect the workspace) before \
                         acting again.",
                        call.name,
                        if stopped.contains(&call.id) {
                            " Its leftover process group was still running and has been stopped \
                             (killed) on resume, so it may have stopped part-way."
                        } else {
                            ""
                        },
                        detail.map(|d| format!(" {d}")).unwrap_or_default()
                    );
                    (
                        true,
                        Some("TOOL_OUTCOME_UNKNOWN".to_owned()),
                        json!({"code": "TOOL_OUTCOME_UNKNOWN", "message": message}).to_string(),
                    )
                }
            };
            let rec = ToolResultRecord {
                turn,
                step,
                call_id: call.id.clone(),
                name: call.name.clone(),
                is_error,
                code,
                content,
                message_id: Some(format!("interrupted-tool-result-{}-{seq}", call.id)),
                source_event_seqs: unanswered.call_seq.into_iter().collect(),
                seen: None,
                changed: None,
            };
            drafts.push(EventDraft::new(ty::TOOL_RESULT, to_value(&rec)));
        }
        if self.open_step.is_some() {
            drafts.push(EventDraft::new(
                ty::STEP_END,
                to_value(&StepMark { turn, step }),
            ));
        }
        let reason = if self.final_answer {
            TurnEndReason::Completed
        } else {
            TurnEndReason::Interrupted
        };
        drafts.push(EventDraft::new(
            ty::TURN_END,
            to_value(&TurnEnd { turn, reason }),
        ));
        drafts
    }

    /// Time (ms) of the last event folded.
    pub fn last_time(&self) -> u64 {
        self.last_time
    }
}

/// Serializes a payload known to be representable as JSON.
fn to_value<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::chat::AssistantMessage;
    use serde_json::Value;

    /// Every known type that `can_refuse` says is never refused is applied without error
    /// whatever its payload, own or seeded, and every type it names is refused for a payload
    /// of the wrong shape (an own event: config, descriptor and splices are only read there).
    #[test]
    fn can_refuse_names_exactly_the_types_apply_can_refuse() {
        for kind in troupe_protocol::event_types::KNOWN {
            for seed_len in [0, 1] {
                let mut t = Transcript::new(seed_len);
                let event = troupe_protocol::EventDraft::new(*kind, json!(["not", "a", "payload"]))
                    .into_event(troupe_protocol::Seq(0), 1);
                let refused = t.apply(&event).is_err();
                if seed_len == 0 {
                    assert_eq!(refused, Transcript::can_refuse(kind), "{kind}");
                } else {
                    assert!(!refused || Transcript::can_refuse(kind), "{kind}");
                }
            }
        }
    }

    /// A log of assistant messages (each with the given call ids) and tool results
    /// `(call id, code)`, in order.
    enum Rec<'a> {
        Asked(&'a [&'a str]),
        Result(&'a str, Option<&'a str>),
        /// A result of the named tool: (call id, tool, code).
        Named(&'a str, &'a str, Option<&'a str>),
    }

    fn fold(records: &[Rec<'_>]) -> Transcript {
        let mut t = Transcript::new(0);
        for (seq, rec) in records.iter().enumerate() {
            let (kind, data): (&str, Value) = match rec {
                Rec::Asked(ids) => (
                    ty::ASSISTANT_MESSAGE,
                    serde_json::to_value(AssistantRecord {
                        turn: 1,
                        step: 1,
                        message: AssistantMessage {
                            content: ids.is_empty().then(|| "done".to_owned()),
                            reasoning_content: None,
                            tool_calls: ids
                                .iter()
                                .map(|id| ToolCall {
                                    id: (*id).to_owned(),
                                    name: "bash".to_owned(),
                                    arguments: json!({}),
                                })
                                .collect(),
                        },
                        usage: None,
                        finish_reason: None,
                        truncated_calls: Vec::new(),
                    })
                    .unwrap(),
                ),
                Rec::Result(id, code) | Rec::Named(id, _, code) => (
                    ty::TOOL_RESULT,
                    serde_json::to_value(ToolResultRecord {
                        turn: 1,
                        step: 1,
                        call_id: (*id).to_owned(),
                        name: match rec {
                            Rec::Named(_, name, _) => (*name).to_owned(),
                            _ => "bash".to_owned(),
                        },
                        is_error: code.is_some(),
                        code: code.map(str::to_owned),
                        content: "{}".to_owned(),
                        message_id: None,
                        source_event_seqs: Vec::new(),
                        seen: None,
                        changed: None,
                    })
                    .unwrap(),
                ),
            };
            let event: Event =
                serde_json::from_value(json!({"seq": seq, "time": 1, "type": kind, "data": data}))
                    .unwrap();
            t.apply(&event).unwrap();
        }
        t
    }

    #[test]
    fn a_step_whose_calls_all_had_no_effect_is_not_spent() {
        use Rec::{Asked, Result};
        // Every cancellation code, and the recovery's "never started".
        for code in VOID_CODES {
            let t = fold(&[
                Asked(&["a", "b"]),
                Result("a", Some(code)),
                Result("b", Some(code)),
            ]);
            assert_eq!((t.model_calls(), t.spent_model_calls()), (1, 0), "{code}");
        }
        // The step asked again, and this time it ran: both calls are spent.
        let t = fold(&[
            Asked(&["a"]),
            Result("a", Some("TOOL_CANCELED")),
            Asked(&["a"]),
            Result("a", None),
            Asked(&[]),
        ]);
        assert_eq!((t.model_calls(), t.spent_model_calls()), (3, 2));
    }

    /// A step cut short whose other calls only read is asked again whole (its reads change
    /// nothing when run again); a step of reads that all returned is taken.
    #[test]
    fn a_cut_step_whose_other_calls_only_read_is_not_spent() {
        use Rec::{Asked, Named};
        let t = fold(&[
            Asked(&["r", "e"]),
            Named("r", "read", None),
            Named("e", "edit", Some("TOOL_NOT_STARTED")),
        ]);
        assert_eq!(t.spent_model_calls(), 0);
        let t = fold(&[
            Asked(&["r", "g"]),
            Named("r", "read", None),
            Named("g", "grep", Some("FS_NOT_FOUND")),
        ]);
        assert_eq!(t.spent_model_calls(), 1, "nothing was cut");
        let t = fold(&[
            Asked(&["w", "e"]),
            Named("w", "write", None),
            Named("e", "edit", Some("TOOL_NOT_STARTED")),
        ]);
        assert_eq!(t.spent_model_calls(), 1, "the write took effect");
    }

    #[test]
    fn a_step_with_any_real_or_unknown_outcome_is_spent() {
        use Rec::{Asked, Result};
        for other in [None, Some("FS_STALE_VERSION"), Some("TOOL_OUTCOME_UNKNOWN")] {
            let t = fold(&[
                Asked(&["a", "b"]),
                Result("a", other),
                Result("b", Some("TOOL_CANCELED")),
            ]);
            assert_eq!(t.spent_model_calls(), 1, "{other:?}");
        }
        // Not all results are in yet: the step counts as taken.
        let t = fold(&[Asked(&["a", "b"]), Result("a", Some("TOOL_CANCELED"))]);
        assert_eq!(t.spent_model_calls(), 1);
        // A text answer is always spent.
        assert_eq!(fold(&[Asked(&[])]).spent_model_calls(), 1);
    }

    /// A log of turns and inbox insertions for [`Transcript::owed_continuations`].
    enum Life<'a> {
        /// `turn/start` of the next turn.
        Start,
        /// `turn/end` of the open turn, for this reason.
        End(TurnEndReason),
        /// An answer without tool calls in the open turn.
        Answer,
        /// An inbox insertion (next turn) of a message of this source kind.
        Queued(&'a str),
    }

    fn life(records: &[Life<'_>]) -> Transcript {
        let mut t = Transcript::new(0);
        let mut turn = 0;
        for (seq, rec) in records.iter().enumerate() {
            let (kind, data) = match rec {
                Life::Start => {
                    turn += 1;
                    (ty::TURN_START, to_value(&TurnStart { turn }))
                }
                Life::End(reason) => (
                    ty::TURN_END,
                    to_value(&TurnEnd {
                        turn,
                        reason: reason.clone(),
                    }),
                ),
                Life::Answer => (
                    ty::ASSISTANT_MESSAGE,
                    serde_json::to_value(AssistantRecord {
                        turn,
                        step: 1,
                        message: AssistantMessage {
                            content: Some("done".to_owned()),
                            reasoning_content: None,
                            tool_calls: Vec::new(),
                        },
                        usage: None,
                        finish_reason: None,
                        truncated_calls: Vec::new(),
                    })
                    .unwrap(),
                ),
                Life::Queued(source) => (
                    ty::AGENT_INBOX_SPLICED,
                    to_value(&InboxSplice {
                        target: InboxTarget::NextTurn,
                        start: t.next_turn().len(),
                        removed_count: 0,
                        inserted: vec![UserMessage::text(
                            "m",
                            troupe_protocol::MessageSource::kind(*source),
                        )],
                        outcome: None,
                    }),
                ),
            };
            let event: Event =
                serde_json::from_value(json!({"seq": seq, "time": 1, "type": kind, "data": data}))
                    .unwrap();
            t.apply(&event).unwrap();
        }
        t
    }

    /// Every turn that did not finish is owed one continuation turn; a queued continuation
    /// answers one even before it runs, a user's prompt answers them all; a cut open turn
    /// counts only in a stopped process's log; the Lead's own interruption and a failure are
    /// owed nothing by a teammate.
    #[test]
    fn every_unfinished_turn_is_owed_one_continuation() {
        use ContinuationRule::{Root, Teammate};
        use Life::{Answer, End, Queued, Start};
        use OpenTurn::{Cut, Running};
        let owed = |records: &[Life<'_>], rule, open| life(records).owed_continuations(rule, open);
        let interrupted = || End(TurnEndReason::Interrupted);
        // Turn 1 cut and closed by a recovery, turn 2 started by waiting mail before the
        // continuation was queued, then cut too: both are owed.
        let two_cut = [Start, interrupted(), Queued("team-message"), Start];
        assert_eq!(owed(&two_cut, Root, Cut), 2);
        assert_eq!(owed(&two_cut, Teammate, Cut), 2);
        // In a live agent's transcript the open turn is running, not cut.
        assert_eq!(owed(&two_cut, Teammate, Running), 1);
        // A continuation queued by an earlier resume answers one, before it runs.
        let queued = [Start, interrupted(), Queued(CONTINUATION_SOURCE)];
        assert_eq!(owed(&queued, Root, Cut), 0);
        let ran_and_cut = [Start, interrupted(), Queued(CONTINUATION_SOURCE), Start];
        assert_eq!(owed(&ran_and_cut, Root, Cut), 1);
        // A new instruction answers every owed turn.
        assert_eq!(owed(&[Start, interrupted(), Queued("user")], Root, Cut), 0);
        // An open turn whose final answer is logged only lacks its `turn/end`.
        assert_eq!(owed(&[Start, Answer], Root, Cut), 0);
        assert_eq!(owed(&[Start, End(TurnEndReason::Completed)], Root, Cut), 0);
        // Who owes what: a root continues every unfinished turn; a teammate only a stop's.
        let parent = End(TurnEndReason::Aborted {
            reason: json!({"kind": "parent"}),
        });
        let user = End(TurnEndReason::Aborted {
            reason: json!({"kind": "user"}),
        });
        let failed = End(TurnEndReason::Failed {
            code: "LLM_AUTH".to_owned(),
            message: "m".to_owned(),
        });
        assert_eq!(owed(&[Start, parent], Root, Cut), 1);
        assert_eq!(owed(&[Start, user], Teammate, Cut), 1);
        let parent = End(TurnEndReason::Aborted {
            reason: json!({"kind": "parent"}),
        });
        assert_eq!(owed(&[Start, parent], Teammate, Cut), 0);
        assert_eq!(owed(&[Start, failed], Teammate, Cut), 0);
    }
}
