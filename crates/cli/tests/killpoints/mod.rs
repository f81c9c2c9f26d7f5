//! Issue 14's new durable writes, each cut by a real `kill -9` right after it (the house rule:
//! every path that writes state is killed there by a test): the worker holding a teammate's
//! lease killed right after it appended a Team message to that teammate's inbox (before its
//! answer reached the serializer); the Lead's process killed right after its own append to the
//! inbox of a teammate nobody hosts (under a short lease); a worker killed right after it took
//! a teammate's lease (before it ran anything). After each: the Team finishes, `team verify`
//! passes, and the message is in its target's log exactly once. And the Lead's
//! `interrupt_agent` of a teammate a worker hosts, with the worker killed right after the
//! interrupted turn's closing batch (before its answer) and the moment the request reaches it
//! (before its cancel): the Lead's answer is decided from the lease and the log. And the
//! re-placement of a dead worker's running teammate, with the Lead's process killed right
//! after it closed the teammate's cut turn and right after it appended its continuation note:
//! a resume finishes it with exactly one note. And a worker killed right after it took over
//! the registry entry of a worker killed before it: the name is taken over again at once.
//!
//! How a kill lands right after a write: a [`Tripwire`] thread subscribes (plain NATS, its own
//! connection) to the subjects the write publishes on — a session's stream subject or the
//! lease bucket's `$KV.TROUPE_LEASES.>` — and sends SIGKILL to the writer the moment it sees
//! the write's message. It also keeps what it saw before that, so a kill that landed later than
//! aimed (the writer's next write is already there) is known; such a run is tried again.

use super::*;

/// How many runs aim at one kill point before the test gives up on landing it exactly.
const ATTEMPTS: u32 = 3;

/// The subjects of the lease bucket's puts and deletes (`$KV.TROUPE_LEASES.<session>`).
const LEASES: &str = "$KV.TROUPE_LEASES.>";

/// The pid in the last lease put on `session`'s key among `seen` (`None`: none, or the last
/// was a release).
fn lease_pid(seen: &[Seen], session: &str) -> Option<u32> {
    let key = format!("$KV.TROUPE_LEASES.{session}");
    let (_, payload) = seen.iter().rev().find(|(subject, _)| *subject == key)?;
    let value: Value = serde_json::from_str(payload).ok()?;
    value["pid"].as_u64().map(|p| u32::try_from(p).unwrap())
}

/// A message the tripwire saw: its subject and payload.
type Seen = (String, String);

/// A thread that SIGKILLs (or signals) `victim` when a message on `subject` (a NATS wildcard) satisfies
/// `hit`; [`Tripwire::fired`] returns what it saw before, up to and including the hit.
pub(super) struct Tripwire {
    seen: std::sync::mpsc::Receiver<(bool, Vec<Seen>)>,
}

impl Tripwire {
    /// Subscribes (returns once the subscription is in place) and arms.
    fn arm(
        url: &str,
        subjects: &[&str],
        victim: u32,
        hit: impl FnMut(&str, &str) -> bool + Send + 'static,
    ) -> Self {
        Self::arm_with(url, subjects, victim, rustix::process::Signal::KILL, hit)
    }

