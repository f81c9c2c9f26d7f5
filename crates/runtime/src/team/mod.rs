//! The Team service (REFERENCE c.2–c.14, DESIGN decisions 1–7): the runtime side of
//! `troupe-team`.
//!
//! One [`Team`] per live Lead. Its **serializer** (DESIGN decision 5) is a FIFO async lock
//! around the folded [`TeamState`]: every read-check-append of roster, board and mailbox runs
//! inside it as *decide → append to the Lead log → flush → apply*, and waiters are woken only
//! after the flush made the event durable. The Lead's journal writer is the only writer of the
//! Lead log, so the folded state never diverges from the file.
//!
//! Mailbox (decision 1): a send is durable in the Lead log (`team/message/queued`) before any
//! delivery; delivery is per-target FIFO; the delivered inbox item carries the Team message id
//! as its own id, so "the target already holds it" is the target's transcript `accepted`
//! predicate (target-side de-duplication); `team/message/delivered` is appended only after the
//! target's log durably holds the message.
//!
//! Decision recorded here (REFERENCE g.10.c): teammates do not send settlement notices to the
//! Lead; the Lead follows them through `wait_agent`/`list_agents`, which see every status edge.

mod schema;
mod tools;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use troupe_journal::{LineCheck, LineUse, Selected};
use troupe_protocol::{ErrorCode, MessageId, SessionId};
use troupe_team::{
    Caller, CreateTask, Delivery, LiveAgent, LiveStatus, MemberContext, MemberPhase,
    MemberSnapshot, MemberView, MessageSnapshot, ProvisionTeammate, ProvisioningOutcome,
    SendMessage, SettleDecision, StreamFold, TaskListQuery, TaskPage, TaskView, TeamError,
    TeamEvent, TeamId, TeamLimits, TeamRecord, TeamState, UpdateTask, delivered_user_message,
    js_trim, team_message_id,
};

use crate::agent::{Agent, AgentStatus, Progress};
use crate::error::RuntimeError;
use crate::events::{Profile, ToolEffectRecord};
use crate::recovery::TeammateRecovery;
use crate::runtime::{ChildProvider, ChildSpec, Runtime};
use crate::transcript::{ContinuationRule, OpenTurn, Transcript};

pub use schema::TEAM_TOOL_NAMES;
pub(crate) use tools::{send_result_text, spawn_result_text, team_tools};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Errors of Team operations: a Team rule (REFERENCE c.16 codes) or a lower layer.
#[derive(Debug, thiserror::Error)]
pub enum TeamOpError {
    /// A Team rule refused the operation (its code, e.g. `TEAM_TASK_STALE_REVISION`).
    #[error(transparent)]
    Team(#[from] TeamError),
    /// The runtime or journal failed (its code).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The Lead log does not fold (`TEAM_LOG_INVALID`), or a candidate event broke an
    /// invariant (`INVARIANT`).
    #[error("{message}")]
    Log {
        /// `TEAM_LOG_INVALID` or `INVARIANT`.
        code: &'static str,
        /// What is wrong, naming the event.
        message: String,
    },
}

impl ErrorCode for TeamOpError {
    fn code(&self) -> &'static str {
        match self {
            TeamOpError::Team(e) => e.code(),
            TeamOpError::Runtime(e) => e.code(),
            TeamOpError::Log { code, .. } => code,
        }
    }
}

impl From<troupe_journal::JournalError> for TeamOpError {
    fn from(e: troupe_journal::JournalError) -> Self {
        TeamOpError::Runtime(RuntimeError::Journal(e))
    }
}

/// The member tool call a Team record is the effect of (linked by `tool/effect`, DESIGN
/// decision 10).
#[derive(Debug, Clone)]
pub(crate) struct CallOrigin {
    /// The calling member's session.
    pub(crate) session: SessionId,
    /// The model's call id.
    pub(crate) call_id: String,
    /// The tool.
    pub(crate) tool: &'static str,
}

/// The outcome of `wait_agent` (REFERENCE c.12, d.4.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitOutcome {
    /// A change happened (`timed_out: false`) or the timeout passed (`true`).
    Waited {
        /// Whether the timeout passed first.
        timed_out: bool,
    },
    /// Nobody else is running or provisioning: waiting could not make progress.
    NoProgress,
}

/// The fixed `noProgress` text (REFERENCE d.4.1).
pub const NO_PROGRESS_MESSAGE: &str = "No other Team member is running or provisioning, so \
waiting cannot make progress and never wakes inactive teammates. Re-list with list_agents and \
team_task_list, then use followup_task to wake each inactive teammate you still need before \
waiting again.";

/// One Lead's Team: the serializer, the folded state and the change edges.
pub struct Team {
    id: TeamId,
    lead: Agent,
    /// The serializer: FIFO async lock around the folded state.
    state: tokio::sync::Mutex<TeamState>,
    /// A synchronous copy of the roster (id → name, phase) for membership resolution.
    roster: Mutex<HashMap<SessionId, (String, MemberPhase)>>,
    /// Change edges: bumped after every durable Team event and every member status change.
    edges: watch::Sender<u64>,
    limits: TeamLimits,
    /// Messages being dispatched by this process (no duplicate attempts).
    in_flight: Mutex<HashSet<MessageId>>,
    /// Per-target FIFO dispatch chains (ticket queues).
    chains: Mutex<HashMap<SessionId, Arc<Chain>>>,
    /// Closed on shutdown: waits return, dispatch stops.
    closed: CancellationToken,
    /// `spawn_teammate` calls in flight (REFERENCE c.14: settled first at disposal).
    creations: InFlight,
    /// Dispatches and acknowledgements in flight (settled second at disposal).
    dispatches: InFlight,
    /// Failures of in-flight creations that ended after the Team was closed (the runtime's
    /// own cancellation, `TEAM_DISPOSED`, excluded): reported by the shutdown (c.14 step 6).
    close_failures: Mutex<Vec<String>>,
}

/// A count of operations in flight that a shutdown waits for (REFERENCE c.14 steps 3–4).
#[derive(Debug)]
struct InFlight {
    count: watch::Sender<usize>,
}

impl Default for InFlight {
    fn default() -> Self {
        Self {
            count: watch::channel(0).0,
        }
    }
}

impl InFlight {
    /// Counts one operation until the guard is dropped.
    fn enter(&self) -> InFlightGuard<'_> {
        self.count.send_modify(|n| *n += 1);
        InFlightGuard(self)
    }

    /// Waits until no operation is in flight.
    async fn settled(&self) {
        let mut rx = self.count.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// One operation in flight; dropping it ends it.
struct InFlightGuard<'a>(&'a InFlight);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Team {
    /// Attaches a Team to a live Lead whose log folds to `state`.
    pub(crate) fn new(lead: Agent, state: TeamState, limits: TeamLimits) -> Arc<Self> {
        let roster = state
            .members()
            .iter()
            .map(|m| (m.id.clone(), (m.name.to_string(), m.phase)))
            .collect();
        let (edges, _) = watch::channel(0);
        Arc::new(Self {
            id: TeamId::new(lead.id().clone()),
            lead,
            state: tokio::sync::Mutex::new(state),
            roster: Mutex::new(roster),
            edges,
            limits,
            in_flight: Mutex::new(HashSet::new()),
            chains: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            creations: InFlight::default(),
            dispatches: InFlight::default(),
            close_failures: Mutex::new(Vec::new()),
        })
    }

