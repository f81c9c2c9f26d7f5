//! Shared task board decisions (REFERENCE c.11.3–c.11.5): given the state, the caller and a
//! command, either a typed rejection or the exact `team/task` snapshot to append.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::TeamError;
use crate::ids::{LEAD_NAME, Revision, TaskId};
use crate::limits::TeamLimits;
use crate::record::{MemberPhase, TaskSnapshot, TaskStatus, TeamEvent, TeamRecord};
use crate::state::{Caller, TeamState};
use crate::text::{
    SHORT_TEXT_MAX, TASK_DESCRIPTION_MAX, js_trim, normalize_write_scopes, required_text,
};

/// `createTask` (REFERENCE c.11.3): any member adds one unowned pending task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateTask {
    /// Short title; trimmed, 1..200 UTF-16 units.
    pub subject: String,
    /// Full details; trimmed, 1..16384 UTF-16 units.
    pub description: String,
    /// Ids that must be completed first (no self, no repeats, each existing and not deleted).
    pub blocked_by: Vec<String>,
    /// Advisory workspace-relative path prefixes; normalized and de-duplicated.
    pub write_scopes: Vec<String>,
}

/// The action of an `updateTask` (REFERENCE c.11.4). Wire (tool argument): `claim`,
/// `release`, `edit`, `set_dependencies`, `complete`, `reopen`, `reassign`, `delete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskAction {
    /// Any member takes a ready pending task: `in_progress`, owner = caller.
    Claim,
    /// Owner or Lead gives an `in_progress` task back: `pending`, no owner.
    Release,
    /// Owner or Lead replaces subject, description and/or write scopes.
    Edit,
    /// Owner or Lead replaces `blockedBy`.
    SetDependencies,
    /// Owner or Lead finishes an `in_progress` task: `completed`, owner kept.
    Complete,
    /// Owner or Lead reopens a `completed` task: `pending`, no owner.
    Reopen,
    /// Lead assigns (`in_progress`, owner = assignee) or unassigns (`pending`, no owner).
    Reassign,
    /// Owner or Lead turns the task into a tombstone.
    Delete,
}

impl TaskAction {
    /// Every action, in REFERENCE c.11.4 order.
    pub const ALL: [TaskAction; 8] = [
        TaskAction::Claim,
        TaskAction::Release,
        TaskAction::Edit,
        TaskAction::SetDependencies,
        TaskAction::Complete,
        TaskAction::Reopen,
        TaskAction::Reassign,
        TaskAction::Delete,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskAction::Claim => "claim",
            TaskAction::Release => "release",
            TaskAction::Edit => "edit",
            TaskAction::SetDependencies => "set_dependencies",
            TaskAction::Complete => "complete",
            TaskAction::Reopen => "reopen",
            TaskAction::Reassign => "reassign",
            TaskAction::Delete => "delete",
        }
    }
}

impl FromStr for TaskAction {
    type Err = TeamError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskAction::ALL
            .into_iter()
            .find(|action| action.as_str() == s)
            .ok_or_else(|| TeamError::invalid_argument(format!("unknown task action {s:?}")))
    }
}

/// `updateTask` (REFERENCE c.11.4): one compare-and-set action on one task. Fields an action
/// does not use are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateTask {
    /// The task.
    pub task_id: String,
    /// Must equal the task's current revision.
    pub expected_revision: u64,
    /// What to do.
    pub action: TaskAction,
    /// `edit`: the new subject.
    pub subject: Option<String>,
    /// `edit`: the new description.
    pub description: Option<String>,
    /// `set_dependencies`: the whole new blocker list (required).
    pub blocked_by: Option<Vec<String>>,
    /// `edit`: the new write scopes.
    pub write_scopes: Option<Vec<String>>,
    /// `reassign`: the assignee's name (`lead` or an active member); absent or blank
    /// unassigns.
    pub owner: Option<String>,
}

impl UpdateTask {
    /// An update with only the common fields set.
    pub fn new(task_id: impl Into<String>, expected_revision: u64, action: TaskAction) -> Self {
        Self {
            task_id: task_id.into(),
            expected_revision,
            action,
            subject: None,
            description: None,
            blocked_by: None,
            write_scopes: None,
            owner: None,
        }
    }
}

