//! Real servers (the test MCP server over stdio): listing, calls, filters, failures at start
//! and mid-run, timeouts, cancellation, the sandbox, the environment, shutdown.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_mcp::McpHub;
use troupe_protocol::ErrorCode;
use troupe_test_support::McpHttpServer;
use troupe_tools::SandboxPolicy;

use super::support::{call, options, registry, server_table, servers, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_offered_namespaced_with_the_servers_schemas() {
    let ws = tempfile::tempdir().unwrap();
    let started = start(&server_table("test", &[], ""), ws.path()).await;
    assert!(started.failures.is_empty(), "{:?}", started.failures);
    assert!(started.warnings.is_empty(), "{:?}", started.warnings);
    let hub = started.hub;
    assert_eq!(
        hub.tool_names(),
        [
            "mcp__test__echo",
            "mcp__test__add",
            "mcp__test__fail",
            "mcp__test__sleep",
            "mcp__test__write_file",
            "mcp__test__env",
            "mcp__test__exit"
        ]
    );
    let tools = hub.tools();
    let add = tools.iter().find(|t| t.name() == "mcp__test__add").unwrap();
    assert_eq!(add.description(), "Adds two integers.");
    assert_eq!(
        add.parameters(),
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]
        })
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_return_the_servers_results_and_errors() {
    let ws = tempfile::tempdir().unwrap();
    let hub = start(&server_table("test", &[], ""), ws.path()).await.hub;
    let (registry, ctx) = registry(&hub, ws.path());
    assert_eq!(
        call(&registry, &ctx, "mcp__test__echo", json!({"text": "hi"})).await,
        Ok(json!({"content": [{"type": "text", "text": "hi"}]}))
    );
    assert_eq!(
        call(&registry, &ctx, "mcp__test__add", json!({"a": 2, "b": 40})).await,
        Ok(json!({"content": [{"type": "text", "text": "42"}], "structuredContent": {"sum": 42}}))
    );
    let (code, message) = call(
        &registry,
        &ctx,
        "mcp__test__fail",
        json!({"message": "no disk"}),
    )
    .await
    .unwrap_err();
    assert_eq!(code, "MCP_TOOL_ERROR");
    assert_eq!(message, "MCP tool `fail` of server `test` failed: no disk");
    let (code, message) = call(&registry, &ctx, "mcp__test__add", json!({"a": "x"}))
        .await
        .unwrap_err();
    assert_eq!(code, "MCP_REQUEST_FAILED");
    assert!(message.contains("`a` must be an integer"), "{message}");
    let (code, _) = call(&registry, &ctx, "mcp__test__echo", json!([1]))
        .await
        .unwrap_err();
    assert_eq!(code, "INVALID_ARGUMENTS");
    // The server still answers after all that.
    assert!(
        call(&registry, &ctx, "mcp__test__echo", json!({"text": "again"}))
            .await
            .is_ok()
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabled_tools_filters_and_names_what_the_server_lacks() {
    let ws = tempfile::tempdir().unwrap();
    let table = server_table("t", &[], r#"enabled_tools = ["add", "echo", "nope"]"#);
    let started = start(&table, ws.path()).await;
    assert!(started.failures.is_empty());
    // The server's order, not the list's.
    assert_eq!(started.hub.tool_names(), ["mcp__t__echo", "mcp__t__add"]);
    assert_eq!(
        started.warnings,
        ["MCP server `t` offers no tool `nope` (named in enabled_tools)"]
    );
    started.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_cannot_start_are_reported_by_name_and_the_others_run() {
    let ws = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}{}{}",
        server_table("good", &[], ""),
        "[mcp_servers.missing]\ncommand = \"/nonexistent/mcp-server\"\n",
        server_table("quits", &["--fail-start"], ""),
        server_table("hangs", &["--hang"], "startup_timeout_sec = 1"),
    );
    let started = start(&config, ws.path()).await;
    assert_eq!(started.hub.server_names(), ["good"]);
    assert_eq!(started.hub.tool_names().len(), 7);
    let failures: Vec<(String, String)> = started
        .failures
        .iter()
        .map(|e| (e.code().to_owned(), e.to_string()))
        .collect();
    assert_eq!(failures.len(), 3, "{failures:?}");
    // In name order: hangs, missing, quits.
    assert_eq!(failures[0].0, "MCP_SERVER_TIMEOUT");
    assert!(
        failures[0]
            .1
            .starts_with("MCP server `hangs` did not start within 1 s"),
        "{}",
        failures[0].1
    );
    assert_eq!(failures[1].0, "MCP_SERVER_START_FAILED");
    assert!(
        failures[1].1.starts_with(
            "MCP server `missing` did not start: cannot run `/nonexistent/mcp-server`: No such file"
        ),
        "{}",
        failures[1].1
    );
    assert_eq!(failures[2].0, "MCP_SERVER_START_FAILED");
    assert!(
        failures[2].1.contains("MCP server `quits`"),
        "{}",
        failures[2].1
    );
    assert!(failures[2].1.contains("status 7"), "{}", failures[2].1);
    assert!(
        failures[2].1.contains("refusing to start: --fail-start"),
        "{}",
        failures[2].1
    );
    started.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_an_invalid_schema_is_left_out_alone() {
    let ws = tempfile::tempdir().unwrap();
    let started = start(&server_table("s", &["--bad-schema"], ""), ws.path()).await;
    assert!(started.failures.is_empty());
    assert_eq!(started.hub.tool_names().len(), 7);
    assert!(!started.hub.tool_names().contains(&"mcp__s__bad".to_owned()));
    assert_eq!(started.warnings.len(), 1);
    assert!(
        started.warnings[0].starts_with(
            "MCP server `s`: tool `bad` left out: its input schema is not an object schema"
        ),
        "{:?}",
        started.warnings
    );
    started.hub.shutdown().await;
}

/// An entry of `tools/list` without `inputSchema` (which rmcp's typed listing refuses whole)
/// costs the server only that tool: the others are offered, a warning names it and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_without_an_input_schema_is_left_out_alone() {
    let ws = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}",
        server_table("s", &["--no-schema", "--bad-schema"], ""),
        server_table(
            "f",
            &["--no-schema"],
            r#"enabled_tools = ["echo", "noschema"]"#
        )
    );
    let started = start(&config, ws.path()).await;
    assert!(started.failures.is_empty(), "{:?}", started.failures);
    assert_eq!(started.hub.server_names(), ["f", "s"]);
    let names = started.hub.tool_names();
    assert_eq!(names.len(), 8, "{names:?}");
    assert!(names.contains(&"mcp__s__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"mcp__f__echo".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.ends_with("__noschema")),
        "{names:?}"
    );
    assert_eq!(
        started.warnings,
        [
            "MCP server `f`: tool `noschema` left out: its tools/list entry is invalid (missing \
             field `inputSchema`)",
            "MCP server `s`: tool `bad` left out: its input schema is not an object schema \
             (type \"string\")",
            "MCP server `s`: tool `noschema` left out: its tools/list entry is invalid (missing \
             field `inputSchema`)",
        ]
    );
    // The server's other tools work.
    let (registry, ctx) = registry(&started.hub, ws.path());
    assert_eq!(
        call(&registry, &ctx, "mcp__s__echo", json!({"text": "hi"})).await,
        Ok(json!({"content": [{"type": "text", "text": "hi"}]}))
    );
    started.hub.shutdown().await;
}

/// A server that answers `tools/list` with an error did not start, and the message says that
/// Troupe stopped it — not how it exited once Troupe had closed its stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_to_list_its_tools_was_stopped_by_troupe() {
    let ws = tempfile::tempdir().unwrap();
    let started = start(&server_table("r", &["--refuse-list"], ""), ws.path()).await;
    assert!(started.hub.server_names().is_empty());
    let failures: Vec<String> = started.failures.iter().map(ToString::to_string).collect();
    assert_eq!(
        failures,
        [
            "MCP server `r` did not start: listing its tools failed: the server refused the \
          request: tools/list refused (--refuse-list); it was stopped"
        ]
    );
    assert_eq!(started.failures[0].code(), "MCP_SERVER_START_FAILED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_fails_its_calls_naming_it() {
    let ws = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}",
        server_table("dies", &[], ""),
        server_table("lives", &[], "")
    );
    let hub = start(&config, ws.path()).await.hub;
    let (registry, ctx) = registry(&hub, ws.path());
    let (code, message) = call(&registry, &ctx, "mcp__dies__exit", json!({"code": 3}))
        .await
        .unwrap_err();
    assert_eq!(code, "MCP_SERVER_UNAVAILABLE");
    assert!(
        message.starts_with("MCP server `dies` is not running"),
        "{message}"
    );
    assert!(message.contains("status 3"), "{message}");
    assert!(message.contains("exiting with 3"), "{message}");
    // Later calls fail the same way, without waiting for anything.
    let (code, again) = call(&registry, &ctx, "mcp__dies__echo", json!({"text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(code, "MCP_SERVER_UNAVAILABLE");
    assert!(again.contains("status 3"), "{again}");
    // The other server is not affected.
    assert!(
        call(&registry, &ctx, "mcp__lives__echo", json!({"text": "x"}))
            .await
            .is_ok()
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_times_out_and_a_cancelled_one_is_cancelled() {
    let ws = tempfile::tempdir().unwrap();
    let hub = start(&server_table("s", &[], "tool_timeout_sec = 0.5"), ws.path())
        .await
        .hub;
    let (registry, ctx) = registry(&hub, ws.path());
    let (code, message) = call(&registry, &ctx, "mcp__s__sleep", json!({"ms": 600_000}))
        .await
        .unwrap_err();
    assert_eq!(code, "MCP_TOOL_TIMEOUT");
    assert_eq!(
        message,
        "MCP tool `sleep` of server `s` did not answer within 0.5 s (tool_timeout_sec); the \
         call was cancelled"
    );
    let cancel = CancellationToken::new();
    let cancelled = ctx.clone().with_cancellation(cancel.clone());
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let (code, _) = call(
        &registry,
        &cancelled,
        "mcp__s__sleep",
        json!({"ms": 600_000}),
    )
    .await
    .unwrap_err();
    assert_eq!(code, "TOOL_CANCELED");
    // Already cancelled: nothing is sent.
    let (code, _) = call(&registry, &cancelled, "mcp__s__echo", json!({"text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(code, "TOOL_CANCELED");
    assert!(
        call(&registry, &ctx, "mcp__s__echo", json!({"text": "x"}))
            .await
            .is_ok()
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_run_in_the_sandbox() {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let outside = root.path().join("outside.txt");
    let table = server_table("s", &[], "");
    let policy = SandboxPolicy::default();
    let started = McpHub::start(&servers(&table), &options(&ws, policy)).await;
    assert!(started.failures.is_empty(), "{:?}", started.failures);
    let (registry, ctx) = registry(&started.hub, &ws);
    let write = |path: String| json!({"path": path, "text": "x"});
    let (code, message) = call(
        &registry,
        &ctx,
        "mcp__s__write_file",
        write(outside.display().to_string()),
    )
    .await
    .unwrap_err();
    assert_eq!(code, "MCP_TOOL_ERROR");
    assert!(message.contains("Permission denied"), "{message}");
    assert!(
        message.contains("note: this command ran in the sandbox"),
        "{message}"
    );
    assert!(!outside.exists());
    // Inside the workspace (relative to it: the server's working directory) and in TMPDIR.
    assert!(
        call(
            &registry,
            &ctx,
            "mcp__s__write_file",
            write("in.txt".into())
        )
        .await
        .is_ok()
    );
    assert_eq!(std::fs::read_to_string(ws.join("in.txt")).unwrap(), "x");
    let tmp = ws.join(".tmp-mcp/t.txt").display().to_string();
    assert!(
        call(&registry, &ctx, "mcp__s__write_file", write(tmp))
            .await
            .is_ok()
    );
    started.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_is_set_and_secret_variables_are_removed() {
    let ws = tempfile::tempdir().unwrap();
    let table = server_table("s", &[], "env = { GREETING = \"hello\" }");
    let mut opts = options(ws.path(), SandboxPolicy::OFF);
    // A variable of our own environment named secret is removed; PATH is inherited.
    opts.secret_env = vec!["PATH".to_owned()];
    let hub = McpHub::start(&servers(&table), &opts).await.hub;
    let (registry, ctx) = registry(&hub, ws.path());
    let read = |name: &str| json!({"name": name});
    let text = |value: serde_json::Value| value["content"][0]["text"].as_str().unwrap().to_owned();
    assert_eq!(
        text(
            call(&registry, &ctx, "mcp__s__env", read("GREETING"))
                .await
                .unwrap()
        ),
        "hello"
    );
    assert_eq!(
        text(
            call(&registry, &ctx, "mcp__s__env", read("PATH"))
                .await
                .unwrap()
        ),
        "unset"
    );
    let tmpdir = text(
        call(&registry, &ctx, "mcp__s__env", read("TMPDIR"))
            .await
            .unwrap(),
    );
    assert!(tmpdir.ends_with(".tmp-mcp"), "{tmpdir}");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_every_server_process() {
    let ws = tempfile::tempdir().unwrap();
    let hub = start(&server_table("s", &[], ""), ws.path()).await.hub;
    let pid = hub.server_pid("s").unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let tools = hub.tools();
    hub.shutdown().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "server {pid} still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A tool still held fails cleanly, naming the server.
    let ctx = troupe_tools::ToolContext::new(
        ws.path(),
        troupe_protocol::SessionId::random(),
        std::sync::Arc::new(troupe_tools::FileObservations::new()),
    )
    .unwrap();
    let echo = tools.iter().find(|t| t.name() == "mcp__s__echo").unwrap();
    let error = echo.call(&ctx, json!({"text": "x"})).await.unwrap_err();
    assert_eq!(error.code(), "MCP_SERVER_UNAVAILABLE");
    assert!(error.to_string().contains("`s`"), "{error}");
}

fn http_table(name: &str, url: &str, extra: &str) -> String {
    format!(
        "[mcp_servers.{name}]\nurl = {}\n{extra}\n",
        super::support::toml_string(url)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_is_listed_called_and_reported_when_it_goes_away() {
    let ws = tempfile::tempdir().unwrap();
    let mut server = McpHttpServer::start(None).unwrap();
    let started = start(&http_table("web", &server.url(), ""), ws.path()).await;
    assert!(started.failures.is_empty(), "{:?}", started.failures);
    // The in-process server offers every tool but `exit`.
    assert_eq!(started.hub.tool_names().len(), 6);
    let (registry, ctx) = registry(&started.hub, ws.path());
    assert_eq!(
        call(&registry, &ctx, "mcp__web__add", json!({"a": 1, "b": 2})).await,
        Ok(json!({"content": [{"type": "text", "text": "3"}], "structuredContent": {"sum": 3}}))
    );
    let (code, _) = call(&registry, &ctx, "mcp__web__fail", json!({"message": "m"}))
        .await
        .unwrap_err();
    assert_eq!(code, "MCP_TOOL_ERROR");
    server.stop();
    let (code, message) = call(&registry, &ctx, "mcp__web__echo", json!({"text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(code, "MCP_SERVER_UNAVAILABLE", "{message}");
    assert!(
        message.starts_with(&format!(
            "MCP server `web` is not running: the connection to {} failed",
            server.url()
        )),
        "{message}"
    );
    started.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_refuses_or_is_not_there_is_a_start_failure() {
    let ws = tempfile::tempdir().unwrap();
    let guarded = McpHttpServer::start(Some("s3cret")).unwrap();
    let gone = McpHttpServer::start(None).unwrap();
    let gone_url = gone.url();
    drop(gone);
    let config = format!(
        "{}{}{}",
        http_table("guarded", &guarded.url(), ""),
        http_table("gone", &gone_url, "startup_timeout_sec = 5"),
        http_table(
            "unset",
            &guarded.url(),
            "bearer_token_env_var = \"TROUPE_TEST_SURELY_UNSET_TOKEN\""
        ),
    );
    let started = start(&config, ws.path()).await;
    assert!(started.hub.server_names().is_empty());
    let failures: Vec<String> = started.failures.iter().map(ToString::to_string).collect();
    assert_eq!(failures.len(), 3, "{failures:?}");
    // In name order: gone, guarded, unset.
    assert!(
        failures[0].starts_with("MCP server `gone` did not start"),
        "{failures:?}"
    );
    assert!(
        failures[1].starts_with("MCP server `guarded` did not start"),
        "{failures:?}"
    );
    assert!(
        failures[1].contains("401") || failures[1].contains("nauthorized"),
        "{failures:?}"
    );
    assert_eq!(
        failures[2],
        "MCP server `unset` did not start: its bearer_token_env_var \
         TROUPE_TEST_SURELY_UNSET_TOKEN is not set in the environment"
    );
    // The guarded server saw requests without a token, never one with a wrong token.
    assert!(guarded.authorizations().iter().all(Option::is_none));
}
