//! The Team projection (REFERENCE f): the Lead log folded with [`TeamState`], plus each
//! member's activity from its own session file, turned into the panel's view.
//!
//! Pure: no IO, no clock. The hub feeds it events and lock observations; it answers whether
//! the view changed.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;
use troupe_protocol::{Event, Seq, SessionId, event_types};
use troupe_session::changes::ChangeFold;
use troupe_session::chat::Usage;
use troupe_session::events::AgentConfigRecord;
use troupe_session::ledger::{Ledger, Prices, SessionUsage, price_key};
use troupe_team::{
    LiveAgent, LiveStatus, MemberPhase, MemberStatus, MemberView, OwnerActivity, ScopeOverlap,
    StallAfter, StallCheck, TaskSnapshot, TaskView, TeamId, TeamState, WriteConflict, WriteRadar,
};

/// One roster row of the panel: a [`MemberView`] (REFERENCE c.7, d.3) with the member's durable
/// `phase` (REFERENCE f; the Lead pseudo-row is `active`).
///
/// Wire shape: the `MemberView` fields (`id`, `name`, `role`, `status`, `description`?,
/// `provider`?, `context`?, `model`?, `diagnostics`, `worktree`? — a `--worktree` Team's
/// `{"path","branch","base"}`, shown as one line of the roster), `phase`
/// (`"provisioning"` | `"active"` | `"failed"`) and, for a live member (`running` | `idle`)
/// whose holder is known, `host` (DESIGN §7): `local` when the process holding its file or
/// lease holds the Lead's too (on the JSONL files every holder is a local process), else the
/// holder as its lease names it (`host H pid P`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberRow {
    /// The roster view of the member. `status` is derived from the session files: `running`
    /// while its log has an open turn and a process holds the file, `idle` when a process holds
    /// the file without an open turn, `inactive` when none does; `provisioning` and `failed`
    /// follow the phase.
    #[serde(flatten)]
    pub member: MemberView,
    /// The durable roster phase.
    pub phase: MemberPhase,
    /// Where it runs, while it is live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// One task of the panel: its [`TaskView`] (REFERENCE c.11.1) and the write-scope overlaps
/// it is concerned by ([`ScopeOverlap`]: on the task in progress *and* on the pending task
/// that would collide with it, never on a completed one), which the panel shows instead of
/// `writeScopeWarnings`.
///
/// Wire shape: the `TaskView` fields (with `stalled` when the task is stalled — `reason` and
/// `since`, no `idleMs`: the view does not change as time passes, the panel counts), then
/// `overlaps: [{"taskId","status"}…]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskRow {
    /// The task view.
    #[serde(flatten)]
    pub task: TaskView,
    /// Every overlap this task is concerned by, in creation order.
    pub overlaps: Vec<ScopeOverlap>,
}

/// What the panel shows of a Team (REFERENCE f's wire view, widened with live status and the
/// full task views). Compared by value: a frame is published only when it changes.
///
/// Wire shape: `{"teamId","members":[MemberRow…],"tasks":[TaskRow…],"ledger","failure"?,
/// "writeConflicts"?:[WriteConflict…]}` (`ledger`: `troupe_session::ledger::Ledger` at the
/// built-in prices, folded from the usage of every member's answers so far, a fork's seed not
/// counted); the Lead
/// pseudo-row is first, tasks are the non-deleted ones in creation order (REFERENCE c.11.1:
/// readiness, blockers, owner, write-scope warnings; plus each task's overlaps).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamView {
    /// The Team id (the Lead's session id).
    pub team_id: TeamId,
    /// The Lead pseudo-row, then every member in first-provisioning order.
    pub members: Vec<MemberRow>,
    /// Non-deleted tasks in creation order.
    pub tasks: Vec<TaskRow>,
    /// The Team's ledger (`troupe_session::ledger::Ledger` as JSON).
    pub ledger: Value,
    /// Set once the Lead log cannot be folded (a fold rule broken: `seq N (type): reason`, or a
    /// damaged file): the rest of the view is the last valid state, and stays so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The write radar ([`WriteConflict`], advisory): files two members changed within the
    /// same window of work, folded from the Lead's and the members' logs; omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub write_conflicts: Vec<WriteConflict>,
}