    /// The Team id (= the Lead's session id).
    pub fn id(&self) -> &TeamId {
        &self.id
    }

    /// The Lead.
    pub fn lead(&self) -> &Agent {
        &self.lead
    }

    /// The limits in force.
    pub fn limits(&self) -> &TeamLimits {
        &self.limits
    }

    /// A copy of the folded state (for views and tests).
    pub async fn snapshot(&self) -> TeamState {
        self.state.lock().await.clone()
    }

    /// Whether some member is still `provisioning` (a creation in flight, or one a crash cut).
    pub(crate) async fn has_provisioning(&self) -> bool {
        self.state
            .lock()
            .await
            .provisioning_members()
            .next()
            .is_some()
    }

    /// Closes the Team (REFERENCE c.14 steps 1–2): waits return, dispatches stop.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        self.edge();
    }

    /// Settles the operations in flight after [`Team::close`] (REFERENCE c.14 steps 3–4):
    /// creations first, then dispatches and acknowledgements, each bounded by `bound`. Returns
    /// the failures to report: creations that failed after the close for a reason of their own
    /// (not the close itself, `TEAM_DISPOSED`), and a `TEAM_DISPOSAL_TIMEOUT` for each kind of
    /// operation still running when its bound expired.
    pub(crate) async fn settle_in_flight(&self, bound: Duration) -> Vec<String> {
        let mut failures = Vec::new();
        for (ops, what) in [
            (&self.creations, "teammate creations"),
            (&self.dispatches, "message deliveries"),
        ] {
            if tokio::time::timeout(bound, ops.settled()).await.is_err() {
                failures.push(format!(
                    "TEAM_DISPOSAL_TIMEOUT: in-flight {what} of Team {} did not settle within {} ms",
                    self.id,
                    bound.as_millis()
                ));
            }
        }
        let mut reported = std::mem::take(&mut *lock(&self.close_failures));
        reported.extend(failures);
        reported
    }

    /// Wakes every current waiter (a change edge).
    fn edge(&self) {
        self.edges.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The roster phase of `id`, from the synchronous copy.
    pub(crate) fn phase_of(&self, id: &SessionId) -> Option<(String, MemberPhase)> {
        lock(&self.roster).get(id).cloned()
    }

    /// Commits `event` inside the serializer: invariant check, append to the Lead log, flush,
    /// apply to the state, then wake waiters (never before the flush).
    async fn commit(&self, state: &mut TeamState, event: &TeamEvent) -> Result<(), TeamOpError> {
        self.commit_from(state, event, None, None).await
    }

    /// [`Team::commit`] of the record a member's tool call `origin` makes, with its
    /// `tool/effect` link (and the call's result text, when it is known now) in the same
    /// batch, right before the record (DESIGN decision 10). What survives a crash: the batch
    /// whole or nothing of it (decision 9) — the link and the record, so recovery rebuilds the
    /// call's result, or neither, so recovery asks the call again.
    async fn commit_from(
        &self,
        state: &mut TeamState,
        event: &TeamEvent,
        origin: Option<&CallOrigin>,
        result: Option<String>,
    ) -> Result<(), TeamOpError> {
        state.check_event(event).map_err(|e| TeamOpError::Log {
            code: "INVARIANT",
            message: e.to_string(),
        })?;
        let mut drafts = Vec::with_capacity(2);
        if let Some(origin) = origin {
            let link = ToolEffectRecord {
                session_id: origin.session.clone(),
                call_id: origin.call_id.clone(),
                tool: origin.tool.to_owned(),
                result,
            };
            drafts.push(troupe_protocol::EventDraft::ignorable(
                troupe_protocol::event_types::TOOL_EFFECT,
                serde_json::to_value(&link).unwrap_or(Value::Null),
            ));
        }
        drafts.push(event.to_draft());
        let stored: Vec<_> = self
            .lead
            .append_records(drafts)?
            .into_iter()
            .filter(|e| e.kind != troupe_protocol::event_types::TOOL_EFFECT)
            .collect();
        self.lead.writer().flush().await?;
        for e in &stored {
            state.apply(e).map_err(|e| TeamOpError::Log {
                code: "TEAM_LOG_INVALID",
                message: e.to_string(),
            })?;
        }
        if let TeamRecord::Member(m) = &event.record {
            lock(&self.roster).insert(m.id.clone(), (m.name.to_string(), m.phase));
        }
        self.edge();
        Ok(())
    }

    /// Takes the next place in `target`'s delivery queue. Called inside the serializer right
    /// after `team/message/queued` is durable, so delivery order is durable queue order even
    /// when several senders race (REFERENCE c.10.1 step 3).
    fn ticket(&self, target: &SessionId) -> Ticket {
        let chain = Arc::clone(
            lock(&self.chains)
                .entry(target.clone())
                .or_insert_with(|| Arc::new(Chain::default())),
        );
        let number = {
            let mut st = lock(&chain.state);
            let n = st.next;
            st.next += 1;
            n
        };
        Ticket { chain, number }
    }
}

