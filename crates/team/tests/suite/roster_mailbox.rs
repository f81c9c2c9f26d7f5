//! The pure parts of roster, mailbox, limits, views and error codes (REFERENCE c.7, c.8,
//! c.10, c.12, c.13, c.15, c.16; DESIGN §6). Case numbers from CASES §4.1 and §4.3 where a
//! line has a pure domain core.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use troupe_protocol::{ErrorCode, MessageId};
use troupe_team::{
    Caller, Delivery, LIMIT_KEYS, LiveAgent, LiveStatus, MemberContext, MemberPhase, MemberStatus,
    MemberView, ProvisionTeammate, ProvisioningOutcome, SendMessage, SettleDecision, ShowOptions,
    TaskAction, TeamError, TeamLimits, TeamState, USER_FRAME_HEADER, USER_SENDER_NAME, UserSend,
    UserSendDecision, delivered_user_message, frame_content, team_message_id,
    validate_wait_timeout,
};

use super::support::*;

fn provision(name: &str, description: &str, provider: &str) -> ProvisionTeammate {
    ProvisionTeammate {
        name: name.to_owned(),
        description: description.to_owned(),
        provider: provider.to_owned(),
        context: MemberContext::Fresh,
        worktree: None,
    }
}

fn send(target: &str, text: &str, delivery: Delivery) -> SendMessage {
    SendMessage {
        target: target.to_owned(),
        content: vec![json!({"type": "text", "text": text})],
        delivery,
    }
}

fn mid(n: u32) -> MessageId {
    team_message_id(&format!("00000000-0000-4000-8000-{n:012}")).unwrap()
}

#[test]
fn c33_limits_must_be_positive_safe_integers() {
    assert_eq!(
        TeamLimits::from_json(&json!({})).unwrap(),
        TeamLimits::default()
    );
    let defaults = TeamLimits::default();
    assert_eq!(
        (
            defaults.max_members,
            defaults.max_tasks,
            defaults.max_pending_messages_per_member,
            defaults.max_message_bytes,
            defaults.disposal_timeout_ms
        ),
        (8, 256, 64, 65_536, 5_000)
    );
    for key in LIMIT_KEYS {
        for bad in [
            json!(0),
            json!(1.5),
            json!(9_007_199_254_740_992_u64),
            json!(-1),
            json!("8"),
        ] {
            let err = TeamLimits::from_json(&json!({ key: bad })).unwrap_err();
            assert_eq!(err.code(), "TEAM_INVALID_CONFIG", "{key} = {bad}");
        }
        let ok = TeamLimits::from_json(&json!({ key: 9_007_199_254_740_991_u64 })).unwrap();
        ok.validate().unwrap();
    }
    assert_code(
        TeamLimits::from_json(&json!({"maxMember": 3})),
        "TEAM_INVALID_CONFIG",
    );
    assert_code(
        TeamLimits {
            max_members: 0,
            ..TeamLimits::default()
        }
        .validate(),
        "TEAM_INVALID_CONFIG",
    );
}

#[test]
fn c34_c35_roster_rows() {
    let mut board = Board::new();
    let idle_lead = LiveAgent {
        status: LiveStatus::Idle,
        model: None,
    };
    let rows = board.state.list_members(&idle_lead, &|_| None);
    assert_eq!(
        serde_json::to_value(&rows).unwrap(),
        json!([{"id": ROOT, "name": "lead", "role": "lead", "status": "idle", "diagnostics": []}])
    );
    board.append_raw(member("pre-1", "preexisting-worker", "provisioning"));
    let rows = board.state.list_members(&idle_lead, &|_| None);
    let row = serde_json::to_value(&rows[1]).unwrap();
    assert_eq!(row["name"], "preexisting-worker");
    assert_eq!(row["status"], "provisioning");
    assert_eq!(row["diagnostics"], json!([]));
    assert!(row.get("model").is_none(), "{row}");
}

