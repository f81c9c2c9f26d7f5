//! `bash`: exit codes, output, timeout, cancellation and the process-group kill.

use std::os::unix::process::CommandExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_protocol::ErrorCode;
use troupe_tools::{
    ProcessInfo, ProcessObserver, ToolLimits, process_start_time, stop_leftover_group,
    truncation_marker,
};

use super::support::{Workspace, code, err, ok, process_is_gone, wait_gone};

#[tokio::test]
async fn reports_exit_code_stdout_and_stderr() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let result = ok(ws
        .call(
            &ctx,
            "bash",
            json!({"command": "echo out; echo err >&2; exit 3"}),
        )
        .await);
    assert_eq!(
        result,
        json!({"exit_code": 3, "stdout": "out\n", "stderr": "err\n"})
    );
}

#[tokio::test]
async fn runs_in_the_workspace_root_with_no_stdin() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let result = ok(ws
        .call(&ctx, "bash", json!({"command": "pwd; cat; echo done"}))
        .await);
    let expected = format!("{}\ndone\n", ws.root().display());
    assert_eq!(result["stdout"], expected);
    assert_eq!(result["exit_code"], 0);
}

#[tokio::test]
async fn a_signal_death_has_no_exit_code() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let result = ok(ws
        .call(&ctx, "bash", json!({"command": "kill -TERM $$"}))
        .await);
    assert_eq!(
        result,
        json!({"exit_code": null, "signal": 15, "stdout": "", "stderr": ""})
    );
}

/// Reads the pid a command printed on its first stdout line.
fn first_pid(stdout: &str) -> u32 {
    stdout
        .lines()
        .next()
        .expect("a pid line")
        .trim()
        .parse()
        .expect("pid")
}

#[tokio::test]
async fn timeout_kills_the_process_group_including_background_grandchildren() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let started = Instant::now();
    let result = ok(ws
        .call(
            &ctx,
            "bash",
            json!({"command": "sleep 100 & echo $!; sleep 100", "timeout_ms": 500}),
        )
        .await);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(result["timed_out"], true);
    assert_eq!(result["exit_code"], serde_json::Value::Null);
    assert_eq!(result["signal"], 9);
    let grandchild = first_pid(result["stdout"].as_str().expect("stdout"));
    assert!(
        wait_gone(grandchild).await,
        "background sleep {grandchild} survived"
    );
}

#[tokio::test]
async fn background_processes_do_not_outlive_a_finished_command() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let started = Instant::now();
    let result = ok(ws
        .call(&ctx, "bash", json!({"command": "sleep 100 & echo $!"}))
        .await);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(result["exit_code"], 0);
    let grandchild = first_pid(result["stdout"].as_str().expect("stdout"));
    assert!(
        wait_gone(grandchild).await,
        "background sleep {grandchild} survived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_kills_the_process_group() {
    let ws = Workspace::new();
    let cancel = CancellationToken::new();
    let ctx = ws.ctx("alpha").with_cancellation(cancel.clone());
    let call = ws.call(
        &ctx,
        "bash",
        json!({"command": "sleep 100 & echo $! > pid.txt; sleep 100"}),
    );
    let canceler = async {
        // Wait until the grandchild is running, then cancel the turn.
        for _ in 0..200 {
            if ws.path("pid.txt").exists()
                && !std::fs::read_to_string(ws.path("pid.txt"))
                    .unwrap_or_default()
                    .is_empty()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        cancel.cancel();
    };
    let started = Instant::now();
    let (outcome, ()) = tokio::join!(call, canceler);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(err(outcome).code(), "TOOL_CANCELED");
    let grandchild = first_pid(&ws.get("pid.txt"));
    assert!(
        wait_gone(grandchild).await,
        "background sleep {grandchild} survived"
    );
    // An already-canceled context does not start the command at all.
    assert_eq!(
        code(
            ws.call(&ctx, "bash", json!({"command": "touch ran.txt"}))
                .await
        ),
        "TOOL_CANCELED"
    );
    assert!(!ws.path("ran.txt").exists());
}

#[tokio::test]
async fn dropping_the_call_kills_the_process_group() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let call = ws.registry.dispatch(
        &ctx,
        "bash",
        json!({"command": "sleep 100 & echo $! > pid.txt; sleep 100"}),
    );
    let abandoned = tokio::time::timeout(Duration::from_millis(700), call).await;
    assert!(
        abandoned.is_err(),
        "the command should still have been running"
    );
    let grandchild = first_pid(&ws.get("pid.txt"));
    assert!(
        wait_gone(grandchild).await,
        "background sleep {grandchild} survived"
    );
    assert!(process_is_gone(grandchild));
}

