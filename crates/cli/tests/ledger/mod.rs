//! The cost ledger and the Team's budget (issue 17) through the real binary: the scripted
//! model's per-step `usage` and the loopback fake OpenAI server's `usage` folded into the
//! ledger of `troupe team show --json`, the run summary and `list_agents`; `[prices]` (and a
//! price for an unknown model, a warning); a token budget that stops a run, and a resume with
//! a higher one that finishes it; bad budgets.

use serde_json::{Value, json};
use troupe_test_support::fake_openai::chunks;
use troupe_test_support::{FakeOpenAi, FakeResponse};

use super::assert_bad_input;
use super::run::{Setup, session_id, stderr, stdout};

fn step(step: Value, prompt: u64, completion: u64, cached: u64) -> Value {
    let mut step = step;
    step["usage"] =
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached});
    step
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

fn team_show(s: &Setup, id: &str) -> Value {
    let out = s
        .troupe()
        .args(["team", "show", id, "--json"])
        .assert()
        .success();
    serde_json::from_str(&stdout(&out)).unwrap()
}

/// (model calls, prompt, completion, cached) of a ledger line.
fn counts(line: &Value) -> (u64, u64, u64, u64) {
    let n = |key: &str| {
        line[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {line}"))
    };
    (
        n("modelCalls"),
        n("promptTokens"),
        n("completionTokens"),
        n("cachedTokens"),
    )
}

/// The recorded usage of a session's own answers: the sums (calls, prompt, completion,
/// cached), read straight from its log.
fn recorded(s: &Setup, id: &str) -> (u64, u64, u64, u64) {
    let mut sums = (0, 0, 0, 0);
    for event in s.log(id) {
        if event["type"] != "assistant/message" {
            continue;
        }
        let usage = &event["data"]["usage"];
        sums.0 += 1;
        sums.1 += usage["prompt_tokens"].as_u64().unwrap_or(0);
        sums.2 += usage["completion_tokens"].as_u64().unwrap_or(0);
        sums.3 += usage["cached_tokens"].as_u64().unwrap_or(0);
    }
    sums
}

#[test]
fn scripted_usage_is_the_ledger_of_team_show_the_summary_and_list_agents() {
    let s = Setup::new();
    let script = s.script_agents(
        "ledger.json",
        json!({
            "lead": [
                step(call("spawn_teammate", json!({"name": "alpha", "description": "Says hi", "prompt": "Say hi."})), 100, 10, 40),
                step(call("wait_agent", json!({"timeout_ms": 10000})), 120, 5, 0),
                step(call("list_agents", json!({})), 130, 5, 60),
                step(json!({"text": "done"}), 140, 20, 0),
            ],
            "alpha": [step(json!({"text": "hi"}), 50, 7, 0)],
        }),
    );
    let out = s
        .run(&[
            "--team",
            "--json",
            "--model",
            &format!("script:{}", script.display()),
            "go",
        ])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let done: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    let show = team_show(&s, &id);
    let ledger = &show["ledger"];
    // The summary's `done` line carries the same ledger as `team show`.
    assert_eq!(&done["team"]["ledger"], ledger, "{done}");
    let members = ledger["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{ledger}");
    assert_eq!(members[0]["name"], "lead");
    assert_eq!(members[1]["name"], "alpha");
    // Each member's line is the sum of the usage its log recorded, and the Team's the sum of
    // theirs.
    let alpha = members[1]["id"].as_str().unwrap().to_owned();
    assert_eq!(counts(&members[0]), recorded(&s, &id));
    assert_eq!(counts(&members[1]), recorded(&s, &alpha));
    assert_eq!(counts(&members[0]), (4, 490, 40, 100));
    assert_eq!(counts(&members[1]), (1, 50, 7, 0));
    assert_eq!(counts(ledger), (5, 540, 47, 100));
    assert_eq!(ledger["tokens"], 587);
    // A scripted model has no price unless configured.
    assert_eq!(ledger["costUsd"], Value::Null);
    assert_eq!(ledger["unpricedModels"], json!(["script"]));
    // `list_agents` (the Lead's third call) shows each member's usage so far: the Lead's
    // first two answers and the third one being answered, alpha's one.
    let listed = s
        .log(&id)
        .into_iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["name"] == "list_agents")
        .unwrap();
    let rows: Value = serde_json::from_str(listed["data"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        rows[0]["usage"],
        json!({"modelCalls": 3, "promptTokens": 350, "completionTokens": 20, "cachedTokens": 100})
    );
    assert_eq!(
        rows[1]["usage"],
        json!({"modelCalls": 1, "promptTokens": 50, "completionTokens": 7, "cachedTokens": 0})
    );
    // The table's ledger section.
    let out = s.troupe().args(["team", "show", &id]).assert().success();
    let table = stdout(&out);
    assert!(table.contains("ledger (prices as of"), "{table}");
    let team_row = table.lines().find(|l| l.contains("(team)")).unwrap();
    let cells: Vec<&str> = team_row.split_whitespace().collect();
    assert_eq!(
        cells,
        ["(team)", "5", "540", "100", "47", "587", "-"],
        "{table}"
    );
}

#[test]
fn configured_prices_cost_the_ledger_and_a_price_for_an_unknown_model_warns() {
    let s = Setup::new();
    std::fs::create_dir_all(&s.home).unwrap();
    // USD per million tokens: 1 $ per prompt token not cached, 0.5 $ per cached one, 2 $ per
    // completion token.
    std::fs::write(
        s.home.join("config.toml"),
        "[prices]\n\"script\" = {input = 1000000, output = 2000000, cached = 500000}\n\
         \"gpt-99-turbo\" = {input = 1, output = 2}\n",
    )
    .unwrap();
    let script = s.script_agents(
        "priced.json",
        json!({"lead": [step(json!({"text": "done"}), 10, 3, 4)]}),
    );
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{}", script.display()),
            "go",
        ])
        .assert()
        .success();
    let err = stderr(&out);
    let warning = err
        .lines()
        .find(|l| l.contains("gpt-99-turbo"))
        .unwrap_or_else(|| panic!("a warning naming the unknown model: {err}"));
    assert!(warning.starts_with("troupe: warning: "), "{warning}");
    assert!(warning.contains("config.toml:3:"), "{warning}");
    assert!(
        warning.contains("no built-in price has that name (the price is kept"),
        "one sentence: {warning}"
    );
    assert!(!err.contains("\"script\": no model"), "{err}");
    let id = session_id(&err);
    let ledger = team_show(&s, &id)["ledger"].clone();
    // 6 fresh prompt tokens × 1 $ + 4 cached × 0.5 $ + 3 completion × 2 $.
    let cost = ledger["costUsd"].as_f64().unwrap();
    assert!((cost - 14.0).abs() < 1e-9, "{ledger}");
    assert_eq!(ledger["members"][0]["costUsd"], ledger["costUsd"]);
    assert_eq!(ledger["unpricedModels"], json!([]));
    assert!(err.contains("cost $14.0000"), "{err}");
}