#[test]
fn c37_statuses_and_model_fallback() {
    let mut board = Board::new();
    board.spawn("fork-worker");
    board.spawn("fresh-worker");
    let lead = LiveAgent {
        status: LiveStatus::Running,
        model: Some("deepseek-chat".to_owned()),
    };
    let fresh = board.state.member_named("fresh-worker").unwrap().id.clone();
    let rows = board.state.list_members(&lead, &|id| {
        (*id == fresh).then(|| LiveAgent {
            status: LiveStatus::Running,
            model: Some("child-model".to_owned()),
        })
    });
    let summary: Vec<(&str, MemberStatus, Option<&str>)> = rows
        .iter()
        .map(|r| (r.name.as_str(), r.status, r.model.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            ("lead", MemberStatus::Running, Some("deepseek-chat")),
            ("fork-worker", MemberStatus::Inactive, Some("deepseek-chat")),
            ("fresh-worker", MemberStatus::Running, Some("child-model")),
        ]
    );
    // c53: the spawn view has no Lead fallback and no diagnostics.
    let snapshot = board.state.member_named("fork-worker").unwrap();
    let view = serde_json::to_value(MemberView::spawned(snapshot, None)).unwrap();
    assert_eq!(view["status"], "inactive");
    assert_eq!(view["diagnostics"], json!([]));
    assert!(view.get("model").is_none());
}

#[test]
fn c38_c47_c48_c49_names_limits_and_failed_members() {
    let mut board = Board::with_limits(TeamLimits {
        max_members: 1,
        ..TeamLimits::default()
    });
    let lead = board.lead();
    let id = sid("failed-child");
    let decided = board
        .state
        .decide_provision(
            &lead,
            &provision("failed-worker", "job", " missing "),
            id.clone(),
            &board.limits,
        )
        .unwrap();
    board.commit(decided);
    let error = "string provider failure".to_owned();
    let SettleDecision::Append(failed) = board
        .state
        .decide_settle_provisioning(
            &id,
            &ProvisioningOutcome::Failed {
                error: error.clone(),
            },
        )
        .unwrap()
    else {
        panic!("expected an edge");
    };
    board.commit(failed);
    let snapshot = board.state.member(&id).unwrap();
    assert_eq!(snapshot.phase, MemberPhase::Failed);
    assert_eq!(
        snapshot.provider, "missing",
        "the trimmed provider is stored"
    );
    let rows = board.state.list_members(
        &LiveAgent {
            status: LiveStatus::Idle,
            model: None,
        },
        &|_| None,
    );
    assert_eq!(rows[1].status, MemberStatus::Failed);
    assert_eq!(rows[1].diagnostics, [error]);
    // c48: name taken (checked before the limit), then the limit counts failed members.
    assert_code(
        board.state.decide_provision(
            &lead,
            &provision("failed-worker", "job", "spawn"),
            sid("x"),
            &board.limits,
        ),
        "TEAM_MEMBER_NAME_TAKEN",
    );
    assert_code(
        board.state.decide_provision(
            &lead,
            &provision("other-worker", "job", "spawn"),
            sid("y"),
            &board.limits,
        ),
        "TEAM_MEMBER_LIMIT",
    );
    // A failed member has no membership and is not addressable (c50).
    assert!(board.state.caller(&id).is_none());
    assert_code(
        board.state.decide_send(
            &lead,
            &send("failed-worker", "hi", Delivery::Quiet),
            mid(1),
            &board.limits,
        ),
        "TEAM_MEMBER_NOT_FOUND",
    );
    // Settling again reports the recorded phase without an edge.
    assert_eq!(
        board
            .state
            .decide_settle_provisioning(&id, &ProvisioningOutcome::Active)
            .unwrap(),
        SettleDecision::AlreadySettled(MemberPhase::Failed)
    );
}

