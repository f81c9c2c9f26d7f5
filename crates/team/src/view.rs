//! Views of the folded state (REFERENCE c.7, c.11.1–c.11.2, d.3, d.4.2; DESIGN §6
//! `troupe team show`).

use serde::Serialize;
use troupe_protocol::{MessageId, SessionId};

use crate::error::TeamError;
use crate::ids::{LEAD_NAME, TaskId, TeamId};
use crate::radar::WriteConflict;
use crate::record::{
    Delivery, MemberContext, MemberPhase, MemberProvider, MemberSnapshot, TaskSnapshot, TaskStatus,
};
use crate::stall::{Stall, StallCheck};
use crate::state::{Caller, Role, TeamState};
use crate::text::scopes_overlap;

/// The runtime status of a live Agent (REFERENCE b.1). Wire: `"running"` | `"idle"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LiveStatus {
    /// In a turn.
    Running,
    /// Resident and waiting.
    Idle,
}

/// What the runtime knows about a live (resident) Agent, passed into the roster view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAgent {
    /// Running or idle.
    pub status: LiveStatus,
    /// The model it runs, if known.
    pub model: Option<String>,
}

/// A member's status as the roster shows it (REFERENCE c.7, d.3).
/// Wire: `"running"` | `"idle"` | `"inactive"` | `"provisioning"` | `"failed"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberStatus {
    /// Live and in a turn.
    Running,
    /// Live and waiting.
    Idle,
    /// Exists durably but is not resident (cold-resumable; not a failure).
    Inactive,
    /// Being provisioned.
    Provisioning,
    /// Provisioning failed.
    Failed,
}

impl From<LiveStatus> for MemberStatus {
    fn from(status: LiveStatus) -> Self {
        match status {
            LiveStatus::Running => MemberStatus::Running,
            LiveStatus::Idle => MemberStatus::Idle,
        }
    }
}

/// One roster row (REFERENCE c.7, d.3 `MemberView`).
///
/// Wire shape (camelCase, this key order): `{"id","name","role","status","description"?,
/// "provider"?,"context"?,"model"?,"diagnostics"}`; the Lead row has no description, provider
/// or context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    /// SessionId (the Team id for the Lead).
    pub id: SessionId,
    /// `lead` or the member name.
    pub name: String,
    /// Lead or teammate.
    pub role: Role,
    /// See [`MemberStatus`].
    pub status: MemberStatus,
    /// Teammates only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Teammates only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<MemberProvider>,
    /// Teammates only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<MemberContext>,
    /// The live Agent's model, else (teammates in lists) the Lead's; omitted if neither.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `[error]` for a member whose snapshot carries an error, else empty.
    pub diagnostics: Vec<String>,
}

impl MemberView {
    /// The row of a teammate: status `failed`/`provisioning` by phase, else the live status or
    /// `inactive`; `model` from the live Agent, else `fallback_model`.
    pub fn teammate(
        member: &MemberSnapshot,
        live: Option<&LiveAgent>,
        fallback_model: Option<&str>,
    ) -> Self {
        let status = match member.phase {
            MemberPhase::Failed => MemberStatus::Failed,
            MemberPhase::Provisioning => MemberStatus::Provisioning,
            MemberPhase::Active => live.map_or(MemberStatus::Inactive, |l| l.status.into()),
        };
        let model = live
            .and_then(|l| l.model.clone())
            .or_else(|| fallback_model.map(str::to_owned));
        Self {
            id: member.id.clone(),
            name: member.name.to_string(),
            role: Role::Teammate,
            status,
            description: Some(member.description.clone()),
            provider: Some(member.provider.clone()),
            context: Some(member.context),
            model,
            diagnostics: member.error.iter().cloned().collect(),
        }
    }

    /// The view `spawnTeammate` returns (REFERENCE c.8 step 9): built from the active
    /// snapshot, status live or `inactive`, `model` only from the live child (no Lead
    /// fallback), no diagnostics.
    pub fn spawned(member: &MemberSnapshot, live: Option<&LiveAgent>) -> Self {
        Self {
            status: live.map_or(MemberStatus::Inactive, |l| l.status.into()),
            diagnostics: Vec::new(),
            ..Self::teammate(member, live, None)
        }
    }

