//! The Team service through the tools a model calls (REFERENCE c, d; CASES §3–§5).

use std::time::Duration;

use serde_json::{Value, json};
use troupe_llm::ChatMessage;
use troupe_protocol::{ErrorCode, SessionId};
use troupe_team::{TeamId, TeamState};

use super::support::*;

/// Tool results of `agent`'s log, in order, parsed: (tool name, is_error, content JSON or text).
pub(super) fn tool_results(h: &Harness, id: &SessionId) -> Vec<(String, bool, Value)> {
    h.events(id)
        .into_iter()
        .filter(|e| e.kind == "tool/result")
        .map(|e| {
            let content = e.data["content"].as_str().unwrap().to_owned();
            let parsed = serde_json::from_str(&content).unwrap_or(Value::String(content));
            (
                e.data["name"].as_str().unwrap().to_owned(),
                e.data["isError"].as_bool().unwrap(),
                parsed,
            )
        })
        .collect()
}

/// The raw `content` text of every tool result of `id`'s log, in order.
pub(super) fn raw_results(h: &Harness, id: &SessionId) -> Vec<String> {
    h.events(id)
        .into_iter()
        .filter(|e| e.kind == "tool/result")
        .map(|e| e.data["content"].as_str().unwrap().to_owned())
        .collect()
}

pub(super) fn fold(h: &Harness, lead: &SessionId) -> TeamState {
    TeamState::fold(TeamId::new(lead.clone()), &h.events(lead)).unwrap()
}

/// Waits (bounded) until the Lead and every teammate are idle and settled.
pub(super) async fn quiet(h: &Harness, lead: &troupe_runtime::Agent) {
    tokio::time::timeout(Duration::from_secs(30), h.runtime.wait_quiescent(lead))
        .await
        .expect("team did not settle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_spawns_a_teammate_that_works_and_settles() {
    let h = Harness::new();
    h.models.model("lead").push([
        call(
            "spawn_teammate",
            json!({"name": "worker", "description": "write the notes", "prompt": "write notes.txt"}),
        ),
        text("spawned"),
    ]);
    h.models.model("worker").push([
        call("write", json!({"path": "notes.txt", "content": "hello\n"})),
        text("wrote it"),
    ]);
    let lead = h.team_lead().await;
    lead.followup(user("use a teammate to write notes"))
        .await
        .unwrap();
    quiet(&h, &lead).await;

    let results = tool_results(&h, lead.id());
    assert_eq!(results[0].0, "spawn_teammate");
    assert!(!results[0].1, "{:?}", results[0]);
    let member = &results[0].2["member"];
    assert_eq!(member["name"], "worker");
    assert_eq!(member["role"], "teammate");
    assert_eq!(
        std::fs::read_to_string(h.path("notes.txt")).unwrap(),
        "hello\n"
    );

    // Durable roster: provisioning then active, and the child's flush came first (c.8).
    let state = fold(&h, lead.id());
    assert_eq!(state.members().len(), 1);
    assert_eq!(state.members()[0].phase.as_str(), "active");
    // The teammate has exactly the ten tools and its identity line.
    let worker = h.models.model("worker");
    let req = &worker.requests()[0];
    let mut names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    names.retain(|n| !["read", "write", "edit", "glob", "grep", "bash"].contains(n));
    assert_eq!(names, troupe_runtime::team::TEAM_TOOL_NAMES);
    let ChatMessage::System { content } = &req.messages[0] else {
        panic!()
    };
    assert!(
        content.ends_with(&format!(
            "Your Team role is teammate; your Team name is worker; your Team id is {}.",
            lead.id()
        )),
        "{content}"
    );
    // The lead's own prompt has the policy and no subagent tools.
    let lead_req = &h.models.model("lead").requests()[0];
    assert!(
        !lead_req
            .tools
            .iter()
            .any(|t| t.name.starts_with("subagent"))
    );
    let ChatMessage::System { content } = &lead_req.messages[0] else {
        panic!()
    };
    assert!(content.contains("Your Team role is lead; your Team name is lead"));
    let _ = ErrorCode::code(&troupe_runtime::RuntimeError::Disposed(String::new()));
}

// ---------------------------------------------------------------------------------------
// Helpers for service-level cases.

use troupe_runtime::Agent;
use troupe_team::{Delivery, MemberContext, TeamEvent, TeamLimits, TeamRecord};

pub(super) async fn spawn(h: &Harness, lead: &Agent, name: &str, steps: Vec<Step>) -> SessionId {
    h.models.model(name).push(steps);
    let view = h
        .runtime
        .teams()
        .spawn(
            lead,
            name,
            &format!("{name} job"),
            &format!("task for {name}"),
            MemberContext::Fresh,
            None,
        )
        .await
        .unwrap();
    view.id
}

pub(super) fn code<T: std::fmt::Debug>(
    r: Result<T, troupe_runtime::team::TeamOpError>,
) -> &'static str {
    ErrorCode::code(&r.unwrap_err())
}

pub(super) async fn settled(h: &Harness, id: &SessionId) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while h.runtime.agent(id).is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("teammate did not settle");
}

/// A continuable Team-profile child spec (as the Team service would build it).
pub(super) fn team_child(
    label: &str,
    id: Option<&SessionId>,
    provider: troupe_session::events::ChildProvider,
    profile: troupe_session::events::Profile,
) -> troupe_runtime::ChildSpec {
    troupe_runtime::ChildSpec {
        provider,
        label: label.to_owned(),
        child_id: id.cloned(),
        prompt: "x".to_owned(),
        continuable: true,
        notify_parent: false,
        profile,
        model: None,
        cancel: None,
        workspace: None,
    }
}

/// Waits (bounded) until `id`'s log holds a `tool/call`.
pub(super) async fn tool_called(h: &Harness, id: &SessionId) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !h.events(id).iter().any(|e| e.kind == "tool/call") {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
}

/// Appends a Team record to the Lead log by hand (as a crash would have left it).
pub(super) async fn hand_append(lead: &Agent, event: TeamEvent) {
    lead.append_records(vec![event.to_draft()]).unwrap();
    lead.writer().flush().await.unwrap();
}

pub(super) fn provisioning(team: &SessionId, id: &SessionId, name: &str) -> TeamEvent {
    TeamEvent {
        team_id: TeamId::new(team.clone()),
        record: TeamRecord::Member(troupe_team::MemberSnapshot {
            id: id.clone(),
            name: troupe_team::MemberName::new(name).unwrap(),
            description: "by hand".to_owned(),
            provider: troupe_team::MemberProvider::Spawn,
            context: MemberContext::Fresh,
            phase: troupe_team::MemberPhase::Provisioning,
            error: None,
            worktree: None,
        }),
    }
}

// ---------------------------------------------------------------------------------------
// CASES §3: persistence across restarts.

