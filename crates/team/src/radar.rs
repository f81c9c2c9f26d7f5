//! The write radar: which files two members changed within the same window of work (a
//! Troupe addition beside REFERENCE c.11.1's write-scope warnings; advisory only, like write
//! scopes — DESIGN decision 7: nothing is refused or locked).
//!
//! **Window of work.** A task's window is each span during which it is `in_progress` with
//! one owner: it opens when a `claim` or `reassign` makes the task `in_progress` (or gives
//! it a new owner) and closes when the task leaves `in_progress` (`complete`, `release`,
//! `reassign` to nobody, `delete`) or changes owner; a task still in progress has an open
//! window. Both ends count (times are the Lead log's event times, epoch ms).
//!
//! **Conflict.** Two members changed the same file within one window, and one of them is
//! the window's owner: while the owner was working on the task, someone else changed a file
//! the owner changed too (before or after, inside the window). The same member changing a
//! file twice is never a conflict; a change outside every window of its file's other
//! changers is not compared.
//!
//! **Changes** are what members' logs record (`troupe_session::changes`): a `write`/`edit`
//! exactly ([`WriteRadar::exact`]); a `bash` command by comparing the workspace before and
//! after it ([`WriteRadar::scanned`]). A scanned change is dropped when another member's
//! exact change of that file fell inside the command's span (from its `tool/call` to its
//! `tool/result`): the command saw that member's write, not one of its own.
//!
//! Pure: the caller folds the logs and passes times in.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use troupe_protocol::SessionId;

use crate::ids::TaskId;
use crate::record::{TaskSnapshot, TaskStatus};
use crate::state::TeamState;

/// Two or more members changed `path` within the same window of work (see the module docs).
///
/// Wire shape (camelCase): `{"path","members":["<name>",…],"tasks":["task-N",…]}`:
/// `members` are Team names (`lead` first, then roster order; a raw session id when not on
/// the roster), `tasks` the tasks whose windows the changes fell in (creation order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriteConflict {
    /// The file, workspace-relative.
    pub path: String,
    /// Every member whose change is part of the conflict.
    pub members: Vec<String>,
    /// The tasks whose windows hold the conflicting changes.
    pub tasks: Vec<TaskId>,
}

/// One task's `in_progress` span with one owner.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Window {
    task: TaskId,
    owner: SessionId,
    start: u64,
    /// `None` while the task is still in progress with this owner.
    end: Option<u64>,
}

impl Window {
    fn holds(&self, at: u64) -> bool {
        at >= self.start && self.end.is_none_or(|end| at <= end)
    }
}

/// One member's change of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Change {
    member: SessionId,
    at: u64,
    /// For a scanned (`bash`) change: when the command started.
    since: Option<u64>,
}

/// The incremental write radar (see the module docs): feed it every task snapshot of the
/// Lead log ([`WriteRadar::task`]) and every member's changes, then ask
/// [`WriteRadar::conflicts`]. The order of calls does not matter.
#[derive(Debug, Clone, Default)]
pub struct WriteRadar {
    windows: Vec<Window>,
    /// The window each task has open.
    open: HashMap<TaskId, usize>,
    /// Every change, by path.
    changes: BTreeMap<String, Vec<Change>>,
}

impl WriteRadar {
    /// An empty radar.
    pub fn new() -> Self {
        Self::default()
    }

    /// A task record of the Lead log, appended at `time` (epoch ms): opens, closes or moves
    /// the task's window. Feed snapshots of one task in log order.
    pub fn task(&mut self, time: u64, task: &TaskSnapshot) {
        let open = self.open.get(&task.id).copied();
        let owner = match (&task.status, &task.owner_id) {
            (TaskStatus::InProgress, Some(owner)) => Some(owner),
            _ => None,
        };
        if let Some(i) = open {
            if owner == Some(&self.windows[i].owner) {
                return;
            }
            self.windows[i].end = Some(time);
            self.open.remove(&task.id);
        }
        if let Some(owner) = owner {
            self.open.insert(task.id.clone(), self.windows.len());
            self.windows.push(Window {
                task: task.id.clone(),
                owner: owner.clone(),
                start: time,
                end: None,
            });
        }
    }

    /// `member` changed `path` exactly (a completed `write`/`edit`) at `at` (epoch ms).
    pub fn exact(&mut self, member: &SessionId, path: &str, at: u64) {
        self.push(member, path, at, None);
    }

    /// `member`'s command that ran from `since` to `at` (epoch ms) changed `path`, as the
    /// comparison of the workspace before and after it found.
    pub fn scanned(&mut self, member: &SessionId, path: &str, since: u64, at: u64) {
        self.push(member, path, at, Some(since));
    }

    fn push(&mut self, member: &SessionId, path: &str, at: u64, since: Option<u64>) {
        self.changes
            .entry(path.to_owned())
            .or_default()
            .push(Change {
                member: member.clone(),
                at,
                since,
            });
    }