/// Mailbox counts: `{"pending": N, "byMember": {"<member id>": N…}}` (members with pending mail
/// only). Not part of [`TeamView`]'s comparison: mailbox-only events publish nothing
/// (REFERENCE f), so a frame's counts are those at its id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MailCounts {
    /// Queued and not yet delivered messages.
    pub pending: usize,
    /// The same per target member id (the Lead included), non-zero counts only.
    pub by_member: BTreeMap<SessionId, usize>,
}

/// What one member's own session file says about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Activity {
    /// A `turn/start` without its `turn/end`.
    open_turn: bool,
    /// Whether a process holds the file's writer lock; `None` when that cannot be observed.
    resident: Option<bool>,
    /// The host of that process ([`MemberRow::host`]), when known.
    host: Option<String>,
    /// The model of the latest `agent/config` (a resume may record a new one).
    model: Option<String>,
    /// Whether that model is the member's own (a teammate model, `ownModel`); a member
    /// without one runs the session's model, the Lead's.
    own_model: bool,
    /// The time of the last event of its log (epoch ms).
    last_event_ms: Option<u64>,
}

impl Activity {
    fn apply(&mut self, event: &Event) -> bool {
        self.last_event_ms = Some(event.time);
        match event.kind.as_str() {
            event_types::TURN_START => !std::mem::replace(&mut self.open_turn, true),
            event_types::TURN_END => std::mem::replace(&mut self.open_turn, false),
            event_types::AGENT_CONFIG => {
                let Ok(config) = serde_json::from_value::<AgentConfigRecord>(event.data.clone())
                else {
                    return false;
                };
                let model = Some(config.model.to_string());
                let changed = model != self.model || config.own_model != self.own_model;
                self.model = model;
                self.own_model = config.own_model;
                changed
            }
            _ => false,
        }
    }

    /// The live status: running with an open turn (unless no process holds the file: a crash
    /// left the turn open), idle when a process holds the file, else not live.
    fn live(&self) -> Option<LiveAgent> {
        let status = match (self.open_turn, self.resident) {
            (_, Some(false)) | (false, None) => return None,
            (true, _) => LiveStatus::Running,
            (false, Some(true)) => LiveStatus::Idle,
        };
        Some(LiveAgent {
            status,
            model: self.model.clone(),
        })
    }
}

/// The incremental Team projection of one Lead session (REFERENCE f `apply`): Team events of
/// this Team change the state, everything else leaves it as it is; the first error sets
/// `failure` and freezes the projection at its last valid state.
#[derive(Debug)]
pub struct TeamProjection {
    state: TeamState,
    failure: Option<String>,
    lead: Activity,
    members: HashMap<SessionId, Activity>,
    /// Set when something the view shows may have changed since the last [`Self::take_view`].
    dirty: bool,
    last_lead_seq: Option<Seq>,
    /// Per session (the Lead's included): what the ledger folds of its log, in order.
    usage: HashMap<SessionId, Vec<UsageMark>>,
    /// Per session: how many of its first events are a fork's seed (not its own).
    seeds: HashMap<SessionId, u64>,
    /// "Now" for stalled owners (epoch ms), as the hub last said ([`Self::set_now`]).
    now_ms: u64,
    stall_after: StallAfter,
    /// The write radar: task windows from the Lead log, file changes from every log.
    radar: WriteRadar,
    /// The Lead's own file changes.
    lead_changes: ChangeFold,
    /// Each member's file changes (created at its first event, with its seeded prefix's
    /// length from [`Self::set_seed_len`]).
    member_changes: HashMap<SessionId, ChangeFold>,
}

