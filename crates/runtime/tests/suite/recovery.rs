//! Issue 10: every member's log failure is seen (DESIGN decision 11), and recovery decides
//! from the logs (decision 10): tool calls a crash cut are resolved exactly where the logs
//! describe their effect, spawns and first prompts a crash cut are carried out, and quiet mail
//! starts no turn.

use serde_json::{Value, json};
use troupe_protocol::SessionId;

use super::support::*;
use super::team::{fold, quiet, spawn};

/// Defect 3: a teammate whose writer fails mid-run is named, with the OS error, among the
/// runtime's log failures (which `run`/`resume`/`demo` turn into `JOURNAL_FAILED`, exit 1);
/// the Lead's log is untouched and the teammate's log keeps everything durable before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_whose_writer_fails_mid_run_is_a_log_failure() {
    let (h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    // The teammate's first tool call is the append that fails (disk full, say).
    faults.fail_when(
        append_elsewhere(&lead_id, "tool/call"),
        "No space left on device (os error 28)",
    );
    let w = spawn(
        &h,
        &lead,
        "writer",
        vec![
            call("write", json!({"path": "a.txt", "content": "a\n"})),
            text("wrote"),
        ],
    )
    .await;
    quiet(&h, &lead).await;
    assert!(
        !h.path("a.txt").exists(),
        "the call never became durable, so it never ran"
    );
    // The teardown reports the poisoned writer too; the failure list is what callers read.
    let _ = h.runtime.shutdown().await;
    let failures = h.runtime.log_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].session, w);
    assert_eq!(failures[0].name, "writer");
    assert!(
        failures[0].error.contains("No space left on device"),
        "{failures:?}"
    );
    // Nothing of the failed batch reached the file; what was durable before it is intact.
    let kinds = h.kinds(&w);
    assert!(!kinds.iter().any(|k| k == "tool/call"), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "turn/start"), "{kinds:?}");
}

// ---------------------------------------------------------------------------------------
// Decision 10: tool calls a crash cut are resolved from the logs.

/// The synthetic result recovery wrote for the call named `name` in `id`'s log (the last one).
fn recovered_result(h: &Harness, id: &SessionId, name: &str) -> Value {
    h.events(id)
        .into_iter()
        .rev()
        .find(|e| {
            e.kind == "tool/result"
                && e.data["name"] == name
                && e.data["messageId"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("interrupted-tool-result-"))
        })
        .map(|e| e.data)
        .unwrap_or_else(|| panic!("no recovered result for {name} in {:?}", h.kinds(id)))
}

/// Stops everything of a run whose writer a fault poisoned, as a crash would leave it: the
/// poisoned logs keep what was durable; nothing more is written to them.
async fn crash(h: &mut Harness) {
    let _ = h.runtime.shutdown().await;
    h.restart();
}

/// A Lead `team_task_create` cut after its `tool/call` but before its Team record: the Lead
/// log holds no record of it, so it changed nothing and is asked again (`TOOL_NOT_STARTED`);
/// asked again it creates the task once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_call_cut_before_its_record_is_not_run_and_asked_again() {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    faults.fail_when(append_of(&lead_id, "team/task"), "disk full");
    let create = json!({"subject": "s", "description": "d"});
    h.models
        .model("lead")
        .push([call("team_task_create", create.clone())]);
    lead.followup(user("plan")).await.unwrap();
    idle(&lead).await;
    crash(&mut h).await;
    assert!(fold(&h, &lead_id).tasks().is_empty());

    let (lead, recovered) = h.runtime.resume_root(&lead_id).await.unwrap();
    assert!(recovered);
    let result = recovered_result(&h, &lead_id, "team_task_create");
    assert_eq!(result["code"], "TOOL_NOT_STARTED", "{result}");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("the Lead log holds no Team record of it"),
        "{result}"
    );
    // Asked again (a real model sees "not run"; a script re-takes the step): one task.
    h.models
        .model("lead")
        .push([call("team_task_create", create), text("planned")]);
    lead.followup(user("continue")).await.unwrap();
    idle(&lead).await;
    assert_eq!(fold(&h, &lead_id).tasks().len(), 1);
    let _ = h.runtime.shutdown().await;
}

