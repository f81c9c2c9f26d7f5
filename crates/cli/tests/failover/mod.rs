//! Failover (DESIGN §7 "Failover", issue 14 item 6), with real `troupe` processes and a real
//! `nats-server`: the Lead's process is killed with `kill -9` while a `troupe worker` hosts a
//! running teammate, and the Team is taken over — by `troupe resume` from another home, by a
//! `troupe worker --adopt`, by one of two adopters racing, by a second adopter after the
//! first was killed mid-adoption, and by `troupe resume` after an adopter was stopped with
//! SIGTERM (it parks its adopted Lead first). Each time: the teammate keeps running on its worker (it is
//! not continued a second time in the new Lead's process), its Team calls reach the new Lead,
//! the work finishes once, `team verify` passes, every queued message is delivered exactly
//! once, and no task ever had two owners. Also: a Lead killed after its own turn ended while
//! its teammate runs is adopted too (and continued by a plain `troupe resume`, which says so
//! rather than "nothing to resume"), a Team parked on purpose is not, `kill -9` of the
//! worker hosting a running teammate re-places it on a second, live worker, and a Lead whose
//! lease is lost while it waits for its Team (the server down past the TTL) fails the run
//! with `JOURNAL_LEASE_LOST` and the resume hint, then `troupe resume` finishes it.

use super::killpoints::{Tripwire, call, lead_of, member_id, resume_placing, start_run};
use super::*;

