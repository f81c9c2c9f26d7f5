//! CASES §4.2 (shared task DAG, 67–97) as domain-level tests: every command goes through the
//! decision functions, the invariant check and `apply` (see [`Board`]).

use serde_json::json;
use troupe_team::{
    CreateTask, TaskAction, TaskListQuery, TaskStatus, TeamLimits, TeamState, UpdateTask,
};

use super::support::*;

fn ids(views: &[troupe_team::TaskView]) -> Vec<String> {
    views.iter().map(|v| v.id.to_string()).collect()
}

#[test]
fn c67_task_id_space_exhausted() {
    let mut board = Board::new();
    board.append_raw(task("task-9007199254740991", 1, "pending", &[]));
    let lead = board.lead();
    assert_code(board.create(&lead, &[], &[]), "TEAM_TASK_LIMIT");
}

#[test]
fn c68_c69_task_limit_and_tombstones() {
    let mut board = Board::with_limits(TeamLimits {
        max_tasks: 1,
        ..TeamLimits::default()
    });
    let lead = board.lead();
    let first = board.create(&lead, &[], &[]).unwrap();
    assert_eq!(first.id.as_str(), "task-1");
    assert_code(board.create(&lead, &[], &[]), "TEAM_TASK_LIMIT");
    // c69
    let deleted = board.act(&lead, "task-1", TaskAction::Delete).unwrap();
    assert_eq!(deleted.status, TaskStatus::Deleted);
    let second = board.create(&lead, &[], &[]).unwrap();
    assert_eq!(second.id.as_str(), "task-2");
    let tomb = board.state.get_task(&lead, "task-1").unwrap();
    assert_eq!(tomb.status, TaskStatus::Deleted);
    assert!(!tomb.ready);
    let page = board
        .state
        .list_tasks(&lead, &TaskListQuery::default())
        .unwrap();
    assert_eq!(ids(&page.tasks), ["task-2"]);
    assert_eq!(ids(&board.state.task_views(true)), ["task-1", "task-2"]);
}

/// c70–c76: two teammates sharing a dependent pair of tasks.
#[test]
fn c70_to_c76_alpha_and_beta() {
    let mut board = Board::new();
    let alpha = board.spawn("alpha");
    let beta = board.spawn("beta");
    // c70
    let t1 = board
        .create(&alpha, &[], &["src", "./src/", "src"])
        .unwrap();
    assert_eq!(t1.write_scopes, ["src"]);
    // c71
    let t2 = board.create(&beta, &["task-1"], &["src/feature"]).unwrap();
    assert_eq!(t2.id.as_str(), "task-2");
    assert!(!t2.ready);
    assert_code(
        board.act(&beta, "task-2", TaskAction::Claim),
        "TEAM_TASK_BLOCKED",
    );
    // c72
    let claimed = board
        .update(&alpha, &UpdateTask::new("task-1", 1, TaskAction::Claim))
        .unwrap();
    assert_eq!(claimed.status, TaskStatus::InProgress);
    assert_eq!(claimed.owner_name.as_deref(), Some("alpha"));
    assert_code(
        board.act(&beta, "task-1", TaskAction::Claim),
        "TEAM_TASK_ALREADY_CLAIMED",
    );
    // c73
    let seen = board.state.get_task(&beta, "task-2").unwrap();
    assert!(!seen.ready);
    assert_eq!(
        seen.write_scope_warnings,
        ["write scopes overlap with task-1"]
    );
    // c74
    let mut edit = UpdateTask::new("task-1", board.revision("task-1"), TaskAction::Edit);
    edit.subject = Some("beta's subject".to_owned());
    assert_code(board.update(&beta, &edit), "TEAM_TASK_UNAUTHORIZED");
    // c75
    assert_code(
        board.update(&alpha, &UpdateTask::new("task-1", 1, TaskAction::Complete)),
        "TEAM_TASK_STALE_REVISION",
    );
    let done = board.act(&alpha, "task-1", TaskAction::Complete).unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.revision, 3);
    // c76
    assert!(board.state.get_task(&beta, "task-2").unwrap().ready);
    board.act(&beta, "task-2", TaskAction::Claim).unwrap();
    let released = board.act(&beta, "task-2", TaskAction::Release).unwrap();
    assert_eq!(released.status, TaskStatus::Pending);
    assert!(released.ready);
    let wire = serde_json::to_value(&released).unwrap();
    assert!(wire.get("ownerName").is_none(), "{wire}");
    assert!(board.state.task("task-2").unwrap().owner_id.is_none());
}

