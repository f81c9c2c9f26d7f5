//! An agent: a session log + a durable inbox + a model + a tool scope, driven by one task.
//!
//! Turn loop (DESIGN §4): claim inbox items → model call → run tool calls → repeat until the
//! model answers without tool calls. Every inbox mutation, claim, request, coalesced stream
//! chunk, answer, tool call and tool result is appended to the log, so the agent's state is
//! always the fold of its log ([`Transcript`]) and a crash loses at most what was not flushed.
//! A tool call cut by the output token limit is answered with a `TOOL_ARGUMENTS_TRUNCATED`
//! tool error instead of running, up to [`MAX_TRUNCATED_REPLIES_IN_A_ROW`] answers in a row.
//!
//! Inbox semantics follow REFERENCE b.2: `followup` → next turn (waking), `steer` → next step
//! (waking), `inject` → next step (non-waking); at each step the whole next-step list is
//! claimed first, then (only when a turn opens) exactly one follow-up. `cancel` aborts the
//! current turn; without `keep_inbox` it durably clears the inbox, with it the pending items
//! are *parked* until the next waking send. Inbox operations return only once the item is
//! durable.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;
use troupe_journal::{JournalError, SessionWriter};
use troupe_llm::{
    AssistantMessage, ChatMessage, ChatRequest, LlmError, ModelProvider, ModelResponse,
    StreamEvent, StreamObserver, ToolCall, ToolSpec, TruncatedCall,
};
use troupe_protocol::{
    ErrorCode, Event, EventDraft, MessageId, MessageSource, SessionId, UserMessage,
    event_types as ty, sync::lock,
};
use troupe_tools::{
    EscalationRequest, ProcessInfo, ProcessObserver, SeenObserver, ToolContext, ToolError,
    ToolRegistry, WorkspaceScan, escalation_request, render_text_outcome,
};

use crate::approval::{Approvals, Waited};
use crate::error::RuntimeError;
use crate::ledger::{LiveLedger, budget_abort_cause};
use crate::record::to_value;
use troupe_approval::new_request_id;
use troupe_session::Transcript;
use troupe_session::approval::{
    ApprovalDecided, ApprovalMode, ApprovalRequested, DecidedBy, Decision,
};
use troupe_session::events::{
    AssistantChunk, AssistantRecord, InboxSplice, InboxTarget, ModelAttemptRecord, RequestHeader,
    StepMark, ToolCallRecord, ToolProcessRecord, ToolResultRecord, TurnEnd, TurnEndReason,
    TurnStart,
};
use troupe_session::ledger::{BUDGET_NOTICE_SOURCE, price_key};

/// Whether an agent is working (REFERENCE b.2): `running` while a turn is active or waking
/// inbox work was accepted and not yet claimed; `idle` otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AgentStatus {
    /// A turn is active or about to start.
    Running,
    /// Nothing to do until a waking send.
    Idle,
}

/// Live progress of an agent, for terminals and panels (not durable; the log is).
///
/// JSON: tagged by `event` (`toolStarted`, …), every field camelCase as well (`tokensIn`,
/// `toolCalls`, `callId`, `isError`, `retryDelayMs`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(
    tag = "event",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Progress {
    /// Status changed.
    Status {
        /// The new status.
        status: AgentStatus,
    },
    /// A turn started.
    TurnStarted {
        /// Its number.
        turn: u64,
    },
    /// A model call started.
    ModelCall {
        /// The turn.
        turn: u64,
        /// The step.
        step: u64,
    },
    /// A model call finished; token counts as reported (0 when not).
    ModelAnswered {
        /// Prompt tokens of this call.
        tokens_in: u64,
        /// Completion tokens of this call.
        tokens_out: u64,
        /// Tool calls requested.
        tool_calls: usize,
    },
    /// A model attempt failed (and may be retried).
    AttemptFailed {
        /// The error code.
        code: String,
        /// The message.
        message: String,
        /// The wait before the retry, if any (ms).
        retry_delay_ms: Option<u64>,
    },
    /// A tool call started.
    ToolStarted {
        /// The model's call id (pairs this event with its `toolFinished`).
        call_id: String,
        /// The tool.
        name: String,
        /// A short rendering of its arguments, at most [`SUMMARY_MAX_CHARS`] characters: their
        /// compact JSON when it fits, else cut at a value boundary — entries are kept whole
        /// while they fit, a string value that does not fit is shortened and ends with `…`
        /// inside its quotes (never in the middle of an escape), and a `…` in place of an
        /// entry marks the entries left out: `{"path":"a.py","content":"def main():\n…"}`,
        /// `{"path":"a.py",…}`.
        summary: String,
    },
    /// A tool call finished.
    ToolFinished {
        /// The model's call id.
        call_id: String,
        /// The tool.
        name: String,
        /// Whether it returned an error.
        is_error: bool,
        /// The error code, if any.
        code: Option<String>,
    },
    /// A turn ended.
    TurnEnded {
        /// Its number.
        turn: u64,
        /// Why.
        reason: TurnEndReason,
    },
    /// The agent asks the user to run a command outside the sandbox and waits for the answer
    /// (its `approval/requested` is durable): a front end shows it and may answer it
    /// ([`Approvals::decide`](crate::approval::Approvals::decide)). Also sent again when a
    /// resume asks again for a request a crash left pending (`again: true`).
    ApprovalRequested {
        /// The request's id.
        request: String,
        /// The waiting `bash` call.
        call_id: String,
        /// The command.
        command: String,
        /// The member's reason.
        justification: String,
        /// How long it waits before it is denied (ms).
        timeout_ms: u64,
        /// Whether this asks again after a restart.
        again: bool,
    },
    /// An approval request was decided (its `approval/decided` is durable in the member's
    /// log).
    ApprovalDecided {
        /// The request's id.
        request: String,
        /// The decision.
        decision: Decision,
        /// Who decided.
        by: DecidedBy,
    },
}

/// A progress event tagged with the agent it comes from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentProgress {
    /// The agent's session id.
    pub agent: SessionId,
    /// The agent's name.
    #[serde(rename = "agentName")]
    pub agent_name: String,
    /// What happened.
    #[serde(flatten)]
    pub progress: Progress,
}

/// How streamed deltas are coalesced into `assistant/chunk` events: one event per block when
/// `max_bytes` accumulated or `max_ms` passed since the block's last event, and at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPolicy {
    /// Bytes buffered before an event is written.
    pub max_bytes: usize,
    /// Milliseconds between events while deltas keep arriving.
    pub max_ms: u64,
}

impl Default for ChunkPolicy {
    fn default() -> Self {
        Self {
            max_bytes: 2048,
            max_ms: 250,
        }
    }
}

/// Everything an agent runs with besides its log.
#[derive(Clone)]
pub struct AgentSetup {
    /// The agent's name (`lead` for a root, a child's label).
    pub name: String,
    /// The system prompt sent first in every request.
    pub system_prompt: String,
    /// The model.
    pub provider: Arc<dyn ModelProvider>,
    /// The model spec `provider` serves: the agent's own model, or the session's (see
    /// [`AgentConfigRecord::own_model`](troupe_session::events::AgentConfigRecord::own_model)). What
    /// `list_agents` and the Team views show for the agent while it is live.
    pub model: troupe_llm::ModelSpec,
    /// The tools the model may call.
    pub tools: ToolRegistry,
    /// Workspace, owner session and file observations for tool calls.
    pub tool_context: ToolContext,
    /// Stream chunk coalescing.
    pub chunks: ChunkPolicy,
    /// Where progress goes (shared by all agents of a runtime).
    pub progress: broadcast::Sender<AgentProgress>,
    /// Secret values (e.g. API keys) replaced by `***` in everything the agent records or
    /// reports — tool results, model errors, progress — so they never reach the log or the
    /// model. Empty strings are ignored.
    pub secrets: Vec<String>,
    /// The runtime's live ledger and budget (see [`crate::ledger`]): every recorded answer
    /// is counted in it, and a step's model call is refused once the budget is spent.
    pub ledger: Arc<LiveLedger>,
    /// The runtime's approvals: with [`ApprovalMode::OnRequest`], a `bash` call with
    /// `escalate: true` asks the user and waits (see [`crate::approval`]); with
    /// [`ApprovalMode::Never`] the tool refuses it (`APPROVAL_DISABLED`).
    pub approvals: Arc<Approvals>,
}