/// The Team of every test: the Lead creates a task and spawns alpha, then waits; alpha
/// claims the task, waits for the file `go` (the Lead is killed meanwhile), then reports to
/// the Lead and completes the task through the Team service of whichever process holds the
/// Lead then. The Lead's continuation after the takeover waits for alpha again.
fn team_script(s: &Setup, name: &str) -> PathBuf {
    let script = s.path(name);
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("team_task_create", json!({"subject": "the work", "description": "d"})),
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("wait_agent", json!({"timeout_ms": 170000})),
                call("wait_agent", json!({"timeout_ms": 170000})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
                call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("send_message", json!({"target": "lead", "message": "alpha-report"})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    script
}

/// Waits until the file `log` contains `needle`; returns its text.
fn wait_for(log: &Path, needle: &str, within: Duration) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            start.elapsed() < within,
            "{} never said {needle:?}:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Who holds session `id`'s lease now (the test's own connection).
fn holder(s: &mut Setup, id: &str) -> Option<String> {
    s.journal().holder(&SessionId::new(id).unwrap()).unwrap()
}

/// Waits until `held(holder of id)` is true.
fn wait_lease(s: &mut Setup, id: &str, what: &str, held: impl Fn(Option<&str>) -> bool) {
    let start = Instant::now();
    loop {
        let now = holder(s, id);
        if held(now.as_deref()) {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the lease of {id} never {what}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The run with the Lead, alpha placed on `w1` and running (it claimed the task and waits for
/// `go`), then the Lead's process killed with `kill -9`. Returns the Lead's id and w1's log.
fn kill_the_lead_while_alpha_runs_on_a_worker(
    s: &Setup,
    workspace: &Path,
    w1_log: &Path,
) -> String {
    let (mut run, lead, _) = run_until_alpha_runs(s, workspace);
    assert!(
        std::fs::read_to_string(w1_log)
            .unwrap()
            .contains("hosting alpha"),
        "alpha runs on w1"
    );
    run.0.kill().unwrap();
    let _ = run.0.wait();
    lead
}

/// `troupe run` of the Team of [`team_script`] in `workspace`, until alpha runs (it made the
/// file `started`): the run, the Lead's id and the run's stderr file.
fn run_until_alpha_runs(s: &Setup, workspace: &Path) -> (Running, String, PathBuf) {
    run_script_until_alpha_runs(s, workspace, &team_script(s, "team.json"))
}

/// [`run_until_alpha_runs`] with another `script` whose alpha also first touches `started`.
fn run_script_until_alpha_runs(
    s: &Setup,
    workspace: &Path,
    script: &Path,
) -> (Running, String, PathBuf) {
    let run_err = s.path("run.stderr");
    let run = start_run(s, workspace, script, &run_err);
    let lead = lead_of(&run_err);
    let start = Instant::now();
    while !workspace.join("started").exists() {
        assert!(start.elapsed() < DEADLINE, "alpha never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    (run, lead, run_err)
}

/// The checks after a takeover: the Team's work is done once and consistently.
/// - the one task is completed, owned by alpha, and no task ever had another owner;
/// - alpha ran on w1 only: it was not continued in the new Lead's process (one `turn/start`
///   of its own), its report reached the Lead;
/// - every queued message was delivered once and is in its target's log once;
/// - the Lead's turns are `lead_turns` (its first, plus one continuation per cut turn) and it
///   answered once;
/// - nothing is pending and `team verify` passes.
fn assert_finished_once(s: &Setup, lead: &str, lead_turns: std::ops::RangeInclusive<usize>) {
    assert_finished_once_with(s, lead, lead_turns, 1..=1);
}

/// [`assert_finished_once`] with alpha's turns in `alpha_turns` (2 when a stop of the Lead's
/// process stopped alpha too and a resume continued it).
fn assert_finished_once_with(
    s: &Setup,
    lead: &str,
    lead_turns: std::ops::RangeInclusive<usize>,
    alpha_turns: std::ops::RangeInclusive<usize>,
) {
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", lead, "--json"])).unwrap();
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{shown}");
    assert_eq!(tasks[0]["status"], "completed", "{shown}");
    assert_eq!(tasks[0]["ownerName"], "alpha", "{shown}");
    assert_eq!(shown["pendingMessages"], json!([]), "{shown}");
    let alpha = member_id(s, lead, "alpha");
    let lead_log = s.log(lead);
    // Every owner task-1 was ever given, wherever the Lead log records a task.
    let mut owners = std::collections::BTreeSet::new();
    for event in &lead_log {
        collect_owners(&event["data"], &mut owners);
    }
    assert!(owners.len() <= 1, "task-1 had two owners: {owners:?}");
    let alpha_log = s.log(&alpha);
    let turns = alpha_log
        .iter()
        .filter(|e| e["type"] == "turn/start")
        .count();
    assert!(
        alpha_turns.contains(&turns),
        "alpha's {turns} turns (not continued once more)"
    );
    assert!(
        alpha_log
            .iter()
            .any(|e| e.to_string().contains("alpha done")),
        "alpha answered"
    );
    assert_each_message_delivered_once(s, &lead_log);
    let turns = lead_log
        .iter()
        .filter(|e| e["type"] == "turn/start")
        .count();
    assert!(
        lead_turns.contains(&turns),
        "{turns} Lead turns: the first turn and one continuation per cut turn"
    );
    let answers = lead_log
        .iter()
        .filter(|e| e["type"] == "assistant/message" && e.to_string().contains("lead done"))
        .count();
    assert!(answers <= 1, "the Lead answered once ({answers})");
    s.ok(&["team", "verify", lead]);
}

/// Every message queued in the Lead log `lead_log` was delivered once and is in its target's
/// log once (alpha's report among them).
fn assert_each_message_delivered_once(s: &Setup, lead_log: &[Value]) {
    let queued: Vec<&Value> = lead_log
        .iter()
        .filter(|e| e["type"] == "team/message/queued")
        .collect();
    assert!(
        queued
            .iter()
            .any(|e| e.to_string().contains("alpha-report")),
        "alpha's report was queued"
    );
    for q in &queued {
        let message = &q["data"]["message"];
        let id = message["id"].as_str().unwrap();
        let delivered = lead_log
            .iter()
            .filter(|e| e["type"] == "team/message/delivered" && e.to_string().contains(id))
            .count();
        assert_eq!(delivered, 1, "{id} delivered once");
        // In the target's log once: queued in its inbox once, and taken into its history
        // at most once (quiet mail to a Lead that takes no further turn stays in its inbox).
        let target = message["targetId"].as_str().unwrap();
        let target_log = s.log(target);
        let taken = target_log
            .iter()
            .filter(|e| e["type"] == "user/message" && e["data"]["id"] == id)
            .count();
        let queued_in_inbox = target_log
            .iter()
            .filter(|e| e["type"] == "agent/inbox/spliced")
            .flat_map(|e| {
                e["data"]["inserted"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|m| m["id"] == id)
            .count();
        assert!(
            taken <= 1 && queued_in_inbox <= 1 && taken + queued_in_inbox >= 1,
            "{id} is in {target}'s log once (taken {taken}, in its inbox {queued_in_inbox})"
        );
    }
}

/// Every `owner` given to task `task-1` in `value` (any depth).
fn collect_owners(value: &Value, owners: &mut std::collections::BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if map.get("id").and_then(Value::as_str) == Some("task-1")
                && let Some(owner) = map.get("owner").and_then(Value::as_str)
            {
                owners.insert(owner.to_owned());
            }
            for v in map.values() {
                collect_owners(v, owners);
            }
        }
        Value::Array(items) => {
            for v in items {
                collect_owners(v, owners);
            }
        }
        _ => {}
    }
}

/// (a) `troupe resume SID --store URL --home OTHER` after `kill -9` of the Lead while w1 hosts
/// alpha, running: once the dead Lead's lease expired the resume starts (alpha's lease, held
/// by the live worker, does not stop it), leaves alpha on w1, and alpha's next Team calls
/// reach the new Lead; the work finishes once.
#[test]
fn kill_9_of_the_lead_while_a_worker_hosts_a_running_teammate_then_resume_from_another_home() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let lead = kill_the_lead_while_alpha_runs_on_a_worker(&s, &workspace, &w1_log);
    wait_lease(&mut s, &lead, "expired", |h| h.is_none());
    let alpha = member_id(&s, &lead, "alpha");
    assert!(holder(&mut s, &alpha).is_some(), "w1 still holds alpha");
    let other = s.path("other-home");
    let resume_err = s.path("resume.stderr");
    let mut resume = Running(
        bin()
            .env("TROUPE_LEASE_TTL", format!("{}s", s.lease_ttl.as_secs()))
            .arg("--home")
            .arg(&other)
            .arg("--store")
            .arg(s.url())
            .args(["resume", &lead, "--placement", "workers"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&resume_err).unwrap()))
            .spawn()
            .unwrap(),
    );
    // The resume takes the Lead's lease (a refusal ends it: shown at once).
    let start = Instant::now();
    while holder(&mut s, &lead).is_none() {
        if let Some(status) = resume.0.try_wait().unwrap() {
            panic!(
                "the resume ended ({status}) before it took the Lead: {}",
                std::fs::read_to_string(&resume_err).unwrap()
            );
        }
        assert!(start.elapsed() < DEADLINE, "the resume never took the Lead");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(workspace.join("go"), "").unwrap();
    let status = wait_exit(&mut resume);
    let stderr = std::fs::read_to_string(&resume_err).unwrap();
    assert!(status.success(), "{stderr}");
    assert_finished_once(&s, &lead, 2..=2);
    let hosted = std::fs::read_to_string(&w1_log).unwrap();
    assert_eq!(
        hosted.matches("hosting alpha").count(),
        1,
        "alpha was hosted once, on w1: {hosted}"
    );
}

/// (b) A `troupe worker --adopt` started while the Team runs takes over its Lead once the
/// killed process's lease expired: it runs `troupe resume` of it, which finishes the work.
#[test]
fn a_worker_with_adopt_takes_over_a_killed_lead() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let lead = kill_the_lead_while_alpha_runs_on_a_worker(&s, &workspace, &w1_log);
    // An adopter on another workspace leaves it alone, saying why.
    let other = s.path("other");
    std::fs::create_dir_all(&other).unwrap();
    let (_elsewhere, elsewhere_log) = start_worker_with(&s, "elsewhere", &other, &["--adopt"]);
    // It has said so (once the Lead's lease expired) before the adopter that matches starts:
    // after that adopter took the lease, the Lead is no longer free for it to look at.
    wait_for(
        &elsewhere_log,
        &format!("not adopting Lead {lead}: this worker's workspace does not match"),
        DEADLINE,
    );
    let (_a1, a1_log) = start_worker_with(&s, "a1", &workspace, &["--adopt"]);
    wait_for(&a1_log, &format!("adopting Lead {lead}"), DEADLINE);
    wait_lease(&mut s, &lead, "was taken by the adopter", |h| h.is_some());
    std::fs::write(workspace.join("go"), "").unwrap();
    let log = wait_for(
        &a1_log,
        &format!("the adopted Lead {lead} ended (exit 0)"),
        DEADLINE,
    );
    assert!(!log.contains("looking for Leads to adopt"), "{log}");
    // The adopted resume's own lines (plain: no live area) are the worker's, each named by
    // the Lead: its first, the session line, and its answer (stdout).
    let named = format!("troupe worker a1: Lead {}: ", &lead[..8]);
    assert!(log.contains(&format!("{named}session {lead}")), "{log}");
    assert!(log.contains(&format!("{named}lead done")), "{log}");
    assert!(!log.contains('\r') && !log.contains("\x1b["), "{log}");
    assert_finished_once(&s, &lead, 2..=2);
    // A Lead that finished is not adopted again.
    std::thread::sleep(Duration::from_secs(2));
    let log = std::fs::read_to_string(&a1_log).unwrap();
    assert_eq!(
        log.matches(&format!("adopting Lead {lead}")).count(),
        1,
        "{log}"
    );
    let log = std::fs::read_to_string(&elsewhere_log).unwrap();
    assert!(
        log.contains(&format!(
            "not adopting Lead {lead}: this worker's workspace does not match: its workspace"
        )),
        "{log}"
    );
    assert!(
        !log.contains(&format!("adopting Lead {lead}: its lease expired")),
        "{log}"
    );
}

/// A one-slot `troupe worker --adopt`, the only worker, hosts alpha (its one slot is full)
/// when the Lead's process is killed with `kill -9`: it still adopts that Lead — alpha waits
/// for its Team's service, which only a Lead's process gives — and the work finishes once.
#[test]
fn a_one_slot_adopter_hosting_the_teammate_adopts_its_dead_lead() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &["--adopt", "--slots", "1"]);
    let lead = kill_the_lead_while_alpha_runs_on_a_worker(&s, &workspace, &w1_log);
    wait_for(&w1_log, &format!("adopting Lead {lead}"), DEADLINE);
    adopted_and_finished(&mut s, &lead, &workspace, &w1_log, &w1_log, 2..=2);
}

/// A Lead only stalled (SIGSTOP past its lease TTL), not dead: an `--adopt` worker takes the
/// Team over while alpha runs on w1; then the old Lead wakes (SIGCONT), finds its lease lost
/// and fails — without stopping alpha, which is the new holder's teammate now (before, its
/// shutdown parked alpha, and the adoption ended stopped). The adopted Lead finishes the work
/// once, with exit 0.
#[test]
fn a_stalled_lead_that_wakes_after_its_adoption_leaves_the_new_holders_teammates_alone() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let (mut run, lead, run_err) = run_until_alpha_runs(&s, &workspace);
    wait_for(&w1_log, "hosting alpha", DEADLINE);
    let (_a1, a1_log) = start_worker_with(&s, "a1", &workspace, &["--adopt"]);
    let run_pid = rustix::process::Pid::from_child(&run.0);
    rustix::process::kill_process(run_pid, rustix::process::Signal::STOP).unwrap();
    wait_for(&a1_log, &format!("adopting Lead {lead}"), DEADLINE);
    let old = format!("pid {}", run.0.id());
    wait_lease(&mut s, &lead, "was taken by the adopter", |h| {
        h.is_some_and(|h| !h.contains(&old))
    });
    rustix::process::kill_process(run_pid, rustix::process::Signal::CONT).unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "the stalled Lead never ended: {}\n--- a1: {}",
            std::fs::read_to_string(&run_err).unwrap(),
            std::fs::read_to_string(&a1_log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(&run_err).unwrap();
    assert_eq!(status.code(), Some(1), "the stalled Lead fails: {err}");
    assert!(
        err.contains("JOURNAL_FAILED") && err.contains("lost its lease"),
        "{err}"
    );
    let alpha = member_id(&s, &lead, "alpha");
    let ends: Vec<Value> = s
        .log(&alpha)
        .into_iter()
        .filter(|e| e["type"] == "turn/end")
        .collect();
    assert!(
        ends.is_empty(),
        "alpha's turn was not stopped by the stalled Lead: {ends:?}\n--- run: {err}\n--- w1: {}",
        std::fs::read_to_string(&w1_log).unwrap()
    );
    std::fs::write(workspace.join("go"), "").unwrap();
    wait_for(
        &a1_log,
        &format!("the adopted Lead {lead} ended (exit 0)"),
        DEADLINE,
    );
    assert_finished_once(&s, &lead, 2..=2);
}

/// (c) Two adopters race for one killed Lead: only one takes its lease; the other's resume
/// backs off without writing; the Team finishes once.
#[test]
fn two_adopters_race_for_a_killed_lead_and_the_team_finishes_once() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let lead = kill_the_lead_while_alpha_runs_on_a_worker(&s, &workspace, &w1_log);
    let (_a1, a1_log) = start_worker_with(&s, "a1", &workspace, &["--adopt"]);
    let (_a2, a2_log) = start_worker_with(&s, "a2", &workspace, &["--adopt"]);
    wait_lease(&mut s, &lead, "was taken by an adopter", |h| h.is_some());
    std::fs::write(workspace.join("go"), "").unwrap();
    let ended = format!("the adopted Lead {lead} ended (exit 0)");
    let start = Instant::now();
    let (one, two) = loop {
        let one = std::fs::read_to_string(&a1_log).unwrap();
        let two = std::fs::read_to_string(&a2_log).unwrap();
        if one.contains(&ended) || two.contains(&ended) {
            break (one, two);
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no adopter finished:\n{one}\n{two}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        one.contains(&format!("adopting Lead {lead}"))
            || two.contains(&format!("adopting Lead {lead}")),
        "{one}\n{two}"
    );
    // Let a losing resume end too, then check the Team once more.
    std::thread::sleep(Duration::from_secs(2));
    let one = std::fs::read_to_string(&a1_log).unwrap();
    let two = std::fs::read_to_string(&a2_log).unwrap();
    // Only one of them ran the Lead (a resume's prologue names the session as resumed); a
    // loser's resume was refused before it wrote anything, or found nothing to adopt.
    let resumed = format!("session {lead} (resumed");
    assert_eq!(
        usize::from(one.contains(&resumed)) + usize::from(two.contains(&resumed)),
        1,
        "{one}\n{two}"
    );
    for log in [&one, &two] {
        if log.contains(&format!("the adoption of Lead {lead} ended with")) {
            assert!(
                log.contains(&format!("session {lead} is locked by")),
                "the loser backed off: {log}"
            );
        }
    }
    assert_finished_once(&s, &lead, 2..=2);
}

/// (d) An adopter killed with `kill -9` mid-adoption (its `troupe resume` holds the Lead's
/// lease and runs the recovery) takes its child with it; once that lease expired, a second
/// adopter takes the Lead over and finishes the work once.
#[test]
fn an_adopter_killed_mid_adoption_and_another_adopter_finishes_the_team() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let lead = kill_the_lead_while_alpha_runs_on_a_worker(&s, &workspace, &w1_log);
    let (mut a1, a1_log) = start_worker_with(&s, "a1", &workspace, &["--adopt"]);
    let log = wait_for(&a1_log, &format!("adopting Lead {lead}"), DEADLINE);
    let child: i32 = log
        .lines()
        .find(|l| l.contains(&format!("adopting Lead {lead}")))
        .and_then(|l| l.rsplit("pid ").next())
        .and_then(|p| p.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no child pid in {log}"));
    wait_lease(&mut s, &lead, "was taken by the adopter", |h| {
        h.is_some_and(|h| h.contains(&format!("pid {child} ")))
    });
    a1.0.kill().unwrap();
    let _ = a1.0.wait();
    // The adopted resume dies with its worker (PR_SET_PDEATHSIG).
    let start = Instant::now();
    while Path::new(&format!("/proc/{child}")).exists()
        && !std::fs::read_to_string(format!("/proc/{child}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
    {
        assert!(
            start.elapsed() < DEADLINE,
            "the adopted resume outlived its worker"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_a2, a2_log) = start_worker_with(&s, "a2", &workspace, &["--adopt"]);
    wait_for(&a2_log, &format!("adopting Lead {lead}"), DEADLINE);
    wait_lease(&mut s, &lead, "was taken by the second adopter", |h| {
        h.is_some_and(|h| !h.contains(&format!("pid {child} ")))
    });
    std::fs::write(workspace.join("go"), "").unwrap();
    wait_for(
        &a2_log,
        &format!("the adopted Lead {lead} ended (exit 0)"),
        DEADLINE,
    );
    // The first adopter's resume may have started the continuation turn before it died:
    // that cut turn gets its own continuation.
    assert_finished_once(&s, &lead, 2..=3);
}

/// The resume an adopter runs (`--adopted-by PID`, hidden) backs off cleanly: for a Lead that
/// needs no adopting any more (here: it finished) it ends at once with a note and exit 0, and
/// with a PID that is not its parent (the worker is gone) it ends with exit 1 — neither
/// writes anything.
#[test]
fn an_adopted_resume_that_is_not_needed_or_whose_worker_is_gone_writes_nothing() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = s.path("done.json");
    std::fs::write(
        &script,
        json!({"agents": {"lead": [{"text": "done"}]}}).to_string(),
    )
    .unwrap();
    let out = s
        .troupe(&["run", "--team", "--workspace"])
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("go")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lead = session_of(&text(&out.stderr));
    let before = s.messages();
    let out = s
        .troupe(&["resume", &lead, "--adopted-by"])
        .arg(std::process::id().to_string())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "troupe: note: session {lead} needs no adopting any more (its last turn finished and \
             its Team has nothing left)"
        )),
        "{err}"
    );
    assert_eq!(text(&out.stdout), "", "no answer printed");
    // A worker pid that is not the parent: the worker died before the resume started.
    let out = s.run(&["resume", &lead, "--adopted-by", "1"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("adopted by worker pid 1, which is gone"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(s.messages(), before, "nothing was written");
    assert!(holder(&mut s, &lead).is_none());
}

/// SIGTERM to an adopter while its adopted Lead runs: the worker stops that resume first (it
/// parks the Team and releases the Lead's lease), then exits 0; `troupe resume` finishes the
/// Team later, once.
#[test]
fn sigterm_to_an_adopter_parks_its_adopted_lead_and_a_resume_finishes_it() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let lead = kill_the_lead_while_alpha_runs_on_a_worker(&s, &workspace, &w1_log);
    let (mut a1, a1_log) = start_worker_with(&s, "a1", &workspace, &["--adopt"]);
    wait_for(&a1_log, &format!("adopting Lead {lead}"), DEADLINE);
    wait_lease(&mut s, &lead, "was taken by the adopter", |h| h.is_some());
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&a1.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut a1).success());
    let log = std::fs::read_to_string(&a1_log).unwrap();
    assert!(
        log.contains(&format!("stopping the adopted Lead {lead}"))
            && log.contains("stopping: parking its members"),
        "{log}"
    );
    assert!(
        holder(&mut s, &lead).is_none(),
        "the Lead's lease was released"
    );
    let resume_err = s.path("resume.stderr");
    let mut resume = Running(
        s.troupe(&["resume", &lead, "--placement", "workers"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&resume_err).unwrap()))
            .spawn()
            .unwrap(),
    );
    wait_lease(&mut s, &lead, "was taken by the resume", |h| h.is_some());
    std::fs::write(workspace.join("go"), "").unwrap();
    let status = wait_exit(&mut resume);
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&resume_err).unwrap()
    );
    // The adopter's resume may have started its continuation before the SIGTERM: that
    // stopped turn gets its own continuation. The stop of the adopted Lead stops alpha on w1
    // too once the adopted Lead knows it runs there (its turn aborted by the user's cancel),
    // and the resume continues it: two turns; a SIGTERM before that leaves alpha running.
    assert_finished_once_with(&s, &lead, 2..=3, 1..=2);
}

