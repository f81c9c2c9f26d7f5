//! The Team service as its own owner (issue 12): the one entry point, the tool enum, and the
//! commit path's fallback when redaction changes a record.

use troupe_protocol::SessionId;
use troupe_runtime::Runtime;
use troupe_runtime::team::{OpContext, TEAM_TOOL_NAMES, TeamOp, TeamReply, TeamToolName};
use troupe_session::events::Profile;
use troupe_team::{CreateTask, TaskListQuery};

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
