//! Property: the incremental graph check of `TeamState::apply` accepts and refuses exactly
//! what the literal whole-graph check of REFERENCE c.4 / c.11.5 does (re-checking every task
//! and running a full cycle search on every event).

use proptest::prelude::*;
use serde_json::json;
use troupe_team::{FoldError, GraphViolationKind, TaskStatus, TeamState};

use super::support::*;

const IDS: [&str; 6] = ["task-1", "task-2", "task-3", "task-4", "task-5", "missing"];
const STATUSES: [TaskStatus; 4] = [
    TaskStatus::Pending,
    TaskStatus::InProgress,
    TaskStatus::Completed,
    TaskStatus::Deleted,
];

#[derive(Debug, Clone, PartialEq)]
struct NaiveTask {
    id: String,
    revision: u64,
    status: TaskStatus,
    blocked_by: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Refusal {
    RevisionStart,
    RevisionGap,
    Graph(GraphViolationKind, Option<(String, String)>),
}

/// REFERENCE c.4's task rule with the whole-graph check, written as literally as possible.
fn naive_apply(tasks: &mut Vec<NaiveTask>, candidate: NaiveTask) -> Result<(), Refusal> {
    let position = tasks.iter().position(|t| t.id == candidate.id);
    match position {
        None if candidate.revision != 1 => return Err(Refusal::RevisionStart),
        Some(p) if candidate.revision != tasks[p].revision + 1 => {
            return Err(Refusal::RevisionGap);
        }
        _ => {}
    }
    let mut all = tasks.clone();
    match position {
        Some(p) => all[p] = candidate,
        None => all.push(candidate),
    }
    let live = |id: &str| {
        all.iter()
            .any(|t| t.id == id && t.status != TaskStatus::Deleted)
    };
    for task in all.iter().filter(|t| t.status != TaskStatus::Deleted) {
        for (k, blocker) in task.blocked_by.iter().enumerate() {
            let edge = Some((task.id.clone(), blocker.clone()));
            if *blocker == task.id {
                return Err(Refusal::Graph(GraphViolationKind::SelfBlock, edge));
            }
            if task.blocked_by[..k].contains(blocker) {
                return Err(Refusal::Graph(GraphViolationKind::DuplicateBlocker, edge));
            }
            if !live(blocker) {
                return Err(Refusal::Graph(GraphViolationKind::MissingBlocker, edge));
            }
        }
    }
    // Full DFS cycle search (white/grey/black) over the non-deleted tasks.
    fn visit(all: &[NaiveTask], node: usize, color: &mut Vec<u8>) -> bool {
        color[node] = 1;
        for blocker in &all[node].blocked_by {
            if let Some(next) = all
                .iter()
                .position(|t| t.id == *blocker && t.status != TaskStatus::Deleted)
                && (color[next] == 1 || (color[next] == 0 && visit(all, next, color)))
            {
                return true;
            }
        }
        color[node] = 2;
        false
    }
    let mut color = vec![0u8; all.len()];
    for node in 0..all.len() {
        if all[node].status != TaskStatus::Deleted
            && color[node] == 0
            && visit(&all, node, &mut color)
        {
            return Err(Refusal::Graph(GraphViolationKind::Cycle, None));
        }
    }
    *tasks = all;
    Ok(())
}

fn refusal(error: &FoldError) -> Refusal {
    match error {
        FoldError::TaskMustBeginAtRevisionOne { .. } => Refusal::RevisionStart,
        FoldError::TaskRevisionNotContiguous { .. } => Refusal::RevisionGap,
        FoldError::TaskGraph(v) if v.kind == GraphViolationKind::Cycle => {
            Refusal::Graph(v.kind, None)
        }
        FoldError::TaskGraph(v) => {
            Refusal::Graph(v.kind, Some((v.task.clone(), v.blocker.clone())))
        }
        other => panic!("unexpected fold error {other}"),
    }
}

/// `(task, revision offset, status, blockers)`; offset 0 is the valid next revision.
type Step = (usize, i8, usize, Vec<usize>);

fn step() -> impl Strategy<Value = Step> {
    (
        0..5usize,
        prop_oneof![8 => Just(0i8), 1 => Just(1i8), 1 => Just(-1i8)],
        0..4usize,
        prop::collection::vec(prop_oneof![12 => 0..5usize, 1 => Just(5usize)], 0..3),
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 400,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn incremental_graph_check_equals_whole_graph_check(steps in prop::collection::vec(step(), 1..60)) {
        let mut naive: Vec<NaiveTask> = Vec::new();
        let mut state = TeamState::new(team());
        for (task_index, offset, status, blockers) in steps {
            let id = IDS[task_index];
            let current = naive.iter().find(|t| t.id == id).map_or(0, |t| t.revision);
            let revision = (current + 1).saturating_add_signed(i64::from(offset)).max(1);
            let candidate = NaiveTask {
                id: id.to_owned(),
                revision,
                status: STATUSES[status],
                blocked_by: blockers.iter().map(|&b| IDS[b].to_owned()).collect(),
            };
            let data = json!({"version": 1, "teamId": ROOT, "task": {
                "id": id, "revision": revision, "subject": "s", "description": "d",
                "status": candidate.status, "blockedBy": candidate.blocked_by, "writeScopes": []}});
            let before = state.clone();
            let expected = naive_apply(&mut naive, candidate);
            let checked = state.check_candidate("team/task", &data);
            let got = state.apply_data("team/task", &data);
            match (&expected, &got) {
                (Ok(()), Ok(())) => prop_assert!(checked.is_ok()),
                (Err(want), Err(error)) => {
                    prop_assert_eq!(want, &refusal(error));
                    prop_assert!(checked.is_err());
                    prop_assert_eq!(&state, &before);
                }
                _ => prop_assert!(false, "naive {:?} vs incremental {:?}", expected, got),
            }
            state.verify_indexes().map_err(TestCaseError::fail)?;
            let stored: Vec<(String, u64, TaskStatus, Vec<String>)> = state
                .tasks()
                .iter()
                .map(|t| (t.id.to_string(), t.revision.get(), t.status,
                          t.blocked_by.iter().map(|b| b.to_string()).collect()))
                .collect();
            let modelled: Vec<(String, u64, TaskStatus, Vec<String>)> = naive
                .iter()
                .map(|t| (t.id.clone(), t.revision, t.status, t.blocked_by.clone()))
                .collect();
            prop_assert_eq!(stored, modelled);
        }
    }
}
