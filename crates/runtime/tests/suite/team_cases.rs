//! CASES §3–§4 lines that need fault injection, held flushes, captured warnings, restarts or
//! shutdown races (see `docs/CASES-COVERAGE.md`). "Restart" = a new runtime over the same files;
//! "unload" = `Runtime::shutdown`. Held flushes use the backend seam (`SinkFaults::hold_when`):
//! the matching durable append waits on its writer thread until the test decides.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_protocol::{EventDraft, SessionId};
use troupe_runtime::Agent;
use troupe_runtime::team::WaitOutcome;
use troupe_team::{
    CreateTask, Delivery, MemberContext, MessageSnapshot, TeamEvent, TeamId, TeamRecord,
    delivered_user_message, team_message_id,
};

use super::support::*;
use super::team::{
    code, fold, hand_append, lead_turn, provisioning, quiet, settled, spawn, team_child,
    tool_called, tool_results,
};

fn task(subject: &str) -> CreateTask {
    CreateTask {
        subject: subject.into(),
        description: "d".into(),
        blocked_by: vec![],
        write_scopes: vec![],
    }
}

fn pending_ids(h: &Harness, lead: &SessionId) -> Vec<String> {
    fold(h, lead)
        .pending_messages()
        .map(|m| m.id.to_string())
        .collect()
}

/// How many events of `id`'s log carry the message `message` (a `user/message` with that id,
/// or an inbox splice inserting it).
fn copies(h: &Harness, id: &SessionId, message: &str) -> (usize, usize) {
    let events = h.events(id);
    let messages = events
        .iter()
        .filter(|e| e.kind == "user/message" && e.data["id"] == message)
        .count();
    let splices = events
        .iter()
        .filter(|e| {
            e.kind == "agent/inbox/spliced"
                && e.data["inserted"]
                    .as_array()
                    .is_some_and(|items| items.iter().any(|m| m["id"] == message))
        })
        .count();
    (messages, splices)
}

/// Waits (bounded) until `task` has not finished for a while: the test's evidence that it is
/// blocked (on a held flush) rather than merely slow.
async fn still_pending<T>(task: &tokio::task::JoinHandle<T>, what: &str) {
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !task.is_finished(),
        "{what} finished while the flush was held"
    );
}

fn spawn_task(
    h: &Harness,
    lead: &Agent,
    name: &str,
) -> tokio::task::JoinHandle<Result<troupe_team::MemberView, troupe_runtime::team::TeamOpError>> {
    let (rt, lead, name) = (h.runtime.clone(), lead.clone(), name.to_owned());
    tokio::spawn(async move {
        rt.teams()
            .spawn(&lead, &name, "d", "p", MemberContext::Fresh, None)
            .await
    })
}

// ---------------------------------------------------------------------------------------
// §4.1 Identity and provisioning.

/// CASES 46: the initial prompt cannot be made durable in the (already live) child: the spawn
/// fails with that error, the member is recorded `failed` with it, and the child is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c46_a_prompt_that_cannot_be_made_durable_fails_the_member_and_drains_the_child() {
    let (h, _, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    faults.fail_when(
        append_elsewhere(lead.id(), "agent/inbox/spliced"),
        "checkpoint failed",
    );
    h.models.model("w").push([Step::Hang]);
    let err = h
        .runtime
        .teams()
        .spawn(&lead, "w", "d", "p", MemberContext::Fresh, None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("checkpoint failed"), "{err}");
    let state = fold(&h, lead.id());
    let member = &state.members()[0];
    assert_eq!(member.phase.as_str(), "failed");
    assert!(
        member
            .error
            .as_deref()
            .unwrap()
            .contains("checkpoint failed"),
        "{member:?}"
    );
    // The child existed (its log holds its descriptor and config), and was drained.
    let child = h.journal().read(&member.id).unwrap();
    assert_eq!(child.header.parent_session.as_ref(), Some(lead.id()));
    assert_eq!(h.runtime.live_ids(), vec![lead.id().clone()]);
    assert!(h.models.model("w").requests().is_empty(), "it never ran");
    let rows = serde_json::to_value(h.runtime.teams().list_members(&lead).await.unwrap()).unwrap();
    assert_eq!(rows[1]["status"], "failed");
}