impl std::fmt::Debug for AgentSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSetup")
            .field("name", &self.name)
            .field("provider", &self.provider.label())
            .field("tools", &self.tools.names())
            .finish_non_exhaustive()
    }
}

/// A live agent. Cheap to clone; clones share the agent.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("name", &self.inner.setup.name)
            .finish_non_exhaustive()
    }
}

struct Inner {
    id: SessionId,
    writer: SessionWriter,
    setup: AgentSetup,
    /// `setup.secrets` without empty values, longest first (so a secret that contains another
    /// is replaced whole).
    secrets: Vec<String>,
    state: Mutex<State>,
    wake: Notify,
    status_tx: watch::Sender<AgentStatus>,
    driver: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

struct State {
    transcript: Transcript,
    /// Set by `cancel(keep_inbox)`: pending items wait for the next waking send.
    parked: bool,
    /// A waking send arrived that no turn has claimed yet.
    wake_requested: bool,
    turn_cancel: Option<CancellationToken>,
    abort_cause: Option<Value>,
    disposed: bool,
    /// A fatal journal failure stops the agent.
    failure: Option<String>,
    /// The stable code of that failure.
    failure_code: Option<&'static str>,
}

impl State {
    fn should_run(&self) -> bool {
        !self.disposed
            && self.failure.is_none()
            && !self.parked
            && (!self.transcript.next_turn().is_empty()
                || (self.wake_requested && !self.transcript.next_step().is_empty()))
    }
}

impl Agent {
    /// Starts an agent over `writer`, whose log folds to `transcript`. The caller has already
    /// appended whatever records a new agent needs (config, descriptor) and run recovery.
    /// Parked inbox items from an earlier run stay parked until the next waking send
    /// (DESIGN decision 2).
    ///
    /// Must be called inside a tokio runtime (the driver is a task).
    pub fn start(writer: SessionWriter, transcript: Transcript, setup: AgentSetup) -> Self {
        let parked = !transcript.next_turn().is_empty() || !transcript.next_step().is_empty();
        let (status_tx, _) = watch::channel(AgentStatus::Idle);
        let mut secrets: Vec<String> = setup
            .secrets
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        let inner = Arc::new(Inner {
            id: writer.id().clone(),
            writer,
            setup,
            secrets,
            state: Mutex::new(State {
                transcript,
                parked,
                wake_requested: false,
                turn_cancel: None,
                abort_cause: None,
                disposed: false,
                failure: None,
                failure_code: None,
            }),
            wake: Notify::new(),
            status_tx,
            driver: Mutex::new(None),
        });
        let driver = tokio::spawn(drive(Arc::clone(&inner)));
        *lock(&inner.driver) = Some(driver);
        Self { inner }
    }

    /// The agent's session id.
    pub fn id(&self) -> &SessionId {
        &self.inner.id
    }

    /// Whether `other` is a handle to this very agent (not a copy or a later activation).
    pub fn same(&self, other: &Agent) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.inner.setup.name
    }

    /// The session writer (for callers that append their own records, e.g. the Team).
    pub fn writer(&self) -> &SessionWriter {
        &self.inner.writer
    }

    /// The agent's setup.
    pub fn setup(&self) -> &AgentSetup {
        &self.inner.setup
    }

    /// Appends records of other layers (e.g. the Team's log-only events) to this agent's log
    /// through the same path as its own, so its folded state stays the fold of its log. Not
    /// flushed: call `writer().flush()`.
    ///
    /// # Errors
    /// The journal's append errors.
    pub fn append_records(&self, drafts: Vec<EventDraft>) -> Result<Vec<Event>, RuntimeError> {
        let mut st = lock(&self.inner.state);
        self.inner.record(&mut st, drafts)
    }

    /// [`Agent::append_records`], also telling whether a secret value was replaced in any of
    /// the drafts (then the stored events differ from what the caller built).
    ///
    /// # Errors
    /// As [`Agent::append_records`].
    pub(crate) fn append_records_redacted(
        &self,
        drafts: Vec<EventDraft>,
    ) -> Result<(Vec<Event>, bool), RuntimeError> {
        let mut st = lock(&self.inner.state);
        self.inner.record_redacted(&mut st, drafts)
    }

    /// Closes the turn a crash left open in this agent's log (REFERENCE a.9): the synthetic
    /// closers of [`Transcript::recovery_closers_resolved`] — `stopped` naming the calls whose
    /// leftover process groups recovery stopped, `resolve` deciding each started call from the
    /// logs — are computed and appended under the agent's lock, stamped with the time of the
    /// log's last event. Not flushed: call `writer().flush()`. Returns whether a turn was open.
    ///
    /// # Errors
    /// The journal's append errors.
    pub(crate) fn close_recovered_turn(
        &self,
        stopped: &[String],
        resolve: &mut dyn FnMut(&troupe_session::UnansweredCall) -> troupe_session::CallResolution,
    ) -> Result<bool, RuntimeError> {
        let mut st = lock(&self.inner.state);
        if st.transcript.open_turn().is_none() {
            return Ok(false);
        }
        let closers = st.transcript.recovery_closers_resolved(stopped, resolve);
        let time = st.transcript.last_time();
        let events = self.inner.writer.append_batch_at(closers, time)?;
        for e in &events {
            st.transcript.apply(e)?;
        }
        Ok(true)
    }

    /// The turn's cancellation cause, if the current turn was cancelled.
    pub fn abort_cause(&self) -> Option<Value> {
        lock(&self.inner.state).abort_cause.clone()
    }

    /// Current status.
    pub fn status(&self) -> AgentStatus {
        *self.inner.status_tx.borrow()
    }

    /// Status changes.
    pub fn subscribe_status(&self) -> watch::Receiver<AgentStatus> {
        self.inner.status_tx.subscribe()
    }

    /// Runs `f` on the folded state.
    pub fn with_transcript<R>(&self, f: impl FnOnce(&Transcript) -> R) -> R {
        f(&lock(&self.inner.state).transcript)
    }

    /// Whether pending items are parked (waiting for a waking send).
    pub fn is_parked(&self) -> bool {
        lock(&self.inner.state).parked
    }

    /// Waits until the agent is idle (returns at once if it is).
    pub async fn wait_idle(&self) {
        let mut rx = self.subscribe_status();
        let _ = rx.wait_for(|s| *s == AgentStatus::Idle).await;
    }

    /// Queues `msg` as a follow-up (next turn, waking) and returns once it is durable.
    ///
    /// # Errors
    /// `AGENT_DISPOSED`, or the journal's error when the flush fails.
    pub async fn followup(&self, msg: UserMessage) -> Result<MessageId, RuntimeError> {
        self.enqueue(InboxTarget::NextTurn, msg, true).await
    }

    /// Steers the agent: `msg` is claimed at the next step (waking).
    ///
    /// # Errors
    /// As [`Agent::followup`].
    pub async fn steer(&self, msg: UserMessage) -> Result<MessageId, RuntimeError> {
        self.enqueue(InboxTarget::NextStep, msg, true).await
    }

    /// Injects `msg`: claimed at the next step of a running agent; an idle agent keeps it
    /// pending until something wakes it (non-waking).
    ///
    /// # Errors
    /// As [`Agent::followup`].
    pub async fn inject(&self, msg: UserMessage) -> Result<MessageId, RuntimeError> {
        self.enqueue(InboxTarget::NextStep, msg, false).await
    }

    /// Wakes an agent whose inbox is parked (after a restart or `cancel(keep_inbox)`), so it
    /// runs its pending items in FIFO order. Returns whether there was anything to run.
    pub fn wake_parked(&self) -> bool {
        let mut st = lock(&self.inner.state);
        st.parked = false;
        st.wake_requested = true;
        let run = st.should_run();
        if run {
            self.inner.status_tx.send_replace(AgentStatus::Running);
        }
        drop(st);
        self.inner.wake.notify_one();
        run
    }

