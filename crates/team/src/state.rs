//! The folded Team state and its incremental fold (REFERENCE c.4) and invariant companion
//! (REFERENCE c.5).

use std::collections::BTreeSet;

use foldhash::{HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;
use troupe_protocol::{Event, MessageId, SessionId, event_types};

use crate::error::{FoldError, InvariantError, ReplayError};
use crate::graph::{GraphViolation, GraphViolationKind};
use crate::ids::{LEAD_NAME, MAX_SAFE_INTEGER, MemberName, Revision, TaskId, TeamId, task_number};
use crate::index::IdIndex;
use crate::line::{LineRecord, StrList, TaskText, Text, decode_line};
use crate::record::{
    Decoded, MemberPhase, MemberSnapshot, MessageSnapshot, TaskSnapshot, TaskStatus, TeamEvent,
    TeamRecord, decode,
};

/// A Team role (REFERENCE c.2). Wire: `"lead"` | `"teammate"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The Lead: the root session whose log holds the Team.
    Lead,
    /// A roster member in phase `provisioning` or `active`.
    Teammate,
}

/// A resolved Team member acting as the author of a command (the pure half of REFERENCE
/// c.2's `membership`). Built by [`Caller::lead`] or [`TeamState::caller`]; the Team id is
/// never taken from model input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    id: SessionId,
    role: Role,
    name: String,
}

impl Caller {
    /// The Lead of `team` (id = the Team id, name `lead`).
    pub fn lead(team: &TeamId) -> Self {
        Self {
            id: team.lead_id().clone(),
            role: Role::Lead,
            name: LEAD_NAME.to_owned(),
        }
    }

    /// The caller's SessionId.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Lead or teammate.
    pub fn role(&self) -> Role {
        self.role
    }

    /// `lead` or the teammate's member name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the caller is the Lead.
    pub fn is_lead(&self) -> bool {
        self.role == Role::Lead
    }
}

/// The Team state folded from a Lead log (REFERENCE c.4): roster, task board (tombstones
/// included) and mailbox, plus the indexes that keep every [`TeamState::apply`] cheap.
///
/// Build it with [`TeamState::new`] and feed it the Lead's events one at a time with
/// [`TeamState::apply`], or all at once with [`TeamState::fold`]. Applying events one by one
/// gives exactly the state a full fold of the same events gives (`PartialEq` compares the
/// folded data, not the indexes). A refused event leaves the state unchanged.
///
/// Cost per event: O(payload size) decoding plus O(blockers · log n) index upkeep; a
/// dependency-cycle search runs only when a task that others depend on changes its own
/// blockers. No step depends on the number of tasks ever created.
#[derive(Debug, Clone)]
pub struct TeamState {
    id: TeamId,
    members: Vec<MemberSnapshot>,
    member_index: HashMap<SessionId, usize>,
    member_by_name: HashMap<MemberName, usize>,
    tasks: Vec<TaskSnapshot>,
    /// Task id → position in `tasks`.
    task_index: IdIndex,
    /// Non-deleted tasks, by creation index.
    live_tasks: BTreeSet<usize>,
    /// `in_progress` tasks, by creation index.
    in_progress: BTreeSet<usize>,
    /// For each task, the non-deleted tasks that list it in `blockedBy` (creation indexes).
    dependents: HashMap<usize, BTreeSet<usize>>,
    messages: Vec<MessageSnapshot>,
    delivered: Vec<bool>,
    /// Message id → position in `messages`.
    message_index: IdIndex,
    /// Queued but not delivered, by queue index.
    pending: BTreeSet<usize>,
    pending_by_target: HashMap<SessionId, usize>,
    next_task_number: u64,
    /// The task (position in `tasks`) the last record given to [`TeamState::apply`],
    /// [`TeamState::apply_line`] or [`Staged::apply`] committed ([`TeamState::last_task`]).
    last_task: Option<usize>,
}

impl PartialEq for TeamState {
    /// Compares the folded data of REFERENCE c.4 (id, members, tasks, messages, delivered,
    /// `nextTaskNumber`); the indexes are functions of it.
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.members == other.members
            && self.tasks == other.tasks
            && self.messages == other.messages
            && self.delivered == other.delivered
            && self.next_task_number == other.next_task_number
    }
}

/// A validated event, ready to commit.
enum Prepared {
    Skip,
    Member {
        index: Option<usize>,
        snapshot: MemberSnapshot,
    },
    Task {
        index: Option<usize>,
        snapshot: TaskSnapshot,
    },
    /// A new snapshot of the existing task `index`, as the changes to its current one.
    TaskUpdate {
        index: usize,
        update: TaskUpdate,
    },
    Queued(MessageSnapshot),
    Delivered(usize),
}

/// An event [`TeamState::stage`] checked, holding the state until it is applied. The state
/// cannot change in between: the `Staged` borrows it.
#[must_use = "a staged event changes nothing until it is applied"]
pub struct Staged<'a> {
    state: &'a mut TeamState,
    prepared: Prepared,
}

impl Staged<'_> {
    /// Applies the checked event (call it once the event is durable).
    pub fn apply(self) {
        self.state.commit(self.prepared);
    }
}

impl std::fmt::Debug for Staged<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged").finish_non_exhaustive()
    }
}

/// A task's next snapshot as changes to its current one (the fast path's way of keeping the
/// strings that did not change). `None` fields are unchanged.
struct TaskUpdate {
    revision: Revision,
    status: TaskStatus,
    subject: Option<String>,
    description: Option<String>,
    owner_id: Option<Option<SessionId>>,
    blocked_by: Option<Vec<TaskId>>,
    write_scopes: Option<Vec<String>>,
}

