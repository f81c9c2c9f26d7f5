//! The Team service as its own owner (issue 12): the one entry point, the tool enum, and the
//! commit path's fallback when redaction changes a record.

use std::sync::Arc;

use serde_json::json;
use troupe_protocol::SessionId;
use troupe_runtime::Runtime;
use troupe_runtime::team::{OpContext, TEAM_TOOL_NAMES, TeamOp, TeamReply, TeamToolName};
use troupe_session::events::Profile;
use troupe_team::{CreateTask, MemberContext, TaskListQuery};

use super::support::*;
use super::team::fold;

fn task(subject: &str) -> CreateTask {
    CreateTask {
        subject: subject.into(),
        description: "d".into(),
        blocked_by: vec![],
        write_scopes: vec![],
    }
}

/// The tool enum names the ten tools in registration order, finds each by its name, and
/// marks exactly the five whose effect is a Team record in the Lead log.
#[test]
fn the_tool_enum_names_each_tool_once_and_marks_the_writers() {
    let names: Vec<&str> = TeamToolName::ALL.iter().map(|t| t.name()).collect();
    assert_eq!(names, TEAM_TOOL_NAMES);
    for tool in TeamToolName::ALL {
        assert_eq!(TeamToolName::from_name(tool.name()), Some(tool));
    }
    assert_eq!(TeamToolName::from_name("bash"), None);
    let writers: Vec<&str> = TeamToolName::ALL
        .iter()
        .filter(|t| t.writes())
        .map(|t| t.name())
        .collect();
    assert_eq!(
        writers,
        [
            "spawn_teammate",
            "send_message",
            "followup_task",
            "team_task_create",
            "team_task_update"
        ]
    );
}

/// `TeamService::call` is the tools' entry point: a request in, the typed reply out, the same
/// as the typed methods give; a refused request changes nothing.
#[tokio::test]
async fn one_entry_point_carries_every_request() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let teams = h.runtime.teams();
    let created = teams
        .call(
            &lead,
            TeamOp::CreateTask(task("first")),
            OpContext::default(),
        )
        .await
        .unwrap();
    let TeamReply::Task(view) = created else {
        panic!("not a task: {created:?}");
    };
    assert_eq!(view.id.as_str(), "task-1");
    let got = teams
        .call(
            &lead,
            TeamOp::GetTask {
                task_id: "task-1".into(),
            },
            OpContext::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        got,
        TeamReply::Task(teams.get_task(&lead, "task-1").await.unwrap())
    );
    let listed = teams
        .call(
            &lead,
            TeamOp::ListTasks(TaskListQuery::default()),
            OpContext::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        listed,
        TeamReply::Tasks(
            teams
                .list_tasks(&lead, &TaskListQuery::default())
                .await
                .unwrap()
        )
    );
    let members = teams
        .call(&lead, TeamOp::ListAgents, OpContext::default())
        .await
        .unwrap();
    // `list_agents` answers the roster, each row with its usage (none spent yet).
    let TeamReply::Roster(rows) = members else {
        panic!("list_agents answers the roster: {members:?}")
    };
    assert_eq!(
        rows.iter().map(|r| r.member.clone()).collect::<Vec<_>>(),
        teams.list_members(&lead).await.unwrap()
    );
    assert!(rows.iter().all(|r| r.usage.model_calls == 0), "{rows:?}");
    let events = h.events(lead.id()).len();
    let refused = teams
        .call(
            &lead,
            TeamOp::InterruptAgent {
                target: "nobody".into(),
            },
            OpContext::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        troupe_protocol::ErrorCode::code(&refused),
        "TEAM_MEMBER_NOT_FOUND"
    );
    assert_eq!(h.events(lead.id()).len(), events, "nothing appended");
    h.runtime.shutdown().await.unwrap();
}

