//! Stalled owners: a derived field of a task view, never stored (a Troupe addition to
//! REFERENCE c.11.1; DESIGN decision 7 holds — nothing is released automatically).
//!
//! A task `in_progress` is **stalled** when its owner (a teammate; a task the Lead owns never
//! is: the Lead is the one who acts on stalls) cannot be expected to move it:
//!
//! | reason | when |
//! |---|---|
//! | `failed` | the owner's roster phase is `failed` |
//! | `inactive` | the owner is not resident and no *wakeup* message (`followup_task`) waits for it in the Lead's mailbox — quiet mail never starts a member (REFERENCE c.10.3), so it does not count |
//! | `no_activity` | the owner is resident (running or idle) and the last event of its own log is at least [`StallAfter`] old |
//!
//! The caller passes what this crate cannot know — the time now, which owners are resident and
//! when each last wrote its log — in a [`StallCheck`]; the rule is [`TeamState::stall_of`].

use std::collections::BTreeMap;

use serde::Serialize;
use troupe_protocol::SessionId;

use crate::record::{Delivery, MemberPhase, TaskSnapshot, TaskStatus};
use crate::state::TeamState;

/// The default [`StallAfter`]: 10 minutes, in milliseconds.
pub const STALL_AFTER_DEFAULT_MS: u64 = 600_000;

/// How long a resident owner may go without an event in its log before its task is stalled
/// (`--stall-after`, config key `stall_after`). Milliseconds, never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StallAfter(u64);

impl StallAfter {
    /// `ms` milliseconds; `None` for 0 (a threshold of nothing would stall every task).
    pub fn from_ms(ms: u64) -> Option<Self> {
        (ms > 0).then_some(Self(ms))
    }

    /// The threshold in milliseconds (> 0).
    pub fn ms(self) -> u64 {
        self.0
    }
}

impl Default for StallAfter {
    fn default() -> Self {
        Self(STALL_AFTER_DEFAULT_MS)
    }
}

/// Why a task is stalled (see the module docs). Wire: `"failed"` | `"inactive"` |
/// `"no_activity"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StallReason {
    /// The owner's provisioning failed.
    Failed,
    /// The owner is not resident and no wakeup message waits for it.
    Inactive,
    /// The owner is resident but wrote nothing to its log for the threshold.
    NoActivity,
}

impl StallReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::Inactive => "inactive",
            Self::NoActivity => "no_activity",
        }
    }
}

/// The `stalled` field of a [`TaskView`](crate::TaskView).
///
/// Wire shape: `{"reason","since"?,"idleMs"?}` — `since` is the time of the owner's last
/// logged event (epoch ms; absent when its log could not be read), `idleMs` the time from
/// then to the check's "now" (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stall {
    /// Why.
    pub reason: StallReason,
    /// The owner's last logged event, epoch ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Milliseconds from `since` to now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
}

/// What the caller knows of one owner's activity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnerActivity {
    /// Whether the owner is resident (a live Agent, running or idle); `false` is `inactive`.
    pub resident: bool,
    /// The time of the last event of the owner's own log (epoch ms), when known.
    pub last_event_ms: Option<u64>,
}

/// The inputs of [`TeamState::stall_of`]: the time now, the threshold, and the activity of
/// owners (an owner missing from `owners` is taken as not resident, last event unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StallCheck {
    /// Now, epoch ms.
    pub now_ms: u64,
    /// The threshold for resident owners.
    pub after: StallAfter,
    /// Activity by owner session id.
    pub owners: BTreeMap<SessionId, OwnerActivity>,
}

impl TeamState {
    /// Whether `task` is stalled under `check` (see the module docs), and why. `None` for a
    /// task not `in_progress`, unowned, owned by the Lead or by an id not on the roster.
    pub fn stall_of(&self, task: &TaskSnapshot, check: &StallCheck) -> Option<Stall> {
        if task.status != TaskStatus::InProgress {
            return None;
        }
        let owner = task.owner_id.as_ref()?;
        if owner == self.id().lead_id() {
            return None;
        }
        let member = self.member(owner)?;
        let activity = check.owners.get(owner).copied().unwrap_or_default();
        let since = activity.last_event_ms;
        let idle_ms = since.map(|t| check.now_ms.saturating_sub(t));
        let stall = |reason| {
            Some(Stall {
                reason,
                since,
                idle_ms,
            })
        };
        if member.phase == MemberPhase::Failed {
            return stall(StallReason::Failed);
        }
        if !activity.resident {
            let woken = self
                .pending_messages_for(owner)
                .any(|m| m.delivery == Delivery::Wakeup);
            return if woken {
                None
            } else {
                stall(StallReason::Inactive)
            };
        }
        match idle_ms {
            Some(idle) if idle >= check.after.ms() => stall(StallReason::NoActivity),
            _ => None,
        }
    }

    /// The owners whose activity a [`StallCheck`] needs: the teammate owners of tasks in
    /// progress, each once, in task creation order.
    pub fn stall_candidates(&self) -> Vec<SessionId> {
        let mut owners: Vec<SessionId> = Vec::new();
        for task in self.in_progress_tasks() {
            if let Some(owner) = &task.owner_id
                && owner != self.id().lead_id()
                && self.member(owner).is_some()
                && !owners.contains(owner)
            {
                owners.push(owner.clone());
            }
        }
        owners
    }
}

/// The one-time notice the Lead's `team_task_list` carries (`stallNotice`) for the stalled
/// tasks in `views` it has not been told of: one sentence per task, then what the Lead can do.
/// Empty input gives `None`.
pub fn stall_notice(views: &[&crate::TaskView]) -> Option<String> {
    let mut parts = Vec::new();
    for view in views {
        let Some(stall) = view.stalled else { continue };
        let owner = view.owner_name.as_deref().unwrap_or("?");
        let why = match stall.reason {
            StallReason::Failed => format!("its owner {owner} failed"),
            StallReason::Inactive => {
                format!("its owner {owner} is inactive and no followup_task waits for it")
            }
            StallReason::NoActivity => format!(
                "its owner {owner} has not run a model call or a tool for {}",
                idle_text(stall.idle_ms.unwrap_or(0))
            ),
        };
        parts.push(format!(
            "{} (revision {}) is stalled: {why}.",
            view.id, view.revision
        ));
    }
    if parts.is_empty() {
        return None;
    }
    parts.push(
        "Nothing is released automatically: wake the owner with followup_task, or reassign the \
         task with team_task_update (action reassign, the revision above)."
            .to_owned(),
    );
    Some(parts.join(" "))
}

/// `idle_ms` as whole minutes (`11 min`), or seconds under a minute (`42 s`).
fn idle_text(idle_ms: u64) -> String {
    if idle_ms >= 60_000 {
        format!("{} min", idle_ms / 60_000)
    } else {
        format!("{} s", idle_ms / 1_000)
    }
}
