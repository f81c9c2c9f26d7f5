//! The runtime: a registry of live agents over one journal, root sessions, continuable
//! children (REFERENCE b.3–b.9) and their settlement.
//!
//! Decision 2 of DESIGN holds throughout: settlement, drains and shutdown *park* a child's
//! inbox (pending items stay durable in its log and run on its next activation); only an
//! explicit `cancel` without keep-inbox discards, and that is recorded.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use troupe_journal::{Journal, JournalError};
use troupe_llm::{LlmError, ModelProvider, ModelSpec, ProviderFactory};
use troupe_protocol::{
    ErrorCode, EventDraft, MessageId, MessageSource, SessionHeader, SessionId, UserMessage,
    event_types as ty, sync::lock,
};
use troupe_tools::{
    BashTool, FileObservations, ProcessInfo, ProcessObserver, SandboxPolicy, Tool, ToolContext,
    ToolLimits, ToolRegistry, render_text_outcome, session_temp_dir,
};

use crate::agent::{
    Agent, AgentProgress, AgentSetup, AgentStatus, ChunkPolicy, Progress, denial_result,
    redact_text,
};
use crate::approval::{Approvals, Waited};
use crate::control::{ChildControl, ChildSpec, ChildStart, ControlFuture};
use crate::error::RuntimeError;
use crate::ledger::LiveLedger;
use crate::prompt::{TeamRole, TeamWorkspace, default_system_prompt, team_policy};
use crate::record::to_value;
use crate::recovery::{Resolver, TeamLinks, needs_team_links};
use crate::subagent::SubagentTool;
use crate::team::{RemoteTeam, TeamLink, TeamOpError, TeamService};
use troupe_approval::read_decision;
use troupe_session::approval::{ApprovalEntry, ApprovalMode, ApprovalPolicy};
use troupe_session::events::{
    AgentConfigRecord, ChildProvider, Descriptor, DescriptorMode, Placement, Profile,
    TeammateModels, ToolProcessRecord, ToolResultRecord, TurnEndReason,
};
use troupe_session::instructions::ProjectInstructions;
use troupe_session::{CallResolution, Transcript};

/// Where agents get their model: one provider per agent name (the scripted provider keys its
/// steps by name). Implemented by [`ProviderFactory`]; tests implement it with programmable
/// models.
pub trait ModelSource: Send + Sync {
    /// The provider for the agent named `name`.
    ///
    /// # Errors
    /// The provider's setup error (e.g. `LLM_SCRIPT` when a script has no steps for `name`).
    fn for_agent(&self, name: &str) -> Result<Arc<dyn ModelProvider>, LlmError>;

    /// The provider for the agent named `name` running the model `spec` (a teammate with a
    /// model of its own, or the session's model). The default ignores `spec` and calls
    /// [`ModelSource::for_agent`]: right for a source that serves one model (tests); the CLI's
    /// source serves every spec a session names.
    ///
    /// # Errors
    /// As [`ModelSource::for_agent`]; a source serving several models also fails with the
    /// setup error of `spec` (a missing API key, an unreadable script).
    fn for_member(&self, name: &str, spec: &ModelSpec) -> Result<Arc<dyn ModelProvider>, LlmError> {
        let _ = spec;
        self.for_agent(name)
    }
}

impl ModelSource for ProviderFactory {
    fn for_agent(&self, name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        ProviderFactory::for_agent(self, name)
    }
}

/// How a runtime runs its agents.
#[derive(Clone)]
pub struct RuntimeOptions {
    /// The shared workspace (absolute).
    pub workspace: PathBuf,
    /// Model providers, one per agent name.
    pub models: Arc<dyn ModelSource>,
    /// The session's model (no secrets): recorded in the configs of roots this runtime
    /// creates, and run by every agent without a model of its own (the Lead, subagents,
    /// teammates created without a teammate model) — on a resume, the recorded model with the
    /// resume's overrides.
    pub model_spec: ModelSpec,
    /// The teammate models recorded in the configs of Team roots this runtime creates
    /// ([`TeammateModels`]; empty: every teammate runs the session's model). A resumed root
    /// keeps its recorded choice (a resume's override is recorded with
    /// [`record_model_override`](crate::record_model_override)).
    pub teammate_models: TeammateModels,
    /// The `AGENTS.md` instructions recorded in the configs of roots this runtime creates
    /// (see [`crate::instructions`]); children copy their parent's, resumed agents keep
    /// their recorded ones.
    pub project_instructions: Option<ProjectInstructions>,
    /// Stream chunk coalescing.
    pub chunks: ChunkPolicy,
    /// Tool limits.
    pub tool_limits: ToolLimits,
    /// Children may themselves delegate while their depth is below this (default 1: only
    /// roots get `subagent`/`subagent_fork`).
    pub max_depth: u32,
    /// Team limits (REFERENCE c.15) for Team roots created or resumed by this runtime.
    pub team_limits: troupe_team::TeamLimits,
    /// How long a resident task owner may log nothing before the board's reads mark its task
    /// `stalled` (`--stall-after`; default 10 minutes). Not recorded: a view policy.
    pub stall_after: troupe_team::StallAfter,
    /// Extra tools registered for every agent after the core tools (an extension point, e.g.
    /// for custom tools or benchmarks). A name clash with a built-in tool refuses the agent.
    pub extra_tools: Vec<Arc<dyn troupe_tools::Tool>>,
    /// Environment variables removed from every process a tool starts (`bash`), e.g. the
    /// variable holding the API key, so a command cannot show them to the model. Default
    /// (empty): the tools inherit the whole environment.
    pub secret_env: Vec<String>,
    /// Secret values (e.g. the API key itself) replaced by `***` in everything the runtime
    /// records or reports: tool results, model errors in `turn/end` and `model/attempt`,
    /// progress events. Empty strings are ignored. Default (empty): nothing is redacted.
    pub secrets: Vec<String>,
    /// The sandbox of every agent's `bash` (see [`SandboxPolicy`]): recorded in the config of
    /// roots this runtime creates, and the loosest any agent of it runs with — an agent runs
    /// with its recorded policy made at least this strict ([`SandboxPolicy::meet`]), and a
    /// child records and inherits its parent's effective policy, so nobody is ever looser
    /// than the member that created it. Check it with `troupe_tools::probe_sandbox` first.
    pub sandbox: SandboxPolicy,
    /// The MCP servers recorded in the config of roots this runtime creates
    /// ([`AgentConfigRecord::mcp_servers`]); their tools come in through
    /// [`RuntimeOptions::extra_tools`]. Default (`None`): nothing recorded.
    pub mcp_servers: Option<serde_json::Value>,
    /// The approvals of every agent of this runtime (`--approval`, `--approval-timeout`):
    /// recorded in the config of every session it creates (a child records it too), and in
    /// force for all of them — with [`ApprovalMode::OnRequest`] every member's `bash` offers
    /// `escalate` and asks the user (see [`troupe_approval`]). Requests a crash left pending
    /// are asked again by the resume whatever the mode.
    pub approval: ApprovalPolicy,
    /// The live ledger and budget every agent of this runtime counts in and is held to
    /// ([`crate::ledger`]); the front end seeds it from the logs on a resume. Default: no
    /// budget, the built-in prices, nothing counted yet.
    pub ledger: Arc<LiveLedger>,
    /// `--worktree`: the directory under which every teammate of a Team root this runtime
    /// creates gets its own git worktree (recorded in the root's config as
    /// [`AgentConfigRecord::worktree_root`]; a resumed root keeps its recorded choice).
    /// Default (`None`): teammates share the workspace (REFERENCE g.1).
    pub worktree_root: Option<PathBuf>,
    /// `--placement` of the Team roots this runtime creates: recorded in the root's first
    /// config ([`AgentConfigRecord::placement`], only when [`Placement::Workers`]) so a resume
    /// places as the run did. Default: [`Placement::Local`] (nothing recorded). The placing
    /// itself is the front end's (its member hosts); this only records the choice.
    pub placement: Placement,
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("workspace", &self.workspace)
            .field("model_spec", &self.model_spec)
            .finish_non_exhaustive()
    }
}

/// A member whose session log failed — a write or sync error poisoned its writer (disk full,
/// a read-only or immutable file, an I/O error): DESIGN decision 11, "every member's failure is
/// the run's failure". Collected by the runtime as each agent stops (see
/// [`Runtime::log_failures`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFailure {
    /// The agent's session.
    pub session: SessionId,
    /// The agent's name (`lead`, a teammate's name, a child's label).
    pub name: String,
    /// The first failure of its log: the operation, the file and the OS error.
    pub error: String,
}

/// A cheap-to-clone handle to the runtime.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RtInner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

struct RtInner {
    journal: Journal,
    options: RuntimeOptions,
    observations: Arc<FileObservations>,
    progress: broadcast::Sender<AgentProgress>,
    live: Mutex<HashMap<SessionId, Live>>,
    child_locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Poked whenever the set of live agents changes.
    changed: tokio::sync::Notify,
    /// The Team service: the Team of every live Team root.
    teams: Arc<TeamService>,
    /// This runtime's children, as the Team service and the `subagent` tools drive them.
    control: Arc<dyn ChildControl>,
    /// Agents whose log failed, in the order they stopped (one entry per session).
    log_failures: Mutex<Vec<LogFailure>>,
    /// The approvals of every agent (see [`RuntimeOptions::approval`]).
    approvals: Arc<Approvals>,
    /// The model name each agent set up (or each teammate's log read) in this process runs:
    /// what `list_agents` shows for a member that is not live.
    models_seen: Mutex<HashMap<SessionId, String>>,
    /// The Team service links of a process hosting teammates whose Team's serializer runs in
    /// another process (see [`Runtime::set_team_links`]).
    team_links: std::sync::OnceLock<TeamLinkFactory>,
    /// The ledgers of Teams whose Lead runs in another process (see
    /// [`Runtime::set_team_ledgers`]).
    team_ledgers: std::sync::OnceLock<TeamLedgers>,
}

/// The ledger of the Team led by a session, when this process holds one for it (see
/// [`Runtime::set_team_ledgers`]); `None`: the runtime's own ([`RuntimeOptions::ledger`]).
pub type TeamLedgers = Arc<dyn Fn(&SessionId) -> Option<Arc<LiveLedger>> + Send + Sync>;

