//! Issue 14, concurrency across processes: many teammates in three processes mutating one
//! task board at once through the Team tools, checked against the Lead log's serial order.

use super::*;
use troupe_test_support::FakeResponse;

/// Teammates in [`concurrent_task_mutations_across_three_processes_are_serializable`].
const MEMBERS: usize = 8;
/// Tasks the Lead creates for them to fight over.
const TASKS: usize = 6;
/// Task mutations each teammate attempts: the 1,000 (8,000 in all), about two and a
/// half minutes on two cores in a debug build (measured in BENCHMARKS.md, "Concurrency across
/// processes").
const MUTATIONS: usize = 1000;
/// How long the run may take: the shared [`DEADLINE`] is for one step of a test, this run is
/// thousands of them (BENCHMARKS.md: 150–160 s on a loaded machine).
const RUN_DEADLINE: Duration = Duration::from_secs(600);
/// Updates per model answer (each answer also lists the board, for the next one's revisions).
const PER_ANSWER: usize = 4;

/// A small deterministic generator (splitmix64), so each member's choices follow from its
/// name and its step: a rerun makes the same attempts.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The text of a chat message's `content` (a string, or text parts).
fn content_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The model of the concurrency test, played by the fake server from each request's
/// conversation (nothing kept between requests, so a member continued in another process
/// goes on where its log is): the Lead creates [`TASKS`] tasks and spawns [`MEMBERS`]
/// teammates, then answers every later request with a line of text; a teammate answers each
/// request with [`PER_ANSWER`] `team_task_update`s — each of a task and action drawn at
/// random, with the revision the last `team_task_list` it saw gave that task (stale on
/// purpose when another member was quicker) — and a `team_task_list`, until it attempted
/// [`MUTATIONS`]; then it ends its turn.
fn board_model(body: &Value) -> Option<FakeResponse> {
    use troupe_test_support::fake_openai::chunks;
    let messages = body["messages"].as_array()?;
    let identity = messages.iter().map(content_text).find_map(|t| {
        let (_, rest) = t.split_once("your Team name is ")?;
        Some(rest.split(';').next()?.to_owned())
    })?;
    let answers = messages.iter().filter(|m| m["role"] == "assistant").count();
    if identity == "lead" {
        if answers > 0 {
            return Some(FakeResponse::json(chunks::text_completion("noted")));
        }
        let mut calls = Vec::new();
        for n in 0..TASKS {
            calls.push((
                format!("call_lead_task_{n}"),
                "team_task_create",
                json!({"subject": format!("t{n}"), "description": "fight over it"}),
            ));
        }
        for n in 0..MEMBERS {
            calls.push((
                format!("call_lead_spawn_{n}"),
                "spawn_teammate",
                json!({"name": format!("m{n}"), "description": "mutates the board", "prompt": "mutate the board"}),
            ));
        }
        let calls: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
            .collect();
        return Some(FakeResponse::json(chunks::tool_call_completion(&calls)));
    }
    let attempted: usize = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter(|c| c["function"]["name"] == "team_task_update")
        .count();
    if attempted >= MUTATIONS {
        return Some(FakeResponse::json(chunks::text_completion("board done")));
    }
    // The revisions of the last board this member listed.
    let mut revisions: BTreeMap<String, u64> = BTreeMap::new();
    if let Some(board) = messages
        .iter()
        .rev()
        .filter(|m| m["role"] == "tool")
        .find_map(|m| {
            serde_json::from_str::<Value>(&content_text(m))
                .ok()
                .filter(|v| v["tasks"].is_array())
        })
    {
        for task in board["tasks"].as_array().unwrap() {
            revisions.insert(
                task["id"].as_str().unwrap().to_owned(),
                task["revision"].as_u64().unwrap(),
            );
        }
    }
    let member: u64 = identity.trim_start_matches('m').parse().unwrap_or(99);
    let mut calls = Vec::new();
    if !revisions.is_empty() {
        for i in 0..PER_ANSWER.min(MUTATIONS - attempted) {
            let r = splitmix((member << 32) ^ ((answers as u64) << 8) ^ i as u64);
            let task = format!("task-{}", 1 + r % TASKS as u64);
            let action = ["claim", "complete", "release", "reopen"][((r >> 16) % 4) as usize];
            let revision = revisions.get(&task).copied().unwrap_or(1);
            calls.push((
                format!("call_{identity}_{answers}_{i}"),
                "team_task_update",
                json!({"task_id": task, "expected_revision": revision, "action": action}),
            ));
        }
    }
    calls.push((
        format!("call_{identity}_{answers}_list"),
        "team_task_list",
        json!({"limit": 100}),
    ));
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
        .collect();
    Some(FakeResponse::json(chunks::tool_call_completion(&calls)))
}

