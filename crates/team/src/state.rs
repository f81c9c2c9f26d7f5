//! The folded Team state and its incremental fold (REFERENCE c.4) and invariant companion
//! (REFERENCE c.5).

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use troupe_protocol::{Event, MessageId, Seq, SessionId, event_types};

use crate::error::{FoldError, InvariantError, ReplayError};
use crate::graph::{GraphViolation, GraphViolationKind};
use crate::ids::{LEAD_NAME, MAX_SAFE_INTEGER, MemberName, TaskId, TeamId};
use crate::record::{
    Decoded, MemberPhase, MemberSnapshot, MessageSnapshot, TaskSnapshot, TaskStatus, TeamEvent,
    TeamRecord, decode, decode_v1_text,
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
    task_index: HashMap<TaskId, usize>,
    /// Non-deleted tasks, by creation index.
    live_tasks: BTreeSet<usize>,
    /// `in_progress` tasks, by creation index.
    in_progress: BTreeSet<usize>,
    /// For each task, the non-deleted tasks that list it in `blockedBy` (creation indexes).
    dependents: HashMap<usize, BTreeSet<usize>>,
    messages: Vec<MessageSnapshot>,
    delivered: Vec<bool>,
    message_index: HashMap<MessageId, usize>,
    /// Queued but not delivered, by queue index.
    pending: BTreeSet<usize>,
    pending_by_target: HashMap<SessionId, usize>,
    next_task_number: u64,
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
    Queued(MessageSnapshot),
    Delivered(usize),
}

impl TeamState {
    /// The empty state of the Team led by `id` (`nextTaskNumber` = 1).
    pub fn new(id: TeamId) -> Self {
        Self {
            id,
            members: Vec::new(),
            member_index: HashMap::new(),
            member_by_name: HashMap::new(),
            tasks: Vec::new(),
            task_index: HashMap::new(),
            live_tasks: BTreeSet::new(),
            in_progress: BTreeSet::new(),
            dependents: HashMap::new(),
            messages: Vec::new(),
            delivered: Vec::new(),
            message_index: HashMap::new(),
            pending: BTreeSet::new(),
            pending_by_target: HashMap::new(),
            next_task_number: 1,
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
        let prepared = self.prepare(kind, data)?;
        self.commit(prepared);
        Ok(())
    }

    /// [`TeamState::fold`] over events whose payloads are still JSON text (`(seq, type,
    /// data)`, e.g. from `troupe_journal::scan_raw_each`). Same result and same errors as
    /// [`TeamState::fold`] over the parsed events; non-Team payloads are never parsed.
    ///
    /// # Errors
    /// As [`TeamState::fold`].
    pub fn fold_raw<'a>(
        id: TeamId,
        events: impl IntoIterator<Item = (Seq, &'a str, &'a RawValue)>,
    ) -> Result<Self, ReplayError> {
        let mut state = Self::new(id);
        for (seq, kind, data) in events {
            state.apply_raw(seq, kind, data)?;
        }
        Ok(state)
    }

    /// One step of [`TeamState::fold_raw`]: [`TeamState::apply_raw_data`], with a refusal
    /// located at `seq` as [`TeamState::fold`] reports it. For streaming a log: stop at the
    /// first error (the state is then unchanged).
    ///
    /// # Errors
    /// [`ReplayError`] (`TEAM_LOG_INVALID`) wrapping the [`FoldError`].
    pub fn apply_raw(&mut self, seq: Seq, kind: &str, data: &RawValue) -> Result<(), ReplayError> {
        self.apply_raw_data(kind, data)
            .map_err(|source| ReplayError {
                seq,
                event_type: kind.to_owned(),
                source,
            })
    }