/// One target's delivery queue: tickets are served strictly in order.
#[derive(Debug, Default)]
struct Chain {
    state: Mutex<ChainState>,
    turn: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct ChainState {
    /// The number the next ticket gets.
    next: u64,
    /// The ticket whose turn it is.
    serving: u64,
    /// Tickets dropped before their turn (their dispatch was abandoned): skipped when reached.
    abandoned: std::collections::BTreeSet<u64>,
}

/// A place in a [`Chain`]. Dropping it after its turn lets the next ticket through; dropping
/// it before its turn marks it abandoned, so the queue skips it.
struct Ticket {
    chain: Arc<Chain>,
    number: u64,
}

impl Ticket {
    /// Waits until every earlier ticket of the chain was served.
    async fn wait_turn(&self) {
        loop {
            let notified = self.chain.turn.notified();
            if lock(&self.chain.state).serving == self.number {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = lock(&self.chain.state);
        if st.serving == self.number {
            // This ticket's turn is over: pass it on, skipping abandoned tickets.
            st.serving += 1;
            loop {
                let serving = st.serving;
                if !st.abandoned.remove(&serving) {
                    break;
                }
                st.serving += 1;
            }
        } else if st.serving < self.number {
            // Dropped before its turn: skip it when the queue gets there.
            st.abandoned.insert(self.number);
        }
        drop(st);
        self.chain.turn.notify_waiters();
    }
}

/// `MemberView` needs the live status of teammates: resident agents only.
fn live_agent(rt: &Runtime, id: &SessionId) -> Option<LiveAgent> {
    rt.agent(id).map(|a| LiveAgent {
        status: match a.status() {
            AgentStatus::Running => LiveStatus::Running,
            AgentStatus::Idle => LiveStatus::Idle,
        },
        model: a.with_transcript(|t| t.config().map(|c| c.model.model.clone())),
    })
}

fn lead_live(team: &Team) -> LiveAgent {
    LiveAgent {
        status: match team.lead.status() {
            AgentStatus::Running => LiveStatus::Running,
            AgentStatus::Idle => LiveStatus::Idle,
        },
        model: team
            .lead
            .with_transcript(|t| t.config().map(|c| c.model.model.clone())),
    }
}

fn disposed() -> TeamError {
    TeamError::Disposed {
        message: "the Team runtime is shut down".to_owned(),
    }
}

/// Why a dispatch left its message queued: the step that failed and its error.
struct DispatchFailure {
    step: &'static str,
    error: TeamOpError,
}

impl DispatchFailure {
    /// The inactive target's stored log could not be read or replayed (CASES 107).
    fn inspect(error: impl Into<TeamOpError>) -> Self {
        Self {
            step: "the target's log could not be inspected",
            error: error.into(),
        }
    }

    /// Injecting, following up or cold-resuming the target failed (CASES 108).
    fn delivery(error: impl Into<TeamOpError>) -> Self {
        Self {
            step: "delivery failed",
            error: error.into(),
        }
    }

    /// The target's flush or the Lead's `delivered` record failed (CASES 106).
    fn acknowledgement(error: impl Into<TeamOpError>) -> Self {
        Self {
            step: "acknowledgement flush failed",
            error: error.into(),
        }
    }
}

/// An event a decision returned that is not of the kind that decision produces.
fn unexpected(what: &str) -> TeamOpError {
    TeamOpError::Log {
        code: "TEAM_LOG_INVALID",
        message: format!("internal: the decision did not produce a {what} record"),
    }
}

fn not_member(agent: &Agent) -> TeamOpError {
    TeamOpError::Team(TeamError::NotMember {
        id: agent.id().to_string(),
    })
}

fn error_text(e: &dyn std::fmt::Display) -> String {
    e.to_string()
}

impl Runtime {
    /// The Team of a live Lead, if `lead_id` is one.
    pub fn team(&self, lead_id: &SessionId) -> Option<Arc<Team>> {
        self.teams_map().get(lead_id).cloned()
    }

    /// Membership resolution (REFERENCE c.2, DESIGN decision 3): the Team and the caller for
    /// `agent` — the Lead of its own Team when it is a Team root, a teammate when it is a
    /// provisioning/active roster member of its live parent Lead; otherwise none.
    pub fn team_of(&self, agent: &Agent) -> Option<(Arc<Team>, SessionId)> {
        if self.agent(agent.id()).is_none_or(|a| !a.same(agent)) {
            return None;
        }
        if let Some(team) = self.team(agent.id()) {
            return Some((team, agent.id().clone()));
        }
        let parent = self.parent_of(agent.id())?;
        let team = self.team(&parent)?;
        match team.phase_of(agent.id()) {
            Some((_, MemberPhase::Provisioning | MemberPhase::Active)) => {
                Some((team, agent.id().clone()))
            }
            _ => None,
        }
    }

    /// Attaches the Team of a Team-profile root: folds its log, registers it, and forwards
    /// status edges of the Lead and its teammates to waiters.
    pub(crate) async fn attach_team(&self, lead: &Agent) -> Result<Arc<Team>, TeamOpError> {
        // A selective read: only `team/…` lines are decoded. The other lines' envelope prefix
        // is enough here: the resume that precedes an attach replayed and checked every line
        // (and a new root's log holds only what this process wrote). A damaged log is reported
        // before a fold refusal, as when the whole log was read first.
        let mut fold = StreamFold::new(TeamId::new(lead.id().clone()));
        self.journal().read_selected_each(
            lead.id(),
            LineCheck::Prefix,
            &StreamFold::reads,
            &mut |selected| match selected {
                Selected::Line(line) => {
                    if fold.line(line.kind, line.text) {
                        LineUse::Used
                    } else {
                        LineUse::NeedEvent
                    }
                }
                Selected::Event(event) => {
                    fold.event(&event);
                    LineUse::Used
                }
            },
        )?;
        let state = fold.finish().map_err(|e| TeamOpError::Log {
            code: "TEAM_LOG_INVALID",
            message: e.to_string(),
        })?;
        // Explicit limits (anything but the defaults) win; otherwise the recorded ones.
        let configured = self.options().team_limits;
        let recorded = lead
            .with_transcript(|t| t.config().and_then(|c| c.team_limits.clone()))
            .and_then(|v| TeamLimits::from_json(&v).ok());
        let limits = match recorded {
            Some(recorded) if configured == TeamLimits::default() => recorded,
            _ => configured,
        };
        let team = Team::new(lead.clone(), state, limits);
        self.teams_map_mut()
            .insert(lead.id().clone(), Arc::clone(&team));
        let mut progress = self.subscribe_progress();
        let weak = Arc::downgrade(&team);
        let closed = team.closed.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = closed.cancelled() => return,
                    event = progress.recv() => match event {
                        Ok(p) => {
                            let Some(team) = weak.upgrade() else { return };
                            if matches!(p.progress, Progress::Status { .. })
                                && (p.agent == *team.lead.id() || team.phase_of(&p.agent).is_some())
                            {
                                team.edge();
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            if let Some(team) = weak.upgrade() {
                                team.edge();
                            }
                        }
                        Err(_) => return,
                    },
                }
            }
        });
        Ok(team)
    }

    /// Closes every Team: waiters return `{timedOut:false}`, dispatches stop (REFERENCE c.14
    /// steps 1–2). Members are then released by [`Runtime::shutdown`], parking their inboxes.
    pub(crate) fn close_teams(&self) {
        for team in self.teams_map().values() {
            team.close();
        }
    }

    /// Resolves `agent` to its Team and its [`Caller`] (inside the serializer).
    fn resolve(&self, agent: &Agent) -> Result<Arc<Team>, TeamOpError> {
        // After shutdown (or the member's disposal) operations are refused as disposed
        // (REFERENCE c.14), not as a membership problem.
        if agent.is_disposed() {
            return Err(disposed().into());
        }
        let (team, _) = self.team_of(agent).ok_or_else(|| not_member(agent))?;
        if team.closed.is_cancelled() {
            return Err(TeamOpError::Team(disposed()));
        }
        Ok(team)
    }

    fn caller_in(team: &Team, state: &TeamState, agent: &Agent) -> Result<Caller, TeamOpError> {
        if agent.id() == team.lead.id() {
            return Ok(Caller::lead(&team.id));
        }
        state.caller(agent.id()).ok_or_else(|| not_member(agent))
    }