/// A price that is not a table is one line naming the file, the place and the shape a price
/// takes (serde's own wording named a Rust type); nothing runs.
#[test]
fn a_price_that_is_not_a_table_names_the_shape_of_a_price() {
    let s = Setup::new();
    std::fs::create_dir_all(&s.home).unwrap();
    std::fs::write(s.home.join("config.toml"), "[prices]\n\"x\" = 5\n").unwrap();
    let out = s.troupe().args(["sessions"]).assert().code(2);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("config.toml:2:"), "{err}");
    assert!(
        err.contains("expected a price table such as { input = 0.27, output = 1.10"),
        "{err}"
    );
    assert!(!err.contains("struct"), "{err}");
}

#[test]
fn a_token_budget_stops_the_run_and_a_resume_with_a_higher_budget_finishes() {
    let s = Setup::new();
    let bash = |n: &str| call("bash", json!({"command": format!("echo {n}")}));
    let script = s.script_agents(
        "budget.json",
        json!({"lead": [
            step(bash("one"), 90, 10, 0),
            step(bash("two"), 90, 10, 0),
            step(bash("three"), 90, 10, 0),
            step(json!({"text": "all done"}), 90, 10, 0),
        ]}),
    );
    let model = format!("script:{}", script.display());
    // 250 tokens: the third call starts at 200 (allowed) and ends at 300; the fourth is
    // refused.
    let out = s
        .run(&[
            "--team",
            "--json",
            "--budget-tokens",
            "250",
            "--model",
            &model,
            "go",
        ])
        .assert()
        .code(1);
    let err = stderr(&out);
    let id = session_id(&err);
    let done: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "TEAM_BUDGET_EXCEEDED", "{done}");
    assert!(
        done["error"]["message"]
            .as_str()
            .unwrap()
            .contains("token budget is spent: 300 of 250 tokens"),
        "{done}"
    );
    assert!(err.contains("troupe resume"), "{err}");
    let log = s.log(&id);
    // The refused call was never made: three answers, and the turn ended as stopped by the
    // budget.
    assert_eq!(
        log.iter()
            .filter(|e| e["type"] == "assistant/message")
            .count(),
        3
    );
    let end = log.iter().rfind(|e| e["type"] == "turn/end").unwrap();
    assert_eq!(end["data"]["reason"]["kind"], "aborted", "{end}");
    assert_eq!(end["data"]["reason"]["reason"]["kind"], "budget", "{end}");
    assert_eq!(
        end["data"]["reason"]["reason"]["code"],
        "TEAM_BUDGET_EXCEEDED"
    );
    let notices = |log: &[Value]| {
        log.iter()
            .filter(|e| e["type"] == "agent/inbox/spliced")
            .flat_map(|e| {
                e["data"]["inserted"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|m| m["source"]["kind"] == "budget")
            .count()
    };
    // At 200 of 250 (80 %) the Lead got its one notice.
    assert_eq!(notices(&log), 1);
    assert_eq!(team_show(&s, &id)["ledger"]["tokens"], 300);
    // A resume with a budget the spending is already past 80 % of: the notice is not given
    // again (the log holds it), and the Lead's turn is continued and finishes.
    let out = s
        .troupe()
        .args(["resume", &id, "--budget-tokens", "350"])
        .assert()
        .success();
    assert_eq!(stdout(&out).trim(), "all done");
    let err = stderr(&out);
    assert!(err.contains("the Team's budget stopped it"), "{err}");
    assert!(err.contains("budget: 400 of 350 tokens"), "{err}");
    assert_eq!(notices(&s.log(&id)), 1);
    assert_eq!(team_show(&s, &id)["ledger"]["modelCalls"], 4);
}

/// A resume given no more budget than was spent (the same budget, or less) makes no model
/// call and says why: exit 1, `TEAM_BUDGET_EXCEEDED` with the hint to raise it — not exit 0
/// as if the work were done. The continuation it queued is queued once (no second copy by a
/// second refused resume), and a resume with a higher budget then finishes the turn.
#[test]
fn a_resume_with_no_budget_left_is_refused_and_queues_the_continuation_once() {
    let s = Setup::new();
    let bash = |n: &str| call("bash", json!({"command": format!("echo {n}")}));
    let script = s.script_agents(
        "spent.json",
        json!({"lead": [
            step(bash("one"), 90, 10, 0),
            step(bash("two"), 90, 10, 0),
            step(bash("three"), 90, 10, 0),
            step(json!({"text": "all done"}), 90, 10, 0),
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--budget-tokens", "250", "--model", &model, "go"])
        .assert()
        .code(1);
    let id = session_id(&stderr(&out));
    let answers = |log: &[Value]| {
        log.iter()
            .filter(|e| e["type"] == "assistant/message")
            .count()
    };
    let continuations = |log: &[Value]| {
        log.iter()
            .filter(|e| e["type"] == "agent/inbox/spliced")
            .flat_map(|e| {
                e["data"]["inserted"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|m| m["source"]["kind"] == "resume")
            .count()
    };
    assert_eq!(answers(&s.log(&id)), 3);
    for budget in ["250", "300", "100"] {
        let out = s
            .troupe()
            .args(["resume", &id, "--budget-tokens", budget])
            .assert()
            .code(1);
        let err = stderr(&out);
        assert!(err.contains("TEAM_BUDGET_EXCEEDED"), "{err}");
        assert!(
            err.contains(&format!("token budget is spent: 300 of {budget} tokens")),
            "{err}"
        );
        // The hint's budget is above what was spent: twice the larger of budget and spent.
        assert!(err.contains("--budget-tokens 600"), "{err}");
        assert!(err.contains("--budget-tokens"), "{err}");
        assert!(!err.contains("continue: troupe resume"), "{err}");
        let log = s.log(&id);
        assert_eq!(answers(&log), 3, "no model call with budget {budget}");
        assert!(
            log.iter().filter(|e| e["type"] == "turn/start").count() == 1,
            "no turn opened with budget {budget}"
        );
        assert_eq!(continuations(&log), 1, "queued once");
    }
    let out = s
        .troupe()
        .args(["resume", &id, "--budget-tokens", "1000"])
        .assert()
        .success();
    assert_eq!(stdout(&out).trim(), "all done");
    assert_eq!(answers(&s.log(&id)), 4);
}

#[test]
fn zero_negative_and_misplaced_budgets_are_bad_input() {
    let s = Setup::new();
    let script = s.script_agents("b.json", json!({"lead": [{"text": "x"}]}));
    let model = format!("script:{}", script.display());
    let ws = s.workspace.display().to_string();
    for (flag, value, message) in [
        ("--budget-tokens", "0", "0 is not a budget"),
        ("--budget-tokens", "-1", "-1 is not a budget"),
        ("--budget-tokens", "many", "not a whole number of tokens"),
        (
            "--budget-tokens",
            "99999999999999999999",
            "99999999999999999999 is not a budget: at most 18446744073709551615 tokens",
        ),
        ("--budget-usd", "0", "0 is not a budget"),
        ("--budget-usd", "-1.5", "-1.5 is not a budget"),
        ("--budget-usd", "inf", "inf is not a budget"),
    ] {
        let args = [
            "run",
            "--team",
            "--workspace",
            &ws,
            "--model",
            &model,
            flag,
            value,
            "go",
        ];
        let out = s.troupe().args(args).assert().code(2).stdout("");
        let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
        assert!(err.contains(message), "{flag} {value}: {err}");
    }
    assert_bad_input(
        &s.home,
        &[
            "run",
            "--workspace",
            &ws,
            "--model",
            &model,
            "--budget-tokens",
            "10",
            "go",
        ],
        "--budget-tokens applies to Team runs only: add --team",
    );
    std::fs::create_dir_all(&s.home).unwrap();
    std::fs::write(s.home.join("config.toml"), "[team]\nbudget_tokens = 0\n").unwrap();
    assert_bad_input(
        &s.home,
        &["run", "--team", "--workspace", &ws, "--model", &model, "go"],
        "config.toml:2:17: team.budget_tokens = 0",
    );
    std::fs::write(s.home.join("config.toml"), "[team]\nbudget_usd = -2.0\n").unwrap();
    assert_bad_input(
        &s.home,
        &["run", "--team", "--workspace", &ws, "--model", &model, "go"],
        "team.budget_usd = -2",
    );
}

#[test]
fn usage_from_the_fake_server_is_the_ledger_with_cached_tokens_and_prices() {
    let s = Setup::new();
    std::fs::create_dir_all(&s.home).unwrap();
    std::fs::write(
        s.home.join("config.toml"),
        "[prices]\n\"test-model\" = {input = 2.0, output = 8.0, cached = 0.5}\n",
    )
    .unwrap();
    let server = FakeOpenAi::start().unwrap();
    // OpenAI's shape of cached tokens (`prompt_tokens_details`), then DeepSeek's
    // (`prompt_cache_hit_tokens`).
    let usage_chunk = |usage: Value| {
        let mut chunk = chunks::usage(0, 0);
        chunk["usage"] = usage;
        chunk
    };
    let mut first = chunks::tool_call_answer(&[("call_list", "list_agents", json!({}))], 1);
    first.pop();
    first.push(usage_chunk(
        json!({"prompt_tokens": 1000, "completion_tokens": 20,
        "total_tokens": 1020, "prompt_tokens_details": {"cached_tokens": 600}}),
    ));
    server.push(FakeResponse::sse(first));
    let mut second = chunks::text_answer("listed");
    second.pop();
    second.push(usage_chunk(
        json!({"prompt_tokens": 1100, "completion_tokens": 5,
        "total_tokens": 1105, "prompt_cache_hit_tokens": 1000, "prompt_cache_miss_tokens": 100}),
    ));
    server.push(FakeResponse::sse(second));
    let out = s
        .run(&[
            "--team",
            "--model",
            "compatible:test-model",
            "--base-url",
            &server.base_url(),
            "list the team",
        ])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let ledger = team_show(&s, &id)["ledger"].clone();
    assert_eq!(counts(&ledger), (2, 2100, 25, 1600), "{ledger}");
    assert_eq!(counts(&ledger), recorded(&s, &id));
    // (500 fresh × 2 + 1600 cached × 0.5 + 25 × 8) / 1e6 USD.
    let cost = ledger["costUsd"].as_f64().unwrap();
    assert!(
        (cost - (1000.0 + 800.0 + 200.0) / 1e6).abs() < 1e-12,
        "{ledger}"
    );
    assert_eq!(
        ledger["members"][0]["models"]["test-model"]["modelCalls"],
        2
    );
}

/// A budget spent while a teammate works: whichever member's call comes first after the
/// limit is refused (the interleaving decides which), every running turn ends, and the resume
/// with a higher budget continues both the Lead's turn and the teammate's, so every scripted
/// step is taken exactly once in the end.
#[test]
fn a_budget_spent_by_a_teammate_stops_the_team_and_the_resume_continues_it() {
    let s = Setup::new();
    let bash = |n: &str| call("bash", json!({"command": format!("echo {n}")}));
    let script = s.script_agents(
        "team-budget.json",
        json!({
            "lead": [
                step(call("spawn_teammate", json!({"name": "alpha", "description": "Echoes", "prompt": "Echo three times."})), 5, 5, 0),
                step(call("wait_agent", json!({"timeout_ms": 10000})), 5, 5, 0),
                step(call("wait_agent", json!({"timeout_ms": 10000})), 5, 5, 0),
                step(json!({"text": "the team is done"}), 5, 5, 0),
            ],
            "alpha": [
                step(bash("one"), 90, 10, 0),
                step(bash("two"), 90, 10, 0),
                step(bash("three"), 90, 10, 0),
                step(json!({"text": "alpha echoed"}), 90, 10, 0),
            ],
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--budget-tokens", "250", "--model", &model, "go"])
        .assert()
        .code(1);
    let err = stderr(&out);
    assert!(err.contains("TEAM_BUDGET_EXCEEDED"), "{err}");
    let id = session_id(&err);
    let stopped = team_show(&s, &id)["ledger"].clone();
    let tokens = stopped["tokens"].as_u64().unwrap();
    assert!((250..450).contains(&tokens), "{stopped}");
    assert!(stopped["modelCalls"].as_u64().unwrap() < 8, "{stopped}");
    let out = s
        .troupe()
        .args(["resume", &id, "--budget-tokens", "10000"])
        .assert()
        .success();
    let err = stderr(&out);
    let ledger = team_show(&s, &id)["ledger"].clone();
    // Every step of both scripts, once: 4 + 4 calls, 40 + 400 tokens.
    assert_eq!(ledger["modelCalls"], 8, "{ledger}\n{err}");
    assert_eq!(ledger["tokens"], 440, "{ledger}");
    let alpha = ledger["members"][1]["id"].as_str().unwrap().to_owned();
    let last = s
        .log(&alpha)
        .into_iter()
        .rfind(|e| e["type"] == "assistant/message")
        .unwrap();
    assert_eq!(last["data"]["message"]["content"], "alpha echoed", "{last}");
}

/// The notice is decided from the Lead's log: a log whose spending is already past 80 % of
/// the budget and holds no notice — what a stop between the threshold and the notice's append
/// leaves, or a session run without a budget until now — gets the notice from the resume,
/// exactly once.
#[test]
fn a_resume_past_the_notice_threshold_without_a_notice_in_the_log_gives_it_once() {
    let s = Setup::new();
    let bash = |n: &str| call("bash", json!({"command": format!("echo {n}")}));
    let script = s.script_agents(
        "late-notice.json",
        json!({"lead": [
            step(bash("one"), 90, 10, 0),
            step(bash("two"), 90, 10, 0),
            step(bash("three"), 90, 10, 0),
            step(json!({"text": "first"}), 90, 10, 0),
            step(json!({"text": "second"}), 10, 0, 0),
        ]}),
    );
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{}", script.display()),
            "go",
        ])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let notices = |s: &Setup| -> Vec<String> {
        s.log(&id)
            .iter()
            .filter(|e| e["type"] == "agent/inbox/spliced")
            .flat_map(|e| {
                e["data"]["inserted"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|m| m["source"]["kind"] == "budget")
            .map(|m| m["content"][0]["text"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(notices(&s).is_empty());
    let out = s
        .troupe()
        .args(["resume", &id, "--budget-tokens", "450", "again"])
        .assert()
        .success();
    assert_eq!(stdout(&out).trim(), "second");
    let given = notices(&s);
    assert_eq!(given.len(), 1, "{given:?}");
    assert!(
        given[0].contains("the Team has used 400 of its 450 token budget (88%)"),
        "{given:?}"
    );
}

/// `--budget-usd` with a model that has no price warns on one line led by `troupe: warning:`,
/// as every warning on stderr is (the fresh-user trial found it without the prefix).
#[test]
fn a_usd_budget_with_an_unpriced_model_warns_with_the_troupe_prefix() {
    let s = Setup::new();
    let script = s.script_agents("unpriced.json", json!({"lead": [{"text": "done"}]}));
    let out = s
        .run(&[
            "--team",
            "--budget-usd",
            "1",
            "--model",
            &format!("script:{}", script.display()),
            "go",
        ])
        .assert()
        .success();
    let err = stderr(&out);
    let warning = err
        .lines()
        .find(|l| l.contains("--budget-usd counts priced usage only"))
        .unwrap_or_else(|| panic!("no warning: {err}"));
    assert!(
        warning.starts_with(
            "troupe: warning: --budget-usd counts priced usage only, and model \"script\" has no \
             price"
        ),
        "{warning}"
    );
}