#[test]
fn c77_to_c80_dependency_validation() {
    let mut board = Board::new();
    let lead = board.lead();
    // c77
    assert_code(
        board.create(&lead, &["missing"], &[]),
        "TEAM_TASK_NOT_FOUND",
    );
    board.create(&lead, &[], &[]).unwrap();
    board.create(&lead, &["task-1"], &[]).unwrap();
    let set = |board: &Board, blockers: &[&str]| {
        let mut request = UpdateTask::new(
            "task-1",
            board.revision("task-1"),
            TaskAction::SetDependencies,
        );
        request.blocked_by = Some(blockers.iter().map(|s| s.to_string()).collect());
        request
    };
    // c78
    let request = set(&board, &["task-2"]);
    assert_code(board.update(&lead, &request), "TEAM_TASK_DEPENDENCY_CYCLE");
    // c79
    let request = set(&board, &["task-1"]);
    assert_code(board.update(&lead, &request), "TEAM_TASK_DEPENDENCY_CYCLE");
    // c80
    let request = set(&board, &["task-2", "task-2"]);
    assert_code(board.update(&lead, &request), "TEAM_INVALID_ARGUMENT");
    // A valid replacement, and the deleted-blocker rule.
    board.create(&lead, &[], &[]).unwrap();
    let request = set(&board, &["task-3"]);
    let view = board.update(&lead, &request).unwrap();
    assert_eq!(view.blocked_by.len(), 1);
    let mut request = set(&board, &[]);
    request.task_id = "task-2".to_owned();
    request.expected_revision = board.revision("task-2");
    request.blocked_by = Some(vec![]);
    board.update(&lead, &request).unwrap();
    board.act(&lead, "task-2", TaskAction::Delete).unwrap();
    assert_code(board.create(&lead, &["task-2"], &[]), "TEAM_TASK_NOT_FOUND");
}

#[test]
fn longer_cycles_are_refused() {
    let mut board = Board::new();
    let lead = board.lead();
    board.create(&lead, &[], &[]).unwrap();
    board.create(&lead, &["task-1"], &[]).unwrap();
    board.create(&lead, &["task-2"], &[]).unwrap();
    board.create(&lead, &["task-3", "task-1"], &[]).unwrap();
    let mut request = UpdateTask::new("task-1", 1, TaskAction::SetDependencies);
    request.blocked_by = Some(vec!["task-4".to_owned()]);
    assert_code(board.update(&lead, &request), "TEAM_TASK_DEPENDENCY_CYCLE");
}

#[test]
fn c81_invalid_write_scopes() {
    let mut board = Board::new();
    let lead = board.lead();
    for scope in [
        "", ".", "..", "/root", "C:\\root", "C:root", "a//b", "a/../b", "./", "a/./b",
    ] {
        assert_code(
            board.create(&lead, &[], &[scope]),
            "TEAM_INVALID_WRITE_SCOPE",
        );
    }
    // `docs//` is valid: trailing slashes are removed before the segment check.
    let view = board
        .create(&lead, &[], &["./src/", "src\\lib", "docs//", "src"])
        .unwrap();
    assert_eq!(view.write_scopes, ["src", "src/lib", "docs"]);
}