    /// Every conflict (see the module docs), by path; names and task order from `state`.
    pub fn conflicts(&self, state: &TeamState) -> Vec<WriteConflict> {
        let mut found = Vec::new();
        for (path, changes) in &self.changes {
            let kept: Vec<&Change> = changes
                .iter()
                .filter(|c| match c.since {
                    None => true,
                    Some(since) => !changes.iter().any(|o| {
                        o.since.is_none() && o.member != c.member && o.at >= since && o.at <= c.at
                    }),
                })
                .collect();
            let mut members: Vec<&SessionId> = Vec::new();
            let mut tasks: Vec<&TaskId> = Vec::new();
            for window in &self.windows {
                let inside: Vec<&SessionId> = kept
                    .iter()
                    .filter(|c| window.holds(c.at))
                    .map(|c| &c.member)
                    .collect();
                if !inside.contains(&&window.owner) || inside.iter().all(|m| **m == window.owner) {
                    continue;
                }
                for member in inside {
                    if !members.contains(&member) {
                        members.push(member);
                    }
                }
                if !tasks.contains(&&window.task) {
                    tasks.push(&window.task);
                }
            }
            if members.is_empty() {
                continue;
            }
            let rank = |id: &SessionId| {
                if id == state.id().lead_id() {
                    0
                } else {
                    state
                        .members()
                        .iter()
                        .position(|m| &m.id == id)
                        .map_or(usize::MAX, |i| i + 1)
                }
            };
            members.sort_by_key(|id| (rank(id), (*id).clone()));
            let task_rank = |id: &TaskId| state.tasks().iter().position(|t| &t.id == id);
            tasks.sort_by_key(|id| (task_rank(id), (*id).clone()));
            found.push(WriteConflict {
                path: path.clone(),
                members: members
                    .into_iter()
                    .map(|id| {
                        state
                            .name_of(id)
                            .map_or_else(|| id.to_string(), str::to_owned)
                    })
                    .collect(),
                tasks: tasks.into_iter().cloned().collect(),
            });
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Revision, TeamId};

    fn id(name: &str) -> SessionId {
        SessionId::new(name).expect("id")
    }

    fn task(n: u64, status: TaskStatus, owner: Option<&str>) -> TaskSnapshot {
        TaskSnapshot {
            id: TaskId::parse(format!("task-{n}")).expect("task id"),
            revision: Revision::FIRST,
            subject: "s".into(),
            description: "d".into(),
            status,
            owner_id: owner.map(id),
            blocked_by: Vec::new(),
            write_scopes: Vec::new(),
        }
    }

    fn state() -> TeamState {
        TeamState::new(TeamId::new(id("lead-1")))
    }

    /// task-1 in progress for `a` from 10 to 20.
    fn radar() -> WriteRadar {
        let mut radar = WriteRadar::new();
        radar.task(5, &task(1, TaskStatus::Pending, None));
        radar.task(10, &task(1, TaskStatus::InProgress, Some("a")));
        radar.task(20, &task(1, TaskStatus::Completed, Some("a")));
        radar
    }

    #[test]
    fn two_members_changing_one_file_in_a_window_conflict() {
        let mut radar = radar();
        radar.exact(&id("a"), "src/x.rs", 12);
        radar.exact(&id("b"), "src/x.rs", 15);
        assert_eq!(
            radar.conflicts(&state()),
            [WriteConflict {
                path: "src/x.rs".into(),
                // Not on this roster: raw ids, sorted.
                members: vec!["a".into(), "b".into()],
                tasks: vec![TaskId::parse("task-1").expect("id")],
            }]
        );
        // The Lead is named `lead`, first.
        radar.exact(&id("lead-1"), "src/x.rs", 20);
        assert_eq!(radar.conflicts(&state())[0].members, ["lead", "a", "b"]);
    }

    #[test]
    fn the_same_member_twice_different_files_or_outside_the_window_do_not() {
        let mut same = radar();
        same.exact(&id("a"), "x", 11);
        same.exact(&id("a"), "x", 12);
        assert!(same.conflicts(&state()).is_empty());

        let mut different = radar();
        different.exact(&id("a"), "x", 11);
        different.exact(&id("b"), "y", 12);
        assert!(different.conflicts(&state()).is_empty());

        let mut outside = radar();
        outside.exact(&id("a"), "x", 11);
        outside.exact(&id("b"), "x", 21);
        outside.exact(&id("b"), "x", 9);
        assert!(outside.conflicts(&state()).is_empty());

        // Neither is the window's owner: not compared.
        let mut others = radar();
        others.exact(&id("b"), "x", 11);
        others.exact(&id("c"), "x", 12);
        assert!(others.conflicts(&state()).is_empty());
    }

    #[test]
    fn a_reassign_moves_the_window_and_an_open_window_holds_later_changes() {
        let mut radar = WriteRadar::new();
        radar.task(10, &task(1, TaskStatus::InProgress, Some("a")));
        radar.task(20, &task(1, TaskStatus::InProgress, Some("b")));
        radar.exact(&id("a"), "x", 15);
        radar.exact(&id("b"), "x", 25);
        // a's change is in a's window, b's in b's: no window holds both.
        assert!(radar.conflicts(&state()).is_empty());
        radar.exact(&id("c"), "x", 1_000);
        assert_eq!(radar.conflicts(&state())[0].members, ["b", "c"]);
    }

    #[test]
    fn a_command_that_only_saw_another_members_write_is_no_change_of_its_own() {
        let mut radar = radar();
        radar.scanned(&id("a"), "x", 11, 14);
        radar.exact(&id("b"), "x", 12);
        assert!(radar.conflicts(&state()).is_empty());
        // After the command, b's write is b's own: a's command changed the file too.
        let mut after = super::tests::radar();
        after.scanned(&id("a"), "x", 11, 12);
        after.exact(&id("b"), "x", 13);
        assert_eq!(after.conflicts(&state())[0].members, ["a", "b"]);
    }
}