/// A Lead `team_task_create` cut after its Team record but before its `tool/result`: the call
/// took effect; its result is rebuilt exactly (the `tool/effect` link holds it), nothing is
/// asked again and the board has one task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_call_cut_after_its_record_is_done_with_its_exact_result() {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    // The append after the Team record's: the one that would hold the call's result.
    let after_record = {
        let lead_id = lead_id.clone();
        let seen = std::sync::atomic::AtomicBool::new(false);
        move |s: &SessionId, kinds: &[String]| {
            if *s != lead_id {
                return false;
            }
            if kinds.iter().any(|k| k == "team/task") {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
                return false;
            }
            seen.load(std::sync::atomic::Ordering::SeqCst)
        }
    };
    faults.fail_when(after_record, "disk full");
    h.models.model("lead").push([call(
        "team_task_create",
        json!({"subject": "s", "description": "d", "write_scopes": ["src/"]}),
    )]);
    lead.followup(user("plan")).await.unwrap();
    idle(&lead).await;
    crash(&mut h).await;
    assert_eq!(fold(&h, &lead_id).tasks().len(), 1);
    assert!(
        h.kinds(&lead_id).contains(&"tool/effect".to_owned()),
        "{:?}",
        h.kinds(&lead_id)
    );

    h.runtime.resume_root(&lead_id).await.unwrap();
    let result = recovered_result(&h, &lead_id, "team_task_create");
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["content"],
        json!(serde_json::to_string(&fold(&h, &lead_id).task_view("task-1").unwrap()).unwrap()),
        "the exact text the call returned"
    );
    assert_eq!(fold(&h, &lead_id).tasks().len(), 1);
    let t = troupe_session::Transcript::fold(0, &h.events(&lead_id)).unwrap();
    assert_eq!(
        t.spent_model_calls(),
        t.model_calls(),
        "the step is taken, not asked again"
    );
}

/// A matcher: the next append to a session `is` accepts right after the first one of that
/// session whose batch holds an event of type `kind` — a crash right after that append.
fn next_append(
    is: impl Fn(&SessionId) -> bool + Send + Sync + 'static,
    kind: &'static str,
) -> impl Fn(&SessionId, &[String]) -> bool + Send + Sync + 'static {
    let seen = std::sync::Mutex::new(None::<SessionId>);
    move |s, kinds| {
        if !is(s) {
            return false;
        }
        let mut seen = seen.lock().unwrap();
        match &*seen {
            Some(first) => first == s,
            None => {
                if kinds.iter().any(|k| k == kind) {
                    *seen = Some(s.clone());
                }
                false
            }
        }
    }
}

/// [`next_append`] for session `id`.
fn append_after(
    id: &SessionId,
    kind: &'static str,
) -> impl Fn(&SessionId, &[String]) -> bool + Send + Sync + 'static {
    let id = id.clone();
    next_append(move |s| *s == id, kind)
}

/// A teammate's claim cut after the Lead logged it but before the teammate logged its result:
/// the teammate's recovery finds the claim's link in the Lead log and rebuilds its result
/// (revision 2, owned by the teammate); the claim is not made twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammates_team_call_is_resolved_from_the_lead_log() {
    let (mut h, log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    h.runtime
        .teams()
        .create_task(
            &lead,
            &troupe_team::CreateTask {
                subject: "s".to_owned(),
                description: "d".to_owned(),
                blocked_by: Vec::new(),
                write_scopes: Vec::new(),
            },
        )
        .await
        .unwrap();
    let claim = json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"});
    // The teammate's append after its claim's `tool/call` holds its result: fail it.
    let not_lead = lead_id.clone();
    faults.fail_when(
        next_append(move |s| *s != not_lead, "tool/call"),
        "disk full",
    );
    let w = spawn(&h, &lead, "worker", vec![call("team_task_update", claim)]).await;
    let _ = log;
    quiet(&h, &lead).await;
    crash(&mut h).await;
    let task = fold(&h, &lead_id).task_view("task-1").unwrap();
    assert_eq!(
        (task.revision, task.owner_name.as_deref()),
        (2, Some("worker"))
    );

    h.models.model("worker").push([text("claimed it")]);
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    let result = recovered_result(&h, &w, "team_task_update");
    assert_eq!(result["isError"], false, "{result}");
    let view: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    assert_eq!(view["revision"], 2, "{view}");
    assert_eq!(view["ownerName"], "worker", "{view}");
    quiet(&h, &lead).await;
    // The cut turn was continued; the claim was not repeated (it would be stale now).
    assert_eq!(fold(&h, &lead_id).task_view("task-1").unwrap().revision, 2);
    let codes: Vec<String> = h
        .events(&w)
        .iter()
        .filter(|e| e.kind == "tool/result")
        .filter_map(|e| e.data["code"].as_str().map(str::to_owned))
        .collect();
    assert!(codes.is_empty(), "{codes:?}");
    let _ = h.runtime.shutdown().await;
}