#[test]
fn c82_text_limits_in_utf16_units() {
    let mut board = Board::new();
    let lead = board.lead();
    let check = |board: &mut Board, subject: &str, description: &str, ok: bool| {
        let request = CreateTask {
            subject: subject.to_owned(),
            description: description.to_owned(),
            ..CreateTask::default()
        };
        let result = board.create_with(&lead, &request);
        if ok {
            result.unwrap();
        } else {
            assert_code(result, "TEAM_INVALID_ARGUMENT");
        }
    };
    check(&mut board, " ", "d", false);
    check(&mut board, "s", "", false);
    check(&mut board, &"x".repeat(201), "d", false);
    check(&mut board, &"x".repeat(200), "d", true);
    // 100 astral characters are 200 UTF-16 units: accepted; 101 are 202: refused.
    check(&mut board, &"😀".repeat(100), "d", true);
    check(&mut board, &"😀".repeat(101), "d", false);
    // 200 two-byte characters are 200 units (not 400 bytes).
    check(&mut board, &"é".repeat(200), "d", true);
    check(&mut board, "s", &"d".repeat(16_384), true);
    check(&mut board, "s", &"d".repeat(16_385), false);
    // Trimmed text is stored.
    let view = board
        .create_with(
            &lead,
            &CreateTask {
                subject: "  padded\n".to_owned(),
                description: "\u{FEFF}body ".to_owned(),
                ..CreateTask::default()
            },
        )
        .unwrap();
    assert_eq!(
        (view.subject.as_str(), view.description.as_str()),
        ("padded", "body")
    );
}

#[test]
fn c83_c92_unknown_tasks() {
    let mut board = Board::new();
    let lead = board.lead();
    assert_code(
        board.state.get_task(&lead, "missing"),
        "TEAM_TASK_NOT_FOUND",
    );
    assert_code(
        board.update(
            &lead,
            &UpdateTask::new("missing-update", 1, TaskAction::Claim),
        ),
        "TEAM_TASK_NOT_FOUND",
    );
}

#[test]
fn c84_c85_c86_lead_preconditions() {
    let mut board = Board::new();
    let lead = board.lead();
    board.create(&lead, &[], &[]).unwrap();
    // c84
    for action in [
        TaskAction::Release,
        TaskAction::Complete,
        TaskAction::Reopen,
    ] {
        assert_code(
            board.act(&lead, "task-1", action),
            "TEAM_TASK_INVALID_TRANSITION",
        );
    }
    // c85
    assert_code(
        board.act(&lead, "task-1", TaskAction::Edit),
        "TEAM_INVALID_ARGUMENT",
    );
    assert_code(
        board.act(&lead, "task-1", TaskAction::SetDependencies),
        "TEAM_INVALID_ARGUMENT",
    );
    // c86
    board.create(&lead, &["task-1"], &[]).unwrap();
    assert_code(
        board.act(&lead, "task-1", TaskAction::Delete),
        "TEAM_TASK_HAS_DEPENDENTS",
    );
    // Nothing was appended by any refusal: two creations only.
    assert_eq!(board.log.len(), 2);
}

#[test]
fn stale_revision_is_checked_before_deleted() {
    let mut board = Board::new();
    let lead = board.lead();
    board.create(&lead, &[], &[]).unwrap();
    board.act(&lead, "task-1", TaskAction::Delete).unwrap();
    assert_code(
        board.update(&lead, &UpdateTask::new("task-1", 1, TaskAction::Edit)),
        "TEAM_TASK_STALE_REVISION",
    );
    assert_code(
        board.act(&lead, "task-1", TaskAction::Claim),
        "TEAM_TASK_DELETED",
    );
}

#[test]
fn c87_to_c91_owner_lifecycle() {
    let mut board = Board::new();
    let lead = board.lead();
    let owner = board.spawn("owner");
    board.create(&owner, &[], &[]).unwrap();
    // c87
    let mut reassign = UpdateTask::new("task-1", 1, TaskAction::Reassign);
    reassign.owner = Some("owner".to_owned());
    let view = board.update(&lead, &reassign).unwrap();
    assert_eq!(view.status, TaskStatus::InProgress);
    assert_eq!(view.owner_name.as_deref(), Some("owner"));
    // c88
    let mut again = reassign.clone();
    again.expected_revision = board.revision("task-1");
    assert_code(board.update(&owner, &again), "TEAM_LEAD_REQUIRED");
    // c89
    assert_eq!(
        board
            .act(&owner, "task-1", TaskAction::Complete)
            .unwrap()
            .status,
        TaskStatus::Completed
    );
    again.expected_revision = board.revision("task-1");
    assert_code(board.update(&lead, &again), "TEAM_TASK_INVALID_TRANSITION");
    // c90: the last owner is still authorized to reopen.
    let reopened = board.act(&owner, "task-1", TaskAction::Reopen).unwrap();
    assert_eq!(reopened.status, TaskStatus::Pending);
    assert!(reopened.owner_name.is_none());
    assert_eq!(
        board
            .act(&owner, "task-1", TaskAction::Claim)
            .unwrap()
            .status,
        TaskStatus::InProgress
    );
    let deleted = board.act(&owner, "task-1", TaskAction::Delete).unwrap();
    assert_eq!(deleted.status, TaskStatus::Deleted);
    assert_eq!(
        deleted.owner_name.as_deref(),
        Some("owner"),
        "tombstones keep the owner"
    );
    assert!(board.state.task_views(false).is_empty());
    // c91
    let mut edit = UpdateTask::new("task-1", board.revision("task-1"), TaskAction::Edit);
    edit.subject = Some("late".to_owned());
    assert_code(board.update(&owner, &edit), "TEAM_TASK_DELETED");
}