    /// [`Tripwire::arm`] sending `signal` instead of SIGKILL (e.g. SIGINT, a user's Ctrl-C
    /// at that moment).
    pub(super) fn arm_with(
        url: &str,
        subjects: &[&str],
        victim: u32,
        signal: rustix::process::Signal,
        mut hit: impl FnMut(&str, &str) -> bool + Send + 'static,
    ) -> Self {
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (seen_tx, seen) = std::sync::mpsc::channel();
        let addrs = troupe_store_nats::parse_url(url).unwrap();
        let subjects: Vec<String> = subjects.iter().map(|&s| s.to_owned()).collect();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                use futures_util::StreamExt as _;
                let client = async_nats::connect(addrs).await.unwrap();
                let mut subscriptions = Vec::new();
                for subject in subjects {
                    subscriptions.push(client.subscribe(subject).await.unwrap());
                }
                let mut messages = futures_util::stream::select_all(subscriptions);
                client.flush().await.unwrap();
                ready_tx.send(()).unwrap();
                let mut log = Vec::new();
                let end = tokio::time::Instant::now() + DEADLINE;
                while let Ok(Some(message)) = tokio::time::timeout_at(end, messages.next()).await {
                    let subject = message.subject.to_string();
                    let payload = String::from_utf8_lossy(&message.payload).into_owned();
                    let fire = hit(&subject, &payload);
                    log.push((subject, payload));
                    if fire {
                        let pid = rustix::process::Pid::from_raw(victim.cast_signed()).unwrap();
                        let _ = rustix::process::kill_process(pid, signal);
                        let _ = seen_tx.send((true, log));
                        return;
                    }
                }
                let _ = seen_tx.send((false, log));
            });
        });
        ready
            .recv_timeout(DEADLINE)
            .expect("the tripwire subscribed");
        Self { seen }
    }

    /// What it saw once it fired (waits up to [`DEADLINE`]).
    pub(super) fn fired(&self) -> Vec<Seen> {
        let (fired, seen) = self
            .seen
            .recv_timeout(DEADLINE + Duration::from_secs(10))
            .expect("the tripwire's thread answers");
        assert!(fired, "the tripwire never fired; it saw {seen:#?}");
        seen
    }
}

