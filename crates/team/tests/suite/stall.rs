//! Stalled owners (issue 17 item 2): the derived `stalled` field of task views, checked
//! through one data-driven helper over hand-written Lead logs.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use troupe_team::{
    OwnerActivity, ShowOptions, Stall, StallAfter, StallCheck, StallReason, TaskListQuery,
    TeamState, stall_notice,
};

use super::support::*;

const ALICE: &str = "alice-id";

/// A task `id` created (revision 1, pending), then at revision 2 in `status`, owned by
/// `owner` (no owner for `None`).
fn owned(id: &str, status: &str, owner: Option<&str>) -> Vec<(&'static str, Value)> {
    let mut task = json!({"id": id, "revision": 2, "subject": format!("subject of {id}"),
        "description": "do it", "status": status, "blockedBy": [], "writeScopes": []});
    if let Some(owner) = owner {
        task["ownerId"] = json!(owner);
    }
    vec![
        super::support::task(id, 1, "pending", &[]),
        (
            "team/task",
            json!({"version": 1, "teamId": ROOT, "task": task}),
        ),
    ]
}

fn wakeup(id: &str, target: &str) -> (&'static str, Value) {
    let (kind, mut data) = queued(id, target);
    data["message"]["delivery"] = json!("wakeup");
    (kind, data)
}

/// A check at `now` = 1 000 000 ms with a 10-minute threshold and alice's `activity`.
fn check_with(activity: Option<OwnerActivity>) -> StallCheck {
    let mut owners = BTreeMap::new();
    if let Some(activity) = activity {
        owners.insert(sid(ALICE), activity);
    }
    StallCheck {
        now_ms: 1_000_000,
        after: StallAfter::default(),
        owners,
    }
}

fn resident(last_event_ms: u64) -> Option<OwnerActivity> {
    Some(OwnerActivity {
        resident: true,
        last_event_ms: Some(last_event_ms),
    })
}

fn inactive(last_event_ms: u64) -> Option<OwnerActivity> {
    Some(OwnerActivity {
        resident: false,
        last_event_ms: Some(last_event_ms),
    })
}

/// Folds `log` (alice is the roster's first member, in `phase`) and checks task-1's `stalled`.
fn check(
    phase: &str,
    log: Vec<(&str, Value)>,
    activity: Option<OwnerActivity>,
    expected: Option<Stall>,
) {
    let mut events = vec![
        member(ALICE, "alice", "provisioning"),
        member(ALICE, "alice", phase),
    ];
    events.extend(log);
    let state: TeamState = fold(events).unwrap();
    let check = check_with(activity);
    let view = state.task_view_checked(state.task("task-1").unwrap(), Some(&check));
    assert_eq!(view.stalled, expected, "{view:?}");
    // Without a check nothing is ever marked, and the wire view is the REFERENCE one.
    let plain = state.task_view_of(state.task("task-1").unwrap());
    assert_eq!(plain.stalled, None);
    assert!(
        serde_json::to_value(&plain)
            .unwrap()
            .get("stalled")
            .is_none()
    );
}

fn stall(reason: StallReason, since: u64) -> Option<Stall> {
    Some(Stall {
        reason,
        since: Some(since),
        idle_ms: Some(1_000_000 - since),
    })
}

#[test]
fn an_inactive_owner_without_wakeup_mail_is_stalled_at_once() {
    let claimed = owned("task-1", "in_progress", Some(ALICE));
    check(
        "active",
        claimed.clone(),
        inactive(999_000),
        stall(StallReason::Inactive, 999_000),
    );
    // Not known at all: not resident, last event unknown.
    check(
        "active",
        claimed.clone(),
        None,
        Some(Stall {
            reason: StallReason::Inactive,
            since: None,
            idle_ms: None,
        }),
    );
    // Quiet mail never starts a member: still stalled.
    let mut quiet = claimed.clone();
    quiet.push(queued("m1", ALICE));
    check(
        "active",
        quiet,
        inactive(999_000),
        stall(StallReason::Inactive, 999_000),
    );
    // A wakeup waiting for it will start it: not stalled.
    let mut woken = claimed.clone();
    woken.push(wakeup("m1", ALICE));
    check("active", woken.clone(), inactive(999_000), None);
    // Once that wakeup is delivered (and the owner is inactive again), it is stalled again.
    woken.push(delivered("m1", ALICE));
    check(
        "active",
        woken,
        inactive(999_000),
        stall(StallReason::Inactive, 999_000),
    );
}