/// CASES 63: a stale handle and a handle that is not this registry's entry (an agent of
/// another runtime) have no membership; the impostor is refused as `TEAM_NOT_MEMBER`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c63_stale_and_impostor_handles_have_no_membership() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    h.models.model("w").push([Step::Hang]);
    let id = spawn(&h, &lead, "w", vec![]).await;
    let stale = h.runtime.agent(&id).unwrap();
    assert!(h.runtime.teams().team_of(&stale).is_some());
    h.runtime.teams().interrupt(&lead, "w").await.unwrap();
    settled(&h, &id).await;
    assert!(
        h.runtime.teams().team_of(&stale).is_none(),
        "a stale handle"
    );

    let other = Harness::new();
    let impostor = other.team_lead().await;
    assert!(h.runtime.teams().team_of(&impostor).is_none());
    assert_eq!(
        code(h.runtime.teams().list_members(&impostor).await),
        "TEAM_NOT_MEMBER"
    );
    assert_eq!(
        code(h.runtime.teams().create_task(&impostor, &task("s")).await),
        "TEAM_NOT_MEMBER"
    );
    // The real Lead is unaffected.
    assert!(h.runtime.teams().team_of(&lead).is_some());
    h.runtime.shutdown().await.unwrap();
    other.runtime.shutdown().await.unwrap();
}

/// A host fork of `lead` made into an agent: the Lead's seeded prefix, then the Lead's own
/// configuration appended as the fork's (no subagent descriptor).
async fn host_fork(h: &Harness, lead: &SessionId) -> SessionId {
    let config = h
        .events(lead)
        .into_iter()
        .find(|e| e.kind == "agent/config")
        .unwrap()
        .data;
    let fork = SessionId::random();
    let w = h.journal().fork(lead, None, fork.clone()).unwrap();
    w.append(EventDraft::new("agent/config", config)).unwrap();
    w.flush().await.unwrap();
    w.close().await.unwrap();
    fork
}

/// CASES 64: a session whose header names a parent that is not live and that has no subagent
/// descriptor (a host fork of a Lead, resumed on its own) is the Lead of its own Team, and is
/// told so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c64_a_resumed_host_fork_of_a_lead_leads_its_own_team() {
    let mut h = Harness::new();
    h.models.model("lead").push([text("first")]);
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    lead.followup(user("hello")).await.unwrap();
    quiet(&h, &lead).await;
    h.runtime.shutdown().await.unwrap();
    h.restart();
    let fork_id = host_fork(&h, &lead_id).await;
    let (fork, _) = h.runtime.resume_root(&fork_id).await.unwrap();
    let (team, caller) = h.runtime.teams().team_of(&fork).unwrap();
    assert_eq!(team.id().as_str(), fork_id.as_str());
    assert_eq!(caller, fork_id);
    let rows = serde_json::to_value(h.runtime.teams().list_members(&fork).await.unwrap()).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert_eq!(rows[0]["name"], "lead");
    assert_eq!(rows[0]["role"], "lead");
    // Its policy names it the Lead of its own Team (not a teammate of the original Lead).
    h.models.model("lead").push([text("fork answer")]);
    fork.followup(user("who are you")).await.unwrap();
    idle(&fork).await;
    let requests = h.models.model("lead").requests();
    let troupe_llm::ChatMessage::System { content } = &requests.last().unwrap().messages[0] else {
        panic!()
    };
    assert!(
        content.ends_with(&format!(
            "Your Team role is lead; your Team name is lead; your Team id is {fork_id}."
        )),
        "{content}"
    );
    h.runtime.shutdown().await.unwrap();
}