    /// The Lead row: `name: lead`, `role: lead`, no description/provider/context.
    pub fn lead(team: &TeamId, status: MemberStatus, model: Option<&str>) -> Self {
        Self {
            id: team.lead_id().clone(),
            name: LEAD_NAME.to_owned(),
            role: Role::Lead,
            status,
            description: None,
            provider: None,
            context: None,
            model: model.map(str::to_owned),
            diagnostics: Vec::new(),
        }
    }
}

/// One task as tools and `team show` present it (REFERENCE c.11.1, d.3 `TaskView`).
///
/// Wire shape (camelCase, this key order): `{"id","revision","subject","description","status",
/// "blockedBy","writeScopes","ownerName"?,"ready","writeScopeWarnings","stalled"?}`; `ownerName`
/// is omitted when the task is unowned; `stalled` (a Troupe addition, derived and never
/// stored: [`Stall`], see [`crate::stall`]) only on a stalled task of a view built with a
/// [`StallCheck`] — reads (`team_task_list`, `team_task_get`, `team show`, the panel), never a
/// mutation's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    /// The id.
    pub id: TaskId,
    /// The current revision (the CAS token).
    pub revision: u64,
    /// The subject.
    pub subject: String,
    /// The description.
    pub description: String,
    /// The status.
    pub status: TaskStatus,
    /// Blocker ids.
    pub blocked_by: Vec<TaskId>,
    /// Normalized write scopes.
    pub write_scopes: Vec<String>,
    /// `lead`, the owner's roster name (any phase), or the raw owner id if it is not on the
    /// roster; omitted when unowned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_name: Option<String>,
    /// `pending` and every blocker `completed`.
    pub ready: bool,
    /// `write scopes overlap with <id>` for every other `in_progress` task with an overlapping
    /// scope, in creation order. Advisory only.
    pub write_scope_warnings: Vec<String>,
    /// Set when the task is stalled (see [`crate::stall`]); omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled: Option<Stall>,
}

/// A write-scope overlap between two tasks that may write the same files at the same time
/// (for people: `troupe team show`'s table and the web panel). Unlike
/// [`TaskView::write_scope_warnings`] (REFERENCE c.11.1: on a task in any status, naming the
/// *other* tasks in progress), an overlap is shown on **every task it concerns**, and only
/// while it matters: between a task in progress and another task in progress or still
/// pending. A completed task's writes are over, so it has none; a pending task sees the tasks
/// in progress it would collide with, and a task in progress sees every task in progress or
/// pending that overlaps it. Advisory only.
///
/// Wire shape: `{"taskId","status"}` (the other task and its status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeOverlap {
    /// The other task.
    pub task_id: TaskId,
    /// Its status now (`in_progress` or `pending`).
    pub status: TaskStatus,
}

/// One roster row of `troupe team show` (DESIGN §6): a [`MemberView`] with the member's
/// durable roster `phase` (the Lead row is `active`). `phase` is what the roster records
/// (`provisioning` → `active` | `failed`); `status` is what the member is doing now, which
/// offline is `inactive` for every active member.
///
/// Wire shape: the [`MemberView`] fields, then `phase`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RosterRow {
    /// The roster view.
    #[serde(flatten)]
    pub member: MemberView,
    /// The durable phase.
    pub phase: MemberPhase,
}

/// One pending message in `troupe team show` (DESIGN §6).
///
/// Wire shape: `{"id","senderName","targetName","delivery"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingMessageView {
    /// The message id.
    pub id: MessageId,
    /// The sender's Team name.
    pub sender_name: String,
    /// The target's Team name (`lead`, a roster name, or the raw id if unknown).
    pub target_name: String,
    /// Quiet or wakeup.
    pub delivery: Delivery,
}

/// The offline view of a Team (DESIGN §6 `troupe team show --json`).
///
/// Wire shape: `{"teamId","members":[RosterRow…],"tasks":[TaskView…],
/// "pendingMessages":[PendingMessageView…],"writeConflicts"?:[WriteConflict…]}`; a task view
/// carries `stalled` when [`ShowOptions::stall`] finds it stalled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamShow {
    /// The Team id.
    pub team_id: TeamId,
    /// The Lead row, then every member in first-provisioning order, each with its phase.
    pub members: Vec<RosterRow>,
    /// Non-deleted tasks in creation order (all tasks with [`ShowOptions::include_deleted`]).
    pub tasks: Vec<TaskView>,
    /// Queued − delivered, in queue order.
    pub pending_messages: Vec<PendingMessageView>,
    /// The write radar's warnings ([`WriteConflict`], advisory): files two members changed
    /// within the same window of work. [`TeamState::show`] leaves it empty (the members'
    /// logs are read by the caller); omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub write_conflicts: Vec<WriteConflict>,
}