/// Runs one Lead step `edit a.txt` (after a read in an earlier turn) and crashes right after
/// the edit changed the file, before its result was logged. Returns the harness and the
/// Lead's id, with `a.txt` holding the edit.
async fn crash_after_an_edit() -> (Harness, SessionId) {
    let (mut h, _log, faults) = Harness::faulty();
    std::fs::write(h.path("a.txt"), "one\ntwo\n").unwrap();
    let lead = h.lead().await;
    let lead_id = lead.id().clone();
    h.models
        .model("lead")
        .push([call("read", json!({"path": "a.txt"})), text("read it")]);
    lead.followup(user("read")).await.unwrap();
    idle(&lead).await;
    faults.fail_when(append_after(&lead_id, "tool/call"), "disk full");
    h.models.model("lead").push([call(
        "edit",
        json!({"path": "a.txt", "old_string": "two", "new_string": "2"}),
    )]);
    lead.followup(user("edit")).await.unwrap();
    idle(&lead).await;
    crash(&mut h).await;
    assert_eq!(
        std::fs::read_to_string(h.path("a.txt")).unwrap(),
        "one\n2\n"
    );
    (h, lead_id)
}

/// `edit` cut after it wrote: the file holds the recorded post-image, so the call is done and
/// its result is rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_whose_file_holds_its_post_image_is_done() {
    let (h, lead_id) = crash_after_an_edit().await;
    let call = h
        .events(&lead_id)
        .into_iter()
        .rev()
        .find(|e| e.kind == "tool/call")
        .unwrap();
    assert!(
        call.data["effect"]["preImage"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    h.runtime.resume_root(&lead_id).await.unwrap();
    let result = recovered_result(&h, &lead_id, "edit");
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["content"],
        json!({"path": "a.txt", "replacements": 1}).to_string()
    );
}

/// `edit` cut before it wrote (the file is still at the recorded pre-image): not run, asked
/// again (`TOOL_NOT_STARTED`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_whose_file_holds_its_pre_image_is_not_run() {
    let (h, lead_id) = crash_after_an_edit().await;
    // As if the crash came before the write.
    std::fs::write(h.path("a.txt"), "one\ntwo\n").unwrap();
    h.runtime.resume_root(&lead_id).await.unwrap();
    let result = recovered_result(&h, &lead_id, "edit");
    assert_eq!(result["code"], "TOOL_NOT_STARTED", "{result}");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("a.txt is exactly as it was before the call"),
        "{result}"
    );
    let t = troupe_session::Transcript::fold(0, &h.events(&lead_id)).unwrap();
    assert_eq!(
        t.spent_model_calls() + 1,
        t.model_calls(),
        "the step is asked again"
    );
}

/// `edit` whose file holds neither image: someone else changed it; the outcome stays unknown
/// and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_whose_file_changed_since_is_unknown_and_says_so() {
    let (h, lead_id) = crash_after_an_edit().await;
    std::fs::write(h.path("a.txt"), "someone else\n").unwrap();
    h.runtime.resume_root(&lead_id).await.unwrap();
    let result = recovered_result(&h, &lead_id, "edit");
    assert_eq!(result["code"], "TOOL_OUTCOME_UNKNOWN", "{result}");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("was changed by someone else"),
        "{result}"
    );
}

/// Read-only calls cut mid-run are not run (they change nothing), and `bash` stays unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_calls_are_not_run_and_bash_stays_unknown() {
    let (mut h, _log, faults) = Harness::faulty();
    std::fs::write(h.path("a.txt"), "x\n").unwrap();
    let lead = h.lead().await;
    let lead_id = lead.id().clone();
    faults.fail_when(append_after(&lead_id, "tool/call"), "disk full");
    h.models.model("lead").push([Step::Calls(vec![
        ("grep".to_owned(), json!({"pattern": "x"})),
        ("bash".to_owned(), json!({"command": "true"})),
    ])]);
    lead.followup(user("look")).await.unwrap();
    idle(&lead).await;
    crash(&mut h).await;
    h.runtime.resume_root(&lead_id).await.unwrap();
    let grep = recovered_result(&h, &lead_id, "grep");
    assert_eq!(grep["code"], "TOOL_NOT_STARTED", "{grep}");
    assert!(grep["content"].as_str().unwrap().contains("it only reads"));
    // bash's call was never logged (the failed append held it): it did not start.
    let bash = recovered_result(&h, &lead_id, "bash");
    assert_eq!(bash["code"], "TOOL_NOT_STARTED", "{bash}");
    assert!(bash["content"].as_str().unwrap().contains("it did not run"));
    // Nothing of the step took effect, so a script takes it again.
    let t = troupe_session::Transcript::fold(0, &h.events(&lead_id)).unwrap();
    assert_eq!(t.spent_model_calls() + 1, t.model_calls());
}