/// What [`TeamState::apply_line`] did with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineApplied {
    /// The line was applied (or, not being a valid record of this Team, skipped as
    /// [`TeamState::apply`] skips it). The state is what `apply` of the parsed event gives.
    Applied,
    /// The fast path cannot decide: the state is unchanged; apply the line's parsed
    /// [`Event`] with [`TeamState::apply`] (which also gives the error, if any).
    NeedEvent,
}

/// A Team fold of a streamed Lead log, for a selective journal scan
/// (`troupe_journal::scan_selected_each` or `Journal::read_selected_each`, with
/// [`StreamFold::reads`] as the selection): hand it every selected line with
/// [`StreamFold::line`] (answering the scan with its result) and every selected parsed event
/// with [`StreamFold::event`]. It keeps the first refusal and ignores everything after it.
///
/// The result is [`TeamState::fold`] of the log's events; the cost per Team event does not
/// depend on the log's length (see [`TeamState`]).
#[derive(Debug, Clone)]
pub struct StreamFold {
    state: TeamState,
    refused: Option<ReplayError>,
}

impl StreamFold {
    /// An empty fold of the Team led by `id`.
    pub fn new(id: TeamId) -> Self {
        Self {
            state: TeamState::new(id),
            refused: None,
        }
    }

    /// The event types the fold reads: the four `team/…` types.
    pub fn reads(kind: &str) -> bool {
        event_types::is_team(kind)
    }

    /// Applies an unparsed line of type `kind` ([`TeamState::apply_line`]): `true`
    /// when done (applied, skipped, or ignored after a refusal), `false` when the scan must
    /// hand out the parsed event instead (then pass it to [`StreamFold::event`]).
    pub fn line(&mut self, kind: &str, text: &str) -> bool {
        self.refused.is_some() || self.state.apply_line(kind, text) == LineApplied::Applied
    }

    /// Applies a parsed event ([`TeamState::apply`]); the first refusal is kept. Returns
    /// whether the event was applied (`false` after a refusal).
    pub fn event(&mut self, event: &Event) -> bool {
        if self.refused.is_some() {
            return false;
        }
        match self.state.apply(event) {
            Ok(()) => true,
            Err(source) => {
                self.refused = Some(ReplayError {
                    seq: event.seq,
                    event_type: event.kind.clone(),
                    source,
                });
                false
            }
        }
    }

    /// Whether an event was refused (everything after it is ignored).
    pub fn is_refused(&self) -> bool {
        self.refused.is_some()
    }

    /// The state folded so far (up to the first refusal).
    pub fn state(&self) -> &TeamState {
        &self.state
    }

    /// The folded state, or the first refusal.
    ///
    /// # Errors
    /// [`ReplayError`] (`TEAM_LOG_INVALID`) naming the seq and type of the first event the
    /// fold refused.
    pub fn finish(self) -> Result<TeamState, ReplayError> {
        match self.refused {
            None => Ok(self.state),
            Some(e) => Err(e),
        }
    }
}

impl TeamState {
    /// The empty state of the Team led by `id` (`nextTaskNumber` = 1).
    pub fn new(id: TeamId) -> Self {
        Self {
            id,
            members: Vec::new(),
            member_index: HashMap::default(),
            member_by_name: HashMap::default(),
            tasks: Vec::new(),
            task_index: IdIndex::default(),
            live_tasks: BTreeSet::new(),
            in_progress: BTreeSet::new(),
            dependents: HashMap::default(),
            messages: Vec::new(),
            delivered: Vec::new(),
            message_index: IdIndex::default(),
            pending: BTreeSet::new(),
            pending_by_target: HashMap::default(),
            next_task_number: 1,
            last_task: None,
        }
    }