/// CASES 30 and 31: reconciliation of members a crash left `provisioning`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_reconciles_provisioning_members_from_their_child_logs() {
    let mut h = Harness::new();
    h.models.model("lead").push([text("idle")]);
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    // A: a child really started under a provisioning record, and finished.
    let a = SessionId::random();
    hand_append(&lead, provisioning(&lead_id, &a, "worker-a")).await;
    h.models.model("worker-a").push([text("a done")]);
    h.runtime
        .start_child(
            &lead,
            team_child(
                "worker-a",
                Some(&a),
                troupe_session::events::ChildProvider::Spawn,
                troupe_session::events::Profile::Team,
            ),
        )
        .await
        .unwrap();
    settled(&h, &a).await;
    // B: a provisioning record whose child never existed.
    let b = SessionId::random();
    hand_append(&lead, provisioning(&lead_id, &b, "worker-b")).await;
    // C: a child created by hand that only holds its pending initial prompt (CASES 31).
    h.models.model("worker-c").push([text("c done")]);
    let c = SessionId::random();
    hand_append(&lead, provisioning(&lead_id, &c, "worker-c")).await;
    {
        let journal = h.journal();
        let mut header = troupe_protocol::SessionHeader::new(c.clone(), 0)
            .with_parent(lead_id.clone())
            .with_origin("subagent");
        header.cwd = Some(h.workspace.path().display().to_string());
        let w = journal.create(header).unwrap();
        let config = json!({"name": "worker-c", "model": {"provider": "script", "model": "test"},
            "profile": "team", "workspace": std::fs::canonicalize(h.workspace.path()).unwrap(), "depth": 1});
        let prompt = troupe_protocol::UserMessage::text(
            "hand task",
            troupe_protocol::MessageSource::kind("user"),
        );
        w.append_batch(vec![
            troupe_protocol::EventDraft::new("subagent/descriptor", json!({"version": 2, "mode": "continuable", "provider": "spawn", "label": "worker-c"})),
            troupe_protocol::EventDraft::new("agent/config", config),
            troupe_protocol::EventDraft::new("agent/inbox/spliced", json!({"target": "next-turn", "start": 0, "inserted": [prompt]})),
        ])
        .unwrap();
        w.flush().await.unwrap();
    }
    h.runtime.shutdown().await.unwrap();

    h.restart();
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    let state = fold(&h, &lead_id);
    let phase = |id: &SessionId| state.member(id).unwrap().phase.as_str();
    assert_eq!(phase(&a), "active");
    assert_eq!(phase(&b), "failed");
    assert!(
        state
            .member(&b)
            .unwrap()
            .error
            .as_deref()
            .unwrap()
            .contains("child Session recovery failed"),
        "{:?}",
        state.member(&b)
    );
    assert_eq!(phase(&c), "active");
    // Issue 10 (defect 5, which overrides CASES 31's "not resumed"): C's spawn succeeded and
    // its prompt is durable, so its work is owed — recovery runs the pending prompt, once.
    quiet(&h, &lead).await;
    assert_eq!(h.models.model("worker-c").requests().len(), 1);
    assert!(
        h.models
            .model("worker-c")
            .user_texts(0)
            .iter()
            .any(|t| t == "hand task"),
        "{:?}",
        h.models.model("worker-c").user_texts(0)
    );
    let c_log = h.journal().read(&c).unwrap();
    let t = troupe_session::Transcript::fold(0, &c_log.events).unwrap();
    assert!(t.next_turn().is_empty());
    assert_eq!(turn_end_kinds(&c_log.events), ["completed"]);
}

/// CASES 32: quiet mail to an inactive teammate stays queued across a Lead restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_mail_to_an_inactive_teammate_stays_queued_across_a_restart() {
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let worker = spawn(&h, &lead, "mail-worker", vec![text("done")]).await;
    settled(&h, &worker).await;
    let (id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "mail-worker", "fyi", Delivery::Quiet)
        .await
        .unwrap();
    assert!(!accepted, "quiet mail to an inactive teammate is queued");
    let pending: Vec<_> = fold(&h, &lead_id)
        .pending_messages()
        .map(|m| m.id.clone())
        .collect();
    assert_eq!(pending, vec![id.clone()]);
    h.runtime.shutdown().await.unwrap();
    h.restart();
    let _ = h.runtime.resume_root(&lead_id).await.unwrap();
    let pending: Vec<_> = fold(&h, &lead_id)
        .pending_messages()
        .map(|m| m.id.clone())
        .collect();
    assert_eq!(pending, vec![id]);
    assert!(
        h.runtime.agent(&worker).is_none(),
        "quiet mail does not wake at Lead recovery"
    );
}

/// Issue 4: a crash between "the target holds the message" and the Lead's `delivered`
/// record: recovery acknowledges it without a second copy (target-side de-duplication).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_queued_and_delivered_delivers_exactly_one_copy() {
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let worker = spawn(&h, &lead, "w", vec![text("first"), text("second")]).await;
    settled(&h, &worker).await;
    // Queue a wakeup by hand and put the framed item in the worker's inbox by hand, as if the
    // process died right after the target's flush.
    let state = fold(&h, &lead_id);
    let message = troupe_team::MessageSnapshot {
        id: troupe_team::team_message_id("crash-1").unwrap(),
        sender_id: lead_id.clone(),
        sender_name: "lead".to_owned(),
        target_id: worker.clone(),
        delivery: Delivery::Wakeup,
        content: vec![json!({"type": "text", "text": "do more"})],
    };
    let _ = state;
    hand_append(
        &lead,
        TeamEvent {
            team_id: TeamId::new(lead_id.clone()),
            record: TeamRecord::MessageQueued(message.clone()),
        },
    )
    .await;
    {
        let (w, _) = h.journal().open(&worker).unwrap();
        let item = troupe_team::delivered_user_message(&TeamId::new(lead_id.clone()), &message);
        w.append(troupe_protocol::EventDraft::new(
            "agent/inbox/spliced",
            json!({"target": "next-turn", "start": 0, "inserted": [item]}),
        ))
        .unwrap();
        w.flush().await.unwrap();
    }
    h.runtime.shutdown().await.unwrap();
    h.restart();
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    let state = fold(&h, &lead_id);
    assert_eq!(
        state.pending_messages().count(),
        0,
        "acknowledged by recovery"
    );
    let copies = h
        .events(&worker)
        .iter()
        .filter(|e| e.kind == "user/message" && e.data["id"] == message.id.as_str())
        .count();
    assert_eq!(copies, 1, "exactly one copy reached the target");
}

// ---------------------------------------------------------------------------------------
// CASES §4.1: identity and provisioning.

/// CASES 34.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_team_lists_only_the_lead() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let rows = h.runtime.teams().list_members(&lead).await.unwrap();
    let row = serde_json::to_value(&rows).unwrap();
    assert_eq!(row.as_array().unwrap().len(), 1);
    assert_eq!(row[0]["name"], "lead");
    assert_eq!(row[0]["role"], "lead");
    assert_eq!(row[0]["status"], "idle");
    assert_eq!(row[0]["diagnostics"], json!([]));
    assert_eq!(row[0]["id"], lead.id().as_str());
}

/// CASES 36, 37, 38.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_and_fresh_teammates_and_the_member_limit() {
    let h = Harness::with_limits(TeamLimits {
        max_members: 2,
        ..TeamLimits::default()
    });
    h.models.model("lead").push([text("first turn")]);
    let lead = h.team_lead().await;
    lead.followup(user("hello")).await.unwrap();
    quiet(&h, &lead).await;
    h.models.model("fork-worker").push([text("f")]);
    h.models.model("fresh-worker").push([text("g")]);
    let fork = h
        .runtime
        .teams()
        .spawn(&lead, "fork-worker", "d", "p", MemberContext::Fork, None)
        .await
        .unwrap()
        .id;
    let fresh = h
        .runtime
        .teams()
        .spawn(&lead, "fresh-worker", "d", "p", MemberContext::Fresh, None)
        .await
        .unwrap()
        .id;
    settled(&h, &fork).await;
    settled(&h, &fresh).await;
    assert!(h.journal().read(&fork).unwrap().header.seed_length.unwrap() > 0);
    assert_eq!(h.journal().read(&fresh).unwrap().header.seed_length, None);
    let rows = serde_json::to_value(h.runtime.teams().list_members(&lead).await.unwrap()).unwrap();
    let triples: Vec<(String, Value, String)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r.get("context").cloned().unwrap_or(Value::Null),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        triples,
        vec![
            ("lead".to_owned(), Value::Null, "idle".to_owned()),
            (
                "fork-worker".to_owned(),
                json!("fork"),
                "inactive".to_owned()
            ),
            (
                "fresh-worker".to_owned(),
                json!("fresh"),
                "inactive".to_owned()
            ),
        ]
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(&lead, "third-worker", "d", "p", MemberContext::Fresh, None)
                .await
        ),
        "TEAM_MEMBER_LIMIT"
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(&lead, "fresh-worker", "d", "p", MemberContext::Fresh, None)
                .await
        ),
        "TEAM_MEMBER_NAME_TAKEN"
    );
}