#[test]
fn c55_c56_c59_provisioning_arguments() {
    let mut board = Board::new();
    let lead = board.lead();
    let x65 = "x".repeat(65);
    for name in ["Lead", "lead", "-bad", "bad-", "bad_name", x65.as_str()] {
        assert_code(
            board.state.decide_provision(
                &lead,
                &provision(name, "job", "spawn"),
                sid("c"),
                &board.limits,
            ),
            "TEAM_INVALID_MEMBER_NAME",
        );
    }
    assert_code(
        board.state.decide_provision(
            &lead,
            &provision("ok", " ", "spawn"),
            sid("c"),
            &board.limits,
        ),
        "TEAM_INVALID_ARGUMENT",
    );
    assert_code(
        board
            .state
            .decide_provision(&lead, &provision("ok", "job", " "), sid("c"), &board.limits),
        "TEAM_INVALID_ARGUMENT",
    );
    let worker = board.spawn("worker");
    assert_code(
        board.state.decide_provision(
            &worker,
            &provision("ok", "job", "spawn"),
            sid("c"),
            &board.limits,
        ),
        "TEAM_LEAD_REQUIRED",
    );
    assert_code(
        board.state.resolve_interrupt_target(&worker, "worker"),
        "TEAM_LEAD_REQUIRED",
    );
    // c58 and the active-member rule of interrupt.
    assert_code(
        board.state.resolve_interrupt_target(&lead, "lead"),
        "TEAM_INVALID_TARGET",
    );
    assert_code(
        board.state.resolve_interrupt_target(&lead, "nobody"),
        "TEAM_MEMBER_NOT_FOUND",
    );
    assert_eq!(
        board
            .state
            .resolve_interrupt_target(&lead, "worker")
            .unwrap()
            .name
            .as_str(),
        "worker"
    );
    // A child id may not collide with the Lead or a member.
    assert_code(
        board.state.decide_provision(
            &lead,
            &provision("ok", "job", "spawn"),
            sid(ROOT),
            &board.limits,
        ),
        "TEAM_INVALID_ARGUMENT",
    );
}

#[test]
fn provisioning_member_is_a_teammate_and_member_event_is_exact() {
    let board = Board::new();
    let decided = board
        .state
        .decide_provision(
            &board.lead(),
            &provision("reviewer", " Review the diff ", "spawn"),
            sid("3f6c"),
            &board.limits,
        )
        .unwrap();
    assert_eq!(
        decided.to_draft().data,
        json!({"version": 1, "teamId": ROOT, "member": {"id": "3f6c", "name": "reviewer",
               "description": "Review the diff", "provider": "spawn", "context": "fresh",
               "phase": "provisioning"}})
    );
    let mut board = board;
    board.commit(decided);
    let caller = board.state.caller(&sid("3f6c")).unwrap();
    assert_eq!(caller.name(), "reviewer");
    assert!(!caller.is_lead());
    assert_eq!(board.state.provisioning_members().count(), 1);
}

#[test]
fn c61_a_fork_folds_as_its_own_empty_team() {
    let mut board = Board::new();
    let lead = board.lead();
    board.spawn("worker");
    board.create(&lead, &[], &[]).unwrap();
    let fork = troupe_team::TeamId::new(sid("fork-of-root"));
    let state = TeamState::fold(fork.clone(), &board.log).unwrap();
    assert_eq!(state, TeamState::new(fork.clone()));
    assert_eq!(
        state.caller(&sid("fork-of-root")),
        Some(Caller::lead(&fork))
    );
}