/// Options of [`TeamState::show`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShowOptions {
    /// Include deleted tasks (`--all`).
    pub include_deleted: bool,
    /// The Lead's recorded model, if known (shown on the Lead row and as teammates' fallback).
    pub lead_model: Option<String>,
    /// The model each teammate runs, by session id, where known (a teammate with a model of
    /// its own runs another than the Lead's): shown instead of `lead_model`.
    pub member_models: std::collections::BTreeMap<SessionId, String>,
    /// Derive `stalled` on the task views with this check (`None`: no task is marked).
    pub stall: Option<StallCheck>,
}

/// Filters and paging of `team_task_list` (REFERENCE d.4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskListQuery {
    /// Exact status.
    pub status: Option<TaskStatus>,
    /// `unowned` for tasks without owner, otherwise exact `ownerName` equality (no trimming).
    pub owner: Option<String>,
    /// Exact readiness.
    pub ready: Option<bool>,
    /// Zero-based offset into the filtered list. Default 0.
    pub cursor: u64,
    /// Page size, 1..=100. Default 50.
    pub limit: u64,
}

impl Default for TaskListQuery {
    fn default() -> Self {
        Self {
            status: None,
            owner: None,
            ready: None,
            cursor: 0,
            limit: 50,
        }
    }
}

/// One page of `team_task_list` (REFERENCE d.4.2).
///
/// Wire shape: `{"tasks":[TaskView…],"nextCursor"?,"stallNotice"?,
/// "writeConflicts"?:[WriteConflict…]}`; `stallNotice` (a Troupe addition) is set by the
/// runtime on the Lead's list that first sees a stalled task ([`crate::stall_notice`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPage {
    /// The page.
    pub tasks: Vec<TaskView>,
    /// `cursor + limit`, present only when more filtered tasks follow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<u64>,
    /// The one-time notice of stalled tasks the Lead had not been told of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_notice: Option<String>,
    /// The write radar's warnings (a Troupe addition, advisory: [`WriteConflict`]): files
    /// two members changed within the same window of work. [`TeamState::list_tasks`] leaves it
    /// empty (the runtime fills it from the members' logs); omitted when empty, so the
    /// REFERENCE d.4.2 shape is unchanged without a conflict.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub write_conflicts: Vec<WriteConflict>,
}

impl TeamState {
    /// The roster view (REFERENCE c.7): the Lead row first (`lead` is the live Lead), then
    /// every member in first-provisioning order, failed ones included. `live(id)` reports a
    /// resident teammate's status and model, `None` when it is not resident (`inactive`).
    pub fn list_members(
        &self,
        lead: &LiveAgent,
        live: &dyn Fn(&SessionId) -> Option<LiveAgent>,
    ) -> Vec<MemberView> {
        self.list_members_with_models(lead, live, &|_| None)
    }

    /// [`TeamState::list_members`] where a teammate that is not resident shows `known(id)`,
    /// the model it runs when known (a teammate may have a model of its own), before the
    /// Lead's. (REFERENCE c.7 falls back to the Lead's model alone: it has one model per Team.)
    pub fn list_members_with_models(
        &self,
        lead: &LiveAgent,
        live: &dyn Fn(&SessionId) -> Option<LiveAgent>,
        known: &dyn Fn(&SessionId) -> Option<String>,
    ) -> Vec<MemberView> {
        let lead_model = lead.model.as_deref();
        let mut rows = Vec::with_capacity(self.members().len() + 1);
        rows.push(MemberView::lead(self.id(), lead.status.into(), lead_model));
        for member in self.members() {
            let live = live(&member.id);
            let known = known(&member.id);
            let fallback = known.as_deref().or(lead_model);
            rows.push(MemberView::teammate(member, live.as_ref(), fallback));
        }
        rows
    }

    /// The view of `task` against this state (REFERENCE c.11.1): owner name, readiness and
    /// write-scope warnings. `task` need not be stored yet: a mutation's view is the pre-append
    /// state plus the new snapshot.
    pub fn task_view_of(&self, task: &TaskSnapshot) -> TaskView {
        self.task_view_checked(task, None)
    }