/// (e) The Lead finished its own turn (it spawned alpha on w1 and answered) and its process
/// was killed with `kill -9` while it waited for alpha: the log shows no cut Lead turn, but
/// alpha's turn is open and needs the Team's service. A `troupe worker --adopt` takes the Lead
/// over, saying why; alpha keeps running on w1 and its Team calls reach the adopted Lead; the
/// work finishes once (the Lead takes no further turn), `team verify` passes, and the finished
/// Team is not adopted again.
#[test]
fn a_worker_with_adopt_takes_over_a_lead_killed_after_its_turn_while_a_teammate_runs() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("team_task_create", json!({"subject": "the work", "description": "d"})),
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
                call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("send_message", json!({"target": "lead", "message": "alpha-report"})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (mut run, lead, _) = run_script_until_alpha_runs(&s, &workspace, &script);
    // The Lead's own turn ended (its answer is in its log): the run only waits for alpha.
    let start = Instant::now();
    while !s.log(&lead).iter().any(|e| e["type"] == "turn/end") {
        assert!(start.elapsed() < DEADLINE, "the Lead's turn never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .contains("hosting alpha"),
        "alpha runs on w1"
    );
    run.0.kill().unwrap();
    let _ = run.0.wait();
    let (_a1, a1_log) = start_worker_with(&s, "a1", &workspace, &["--adopt"]);
    let log = wait_for(&a1_log, &format!("adopting Lead {lead}"), DEADLINE);
    assert!(
        log.contains(&format!(
            "adopting Lead {lead}: its lease expired after its last turn, with its Team's work \
             unfinished: teammate alpha's turn 1 is open"
        )),
        "{log}"
    );
    adopted_and_finished(&mut s, &lead, &workspace, &a1_log, &w1_log, 1..=1);
    // A Lead whose Team finished is not adopted again (it has nothing left).
    std::thread::sleep(Duration::from_secs(2));
    let log = std::fs::read_to_string(&a1_log).unwrap();
    assert_eq!(
        log.matches(&format!("adopting Lead {lead}")).count(),
        1,
        "{log}"
    );
    assert!(!log.contains("warning"), "{log}");
}

/// A plain `troupe resume` of a Lead killed with `kill -9` after its own turn completed while
/// alpha runs on w1 (the log shows no cut Lead turn; `crash_left_work` finds alpha's open
/// turn): the resume says it continues the Team (not "nothing to resume"), serves alpha's Team
/// calls until alpha finishes on w1, and the work finishes once; `team verify` passes.
#[test]
fn a_plain_resume_continues_a_team_whose_lead_was_killed_after_its_turn() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("team_task_create", json!({"subject": "the work", "description": "d"})),
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
                call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("send_message", json!({"target": "lead", "message": "alpha-report"})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (mut run, lead, _) = run_script_until_alpha_runs(&s, &workspace, &script);
    let start = Instant::now();
    while !s.log(&lead).iter().any(|e| e["type"] == "turn/end") {
        assert!(start.elapsed() < DEADLINE, "the Lead's turn never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    run.0.kill().unwrap();
    let _ = run.0.wait();
    wait_lease(&mut s, &lead, "expired", |h| h.is_none());
    let resume_err = s.path("resume.stderr");
    let mut resume = Running(
        s.troupe(&["resume", &lead, "--placement", "workers"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&resume_err).unwrap()))
            .spawn()
            .unwrap(),
    );
    wait_for(&resume_err, "continuing the Team", DEADLINE);
    std::fs::write(workspace.join("go"), "").unwrap();
    let status = wait_exit(&mut resume);
    let stderr = std::fs::read_to_string(&resume_err).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "continuing the Team: the Lead's last turn completed, but a crash left its Team's \
             work unfinished (teammate alpha's turn 1 is open"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("nothing to resume"), "{stderr}");
    assert_finished_once(&s, &lead, 1..=1);
    let hosted = std::fs::read_to_string(&w1_log).unwrap();
    assert_eq!(
        hosted.matches("hosting alpha").count(),
        1,
        "alpha was hosted once, on w1: {hosted}"
    );
    // A Team with nothing left still has nothing to resume.
    let out = s.run(&["resume", &lead]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("nothing to resume: the last turn completed"),
        "{}",
        text(&out.stderr)
    );
}

/// An outage of the nats-server a little longer than the lease TTL while w1 hosts alpha in a
/// long tool call and the Lead waits for it (`wait_agent`): every lease's key expired
/// meanwhile, and nobody else wrote any session, so once the server is back the Lead's process
/// and w1 take their leases back (DESIGN §7 leases, the re-take) and the run goes on: alpha is
/// not stopped on w1, the run finishes (exit 0) and the work is done once. (A new user's
/// trial: w1 stopped alpha as lost the moment its lease passed the TTL, and the run ended
/// "parked by its worker", to be resumed by hand.)
#[test]
fn a_server_outage_past_the_lease_ttl_is_ridden_out_when_nobody_else_wrote() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let (mut run, lead, run_err) = run_until_alpha_runs(&s, &workspace);
    s.store = None;
    s.server.kill(0);
    std::thread::sleep(s.lease_ttl + Duration::from_secs(2));
    s.server.restart(0);
    std::fs::write(workspace.join("go"), "").unwrap();
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    let hosted = std::fs::read_to_string(&w1_log).unwrap();
    assert!(status.success(), "{stderr}\nw1:\n{hosted}");
    assert!(!hosted.contains("lease is lost"), "{hosted}");
    assert_eq!(hosted.matches("hosting alpha").count(), 1, "{hosted}");
    eprintln!("RUN:\n{stderr}\nW1:\n{hosted}");
    assert_finished_once(&s, &lead, 1..=1);
}