    /// `list_agents` (REFERENCE c.7): the Lead row, then every member (failed included).
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER`.
    pub async fn team_list_members(&self, agent: &Agent) -> Result<Vec<MemberView>, TeamOpError> {
        let team = self.resolve(agent)?;
        let state = team.state.lock().await;
        Self::caller_in(&team, &state, agent)?;
        Ok(state.list_members(&lead_live(&team), &|id| live_agent(self, id)))
    }

    /// `spawn_teammate` (REFERENCE c.8): records `provisioning`, starts the child with the
    /// reserved id (its initial prompt is durable in the child log before this returns), then
    /// records `active` — or `failed` with the error, draining the child.
    ///
    /// Checks, in order: the Lead role, the name, the description, the name's availability
    /// and the member limit (REFERENCE c.8), then the prompt, which must not be empty or
    /// whitespace (a Troupe rule, like empty messages: a teammate needs an assignment);
    /// nothing is appended before every check passed.
    ///
    /// # Errors
    /// `TEAM_LEAD_REQUIRED`, `TEAM_INVALID_MEMBER_NAME`, `TEAM_INVALID_ARGUMENT` (description,
    /// prompt), `TEAM_MEMBER_NAME_TAKEN`, `TEAM_MEMBER_LIMIT`, `TEAM_PROVISIONING_CONFLICT`,
    /// the child start's own error (the member is then `failed`).
    pub async fn team_spawn(
        &self,
        agent: &Agent,
        name: &str,
        description: &str,
        prompt: &str,
        context: MemberContext,
        cancel: Option<CancellationToken>,
    ) -> Result<MemberView, TeamOpError> {
        self.team_spawn_as(agent, name, description, prompt, context, cancel, None)
            .await
    }

    /// [`Runtime::team_spawn`] for the tool call `origin` (its `provisioning` record is
    /// linked to the call).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn team_spawn_as(
        &self,
        agent: &Agent,
        name: &str,
        description: &str,
        prompt: &str,
        context: MemberContext,
        cancel: Option<CancellationToken>,
        origin: Option<&CallOrigin>,
    ) -> Result<MemberView, TeamOpError> {
        let team = self.resolve(agent)?;
        // Tracked until it settles, so a shutdown waits for it (REFERENCE c.8 step 1, c.14).
        let _in_flight = team.creations.enter();
        if team.closed.is_cancelled() {
            return Err(disposed().into());
        }
        if cancel.as_ref().is_some_and(CancellationToken::is_cancelled) {
            return Err(RuntimeError::Cancelled("teammate creation was cancelled".into()).into());
        }
        let result = self
            .spawn_tracked(
                &team,
                agent,
                SpawnArgs {
                    name,
                    description,
                    prompt,
                    context,
                },
                cancel,
                origin,
            )
            .await;
        if let Err(e) = &result
            && team.closed.is_cancelled()
            && e.code() != "TEAM_DISPOSED"
        {
            // A creation that failed on its own while the Team was closing: the shutdown
            // reports it (REFERENCE c.14 step 6).
            lock(&team.close_failures).push(format!("{}: {e}", e.code()));
        }
        result
    }

    /// [`Runtime::team_spawn`] once admitted and tracked.
    async fn spawn_tracked(
        &self,
        team: &Arc<Team>,
        agent: &Agent,
        args: SpawnArgs<'_>,
        cancel: Option<CancellationToken>,
        origin: Option<&CallOrigin>,
    ) -> Result<MemberView, TeamOpError> {
        let SpawnArgs {
            name,
            description,
            prompt,
            context,
        } = args;
        // The caller's signal or the Team's closing stops the creation (REFERENCE c.8 step 3:
        // `any(request signal, runtime signal)`).
        let stop = CancellationToken::new();
        let _stop_watch = stop.clone().drop_guard();
        {
            let stop = stop.clone();
            let closed = team.closed.clone();
            let caller = cancel.clone();
            tokio::spawn(async move {
                let caller_cancelled = async {
                    match caller {
                        Some(c) => c.cancelled().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = closed.cancelled() => stop.cancel(),
                    () = caller_cancelled => stop.cancel(),
                    () = stop.cancelled() => {}
                }
            });
        }
        let provider = match context {
            MemberContext::Fresh => ChildProvider::Spawn,
            MemberContext::Fork => ChildProvider::Fork,
        };
        let child_id = SessionId::random();
        let member = {
            let mut state = team.state.lock().await;
            let caller = Self::caller_in(team, &state, agent)?;
            let request = ProvisionTeammate {
                name: name.to_owned(),
                description: description.to_owned(),
                provider: provider.as_str().to_owned(),
                context,
            };
            let event =
                state.decide_provision(&caller, &request, child_id.clone(), &team.limits)?;
            if js_trim(prompt).is_empty() {
                return Err(TeamError::InvalidArgument {
                    message: "prompt must not be empty: give the teammate its assignment"
                        .to_owned(),
                }
                .into());
            }
            team.commit_from(&mut state, &event, origin, None).await?;
            match event.record {
                TeamRecord::Member(m) => m,
                _ => return Err(unexpected("team/member")),
            }
        };
        let started = self
            .start_child(
                &team.lead,
                ChildSpec {
                    provider,
                    label: member.name.to_string(),
                    child_id: Some(child_id.clone()),
                    prompt: prompt.to_owned(),
                    continuable: true,
                    notify_parent: false,
                    profile: Profile::Team,
                    cancel: Some(stop.clone()),
                },
            )
            .await;
        // Stopped by the Team's closing (not by the caller): the creation was disposed.
        let started: Result<_, TeamOpError> = match started {
            Err(RuntimeError::Cancelled(_)) if team.closed.is_cancelled() => {
                Err(TeamError::Disposed {
                    message: "teammate creation aborted: the Team runtime is shut down".to_owned(),
                }
                .into())
            }
            other => other.map_err(TeamOpError::from),
        };
        let outcome = match &started {
            Ok(_) => ProvisioningOutcome::Active,
            Err(e) => ProvisioningOutcome::Failed {
                error: error_text(e),
            },
        };
        let settled = {
            let mut state = team.state.lock().await;
            match state.decide_settle_provisioning(&child_id, &outcome)? {
                SettleDecision::Append(event) => {
                    team.commit(&mut state, &event).await?;
                    None
                }
                SettleDecision::AlreadySettled(phase) => Some(phase),
            }
        };
        match (started, settled) {
            (Err(e), _) => {
                let _ = self
                    .drain_children(&team.lead, std::slice::from_ref(&child_id))
                    .await;
                Err(e)
            }
            (Ok(_), Some(MemberPhase::Failed)) => {
                let _ = self
                    .drain_children(&team.lead, std::slice::from_ref(&child_id))
                    .await;
                Err(TeamError::ProvisioningConflict {
                    message: format!(
                        "teammate {} was marked failed by recovery while it was being created",
                        member.name
                    ),
                }
                .into())
            }
            (Ok(_), _) => {
                let state = team.state.lock().await;
                let snapshot = state.member(&child_id).cloned().unwrap_or(member);
                Ok(MemberView::spawned(
                    &snapshot,
                    live_agent(self, &child_id).as_ref(),
                ))
            }
        }
    }

    /// `send_message` (quiet) / `followup_task` (wakeup) (REFERENCE c.10.1): the message is
    /// durable in the Lead log before delivery starts; returns its id and `accepted` when the
    /// target durably holds it now, `queued` otherwise (still stored: never resend).
    ///
    /// # Errors
    /// `TEAM_MEMBER_NOT_FOUND`, `TEAM_SELF_MESSAGE`, `TEAM_MAILBOX_FULL`,
    /// `TEAM_MESSAGE_TOO_LARGE`, `TEAM_INVALID_ARGUMENT`, `TEAM_NOT_MEMBER`, `TEAM_DISPOSED`.
    pub async fn team_send(
        &self,
        agent: &Agent,
        target: &str,
        text: &str,
        delivery: Delivery,
    ) -> Result<(MessageId, bool), TeamOpError> {
        self.team_send_as(agent, target, text, delivery, None).await
    }

    /// [`Runtime::team_send`] for the tool call `origin` (its `queued` record is linked to the
    /// call).
    pub(crate) async fn team_send_as(
        &self,
        agent: &Agent,
        target: &str,
        text: &str,
        delivery: Delivery,
        origin: Option<&CallOrigin>,
    ) -> Result<(MessageId, bool), TeamOpError> {
        let team = self.resolve(agent)?;
        // Whitespace as JavaScript's `trim` sees it, like every other Team text (c.11.6).
        if js_trim(text).is_empty() {
            return Err(TeamError::InvalidArgument {
                message: "message must not be empty".to_owned(),
            }
            .into());
        }
        let message = {
            let mut state = team.state.lock().await;
            let caller = Self::caller_in(&team, &state, agent)?;
            let id = team_message_id(&uuid_like())?;
            let request = SendMessage {
                target: target.to_owned(),
                content: vec![json!({"type": "text", "text": text})],
                delivery,
            };
            let event = state.decide_send(&caller, &request, id, &team.limits)?;
            team.commit_from(&mut state, &event, origin, None).await?;
            let message = match event.record {
                TeamRecord::MessageQueued(m) => m,
                _ => return Err(unexpected("team/message/queued")),
            };
            let ticket = team.ticket(&message.target_id);
            (message, ticket)
        };
        let (message, ticket) = message;
        let accepted = self.dispatch(&team, &message, ticket).await;
        Ok((message.id, accepted))
    }

    /// Delivers one queued message (REFERENCE c.10.3); never fails (a failure leaves the
    /// message queued and is logged as a warning naming the step that failed: `the target's
    /// log could not be inspected`, `delivery failed` or `acknowledgement flush failed`).
    /// Returns whether the target durably holds it. Tracked until it settles, so a shutdown
    /// waits for it (REFERENCE c.14 step 4); once the Team is closed, a dispatch that has not
    /// started does nothing.
    async fn dispatch(&self, team: &Arc<Team>, message: &MessageSnapshot, ticket: Ticket) -> bool {
        let _in_flight = team.dispatches.enter();
        ticket.wait_turn().await;
        if team.closed.is_cancelled() || !lock(&team.in_flight).insert(message.id.clone()) {
            return false;
        }
        let result = self.dispatch_once(team, message).await;
        drop(ticket);
        lock(&team.in_flight).remove(&message.id);
        match result {
            Ok(delivered) => delivered,
            Err(DispatchFailure { step, error }) => {
                tracing::warn!(
                    message = %message.id,
                    target = %message.target_id,
                    error = %error,
                    "team message remains queued: {step}"
                );
                false
            }
        }
    }

