//! Continuable children (REFERENCE b.3–b.9, CASES 161–169) and the subagent tools.

use std::time::Duration;

use serde_json::json;
use troupe_protocol::{ErrorCode, SessionId};
use troupe_runtime::{Agent, ChildSpec, Runtime};
use troupe_session::events::{ChildProvider, Profile};

use super::support::*;

fn spec(label: &str, provider: ChildProvider, child_id: Option<&str>) -> ChildSpec {
    ChildSpec {
        provider,
        label: label.to_owned(),
        child_id: child_id.map(|s| SessionId::new(s).unwrap()),
        prompt: format!("task for {label}"),
        continuable: true,
        notify_parent: true,
        profile: Profile::Default,
        model: None,
        cancel: None,
        workspace: None,
    }
}

/// Waits (bounded) until `id` is no longer resident.
async fn settled(rt: &Runtime, id: &SessionId) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while rt.agent(id).is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("child did not settle");
}

async fn lead_with_history(h: &Harness) -> Agent {
    h.models.model("lead").push([text("lead turn one")]);
    let lead = h.lead().await;
    lead.followup(user("lead task")).await.unwrap();
    idle(&lead).await;
    lead
}

/// CASES 161.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_child_id_is_used_and_never_reused() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    h.models.model("w").push([Step::Hang]);
    let started = h
        .runtime
        .start_child(&lead, spec("w", ChildProvider::Spawn, Some("child-1")))
        .await
        .unwrap();
    assert_eq!(started.child_id.as_str(), "child-1");
    let err = h
        .runtime
        .start_child(&lead, spec("w", ChildProvider::Spawn, Some("child-1")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_CHILD");
    let child = h.runtime.agent(&started.child_id).unwrap();
    child.cancel(json!({"kind": "test"}), false).await.unwrap();
    settled(&h.runtime, &started.child_id).await;
    // Only on disk now: still taken, and no agent is created.
    let err = h
        .runtime
        .start_child(&lead, spec("w", ChildProvider::Spawn, Some("child-1")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_CHILD");
    assert!(h.runtime.agent(&started.child_id).is_none());
}

/// CASES 162.
#[test]
fn an_unknown_child_provider_is_refused() {
    let err = ChildProvider::parse("missing").unwrap_err();
    assert_eq!(err.code(), "UNKNOWN_PROVIDER");
    assert!(
        err.to_string()
            .contains("does not support continuable children")
    );
}

/// CASES 163 and b.4: descriptor before the first turn, header lineage, fresh vs fork seeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_carry_a_descriptor_and_fork_children_see_the_completed_prefix() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    h.models.model("fresh").push([text("fresh done")]);
    h.models.model("forked").push([text("fork done")]);
    let fresh = h
        .runtime
        .start_child(&lead, spec("fresh", ChildProvider::Spawn, None))
        .await
        .unwrap();
    let forked = h
        .runtime
        .start_child(&lead, spec("forked", ChildProvider::Fork, None))
        .await
        .unwrap();
    settled(&h.runtime, &fresh.child_id).await;
    settled(&h.runtime, &forked.child_id).await;

    let journal = h.journal();
    let fresh_log = journal.read(&fresh.child_id).unwrap();
    assert_eq!(fresh_log.header.parent_session.as_ref(), Some(lead.id()));
    assert_eq!(fresh_log.header.origin.as_deref(), Some("subagent"));
    assert_eq!(fresh_log.header.seed_length, None);
    let kinds: Vec<&str> = fresh_log.events.iter().map(|e| e.kind.as_str()).collect();
    let descriptor = kinds
        .iter()
        .position(|k| *k == "subagent/descriptor")
        .unwrap();
    assert!(descriptor < kinds.iter().position(|k| *k == "turn/start").unwrap());
    let d = &fresh_log.events[descriptor].data;
    assert_eq!(d["version"], 2);
    assert_eq!(d["mode"], "continuable");
    assert_eq!(d["provider"], "spawn");
    assert_eq!(d["label"], "fresh");
    // The agent's provider and model (CASES 163), and nothing else (no surface metadata).
    assert_eq!(d["agentProvider"], "script");
    assert_eq!(d["agentModel"], "test");
    let mut keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "agentModel",
            "agentProvider",
            "label",
            "mode",
            "provider",
            "version"
        ]
    );

    let fork_log = journal.read(&forked.child_id).unwrap();
    assert!(fork_log.header.seed_length.unwrap() > 0);
    // The fork child's first request holds the lead's completed turn, then its own task.
    assert_eq!(
        h.models.model("forked").user_texts(0),
        ["lead task", "task for forked"]
    );
    assert_eq!(h.models.model("fresh").user_texts(0), ["task for fresh"]);
}

