//! The Team service: the registry of live Teams (one per live Team root), membership
//! resolution (REFERENCE c.2), the one entry point [`TeamService::call`], and the order of
//! attach, recovery and disposal. Each operation is carried out by the owner of its state —
//! the journal (serializer, commit), the roster, the mailbox, the board, the waiters, the
//! lifecycle — through the narrow [`ChildControl`] of the runtime.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use troupe_journal::{Journal, LineCheck};
use troupe_protocol::{Event, MessageId, Seq, SessionId, sync::lock};
use troupe_team::{
    CreateTask, Delivery, MemberContext, MemberPhase, MemberStatus, MemberView, StallAfter,
    TaskListQuery, TaskPage, TaskView, TeamError, TeamId, TeamLimits, TeamState, UpdateTask,
    UserSend,
};

use super::board::BoardRead;
use super::hosts::{
    INTERRUPT_VERSION, InterruptCause, InterruptHandoff, InterruptRequest, MemberHosts,
};
use super::in_flight::InFlight;
use super::journal::{Member, TeamJournal, fold_team_log, not_member};
use super::lifecycle::{Lifecycle, disposed};
use super::mailbox::{Dispatcher, Mailbox, SendCall};
use super::op::{ListedMember, OpContext, TeamOp, TeamOpError, TeamReply, WaitOutcome};
use super::roster::{self, SpawnCall};
use super::stall::StallWatch;
use super::{board, waiters};
use crate::agent::{Agent, AgentProgress, Progress};
use crate::control::ChildControl;
use crate::radar::RadarTail;
use crate::user_mail::{UserMailReceipt, queued_seq, user_message_text_is_empty};
use troupe_session::ledger::Ledger;

/// One Lead's Team: its journal (identity, limits, serializer, publication), mailbox and
/// lifecycle.
pub struct Team {
    journal: TeamJournal,
    mailbox: Mailbox,
    lifecycle: Lifecycle,
    /// Remote requests in flight (`super::remote`).
    remote: InFlight,
    stall: StallWatch,
    /// The write radar of its `team_task_list`s, kept between them.
    radar: Arc<RadarTail>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("id", self.journal.id())
            .finish_non_exhaustive()
    }
}

impl Team {
    /// The Team id (= the Lead's session id).
    pub fn id(&self) -> &TeamId {
        self.journal.id()
    }

    /// The Lead.
    pub fn lead(&self) -> &Agent {
        self.journal.lead()
    }

    /// The limits in force (REFERENCE c.15).
    pub fn limits(&self) -> &TeamLimits {
        self.journal.limits()
    }

    /// A copy of the folded state (for views and tests).
    pub async fn snapshot(&self) -> TeamState {
        self.journal.enter().await.clone()
    }

    /// The members hosted by other processes whose host's last report (on the Team's status
    /// subject, or the placement's own record) still holds: `(member id, host name, live
    /// status)`, in no particular order (DESIGN §7 "Wait and status across processes"). Empty
    /// without `--placement workers` or workers.
    pub fn hosted_elsewhere(&self) -> Vec<(SessionId, String, troupe_team::LiveStatus)> {
        let now = std::time::Instant::now();
        lock(self.journal.elsewhere())
            .iter()
            .filter(|(_, e)| now < e.until)
            .map(|(id, e)| (id.clone(), e.host.clone(), e.live.status))
            .collect()
    }

    /// Whether some member is still `provisioning` (a creation in flight, or one a crash cut).
    pub(crate) async fn has_provisioning(&self) -> bool {
        self.journal
            .enter()
            .await
            .provisioning_members()
            .next()
            .is_some()
    }

    /// Closes the Team (REFERENCE c.14 steps 1–2): waits return, dispatches stop.
    fn close(&self) {
        self.lifecycle.close();
        self.journal.edge();
    }

    /// The journal (serializer, edges, members hosted elsewhere).
    pub(super) fn journal(&self) -> &TeamJournal {
        &self.journal
    }

    /// The remote requests in flight.
    pub(super) fn remote_in_flight(&self) -> &InFlight {
        &self.remote
    }

    fn board<'a>(&'a self, control: &'a dyn ChildControl) -> BoardRead<'a> {
        BoardRead {
            journal: &self.journal,
            control,
            stall: &self.stall,
            radar: &self.radar,
        }
    }