    async fn enqueue(
        &self,
        target: InboxTarget,
        msg: UserMessage,
        waking: bool,
    ) -> Result<MessageId, RuntimeError> {
        let id = msg.id.clone();
        {
            let mut st = lock(&self.inner.state);
            if st.disposed {
                return Err(RuntimeError::Disposed(self.inner.id.to_string()));
            }
            let start = match target {
                InboxTarget::NextTurn => st.transcript.next_turn().len(),
                InboxTarget::NextStep => st.transcript.next_step().len(),
            };
            let splice = InboxSplice {
                target,
                start,
                removed_count: 0,
                inserted: vec![msg],
                outcome: None,
            };
            self.inner.record(
                &mut st,
                vec![EventDraft::new(ty::AGENT_INBOX_SPLICED, to_value(&splice))],
            )?;
            if waking {
                st.parked = false;
                st.wake_requested = true;
                self.inner.status_tx.send_replace(AgentStatus::Running);
            }
        }
        let flushed = self.inner.writer.flush().await;
        // The driver is woken whatever the flush's outcome: after a failed flush the log is
        // poisoned, so the driver's next record fails and it stops as failed (idle). Left
        // alone, the agent would stay `running` (set above) and never settle.
        self.inner.wake.notify_one();
        flushed?;
        Ok(id)
    }

    /// Cancels the current turn with `cause` (e.g. `{"kind":"user"}`): it ends with
    /// `turn/end {reason: {kind: aborted, reason: cause}}`. Without `keep_inbox` every pending
    /// inbox item is durably discarded (recorded with outcome `canceled`), even when idle; with
    /// it, pending items are parked until the next waking send. Does not wait for the turn to
    /// finish closing (see [`Agent::wait_idle`]).
    ///
    /// # Errors
    /// The journal's error when the flush fails.
    pub async fn cancel(&self, cause: Value, keep_inbox: bool) -> Result<(), RuntimeError> {
        {
            let mut st = lock(&self.inner.state);
            if st.disposed {
                // Already released (its turn ended, its inbox parked): nothing to cancel.
                return Ok(());
            }
            if let Some(token) = &st.turn_cancel {
                token.cancel();
                st.abort_cause = Some(cause);
            }
            st.wake_requested = false;
            if keep_inbox {
                st.parked = true;
            } else {
                st.parked = false;
                let mut drafts = Vec::new();
                for (target, len) in [
                    (InboxTarget::NextTurn, st.transcript.next_turn().len()),
                    (InboxTarget::NextStep, st.transcript.next_step().len()),
                ] {
                    if len > 0 {
                        let splice = InboxSplice {
                            target,
                            start: 0,
                            removed_count: len,
                            inserted: Vec::new(),
                            outcome: Some("canceled".to_owned()),
                        };
                        drafts.push(EventDraft::new(ty::AGENT_INBOX_SPLICED, to_value(&splice)));
                    }
                }
                if !drafts.is_empty() {
                    self.inner.record(&mut st, drafts)?;
                }
            }
        }
        match self.inner.writer.flush().await {
            // Disposed meanwhile (a continuable child settles as soon as its cancelled turn
            // has closed): the disposal's close flushed everything appended before it — what
            // this cancel recorded included — or it failed, and then this flush reports that
            // failure (a poisoned writer answers `JOURNAL_POISONED`, never `JOURNAL_CLOSED`).
            Err(JournalError::Closed { .. }) if self.is_disposed() => Ok(()),
            other => other.map(drop).map_err(Into::into),
        }
    }

    /// Stops the agent for good: cancels a running turn with `cause` *keeping* the inbox
    /// (pending items stay durable and parked — DESIGN decision 2), waits for the driver to
    /// finish, and flushes. Later inbox operations fail with `AGENT_DISPOSED`.
    ///
    /// # Errors
    /// The journal's error when the final flush fails.
    pub async fn dispose(&self, cause: Value) -> Result<(), RuntimeError> {
        {
            let mut st = lock(&self.inner.state);
            st.disposed = true;
            if let Some(token) = &st.turn_cancel {
                token.cancel();
                st.abort_cause = Some(cause);
            }
        }
        self.inner.wake.notify_one();
        let driver = lock(&self.inner.driver).take();
        if let Some(driver) = driver {
            let _ = driver.await;
        }
        self.inner.status_tx.send_replace(AgentStatus::Idle);
        // Release the session file: a later activation (cold resume) must be able to open it.
        self.inner.writer.close().await?;
        Ok(())
    }

    /// Whether the agent was disposed.
    pub fn is_disposed(&self) -> bool {
        lock(&self.inner.state).disposed
    }

    /// The fatal failure that stopped the agent (a journal error), if any: the first failure
    /// of its log (for a poisoned writer, the write or sync error that poisoned it, with the
    /// file and the OS error), not the later refusals it caused.
    pub fn failure(&self) -> Option<String> {
        lock(&self.inner.state).failure.clone()
    }

    /// The stable code of [`Agent::failure`]: `JOURNAL_LEASE_LOST` when the session's lease on
    /// a shared store was lost (another process may write the session now), `JOURNAL_POISONED`
    /// for a writer poisoned by a failed write (a refused fence, `JOURNAL_SEQ_CONFLICT`, is
    /// named in [`Agent::failure`]'s text), and so on; `None` while the agent has not failed.
    pub fn failure_code(&self) -> Option<&'static str> {
        lock(&self.inner.state).failure_code
    }
}

impl Inner {
    /// Appends `drafts` and folds them into the transcript (so state = fold of the log).
    /// Secret values are replaced by `***` first: what is recorded is what the model sees.
    fn record(&self, st: &mut State, drafts: Vec<EventDraft>) -> Result<Vec<Event>, RuntimeError> {
        self.record_redacted(st, drafts).map(|(events, _)| events)
    }

    /// [`Inner::record`], also telling whether a secret was replaced in any draft.
    fn record_redacted(
        &self,
        st: &mut State,
        mut drafts: Vec<EventDraft>,
    ) -> Result<(Vec<Event>, bool), RuntimeError> {
        let mut redacted = false;
        if !self.secrets.is_empty() {
            for draft in &mut drafts {
                redacted |= redact_value(&mut draft.data, &self.secrets);
            }
        }
        let events = self.writer.append_batch(drafts)?;
        for e in &events {
            st.transcript.apply(e)?;
        }
        Ok((events, redacted))
    }

    /// Records a tool call's `tool/result` and reports it finished.
    fn finish_call(&self, rec: ToolResultRecord) -> Result<(), RuntimeError> {
        {
            let mut st = lock(&self.state);
            self.record(
                &mut st,
                vec![EventDraft::new(ty::TOOL_RESULT, to_value(&rec))],
            )?;
        }
        self.progress(Progress::ToolFinished {
            call_id: rec.call_id,
            name: rec.name,
            is_error: rec.is_error,
            code: rec.code,
        });
        Ok(())
    }

    fn progress(&self, progress: Progress) {
        let progress = if self.secrets.is_empty() {
            progress
        } else {
            redact_progress(progress, &self.secrets)
        };
        let _ = self.setup.progress.send(AgentProgress {
            agent: self.id.clone(),
            agent_name: self.setup.name.clone(),
            progress,
        });
    }

    /// `value` with the secrets replaced (a copy for reports; records are redacted by
    /// [`Inner::record`]).
    fn redacted(&self, value: &Value) -> Value {
        let mut value = value.clone();
        if !self.secrets.is_empty() {
            redact_value(&mut value, &self.secrets);
        }
        value
    }

    /// Records that call `call_id` started process group `info` (best effort: a journal
    /// failure here surfaces at the call's own records) and flushes it at once, so that a
    /// crash during a long command still leaves the group on record for recovery.
    fn record_process(&self, turn: u64, step: u64, call_id: &str, info: ProcessInfo) {
        let rec = ToolProcessRecord {
            turn,
            step,
            call_id: call_id.to_owned(),
            pgid: info.pgid,
            start_time: info.start_time,
        };
        {
            let mut st = lock(&self.state);
            if let Err(e) = self.record(
                &mut st,
                vec![EventDraft::ignorable(ty::TOOL_PROCESS, to_value(&rec))],
            ) {
                tracing::warn!(agent = %self.id, error = %e, "tool process not recorded");
                return;
            }
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let writer = self.writer.clone();
            handle.spawn(async move {
                let _ = writer.flush().await;
            });
        }
    }

    fn set_status(&self, status: AgentStatus) {
        let changed = self.status_tx.send_if_modified(|s| {
            let changed = *s != status;
            *s = status;
            changed
        });
        if changed {
            self.progress(Progress::Status { status });
        }
    }
}