#[test]
fn unowned_tasks_are_lead_only_except_claim() {
    let mut board = Board::new();
    let worker = board.spawn("worker");
    board.create(&worker, &[], &[]).unwrap();
    let mut edit = UpdateTask::new("task-1", 1, TaskAction::Edit);
    edit.subject = Some("mine".to_owned());
    assert_code(board.update(&worker, &edit), "TEAM_TASK_UNAUTHORIZED");
    assert_code(
        board.act(&worker, "task-1", TaskAction::Delete),
        "TEAM_TASK_UNAUTHORIZED",
    );
    assert_code(
        board.act(&worker, "task-1", TaskAction::Release),
        "TEAM_TASK_UNAUTHORIZED",
    );
    // Claiming one's own in-progress task again is refused as not pending.
    board.act(&worker, "task-1", TaskAction::Claim).unwrap();
    assert_code(
        board.act(&worker, "task-1", TaskAction::Claim),
        "TEAM_TASK_BLOCKED",
    );
}

#[test]
fn c93_to_c96_reassign_and_edit() {
    let mut board = Board::new();
    let lead = board.lead();
    let editor = board.spawn("editor");
    board.create(&lead, &[], &["src"]).unwrap();
    board.create(&lead, &["task-1"], &[]).unwrap();
    let reassign = |board: &Board, owner: &str| {
        let mut request = UpdateTask::new("task-2", board.revision("task-2"), TaskAction::Reassign);
        request.owner = Some(owner.to_owned());
        request
    };
    // c93
    let request = reassign(&board, "editor");
    assert_code(board.update(&lead, &request), "TEAM_TASK_BLOCKED");
    // c94
    let claimed = board.act(&lead, "task-1", TaskAction::Claim).unwrap();
    assert_eq!(claimed.owner_name.as_deref(), Some("lead"));
    assert_eq!(
        board
            .act(&lead, "task-1", TaskAction::Complete)
            .unwrap()
            .status,
        TaskStatus::Completed
    );
    // Unknown and non-active assignees.
    let request = reassign(&board, "nobody");
    assert_code(board.update(&lead, &request), "TEAM_MEMBER_NOT_FOUND");
    // c95
    let request = reassign(&board, "editor");
    let view = board.update(&lead, &request).unwrap();
    assert_eq!(view.owner_name.as_deref(), Some("editor"));
    let mut edit = UpdateTask::new("task-2", board.revision("task-2"), TaskAction::Edit);
    edit.subject = Some("new subject".to_owned());
    board.update(&editor, &edit).unwrap();
    let mut edit = UpdateTask::new("task-2", board.revision("task-2"), TaskAction::Edit);
    edit.description = Some("new description".to_owned());
    board.update(&editor, &edit).unwrap();
    let mut edit = UpdateTask::new("task-2", board.revision("task-2"), TaskAction::Edit);
    edit.write_scopes = Some(vec!["src/nested".to_owned()]);
    let last = board.update(&editor, &edit).unwrap();
    assert_eq!(last.subject, "new subject");
    assert_eq!(last.description, "new description");
    assert_eq!(last.write_scopes, ["src/nested"]);
    assert_eq!(last.revision, 5);
    assert_eq!(last.status, TaskStatus::InProgress);
    // Reassigning an in-progress task to another owner overrides the owner.
    let request = reassign(&board, "lead");
    assert_eq!(
        board.update(&lead, &request).unwrap().owner_name.as_deref(),
        Some("lead")
    );
    // c96
    let request = reassign(&board, " ");
    let view = board.update(&lead, &request).unwrap();
    assert_eq!(view.status, TaskStatus::Pending);
    let wire = serde_json::to_value(&view).unwrap();
    assert!(wire.get("ownerName").is_none(), "{wire}");
}