    fn dispatcher<'a>(
        &'a self,
        control: &'a dyn ChildControl,
        hosts: Option<&'a dyn MemberHosts>,
    ) -> Dispatcher<'a> {
        Dispatcher {
            journal: &self.journal,
            lifecycle: &self.lifecycle,
            control,
            hosts,
        }
    }
}

/// The Team service of one runtime: every live Team, keyed by its Lead's id.
pub struct TeamService {
    /// The session store (Lead logs are folded from it; members' logs read from it).
    store: Journal,
    /// The runtime's children.
    control: Arc<dyn ChildControl>,
    /// The runtime's progress (status edges of the Lead and its teammates wake waiters).
    progress: broadcast::Sender<AgentProgress>,
    /// The configured limits (explicit ones win over those a Lead recorded).
    configured: TeamLimits,
    /// How long a resident owner may log nothing before its task is stalled.
    stall_after: StallAfter,
    teams: Mutex<HashMap<SessionId, Arc<Team>>>,
    /// The processes hosting teammates elsewhere, on a shared store (`super::delivery`).
    hosts: OnceLock<Arc<dyn MemberHosts>>,
}

impl std::fmt::Debug for TeamService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamService").finish_non_exhaustive()
    }
}

impl TeamService {
    /// The Team service over `store`, driving children through `control`; `progress` is the
    /// runtime's progress channel; `configured` the runtime's Team limits; `stall_after` the
    /// stall threshold of the board's reads.
    pub(crate) fn new(
        store: Journal,
        control: Arc<dyn ChildControl>,
        progress: broadcast::Sender<AgentProgress>,
        configured: TeamLimits,
        stall_after: StallAfter,
    ) -> Self {
        Self {
            store,
            control,
            progress,
            configured,
            stall_after,
            teams: Mutex::new(HashMap::new()),
            hosts: OnceLock::new(),
        }
    }

    /// Sets the transport through which this process's Team serializers hand mail to the
    /// processes hosting teammates elsewhere (DESIGN §7 "Delivery across processes"; see
    /// `MemberHosts`). Set once, before a Team runs; a second call is ignored (returns
    /// `false`). Without it a teammate not resident here is treated as inactive.
    pub fn set_member_hosts(&self, hosts: Arc<dyn MemberHosts>) -> bool {
        self.hosts.set(hosts).is_ok()
    }

    fn hosts(&self) -> Option<&dyn MemberHosts> {
        self.hosts.get().map(|h| h.as_ref() as &dyn MemberHosts)
    }

    /// The session store.
    pub(super) fn store(&self) -> &Journal {
        &self.store
    }

    /// The Team of a live Lead, if `lead_id` is one.
    pub fn team(&self, lead_id: &SessionId) -> Option<Arc<Team>> {
        lock(&self.teams).get(lead_id).cloned()
    }

    /// Membership resolution (REFERENCE c.2, DESIGN decision 3): the Team and the caller for
    /// `agent` — the Lead of its own Team when it is a Team root, a teammate when it is a
    /// provisioning/active roster member of its live parent Lead; otherwise none (a stale or
    /// copied handle included).
    pub fn team_of(&self, agent: &Agent) -> Option<(Arc<Team>, SessionId)> {
        if self
            .control
            .agent(agent.id())
            .is_none_or(|a| !a.same(agent))
        {
            return None;
        }
        if let Some(team) = self.team(agent.id()) {
            return Some((team, agent.id().clone()));
        }
        let parent = self.control.parent_of(agent.id())?;
        let team = self.team(&parent)?;
        match team.journal.phase_of(agent.id()) {
            Some((_, MemberPhase::Provisioning | MemberPhase::Active)) => {
                Some((team, agent.id().clone()))
            }
            _ => None,
        }
    }

    /// The resident agent `id` (a tool's caller).
    pub(crate) fn resident(&self, id: &SessionId) -> Option<Agent> {
        self.control.agent(id)
    }

    /// Resolves `agent` to its Team for an operation: refused as disposed after shutdown (or
    /// the member's disposal, REFERENCE c.14), not as a membership problem.
    fn resolve(&self, member: Member<'_>) -> Result<Arc<Team>, TeamOpError> {
        if let Member::Resident(agent) = member
            && agent.is_disposed()
        {
            return Err(disposed().into());
        }
        let team = self
            .team_of_member(member)
            .ok_or_else(|| not_member(member.id()))?;
        team.lifecycle.admit()?;
        Ok(team)
    }

