//! Inbox semantics (REFERENCE b.2, CASES 168) and their durability.

use serde_json::json;
use troupe_protocol::ErrorCode;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_followup_is_durable_when_the_call_returns() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([Step::Hang]);
    let lead = h.lead().await;
    let id = lead.followup(user("task")).await.unwrap();
    // Read the file, not memory: the splice holding the message is on disk.
    let on_disk = h.events(lead.id());
    assert!(
        on_disk
            .iter()
            .any(|e| e.kind == "agent/inbox/spliced" && e.data["inserted"][0]["id"] == id.as_str())
    );
    lead.cancel(json!({"kind": "test"}), false).await.unwrap();
    idle(&lead).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steered_and_injected_items_are_claimed_at_the_next_step_in_order() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([
        call(
            "bash",
            json!({"command": "while [ ! -f go ]; do sleep 0.01; done; echo went"}),
        ),
        text("finished"),
    ]);
    let lead = h.lead().await;
    lead.followup(user("task")).await.unwrap();
    model_called(&model, 1).await;
    lead.steer(user("steer S")).await.unwrap();
    lead.inject(user("inject I")).await.unwrap();
    std::fs::write(h.path("go"), "").unwrap();
    idle(&lead).await;
    assert_eq!(model.user_texts(1), ["task", "steer S", "inject I"]);
    assert_eq!(
        turn_end_kinds(&h.events(lead.id())),
        ["completed"],
        "claimed in-turn"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_item_does_not_wake_an_idle_agent_but_precedes_the_next_followup() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([text("first"), text("second")]);
    let lead = h.lead().await;
    lead.followup(user("one")).await.unwrap();
    idle(&lead).await;
    lead.inject(user("quiet note")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(model.requests().len(), 1, "inject must not wake");
    assert_eq!(lead.with_transcript(|t| t.next_step().len()), 1);
    lead.followup(user("two")).await.unwrap();
    idle(&lead).await;
    assert_eq!(model.user_texts(1), ["one", "quiet note", "two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followups_to_a_running_agent_run_as_later_turns_in_fifo_order() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([
        call(
            "bash",
            json!({"command": "while [ ! -f go ]; do sleep 0.01; done"}),
        ),
        text("a"),
        text("b"),
        text("c"),
    ]);
    let lead = h.lead().await;
    lead.followup(user("A")).await.unwrap();
    model_called(&model, 1).await;
    lead.followup(user("B")).await.unwrap();
    lead.followup(user("C")).await.unwrap();
    std::fs::write(h.path("go"), "").unwrap();
    idle(&lead).await;
    let ends = turn_end_kinds(&h.events(lead.id()));
    assert_eq!(ends, ["completed", "completed", "completed"]);
    assert_eq!(model.user_texts(3), ["A", "B", "C"]);
}

/// CASES 168: an interrupt keeps the inbox; parked follow-ups run first on the next waking send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_with_keep_inbox_parks_pending_followups_until_the_next_waking_send() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([Step::Hang, text("b"), text("c"), text("d")]);
    let lead = h.lead().await;
    lead.followup(user("task")).await.unwrap();
    model_called(&model, 1).await;
    lead.followup(user("B")).await.unwrap();
    lead.followup(user("C")).await.unwrap();
    lead.cancel(json!({"kind": "user"}), true).await.unwrap();
    idle(&lead).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(
        model.requests().len(),
        1,
        "no further model request while parked"
    );
    assert!(lead.is_parked());
    assert_eq!(lead.with_transcript(|t| t.next_turn().len()), 2);

    lead.followup(user("D")).await.unwrap();
    idle(&lead).await;
    assert_eq!(model.user_texts(3), ["task", "B", "C", "D"]);
    let events = h.events(lead.id());
    assert_eq!(
        turn_end_kinds(&events),
        ["aborted", "completed", "completed", "completed"]
    );
    let aborted = events.iter().find(|e| e.kind == "turn/end").unwrap();
    assert_eq!(aborted.data["reason"]["reason"], json!({"kind": "user"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_without_keep_inbox_durably_discards_pending_items_even_when_idle() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([text("after clear")]);
    let lead = h.lead().await;
    lead.inject(user("stale note")).await.unwrap();
    lead.cancel(json!({"kind": "user"}), false).await.unwrap();
    assert_eq!(lead.with_transcript(|t| t.next_step().len()), 0);
    let cleared = h
        .events(lead.id())
        .into_iter()
        .find(|e| e.kind == "agent/inbox/spliced" && e.data["outcome"] == "canceled")
        .expect("the clear is recorded");
    assert_eq!(cleared.data["removedCount"], 1);
    lead.followup(user("fresh")).await.unwrap();
    idle(&lead).await;
    assert_eq!(model.user_texts(0), ["fresh"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_tool_call_is_killed_and_answered() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([
        Step::Calls(vec![
            (
                "bash".to_owned(),
                json!({"command": "touch started; sleep 30"}),
            ),
            ("read".to_owned(), json!({"path": "never"})),
        ]),
        text("resumed fine"),
    ]);
    let lead = h.lead().await;
    lead.followup(user("go")).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while !h.path("started").exists() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    lead.cancel(json!({"kind": "user"}), true).await.unwrap();
    idle(&lead).await;
    let results: Vec<_> = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind == "tool/result")
        .map(|e| e.data["code"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(results, ["TOOL_CANCELED", "TOOL_CANCELED"]);
    // The next turn's history answers both calls, so the model sees a coherent conversation.
    lead.followup(user("next")).await.unwrap();
    idle(&lead).await;
    let history = &model.requests()[1].messages;
    let tool_messages = history
        .iter()
        .filter(|m| matches!(m, troupe_llm::ChatMessage::Tool { .. }))
        .count();
    assert_eq!(tool_messages, 2);
    let _ = ErrorCode::code(&troupe_runtime::RuntimeError::Disposed(String::new()));
}