#[test]
fn c97_overlap_warnings_only_against_other_in_progress_tasks() {
    let mut board = Board::new();
    let lead = board.lead();
    board.create(&lead, &[], &["src"]).unwrap();
    board.create(&lead, &[], &["src/nested"]).unwrap();
    board.create(&lead, &[], &["docs"]).unwrap();
    board.create(&lead, &[], &["src2"]).unwrap();
    for id in ["task-1", "task-2", "task-3", "task-4"] {
        board.act(&lead, id, TaskAction::Claim).unwrap();
    }
    let view = board.state.get_task(&lead, "task-1").unwrap();
    assert_eq!(
        view.write_scope_warnings,
        ["write scopes overlap with task-2"]
    );
    let view = board.state.get_task(&lead, "task-2").unwrap();
    assert_eq!(
        view.write_scope_warnings,
        ["write scopes overlap with task-1"]
    );
    // Warnings stop once the other task is no longer in progress.
    board.act(&lead, "task-2", TaskAction::Complete).unwrap();
    assert!(
        board
            .state
            .get_task(&lead, "task-1")
            .unwrap()
            .write_scope_warnings
            .is_empty()
    );
}

/// For people (`troupe team show`, the panel), an overlap sits on every task it concerns:
/// the task in progress and the pending one that would collide with it, never on a completed
/// task. (The c.11.1 field puts it on the pending task only, and after the hand-over on the
/// completed one.)
#[test]
fn scope_overlaps_sit_on_the_task_in_progress_and_the_pending_one() {
    let mut board = Board::new();
    let lead = board.lead();
    board
        .create(&lead, &[], &["wordstats/counting.py"])
        .unwrap();
    board.create(&lead, &[], &["wordstats"]).unwrap();
    board.create(&lead, &[], &["docs"]).unwrap();
    let overlaps = |board: &Board, id: &str| -> Vec<String> {
        let task = board.state.task(id).unwrap();
        board
            .state
            .scope_overlaps(task)
            .iter()
            .map(|o| format!("{} {}", o.task_id, o.status.as_str()))
            .collect()
    };
    // Nothing in progress: nothing collides yet.
    assert!(overlaps(&board, "task-1").is_empty());
    assert!(overlaps(&board, "task-2").is_empty());
    board.act(&lead, "task-1", TaskAction::Claim).unwrap();
    assert_eq!(overlaps(&board, "task-1"), ["task-2 pending"]);
    assert_eq!(overlaps(&board, "task-2"), ["task-1 in_progress"]);
    assert!(overlaps(&board, "task-3").is_empty());
    // The REFERENCE field only warns the pending task.
    let view = board.state.get_task(&lead, "task-1").unwrap();
    assert!(view.write_scope_warnings.is_empty());
    // task-1 done, task-2 in progress: no overlap is left (the c.11.1 field now warns the
    // completed task-1 about task-2).
    board.act(&lead, "task-1", TaskAction::Complete).unwrap();
    board.act(&lead, "task-2", TaskAction::Claim).unwrap();
    assert!(overlaps(&board, "task-1").is_empty());
    assert!(overlaps(&board, "task-2").is_empty());
    let view = board.state.get_task(&lead, "task-1").unwrap();
    assert_eq!(
        view.write_scope_warnings,
        ["write scopes overlap with task-2"]
    );
    // Two tasks in progress: both see each other.
    board
        .create(&lead, &[], &["wordstats/__init__.py"])
        .unwrap();
    board.act(&lead, "task-4", TaskAction::Claim).unwrap();
    assert_eq!(overlaps(&board, "task-2"), ["task-4 in_progress"]);
    assert_eq!(overlaps(&board, "task-4"), ["task-2 in_progress"]);
}

