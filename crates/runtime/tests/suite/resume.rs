//! Cold resume: crash recovery closers (REFERENCE a.9) and parked inboxes across restarts
//! (DESIGN decision 2).

use std::time::Duration;

use serde_json::json;
use troupe_llm::ChatMessage;
use troupe_protocol::ErrorCode;

use super::support::*;

/// Simulates a crash of the process holding `lead`: the journal writer stops without writing
/// anything more, and the abandoned agent's tool is killed.
async fn crash(lead: troupe_runtime::Agent) {
    lead.writer().clone().abandon();
    let _ = lead.cancel(json!({"kind": "crash"}), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_interrupted_during_a_tool_call_is_closed_with_synthetic_results() {
    let mut h = Harness::new();
    let model = h.models.model("lead");
    model.push([Step::Calls(vec![
        (
            "bash".to_owned(),
            json!({"command": "touch started; sleep 30"}),
        ),
        ("read".to_owned(), json!({"path": "notes.txt"})),
    ])]);
    let lead = h.lead().await;
    let id = lead.id().clone();
    lead.followup(user("do the work")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), async {
        while !h.path("started").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    crash(lead).await;
    let before = h.events(&id);
    assert_eq!(before.last().unwrap().kind, "tool/call");
    let call_seq = before.last().unwrap().seq.0;

    h.restart();
    let (lead, recovered) = h.runtime.resume_root(&id).await.unwrap();
    assert!(recovered);
    let events = h.events(&id);
    let closers = &events[before.len()..];
    let kinds: Vec<&str> = closers.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["tool/result", "tool/result", "step/end", "turn/end"]
    );
    assert_eq!(closers[0].data["code"], "TOOL_OUTCOME_UNKNOWN");
    assert_eq!(closers[0].data["sourceEventSeqs"], json!([call_seq]));
    assert_eq!(
        closers[0].data["messageId"],
        format!("interrupted-tool-result-call-lead-0-0-{}", closers[0].seq)
    );
    assert!(
        closers[0].data["content"]
            .as_str()
            .unwrap()
            .contains("outcome is unknown")
    );
    assert_eq!(closers[1].data["code"], "TOOL_NOT_STARTED");
    assert_eq!(closers[3].data["reason"]["kind"], "interrupted");
    // Closers carry the last real event's time, so recovery is deterministic.
    assert!(
        closers
            .iter()
            .all(|e| e.time == before.last().unwrap().time)
    );

    // The work continues with a coherent history: every call answered before the new message.
    model.push([text("checked and finished")]);
    lead.followup(user("continue")).await.unwrap();
    idle(&lead).await;
    let request = model.requests().last().unwrap().clone();
    let roles: Vec<&str> = request
        .messages
        .iter()
        .map(|m| match m {
            ChatMessage::System { .. } => "system",
            ChatMessage::User { .. } => "user",
            ChatMessage::Assistant(_) => "assistant",
            ChatMessage::Tool { .. } => "tool",
        })
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "tool", "user"]
    );
    assert_eq!(turn_end_kinds(&h.events(&id)), ["interrupted", "completed"]);

    // Recovery is idempotent: a second restart adds nothing.
    h.runtime.shutdown().await.unwrap();
    let len = h.events(&id).len();
    h.restart();
    let (_lead, recovered) = h.runtime.resume_root(&id).await.unwrap();
    assert!(!recovered);
    assert_eq!(h.events(&id).len(), len);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_the_model_call_closes_the_open_step() {
    let mut h = Harness::new();
    let model = h.models.model("lead");
    model.push([Step::Hang]);
    let lead = h.lead().await;
    let id = lead.id().clone();
    lead.followup(user("think")).await.unwrap();
    model_called(&model, 1).await;
    crash(lead).await;
    h.restart();
    let (_lead, recovered) = h.runtime.resume_root(&id).await.unwrap();
    assert!(recovered);
    let kinds = h.kinds(&id);
    assert_eq!(&kinds[kinds.len() - 2..], ["step/end", "turn/end"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_inbox_items_survive_a_restart_parked_and_run_on_wake() {
    let mut h = Harness::new();
    let model = h.models.model("lead");
    model.push([text("first")]);
    let lead = h.lead().await;
    let id = lead.id().clone();
    lead.followup(user("one")).await.unwrap();
    idle(&lead).await;
    lead.inject(user("quiet note")).await.unwrap();
    h.runtime.shutdown().await.unwrap();

    h.restart();
    let (lead, _) = h.runtime.resume_root(&id).await.unwrap();
    assert!(lead.is_parked());
    assert_eq!(lead.with_transcript(|t| t.next_step().len()), 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        model.requests().len(),
        1,
        "parked items do not start by themselves"
    );
    model.push([text("second")]);
    assert!(lead.wake_parked());
    idle(&lead).await;
    assert_eq!(model.user_texts(1), ["one", "quiet note"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_runtime_cannot_resume_a_session_that_is_in_use() {
    let h = Harness::new();
    let lead = h.lead().await;
    h.models.model("lead").push([text("x")]);
    lead.followup(user("x")).await.unwrap();
    idle(&lead).await;
    let other = troupe_runtime::Runtime::new(h.journal(), h.runtime.options().clone());
    let err = other.resume_root(lead.id()).await.unwrap_err();
    assert_eq!(err.code(), "JOURNAL_LOCKED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_agent_config_is_not_resumable() {
    let h = Harness::new();
    let journal = h.journal();
    let w = journal
        .create(troupe_protocol::SessionHeader::new(
            troupe_protocol::SessionId::new("bare").unwrap(),
            0,
        ))
        .unwrap();
    w.append(troupe_protocol::EventDraft::new(
        "turn/start",
        json!({"turn": 1}),
    ))
    .unwrap();
    w.flush().await.unwrap();
    drop(w);
    let err = h
        .runtime
        .resume_root(&troupe_protocol::SessionId::new("bare").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NOT_RESUMABLE");
}