#[test]
fn c98_to_c111_mailbox_rules() {
    let mut board = Board::with_limits(TeamLimits {
        max_pending_messages_per_member: 1,
        max_message_bytes: 256,
        ..TeamLimits::default()
    });
    let lead = board.lead();
    let worker = board.spawn("worker");
    // c111
    assert_code(
        board.state.decide_send(
            &lead,
            &send("lead", "x", Delivery::Quiet),
            mid(1),
            &board.limits,
        ),
        "TEAM_SELF_MESSAGE",
    );
    assert_code(
        board.state.decide_send(
            &lead,
            &send("missing", "x", Delivery::Quiet),
            mid(1),
            &board.limits,
        ),
        "TEAM_MEMBER_NOT_FOUND",
    );
    // c109
    assert_code(
        board.state.decide_send(
            &lead,
            &send("worker", &"y".repeat(300), Delivery::Quiet),
            mid(1),
            &board.limits,
        ),
        "TEAM_MESSAGE_TOO_LARGE",
    );
    // c110: the target name is trimmed; the second pending message overflows.
    let queued = board
        .state
        .decide_send(
            &lead,
            &send(" worker ", "first", Delivery::Quiet),
            mid(1),
            &board.limits,
        )
        .unwrap();
    board.commit(queued);
    assert_code(
        board.state.decide_send(
            &lead,
            &send("worker", "second", Delivery::Quiet),
            mid(2),
            &board.limits,
        ),
        "TEAM_MAILBOX_FULL",
    );
    // c98: the Lead's own mailbox is separate; a teammate may message the Lead.
    let to_lead = board
        .state
        .decide_send(
            &worker,
            &send("lead", "done", Delivery::Wakeup),
            mid(3),
            &board.limits,
        )
        .unwrap();
    board.commit(to_lead);
    assert_eq!(board.state.pending_count_for(&sid(ROOT)), 1);
    assert_eq!(board.state.pending_count_for(worker.id()), 1);
    // c105: an acknowledgement with a wrong target is a no-op.
    assert!(board.state.decide_delivered(&mid(1), &sid(ROOT)).is_none());
    let ack = board.state.decide_delivered(&mid(1), worker.id()).unwrap();
    assert_eq!(
        ack.to_draft().data,
        json!({"version": 1, "teamId": ROOT, "messageId": mid(1).as_str(),
               "targetId": "child-worker"})
    );
    board.commit(ack);
    // c104: a repeated acknowledgement is a no-op; unknown ids too.
    assert!(board.state.decide_delivered(&mid(1), worker.id()).is_none());
    assert!(board.state.decide_delivered(&mid(9), worker.id()).is_none());
    // The mailbox has room again.
    let again = board
        .state
        .decide_send(
            &lead,
            &send("worker", "second", Delivery::Quiet),
            mid(2),
            &board.limits,
        )
        .unwrap();
    board.commit(again);
    let pending: Vec<&str> = board
        .state
        .pending_messages()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(pending, [mid(3).as_str(), mid(2).as_str()]);
    assert!(board.state.queued_before(&mid(3), &mid(2)));
    // A reused message id is refused before it could break the fold.
    assert_code(
        board.state.decide_send(
            &worker,
            &send("lead", "x", Delivery::Quiet),
            mid(2),
            &board.limits,
        ),
        "TEAM_INVALID_ARGUMENT",
    );
    // Content blocks are validated like replayed content.
    let bad = SendMessage {
        target: "worker".to_owned(),
        content: vec![json!({"type": "text", "text": 5})],
        delivery: Delivery::Quiet,
    };
    assert_code(
        board.state.decide_send(&lead, &bad, mid(8), &board.limits),
        "TEAM_INVALID_ARGUMENT",
    );
}

#[test]
fn message_size_counts_the_framed_compact_json() {
    let board = Board::new();
    let lead = board.lead();
    let mut worker_board = board;
    worker_board.spawn("worker");
    let text = "é\"\n".repeat(10);
    let request = send("worker", &text, Delivery::Quiet);
    let decided = worker_board
        .state
        .decide_send(&lead, &request, mid(1), &worker_board.limits)
        .unwrap();
    let troupe_team::TeamRecord::MessageQueued(snapshot) = &decided.record else {
        panic!()
    };
    let team = worker_board.state.id().clone();
    let framed = frame_content(&team, snapshot);
    let exact = serde_json::to_string(&framed).unwrap().len() as u64;
    assert_eq!(troupe_team::framed_size(&team, snapshot), exact);
    // Exactly at the limit passes; one byte less fails.
    for (limit, ok) in [(exact, true), (exact - 1, false)] {
        let limits = TeamLimits {
            max_message_bytes: limit,
            ..TeamLimits::default()
        };
        let result = worker_board
            .state
            .decide_send(&lead, &request, mid(1), &limits);
        assert_eq!(result.is_ok(), ok, "limit {limit}");
    }
}