/// CASES 169: a child settling while the parent is idle gives the parent one new turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settling_child_notifies_an_idle_parent_with_one_turn() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    h.models.model("w").push([text("child result 42")]);
    h.models.model("lead").push([text("noted")]);
    let started = h
        .runtime
        .start_child(&lead, spec("w", ChildProvider::Spawn, None))
        .await
        .unwrap();
    settled(&h.runtime, &started.child_id).await;
    h.runtime.wait_quiescent(&lead).await;
    let lead_model = h.models.model("lead");
    assert_eq!(lead_model.requests().len(), 2, "exactly one new lead turn");
    let notice = lead_model.user_texts(1).pop().unwrap();
    assert!(
        notice.contains(&format!("background subagent w ({})", started.child_id)),
        "{notice}"
    );
    assert!(
        notice.contains("finished") && notice.contains("child result 42"),
        "{notice}"
    );
    let source = h
        .events(lead.id())
        .into_iter()
        .rev()
        .find(|e| e.kind == "user/message")
        .unwrap()
        .data["source"]
        .clone();
    assert_eq!(source["kind"], "subagent-settled");
    assert_eq!(source["form"], "notice");
    assert_eq!(source["senderSessionId"], started.child_id.as_str());
}

/// CASES 169: two children settling while the parent runs are consumed in one step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_to_a_running_parent_are_batched_into_one_step() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    let lead_model = h.models.model("lead");
    lead_model.push([
        call(
            "bash",
            json!({"command": "while [ ! -f go ]; do sleep 0.01; done"}),
        ),
        text("both noted"),
    ]);
    lead.followup(user("wait for helpers")).await.unwrap();
    model_called(&lead_model, 2).await;
    h.models.model("a").push([text("A done")]);
    h.models.model("b").push([text("B done")]);
    let a = h
        .runtime
        .start_child(&lead, spec("a", ChildProvider::Spawn, None))
        .await
        .unwrap();
    let b = h
        .runtime
        .start_child(&lead, spec("b", ChildProvider::Spawn, None))
        .await
        .unwrap();
    settled(&h.runtime, &a.child_id).await;
    settled(&h.runtime, &b.child_id).await;
    // Both notices are now pending as steered items; release the tool.
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::write(h.path("go"), "").unwrap();
    h.runtime.wait_quiescent(&lead).await;
    assert_eq!(lead_model.requests().len(), 3, "no extra turn");
    let texts = lead_model.user_texts(2);
    assert_eq!(
        texts.len(),
        4,
        "lead task, wait, and two notices: {texts:?}"
    );
    assert!(texts[2].contains("background subagent") && texts[3].contains("background subagent"));
}

/// b.6: follow-ups reach idle children cold, with exact-parent authorization.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followups_cold_resume_a_settled_child_and_only_its_parent_may_send() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    h.models
        .model("w")
        .push([text("first answer"), text("second answer")]);
    h.models.model("lead").push([text("ok1"), text("ok2")]);
    let started = h
        .runtime
        .start_child(&lead, spec("w", ChildProvider::Spawn, None))
        .await
        .unwrap();
    settled(&h.runtime, &started.child_id).await;
    h.runtime.wait_quiescent(&lead).await;

    // Another root may not address the child.
    h.models.model("other").push([]);
    let other = h
        .runtime
        .create_root(SessionId::random(), "other", Profile::Default)
        .await
        .unwrap();
    let err = h
        .runtime
        .followup_child(&other, &started.child_id, user("hijack"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "UNAUTHORIZED");

    h.runtime
        .followup_child(&lead, &started.child_id, user("more please"))
        .await
        .unwrap();
    settled(&h.runtime, &started.child_id).await;
    h.runtime.wait_quiescent(&lead).await;
    assert_eq!(
        h.models.model("w").user_texts(1),
        ["task for w", "more please"]
    );
}