/// CASES 39: the child's flush of its initial prompt precedes the Lead's `active` record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_is_flushed_before_the_lead_commits_active() {
    let (h, log) = Harness::recording();
    let lead = h.team_lead().await;
    let worker = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    let prompt = log
        .position(&worker, |k| k.iter().any(|k| k == "agent/inbox/spliced"))
        .expect("child inbox append");
    let active = log
        .position(lead.id(), |k| k.iter().any(|k| k == "team/member:active"))
        .expect("active edge");
    assert!(
        prompt < active,
        "child append {prompt} must precede lead append {active}"
    );
    h.runtime.shutdown().await.unwrap();
}

/// CASES 47–50: a failed child start leaves a failed member that still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_records_a_failed_member_that_keeps_its_name_and_slot() {
    let h = Harness::with_limits(TeamLimits {
        max_members: 1,
        ..TeamLimits::default()
    });
    h.models
        .refuse
        .lock()
        .unwrap()
        .push("failed-worker".to_owned());
    let lead = h.team_lead().await;
    let err = h
        .runtime
        .teams()
        .spawn(&lead, "failed-worker", "d", "p", MemberContext::Fresh, None)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no model for failed-worker"),
        "{err}"
    );
    let rows = serde_json::to_value(h.runtime.teams().list_members(&lead).await.unwrap()).unwrap();
    assert_eq!(rows[1]["name"], "failed-worker");
    assert_eq!(rows[1]["status"], "failed");
    assert_eq!(rows[1]["provider"], "spawn");
    assert!(
        rows[1]["diagnostics"][0]
            .as_str()
            .unwrap()
            .contains("no model for failed-worker")
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(&lead, "failed-worker", "d", "p", MemberContext::Fresh, None)
                .await
        ),
        "TEAM_MEMBER_NAME_TAKEN"
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(&lead, "other-worker", "d", "p", MemberContext::Fresh, None)
                .await
        ),
        "TEAM_MEMBER_LIMIT"
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .send(&lead, "failed-worker", "hi", Delivery::Wakeup)
                .await
        ),
        "TEAM_MEMBER_NOT_FOUND"
    );
    // The failed child left no live agent.
    assert_eq!(h.runtime.live_ids(), vec![lead.id().clone()]);
}

/// CASES 55, 59, 60.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_spawn_arguments_write_nothing() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    for name in ["Lead", "lead", "-bad", "bad-", "bad_name", &"x".repeat(65)] {
        assert_eq!(
            code(
                h.runtime
                    .teams()
                    .spawn(&lead, name, "d", "p", MemberContext::Fresh, None)
                    .await
            ),
            "TEAM_INVALID_MEMBER_NAME",
            "{name}"
        );
    }
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(&lead, "ok-name", " ", "p", MemberContext::Fresh, None)
                .await
        ),
        "TEAM_INVALID_ARGUMENT"
    );
    let cancelled = tokio_util::sync::CancellationToken::new();
    cancelled.cancel();
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(
                    &lead,
                    "ok-name",
                    "d",
                    "p",
                    MemberContext::Fresh,
                    Some(cancelled)
                )
                .await
        ),
        "CANCELLED"
    );
    assert!(
        fold(&h, lead.id()).members().is_empty(),
        "no durable member written"
    );
}

/// CASES 56, 57, 58.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_is_lead_only_and_reports_the_previous_status() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let worker_id = spawn(&h, &lead, "worker", vec![Step::Hang]).await;
    model_called(&h.models.model("worker"), 1).await;
    let worker = h.runtime.agent(&worker_id).unwrap();
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(&worker, "sub", "d", "p", MemberContext::Fresh, None)
                .await
        ),
        "TEAM_LEAD_REQUIRED"
    );
    assert_eq!(
        code(h.runtime.teams().interrupt(&worker, "worker").await),
        "TEAM_LEAD_REQUIRED"
    );
    assert_eq!(
        code(h.runtime.teams().interrupt(&lead, "lead").await),
        "TEAM_INVALID_TARGET"
    );
    assert_eq!(
        h.runtime.teams().interrupt(&lead, "worker").await.unwrap(),
        "running"
    );
    settled(&h, &worker_id).await;
    assert_eq!(
        h.runtime.teams().interrupt(&lead, "worker").await.unwrap(),
        "inactive"
    );
}

/// CASES 61: an ordinary fork of the Lead is a new Team root that inherits no Team state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_fork_of_the_lead_is_a_new_team() {
    let h = Harness::new();
    h.models.model("lead").push([text("t")]);
    let lead = h.team_lead().await;
    h.runtime
        .teams()
        .create_task(
            &lead,
            &troupe_team::CreateTask {
                subject: "s".into(),
                description: "d".into(),
                blocked_by: vec![],
                write_scopes: vec![],
            },
        )
        .await
        .unwrap();
    lead.followup(user("complete a turn")).await.unwrap();
    quiet(&h, &lead).await;
    let fork_id = SessionId::random();
    let w = h.journal().fork(lead.id(), None, fork_id.clone()).unwrap();
    w.flush().await.unwrap();
    let events = h.journal().read(&fork_id).unwrap().events;
    let state = TeamState::fold(TeamId::new(fork_id), &events).unwrap();
    assert!(state.members().is_empty() && state.tasks().is_empty());
    assert_eq!(state.pending_messages().count(), 0);
}

/// CASES 62 and decision 3: an ordinary child of the Lead is not a member and has no Team tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_child_of_the_lead_is_not_a_member() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    h.models.model("plain").push([Step::Hang]);
    let started = h
        .runtime
        .start_child(
            &lead,
            team_child(
                "plain",
                None,
                troupe_session::events::ChildProvider::Spawn,
                troupe_session::events::Profile::Default,
            ),
        )
        .await
        .unwrap();
    let child = h.runtime.agent(&started.child_id).unwrap();
    assert!(h.runtime.teams().team_of(&child).is_none());
    assert_eq!(
        code(h.runtime.teams().list_members(&child).await),
        "TEAM_NOT_MEMBER"
    );
    assert!(h.runtime.teams().team_of(&lead).is_some());
    h.runtime.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// CASES §4.3: mailbox, waiting, interrupt.

/// CASES 98: wakeups to a running Lead are accepted at once and do not count as pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeups_to_a_running_lead_are_accepted_immediately() {
    let h = Harness::with_limits(TeamLimits {
        max_pending_messages_per_member: 1,
        ..TeamLimits::default()
    });
    let lead = h.team_lead().await;
    let worker_id = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    h.models.model("lead").push([Step::Hang]);
    lead.followup(user("keep running")).await.unwrap();
    model_called(&h.models.model("lead"), 1).await;
    let worker = h.runtime.agent(&worker_id).unwrap();
    for n in 0..2 {
        let (_, accepted) = h
            .runtime
            .teams()
            .send(&worker, "lead", &format!("w{n}"), Delivery::Wakeup)
            .await
            .unwrap();
        assert!(accepted);
    }
    assert_eq!(lead.status(), troupe_runtime::AgentStatus::Running);
    assert_eq!(fold(&h, lead.id()).pending_messages().count(), 0);
    assert_eq!(lead.with_transcript(|t| t.next_turn().len()), 2);
    h.runtime.shutdown().await.unwrap();
}

/// CASES 99 and 10.2 framing: quiet mail to a running teammate lands in its next step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_mail_to_a_running_teammate_is_injected_and_framed() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let worker_id = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    let (id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "heads up", Delivery::Quiet)
        .await
        .unwrap();
    assert!(accepted);
    assert_eq!(fold(&h, lead.id()).pending_messages().count(), 0);
    let worker = h.runtime.agent(&worker_id).unwrap();
    let item = worker.with_transcript(|t| t.next_step().to_vec());
    assert_eq!(item.len(), 1);
    assert_eq!(item[0].id, id);
    assert_eq!(
        item[0].text_content(),
        format!("Team message {id} from lead:\n\nheads up")
    );
    assert_eq!(item[0].source.kind, "team-message");
    assert_eq!(item[0].source.extra["senderName"], "lead");
    h.runtime.shutdown().await.unwrap();
}