#[test]
fn framing_and_source() {
    let mut board = Board::new();
    let lead = board.lead();
    board.spawn("worker");
    let plugin = json!({"type": "plugin/custom", "payload": {"value": 1}});
    let request = SendMessage {
        target: "worker".to_owned(),
        content: vec![json!({"type": "text", "text": "hi"}), plugin.clone()],
        delivery: Delivery::Wakeup,
    };
    let decided = board
        .state
        .decide_send(&lead, &request, mid(1), &board.limits)
        .unwrap();
    board.commit(decided);
    let message = board.state.message(&mid(1)).unwrap();
    let delivered = delivered_user_message(&team(), message);
    assert_eq!(delivered.id, mid(1));
    assert_eq!(
        delivered.content,
        vec![
            json!({"type": "text", "text": format!("Team message {} from lead:", mid(1))}),
            json!({"type": "text", "text": "hi"}),
            plugin,
        ]
    );
    assert_eq!(
        serde_json::to_value(&delivered.source).unwrap(),
        json!({"kind": "team-message", "teamId": ROOT, "messageId": mid(1).as_str(),
               "senderId": ROOT, "senderName": "lead"})
    );
}

fn user_send(target: &str, text: &str, delivery: Delivery) -> UserSend {
    UserSend {
        target: target.to_owned(),
        content: vec![json!({"type": "text", "text": text})],
        delivery,
    }
}

/// A message from the user (`troupe send`): queued with the Lead's id and `senderName: "user"`,
/// framed `Message from the user:` (so members tell it from Team mail, whose header names the
/// message and its sender), to the Lead too (no self-message), and a retry with the same id is
/// the same message — never a second one.
#[test]
fn a_message_from_the_user_is_framed_apart_and_a_retry_is_the_same_message() {
    let mut board = Board::new();
    board.spawn("worker");
    // A teammate may be named `user`: its mail is still Team mail (its sender id is its own).
    let named_user = board.spawn("user");
    let request = user_send("worker", "please also run the linter", Delivery::Wakeup);
    let UserSendDecision::Append(event) = board
        .state
        .decide_user_send(&request, mid(1), &board.limits)
        .unwrap()
    else {
        panic!("a new message is appended")
    };
    board.commit(event);
    let message = board.state.message(&mid(1)).unwrap().clone();
    assert!(message.is_from_user(&team()));
    assert_eq!(
        (message.sender_id.as_str(), message.sender_name.as_str()),
        (ROOT, USER_SENDER_NAME)
    );
    let delivered = delivered_user_message(&team(), &message);
    assert_eq!(
        delivered.content,
        vec![
            json!({"type": "text", "text": USER_FRAME_HEADER}),
            json!({"type": "text", "text": "please also run the linter"}),
        ]
    );
    assert_eq!(USER_FRAME_HEADER, "Message from the user:");
    // The same id again, to the same target: the same message, nothing to append.
    let again = board
        .state
        .decide_user_send(&request, mid(1), &board.limits)
        .unwrap();
    assert_eq!(
        again,
        UserSendDecision::AlreadyQueued {
            message: message.clone(),
            delivered: false
        }
    );
    // The same id to another target, or an id a member's message has: refused.
    assert_code(
        board.state.decide_user_send(
            &user_send("lead", "x", Delivery::Quiet),
            mid(1),
            &board.limits,
        ),
        "TEAM_INVALID_ARGUMENT",
    );
    let from_member = board
        .state
        .decide_send(
            &named_user,
            &send("worker", "hi", Delivery::Quiet),
            mid(2),
            &board.limits,
        )
        .unwrap();
    board.commit(from_member);
    let member_mail = board.state.message(&mid(2)).unwrap();
    assert_eq!(member_mail.sender_name, "user");
    assert!(!member_mail.is_from_user(&team()));
    assert_eq!(
        frame_content(&team(), member_mail)[0],
        json!({"type": "text", "text": format!("Team message {} from user:", mid(2))})
    );
    assert_code(
        board
            .state
            .decide_user_send(&request, mid(2), &board.limits),
        "TEAM_INVALID_ARGUMENT",
    );
    // To the Lead: no self-message.
    let to_lead = board
        .state
        .decide_user_send(
            &user_send(" lead ", "status?", Delivery::Quiet),
            mid(3),
            &board.limits,
        )
        .unwrap();
    let UserSendDecision::Append(event) = to_lead else {
        panic!("appended")
    };
    let troupe_team::TeamRecord::MessageQueued(snapshot) = &event.record else {
        panic!("queued")
    };
    assert_eq!(snapshot.target_id.as_str(), ROOT);
}