/// A Team record holding a configured secret is stored redacted, and the live state is the
/// fold of the log — the redacted record, not the checked one (the commit path's fallback).
#[tokio::test]
async fn a_secret_in_a_team_record_is_redacted_in_the_log_and_in_the_live_state() {
    let h = Harness::new();
    let mut options = h.runtime.options().clone();
    options.secrets = vec!["hunter2".into()];
    let rt = Runtime::new(h.journal(), options);
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Team)
        .await
        .unwrap();
    let view = rt
        .teams()
        .create_task(&lead, &task("deploy with hunter2"))
        .await
        .unwrap();
    // The call's own view is what the caller asked for; the log and the state hold `***`.
    assert_eq!(view.subject, "deploy with hunter2");
    let live = rt.teams().team(lead.id()).unwrap().snapshot().await;
    assert_eq!(live.task("task-1").unwrap().subject, "deploy with ***");
    assert_eq!(live, fold(&h, lead.id()));
    // The next commit builds on the stored (redacted) revision.
    let next = rt
        .teams()
        .update_task(
            &lead,
            &troupe_team::UpdateTask::new("task-1", 1, troupe_team::TaskAction::Claim),
        )
        .await
        .unwrap();
    assert_eq!(next.subject, "deploy with ***");
    assert_eq!(
        rt.teams().team(lead.id()).unwrap().snapshot().await,
        fold(&h, lead.id())
    );
    rt.shutdown().await.unwrap();
}

/// Stalled owners on the live board (issue 17 item 2), with the journal's clock fixed: a
/// resident owner whose model call hangs is stalled only once its last event is
/// `stall_after` old; the Lead's list says so once (`stallNotice`), later lists and gets keep
/// the field; a reassign to the Lead ends the stall (nothing was released before).
#[tokio::test]
async fn a_resident_owner_quiet_for_stall_after_is_stalled_and_the_lead_is_told_once() {
    const T0: u64 = 1_800_000_000_000;
    const MINUTE: u64 = 60_000;
    let h = Harness::new();
    let clock = Arc::new(troupe_protocol::FixedClock::new(T0));
    let journal = troupe_journal::Journal::with_backend(
        Arc::new(troupe_journal::JsonlBackend::new(
            h.home.path().join("sessions"),
        )),
        Arc::clone(&clock) as Arc<dyn troupe_protocol::Clock>,
    );
    let rt = Runtime::new(journal, h.runtime.options().clone());
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Team)
        .await
        .unwrap();
    let alpha_model = h.models.model("alpha");
    alpha_model.push([
        call(
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
        ),
        Step::Hang,
    ]);
    let teams = rt.teams();
    teams.create_task(&lead, &task("build")).await.unwrap();
    teams
        .spawn(
            &lead,
            "alpha",
            "d",
            "take task-1",
            MemberContext::Fresh,
            None,
        )
        .await
        .unwrap();
    // alpha has claimed task-1 and is in its second model call, which never answers.
    model_called(&alpha_model, 2).await;
    let list = || async {
        teams
            .list_tasks(&lead, &TaskListQuery::default())
            .await
            .unwrap()
    };
    let page = list().await;
    assert_eq!(page.tasks[0].owner_name.as_deref(), Some("alpha"));
    assert_eq!(page.tasks[0].stalled, None, "resident and just active");
    assert_eq!(page.stall_notice, None);
    clock.advance(10 * MINUTE - 1);
    assert_eq!(list().await.tasks[0].stalled, None);
    clock.advance(1);
    let page = list().await;
    assert_eq!(
        page.tasks[0].stalled,
        Some(troupe_team::Stall {
            reason: troupe_team::StallReason::NoActivity,
            since: Some(T0),
            idle_ms: Some(10 * MINUTE),
        })
    );
    let notice = page.stall_notice.unwrap();
    assert!(
        notice.starts_with(
            "task-1 (revision 2) is stalled: its owner alpha has not run a model call or a \
             tool for 10 min."
        ),
        "{notice}"
    );
    // Told once: the next list keeps the field, without the notice; a get has the field.
    clock.advance(MINUTE);
    let again = list().await;
    assert!(again.tasks[0].stalled.is_some());
    assert_eq!(again.stall_notice, None);
    let got = teams.get_task(&lead, "task-1").await.unwrap();
    assert_eq!(
        got.stalled.map(|s| s.reason),
        Some(troupe_team::StallReason::NoActivity)
    );
    // Nothing was released; the Lead takes the task over with the CAS reassign.
    let mut reassign = troupe_team::UpdateTask::new("task-1", 2, troupe_team::TaskAction::Reassign);
    reassign.owner = Some("lead".into());
    let taken = teams.update_task(&lead, &reassign).await.unwrap();
    assert_eq!(taken.owner_name.as_deref(), Some("lead"));
    assert_eq!(taken.stalled, None, "a mutation's result carries no stall");
    assert_eq!(list().await.tasks[0].stalled, None);
    rt.shutdown().await.unwrap();
}