/// One ledger-relevant event of a member's log: its model changed (`agent/config`), or it
/// recorded an answer with this usage (`assistant/message`).
#[derive(Debug, Clone)]
struct UsageMark {
    seq: u64,
    model: Option<String>,
    usage: Option<Usage>,
}

impl UsageMark {
    fn of(event: &Event) -> Option<Self> {
        match event.kind.as_str() {
            event_types::AGENT_CONFIG => {
                let config: AgentConfigRecord = serde_json::from_value(event.data.clone()).ok()?;
                Some(Self {
                    seq: event.seq.0,
                    model: Some(price_key(&config.model)),
                    usage: None,
                })
            }
            event_types::ASSISTANT_MESSAGE => Some(Self {
                seq: event.seq.0,
                model: None,
                usage: event
                    .data
                    .get("usage")
                    .and_then(|u| serde_json::from_value(u.clone()).ok()),
            }),
            _ => None,
        }
    }
}

impl TeamProjection {
    /// The empty projection of the Team whose Lead is `lead` (a session's projection selects
    /// that session's own Team, REFERENCE f).
    pub fn new(lead: SessionId) -> Self {
        Self {
            state: TeamState::new(TeamId::new(lead)),
            failure: None,
            lead: Activity::default(),
            members: HashMap::new(),
            dirty: true,
            last_lead_seq: None,
            usage: HashMap::new(),
            seeds: HashMap::new(),
            now_ms: 0,
            stall_after: StallAfter::default(),
            radar: WriteRadar::new(),
            lead_changes: ChangeFold::new(0),
            member_changes: HashMap::new(),
        }
    }

    /// The projection with stall threshold `after` (default 10 minutes).
    #[must_use]
    pub fn with_stall_after(mut self, after: StallAfter) -> Self {
        self.stall_after = after;
        self
    }

    /// Sets "now" (epoch ms) for stalled owners. Time alone can make a resident owner's task
    /// stalled, so the view is marked as possibly changed when some task in progress has a
    /// resident owner (the hub publishes only a view that really differs).
    pub fn set_now(&mut self, now_ms: u64) {
        if self.now_ms == now_ms {
            return;
        }
        self.now_ms = now_ms;
        let timed = self.state.in_progress_tasks().any(|task| {
            task.owner_id
                .as_ref()
                .and_then(|owner| self.members.get(owner))
                .is_some_and(|a| a.live().is_some())
        });
        self.dirty |= timed;
    }

    /// The stall check of the current state: residency as the status shows it (a live member
    /// is resident), each member's last event from its own file.
    fn stall_check(&self) -> StallCheck {
        let owners = self
            .state
            .stall_candidates()
            .into_iter()
            .map(|id| {
                let activity = self.members.get(&id);
                let owner = OwnerActivity {
                    resident: activity.and_then(Activity::live).is_some(),
                    last_event_ms: activity.and_then(|a| a.last_event_ms),
                };
                (id, owner)
            })
            .collect();
        StallCheck {
            now_ms: self.now_ms,
            after: self.stall_after,
            owners,
        }
    }

    /// Whether [`Self::set_seed_len`] was called for `member`.
    pub fn knows_seed_len(&self, member: &SessionId) -> bool {
        self.seeds.contains_key(member)
    }

    /// Feeds the file changes `event` of `member`'s log shows into the radar.
    fn changes(
        radar: &mut WriteRadar,
        fold: &mut ChangeFold,
        member: &SessionId,
        event: &Event,
    ) -> bool {
        let changes = fold.apply(event);
        for change in &changes {
            match change.since {
                None => radar.exact(member, &change.path, event.time),
                Some(since) => radar.scanned(member, &change.path, since, event.time),
            }
        }
        !changes.is_empty()
    }

    /// The folded Team state (the last valid one once [`Self::failure`] is set).
    pub fn state(&self) -> &TeamState {
        &self.state
    }