/// A message from the user meets the rules Team mail meets: an unknown or inactive target, a
/// full mailbox, a message too large, invalid content — each a coded refusal, nothing decided.
#[test]
fn a_message_from_the_user_meets_the_mailbox_rules() {
    let mut board = Board::new();
    board.spawn("worker");
    let limits = TeamLimits {
        max_pending_messages_per_member: 1,
        max_message_bytes: 200,
        ..TeamLimits::default()
    };
    assert_code(
        board
            .state
            .decide_user_send(&user_send("nobody", "hi", Delivery::Quiet), mid(1), &limits),
        "TEAM_MEMBER_NOT_FOUND",
    );
    assert_code(
        board.state.decide_user_send(
            &user_send("worker", &"x".repeat(200), Delivery::Quiet),
            mid(1),
            &limits,
        ),
        "TEAM_MESSAGE_TOO_LARGE",
    );
    let bad = UserSend {
        target: "worker".to_owned(),
        content: vec![json!({"type": "text"})],
        delivery: Delivery::Quiet,
    };
    assert_code(
        board.state.decide_user_send(&bad, mid(1), &limits),
        "TEAM_INVALID_ARGUMENT",
    );
    let UserSendDecision::Append(first) = board
        .state
        .decide_user_send(
            &user_send("worker", "one", Delivery::Quiet),
            mid(1),
            &limits,
        )
        .unwrap()
    else {
        panic!("appended")
    };
    board.commit(first);
    assert_code(
        board.state.decide_user_send(
            &user_send("worker", "two", Delivery::Quiet),
            mid(2),
            &limits,
        ),
        "TEAM_MAILBOX_FULL",
    );
}

#[test]
fn c113_wait_timeouts() {
    for (value, ok) in [
        (json!(9_999), false),
        (json!(10_000), true),
        (json!(3_600_000), true),
        (json!(3_600_001), false),
        (json!(30_000.5), false),
        (json!("30000"), false),
        (Value::Null, false),
        // Integral numbers in any spelling are integers, as JavaScript's are.
        (json!(10_000.0), true),
        (json!(3.6e6), true),
        (json!(3_600_001.0), false),
        (json!(-10_000), false),
        (json!(1e300), false),
        (json!(u64::MAX), false),
    ] {
        let result = validate_wait_timeout(&value);
        match result {
            Ok(ms) => {
                assert!(ok, "{value} accepted as {ms}");
                assert_eq!(ms as f64, value.as_f64().unwrap());
            }
            Err(e) => {
                assert!(!ok, "{value} refused");
                assert_eq!(e.code(), "TEAM_INVALID_TIMEOUT");
                assert_eq!(
                    e.to_string(),
                    format!(
                        "timeout_ms must be an integer number of milliseconds in [10000, 3600000], got {value}"
                    )
                );
            }
        }
    }
}