/// CASES 65: an ordinary continuable child whose parent is gone, resumed by id, has no Team and
/// is nobody's child; a teammate resumed by id is not re-interpreted as a Lead either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c65_children_resumed_without_their_parent_have_no_team() {
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    h.models.model("plain").push([text("done")]);
    let plain = h
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
        .unwrap()
        .child_id;
    settled(&h, &plain).await;
    let mate = spawn(&h, &lead, "mate", vec![text("done")]).await;
    settled(&h, &mate).await;
    h.runtime.shutdown().await.unwrap();
    h.restart();

    let (child, _) = h.runtime.resume_root(&plain).await.unwrap();
    assert!(h.runtime.teams().team_of(&child).is_none());
    assert!(h.runtime.parent_of(&plain).is_none());
    assert_eq!(
        code(h.runtime.teams().list_members(&child).await),
        "TEAM_NOT_MEMBER"
    );
    let (teammate, _) = h.runtime.resume_root(&mate).await.unwrap();
    assert!(
        h.runtime.teams().team(&mate).is_none(),
        "an orphaned teammate is not a Team root"
    );
    assert!(h.runtime.teams().team_of(&teammate).is_none());
    // Neither is registered as a live child of anyone: the Lead, resumed, owns no children.
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), h.runtime.wait_quiescent(&lead))
        .await
        .expect("the Lead has no live children");
    assert!(h.runtime.parent_of(&mate).is_none());
    h.runtime.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// §4.3 Mailbox.

/// CASES 100: a queued message the (resident) target already holds is acknowledged without a
/// second copy. Set up as a crash would leave it: quiet mail queued for an inactive teammate
/// and already in its inbox; a wakeup then cold-resumes it, and the older quiet message is
/// acknowledged, not injected again, before the wakeup is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c100_a_message_the_live_target_already_holds_is_acknowledged_once() {
    let (h, log, _) = Harness::faulty();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "w", vec![text("done"), Step::Hang]).await;
    settled(&h, &w).await;
    let (quiet_id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "note", Delivery::Quiet)
        .await
        .unwrap();
    assert!(!accepted);
    // The target's log already holds it (written by hand, through the plain journal).
    {
        let message = fold(&h, lead.id())
            .messages()
            .iter()
            .find(|m| m.id == quiet_id)
            .cloned()
            .unwrap();
        let item = delivered_user_message(&TeamId::new(lead.id().clone()), &message);
        let (writer, _) = h.journal().open(&w).unwrap();
        writer
            .append(EventDraft::new(
                "agent/inbox/spliced",
                json!({"target": "next-step", "start": 0, "inserted": [item]}),
            ))
            .unwrap();
        writer.flush().await.unwrap();
        writer.close().await.unwrap();
    }
    let before = log.len();
    let (wake_id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "act", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(accepted);
    assert!(pending_ids(&h, lead.id()).is_empty(), "both acknowledged");
    // Exactly one copy of the quiet message: the one that was already there.
    assert_eq!(copies(&h, &w, quiet_id.as_str()).1, 1);
    assert_eq!(copies(&h, &w, wake_id.as_str()).1, 1);
    // The first append to the target is the wakeup's; the quiet message's `delivered` record
    // was committed before it (the target held the quiet message durably already).
    let appends: Vec<Append> = log.0.lock().unwrap()[before..].to_vec();
    let target_at = appends.iter().position(|(s, _)| *s == w).unwrap();
    assert_eq!(appends[target_at].1, ["agent/inbox/spliced"], "{appends:?}");
    let quiet_delivered = appends
        .iter()
        .position(|(s, k)| s == lead.id() && k.iter().any(|k| k == "team/message/delivered"))
        .unwrap();
    assert!(quiet_delivered < target_at, "{appends:?}");
    h.runtime.shutdown().await.unwrap();
}