    async fn dispatch_once(
        &self,
        team: &Arc<Team>,
        message: &MessageSnapshot,
    ) -> Result<bool, DispatchFailure> {
        let item = delivered_user_message(&team.id, message);
        let target = &message.target_id;
        let held = |a: &Agent| a.with_transcript(|t| t.accepted(&message.id));
        if target == team.lead.id() {
            if !held(&team.lead) {
                match message.delivery {
                    Delivery::Wakeup => team.lead.followup(item).await,
                    Delivery::Quiet => team.lead.inject(item).await,
                }
                .map_err(DispatchFailure::delivery)?;
            }
            return self.acknowledge(team, &team.lead, message).await;
        }
        if let Some(live) = self.agent(target) {
            if !held(&live) {
                match message.delivery {
                    Delivery::Quiet => live.inject(item).await.map(|_| ()),
                    Delivery::Wakeup => self
                        .followup_child(&team.lead, target, item)
                        .await
                        .map(|_| ()),
                }
                .map_err(DispatchFailure::delivery)?;
            }
            // The target may have settled and been re-activated meanwhile: check the current
            // activation's log.
            let current = self.agent(target).unwrap_or(live);
            return self.acknowledge(team, &current, message).await;
        }
        if message.delivery == Delivery::Quiet {
            // Quiet mail never starts an inactive teammate: it waits until the target runs.
            return Ok(false);
        }
        // Wakeup to an inactive teammate: de-duplicate against its stored log first.
        let stored = self
            .journal()
            .read(target)
            .map_err(TeamOpError::from)
            .and_then(|replay| {
                Transcript::fold(replay.header.seed_len(), &replay.events).map_err(Into::into)
            })
            .map_err(DispatchFailure::inspect)?;
        if stored.accepted(&message.id) {
            // Already held (e.g. a crash came between the target's flush and our record). If it
            // is still waiting in the inactive target's inbox, wake the target so the wakeup
            // takes effect — without a second copy.
            let pending = stored
                .next_turn()
                .iter()
                .chain(stored.next_step())
                .any(|m| m.id == message.id);
            if pending {
                self.wake_child(&team.lead, target)
                    .await
                    .map_err(DispatchFailure::delivery)?;
            }
            self.mark_delivered(team, message)
                .await
                .map_err(DispatchFailure::acknowledgement)?;
            return Ok(true);
        }
        // A closing Team starts no cold resume: the message stays queued for the next run.
        if team.closed.is_cancelled() {
            return Ok(false);
        }
        // Cold resume; older quiet mail goes in first so the target's history keeps queue
        // order (REFERENCE c.10 porting note).
        let agent = self
            .ensure_child_live(&team.lead, target)
            .await
            .map_err(DispatchFailure::delivery)?;
        if let Err(e) = self.deliver_older_quiet(team, &agent, Some(message)).await {
            // The cold-resumed target must still settle (its log failed, or a flush did).
            self.ensure_watched(&agent);
            return Err(e);
        }
        self.followup_child(&team.lead, target, item)
            .await
            .map_err(DispatchFailure::delivery)?;
        self.acknowledge(team, &agent, message).await
    }

    /// Delivers the target's pending quiet messages — those queued before `before` when a
    /// wakeup cold-resumes it, every one when the recovery continues it (`None`) — in queue
    /// order, acknowledging each.
    async fn deliver_older_quiet(
        &self,
        team: &Arc<Team>,
        agent: &Agent,
        before: Option<&MessageSnapshot>,
    ) -> Result<(), DispatchFailure> {
        let older: Vec<MessageSnapshot> = {
            let state = team.state.lock().await;
            state
                .pending_messages_for(agent.id())
                .filter(|m| {
                    m.delivery == Delivery::Quiet
                        && before.is_none_or(|b| state.queued_before(&m.id, &b.id))
                })
                .cloned()
                .collect()
        };
        for m in older {
            if !agent.with_transcript(|t| t.accepted(&m.id)) {
                agent
                    .inject(delivered_user_message(&team.id, &m))
                    .await
                    .map_err(DispatchFailure::delivery)?;
            }
            self.acknowledge(team, agent, &m).await?;
        }
        Ok(())
    }