/// CASES 102, 103: a wakeup to a busy teammate is flushed Lead → target → Lead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wakeup_is_durable_in_the_lead_then_the_target_then_acknowledged() {
    let (h, log) = Harness::recording();
    let lead = h.team_lead().await;
    let worker_id = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    for n in 0..2 {
        let before = log.len();
        let (_, accepted) = h
            .runtime
            .teams()
            .send(&lead, "w", &format!("more {n}"), Delivery::Wakeup)
            .await
            .unwrap();
        assert!(accepted);
        let order = log.sessions_from(before);
        assert_eq!(
            order,
            vec![lead.id().clone(), worker_id.clone(), lead.id().clone()],
            "send {n}"
        );
    }
    let worker = h.runtime.agent(&worker_id).unwrap();
    assert_eq!(worker.with_transcript(|t| t.next_turn().len()), 2);
    h.runtime.shutdown().await.unwrap();
}

/// CASES 109, 110, 111.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailbox_limits_and_bad_targets_are_refused() {
    let h = Harness::with_limits(TeamLimits {
        max_pending_messages_per_member: 1,
        max_message_bytes: 256,
        ..TeamLimits::default()
    });
    let lead = h.team_lead().await;
    let worker_id = spawn(&h, &lead, "w", vec![text("done")]).await;
    settled(&h, &worker_id).await;
    assert_eq!(
        code(
            h.runtime
                .teams()
                .send(&lead, "w", &"x".repeat(300), Delivery::Quiet)
                .await
        ),
        "TEAM_MESSAGE_TOO_LARGE"
    );
    let (_, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "one", Delivery::Quiet)
        .await
        .unwrap();
    assert!(!accepted);
    assert_eq!(
        code(
            h.runtime
                .teams()
                .send(&lead, "w", "two", Delivery::Quiet)
                .await
        ),
        "TEAM_MAILBOX_FULL"
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .send(&lead, "lead", "me", Delivery::Quiet)
                .await
        ),
        "TEAM_SELF_MESSAGE"
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .send(&lead, "missing", "x", Delivery::Quiet)
                .await
        ),
        "TEAM_MEMBER_NOT_FOUND"
    );
    // Refusals append nothing: one queued message only.
    assert_eq!(fold(&h, lead.id()).messages().len(), 1);
}

/// CASES 112 and decision 2: an interrupt keeps an accepted follow-up (parked, durable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_teammate_keeps_its_accepted_followup() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let worker_id = spawn(&h, &lead, "w", vec![Step::Hang, text("later")]).await;
    model_called(&h.models.model("w"), 1).await;
    let (id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "next job", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(accepted);
    assert_eq!(
        h.runtime.teams().interrupt(&lead, "w").await.unwrap(),
        "running"
    );
    settled(&h, &worker_id).await;
    let stored = troupe_session::Transcript::fold(0, &h.events(&worker_id)).unwrap();
    assert_eq!(
        stored
            .next_turn()
            .iter()
            .map(|m| m.id.clone())
            .collect::<Vec<_>>(),
        vec![id]
    );
    // The next wakeup runs the parked follow-up first (cold resume, FIFO).
    h.models.model("w").push([text("again")]);
    h.runtime
        .teams()
        .send(&lead, "w", "go", Delivery::Wakeup)
        .await
        .unwrap();
    settled(&h, &worker_id).await;
    assert_eq!(
        turn_end_kinds(&h.events(&worker_id)),
        ["aborted", "completed", "completed"]
    );
}

/// Porting note of c.10: a wakeup that cold-resumes a teammate delivers its older quiet mail
/// first, so its history keeps queue order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_quiet_mail_precedes_the_wakeup_that_resumes_a_teammate() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let worker_id = spawn(&h, &lead, "w", vec![text("done"), text("read both")]).await;
    settled(&h, &worker_id).await;
    let (quiet_id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "note", Delivery::Quiet)
        .await
        .unwrap();
    assert!(!accepted);
    let (_, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "act", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(accepted);
    settled(&h, &worker_id).await;
    let texts = h.models.model("w").user_texts(1);
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(
        texts[1].contains(&format!("Team message {quiet_id} from lead:"))
            && texts[1].ends_with("note")
    );
    assert!(texts[2].ends_with("act"));
    assert_eq!(fold(&h, lead.id()).pending_messages().count(), 0);
}