/// The nats-server stopped for longer than the lease TTL while the Lead's process waits for
/// alpha (its own turn completed, no Lead turn runs): the process lost the Lead's lease and can
/// no longer serve the Team, so the run ends failed (exit 1) with `JOURNAL_LEASE_LOST` naming
/// the session and the resume hint — not as if it finished. With the server back, `troupe
/// resume` finishes the work and `team verify` passes.
#[test]
fn a_lead_that_loses_its_lease_while_it_waits_for_its_team_fails_and_resume_finishes() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, _w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("team_task_create", json!({"subject": "the work", "description": "d"})),
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
                call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("send_message", json!({"target": "lead", "message": "alpha-report"})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (mut run, lead, run_err) = run_script_until_alpha_runs(&s, &workspace, &script);
    let start = Instant::now();
    while !s.log(&lead).iter().any(|e| e["type"] == "turn/end") {
        assert!(start.elapsed() < DEADLINE, "the Lead's turn never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The outage: longer than the TTL, so every renewal in it fails past the TTL.
    // The run ends while the server is still down (it used to hang in the stop of its
    // subscriptions until the server came back).
    s.store = None;
    s.server.kill(0);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < s.lease_ttl + Duration::from_secs(60),
            "the run did not end while the server was down: {}",
            std::fs::read_to_string(&run_err).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    s.server.restart(0);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("JOURNAL_FAILED"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "JOURNAL_LEASE_LOST: journal writer for session {lead} lost its lease"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("troupe resume {lead}")),
        "{stderr}"
    );
    std::fs::write(workspace.join("go"), "").unwrap();
    resume_until_it_runs(&s, &lead);
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks[0]["status"], "completed", "{shown}");
    assert_eq!(tasks[0]["ownerName"], "alpha", "{shown}");
    assert_eq!(shown["pendingMessages"], json!([]), "{shown}");
    s.ok(&["team", "verify", &lead]);
}

