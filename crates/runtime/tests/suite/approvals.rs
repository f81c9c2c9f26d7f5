//! Approvals' decisions (`troupe_runtime::approval`) over a real journal: deciders racing for
//! one request (exactly one decision stands, whoever comes first), the checks of `decide`
//! (a request nobody made, a decided one: refused, nothing written), `pending` of a Lead and
//! its teammate, and a member's wait that sees a decision made elsewhere.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe_approval::{
    ApprovalError, decide, decision_log_id, pending, read_decision, record_decision,
};
use troupe_journal::Journal;
use troupe_protocol::{EventDraft, SessionHeader, SessionId};
use troupe_runtime::approval::Approvals;
use troupe_session::approval::{
    ApprovalDecided, ApprovalMode, ApprovalPolicy, DecidedBy, Decision,
};

fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

/// A home with a Lead `lead-1` and its teammate `mate-1`, whose log holds request `r1`.
async fn home() -> (tempfile::TempDir, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_home(dir.path());
    let lead = journal
        .create(SessionHeader::new(sid("lead-1"), 1))
        .unwrap();
    lead.append(EventDraft::new("turn/start", json!({"turn": 1})))
        .unwrap();
    lead.close().await.unwrap();
    let mate = journal
        .create(
            SessionHeader::new(sid("mate-1"), 2)
                .with_parent(sid("lead-1"))
                .with_origin("subagent"),
        )
        .unwrap();
    mate.append(EventDraft::new(
        "approval/requested",
        json!({"id": "r1", "callId": "c1", "command": "make", "justification": "why",
               "member": "mate"}),
    ))
    .unwrap();
    mate.close().await.unwrap();
    (dir, journal)
}

fn decision(by: DecidedBy, decision: Decision) -> ApprovalDecided {
    ApprovalDecided {
        id: "r1".to_owned(),
        decision,
        by,
        decided_at: 5,
        session: None,
        rule: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_deciders_leave_exactly_one_decision() {
    let (_dir, journal) = home().await;
    let member = sid("mate-1");
    let deciders = [
        (DecidedBy::Terminal, Decision::Approve),
        (DecidedBy::Cli, Decision::Deny),
        (DecidedBy::Web, Decision::Approve),
        (DecidedBy::Timeout, Decision::Deny),
    ];
    let mut tasks = Vec::new();
    for (by, choice) in deciders.repeat(4) {
        let journal = journal.clone();
        let member = member.clone();
        tasks.push(tokio::spawn(async move {
            let mine = decision(by, choice);
            let standing = record_decision(&journal, &member, mine.clone())
                .await
                .unwrap();
            (mine, standing)
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    let standing = outcomes[0].1.clone();
    assert!(
        outcomes.iter().all(|(_, s)| *s == standing),
        "every decider sees the one decision: {outcomes:?}"
    );
    assert!(outcomes.iter().any(|(mine, _)| *mine == standing));
    let stored = read_decision(&journal, &member, "r1").unwrap().unwrap();
    assert_eq!(
        (stored.decision, stored.by),
        (standing.decision, standing.by)
    );
    assert_eq!(stored.session, Some(member.clone()));
    // The decision log is one session holding one event.
    let log = journal
        .read(&decision_log_id(&member, "r1").unwrap())
        .unwrap();
    assert_eq!(log.events.len(), 1);
    assert_eq!(log.header.origin.as_deref(), Some("approval"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_checks_the_request_and_pending_lists_a_leads_teammates() {
    let (dir, journal) = home().await;
    let listed = pending(&journal, &sid("lead-1")).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].session, sid("mate-1"));
    assert_eq!(listed[0].request.command, "make");
    let files = || {
        std::fs::read_dir(dir.path().join("sessions"))
            .unwrap()
            .count()
    };
    let before = files();
    let missing = decide(
        &journal,
        &sid("lead-1"),
        "r9",
        Decision::Approve,
        DecidedBy::Cli,
    )
    .await;
    assert!(
        matches!(missing, Err(ApprovalError::NotFound { .. })),
        "{missing:?}"
    );
    assert_eq!(files(), before, "nothing written");
    let (member, decided) = decide(
        &journal,
        &sid("lead-1"),
        "r1",
        Decision::Deny,
        DecidedBy::Cli,
    )
    .await
    .unwrap();
    assert_eq!(member, sid("mate-1"));
    assert_eq!(
        (decided.decision, decided.by),
        (Decision::Deny, DecidedBy::Cli)
    );
    assert!(pending(&journal, &sid("lead-1")).unwrap().is_empty());
    let again = decide(
        &journal,
        &sid("mate-1"),
        "r1",
        Decision::Approve,
        DecidedBy::Web,
    )
    .await;
    let Err(e @ ApprovalError::AlreadyDecided { .. }) = again else {
        panic!("{again:?}");
    };
    assert!(
        e.to_string()
            .contains("deny by the user with troupe approve"),
        "{e}"
    );
    assert_eq!(files(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_modes_parse_and_the_policy_defaults_to_never() {
    assert_eq!(
        ApprovalMode::parse("on-request").unwrap(),
        ApprovalMode::OnRequest
    );
    assert_eq!(ApprovalMode::parse("never").unwrap(), ApprovalMode::Never);
    let bad = ApprovalMode::parse("sometimes").unwrap_err();
    assert_eq!(
        troupe_protocol::ErrorCode::code(&bad),
        "APPROVAL_UNKNOWN_MODE"
    );
    let policy = ApprovalPolicy::default();
    assert_eq!(policy.mode, ApprovalMode::Never);
    assert_eq!(policy.timeout(), Duration::from_secs(600));
    assert_eq!(
        serde_json::to_value(ApprovalPolicy {
            mode: ApprovalMode::OnRequest,
            timeout_ms: 90_000
        })
        .unwrap(),
        json!({"mode": "on-request", "timeoutMs": 90_000})
    );
    // A decision made through a runtime's approvals is seen by a decide() elsewhere.
    let (_dir, journal) = home().await;
    let approvals = Arc::new(Approvals::new(journal.clone(), ApprovalPolicy::default()));
    let decided = approvals
        .decide(
            &sid("mate-1"),
            "r1",
            "mate",
            Decision::Always,
            DecidedBy::Terminal,
        )
        .await
        .unwrap();
    assert_eq!(decided.decision, Decision::Always);
    let late = decide(
        &journal,
        &sid("lead-1"),
        "r1",
        Decision::Deny,
        DecidedBy::Cli,
    )
    .await;
    assert!(
        matches!(late, Err(ApprovalError::AlreadyDecided { .. })),
        "{late:?}"
    );
    let repeated = approvals
        .decide(
            &sid("mate-1"),
            "r1",
            "mate",
            Decision::Deny,
            DecidedBy::Terminal,
        )
        .await;
    assert!(matches!(
        repeated,
        Err(ApprovalError::AlreadyDecided { .. })
    ));
}