#[test]
fn offline_show_view() {
    let mut board = Board::new();
    let lead = board.lead();
    let worker = board.spawn("worker");
    board.append_raw(member("pending-child", "slow-worker", "provisioning"));
    board.create(&lead, &[], &["src"]).unwrap();
    board.create(&worker, &[], &[]).unwrap();
    board.act(&lead, "task-1", TaskAction::Delete).unwrap();
    let decided = board
        .state
        .decide_send(
            &worker,
            &send("lead", "hello", Delivery::Quiet),
            mid(1),
            &board.limits,
        )
        .unwrap();
    board.commit(decided);
    let show = board.state.show(&ShowOptions::default());
    let wire = serde_json::to_value(&show).unwrap();
    assert_eq!(wire["teamId"], ROOT);
    // Both words for each member: its durable phase and what it is doing (offline: nothing).
    let statuses: Vec<(&str, &str, &str)> = wire["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["phase"].as_str().unwrap(),
                m["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("lead", "active", "inactive"),
            ("worker", "active", "inactive"),
            ("slow-worker", "provisioning", "provisioning")
        ]
    );
    let tasks: Vec<&str> = wire["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["task-2"]);
    assert_eq!(
        wire["pendingMessages"],
        json!([{"id": mid(1).as_str(), "senderName": "worker", "targetName": "lead", "delivery": "quiet"}])
    );
    let all = board.state.show(&ShowOptions {
        include_deleted: true,
        lead_model: Some("m".to_owned()),
        ..ShowOptions::default()
    });
    assert_eq!(all.tasks.len(), 2);
    assert_eq!(all.members[0].member.model.as_deref(), Some("m"));
    assert_eq!(all.members[1].member.model.as_deref(), Some("m"));
    let keys: Vec<String> = serde_json::to_value(&all)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        keys.into_iter().collect::<BTreeSet<_>>(),
        ["members", "pendingMessages", "tasks", "teamId"]
            .map(String::from)
            .into_iter()
            .collect()
    );
}

#[test]
fn every_reference_error_code_is_a_stable_code() {
    let samples = [
        TeamError::InvalidConfig {
            key: "k".into(),
            value: "0".into(),
            reason: "r".into(),
        },
        TeamError::NotMember { id: "x".into() },
        TeamError::LeadRequired { action: "a".into() },
        TeamError::InvalidMemberName { name: "n".into() },
        TeamError::InvalidArgument {
            message: "m".into(),
        },
        TeamError::MemberNameTaken { name: "n".into() },
        TeamError::MemberLimit { limit: 1 },
        TeamError::ProvisioningConflict {
            message: "m".into(),
        },
        TeamError::Disposed {
            message: "m".into(),
        },
        TeamError::DisposalTimeout {
            step: "s".into(),
            timeout_ms: 1,
        },
        TeamError::MemberNotFound { name: "n".into() },
        TeamError::SelfMessage { name: "n".into() },
        TeamError::MailboxFull {
            target: "t".into(),
            limit: 1,
        },
        TeamError::MessageTooLarge { bytes: 2, limit: 1 },
        TeamError::InvalidTarget {
            name: "lead".into(),
        },
        TeamError::InvalidTimeout { value: "1".into() },
        TeamError::WaitAborted {
            reason: "{ kind: 'user' }".into(),
        },
        TeamError::TaskLimit {
            message: "m".into(),
        },
        TeamError::TaskNotFound {
            message: "m".into(),
        },
        TeamError::TaskStaleRevision {
            id: "t".into(),
            expected: 1,
            current: 2,
        },
        TeamError::TaskDeleted { id: "t".into() },
        TeamError::TaskUnauthorized {
            id: "t".into(),
            action: "edit".into(),
        },
        TeamError::TaskAlreadyClaimed {
            id: "t".into(),
            owner: "o".into(),
        },
        TeamError::TaskBlocked {
            message: "m".into(),
        },
        TeamError::TaskInvalidTransition {
            id: "t".into(),
            action: "a".into(),
            status: "s".into(),
        },
        TeamError::TaskDependencyCycle {
            message: "m".into(),
        },
        TeamError::TaskHasDependents {
            id: "t".into(),
            dependent: "d".into(),
        },
        TeamError::InvalidWriteScope {
            scope: "".into(),
            reason: "r".into(),
        },
    ];
    let codes: Vec<&str> = samples.iter().map(ErrorCode::code).collect();
    assert_eq!(codes, TeamError::ALL_CODES);
    assert_eq!(
        TeamError::WaitAborted {
            reason: "{ kind: 'user' }".into()
        }
        .to_string(),
        "wait_agent aborted: { kind: 'user' }"
    );
    for sample in &samples {
        assert!(!sample.to_string().contains('\n'), "one-line messages");
    }
}
