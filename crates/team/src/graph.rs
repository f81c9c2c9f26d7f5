//! Task dependency graph violations (REFERENCE c.11.5).

use std::fmt;

use crate::error::TeamError;

/// Which graph rule a task snapshot breaks (REFERENCE c.11.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GraphViolationKind {
    /// A task lists itself in `blockedBy` (the original's `cycle` class).
    SelfBlock,
    /// A task lists the same blocker twice (`duplicate`).
    DuplicateBlocker,
    /// A non-deleted task names a blocker that is unknown or deleted (`missing`).
    MissingBlocker,
    /// The non-deleted tasks' `blockedBy` edges form a cycle (`cycle`).
    Cycle,
}

/// A task graph that the candidate snapshot would make invalid. Used both by replay (as a
/// plain [`crate::FoldError::TaskGraph`]) and by board commands (mapped to a typed
/// [`TeamError`] with [`GraphViolation::to_team_error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphViolation {
    /// Which rule.
    pub kind: GraphViolationKind,
    /// The task whose edge is bad.
    pub task: String,
    /// The blocker named by that edge.
    pub blocker: String,
}

impl fmt::Display for GraphViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let GraphViolation {
            kind,
            task,
            blocker,
        } = self;
        match kind {
            GraphViolationKind::SelfBlock => write!(f, "task {task:?} cannot block itself"),
            GraphViolationKind::DuplicateBlocker => {
                write!(f, "task {task:?} repeats blocker {blocker:?}")
            }
            GraphViolationKind::MissingBlocker => write!(
                f,
                "blocker task {blocker:?} of task {task:?} is missing or deleted"
            ),
            GraphViolationKind::Cycle => write!(
                f,
                "dependency cycle: task {task:?} is blocked by {blocker:?}, which already depends on it"
            ),
        }
    }
}

impl GraphViolation {
    /// The command-level code of REFERENCE c.11.5: missing → `TEAM_TASK_NOT_FOUND`, duplicate
    /// → `TEAM_INVALID_ARGUMENT`, self-block and cycle → `TEAM_TASK_DEPENDENCY_CYCLE`.
    pub fn to_team_error(&self) -> TeamError {
        let message = self.to_string();
        match self.kind {
            GraphViolationKind::SelfBlock | GraphViolationKind::Cycle => {
                TeamError::TaskDependencyCycle { message }
            }
            GraphViolationKind::DuplicateBlocker => TeamError::InvalidArgument { message },
            GraphViolationKind::MissingBlocker => TeamError::TaskNotFound { message },
        }
    }
}
