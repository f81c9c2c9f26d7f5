//! A model answer cut by the output token limit (`finish_reason: length`) in the middle of a
//! tool call's arguments, through the real HTTP client against the loopback fake server: the
//! cut call goes back to the model as a `TOOL_ARGUMENTS_TRUNCATED` tool error, complete calls
//! before it run, and only `MAX_TRUNCATED_REPLIES_IN_A_ROW` cut answers in a row fail the turn.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_llm::{ModelFlags, ModelSpec, ModelSpecExt, ProviderFactory};
use troupe_protocol::SessionId;
use troupe_runtime::{
    ChunkPolicy, MAX_TRUNCATED_REPLIES_IN_A_ROW, Runtime, RuntimeOptions, TOOL_ARGUMENTS_TRUNCATED,
};
use troupe_session::Transcript;
use troupe_session::events::{Profile, TurnEndReason};
use troupe_test_support::fake_openai::{FakeOpenAi, FakeResponse, chunks};
use troupe_tools::ToolLimits;

use super::support::*;

/// The start of a `write` call's arguments that the output limit cut.
const CUT_ARGUMENTS: &str = r#"{"path":"big.py","content":"def main():\n    print('par"#;

/// A runtime over `home`/`workspace` whose model is the fake server.
fn http_runtime(home: &Path, workspace: &Path, server: &FakeOpenAi) -> Runtime {
    let spec = ModelSpec::from_flags(&ModelFlags {
        model: Some("test-model".to_owned()),
        base_url: Some(server.base_url()),
        api_key_env: None,
        tool_choice: None,
    })
    .unwrap();
    let config = spec.resolve(&|_| None).unwrap();
    let models = ProviderFactory::new(config, Default::default()).unwrap();
    Runtime::new(
        Journal::open_home(home),
        RuntimeOptions {
            workspace: workspace.to_path_buf(),
            models: Arc::new(models),
            model_spec: spec,
            chunks: ChunkPolicy::default(),
            tool_limits: ToolLimits::default(),
            max_depth: 1,
            team_limits: troupe_team::TeamLimits::default(),
            stall_after: troupe_team::StallAfter::default(),
            extra_tools: Vec::new(),
            secret_env: Vec::new(),
            secrets: Vec::new(),
            teammate_models: Default::default(),
            project_instructions: None,
            sandbox: troupe_tools::SandboxPolicy::default(),
            mcp_servers: None,
            approval: troupe_session::approval::ApprovalPolicy::default(),
            ledger: Default::default(),
            worktree_root: None,
            placement: Default::default(),
        },
    )
}

/// A streamed answer: some text, the complete calls `(id, name, arguments)`, then a `write`
/// call `cut_id` whose arguments stop after [`CUT_ARGUMENTS`], ending with `finish_reason:
/// length` (as a server does when `max_tokens` is reached) and usage.
fn cut_answer(complete: &[(&str, &str, Value)], cut_id: &str) -> FakeResponse {
    let mut stream = vec![chunks::delta(
        json!({"role": "assistant", "content": "Writing it now."}),
    )];
    let calls = complete
        .iter()
        .map(|(id, name, arguments)| (*id, *name, arguments.to_string()))
        .chain([(cut_id, "write", CUT_ARGUMENTS.to_owned())]);
    for (index, (id, name, arguments)) in calls.enumerate() {
        stream.push(chunks::delta(json!({"tool_calls": [{
            "index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}
        }]})));
        for part in chunks::split_text(&arguments, 3) {
            stream.push(chunks::delta(json!({"tool_calls": [{
                "index": index, "function": {"arguments": part}
            }]})));
        }
    }
    stream.push(chunks::finish("length"));
    stream.push(chunks::usage(10, 4096));
    FakeResponse::sse(stream)
}