/// CASES 104: a live target (the Lead) whose history already holds the message, after another
/// Team message, is acknowledged by recovery without a new delivery or a new turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c104_a_message_already_in_the_live_targets_history_is_only_acknowledged() {
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let w = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    let worker = h.runtime.agent(&w).unwrap();
    // A first Team message, delivered normally: the Lead takes a turn with it.
    h.models
        .model("lead")
        .push([text("read m0"), text("read m1")]);
    let (m0, accepted) = h
        .runtime
        .teams()
        .send(&worker, "lead", "m0", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(accepted);
    idle(&lead).await;
    // A second one, queued and taken by the Lead, but its `delivered` record never written (as
    // a crash between the two would leave it).
    let m1 = MessageSnapshot {
        id: team_message_id("team-message-m1").unwrap(),
        sender_id: w.clone(),
        sender_name: "w".to_owned(),
        target_id: lead_id.clone(),
        delivery: Delivery::Wakeup,
        content: vec![json!({"type": "text", "text": "m1"})],
    };
    hand_append(
        &lead,
        TeamEvent {
            team_id: TeamId::new(lead_id.clone()),
            record: TeamRecord::MessageQueued(m1.clone()),
        },
    )
    .await;
    lead.followup(delivered_user_message(&TeamId::new(lead_id.clone()), &m1))
        .await
        .unwrap();
    idle(&lead).await;
    assert_eq!(copies(&h, &lead_id, m1.id.as_str()), (1, 1));
    h.runtime.teams().interrupt(&lead, "w").await.unwrap();
    settled(&h, &w).await;
    h.runtime.shutdown().await.unwrap();
    let lead_calls = h.models.model("lead").requests().len();

    h.restart();
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    assert!(pending_ids(&h, &lead_id).is_empty(), "acknowledged");
    assert_eq!(
        copies(&h, &lead_id, m1.id.as_str()),
        (1, 1),
        "no new delivery"
    );
    assert_eq!(copies(&h, &lead_id, m0.as_str()), (1, 1));
    assert_eq!(
        h.models.model("lead").requests().len(),
        lead_calls,
        "no new turn"
    );
    h.runtime.shutdown().await.unwrap();
}

/// CASES 106: the acknowledgement (the Lead's `delivered` record) cannot be made durable: the
/// send still returns (`queued`), the message stays pending, and a warning says why.
#[tokio::test(flavor = "current_thread")]
async fn c106_a_failed_acknowledgement_flush_is_a_warning_and_the_message_stays_queued() {
    let (logs, _guard) = Logs::capture();
    let (h, _, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    faults.fail_when(
        append_of(lead.id(), "team/message/delivered"),
        "forced acknowledgement failure",
    );
    let (id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "note", Delivery::Quiet)
        .await
        .unwrap();
    assert!(!accepted, "not acknowledged");
    assert_eq!(pending_ids(&h, lead.id()), vec![id.to_string()]);
    // The target holds it (its flush came first).
    assert_eq!(copies(&h, &w, id.as_str()).1, 1);
    let warnings = logs.lines_with("acknowledgement flush failed");
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    assert!(
        warnings[0].contains("forced acknowledgement failure") && warnings[0].contains("WARN"),
        "{}",
        warnings[0]
    );
    let _ = h.runtime.shutdown().await;
}

/// CASES 107: a wakeup to an inactive teammate whose log cannot be read stays queued, with a
/// warning.
#[tokio::test(flavor = "current_thread")]
async fn c107_an_uninspectable_inactive_target_leaves_the_wakeup_queued_with_a_warning() {
    let (logs, _guard) = Logs::capture();
    let h = Harness::new();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "w", vec![text("done")]).await;
    settled(&h, &w).await;
    // Damage before a completed turn: the log is refused as corrupt.
    let path = h.home.path().join(format!("sessions/{w}.jsonl"));
    let text_now = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text_now.lines().collect();
    let damaged = format!(
        "{}\nnot json\n{}\n",
        lines[..2].join("\n"),
        lines[2..].join("\n")
    );
    std::fs::write(&path, damaged).unwrap();
    let (id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "please", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(!accepted);
    assert_eq!(pending_ids(&h, lead.id()), vec![id.to_string()]);
    let warnings = logs.lines_with("the target's log could not be inspected");
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    assert!(
        warnings[0].contains("corrupt session file"),
        "{}",
        warnings[0]
    );
    h.runtime.shutdown().await.unwrap();
    // Work left undone because a log failed is the run's failure (DESIGN decision 11).
    let failures = h.runtime.log_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].name, "w");
    assert!(
        failures[0]
            .error
            .contains(&format!("message {id} stays queued"))
            && failures[0].error.contains("corrupt session file"),
        "{failures:?}"
    );
}