    /// Acknowledges `message` once `target`'s log durably holds it (REFERENCE c.10.3): the
    /// target's flush comes before the Lead's `delivered` record.
    async fn acknowledge(
        &self,
        team: &Arc<Team>,
        target: &Agent,
        message: &MessageSnapshot,
    ) -> Result<bool, DispatchFailure> {
        match target.writer().flush().await {
            // A target that settled meanwhile closed its writer, which flushed everything it
            // had appended: its transcript is still exactly its durable log.
            Ok(_) | Err(troupe_journal::JournalError::Closed { .. }) => {}
            Err(e) => return Err(DispatchFailure::acknowledgement(e)),
        }
        // The handle may be an activation that settled and was replaced meanwhile; the stored
        // log is the authority then.
        if !target.with_transcript(|t| t.accepted(&message.id)) && !self.held_in_log(message) {
            return Ok(false);
        }
        self.mark_delivered(team, message)
            .await
            .map_err(DispatchFailure::acknowledgement)?;
        Ok(true)
    }

    async fn mark_delivered(
        &self,
        team: &Arc<Team>,
        message: &MessageSnapshot,
    ) -> Result<(), TeamOpError> {
        let mut state = team.state.lock().await;
        if let Some(event) = state.decide_delivered(&message.id, &message.target_id) {
            team.commit(&mut state, &event).await?;
        }
        Ok(())
    }

    /// `wait_agent` (REFERENCE c.12, d.4.1): `NoProgress` at once when no other member is
    /// running or provisioning; otherwise waits for the next change edge after the call began,
    /// the timeout, or the Team's closing (`timedOut: false`).
    ///
    /// # Errors
    /// `TEAM_INVALID_TIMEOUT` (`timeout_ms` not an integer in 10000..=3600000),
    /// `TEAM_WAIT_ABORTED` when `cancel` fires, `TEAM_NOT_MEMBER`.
    pub async fn team_wait(
        &self,
        agent: &Agent,
        timeout_ms: &Value,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome, TeamOpError> {
        let timeout_ms = troupe_team::validate_wait_timeout(timeout_ms)?;
        // A signal that is already aborted is reported before anything else (REFERENCE c.12).
        if cancel.is_cancelled() {
            return Err(TeamError::WaitAborted {
                reason: agent
                    .abort_cause()
                    .map_or_else(|| "the turn was cancelled".to_owned(), |c| inspect(&c)),
            }
            .into());
        }
        let (team, _) = self.team_of(agent).ok_or_else(|| not_member(agent))?;
        if team.closed.is_cancelled() {
            return Ok(WaitOutcome::Waited { timed_out: false });
        }
        // Register before looking at statuses, so no edge between the two is missed.
        let mut edges = team.edges.subscribe();
        let others_active = {
            let state = team.state.lock().await;
            Self::caller_in(&team, &state, agent)?;
            state
                .list_members(&lead_live(&team), &|id| live_agent(self, id))
                .iter()
                .filter(|m| m.id != *agent.id())
                .any(|m| {
                    matches!(
                        m.status,
                        troupe_team::MemberStatus::Running
                            | troupe_team::MemberStatus::Provisioning
                    )
                })
        };
        if !others_active {
            return Ok(WaitOutcome::NoProgress);
        }
        tokio::select! {
            _ = edges.changed() => Ok(WaitOutcome::Waited { timed_out: false }),
            () = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
                Ok(WaitOutcome::Waited { timed_out: true })
            }
            () = team.closed.cancelled() => Ok(WaitOutcome::Waited { timed_out: false }),
            () = cancel.cancelled() => {
                let reason = agent
                    .abort_cause()
                    .map_or_else(|| "the turn was cancelled".to_owned(), |c| inspect(&c));
                Err(TeamError::WaitAborted { reason }.into())
            }
        }
    }