/// CASES 113, 119 and the noProgress rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_validate_the_timeout_see_no_progress_and_time_out() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let token = tokio_util::sync::CancellationToken::new();
    assert_eq!(
        code(h.runtime.teams().wait(&lead, &json!(9999), &token).await),
        "TEAM_INVALID_TIMEOUT"
    );
    assert_eq!(
        h.runtime
            .teams()
            .wait(&lead, &json!(10_000), &token)
            .await
            .unwrap(),
        troupe_runtime::team::WaitOutcome::NoProgress,
        "nobody else is running"
    );
    let worker_id = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    // A running peer: an edge after the wait began ends it.
    let rt = h.runtime.clone();
    let l2 = lead.clone();
    let t2 = token.clone();
    let waiting = tokio::spawn(async move { rt.teams().wait(&l2, &json!(3_600_000), &t2).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    h.runtime
        .teams()
        .create_task(
            &lead,
            &troupe_team::CreateTask {
                subject: "s".into(),
                description: "d".into(),
                blocked_by: vec![],
                write_scopes: vec![],
            },
        )
        .await
        .unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
        troupe_runtime::team::WaitOutcome::Waited { timed_out: false }
    );
    // Cancelling the caller's turn aborts a wait with the cause.
    let rt = h.runtime.clone();
    let l2 = lead.clone();
    let t2 = token.clone();
    let waiting = tokio::spawn(async move { rt.teams().wait(&l2, &json!(3_600_000), &t2).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    token.cancel();
    let err = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(ErrorCode::code(&err), "TEAM_WAIT_ABORTED");
    assert!(err.to_string().contains("wait_agent aborted:"), "{err}");
    // Shutdown releases a pending wait with timedOut: false (CASES 120, 121).
    let rt = h.runtime.clone();
    let l2 = lead.clone();
    let waiting = tokio::spawn(async move {
        rt.teams()
            .wait(
                &l2,
                &json!(3_600_000),
                &tokio_util::sync::CancellationToken::new(),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    h.runtime.shutdown().await.unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
        troupe_runtime::team::WaitOutcome::Waited { timed_out: false }
    );
    assert!(
        h.runtime.agent(&worker_id).is_none(),
        "teammates are released"
    );
}

/// CASES 119 with paused time: an earlier edge does not satisfy a later wait, which times out
/// after exactly its timeout.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_wait_times_out_and_earlier_edges_are_not_replayed() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    h.models.model("w").push([Step::Hang]);
    h.runtime
        .teams()
        .spawn(&lead, "w", "d", "p", MemberContext::Fresh, None)
        .await
        .unwrap();
    while h.models.model("w").requests().is_empty() {
        tokio::task::yield_now().await;
    }
    h.runtime
        .teams()
        .create_task(
            &lead,
            &troupe_team::CreateTask {
                subject: "s".into(),
                description: "d".into(),
                blocked_by: vec![],
                write_scopes: vec![],
            },
        )
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    let outcome = h
        .runtime
        .teams()
        .wait(
            &lead,
            &json!(10_000),
            &tokio_util::sync::CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        troupe_runtime::team::WaitOutcome::Waited { timed_out: true }
    );
    assert_eq!(start.elapsed(), Duration::from_millis(10_000));
    // Real time again: the disposal bound must not race virtual time against the journal thread.
    tokio::time::resume();
    h.runtime.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// CASES §5: the ten tools as a model calls them.

/// Runs one Lead turn made of `steps` and returns its tool results.
pub(super) async fn lead_turn(
    h: &Harness,
    lead: &Agent,
    steps: Vec<Step>,
) -> Vec<(String, bool, Value)> {
    let before = tool_results(h, lead.id()).len();
    let mut steps = steps;
    steps.push(text("turn done"));
    h.models.model("lead").push(steps);
    lead.followup(user("go")).await.unwrap();
    idle(lead).await;
    tool_results(h, lead.id()).split_off(before)
}

/// CASES 133, 134: the Lead's tools and policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_has_exactly_the_ten_team_tools_and_the_policy() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    lead_turn(&h, &lead, vec![]).await;
    let request = &h.models.model("lead").requests()[0];
    let names: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(&names[6..], troupe_runtime::team::TEAM_TOOL_NAMES);
    assert_eq!(names.len(), 16);
    let ChatMessage::System { content } = &request.messages[0] else {
        panic!()
    };
    for fragment in [
        "create teammates only when the user explicitly asks",
        "FS_STALE_VERSION",
        "Bash, formatters, code generators, and scripts are not fully protected",
        "Task readiness never starts an owner",
        "returns noProgress immediately",
        "Your Team role is lead",
    ] {
        assert!(content.contains(fragment), "policy lacks {fragment:?}");
    }
    // Every tool declares a strict output schema.
    for tool in &request.tools[6..] {
        assert_eq!(
            tool.parameters["additionalProperties"], false,
            "{}",
            tool.name
        );
    }
}

/// CASES 136–147 through the tools: roles, noProgress, timeouts, listing, messaging, tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_enforce_roles_and_return_compact_json() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    // A teammate that is inactive: noProgress (CASES 138).
    h.models.model("json-worker").push([text("idle now")]);
    let results = lead_turn(
        &h,
        &lead,
        vec![call(
            "spawn_teammate",
            json!({"name": "json-worker", "description": "d", "prompt": "p"}),
        )],
    )
    .await;
    assert!(!results[0].1);
    assert!(results[0].2["member"]["id"].is_string());
    settled(
        &h,
        &SessionId::new(results[0].2["member"]["id"].as_str().unwrap()).unwrap(),
    )
    .await;
    let results = lead_turn(&h, &lead, vec![
        call("wait_agent", json!({"timeout_ms": 3_600_000})),
        call("wait_agent", json!({"timeout_ms": 9999})),
        call("wait_agent", json!({"timeout_ms": 3_600_001})),
        call("wait_agent", json!({"timeout_ms": 9_007_199_254_740_992_u64})),
        call("interrupt_agent", json!({"target": "lead"})),
        call("team_task_create", json!({"subject": "T", "description": "D", "blocked_by": [], "write_scopes": ["src/team"]})),
        call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "delete"})),
    ]).await;
    assert_eq!(
        results[0].2,
        json!({"timedOut": false, "noProgress": {"reason": "no-active-peer", "message": troupe_runtime::team::NO_PROGRESS_MESSAGE}})
    );
    let lead_raw = raw_results(&h, lead.id());
    assert_eq!(
        lead_raw[1],
        format!(
            r#"{{"timedOut":false,"noProgress":{{"reason":"no-active-peer","message":"{}"}}}}"#,
            troupe_runtime::team::NO_PROGRESS_MESSAGE
        )
    );
    for r in &results[1..4] {
        assert!(r.1);
        assert_eq!(r.2["code"], "TEAM_INVALID_TIMEOUT");
        assert!(
            r.2["message"].as_str().unwrap().starts_with("Error: "),
            "{r:?}"
        );
    }
    assert_eq!(results[4].2["code"], "TEAM_INVALID_TARGET");
    assert_eq!(results[5].2["id"], "task-1");
    assert_eq!(results[5].2["ready"], true);
    assert_eq!(results[6].2["code"], "TEAM_TASK_STALE_REVISION");
    assert!(
        results[6].2["message"].as_str().unwrap().contains("stale"),
        "{:?}",
        results[6]
    );

    // The teammate's side (CASES 136, 141–144), through its own model.
    h.models.model("json-worker").push([
        call(
            "spawn_teammate",
            json!({"name": "sub", "description": "d", "prompt": "p"}),
        ),
        call("list_agents", json!({})),
        call("send_message", json!({"target": "lead", "message": "fyi"})),
        call(
            "followup_task",
            json!({"target": "lead", "message": "please review"}),
        ),
        call("team_task_list", json!({"ready": true, "limit": 1})),
        call("team_task_get", json!({"task_id": "task-1"})),
        call(
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
        ),
        call("interrupt_agent", json!({"target": "json-worker"})),
        text("worker done"),
    ]);
    h.models.model("lead").push([text("reviewed")]);
    let worker_id = SessionId::new(results_member(&h, lead.id())).unwrap();
    h.runtime
        .teams()
        .send(&lead, "json-worker", "go", Delivery::Wakeup)
        .await
        .unwrap();
    quiet(&h, &lead).await;
    let w = tool_results(&h, &worker_id);
    assert!(
        w[0].1
            && w[0].2["message"]
                .as_str()
                .unwrap()
                .contains("only the Team Lead"),
        "{:?}",
        w[0]
    );
    let listed = &w[1].2;
    assert_eq!(listed[0]["name"], "lead");
    assert_eq!(listed[0]["role"], "lead");
    assert_eq!(listed[1]["name"], "json-worker");
    assert_eq!(listed[1]["role"], "teammate");
    // Compact JSON with the keys in the declared schema order (REFERENCE d.2–d.3), not sorted;
    // every live member's host (both in this process: `local`).
    let raw = raw_results(&h, &worker_id);
    assert_eq!(
        raw[1],
        format!(
            r#"[{{"id":"{lead}","name":"lead","role":"lead","status":"idle","model":"test","diagnostics":[],"host":"local","usage":{{"modelCalls":10,"promptTokens":1000,"completionTokens":100,"cachedTokens":0}}}},{{"id":"{worker_id}","name":"json-worker","role":"teammate","status":"running","description":"d","provider":"spawn","context":"fresh","model":"test","diagnostics":[],"host":"local","usage":{{"modelCalls":3,"promptTokens":300,"completionTokens":30,"cachedTokens":0}}}}]"#,
            lead = lead.id()
        )
    );
    assert_eq!(
        raw[6],
        r#"{"id":"task-1","revision":2,"subject":"T","description":"D","status":"in_progress","blockedBy":[],"writeScopes":["src/team"],"ownerName":"json-worker","ready":false,"writeScopeWarnings":[]}"#
    );
    assert_eq!(
        raw[4],
        r#"{"tasks":[{"id":"task-1","revision":1,"subject":"T","description":"D","status":"pending","blockedBy":[],"writeScopes":["src/team"],"ready":true,"writeScopeWarnings":[]}]}"#
    );
    assert!(
        raw[2].starts_with(r#"{"messageId":"team-message-"#)
            && raw[2].ends_with(r#"","status":"accepted"}"#),
        "{}",
        raw[2]
    );
    assert_eq!(w[2].2["status"], "accepted");
    assert_eq!(w[3].2["status"], "accepted");
    assert_eq!(w[4].2["tasks"][0]["id"], "task-1");
    assert_eq!(w[4].2["tasks"][0]["ready"], true);
    assert_eq!(w[5].2["revision"], 1);
    assert_eq!(w[6].2["status"], "in_progress");
    assert_eq!(w[6].2["ownerName"], "json-worker");
    assert_eq!(w[7].2["code"], "TEAM_LEAD_REQUIRED");
}

fn results_member(h: &Harness, lead: &SessionId) -> String {
    tool_results(h, lead)
        .into_iter()
        .find(|r| r.0 == "spawn_teammate")
        .unwrap()
        .2["member"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// CASES 148–151: list filters, cursors, edits and a blocked reassign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_list_filters_cursors_and_lead_actions() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    spawn(&h, &lead, "fork-worker", vec![Step::Hang]).await;
    let r = lead_turn(&h, &lead, vec![
        call("team_task_create", json!({"subject": "one", "description": "d1"})),
        call("team_task_create", json!({"subject": "two", "description": "d2"})),
        call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
        call("team_task_list", json!({"status": "in_progress", "owner": "lead", "cursor": 0, "limit": 1})),
        call("team_task_list", json!({"owner": "unowned", "limit": 1})),
        call("team_task_list", json!({"cursor": 0, "limit": 1})),
        call("team_task_list", json!({"cursor": 1})),
        call("team_task_list", json!({"cursor": -1})),
        call("team_task_list", json!({"limit": 101})),
        call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "edit", "subject": "one!", "description": "d1!", "write_scopes": ["src"]})),
        call("team_task_update", json!({"task_id": "task-1", "expected_revision": 3, "action": "set_dependencies", "blocked_by": ["task-2"]})),
        call("team_task_update", json!({"task_id": "task-1", "expected_revision": 4, "action": "reassign", "owner": "fork-worker"})),
    ]).await;
    let ids = |v: &Value| {
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&r[3].2), ["task-1"]);
    assert_eq!(ids(&r[4].2), ["task-2"]);
    assert_eq!(r[5].2["nextCursor"], 1);
    assert_eq!(ids(&r[6].2), ["task-2"]);
    assert!(r[6].2.get("nextCursor").is_none());
    assert!(r[7].1 && r[8].1, "bad cursor and limit are errors");
    assert_eq!(r[9].2["subject"], "one!");
    assert_eq!(r[10].2["blockedBy"], json!(["task-2"]));
    assert_eq!(r[11].2["code"], "TEAM_TASK_BLOCKED");
    h.runtime.shutdown().await.unwrap();
}