/// Issue 14, concurrency across processes: [`MEMBERS`] teammates spread over three processes
/// (the Lead's and two `troupe worker`s with three slots each) attempt [`MUTATIONS`] random
/// task mutations each through the Team tools — claim, complete, release, reopen, with the
/// revision their last listing showed — on [`TASKS`] shared tasks; the workers' calls reach
/// the Lead's serializer over NATS. Afterwards, as the in-process test checks
/// (runtime `concurrent_task_mutations_are_serializable`): every task's revisions in the Lead
/// log are contiguous from 1; each successful update's result is exactly the Lead log's task
/// at that revision, and no two successes share one (no lost update: the successes are the
/// revisions); an owner is replaced only by nobody (never two owners); the board's owners
/// match the statuses; `team verify` passes.
#[test]
fn concurrent_task_mutations_across_three_processes_are_serializable() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let model = troupe_test_support::FakeOpenAi::start().unwrap();
    model.respond_with(board_model);
    let started = Instant::now();
    let start_slots = |name: &str| {
        let log = s.path(&format!("{name}.stderr"));
        let mut cmd = bin();
        cmd.env("TROUPE_LEASE_TTL", format!("{}s", s.lease_ttl.as_secs()))
            .arg("--home")
            .arg(s.path(&format!("home-{name}")))
            .arg("--store")
            .arg(s.url())
            .args(["worker", "--slots", "3", "--name", name, "--workspace"])
            .arg(&workspace)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
        let worker = Running(cmd.spawn().unwrap());
        wait_until("the worker serves", || {
            std::fs::read_to_string(&log).unwrap().contains("serving")
        });
        (worker, log)
    };
    let (_wa, wa_log) = start_slots("wa");
    let (_wb, wb_log) = start_slots("wb");
    let run_err = s.path("run.stderr");
    let mut run = Running(
        s.troupe(&["run", "--team", "--placement", "workers", "--workspace"])
            .arg(&workspace)
            .args([
                "--model",
                "compatible:board",
                "--base-url",
                &model.base_url(),
            ])
            .arg("fight over the board")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&run_err).unwrap()))
            .spawn()
            .unwrap(),
    );
    let lead = lead_of_run(&run_err);
    let status = wait_exit_or_say(
        &s,
        &mut run,
        &[&run_err, &wa_log, &wb_log],
        &lead,
        RUN_DEADLINE,
    );
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert!(status.success(), "{stderr}");
    eprintln!(
        "{MEMBERS} teammates x {MUTATIONS} mutations in three processes: {:.1} s, {} model calls",
        started.elapsed().as_secs_f64(),
        model.responded()
    );
    // Spread over three processes.
    let hosted =
        std::fs::read_to_string(&wa_log).unwrap() + &std::fs::read_to_string(&wb_log).unwrap();
    let on_workers = hosted.matches(": hosting ").count();
    assert!(
        hosted.contains("troupe worker wa: hosting")
            && hosted.contains("troupe worker wb: hosting"),
        "{hosted}"
    );
    assert!(
        on_workers < MEMBERS,
        "some teammates ran in the Lead's process: {hosted}"
    );
    s.ok(&["team", "verify", &lead]);
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let names: BTreeMap<String, String> = shown["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_owned(),
                m["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // The serial order: the Lead log's task snapshots, by task, in log order.
    let mut serial: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for event in s.log(&lead) {
        if event["type"] == "team/task" {
            let task = event["data"]["task"].clone();
            serial
                .entry(task["id"].as_str().unwrap().to_owned())
                .or_default()
                .push(task);
        }
    }
    assert_eq!(serial.len(), TASKS, "{serial:?}");
    for (id, versions) in &serial {
        for (i, version) in versions.iter().enumerate() {
            assert_eq!(
                version["revision"],
                json!(i + 1),
                "{id}'s revisions are contiguous"
            );
            if i > 0 {
                let (before, after) = (&versions[i - 1]["ownerId"], &version["ownerId"]);
                assert!(
                    before.is_null() || after.is_null() || before == after,
                    "{id} went from owner {before} to {after} at revision {}",
                    i + 1
                );
            }
        }
    }
    // Every success is one revision of the serial order, seen exactly as the log has it.
    let mut successes: BTreeMap<(String, u64), String> = BTreeMap::new();
    let mut attempts = 0;
    for member in names.keys() {
        for event in s.log(member) {
            if event["type"] != "tool/result" || event["data"]["name"] != "team_task_update" {
                continue;
            }
            attempts += 1;
            if event["data"]["isError"] == true {
                continue;
            }
            let view: Value =
                serde_json::from_str(event["data"]["content"].as_str().unwrap()).unwrap();
            let key = (
                view["id"].as_str().unwrap().to_owned(),
                view["revision"].as_u64().unwrap(),
            );
            let logged = &serial[&key.0][usize::try_from(key.1).unwrap() - 1];
            assert_eq!(view["status"], logged["status"], "{view} vs {logged}");
            let owner = logged["ownerId"].as_str().map(|id| names[id].clone());
            assert_eq!(
                view["ownerName"].as_str().map(str::to_owned),
                owner,
                "{view} vs {logged}"
            );
            let who = names[member].clone();
            if let Some(other) = successes.insert(key.clone(), who.clone()) {
                panic!("{key:?} was a success of both {other} and {who}");
            }
        }
    }
    assert_eq!(
        attempts,
        MEMBERS * MUTATIONS,
        "every attempt has its result"
    );
    let revisions: usize = serial.values().map(|v| v.len() - 1).sum();
    assert_eq!(successes.len(), revisions, "no lost or phantom update");
    assert!(
        successes.len() > MEMBERS * MUTATIONS / 20,
        "the random walk made progress ({} of {attempts})",
        successes.len()
    );
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

/// The session id `troupe run` printed first on its stderr, once it did.
fn lead_of_run(run_err: &Path) -> String {
    let mut lead = String::new();
    wait_until("the run named its session", || {
        if let Ok(err) = std::fs::read_to_string(run_err)
            && let Some(line) = err.lines().find(|l| l.starts_with("session "))
        {
            lead = line.split_whitespace().nth(1).unwrap().to_owned();
            return true;
        }
        false
    });
    lead
}