    /// `interrupt_agent` (REFERENCE c.13): Lead only; stops a live teammate's turn keeping its
    /// inbox; returns its status before the interrupt (`inactive` when not resident).
    ///
    /// # Errors
    /// `TEAM_LEAD_REQUIRED`, `TEAM_INVALID_TARGET`, `TEAM_MEMBER_NOT_FOUND`.
    pub async fn team_interrupt(
        &self,
        agent: &Agent,
        target: &str,
    ) -> Result<&'static str, TeamOpError> {
        let team = self.resolve(agent)?;
        let target_id = {
            let state = team.state.lock().await;
            let caller = Self::caller_in(&team, &state, agent)?;
            state.resolve_interrupt_target(&caller, target)?.id.clone()
        };
        let Some(live) = self.agent(&target_id) else {
            return Ok("inactive");
        };
        let previous = match live.status() {
            AgentStatus::Running => "running",
            AgentStatus::Idle => "idle",
        };
        self.interrupt(&team.lead, &target_id).await?;
        // Return once the interrupted turn has closed, so the roster read right after shows
        // the settled status, not `running`. Bounded: a tool that ignores cancellation keeps
        // the turn open, and the Lead must not hang on it.
        let bound = Duration::from_millis(team.limits.disposal_timeout_ms);
        if tokio::time::timeout(bound, live.wait_idle()).await.is_err() {
            tracing::warn!(teammate = %target_id, "the interrupted turn did not close in time");
        }
        Ok(previous)
    }

    /// `team_task_create` (REFERENCE c.11.3).
    ///
    /// # Errors
    /// `TEAM_TASK_LIMIT`, `TEAM_INVALID_ARGUMENT`, `TEAM_TASK_NOT_FOUND`,
    /// `TEAM_TASK_DEPENDENCY_CYCLE`, `TEAM_INVALID_WRITE_SCOPE`, `TEAM_NOT_MEMBER`.
    pub async fn team_create_task(
        &self,
        agent: &Agent,
        request: &CreateTask,
    ) -> Result<TaskView, TeamOpError> {
        self.team_create_task_as(agent, request, None).await
    }

    /// [`Runtime::team_create_task`] for the tool call `origin` (its record is linked to the
    /// call, with the result text).
    pub(crate) async fn team_create_task_as(
        &self,
        agent: &Agent,
        request: &CreateTask,
        origin: Option<&CallOrigin>,
    ) -> Result<TaskView, TeamOpError> {
        let team = self.resolve(agent)?;
        let mut state = team.state.lock().await;
        let caller = Self::caller_in(&team, &state, agent)?;
        let event = state.decide_create_task(&caller, request, &team.limits)?;
        let view = task_view_before(&state, &event)?;
        let result = origin.and_then(|_| serde_json::to_string(&view).ok());
        team.commit_from(&mut state, &event, origin, result).await?;
        Ok(view)
    }

    /// `team_task_update` (REFERENCE c.11.4): one compare-and-set action.
    ///
    /// # Errors
    /// Every code of c.11.4 (`TEAM_TASK_STALE_REVISION`, `TEAM_TASK_ALREADY_CLAIMED`, …).
    pub async fn team_update_task(
        &self,
        agent: &Agent,
        request: &UpdateTask,
    ) -> Result<TaskView, TeamOpError> {
        self.team_update_task_as(agent, request, None).await
    }

    /// [`Runtime::team_update_task`] for the tool call `origin` (its record is linked to the
    /// call, with the result text).
    pub(crate) async fn team_update_task_as(
        &self,
        agent: &Agent,
        request: &UpdateTask,
        origin: Option<&CallOrigin>,
    ) -> Result<TaskView, TeamOpError> {
        let team = self.resolve(agent)?;
        let mut state = team.state.lock().await;
        let caller = Self::caller_in(&team, &state, agent)?;
        let event = state.decide_update_task(&caller, request)?;
        let view = task_view_before(&state, &event)?;
        let result = origin.and_then(|_| serde_json::to_string(&view).ok());
        team.commit_from(&mut state, &event, origin, result).await?;
        Ok(view)
    }

    /// `team_task_get` (REFERENCE c.11.2): tombstones included.
    ///
    /// # Errors
    /// `TEAM_TASK_NOT_FOUND`, `TEAM_NOT_MEMBER`.
    pub async fn team_get_task(&self, agent: &Agent, id: &str) -> Result<TaskView, TeamOpError> {
        let team = self.resolve(agent)?;
        let state = team.state.lock().await;
        let caller = Self::caller_in(&team, &state, agent)?;
        Ok(state.get_task(&caller, id)?)
    }

    /// `team_task_list` (REFERENCE d.4.2).
    ///
    /// # Errors
    /// `TEAM_INVALID_ARGUMENT` for a bad cursor or limit, `TEAM_NOT_MEMBER`.
    pub async fn team_list_tasks(
        &self,
        agent: &Agent,
        query: &TaskListQuery,
    ) -> Result<TaskPage, TeamOpError> {
        let team = self.resolve(agent)?;
        let state = team.state.lock().await;
        let caller = Self::caller_in(&team, &state, agent)?;
        Ok(state.list_tasks(&caller, query)?)
    }

    /// Roster reconciliation of a Team root being resumed (REFERENCE c.9, issue 10 defect 6):
    /// members left `provisioning` by a crash become `active` or `failed` from their child
    /// logs. A child with no log, or a log without its prompt, has done nothing: when the
    /// Lead's `spawn_teammate` call that reserved the name is in the Lead log (`requests`, from
    /// `lead_events`), the child is created again under its reserved id with that prompt
    /// waiting (the continuation of the Team recovery runs it) and the member becomes
    /// `active`; otherwise it is `failed` as REFERENCE c.9 says. Failures are warnings,
    /// silent once the Team is closed.
    pub(crate) async fn reconcile_roster(
        &self,
        team: &Arc<Team>,
        requests: &HashMap<String, crate::recovery::SpawnRequest>,
        lead_events: &[troupe_protocol::Event],
    ) {
        if let Err(e) = self
            .reconcile_provisioning(team, requests, lead_events)
            .await
        {
            // A pass the shutdown cut short is not a failure worth reporting (REFERENCE c.9:
            // warnings are suppressed after disposal).
            if !team.closed.is_cancelled() {
                tracing::warn!(team = %team.id, error = %e, "roster reconciliation failed");
            }
        }
    }

    /// The rest of the recovery of a Team root (REFERENCE c.9), once its roster is reconciled
    /// and its own open turn closed: mailbox recovery (pending messages in queue order; quiet
    /// mail to inactive teammates stays queued, wakeup mail cold-resumes its target), then the
    /// continuation of teammates a stop left with work (see `continue_teammates`).
    pub(crate) async fn recover_team(&self, team: &Arc<Team>) {
        let pending: Vec<MessageSnapshot> = {
            let state = team.state.lock().await;
            state.pending_messages().cloned().collect()
        };
        for message in pending {
            if team.closed.is_cancelled() {
                return;
            }
            let to_inactive_teammate =
                message.target_id != *team.lead.id() && self.agent(&message.target_id).is_none();
            if message.delivery == Delivery::Quiet && to_inactive_teammate {
                // It stays queued unless a crash came after the target already held it.
                if self.held_in_log(&message)
                    && let Err(e) = self.mark_delivered(team, &message).await
                    && !team.closed.is_cancelled()
                {
                    tracing::warn!(message = %message.id, error = %e, "acknowledgement failed");
                }
                continue;
            }
            let ticket = team.ticket(&message.target_id);
            self.dispatch(team, &message, ticket).await;
        }
        self.continue_teammates(team).await;
    }

    /// Whether the (inactive) target's stored log already holds `message`.
    fn held_in_log(&self, message: &MessageSnapshot) -> bool {
        self.journal()
            .read(&message.target_id)
            .ok()
            .and_then(|r| Transcript::fold(r.header.seed_len(), &r.events).ok())
            .is_some_and(|t| t.accepted(&message.id))
    }

    /// Continues the work of active teammates a stop left unfinished (REFERENCE c.9 extended;
    /// "nothing accepted is lost"): a teammate that holds parked *wakeup* mail is woken (its
    /// parked items run in order); every turn of a teammate that a crash cut or the user
    /// cancelled (Ctrl-C/SIGTERM) gets exactly one continuation note asking it to check the
    /// state and continue: a note an earlier resume queued counts even before it ran, and a
    /// teammate the mailbox recovery already woke (its wakeup runs a turn of its own) is still
    /// continued. A turn the Lead
    /// interrupted on purpose (`{"kind":"parent"}`) is left alone. What each is owed is decided
    /// from its log ([`crate::recovery::teammate_recovery`],
    /// [`Transcript::owed_continuations`]).
    async fn continue_teammates(&self, team: &Arc<Team>) {
        let (members, wakeups): (Vec<SessionId>, HashSet<MessageId>) = {
            let state = team.state.lock().await;
            (
                state
                    .members()
                    .iter()
                    .filter(|m| m.phase == MemberPhase::Active)
                    .map(|m| m.id.clone())
                    .collect(),
                state
                    .messages()
                    .iter()
                    .filter(|m| m.delivery == Delivery::Wakeup)
                    .map(|m| m.id.clone())
                    .collect(),
            )
        };
        for id in members {
            if team.closed.is_cancelled() {
                return;
            }
            let resident = self.agent(&id).is_some();
            let plan = match self.agent(&id) {
                // Resident already (the mailbox recovery delivered wakeup mail to it, or the
                // Lead's new work reached it): it is running or has run, and its cold resume
                // closed the turn the stop cut. What it is owed is read from its live
                // transcript, which is the fold of its log; its open turn, if any, is running.
                Some(agent) => TeammateRecovery {
                    wake: false,
                    notes: agent.with_transcript(|t| {
                        t.owed_continuations(ContinuationRule::Teammate, OpenTurn::Running)
                    }),
                },
                None => {
                    let Ok(replay) = self.journal().read(&id) else {
                        continue;
                    };
                    let Ok(t) = Transcript::fold(replay.header.seed_len(), &replay.events) else {
                        continue;
                    };
                    crate::recovery::teammate_recovery(&t, &wakeups)
                }
            };
            // A teammate this recovery starts again gets its pending quiet mail first (the
            // mailbox pass above left it queued while the teammate was inactive): a
            // teammate's own start delivers all its pending mail (REFERENCE c.9 mailbox
            // recovery, c.10 porting note), so the message is in its history before the
            // continuation note, in queue order. Crash safety: each message is injected and
            // the teammate's log flushed before its `delivered` record; a crash in between
            // leaves it queued and held, which the next recovery acknowledges without a
            // second copy (`held_in_log`).
            if !resident
                && (plan.notes > 0 || plan.wake)
                && let Err(e) = self.deliver_pending_quiet(team, &id).await
                && !team.closed.is_cancelled()
            {
                tracing::warn!(teammate = %id, error = %e.error, "team message remains queued: {}", e.step);
            }
            let mut result = Ok(());
            for _ in 0..plan.notes {
                let note = crate::recovery::continuation_note();
                result = self.followup_child(&team.lead, &id, note).await.map(|_| ());
                if result.is_err() {
                    break;
                }
            }
            if plan.notes == 0 && plan.wake {
                result = self.wake_child(&team.lead, &id).await.map(|_| ());
            }
            if let Err(e) = result
                && !team.closed.is_cancelled()
            {
                tracing::warn!(teammate = %id, error = %e, "could not continue a teammate");
            }
        }
    }

    /// Cold-resumes teammate `id` (its inbox stays parked) when it has pending quiet mail, and
    /// delivers all of it ([`Self::deliver_older_quiet`] with no bound).
    async fn deliver_pending_quiet(
        &self,
        team: &Arc<Team>,
        id: &SessionId,
    ) -> Result<(), DispatchFailure> {
        let any = {
            let state = team.state.lock().await;
            state
                .pending_messages_for(id)
                .any(|m| m.delivery == Delivery::Quiet)
        };
        if !any {
            return Ok(());
        }
        let agent = self
            .ensure_child_live(&team.lead, id)
            .await
            .map_err(DispatchFailure::delivery)?;
        let delivered = self.deliver_older_quiet(team, &agent, None).await;
        if delivered.is_err() {
            // The cold-resumed teammate must still settle.
            self.ensure_watched(&agent);
        }
        delivered
    }

    async fn reconcile_provisioning(
        &self,
        team: &Arc<Team>,
        requests: &HashMap<String, crate::recovery::SpawnRequest>,
        lead_events: &[troupe_protocol::Event],
    ) -> Result<(), TeamOpError> {
        let provisioning: Vec<MemberSnapshot> = {
            let state = team.state.lock().await;
            state.provisioning_members().cloned().collect()
        };
        for member in provisioning {
            if team.closed.is_cancelled() {
                return Ok(());
            }
            // A live child's creator owns its terminal edge (REFERENCE c.9 step 1).
            if self.agent(&member.id).is_some() {
                continue;
            }
            let request = requests.get(member.name.as_str());
            let outcome = match self.journal().read(&member.id) {
                Err(troupe_journal::JournalError::NotFound { .. }) if request.is_some() => {
                    self.recreate_member(team, &member, request, lead_events, false)
                        .await
                }
                Err(e) => ProvisioningOutcome::Failed {
                    error: format!("{}{e}", troupe_team::RECOVERY_INSPECT_FAILED_PREFIX),
                },
                Ok(replay) => match Transcript::fold(replay.header.seed_len(), &replay.events) {
                    Err(e) => ProvisioningOutcome::Failed {
                        error: format!("{}{e}", troupe_team::RECOVERY_INSPECT_FAILED_PREFIX),
                    },
                    Ok(t) => {
                        // The one teammate rule `troupe team verify` checks too.
                        let matches = crate::teammate::teammate_problem(
                            &replay.header,
                            &t,
                            team.lead.id(),
                            &member.provider,
                        )
                        .is_none();
                        if matches && t.accepted_user_message() {
                            ProvisioningOutcome::Active
                        } else if matches && request.is_some() && t.stats().turns == 0 {
                            self.recreate_member(team, &member, request, lead_events, true)
                                .await
                        } else {
                            ProvisioningOutcome::Failed {
                                error: troupe_team::RECOVERY_CHILD_MISMATCH.to_owned(),
                            }
                        }
                    }
                },
            };
            let mut state = team.state.lock().await;
            if team.closed.is_cancelled() {
                return Ok(());
            }
            if let SettleDecision::Append(event) =
                state.decide_settle_provisioning(&member.id, &outcome)?
            {
                team.commit(&mut state, &event).await?;
            }
        }
        Ok(())
    }
}

