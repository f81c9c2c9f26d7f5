//! The Team's task board (REFERENCE c.11): create and compare-and-set update through the
//! serializer, reads of the folded board. The rules are the team crate's decisions; this file
//! runs them inside the serializer and commits their records.

use std::sync::Arc;

use troupe_protocol::event_types as ty;
use troupe_team::{
    CreateTask, TaskListQuery, TaskPage, TaskView, TeamEvent, TeamRecord, TeamState, UpdateTask,
};

use super::journal::{Effect, Member, TeamJournal};
use super::op::{CallOrigin, LogError, TeamOpError};
use super::stall::StallWatch;
use crate::control::ChildControl;
use crate::radar::RadarTail;

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

/// The board's reads: the Team's journal, the runtime's children (which owners are resident)
/// and the stall threshold.
pub(super) struct BoardRead<'a> {
    pub(super) journal: &'a TeamJournal,
    pub(super) control: &'a dyn ChildControl,
    pub(super) stall: &'a StallWatch,
    /// The write radar kept between lists (read from where the last list left each log).
    pub(super) radar: &'a Arc<RadarTail>,
}

/// `team_task_get` (REFERENCE c.11.2): tombstones included; a stalled task carries
/// `stalled`.
///
/// # Errors
/// `TEAM_TASK_NOT_FOUND`, `TEAM_NOT_MEMBER`.
pub(super) async fn get(
    read: BoardRead<'_>,
    agent: Member<'_>,
    id: &str,
) -> Result<TaskView, TeamOpError> {
    let state = read.journal.enter().await;
    let caller = read.journal.caller(&state, agent)?;
    let check = read.stall.check(&state, read.control, read.journal.store());
    Ok(state.get_task_checked(&caller, id, Some(&check))?)
}

/// `team_task_list` (REFERENCE d.4.2): stalled tasks carry `stalled`, and the Lead's list
/// carries `stallNotice` for those it was not told of yet; with the write radar's
/// `writeConflicts` (a Troupe addition, advisory: files two members changed within the same
/// window of work, from the members' stored logs — exactly [`crate::write_conflicts`], each
/// log read from where the Team's last list left it: [`RadarTail`]). The logs are read after
/// the serializer is left (on a blocking thread, from a copy of the state), so a long read
/// never holds up another Team operation; the conflicts are those of the logs as flushed
/// then.
///
/// # Errors
/// `TEAM_INVALID_ARGUMENT` for a bad cursor or limit, `TEAM_NOT_MEMBER`.
pub(super) async fn list(
    read: BoardRead<'_>,
    agent: Member<'_>,
    query: &TaskListQuery,
) -> Result<TaskPage, TeamOpError> {
    let (mut page, state) = {
        let state = read.journal.enter().await;
        let caller = read.journal.caller(&state, agent)?;
        let check = read.stall.check(&state, read.control, read.journal.store());
        let mut page = state.list_tasks_checked(&caller, query, Some(&check))?;
        if let Member::Resident(lead) = agent
            && lead.id() == read.journal.lead().id()
        {
            read.stall.tell_lead(lead, &mut page);
        }
        (page, state.clone())
    };
    let store = read.journal.store().clone();
    let radar = Arc::clone(read.radar);
    page.write_conflicts =
        tokio::task::spawn_blocking(move || radar.write_conflicts(&store, &state))
            .await
            .unwrap_or_default();
    Ok(page)
}