/// Makes the [`TeamLink`] to the Team led by a session (the transport of [`RemoteTeam`]).
pub type TeamLinkFactory = Arc<dyn Fn(&SessionId) -> Arc<dyn TeamLink> + Send + Sync>;

struct Live {
    agent: Agent,
    parent: Option<SessionId>,
    owned: HashSet<SessionId>,
    /// Send a settlement notice to the parent when this child settles.
    notify_parent: bool,
    /// Whether a settlement watcher runs for this activation.
    watched: bool,
}

impl Runtime {
    /// A runtime over `journal`.
    pub fn new(journal: Journal, options: RuntimeOptions) -> Self {
        let (progress, _) = broadcast::channel(1024);
        let approvals = Arc::new(Approvals::new(journal.clone(), options.approval));
        let inner = Arc::new_cyclic(|weak: &Weak<RtInner>| {
            let control: Arc<dyn ChildControl> = Arc::new(Control(weak.clone()));
            let teams = Arc::new(TeamService::new(
                journal.clone(),
                Arc::clone(&control),
                progress.clone(),
                options.team_limits,
                options.stall_after,
            ));
            RtInner {
                approvals,
                journal,
                options,
                observations: Arc::new(FileObservations::new()),
                progress,
                live: Mutex::new(HashMap::new()),
                child_locks: Mutex::new(HashMap::new()),
                changed: tokio::sync::Notify::new(),
                teams,
                control,
                log_failures: Mutex::new(Vec::new()),
                models_seen: Mutex::new(HashMap::new()),
                team_links: std::sync::OnceLock::new(),
                team_ledgers: std::sync::OnceLock::new(),
            }
        });
        Self { inner }
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// The options.
    pub fn options(&self) -> &RuntimeOptions {
        &self.inner.options
    }

    /// The approvals of this runtime's agents: a front end answers a request with
    /// [`Approvals::decide`] (see [`Progress::ApprovalRequested`]).
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.inner.approvals
    }

    /// Progress of every agent of this runtime.
    pub fn subscribe_progress(&self) -> broadcast::Receiver<AgentProgress> {
        self.inner.progress.subscribe()
    }

    /// The live agent with this id, if resident.
    pub fn agent(&self, id: &SessionId) -> Option<Agent> {
        lock(&self.inner.live).get(id).map(|l| l.agent.clone())
    }

    /// The Team service: the Team of every live Team root, membership resolution and the
    /// Team operations (REFERENCE c.2–c.14).
    pub fn teams(&self) -> &TeamService {
        &self.inner.teams
    }

    /// The parent of a resident agent, if it has one.
    pub fn parent_of(&self, id: &SessionId) -> Option<SessionId> {
        lock(&self.inner.live)
            .get(id)
            .and_then(|l| l.parent.clone())
    }

    /// Every agent of this runtime whose session log failed so far, in the order they stopped
    /// (DESIGN decision 11). An agent is checked when it is released: when it settles, is
    /// drained, or at [`Runtime::shutdown`] — so after a shutdown the list is complete. Each
    /// session appears once, with its first failure.
    pub fn log_failures(&self) -> Vec<LogFailure> {
        lock(&self.inner.log_failures).clone()
    }

    /// Records that `agent`'s log failed, when it did: the failure that stopped its driver, or
    /// else `error` (what disposing it returned) when that is a failure of the log.
    fn note_log_failure(&self, agent: &Agent, error: Option<&RuntimeError>) {
        let text = agent.failure().or_else(|| {
            error
                .filter(|e| crate::error::is_log_failure(e))
                .map(crate::error::log_failure_text)
        });
        let Some(text) = text else { return };
        self.record_log_failure(agent.id(), agent.name(), text);
    }

    /// Adds `session`'s first log failure to [`Runtime::log_failures`] (a later one of the same
    /// session is dropped: the first names the cause).
    fn record_log_failure(&self, session: &SessionId, name: &str, error: String) {
        let mut failures = lock(&self.inner.log_failures);
        if failures.iter().all(|f| f.session != *session) {
            tracing::debug!(agent = %session, name, error = %error, "session log failed");
            failures.push(LogFailure {
                session: session.clone(),
                name: name.to_owned(),
                error,
            });
        }
    }

    /// Ids of every live agent.
    pub fn live_ids(&self) -> Vec<SessionId> {
        lock(&self.inner.live).keys().cloned().collect()
    }

    /// Creates a root session (`agent/config` recorded and flushed) and starts its agent.
    ///
    /// # Errors
    /// `WORKSPACE_INVALID`, `SESSION_ALREADY_EXISTS`, journal and model-setup errors.
    pub async fn create_root(
        &self,
        id: SessionId,
        name: &str,
        profile: Profile,
    ) -> Result<Agent, RuntimeError> {
        self.create_root_with(id, name, profile, None).await
    }

    /// [`Runtime::create_root`] with the session's first prompt: `agent/config` and the
    /// prompt's inbox insertion are one batch, and the session file is created by that batch's
    /// flush (the journal publishes a new file whole). So a crash leaves either no session at
    /// all or a session whose prompt is durable — never one that `troupe resume` finds with
    /// nothing to run. The agent then runs the prompt (once its Team, if any, is attached).
    ///
    /// # Errors
    /// As [`Runtime::create_root`].
    pub async fn create_root_with(
        &self,
        id: SessionId,
        name: &str,
        profile: Profile,
        first: Option<UserMessage>,
    ) -> Result<Agent, RuntimeError> {
        let workspace = self.workspace_string()?;
        let header = SessionHeader::new(id.clone(), self.inner.journal.clock().now_ms())
            .with_cwd(workspace.clone());
        let config = AgentConfigRecord {
            name: name.to_owned(),
            model: self.inner.options.model_spec.clone(),
            own_model: false,
            teammate_models: (profile == Profile::Team
                && !self.inner.options.teammate_models.is_empty())
            .then(|| self.inner.options.teammate_models.clone()),
            project_instructions: self.inner.options.project_instructions.clone(),
            profile,
            workspace,
            depth: 0,
            team_limits: (profile == Profile::Team)
                .then(|| serde_json::to_value(self.inner.options.team_limits).ok())
                .flatten(),
            sandbox: Some(self.inner.options.sandbox),
            tmp_dir: Some(session_temp_dir(&id).display().to_string()),
            mcp_servers: self.inner.options.mcp_servers.clone(),
            approval: Some(self.inner.options.approval),
            worktree_root: (profile == Profile::Team)
                .then(|| {
                    self.inner
                        .options
                        .worktree_root
                        .as_ref()
                        .map(|root| root.display().to_string())
                })
                .flatten(),
            placement: (profile == Profile::Team
                && self.inner.options.placement == Placement::Workers)
                .then_some(Placement::Workers),
        };
        // Set up before anything is written: a refused model writes no session.
        let setup = self.build_setup(&id, &config, None)?;
        let writer = self.inner.journal.create(header)?;
        let mut drafts = vec![EventDraft::new(ty::AGENT_CONFIG, to_value(&config))];
        let prompted = first.is_some();
        drafts.extend(first.map(prompt_splice));
        let events = writer.append_batch(drafts)?;
        writer.flush().await?;
        let transcript = Transcript::fold(0, &events)?;
        // A pending prompt starts parked; it runs once the agent is fully set up.
        let agent = Agent::start(writer, transcript, setup);
        self.register(agent.clone(), None, false);
        if profile == Profile::Team {
            self.inner
                .teams
                .attach(&agent)
                .await
                .map_err(|e| team_setup_error(&id, e))?;
        }
        if prompted {
            agent.wake_parked();
        }
        Ok(agent)
    }

    /// Reopens a stored session as a live root agent: lock, torn-tail repair, recovery closers
    /// for a turn a crash interrupted (REFERENCE a.9), then the agent starts with its inbox
    /// parked. Returns the agent and whether recovery closed a turn as interrupted (a turn
    /// whose final answer was already logged is closed as completed, and does not count).
    ///
    /// Recovery decides from the logs (DESIGN decision 10, see `recovery.rs`), in this order:
    /// process groups the crash left running are stopped; the open turns of the root's
    /// non-resident children are closed (their Team calls resolved from the Lead log); a Team
    /// root's roster is reconciled (a teammate whose spawn a crash cut before its prompt was
    /// durable is created again under its reserved id, with the prompt of the Lead's
    /// `spawn_teammate` call); then the root's own open turn is closed (its `spawn_teammate`
    /// results come from the reconciled roster); only then is mail delivered and are teammates
    /// continued. Nothing can start a turn of the root before its open turn is closed: its
    /// inbox stays parked and no teammate runs until then.
    ///
    /// # Errors
    /// Journal errors (`SESSION_NOT_FOUND`, `JOURNAL_LOCKED`, …), `NOT_RESUMABLE` when the
    /// session has no agent configuration, `TEAM_LOG_INVALID` when a Team root's log breaks a
    /// Team rule (refused before recovery writes anything).
    pub async fn resume_root(&self, id: &SessionId) -> Result<(Agent, bool), RuntimeError> {
        let (writer, replay) = self.inner.journal.open(id)?;
        let transcript = Transcript::fold(replay.header.seed_len(), &replay.events)?;
        let config = transcript
            .config()
            .cloned()
            .ok_or_else(|| RuntimeError::NotResumable {
                id: id.to_string(),
                reason: "it has no agent configuration (not created by troupe run)".to_owned(),
            })?;
        // A Team root: the Team profile and no subagent descriptor (an orphaned teammate
        // resumed by id is never re-interpreted as a Lead: REFERENCE c.2 step 3).
        let is_team = config.profile == Profile::Team && transcript.descriptor().is_none();
        let team_parent = transcript
            .descriptor()
            .and(replay.header.parent_session.as_ref());
        let setup = self.build_setup(id, &config, team_parent)?;
        // Process groups the crash left running stop first, before anything else runs.
        let stopped = stop_leftovers(&transcript);
        let agent = Agent::start(writer, transcript, setup);
        self.register(agent.clone(), None, false);
        // A Team root's Team is folded first (reading only): a log that breaks a Team rule is
        // refused before recovery writes anything anywhere.
        let team = if is_team {
            match self.inner.teams.attach(&agent).await {
                Ok(team) => Some(team),
                Err(e) => {
                    // A Lead whose Team does not fold must not run half-attached.
                    let _ = self.release(agent.id()).await;
                    return Err(team_setup_error(id, e));
                }
            }
        } else {
            None
        };
        // The Lead log is in memory: its Team links are read from it when a call needs them.
        let links = LinkSource::events(is_team.then_some(replay.events.as_slice()));
        self.close_open_child_turns(id, &links).await;
        if let Some(team) = &team
            && team.has_provisioning().await
        {
            // Roster reconciliation, before the Lead's own turn is closed (its spawn results
            // come from the roster) and before mailbox recovery (REFERENCE c.9).
            self.inner.teams.reconcile(team, &replay.events).await;
        }
        // "Recovered" means a turn closed as interrupted; one whose answer was logged before
        // the stop is closed as completed and needs no continuation.
        let (open, answered) =
            agent.with_transcript(|t| (t.open_turn().is_some(), t.answered_open_turn()));
        let recovered = open && !answered;
        if open {
            // The reconciled roster, for the results of a cut `spawn_teammate`.
            let state = match &team {
                Some(team) => Some(team.snapshot().await),
                None => None,
            };
            let resolver = Resolver {
                session: id,
                workspace: Some(PathBuf::from(&config.workspace)),
                links: agent
                    .with_transcript(needs_team_links)
                    .then(|| links.get(&self.inner.journal))
                    .flatten(),
                team: state.as_ref(),
            };
            // Approval requests of the cut calls first: asked again where undecided.
            let cut = agent.with_transcript(cut_approvals);
            let settled = if cut.is_empty() {
                HashMap::new()
            } else {
                let settled = self
                    .settle_cut_approvals(
                        id,
                        &config.name,
                        cut,
                        agent.setup().tool_context.clone(),
                        RecoveryLog::Agent(agent.clone()),
                    )
                    .await;
                match settled {
                    Ok(settled) => settled,
                    Err(e) => {
                        let _ = self.release(agent.id()).await;
                        return Err(e);
                    }
                }
            };
            let closed = agent.close_recovered_turn(&stopped, &mut |call| {
                settled
                    .get(&call.call.id)
                    .cloned()
                    .unwrap_or_else(|| resolver.resolve(call))
            });
            if let Err(e) = closed {
                let _ = self.release(agent.id()).await;
                return Err(e);
            }
            agent.writer().flush().await?;
        }
        drop(replay);
        // Before any turn can run (the inbox is still parked): after the open turn's closers,
        // so a cut `write`/`edit` resolved as done counts as seen.
        restore_seen(&agent).await;
        if let Some(team) = &team {
            self.inner.teams.recover(team).await;
        }
        Ok((agent, recovered))
    }