/// A `bash` call cut while running stays `TOOL_OUTCOME_UNKNOWN`: its effect is outside
/// Troupe's knowledge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_call_cut_while_running_stays_unknown() {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.lead().await;
    let lead_id = lead.id().clone();
    faults.fail_when(append_after(&lead_id, "tool/call"), "disk full");
    h.models
        .model("lead")
        .push([call("bash", json!({"command": "echo hi > out.txt"}))]);
    lead.followup(user("run")).await.unwrap();
    idle(&lead).await;
    crash(&mut h).await;
    h.runtime.resume_root(&lead_id).await.unwrap();
    let bash = recovered_result(&h, &lead_id, "bash");
    assert_eq!(bash["code"], "TOOL_OUTCOME_UNKNOWN", "{bash}");
}

// ---------------------------------------------------------------------------------------
// Issue 11 (item 2): a turn whose final answer is logged but whose `turn/end` is not.

/// The crash came between the Lead's final answer and its `turn/end`: recovery closes the
/// turn as completed with that answer, and a second resume finds nothing to do (no model
/// call, the same answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_answer_is_logged_closes_as_completed_on_every_resume() {
    let mut h = Harness::new();
    let lead = h.lead().await;
    let lead_id = lead.id().clone();
    h.models.model("lead").push([text("first answer")]);
    lead.followup(user("one")).await.unwrap();
    idle(&lead).await;
    h.models.model("lead").push([text("the final answer")]);
    lead.followup(user("two")).await.unwrap();
    idle(&lead).await;
    h.runtime.shutdown().await.unwrap();
    // The answer is one batch and its `step/end` + `turn/end` the next: a crash (or a torn
    // write) between them leaves the log ending with the answer.
    let file = h.home.path().join(format!("sessions/{lead_id}.jsonl"));
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[lines.len() - 1].contains("\"turn/end\""));
    assert!(lines[lines.len() - 2].contains("\"step/end\""));
    std::fs::write(&file, lines[..lines.len() - 2].join("\n") + "\n").unwrap();
    h.restart();
    let calls = h.models.model("lead").requests().len();
    let kinds = h.kinds(&lead_id);
    assert_eq!(kinds.last().map(String::as_str), Some("assistant/message"));

    for round in 0..2 {
        let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
        let (answer, end) = lead.with_transcript(|t| {
            (
                t.last_answer().map(str::to_owned),
                t.last_turn_end().cloned(),
            )
        });
        assert_eq!(
            answer.as_deref(),
            Some("the final answer"),
            "resume {round}"
        );
        assert_eq!(end, Some(troupe_session::events::TurnEndReason::Completed));
        h.runtime.shutdown().await.unwrap();
        h.restart();
    }
    assert_eq!(
        turn_end_kinds(&h.events(&lead_id)),
        ["completed", "completed"]
    );
    assert_eq!(
        h.models.model("lead").requests().len(),
        calls,
        "no model call"
    );
}

// ---------------------------------------------------------------------------------------
// Defects 5 and 6: spawns a crash cut.

/// A matcher: the `n`-th append (from 1) to `id` whose batch holds an event of type `kind`.
fn nth_append_of(
    id: &SessionId,
    kind: &'static str,
    n: usize,
) -> impl Fn(&SessionId, &[String]) -> bool + Send + Sync + 'static {
    let id = id.clone();
    let count = std::sync::atomic::AtomicUsize::new(0);
    move |s, kinds| {
        *s == id
            && kinds.iter().any(|k| k == kind)
            && count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n
    }
}

/// A matcher: the first append to any session but `not` whose batch holds `kind`.
fn first_elsewhere(
    not: &SessionId,
    kind: &'static str,
) -> impl Fn(&SessionId, &[String]) -> bool + Send + Sync + 'static {
    append_elsewhere(not, kind)
}

/// The Lead spawns `worker` through the tool with `faults` set up by the caller, then the run
/// "crashes"; returns the Lead's id and the worker's reserved id (from the roster).
async fn spawn_and_crash(h: &mut Harness, lead: &troupe_runtime::Agent) -> (SessionId, SessionId) {
    let lead_id = lead.id().clone();
    h.models.model("lead").push([call(
        "spawn_teammate",
        json!({"name": "worker", "description": "does the job", "prompt": "write done.txt"}),
    )]);
    lead.followup(user("get help")).await.unwrap();
    idle(lead).await;
    crash(h).await;
    let state = fold(h, &lead_id);
    assert_eq!(state.members().len(), 1);
    assert_eq!(state.members()[0].phase.as_str(), "provisioning");
    (lead_id, state.members()[0].id.clone())
}