/// A wakeup whose target's log cannot be read for a moment (a store electing a leader again:
/// `STORE_IO`) is tried again and delivered once; one that cannot be read for longer than the
/// retries stays queued, and the run's failure names the target (DESIGN decision 11).
#[tokio::test(flavor = "current_thread")]
async fn a_wakeup_is_retried_while_the_store_fails_for_a_moment_and_named_when_it_keeps_failing() {
    let (h, _, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let w = spawn(
        &h,
        &lead,
        "w",
        vec![text("done"), text("again"), text("third")],
    )
    .await;
    settled(&h, &w).await;
    faults.fail_reads(&w, 2);
    let (first, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "again", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(accepted, "delivered after two failed reads");
    assert!(pending_ids(&h, lead.id()).is_empty());
    assert!(h.runtime.log_failures().is_empty());
    settled(&h, &w).await;
    let held = |h: &Harness| {
        let replay = h.journal().read(&w).unwrap();
        replay
            .events
            .iter()
            .filter(|e| e.data.to_string().contains(first.as_str()))
            .count()
    };
    let copies = held(&h);

    faults.fail_reads(&w, 100);
    let (second, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "third", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(!accepted);
    assert_eq!(pending_ids(&h, lead.id()), vec![second.to_string()]);
    h.runtime.shutdown().await.unwrap();
    assert_eq!(held(&h), copies, "the first message was delivered once");
    let failures = h.runtime.log_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].name, "w");
    assert!(
        failures[0]
            .error
            .contains(&format!("message {second} stays queued"))
            && failures[0].error.contains("no responders"),
        "{failures:?}"
    );
}

/// CASES 108: the cold resume of an inactive target fails: queued, with a warning.
#[tokio::test(flavor = "current_thread")]
async fn c108_a_failed_delivery_leaves_the_wakeup_queued_with_a_warning() {
    let (logs, _guard) = Logs::capture();
    let h = Harness::new();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "w", vec![text("done")]).await;
    settled(&h, &w).await;
    h.models.refuse.lock().unwrap().push("w".to_owned());
    let (id, accepted) = h
        .runtime
        .teams()
        .send(&lead, "w", "again", Delivery::Wakeup)
        .await
        .unwrap();
    assert!(!accepted);
    assert_eq!(pending_ids(&h, lead.id()), vec![id.to_string()]);
    let warnings = logs.lines_with("team message remains queued: delivery failed");
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    assert!(warnings[0].contains("no model for w"), "{}", warnings[0]);
    h.runtime.shutdown().await.unwrap();
    // Not a log's failure: the teammate's failure, not JOURNAL_FAILED.
    assert!(h.runtime.log_failures().is_empty());
}

/// CASES 115: a wait is not released while the Lead's flush of the change is held; it is
/// released once the flush completes (waiters only ever see durable events).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c115_a_wait_is_released_only_after_the_changes_flush() {
    let (h, _, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    let (rt, l) = (h.runtime.clone(), lead.clone());
    let waiting = tokio::spawn(async move {
        rt.teams()
            .wait(&l, &json!(3_600_000), &CancellationToken::new())
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished());
    let gate = faults.hold_when(append_of(lead.id(), "team/task"));
    let (rt, l) = (h.runtime.clone(), lead.clone());
    let creating = tokio::spawn(async move { rt.teams().create_task(&l, &task("s")).await });
    gate.reached().await;
    still_pending(&waiting, "the wait").await;
    gate.release();
    creating.await.unwrap().unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
        WaitOutcome::Waited { timed_out: false }
    );
    h.runtime.shutdown().await.unwrap();
}

/// CASES 117: a wait aborted with a string cause says so, verbatim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c117_a_string_abort_cause_is_printed_raw() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    h.models
        .model("lead")
        .push([call("wait_agent", json!({"timeout_ms": 3_600_000}))]);
    lead.followup(user("wait")).await.unwrap();
    tool_called(&h, lead.id()).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    lead.cancel(json!("string cancellation"), true)
        .await
        .unwrap();
    idle(&lead).await;
    let r = tool_results(&h, lead.id());
    assert_eq!(r[0].2["code"], "TEAM_WAIT_ABORTED");
    assert_eq!(
        r[0].2["message"],
        "Error: wait_agent aborted: string cancellation"
    );
    h.runtime.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// §4.3 Disposal and recovery.