#[tokio::test]
async fn output_is_capped_with_a_marker() {
    let ws = Workspace::new();
    let limits = ToolLimits {
        output_cap_bytes: 1_000,
        ..ToolLimits::default()
    };
    let ctx = ws.ctx_with_limits("alpha", limits);
    let result = ok(
        ws.call(
            &ctx,
            "bash",
            json!({"command": "printf 'START'; head -c 20000 /dev/zero | tr '\\0' a; printf 'END'; echo oops >&2"}),
        )
        .await,
    );
    assert_eq!(result["truncated"], true);
    assert_eq!(result["stderr"], "oops\n");
    let stdout = result["stdout"].as_str().expect("stdout");
    // stdout (20 008 bytes) gets the budget stderr does not use: 1000 - 5 bytes, around the marker.
    let marker = truncation_marker(20_008 - 995);
    assert!(stdout.contains(&marker), "{stdout}");
    assert_eq!(stdout.len(), 995 + marker.len());
    assert!(stdout.starts_with("STARTaaa") && stdout.ends_with("aaaEND"));
}

#[tokio::test]
async fn timeout_bounds_are_checked() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    for timeout in [json!(0), json!(600_001), json!(-5), json!("100")] {
        assert_eq!(
            code(
                ws.call(
                    &ctx,
                    "bash",
                    json!({"command": "true", "timeout_ms": timeout})
                )
                .await
            ),
            "INVALID_ARGUMENTS",
            "{timeout}"
        );
    }
    ok(ws
        .call(
            &ctx,
            "bash",
            json!({"command": "true", "timeout_ms": 600_000}),
        )
        .await);
}

#[tokio::test]
async fn secret_variables_are_removed_from_the_shell_environment() {
    let ws = Workspace::new();
    // HOME and PATH are set in every test environment; listing them must hide exactly them.
    let ctx = ws
        .ctx("alpha")
        .with_secret_env(["HOME".to_owned(), "NOT_SET_ANYWHERE_X1".to_owned()]);
    let result = ok(ws
        .call(
            &ctx,
            "bash",
            json!({"command": "echo \"home=${HOME-unset}\"; env | grep -c '^HOME=' || true; test -n \"$PATH\" && echo path-kept"}),
        )
        .await);
    assert_eq!(result["stdout"], "home=unset\n0\npath-kept\n", "{result}");
    // Without the list the variable is inherited as before.
    let plain = ok(ws
        .call(
            &ws.ctx("alpha"),
            "bash",
            json!({"command": "echo \"${HOME-unset}\""}),
        )
        .await);
    assert_ne!(plain["stdout"], "unset\n");
}

#[tokio::test]
async fn the_process_observer_learns_the_group_and_its_start_time_while_it_runs() {
    let ws = Workspace::new();
    type Seen = Vec<(ProcessInfo, Option<u64>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let sink = Arc::clone(&seen);
    let ctx =
        ws.ctx("alpha")
            .with_process_observer(ProcessObserver::new(move |info: ProcessInfo| {
                // The group is alive when it is reported: its leader's stat can be read now.
                let now = process_start_time(info.pgid);
                sink.lock().unwrap().push((info, now));
            }));
    let result = ok(ws
        .call(&ctx, "bash", json!({"command": "echo $$; sleep 0.1"}))
        .await);
    let pid: i32 = result["stdout"].as_str().unwrap().trim().parse().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (info, now) = seen[0];
    assert_eq!(info.pgid, pid, "the group id is the shell's pid");
    assert_eq!(Some(info.start_time), now);
    // The group is gone after the call; a stale record stops nothing.
    assert!(wait_gone(u32::try_from(pid).unwrap()).await);
    assert!(!stop_leftover_group(info));
}

#[tokio::test]
async fn a_leftover_group_with_the_recorded_start_time_is_stopped() {
    // A process group of our own, standing in for one a crashed process left behind.
    let mut child = std::process::Command::new("bash")
        .args(["-c", "sleep 30 & wait"])
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let start_time = process_start_time(pid).unwrap();
    assert!(!stop_leftover_group(ProcessInfo {
        pgid: pid,
        start_time: start_time + 1,
    }));
    assert!(!process_is_gone(child.id()));
    assert!(stop_leftover_group(ProcessInfo {
        pgid: pid,
        start_time,
    }));
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9));
}