/// `troupe resume ID --placement workers` until it runs (a lease not released yet is
/// `JOURNAL_LOCKED` until its TTL passed); requires exit 0.
fn resume_until_it_runs(s: &Setup, id: &str) {
    let end = Instant::now() + DEADLINE;
    loop {
        let out = s.run(&["resume", id, "--placement", "workers"]);
        let err = text(&out.stderr);
        if out.status.success() {
            return;
        }
        assert!(
            out.status.code() == Some(2) && err.contains("is locked by host"),
            "{err}"
        );
        assert!(Instant::now() < end, "resume never ran: {err}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A Team stopped on purpose is not adopted: its Lead finished its turn while alpha ran in the
/// Lead's process, then the run was stopped with SIGTERM (it parks the Team: alpha's turn ends
/// `aborted`, its continuation waits for the user's resume). An adopter leaves it alone; the
/// user's `troupe resume` then finishes it.
#[test]
fn a_team_parked_on_purpose_is_not_adopted() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let run_err = s.path("run.stderr");
    let mut run = Running(
        s.troupe(&["run", "--team", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&run_err).unwrap()))
            .spawn()
            .unwrap(),
    );
    let lead = lead_of(&run_err);
    let start = Instant::now();
    while !workspace.join("started").exists() {
        assert!(start.elapsed() < DEADLINE, "alpha never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&run.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let _ = wait_exit(&mut run);
    assert!(
        holder(&mut s, &lead).is_none(),
        "the Lead's lease was released"
    );
    let alpha = member_id(&s, &lead, "alpha");
    assert!(
        s.log(&alpha)
            .iter()
            .any(|e| e["type"] == "turn/end" && e["data"]["reason"]["kind"] == "aborted"),
        "alpha's turn was parked"
    );
    let (mut a1, a1_log) = start_worker_with(&s, "a1", &workspace, &["--adopt"]);
    // Two looks at least (one every half second) find nothing to adopt.
    std::thread::sleep(Duration::from_secs(2));
    let log = std::fs::read_to_string(&a1_log).unwrap();
    assert!(!log.contains(&format!("adopting Lead {lead}")), "{log}");
    assert!(holder(&mut s, &lead).is_none(), "{log}");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&a1.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut a1).success());
    // The user's resume continues alpha, which finishes.
    std::fs::write(workspace.join("go"), "").unwrap();
    let out = s.run(&["resume", &lead]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        s.log(&alpha)
            .iter()
            .any(|e| e.to_string().contains("alpha done")),
        "alpha answered"
    );
    s.ok(&["team", "verify", &lead]);
}

/// DESIGN §7 "Failover", a worker that dies: `kill -9` of the worker w1 hosting alpha while
/// alpha runs, with a second worker w2 live and free. Once w1's reports stopped and alpha's
/// lease expired, the Lead's process re-places alpha on w2 (saying so on its stderr): w2
/// cold-resumes it — its cut turn closed as after a crash, then its continuation note — and
/// alpha finishes there. The run ends once, alpha never ran in the Lead's process, the task
/// had one owner, every message was delivered once, and `team verify` passes.
#[test]
fn kill_9_of_the_worker_hosting_a_running_teammate_re_places_it_on_a_live_worker() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = team_script(&s, "team.json");
    let (mut run, lead, run_err) = run_script_until_alpha_runs(&s, &workspace, &script);
    let alpha = member_id(&s, &lead, "alpha");
    assert!(
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .contains(&format!("hosting alpha ({alpha})")),
        "alpha runs on w1"
    );
    // w2 registers only now, so the placement above could only pick w1.
    let (_w2, w2_log) = start_worker_with(&s, "w2", &workspace, &[]);
    w1.0.kill().unwrap();
    let _ = w1.0.wait();
    // The continuation on w2 stops the dead worker's orphaned loop (its process group is in
    // alpha's log); `go` is not needed for alpha to go on.
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    std::fs::write(workspace.join("go"), "").unwrap();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "troupe: teammate alpha's host stopped reporting and its lease expired: it continues \
             on worker w2"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("continues in the Lead's process"),
        "{stderr}"
    );
    assert_continued_once_on_w2(&s, &alpha, &w2_log);
    // The task: completed by alpha, never another owner.
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{shown}");
    assert_eq!(tasks[0]["status"], "completed", "{shown}");
    assert_eq!(tasks[0]["ownerName"], "alpha", "{shown}");
    assert_eq!(shown["pendingMessages"], json!([]), "{shown}");
    let lead_log = s.log(&lead);
    let mut owners = std::collections::BTreeSet::new();
    for event in &lead_log {
        collect_owners(&event["data"], &mut owners);
    }
    assert!(owners.len() <= 1, "task-1 had two owners: {owners:?}");
    assert_each_message_delivered_once(&s, &lead_log);
    s.ok(&["team", "verify", &lead]);
}

/// The fresh-user trial: SIGTERM of the worker hosting alpha while alpha runs parks alpha
/// (its turn ends `aborted` `{"kind":"shutdown"}`, its inbox kept), and the Lead's run, which
/// had no signal, then says so — a `troupe:` line naming alpha, parked by its worker, and the
/// `troupe resume` that continues it — and ends stopped (exit 1, the resume hint), not as a
/// success; the resume (with a live worker) finishes alpha's work.
#[test]
fn sigterm_of_a_worker_is_reported_by_the_run_as_a_parked_teammate() {
    worker_stopped_by(rustix::process::Signal::TERM);
}

/// A hang-up of the worker (its terminal closed) stops it as SIGTERM does: its teammate is
/// parked, the run reports it, and a resume finishes it once.
#[test]
fn sighup_of_a_worker_parks_its_teammate_as_sigterm_does() {
    worker_stopped_by(rustix::process::Signal::HUP);
}