    /// Sets how this process reaches the Team service of Teams whose serializer runs in
    /// another process (DESIGN §7): a teammate it hosts ([`Runtime::host_teammate`]) gets the
    /// ten Team tools through the link `links` makes for its Lead ([`RemoteTeam`]). Set
    /// once (a second call is ignored: `false`).
    pub fn set_team_links(&self, links: TeamLinkFactory) -> bool {
        self.inner.team_links.set(links).is_ok()
    }

    /// Sets where a teammate set up from now on counts its usage and is held to its Team's
    /// budget: the ledger `ledgers` gives for its Lead (a worker's per-Team ledger, see
    /// [`crate::ledger`] "Across processes"), else [`RuntimeOptions::ledger`]. Set once (a
    /// second call is ignored: `false`).
    pub fn set_team_ledgers(&self, ledgers: TeamLedgers) -> bool {
        self.inner.team_ledgers.set(ledgers).is_ok()
    }

    /// The live status of the agents of this runtime, for [`RemoteTeam`]'s callers.
    fn live_source(&self) -> crate::team::LiveSource {
        let weak = Arc::downgrade(&self.inner);
        Arc::new(move |id: &SessionId| {
            let inner = weak.upgrade()?;
            let agent = lock(&inner.live).get(id).map(|l| l.agent.clone())?;
            Some(troupe_team::LiveAgent {
                status: match agent.status() {
                    AgentStatus::Running => troupe_team::LiveStatus::Running,
                    AgentStatus::Idle => troupe_team::LiveStatus::Idle,
                },
                model: Some(agent.setup().model.model.clone()),
            })
        })
    }

    /// Hosts teammate `id` for a Team whose serializer runs in another process (`troupe
    /// worker`, DESIGN §7 "Workers and placement"): takes its session's lease (opening its
    /// log), closes a turn a crash left open (its Team calls decided from the Lead log, as
    /// any activation does), cold-resumes it with the Team tools of [`Runtime::set_team_links`]
    /// and the model it recorded (its own, else its Lead's recorded model — as `troupe
    /// resume` would), wakes its parked inbox and watches it: once it settles (idle, nothing
    /// waking) it is released, which parks its inbox and releases the lease. Returns the
    /// resident agent.
    ///
    /// What survives a crash of the host: the teammate's log as it was appended (a turn
    /// running then is closed by the next host's activation, decided from the logs); the
    /// lease frees itself after its TTL.
    ///
    /// # Errors
    /// `JOURNAL_LOCKED` (another process holds it), `NOT_RESUMABLE` (not a teammate, no
    /// configuration, already resident here, no Team link set), journal and model setup
    /// errors.
    pub async fn host_teammate(&self, id: &SessionId) -> Result<Agent, RuntimeError> {
        let refuse = |reason: &str| RuntimeError::NotResumable {
            id: id.to_string(),
            reason: reason.to_owned(),
        };
        if self.inner.team_links.get().is_none() {
            return Err(refuse("this process has no link to a Team service"));
        }
        let guard = self.child_lock(id);
        let _held = guard.lock().await;
        if self.agent(id).is_some() {
            return Err(refuse("it is already hosted by this process"));
        }
        let (writer, replay) = self.inner.journal.open(id)?;
        let mut transcript = Transcript::fold(replay.header.seed_len(), &replay.events)?;
        let Some(lead) = transcript
            .descriptor()
            .and(replay.header.parent_session.clone())
        else {
            return Err(refuse("it is not a teammate (no subagent descriptor)"));
        };
        let links = LinkSource::lead(Some(lead.clone()));
        self.recover_open_turn(&writer, &mut transcript, id, &links)
            .await?;
        let mut config = transcript
            .config()
            .cloned()
            .ok_or_else(|| refuse("it has no agent configuration (not created by troupe run)"))?;
        if !config.own_model {
            config.model = stored_config(&self.inner.journal, &lead)?.model;
            config.own_model = true;
        }
        let setup = self.build_setup(id, &config, Some(&lead))?;
        let agent = Agent::start(writer, transcript, setup);
        restore_seen(&agent).await;
        self.register(agent.clone(), None, false);
        agent.wake_parked();
        self.ensure_watched(&agent);
        Ok(agent)
    }

    async fn activate(&self, id: &SessionId) -> Result<(Agent, bool), RuntimeError> {
        let (writer, replay) = self.inner.journal.open(id)?;
        let mut transcript = Transcript::fold(replay.header.seed_len(), &replay.events)?;
        let links = LinkSource::lead(replay.header.parent_session.clone());
        let recovered = self
            .recover_open_turn(&writer, &mut transcript, id, &links)
            .await?;
        let config = transcript
            .config()
            .cloned()
            .ok_or_else(|| RuntimeError::NotResumable {
                id: id.to_string(),
                reason: "it has no agent configuration (not created by troupe run)".to_owned(),
            })?;
        // Only a subagent child (it has a descriptor) is a teammate of its parent; a host fork
        // of a Lead is the Lead of its own Team (REFERENCE c.2 step 2c/3).
        let team_parent = transcript
            .descriptor()
            .and(replay.header.parent_session.as_ref());
        let setup = self.build_setup(id, &config, team_parent)?;
        let agent = Agent::start(writer, transcript, setup);
        // Before anything is sent to it (its inbox is parked until then).
        restore_seen(&agent).await;
        Ok((agent, recovered))
    }

    /// Closes the turns a crash left open in the direct children of root `id` that are not
    /// resident (one-shot children are never resumed, so nothing else would ever close them):
    /// each is opened for writing, gets the same recovery as an activation (leftover process
    /// groups stopped, synthetic closers resolved from the logs, its Team calls from `links`),
    /// and is released. Best effort: a child that cannot be opened (e.g. locked by another
    /// process) is skipped with a warning.
    async fn close_open_child_turns(&self, id: &SessionId, links: &LinkSource<'_>) {
        let listing = self.inner.journal.list(&mut |e| {
            tracing::warn!(error = %e, "unreadable session skipped while closing child turns");
        });
        let children = match listing {
            Ok(listing) => listing,
            Err(e) => {
                tracing::warn!(root = %id, error = %e, "child sessions not listed");
                return;
            }
        };
        for child in children {
            let child_id = child.header.id;
            if child.header.parent_session.as_ref() != Some(id) || self.agent(&child_id).is_some() {
                continue;
            }
            if let Err(e) = self.close_open_turn(&child_id, links).await {
                tracing::warn!(child = %child_id, error = %e, "open child turn not closed");
            }
        }
    }

    /// Opens `id` for writing, applies [`Runtime::recover_open_turn`], and releases it.
    async fn close_open_turn(
        &self,
        id: &SessionId,
        links: &LinkSource<'_>,
    ) -> Result<bool, RuntimeError> {
        let guard = self.child_lock(id);
        let _held = guard.lock().await;
        if self.agent(id).is_some() {
            return Ok(false);
        }
        let (writer, replay) = self.inner.journal.open(id)?;
        let mut transcript = Transcript::fold(replay.header.seed_len(), &replay.events)?;
        let recovered = self
            .recover_open_turn(&writer, &mut transcript, id, links)
            .await;
        let closed = writer.close().await;
        let recovered = recovered?;
        closed?;
        Ok(recovered)
    }