    /// Why the projection stopped, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The seq of the last Lead event folded.
    pub fn last_lead_seq(&self) -> Option<Seq> {
        self.last_lead_seq
    }

    /// Folds one event of the Lead log.
    pub fn apply_lead(&mut self, event: &Event) {
        if self.failure.is_some() {
            return;
        }
        self.last_lead_seq = Some(event.seq);
        self.dirty |= self.lead.apply(event);
        let lead = self.state.id().lead_id().clone();
        self.note_usage(&lead, event);
        self.dirty |= Self::changes(&mut self.radar, &mut self.lead_changes, &lead, event);
        if !event_types::is_team(&event.kind) {
            return;
        }
        match self.state.apply(event) {
            Ok(()) => {
                if event.kind == event_types::TEAM_TASK
                    && let Ok(task) =
                        serde_json::from_value::<TaskSnapshot>(event.data["task"].clone())
                {
                    self.radar.task(event.time, &task);
                }
                // Mailbox records leave the roster and the board as they were.
                if matches!(
                    event.kind.as_str(),
                    event_types::TEAM_MEMBER | event_types::TEAM_TASK
                ) {
                    self.dirty = true;
                }
            }
            Err(e) => self.fail(format!("seq {} ({}): {e}", event.seq, event.kind)),
        }
    }

    /// Folds one event of member `member`'s own session file (turns, model and the files it
    /// changed).
    pub fn apply_member(&mut self, member: &SessionId, event: &Event) {
        if self.failure.is_some() {
            return;
        }
        let activity = self.members.entry(member.clone()).or_default();
        self.dirty |= activity.apply(event);
        self.note_usage(member, event);
        let seed_len = self.seeds.get(member).copied().unwrap_or(0);
        let fold = self
            .member_changes
            .entry(member.clone())
            .or_insert_with(|| ChangeFold::new(seed_len));
        self.dirty |= Self::changes(&mut self.radar, fold, member, event);
    }

    /// Sets how many of the first events of session `id` are a fork's seed (its header's
    /// `seedLength`): the ledger does not count them, and they are the Lead's history, not the
    /// member's file changes (for the write radar, set it before the member's first event).
    pub fn set_seed_len(&mut self, id: &SessionId, seed_len: u64) {
        if self.seeds.insert(id.clone(), seed_len) != Some(seed_len) {
            self.dirty = true;
        }
    }

    fn note_usage(&mut self, id: &SessionId, event: &Event) {
        if let Some(mark) = UsageMark::of(event) {
            self.dirty |= mark.model.is_none();
            self.usage.entry(id.clone()).or_default().push(mark);
        }
    }

    /// The ledger of `members` (name, session) from the marks seen so far.
    fn ledger(&self, members: &[(String, SessionId)]) -> Value {
        let folds: Vec<(String, SessionId, SessionUsage)> = members
            .iter()
            .map(|(name, id)| {
                let seed = self.seeds.get(id).copied().unwrap_or(0);
                let mut fold = SessionUsage::new(seed);
                let mut model: Option<String> = None;
                for mark in self.usage.get(id).into_iter().flatten() {
                    if mark.seq < seed {
                        continue;
                    }
                    match &mark.model {
                        Some(m) => model = Some(m.clone()),
                        None => fold.record(model.as_deref(), mark.usage.as_ref()),
                    }
                }
                (name.clone(), id.clone(), fold)
            })
            .collect();
        let ledger = Ledger::fold(
            folds
                .iter()
                .map(|(name, id, fold)| (name.clone(), id.clone(), fold.by_model())),
            &Prices::builtin(),
        );
        serde_json::to_value(&ledger).unwrap_or(Value::Null)
    }

    /// Records whether a process holds the session file of `id` (the Lead or a member).
    ///
    /// Unlike the log's events, this is still recorded after a failure: a damaged log frozen
    /// inside an open turn is `running` only while a process holds the file, so a finished or
    /// crashed session with a damaged log shows its members `inactive`, not `running`.
    pub fn set_resident(&mut self, id: &SessionId, resident: Option<bool>) {
        let activity = if id == self.state.id().lead_id() {
            &mut self.lead
        } else {
            self.members.entry(id.clone()).or_default()
        };
        if activity.resident != resident {
            activity.resident = resident;
            self.dirty = true;
        }
    }