fn worker_stopped_by(signal: rustix::process::Signal) {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = team_script(&s, "team.json");
    let (mut run, lead, run_err) = run_script_until_alpha_runs(&s, &workspace, &script);
    let alpha = member_id(&s, &lead, "alpha");
    wait_for(&w1_log, &format!("hosting alpha ({alpha})"), DEADLINE);
    rustix::process::kill_process(rustix::process::Pid::from_child(&w1.0), signal).unwrap();
    assert!(wait_exit(&mut w1).success());
    assert!(
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .contains("parking its members"),
        "the worker parked its members"
    );
    let status = wait_exit(&mut run);
    let err = std::fs::read_to_string(&run_err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let resume = format!("troupe resume {lead}");
    assert!(
        err.lines().any(
            |l| l.starts_with("troupe: teammate alpha was parked by its worker")
                && l.contains(&format!("{resume} "))
                && l.ends_with("continues it")
        ),
        "{err}"
    );
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with(&format!("stopped — continue with: {resume} ")),
        "{err}"
    );
    // The resume (a worker serving again) continues alpha, which finishes once.
    let (mut w2, _) = start_worker_with(&s, "w2", &workspace, &[]);
    std::fs::write(workspace.join("go"), "").unwrap();
    let out = s.run(&["resume", &lead]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let answered = s
        .log(&alpha)
        .iter()
        .filter(|e| e["type"] == "assistant/message" && e.to_string().contains("alpha done"))
        .count();
    assert_eq!(answered, 1, "alpha answered once");
    s.ok(&["team", "verify", &lead]);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&w2.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut w2).success());
}

/// REFERENCE c.14 across processes: SIGTERM (handled as a first Ctrl-C) of the Lead's process
/// while alpha runs on worker w1 stops alpha too — its turn on w1 ends `aborted` with
/// `{"kind":"user"}` (its inbox kept), w1 releases its lease and keeps serving — so an
/// `--adopt` worker finds nothing to adopt, and the user's `troupe resume` (placing as the
/// run did) continues alpha, which finishes once.
#[test]
fn sigterm_of_the_lead_parks_its_teammate_on_a_worker() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = team_script(&s, "team.json");
    let (mut run, lead, _) = run_script_until_alpha_runs(&s, &workspace, &script);
    let alpha = member_id(&s, &lead, "alpha");
    wait_for(&w1_log, &format!("hosting alpha ({alpha})"), DEADLINE);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&run.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let _ = wait_exit(&mut run);
    // alpha's turn on w1 ended as a park ends it, and w1 let go of it (it is still serving).
    let ends: Vec<Value> = s
        .log(&alpha)
        .into_iter()
        .filter(|e| e["type"] == "turn/end")
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["data"]["reason"]["kind"], "aborted", "{ends:?}");
    // SIGTERM stops a run as its first Ctrl-C does: the user's cancel, on the worker too.
    assert_eq!(
        ends[0]["data"]["reason"]["reason"],
        json!({"kind": "user"}),
        "{ends:?}"
    );
    wait_lease(&mut s, &alpha, "was released by w1", |h| h.is_none());
    assert!(
        holder(&mut s, &lead).is_none(),
        "the Lead's lease was released"
    );
    assert!(w1.0.try_wait().unwrap().is_none(), "w1 goes on serving");
    let (mut a1, a1_log) = start_worker_with(&s, "a1", &workspace, &["--adopt"]);
    // Two looks at least (one every half second) find nothing to adopt.
    std::thread::sleep(Duration::from_secs(2));
    let adopter = std::fs::read_to_string(&a1_log).unwrap();
    assert!(
        !adopter.contains(&format!("adopting Lead {lead}")),
        "{adopter}"
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&a1.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut a1).success());
    // The user's resume continues alpha (on w1, as the run placed it), which finishes.
    std::fs::write(workspace.join("go"), "").unwrap();
    let out = s.run(&["resume", &lead]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("troupe: teammate alpha continues on worker w1"),
        "{err}"
    );
    let hosted = std::fs::read_to_string(&w1_log).unwrap();
    assert_eq!(
        hosted.matches(&format!("hosting alpha ({alpha})")).count(),
        2,
        "the resume placed alpha on w1 again: {hosted}"
    );
    let answered: Vec<String> = s
        .log(&alpha)
        .iter()
        .filter(|e| e["type"] == "assistant/message" && e.to_string().contains("alpha done"))
        .map(|e| e["type"].to_string())
        .collect();
    assert_eq!(answered.len(), 1, "alpha answered once: {answered:?}");
    s.ok(&["team", "verify", &lead]);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&w1.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut w1).success());
}

/// The re-trial's finding: a resume of a `--placement workers` run places the teammate a
/// crash left with work on a live worker, as the run placed it, rather than continuing it in
/// its own process. `kill -9` of the Lead's process and of w1, which hosts alpha mid-turn;
/// once both leases expired, w2 registers and the user's `troupe resume` (which remembers the
/// placement) closes alpha's cut turn and continues it on w2: one continuation note, the
/// work finishes once, `team verify` passes.
#[test]
fn a_resume_places_a_teammate_a_crash_left_on_a_live_worker() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = team_script(&s, "team.json");
    let (mut run, lead, _) = run_script_until_alpha_runs(&s, &workspace, &script);
    let alpha = member_id(&s, &lead, "alpha");
    wait_for(&w1_log, &format!("hosting alpha ({alpha})"), DEADLINE);
    run.0.kill().unwrap();
    let _ = run.0.wait();
    w1.0.kill().unwrap();
    let _ = w1.0.wait();
    wait_lease(&mut s, &alpha, "expired", |h| h.is_none());
    wait_lease(&mut s, &lead, "expired", |h| h.is_none());
    let (mut w2, w2_log) = start_worker_with(&s, "w2", &workspace, &[]);
    std::fs::write(workspace.join("go"), "").unwrap();
    let out = s.run(&["resume", &lead]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("troupe: teammate alpha continues on worker w2"),
        "{err}"
    );
    assert!(!err.contains("in the Lead's process"), "{err}");
    assert_continued_once_on_w2(&s, &alpha, &w2_log);
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    assert_eq!(shown["tasks"][0]["status"], "completed", "{shown}");
    assert_eq!(shown["pendingMessages"], json!([]), "{shown}");
    assert_each_message_delivered_once(&s, &s.log(&lead));
    s.ok(&["team", "verify", &lead]);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&w2.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut w2).success());
}