#[test]
fn a_failed_owner_is_stalled() {
    check(
        "failed",
        owned("task-1", "in_progress", Some(ALICE)),
        inactive(5_000),
        stall(StallReason::Failed, 5_000),
    );
}

#[test]
fn a_resident_owner_is_stalled_only_from_the_threshold_on() {
    let claimed = owned("task-1", "in_progress", Some(ALICE));
    // 10 minutes exactly since its last event: stalled; one millisecond less: not.
    check(
        "active",
        claimed.clone(),
        resident(400_000),
        stall(StallReason::NoActivity, 400_000),
    );
    check("active", claimed.clone(), resident(400_001), None);
    check("active", claimed.clone(), resident(999_999), None);
    // A resident owner whose log cannot be read is never guessed stalled.
    check(
        "active",
        claimed,
        Some(OwnerActivity {
            resident: true,
            last_event_ms: None,
        }),
        None,
    );
}

#[test]
fn only_a_teammate_owned_task_in_progress_can_be_stalled() {
    for status in ["pending", "completed", "deleted"] {
        check(
            "active",
            owned("task-1", status, Some(ALICE)),
            inactive(1),
            None,
        );
    }
    check(
        "active",
        owned("task-1", "in_progress", Some(ROOT)),
        inactive(1),
        None,
    );
    check(
        "active",
        owned("task-1", "pending", None),
        inactive(1),
        None,
    );
    check(
        "active",
        owned("task-1", "in_progress", Some("stranger")),
        inactive(1),
        None,
    );
}

#[test]
fn a_threshold_is_never_zero() {
    assert_eq!(StallAfter::from_ms(0), None);
    assert_eq!(StallAfter::from_ms(1).map(StallAfter::ms), Some(1));
    assert_eq!(StallAfter::default().ms(), 600_000);
}

#[test]
fn reads_carry_the_field_and_the_notice_names_task_owner_reason_and_revision() {
    let mut log = vec![
        member(ALICE, "alice", "provisioning"),
        member(ALICE, "alice", "active"),
    ];
    log.extend(owned("task-1", "in_progress", Some(ALICE)));
    log.extend(owned("task-2", "pending", None));
    let state = fold(log).unwrap();
    let check = check_with(inactive(940_000));
    let lead = troupe_team::Caller::lead(&team());
    let page = state
        .list_tasks_checked(&lead, &TaskListQuery::default(), Some(&check))
        .unwrap();
    let wire = serde_json::to_value(&page).unwrap();
    assert_eq!(
        wire["tasks"][0]["stalled"],
        json!({"reason": "inactive", "since": 940_000, "idleMs": 60_000})
    );
    assert!(wire["tasks"][1].get("stalled").is_none());
    assert!(
        wire.get("stallNotice").is_none(),
        "the runtime sets the notice"
    );
    let got = state
        .get_task_checked(&lead, "task-1", Some(&check))
        .unwrap();
    assert_eq!(got.stalled.map(|s| s.reason), Some(StallReason::Inactive));
    let shown = state.show(&ShowOptions {
        stall: Some(check),
        ..ShowOptions::default()
    });
    assert_eq!(shown.tasks[0].stalled, page.tasks[0].stalled);
    assert_eq!(state.stall_candidates(), [sid(ALICE)]);

    let notice = stall_notice(&page.tasks.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!(
        notice,
        "task-1 (revision 2) is stalled: its owner alice is inactive and no followup_task \
         waits for it. Nothing is released automatically: wake the owner with followup_task, \
         or reassign the task with team_task_update (action reassign, the revision above)."
    );
    assert_eq!(stall_notice(&[&page.tasks[1]]), None);
}