    /// Records the host of the process holding the session of `id` (the Lead or a member;
    /// [`MemberRow::host`]), `None` when none holds it or it is not known. Recorded after a
    /// failure too, like residency.
    pub fn set_host(&mut self, id: &SessionId, host: Option<String>) {
        let activity = if id == self.state.id().lead_id() {
            &mut self.lead
        } else {
            self.members.entry(id.clone()).or_default()
        };
        if activity.host != host {
            activity.host = host;
            self.dirty = true;
        }
    }

    /// Stops the projection with `message` (a damaged or unreadable Lead log); terminal.
    pub fn fail(&mut self, message: String) {
        if self.failure.is_none() {
            self.failure = Some(message);
            self.dirty = true;
        }
    }

    /// The current view, when something it shows may have changed since the last call
    /// (`None` otherwise: mailbox-only and other events leave it as it was).
    pub fn take_view(&mut self) -> Option<TeamView> {
        if !std::mem::take(&mut self.dirty) {
            return None;
        }
        Some(self.view())
    }

    /// The current view.
    pub fn view(&self) -> TeamView {
        let team = self.state.id();
        let lead_model = self.lead.model.as_deref();
        let lead_status = self
            .lead
            .live()
            .map_or(MemberStatus::Inactive, |l| l.status.into());
        let mut members = Vec::with_capacity(self.state.members().len() + 1);
        let lead_host = self.lead.live().and(self.lead.host.clone());
        members.push(MemberRow {
            member: MemberView::lead(team, lead_status, lead_model),
            phase: MemberPhase::Active,
            host: lead_host,
        });
        for member in self.state.members() {
            let activity = self.members.get(&member.id);
            // Its own model, else the session's: the Lead's (which a resume's `--model`
            // changes for every member without one of its own).
            let model = activity
                .filter(|a| a.own_model)
                .and_then(|a| a.model.as_deref())
                .or(lead_model)
                .or_else(|| activity.and_then(|a| a.model.as_deref()));
            let live = activity.and_then(Activity::live).map(|mut live| {
                live.model = model.map(str::to_owned);
                live
            });
            let member_view = MemberView::teammate(member, live.as_ref(), model);
            let host = matches!(
                member_view.status,
                MemberStatus::Running | MemberStatus::Idle
            )
            .then(|| activity.and_then(|a| a.host.clone()))
            .flatten();
            members.push(MemberRow {
                member: member_view,
                phase: member.phase,
                host,
            });
        }
        let named: Vec<(String, SessionId)> = members
            .iter()
            .map(|row| (row.member.name.clone(), row.member.id.clone()))
            .collect();
        let check = self
            .state
            .in_progress_tasks()
            .next()
            .map(|_| self.stall_check());
        TeamView {
            team_id: team.clone(),
            ledger: self.ledger(&named),
            members,
            tasks: self
                .state
                .live_tasks()
                .map(|task| {
                    let mut view = self.state.task_view_checked(task, check.as_ref());
                    if let Some(stall) = &mut view.stalled {
                        stall.idle_ms = None;
                    }
                    TaskRow {
                        task: view,
                        overlaps: self.state.scope_overlaps(task),
                    }
                })
                .collect(),
            failure: self.failure.clone(),
            write_conflicts: self.radar.conflicts(&self.state),
        }
    }

    /// The mailbox counts now.
    pub fn mail(&self) -> MailCounts {
        let mut counts = MailCounts::default();
        for message in self.state.pending_messages() {
            counts.pending += 1;
            *counts
                .by_member
                .entry(message.target_id.clone())
                .or_default() += 1;
        }
        counts
    }
}