    /// [`TeamState::task_view_of`] with `stalled` derived under `check` ([`Self::stall_of`];
    /// no `stalled` without a check).
    pub fn task_view_checked(&self, task: &TaskSnapshot, check: Option<&StallCheck>) -> TaskView {
        TaskView {
            id: task.id.clone(),
            revision: task.revision.get(),
            subject: task.subject.clone(),
            description: task.description.clone(),
            status: task.status,
            blocked_by: task.blocked_by.clone(),
            write_scopes: task.write_scopes.clone(),
            owner_name: task.owner_id.as_ref().map(|owner| {
                self.name_of(owner)
                    .map_or_else(|| owner.to_string(), str::to_owned)
            }),
            ready: self.is_ready(task),
            write_scope_warnings: self.write_scope_warnings(task),
            stalled: check.and_then(|check| self.stall_of(task, check)),
        }
    }

    /// `write scopes overlap with <id>` for every other `in_progress` task with a scope that
    /// overlaps one of `task`'s (REFERENCE c.11.1), in creation order.
    pub fn write_scope_warnings(&self, task: &TaskSnapshot) -> Vec<String> {
        if task.write_scopes.is_empty() {
            return Vec::new();
        }
        self.in_progress_tasks()
            .filter(|other| other.id != task.id)
            .filter(|other| {
                task.write_scopes
                    .iter()
                    .any(|a| other.write_scopes.iter().any(|b| scopes_overlap(a, b)))
            })
            .map(|other| format!("write scopes overlap with {}", other.id))
            .collect()
    }

    /// The write-scope overlaps `task` is concerned by (see [`ScopeOverlap`]): none for a
    /// task that is not `pending` or `in_progress`; for a pending task, every task in progress
    /// with an overlapping scope; for a task in progress, every other task in progress or
    /// pending with one. In creation order.
    pub fn scope_overlaps(&self, task: &TaskSnapshot) -> Vec<ScopeOverlap> {
        let others_with = |statuses: &[TaskStatus]| -> Vec<ScopeOverlap> {
            self.live_tasks()
                .filter(|other| other.id != task.id && statuses.contains(&other.status))
                .filter(|other| {
                    task.write_scopes
                        .iter()
                        .any(|a| other.write_scopes.iter().any(|b| scopes_overlap(a, b)))
                })
                .map(|other| ScopeOverlap {
                    task_id: other.id.clone(),
                    status: other.status,
                })
                .collect()
        };
        match task.status {
            _ if task.write_scopes.is_empty() => Vec::new(),
            TaskStatus::Pending => others_with(&[TaskStatus::InProgress]),
            TaskStatus::InProgress => others_with(&[TaskStatus::InProgress, TaskStatus::Pending]),
            _ => Vec::new(),
        }
    }

    /// The view of stored task `id` (tombstones included), or `None`.
    pub fn task_view(&self, id: &str) -> Option<TaskView> {
        self.task(id).map(|task| self.task_view_of(task))
    }

    /// Views of the non-deleted tasks in creation order (every task when `include_deleted`).
    pub fn task_views(&self, include_deleted: bool) -> Vec<TaskView> {
        self.task_views_checked(include_deleted, None)
    }

    /// [`TeamState::task_views`] with `stalled` derived under `check`.
    pub fn task_views_checked(
        &self,
        include_deleted: bool,
        check: Option<&StallCheck>,
    ) -> Vec<TaskView> {
        if include_deleted {
            self.tasks()
                .iter()
                .map(|t| self.task_view_checked(t, check))
                .collect()
        } else {
            self.live_tasks()
                .map(|t| self.task_view_checked(t, check))
                .collect()
        }
    }

    /// `getTask` (REFERENCE c.11.2): any member; tombstones are returned (`deleted`,
    /// `ready: false`).
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER` for a caller outside the Team; `TEAM_TASK_NOT_FOUND` for an unknown
    /// id.
    pub fn get_task(&self, caller: &Caller, id: &str) -> Result<TaskView, TeamError> {
        self.get_task_checked(caller, id, None)
    }

    /// [`TeamState::get_task`] with `stalled` derived under `check`.
    ///
    /// # Errors
    /// As [`TeamState::get_task`].
    pub fn get_task_checked(
        &self,
        caller: &Caller,
        id: &str,
        check: Option<&StallCheck>,
    ) -> Result<TaskView, TeamError> {
        self.require_member(caller)?;
        self.task(id)
            .map(|task| self.task_view_checked(task, check))
            .ok_or_else(|| TeamError::task_not_found(id))
    }

    /// `listTasks` + `team_task_list` filtering and paging (REFERENCE c.11.2, d.4.2):
    /// non-deleted tasks in creation order, filtered by status, owner (`unowned` or exact
    /// owner name) and readiness, then `[cursor, cursor + limit)`.
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER`; `TEAM_INVALID_ARGUMENT` when `limit` is outside 1..=100 or `cursor`
    /// is not a safe integer.
    pub fn list_tasks(
        &self,
        caller: &Caller,
        query: &TaskListQuery,
    ) -> Result<TaskPage, TeamError> {
        self.list_tasks_checked(caller, query, None)
    }