/// CASES 140: an aborted wait is an error result naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_wait_agent_names_the_cause() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    h.models
        .model("lead")
        .push([call("wait_agent", json!({"timeout_ms": 10000}))]);
    lead.followup(user("wait")).await.unwrap();
    // Wait until the tool is running, then cancel the Lead's turn as a user would.
    tool_called(&h, lead.id()).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    lead.cancel(json!({"kind": "user"}), true).await.unwrap();
    idle(&lead).await;
    let r = tool_results(&h, lead.id());
    assert_eq!(r[0].2["code"], "TEAM_WAIT_ABORTED");
    assert_eq!(
        r[0].2["message"],
        "Error: wait_agent aborted: { kind: 'user' }"
    );
    h.runtime.shutdown().await.unwrap();
}

/// CASES 158: a cold-resumed teammate gets the ten tools and its identity again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_resumed_teammate_has_the_team_tools_and_policy() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let worker_id = spawn(
        &h,
        &lead,
        "cold-worker",
        vec![text("first"), text("second")],
    )
    .await;
    settled(&h, &worker_id).await;
    h.runtime
        .teams()
        .send(&lead, "cold-worker", "again", Delivery::Wakeup)
        .await
        .unwrap();
    settled(&h, &worker_id).await;
    let request = &h.models.model("cold-worker").requests()[1];
    let names: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(&names[6..], troupe_runtime::team::TEAM_TOOL_NAMES);
    let ChatMessage::System { content } = &request.messages[0] else {
        panic!()
    };
    assert!(content.contains("Your Team role is teammate; your Team name is cold-worker"));
}

/// CASES 159 and decision 3: agents outside a Team never see the Team tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_profile_agents_cannot_call_team_tools() {
    let h = Harness::new();
    h.models
        .model("lead")
        .push([call("list_agents", json!({})), text("ok")]);
    let lead = h.lead().await;
    lead.followup(user("x")).await.unwrap();
    idle(&lead).await;
    let r = tool_results(&h, lead.id());
    assert_eq!(r[0].2["code"], "UNKNOWN_TOOL");
    assert!(
        r[0].2["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool \"list_agents\"")
    );
}

/// CASES 156: a clashing tool name refuses the Team root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clashing_tool_name_refuses_the_team_setup() {
    struct Clash;
    impl troupe_tools::Tool for Clash {
        fn name(&self) -> &str {
            "spawn_teammate"
        }
        fn description(&self) -> &str {
            "clash"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        }
        fn call<'a>(
            &'a self,
            _: &'a troupe_tools::ToolContext,
            _: Value,
        ) -> troupe_tools::ToolFuture<'a> {
            Box::pin(async { Ok(json!({})) })
        }
    }
    let h = Harness::new();
    let mut options = h.runtime.options().clone();
    options.extra_tools = vec![std::sync::Arc::new(Clash)];
    let rt = troupe_runtime::Runtime::new(h.journal(), options);
    let err = rt
        .create_root(
            SessionId::random(),
            "lead",
            troupe_session::events::Profile::Team,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already registered"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Concurrency: 8 teammates × 1,000 random task mutations through the service, real flushes.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_task_mutations_are_serializable() {
    use rand::{Rng, SeedableRng};
    let h = Harness::new();
    let lead = h.team_lead().await;
    let mut workers = Vec::new();
    for n in 0..8 {
        let id = spawn(&h, &lead, &format!("w{n}"), vec![Step::Hang]).await;
        workers.push(h.runtime.agent(&id).unwrap());
    }
    for n in 0..6 {
        h.runtime
            .teams()
            .create_task(
                &lead,
                &troupe_team::CreateTask {
                    subject: format!("t{n}"),
                    description: "d".into(),
                    blocked_by: vec![],
                    write_scopes: vec![],
                },
            )
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for (n, worker) in workers.into_iter().enumerate() {
        let rt = h.runtime.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(n as u64);
            let mut ok = 0u64;
            for _ in 0..1000 {
                let task = format!("task-{}", rng.random_range(1..=6));
                let Ok(view) = rt.teams().get_task(&worker, &task).await else {
                    continue;
                };
                let action = match rng.random_range(0..4) {
                    0 => troupe_team::TaskAction::Claim,
                    1 => troupe_team::TaskAction::Complete,
                    2 => troupe_team::TaskAction::Release,
                    _ => troupe_team::TaskAction::Reopen,
                };
                let request = troupe_team::UpdateTask::new(task, view.revision, action);
                if rt.teams().update_task(&worker, &request).await.is_ok() {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut successes = 0;
    for t in tasks {
        successes += t.await.unwrap();
    }
    // Every success is one contiguous revision on disk; the fold (with every rule) agrees with
    // the live state, and no task ever had two owners (the fold would refuse otherwise).
    let state = fold(&h, lead.id());
    let revisions: u64 = state.tasks().iter().map(|t| t.revision.get() - 1).sum();
    assert_eq!(revisions, successes, "no lost or phantom update");
    let live = h.runtime.teams().team(lead.id()).unwrap().snapshot().await;
    assert_eq!(
        serde_json::to_value(live.task_views(true)).unwrap(),
        serde_json::to_value(state.task_views(true)).unwrap()
    );
    for task in state.tasks() {
        match task.status {
            troupe_team::TaskStatus::InProgress | troupe_team::TaskStatus::Completed => {
                assert!(task.owner_id.is_some())
            }
            _ => assert!(task.owner_id.is_none()),
        }
    }
    assert!(
        successes > 100,
        "the random walk made progress ({successes})"
    );
    h.runtime.shutdown().await.unwrap();
}

/// Limits given when a Team root is created are recorded and kept across a resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_limits_are_recorded_and_survive_a_resume() {
    let mut h = Harness::with_limits(TeamLimits {
        max_members: 1,
        ..TeamLimits::default()
    });
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let worker = spawn(&h, &lead, "only", vec![text("done")]).await;
    settled(&h, &worker).await;
    h.runtime.shutdown().await.unwrap();
    // A new runtime with default options (as `troupe resume` without limit flags).
    h.restart();
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    assert_eq!(
        h.runtime
            .teams()
            .team(&lead_id)
            .unwrap()
            .limits()
            .max_members,
        1
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(&lead, "second", "d", "p", MemberContext::Fresh, None)
                .await
        ),
        "TEAM_MEMBER_LIMIT"
    );
}

/// REFERENCE c.10.1: concurrent senders to one target are delivered in durable queue order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_to_one_target_keep_queue_order() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let target_id = spawn(&h, &lead, "target", vec![Step::Hang]).await;
    let mut senders = Vec::new();
    for n in 0..4 {
        let id = spawn(&h, &lead, &format!("s{n}"), vec![Step::Hang]).await;
        senders.push(h.runtime.agent(&id).unwrap());
    }
    senders.push(lead.clone());
    model_called(&h.models.model("target"), 1).await;
    let mut sends = Vec::new();
    for (n, sender) in senders.into_iter().enumerate() {
        let rt = h.runtime.clone();
        sends.push(tokio::spawn(async move {
            for k in 0..10 {
                let (_, accepted) = rt
                    .teams()
                    .send(&sender, "target", &format!("{n}-{k}"), Delivery::Quiet)
                    .await
                    .unwrap();
                assert!(accepted);
            }
        }));
    }
    for s in sends {
        s.await.unwrap();
    }
    let queued: Vec<_> = fold(&h, lead.id())
        .messages()
        .iter()
        .filter(|m| m.target_id == target_id)
        .map(|m| m.id.clone())
        .collect();
    assert_eq!(queued.len(), 50);
    let target = h.runtime.agent(&target_id).unwrap();
    let delivered: Vec<_> =
        target.with_transcript(|t| t.next_step().iter().map(|m| m.id.clone()).collect());
    assert_eq!(
        delivered, queued,
        "delivery order must be durable queue order"
    );
    h.runtime.shutdown().await.unwrap();
}

/// CASES 113–114: the timeout is validated first, then an already aborted signal is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_aborted_wait_is_refused_after_timeout_validation() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let token = tokio_util::sync::CancellationToken::new();
    token.cancel();
    assert_eq!(
        code(h.runtime.teams().wait(&lead, &json!(5), &token).await),
        "TEAM_INVALID_TIMEOUT"
    );
    assert_eq!(
        code(h.runtime.teams().wait(&lead, &json!(10_000), &token).await),
        "TEAM_WAIT_ABORTED"
    );
}

