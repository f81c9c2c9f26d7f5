//! CASES §1 (`fold.spec.ts`): pure replay of a Lead log (REFERENCE c.4).

use serde_json::{Value, json};
use troupe_protocol::{ErrorCode, event_types};
use troupe_team::{Decoded, FoldError, TeamState, decode};

use super::support::*;

/// Folds `log` and asserts the outcome: `Ok(check)` runs `check` on the state, `Err(fragment)`
/// expects a fold error whose message contains `fragment`.
fn check(log: Vec<(&str, Value)>, expected: Result<&dyn Fn(&TeamState), &str>) {
    let folded = fold(log);
    match (folded, expected) {
        (Ok(state), Ok(check)) => {
            state.verify_indexes().unwrap();
            check(&state);
        }
        (Err(message), Err(fragment)) => {
            assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
        }
        (Ok(state), Err(fragment)) => panic!("expected error {fragment:?}, folded {state:?}"),
        (Err(message), Ok(_)) => panic!("unexpected fold error: {message}"),
    }
}

fn c1_log() -> Vec<(&'static str, Value)> {
    vec![
        member_in(ANCESTOR, "ancestor-worker", "worker-a", "provisioning"),
        ("turn/start", json!({"turn": 1})),
        member("worker-1", "worker-a", "provisioning"),
        member("worker-1", "worker-a", "active"),
        task("task-7", 1, "pending", &[]),
        queued("team-message-1", "worker-1"),
    ]
}

#[test]
fn c1_fold_skips_ancestor_records() {
    check(
        c1_log(),
        Ok(&|state| {
            assert_eq!(state.id().as_str(), ROOT);
            let names: Vec<&str> = state.members().iter().map(|m| m.name.as_str()).collect();
            assert_eq!(names, ["worker-a"]);
            assert_eq!(state.members()[0].id.as_str(), "worker-1");
            assert_eq!(state.tasks().len(), 1);
            assert_eq!(state.pending_messages().count(), 1);
        }),
    );
}

#[test]
fn c2_next_task_number_is_max_plus_one() {
    check(
        c1_log(),
        Ok(&|state| assert_eq!(state.next_task_number(), 8)),
    );
}

#[test]
fn c3_is_team_event() {
    assert!(event_types::is_team("team/member"));
    assert!(!event_types::is_team("turn/start"));
    assert_eq!(decode("turn/start", &json!({})).unwrap(), Decoded::NotTeam);
}

#[test]
fn c4_to_c21_fold_rejections() {
    type Case = (&'static str, Vec<(&'static str, Value)>, &'static str);
    let cases: Vec<Case> = vec![
        (
            "c4",
            vec![member("w1", "worker-a", "active")],
            "must begin provisioning",
        ),
        (
            "c5",
            vec![
                member("w1", "worker-a", "provisioning"),
                member("w1", "worker-b", "active"),
            ],
            "immutable identity",
        ),
        (
            "c6",
            vec![
                member("w1", "worker-a", "provisioning"),
                member("w1", "worker-a", "active"),
                member("w1", "worker-a", "failed"),
            ],
            "invalid active -> failed",
        ),
        (
            "c7",
            vec![
                member("a", "worker-a", "provisioning"),
                member("b", "worker-a", "provisioning"),
            ],
            "name \"worker-a\" reused",
        ),
        (
            "c8",
            vec![task("task-1", 2, "pending", &[])],
            "begin at revision 1",
        ),
        (
            "c9",
            vec![
                task("task-1", 1, "pending", &[]),
                task("task-1", 3, "pending", &[]),
            ],
            "revision is not contiguous",
        ),
        (
            "c10",
            vec![task("task-1", 1, "pending", &["missing"])],
            "blocker task \"missing\" of task \"task-1\" is missing or deleted",
        ),
        (
            "c11",
            vec![task("task-1", 1, "pending", &["task-1"])],
            "cannot block itself",
        ),
        (
            "c12",
            vec![
                task("task-1", 1, "pending", &[]),
                task("task-2", 1, "pending", &["task-1", "task-1"]),
            ],
            "repeats blocker",
        ),
        (
            "c13",
            vec![
                task("task-1", 1, "pending", &[]),
                task("task-2", 1, "pending", &["task-1"]),
                task("task-1", 2, "pending", &["task-2"]),
            ],
            "dependency cycle",
        ),
        (
            "c14",
            vec![
                task("task-1", 1, "pending", &[]),
                task("task-2", 1, "pending", &["task-1"]),
                task("task-1", 2, "deleted", &[]),
            ],
            "blocker task \"task-1\" of task \"task-2\" is missing or deleted",
        ),
        (
            "c16",
            vec![task("task-9007199254740992", 1, "pending", &[])],
            "persisted Agent Teams team/task payload is invalid",
        ),
        (
            "c18",
            vec![queued("m1", "w1"), queued("m1", "w1")],
            "queued twice",
        ),
        (
            "c19",
            vec![delivered("m1", "w1")],
            "delivered before queueing",
        ),
        (
            "c20",
            vec![queued("m1", "w1"), delivered("m1", "w2")],
            "target changed",
        ),
        (
            "c21",
            vec![
                queued("m1", "w1"),
                delivered("m1", "w1"),
                delivered("m1", "w1"),
            ],
            "delivered twice",
        ),
    ];
    for (case, log, fragment) in cases {
        let message = fold(log).expect_err(case);
        assert!(
            message.contains(fragment),
            "{case}: {message:?} lacks {fragment:?}"
        );
    }
}