/// A member's record of where it runs elsewhere follows its host's reports — and only its
/// host's while that record holds: a late report of the host it left (sent before that host
/// released it) neither moves it back nor marks it idle; once its host released it, another
/// host's report is taken.
#[tokio::test]
async fn a_late_report_of_a_former_host_does_not_stand_for_where_a_member_runs() {
    use troupe_runtime::team::{CallerLive, CallerStatus, STATUS_VERSION, StatusEdge};
    let h = Harness::new();
    let lead = h.team_lead().await;
    let member = super::team::spawn(&h, &lead, "alpha", vec![text("done")]).await;
    let teams = h.runtime.teams();
    let edge = |host: &str, status: Option<CallerStatus>| StatusEdge {
        version: STATUS_VERSION,
        team: lead.id().clone(),
        member: member.clone(),
        host: host.to_owned(),
        live: status.map(|status| CallerLive {
            status,
            model: None,
        }),
        ttl_ms: 60_000,
    };
    let hosts = || teams.hosts_elsewhere(lead.id());
    assert!(teams.status_edge(&edge("w1", Some(CallerStatus::Running))));
    assert_eq!(hosts(), [(member.clone(), "w1".to_owned())]);
    assert_eq!(teams.running_elsewhere(lead.id()), 1);
    // The former host's late reports are not taken.
    assert!(!teams.status_edge(&edge("w2", Some(CallerStatus::Idle))));
    assert!(!teams.status_edge(&edge("w2", None)));
    assert_eq!(hosts(), [(member.clone(), "w1".to_owned())]);
    assert_eq!(teams.running_elsewhere(lead.id()), 1);
    // Its host released it: the next host's reports count.
    assert!(teams.status_edge(&edge("w1", None)));
    assert!(hosts().is_empty());
    assert!(teams.status_edge(&edge("w2", Some(CallerStatus::Idle))));
    assert_eq!(hosts(), [(member.clone(), "w2".to_owned())]);
    assert_eq!(teams.running_elsewhere(lead.id()), 0);
}

/// The user's stop halts the Team (`TeamService::halt_all`, the first Ctrl-C): a member still
/// finishing a tool call — here a running teammate, in the bug a teammate on a worker —
/// still has its mail accepted and durable (`queued` in the Lead log), but it wakes nobody:
/// not the parked Lead, not an idle teammate (no cold resume, no placement). The resume's
/// mailbox recovery delivers both, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_users_stop_a_members_mail_wakes_nobody_and_the_resume_delivers_it() {
    use super::team::{quiet, settled, spawn};
    use troupe_team::Delivery;
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let idle_id = spawn(&h, &lead, "idle", vec![text("done")]).await;
    settled(&h, &idle_id).await;
    let busy_id = spawn(&h, &lead, "busy", vec![Step::Hang]).await;
    model_called(&h.models.model("busy"), 1).await;
    let busy = h.runtime.agent(&busy_id).unwrap();
    let teams = h.runtime.teams();
    teams.halt_all();
    let mut held = Vec::new();
    for (target, text) in [("lead", "found it"), ("idle", "check this")] {
        let (id, accepted) = teams
            .send(&busy, target, text, Delivery::Wakeup)
            .await
            .unwrap();
        assert!(!accepted, "mail to {target} is delivered by nobody now");
        held.push(id);
    }
    assert_eq!(lead.status(), troupe_runtime::AgentStatus::Idle);
    assert!(
        h.models.model("lead").requests().is_empty(),
        "the Lead is woken into no turn"
    );
    assert!(
        h.runtime.agent(&idle_id).is_none(),
        "the idle teammate is not cold-resumed"
    );
    let pending: Vec<_> = fold(&h, &lead_id)
        .pending_messages()
        .map(|m| m.id.clone())
        .collect();
    assert_eq!(pending, held, "both stay queued, durable in the Lead log");
    h.runtime.shutdown().await.unwrap();
    h.restart();
    h.models.model("lead").push([text("noted")]);
    h.models.model("idle").push([text("checked")]);
    h.models.model("busy").push([text("stopped")]);
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    assert_eq!(fold(&h, &lead_id).pending_messages().count(), 0);
    for (target, id) in [(&lead_id, &held[0]), (&idle_id, &held[1])] {
        let copies = h
            .events(target)
            .iter()
            .filter(|e| e.kind == "agent/inbox/spliced" && e.data.to_string().contains(id.as_str()))
            .count();
        assert_eq!(copies, 1, "{id} reached {target} once");
    }
    h.runtime.shutdown().await.unwrap();
}
