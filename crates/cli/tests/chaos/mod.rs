//! Issue 14's chaos across processes ("Must show"): a worker hosting a running teammate
//! SIGSTOPped past its lease TTL while the Lead's process continues the teammate, then
//! SIGCONTed — its writes are fenced; the leader of a three-node cluster killed (-9) under a
//! Lead and two workers; and (`board.rs`) eight teammates in three processes mutating one task
//! board at once.
//!
//! Who wrote what is read from the stream itself: every message of a session carries
//! `Nats-Msg-Id: <session>/<seq>/<owner>`, `owner` being the writer's lease token, and the
//! lease bucket's history (watched from the start by a [`LeaseLog`]) maps each token to the
//! process (pid) that held the lease with it.

use super::*;
use killpoints::call;

mod board;

/// One message of a session's subject: its stream sequence, the `<seq>` and `<owner>` parts
/// of its `Nats-Msg-Id`, and its payload.
#[derive(Debug, Clone)]
struct Stored {
    stream_seq: u64,
    seq: String,
    owner: String,
    payload: String,
}

/// Every message of `session`'s subject, in stream order.
fn stored(s: &Setup, session: &str) -> Vec<Stored> {
    let (rt, js) = s.raw();
    let subject = format!("troupe.session.{session}");
    rt.block_on(async {
        let stream = js.get_stream("TROUPE").await.unwrap();
        let mut out = Vec::new();
        let mut from = 1;
        loop {
            let message = stream
                .raw_message_builder()
                .sequence(from)
                .next_by_subject(subject.clone())
                .send()
                .await;
            let Ok(message) = message else { break };
            let id = message
                .headers
                .get(async_nats::header::NATS_MESSAGE_ID)
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default();
            let mut parts = id.rsplitn(3, '/');
            let owner = parts.next().unwrap_or_default().to_owned();
            let seq = parts.next().unwrap_or_default().to_owned();
            out.push(Stored {
                stream_seq: message.sequence,
                seq,
                owner,
                payload: String::from_utf8_lossy(&message.payload).into_owned(),
            });
            from = message.sequence + 1;
        }
        out
    })
}

/// A watch of the lease bucket from before the run starts: every put (session, owner, pid)
/// in the order the server stored them.
struct LeaseLog {
    seen: Arc<std::sync::Mutex<Vec<(String, String, u32)>>>,
}

impl LeaseLog {
    fn start(url: &str) -> Self {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let addrs = troupe_store_nats::parse_url(url).unwrap();
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                use futures_util::StreamExt as _;
                let client = async_nats::connect(addrs).await.unwrap();
                let mut leases = client.subscribe("$KV.TROUPE_LEASES.>").await.unwrap();
                client.flush().await.unwrap();
                ready_tx.send(()).unwrap();
                while let Some(message) = leases.next().await {
                    let session = message
                        .subject
                        .trim_start_matches("$KV.TROUPE_LEASES.")
                        .to_owned();
                    let Ok(value) = serde_json::from_slice::<Value>(&message.payload) else {
                        continue;
                    };
                    let (Some(owner), Some(pid)) = (value["owner"].as_str(), value["pid"].as_u64())
                    else {
                        continue;
                    };
                    log.lock().unwrap().push((
                        session,
                        owner.to_owned(),
                        u32::try_from(pid).unwrap(),
                    ));
                }
            });
        });
        ready
            .recv_timeout(DEADLINE)
            .expect("the lease watch subscribed");
        Self { seen }
    }

    /// The lease tokens process `pid` held on `session`.
    fn owners(&self, session: &str, pid: u32) -> Vec<String> {
        let mut owners: Vec<String> = self
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _, p)| s == session && *p == pid)
            .map(|(_, o, _)| o.clone())
            .collect();
        owners.dedup();
        owners
    }

    /// The pid whose lease on `session` was put last.
    fn holder(&self, session: &str) -> Option<u32> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(s, _, _)| s == session)
            .map(|(_, _, p)| *p)
    }
}

fn signal(child: &Running, signal: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_child(&child.0), signal).unwrap();
}