/// The driver task: run a turn whenever there is waking work.
async fn drive(inner: Arc<Inner>) {
    loop {
        let run = {
            let st = lock(&inner.state);
            if st.disposed || st.failure.is_some() {
                break;
            }
            st.should_run()
        };
        // A spent budget opens no new turn (the run settles; a resume continues). Work held
        // back counts as refused (`LiveLedger::check` remembers it), so a resume given no
        // more budget than was spent reports TEAM_BUDGET_EXCEEDED rather than ending quietly.
        let run = run && inner.setup.ledger.check().is_ok();
        if run {
            inner.set_status(AgentStatus::Running);
            if let Err(e) = run_turn(&inner).await {
                tracing::error!(agent = %inner.id, error = %e, "agent stopped by a journal failure");
                let mut st = lock(&inner.state);
                st.failure = Some(crate::error::log_failure_text(&e));
                st.failure_code = Some(e.code());
                drop(st);
                inner.set_status(AgentStatus::Idle);
                break;
            }
        } else {
            inner.set_status(AgentStatus::Idle);
            inner.wake.notified().await;
        }
    }
    inner.set_status(AgentStatus::Idle);
}

/// How a turn ended, before it is recorded.
enum Outcome {
    Completed,
    Aborted,
    Failed(LlmError),
}

/// How a step ended: the turn goes on with another step, or it is over.
enum StepEnd {
    Next,
    Turn(Outcome),
}

/// One turn: opened (start and first claim in one batch), run step by step, then closed.
/// Errors are journal failures only (model and tool failures are recorded).
async fn run_turn(inner: &Arc<Inner>) -> Result<(), RuntimeError> {
    let cancel = CancellationToken::new();
    let Some(turn) = open_turn(inner, &cancel)? else {
        return Ok(());
    };
    inner.progress(Progress::TurnStarted { turn });
    let mut step = 0;
    let outcome = loop {
        step += 1;
        if let StepEnd::Turn(outcome) = run_step(inner, &cancel, turn, step).await? {
            break outcome;
        }
    };
    close_turn(inner, turn, step, outcome).await
}

/// Opens a turn: `turn/start` and its first claim, as one batch under one lock — a crash can
/// never leave a started turn whose prompt is still waiting in the inbox. `None` when there is
/// nothing to run any more (a cancel may have parked or cleared the inbox since the driver
/// decided to run).
fn open_turn(inner: &Inner, cancel: &CancellationToken) -> Result<Option<u64>, RuntimeError> {
    let mut st = lock(&inner.state);
    if !st.should_run() {
        return Ok(None);
    }
    st.turn_cancel = Some(cancel.clone());
    st.abort_cause = None;
    let turn = st.transcript.last_turn() + 1;
    let mut drafts = vec![EventDraft::new(
        ty::TURN_START,
        to_value(&TurnStart { turn }),
    )];
    drafts.extend(claim(&mut st, true));
    inner.record(&mut st, drafts)?;
    Ok(Some(turn))
}

/// One step: the request (recorded and flushed), the model call, the answer, then each of its
/// tool calls in order, then `step/end`. A spent budget refuses the step's model call before
/// anything of the step is recorded: the turn ends `aborted` with reason `{"kind":"budget",
/// "code":"TEAM_BUDGET_EXCEEDED","message"}` (see [`crate::ledger`]).
async fn run_step(
    inner: &Arc<Inner>,
    cancel: &CancellationToken,
    turn: u64,
    step: u64,
) -> Result<StepEnd, RuntimeError> {
    if let Err(message) = inner.setup.ledger.check() {
        lock(&inner.state).abort_cause = Some(budget_abort_cause(&message));
        return Ok(StepEnd::Turn(Outcome::Aborted));
    }
    let request = match start_step(inner, turn, step)? {
        Ok(request) => request,
        Err(e) => return Ok(StepEnd::Turn(Outcome::Failed(e))),
    };
    inner.writer.flush().await?;
    if cancel.is_cancelled() {
        return Ok(StepEnd::Turn(Outcome::Aborted));
    }
    inner.progress(Progress::ModelCall { turn, step });
    let response = match call_model(inner, cancel, &request, turn, step).await? {
        Ok(response) => response,
        Err(outcome) => return Ok(StepEnd::Turn(outcome)),
    };
    let (calls, cut) = record_answer(inner, turn, step, response)?;
    if calls.is_empty() {
        return Ok(StepEnd::Turn(Outcome::Completed));
    }
    for (call, cut) in calls.iter().zip(&cut) {
        if cancel.is_cancelled() {
            break;
        }
        match cut {
            Some(cut) => answer_truncated_call(inner, turn, step, call, cut)?,
            None => run_call(inner, cancel, turn, step, call).await?,
        }
    }
    if cancel.is_cancelled() {
        return Ok(StepEnd::Turn(Outcome::Aborted));
    }
    let mut st = lock(&inner.state);
    inner.record(
        &mut st,
        vec![EventDraft::new(
            ty::STEP_END,
            to_value(&StepMark { turn, step }),
        )],
    )?;
    Ok(StepEnd::Next)
}

/// Starts a step under one lock: the claim of a later step, `step/start`, the request built
/// from the transcript and its `request/header` (not flushed). The inner error is a model
/// that cannot be kept in step with the log (the turn fails).
fn start_step(
    inner: &Inner,
    turn: u64,
    step: u64,
) -> Result<Result<ChatRequest, LlmError>, RuntimeError> {
    let mut st = lock(&inner.state);
    if step > 1 {
        let claimed = claim(&mut st, false);
        if !claimed.is_empty() {
            inner.record(&mut st, claimed)?;
        }
    }
    inner.record(
        &mut st,
        vec![EventDraft::new(
            ty::STEP_START,
            to_value(&StepMark { turn, step }),
        )],
    )?;
    let request = build_request(inner, &st.transcript);
    let header = RequestHeader {
        turn,
        step,
        model: inner.setup.provider.label(),
        messages: request.messages.len(),
        tools: request.tools.iter().map(|t| t.name.clone()).collect(),
    };
    inner.record(
        &mut st,
        vec![EventDraft::new(ty::REQUEST_HEADER, to_value(&header))],
    )?;
    // Keep a scripted model in step with the log: a cancelled model call consumed nothing,
    // and a step whose tool calls were all cancelled is asked again.
    if let Err(e) = inner
        .setup
        .provider
        .set_calls_made(st.transcript.spent_model_calls())
    {
        return Ok(Err(e));
    }
    Ok(Ok(request))
}

/// The model call of a step, its stream coalesced into `assistant/chunk` events; the inner
/// error is how the turn ends instead (cancelled, failed, or an answer that would be the
/// last cut one allowed in a row).
async fn call_model(
    inner: &Arc<Inner>,
    cancel: &CancellationToken,
    request: &ChatRequest,
    turn: u64,
    step: u64,
) -> Result<Result<ModelResponse, Outcome>, RuntimeError> {
    let mut observer = ChunkObserver::new(Arc::clone(inner), turn, step);
    let result = inner
        .setup
        .provider
        .complete(request, &mut observer, cancel)
        .await;
    observer.finish();
    if let Some(e) = observer.error.take() {
        return Err(e);
    }
    let response = match result {
        Ok(r) => r,
        Err(LlmError::Cancelled) => return Ok(Err(Outcome::Aborted)),
        Err(_) if cancel.is_cancelled() => return Ok(Err(Outcome::Aborted)),
        Err(e) => return Ok(Err(Outcome::Failed(e))),
    };
    if let Some(first) = response.truncated_calls.first() {
        let streak = lock(&inner.state).transcript.truncated_replies_in_a_row();
        if streak + 1 >= MAX_TRUNCATED_REPLIES_IN_A_ROW {
            // The model keeps running out of output: stop as a failed model call (the
            // answer is not recorded, as for any failed call).
            return Ok(Err(Outcome::Failed(LlmError::from(first))));
        }
    }
    Ok(Ok(response))
}

/// Records the model's answer (`assistant/message`, cut calls put back in place) and reports
/// it; returns its tool calls and, call by call, which ones the output limit cut.
fn record_answer(
    inner: &Inner,
    turn: u64,
    step: u64,
    response: ModelResponse,
) -> Result<(Vec<ToolCall>, Vec<Option<TruncatedCall>>), RuntimeError> {
    let (message, cut) = with_truncated_calls(response.message, &response.truncated_calls);
    let calls = message.tool_calls.clone();
    {
        let mut st = lock(&inner.state);
        let rec = AssistantRecord {
            turn,
            step,
            message,
            usage: response.usage,
            finish_reason: response.finish_reason,
            truncated_calls: response.truncated_calls,
        };
        inner.record(
            &mut st,
            vec![EventDraft::new(ty::ASSISTANT_MESSAGE, to_value(&rec))],
        )?;
    }
    inner.setup.ledger.record(
        &inner.id,
        &price_key(&inner.setup.model),
        response.usage.as_ref(),
    );
    inner.progress(Progress::ModelAnswered {
        tokens_in: response.usage.as_ref().map_or(0, |u| u.prompt_tokens),
        tokens_out: response.usage.as_ref().map_or(0, |u| u.completion_tokens),
        tool_calls: calls.len(),
    });
    Ok((calls, cut))
}