/// Resumes after [`spawn_and_crash`] and checks that the worker exists under its reserved id,
/// is `active`, ran its prompt exactly once, and that the Lead's cut `spawn_teammate` call got
/// its rebuilt (successful) result.
async fn resume_and_check_the_worker_ran(h: &mut Harness, lead_id: &SessionId, w: &SessionId) {
    h.models.model("worker").push([
        call("write", json!({"path": "done.txt", "content": "done\n"})),
        text("wrote it"),
    ]);
    let (lead, _) = h.runtime.resume_root(lead_id).await.unwrap();
    quiet(h, &lead).await;
    let state = fold(h, lead_id);
    assert_eq!(
        state.member(w).unwrap().phase.as_str(),
        "active",
        "{state:?}"
    );
    assert_eq!(
        std::fs::read_to_string(h.path("done.txt")).unwrap(),
        "done\n"
    );
    let events = h.events(w);
    let prompts = events
        .iter()
        .filter(|e| e.kind == "user/message" && e.data["source"]["kind"] == "user")
        .count();
    assert_eq!(prompts, 1, "the prompt ran once");
    assert_eq!(turn_end_kinds(&events), ["completed"]);
    let spawn = recovered_result(h, lead_id, "spawn_teammate");
    assert_eq!(spawn["isError"], false, "{spawn}");
    let member: Value = serde_json::from_str(spawn["content"].as_str().unwrap()).unwrap();
    assert_eq!(member["member"]["name"], "worker", "{member}");
    assert_eq!(member["member"]["id"], w.as_str(), "{member}");
    let _ = h.runtime.shutdown().await;
}

/// Defect 5: a kill after the teammate's first prompt is durable but before the Lead's
/// `active` record (and before the teammate's first turn): recovery settles it `active` and
/// runs the pending prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_whose_prompt_never_ran_runs_it_on_recovery() {
    // The prompt's append and the first turn's start may be written together (group commit):
    // then the failed write takes the prompt too — a stop before the prompt, not the one under
    // test (see the next test) — and the run is tried again.
    for attempt in 1.. {
        let (mut h, _log, faults) = Harness::faulty();
        let lead = h.team_lead().await;
        let lead_id = lead.id().clone();
        faults.fail_when(first_elsewhere(&lead_id, "turn/start"), "killed");
        faults.fail_when(nth_append_of(&lead_id, "team/member", 2), "killed");
        let (lead_id, w) = spawn_and_crash(&mut h, &lead).await;
        let t = troupe_session::Transcript::fold(0, &h.events(&w)).unwrap();
        if t.next_turn().is_empty() {
            assert!(attempt < 20, "the prompt never became durable alone");
            continue;
        }
        assert_eq!((t.stats().turns, t.next_turn().len()), (0, 1));
        resume_and_check_the_worker_ran(&mut h, &lead_id, &w).await;
        return;
    }
}

/// Defect 6: a kill after the provisioning record, while the child's log holds no prompt yet:
/// the child has done nothing, so recovery gives it its prompt (from the Lead's
/// `spawn_teammate` call) under the same reserved id instead of failing the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_cut_before_the_childs_prompt_recreates_the_child() {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    faults.fail_when(first_elsewhere(&lead_id, "agent/inbox/spliced"), "killed");
    faults.fail_when(nth_append_of(&lead_id, "team/member", 2), "killed");
    let (lead_id, w) = spawn_and_crash(&mut h, &lead).await;
    let kinds = h.kinds(&w);
    assert_eq!(
        kinds,
        ["subagent/descriptor", "agent/config"],
        "no prompt yet"
    );
    resume_and_check_the_worker_ran(&mut h, &lead_id, &w).await;
}

/// Defect 6: a kill after the provisioning record, before the child's log existed: recovery
/// creates the child's log (the same reserved id) with its prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_cut_before_the_childs_log_existed_recreates_the_child() {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    faults.fail_when(first_elsewhere(&lead_id, "subagent/descriptor"), "killed");
    faults.fail_when(nth_append_of(&lead_id, "team/member", 2), "killed");
    let (lead_id, w) = spawn_and_crash(&mut h, &lead).await;
    assert!(h.journal().read(&w).is_err(), "no child log");
    resume_and_check_the_worker_ran(&mut h, &lead_id, &w).await;
}

/// A Team whose teammate `worker` had its turn cut by a crash right after its tool call was
/// logged: the harness (crashed), its log guard, the Lead's id and the teammate's.
async fn a_cut_teammate() -> (Harness, impl Sized, SessionId, SessionId) {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    let not_lead = lead_id.clone();
    faults.fail_when(next_append(move |s| *s != not_lead, "tool/call"), "killed");
    let w = spawn(
        &h,
        &lead,
        "worker",
        vec![call("bash", json!({"command": "true"}))],
    )
    .await;
    quiet(&h, &lead).await;
    crash(&mut h).await;
    (h, _log, lead_id, w)
}

// ---------------------------------------------------------------------------------------
// A resume that is itself stopped.