#[test]
fn fold_errors_name_the_seq_and_have_a_code() {
    let err = TeamState::fold(
        team(),
        &events(vec![
            ("turn/start", json!({})),
            member("w1", "worker-a", "active"),
        ]),
    )
    .unwrap_err();
    assert_eq!(err.seq.get(), 1);
    assert_eq!(err.event_type, "team/member");
    assert_eq!(err.code(), "TEAM_LOG_INVALID");
    assert!(
        err.to_string().starts_with("event 1 (team/member): "),
        "{err}"
    );
}

#[test]
fn c15_non_numeric_task_id_keeps_next_number() {
    check(
        vec![task("external-task", 1, "pending", &[])],
        Ok(&|state| assert_eq!(state.next_task_number(), 1)),
    );
}

#[test]
fn c17_delivered_message_is_not_pending() {
    check(
        vec![queued("m1", "w1"), delivered("m1", "w1")],
        Ok(&|state| {
            assert_eq!(state.pending_messages().count(), 0);
            assert_eq!(state.pending_count_for(&sid("w1")), 0);
            assert_eq!(state.messages().len(), 1);
        }),
    );
}

#[test]
fn c22_malformed_current_version_payloads() {
    let mut extra_key = member("w1", "worker-a", "provisioning");
    extra_key.1["extra"] = json!(true);
    let mut numeric_team = task("task-1", 1, "pending", &[]);
    numeric_team.1["teamId"] = json!(5);
    let mut numeric_name = member("w1", "worker-a", "provisioning");
    numeric_name.1["member"]["name"] = json!(3);
    let mut numeric_blocker = task("task-1", 1, "pending", &[]);
    numeric_blocker.1["task"]["blockedBy"] = json!([1]);
    let cases = vec![
        ("member name is a number", vec![numeric_name], "team/member"),
        ("blockedBy has a number", vec![numeric_blocker], "team/task"),
        (
            "message text is a number",
            vec![queued_with(
                "m1",
                "w1",
                json!([{"type": "text", "text": 7}]),
            )],
            "team/message/queued",
        ),
        (
            "delivered targetId is a number",
            vec![queued("m1", "w1"), {
                let mut d = delivered("m1", "w1");
                d.1["targetId"] = json!(9);
                d
            }],
            "team/message/delivered",
        ),
        ("extra top-level key", vec![extra_key], "team/member"),
        ("teamId is a number", vec![numeric_team], "team/task"),
    ];
    for (case, log, kind) in cases {
        let message = fold(log).expect_err(case);
        let fragment = format!("persisted Agent Teams {kind} payload is invalid");
        assert!(message.contains(&fragment), "{case}: {message:?}");
    }
}

#[test]
fn strict_decoding_edge_cases() {
    let mut owner_null = task("task-1", 1, "pending", &[]);
    owner_null.1["task"]["ownerId"] = Value::Null;
    let mut bad_status = task("task-1", 1, "pending", &[]);
    bad_status.1["task"]["status"] = json!("done");
    let mut missing_scopes = task("task-1", 1, "pending", &[]);
    missing_scopes.1["task"]
        .as_object_mut()
        .unwrap()
        .remove("writeScopes");
    let mut float_version = task("task-1", 1, "pending", &[]);
    float_version.1["version"] = json!(1.5);
    let mut negative_version = task("task-1", 1, "pending", &[]);
    negative_version.1["version"] = json!(-1);
    let mut empty_team = task("task-1", 1, "pending", &[]);
    empty_team.1["teamId"] = json!("");
    let mut zero_revision = task("task-1", 1, "pending", &[]);
    zero_revision.1["task"]["revision"] = json!(0);
    for (case, entry) in [
        ("ownerId null", owner_null),
        ("unknown status", bad_status),
        ("missing writeScopes", missing_scopes),
        ("version 1.5", float_version),
        ("version -1", negative_version),
        ("empty teamId", empty_team),
        ("revision 0", zero_revision),
        ("payload not an object", ("team/task", json!([1]))),
    ] {
        let message = fold(vec![entry]).expect_err(case);
        assert!(message.contains("payload is invalid"), "{case}: {message}");
    }
}

