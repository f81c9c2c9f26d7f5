//! Team rules across processes, through the real binary (issue 14 item 1): the Lead's
//! `interrupt_agent` of a teammate a `troupe worker` hosts stops the teammate's turn exactly
//! as a local interrupt does (REFERENCE c.13) — checked against the same script run with the
//! teammate in the Lead's own process.

use super::*;

/// The script of both runs: the Lead creates alpha, waits (its own bash) for the test's `go`
/// (written once alpha's long bash has started and the panel showed alpha's host), lists the
/// members, interrupts alpha and answers; alpha's first tool call is a bash that
/// would run for ten minutes (within the bash tool's 600 000 ms maximum) and its second
/// step, an answer, must never be asked for.
fn interrupt_script(path: &Path) {
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    std::fs::write(
        path,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("bash", json!({"command": "while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 120000})),
                call("list_agents", json!({})),
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
}

/// What one run left: the Lead's id, alpha's id and log, the Lead's `interrupt_agent` result
/// (`tool/result` data) and its `list_agents` rows before it.
struct Interrupted {
    lead: String,
    alpha: String,
    alpha_log: Vec<Value>,
    result: Value,
    listed: Value,
}

/// `GET PATH` of the panel at `url` (`http://ADDR/?token=…`): its JSON body (`None` when it is
/// not a 200).
fn panel_get(url: &str, path: &str) -> Option<Value> {
    let addr = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    if !response.starts_with("HTTP/1.1 200") {
        return None;
    }
    let (_, body) = response.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

/// Waits until the panel at `web` shows alpha of the Team `lead` with host `expected` (its
/// `MemberRow::host`) and the Lead's row `local`; fails after [`DEADLINE`] naming the last
/// view.
fn wait_for_panel_host(web: &str, lead: &str, expected: &str) {
    let start = Instant::now();
    let mut last = Value::Null;
    loop {
        if let Some(view) = panel_get(web, &format!("/api/sessions/{lead}/team")) {
            let host = |name: &str| {
                view["members"]
                    .as_array()
                    .and_then(|rows| rows.iter().find(|m| m["name"] == name))
                    .and_then(|m| m["host"].as_str())
                    .map(str::to_owned)
            };
            if host("alpha").as_deref() == Some(expected)
                && host("lead").as_deref() == Some("local")
            {
                return;
            }
            last = view;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the panel never showed alpha on {expected}: {last}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs the interrupt script in `workspace` (`--placement workers` when `placement` says so)
/// until it exits 0; while alpha's bash runs, the panel at `web` must show alpha's host
/// `alpha_host`.
fn run_interrupt(
    s: &Setup,
    workspace: &Path,
    placement: &str,
    web: &str,
    alpha_host: &str,
) -> Interrupted {
    let script = workspace.with_extension("json");
    interrupt_script(&script);
    let err = workspace.with_extension("stderr");
    let mut run = Running(
        s.troupe(&["run", "--team", "--placement", placement, "--workspace"])
            .arg(workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("go")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while !workspace.join("started").exists() {
        assert!(
            start.elapsed() < DEADLINE,
            "{placement}: alpha's bash never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let running = session_of(&std::fs::read_to_string(&err).unwrap());
    wait_for_panel_host(web, &running, alpha_host);
    std::fs::write(workspace.join("go"), "").unwrap();
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(status.success(), "{placement}: {stderr}");
    let lead = session_of(&stderr);
    let alpha = super::killpoints::member_id(s, &lead, "alpha");
    let lead_log = s.log(&lead);
    let result_of = |tool: &str| {
        lead_log
            .iter()
            .find(|e| e["type"] == "tool/result" && e["data"]["name"] == tool)
            .unwrap_or_else(|| panic!("{placement}: the Lead has no {tool} result"))["data"]
            .clone()
    };
    let result = result_of("interrupt_agent");
    let listed =
        serde_json::from_str(result_of("list_agents")["content"].as_str().unwrap()).unwrap();
    let alpha_log = s.log(&alpha);
    Interrupted {
        lead,
        alpha,
        alpha_log,
        result,
        listed,
    }
}

/// alpha's events from its bash call on, as (type, data without times, ids and the process
/// group's numbers): the interrupted turn as the log tells it.
fn interrupted_turn(log: &[Value]) -> Vec<(String, Value)> {
    let start = log
        .iter()
        .position(|e| e["type"] == "tool/call" && e["data"]["name"] == "bash")
        .expect("alpha called bash");
    log[start..]
        .iter()
        .map(|e| {
            let mut data = e["data"].clone();
            if let Some(map) = data.as_object_mut() {
                for volatile in ["pgid", "startTime", "time", "durationMs", "messageId"] {
                    map.remove(volatile);
                }
            }
            (e["type"].as_str().unwrap().to_owned(), data)
        })
        .collect()
}

/// The process group alpha's bash ran in (its `tool/process` record).
fn bash_group(log: &[Value]) -> i32 {
    let record = log
        .iter()
        .find(|e| e["type"] == "tool/process")
        .expect("alpha's bash started a process group");
    i32::try_from(record["data"]["pgid"].as_i64().unwrap()).unwrap()
}

/// The processes of group `pgid` that still run (zombies, which only wait to be reaped, are
/// not counted).
fn live_in_group(pgid: i32) -> Vec<String> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`: the fields after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" {
            live.push(stat.trim().to_owned());
        }
    }
    live
}

/// Issue 14 items 1 and 3: with `--placement workers` and one `troupe worker`, the worker
/// hosts alpha — `list_agents` and the panel (`troupe web --store`) name its host `w1`, the
/// Lead's `local` —; the Lead interrupts alpha while alpha's ten-minute bash runs there. The Lead gets
/// the REFERENCE c.13 result — byte for byte the one it gets when alpha runs in its own
/// process —, alpha's log shows its turn cancelled with the same events as that local
/// interrupt (the bash result, the turn's end aborted by `{"kind":"parent"}`), alpha is never
/// asked for its next step, the bash's process group is gone, the Team finishes and
/// `team verify` passes.
#[test]
fn interrupt_agent_of_a_teammate_on_a_worker_stops_its_turn_as_a_local_interrupt_does() {
    let Some(s) = Setup::single() else { return };
    let remote_ws = s.path("ws-worker");
    let local_ws = s.path("ws-local");
    std::fs::create_dir_all(&remote_ws).unwrap();
    std::fs::create_dir_all(&local_ws).unwrap();
    let (_w1, w1_log) = start_worker(&s, "w1", &remote_ws);
    let mut web = Running(
        s.troupe(&["web", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut web_url = String::new();
    BufReader::new(web.0.stdout.take().unwrap())
        .read_line(&mut web_url)
        .unwrap();
    let web_url = web_url.trim().to_owned();
    let remote = run_interrupt(&s, &remote_ws, "workers", &web_url, "w1");
    let hosted = std::fs::read_to_string(&w1_log).unwrap();
    assert!(
        hosted.contains(&format!(
            "troupe worker w1: hosting alpha ({})",
            remote.alpha
        )),
        "alpha ran on the worker: {hosted}"
    );
    let local = run_interrupt(&s, &local_ws, "local", &web_url, "local");

    // `list_agents` while alpha runs: each live member's host (the worker's name, or `local`).
    for (run, alpha_host) in [(&remote, "w1"), (&local, "local")] {
        let rows = run.listed.as_array().unwrap();
        assert_eq!(rows[0]["name"], "lead");
        assert_eq!(rows[0]["host"], "local", "{}", run.listed);
        assert_eq!(rows[1]["name"], "alpha");
        assert_eq!(rows[1]["status"], "running", "{}", run.listed);
        assert_eq!(rows[1]["host"], alpha_host, "{}", run.listed);
    }

    // The Lead's result: REFERENCE c.13, the same bytes as the local call's.
    assert_eq!(remote.result["content"], r#"{"previousStatus":"running"}"#);
    assert_eq!(remote.result["isError"], false);
    assert_eq!(remote.result["content"], local.result["content"]);

    // alpha's turn: cancelled by its parent, the same events as the local interrupt.
    let remote_turn = interrupted_turn(&remote.alpha_log);
    assert_eq!(remote_turn, interrupted_turn(&local.alpha_log));
    let end = remote_turn
        .iter()
        .find(|(kind, _)| kind == "turn/end")
        .expect("alpha's turn ended");
    assert_eq!(end.1["reason"]["kind"], "aborted", "{end:?}");
    assert_eq!(
        end.1["reason"]["reason"],
        json!({"kind": "parent"}),
        "{end:?}"
    );
    for log in [&remote.alpha_log, &local.alpha_log] {
        assert!(
            !log.iter().any(|e| e.to_string().contains("alpha went on")),
            "alpha was never asked for its next step"
        );
    }

    // The ten-minute bash is gone (the run ended long before it could).
    let group = bash_group(&remote.alpha_log);
    let left = live_in_group(group);
    assert!(left.is_empty(), "group {group} still runs: {left:?}");

    s.ok(&["team", "verify", &remote.lead]);
    s.ok(&["team", "verify", &local.lead]);
}