    /// [`TeamService::team_of`] for any caller: a remote one is a member of the live Team it
    /// named when it is a provisioning/active roster member there (never its Lead, which is
    /// hosted by this process).
    fn team_of_member(&self, member: Member<'_>) -> Option<Arc<Team>> {
        match member {
            Member::Resident(agent) => self.team_of(agent).map(|(team, _)| team),
            Member::Remote(remote) => {
                let team = self.team(&remote.team)?;
                match team.journal.phase_of(&remote.id) {
                    Some((_, MemberPhase::Provisioning | MemberPhase::Active)) => Some(team),
                    _ => None,
                }
            }
        }
    }

    /// The one entry point (REFERENCE d.4): runs `op` for `caller` — the Team tools' path,
    /// and the one a remote transport will carry. `context` carries the caller's signal and
    /// the tool call a Team record is linked to.
    ///
    /// # Errors
    /// The operation's codes (see the typed methods: [`TeamService::spawn`], …).
    pub async fn call(
        &self,
        caller: &Agent,
        op: TeamOp,
        context: OpContext,
    ) -> Result<TeamReply, TeamOpError> {
        self.call_as(Member::Resident(caller), op, context).await
    }

    /// [`TeamService::call`] for any caller: a resident agent, or a teammate hosted by
    /// another process (the Team service's remote path, `super::remote`).
    pub(crate) async fn call_as(
        &self,
        caller: Member<'_>,
        op: TeamOp,
        context: OpContext,
    ) -> Result<TeamReply, TeamOpError> {
        let origin = context.origin.as_ref();
        match op {
            TeamOp::SpawnTeammate {
                name,
                description,
                prompt,
                context: member_context,
            } => {
                let call = SpawnCall {
                    agent: caller,
                    name: &name,
                    description: &description,
                    prompt: &prompt,
                    context: member_context,
                    cancel: context.cancel.clone(),
                    origin,
                };
                self.spawn_call(call).await.map(TeamReply::Member)
            }
            TeamOp::Send {
                target,
                text,
                delivery,
            } => {
                let call = SendCall {
                    agent: caller,
                    target: &target,
                    text: &text,
                    delivery,
                    origin,
                };
                let (message_id, accepted) = self.send_call(call).await?;
                Ok(TeamReply::Sent {
                    message_id,
                    accepted,
                })
            }
            TeamOp::ListAgents => self.list_members_as(caller).await.map(|(team, members)| {
                // One ledger per runtime: every agent's setup shares it, the Lead's included.
                let ledger = match caller {
                    Member::Resident(agent) => Arc::clone(&agent.setup().ledger),
                    Member::Remote(_) => Arc::clone(&team.lead().setup().ledger),
                };
                TeamReply::Roster(
                    members
                        .into_iter()
                        .map(|member| {
                            let (usage, cost) = ledger.usage_of(&member.id);
                            let live =
                                matches!(member.status, MemberStatus::Running | MemberStatus::Idle);
                            let host = live
                                .then(|| {
                                    roster::host_of(
                                        &team.journal,
                                        self.control.as_ref(),
                                        &member.id,
                                    )
                                })
                                .flatten();
                            ListedMember {
                                member,
                                host,
                                usage: Ledger::compact(&usage, cost),
                            }
                        })
                        .collect(),
                )
            }),
            TeamOp::WaitAgent { timeout_ms } => {
                let cancel = context.cancel.unwrap_or_default();
                self.wait_as(caller, &timeout_ms, &cancel)
                    .await
                    .map(TeamReply::Waited)
            }
            TeamOp::InterruptAgent { target } => {
                let previous_status = self.interrupt_as(caller, &target).await?;
                Ok(TeamReply::Interrupted { previous_status })
            }
            TeamOp::CreateTask(request) => {
                let team = self.resolve(caller)?;
                board::create(&team.journal, caller, &request, origin)
                    .await
                    .map(TeamReply::Task)
            }
            TeamOp::ListTasks(query) => {
                let team = self.resolve(caller)?;
                board::list(team.board(self.control.as_ref()), caller, &query)
                    .await
                    .map(TeamReply::Tasks)
            }
            TeamOp::GetTask { task_id } => {
                let team = self.resolve(caller)?;
                board::get(team.board(self.control.as_ref()), caller, &task_id)
                    .await
                    .map(TeamReply::Task)
            }
            TeamOp::UpdateTask(request) => {
                let team = self.resolve(caller)?;
                board::update(&team.journal, caller, &request, origin)
                    .await
                    .map(TeamReply::Task)
            }
        }
    }