/// CASES 107: a wakeup to an inactive teammate whose log cannot be read stays queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wakeup_to_an_unreadable_inactive_teammate_stays_queued() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let worker = spawn(&h, &lead, "w", vec![text("done")]).await;
    settled(&h, &worker).await;
    // Damage before a completed turn: the log is refused as corrupt.
    let path = h.home.path().join(format!("sessions/{worker}.jsonl"));
    let mut text_now = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text_now.lines().collect();
    let mut damaged = lines[..2].join("\n");
    damaged.push_str("\nnot json\n");
    damaged.push_str(&lines[2..].join("\n"));
    damaged.push('\n');
    text_now = damaged;
    std::fs::write(&path, text_now).unwrap();
    let (id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "please", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(!accepted, "the send is stored but not delivered");
    let pending: Vec<_> = fold(&h, lead.id())
        .pending_messages()
        .map(|m| m.id.clone())
        .collect();
    assert_eq!(pending, vec![id]);
    assert!(h.runtime.agent(&worker).is_none());
}

/// REFERENCE c.14: shutdown is bounded by `disposalTimeoutMs` even when a tool ignores
/// cancellation; the overrun is reported as `TEAM_DISPOSAL_TIMEOUT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_by_the_disposal_timeout() {
    static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    struct Stubborn;
    impl troupe_tools::Tool for Stubborn {
        fn name(&self) -> &str {
            "stubborn"
        }
        fn description(&self) -> &str {
            "ignores cancellation"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        }
        fn call<'a>(
            &'a self,
            _: &'a troupe_tools::ToolContext,
            _: Value,
        ) -> troupe_tools::ToolFuture<'a> {
            Box::pin(async {
                STARTED.store(true, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(json!({}))
            })
        }
    }
    let h = Harness::new();
    let mut options = h.runtime.options().clone();
    options.extra_tools = vec![std::sync::Arc::new(Stubborn)];
    options.team_limits = TeamLimits {
        disposal_timeout_ms: 200,
        ..TeamLimits::default()
    };
    let rt = troupe_runtime::Runtime::new(h.journal(), options);
    h.models.model("lead").push([call("stubborn", json!({}))]);
    let lead = rt
        .create_root(
            SessionId::random(),
            "lead",
            troupe_session::events::Profile::Team,
        )
        .await
        .unwrap();
    lead.followup(user("go")).await.unwrap();
    // Wait until the tool really runs (a call cancelled before it starts never runs at all).
    tokio::time::timeout(Duration::from_secs(10), async {
        while !STARTED.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    let start = std::time::Instant::now();
    let err = rt.shutdown().await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        start.elapsed()
    );
    assert!(err.to_string().contains("TEAM_DISPOSAL_TIMEOUT"), "{err}");
}

/// CASES 63: a stale handle of a settled teammate is no member; CASES 127: after shutdown,
/// spawn and send are `TEAM_DISPOSED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_handles_are_not_members_and_a_shut_down_team_is_disposed() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    h.models.model("w").push([Step::Hang]);
    let id = h
        .runtime
        .teams()
        .spawn(&lead, "w", "d", "p", MemberContext::Fresh, None)
        .await
        .unwrap()
        .id;
    let handle = h.runtime.agent(&id).unwrap();
    h.runtime.teams().interrupt(&lead, "w").await.unwrap();
    settled(&h, &id).await;
    // The old activation's handle is stale: disposed, so refused.
    assert_eq!(
        code(h.runtime.teams().list_members(&handle).await),
        "TEAM_DISPOSED"
    );
    h.runtime.shutdown().await.unwrap();
    assert_eq!(
        code(
            h.runtime
                .teams()
                .spawn(&lead, "x", "d", "p", MemberContext::Fresh, None)
                .await
        ),
        "TEAM_DISPOSED"
    );
    assert_eq!(
        code(
            h.runtime
                .teams()
                .send(&lead, "w", "hi", Delivery::Quiet)
                .await
        ),
        "TEAM_DISPOSED"
    );
}

/// CASES 117: aborting one waiter leaves the other, which the next change releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_one_waiter_leaves_the_others_waiting() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    let worker = h.runtime.agent(&w).unwrap();
    // Keep the Lead running too, so the teammate's wait has an active peer.
    h.models.model("lead").push([Step::Hang]);
    lead.followup(user("busy")).await.unwrap();
    model_called(&h.models.model("lead"), 1).await;
    let first_token = tokio_util::sync::CancellationToken::new();
    let (rt1, l1, t1) = (h.runtime.clone(), lead.clone(), first_token.clone());
    let first = tokio::spawn(async move { rt1.teams().wait(&l1, &json!(3_600_000), &t1).await });
    let (rt2, w2) = (h.runtime.clone(), worker.clone());
    let second = tokio::spawn(async move {
        rt2.teams()
            .wait(
                &w2,
                &json!(3_600_000),
                &tokio_util::sync::CancellationToken::new(),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    first_token.cancel();
    assert_eq!(
        ErrorCode::code(&first.await.unwrap().unwrap_err()),
        "TEAM_WAIT_ABORTED"
    );
    assert!(!second.is_finished());
    h.runtime
        .teams()
        .create_task(
            &lead,
            &troupe_team::CreateTask {
                subject: "s".into(),
                description: "d".into(),
                blocked_by: vec![],
                write_scopes: vec![],
            },
        )
        .await
        .unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
        troupe_runtime::team::WaitOutcome::Waited { timed_out: false }
    );
    h.runtime.shutdown().await.unwrap();
}

/// CASES 124: a live child whose record became `failed` shows as failed, is no member, and
/// is still released at shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_child_of_a_failed_record_is_failed_and_still_drained() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let child = SessionId::random();
    hand_append(&lead, provisioning(&lead_id, &child, "odd")).await;
    h.models.model("odd").push([Step::Hang]);
    h.runtime
        .start_child(
            &lead,
            team_child(
                "odd",
                Some(&child),
                troupe_session::events::ChildProvider::Spawn,
                troupe_session::events::Profile::Team,
            ),
        )
        .await
        .unwrap();
    // The record is settled failed while the child lives (as a racing reconciliation would).
    let state = fold(&h, &lead_id);
    let troupe_team::SettleDecision::Append(failed) = state
        .decide_settle_provisioning(
            &child,
            &troupe_team::ProvisioningOutcome::Failed {
                error: "lost race".into(),
            },
        )
        .unwrap()
    else {
        panic!("still provisioning")
    };
    hand_append(&lead, failed).await;
    // The service's own view is rebuilt from the log on attach; check the durable roster.
    let rows = fold(&h, &lead_id);
    assert_eq!(rows.member(&child).unwrap().phase.as_str(), "failed");
    assert!(h.runtime.agent(&child).is_some());
    h.runtime.shutdown().await.unwrap();
    assert!(
        h.runtime.agent(&child).is_none(),
        "the live child is drained"
    );
}