    /// [`TeamState::list_tasks`] with `stalled` derived under `check` (no notice: the runtime
    /// sets [`TaskPage::stall_notice`]).
    ///
    /// # Errors
    /// As [`TeamState::list_tasks`].
    pub fn list_tasks_checked(
        &self,
        caller: &Caller,
        query: &TaskListQuery,
        check: Option<&StallCheck>,
    ) -> Result<TaskPage, TeamError> {
        self.require_member(caller)?;
        if query.cursor > crate::ids::MAX_SAFE_INTEGER {
            return Err(TeamError::invalid_argument(
                "cursor must be a safe integer >= 0",
            ));
        }
        if !(1..=100).contains(&query.limit) {
            return Err(TeamError::invalid_argument(
                "limit must be an integer between 1 and 100",
            ));
        }
        let filtered: Vec<TaskView> = self
            .live_tasks()
            .filter(|task| query.status.is_none_or(|status| task.status == status))
            .filter(|task| query.ready.is_none_or(|ready| self.is_ready(task) == ready))
            .map(|task| self.task_view_checked(task, check))
            .filter(|view| match query.owner.as_deref() {
                None => true,
                Some("unowned") => view.owner_name.is_none(),
                Some(owner) => view.owner_name.as_deref() == Some(owner),
            })
            .collect();
        let total = filtered.len() as u64;
        let end = query.cursor.saturating_add(query.limit);
        let tasks = filtered
            .into_iter()
            .skip(usize::try_from(query.cursor).unwrap_or(usize::MAX))
            .take(usize::try_from(query.limit).unwrap_or(usize::MAX))
            .collect();
        Ok(TaskPage {
            tasks,
            next_cursor: (end < total).then_some(end),
            stall_notice: None,
            write_conflicts: Vec::new(),
        })
    }

    /// The offline view of `troupe team show` (DESIGN §6): the Lead row (status `inactive`,
    /// phase `active`) and every member with its phase and a status of `inactive`,
    /// `provisioning` or `failed`; tasks (deleted
    /// ones only with [`ShowOptions::include_deleted`]); pending messages in queue order.
    pub fn show(&self, options: &ShowOptions) -> TeamShow {
        let lead_model = options.lead_model.as_deref();
        let mut members = Vec::with_capacity(self.members().len() + 1);
        members.push(RosterRow {
            member: MemberView::lead(self.id(), MemberStatus::Inactive, lead_model),
            phase: MemberPhase::Active,
        });
        members.extend(self.members().iter().map(|member| {
            let fallback = options
                .member_models
                .get(&member.id)
                .map(String::as_str)
                .or(lead_model);
            RosterRow {
                member: MemberView::teammate(member, None, fallback),
                phase: member.phase,
            }
        }));
        let pending_messages = self
            .pending_messages()
            .map(|message| PendingMessageView {
                id: message.id.clone(),
                sender_name: message.sender_name.clone(),
                target_name: self
                    .name_of(&message.target_id)
                    .map_or_else(|| message.target_id.to_string(), str::to_owned),
                delivery: message.delivery,
            })
            .collect();
        TeamShow {
            team_id: self.id().clone(),
            members,
            tasks: self.task_views_checked(options.include_deleted, options.stall.as_ref()),
            pending_messages,
            write_conflicts: Vec::new(),
        }
    }

    /// `TEAM_NOT_MEMBER` unless `caller` is the Lead or a provisioning/active member.
    pub(crate) fn require_member(&self, caller: &Caller) -> Result<(), TeamError> {
        if self.is_member(caller) {
            Ok(())
        } else {
            Err(TeamError::NotMember {
                id: caller.id().to_string(),
            })
        }
    }
}