/// The session id `troupe run` printed first on its stderr (`session ID …`), once it did.
pub(super) fn lead_of(run_err: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(err) = std::fs::read_to_string(run_err)
            && let Some(line) = err.lines().find(|l| l.starts_with("session "))
        {
            return line.split_whitespace().nth(1).unwrap().to_owned();
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the run never named its session"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `troupe run --team --placement workers` of `script` in `workspace`, stderr to `run.stderr`.
pub(super) fn start_run(s: &Setup, workspace: &Path, script: &Path, run_err: &Path) -> Running {
    Running(
        s.troupe(&["run", "--team", "--placement", "workers", "--workspace"])
            .arg(workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(run_err).unwrap()))
            .spawn()
            .unwrap(),
    )
}

/// `troupe resume ID --placement workers` until it runs (a dead holder's lease is
/// `JOURNAL_LOCKED` until its TTL passed); requires exit 0.
pub(super) fn resume_placing(s: &Setup, id: &str) {
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

pub(super) fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

/// The id of the member named `name` in `team show --json`.
pub(super) fn member_id(s: &Setup, lead: &str, name: &str) -> String {
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", lead, "--json"])).unwrap();
    shown["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no member {name}: {shown}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The checks after a kill point: the message whose text is `marker` was queued once in the
/// Lead log, delivered once, and is in `target`'s log exactly once (one inbox item, one
/// `user/message`); nothing is pending; `team verify` passes.
pub(super) fn assert_delivered_once(s: &Setup, lead: &str, target: &str, marker: &str) {
    let lead_log = s.log(lead);
    let queued: Vec<&Value> = lead_log
        .iter()
        .filter(|e| e["type"] == "team/message/queued" && e.to_string().contains(marker))
        .collect();
    assert_eq!(queued.len(), 1, "queued once: {queued:?}");
    let id = queued[0]["data"]["message"]["id"].as_str().unwrap();
    let delivered = lead_log
        .iter()
        .filter(|e| e["type"] == "team/message/delivered" && e.to_string().contains(id))
        .count();
    assert_eq!(delivered, 1, "delivered once");
    let target_log = s.log(target);
    let as_message = target_log
        .iter()
        .filter(|e| e["type"] == "user/message" && e["data"]["id"] == id)
        .count();
    assert_eq!(as_message, 1, "one user/message of {id} in {target}");
    let spliced = target_log
        .iter()
        .filter(|e| e["type"] == "agent/inbox/spliced")
        .filter(|e| {
            e["data"]["inserted"]
                .as_array()
                .is_some_and(|items| items.iter().any(|i| i["id"] == id))
        })
        .count();
    assert!(
        spliced <= 1,
        "the item was inserted at most once ({spliced})"
    );
    for id in s.sessions() {
        if id != target {
            assert!(
                !s.log(&id)
                    .iter()
                    .any(|e| e["type"] == "user/message" && e.to_string().contains(marker)),
                "the message reached {id} too"
            );
        }
    }
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", lead, "--json"])).unwrap();
    assert_eq!(shown["pendingMessages"], json!([]), "{shown}");
    s.ok(&["team", "verify", lead]);
}

/// Kill point: the worker holding alpha's lease, right after it appended the Lead's message
/// to alpha's inbox (its `agent/inbox/spliced` is in the stream) and before its answer — the
/// Lead log has no `team/message/delivered` yet. The serializer's retry finds no answer, the
/// dead worker's lease expires, alpha is continued in the Lead's process, and the message is
/// in alpha's log once (the retry finds its id there), delivered once.
#[test]
fn kill_9_of_a_worker_right_after_its_delivery_append_delivers_the_message_once() {
    let Some(s) = Setup::single() else { return };
    let marker = "the-marked-message";
    for attempt in 1..=ATTEMPTS {
        let workspace = s.path(&format!("ws{attempt}"));
        std::fs::create_dir_all(&workspace).unwrap();
        let script = s.path(&format!("team{attempt}.json"));
        std::fs::write(
            &script,
            json!({"agents": {
                "lead": [
                    call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                    call("bash", json!({"command": "while [ ! -f started ]; do sleep 0.05; done", "timeout_ms": 600000})),
                    call("send_message", json!({"target": "alpha", "message": marker})),
                    call("wait_agent", json!({"timeout_ms": 170000})),
                    {"text": "lead done"},
                ],
                "alpha": [
                    call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                    call("team_task_create", json!({"subject": "after the crash", "description": "d"})),
                    {"text": "alpha done"},
                ],
            }})
            .to_string(),
        )
        .unwrap();
        let name = format!("w{attempt}");
        let (mut w1, _w1_log) = start_worker(&s, &name, &workspace);
        let run_err = s.path(&format!("run{attempt}.stderr"));
        let mut run = start_run(&s, &workspace, &script, &run_err);
        let lead = lead_of(&run_err);
        let lead_subject = format!("troupe.session.{lead}");
        let wire = Tripwire::arm(
            &s.url(),
            &["troupe.session.>", LEASES],
            w1.0.id(),
            move |subject, payload| {
                subject != lead_subject
                    && payload.contains("agent/inbox/spliced")
                    && payload.contains(marker)
            },
        );
        let seen = wire.fired();
        let _ = w1.0.wait();
        let hit = seen.last().unwrap().0.trim_start_matches("troupe.session.");
        // No lease put seen: the worker took alpha's lease before the tripwire subscribed (a
        // loaded machine) and renewed it after the hit; any put seen must be the worker's.
        let holder = lease_pid(&seen, hit);
        assert!(
            holder.is_none() || holder == Some(w1.0.id()),
            "the worker held alpha's lease when it appended the message: {holder:?}"
        );
        let late = seen.iter().any(|(subject, payload)| {
            subject.ends_with(&lead) && payload.contains("team/message/delivered")
        });
        // The orphaned `bash` loop of the dead worker is stopped by the recovery that
        // continues alpha; `go` lets the next step pass whatever happens.
        std::fs::write(workspace.join("go"), "").unwrap();
        let status = wait_exit(&mut run);
        let stderr = std::fs::read_to_string(&run_err).unwrap();
        assert!(status.success(), "{stderr}");
        let alpha = member_id(&s, &lead, "alpha");
        assert_delivered_once(&s, &lead, &alpha, marker);
        if !late {
            return;
        }
        eprintln!("attempt {attempt}: the kill landed after the delivery was recorded; again");
    }
    panic!("the kill never landed between the worker's append and the Lead's `delivered`");
}

/// Kill point: the Lead's process right after its own append (under a short lease of alpha's
/// session) of a quiet message to alpha, whom nobody hosts any more (it settled on a worker
/// and was released). `troupe resume` (another process) finds the message `queued`, delivers
/// it again — the append finds its id in alpha's log and adds nothing — and records it
/// delivered once; alpha's lease, taken by the dead process, freed itself after its TTL.
#[test]
fn kill_9_of_the_lead_right_after_its_append_to_an_unhosted_teammate_then_resume() {
    let Some(s) = Setup::single() else { return };
    let marker = "mail-for-the-idle";
    for attempt in 1..=ATTEMPTS {
        let workspace = s.path(&format!("ws{attempt}"));
        std::fs::create_dir_all(&workspace).unwrap();
        let script = s.path(&format!("team{attempt}.json"));
        std::fs::write(
            &script,
            json!({"agents": {
                "lead": [
                    call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                    call("wait_agent", json!({"timeout_ms": 170000})),
                    // The worker releases alpha right after it settled; give it time to.
                    call("bash", json!({"command": "sleep 2", "timeout_ms": 60000})),
                    call("send_message", json!({"target": "alpha", "message": marker})),
                    call("team_task_create", json!({"subject": "after the mail", "description": "d"})),
                    {"text": "lead done"},
                ],
                "alpha": [
                    {"text": "alpha done"},
                ],
            }})
            .to_string(),
        )
        .unwrap();
        let name = format!("w{attempt}");
        let (_w1, w1_log) = start_worker(&s, &name, &workspace);
        let run_err = s.path(&format!("run{attempt}.stderr"));
        let mut run = start_run(&s, &workspace, &script, &run_err);
        let lead = lead_of(&run_err);
        let lead_subject = format!("troupe.session.{lead}");
        let wire = Tripwire::arm(
            &s.url(),
            &["troupe.session.>", LEASES],
            run.0.id(),
            move |subject, payload| {
                subject != lead_subject
                    && payload.contains("agent/inbox/spliced")
                    && payload.contains(marker)
            },
        );
        let seen = wire.fired();
        let _ = run.0.wait();
        let alpha = member_id(&s, &lead, "alpha");
        assert_eq!(
            seen.last().unwrap().0,
            format!("troupe.session.{alpha}"),
            "the hit is alpha's append"
        );
        assert_eq!(
            lease_pid(&seen, &alpha),
            Some(run.0.id()),
            "the Lead's process held alpha's lease when it appended the message"
        );
        assert!(
            std::fs::read_to_string(&w1_log)
                .unwrap()
                .contains(&format!("hosting alpha ({alpha})")),
            "alpha ran on the worker first"
        );
        let late = seen.iter().any(|(subject, payload)| {
            subject.ends_with(&lead) && payload.contains("team/message/delivered")
        });
        // Another process resumes the Team once the dead process's leases expired.
        resume_placing(&s, &lead);
        let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
        let subjects: Vec<&Value> = shown["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["subject"])
            .collect();
        assert_eq!(subjects, [&json!("after the mail")], "{shown}");
        assert!(
            !s.log(&alpha)
                .iter()
                .any(|e| e["type"] == "turn/start" && e.to_string().contains(marker)),
            "quiet mail woke nobody"
        );
        let target_log = s.log(&alpha);
        let inserted = target_log
            .iter()
            .filter(|e| e["type"] == "agent/inbox/spliced" && e.to_string().contains(marker))
            .count();
        assert_eq!(inserted, 1, "the item was appended to alpha's inbox once");
        let lead_log = s.log(&lead);
        let id = lead_log
            .iter()
            .find(|e| e["type"] == "team/message/queued" && e.to_string().contains(marker))
            .unwrap()["data"]["message"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            lead_log
                .iter()
                .filter(|e| e["type"] == "team/message/delivered" && e.to_string().contains(&id))
                .count(),
            1,
            "delivered once"
        );
        s.ok(&["team", "verify", &lead]);
        if !late {
            return;
        }
        eprintln!("attempt {attempt}: the kill landed after the delivery was recorded; again");
    }
    panic!("the kill never landed between the Lead's append and its `delivered`");
}

/// Kill point: a worker right after it took the lease of the teammate it was asked to host
/// (the lease's put is in `TROUPE_LEASES`), before it ran anything of it. The Lead's
/// placement gets no answer; the teammate waits out the dead worker's lease and runs (in the
/// Lead's process or on the other worker); the Team finishes, alpha's work done once.
#[test]
fn kill_9_of_a_worker_right_after_it_took_a_teammates_lease_and_the_team_finishes() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("wait_agent", json!({"timeout_ms": 170000})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("team_task_create", json!({"subject": "alpha's task", "description": "d"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (mut w1, _w1_log) = start_worker(&s, "w1", &workspace);
    let victim = w1.0.id();
    let pid = format!("\"pid\":{victim}");
    let wire = Tripwire::arm(&s.url(), &[LEASES], victim, move |_, payload| {
        payload.contains(&pid)
    });
    let run_err = s.path("run.stderr");
    let mut run = start_run(&s, &workspace, &script, &run_err);
    let seen = wire.fired();
    assert!(!seen.is_empty());
    let _ = w1.0.wait();
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("troupe: warning: worker w1 did not answer for")
            && stderr.contains("it runs in the Lead's process"),
        "{stderr}"
    );
    let lead = session_of(&stderr);
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "alpha's work done once: {shown}");
    assert_eq!(tasks[0]["subject"], "alpha's task");
    let alpha = member_id(&s, &lead, "alpha");
    let turns = s
        .log(&alpha)
        .iter()
        .filter(|e| e["type"] == "turn/end")
        .count();
    assert_eq!(turns, 1, "alpha ran one turn");
    s.ok(&["team", "verify", &lead]);
}

/// Where a kill of the worker hosting alpha lands during the Lead's `interrupt_agent` of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InterruptKill {
    /// Right after alpha's interrupted turn's closing batch (`turn/end` aborted by
    /// `{"kind":"parent"}`) is in the stream, before the worker's answer.
    AfterClose,
    /// Right when the interrupt request reaches the worker, before its cancel.
    AtRequest,
}

/// One run of the interrupt script with the worker killed at `kill`: the Lead's
/// `interrupt_agent` result (`tool/result` data), alpha's log, and whether the kill landed
/// later than aimed (`AtRequest`: the worker's cancel reached alpha's log).
fn interrupt_with_kill(s: &Setup, attempt: u32, kill: InterruptKill) -> (Value, Vec<Value>, bool) {
    let tag = format!("{kill:?}-{attempt}");
    let workspace = s.path(&format!("ws-{tag}"));
    std::fs::create_dir_all(&workspace).unwrap();
    let script = s.path(&format!("team-{tag}.json"));
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("bash", json!({"command": "while [ ! -f started ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("interrupt_agent", json!({"target": "alpha"})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("bash", json!({"command": "touch started; sleep 600", "timeout_ms": 600000})),
                {"text": "alpha went on"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (mut worker, _log) = start_worker(s, &format!("w-{tag}"), &workspace);
    let run_err = s.path(&format!("run-{tag}.stderr"));
    let mut run = start_run(s, &workspace, &script, &run_err);
    let lead = lead_of(&run_err);
    let lead_subject = format!("troupe.session.{lead}");
    let wire = match kill {
        InterruptKill::AfterClose => Tripwire::arm(
            &s.url(),
            &["troupe.session.>"],
            worker.0.id(),
            move |subject, payload| {
                subject != lead_subject
                    && payload.contains(r#""type":"turn/end""#)
                    && payload.contains("aborted")
            },
        ),
        InterruptKill::AtRequest => {
            Tripwire::arm(&s.url(), &["troupe.interrupt.>"], worker.0.id(), |_, _| {
                true
            })
        }
    };
    wire.fired();
    let _ = worker.0.wait();
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert!(status.success(), "{kill:?}: {stderr}");
    let result = s
        .log(&lead)
        .into_iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["name"] == "interrupt_agent")
        .expect("the Lead's interrupt_agent result")["data"]
        .clone();
    let alpha = member_id(s, &lead, "alpha");
    let alpha_log = s.log(&alpha);
    s.ok(&["team", "verify", &lead]);
    let parent_aborts = alpha_log
        .iter()
        .filter(|e| {
            e["type"] == "turn/end" && e["data"]["reason"]["reason"] == json!({"kind": "parent"})
        })
        .count();
    // The worker's answer (`running`) and the decision from the log after its death give
    // the same result at `AfterClose`: nothing tells them apart, and both must hold.
    let late = kill == InterruptKill::AtRequest && parent_aborts > 0;
    eprintln!("{tag}: the Lead's interrupt_agent result: {result}");
    (result, alpha_log, late)
}

/// Kill point: the worker hosting alpha, right after alpha's interrupted turn closed
/// durably (`turn/end` aborted by `{"kind":"parent"}`) and before its answer reached the
/// Lead. The Lead's retry gets no answer; once the dead worker's lease expired, the decision
/// is made from alpha's log — the turn running when the Lead asked ended by its interrupt:
/// `{"previousStatus":"running"}`, what the worker would have answered. alpha is not
/// continued (a turn its Lead interrupted is left alone): it never takes its next step, it
/// ran one turn, the Team finishes, `team verify` passes.
#[test]
fn kill_9_of_the_worker_right_after_an_interrupted_turn_closed_answers_running() {
    let Some(s) = Setup::single() else { return };
    let (result, alpha_log, _) = interrupt_with_kill(&s, 1, InterruptKill::AfterClose);
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["content"], r#"{"previousStatus":"running"}"#,
        "{result}"
    );
    let ends: Vec<&Value> = alpha_log
        .iter()
        .filter(|e| e["type"] == "turn/end")
        .collect();
    assert_eq!(ends.len(), 1, "alpha ran one turn: {ends:?}");
    assert_eq!(
        ends[0]["data"]["reason"]["reason"],
        json!({"kind": "parent"})
    );
    assert!(
        !alpha_log
            .iter()
            .any(|e| e.to_string().contains("alpha went on")),
        "alpha was not continued"
    );
}

/// Kill point: the worker hosting alpha, the moment the Lead's interrupt request reaches it
/// (before its cancel). The interrupt never reached alpha's turn, which the worker's death
/// cut: once the lease expired the Lead gets the typed error `TEAM_HOST_LOST` (alpha's log
/// shows that turn open, or closed by the recovery of the Team that continues it) — or, when
/// the Team runs alpha again in the Lead's process by then, alpha is interrupted there (a
/// turn aborted by `{"kind":"parent"}` after the recovered one). Never `inactive`. The orphaned `sleep` of the dead
/// worker is stopped by the recovery; the Team finishes and `team verify` passes.
#[test]
fn kill_9_of_the_worker_as_an_interrupt_reaches_it_is_team_host_lost_or_interrupted_here() {
    let Some(s) = Setup::single() else { return };
    for attempt in 1..=ATTEMPTS {
        let (result, alpha_log, late) = interrupt_with_kill(&s, attempt, InterruptKill::AtRequest);
        if late {
            eprintln!("attempt {attempt}: the worker cancelled before the kill ({result}); again");
            continue;
        }
        let ends: Vec<&Value> = alpha_log
            .iter()
            .filter(|e| e["type"] == "turn/end")
            .collect();
        assert!(
            ends.len() >= 2,
            "alpha's cut turn was closed and it went on: {ends:?}"
        );
        assert_ne!(
            ends[0]["data"]["reason"]["reason"],
            json!({"kind": "parent"}),
            "the first turn was cut, not interrupted: {ends:?}"
        );
        if result["isError"] == true {
            assert_eq!(result["code"], "TEAM_HOST_LOST", "{result}");
            assert!(
                alpha_log
                    .iter()
                    .any(|e| e.to_string().contains("alpha went on")),
                "the Team continued alpha"
            );
        } else {
            assert_ne!(
                result["content"], r#"{"previousStatus":"inactive"}"#,
                "{result}"
            );
            assert!(
                ends.iter()
                    .any(|e| e["data"]["reason"]["reason"] == json!({"kind": "parent"})),
                "alpha was interrupted in the Lead's process: {ends:?}"
            );
        }
        return;
    }
    panic!("the kill never landed before the worker's cancel");
}

/// Where [`kill_9_of_the_lead_mid_re_placement_then_resume`] kills the Lead's process.
#[derive(Debug, Clone, Copy)]
enum RePlacementKill {
    /// Right after it closed alpha's cut turn (`turn/end` `interrupted` in alpha's log).
    AfterClosingTheCutTurn,
    /// Right after it appended alpha's continuation note (before asking a worker).
    AfterTheNote,
}

/// Kill points of the re-placement of a dead worker's running teammate (`roster::take_over`):
/// w1 hosting alpha is killed with `kill -9` while w2 is live; once alpha's lease expired the
/// Lead's process closes alpha's cut turn and appends its continuation note, and is killed
/// with `kill -9` right after one of those writes. `troupe resume` (another process) then
/// finishes the Team: alpha gets exactly one continuation note (a note already waiting
/// answers its cut turn; a turn closed `interrupted` is owed one), finishes, the task had one
/// owner, and `team verify` passes.
#[test]
fn kill_9_of_the_lead_mid_re_placement_then_resume() {
    let Some(s) = Setup::single() else { return };
    for (attempt, kill) in [
        RePlacementKill::AfterClosingTheCutTurn,
        RePlacementKill::AfterTheNote,
    ]
    .into_iter()
    .enumerate()
    {
        let workspace = s.path(&format!("ws{attempt}"));
        std::fs::create_dir_all(&workspace).unwrap();
        let script = s.path(&format!("team{attempt}.json"));
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
                    call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"})),
                    {"text": "alpha done"},
                ],
            }})
            .to_string(),
        )
        .unwrap();
        let (mut w1, w1_log) = start_worker_with(&s, &format!("a{attempt}"), &workspace, &[]);
        let run_err = s.path(&format!("run{attempt}.stderr"));
        let mut run = start_run(&s, &workspace, &script, &run_err);
        let lead = lead_of(&run_err);
        let start = Instant::now();
        while !workspace.join("started").exists() {
            assert!(start.elapsed() < DEADLINE, "alpha never ran");
            std::thread::sleep(Duration::from_millis(50));
        }
        let alpha = member_id(&s, &lead, "alpha");
        assert!(
            std::fs::read_to_string(&w1_log)
                .unwrap()
                .contains(&format!("hosting alpha ({alpha})"))
        );
        let (_w2, _w2_log) = start_worker_with(&s, &format!("b{attempt}"), &workspace, &[]);
        let alpha_subject = format!("troupe.session.{alpha}");
        let wire = Tripwire::arm(
            &s.url(),
            &["troupe.session.>"],
            run.0.id(),
            move |subject, payload| {
                subject == alpha_subject
                    && match kill {
                        RePlacementKill::AfterClosingTheCutTurn => {
                            payload.contains("turn/end") && payload.contains("interrupted")
                        }
                        RePlacementKill::AfterTheNote => {
                            payload.contains("agent/inbox/spliced")
                                && payload.contains("\"kind\":\"resume\"")
                        }
                    }
            },
        );
        w1.0.kill().unwrap();
        let _ = w1.0.wait();
        wire.fired();
        let _ = run.0.wait();
        resume_placing(&s, &lead);
        std::fs::write(workspace.join("go"), "").unwrap();
        let alpha_log = s.log(&alpha);
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
        assert_eq!(notes, 1, "{kill:?}: one continuation note");
        assert!(
            alpha_log
                .iter()
                .any(|e| e.to_string().contains("alpha done")),
            "{kill:?}: alpha answered"
        );
        let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
        let tasks = shown["tasks"].as_array().unwrap();
        assert_eq!(tasks.len(), 1, "{shown}");
        assert_eq!(tasks[0]["status"], "completed", "{kill:?}: {shown}");
        assert_eq!(tasks[0]["ownerName"], "alpha", "{shown}");
        assert_eq!(shown["pendingMessages"], json!([]), "{shown}");
        s.ok(&["team", "verify", &lead]);
    }
}

/// Kill point: a worker right after its take-over of the registry entry a worker killed on
/// this host left behind (`TROUPE_WORKERS`, the compare-and-set update naming its own pid),
/// before it serves anything. The entry names a dead pid of this host again, so the next
/// worker of that name takes it over in turn, at once, and serves.
#[test]
fn kill_9_of_a_worker_right_after_it_took_over_a_dead_workers_name_leaves_the_name_free() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut first, _) = start_worker(&s, "w1", &workspace);
    first.0.kill().unwrap();
    let _ = first.0.wait();
    // The second starts stopped (a shell that stops itself, then becomes the worker under the
    // same pid), so the tripwire is in place before it can register.
    let log = s.path("w1-second.stderr");
    let mut second = Running(
        Command::new("sh")
            .arg("-c")
            .arg("kill -STOP $$; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_troupe"))
            .arg("--home")
            .arg(s.path("home-w1-second"))
            .arg("--store")
            .arg(s.url())
            .args(["worker", "--name", "w1", "--workspace"])
            .arg(&workspace)
            .env_remove("TROUPE_HOME")
            .env_remove("TROUPE_STORE")
            .env("TROUPE_LEASE_TTL", format!("{}s", s.lease_ttl.as_secs()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap(),
    );
    let victim = second.0.id();
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{victim}/stat"))
            .is_ok_and(|stat| stat.rsplit(") ").next().is_some_and(|r| r.starts_with('T')))
    };
    let start = Instant::now();
    while !stopped() {
        assert!(
            start.elapsed() < DEADLINE,
            "the worker's shell never stopped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = format!("\"pid\":{victim}");
    let wire = Tripwire::arm(
        &s.url(),
        &["$KV.TROUPE_WORKERS.w1"],
        victim,
        move |_, payload| payload.contains(&pid),
    );
    let resumed = rustix::process::Pid::from_raw(victim.cast_signed()).unwrap();
    rustix::process::kill_process(resumed, rustix::process::Signal::CONT).unwrap();
    let seen = wire.fired();
    let _ = second.0.wait();
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!said.contains("serving"), "killed before it served: {said}");
    let (subject, payload) = seen.last().unwrap();
    assert_eq!(subject, "$KV.TROUPE_WORKERS.w1");
    let entry: Value = serde_json::from_str(payload).unwrap();
    assert_eq!(
        entry["pid"], victim,
        "the entry names the killed worker: {entry}"
    );
    // Its entry outlives it as the first's did, and is taken over the same way.
    let (_third, log) = start_worker(&s, "w1", &workspace);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("troupe worker w1: serving"),
    );
}