fn results_of(events: &[troupe_protocol::Event]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter(|e| e.kind == "tool/result")
        .map(|e| {
            (
                e.data["callId"].as_str().unwrap().to_owned(),
                e.data["code"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_the_output_limit_goes_back_to_the_model_as_a_tool_error() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "plan: split big.py\n").unwrap();
    let server = FakeOpenAi::start().unwrap();
    server.push(cut_answer(
        &[("c1", "read", json!({"path": "notes.txt"}))],
        "c2",
    ));
    server.push(FakeResponse::text("I will write it in parts next time"));
    let rt = http_runtime(home.path(), ws.path(), &server);
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    let id = lead.id().clone();
    lead.followup(user("write big.py")).await.unwrap();
    idle(&lead).await;

    // The turn completed; the complete call ran, the cut one did not.
    let journal = Journal::open_home(home.path());
    let events = journal.read(&id).unwrap().events;
    assert_eq!(turn_end_kinds(&events), ["completed"]);
    assert!(!ws.path().join("big.py").exists());
    assert_eq!(
        results_of(&events),
        [
            ("c1".to_owned(), None),
            ("c2".to_owned(), Some(TOOL_ARGUMENTS_TRUNCATED.to_owned())),
        ]
    );
    let calls: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "tool/call")
        .map(|e| e.data["callId"].as_str().unwrap())
        .collect();
    assert_eq!(calls, ["c1"], "a cut call is never about to run");

    // The log holds the answer as it arrived: both calls, the cut one's raw text.
    let answer = events
        .iter()
        .find(|e| e.kind == "assistant/message")
        .unwrap();
    assert_eq!(answer.data["finishReason"], "length");
    assert_eq!(answer.data["truncatedCalls"][0]["id"], "c2");
    assert_eq!(answer.data["truncatedCalls"][0]["position"], 1);
    assert_eq!(answer.data["truncatedCalls"][0]["arguments"], CUT_ARGUMENTS);
    let recorded_ids: Vec<&str> = answer.data["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(recorded_ids, ["c1", "c2"]);

    // The next request holds the assistant message with both calls (the cut one with valid
    // `{}` arguments) and a result for each: a valid history.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let second = requests[1].messages();
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(second[2]["content"], "Writing it now.");
    let sent_calls = second[2]["tool_calls"].as_array().unwrap();
    assert_eq!(sent_calls.len(), 2);
    assert_eq!(sent_calls[1]["id"], "c2");
    assert_eq!(sent_calls[1]["function"]["name"], "write");
    assert_eq!(sent_calls[1]["function"]["arguments"], "{}");
    assert_eq!(second[3]["tool_call_id"], "c1");
    assert!(
        second[3]["content"]
            .as_str()
            .unwrap()
            .contains("plan: split big.py")
    );
    assert_eq!(second[4]["tool_call_id"], "c2");
    let error: Value = serde_json::from_str(second[4]["content"].as_str().unwrap()).unwrap();
    assert_eq!(error["code"], TOOL_ARGUMENTS_TRUNCATED);
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("Error: "), "{message}");
    assert!(message.contains("output token limit"), "{message}");
    assert!(message.contains("\"write\""), "{message}");
    assert!(
        message.contains(&format!("{} bytes", CUT_ARGUMENTS.len())),
        "{message}"
    );
    assert!(message.contains("smaller arguments"), "{message}");

    // The live history is the fold of the log …
    let live = lead.with_transcript(|t| t.history().to_vec());
    assert_eq!(Transcript::fold(0, &events).unwrap().history(), &live[..]);
    rt.shutdown().await.unwrap();
    drop(lead);
    drop(rt);

    // … and a resumed session continues from the same history: its next request sends it.
    server.push(FakeResponse::text("resumed"));
    let rt = http_runtime(home.path(), ws.path(), &server);
    let (lead, recovered) = rt.resume_root(&id).await.unwrap();
    assert!(!recovered, "the turn had ended: nothing to close");
    assert_eq!(lead.with_transcript(|t| t.history().to_vec()), live);
    lead.followup(user("and now?")).await.unwrap();
    idle(&lead).await;
    let third = server.requests()[2].messages().to_vec();
    assert_eq!(&third[..second.len()], second);
    let rest: Vec<(&str, &str)> = third[second.len()..]
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rest,
        [
            ("assistant", "I will write it in parts next time"),
            ("user", "and now?")
        ]
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_answers_in_a_row_fail_the_turn_at_the_bound_and_a_complete_answer_resets_the_count() {
    assert_eq!(MAX_TRUNCATED_REPLIES_IN_A_ROW, 3);
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = FakeOpenAi::start().unwrap();
    // Turn 1: two cut answers, a complete tool call (the count starts over), two more cut
    // answers, then an answer: it completes.
    server.push(cut_answer(&[], "a1"));
    server.push(cut_answer(&[], "a2"));
    server.push(FakeResponse::tool_calls(
        &[("a3", "glob", json!({"pattern": "*.py"}))],
        2,
    ));
    server.push(cut_answer(&[], "a4"));
    server.push(cut_answer(&[], "a5"));
    server.push(FakeResponse::text("done in parts"));
    // Turn 2: three cut answers in a row: the third fails the turn, as before.
    for id in ["b1", "b2", "b3"] {
        server.push(cut_answer(&[], id));
    }
    server.push(FakeResponse::text("never requested"));
    let rt = http_runtime(home.path(), ws.path(), &server);
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    let id = lead.id().clone();
    lead.followup(user("write big.py")).await.unwrap();
    idle(&lead).await;
    assert_eq!(
        lead.with_transcript(|t| t.last_turn_end().cloned()),
        Some(TurnEndReason::Completed)
    );
    lead.followup(user("again, in one go")).await.unwrap();
    idle(&lead).await;
    assert_eq!(server.request_count(), 9, "nothing after the bound");

    let events = Journal::open_home(home.path()).read(&id).unwrap().events;
    assert_eq!(turn_end_kinds(&events), ["completed", "failed"]);
    let end = events.iter().rfind(|e| e.kind == "turn/end").unwrap();
    assert_eq!(end.data["reason"]["code"], "LLM_TRUNCATED_TOOL_CALL");
    let message = end.data["reason"]["message"].as_str().unwrap();
    assert!(message.contains("`write` (id b3)"), "{message}");
    assert!(message.contains("finish_reason length"), "{message}");
    // The failing answer is not recorded (as any failed model call); the two before it are,
    // each with its tool error, so the history stays valid for the next turn.
    let truncated: Vec<(String, Option<String>)> = results_of(&events)
        .into_iter()
        .filter(|(_, code)| code.as_deref() == Some(TOOL_ARGUMENTS_TRUNCATED))
        .collect();
    let ids: Vec<&str> = truncated.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a1", "a2", "a4", "a5", "b1", "b2"]);
    assert!(
        !events
            .iter()
            .any(|e| e.data.to_string().contains("\"b3\"") && e.kind == "assistant/message")
    );
    let folded = Transcript::fold(0, &events).unwrap();
    assert_eq!(
        folded.history(),
        &lead.with_transcript(|t| t.history().to_vec())[..]
    );
    assert_eq!(folded.truncated_replies_in_a_row(), 2);
    rt.shutdown().await.unwrap();
}