/// CASES 122: a teammate creation that fails on its own while the shutdown waits for it is
/// reported by the shutdown; the member is recorded `failed` (the Lead was still live) and no
/// child is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c122_a_creation_failing_during_shutdown_is_reported_by_it() {
    let (h, _, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    // Hold the child's first durable append (its descriptor and config).
    let gate = faults.hold_when(append_elsewhere(lead.id(), "subagent/descriptor"));
    let spawning = spawn_task(&h, &lead, "w");
    gate.reached().await;
    let rt = h.runtime.clone();
    let shutdown = tokio::spawn(async move { rt.shutdown().await });
    still_pending(&shutdown, "the shutdown").await;
    gate.fail("forced creation failure");
    let err = tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("forced creation failure"), "{err}");
    let spawn_err = spawning.await.unwrap().unwrap_err();
    assert!(
        spawn_err.to_string().contains("forced creation failure"),
        "{spawn_err}"
    );
    let state = fold(&h, lead.id());
    assert_eq!(state.members()[0].phase.as_str(), "failed");
    assert!(h.runtime.live_ids().is_empty());
}

/// CASES 122 and 44 (complement): a creation the shutdown itself stops is `TEAM_DISPOSED`,
/// recorded `failed`, leaves no child, and is not reported as a shutdown failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c122_a_creation_stopped_by_the_shutdown_is_disposed_not_a_failure() {
    let (h, _, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let gate = faults.hold_when(append_elsewhere(lead.id(), "subagent/descriptor"));
    h.models.model("w").push([Step::Hang]);
    let spawning = spawn_task(&h, &lead, "w");
    gate.reached().await;
    let rt = h.runtime.clone();
    let shutdown = tokio::spawn(async move { rt.shutdown().await });
    still_pending(&shutdown, "the shutdown").await;
    gate.release();
    tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(code(spawning.await.unwrap()), "TEAM_DISPOSED");
    let member = fold(&h, lead.id()).members()[0].clone();
    assert_eq!(member.phase.as_str(), "failed");
    assert!(h.runtime.live_ids().is_empty());
    assert!(h.models.model("w").requests().is_empty(), "it never ran");
}

/// CASES 124: a live child whose roster record is `failed` shows `failed` in the live roster,
/// is no member, and is still drained at shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c124_the_live_roster_shows_a_failed_record_of_a_live_child_as_failed() {
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let child = SessionId::random();
    hand_append(&lead, provisioning(&lead_id, &child, "odd")).await;
    let troupe_team::SettleDecision::Append(failed) = fold(&h, &lead_id)
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
    h.runtime.shutdown().await.unwrap();
    h.restart();
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    // The child of the failed record is started live (as a creator that lost the race would).
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
    model_called(&h.models.model("odd"), 1).await;
    let rows = serde_json::to_value(h.runtime.teams().list_members(&lead).await.unwrap()).unwrap();
    assert_eq!(rows[1]["name"], "odd");
    assert_eq!(rows[1]["status"], "failed");
    assert_eq!(rows[1]["diagnostics"], json!(["lost race"]));
    let live = h.runtime.agent(&child).unwrap();
    assert!(
        h.runtime.teams().team_of(&live).is_none(),
        "a failed member"
    );
    h.runtime.shutdown().await.unwrap();
    assert!(h.runtime.agent(&child).is_none(), "drained");
}

/// CASES 125: the shutdown waits for an in-flight cold-resume delivery (its follow-up held)
/// instead of cutting it off; the send returns, the message is not lost, and the teammate is
/// released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c125_the_shutdown_waits_for_an_in_flight_cold_resume_delivery() {
    let (h, _, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "w", vec![text("done"), Step::Hang]).await;
    settled(&h, &w).await;
    let gate = faults.hold_when(append_of(&w, "agent/inbox/spliced"));
    let (rt, l) = (h.runtime.clone(), lead.clone());
    let sending =
        tokio::spawn(async move { rt.teams().send(&l, "w", "again", Delivery::Wakeup).await });
    gate.reached().await;
    let rt = h.runtime.clone();
    let shutdown = tokio::spawn(async move { rt.shutdown().await });
    still_pending(&shutdown, "the shutdown").await;
    gate.release();
    tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let (id, accepted) = sending.await.unwrap().unwrap();
    assert!(accepted, "the target holds it and the Lead recorded that");
    assert!(pending_ids(&h, lead.id()).is_empty());
    assert_eq!(copies(&h, &w, id.as_str()).1, 1);
    assert!(h.runtime.agent(&w).is_none(), "the teammate is released");
}

