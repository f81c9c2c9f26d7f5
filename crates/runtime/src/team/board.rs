//! The Team's task board (REFERENCE c.11): create and compare-and-set update through the
//! serializer, reads of the folded board. The rules are the team crate's decisions; this file
//! runs them inside the serializer and commits their records.

use troupe_protocol::event_types as ty;
use troupe_team::{
    CreateTask, TaskListQuery, TaskPage, TaskView, TeamEvent, TeamRecord, TeamState, UpdateTask,
};

use super::journal::{Effect, Member, TeamJournal};
use super::op::{CallOrigin, LogError, TeamOpError};

/// `team_task_create` (REFERENCE c.11.3); the record is linked to the tool call `origin`,
/// with the result text.
///
/// # Errors
/// `TEAM_TASK_LIMIT`, `TEAM_INVALID_ARGUMENT`, `TEAM_TASK_NOT_FOUND`,
/// `TEAM_TASK_DEPENDENCY_CYCLE`, `TEAM_INVALID_WRITE_SCOPE`, `TEAM_NOT_MEMBER`.
pub(super) async fn create(
    journal: &TeamJournal,
    agent: Member<'_>,
    request: &CreateTask,
    origin: Option<&CallOrigin>,
) -> Result<TaskView, TeamOpError> {
    let mut state = journal.enter().await;
    let caller = journal.caller(&state, agent)?;
    let event = state.decide_create_task(&caller, request, journal.limits())?;
    commit_task(journal, &mut state, &event, origin).await
}

/// `team_task_update` (REFERENCE c.11.4): one compare-and-set action; the record is linked
/// to the tool call `origin`, with the result text.
///
/// # Errors
/// Every code of c.11.4 (`TEAM_TASK_STALE_REVISION`, `TEAM_TASK_ALREADY_CLAIMED`, …).
pub(super) async fn update(
    journal: &TeamJournal,
    agent: Member<'_>,
    request: &UpdateTask,
    origin: Option<&CallOrigin>,
) -> Result<TaskView, TeamOpError> {
    let mut state = journal.enter().await;
    let caller = journal.caller(&state, agent)?;
    let event = state.decide_update_task(&caller, request)?;
    commit_task(journal, &mut state, &event, origin).await
}

/// Commits a task record and returns the view a mutation returns: the pre-append state plus
/// the new snapshot (REFERENCE c.11.1) — also the linked call's result text.
async fn commit_task(
    journal: &TeamJournal,
    state: &mut TeamState,
    event: &TeamEvent,
    origin: Option<&CallOrigin>,
) -> Result<TaskView, TeamOpError> {
    let TeamRecord::Task(task) = &event.record else {
        return Err(LogError::Decision {
            expected: ty::TEAM_TASK,
        }
        .into());
    };
    let view = state.task_view_of(task);
    let effect = origin.map(|origin| Effect {
        origin,
        result: serde_json::to_string(&view).ok(),
    });
    journal.commit(state, event, effect).await?;
    Ok(view)
}

/// `team_task_get` (REFERENCE c.11.2): tombstones included.
///
/// # Errors
/// `TEAM_TASK_NOT_FOUND`, `TEAM_NOT_MEMBER`.
pub(super) async fn get(
    journal: &TeamJournal,
    agent: Member<'_>,
    id: &str,
) -> Result<TaskView, TeamOpError> {
    let state = journal.enter().await;
    let caller = journal.caller(&state, agent)?;
    Ok(state.get_task(&caller, id)?)
}

/// `team_task_list` (REFERENCE d.4.2).
///
/// # Errors
/// `TEAM_INVALID_ARGUMENT` for a bad cursor or limit, `TEAM_NOT_MEMBER`.
pub(super) async fn list(
    journal: &TeamJournal,
    agent: Member<'_>,
    query: &TaskListQuery,
) -> Result<TaskPage, TeamOpError> {
    let state = journal.enter().await;
    let caller = journal.caller(&state, agent)?;
    Ok(state.list_tasks(&caller, query)?)
}