    /// Crash recovery of a log just opened for writing (REFERENCE a.9, DESIGN decision 10):
    /// when a turn is open, the process groups its unanswered calls left running are stopped
    /// (recognized by their recorded start time), then the synthetic closers — each started
    /// call resolved from the logs (`recovery.rs`; Team calls from `links`, read only when a
    /// call needs them) — are appended with the last real event's time, folded into
    /// `transcript` and flushed. Returns whether a turn was closed.
    async fn recover_open_turn(
        &self,
        writer: &troupe_journal::SessionWriter,
        transcript: &mut Transcript,
        id: &SessionId,
        links: &LinkSource<'_>,
    ) -> Result<bool, RuntimeError> {
        if transcript.open_turn().is_none() {
            return Ok(false);
        }
        let stopped = stop_leftovers(transcript);
        // Approval requests of the cut calls first: asked again where undecided.
        let cut = cut_approvals(transcript);
        let settled = match transcript.config().cloned() {
            Some(config) if !cut.is_empty() => {
                let collected = Arc::new(Mutex::new(Vec::new()));
                let log = RecoveryLog::Writer(writer.clone(), Arc::clone(&collected));
                let context = self.tool_context_of(id, &config)?;
                let settled = self
                    .settle_cut_approvals(id, &config.name, cut, context, log)
                    .await?;
                let appended = std::mem::take(&mut *lock(&collected));
                for e in &appended {
                    transcript.apply(e)?;
                }
                settled
            }
            _ => HashMap::new(),
        };
        let resolver = Resolver {
            session: id,
            workspace: transcript.config().map(|c| PathBuf::from(&c.workspace)),
            links: needs_team_links(transcript)
                .then(|| links.get(&self.inner.journal))
                .flatten(),
            team: None,
        };
        let closers = transcript.recovery_closers_resolved(&stopped, &mut |call| {
            settled
                .get(&call.call.id)
                .cloned()
                .unwrap_or_else(|| resolver.resolve(call))
        });
        let events = writer.append_batch_at(closers, transcript.last_time())?;
        for e in &events {
            transcript.apply(e)?;
        }
        writer.flush().await?;
        Ok(true)
    }

    fn workspace_string(&self) -> Result<String, RuntimeError> {
        let ws = &self.inner.options.workspace;
        let canonical = std::fs::canonicalize(ws).map_err(|e| RuntimeError::Workspace {
            path: ws.display().to_string(),
            reason: e.to_string(),
        })?;
        if !canonical.is_dir() {
            return Err(RuntimeError::Workspace {
                path: ws.display().to_string(),
                reason: "not a directory".to_owned(),
            });
        }
        Ok(canonical.display().to_string())
    }

    /// The sandbox an agent with `config` runs with: its recorded policy, made at least as
    /// strict as the runtime's [`RuntimeOptions::sandbox`].
    fn effective_sandbox(&self, config: &AgentConfigRecord) -> SandboxPolicy {
        config.sandbox_policy().meet(self.inner.options.sandbox)
    }

    /// The model an agent with `config` runs: its own ([`AgentConfigRecord::own_model`]),
    /// else the session's ([`RuntimeOptions::model_spec`]).
    pub(crate) fn effective_model(&self, config: &AgentConfigRecord) -> ModelSpec {
        if config.own_model {
            config.model.clone()
        } else {
            self.inner.options.model_spec.clone()
        }
    }

    /// Remembers the model the member `id` runs, for views of it while it is not live.
    pub(crate) fn remember_model(&self, id: &SessionId, model: &ModelSpec) {
        lock(&self.inner.models_seen).insert(id.clone(), model.model.clone());
    }

    /// The model name of `id` as last set up or read in this process, if known.
    pub(crate) fn model_seen(&self, id: &SessionId) -> Option<String> {
        lock(&self.inner.models_seen).get(id).cloned()
    }

    fn build_setup(
        &self,
        id: &SessionId,
        config: &AgentConfigRecord,
        parent: Option<&SessionId>,
    ) -> Result<AgentSetup, RuntimeError> {
        let refuse = |reason: String| RuntimeError::NotResumable {
            id: id.to_string(),
            reason,
        };
        let model = self.effective_model(config);
        let provider = self.inner.options.models.for_member(&config.name, &model)?;
        self.remember_model(id, &model);
        let mut tools = ToolRegistry::with_core_tools();
        if self.inner.options.approval.mode == ApprovalMode::OnRequest {
            // The same tool, offering `escalate` (at its place in the order).
            let mut ordered = ToolRegistry::new();
            for name in tools.names() {
                let tool = match (name, tools.get(name)) {
                    ("bash", _) => Arc::new(BashTool::with_escalation()) as Arc<dyn Tool>,
                    (_, Some(tool)) => Arc::clone(tool),
                    (_, None) => continue,
                };
                ordered.register(tool).map_err(|e| refuse(e.to_string()))?;
            }
            tools = ordered;
        }
        let mut has_subagents = false;
        let mut policy = None;
        match config.profile {
            Profile::Default => {
                has_subagents = config.depth < self.inner.options.max_depth;
                if has_subagents {
                    for provider in [ChildProvider::Spawn, ChildProvider::Fork] {
                        let tool = SubagentTool::new(Arc::downgrade(&self.inner.control), provider);
                        tools
                            .register(Arc::new(tool))
                            .map_err(|e| refuse(e.to_string()))?;
                    }
                }
            }
            // DESIGN decision 4: the Team profile replaces subagent/subagent_fork with the ten
            // Team tools and the policy section; a teammate's Team id is its parent's id.
            Profile::Team => {
                // A teammate whose Team's serializer runs in another process (hosted by a
                // worker) calls it over the Team service link; every other member here.
                let remote = parent
                    .filter(|lead| self.inner.teams.team(lead).is_none())
                    .and_then(|lead| self.inner.team_links.get().map(|links| links(lead)));
                let team_tools = match remote {
                    Some(link) => RemoteTeam::new(link, self.live_source()).tools(),
                    None => crate::team::team_tools(&Arc::downgrade(&self.inner.teams)),
                };
                for tool in team_tools {
                    tools.register(tool).map_err(|e| refuse(e.to_string()))?;
                }
                policy = Some(match parent {
                    None => {
                        let workspace = if config.worktree_root.is_some() {
                            TeamWorkspace::Worktrees
                        } else {
                            TeamWorkspace::Shared
                        };
                        team_policy(TeamRole::Lead, "lead", id.as_str(), workspace)
                    }
                    Some(lead) => {
                        let branch = self.worktree_branch_of(lead, config);
                        let workspace = match &branch {
                            Some(branch) => TeamWorkspace::OwnWorktree {
                                path: &config.workspace,
                                branch,
                            },
                            None => TeamWorkspace::Shared,
                        };
                        team_policy(TeamRole::Teammate, &config.name, lead.as_str(), workspace)
                    }
                });
            }
        }
        for tool in &self.inner.options.extra_tools {
            tools
                .register(Arc::clone(tool))
                .map_err(|e| refuse(e.to_string()))?;
        }
        let tool_context = self.tool_context_of(id, config)?;
        let mut system_prompt = default_system_prompt(config, has_subagents);
        // The recorded instructions, under their heading, before the Team policy.
        if let Some(instructions) = &config.project_instructions {
            system_prompt.push('\n');
            system_prompt.push_str(&instructions.section());
        }
        if let Some(policy) = policy {
            system_prompt.push('\n');
            system_prompt.push_str(&policy);
        }
        Ok(AgentSetup {
            name: config.name.clone(),
            system_prompt,
            provider,
            model,
            tools,
            tool_context,
            chunks: self.inner.options.chunks,
            progress: self.inner.progress.clone(),
            secrets: self.inner.options.secrets.clone(),
            approvals: Arc::clone(&self.inner.approvals),
            ledger: parent
                .and_then(|lead| self.inner.team_ledgers.get().and_then(|of| of(lead)))
                .unwrap_or_else(|| Arc::clone(&self.inner.options.ledger)),
        })
    }

    /// The tool context of the agent of session `id` with `config`: its workspace, limits,
    /// secret variables, effective sandbox and temporary directory.
    fn tool_context_of(
        &self,
        id: &SessionId,
        config: &AgentConfigRecord,
    ) -> Result<ToolContext, RuntimeError> {
        Ok(ToolContext::new(
            &config.workspace,
            id.clone(),
            Arc::clone(&self.inner.observations),
        )
        .map_err(|e| RuntimeError::Workspace {
            path: config.workspace.clone(),
            reason: e.to_string(),
        })?
        .with_limits(self.inner.options.tool_limits.clone())
        .with_secret_env(self.inner.options.secret_env.iter().cloned())
        .with_sandbox(self.effective_sandbox(config))
        .with_temp_dir(Some(
            config
                .tmp_dir
                .as_ref()
                .map_or_else(|| session_temp_dir(id), PathBuf::from),
        )))
    }

    fn send_progress(&self, agent: &SessionId, name: &str, progress: Progress) {
        let _ = self.inner.progress.send(AgentProgress {
            agent: agent.clone(),
            agent_name: name.to_owned(),
            progress,
        });
    }

    /// `text` with the runtime's secret values replaced by `***`.
    fn redacted(&self, text: String) -> String {
        let mut secrets: Vec<String> = self
            .inner
            .options
            .secrets
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        redact_text(&text, &secrets).unwrap_or(text)
    }