/// CASES 126: the shutdown does not complete while an acknowledgement flush (the Lead's
/// `delivered` record) is held; afterwards nothing is pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c126_the_shutdown_waits_for_a_held_acknowledgement_flush() {
    let (h, _, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "w", vec![Step::Hang]).await;
    model_called(&h.models.model("w"), 1).await;
    let worker = h.runtime.agent(&w).unwrap();
    h.models.model("lead").push([Step::Hang]);
    let gate = faults.hold_when(append_of(lead.id(), "team/message/delivered"));
    let rt = h.runtime.clone();
    let sending = tokio::spawn(async move {
        rt.teams()
            .send(&worker, "lead", "review", Delivery::Wakeup)
            .await
    });
    gate.reached().await;
    let rt = h.runtime.clone();
    let shutdown = tokio::spawn(async move { rt.shutdown().await });
    still_pending(&shutdown, "the shutdown").await;
    gate.release();
    tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let (_, accepted) = sending.await.unwrap().unwrap();
    assert!(accepted);
    assert!(pending_ids(&h, lead.id()).is_empty());
}

/// CASES 128: a recovery failure (the Lead cannot record the reconciliation) is a warning; the
/// resume itself succeeds.
#[tokio::test(flavor = "current_thread")]
async fn c128_a_forced_recovery_failure_is_a_warning() {
    let (logs, _guard) = Logs::capture();
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let ghost = SessionId::random();
    hand_append(&lead, provisioning(&lead_id, &ghost, "ghost")).await;
    h.runtime.shutdown().await.unwrap();
    let faults = h.restart_faulty();
    faults.fail_when(
        append_of(&lead_id, "team/member"),
        "forced recovery failure",
    );
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    let warnings = logs.lines_with("roster reconciliation failed");
    assert_eq!(warnings.len(), 1, "{}", logs.text());
    assert!(
        warnings[0].contains("forced recovery failure"),
        "{}",
        warnings[0]
    );
    // Nothing was recorded: the member is still provisioning on disk.
    assert_eq!(
        fold(&h, &lead_id).member(&ghost).unwrap().phase.as_str(),
        "provisioning"
    );
    let _ = lead;
    let _ = h.runtime.shutdown().await;
}

/// CASES 130: a recovery the shutdown overtakes fails without a warning, and the rest of the
/// recovery (mail to deliver, teammates to continue) does nothing.
#[tokio::test(flavor = "current_thread")]
async fn c130_a_recovery_overtaken_by_the_shutdown_is_silent_and_does_nothing() {
    let (logs, _guard) = Logs::capture();
    let mut h = Harness::new();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let w = spawn(&h, &lead, "w", vec![text("done")]).await;
    settled(&h, &w).await;
    let ghost = SessionId::random();
    hand_append(&lead, provisioning(&lead_id, &ghost, "ghost")).await;
    // A wakeup for the inactive teammate, queued but not delivered (as a crash leaves it).
    let message = MessageSnapshot {
        id: team_message_id("team-message-late").unwrap(),
        sender_id: lead_id.clone(),
        sender_name: "lead".to_owned(),
        target_id: w.clone(),
        delivery: Delivery::Wakeup,
        content: vec![json!({"type": "text", "text": "later"})],
    };
    hand_append(
        &lead,
        TeamEvent {
            team_id: TeamId::new(lead_id.clone()),
            record: TeamRecord::MessageQueued(message.clone()),
        },
    )
    .await;
    h.runtime.shutdown().await.unwrap();
    let w_calls = h.models.model("w").requests().len();

    let faults = h.restart_faulty();
    let gate = faults.hold_when(append_of(&lead_id, "team/member"));
    let rt = h.runtime.clone();
    let id = lead_id.clone();
    let resuming = tokio::spawn(async move { rt.resume_root(&id).await.map(|_| ()) });
    gate.reached().await;
    let rt = h.runtime.clone();
    let shutdown = tokio::spawn(async move { rt.shutdown().await });
    // Let the shutdown close the Team, then make the recovery's write fail.
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.fail("forced recovery failure");
    resuming.await.unwrap().unwrap();
    let _ = shutdown.await.unwrap();
    assert!(logs.text().is_empty(), "{}", logs.text());
    assert_eq!(pending_ids(&h, &lead_id), vec![message.id.to_string()]);
    assert_eq!(h.models.model("w").requests().len(), w_calls, "no delivery");
    assert!(h.runtime.live_ids().is_empty());
}