/// Gives the Lead `lead` the budget notice once it is due (see the module docs): waits for
/// it, then injects it (claimed at the Lead's next step, non-waking). Runs until the notice
/// was delivered or the Lead is gone; spawn it for the run. A ledger without a budget never
/// makes one due.
pub async fn deliver_budget_notice(ledger: Arc<LiveLedger>, lead: Agent) {
    let text = ledger.take_notice().await;
    inject_budget_notice(&lead, text).await;
}

/// Gives the Lead `lead` the budget notice now if it is due and was not taken yet (see
/// [`deliver_budget_notice`]): a run calls it before it shuts down, so a notice that became
/// due is durable in the Lead's log whatever the delivering task managed.
pub async fn give_due_budget_notice(ledger: &LiveLedger, lead: &Agent) {
    if let Some(text) = ledger.take_due_notice() {
        inject_budget_notice(lead, text).await;
    }
}

async fn inject_budget_notice(lead: &Agent, text: String) {
    let notice = UserMessage::text(text, MessageSource::kind(BUDGET_NOTICE_SOURCE));
    if let Err(e) = lead.inject(notice).await {
        tracing::warn!(error = %e, "the budget notice could not be given to the Lead");
    }
}

/// Answers a call the output token limit cut: it never runs (no `tool/call`, which means
/// "about to run"); the model is told why.
fn answer_truncated_call(
    inner: &Inner,
    turn: u64,
    step: u64,
    call: &ToolCall,
    cut: &TruncatedCall,
) -> Result<(), RuntimeError> {
    inner.progress(Progress::ToolStarted {
        call_id: call.id.clone(),
        name: call.name.clone(),
        summary: format!("(arguments cut after {} bytes)", cut.arguments.len()),
    });
    inner.finish_call(truncated_call_result(turn, step, cut))
}

/// Runs one tool call: planned (a `write`/`edit` decides its effect on the file first,
/// touching nothing), recorded and flushed — so the call with its planned effect is durable
/// before it can have any effect (DESIGN decision 10) — then dispatched, its result recorded.
/// A call refused while planning never touches anything: its result goes in the same batch
/// as the call.
async fn run_call(
    inner: &Arc<Inner>,
    cancel: &CancellationToken,
    turn: u64,
    step: u64,
    call: &ToolCall,
) -> Result<(), RuntimeError> {
    let ctx = inner
        .setup
        .tool_context
        .clone()
        .with_cancellation(cancel.child_token())
        .with_call_id(call.id.as_str());
    if inner.setup.approvals.policy().mode == ApprovalMode::OnRequest
        && call.name == "bash"
        && let Some(escalation) = escalation_request(&call.arguments)
    {
        return run_escalated(inner, turn, step, call, escalation, ctx, cancel).await;
    }
    // A `write`/`edit` decides its effect on the file first (nothing is touched), so the
    // effect is recorded with the call (DESIGN decision 10). A call refused while planning
    // never touches anything: its result goes in the same batch as the call.
    let (plan, refused) = match inner
        .setup
        .tools
        .plan(&ctx, &call.name, &call.arguments)
        .await
    {
        None => (None, None),
        Some(Ok(plan)) => (Some(plan), None),
        Some(Err(e)) => (None, Some(e)),
    };
    let refused = refused.map(|e| refusal_result(turn, step, call, e));
    {
        let mut st = lock(&inner.state);
        let rec = ToolCallRecord {
            turn,
            step,
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            effect: plan.as_ref().map(|p| p.effect().clone()),
        };
        let mut drafts = vec![EventDraft::new(ty::TOOL_CALL, to_value(&rec))];
        if let Some(result) = &refused {
            drafts.push(EventDraft::new(ty::TOOL_RESULT, to_value(result)));
        }
        inner.record(&mut st, drafts)?;
    }
    inner.writer.flush().await?;
    inner.progress(Progress::ToolStarted {
        call_id: call.id.clone(),
        name: call.name.clone(),
        summary: summarize(&inner.redacted(&call.arguments)),
    });
    if let Some(result) = refused {
        inner.progress(Progress::ToolFinished {
            call_id: result.call_id,
            name: result.name,
            is_error: true,
            code: result.code,
        });
        return Ok(());
    }
    let ctx = match plan {
        Some(plan) => ctx.with_file_plan(plan),
        None => ctx,
    };
    execute_call(inner, turn, step, call, ctx).await
}

/// Closes the turn: a `TOOL_CANCELED` result for every call of the open step that has none,
/// the open step's `step/end`, and `turn/end` with why the turn ended — one batch, flushed —
/// then reports it.
async fn close_turn(
    inner: &Inner,
    turn: u64,
    step: u64,
    outcome: Outcome,
) -> Result<(), RuntimeError> {
    let reason = {
        let mut st = lock(&inner.state);
        let reason = match outcome {
            Outcome::Completed => TurnEndReason::Completed,
            Outcome::Aborted => TurnEndReason::Aborted {
                reason: st
                    .abort_cause
                    .clone()
                    .unwrap_or_else(|| json!({"kind": "user"})),
            },
            Outcome::Failed(e) => TurnEndReason::Failed {
                code: e.code().to_owned(),
                message: e.to_string(),
            },
        };
        let mut drafts = Vec::new();
        let open_step = st.transcript.open_step();
        for (call, _) in st.transcript.unanswered_calls() {
            let rec = ToolResultRecord {
                turn,
                step: open_step.unwrap_or(step),
                call_id: call.id.clone(),
                name: call.name.clone(),
                is_error: true,
                code: Some("TOOL_CANCELED".to_owned()),
                content: json!({
                    "code": "TOOL_CANCELED",
                    "message": "not run: the turn was cancelled before this call started",
                })
                .to_string(),
                message_id: None,
                source_event_seqs: Vec::new(),
                seen: None,
                changed: None,
            };
            drafts.push(EventDraft::new(ty::TOOL_RESULT, to_value(&rec)));
        }
        if let Some(open) = open_step {
            drafts.push(EventDraft::new(
                ty::STEP_END,
                to_value(&StepMark { turn, step: open }),
            ));
        }
        drafts.push(EventDraft::new(
            ty::TURN_END,
            to_value(&TurnEnd {
                turn,
                reason: reason.clone(),
            }),
        ));
        inner.record(&mut st, drafts)?;
        st.turn_cancel = None;
        reason
    };
    inner.writer.flush().await?;
    inner.progress(Progress::TurnEnded { turn, reason });
    Ok(())
}

/// Runs a call whose `tool/call` is durable and records its `tool/result`: process groups it
/// starts are recorded (and flushed) as they start, so a restart after a crash can stop them
/// (`tool/process`), and what a `read` saw goes with its result, so a restart can rebuild the
/// session's file observations from the log (`troupe_tools::restore_observations`).
async fn execute_call(
    inner: &Arc<Inner>,
    turn: u64,
    step: u64,
    call: &ToolCall,
    ctx: ToolContext,
) -> Result<(), RuntimeError> {
    let observer = {
        let inner = Arc::downgrade(inner);
        let call_id = call.id.clone();
        ProcessObserver::new(move |info| {
            if let Some(inner) = inner.upgrade() {
                inner.record_process(turn, step, &call_id, info);
            }
        })
    };
    let seen = Arc::new(Mutex::new(None));
    let seen_observer = {
        let seen = Arc::clone(&seen);
        SeenObserver::new(move |s| {
            *lock(&seen) = Some(s);
        })
    };
    let ctx = ctx
        .with_process_observer(observer)
        .with_seen_observer(seen_observer);
    // A `bash` command's changes to the workspace: scanned before and compared after it
    // (bounded, `troupe_tools::WorkspaceScan`), recorded in its `tool/result` (the write
    // radar reads them from there; a command a crash cuts records none).
    let scan = if call.name == "bash" {
        Some(WorkspaceScan::before(ctx.workspace_root()).await)
    } else {
        None
    };
    let outcome = inner
        .setup
        .tools
        .dispatch_text(&ctx, &call.name, call.arguments.clone())
        .await;
    let changed = match scan {
        Some(scan) => Some(scan.changes().await),
        None => None,
    };
    let code = outcome.as_ref().err().map(|e| e.code().to_owned());
    let rec = ToolResultRecord {
        turn,
        step,
        call_id: call.id.clone(),
        name: call.name.clone(),
        is_error: outcome.is_err(),
        code,
        content: render_text_outcome(&outcome),
        message_id: None,
        source_event_seqs: Vec::new(),
        seen: lock(&seen).take(),
        changed,
    };
    inner.finish_call(rec)
}