/// A resume stopped after it queued a cut teammate's continuation note but before the note's
/// turn started: the next resume runs that note (one continuation turn); it does not queue a
/// second one, which would run a turn (and ask the model for a step) too many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_already_waiting_is_run_not_queued_again() {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    // The teammate's turn is cut right after its tool call is logged.
    let not_lead = lead_id.clone();
    faults.fail_when(next_append(move |s| *s != not_lead, "tool/call"), "killed");
    let w = spawn(
        &h,
        &lead,
        "worker",
        vec![call("bash", json!({"command": "true"}))],
    )
    .await;
    quiet(&h, &lead).await;
    crash(&mut h).await;

    // The first resume queues the continuation; it stops before the note's turn starts. The
    // note's append and the turn's start may be written together (group commit): then that
    // write fails whole, no note is durable, and the resume is tried again — each try is the
    // same stop, with the turn still owed its continuation.
    let waiting = |h: &Harness| {
        troupe_session::Transcript::fold(0, &h.events(&w))
            .unwrap()
            .next_turn()
            .iter()
            .filter(|m| m.source.kind == "resume")
            .count()
    };
    for attempt in 1.. {
        let faults = h.restart_faulty();
        faults.fail_when(append_of(&w, "turn/start"), "killed");
        let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
        quiet(&h, &lead).await;
        crash(&mut h).await;
        if waiting(&h) == 1 {
            break;
        }
        assert_eq!(waiting(&h), 0, "{:?}", h.kinds(&w));
        assert!(attempt < 20, "the note never became durable alone");
    }

    // The second resume runs the waiting note, and only it.
    h.models.model("worker").push([text("continued")]);
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    let events = h.events(&w);
    let notes = events
        .iter()
        .filter(|e| e.kind == "user/message" && e.data["source"]["kind"] == "resume")
        .count();
    assert_eq!(notes, 1, "{:?}", h.kinds(&w));
    // It says what happened: its process stopped (a crash here), not that the Team did.
    let note = events
        .iter()
        .find(|e| e.kind == "user/message" && e.data["source"]["kind"] == "resume")
        .unwrap();
    let said = note.data.to_string();
    assert!(
        said.contains("did not finish (the process running it stopped)"),
        "{said}"
    );
    assert_eq!(turn_end_kinds(&events), ["interrupted", "completed"]);
    assert_eq!(waiting(&h), 0);
    assert_eq!(h.models.model("worker").requests().len(), 2);
    let _ = h.runtime.shutdown().await;
}

/// The resume notes (`user/message`s of source `resume`) that ran in a log.
fn continuation_turns(events: &[troupe_protocol::Event]) -> usize {
    events
        .iter()
        .filter(|e| e.kind == "user/message" && e.data["source"]["kind"] == "resume")
        .count()
}

/// A teammate's turn is cut while a wakeup for it is queued in the Lead log but not yet in its
/// log: the recovery's mailbox pass cold-resumes it with that wakeup (its next turn), and the
/// cut turn still gets its own continuation turn — two turns, as without the stop. The wakeup
/// does not stand in for the continuation (a scripted teammate would stop one turn short).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_teammate_woken_by_redelivered_mail_is_continued_too() {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    // The teammate's append after its tool call is held, then fails: its turn is cut there.
    let not_lead = lead_id.clone();
    let gate = faults.hold_when(next_append(move |s| *s != not_lead, "tool/call"));
    let w = spawn(
        &h,
        &lead,
        "worker",
        vec![call("bash", json!({"command": "true"}))],
    )
    .await;
    gate.reached().await;
    // A wakeup sent now is queued; its delivery waits behind the held append and fails with it.
    let send = {
        let runtime = h.runtime.clone();
        let lead = lead.clone();
        tokio::spawn(async move {
            runtime
                .teams()
                .send(
                    &lead,
                    "worker",
                    "also do more",
                    troupe_team::Delivery::Wakeup,
                )
                .await
        })
    };
    let queued = |h: &Harness| {
        fold(h, &lead_id)
            .pending_messages()
            .any(|m| m.target_id == w)
    };
    // The live teammate has taken the wakeup in (in memory: its append waits behind the held
    // one), so the delivery fails with the log rather than reaching a later activation.
    let taken_in = |h: &Harness| {
        h.runtime.agent(&w).is_some_and(|a| {
            a.with_transcript(|t| {
                t.next_turn()
                    .iter()
                    .any(|m| m.source.kind == "team-message")
            })
        })
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while !(queued(&h) && taken_in(&h)) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the wakeup was never queued and taken in");
    gate.fail("killed");
    let _ = send.await.unwrap();
    quiet(&h, &lead).await;
    crash(&mut h).await;
    assert!(queued(&h), "the wakeup is still to be delivered");
    assert_eq!(continuation_turns(&h.events(&w)), 0);

    h.models
        .model("worker")
        .push([text("did more"), text("continued")]);
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    let events = h.events(&w);
    assert_eq!(
        turn_end_kinds(&events),
        ["interrupted", "completed", "completed"],
        "{:?}",
        h.kinds(&w)
    );
    assert_eq!(continuation_turns(&events), 1);
    assert_eq!(h.models.model("worker").requests().len(), 3);
    let _ = h.runtime.shutdown().await;
}

