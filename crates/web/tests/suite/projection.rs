//! The pure Team projection (REFERENCE f): what changes the view and what does not.

use troupe_protocol::{Event, Seq};
use troupe_web::TeamProjection;

use super::*;

fn stored(seq: u64, draft: EventDraft) -> Event {
    draft.into_event(Seq(seq), T0)
}

#[test]
fn only_roster_board_and_status_changes_produce_a_view() {
    let mut projection = TeamProjection::new(sid(LEAD));
    assert!(projection.take_view().is_some(), "the first view");
    assert!(projection.take_view().is_none());
    let events = [
        (member(ALPHA, "alpha", "provisioning", None), true),
        (member(ALPHA, "alpha", "active", None), true),
        (queued("team-message-1", LEAD, "lead", ALPHA), false),
        (delivered("team-message-1", ALPHA), false),
        (
            EventDraft::new("step/start", json!({"turn": 1, "step": 1})),
            false,
        ),
        (task("task-1", 1, "pending", None, &[], &[]), true),
        (turn_start(1), true),
        (turn_end(1), true),
    ];
    for (seq, (draft, changes)) in events.into_iter().enumerate() {
        let kind = draft.kind.clone();
        projection.apply_lead(&stored(seq as u64, draft));
        assert_eq!(projection.take_view().is_some(), changes, "{kind}");
    }
    assert_eq!(projection.last_lead_seq(), Some(Seq(7)));
}

#[test]
fn the_first_error_freezes_the_last_valid_state_with_a_failure() {
    let mut projection = TeamProjection::new(sid(LEAD));
    projection.apply_lead(&stored(0, task("task-1", 1, "pending", None, &[], &[])));
    let valid = projection.view();
    projection.apply_lead(&stored(1, task("task-9", 2, "pending", None, &[], &[])));
    let failed = projection.take_view().unwrap();
    let failure = failed.failure.clone().unwrap();
    assert!(failure.starts_with("seq 1 (team/task): "), "{failure}");
    assert_eq!(failed.tasks, valid.tasks);
    assert_eq!(failed.members, valid.members);
    // Terminal: later events, valid or not, change nothing.
    projection.apply_lead(&stored(2, task("task-2", 1, "pending", None, &[], &[])));
    projection.apply_member(&sid(ALPHA), &stored(0, turn_start(1)));
    projection.fail("another problem".to_owned());
    assert!(projection.take_view().is_none());
    assert_eq!(projection.view(), failed);
}

#[test]
fn a_turn_left_open_by_a_process_that_is_gone_is_not_running() {
    let mut projection = TeamProjection::new(sid(LEAD));
    projection.apply_lead(&stored(0, member(ALPHA, "alpha", "provisioning", None)));
    projection.apply_lead(&stored(1, member(ALPHA, "alpha", "active", None)));
    projection.apply_member(&sid(ALPHA), &stored(0, turn_start(1)));
    let status =
        |p: &TeamProjection| serde_json::to_value(&p.view().members[1]).unwrap()["status"].clone();
    // Without a lock table, the log alone decides.
    assert_eq!(status(&projection), "running");
    projection.set_resident(&sid(ALPHA), Some(true));
    assert_eq!(status(&projection), "running");
    projection.set_resident(&sid(ALPHA), Some(false));
    assert_eq!(status(&projection), "inactive");
    projection.apply_member(&sid(ALPHA), &stored(1, turn_end(1)));
    projection.set_resident(&sid(ALPHA), None);
    assert_eq!(status(&projection), "inactive");
    projection.set_resident(&sid(ALPHA), Some(true));
    assert_eq!(status(&projection), "idle");
}