    /// Folds `events` (a Lead log, normally from seq 0) for the Team `id` (REFERENCE c.4).
    ///
    /// # Errors
    /// [`ReplayError`] (`TEAM_LOG_INVALID`) naming the seq and type of the first event the
    /// fold refuses.
    pub fn fold<'a>(
        id: TeamId,
        events: impl IntoIterator<Item = &'a Event>,
    ) -> Result<Self, ReplayError> {
        let mut state = Self::new(id);
        for event in events {
            state.apply(event).map_err(|source| ReplayError {
                seq: event.seq,
                event_type: event.kind.clone(),
                source,
            })?;
        }
        Ok(state)
    }

    /// Applies one stored event (REFERENCE c.4): non-Team types, records of other Teams and
    /// non-v1 records of other Teams are skipped (v1 records of other Teams are still
    /// validated); records of this Team are checked against every fold rule and stored.
    ///
    /// # Errors
    /// [`FoldError`] for the first broken rule; the state is then unchanged.
    pub fn apply(&mut self, event: &Event) -> Result<(), FoldError> {
        self.apply_data(&event.kind, &event.data)
    }

    /// [`TeamState::apply`] for a bare type and payload.
    ///
    /// # Errors
    /// As [`TeamState::apply`].
    pub fn apply_data(&mut self, kind: &str, data: &Value) -> Result<(), FoldError> {
        self.last_task = None;
        let prepared = self.prepare(kind, data)?;
        self.commit(prepared);
        Ok(())
    }

    /// [`TeamState::apply`] for an unparsed Lead-log line of type `kind` (a whole line, e.g.
    /// a `troupe_journal::EventLine`), decoding envelope and payload in one pass: a non-Team
    /// type is [`LineApplied::Applied`] at once (nothing to do); a `team/…` line that is a
    /// valid event holding a valid `version: 1` record which this state accepts is applied with
    /// exactly the result `apply` of the parsed event gives; for anything else (another
    /// version, any refusal, a line that is not a valid event) the state is unchanged and the
    /// answer is [`LineApplied::NeedEvent`], so that every refusal keeps its one definition in
    /// [`TeamState::apply`].
    ///
    /// Strings that did not change are not copied again (a task update keeps its unchanged
    /// subject, description, owner, blockers and scopes).
    pub fn apply_line(&mut self, kind: &str, line: &str) -> LineApplied {
        self.last_task = None;
        if !event_types::is_team(kind) {
            return LineApplied::Applied;
        }
        let Some((team_id, record)) = decode_line(kind, line) else {
            return LineApplied::NeedEvent;
        };
        if team_id.0 != self.id.as_str() {
            // Another Team's record: skipped, as `apply` skips it, once its decoding rules
            // (which `apply` checks for every v1 record) are checked too.
            return if record.is_valid() {
                LineApplied::Applied
            } else {
                LineApplied::NeedEvent
            };
        }
        let prepared = match record {
            LineRecord::Member(snapshot) => self.prepare_member(snapshot).ok(),
            LineRecord::Task(task) => self.prepare_task_text(task),
            LineRecord::MessageQueued(snapshot) => self
                .prepare_record(TeamRecord::MessageQueued(snapshot))
                .ok(),
            LineRecord::MessageDelivered {
                message_id,
                target_id,
            } => self.prepare_delivered_text(&message_id, &target_id),
        };
        match prepared {
            Some(prepared) => {
                self.commit(prepared);
                LineApplied::Applied
            }
            None => LineApplied::NeedEvent,
        }
    }

    /// The invariant companion (REFERENCE c.5): whether appending an event of type `kind` with
    /// payload `data` to a log whose fold is `self` keeps the fold valid. Non-Team types always
    /// pass. Never changes the state.
    ///
    /// # Errors
    /// [`InvariantError`] (`INVARIANT`) wrapping the fold rule the candidate breaks.
    pub fn check_candidate(&self, kind: &str, data: &Value) -> Result<(), InvariantError> {
        self.prepare(kind, data)
            .map(drop)
            .map_err(|source| InvariantError {
                event_type: kind.to_owned(),
                source,
            })
    }

    /// [`TeamState::check_candidate`] for an event built by one of this crate's decisions.
    ///
    /// # Errors
    /// As [`TeamState::check_candidate`].
    pub fn check_event(&self, event: &TeamEvent) -> Result<(), InvariantError> {
        self.check_candidate(event.kind(), &event.to_data())
    }

    /// Checks `event` once — the invariant companion of REFERENCE c.5, exactly
    /// [`TeamState::check_event`] — and holds the state until the checked event is applied
    /// with [`Staged::apply`] (the commit protocol: decide → stage → append → flush → apply).
    /// The event is checked in its typed form: no `Value` is built or decoded, and applying it
    /// gives exactly the state [`TeamState::apply`] of the stored event gives. Dropping the
    /// [`Staged`] (the append or the flush failed) leaves the state unchanged.
    ///
    /// # Errors
    /// [`InvariantError`] (`INVARIANT`) wrapping the fold rule the event breaks.
    pub fn stage(&mut self, event: &TeamEvent) -> Result<Staged<'_>, InvariantError> {
        let prepared = if event.team_id == self.id {
            self.prepare_record(event.record.clone())
                .map_err(|source| InvariantError {
                    event_type: event.kind().to_owned(),
                    source,
                })?
        } else {
            // Another Team's record: skipped, as `apply` skips it.
            Prepared::Skip
        };
        Ok(Staged {
            state: self,
            prepared,
        })
    }

    fn prepare(&self, kind: &str, data: &Value) -> Result<Prepared, FoldError> {
        match decode(kind, data)? {
            Decoded::NotTeam => Ok(Prepared::Skip),
            Decoded::OtherVersion { team_id, version } => {
                if team_id == self.id.as_str() {
                    Err(FoldError::UnsupportedVersion {
                        event_type: kind.to_owned(),
                        version,
                    })
                } else {
                    Ok(Prepared::Skip)
                }
            }
            Decoded::Record { team_id, record } => {
                if team_id == self.id.as_str() {
                    self.prepare_record(record)
                } else {
                    Ok(Prepared::Skip)
                }
            }
        }
    }

    fn prepare_record(&self, record: TeamRecord) -> Result<Prepared, FoldError> {
        match record {
            TeamRecord::Member(snapshot) => self.prepare_member(snapshot),
            TeamRecord::Task(snapshot) => self.prepare_task(snapshot),
            TeamRecord::MessageQueued(snapshot) => {
                if self.message_position(snapshot.id.as_str()).is_some() {
                    return Err(FoldError::MessageQueuedTwice {
                        id: snapshot.id.to_string(),
                    });
                }
                Ok(Prepared::Queued(snapshot))
            }
            TeamRecord::MessageDelivered {
                message_id,
                target_id,
            } => {
                let Some(index) = self.message_position(message_id.as_str()) else {
                    return Err(FoldError::MessageDeliveredBeforeQueueing {
                        id: message_id.to_string(),
                    });
                };
                let queued = &self.messages[index];
                if queued.target_id != target_id {
                    return Err(FoldError::MessageTargetChanged {
                        id: message_id.to_string(),
                        queued: queued.target_id.to_string(),
                        delivered: target_id.to_string(),
                    });
                }
                if self.delivered[index] {
                    return Err(FoldError::MessageDeliveredTwice {
                        id: message_id.to_string(),
                    });
                }
                Ok(Prepared::Delivered(index))
            }
        }
    }

    fn prepare_member(&self, snapshot: MemberSnapshot) -> Result<Prepared, FoldError> {
        if let Some(&owner) = self.member_by_name.get(&snapshot.name) {
            let owner = &self.members[owner];
            if owner.id != snapshot.id {
                return Err(FoldError::MemberNameReused {
                    name: snapshot.name.to_string(),
                    id: snapshot.id.to_string(),
                    owner: owner.id.to_string(),
                });
            }
        }
        let index = self.member_index.get(&snapshot.id).copied();
        match index {
            None => {
                if snapshot.phase != MemberPhase::Provisioning {
                    return Err(FoldError::MemberMustBeginProvisioning {
                        id: snapshot.id.to_string(),
                        phase: snapshot.phase.to_string(),
                    });
                }
            }
            Some(prior) => {
                let prior = &self.members[prior];
                if prior.name != snapshot.name
                    || prior.provider != snapshot.provider
                    || prior.context != snapshot.context
                {
                    return Err(FoldError::MemberIdentityChanged {
                        id: snapshot.id.to_string(),
                    });
                }
                if prior.phase != MemberPhase::Provisioning
                    || snapshot.phase == MemberPhase::Provisioning
                {
                    return Err(FoldError::MemberInvalidTransition {
                        id: snapshot.id.to_string(),
                        from: prior.phase.to_string(),
                        to: snapshot.phase.to_string(),
                    });
                }
            }
        }
        Ok(Prepared::Member { index, snapshot })
    }

    fn prepare_task(&self, snapshot: TaskSnapshot) -> Result<Prepared, FoldError> {
        let index = self.task_position(snapshot.id.as_str());
        match index {
            None if snapshot.revision.get() != 1 => {
                return Err(FoldError::TaskMustBeginAtRevisionOne {
                    id: snapshot.id.to_string(),
                    revision: snapshot.revision.get(),
                });
            }
            Some(prior) => {
                let current = self.tasks[prior].revision.get();
                if snapshot.revision.get() != current + 1 {
                    return Err(FoldError::TaskRevisionNotContiguous {
                        id: snapshot.id.to_string(),
                        current,
                        revision: snapshot.revision.get(),
                    });
                }
            }
            None => {}
        }
        self.check_graph(index, &snapshot)
            .map_err(FoldError::TaskGraph)?;
        Ok(Prepared::Task { index, snapshot })
    }

    /// [`TeamState::prepare_task`] for a task snapshot still in its line's text: the same
    /// checks (first the id, revision and owner rules of [`TaskSnapshot`]'s decoding), `None`
    /// on any refusal. An update of an existing task copies only the strings that changed.
    fn prepare_task_text(&self, task: TaskText<'_>) -> Option<Prepared> {
        let id = task.id.as_ref();
        let revision = Revision::new(task.revision)?;
        let index = self.task_position(id);
        let current = index.map(|i| &self.tasks[i]);
        let expected = current.map_or(1, |c| c.revision.get() + 1);
        if revision.get() != expected {
            return None;
        }
        // Values equal to the current snapshot's are valid and need no copy.
        let same_owner = match (current.and_then(|c| c.owner_id.as_ref()), &task.owner_id) {
            (None, None) => true,
            (Some(a), Some(b)) => a.as_str() == b.as_ref(),
            _ => false,
        };
        let same_blockers = current.is_some_and(|c| same_list(&c.blocked_by, task.blocked_by));
        let same_scopes = current.is_some_and(|c| same_list(&c.write_scopes, task.write_scopes));
        let owner_id = if same_owner {
            None
        } else {
            Some(match task.owner_id {
                Some(text) => Some(SessionId::new(text.into_owned()).ok()?),
                None => None,
            })
        };
        let blocked_by = if same_blockers {
            None
        } else {
            let ids: Option<Vec<TaskId>> = task
                .blocked_by
                .iter()
                .map(|t| TaskId::parse(t.into_owned()).ok())
                .collect();
            Some(ids?)
        };
        match (index, current) {
            (Some(index), Some(current)) => {
                let blockers = blocked_by.as_deref().unwrap_or(&current.blocked_by);
                self.check_graph_of(Some(index), id, task.status, blockers)
                    .ok()?;
                let update = TaskUpdate {
                    revision,
                    status: task.status,
                    subject: (current.subject != task.subject.as_ref())
                        .then(|| task.subject.into_owned()),
                    description: (current.description != task.description.as_ref())
                        .then(|| task.description.into_owned()),
                    owner_id,
                    blocked_by,
                    write_scopes: (!same_scopes)
                        .then(|| task.write_scopes.iter().map(Text::into_owned).collect()),
                };
                Some(Prepared::TaskUpdate { index, update })
            }
            _ => {
                let snapshot = TaskSnapshot {
                    id: TaskId::parse(task.id.into_owned()).ok()?,
                    revision,
                    subject: task.subject.into_owned(),
                    description: task.description.into_owned(),
                    status: task.status,
                    owner_id: owner_id.flatten(),
                    blocked_by: blocked_by.unwrap_or_default(),
                    write_scopes: task.write_scopes.iter().map(Text::into_owned).collect(),
                };
                self.prepare_task(snapshot).ok()
            }
        }
    }

    /// The `team/message/delivered` rules of [`TeamState::prepare_record`] for ids still in
    /// their line's text; `None` on any refusal. (Both ids equal stored, valid ids on success,
    /// so they are valid too.)
    fn prepare_delivered_text(
        &self,
        message_id: &Text<'_>,
        target_id: &Text<'_>,
    ) -> Option<Prepared> {
        let index = self.pending_position(message_id.as_ref())?;
        let accepted =
            self.messages[index].target_id.as_str() == target_id.as_ref() && !self.delivered[index];
        accepted.then_some(Prepared::Delivered(index))
    }

    /// The whole-graph check of REFERENCE c.11.5 on "all tasks with `candidate` replaced",
    /// done incrementally: the committed graph is always valid, so only the candidate's own
    /// edges, the edges into it (when it becomes deleted) and cycles through it can break.
    /// Reports the same violation the whole-graph check reports first.
    pub(crate) fn check_graph(
        &self,
        index: Option<usize>,
        candidate: &TaskSnapshot,
    ) -> Result<(), GraphViolation> {
        self.check_graph_of(
            index,
            candidate.id.as_str(),
            candidate.status,
            &candidate.blocked_by,
        )
    }

    /// [`TeamState::check_graph`] for a candidate given by its id, status and blockers.
    fn check_graph_of<B: AsRef<str>>(
        &self,
        index: Option<usize>,
        id: &str,
        status: TaskStatus,
        blocked_by: &[B],
    ) -> Result<(), GraphViolation> {
        if status == TaskStatus::Deleted {
            // A tombstone has no edges of its own; any non-deleted task still blocked by it
            // now has a missing blocker. The first such task in creation order is reported.
            if let Some(first) = index
                .and_then(|i| self.dependents.get(&i))
                .and_then(|dependents| dependents.first())
            {
                return Err(GraphViolation {
                    kind: GraphViolationKind::MissingBlocker,
                    task: self.tasks[*first].id.to_string(),
                    blocker: id.to_owned(),
                });
            }
            return Ok(());
        }
        let violation = |kind, blocker: &str| GraphViolation {
            kind,
            task: id.to_owned(),
            blocker: blocker.to_owned(),
        };
        // Long lists use a set so a hostile log cannot make the duplicate check quadratic.
        let mut seen: HashSet<&str> = HashSet::default();
        let use_set = blocked_by.len() > 8;
        for (position, blocker) in blocked_by.iter().enumerate() {
            let blocker = blocker.as_ref();
            if blocker == id {
                return Err(violation(GraphViolationKind::SelfBlock, blocker));
            }
            let repeated = if use_set {
                !seen.insert(blocker)
            } else {
                blocked_by[..position].iter().any(|b| b.as_ref() == blocker)
            };
            if repeated {
                return Err(violation(GraphViolationKind::DuplicateBlocker, blocker));
            }
            let live = self
                .task_position(blocker)
                .is_some_and(|i| self.tasks[i].status != TaskStatus::Deleted);
            if !live {
                return Err(violation(GraphViolationKind::MissingBlocker, blocker));
            }
        }
        // A new cycle must run through the candidate, which needs a non-deleted dependent and
        // a change of the candidate's own edges.
        let Some(index) = index else {
            return Ok(());
        };
        let has_dependents = self
            .dependents
            .get(&index)
            .is_some_and(|dependents| !dependents.is_empty());
        let prior = &self.tasks[index];
        let edges_changed =
            prior.status == TaskStatus::Deleted || !same_ids(&prior.blocked_by, blocked_by);
        if !has_dependents || !edges_changed {
            return Ok(());
        }
        for blocker in blocked_by {
            let blocker = blocker.as_ref();
            if let Some(start) = self.task_position(blocker)
                && self.reaches(start, index)
            {
                return Err(violation(GraphViolationKind::Cycle, blocker));
            }
        }
        Ok(())
    }

    /// Whether following committed `blockedBy` edges from task `from` reaches task `target`.
    fn reaches(&self, from: usize, target: usize) -> bool {
        let mut stack = vec![from];
        let mut seen = HashSet::default();
        while let Some(node) = stack.pop() {
            if node == target {
                return true;
            }
            if !seen.insert(node) {
                continue;
            }
            let task = &self.tasks[node];
            if task.status == TaskStatus::Deleted {
                continue;
            }
            stack.extend(
                task.blocked_by
                    .iter()
                    .filter_map(|blocker| self.task_position(blocker.as_str())),
            );
        }
        false
    }

    fn commit(&mut self, prepared: Prepared) {
        self.last_task = match &prepared {
            Prepared::Task { index, .. } => Some(index.unwrap_or(self.tasks.len())),
            Prepared::TaskUpdate { index, .. } => Some(*index),
            _ => None,
        };
        match prepared {
            Prepared::Skip => {}
            Prepared::Member { index, snapshot } => match index {
                Some(index) => self.members[index] = snapshot,
                None => {
                    let index = self.members.len();
                    self.member_index.insert(snapshot.id.clone(), index);
                    self.member_by_name.insert(snapshot.name.clone(), index);
                    self.members.push(snapshot);
                }
            },
            Prepared::Task { index, snapshot } => self.commit_task(index, snapshot),
            Prepared::TaskUpdate { index, update } => self.commit_task_update(index, update),
            Prepared::Queued(snapshot) => {
                let index = self.messages.len();
                self.message_index.insert(snapshot.id.as_str(), index);
                self.pending.insert(index);
                match self.pending_by_target.get_mut(&snapshot.target_id) {
                    Some(count) => *count += 1,
                    None => {
                        self.pending_by_target.insert(snapshot.target_id.clone(), 1);
                    }
                }
                self.messages.push(snapshot);
                self.delivered.push(false);
            }
            Prepared::Delivered(index) => {
                self.delivered[index] = true;
                // Only pending messages are ever dispatched; a delivered one keeps its envelope
                // (id, sender, target, delivery) for the fold's checks but releases its content,
                // so memory does not grow with every message ever sent.
                self.messages[index].content = Vec::new();
                self.pending.remove(&index);
                let target = &self.messages[index].target_id;
                if let Some(count) = self.pending_by_target.get_mut(target) {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        self.pending_by_target.remove(target);
                    }
                }
            }
        }
    }

    fn commit_task(&mut self, index: Option<usize>, snapshot: TaskSnapshot) {
        if let Some(n) = snapshot.id.number() {
            let next = if n == MAX_SAFE_INTEGER { n } else { n + 1 };
            self.next_task_number = self.next_task_number.max(next);
        }
        let index = match index {
            Some(index) => {
                let prior = &self.tasks[index];
                let edges_kept = prior.blocked_by == snapshot.blocked_by
                    && (prior.status == TaskStatus::Deleted)
                        == (snapshot.status == TaskStatus::Deleted);
                if edges_kept {
                    // The common case (claim, complete, edit, …): only the status index can
                    // change; leave the edge indexes alone rather than rebuild them.
                    if prior.status == TaskStatus::InProgress {
                        self.in_progress.remove(&index);
                    }
                    if snapshot.status == TaskStatus::InProgress {
                        self.in_progress.insert(index);
                    }
                    self.tasks[index] = snapshot;
                    return;
                }
                self.unlink_task(index);
                self.tasks[index] = snapshot;
                index
            }
            None => {
                let index = self.tasks.len();
                self.task_index.insert(snapshot.id.as_str(), index);
                self.tasks.push(snapshot);
                index
            }
        };
        self.link_task(index);
    }

    /// [`TeamState::commit_task`] of an existing task's next snapshot given as changes.
    fn commit_task_update(&mut self, index: usize, update: TaskUpdate) {
        let prior = &self.tasks[index];
        let edges_kept = update.blocked_by.is_none()
            && (prior.status == TaskStatus::Deleted) == (update.status == TaskStatus::Deleted);
        if edges_kept {
            if prior.status == TaskStatus::InProgress {
                self.in_progress.remove(&index);
            }
            if update.status == TaskStatus::InProgress {
                self.in_progress.insert(index);
            }
        } else {
            self.unlink_task(index);
        }
        let task = &mut self.tasks[index];
        task.revision = update.revision;
        task.status = update.status;
        if let Some(subject) = update.subject {
            task.subject = subject;
        }
        if let Some(description) = update.description {
            task.description = description;
        }
        if let Some(owner_id) = update.owner_id {
            task.owner_id = owner_id;
        }
        if let Some(blocked_by) = update.blocked_by {
            task.blocked_by = blocked_by;
        }
        if let Some(write_scopes) = update.write_scopes {
            task.write_scopes = write_scopes;
        }
        if !edges_kept {
            self.link_task(index);
        }
    }

    /// Removes task `index` from the derived indexes (before its snapshot is replaced).
    fn unlink_task(&mut self, index: usize) {
        let task = &self.tasks[index];
        if task.status == TaskStatus::InProgress {
            self.in_progress.remove(&index);
        }
        if task.status == TaskStatus::Deleted {
            return;
        }
        self.live_tasks.remove(&index);
        for blocker in &task.blocked_by {
            if let Some(blocker) = self.task_position(blocker.as_str())
                && let Some(dependents) = self.dependents.get_mut(&blocker)
            {
                dependents.remove(&index);
                if dependents.is_empty() {
                    self.dependents.remove(&blocker);
                }
            }
        }
    }

    /// Adds task `index` (with its new snapshot) to the derived indexes.
    fn link_task(&mut self, index: usize) {
        let task = &self.tasks[index];
        if task.status == TaskStatus::InProgress {
            self.in_progress.insert(index);
        }
        if task.status == TaskStatus::Deleted {
            return;
        }
        self.live_tasks.insert(index);
        for blocker in &task.blocked_by {
            if let Some(blocker) = self.task_position(blocker.as_str()) {
                self.dependents.entry(blocker).or_default().insert(index);
            }
        }
    }

    /// Rebuilds every derived index from the folded data and compares it with the
    /// incrementally maintained one. For tests: a mismatch means an `apply` bug.
    ///
    /// # Errors
    /// A description of the first index that differs.
    pub fn verify_indexes(&self) -> Result<(), String> {
        let mut fresh = Self::new(self.id.clone());
        fresh.members = self.members.clone();
        fresh.tasks = self.tasks.clone();
        fresh.messages = self.messages.clone();
        fresh.delivered = self.delivered.clone();
        for (index, member) in fresh.members.iter().enumerate() {
            fresh.member_index.insert(member.id.clone(), index);
            fresh.member_by_name.insert(member.name.clone(), index);
        }
        for (index, task) in fresh.tasks.iter().enumerate() {
            fresh.task_index.insert(task.id.as_str(), index);
        }
        for index in 0..fresh.tasks.len() {
            fresh.link_task(index);
        }
        for (index, message) in fresh.messages.iter().enumerate() {
            fresh.message_index.insert(message.id.as_str(), index);
            if !fresh.delivered[index] {
                fresh.pending.insert(index);
                *fresh
                    .pending_by_target
                    .entry(message.target_id.clone())
                    .or_insert(0) += 1;
            }
        }
        let checks = [
            ("member_index", fresh.member_index == self.member_index),
            (
                "member_by_name",
                fresh.member_by_name == self.member_by_name,
            ),
            (
                "task_index",
                self.task_index.len() == self.tasks.len()
                    && (0..self.tasks.len())
                        .all(|i| self.task_position(self.tasks[i].id.as_str()) == Some(i)),
            ),
            ("live_tasks", fresh.live_tasks == self.live_tasks),
            ("in_progress", fresh.in_progress == self.in_progress),
            ("dependents", fresh.dependents == self.dependents),
            (
                "message_index",
                self.message_index.len() == self.messages.len()
                    && (0..self.messages.len())
                        .all(|i| self.message_position(self.messages[i].id.as_str()) == Some(i)),
            ),
            ("pending", fresh.pending == self.pending),
            (
                "pending_by_target",
                fresh.pending_by_target == self.pending_by_target,
            ),
        ];
        let released = self
            .messages
            .iter()
            .zip(&self.delivered)
            .all(|(message, delivered)| !delivered || message.content.is_empty());
        if !released {
            return Err("a delivered message still holds its content".to_owned());
        }
        match checks.iter().find(|(_, ok)| !ok) {
            Some((name, _)) => Err(format!("derived index {name} differs from a rebuild")),
            None => Ok(()),
        }
    }

    // ---- Reads ----

    /// The Team id (the Lead's SessionId).
    pub fn id(&self) -> &TeamId {
        &self.id
    }

    /// Every roster member (failed ones included), in first-provisioning order.
    pub fn members(&self) -> &[MemberSnapshot] {
        &self.members
    }

    /// The member with SessionId `id`, in any phase.
    pub fn member(&self, id: &SessionId) -> Option<&MemberSnapshot> {
        self.member_index.get(id).map(|&i| &self.members[i])
    }

    /// The member named `name`, in any phase.
    pub fn member_named(&self, name: &str) -> Option<&MemberSnapshot> {
        self.member_by_name.get(name).map(|&i| &self.members[i])
    }

    /// Resolves `agent` as a caller of this Team: the Lead when `agent` is the Team id, a
    /// teammate when it is a roster member in phase `provisioning` or `active`
    /// (REFERENCE c.2 step 2a); `None` otherwise (failed members, strangers).
    pub fn caller(&self, agent: &SessionId) -> Option<Caller> {
        if agent == self.id.lead_id() {
            return Some(Caller::lead(&self.id));
        }
        let member = self.member(agent)?;
        (member.phase != MemberPhase::Failed).then(|| Caller {
            id: member.id.clone(),
            role: Role::Teammate,
            name: member.name.to_string(),
        })
    }

    /// Whether `caller` is (still) a member of this Team.
    pub fn is_member(&self, caller: &Caller) -> bool {
        self.caller(&caller.id).is_some_and(|c| c == *caller)
    }

    /// The Team name of session `id`: `lead` for the Lead, the roster name (any phase) for a
    /// member, `None` otherwise.
    pub fn name_of(&self, id: &SessionId) -> Option<&str> {
        if id == self.id.lead_id() {
            return Some(LEAD_NAME);
        }
        self.member(id).map(|m| m.name.as_str())
    }

    /// Every task ever created, tombstones included, in creation order.
    pub fn tasks(&self) -> &[TaskSnapshot] {
        &self.tasks
    }

    /// The task the last record given to [`TeamState::apply`] (or [`TeamState::apply_data`],
    /// [`TeamState::apply_line`], [`Staged::apply`]) committed, as that record left it: `Some`
    /// only when that record was a `team/task` record of this Team that was applied. `None`
    /// after any other type, another Team's record, a refusal, or a line answered
    /// [`LineApplied::NeedEvent`]; reset by every call. For readers that follow each task
    /// record of a streamed log (the write radar's windows of work) without decoding its line
    /// a second time.
    pub fn last_task(&self) -> Option<&TaskSnapshot> {
        self.last_task.and_then(|i| self.tasks.get(i))
    }

    /// The non-deleted tasks, in creation order.
    pub fn live_tasks(&self) -> impl DoubleEndedIterator<Item = &TaskSnapshot> + '_ {
        self.live_tasks.iter().map(|&i| &self.tasks[i])
    }

    /// The number of non-deleted tasks (what `maxTasks` bounds).
    pub fn live_task_count(&self) -> usize {
        self.live_tasks.len()
    }

    /// The `in_progress` tasks, in creation order.
    pub fn in_progress_tasks(&self) -> impl Iterator<Item = &TaskSnapshot> + '_ {
        self.in_progress.iter().map(|&i| &self.tasks[i])
    }

    /// The task with id `id` (tombstones included).
    pub fn task(&self, id: &str) -> Option<&TaskSnapshot> {
        self.task_position(id).map(|i| &self.tasks[i])
    }

    /// The task with id `id` (tombstones included).
    pub fn task_by_id(&self, id: &TaskId) -> Option<&TaskSnapshot> {
        self.task_position(id.as_str()).map(|i| &self.tasks[i])
    }

    /// The position of task `id` in [`TeamState::tasks`]. Troupe numbers its tasks in
    /// creation order, so `task-<n>` is usually at position `n − 1`: that position is tried
    /// first (and checked), which spares a long log's index a random access.
    fn task_position(&self, id: &str) -> Option<usize> {
        let guess = task_number(id)
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| n.checked_sub(1))
            .filter(|&i| self.tasks.get(i).is_some_and(|task| task.id.as_str() == id));
        guess.or_else(|| self.task_index.get(id, |i| self.tasks[i].id.as_str()))
    }

    /// The position of message `id` in [`TeamState::messages`].
    fn message_position(&self, id: &str) -> Option<usize> {
        self.message_index.get(id, |i| self.messages[i].id.as_str())
    }

    /// [`TeamState::message_position`] for a message about to be delivered: deliveries follow
    /// queue order closely, so the oldest pending messages are tried first (and checked).
    fn pending_position(&self, id: &str) -> Option<usize> {
        /// How many of the oldest pending messages are compared before the index is asked.
        const OLDEST: usize = 16;
        self.pending
            .iter()
            .take(OLDEST)
            .copied()
            .find(|&i| self.messages[i].id.as_str() == id)
            .or_else(|| self.message_position(id))
    }

    pub(crate) fn task_index_of(&self, id: &TaskId) -> Option<usize> {
        self.task_position(id.as_str())
    }

    /// The non-deleted tasks that list `id` in `blockedBy`, in creation order.
    pub fn dependents_of(&self, id: &TaskId) -> impl Iterator<Item = &TaskSnapshot> + '_ {
        self.task_position(id.as_str())
            .and_then(|i| self.dependents.get(&i))
            .into_iter()
            .flatten()
            .map(|&i| &self.tasks[i])
    }

    /// The number the next created task gets (`task-<n>`): one more than the largest
    /// `task-<n>` ever stored, at least 1, and at most 2^53−1 (REFERENCE c.4).
    pub fn next_task_number(&self) -> u64 {
        self.next_task_number
    }

    /// Whether every blocker of `task` is currently `completed`.
    pub fn blockers_completed(&self, task: &TaskSnapshot) -> bool {
        task.blocked_by.iter().all(|blocker| {
            self.task_by_id(blocker)
                .is_some_and(|b| b.status == TaskStatus::Completed)
        })
    }

    /// Readiness (REFERENCE c.11.1): `pending` and every blocker `completed`.
    pub fn is_ready(&self, task: &TaskSnapshot) -> bool {
        task.status == TaskStatus::Pending && self.blockers_completed(task)
    }

    /// Every queued message, delivered or not, in queue order. Delivered messages keep id,
    /// sender, target and delivery mode, but their `content` is empty (it is released on
    /// delivery; only pending messages are dispatched).
    pub fn messages(&self) -> &[MessageSnapshot] {
        &self.messages
    }

    /// Whether the fold holds any Team record: a member, a task or a message (what makes a
    /// Lead's log a Team session's even without the Team profile; see
    /// `troupe_session::is_team_session`).
    pub fn has_records(&self) -> bool {
        !self.members.is_empty() || !self.tasks.is_empty() || !self.messages.is_empty()
    }

    /// The queued message with id `id` (with empty `content` once delivered, see
    /// [`TeamState::messages`]).
    pub fn message(&self, id: &MessageId) -> Option<&MessageSnapshot> {
        self.message_position(id.as_str())
            .map(|i| &self.messages[i])
    }

    /// Whether message `id` has a delivery record.
    pub fn is_delivered(&self, id: &MessageId) -> bool {
        self.message_position(id.as_str())
            .is_some_and(|i| self.delivered[i])
    }

    /// The pending mailbox (queued − delivered), in queue order.
    pub fn pending_messages(&self) -> impl DoubleEndedIterator<Item = &MessageSnapshot> + '_ {
        self.pending.iter().map(|&i| &self.messages[i])
    }

    /// The pending messages addressed to `target`, in queue order.
    pub fn pending_messages_for<'a>(
        &'a self,
        target: &'a SessionId,
    ) -> impl Iterator<Item = &'a MessageSnapshot> + 'a {
        self.pending_messages()
            .filter(move |message| message.target_id == *target)
    }

    /// The number of pending messages addressed to `target` (what
    /// `maxPendingMessagesPerMember` bounds).
    pub fn pending_count_for(&self, target: &SessionId) -> usize {
        self.pending_by_target.get(target).copied().unwrap_or(0)
    }

    /// Whether `a` was queued before `b` (both must be queued; `false` otherwise). The
    /// dispatcher's quiet-bypass rule compares queue positions (REFERENCE c.10.3).
    pub fn queued_before(&self, a: &MessageId, b: &MessageId) -> bool {
        match (
            self.message_position(a.as_str()),
            self.message_position(b.as_str()),
        ) {
            (Some(a), Some(b)) => a < b,
            _ => false,
        }
    }
}

/// Whether two lists of ids or strings hold the same strings in the same order.
fn same_ids<A: AsRef<str>, B: AsRef<str>>(a: &[A], b: &[B]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.as_ref() == b.as_ref())
}

/// [`same_ids`] of a stored list and one still in a line's text.
fn same_list<A: AsRef<str>>(a: &[A], b: StrList<'_>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|(a, b)| a.as_ref() == b.as_ref())
}