#[test]
fn c23_unknown_plugin_block_is_kept_verbatim() {
    let block = json!({"type": "plugin/custom", "payload": {"value": 1}});
    check(
        vec![queued_with("m1", "w1", json!([block.clone()]))],
        Ok(&|state| {
            let pending: Vec<_> = state.pending_messages().collect();
            assert_eq!(pending[0].content, vec![block.clone()]);
        }),
    );
}

#[test]
fn c24_unsupported_version_for_this_team_leaves_state_empty() {
    let mut state = TeamState::new(team());
    let (kind, mut data) = task("task-1", 1, "pending", &[]);
    data["version"] = json!(2);
    let err = state.apply_data(kind, &data).unwrap_err();
    assert!(
        err.to_string()
            .contains("unsupported Agent Teams event version 2"),
        "{err}"
    );
    assert!(matches!(
        err,
        FoldError::UnsupportedVersion { version: 2, .. }
    ));
    assert_eq!(state, TeamState::new(team()));
    assert!(state.tasks().is_empty());
}

#[test]
fn c25_unsupported_version_of_an_ancestor_is_ignored() {
    let (kind, mut data) = task_in(ANCESTOR, "task-1", 1, "pending", &[]);
    data["version"] = json!(2);
    data["task"] = json!("anything: only the selector is read");
    check(
        vec![(kind, data)],
        Ok(&|state| assert_eq!(*state, TeamState::new(team()))),
    );
}

#[test]
fn c26_ancestor_v1_records_are_still_validated() {
    let (kind, mut data) = task_in(ANCESTOR, "task-1", 1, "pending", &[]);
    data["task"]["subject"] = json!(42);
    check(
        vec![(kind, data)],
        Err("persisted Agent Teams team/task payload is invalid"),
    );
}

#[test]
fn ancestor_v1_records_do_not_touch_state_even_when_inconsistent() {
    // Valid v1 shape but a rule violation for its own Team: skipped, not judged.
    check(
        vec![
            member_in(ANCESTOR, "w1", "worker-a", "active"),
            task_in(ANCESTOR, "task-5", 3, "pending", &["missing"]),
        ],
        Ok(&|state| {
            assert!(state.members().is_empty());
            assert_eq!(state.next_task_number(), 1);
        }),
    );
}

#[test]
fn the_largest_task_number_does_not_overflow() {
    check(
        vec![task("task-9007199254740991", 1, "pending", &[])],
        Ok(&|state| assert_eq!(state.next_task_number(), 9_007_199_254_740_991)),
    );
}

#[test]
fn fold_does_not_validate_status_or_owner_transitions() {
    // REFERENCE c.4: only revisions and the graph are checked on replay.
    let mut owned = task("task-1", 2, "completed", &[]);
    owned.1["task"]["ownerId"] = json!("someone");
    check(
        vec![
            task("task-1", 1, "pending", &[]),
            owned,
            task("task-1", 3, "deleted", &[]),
            task("task-1", 4, "in_progress", &[]),
        ],
        Ok(&|state| {
            assert_eq!(state.tasks()[0].revision.get(), 4);
            assert_eq!(state.live_task_count(), 1);
        }),
    );
}

#[test]
fn prefix_then_rest_equals_whole() {
    let log = events(vec![
        member("w1", "worker-a", "provisioning"),
        task("task-1", 1, "pending", &[]),
        task("task-2", 1, "pending", &["task-1"]),
        member("w1", "worker-a", "active"),
        queued("m1", "w1"),
        task("task-1", 2, "completed", &[]),
        delivered("m1", "w1"),
        task("task-2", 2, "deleted", &["task-1"]),
        task("task-1", 3, "deleted", &[]),
    ]);
    let whole = TeamState::fold(team(), &log).unwrap();
    for split in 0..=log.len() {
        let mut state = TeamState::fold(team(), &log[..split]).unwrap();
        for event in &log[split..] {
            state.apply(event).unwrap();
        }
        assert_eq!(state, whole, "split at {split}");
        state.verify_indexes().unwrap();
    }
}