    /// Settles the approval requests of the calls a crash cut (`cut`, from
    /// [`cut_approvals`]) before recovery closes their turn, deciding from the logs (DESIGN
    /// decision 10; the table in [`troupe_approval`]): a call whose approval is durable in the
    /// member's log may have run and is left to the default resolution
    /// (`TOOL_OUTCOME_UNKNOWN`, never run again); a durable denial is rebuilt; a request still
    /// undecided takes its decision log's decision, or — when there is none — is **asked
    /// again** ([`Progress::ApprovalRequested`] with `again`) and waited for (a fresh timeout).
    /// Such a decision is appended to the member's log through `log` and flushed before an
    /// approved command runs (outside the sandbox, its process group recorded as it starts),
    /// so a crash during the run leaves it approved without a result: unknown, never run
    /// twice. Returns the resolution of each call it settled.
    ///
    /// # Errors
    /// Journal errors (the member's log or a decision log failed).
    async fn settle_cut_approvals(
        &self,
        id: &SessionId,
        name: &str,
        cut: CutApprovals,
        context: ToolContext,
        log: RecoveryLog,
    ) -> Result<HashMap<String, CallResolution>, RuntimeError> {
        let mut out = HashMap::new();
        let timeout_ms = self.inner.approvals.policy().timeout_ms;
        let (turn, step) = (cut.turn, cut.step);
        for (call, entry) in cut.calls {
            let decided = match entry.decided {
                Some(decided) if decided.decision.approves() => continue,
                Some(decided) => {
                    out.insert(
                        call.id.clone(),
                        done(denial_result(turn, step, &call, &decided, timeout_ms)),
                    );
                    continue;
                }
                None => {
                    let journal = self.inner.journal.clone();
                    let (member, request) = (id.clone(), entry.request.id.clone());
                    let stored = tokio::task::spawn_blocking(move || {
                        read_decision(&journal, &member, &request)
                    })
                    .await
                    .unwrap_or(Ok(None))
                    .map_err(approval_error)?;
                    match stored {
                        Some(decided) => decided,
                        None => {
                            self.send_progress(
                                id,
                                name,
                                Progress::ApprovalRequested {
                                    request: entry.request.id.clone(),
                                    call_id: call.id.clone(),
                                    command: entry.request.command.clone(),
                                    justification: entry.request.justification.clone(),
                                    timeout_ms,
                                    again: true,
                                },
                            );
                            let waited = self
                                .inner
                                .approvals
                                .wait(
                                    id,
                                    &entry.request.id,
                                    self.inner.approvals.policy().timeout(),
                                    &CancellationToken::new(),
                                )
                                .await
                                .map_err(approval_error)?;
                            match waited {
                                Waited::Decided(decided) | Waited::Withdrawn(decided) => decided,
                            }
                        }
                    }
                }
            };
            log.append(vec![EventDraft::new(
                ty::APPROVAL_DECIDED,
                to_value(&decided),
            )])?;
            log.writer().flush().await?;
            self.send_progress(
                id,
                name,
                Progress::ApprovalDecided {
                    request: decided.id.clone(),
                    decision: decided.decision,
                    by: decided.by,
                },
            );
            if !decided.decision.approves() {
                out.insert(
                    call.id.clone(),
                    done(denial_result(turn, step, &call, &decided, timeout_ms)),
                );
                continue;
            }
            let observer = {
                let log = log.clone();
                let call_id = call.id.clone();
                ProcessObserver::new(move |info| log.record_process(turn, step, &call_id, info))
            };
            let ctx = context
                .clone()
                .with_call_id(call.id.as_str())
                .with_process_observer(observer)
                .with_escalation();
            let outcome = BashTool::with_escalation()
                .call_text(&ctx, call.arguments.clone())
                .await;
            out.insert(
                call.id.clone(),
                CallResolution::Done {
                    content: self.redacted(render_text_outcome(&outcome)),
                    is_error: outcome.is_err(),
                    code: outcome.as_ref().err().map(|e| e.code().to_owned()),
                },
            );
        }
        Ok(out)
    }

    fn register(&self, agent: Agent, parent: Option<SessionId>, notify_parent: bool) {
        let id = agent.id().clone();
        let mut live = lock(&self.inner.live);
        if let Some(p) = parent.as_ref().and_then(|p| live.get_mut(p)) {
            p.owned.insert(id.clone());
        }
        live.insert(
            id,
            Live {
                agent,
                parent,
                owned: HashSet::new(),
                notify_parent,
                watched: false,
            },
        );
        drop(live);
        self.inner.changed.notify_waiters();
    }

    /// Whether `agent` is the registry's exact live entry (not a stale or copied handle).
    fn is_exact_live(&self, agent: &Agent) -> bool {
        lock(&self.inner.live)
            .get(agent.id())
            .is_some_and(|l| l.agent.same(agent) && !agent.is_disposed())
    }