#[test]
fn task_view_wire_shape() {
    let mut board = Board::new();
    let lead = board.lead();
    board.create(&lead, &[], &["src"]).unwrap();
    let view = board.act(&lead, "task-1", TaskAction::Claim).unwrap();
    assert_eq!(
        serde_json::to_string(&view).unwrap(),
        concat!(
            r#"{"id":"task-1","revision":2,"subject":"a task","description":"what to do","#,
            r#""status":"in_progress","blockedBy":[],"writeScopes":["src"],"ownerName":"lead","#,
            r#""ready":false,"writeScopeWarnings":[]}"#
        ),
        "compact JSON in REFERENCE c.11.1 key order",
    );
}

#[test]
fn task_event_payload_is_exact() {
    let board = Board::new();
    let lead = board.lead();
    let decided = board
        .state
        .decide_create_task(
            &lead,
            &CreateTask {
                subject: "s".to_owned(),
                description: "d".to_owned(),
                ..CreateTask::default()
            },
            &board.limits,
        )
        .unwrap();
    let draft = decided.to_draft();
    assert_eq!(draft.kind, "team/task");
    assert!(!draft.ignorable, "Team events are required, not ignorable");
    assert_eq!(
        draft.data,
        json!({"version": 1, "teamId": ROOT, "task": {"id": "task-1", "revision": 1,
               "subject": "s", "description": "d", "status": "pending", "blockedBy": [],
               "writeScopes": []}})
    );
}

#[test]
fn task_list_filters_and_cursors() {
    let mut board = Board::new();
    let lead = board.lead();
    let worker = board.spawn("worker");
    for _ in 0..5 {
        board.create(&lead, &[], &[]).unwrap();
    }
    board.act(&worker, "task-2", TaskAction::Claim).unwrap();
    board.act(&lead, "task-4", TaskAction::Claim).unwrap();
    let list = |query: TaskListQuery| board.state.list_tasks(&lead, &query).unwrap();
    let page = list(TaskListQuery {
        limit: 2,
        ..TaskListQuery::default()
    });
    assert_eq!(ids(&page.tasks), ["task-1", "task-2"]);
    assert_eq!(page.next_cursor, Some(2));
    let page = list(TaskListQuery {
        cursor: 4,
        limit: 2,
        ..TaskListQuery::default()
    });
    assert_eq!(ids(&page.tasks), ["task-5"]);
    assert_eq!(page.next_cursor, None);
    let page = list(TaskListQuery {
        owner: Some("unowned".to_owned()),
        ..TaskListQuery::default()
    });
    assert_eq!(ids(&page.tasks), ["task-1", "task-3", "task-5"]);
    let page = list(TaskListQuery {
        owner: Some("worker".to_owned()),
        ..TaskListQuery::default()
    });
    assert_eq!(ids(&page.tasks), ["task-2"]);
    let page = list(TaskListQuery {
        status: Some(TaskStatus::InProgress),
        ready: Some(false),
        ..TaskListQuery::default()
    });
    assert_eq!(ids(&page.tasks), ["task-2", "task-4"]);
    let page = list(TaskListQuery {
        ready: Some(true),
        ..TaskListQuery::default()
    });
    assert_eq!(ids(&page.tasks), ["task-1", "task-3", "task-5"]);
    for limit in [0, 101] {
        assert_code(
            board.state.list_tasks(
                &lead,
                &TaskListQuery {
                    limit,
                    ..TaskListQuery::default()
                },
            ),
            "TEAM_INVALID_ARGUMENT",
        );
    }
}

#[test]
fn growing_history_keeps_lists_to_live_tasks() {
    let mut board = Board::with_limits(TeamLimits {
        max_tasks: 4,
        ..TeamLimits::default()
    });
    let lead = board.lead();
    for n in 1..=50 {
        board.create(&lead, &[], &[]).unwrap();
        let id = format!("task-{n}");
        board.act(&lead, &id, TaskAction::Delete).unwrap();
    }
    assert_eq!(board.state.tasks().len(), 50);
    assert_eq!(board.state.live_task_count(), 0);
    assert_eq!(board.state.next_task_number(), 51);
    let refolded = TeamState::fold(team(), &board.log).unwrap();
    assert_eq!(refolded, board.state);
}