/// A teammate on a worker whose Lead died waits for the Team to be taken over: `kill -9` of
/// the Lead while alpha runs on w1, alpha goes on at once (its next Team call, the report to
/// the Lead, finds no one serving the Team), and the user's `troupe resume` comes only 25 s
/// later — past the 17 s a call used to retry before it failed with `TEAM_LEAD_MOVED`. The
/// call is answered by the resumed Lead: the report is delivered once and the work finishes.
#[test]
fn a_teammates_team_call_waits_for_a_late_resume_of_its_dead_lead() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let lead = kill_the_lead_while_alpha_runs_on_a_worker(&s, &workspace, &w1_log);
    std::fs::write(workspace.join("go"), "").unwrap();
    wait_lease(&mut s, &lead, "expired", |h| h.is_none());
    std::thread::sleep(Duration::from_secs(25));
    let alpha = member_id(&s, &lead, "alpha");
    let failed: Vec<Value> = s
        .log(&alpha)
        .into_iter()
        .filter(|e| e.to_string().contains("TEAM_LEAD_MOVED"))
        .collect();
    assert!(failed.is_empty(), "alpha's Team call gave up: {failed:?}");
    let out = s.run(&["resume", &lead, "--placement", "workers"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_finished_once(&s, &lead, 2..=2);
}

/// The user's first Ctrl-C (SIGINT) of the Lead's process while alpha runs on worker w1
/// stops alpha there too — its turn ends `aborted` with `{"kind":"user"}`, as the resident
/// agents' do — so it cannot go on and wake the Lead into a new turn; the run stops
/// (interrupted), and `troupe resume` continues alpha, which finishes once.
#[test]
fn ctrl_c_of_the_lead_stops_its_teammate_on_a_worker() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = team_script(&s, "team.json");
    let (mut run, lead, run_err) = run_script_until_alpha_runs(&s, &workspace, &script);
    let alpha = member_id(&s, &lead, "alpha");
    wait_for(&w1_log, &format!("hosting alpha ({alpha})"), DEADLINE);
    let lead_turns = |s: &Setup| {
        s.log(&lead)
            .iter()
            .filter(|e| e["type"] == "turn/start")
            .count()
    };
    let before = lead_turns(&s);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&run.0),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert!(
        !status.success(),
        "an interrupted run is not a success: {stderr}"
    );
    let ends: Vec<Value> = s
        .log(&alpha)
        .into_iter()
        .filter(|e| e["type"] == "turn/end")
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}\n{stderr}");
    assert_eq!(ends[0]["data"]["reason"]["kind"], "aborted", "{ends:?}");
    assert_eq!(
        ends[0]["data"]["reason"]["reason"],
        json!({"kind": "user"}),
        "{ends:?}"
    );
    assert_eq!(
        lead_turns(&s),
        before,
        "no Lead turn started after the Ctrl-C: {stderr}"
    );
    wait_lease(&mut s, &alpha, "was released by w1", |h| h.is_none());
    std::fs::write(workspace.join("go"), "").unwrap();
    let out = s.run(&["resume", &lead]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let answered = s
        .log(&alpha)
        .iter()
        .filter(|e| e["type"] == "assistant/message" && e.to_string().contains("alpha done"))
        .count();
    assert_eq!(answered, 1, "alpha answered once");
    s.ok(&["team", "verify", &lead]);
}