/// The `tool/result` of a call refused with `error` before it ran (rendered as a tool's own
/// error result is).
fn refusal_result(turn: u64, step: u64, call: &ToolCall, error: ToolError) -> ToolResultRecord {
    ToolResultRecord {
        turn,
        step,
        call_id: call.id.clone(),
        name: call.name.clone(),
        is_error: true,
        code: Some(error.code().to_owned()),
        content: render_text_outcome(&Err(error)),
        message_id: None,
        source_event_seqs: Vec::new(),
        seen: None,
        changed: None,
    }
}

/// An error result of a call (its own `tool/result`).
fn error_result(
    turn: u64,
    step: u64,
    call: &ToolCall,
    code: &str,
    message: &str,
) -> ToolResultRecord {
    error_record(turn, step, &call.id, &call.name, code, message)
}

/// The `tool/result` of the call `call_id` to tool `name` failing with `code` and `message`.
fn error_record(
    turn: u64,
    step: u64,
    call_id: &str,
    name: &str,
    code: &str,
    message: &str,
) -> ToolResultRecord {
    ToolResultRecord {
        turn,
        step,
        call_id: call_id.to_owned(),
        name: name.to_owned(),
        is_error: true,
        code: Some(code.to_owned()),
        content: json!({"code": code, "message": message}).to_string(),
        message_id: None,
        source_event_seqs: Vec::new(),
        seen: None,
        changed: None,
    }
}

/// The `tool/result` of an escalated call that did not run: denied (`APPROVAL_DENIED`), not
/// answered in time (`APPROVAL_TIMED_OUT`) or withdrawn by an interrupt (`TOOL_CANCELED`).
pub(crate) fn denial_result(
    turn: u64,
    step: u64,
    call: &ToolCall,
    decided: &ApprovalDecided,
    timeout_ms: u64,
) -> ToolResultRecord {
    match decided.by {
        DecidedBy::Timeout => error_result(
            turn,
            step,
            call,
            APPROVAL_TIMED_OUT,
            &format!(
                "Nobody answered the request to run this command outside the sandbox within {} \
                 (request {}), so it was denied and did not run. Do not ask again for the same \
                 command: do what you can inside the sandbox, or say in your answer what needs \
                 the user.",
                humanize_ms(timeout_ms),
                decided.id
            ),
        ),
        DecidedBy::Interrupt => error_result(
            turn,
            step,
            call,
            "TOOL_CANCELED",
            &format!(
                "not run: the turn was interrupted while the request to run this command outside \
                 the sandbox (request {}) waited for the user",
                decided.id
            ),
        ),
        by => error_result(
            turn,
            step,
            call,
            APPROVAL_DENIED,
            &format!(
                "The request to run this command outside the sandbox was denied {} (request {}); \
                 it did not run. Do not ask again for the same command: do what you can inside \
                 the sandbox, or say in your answer what you need from the user.",
                by.described(),
                decided.id
            ),
        ),
    }
}