/// CASES 132: reconciliation leaves a provisioning member whose session is live alone; once
/// that session (a host fork of the Lead: no subagent descriptor) has taken a user message and
/// is gone, reconciliation marks the member failed as not matching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c132_reconciliation_skips_a_live_child_and_fails_a_mismatched_one() {
    let mut h = Harness::new();
    h.models.model("lead").push([text("first")]);
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    lead.followup(user("hello")).await.unwrap();
    quiet(&h, &lead).await;
    h.runtime.shutdown().await.unwrap();
    h.restart();
    let fork_id = host_fork(&h, &lead_id).await;
    {
        // The roster names the fork as a member being provisioned.
        let (writer, _) = h.journal().open(&lead_id).unwrap();
        writer
            .append(provisioning(&lead_id, &fork_id, "forked").to_draft())
            .unwrap();
        writer.flush().await.unwrap();
        writer.close().await.unwrap();
    }
    let (fork, _) = h.runtime.resume_root(&fork_id).await.unwrap();
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    let phase = |h: &Harness| {
        fold(h, &lead_id)
            .member(&fork_id)
            .unwrap()
            .phase
            .as_str()
            .to_owned()
    };
    assert_eq!(phase(&h), "provisioning", "a live session is skipped");
    h.models.model("lead").push([text("fork answer")]);
    fork.followup(user("a user message")).await.unwrap();
    idle(&fork).await;
    let _ = lead;
    h.runtime.shutdown().await.unwrap();
    h.restart();
    h.runtime.resume_root(&lead_id).await.unwrap();
    assert_eq!(phase(&h), "failed");
    assert_eq!(
        fold(&h, &lead_id)
            .member(&fork_id)
            .unwrap()
            .error
            .as_deref(),
        Some(troupe_team::RECOVERY_CHILD_MISMATCH)
    );
    h.runtime.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// Team trial findings.

/// Trial finding: right after `interrupt_agent` returns, the roster no longer shows the target
/// `running` (the interrupt returns once the cut turn has closed): through the service, and
/// through the tools with both calls in one model step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roster_right_after_an_interrupt_shows_the_settled_status() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let status_of = |rows: &serde_json::Value, name: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap()["status"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for round in 0..5 {
        let name = format!("api{round}");
        spawn(&h, &lead, &name, vec![Step::Hang]).await;
        model_called(&h.models.model(&name), 1).await;
        assert_eq!(
            h.runtime.teams().interrupt(&lead, &name).await.unwrap(),
            "running"
        );
        let rows =
            serde_json::to_value(h.runtime.teams().list_members(&lead).await.unwrap()).unwrap();
        let status = status_of(&rows, &name);
        assert!(
            status == "idle" || status == "inactive",
            "round {round}: {status}"
        );
    }
    for round in 0..3 {
        let name = format!("tool{round}");
        spawn(&h, &lead, &name, vec![Step::Hang]).await;
        model_called(&h.models.model(&name), 1).await;
        let r = lead_turn(
            &h,
            &lead,
            vec![Step::Calls(vec![
                ("interrupt_agent".to_owned(), json!({"target": name})),
                ("list_agents".to_owned(), json!({})),
            ])],
        )
        .await;
        assert_eq!(r[0].2, json!({"previousStatus": "running"}));
        let status = status_of(&r[1].2, &name);
        assert!(
            status == "idle" || status == "inactive",
            "round {round}: {status}"
        );
    }
    h.runtime.shutdown().await.unwrap();
}