    /// `list_agents` (REFERENCE c.7): the Lead row, then every member (failed included).
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER`, `TEAM_DISPOSED`.
    pub async fn list_members(&self, agent: &Agent) -> Result<Vec<MemberView>, TeamOpError> {
        Ok(self.list_members_as(Member::Resident(agent)).await?.1)
    }

    async fn list_members_as(
        &self,
        caller: Member<'_>,
    ) -> Result<(Arc<Team>, Vec<MemberView>), TeamOpError> {
        let team = self.resolve(caller)?;
        let members = roster::list(&team.journal, self.control.as_ref(), caller).await?;
        Ok((team, members))
    }

    /// `spawn_teammate` (REFERENCE c.8): records `provisioning`, starts the child with the
    /// reserved id (its initial prompt is durable in the child log before this returns), then
    /// records `active` — or `failed` with the error, draining the child. `cancel` is the
    /// caller's signal.
    ///
    /// # Errors
    /// `TEAM_LEAD_REQUIRED`, `TEAM_INVALID_MEMBER_NAME`, `TEAM_INVALID_ARGUMENT` (description,
    /// prompt), `TEAM_MEMBER_NAME_TAKEN`, `TEAM_MEMBER_LIMIT`, `TEAM_PROVISIONING_CONFLICT`,
    /// `TEAM_DISPOSED`, `CANCELLED`, the child start's own error (the member is then
    /// `failed`).
    pub async fn spawn(
        &self,
        agent: &Agent,
        name: &str,
        description: &str,
        prompt: &str,
        context: MemberContext,
        cancel: Option<CancellationToken>,
    ) -> Result<MemberView, TeamOpError> {
        self.spawn_call(SpawnCall {
            agent: Member::Resident(agent),
            name,
            description,
            prompt,
            context,
            cancel,
            origin: None,
        })
        .await
    }

    async fn spawn_call(&self, call: SpawnCall<'_>) -> Result<MemberView, TeamOpError> {
        let team = self.resolve(call.agent)?;
        let hosts = self.hosts();
        roster::spawn(
            &team.journal,
            &team.lifecycle,
            self.control.as_ref(),
            hosts,
            call,
        )
        .await
    }

    /// `send_message` (quiet) / `followup_task` (wakeup) (REFERENCE c.10.1): the message is
    /// durable in the Lead log before delivery starts; returns its id and `true` (`accepted`)
    /// when the target durably holds it now, `false` (`queued`) otherwise (still stored:
    /// never resend).
    ///
    /// # Errors
    /// `TEAM_MEMBER_NOT_FOUND`, `TEAM_SELF_MESSAGE`, `TEAM_MAILBOX_FULL`,
    /// `TEAM_MESSAGE_TOO_LARGE`, `TEAM_INVALID_ARGUMENT`, `TEAM_NOT_MEMBER`, `TEAM_DISPOSED`.
    pub async fn send(
        &self,
        agent: &Agent,
        target: &str,
        text: &str,
        delivery: Delivery,
    ) -> Result<(MessageId, bool), TeamOpError> {
        self.send_call(SendCall {
            agent: Member::Resident(agent),
            target,
            text,
            delivery,
            origin: None,
        })
        .await
    }

    /// A message from the user to the live Team of `lead` (`troupe send` through the control
    /// socket of the running process; see [`crate::user_mail`]), as Team mail from the Lead
    /// with `senderName: "user"` (REFERENCE c.10.3: quiet is injected into a live target and
    /// waits for an inactive one; wakeup follows up, cold-resuming an inactive teammate).
    /// `message_id` is the caller's: a send retried with the same id finds the message queued
    /// and returns it (`repeated`), never a second copy.
    ///
    /// What survives a crash at each point: see the mailbox's user send — before the flush of
    /// `team/message/queued` returns, nothing or the whole record (decision 9); after it, the
    /// message is delivered by this dispatch or by the next resume's mailbox recovery, once.
    ///
    /// # Errors
    /// `TEAM_DISPOSED` when `lead` has no live Team here or it is closing (the caller appends
    /// to the stopped Team instead, once the process released it); `TEAM_INVALID_ARGUMENT`
    /// (empty text, invalid content, an id used by another message), `TEAM_MEMBER_NOT_FOUND`,
    /// `TEAM_MAILBOX_FULL`, `TEAM_MESSAGE_TOO_LARGE`; the journal's error when the Lead log
    /// fails.
    pub async fn user_send(
        &self,
        lead: &SessionId,
        message_id: MessageId,
        request: &UserSend,
    ) -> Result<UserMailReceipt, TeamOpError> {
        let Some(team) = self.team(lead) else {
            return Err(TeamError::Disposed {
                message: format!("no Team of {lead} runs in this process"),
            }
            .into());
        };
        if team.lifecycle.is_closed() {
            return Err(disposed().into());
        }
        if user_message_text_is_empty(&request.content) {
            return Err(TeamError::InvalidArgument {
                message: "message must not be empty".to_owned(),
            }
            .into());
        }
        let parts = team.dispatcher(self.control.as_ref(), self.hosts());
        let (message, seq, delivered) = team.mailbox.user_send(parts, message_id, request).await?;
        let target_name = {
            let state = team.journal.enter().await;
            if message.target_id == *team.journal.lead().id() {
                troupe_team::LEAD_NAME.to_owned()
            } else {
                state
                    .member(&message.target_id)
                    .map_or_else(|| message.target_id.to_string(), |m| m.name.to_string())
            }
        };
        let (seq, repeated) = match seq {
            Some(seq) => (seq, false),
            // A retry: the message is the one queued before. Where it was queued is read back
            // from the Lead log (a rare path: only a send whose answer was lost comes here).
            None => (
                queued_seq(&self.store, lead, &message.id)?.unwrap_or(Seq(0)),
                true,
            ),
        };
        Ok(UserMailReceipt {
            message_id: message.id,
            target_name,
            seq,
            delivered,
            repeated,
        })
    }

    async fn send_call(&self, call: SendCall<'_>) -> Result<(MessageId, bool), TeamOpError> {
        let team = self.resolve(call.agent)?;
        let parts = team.dispatcher(self.control.as_ref(), self.hosts());
        team.mailbox.send(parts, call).await
    }

    /// `wait_agent` (REFERENCE c.12, d.4.1): `NoProgress` at once when no other member is
    /// running or provisioning; otherwise waits for the next change edge after the call
    /// began, the timeout, or the Team's closing (`timedOut: false`).
    ///
    /// # Errors
    /// `TEAM_INVALID_TIMEOUT` (`timeout_ms` not an integer in 10000..=3600000),
    /// `TEAM_WAIT_ABORTED` when `cancel` fires, `TEAM_NOT_MEMBER`.
    pub async fn wait(
        &self,
        agent: &Agent,
        timeout_ms: &Value,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome, TeamOpError> {
        self.wait_as(Member::Resident(agent), timeout_ms, cancel)
            .await
    }

    async fn wait_as(
        &self,
        agent: Member<'_>,
        timeout_ms: &Value,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome, TeamOpError> {
        let timeout_ms = waiters::admit(agent, timeout_ms, cancel)?;
        let team = self
            .team_of_member(agent)
            .ok_or_else(|| not_member(agent.id()))?;
        waiters::wait(
            &team.journal,
            &team.lifecycle,
            self.control.as_ref(),
            agent,
            timeout_ms,
            cancel,
        )
        .await
    }

    /// `interrupt_agent` (REFERENCE c.13): Lead only; stops a live teammate's turn keeping its
    /// inbox; returns its status before the interrupt (`running`, `idle`, or `inactive` when
    /// not live) once the turn has closed (bounded by `disposalTimeoutMs`). A teammate hosted
    /// by another process is interrupted by the holder of its lease (see
    /// [`TeamService::accept_interrupt`]), with the same result.
    ///
    /// # Errors
    /// `TEAM_LEAD_REQUIRED`, `TEAM_INVALID_TARGET`, `TEAM_MEMBER_NOT_FOUND`,
    /// `TEAM_NOT_MEMBER`, `TEAM_DISPOSED`; for a teammate hosted elsewhere `TEAM_HOST_LOST`,
    /// `STORE_IO`, `STORE_UNREACHABLE`.
    pub async fn interrupt(
        &self,
        agent: &Agent,
        target: &str,
    ) -> Result<&'static str, TeamOpError> {
        self.interrupt_as(Member::Resident(agent), target).await
    }

    async fn interrupt_as(
        &self,
        agent: Member<'_>,
        target: &str,
    ) -> Result<&'static str, TeamOpError> {
        let team = self.resolve(agent)?;
        roster::interrupt(
            &team.journal,
            self.control.as_ref(),
            self.hosts(),
            agent,
            target,
        )
        .await
    }

    /// `team_task_create` (REFERENCE c.11.3).
    ///
    /// # Errors
    /// `TEAM_TASK_LIMIT`, `TEAM_INVALID_ARGUMENT`, `TEAM_TASK_NOT_FOUND`,
    /// `TEAM_TASK_DEPENDENCY_CYCLE`, `TEAM_INVALID_WRITE_SCOPE`, `TEAM_NOT_MEMBER`,
    /// `TEAM_DISPOSED`.
    pub async fn create_task(
        &self,
        agent: &Agent,
        request: &CreateTask,
    ) -> Result<TaskView, TeamOpError> {
        let team = self.resolve(Member::Resident(agent))?;
        board::create(&team.journal, Member::Resident(agent), request, None).await
    }

    /// `team_task_update` (REFERENCE c.11.4): one compare-and-set action.
    ///
    /// # Errors
    /// Every code of c.11.4 (`TEAM_TASK_STALE_REVISION`, `TEAM_TASK_ALREADY_CLAIMED`, …),
    /// `TEAM_NOT_MEMBER`, `TEAM_DISPOSED`.
    pub async fn update_task(
        &self,
        agent: &Agent,
        request: &UpdateTask,
    ) -> Result<TaskView, TeamOpError> {
        let team = self.resolve(Member::Resident(agent))?;
        board::update(&team.journal, Member::Resident(agent), request, None).await
    }

    /// `team_task_get` (REFERENCE c.11.2): tombstones included; a stalled task carries
    /// `stalled` (see `troupe_team::TeamState::stall_of`).
    ///
    /// # Errors
    /// `TEAM_TASK_NOT_FOUND`, `TEAM_NOT_MEMBER`, `TEAM_DISPOSED`.
    pub async fn get_task(&self, agent: &Agent, id: &str) -> Result<TaskView, TeamOpError> {
        let team = self.resolve(Member::Resident(agent))?;
        board::get(
            team.board(self.control.as_ref()),
            Member::Resident(agent),
            id,
        )
        .await
    }

    /// `team_task_list` (REFERENCE d.4.2): a stalled task carries `stalled`; the Lead's list
    /// carries `stallNotice` once per stall episode (see the `stall` module).
    ///
    /// # Errors
    /// `TEAM_INVALID_ARGUMENT` for a bad cursor or limit, `TEAM_NOT_MEMBER`, `TEAM_DISPOSED`.
    pub async fn list_tasks(
        &self,
        agent: &Agent,
        query: &TaskListQuery,
    ) -> Result<TaskPage, TeamOpError> {
        let team = self.resolve(Member::Resident(agent))?;
        board::list(
            team.board(self.control.as_ref()),
            Member::Resident(agent),
            query,
        )
        .await
    }

    /// Attaches the Team of a Team-profile root: folds its log, registers it, and forwards
    /// status edges of the Lead and its teammates to waiters.
    ///
    /// The fold is a selective read ([`fold_team_log`] with `LineCheck::Prefix`): the resume
    /// that precedes an attach replayed and checked every line, and a new root's log holds
    /// only what this process wrote.
    ///
    /// # Errors
    /// Journal errors; `TEAM_LOG_INVALID` when the log breaks a Team rule.
    pub(crate) async fn attach(&self, lead: &Agent) -> Result<Arc<Team>, TeamOpError> {
        let state = fold_team_log(&self.store, lead.id(), LineCheck::Prefix)?;
        // Explicit limits (anything but the defaults) win; otherwise the recorded ones.
        let recorded = lead
            .with_transcript(|t| t.config().and_then(|c| c.team_limits.clone()))
            .and_then(|v| TeamLimits::from_json(&v).ok());
        let limits = match recorded {
            Some(recorded) if self.configured == TeamLimits::default() => recorded,
            _ => self.configured,
        };
        let team = Arc::new(Team {
            journal: TeamJournal::new(lead.clone(), state, limits, self.store.clone()),
            mailbox: Mailbox::default(),
            lifecycle: Lifecycle::default(),
            remote: InFlight::default(),
            stall: StallWatch::new(self.stall_after),
            radar: Arc::default(),
        });
        lock(&self.teams).insert(lead.id().clone(), Arc::clone(&team));
        self.forward_status_edges(&team);
        if let Some(hosts) = self.hosts.get() {
            self.watch_elsewhere(&team, Arc::clone(hosts));
        }
        Ok(team)
    }

    /// Takes over the members of `team` whose host in another process stopped reporting
    /// while they ran (it died, or lost the store) once their lease is free
    /// ([`roster::take_over`]: on a live eligible worker with `--placement workers`, else
    /// here, as the recovery continues a teammate a crash stopped — REFERENCE c.9: its cut
    /// turn closed from the logs, then its continuation note), telling the Lead's user where
    /// — checked every second until the Team closes.
    fn watch_elsewhere(&self, team: &Arc<Team>, hosts: Arc<dyn MemberHosts>) {
        let weak = Arc::downgrade(team);
        let control = Arc::clone(&self.control);
        let closed = team.lifecycle.closing().clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = closed.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                let Some(team) = weak.upgrade() else { return };
                for id in team.journal.lost() {
                    if control.agent(&id).is_some() {
                        team.journal.forget(&id);
                        continue;
                    }
                    if !matches!(team.journal.store().holder(&id), Ok(None)) {
                        continue;
                    }
                    let taken = roster::take_over(
                        &team.journal,
                        &team.lifecycle,
                        control.as_ref(),
                        hosts.as_ref(),
                        &id,
                    )
                    .await;
                    // Forgotten only now: until the continuation made it resident here (or
                    // found nothing to continue), the member still counts as running
                    // elsewhere, so a run waiting for quiescence does not end in between
                    // (it did, leaving the continued turn to the next resume). A member
                    // placed on another worker keeps the placement's record instead.
                    if !matches!(taken, roster::TakenOver::Placed(_)) {
                        team.journal.forget(&id);
                    }
                }
            }
        });
    }

    /// Wakes `team`'s waiters at every status change of its Lead or of a roster member (and
    /// whenever progress was lost), until the Team closes or is dropped.
    fn forward_status_edges(&self, team: &Arc<Team>) {
        let mut progress = self.progress.subscribe();
        let weak = Arc::downgrade(team);
        let closed = team.lifecycle.closing().clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = closed.cancelled() => return,
                    event = progress.recv() => match event {
                        Ok(p) => {
                            let Some(team) = weak.upgrade() else { return };
                            if matches!(p.progress, Progress::Status { .. })
                                && (p.agent == *team.lead().id()
                                    || team.journal.phase_of(&p.agent).is_some())
                            {
                                team.journal.edge();
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            if let Some(team) = weak.upgrade() {
                                team.journal.edge();
                            }
                        }
                        Err(_) => return,
                    },
                }
            }
        });
    }

    /// Removes the Team of Lead `lead_id` (its Lead is released) and closes it.
    pub(crate) fn detach(&self, lead_id: &SessionId) {
        if let Some(team) = lock(&self.teams).remove(lead_id) {
            team.close();
        }
    }

    /// Closes every Team: waiters return `{timedOut:false}`, no new operation or delivery
    /// starts (REFERENCE c.14 steps 1–2).
    pub(crate) fn close_all(&self) {
        for team in lock(&self.teams).values() {
            team.close();
        }
    }

    /// Settles every Team's operations in flight after [`TeamService::close_all`] (REFERENCE
    /// c.14 steps 3–4), each kind bounded by `bound`; returns the failures to report.
    pub(crate) async fn settle_in_flight(&self, bound: Duration) -> Vec<String> {
        let teams: Vec<Arc<Team>> = lock(&self.teams).values().cloned().collect();
        let mut failures = Vec::new();
        for team in teams {
            failures.extend(team.lifecycle.settle(team.id(), bound).await);
        }
        failures
    }

    /// Halts every Team for the user's stop (the first Ctrl-C, before the run parks): Team
    /// operations are still admitted and what they decide is durable, but nothing new starts
    /// running — a message is not delivered (it stays `queued` in the Lead log), no teammate
    /// is placed on a worker, cold-resumed or continued — so no member still finishing a tool
    /// call, here or in another process, wakes the Lead or another member into a new turn
    /// after the user stopped the run. The next resume's mailbox recovery delivers what was
    /// held back (REFERENCE c.9). Writes nothing; idempotent; never lifted (the run ends).
    pub fn halt_all(&self) {
        for team in lock(&self.teams).values() {
            team.lifecycle.halt();
        }
    }

    /// Stops the turns of every Team's members running in other processes with `cause`:
    /// [`InterruptCause::Shutdown`] when this process parks its Teams (REFERENCE c.14 applied
    /// across processes: a park stops the whole Team, not only what this process hosts),
    /// [`InterruptCause::User`] for the user's first Ctrl-C (as its cancel of the resident
    /// agents). Each holder of a member reported running elsewhere is asked to stop its turn
    /// (the inbox kept) and waits for it to close; the holder then settles the member and
    /// releases its lease. All of it within `bound`. Returns a warning line for each member
    /// not confirmed stopped (its holder refused, did not answer in time, or is gone: a gone
    /// holder's member is continued by the next resume as after a crash; one still running
    /// there stops with its host or when its Team calls find no Lead).
    ///
    /// Writes nothing itself: the only writes are the stopped turns' closing events, each one
    /// atomic batch in the member's own log by its holder. A crash of this process meanwhile
    /// leaves the members asked so far stopped and the others running there, as before.
    pub async fn stop_elsewhere(&self, cause: InterruptCause, bound: Duration) -> Vec<String> {
        let Some(hosts) = self.hosts.get().cloned() else {
            return Vec::new();
        };
        let teams: Vec<Arc<Team>> = lock(&self.teams).values().cloned().collect();
        let deadline = tokio::time::Instant::now() + bound;
        let mut warnings = Vec::new();
        for team in teams {
            // A delivery already under way when the Team was halted or closed may still place
            // a teammate on a worker: it is waited for (bounded), so that teammate is stopped
            // with the others.
            let _ = tokio::time::timeout_at(deadline, team.lifecycle.dispatches_settled()).await;
            let running: Vec<SessionId> = lock(team.journal.elsewhere())
                .iter()
                .filter(|(_, e)| e.live.status == troupe_team::LiveStatus::Running)
                .map(|(id, _)| id.clone())
                .collect();
            let lead = team.lead().id().clone();
            let mut asked = tokio::task::JoinSet::new();
            for id in running {
                let request = InterruptRequest {
                    version: INTERRUPT_VERSION,
                    team: lead.clone(),
                    target: id.clone(),
                    by: lead.clone(),
                    holder: String::new(),
                    wait_ms: bound.as_millis().try_into().unwrap_or(u64::MAX),
                    cause,
                };
                let hosts = Arc::clone(&hosts);
                asked.spawn(async move {
                    let answer = tokio::time::timeout_at(deadline, hosts.interrupt(request)).await;
                    (id, answer)
                });
            }
            while let Some(Ok((member, answer))) = asked.join_next().await {
                // Named as the user knows it (its id when the roster has no name for it).
                let id = match team.journal.phase_of(&member) {
                    Some((name, _)) => format!("{name} ({member})"),
                    None => member.to_string(),
                };
                match answer {
                    Ok(Ok(InterruptHandoff::Interrupted { settled: true, .. })) => {
                        team.journal.settled_elsewhere(&member);
                    }
                    Ok(Ok(InterruptHandoff::Interrupted { settled: false, .. })) => {
                        warnings.push(format!(
                            "teammate {id} on another process: its turn was stopped but did not \
                             close within {} ms",
                            bound.as_millis()
                        ))
                    }
                    Ok(Ok(InterruptHandoff::Unhosted)) => {}
                    Ok(Ok(InterruptHandoff::HolderGone { reason })) => warnings.push(format!(
                        "teammate {id} on another process: its host is gone ({reason}); the \
                         next resume continues it"
                    )),
                    Ok(Err(e)) => warnings.push(format!(
                        "teammate {id} on another process could not be stopped: {e}"
                    )),
                    Err(_) => warnings.push(format!(
                        "teammate {id} on another process: its host did not answer within {} ms",
                        bound.as_millis()
                    )),
                }
            }
        }
        warnings
    }

    /// Roster reconciliation of a Team root being resumed (REFERENCE c.9), from its Lead log
    /// `lead_events` and its members' logs: see [`roster::reconcile`].
    pub(crate) async fn reconcile(&self, team: &Team, lead_events: &[Event]) {
        roster::reconcile(
            &team.journal,
            &team.lifecycle,
            self.control.as_ref(),
            lead_events,
        )
        .await;
    }

    /// The rest of the recovery of a Team root (REFERENCE c.9), once its roster is reconciled
    /// and its own open turn closed: mailbox recovery, then the continuation of teammates a
    /// stop left with work.
    pub(crate) async fn recover(&self, team: &Team) {
        let control = self.control.as_ref();
        team.mailbox
            .recover(team.dispatcher(control, self.hosts()))
            .await;
        roster::continue_teammates(&team.journal, &team.lifecycle, control, self.hosts(), None)
            .await;
    }
}