/// `10m`, `90s`, `1500ms`: a duration as a person reads it.
pub(crate) fn humanize_ms(ms: u64) -> String {
    if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The code of a call the user denied running outside the sandbox.
pub const APPROVAL_DENIED: &str = "APPROVAL_DENIED";
/// The code of a call whose approval request nobody answered in time.
pub const APPROVAL_TIMED_OUT: &str = "APPROVAL_TIMED_OUT";

/// A `bash` call with `escalate: true` under `--approval on-request` (see
/// [`crate::approval`]): its `tool/call` and `approval/requested` are one batch (flushed),
/// then the call waits for the decision (an earlier `always` for the same exact command
/// decides at once, in that same batch); the `approval/decided` is flushed before the
/// command runs outside the sandbox, and a denial goes in the batch of the call's result.
///
/// **What survives a crash**: see the table in [`troupe_approval`]: a pending request is asked
/// again by the resume; an approved one whose result is missing is never run again.
async fn run_escalated(
    inner: &Arc<Inner>,
    turn: u64,
    step: u64,
    call: &ToolCall,
    escalation: EscalationRequest,
    ctx: ToolContext,
    cancel: &CancellationToken,
) -> Result<(), RuntimeError> {
    let approvals = Arc::clone(&inner.setup.approvals);
    let timeout_ms = approvals.policy().timeout_ms;
    let call_record = EventDraft::new(
        ty::TOOL_CALL,
        to_value(&ToolCallRecord {
            turn,
            step,
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            effect: None,
        }),
    );
    let started = || Progress::ToolStarted {
        call_id: call.id.clone(),
        name: call.name.clone(),
        summary: summarize(&inner.redacted(&call.arguments)),
    };
    if escalation.justification.is_empty() {
        // Refused before anything could happen: the result goes with the call.
        let refused = ToolError::invalid_arguments(
            "field `justification`: required with escalate: true (say why this command needs \
             to run outside the sandbox; the user reads it)",
        );
        let result = refusal_result(turn, step, call, refused);
        {
            let mut st = lock(&inner.state);
            inner.record(
                &mut st,
                vec![
                    call_record,
                    EventDraft::new(ty::TOOL_RESULT, to_value(&result)),
                ],
            )?;
        }
        inner.writer.flush().await?;
        inner.progress(started());
        inner.progress(Progress::ToolFinished {
            call_id: result.call_id,
            name: result.name,
            is_error: true,
            code: result.code,
        });
        return Ok(());
    }
    let request = ApprovalRequested {
        id: new_request_id(),
        call_id: call.id.clone(),
        command: escalation.command.clone(),
        justification: escalation.justification.clone(),
        member: inner.setup.name.clone(),
    };
    let rule = lock(&inner.state)
        .transcript
        .always_approved(&escalation.command)
        .map(str::to_owned);
    let mut drafts = vec![
        call_record,
        EventDraft::new(ty::APPROVAL_REQUESTED, to_value(&request)),
    ];
    let ruled = rule.map(|rule| ApprovalDecided {
        id: request.id.clone(),
        decision: Decision::Approve,
        by: DecidedBy::Always,
        decided_at: approvals.now_ms(),
        session: None,
        rule: Some(rule),
    });
    if let Some(decided) = &ruled {
        drafts.push(EventDraft::new(ty::APPROVAL_DECIDED, to_value(decided)));
    }
    {
        let mut st = lock(&inner.state);
        inner.record(&mut st, drafts)?;
    }
    inner.writer.flush().await?;
    inner.progress(started());
    let decided = match ruled {
        Some(decided) => {
            inner.progress(Progress::ApprovalDecided {
                request: decided.id.clone(),
                decision: decided.decision,
                by: decided.by,
            });
            decided
        }
        None => {
            inner.progress(Progress::ApprovalRequested {
                request: request.id.clone(),
                call_id: call.id.clone(),
                command: request.command.clone(),
                justification: request.justification.clone(),
                timeout_ms,
                again: false,
            });
            let waited = approvals
                .wait(&inner.id, &request.id, approvals.policy().timeout(), cancel)
                .await;
            let decided = match waited {
                Ok(Waited::Decided(decided) | Waited::Withdrawn(decided)) => decided,
                Err(e) => {
                    // The decision could not be read or recorded: the command does not run.
                    inner.finish_call(error_result(turn, step, call, e.code(), &e.to_string()))?;
                    return Ok(());
                }
            };
            let mut drafts = vec![EventDraft::new(ty::APPROVAL_DECIDED, to_value(&decided))];
            let refused = (!decided.decision.approves() || cancel.is_cancelled()).then(|| {
                if decided.decision.approves() {
                    // Approved as the turn was cancelled: it does not run now.
                    let withdrawn = ApprovalDecided {
                        by: DecidedBy::Interrupt,
                        ..decided.clone()
                    };
                    denial_result(turn, step, call, &withdrawn, timeout_ms)
                } else {
                    denial_result(turn, step, call, &decided, timeout_ms)
                }
            });
            if let Some(result) = &refused {
                drafts.push(EventDraft::new(ty::TOOL_RESULT, to_value(result)));
            }
            {
                let mut st = lock(&inner.state);
                inner.record(&mut st, drafts)?;
            }
            // Durable before the command can run outside the sandbox.
            inner.writer.flush().await?;
            inner.progress(Progress::ApprovalDecided {
                request: decided.id.clone(),
                decision: decided.decision,
                by: decided.by,
            });
            if let Some(result) = refused {
                inner.progress(Progress::ToolFinished {
                    call_id: result.call_id,
                    name: result.name,
                    is_error: true,
                    code: result.code,
                });
                return Ok(());
            }
            decided
        }
    };
    debug_assert!(decided.decision.approves());
    execute_call(inner, turn, step, call, ctx.with_escalation()).await
}

/// The records that claim inbox items for a step (REFERENCE b.2): all of next-step, then one
/// next-turn item when the turn opens. Each claim is a splice removal plus one
/// `user/message` per item. The caller records them (possibly with other records, in one
/// batch) under the same lock.
fn claim(st: &mut State, opening: bool) -> Vec<EventDraft> {
    let mut claimed: Vec<UserMessage> = Vec::new();
    let mut drafts = Vec::new();
    let steps = st.transcript.next_step().to_vec();
    if !steps.is_empty() {
        drafts.push(EventDraft::new(
            ty::AGENT_INBOX_SPLICED,
            to_value(&InboxSplice {
                target: InboxTarget::NextStep,
                start: 0,
                removed_count: steps.len(),
                inserted: Vec::new(),
                outcome: None,
            }),
        ));
        claimed.extend(steps);
    }
    if opening && let Some(first) = st.transcript.next_turn().first().cloned() {
        drafts.push(EventDraft::new(
            ty::AGENT_INBOX_SPLICED,
            to_value(&InboxSplice {
                target: InboxTarget::NextTurn,
                start: 0,
                removed_count: 1,
                inserted: Vec::new(),
                outcome: None,
            }),
        ));
        claimed.push(first);
    }
    st.wake_requested = false;
    for msg in claimed {
        drafts.push(EventDraft::new(ty::USER_MESSAGE, to_value(&msg)));
    }
    drafts
}

/// How many model answers in a row within one turn may have tool calls cut by the output token
/// limit. Each of the first `MAX − 1` is recorded and its cut calls are answered with
/// `TOOL_ARGUMENTS_TRUNCATED` tool errors (the turn goes on); the `MAX`-th fails the turn with
/// `LLM_TRUNCATED_TOOL_CALL` (the answer is not recorded), so a model that cannot shorten its
/// output cannot loop forever. An answer without cut calls resets the count, as does a new turn.
pub const MAX_TRUNCATED_REPLIES_IN_A_ROW: usize = 3;

/// The tool-result code of a call cut by the output token limit.
pub const TOOL_ARGUMENTS_TRUNCATED: &str = "TOOL_ARGUMENTS_TRUNCATED";

/// The message as recorded and sent back: the complete calls of `message` with each cut call
/// put back at its position, with `{}` as arguments (a valid placeholder: some servers parse
/// the arguments of earlier calls, and re-sending the cut text would only cost context). The
/// second list tells, call by call, which ones were cut.
fn with_truncated_calls(
    mut message: AssistantMessage,
    truncated: &[TruncatedCall],
) -> (AssistantMessage, Vec<Option<TruncatedCall>>) {
    let mut cut: Vec<Option<TruncatedCall>> = vec![None; message.tool_calls.len()];
    let mut ordered: Vec<&TruncatedCall> = truncated.iter().collect();
    ordered.sort_by_key(|t| t.position);
    for t in ordered {
        let at = t.position.min(message.tool_calls.len());
        message
            .tool_calls
            .insert(at, ToolCall::new(t.id.clone(), t.name.clone(), json!({})));
        cut.insert(at, Some(t.clone()));
    }
    (message, cut)
}

/// The tool error answering a call cut by the output token limit (`TOOL_ARGUMENTS_TRUNCATED`).
fn truncated_call_result(turn: u64, step: u64, cut: &TruncatedCall) -> ToolResultRecord {
    let message = format!(
        "Error: your reply reached the output token limit while writing the arguments of this \
         \"{}\" call ({} bytes arrived, cut off before the end), so the call was not run. Retry \
         with smaller arguments: split the work into several calls, e.g. write a large file in \
         parts (a first part, then the rest in further calls).",
        cut.name,
        cut.arguments.len()
    );
    error_record(
        turn,
        step,
        &cut.id,
        &cut.name,
        TOOL_ARGUMENTS_TRUNCATED,
        &message,
    )
}

fn build_request(inner: &Inner, transcript: &Transcript) -> ChatRequest {
    let mut messages = Vec::with_capacity(transcript.history().len() + 1);
    messages.push(ChatMessage::system(inner.setup.system_prompt.clone()));
    messages.extend(transcript.history().iter().cloned());
    let tools = inner
        .setup
        .tools
        .specs()
        .into_iter()
        .map(|s| ToolSpec::new(s.name, s.description, s.parameters))
        .collect();
    ChatRequest::new(messages, tools)
}

/// The longest [`Progress::ToolStarted::summary`], in characters.
pub const SUMMARY_MAX_CHARS: usize = 120;

/// The shortest part of a string value worth showing in a cut summary, in characters.
const SUMMARY_MIN_STRING: usize = 8;

/// A tool call's arguments for progress (see [`Progress::ToolStarted::summary`]): the compact
/// JSON, else the longest string values shortened first (each to no less than
/// [`SUMMARY_MIN_STRING`] characters), else the last entries left out.
fn summarize(arguments: &Value) -> String {
    let text = arguments.to_string();
    if text.chars().count() <= SUMMARY_MAX_CHARS {
        return text;
    }
    match arguments {
        Value::Object(map) => {
            let len = |text: &str| text.chars().count();
            // (`"key":`, the value as shown)
            let mut entries: Vec<(String, String)> = map
                .iter()
                .map(|(k, v)| (format!("{}:", Value::String(k.clone())), v.to_string()))
                .collect();
            let total = |entries: &[(String, String)]| -> usize {
                2 + entries.len().saturating_sub(1)
                    + entries.iter().map(|(k, v)| len(k) + len(v)).sum::<usize>()
            };
            // The longest string values first, each cut just enough (or to the minimum).
            let mut strings: Vec<usize> = (0..entries.len())
                .filter(|&i| map.values().nth(i).is_some_and(Value::is_string))
                .collect();
            strings.sort_by_key(|&i| std::cmp::Reverse(len(&entries[i].1)));
            for i in strings {
                let excess = total(&entries).saturating_sub(SUMMARY_MAX_CHARS);
                if excess == 0 {
                    break;
                }
                let Some(Value::String(value)) = map.values().nth(i) else {
                    continue;
                };
                // `"` + prefix + `…"`: the prefix may use what the value had, less the excess.
                let room = len(&entries[i].1)
                    .saturating_sub(excess + 3)
                    .max(SUMMARY_MIN_STRING);
                let shortened = format!("\"{}…\"", escaped_prefix(value, room));
                if len(&shortened) < len(&entries[i].1) {
                    entries[i].1 = shortened;
                }
            }
            // Still too long: leave out the last entries, marked by one `…` entry.
            let mut cut = false;
            while total(&entries) + if cut { 2 } else { 0 } > SUMMARY_MAX_CHARS {
                if entries.pop().is_none() {
                    break;
                }
                cut = true;
            }
            let mut parts: Vec<String> = entries.into_iter().map(|(k, v)| k + &v).collect();
            if cut {
                parts.push("…".to_owned());
            }
            format!("{{{}}}", parts.join(","))
        }
        Value::String(value) => format!("\"{}…\"", escaped_prefix(value, SUMMARY_MAX_CHARS - 3)),
        _ => text.chars().take(SUMMARY_MAX_CHARS - 1).collect::<String>() + "…",
    }
}

/// The longest start of `value`, JSON-escaped, that is at most `room` characters long; an
/// escape (`\n`, `\u0000`) is never split.
fn escaped_prefix(value: &str, room: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in value.chars() {
        let quoted = Value::String(c.to_string()).to_string();
        let escaped = &quoted[1..quoted.len() - 1];
        let len = escaped.chars().count();
        if used + len > room {
            break;
        }
        out.push_str(escaped);
        used += len;
    }
    out
}

/// One coalescing buffer: a block (`text`, `reasoning`, or `toolCall` with the call's index).
struct ChunkBuffer {
    block: &'static str,
    index: Option<usize>,
    text: String,
    since: Instant,
}

/// Coalesces stream deltas into `assistant/chunk` events and records failed attempts. Each
/// block has its own buffer, and so does each tool call (by index): the argument fragments of
/// two calls are never joined into one string.
struct ChunkObserver {
    inner: Arc<Inner>,
    turn: u64,
    step: u64,
    buffers: Vec<ChunkBuffer>,
    error: Option<RuntimeError>,
}

impl ChunkObserver {
    fn new(inner: Arc<Inner>, turn: u64, step: u64) -> Self {
        Self {
            inner,
            turn,
            step,
            buffers: Vec::new(),
            error: None,
        }
    }

    fn push(&mut self, block: &'static str, index: Option<usize>, text: &str) {
        let policy = self.inner.setup.chunks;
        let now = Instant::now();
        let idx = match self
            .buffers
            .iter()
            .position(|b| b.block == block && b.index == index)
        {
            Some(i) => i,
            None => {
                self.buffers.push(ChunkBuffer {
                    block,
                    index,
                    text: String::new(),
                    since: now,
                });
                self.buffers.len() - 1
            }
        };
        let buffer = &mut self.buffers[idx];
        buffer.text.push_str(text);
        if buffer.text.len() >= policy.max_bytes
            || now.duration_since(buffer.since) >= Duration::from_millis(policy.max_ms)
        {
            self.emit(idx);
        }
    }

    fn emit(&mut self, idx: usize) {
        let buffer = &mut self.buffers[idx];
        if buffer.text.is_empty() {
            return;
        }
        let chunk = AssistantChunk {
            turn: self.turn,
            step: self.step,
            block: buffer.block.to_owned(),
            index: buffer.index,
            delta: std::mem::take(&mut buffer.text),
        };
        buffer.since = Instant::now();
        let mut st = lock(&self.inner.state);
        if let Err(e) = self.inner.record(
            &mut st,
            vec![EventDraft::new(ty::ASSISTANT_CHUNK, to_value(&chunk))],
        ) {
            self.error.get_or_insert(e);
        }
    }

    fn finish(&mut self) {
        for i in 0..self.buffers.len() {
            self.emit(i);
        }
    }
}

impl StreamObserver for ChunkObserver {
    fn on_event(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::AttemptStarted { .. } => {
                // A retry starts the answer over: the failed attempt's buffered text is void.
                self.buffers.clear();
            }
            StreamEvent::TextDelta { text } => self.push("text", None, &text),
            StreamEvent::ReasoningDelta { text } => self.push("reasoning", None, &text),
            StreamEvent::ToolCallDelta {
                index, arguments, ..
            } => self.push("toolCall", Some(index), &arguments),
            StreamEvent::AttemptFailed { attempt } => {
                self.buffers.clear();
                let rec = ModelAttemptRecord {
                    turn: self.turn,
                    step: self.step,
                    attempt: attempt.clone(),
                };
                {
                    let mut st = lock(&self.inner.state);
                    if let Err(e) = self.inner.record(
                        &mut st,
                        vec![EventDraft::new(ty::MODEL_ATTEMPT, to_value(&rec))],
                    ) {
                        self.error.get_or_insert(e);
                    }
                }
                if let Some(err) = attempt.error {
                    self.inner.progress(Progress::AttemptFailed {
                        code: err.code,
                        message: err.message,
                        retry_delay_ms: attempt.retry_delay_ms,
                    });
                }
            }
        }
    }
}