impl Runtime {
    /// Creates again the child of a member whose spawn a crash cut before its prompt was
    /// durable (see [`Runtime::reconcile_roster`]): `active` once its log holds the prompt,
    /// `failed` naming the error otherwise.
    async fn recreate_member(
        &self,
        team: &Arc<Team>,
        member: &MemberSnapshot,
        request: Option<&crate::recovery::SpawnRequest>,
        lead_events: &[troupe_protocol::Event],
        log_exists: bool,
    ) -> ProvisioningOutcome {
        let Some(request) = request else {
            return ProvisioningOutcome::Failed {
                error: troupe_team::RECOVERY_CHILD_MISMATCH.to_owned(),
            };
        };
        let provider = match member.context {
            MemberContext::Fresh => ChildProvider::Spawn,
            MemberContext::Fork => ChildProvider::Fork,
        };
        let spec = ChildSpec {
            provider,
            label: member.name.to_string(),
            child_id: Some(member.id.clone()),
            prompt: request.prompt.clone(),
            continuable: true,
            notify_parent: false,
            profile: Profile::Team,
            cancel: None,
        };
        let seed = lead_events[..request.seed_end.min(lead_events.len())].to_vec();
        match self
            .recreate_child(&team.lead, &member.id, &spec, seed, log_exists)
            .await
        {
            Ok(()) => ProvisioningOutcome::Active,
            Err(e) => ProvisioningOutcome::Failed {
                error: format!("{}{e}", troupe_team::RECOVERY_INSPECT_FAILED_PREFIX),
            },
        }
    }
}

/// `spawn_teammate`'s arguments, as the service takes them.
struct SpawnArgs<'a> {
    name: &'a str,
    description: &'a str,
    prompt: &'a str,
    context: MemberContext,
}

/// The view a mutation returns: the pre-append state plus the new snapshot (REFERENCE c.11.1).
fn task_view_before(state: &TeamState, event: &TeamEvent) -> Result<TaskView, TeamOpError> {
    match &event.record {
        TeamRecord::Task(task) => Ok(state.task_view_of(task)),
        _ => Err(unexpected("team/task")),
    }
}

/// A compact single-line rendering of an abort cause, as `{ kind: 'user' }` (REFERENCE c.12).
fn inspect(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}: {}", inspect_inner(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        other => other.to_string(),
    }
}

fn inspect_inner(value: &Value) -> String {
    match value {
        Value::String(s) => format!("'{s}'"),
        other => inspect(other),
    }
}

fn uuid_like() -> String {
    SessionId::random().to_string()
}