    /// [`TeamState::apply_data`] for a payload still in JSON text: exactly the result of
    /// parsing `data` into a `serde_json::Value` and applying that, but a non-Team type returns
    /// at once without reading `data`, and a valid `version: 1` record is decoded straight
    /// from the text (anything else takes the `Value` path, so every refusal is the same).
    ///
    /// # Errors
    /// As [`TeamState::apply`]; also [`FoldError::InvalidPayload`] if `data` is not a JSON
    /// text a `Value` can hold (deeper than serde_json's recursion limit, say), which never
    /// happens for payloads from a session-log scan.
    pub fn apply_raw_data(&mut self, kind: &str, data: &RawValue) -> Result<(), FoldError> {
        if !event_types::is_team(kind) {
            return Ok(());
        }
        let prepared = match decode_v1_text(kind, data.get()) {
            Some((team_id, record)) if team_id == self.id.as_str() => {
                self.prepare_record(record)?
            }
            Some(_) => Prepared::Skip,
            None => {
                let value: Value =
                    serde_json::from_str(data.get()).map_err(|e| FoldError::InvalidPayload {
                        event_type: kind.to_owned(),
                        detail: e.to_string(),
                    })?;
                self.prepare(kind, &value)?
            }
        };
        self.commit(prepared);
        Ok(())
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
                if self.message_index.contains_key(&snapshot.id) {
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
                let Some(&index) = self.message_index.get(&message_id) else {
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
        let index = self.task_index.get(&snapshot.id).copied();
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

    /// The whole-graph check of REFERENCE c.11.5 on "all tasks with `candidate` replaced",
    /// done incrementally: the committed graph is always valid, so only the candidate's own
    /// edges, the edges into it (when it becomes deleted) and cycles through it can break.
    /// Reports the same violation the whole-graph check reports first.
    pub(crate) fn check_graph(
        &self,
        index: Option<usize>,
        candidate: &TaskSnapshot,
    ) -> Result<(), GraphViolation> {
        if candidate.status == TaskStatus::Deleted {
            // A tombstone has no edges of its own; any non-deleted task still blocked by it
            // now has a missing blocker. The first such task in creation order is reported.
            if let Some(first) = index
                .and_then(|i| self.dependents.get(&i))
                .and_then(|dependents| dependents.first())
            {
                return Err(GraphViolation {
                    kind: GraphViolationKind::MissingBlocker,
                    task: self.tasks[*first].id.to_string(),
                    blocker: candidate.id.to_string(),
                });
            }
            return Ok(());
        }
        let violation = |kind, blocker: &TaskId| GraphViolation {
            kind,
            task: candidate.id.to_string(),
            blocker: blocker.to_string(),
        };
        // Long lists use a set so a hostile log cannot make the duplicate check quadratic.
        let mut seen: HashSet<&TaskId> = HashSet::new();
        let use_set = candidate.blocked_by.len() > 8;
        for (position, blocker) in candidate.blocked_by.iter().enumerate() {
            if *blocker == candidate.id {
                return Err(violation(GraphViolationKind::SelfBlock, blocker));
            }
            let repeated = if use_set {
                !seen.insert(blocker)
            } else {
                candidate.blocked_by[..position].contains(blocker)
            };
            if repeated {
                return Err(violation(GraphViolationKind::DuplicateBlocker, blocker));
            }
            let live = self
                .task_index
                .get(blocker)
                .is_some_and(|&i| self.tasks[i].status != TaskStatus::Deleted);
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
            prior.status == TaskStatus::Deleted || prior.blocked_by != candidate.blocked_by;
        if !has_dependents || !edges_changed {
            return Ok(());
        }
        for blocker in &candidate.blocked_by {
            if let Some(&start) = self.task_index.get(blocker)
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
        let mut seen = HashSet::new();
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
                    .filter_map(|blocker| self.task_index.get(blocker).copied()),
            );
        }
        false
    }

    fn commit(&mut self, prepared: Prepared) {
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
            Prepared::Queued(snapshot) => {
                let index = self.messages.len();
                self.message_index.insert(snapshot.id.clone(), index);
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
                self.task_index.insert(snapshot.id.clone(), index);
                self.tasks.push(snapshot);
                index
            }
        };
        self.link_task(index);
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
            if let Some(blocker) = self.task_index.get(blocker)
                && let Some(dependents) = self.dependents.get_mut(blocker)
            {
                dependents.remove(&index);
                if dependents.is_empty() {
                    self.dependents.remove(blocker);
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
            if let Some(&blocker) = self.task_index.get(blocker) {
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
            fresh.task_index.insert(task.id.clone(), index);
        }
        for index in 0..fresh.tasks.len() {
            fresh.link_task(index);
        }
        for (index, message) in fresh.messages.iter().enumerate() {
            fresh.message_index.insert(message.id.clone(), index);
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
            ("task_index", fresh.task_index == self.task_index),
            ("live_tasks", fresh.live_tasks == self.live_tasks),
            ("in_progress", fresh.in_progress == self.in_progress),
            ("dependents", fresh.dependents == self.dependents),
            ("message_index", fresh.message_index == self.message_index),
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
        self.task_index.get(id).map(|&i| &self.tasks[i])
    }

    /// The task with id `id` (tombstones included).
    pub fn task_by_id(&self, id: &TaskId) -> Option<&TaskSnapshot> {
        self.task_index.get(id).map(|&i| &self.tasks[i])
    }

    pub(crate) fn task_index_of(&self, id: &TaskId) -> Option<usize> {
        self.task_index.get(id).copied()
    }

    /// The non-deleted tasks that list `id` in `blockedBy`, in creation order.
    pub fn dependents_of(&self, id: &TaskId) -> impl Iterator<Item = &TaskSnapshot> + '_ {
        self.task_index
            .get(id)
            .and_then(|i| self.dependents.get(i))
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

    /// The queued message with id `id` (with empty `content` once delivered, see
    /// [`TeamState::messages`]).
    pub fn message(&self, id: &MessageId) -> Option<&MessageSnapshot> {
        self.message_index.get(id).map(|&i| &self.messages[i])
    }

    /// Whether message `id` has a delivery record.
    pub fn is_delivered(&self, id: &MessageId) -> bool {
        self.message_index
            .get(id)
            .is_some_and(|&i| self.delivered[i])
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
        match (self.message_index.get(a), self.message_index.get(b)) {
            (Some(a), Some(b)) => a < b,
            _ => false,
        }
    }
}