/// CASES 165 and 167.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_releases_the_selected_child_and_its_descendants_only() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    for name in ["t", "sibling", "grandchild"] {
        h.models.model(name).push([Step::Hang]);
    }
    let t = h
        .runtime
        .start_child(&lead, spec("t", ChildProvider::Spawn, None))
        .await
        .unwrap();
    let sibling = h
        .runtime
        .start_child(&lead, spec("sibling", ChildProvider::Spawn, None))
        .await
        .unwrap();
    let t_agent = h.runtime.agent(&t.child_id).unwrap();
    let grand = h
        .runtime
        .start_child(&t_agent, spec("grandchild", ChildProvider::Spawn, None))
        .await
        .unwrap();
    // Every turn is running (in its model call) before the drain: a child drained before its
    // first turn started has no turn to end (its prompt stays in its inbox).
    for name in ["t", "sibling", "grandchild"] {
        model_called(&h.models.model(name), 1).await;
    }
    // Another live parent may not drain it.
    let err = h
        .runtime
        .drain_children(&t_agent, std::slice::from_ref(&sibling.child_id))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "UNAUTHORIZED");

    h.runtime
        .drain_children(&lead, &[t.child_id.clone(), t.child_id.clone()])
        .await
        .unwrap();
    assert!(h.runtime.agent(&t.child_id).is_none());
    assert!(h.runtime.agent(&grand.child_id).is_none());
    assert!(h.runtime.agent(&sibling.child_id).is_some());
    // The drained child's turn ended as aborted by its parent (`{kind: 'parent'}`, CASES 165),
    // and so did its grandchild's; its inbox is parked, not lost.
    let ends = turn_end_kinds(&h.events(&t.child_id));
    assert_eq!(ends, ["aborted"]);
    for id in [&t.child_id, &grand.child_id] {
        let end = h
            .events(id)
            .into_iter()
            .find(|e| e.kind == "turn/end")
            .unwrap();
        assert_eq!(
            end.data["reason"]["reason"],
            json!({"kind": "parent"}),
            "{id}"
        );
    }
    assert!(
        h.events(&sibling.child_id)
            .iter()
            .all(|e| e.kind != "turn/end"),
        "the sibling's turn is untouched"
    );

    // A stale parent handle (disposed) is refused.
    h.runtime
        .drain_children(&lead, std::slice::from_ref(&sibling.child_id))
        .await
        .unwrap();
    lead.dispose(json!({"kind": "test"})).await.unwrap();
    let err = h.runtime.drain_children(&lead, &[]).await.unwrap_err();
    assert_eq!(err.code(), "UNAUTHORIZED");
}