impl TeamState {
    /// Decides `createTask` (REFERENCE c.11.3). Checks, in order: membership; non-deleted
    /// count < `maxTasks`; the id `task-<nextTaskNumber>` is free; subject; description;
    /// blockers (c.11.5); write scopes; the graph check. Returns the `team/task` event with
    /// revision 1, status `pending` and no owner.
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER`, `TEAM_TASK_LIMIT`, `TEAM_INVALID_ARGUMENT`,
    /// `TEAM_TASK_DEPENDENCY_CYCLE`, `TEAM_TASK_NOT_FOUND`, `TEAM_INVALID_WRITE_SCOPE`.
    pub fn decide_create_task(
        &self,
        caller: &Caller,
        request: &CreateTask,
        limits: &TeamLimits,
    ) -> Result<TeamEvent, TeamError> {
        self.require_member(caller)?;
        if self.live_task_count() as u64 >= limits.max_tasks {
            return Err(TeamError::TaskLimit {
                message: format!(
                    "the Team already has the maximum of {} tasks; delete finished ones first",
                    limits.max_tasks
                ),
            });
        }
        let id = TaskId::numbered(self.next_task_number())?;
        if self.task_by_id(&id).is_some() {
            return Err(TeamError::TaskLimit {
                message: format!("task id space is exhausted ({id} already exists)"),
            });
        }
        let subject = required_text(&request.subject, "subject", SHORT_TEXT_MAX)?;
        let description = required_text(&request.description, "description", TASK_DESCRIPTION_MAX)?;
        let blocked_by = self.command_blockers(&id, &request.blocked_by)?;
        let write_scopes = normalize_write_scopes(&request.write_scopes)?;
        let snapshot = TaskSnapshot {
            id,
            revision: Revision::FIRST,
            subject,
            description,
            status: TaskStatus::Pending,
            owner_id: None,
            blocked_by,
            write_scopes,
        };
        self.finish_task(None, snapshot)
    }

    /// Decides `updateTask` (REFERENCE c.11.4). Common prefix, in order: membership; unknown
    /// task → `TEAM_TASK_NOT_FOUND`; `expected_revision` ≠ current →
    /// `TEAM_TASK_STALE_REVISION` (before the deleted check); tombstone →
    /// `TEAM_TASK_DELETED`. Then the action's authority and preconditions in the documented
    /// order, revision + 1 and the graph check. Returns the new `team/task` snapshot event.
    ///
    /// Authority: `claim` any member; `reassign` the Lead only (`TEAM_LEAD_REQUIRED`); every
    /// other action the Lead or the current owner (`TEAM_TASK_UNAUTHORIZED`).
    ///
    /// `reassign` with an assignee requires every blocker to be completed (it may take an
    /// `in_progress` task from another owner), so readiness there ignores the task's own
    /// status.
    ///
    /// # Errors
    /// Any board code of REFERENCE c.16.
    pub fn decide_update_task(
        &self,
        caller: &Caller,
        request: &UpdateTask,
    ) -> Result<TeamEvent, TeamError> {
        self.require_member(caller)?;
        let current = self.updatable_task(request)?;
        let revision = current
            .revision
            .next()
            .ok_or_else(|| TeamError::TaskLimit {
                message: format!("task {} has exhausted its revision space", current.id),
            })?;
        let mut next = TaskSnapshot {
            revision,
            ..current.clone()
        };
        let check = ActionCheck {
            caller,
            current,
            action: request.action,
        };
        match request.action {
            TaskAction::Claim => self.claim(caller, current, &mut next)?,
            TaskAction::Release => {
                check.authorized()?;
                check.from(TaskStatus::InProgress)?;
                next.status = TaskStatus::Pending;
                next.owner_id = None;
            }
            TaskAction::Edit => {
                check.authorized()?;
                edit(request, &mut next)?;
            }
            TaskAction::SetDependencies => {
                check.authorized()?;
                let Some(blocked_by) = &request.blocked_by else {
                    return Err(TeamError::invalid_argument(
                        "set_dependencies needs blocked_by (the whole new list)",
                    ));
                };
                next.blocked_by = self.command_blockers(&current.id, blocked_by)?;
            }
            TaskAction::Complete => {
                check.authorized()?;
                check.from(TaskStatus::InProgress)?;
                next.status = TaskStatus::Completed;
            }
            TaskAction::Reopen => {
                check.authorized()?;
                check.from(TaskStatus::Completed)?;
                next.status = TaskStatus::Pending;
                next.owner_id = None;
            }
            TaskAction::Reassign => self.reassign(&check, request, &mut next)?,
            TaskAction::Delete => {
                check.authorized()?;
                if let Some(dependent) = self.dependents_of(&current.id).next() {
                    return Err(TeamError::TaskHasDependents {
                        id: current.id.to_string(),
                        dependent: dependent.id.to_string(),
                    });
                }
                next.status = TaskStatus::Deleted;
            }
        }
        self.finish_task(Some(current), next)
    }

    /// The common prefix of an update (REFERENCE c.11.4): the task exists, `expected_revision`
    /// is its current revision (checked before the deleted check), and it is no tombstone.
    fn updatable_task(&self, request: &UpdateTask) -> Result<&TaskSnapshot, TeamError> {
        let current = self
            .task(&request.task_id)
            .ok_or_else(|| TeamError::task_not_found(&request.task_id))?;
        if request.expected_revision != current.revision.get() {
            return Err(TeamError::TaskStaleRevision {
                id: current.id.to_string(),
                expected: request.expected_revision,
                current: current.revision.get(),
            });
        }
        if current.status == TaskStatus::Deleted {
            return Err(TeamError::TaskDeleted {
                id: current.id.to_string(),
            });
        }
        Ok(current)
    }

    /// `claim`: any member takes an unowned (or its own) pending task whose blockers are all
    /// completed.
    fn claim(
        &self,
        caller: &Caller,
        current: &TaskSnapshot,
        next: &mut TaskSnapshot,
    ) -> Result<(), TeamError> {
        if let Some(owner) = &current.owner_id
            && owner != caller.id()
        {
            return Err(TeamError::TaskAlreadyClaimed {
                id: current.id.to_string(),
                owner: self
                    .name_of(owner)
                    .map_or_else(|| owner.to_string(), str::to_owned),
            });
        }
        if current.status != TaskStatus::Pending {
            return Err(TeamError::TaskBlocked {
                message: format!(
                    "task {} cannot be claimed while it is {}",
                    current.id, current.status
                ),
            });
        }
        if !self.blockers_completed(current) {
            return Err(self.blocked_error(current));
        }
        next.status = TaskStatus::InProgress;
        next.owner_id = Some(caller.id().clone());
        Ok(())
    }

    /// `reassign` (Lead only): no assignee unassigns; an assignee (`lead` or an active member)
    /// takes the pending or in-progress task once its blockers are all completed.
    fn reassign(
        &self,
        check: &ActionCheck<'_>,
        request: &UpdateTask,
        next: &mut TaskSnapshot,
    ) -> Result<(), TeamError> {
        if !check.caller.is_lead() {
            return Err(TeamError::LeadRequired {
                action: "reassign tasks".to_owned(),
            });
        }
        let current = check.current;
        if !matches!(current.status, TaskStatus::Pending | TaskStatus::InProgress) {
            return Err(check.invalid_transition());
        }
        let assignee = request.owner.as_deref().map(js_trim).unwrap_or_default();
        if assignee.is_empty() {
            next.status = TaskStatus::Pending;
            next.owner_id = None;
            return Ok(());
        }
        if !self.blockers_completed(current) {
            return Err(self.blocked_error(current));
        }
        let owner = if assignee == LEAD_NAME {
            self.id().lead_id().clone()
        } else {
            self.member_named(assignee)
                .filter(|m| m.phase == MemberPhase::Active)
                .map(|m| m.id.clone())
                .ok_or_else(|| TeamError::MemberNotFound {
                    name: assignee.to_owned(),
                })?
        };
        next.status = TaskStatus::InProgress;
        next.owner_id = Some(owner);
        Ok(())
    }

    /// The graph check and the event, shared by create and update.
    fn finish_task(
        &self,
        current: Option<&TaskSnapshot>,
        snapshot: TaskSnapshot,
    ) -> Result<TeamEvent, TeamError> {
        let index = current.and_then(|c| self.task_index_of(&c.id));
        self.check_graph(index, &snapshot)
            .map_err(|violation| violation.to_team_error())?;
        Ok(TeamEvent {
            team_id: self.id().clone(),
            record: TeamRecord::Task(snapshot),
        })
    }

    fn blocked_error(&self, task: &TaskSnapshot) -> TeamError {
        let unfinished: Vec<&str> = task
            .blocked_by
            .iter()
            .filter(|b| {
                self.task_by_id(b)
                    .is_none_or(|t| t.status != TaskStatus::Completed)
            })
            .map(TaskId::as_str)
            .collect();
        TeamError::TaskBlocked {
            message: format!(
                "task {} is not ready: blocked by unfinished {}",
                task.id,
                unfinished.join(", ")
            ),
        }
    }

    /// The command-level blocker check of REFERENCE c.11.5, per element in list order:
    /// the task's own id → `TEAM_TASK_DEPENDENCY_CYCLE`; a repeat → `TEAM_INVALID_ARGUMENT`;
    /// unknown or deleted → `TEAM_TASK_NOT_FOUND`.
    fn command_blockers(&self, own: &TaskId, raw: &[String]) -> Result<Vec<TaskId>, TeamError> {
        let mut out: Vec<TaskId> = Vec::with_capacity(raw.len());
        for (position, blocker) in raw.iter().enumerate() {
            if blocker == own.as_str() {
                return Err(TeamError::TaskDependencyCycle {
                    message: format!("task {own} cannot block itself"),
                });
            }
            if raw[..position].contains(blocker) {
                return Err(TeamError::invalid_argument(format!(
                    "blocked_by repeats task {blocker:?}"
                )));
            }
            let found = self
                .task(blocker)
                .filter(|task| task.status != TaskStatus::Deleted)
                .ok_or_else(|| TeamError::TaskNotFound {
                    message: format!("blocker task {blocker:?} not found or deleted"),
                })?;
            out.push(found.id.clone());
        }
        Ok(out)
    }
}

/// The authority and status checks an update action shares.
struct ActionCheck<'a> {
    caller: &'a Caller,
    current: &'a TaskSnapshot,
    action: TaskAction,
}

impl ActionCheck<'_> {
    /// The Lead or the task's current owner (every action but `claim` and `reassign`).
    fn authorized(&self) -> Result<(), TeamError> {
        if self.caller.is_lead() || self.current.owner_id.as_ref() == Some(self.caller.id()) {
            Ok(())
        } else {
            Err(TeamError::TaskUnauthorized {
                id: self.current.id.to_string(),
                action: self.action.as_str().to_owned(),
            })
        }
    }

    /// The action applies to a task in `status` only.
    fn from(&self, status: TaskStatus) -> Result<(), TeamError> {
        if self.current.status == status {
            Ok(())
        } else {
            Err(self.invalid_transition())
        }
    }

    fn invalid_transition(&self) -> TeamError {
        TeamError::TaskInvalidTransition {
            id: self.current.id.to_string(),
            action: self.action.as_str().to_owned(),
            status: self.current.status.as_str().to_owned(),
        }
    }
}

/// `edit`: replaces the given fields (at least one of subject, description, write scopes).
fn edit(request: &UpdateTask, next: &mut TaskSnapshot) -> Result<(), TeamError> {
    if request.subject.is_none() && request.description.is_none() && request.write_scopes.is_none()
    {
        return Err(TeamError::invalid_argument(
            "edit needs at least one of subject, description or write_scopes",
        ));
    }
    if let Some(subject) = &request.subject {
        next.subject = required_text(subject, "subject", SHORT_TEXT_MAX)?;
    }
    if let Some(description) = &request.description {
        next.description = required_text(description, "description", TASK_DESCRIPTION_MAX)?;
    }
    if let Some(scopes) = &request.write_scopes {
        next.write_scopes = normalize_write_scopes(scopes)?;
    }
    Ok(())
}
