//! The Team's budget across processes (issue 14, with issue 17's ledger): a teammate hosted by
//! a `troupe worker` is held to the Team's whole spending — the Lead's usage, read from the
//! logs when the worker hosts it, and its own — and the Lead's process counts what its
//! teammates on workers spend (`troupe.usage.<lead>`), so its own next model call is refused
//! once the Team's budget is spent.

use super::killpoints::{call, member_id};
use super::*;

fn step(step: Value, prompt: u64, completion: u64) -> Value {
    let mut step = step;
    step["usage"] =
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": 0});
    step
}

/// The last `turn/end` of a log: whether the budget stopped it.
fn stopped_by_budget(log: &[Value]) -> bool {
    log.iter()
        .rfind(|e| e["type"] == "turn/end")
        .is_some_and(|end| {
            end["data"]["reason"]["kind"] == "aborted"
                && end["data"]["reason"]["reason"]["code"] == "TEAM_BUDGET_EXCEEDED"
        })
}

fn answers(log: &[Value]) -> usize {
    log.iter()
        .filter(|e| e["type"] == "assistant/message")
        .count()
}

/// Budget 250 tokens. The Lead spends 200 (two calls of 100) and waits for alpha; alpha, on
/// the worker, spends 65 (5, then 60): the worker refuses alpha's third call — alpha alone is
/// far below the budget, the Team (the Lead's 200, which the worker read from the logs and
/// heard over NATS) is past it — and the Lead's process, told of alpha's 65 over NATS,
/// refuses the Lead's third call. No model is asked past the budget in either process;
/// `team verify` passes.
#[test]
fn a_teammate_on_a_worker_and_its_lead_are_held_to_the_teams_whole_budget() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                step(call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})), 100, 0),
                step(call("wait_agent", json!({"timeout_ms": 120000})), 100, 0),
                step(json!({"text": "lead done"}), 10, 0),
            ],
            "alpha": [
                step(call("bash", json!({"command": "while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})), 5, 0),
                step(call("bash", json!({"command": "echo two"})), 40, 20),
                step(call("team_task_create", json!({"subject": "past the budget", "description": "d"})), 10, 0),
                step(json!({"text": "alpha done"}), 10, 0),
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (_w1, w1_log) = start_worker(&s, "w1", &workspace);
    let run_err = s.path("run.stderr");
    let mut run = Running(
        s.troupe(&[
            "run",
            "--team",
            "--placement",
            "workers",
            "--budget-tokens",
            "250",
            "--workspace",
        ])
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("go")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&run_err).unwrap()))
        .spawn()
        .unwrap(),
    );
    // alpha goes on only once the Lead has made both its calls (it waits for alpha now).
    let start = Instant::now();
    let lead = loop {
        assert!(start.elapsed() < DEADLINE, "the Lead never waited");
        std::thread::sleep(Duration::from_millis(100));
        let err = std::fs::read_to_string(&run_err).unwrap();
        let Some(line) = err.lines().find(|l| l.starts_with("session ")) else {
            continue;
        };
        let lead = line.split_whitespace().nth(1).unwrap().to_owned();
        if answers(&s.log(&lead)) == 2 {
            break lead;
        }
    };
    std::fs::write(workspace.join("go"), "").unwrap();
    let status = wait_exit(&mut run);
    let err = std::fs::read_to_string(&run_err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("the Team's token budget is spent: 265 of 250 tokens"),
        "{err}"
    );
    assert!(
        !err.contains("enforced in this process only"),
        "no warning any more: {err}"
    );
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let alpha = member_id(&s, &lead, "alpha");
    assert!(
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .contains(&format!("hosting alpha ({alpha})")),
        "alpha ran on w1"
    );
    // alpha: two answers, then its third call refused on the worker.
    let alpha_log = s.log(&alpha);
    assert_eq!(answers(&alpha_log), 2, "{alpha_log:?}");
    assert!(stopped_by_budget(&alpha_log), "{alpha_log:?}");
    assert!(shown["tasks"].as_array().unwrap().is_empty(), "{shown}");
    // The Lead: two answers, its third call refused by its own process, which knew of
    // alpha's 65 tokens only from the worker's reports.
    let lead_log = s.log(&lead);
    assert_eq!(answers(&lead_log), 2, "{err}");
    assert!(stopped_by_budget(&lead_log), "{err}");
    s.ok(&["team", "verify", &lead]);
}

/// The fresh-user trial: `troupe demo --placement workers` stopped by the Team's budget
/// reports the stop as the same demo on the files does — exit 1 and the same last line up to
/// the numbers, ids, home and store: `troupe: TEAM_BUDGET_EXCEEDED: <the budget's message>;
/// … troupe resume <id> … --budget-tokens N` — not `DEMO_TESTS_FAILED` (60 000 tokens: the
/// refusal hits a teammate on the worker after the Lead's last answer) nor success (90 000:
/// the project's tests pass, but beta's last turn was refused on the worker and task-3 was
/// never checked).
#[test]
fn a_budget_stop_of_the_demo_on_workers_is_reported_as_on_the_files() {
    let Some(s) = Setup::single() else { return };
    let last_line = |out: &Output| {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        (err.lines().last().unwrap().to_owned(), err)
    };
    // The line with the session id, the home and store flags and every digit left out.
    let shape = |line: &str, id: &str, home: &str| {
        line.replace(id, "<id>")
            .replace(home, " <home>")
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .collect::<String>()
    };
    let files = s.path("files");
    let out = on_files(
        &files,
        &[
            "demo",
            "--budget-tokens",
            "60000",
            "--workspace",
            s.path("on-files").to_str().unwrap(),
        ],
    );
    let (line, err) = last_line(&out);
    assert!(
        line.starts_with("troupe: TEAM_BUDGET_EXCEEDED: the Team's token budget is spent:"),
        "{err}"
    );
    let on_files_shape = shape(
        &line,
        &session_of(&err),
        &format!(" --home {}", files.display()),
    );
    for budget in ["60000", "90000"] {
        let workspace = s.path(&format!("placed-{budget}"));
        std::fs::create_dir_all(&workspace).unwrap();
        let (_worker, _) =
            start_worker_with(&s, &format!("w{budget}"), &workspace, &["--slots", "2"]);
        let out = s.run(&[
            "demo",
            "--placement",
            "workers",
            "--budget-tokens",
            budget,
            "--workspace",
            workspace.to_str().unwrap(),
        ]);
        let (line, err) = last_line(&out);
        let lead = session_of(&err);
        assert!(!err.contains("DEMO_TESTS_FAILED"), "{err}");
        assert!(!err.contains("demo done"), "{err}");
        assert!(
            line.contains(&format!(
                "of {budget} tokens used; new model calls were refused"
            )) && line.contains(&format!("with a higher budget: troupe resume {lead} ")),
            "{err}"
        );
        let home = format!(" --home {} --store {}", s.home().display(), s.url());
        assert_eq!(shape(&line, &lead, &home), on_files_shape, "{err}");
    }
}