/// [`wait_exit`] within `deadline`, and when the process does not end, a panic naming what
/// `logs` hold and what `team show` says of `lead`'s Team.
fn wait_exit_or_say(
    s: &Setup,
    child: &mut Running,
    logs: &[&Path],
    lead: &str,
    deadline: Duration,
) -> std::process::ExitStatus {
    let end = Instant::now() + deadline;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > end {
            let said: Vec<String> = logs
                .iter()
                .map(|p| {
                    format!(
                        "--- {}:\n{}",
                        p.display(),
                        std::fs::read_to_string(p).unwrap_or_default()
                    )
                })
                .collect();
            let shown = s.run(&["team", "show", lead]);
            panic!(
                "the run did not end\n{}\n--- team show:\n{}{}",
                said.join("\n"),
                text(&shown.stdout),
                text(&shown.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `cond` holds, panicking with `what` after [`DEADLINE`].
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The checks every chaos run ends with, on the Lead `lead`'s Team: `team verify` passes;
/// every queued message is delivered once (`team/message/delivered` once in the Lead log,
/// inserted into one inbox once, taken as a `user/message` at most once); nothing is pending; each
/// session's stored messages have distinct seqs (nothing appended twice) and every tool call
/// has at most one result; no task ever had two owners at once (`team verify` folds every
/// rule; also checked here on the final board).
fn assert_team_whole(s: &Setup, lead: &str) {
    s.ok(&["team", "verify", lead]);
    let lead_log = s.log(lead);
    let queued: Vec<String> = lead_log
        .iter()
        .filter(|e| e["type"] == "team/message/queued")
        .map(|e| e["data"]["message"]["id"].as_str().unwrap().to_owned())
        .collect();
    // Where each message arrived: inserted into its target's inbox (`agent/inbox/spliced`),
    // and, once the target took it in a step, a `user/message` (a message to a member whose
    // last turn had ended stays parked in its inbox).
    let mut arrived: BTreeMap<String, usize> = BTreeMap::new();
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    for id in s.sessions() {
        let log = s.log(&id);
        for event in &log {
            if event["type"] == "agent/inbox/spliced"
                && let Some(items) = event["data"]["inserted"].as_array()
            {
                for item in items {
                    if let Some(message) = item["id"].as_str() {
                        *arrived.entry(message.to_owned()).or_default() += 1;
                    }
                }
            }
            if event["type"] == "user/message" && event["data"]["source"]["kind"] == "team-message"
            {
                *taken
                    .entry(event["data"]["id"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
        let mut results: BTreeMap<String, usize> = BTreeMap::new();
        for event in &log {
            if event["type"] == "tool/result"
                && let Some(call) = event["data"]["callId"].as_str()
            {
                *results.entry(call.to_owned()).or_default() += 1;
            }
        }
        for (call, n) in results {
            assert_eq!(n, 1, "tool call {call} of {id} has {n} results");
        }
        let messages = stored(s, &id);
        let mut seqs: Vec<&str> = messages.iter().map(|m| m.seq.as_str()).collect();
        let count = seqs.len();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), count, "a seq of {id} was stored twice");
    }
    for id in &queued {
        let delivered = lead_log
            .iter()
            .filter(|e| e["type"] == "team/message/delivered" && e["data"]["messageId"] == *id)
            .count();
        assert_eq!(delivered, 1, "message {id} recorded delivered once");
        assert_eq!(
            arrived.get(id),
            Some(&1),
            "message {id} arrived in one inbox once"
        );
        assert!(
            taken.get(id).is_none_or(|n| *n == 1),
            "message {id} taken at most once"
        );
    }
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", lead, "--json"])).unwrap();
    assert_eq!(shown["pendingMessages"], json!([]), "{shown}");
    for task in shown["tasks"].as_array().unwrap() {
        let owned = !task["ownerName"].is_null();
        let status = task["status"].as_str().unwrap();
        assert_eq!(
            owned,
            matches!(status, "in_progress" | "completed"),
            "{task}"
        );
    }
}

/// Issue 14, chaos: the worker hosting a running teammate is SIGSTOPped past its lease TTL.
/// Meanwhile the Lead sends the teammate a message (its holder does not answer; the Lead
/// waits the lease out) and, once the lease is free, continues the teammate in its own process
/// (its cut turn closed from the logs). Then SIGCONT: the worker's next writes for the
/// teammate are fenced (its lease is lost: `JOURNAL_LEASE_LOST`; a publish that got through
/// would meet the expected-sequence fence, `JOURNAL_SEQ_CONFLICT`), so none of them is
/// stored — every message of its lease token is older than the takeover. The Team finishes:
/// the teammate's later work is done once, the message delivered once, `team verify` passes.
#[test]
fn a_sigstopped_worker_is_fenced_after_its_teammate_was_continued_elsewhere() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let marker = "mail-while-its-host-is-stopped";
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("bash", json!({"command": "while [ ! -f stopped ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("send_message", json!({"target": "alpha", "message": marker})),
                call("wait_agent", json!({"timeout_ms": 170000})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("team_task_create", json!({"subject": "after the stop", "description": "d"})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"})),
                call("team_task_update", json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"})),
                call("send_message", json!({"target": "lead", "message": "alpha continued"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let leases = LeaseLog::start(&s.url());
    let (w1, w1_log) = start_worker(&s, "w1", &workspace);
    let run_err = s.path("run.stderr");
    let mut run = Running(
        s.troupe(&["run", "--team", "--placement", "workers", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&run_err).unwrap()))
            .spawn()
            .unwrap(),
    );
    wait_until("alpha ran on w1", || workspace.join("started").exists());
    let lead = session_of(&std::fs::read_to_string(&run_err).unwrap());
    let alpha = killpoints::member_id(&s, &lead, "alpha");
    assert!(
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .contains(&format!("hosting alpha ({alpha})"))
    );
    signal(&w1, rustix::process::Signal::STOP);
    std::fs::write(workspace.join("stopped"), "").unwrap();
    // The Lead's process takes alpha's lease once the stopped worker's expired (after the
    // TTL) and continues it; SIGCONT once alpha's log holds a write of the Lead's process.
    let run_pid = run.0.id();
    wait_until("the Lead's process continued alpha", || {
        let ours = leases.owners(&alpha, run_pid);
        stored(&s, &alpha).iter().any(|m| ours.contains(&m.owner))
            && leases.holder(&alpha) == Some(run_pid)
    });
    let worker_tokens = leases.owners(&alpha, w1.0.id());
    assert!(!worker_tokens.is_empty(), "w1 held alpha's lease");
    let by_worker = |messages: &[Stored]| {
        messages
            .iter()
            .filter(|m| worker_tokens.contains(&m.owner))
            .map(|m| m.stream_seq)
            .collect::<Vec<_>>()
    };
    let before = by_worker(&stored(&s, &alpha));
    signal(&w1, rustix::process::Signal::CONT);
    let status = wait_exit_or_say(&s, &mut run, &[&run_err, &w1_log], &lead, DEADLINE);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert!(status.success(), "{stderr}");
    // The woken worker noticed: its writer for alpha was fenced, and it is serving again
    // with its slot free.
    wait_until("w1 freed its slot", || {
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .contains("1 of 1 slots free")
    });
    let worker_said = std::fs::read_to_string(&w1_log).unwrap();
    assert!(
        worker_said.contains("JOURNAL_LEASE_LOST") || worker_said.contains("JOURNAL_SEQ_CONFLICT"),
        "{worker_said}"
    );
    let after = stored(&s, &alpha);
    assert_eq!(
        by_worker(&after),
        before,
        "nothing of w1's was stored after SIGCONT"
    );
    let first_taken_over = after
        .iter()
        .position(|m| !worker_tokens.contains(&m.owner) && m.stream_seq > before[0])
        .unwrap();
    assert!(
        after[first_taken_over..]
            .iter()
            .all(|m| !worker_tokens.contains(&m.owner)),
        "w1 wrote after the takeover"
    );
    // The work after the stop is done once, by the Lead's process.
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{shown}");
    assert_eq!(tasks[0]["subject"], "after the stop");
    assert_eq!(tasks[0]["status"], "completed");
    assert!(
        after
            .iter()
            .filter(|m| m.payload.contains("alpha done"))
            .all(|m| !worker_tokens.contains(&m.owner))
    );
    killpoints::assert_delivered_once(&s, &lead, &alpha, marker);
    assert_team_whole(&s, &lead);
    std::fs::write(workspace.join("go"), "").unwrap();
}

/// The index of the node leading stream `name`'s replicas (`None` while it has no leader).
fn leader_of(s: &Setup, name: &str) -> Option<usize> {
    let (rt, js) = s.raw();
    rt.block_on(async {
        let mut stream = js.get_stream(name).await.ok()?;
        let info = stream.info().await.ok()?;
        let leader = info.cluster.as_ref()?.leader.clone()?;
        Some(leader.trim_start_matches('n').parse::<usize>().ok()? - 1)
    })
}

/// Issue 14, chaos on a three-node cluster: `troupe demo --placement workers` with two
/// `troupe worker`s (started without `--replicas`: the worker registry they create takes the
/// session stream's three replicas), every stream with three replicas; once the Team is at work (mail in
/// flight, teammates on the workers), the node leading the session stream's replicas is
/// killed (-9). The Lead and both workers go on through the other two (a new leader is
/// elected; appends, leases, Team calls, deliveries and status retry across it): the demo
/// finishes, its project's tests pass, `team verify` passes, every message is delivered
/// exactly once and nothing is stored twice.
#[test]
fn on_a_cluster_a_team_with_two_workers_finishes_when_the_leader_node_is_killed() {
    let Some(mut s) = Setup::cluster() else {
        return;
    };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    // The store first: a stream and the buckets with three replicas.
    s.ok(&["sessions", "--replicas", "3"]);
    let (_wa, wa_log) = start_worker(&s, "wa", &workspace);
    let (_wb, wb_log) = start_worker(&s, "wb", &workspace);
    let (mut demo, stderr) = start_demo(
        &s,
        &workspace,
        "150",
        &["--replicas", "3", "--placement", "workers"],
    );
    let lead = wait_for_mail(&mut s, &mut demo, &stderr);
    wait_until("a worker hosts a teammate", || {
        let said =
            std::fs::read_to_string(&wa_log).unwrap() + &std::fs::read_to_string(&wb_log).unwrap();
        said.contains(": hosting ")
    });
    // The registry the workers created has the stream's three replicas (they were started
    // without --replicas), so it outlives the kill as the logs do.
    let (rt, js) = s.raw();
    let registry_replicas = rt.block_on(async {
        let mut stream = js.get_stream("KV_TROUPE_WORKERS").await.unwrap();
        stream.info().await.unwrap().config.num_replicas
    });
    assert_eq!(registry_replicas, 3);
    drop((rt, js));
    let leader = stream_leader(&s);
    let leases_leader = leader_of(&s, "KV_TROUPE_LEASES");
    eprintln!(
        "killing n{} (leads TROUPE; KV_TROUPE_LEASES is led by {:?})",
        leader + 1,
        leases_leader.map(|i| format!("n{}", i + 1))
    );
    s.store = None;
    s.server.kill(leader);
    let status = wait_exit(&mut demo);
    let err = stderr.recv_timeout(DEADLINE).unwrap();
    assert!(
        status.success(),
        "{err}\nworkers:\n{}\n{}\nservers:\n{}",
        std::fs::read_to_string(&wa_log).unwrap(),
        std::fs::read_to_string(&wb_log).unwrap(),
        s.server.logs()
    );
    assert_demo_done_once(&s, &workspace, lead.as_str());
    assert_team_whole(&s, lead.as_str());
    let hosted =
        std::fs::read_to_string(&wa_log).unwrap() + &std::fs::read_to_string(&wb_log).unwrap();
    assert!(hosted.contains(": hosting "), "{hosted}");
    s.server.restart(leader);
}
