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
    // The log ends with the running call (and the process group it started, if flushed).
    let call = before.iter().rposition(|e| e.kind == "tool/call").unwrap();
    assert!(before[call + 1..].iter().all(|e| e.kind == "tool/process"));
    let call_seq = before[call].seq.0;

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

/// Whether process `pid` is gone (no entry, or a zombie nobody reaped yet).
fn process_is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('Z') || state.starts_with('X')
        }
    }
}

/// Waits up to 5 s for `pid` to be gone.
async fn wait_gone(pid: i32) -> bool {
    for _ in 0..100 {
        if process_is_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// After a `kill -9`, nothing cancels the running tool: its process group keeps running (and
/// changing the workspace). Recovery must stop it before it tells the model to check the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_group_a_crash_left_running_is_stopped_on_resume() {
    let mut h = Harness::new();
    h.models.model("lead").push([call(
        "bash",
        json!({"command": "sleep 30 & echo $! > bg.pid; wait; echo end >> m"}),
    )]);
    let lead = h.lead().await;
    let id = lead.id().clone();
    lead.followup(user("run the long job")).await.unwrap();
    // Wait until the group is on record (flushed promptly) and its background job runs.
    let (process, background) = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let recorded = h.events(&id).into_iter().find(|e| e.kind == "tool/process");
            let pid = std::fs::read_to_string(h.path("bg.pid")).unwrap_or_default();
            if let (Some(process), Ok(pid)) = (recorded, pid.trim().parse::<i32>()) {
                return (process, pid);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    assert!(process.ignorable, "older builds may skip it");
    assert_eq!(process.data["callId"], "call-lead-0-0");
    assert_eq!(process.data["turn"], 1);
    assert_eq!(process.data["step"], 1);
    let pgid = i32::try_from(process.data["pgid"].as_i64().unwrap()).unwrap();
    assert!(process.data["startTime"].as_u64().unwrap() > 0);
    // The crash: the log stops, the tool is *not* cancelled.
    lead.writer().clone().abandon();
    assert!(!process_is_gone(background));

    h.restart();
    let (_resumed, recovered) = h.runtime.resume_root(&id).await.unwrap();
    assert!(recovered);
    assert!(
        wait_gone(background).await,
        "background job survived resume"
    );
    assert!(wait_gone(pgid).await, "the shell survived resume");
    let events = h.events(&id);
    let result = events.iter().find(|e| e.kind == "tool/result").unwrap();
    assert_eq!(result.data["code"], "TOOL_OUTCOME_UNKNOWN");
    let content = result.data["content"].as_str().unwrap();
    assert!(
        content.contains("leftover process group was still running and has been stopped"),
        "{content}"
    );
    assert!(!h.path("m").exists(), "the job went on after the crash");
    drop(lead);
}

/// A log written by an older build can end right after `turn/start` (the claim came in a
/// later batch). Recovery closes that empty turn and adds nothing else: the prompt stays
/// pending, parked, and runs on the next wake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_ending_right_after_turn_start_gets_only_the_turn_closed() {
    let mut h = Harness::new();
    let lead = h.lead().await;
    let id = lead.id().clone();
    h.runtime.shutdown().await.unwrap();
    let (writer, _) = h.journal().open(&id).unwrap();
    let splice = troupe_session::events::InboxSplice {
        target: troupe_session::events::InboxTarget::NextTurn,
        start: 0,
        removed_count: 0,
        inserted: vec![user("the prompt")],
        outcome: None,
    };
    writer
        .append_batch(vec![
            troupe_protocol::EventDraft::new(
                "agent/inbox/spliced",
                serde_json::to_value(&splice).unwrap(),
            ),
            troupe_protocol::EventDraft::new("turn/start", json!({"turn": 1})),
        ])
        .unwrap();
    writer.close().await.unwrap();
    let before = h.kinds(&id).len();

    h.restart();
    let (lead, recovered) = h.runtime.resume_root(&id).await.unwrap();
    assert!(recovered);
    let events = h.events(&id);
    let added: Vec<&str> = events[before..].iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(added, ["turn/end"]);
    assert_eq!(events[before].data["reason"]["kind"], "interrupted");
    assert!(lead.is_parked());
    assert_eq!(lead.with_transcript(|t| t.next_turn().len()), 1);
    let model = h.models.model("lead");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(model.requests().is_empty(), "no extra turn by itself");
    model.push([text("answered")]);
    assert!(lead.wake_parked());
    idle(&lead).await;
    assert_eq!(model.user_texts(0), ["the prompt"]);
    assert_eq!(turn_end_kinds(&h.events(&id)), ["interrupted", "completed"]);
}