/// Replaces every occurrence of each of `secrets` (non-empty, longest first) in `text` with
/// `***`; `None` when there was none.
pub(crate) fn redact_text(text: &str, secrets: &[String]) -> Option<String> {
    if !secrets.iter().any(|secret| text.contains(secret.as_str())) {
        return None;
    }
    let mut out = text.to_owned();
    for secret in secrets {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "***");
        }
    }
    Some(out)
}

/// [`redact_text`] over every string (and object key) of a JSON value; `true` when something
/// was replaced.
fn redact_value(value: &mut Value, secrets: &[String]) -> bool {
    match value {
        Value::String(text) => match redact_text(text, secrets) {
            Some(clean) => {
                *text = clean;
                true
            }
            None => false,
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, item| redact_value(item, secrets) | changed),
        Value::Object(map) => {
            let keyed = map.keys().any(|k| redact_text(k, secrets).is_some());
            if keyed {
                let entries = std::mem::take(map);
                for (key, mut item) in entries {
                    redact_value(&mut item, secrets);
                    map.insert(redact_text(&key, secrets).unwrap_or(key), item);
                }
                true
            } else {
                map.values_mut()
                    .fold(false, |changed, item| redact_value(item, secrets) | changed)
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// A progress event with every secret replaced by `***` in its text.
fn redact_progress(progress: Progress, secrets: &[String]) -> Progress {
    let clean = |text: String| redact_text(&text, secrets).unwrap_or(text);
    match progress {
        Progress::AttemptFailed {
            code,
            message,
            retry_delay_ms,
        } => Progress::AttemptFailed {
            code,
            message: clean(message),
            retry_delay_ms,
        },
        Progress::ToolStarted {
            call_id,
            name,
            summary,
        } => Progress::ToolStarted {
            call_id,
            name,
            summary: clean(summary),
        },
        Progress::ApprovalRequested {
            request,
            call_id,
            command,
            justification,
            timeout_ms,
            again,
        } => Progress::ApprovalRequested {
            request,
            call_id,
            command: clean(command),
            justification: clean(justification),
            timeout_ms,
            again,
        },
        Progress::TurnEnded { turn, reason } => Progress::TurnEnded {
            turn,
            reason: match reason {
                TurnEndReason::Failed { code, message } => TurnEndReason::Failed {
                    code,
                    message: clean(message),
                },
                TurnEndReason::Aborted { mut reason } => {
                    redact_value(&mut reason, secrets);
                    TurnEndReason::Aborted { reason }
                }
                other => other,
            },
        },
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_short_summary_is_the_arguments_json() {
        let arguments = json!({"path": "notes.txt"});
        assert_eq!(summarize(&arguments), r#"{"path":"notes.txt"}"#);
    }

    /// A long summary is cut at a value boundary and marked: the longest string is shortened
    /// first, keeps its quotes and never loses half an escape; entries left out are one `…`.
    #[test]
    fn a_long_summary_is_cut_at_a_value_boundary_and_marked() {
        let content = "def main():\n    print('hello')\n".repeat(20);
        let write = summarize(&json!({"path": "big.py", "content": content}));
        assert!(write.chars().count() <= SUMMARY_MAX_CHARS, "{write}");
        assert!(
            write.starts_with(r#"{"content":"def main():\n    print('hello')\n"#),
            "{write}"
        );
        // The short value is whole, and the result is still JSON.
        assert!(write.ends_with(r#"…","path":"big.py"}"#), "{write}");
        let parsed: Value = serde_json::from_str(&write).unwrap();
        assert_eq!(parsed["path"], "big.py");
        assert!(!parsed["content"].as_str().unwrap().contains('\\'));
        // Escapes are never split: with the cut falling anywhere, the result stays JSON.
        for n in 0..40 {
            let text = format!("{}{}", "x".repeat(n), "\"\n\u{1}é".repeat(40));
            let cut = summarize(&json!({"path": "p", "text": text}));
            assert!(cut.chars().count() <= SUMMARY_MAX_CHARS, "{cut}");
            serde_json::from_str::<Value>(&cut).unwrap_or_else(|e| panic!("{cut}: {e}"));
        }
        // A value that is not a string is never cut: it is left out, marked.
        let nested = summarize(&json!({"a": "x", "z": {"list": vec!["item"; 60]}}));
        assert_eq!(nested, r#"{"a":"x",…}"#);
        // Many short entries: whole ones while they fit, then the mark.
        let many: serde_json::Map<String, Value> =
            (0..40).map(|n| (format!("k{n:02}"), json!(n))).collect();
        let many = summarize(&Value::Object(many));
        assert!(many.chars().count() <= SUMMARY_MAX_CHARS, "{many}");
        assert!(many.ends_with(",…}"), "{many}");
        assert!(many.starts_with(r#"{"k00":0,"k01":1,"#), "{many}");
    }
}