/// A teammate whose turn a stop cut while the run went on — its host elsewhere was killed in
/// it (its log ends in an open turn) or parked it — woken by new mail in the same run: it
/// runs the wakeup, then the continuation of the cut turn, as a resume would give it; so the
/// run does not end with work the next resume finds owed. (Found by a new-user trial: a
/// worker stopped right after its teammate woke the Lead; the run ended exit 0, and `troupe
/// resume` then found "teammates have work left".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_cut_elsewhere_and_woken_in_the_run_is_continued_too() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    let w = spawn(&h, &lead, "worker", vec![text("first")]).await;
    super::team::settled(&h, &w).await;
    // Its host started a turn and died in it.
    {
        let (writer, _) = h.journal().open(&w).unwrap();
        writer
            .append(troupe_protocol::EventDraft::new(
                "turn/start",
                json!({"turn": 2}),
            ))
            .unwrap();
        writer.close().await.unwrap();
    }
    h.models
        .model("worker")
        .push([text("took the mail"), text("continued")]);
    let (_, accepted) = h
        .runtime
        .teams()
        .send(&lead, "worker", "more work", troupe_team::Delivery::Wakeup)
        .await
        .unwrap();
    assert!(accepted);
    quiet(&h, &lead).await;
    let events = h.events(&w);
    assert_eq!(
        turn_end_kinds(&events),
        ["completed", "interrupted", "completed", "completed"],
        "{:?}",
        h.kinds(&w)
    );
    assert_eq!(continuation_turns(&events), 1);
    assert_eq!(h.models.model("worker").requests().len(), 3);
    assert_eq!(fold(&h, lead.id()).pending_messages().count(), 0);
    h.runtime.shutdown().await.unwrap();
}

/// A teammate's turn is cut while a wakeup delivered to it during that turn waits in its
/// inbox: the recovery runs the wakeup (its own turn) and continues the cut turn (another) —
/// the waiting mail does not stand in for the continuation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_teammate_with_wakeup_mail_waiting_runs_it_and_is_continued() {
    let (mut h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    // The teammate's command runs until the test lets it end; its result is the append that
    // fails (the stop).
    faults.fail_when(append_elsewhere(&lead_id, "tool/result"), "killed");
    let w = spawn(
        &h,
        &lead,
        "worker",
        vec![call(
            "bash",
            json!({"command": "for i in $(seq 600); do [ -f go ] && break; sleep 0.05; done"}),
        )],
    )
    .await;
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while !h.kinds(&w).iter().any(|k| k == "tool/call") {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the command never started");
    let (_, accepted) = h
        .runtime
        .teams()
        .send(
            &lead,
            "worker",
            "also do more",
            troupe_team::Delivery::Wakeup,
        )
        .await
        .unwrap();
    assert!(accepted, "the running teammate holds the wakeup");
    std::fs::write(h.path("go"), "").unwrap();
    quiet(&h, &lead).await;
    crash(&mut h).await;
    let t = troupe_session::Transcript::fold(0, &h.events(&w)).unwrap();
    assert!(t.open_turn().is_some(), "{:?}", h.kinds(&w));
    assert_eq!(t.next_turn().len(), 1, "the wakeup waits");

    h.models
        .model("worker")
        .push([text("did more"), text("continued")]);
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    let events = h.events(&w);
    assert_eq!(
        turn_end_kinds(&events),
        ["interrupted", "completed", "completed"],
        "{:?}",
        h.kinds(&w)
    );
    assert_eq!(continuation_turns(&events), 1);
    assert_eq!(h.models.model("worker").requests().len(), 3);
    let _ = h.runtime.shutdown().await;
}

/// A resume that cannot even reopen a cut teammate (its log takes no write: the close of its
/// cut turn fails, a disk still full) reports it as the run's log failure — before, the
/// failure was only logged and the run ended as if the teammate had nothing left to do (a
/// new-user trial: `demo finished, but the project's tests still fail`). Nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_that_cannot_be_reopened_after_a_stop_is_the_runs_log_failure() {
    let (mut h, _log, lead_id, w) = a_cut_teammate().await;
    let before = h.events(&w).len();

    // Every append to its log fails (each rule applies once).
    let faults = h.restart_faulty();
    for _ in 0..100 {
        let target = w.clone();
        faults.fail_when(
            move |s, _| *s == target,
            "No space left on device (os error 28)",
        );
    }
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    let _ = h.runtime.shutdown().await;
    let failures = h.runtime.log_failures();
    let failure = failures.iter().find(|f| f.session == w);
    assert!(
        failure.is_some_and(|f| f.name == "worker"
            && f.error.contains("continuing it after the stop")
            && f.error.contains("No space left on device")),
        "{failures:?}"
    );
    assert_eq!(h.events(&w).len(), before, "nothing was written");
}