#[test]
fn a_log_that_stops_folding_inside_an_open_turn_is_running_only_while_a_process_holds_it() {
    let mut projection = TeamProjection::new(sid(LEAD));
    projection.apply_lead(&stored(0, turn_start(1)));
    projection.apply_lead(&stored(1, task("task-1", 2, "pending", None, &[], &[])));
    assert!(projection.failure().is_some());
    let lead =
        |p: &TeamProjection| serde_json::to_value(&p.view().members[0]).unwrap()["status"].clone();
    // The turn the damage froze is open; nobody holds the file (a finished or crashed run).
    projection.set_resident(&sid(LEAD), Some(false));
    assert_eq!(lead(&projection), "inactive");
    assert!(
        projection.take_view().is_some(),
        "the status change is shown"
    );
    projection.set_resident(&sid(LEAD), Some(true));
    assert_eq!(lead(&projection), "running");
}

/// An `agent/config` of `name` running `model` (`openai:<model>`), its own when `own`.
fn config_with_model(name: &str, depth: u32, model: &str, own: bool) -> EventDraft {
    let mut draft = config(name, depth);
    draft.data["model"]["model"] = json!(model);
    if own {
        draft.data["ownModel"] = json!(true);
    }
    draft
}

/// The panel shows the model each member runs: a teammate with a model of its own
/// (`ownModel`) shows it, live or not; one without runs the session's model, the Lead's —
/// also after a resume recorded a new one for the Lead.
#[test]
fn a_teammate_with_its_own_model_shows_it_and_the_others_the_leads() {
    let mut projection = TeamProjection::new(sid(LEAD));
    projection.apply_lead(&stored(0, config_with_model("lead", 0, "big", false)));
    projection.apply_lead(&stored(1, member(ALPHA, "alpha", "provisioning", None)));
    projection.apply_lead(&stored(2, member(ALPHA, "alpha", "active", None)));
    projection.apply_lead(&stored(3, member(BETA, "beta", "provisioning", None)));
    projection.apply_lead(&stored(4, member(BETA, "beta", "active", None)));
    assert_eq!(projection.failure(), None);
    projection.apply_member(
        &sid(ALPHA),
        &stored(0, config_with_model("alpha", 1, "small", true)),
    );
    projection.apply_member(
        &sid(BETA),
        &stored(0, config_with_model("beta", 1, "big", false)),
    );
    let models = |p: &TeamProjection| -> Vec<Value> {
        p.view()
            .members
            .iter()
            .map(|row| serde_json::to_value(row).unwrap()["model"].clone())
            .collect()
    };
    assert_eq!(
        models(&projection),
        [
            json!("openai:big"),
            json!("openai:small"),
            json!("openai:big")
        ]
    );
    // Live (an open turn) or not, the same.
    projection.apply_member(&sid(ALPHA), &stored(1, turn_start(1)));
    assert_eq!(models(&projection)[1], "openai:small");
    // A resume records a new model for the Lead: beta follows it, alpha keeps its own.
    projection.take_view();
    projection.apply_lead(&stored(5, config_with_model("lead", 0, "bigger", false)));
    assert!(
        projection.take_view().is_some(),
        "a model change is a change"
    );
    assert_eq!(
        models(&projection),
        [
            json!("openai:bigger"),
            json!("openai:small"),
            json!("openai:bigger")
        ]
    );
}