/// The user's first Ctrl-C lands while a teammate's wakeup is being placed (issue 14: the
/// Lead's process must start nothing once the user stopped the run). beta ran once and was
/// released; alpha, on one worker, sends beta a `followup_task`; the placement asks the other
/// worker, which is stopped (SIGSTOP) and cannot answer — and the Ctrl-C comes the moment
/// that request is on the server. The placement then finds no host, and beta must not be
/// cold-resumed in the Lead's process (it would run a whole turn after the Ctrl-C and wake
/// the Lead): its wakeup stays queued, the run ends interrupted with no new turn of beta or
/// of the Lead, and `troupe resume` delivers the wakeup once and finishes.
#[test]
fn ctrl_c_while_a_wakeup_is_being_placed_starts_nothing_and_resume_delivers_it() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut w1, w1_log) = start_worker_with(&s, "w1", &workspace, &[]);
    let (mut w2, w2_log) = start_worker_with(&s, "w2", &workspace, &[]);
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "beta", "description": "checks", "prompt": "get ready"})),
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("wait_agent", json!({"timeout_ms": 170000})),
                call("wait_agent", json!({"timeout_ms": 170000})),
                {"text": "lead done"},
                // The resume's turns: the cut wait asked again, then beta's report.
                {"text": "lead noted"},
                {"text": "lead noted again"},
            ],
            "beta": [
                {"text": "beta ready"},
                call("followup_task", json!({"target": "lead", "message": "beta-report"})),
                {"text": "beta done"},
            ],
            "alpha": [
                call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("followup_task", json!({"target": "beta", "message": "check-it"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (mut run, lead, run_err) = run_script_until_alpha_runs(&s, &workspace, &script);
    let alpha = member_id(&s, &lead, "alpha");
    let beta = member_id(&s, &lead, "beta");
    wait_lease(&mut s, &beta, "was released", |h| h.is_none());
    // The worker not hosting alpha is the one the placement of beta asks first.
    let hosting_alpha = |log: &Path| {
        std::fs::read_to_string(log)
            .unwrap()
            .contains(&format!("hosting alpha ({alpha})"))
    };
    let (other, other_name) = if hosting_alpha(&w1_log) {
        (&mut w2, "w2")
    } else {
        assert!(hosting_alpha(&w2_log), "alpha runs on a worker");
        (&mut w1, "w1")
    };
    let frozen = rustix::process::Pid::from_child(&other.0);
    rustix::process::kill_process(frozen, rustix::process::Signal::STOP).unwrap();
    let turns = |s: &Setup, id: &str| {
        s.log(id)
            .iter()
            .filter(|e| e["type"] == "turn/start")
            .count()
    };
    let lead_turns = turns(&s, &lead);
    let wire = Tripwire::arm_with(
        &s.url(),
        &[&format!("troupe.worker.{other_name}.host")],
        run.0.id(),
        rustix::process::Signal::INT,
        |_, _| true,
    );
    std::fs::write(workspace.join("go"), "").unwrap();
    wire.fired();
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert!(!status.success(), "an interrupted run: {stderr}");
    assert_eq!(
        turns(&s, &beta),
        1,
        "beta ran no turn after the Ctrl-C: {stderr}"
    );
    assert_eq!(
        turns(&s, &lead),
        lead_turns,
        "no Lead turn started after the Ctrl-C: {stderr}"
    );
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    assert_eq!(
        shown["pendingMessages"],
        json!([{
            "delivery": "wakeup",
            "id": shown["messages"][0]["id"],
            "senderName": "alpha",
            "targetName": "beta",
        }]),
        "alpha's wakeup of beta stays queued: {shown}"
    );
    // The frozen worker is gone for good; the resume places beta on the live one (or here).
    rustix::process::kill_process(frozen, rustix::process::Signal::KILL).unwrap();
    let _ = other.0.wait();
    let out = s.run(&["resume", &lead, "--placement", "workers"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let copies = s
        .log(&beta)
        .iter()
        .filter(|e| e["type"] == "agent/inbox/spliced" && e.to_string().contains("check-it"))
        .count();
    assert_eq!(copies, 1, "beta got the wakeup once");
    s.ok(&["team", "verify", &lead]);
}

/// A teammate whose worker parked it mid-turn (SIGINT of the worker) and that new mail wakes
/// in the same run is placed again with the continuation of its cut turn after the wakeup —
/// what a resume would give it — so the run does not end (exit 0) with work the next resume
/// finds owed. beta waits in a bash on w1; w1 is stopped (beta's turn ends `aborted`
/// `{"kind":"shutdown"}`); the Lead then spawns alpha, placed on w2, whose `followup_task`
/// wakes beta, placed on w2 too: its wakeup turn runs the cut step again and answers, its
/// continuation turn writes `beta.txt`. (Found by a new-user trial: beta's continuation was
/// left to a resume.)
#[test]
fn a_teammate_its_worker_parked_and_mail_wakes_in_the_run_is_continued_there() {
    let Some(s) = Setup::single() else { return };
    cut_on_a_worker_then_woken(&s, rustix::process::Signal::INT, true);
}

/// As [`a_teammate_its_worker_parked_and_mail_wakes_in_the_run_is_continued_there`], with
/// beta's only worker killed with `kill -9` mid-turn (its turn left open, its lease held until
/// the TTL) and no other worker: the Lead's process both takes beta over (its host stopped
/// reporting) and delivers alpha's wakeup to it, and beta gets one continuation note, not one
/// from each. (Found by a new-user trial: two notes, one turn too many, the script ran out.)
#[test]
fn a_teammate_whose_only_worker_died_mid_turn_and_mail_wakes_gets_one_continuation() {
    let Some(s) = Setup::single() else { return };
    cut_on_a_worker_then_woken(&s, rustix::process::Signal::KILL, false);
}

/// Kill point: the Lead's process killed right after the placement of beta's wakeup appended
/// its continuation note (before any worker was asked): `troupe resume` finds the note in
/// beta's log and appends no second one; the work is done once.
#[test]
fn kill_9_of_the_lead_right_after_a_woken_teammates_continuation_note_then_resume() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut w1, _) = start_worker_with(&s, "w1", &workspace, &[]);
    let script = cut_script(&s);
    let run_err = s.path("run.stderr");
    let mut run = start_run(&s, &workspace, &script, &run_err);
    let lead = lead_of(&run_err);
    let start = Instant::now();
    while !workspace.join("b-started").exists() {
        assert!(start.elapsed() < DEADLINE, "beta never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_w2, _) = start_worker_with(&s, "w2", &workspace, &["--slots", "2"]);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&w1.0),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let _ = wait_exit(&mut w1);
    let beta = member_id(&s, &lead, "beta");
    let wire = Tripwire::arm_with(
        &s.url(),
        &[&format!("troupe.session.{beta}")],
        run.0.id(),
        rustix::process::Signal::KILL,
        |_, payload| payload.contains("\"kind\":\"resume\""),
    );
    std::fs::write(workspace.join("b-go"), "").unwrap();
    std::fs::write(workspace.join("a-go"), "").unwrap();
    wire.fired();
    let _ = wait_exit(&mut run);
    resume_placing(&s, &lead);
    assert!(workspace.join("beta.txt").exists(), "beta's work was done");
    let notes = s
        .log(&beta)
        .iter()
        .filter(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "resume")
        .count();
    assert_eq!(notes, 1, "one continuation note");
    s.ok(&["team", "verify", &lead]);
}

/// The script of the tests above: beta waits on `b-go` in its first turn, the Lead spawns
/// alpha once `a-go` exists, alpha wakes beta, whose continuation writes `beta.txt`.
fn cut_script(s: &Setup) -> PathBuf {
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "beta", "description": "writes", "prompt": "wait, then write"})),
                call("bash", json!({"command": "while [ ! -f a-go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "tell beta"})),
                {"text": "lead done"},
                {"text": "lead noted"},
            ],
            "beta": [
                call("bash", json!({"command": "touch b-started; while [ ! -f b-go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                {"text": "beta ready"},
                call("write", json!({"path": "beta.txt", "content": "beta was here\n"})),
                {"text": "beta done"},
            ],
            "alpha": [
                call("followup_task", json!({"target": "beta", "message": "go"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    script
}

/// The run of the two tests above: beta cut on w1 by `signal`, then (with `second_worker`,
/// on w2) woken by alpha; the run finishes the work once.
fn cut_on_a_worker_then_woken(s: &Setup, signal: rustix::process::Signal, second_worker: bool) {
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut w1, _) = start_worker_with(s, "w1", &workspace, &[]);
    let script = cut_script(s);
    let run_err = s.path("run.stderr");
    let mut run = start_run(s, &workspace, &script, &run_err);
    let lead = lead_of(&run_err);
    let start = Instant::now();
    while !workspace.join("b-started").exists() {
        assert!(start.elapsed() < DEADLINE, "beta never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    let w2 = second_worker.then(|| start_worker_with(s, "w2", &workspace, &["--slots", "2"]));
    rustix::process::kill_process(rustix::process::Pid::from_child(&w1.0), signal).unwrap();
    let _ = wait_exit(&mut w1);
    let beta = member_id(s, &lead, "beta");
    if signal == rustix::process::Signal::INT {
        let ends: Vec<Value> = s
            .log(&beta)
            .into_iter()
            .filter(|e| e["type"] == "turn/end")
            .collect();
        assert_eq!(ends.len(), 1, "{ends:?}");
        assert_eq!(
            ends[0]["data"]["reason"]["reason"],
            json!({"kind": "shutdown"})
        );
    }
    // (The scripted beta asks its cut bash step again, as after any stop: it returns now.)
    std::fs::write(workspace.join("b-go"), "").unwrap();
    std::fs::write(workspace.join("a-go"), "").unwrap();
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert!(status.success(), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("beta.txt"))
            .ok()
            .as_deref(),
        Some("beta was here\n"),
        "beta's cut work was continued in the run: {stderr}"
    );
    if let Some((_, w2_log)) = &w2 {
        let hosted = std::fs::read_to_string(w2_log).unwrap();
        assert!(
            hosted.contains(&format!("hosting beta ({beta})")),
            "{hosted}"
        );
    }
    let beta_log = s.log(&beta);
    let notes = beta_log
        .iter()
        .filter(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "resume")
        .count();
    assert_eq!(notes, 1, "one continuation note: {stderr}");
    let kinds: Vec<&Value> = beta_log
        .iter()
        .filter(|e| e["type"] == "turn/end")
        .map(|e| &e["data"]["reason"]["kind"])
        .collect();
    let cut = if signal == rustix::process::Signal::INT {
        "aborted"
    } else {
        "interrupted"
    };
    assert_eq!(
        kinds,
        [cut, "completed", "completed"],
        "{kinds:?}\n{stderr}"
    );
    // Nothing is left for a resume.
    let out = s.run(&["resume", &lead]);
    assert!(
        text(&out.stderr).contains("nothing to resume"),
        "{}",
        text(&out.stderr)
    );
    s.ok(&["team", "verify", &lead]);
}

/// alpha was continued on w2 (its log `w2_log` names it) after a stop cut its turn: its log
/// has that turn closed as after a crash (`interrupted`), then one continuation turn that
/// completed, one continuation note, and one answer.
fn assert_continued_once_on_w2(s: &Setup, alpha: &str, w2_log: &Path) {
    let hosted = std::fs::read_to_string(w2_log).unwrap();
    assert!(
        hosted.contains(&format!("hosting alpha ({alpha})")),
        "alpha continued on w2: {hosted}"
    );
    let alpha_log = s.log(alpha);
    let ends: Vec<&Value> = alpha_log
        .iter()
        .filter(|e| e["type"] == "turn/end")
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[0]["data"]["reason"]["kind"], "interrupted", "{ends:?}");
    assert_eq!(ends[1]["data"]["reason"]["kind"], "completed", "{ends:?}");
    let notes = alpha_log
        .iter()
        .filter(|e| e["type"] == "agent/inbox/spliced")
        .flat_map(|e| {
            e["data"]["inserted"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|m| m["source"]["kind"] == "resume")
        .count();
    assert_eq!(notes, 1, "one continuation note");
    let answered = alpha_log
        .iter()
        .filter(|e| e["type"] == "assistant/message" && e.to_string().contains("alpha done"))
        .count();
    assert_eq!(answered, 1, "alpha answered once");
}

/// Once the adopter (its log `adopter_log`) took the Lead's lease: `go` lets alpha finish, the
/// adopted Lead ends with exit 0, the work is done once ([`assert_finished_once`] with
/// `lead_turns`), and alpha was hosted once, by w1 (`w1_log`).
fn adopted_and_finished(
    s: &mut Setup,
    lead: &str,
    workspace: &Path,
    adopter_log: &Path,
    w1_log: &Path,
    lead_turns: std::ops::RangeInclusive<usize>,
) {
    wait_lease(s, lead, "was taken by the adopter", |h| h.is_some());
    std::fs::write(workspace.join("go"), "").unwrap();
    wait_for(
        adopter_log,
        &format!("the adopted Lead {lead} ended (exit 0)"),
        DEADLINE,
    );
    assert_finished_once(s, lead, lead_turns);
    let hosted = std::fs::read_to_string(w1_log).unwrap();
    assert_eq!(
        hosted.matches("hosting alpha").count(),
        1,
        "alpha was hosted once, on w1: {hosted}"
    );
}