/// A resume whose continuation note for a cut teammate cannot be written (the teammate's log
/// fails at the note's append) still ends: the cold-resumed teammate, stopped by its log's
/// failure, settles like any other (before, a follow-up that failed left it resident and
/// unwatched, and the Lead waited for it forever). The next resume continues the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_whose_continuation_cannot_be_written_still_settles() {
    let (mut h, _log, lead_id, w) = a_cut_teammate().await;

    // The recovery closes the cut turn; the append of its continuation note fails.
    let faults = h.restart_faulty();
    faults.fail_when(
        append_of(&w, "agent/inbox/spliced"),
        "No space left on device",
    );
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    assert!(h.runtime.agent(&w).is_none(), "the teammate settled");
    assert!(
        h.runtime
            .log_failures()
            .iter()
            .any(|f| f.session == w && f.error.contains("No space left on device")),
        "{:?}",
        h.runtime.log_failures()
    );
    crash(&mut h).await;
    assert_eq!(turn_end_kinds(&h.events(&w)), ["interrupted"]);
    assert_eq!(continuation_turns(&h.events(&w)), 0);

    h.models.model("worker").push([text("continued")]);
    let (lead, _) = h.runtime.resume_root(&lead_id).await.unwrap();
    quiet(&h, &lead).await;
    let events = h.events(&w);
    assert_eq!(turn_end_kinds(&events), ["interrupted", "completed"]);
    assert_eq!(continuation_turns(&events), 1);
    let _ = h.runtime.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// File observations survive a restart (rebuilt from the log).

/// An agent reads a file and its process stops; the next process's agent edits it: the read
/// in the earlier process counts (its `tool/result` records what it saw, and the resume
/// rebuilds the observation), so the edit works — unless the file changed in between, which
/// is `FS_STALE_VERSION` exactly as without the restart. A `write` counts as seen too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_before_a_restart_count_for_the_next_edit() {
    let mut h = Harness::new();
    std::fs::write(h.path("kept.txt"), "one\n").unwrap();
    std::fs::write(h.path("changed.txt"), "one\n").unwrap();
    h.models.model("lead").push([
        call("read", json!({"path": "kept.txt"})),
        call("read", json!({"path": "changed.txt"})),
        call("write", json!({"path": "new.txt", "content": "one\n"})),
        text("read them"),
    ]);
    let lead = h.lead().await;
    let id = lead.id().clone();
    lead.followup(user("read")).await.unwrap();
    idle(&lead).await;
    let seen = recorded(&h, &id, "read");
    assert_eq!(seen[0]["path"], "kept.txt", "{seen:?}");
    assert!(
        seen[0]["image"].as_str().unwrap().starts_with("sha256:"),
        "{seen:?}"
    );
    h.runtime.shutdown().await.unwrap();
    h.restart();
    std::fs::write(h.path("changed.txt"), "two\n").unwrap();

    let edit = |path: &str| {
        call(
            "edit",
            json!({"path": path, "old_string": "o", "new_string": "0"}),
        )
    };
    h.models.model("lead").push([
        edit("kept.txt"),
        edit("changed.txt"),
        edit("new.txt"),
        text("edited"),
    ]);
    let (lead, _) = h.runtime.resume_root(&id).await.unwrap();
    lead.followup(user("edit them")).await.unwrap();
    idle(&lead).await;
    let results: Vec<(bool, Option<String>)> = h
        .events(&id)
        .iter()
        .filter(|e| e.kind == "tool/result" && e.data["name"] == "edit")
        .map(|e| {
            (
                e.data["isError"] == true,
                e.data["code"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            (false, None),
            (true, Some("FS_STALE_VERSION".to_owned())),
            (false, None)
        ]
    );
    assert_eq!(
        std::fs::read_to_string(h.path("kept.txt")).unwrap(),
        "0ne\n"
    );
    assert_eq!(std::fs::read_to_string(h.path("new.txt")).unwrap(), "0ne\n");
    let _ = h.runtime.shutdown().await;
}

/// The `seen` records of the results of `name` calls in `id`'s log.
fn recorded(h: &Harness, id: &SessionId, name: &str) -> Vec<Value> {
    h.events(id)
        .into_iter()
        .filter(|e| e.kind == "tool/result" && e.data["name"] == name)
        .map(|e| e.data["seen"].clone())
        .collect()
}