/// CASES 132: a provisioning member whose child log does not match the provisioned
/// continuation (wrong provider) is marked failed with that diagnosis on resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_fails_a_member_whose_child_does_not_match() {
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let child = SessionId::random();
    hand_append(&lead, provisioning(&lead_id, &child, "mismatch")).await;
    h.models.model("mismatch").push([text("ran")]);
    // Started as a fork although the record says spawn.
    h.runtime
        .start_child(
            &lead,
            team_child(
                "mismatch",
                Some(&child),
                troupe_session::events::ChildProvider::Fork,
                troupe_session::events::Profile::Team,
            ),
        )
        .await
        .unwrap();
    settled(&h, &child).await;
    h.runtime.shutdown().await.unwrap();
    h.restart();
    h.runtime.resume_root(&lead_id).await.unwrap();
    let member = fold(&h, &lead_id).member(&child).cloned().unwrap();
    assert_eq!(member.phase.as_str(), "failed");
    assert_eq!(
        member.error.as_deref(),
        Some(troupe_team::RECOVERY_CHILD_MISMATCH)
    );
}

/// CASES 108: when the cold resume of an inactive target fails, the wakeup stays queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cold_resume_leaves_the_wakeup_queued() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let worker = spawn(&h, &lead, "w", vec![text("done")]).await;
    settled(&h, &worker).await;
    h.models.refuse.lock().unwrap().push("w".to_owned());
    let (id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "again", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(!accepted);
    let pending: Vec<_> = fold(&h, lead.id())
        .pending_messages()
        .map(|m| m.id.clone())
        .collect();
    assert_eq!(pending, vec![id]);
}

/// CASES 66: a Team root whose log does not fold is refused on resume and left not running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_root_with_an_invalid_team_log_is_not_resumed() {
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    // A task that starts at revision 2: the fold refuses it.
    let bad = json!({"version": 1, "teamId": lead_id.as_str(), "task": {
        "id": "task-1", "revision": 2, "subject": "s", "description": "d",
        "status": "pending", "blockedBy": [], "writeScopes": []}});
    lead.append_records(vec![troupe_protocol::EventDraft::new("team/task", bad)])
        .unwrap();
    lead.writer().flush().await.unwrap();
    h.runtime.shutdown().await.unwrap();
    h.restart();
    let before = std::fs::read(h.home.path().join(format!("sessions/{lead_id}.jsonl"))).unwrap();
    let err = h.runtime.resume_root(&lead_id).await.unwrap_err();
    // Issue 10 (defect 8): the broken rule is a damaged log (exit 1 in the CLI), named with
    // the session, and nothing was written to it.
    assert_eq!(ErrorCode::code(&err), "TEAM_LOG_INVALID");
    assert!(err.to_string().contains("begin at revision 1"), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("session {lead_id} cannot be resumed: ")),
        "{err}"
    );
    assert_eq!(
        std::fs::read(h.home.path().join(format!("sessions/{lead_id}.jsonl"))).unwrap(),
        before
    );
    assert!(
        h.runtime.agent(&lead_id).is_none(),
        "no half-attached Lead is left running"
    );
}

/// CASES 137, 147, 152 through the tools: the Lead interrupts a running teammate, and a
/// `wait_agent {}` (default timeout) returns when a task is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_tools_interrupt_a_teammate_and_wait_for_a_change() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "tool-worker", vec![Step::Hang]).await;
    model_called(&h.models.model("tool-worker"), 1).await;
    let worker = h.runtime.agent(&w).unwrap();
    // wait_agent {} blocks until the teammate creates a task.
    h.models
        .model("lead")
        .push([call("wait_agent", json!({})), text("saw it")]);
    lead.followup(user("wait")).await.unwrap();
    tool_called(&h, lead.id()).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    h.runtime
        .teams()
        .create_task(
            &worker,
            &troupe_team::CreateTask {
                subject: "s".into(),
                description: "d".into(),
                blocked_by: vec![],
                write_scopes: vec![],
            },
        )
        .await
        .unwrap();
    idle(&lead).await;
    let r = tool_results(&h, lead.id());
    assert_eq!(
        r[0],
        ("wait_agent".to_owned(), false, json!({"timedOut": false}))
    );
    // The Lead's interrupt_agent stops the running teammate (it settles and leaves).
    let r = lead_turn(
        &h,
        &lead,
        vec![call("interrupt_agent", json!({"target": "tool-worker"}))],
    )
    .await;
    assert_eq!(r[0].2, json!({"previousStatus": "running"}));
    settled(&h, &w).await;
    assert_eq!(turn_end_kinds(&h.events(&w)), ["aborted"]);
}

/// Trial finding: a wakeup whose target settles right after taking it is still acknowledged
/// (the settled target's closed log is read through its transcript).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_settling_targets_are_still_acknowledged() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let steps: Vec<Step> = (0..41).map(|n| text(&format!("pong {n}"))).collect();
    let w = spawn(&h, &lead, "pinger", steps).await;
    settled(&h, &w).await;
    for n in 0..40 {
        let (_, accepted) = h
            .runtime
            .teams()
            .send(&lead, "pinger", &format!("ping {n}"), Delivery::Wakeup)
            .await
            .unwrap();
        assert!(accepted, "ping {n} was reported queued");
    }
    quiet(&h, &lead).await;
    assert_eq!(fold(&h, lead.id()).pending_messages().count(), 0);
}

/// Trial finding: `resume` continues a teammate whose turn a crash cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_continues_a_teammate_cut_by_a_crash() {
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let w = spawn(
        &h,
        &lead,
        "worker",
        vec![
            call("bash", json!({"command": "touch started; sleep 30"})),
            text("continued after the crash"),
        ],
    )
    .await;
    tokio::time::timeout(Duration::from_secs(20), async {
        while !h.path("started").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    // Crash: both writers stop without another byte; the abandoned tool is killed.
    let worker = h.runtime.agent(&w).unwrap();
    lead.writer().clone().abandon();
    worker.writer().clone().abandon();
    let _ = worker.cancel(json!({"kind": "crash"}), true).await;
    h.restart();
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    let events = h.events(&w);
    assert!(
        events
            .iter()
            .any(|e| e.kind == "user/message" && e.data["source"]["kind"] == "resume")
    );
    assert_eq!(turn_end_kinds(&events), ["interrupted", "completed"]);
}

/// Trial findings: empty messages are refused; argument errors of Team tools read `Error: …`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_messages_are_refused_and_tool_argument_errors_are_prefixed() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    spawn(&h, &lead, "w", vec![Step::Hang]).await;
    assert_eq!(
        code(
            h.runtime
                .teams()
                .send(&lead, "w", "  ", Delivery::Quiet)
                .await
        ),
        "TEAM_INVALID_ARGUMENT"
    );
    let r = lead_turn(
        &h,
        &lead,
        vec![
            call("team_task_create", json!({"description": "no subject"})),
            call("team_task_list", json!({"limit": 0})),
        ],
    )
    .await;
    for (_, is_error, value) in &r {
        assert!(is_error);
        assert!(
            value["message"].as_str().unwrap().starts_with("Error: "),
            "{value}"
        );
    }
    assert_eq!(r[0].2["code"], "INVALID_ARGUMENTS");
    h.runtime.shutdown().await.unwrap();
}