/// CASES 168 through the runtime: an ancestor's interrupt keeps the child's inbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_keeps_parked_followups_which_run_first_later() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    let w = h.models.model("w");
    w.push([Step::Hang, text("b"), text("c"), text("d")]);
    h.models
        .model("lead")
        .push([text("n1"), text("n2"), text("n3"), text("n4")]);
    let started = h
        .runtime
        .start_child(&lead, spec("w", ChildProvider::Spawn, None))
        .await
        .unwrap();
    model_called(&w, 1).await;
    h.runtime
        .followup_child(&lead, &started.child_id, user("B"))
        .await
        .unwrap();
    h.runtime
        .followup_child(&lead, &started.child_id, user("C"))
        .await
        .unwrap();
    // Self-interrupt and interrupts by non-ancestors are refused.
    let child = h.runtime.agent(&started.child_id).unwrap();
    assert_eq!(
        h.runtime
            .interrupt(&child, &started.child_id)
            .await
            .unwrap_err()
            .code(),
        "UNAUTHORIZED"
    );
    h.runtime.interrupt(&lead, &started.child_id).await.unwrap();
    idle(&child).await;
    assert_eq!(w.requests().len(), 1, "no further model request");
    assert_eq!(child.with_transcript(|t| t.next_turn().len()), 2);

    h.runtime
        .followup_child(&lead, &started.child_id, user("D"))
        .await
        .unwrap();
    settled(&h.runtime, &started.child_id).await;
    assert_eq!(w.user_texts(3), ["task for w", "B", "C", "D"]);
    assert_eq!(
        turn_end_kinds(&h.events(&started.child_id)),
        ["aborted", "completed", "completed", "completed"]
    );
    // Interrupting a child that is not resident is an accepted no-op.
    h.runtime.interrupt(&lead, &started.child_id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subagent_tool_returns_the_helpers_final_answer_without_a_notice() {
    let h = Harness::new();
    let lead_model = h.models.model("lead");
    lead_model.push([
        call(
            "subagent",
            json!({"prompt": "count the files", "label": "counter"}),
        ),
        text("the helper says 3"),
    ]);
    h.models.model("counter").push([text("there are 3 files")]);
    let lead = h.lead().await;
    lead.followup(user("delegate")).await.unwrap();
    h.runtime.wait_quiescent(&lead).await;
    assert_eq!(lead_model.requests().len(), 2, "no settlement notice turn");
    let result = h
        .events(lead.id())
        .into_iter()
        .find(|e| e.kind == "tool/result")
        .unwrap();
    let content: serde_json::Value =
        serde_json::from_str(result.data["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["status"], "completed");
    assert_eq!(content["answer"], "there are 3 files");
    let child_id = SessionId::new(content["childId"].as_str().unwrap()).unwrap();
    let child = h.journal().read(&child_id).unwrap();
    let descriptor = child
        .events
        .iter()
        .find(|e| e.kind == "subagent/descriptor")
        .unwrap();
    assert_eq!(descriptor.data["mode"], "one-shot");
    // A one-shot helper cannot be followed up later.
    let err = h
        .runtime
        .followup_child(&lead, &child_id, user("again"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NOT_RESUMABLE");
    // Helpers do not get the subagent tools themselves (depth limit).
    let helper_tools: Vec<String> = h.models.model("counter").requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(!helper_tools.iter().any(|t| t.starts_with("subagent")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_fork_helpers_see_the_callers_completed_turns() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    let lead_model = h.models.model("lead");
    lead_model.push([
        call("subagent_fork", json!({"prompt": "summarize so far"})),
        text("done"),
    ]);
    h.models.model("subagent").push([text("summary")]);
    lead.followup(user("fork it")).await.unwrap();
    h.runtime.wait_quiescent(&lead).await;
    // The in-flight delegation turn is excluded: only the first, completed turn is seeded.
    assert_eq!(
        h.models.model("subagent").user_texts(0),
        ["lead task", "summarize so far"]
    );
}

/// CASES 164: a caller signal that is already aborted refuses creation; nothing remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_caller_signal_refuses_child_creation() {
    let h = Harness::new();
    let lead = lead_with_history(&h).await;
    let token = tokio_util::sync::CancellationToken::new();
    token.cancel();
    let mut s = spec("w", ChildProvider::Spawn, Some("never-child"));
    s.cancel = Some(token);
    let err = h.runtime.start_child(&lead, s).await.unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
    assert!(
        h.runtime
            .agent(&SessionId::new("never-child").unwrap())
            .is_none()
    );
    assert_eq!(h.runtime.live_ids(), vec![lead.id().clone()]);
    assert!(
        h.journal()
            .read(&SessionId::new("never-child").unwrap())
            .is_err()
    );
}

/// CASES 164: the caller's signal fires while the child's log is being created (its first
/// flush held): creation is refused at the final admission and no child agent remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_signal_fired_during_creation_leaves_no_child() {
    let (h, _, faults) = Harness::faulty();
    let lead = lead_with_history(&h).await;
    let gate = faults.hold_when(append_elsewhere(lead.id(), "subagent/descriptor"));
    let token = tokio_util::sync::CancellationToken::new();
    let mut s = spec("w", ChildProvider::Spawn, Some("late-child"));
    s.cancel = Some(token.clone());
    h.models.model("w").push([text("never")]);
    let (rt, parent) = (h.runtime.clone(), lead.clone());
    let starting = tokio::spawn(async move { rt.start_child(&parent, s).await });
    gate.reached().await;
    token.cancel();
    gate.release();
    let err = starting.await.unwrap().unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
    let id = SessionId::new("late-child").unwrap();
    assert!(h.runtime.agent(&id).is_none());
    assert_eq!(h.runtime.live_ids(), vec![lead.id().clone()]);
    // The log was created (the signal came after), but nothing ran.
    assert!(h.journal().read(&id).is_ok());
    assert!(h.models.model("w").requests().is_empty());
}

/// CASES 166: a child whose disposal fails still leaves the registry; the drain reports
/// `ACTIVATION_TEARDOWN_FAILED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_child_teardown_is_reported_after_the_child_is_gone() {
    let faults = std::sync::Arc::new(FailSwitch::default());
    let h = Harness::with_faults(faults.clone());
    let lead = lead_with_history(&h).await;
    h.models.model("t").push([Step::Hang]);
    let t = h
        .runtime
        .start_child(&lead, spec("t", ChildProvider::Spawn, None))
        .await
        .unwrap();
    model_called(&h.models.model("t"), 1).await;
    faults.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let err = h
        .runtime
        .drain_children(&lead, std::slice::from_ref(&t.child_id))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "ACTIVATION_TEARDOWN_FAILED");
    assert!(err.to_string().contains(t.child_id.as_str()), "{err}");
    assert!(h.runtime.agent(&t.child_id).is_none());
}

/// Sessions whose header names `parent` as their parent.
fn children_of(h: &Harness, parent: &SessionId) -> Vec<SessionId> {
    h.journal()
        .list(&mut |_| {})
        .unwrap()
        .into_iter()
        .filter(|l| l.header.parent_session.as_ref() == Some(parent))
        .map(|l| l.header.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helper_labels_are_member_names_and_bad_ones_are_refused() {
    let h = Harness::new();
    let lead_model = h.models.model("lead");
    lead_model.push([
        Step::Calls(vec![
            (
                "subagent".to_owned(),
                json!({"prompt": "p", "label": "x\u{1b}[31m\nred"}),
            ),
            (
                "subagent".to_owned(),
                json!({"prompt": "p", "label": "lead"}),
            ),
            (
                "subagent".to_owned(),
                json!({"prompt": "p", "label": "a".repeat(65)}),
            ),
            ("subagent".to_owned(), json!({"prompt": "p", "label": ""})),
        ]),
        text("done"),
    ]);
    h.models.model("subagent").push([text("helped")]);
    let lead = h.lead().await;
    lead.followup(user("delegate")).await.unwrap();
    h.runtime.wait_quiescent(&lead).await;
    let results: Vec<serde_json::Value> = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind == "tool/result")
        .map(|e| e.data)
        .collect();
    assert_eq!(results.len(), 4);
    for refused in &results[..3] {
        assert_eq!(refused["code"], "INVALID_ARGUMENTS", "{refused}");
        let content = refused["content"].as_str().unwrap();
        assert!(content.contains("label"), "{content}");
        // The raw control characters are never echoed.
        assert!(
            !content.contains('\u{1b}') && !content.contains("\\u001b"),
            "{content}"
        );
    }
    // An empty label is the default name; only that helper was created.
    let content: serde_json::Value =
        serde_json::from_str(results[3]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["status"], "completed");
    let children = children_of(&h, lead.id());
    assert_eq!(children.len(), 1);
    let descriptor = h
        .events(&children[0])
        .into_iter()
        .find(|e| e.kind == "subagent/descriptor")
        .unwrap();
    assert_eq!(descriptor.data["label"], "subagent");
}

/// One-shot helpers are never resumed, so a crash during a helper's tool call would leave its
/// log inside a turn forever: resuming the root closes it (and stops what it left running).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_the_root_closes_the_open_turns_of_its_helpers() {
    let mut h = Harness::new();
    h.models.model("lead").push([call(
        "subagent",
        json!({"prompt": "do the long part", "label": "worker"}),
    )]);
    h.models.model("worker").push([call(
        "bash",
        json!({"command": "echo $$ > worker.pid; sleep 30"}),
    )]);
    let lead = h.lead().await;
    let id = lead.id().clone();
    lead.followup(user("delegate")).await.unwrap();
    let child_id = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(child) = children_of(&h, &id).pop()
                && h.path("worker.pid").exists()
                && h.kinds(&child).iter().any(|k| k == "tool/process")
            {
                return child;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    let child = h.runtime.agent(&child_id).unwrap();
    // kill -9: both logs stop; nothing is cancelled.
    child.writer().clone().abandon();
    lead.writer().clone().abandon();
    assert!(troupe_journal::ends_inside_turn(&h.events(&child_id)));

    h.restart();
    let (_lead, recovered) = h.runtime.resume_root(&id).await.unwrap();
    assert!(recovered);
    assert!(
        h.runtime.agent(&child_id).is_none(),
        "the helper is not resumed"
    );
    let events = h.events(&child_id);
    assert!(!troupe_journal::ends_inside_turn(&events));
    assert_eq!(turn_end_kinds(&events), ["interrupted"]);
    let result = events.iter().find(|e| e.kind == "tool/result").unwrap();
    assert_eq!(result.data["code"], "TOOL_OUTCOME_UNKNOWN");
    assert!(
        result.data["content"]
            .as_str()
            .unwrap()
            .contains("process group was still running and has been stopped")
    );
    // The file was released: a later resume can open it (and finds nothing more to do).
    let len = events.len();
    let (writer, _) = h.journal().open(&child_id).unwrap();
    writer.close().await.unwrap();
    assert_eq!(h.events(&child_id).len(), len);
    // The root's own interrupted call is closed as before.
    assert_eq!(turn_end_kinds(&h.events(&id)), ["interrupted"]);
    drop((lead, child));
}