    fn child_lock(&self, id: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(
            lock(&self.inner.child_locks)
                .entry(id.clone())
                .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(()))),
        )
    }

    /// Starts a child of `parent` (REFERENCE b.3): reserves its id (`DUPLICATE_CHILD` when a
    /// live agent or a stored session has it), seeds it (fork: the parent's completed-turn
    /// prefix), writes the descriptor and config, starts it, and returns once its inbox holds
    /// the prompt durably. A failure before acceptance leaves no live child.
    ///
    /// # Errors
    /// `DUPLICATE_CHILD`, `UNAUTHORIZED` (parent not the exact live entry), journal and model
    /// setup errors.
    pub async fn start_child(
        &self,
        parent: &Agent,
        spec: ChildSpec,
    ) -> Result<ChildStart, RuntimeError> {
        if !self.is_exact_live(parent) {
            return Err(RuntimeError::Unauthorized(format!(
                "{} is not a live parent",
                parent.id()
            )));
        }
        let cancelled = || {
            spec.cancel
                .as_ref()
                .is_some_and(CancellationToken::is_cancelled)
        };
        let aborted =
            || RuntimeError::Cancelled("child creation was cancelled by the caller".into());
        if cancelled() {
            return Err(aborted());
        }
        let child_id = spec.child_id.clone().unwrap_or_else(SessionId::random);
        let guard = self.child_lock(&child_id);
        let _held = guard.lock().await;
        if self.agent(&child_id).is_some() {
            return Err(RuntimeError::DuplicateChild {
                id: child_id.to_string(),
            });
        }
        match self.inner.journal.read(&child_id) {
            Err(JournalError::NotFound { .. }) => {}
            _ => {
                return Err(RuntimeError::DuplicateChild {
                    id: child_id.to_string(),
                });
            }
        }
        parent.writer().flush().await?;
        let parent_replay = self.inner.journal.read(parent.id())?;
        let seed = match spec.provider {
            ChildProvider::Spawn => Vec::new(),
            ChildProvider::Fork => {
                let end = parent_replay
                    .events
                    .iter()
                    .rposition(|e| e.kind == ty::TURN_END)
                    .map_or(0, |i| i + 1);
                parent_replay.events[..end].to_vec()
            }
        };
        let (writer, config) =
            self.create_child_log(parent, &parent_replay.header, &child_id, &spec, seed, None)?;
        writer.flush().await?;
        let replay = self.inner.journal.read(&child_id)?;
        let transcript = Transcript::fold(replay.header.seed_len(), &replay.events)?;
        let setup = self.build_setup(&child_id, &config, Some(parent.id()))?;
        let agent = Agent::start(writer, transcript, setup);
        // Final admission: the caller's signal, and the parent must still be the exact live
        // entry. A refusal here disposes the child before anyone could address it.
        if cancelled() {
            let _ = agent.dispose(json!({"kind": "parent"})).await;
            return Err(aborted());
        }
        if !self.is_exact_live(parent) {
            let _ = agent.dispose(json!({"kind": "parent"})).await;
            return Err(RuntimeError::Unauthorized(format!(
                "{} is no longer live",
                parent.id()
            )));
        }
        self.register(
            agent.clone(),
            Some(parent.id().clone()),
            spec.continuable && spec.notify_parent,
        );
        let msg = UserMessage::text(spec.prompt, MessageSource::kind("user"));
        let message_id = match agent.followup(msg).await {
            Ok(id) => id,
            Err(e) => {
                let _ = self.release(&child_id).await;
                return Err(e);
            }
        };
        if spec.continuable {
            self.ensure_watched(&agent);
        }
        Ok(ChildStart {
            child_id,
            message_id,
        })
    }

    /// Creates the log of child `child_id` of `parent` (whose stored header is
    /// `parent_header`): header (parent, origin `subagent`, the parent's cwd), `seed` (a fork's
    /// inherited events), then one batch of the descriptor, the config and — when `prompt` is
    /// given — the prompt's inbox insertion. Not flushed: the first flush creates the file
    /// whole (the journal publishes a new file with `link(2)`), so a crash leaves no child or
    /// one with all of these.
    fn create_child_log(
        &self,
        parent: &Agent,
        parent_header: &SessionHeader,
        child_id: &SessionId,
        spec: &ChildSpec,
        seed: Vec<troupe_protocol::Event>,
        prompt: Option<UserMessage>,
    ) -> Result<(troupe_journal::SessionWriter, AgentConfigRecord), RuntimeError> {
        let parent_config = parent
            .with_transcript(|t| t.config().cloned())
            .ok_or_else(|| RuntimeError::Unauthorized("the parent has no configuration".into()))?;
        let mut header = SessionHeader::new(child_id.clone(), self.inner.journal.clock().now_ms())
            .with_parent(parent.id().clone())
            .with_origin("subagent");
        header.cwd = match &spec.workspace {
            Some(own) => Some(own.display().to_string()),
            None => parent_header.cwd.clone(),
        };
        // The child's own model, else the one the parent runs (the session's model).
        let model = spec
            .model
            .clone()
            .unwrap_or_else(|| self.effective_model(&parent_config));
        let writer = if seed.is_empty() {
            self.inner.journal.create(header)?
        } else {
            self.inner.journal.create_seeded(header, seed)?
        };
        let descriptor = Descriptor {
            version: 2,
            mode: if spec.continuable {
                DescriptorMode::Continuable
            } else {
                DescriptorMode::OneShot
            },
            provider: spec.provider,
            label: spec.label.clone(),
            agent_provider: Some(model.provider.as_str().to_owned()),
            agent_model: Some(model.model.clone()),
        };
        let config = AgentConfigRecord {
            name: spec.label.clone(),
            model,
            own_model: spec.model.is_some(),
            teammate_models: None,
            // Exactly what the session started with, never read again.
            project_instructions: parent_config.project_instructions.clone(),
            profile: spec.profile,
            workspace: spec.workspace.as_ref().map_or_else(
                || parent_config.workspace.clone(),
                |own| own.display().to_string(),
            ),
            depth: parent_config.depth + 1,
            team_limits: None,
            // A child records the policy its parent runs with: never looser.
            sandbox: Some(self.effective_sandbox(&parent_config)),
            tmp_dir: Some(session_temp_dir(child_id).display().to_string()),
            mcp_servers: None,
            approval: Some(self.inner.options.approval),
            worktree_root: None,
            placement: None,
        };
        let mut drafts = vec![
            EventDraft::new(ty::SUBAGENT_DESCRIPTOR, to_value(&descriptor)),
            EventDraft::new(ty::AGENT_CONFIG, to_value(&config)),
        ];
        drafts.extend(prompt.map(prompt_splice));
        writer.append_batch(drafts)?;
        Ok((writer, config))
    }

    /// Carries out a teammate creation a crash cut before the child's prompt was durable
    /// (issue 10, defect 6: such a child has done nothing): the child `child_id` gets its log —
    /// created whole when there is none (a fork seeded with `seed`), or, when its log holds no
    /// prompt yet, the prompt appended to it — with `prompt` waiting in its inbox. The child
    /// is not started: the Team recovery runs the waiting prompt once the Lead's own recovery
    /// is done. What survives a crash here: no change, or the whole log / the prompt.
    ///
    /// # Errors
    /// Journal errors (the child log could not be created or written).
    pub(crate) async fn recreate_child(
        &self,
        parent: &Agent,
        child_id: &SessionId,
        spec: &ChildSpec,
        seed: Vec<troupe_protocol::Event>,
        log_exists: bool,
    ) -> Result<(), RuntimeError> {
        let guard = self.child_lock(child_id);
        let _held = guard.lock().await;
        let prompt = UserMessage::text(spec.prompt.clone(), MessageSource::kind("user"));
        let writer = if log_exists {
            let (writer, _) = self.inner.journal.open(child_id)?;
            writer.append_batch(vec![prompt_splice(prompt)])?;
            writer
        } else {
            let parent_header = self.inner.journal.read(parent.id())?.header;
            let seed = match spec.provider {
                ChildProvider::Spawn => Vec::new(),
                ChildProvider::Fork => seed,
            };
            self.create_child_log(parent, &parent_header, child_id, spec, seed, Some(prompt))?
                .0
        };
        let flushed = writer.flush().await;
        let closed = writer.close().await;
        flushed?;
        closed?;
        Ok(())
    }

    /// Sends a follow-up to a child (REFERENCE b.6): to the live child when resident, else
    /// cold-resumes it from its log (its parked inbox runs first, in FIFO order).
    ///
    /// # Errors
    /// `UNAUTHORIZED` unless `parent` is the exact live direct parent; `NOT_RESUMABLE` when
    /// the child's log cannot be read or is not a continuable child; journal errors.
    pub async fn followup_child(
        &self,
        parent: &Agent,
        child_id: &SessionId,
        msg: UserMessage,
    ) -> Result<MessageId, RuntimeError> {
        let guard = self.child_lock(child_id);
        let _held = guard.lock().await;
        let agent = self.ensure_child_live_locked(parent, child_id).await?;
        let sent = agent.followup(msg).await;
        // Watched whatever the follow-up's outcome: its flush also waits for the turn it
        // started, so a log failure there (the child is then stopped, idle) fails it too, and
        // a resident child nobody watches never settles (its parent would wait forever).
        self.ensure_watched(&agent);
        sent
    }

    /// Wakes a child's parked inbox (REFERENCE b.6 without a new message): cold-resumes it if
    /// needed and runs its pending items in FIFO order. Returns whether there was anything to
    /// run.
    ///
    /// # Errors
    /// As [`Runtime::followup_child`].
    pub async fn wake_child(
        &self,
        parent: &Agent,
        child_id: &SessionId,
    ) -> Result<bool, RuntimeError> {
        let guard = self.child_lock(child_id);
        let _held = guard.lock().await;
        let agent = self.ensure_child_live_locked(parent, child_id).await?;
        let ran = agent.wake_parked();
        self.ensure_watched(&agent);
        Ok(ran)
    }

    /// The resident child `child_id` of `parent`, cold-resuming it (without sending anything;
    /// its inbox stays parked) when it is not resident. Use it to deliver older quiet mail
    /// before a waking message (REFERENCE c.10 porting note); the child settles again only
    /// after something is sent to it through [`Runtime::followup_child`].
    ///
    /// # Errors
    /// As [`Runtime::followup_child`].
    pub async fn ensure_child_live(
        &self,
        parent: &Agent,
        child_id: &SessionId,
    ) -> Result<Agent, RuntimeError> {
        let guard = self.child_lock(child_id);
        let _held = guard.lock().await;
        self.ensure_child_live_locked(parent, child_id).await
    }

    async fn ensure_child_live_locked(
        &self,
        parent: &Agent,
        child_id: &SessionId,
    ) -> Result<Agent, RuntimeError> {
        if !self.is_exact_live(parent) {
            return Err(RuntimeError::Unauthorized(format!(
                "{} is not a live parent",
                parent.id()
            )));
        }
        let resident = {
            let live = lock(&self.inner.live);
            live.get(child_id)
                .map(|l| (l.agent.clone(), l.parent.clone()))
        };
        if let Some((agent, child_parent)) = resident {
            if child_parent.as_ref() != Some(parent.id()) {
                return Err(RuntimeError::Unauthorized(format!(
                    "{} is not the parent of {child_id}",
                    parent.id()
                )));
            }
            return Ok(agent);
        }
        let replay = self
            .inner
            .journal
            .read(child_id)
            .map_err(|e| RuntimeError::NotResumable {
                id: child_id.to_string(),
                reason: e.to_string(),
            })?;
        if replay.header.parent_session.as_ref() != Some(parent.id()) {
            return Err(RuntimeError::Unauthorized(format!(
                "{} is not the parent of {child_id}",
                parent.id()
            )));
        }
        let t = Transcript::fold(replay.header.seed_len(), &replay.events)?;
        if t.descriptor()
            .is_none_or(|d| d.mode != DescriptorMode::Continuable)
        {
            return Err(RuntimeError::NotResumable {
                id: child_id.to_string(),
                reason: "it is not a continuable child".to_owned(),
            });
        }
        let notify = t.config().is_none_or(|c| c.profile != Profile::Team);
        if let Some(config) = t.config() {
            self.restore_worktree(parent, config).await?;
        }
        let (agent, _) = self.activate(child_id).await?;
        self.register(agent.clone(), Some(parent.id().clone()), notify);
        Ok(agent)
    }

    /// The branch of teammate `config` of Lead `lead` when it works in its own git worktree:
    /// the Lead (live in this process) recorded a `worktreeRoot` and the teammate's workspace
    /// lies beneath it. `None` otherwise (a Team without worktrees, or a Lead not live here).
    fn worktree_branch_of(&self, lead: &SessionId, config: &AgentConfigRecord) -> Option<String> {
        let root = self
            .agent(lead)?
            .with_transcript(|t| t.config().and_then(|c| c.worktree_root.clone()))?;
        Path::new(&config.workspace).starts_with(&root).then(|| {
            crate::worktree::branch_of(&troupe_team::TeamId::new(lead.clone()), &config.name)
        })
    }

    /// Adds again, from its branch, the git worktree of a teammate of a `--worktree` Team
    /// (its `workspace` beneath the Lead's recorded `worktreeRoot`) when the directory is gone
    /// (`troupe team clean`, or removed by hand), before the teammate is started from its log:
    /// its branch holds what it committed (`crate::worktree::restore`). Nothing for any other
    /// child. What survives a crash: git's `worktree add` either finished or is re-done by the
    /// next start.
    ///
    /// # Errors
    /// `WORKTREE_NOT_A_REPOSITORY`, `WORKTREE_GIT_FAILED`.
    async fn restore_worktree(
        &self,
        parent: &Agent,
        config: &AgentConfigRecord,
    ) -> Result<(), RuntimeError> {
        let Some((root, lead_workspace)) = parent.with_transcript(|t| {
            t.config().and_then(|c| {
                c.worktree_root
                    .as_ref()
                    .map(|r| (PathBuf::from(r), PathBuf::from(&c.workspace)))
            })
        }) else {
            return Ok(());
        };
        let path = PathBuf::from(&config.workspace);
        if !path.starts_with(&root) || path.exists() {
            return Ok(());
        }
        let branch = crate::worktree::branch_of(
            &troupe_team::TeamId::new(parent.id().clone()),
            &config.name,
        );
        tokio::task::spawn_blocking(move || {
            crate::worktree::restore(&lead_workspace, &path, &branch)
        })
        .await
        .map_err(|e| RuntimeError::Cancelled(format!("the git operation stopped: {e}")))??;
        Ok(())
    }

    /// Starts the settlement watcher of a resident continuable child once.
    fn ensure_watched(&self, agent: &Agent) {
        let start = {
            let mut live = lock(&self.inner.live);
            match live.get_mut(agent.id()) {
                Some(l) if l.agent.same(agent) && !l.watched => {
                    l.watched = true;
                    true
                }
                _ => false,
            }
        };
        if start {
            self.watch_settlement(agent.clone());
        }
    }

    /// Interrupts `target`'s current turn on behalf of an ancestor (REFERENCE b.7): pending
    /// items stay parked (keep-inbox); descendants are untouched. A target that is not resident
    /// is an accepted no-op.
    ///
    /// # Errors
    /// `UNAUTHORIZED` when `caller` is not the exact live entry, is the target itself, or is
    /// not in the target's live ancestry.
    pub async fn interrupt(&self, caller: &Agent, target: &SessionId) -> Result<(), RuntimeError> {
        if !self.is_exact_live(caller) || caller.id() == target {
            return Err(RuntimeError::Unauthorized(format!(
                "{} may not interrupt {target}",
                caller.id()
            )));
        }
        let (agent, ancestry) = {
            let live = lock(&self.inner.live);
            let Some(entry) = live.get(target) else {
                return Ok(());
            };
            let mut ancestry = Vec::new();
            let mut cursor = entry.parent.clone();
            while let Some(p) = cursor {
                cursor = live.get(&p).and_then(|l| l.parent.clone());
                ancestry.push(p);
            }
            (entry.agent.clone(), ancestry)
        };
        if !ancestry.contains(caller.id()) {
            return Err(RuntimeError::Unauthorized(format!(
                "{} is not an ancestor of {target}",
                caller.id()
            )));
        }
        agent.cancel(json!({"kind": "parent"}), true).await
    }

    /// Releases the selected direct children of `parent` (REFERENCE b.9): ids are
    /// de-duplicated, non-resident ids skipped, every selected child must be a direct child of
    /// `parent` (checked before anything is released); each is disposed child-first, parking
    /// its inbox. No settlement notices are sent.
    ///
    /// # Errors
    /// `UNAUTHORIZED` (parent not exact live, or a selected child of another parent);
    /// `ACTIVATION_TEARDOWN_FAILED` when a disposal failed (after all were released).
    pub async fn drain_children(
        &self,
        parent: &Agent,
        ids: &[SessionId],
    ) -> Result<(), RuntimeError> {
        if !self.is_exact_live(parent) {
            return Err(RuntimeError::Unauthorized(format!(
                "{} is not a live parent",
                parent.id()
            )));
        }
        let mut selected: Vec<SessionId> = Vec::new();
        {
            let live = lock(&self.inner.live);
            for id in ids {
                if selected.contains(id) {
                    continue;
                }
                let Some(entry) = live.get(id) else { continue };
                if entry.parent.as_ref() != Some(parent.id()) {
                    return Err(RuntimeError::Unauthorized(format!(
                        "{id} is not a child of {}",
                        parent.id()
                    )));
                }
                selected.push(id.clone());
            }
        }
        let mut failures = Vec::new();
        let parent_cause = json!({"kind": "parent"});
        for id in selected {
            failures.extend(self.release_tree(&id, &parent_cause).await);
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::TeardownFailed(failures))
        }
    }

    /// Disposes `id` and its resident descendants, children first; returns failures.
    fn release_tree<'a>(
        &'a self,
        id: &'a SessionId,
        cause: &'a Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<String>> + Send + 'a>> {
        Box::pin(async move {
            let owned: Vec<SessionId> = lock(&self.inner.live)
                .get(id)
                .map(|l| l.owned.iter().cloned().collect())
                .unwrap_or_default();
            let mut failures = Vec::new();
            for child in owned {
                failures.extend(self.release_tree(&child, cause).await);
            }
            if let Err(e) = self.release_with(id, cause.clone()).await {
                failures.push(format!("{id}: {e}"));
            }
            failures
        })
    }

    /// Disposes one resident agent (parking its inbox) and unregisters it.
    async fn release(&self, id: &SessionId) -> Result<(), RuntimeError> {
        self.release_with(id, json!({"kind": "parent"})).await
    }

    /// [`Runtime::release`] with the cancellation cause recorded on a running turn.
    async fn release_with(&self, id: &SessionId, cause: Value) -> Result<(), RuntimeError> {
        let Some(agent) = self.agent(id) else {
            return Ok(());
        };
        let result = agent.dispose(cause).await;
        self.note_log_failure(&agent, result.as_ref().err());
        self.unregister(id);
        result
    }

    fn unregister(&self, id: &SessionId) {
        self.inner.teams.detach(id);
        let mut live = lock(&self.inner.live);
        if let Some(entry) = live.remove(id)
            && let Some(p) = entry.parent.and_then(|p| live.get_mut(&p))
        {
            p.owned.remove(id);
        }
        drop(live);
        self.inner.changed.notify_waiters();
    }

    /// Watches a continuable child and disposes its activation once it settles (idle, no
    /// waking work, no resident children), then notifies the parent (REFERENCE b.8).
    fn watch_settlement(&self, agent: Agent) {
        let rt = self.clone();
        tokio::spawn(async move {
            let id = agent.id().clone();
            let mut status = agent.subscribe_status();
            loop {
                let changed = rt.inner.changed.notified();
                let settled = {
                    let live = lock(&rt.inner.live);
                    match live.get(&id) {
                        None => return,
                        Some(l) if !l.agent.same(&agent) => return,
                        Some(l) => {
                            l.owned.is_empty() && *status.borrow_and_update() == AgentStatus::Idle
                        }
                    }
                };
                if settled {
                    let guard = rt.child_lock(&id);
                    let _held = guard.lock().await;
                    // Re-check under the child lock: a follow-up may have just arrived.
                    if agent.status() == AgentStatus::Idle
                        && rt.agent(&id).is_some_and(|a| a.same(&agent))
                        && lock(&rt.inner.live)
                            .get(&id)
                            .is_some_and(|l| l.owned.is_empty())
                    {
                        rt.settle(&agent).await;
                        return;
                    }
                    continue;
                }
                tokio::select! {
                    _ = status.changed() => {}
                    () = changed => {}
                }
            }
        });
    }

    async fn settle(&self, agent: &Agent) {
        let id = agent.id().clone();
        let (parent, notify) = lock(&self.inner.live)
            .get(&id)
            .map(|l| (l.parent.clone(), l.notify_parent))
            .unwrap_or((None, false));
        let disposed = agent.dispose(json!({"kind": "parent"})).await;
        self.note_log_failure(agent, disposed.as_ref().err());
        if let Err(e) = disposed {
            tracing::warn!(child = %id, error = %e, "child disposal failed");
        }
        self.unregister(&id);
        let Some(parent) = parent.and_then(|p| self.agent(&p)) else {
            return;
        };
        if !notify || parent.is_disposed() {
            return;
        }
        let notice = settlement_notice(agent);
        let result = if parent.status() == AgentStatus::Running {
            parent.steer(notice).await
        } else {
            parent.followup(notice).await
        };
        if let Err(e) = result {
            tracing::warn!(child = %id, error = %e, "settlement notice not delivered");
        }
    }

    /// Waits until `root` is idle, none of its descendants is resident (every child settled)
    /// and no member of its Team is reported running in another process. Other roots are not
    /// waited for.
    pub async fn wait_quiescent(&self, root: &Agent) {
        loop {
            let changed = self.inner.changed.notified();
            root.wait_idle().await;
            let descendants = {
                let live = lock(&self.inner.live);
                live.get(root.id()).is_some_and(|l| !l.owned.is_empty())
            };
            // Members of its Team running in other processes (hosted by workers) are waited
            // for too; their hosts' reports are looked at again every 200 ms.
            let elsewhere = self.inner.teams.running_elsewhere(root.id()) > 0;
            if !descendants && !elsewhere && root.status() == AgentStatus::Idle {
                return;
            }
            let mut status = root.subscribe_status();
            tokio::select! {
                () = changed => {}
                _ = status.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(200)), if elsewhere => {}
            }
        }
    }

    /// Disposes every resident agent, children first, parking their inboxes (DESIGN
    /// decision 2). Teams are closed first (waits return, no new Team operation or delivery
    /// starts), then their in-flight teammate creations and message deliveries settle
    /// (REFERENCE c.14 steps 3–4), then every root's tree is released. Each of these steps is
    /// bounded by `team_limits.disposal_timeout_ms`.
    ///
    /// # Errors
    /// `ACTIVATION_TEARDOWN_FAILED` listing the agents whose disposal failed, the in-flight
    /// creations that failed on their own while the Team was closing (their code and message),
    /// and the steps that exceeded the bound (`TEAM_DISPOSAL_TIMEOUT`).
    pub async fn shutdown(&self) -> Result<(), RuntimeError> {
        self.inner.teams.close_all();
        // Each step is bounded (REFERENCE c.14: `disposalTimeoutMs`), so a tool that ignores
        // cancellation cannot hang the shutdown; inboxes are parked either way.
        let bound = Duration::from_millis(self.inner.options.team_limits.disposal_timeout_ms);
        let mut failures = Vec::new();
        // In-flight Team work settles first (c.14 steps 3–4: creations, then deliveries),
        // while the Leads are still live to record its outcome.
        failures.extend(self.inner.teams.settle_in_flight(bound).await);
        // Members running in other processes are parked by their holders (turns stopped as
        // a park stops them, inboxes kept), so the whole Team stops, not only this process.
        let park = crate::team::InterruptCause::Shutdown;
        for warning in self.inner.teams.stop_elsewhere(park, bound).await {
            tracing::warn!("{warning}");
        }
        let roots: Vec<SessionId> = lock(&self.inner.live)
            .iter()
            .filter(|(_, l)| l.parent.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for root in roots {
            // A shutdown stop is not the parent's decision: the Team continues such turns on
            // resume (unlike a Lead's deliberate interrupt, `{"kind":"parent"}`).
            let cause = json!({"kind": "shutdown"});
            match tokio::time::timeout(bound, self.release_tree(&root, &cause)).await {
                Ok(tree_failures) => failures.extend(tree_failures),
                Err(_) => failures.push(format!(
                    "TEAM_DISPOSAL_TIMEOUT: disposing {root} and its children took longer than {} ms",
                    bound.as_millis()
                )),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::TeardownFailed(failures))
        }
    }
}

