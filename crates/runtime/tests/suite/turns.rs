//! The turn loop: tools, history as a fold of the log, errors reaching the model.

use serde_json::json;
use troupe_llm::ChatMessage;
use troupe_protocol::ErrorCode;
use troupe_runtime::{Transcript, TurnEndReason};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_step_turn_edits_a_file_and_the_history_is_the_fold_of_the_log() {
    let h = Harness::new();
    std::fs::write(h.path("hello.txt"), "hello world\n").unwrap();
    let model = h.models.model("lead");
    model.push([
        call("read", json!({"path": "hello.txt"})),
        call(
            "edit",
            json!({"path": "hello.txt", "old_string": "world", "new_string": "troupe"}),
        ),
        call("bash", json!({"command": "cat hello.txt"})),
        text("done: the file now greets troupe"),
    ]);
    let lead = h.lead().await;
    lead.followup(user("change world to troupe")).await.unwrap();
    idle(&lead).await;

    assert_eq!(
        std::fs::read_to_string(h.path("hello.txt")).unwrap(),
        "hello troupe\n"
    );
    let answer = lead.with_transcript(|t| t.last_answer().map(str::to_owned));
    assert_eq!(answer.as_deref(), Some("done: the file now greets troupe"));

    // What the model was told at the last step: system, task, and each call with its result.
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    let last = &requests[3].messages;
    assert!(
        matches!(&last[0], ChatMessage::System { content } if content.contains("coding agent"))
    );
    assert!(
        matches!(&last[1], ChatMessage::User { content } if content == "change world to troupe")
    );
    let tool_results: Vec<&String> = last
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(tool_results.len(), 3);
    assert!(tool_results[0].contains("hello world"));
    assert!(tool_results[1].contains("\"replacements\":1"));
    assert!(tool_results[2].contains("hello troupe"));
    assert_eq!(
        requests[3].tools.len(),
        8,
        "core tools + subagent + subagent_fork"
    );

    // The live state is exactly the fold of the file.
    let events = h.events(lead.id());
    let folded = Transcript::fold(0, &events).unwrap();
    let live = lead.with_transcript(|t| t.history().to_vec());
    assert_eq!(folded.history(), &live[..]);
    // The last request preceded the final answer, which the log holds as its last message.
    assert_eq!(&folded.history()[..folded.history().len() - 1], &last[1..]);
    let stats = folded.stats();
    assert_eq!(
        (
            stats.turns,
            stats.tool_calls,
            stats.tokens_in,
            stats.tokens_out
        ),
        (1, 3, 400, 40)
    );
    // The event sequence of a tool step: the call is recorded (and flushed) before its result.
    let kinds = h.kinds(lead.id());
    let first_call = kinds.iter().position(|k| k == "tool/call").unwrap();
    assert_eq!(kinds[first_call + 1], "tool/result");
    assert_eq!(kinds.first().unwrap(), "agent/config");
    assert_eq!(kinds.last().unwrap(), "turn/end");
    assert_eq!(turn_end_kinds(&events), ["completed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_and_invalid_arguments_go_back_to_the_model_as_errors() {
    let h = Harness::new();
    let model = h.models.model("lead");
    model.push([
        Step::Calls(vec![
            ("no_such_tool".to_owned(), json!({})),
            ("read".to_owned(), json!({"path": 5})),
            ("read".to_owned(), json!({"path": "x", "bogus": true})),
        ]),
        text("ok"),
    ]);
    let lead = h.lead().await;
    lead.followup(user("try")).await.unwrap();
    idle(&lead).await;
    let results: Vec<serde_json::Value> = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind == "tool/result")
        .map(|e| e.data)
        .collect();
    let codes: Vec<&str> = results
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["UNKNOWN_TOOL", "INVALID_ARGUMENTS", "INVALID_ARGUMENTS"]
    );
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("unknown tool \\\"no_such_tool\\\"")
    );
    assert!(results[2]["content"].as_str().unwrap().contains("bogus"));
    assert_eq!(turn_end_kinds(&h.events(lead.id())), ["completed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_call_ends_the_turn_as_failed_and_keeps_the_message() {
    let h = Harness::new();
    // No steps queued: the test model fails with LLM_SCRIPT.
    let lead = h.lead().await;
    lead.followup(user("hello")).await.unwrap();
    idle(&lead).await;
    let (reason, history) =
        lead.with_transcript(|t| (t.last_turn_end().cloned(), t.history().to_vec()));
    match reason {
        Some(TurnEndReason::Failed { code, message }) => {
            assert_eq!(code, "LLM_SCRIPT");
            assert!(message.contains("no step 0"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(history, vec![ChatMessage::user("hello")]);
    // The agent stays usable.
    h.models.model("lead").push([text("second try works")]);
    lead.followup(user("again")).await.unwrap();
    idle(&lead).await;
    assert_eq!(
        lead.with_transcript(|t| t.last_answer().map(str::to_owned))
            .as_deref(),
        Some("second try works")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_text_is_coalesced_into_few_chunk_events() {
    let h = Harness::new();
    h.models.model("lead").push([text("a short answer")]);
    let lead = h.lead().await;
    lead.followup(user("hi")).await.unwrap();
    idle(&lead).await;
    let chunks: Vec<_> = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind == "assistant/chunk")
        .collect();
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].data["delta"], "a short answer");
    assert_eq!(chunks[0].data["block"], "text");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_operations_after_dispose_are_refused() {
    let h = Harness::new();
    let lead = h.lead().await;
    lead.dispose(json!({"kind": "test"})).await.unwrap();
    let err = lead.followup(user("late")).await.unwrap_err();
    assert_eq!(err.code(), "AGENT_DISPOSED");
}