/// Stalled owners on the board: the task view's `stalled` follows the owner's residency, its
/// last event and "now" (set by the hub), without `idleMs` (the view must not change with
/// every tick: the panel counts); time alone republishes only when the stall changes.
#[test]
fn a_task_of_a_quiet_or_gone_owner_is_marked_stalled_as_time_passes() {
    const MINUTE: u64 = 60_000;
    let mut projection =
        TeamProjection::new(sid(LEAD)).with_stall_after(troupe_team::StallAfter::default());
    projection.apply_lead(&stored(0, member(ALPHA, "alpha", "provisioning", None)));
    projection.apply_lead(&stored(1, member(ALPHA, "alpha", "active", None)));
    projection.apply_lead(&stored(2, task("task-1", 1, "pending", None, &[], &[])));
    projection.apply_lead(&stored(
        3,
        task("task-1", 2, "in_progress", Some(ALPHA), &[], &[]),
    ));
    // alpha is in a turn, its file held: resident; its last event is at T0.
    projection.apply_member(&sid(ALPHA), &stored(0, turn_start(1)));
    projection.set_resident(&sid(ALPHA), Some(true));
    let stalled =
        |p: &TeamProjection| serde_json::to_value(&p.view().tasks[0]).unwrap()["stalled"].clone();
    projection.set_now(T0 + 9 * MINUTE);
    assert_eq!(stalled(&projection), Value::Null);
    let _ = projection.take_view();
    projection.set_now(T0 + 10 * MINUTE);
    let view = projection
        .take_view()
        .expect("time can stall a resident owner");
    assert_eq!(
        serde_json::to_value(&view.tasks[0]).unwrap()["stalled"],
        json!({"reason": "no_activity", "since": T0})
    );
    // Later ticks give the same view (the hub publishes nothing new).
    projection.set_now(T0 + 15 * MINUTE);
    assert_eq!(projection.take_view(), Some(view));
    // Its process is gone with no wakeup waiting: inactive, at once.
    projection.set_resident(&sid(ALPHA), Some(false));
    assert_eq!(
        stalled(&projection),
        json!({"reason": "inactive", "since": T0})
    );
    // A wakeup queued for it: it is about to run, not stalled.
    let mut wake = queued("team-message-1", LEAD, "lead", ALPHA);
    wake.data["message"]["delivery"] = json!("wakeup");
    projection.apply_lead(&stored(4, wake));
    assert_eq!(stalled(&projection), Value::Null);
}

/// A completed `write` (its call with the recorded effect, then its result) of `path`.
fn wrote(call: &str, path: &str) -> [EventDraft; 2] {
    [
        EventDraft::new(
            "tool/call",
            json!({"turn": 1, "step": 1, "callId": call, "name": "write", "arguments": {},
                   "effect": {"path": path, "preImage": null,
                              "postImage": format!("sha256:{}", "0".repeat(64)), "result": {}}}),
        ),
        EventDraft::new(
            "tool/result",
            json!({"turn": 1, "step": 1, "callId": call, "name": "write", "isError": false,
                   "content": "{}"}),
        ),
    ]
}

#[test]
fn two_members_writing_one_file_while_a_task_is_in_progress_is_a_write_conflict() {
    let mut projection = TeamProjection::new(sid(LEAD));
    for (seq, draft) in [
        member(ALPHA, "alpha", "provisioning", None),
        member(ALPHA, "alpha", "active", None),
        member(BETA, "beta", "provisioning", None),
        member(BETA, "beta", "active", None),
        task("task-1", 1, "pending", None, &[], &[]),
        task("task-1", 2, "in_progress", Some(ALPHA), &[], &[]),
    ]
    .into_iter()
    .enumerate()
    {
        projection.apply_lead(&stored(seq as u64, draft));
    }
    // beta's log has a seeded prefix of 2 events (a fork's copy of the Lead's history): a
    // write there is not beta's.
    projection.set_seed_len(&sid(BETA), 2);
    for (seq, draft) in wrote("seeded", "x.txt").into_iter().enumerate() {
        projection.apply_member(&sid(BETA), &stored(seq as u64, draft));
    }
    for (seq, draft) in wrote("a1", "x.txt").into_iter().enumerate() {
        projection.apply_member(&sid(ALPHA), &stored(seq as u64, draft));
    }
    assert!(projection.view().write_conflicts.is_empty(), "alpha alone");
    let _ = projection.take_view();
    for (seq, draft) in wrote("b1", "x.txt").into_iter().enumerate() {
        projection.apply_member(&sid(BETA), &stored(2 + seq as u64, draft));
    }
    let view = projection.take_view().expect("a change publishes a view");
    assert_eq!(
        serde_json::to_value(&view).unwrap()["writeConflicts"],
        json!([{"path": "x.txt", "members": ["alpha", "beta"], "tasks": ["task-1"]}])
    );
}