/// The calls of a cut turn's open step that started and asked for approval, with their
/// requests (what [`Runtime::settle_cut_approvals`] settles).
struct CutApprovals {
    turn: u64,
    step: u64,
    calls: Vec<(troupe_llm::ToolCall, ApprovalEntry)>,
}

impl CutApprovals {
    fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// The cut calls of `transcript`'s open turn that asked for approval.
fn cut_approvals(transcript: &Transcript) -> CutApprovals {
    let calls = if transcript.open_turn().is_some() {
        transcript
            .unanswered()
            .into_iter()
            .filter(|u| u.call_seq.is_some())
            .filter_map(|u| {
                transcript
                    .approval_for_call(&u.call.id)
                    .cloned()
                    .map(|entry| (u.call, entry))
            })
            .collect()
    } else {
        Vec::new()
    };
    CutApprovals {
        turn: transcript.open_turn().unwrap_or(0),
        step: transcript.open_step().unwrap_or(0),
        calls,
    }
}

/// Where recovery appends what it settles: through a live agent (a resumed root: its
/// transcript folds the events), or to a writer opened for the recovery alone, collecting the
/// events for the caller's transcript (in seq order).
#[derive(Clone)]
enum RecoveryLog {
    Agent(Agent),
    Writer(
        troupe_journal::SessionWriter,
        Arc<Mutex<Vec<troupe_protocol::Event>>>,
    ),
}

impl RecoveryLog {
    fn append(&self, drafts: Vec<EventDraft>) -> Result<(), RuntimeError> {
        match self {
            Self::Agent(agent) => agent.append_records(drafts).map(drop),
            Self::Writer(writer, collected) => {
                let events = writer.append_batch(drafts)?;
                lock(collected).extend(events);
                Ok(())
            }
        }
    }

    fn writer(&self) -> &troupe_journal::SessionWriter {
        match self {
            Self::Agent(agent) => agent.writer(),
            Self::Writer(writer, _) => writer,
        }
    }

    /// Records (and flushes at once, best effort) the process group a recovery-run command
    /// started, as a live call does.
    fn record_process(&self, turn: u64, step: u64, call_id: &str, info: ProcessInfo) {
        let rec = ToolProcessRecord {
            turn,
            step,
            call_id: call_id.to_owned(),
            pgid: info.pgid,
            start_time: info.start_time,
        };
        if let Err(e) = self.append(vec![EventDraft::ignorable(
            ty::TOOL_PROCESS,
            to_value(&rec),
        )]) {
            tracing::warn!(error = %e, "tool process not recorded");
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let writer = self.writer().clone();
            handle.spawn(async move {
                let _ = writer.flush().await;
            });
        }
    }
}

/// A rebuilt result, as recovery's resolution.
fn done(result: ToolResultRecord) -> CallResolution {
    CallResolution::Done {
        content: result.content,
        is_error: result.is_error,
        code: result.code,
    }
}

/// An approval failure during recovery, as the runtime's error (journal failures keep theirs).
fn approval_error(error: troupe_approval::ApprovalError) -> RuntimeError {
    match error {
        troupe_approval::ApprovalError::Journal(e) => RuntimeError::Journal(e),
        other => RuntimeError::InvalidEvent {
            seq: 0,
            kind: troupe_protocol::event_types::APPROVAL_DECIDED.to_owned(),
            reason: other.to_string(),
        },
    }
}

/// The inbox insertion that queues `prompt` as a follow-up (next turn).
fn prompt_splice(prompt: UserMessage) -> EventDraft {
    let splice = troupe_session::events::InboxSplice {
        target: troupe_session::events::InboxTarget::NextTurn,
        start: 0,
        removed_count: 0,
        inserted: vec![prompt],
        outcome: None,
    };
    EventDraft::new(ty::AGENT_INBOX_SPLICED, to_value(&splice))
}

/// Stops the process groups the open step's unanswered calls left running (only those whose
/// leader's recorded start time still matches, so a reused pid is never signalled) and
/// returns their call ids (their results say so).
fn stop_leftovers(transcript: &Transcript) -> Vec<String> {
    if transcript.open_turn().is_none() {
        return Vec::new();
    }
    transcript
        .leftover_processes()
        .into_iter()
        .filter(|p| {
            troupe_tools::stop_leftover_group(troupe_tools::ProcessInfo {
                pgid: p.pgid,
                start_time: p.start_time,
            })
        })
        .map(|p| p.call_id)
        .collect()
}

/// Where recovery finds a Team's `tool/effect` links: the Lead log already in memory, or the
/// Lead's log read from the journal — either only once, when a call first needs them.
pub(crate) struct LinkSource<'a> {
    events: Option<&'a [troupe_protocol::Event]>,
    lead: Option<SessionId>,
    links: std::sync::OnceLock<Option<TeamLinks>>,
}

impl<'a> LinkSource<'a> {
    /// The links of the Lead log `events` (none for a session that leads no Team).
    fn events(events: Option<&'a [troupe_protocol::Event]>) -> Self {
        Self {
            events,
            lead: None,
            links: std::sync::OnceLock::new(),
        }
    }

    /// The links of `lead`'s log, read when needed (none without a parent).
    fn lead(lead: Option<SessionId>) -> Self {
        Self {
            events: None,
            lead,
            links: std::sync::OnceLock::new(),
        }
    }

    fn get(&self, journal: &Journal) -> Option<&TeamLinks> {
        self.links
            .get_or_init(|| match (self.events, &self.lead) {
                (Some(events), _) => Some(TeamLinks::collect(events)),
                (None, Some(lead)) => journal
                    .read(lead)
                    .ok()
                    .map(|replay| TeamLinks::collect(&replay.events)),
                (None, None) => None,
            })
            .as_ref()
    }
}

/// A Team that cannot be attached to Lead `id`: a lower layer's error as it is, a broken Team
/// rule as `TEAM_LOG_INVALID` naming the session.
fn team_setup_error(id: &SessionId, e: TeamOpError) -> RuntimeError {
    match e {
        TeamOpError::Runtime(e) => e,
        other => RuntimeError::TeamLog {
            id: id.to_string(),
            reason: other.to_string(),
        },
    }
}

/// The recorded configuration of a stored session, read without locking it (so a caller can
/// build the [`RuntimeOptions`] a resume needs from what the session recorded).
///
/// # Errors
/// Journal errors (`SESSION_NOT_FOUND`, `JOURNAL_CORRUPT`, …); `NOT_RESUMABLE` when the
/// session has no `agent/config` record.
pub fn stored_config(journal: &Journal, id: &SessionId) -> Result<AgentConfigRecord, RuntimeError> {
    let replay = journal.read(id)?;
    let t = Transcript::fold(replay.header.seed_len(), &replay.events)?;
    t.config()
        .cloned()
        .ok_or_else(|| RuntimeError::NotResumable {
            id: id.to_string(),
            reason: "it has no agent configuration (not created by troupe run)".to_owned(),
        })
}

/// The settlement notice a parent receives (REFERENCE b.8): one line naming the child and how
/// it stopped, then its closing output.
fn settlement_notice(agent: &Agent) -> UserMessage {
    let (reason, answer) = agent.with_transcript(|t| {
        (
            t.last_turn_end().cloned(),
            t.last_answer().map(str::to_owned),
        )
    });
    let how = match &reason {
        Some(TurnEndReason::Completed) => "finished".to_owned(),
        Some(TurnEndReason::Aborted { .. }) => "was stopped".to_owned(),
        Some(TurnEndReason::Failed { code, .. }) => format!("failed ({code})"),
        Some(TurnEndReason::Interrupted) | None => "ended abnormally".to_owned(),
    };
    let summary = format!(
        "background subagent {} ({}) {how}.",
        agent.name(),
        agent.id()
    );
    let body = match (&reason, answer) {
        (Some(TurnEndReason::Completed), Some(answer)) => format!("{summary}\n\n{answer}"),
        _ => format!("{summary}\n\n(no closing message)"),
    };
    UserMessage::text(
        body,
        MessageSource::kind("subagent-settled")
            .with("form", "notice")
            .with("summary", Value::String(summary))
            .with("senderSessionId", agent.id().to_string()),
    )
}

/// The runtime's [`ChildControl`]: each operation is the runtime's own method of the same
/// purpose, on the runtime this weakly refers to (`AGENT_DISPOSED` once it is gone).
struct Control(Weak<RtInner>);

impl Control {
    fn runtime(&self) -> Result<Runtime, RuntimeError> {
        self.0
            .upgrade()
            .map(|inner| Runtime { inner })
            .ok_or_else(|| RuntimeError::Disposed("runtime".to_owned()))
    }
}

impl ChildControl for Control {
    fn close_cut_turn<'a>(
        &'a self,
        parent: &'a Agent,
        child: &'a SessionId,
    ) -> ControlFuture<'a, bool> {
        Box::pin(async move {
            let links = LinkSource::lead(Some(parent.id().clone()));
            self.runtime()?.close_open_turn(child, &links).await
        })
    }

    fn agent(&self, id: &SessionId) -> Option<Agent> {
        self.runtime().ok()?.agent(id)
    }

    fn parent_of(&self, id: &SessionId) -> Option<SessionId> {
        self.runtime().ok()?.parent_of(id)
    }

    fn remember_model(&self, id: &SessionId, config: &AgentConfigRecord) {
        if let Ok(rt) = self.runtime() {
            rt.remember_model(id, &rt.effective_model(config));
        }
    }

    fn model_seen(&self, id: &SessionId) -> Option<String> {
        self.runtime().ok()?.model_seen(id)
    }

    fn start<'a>(&'a self, parent: &'a Agent, spec: ChildSpec) -> ControlFuture<'a, ChildStart> {
        Box::pin(async move { self.runtime()?.start_child(parent, spec).await })
    }

    fn follow_up<'a>(
        &'a self,
        parent: &'a Agent,
        child: &'a SessionId,
        message: UserMessage,
    ) -> ControlFuture<'a, MessageId> {
        Box::pin(async move { self.runtime()?.followup_child(parent, child, message).await })
    }

    fn wake<'a>(&'a self, parent: &'a Agent, child: &'a SessionId) -> ControlFuture<'a, bool> {
        Box::pin(async move { self.runtime()?.wake_child(parent, child).await })
    }

    fn activate<'a>(&'a self, parent: &'a Agent, child: &'a SessionId) -> ControlFuture<'a, Agent> {
        Box::pin(async move { self.runtime()?.ensure_child_live(parent, child).await })
    }

    fn watch(&self, child: &Agent) {
        if let Ok(runtime) = self.runtime() {
            runtime.ensure_watched(child);
        }
    }

    fn note_undelivered(&self, target: &SessionId, name: &str, error: String) {
        if let Ok(runtime) = self.runtime() {
            runtime.record_log_failure(target, name, error);
        }
    }

    fn interrupt<'a>(&'a self, caller: &'a Agent, target: &'a SessionId) -> ControlFuture<'a, ()> {
        Box::pin(async move { self.runtime()?.interrupt(caller, target).await })
    }

    fn drain<'a>(&'a self, parent: &'a Agent, children: &'a [SessionId]) -> ControlFuture<'a, ()> {
        Box::pin(async move { self.runtime()?.drain_children(parent, children).await })
    }

    fn recreate<'a>(
        &'a self,
        parent: &'a Agent,
        child: &'a SessionId,
        spec: ChildSpec,
        seed: Vec<troupe_protocol::Event>,
        log_exists: bool,
    ) -> ControlFuture<'a, ()> {
        Box::pin(async move {
            self.runtime()?
                .recreate_child(parent, child, &spec, seed, log_exists)
                .await
        })
    }
}

impl From<RuntimeError> for troupe_tools::ToolError {
    fn from(e: RuntimeError) -> Self {
        troupe_tools::ToolError::other(e.code(), e.to_string())
    }
}

/// Rebuilds `agent`'s file observations from its log ([`Transcript::seen_files`]: what it
/// last read or wrote of each file) with [`troupe_tools::restore_observations`], so an edit
/// after a read in an earlier process works and one of a file changed since fails with
/// `FS_STALE_VERSION`, as without the restart. Observations made in this process win (they
/// are newer). Runs on the blocking pool: it reads each file once.
async fn restore_seen(agent: &Agent) {
    let seen: Vec<(String, Option<String>)> = agent.with_transcript(|t| {
        t.seen_files()
            .iter()
            .map(|(path, image)| (path.clone(), image.clone()))
            .collect()
    });
    if seen.is_empty() {
        return;
    }
    let ctx = agent.setup().tool_context.clone();
    let restored = tokio::task::spawn_blocking(move || {
        troupe_tools::restore_observations(
            &ctx,
            seen.iter()
                .map(|(path, image)| (path.as_str(), image.as_deref())),
        );
    })
    .await;
    if let Err(e) = restored {
        // A file left unrestored stays unseen: its next write/edit asks for a read first.
        tracing::warn!(agent = %agent.id(), error = %e, "file observations not restored");
    }
}
