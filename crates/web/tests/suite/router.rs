//! Every endpoint through the router (`oneshot`), with its JSON shape as a snapshot fixture.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;
use tower::ServiceExt;
use troupe_protocol::{ErrorCode, EventDraft};
use troupe_web::{Access, WebConfig, access_for, panel_url, router};

use super::*;

/// A Team with every kind of row: the Lead, a running teammate (its writer is held and a turn
/// is open), an inactive one, one still provisioning and a failed one; tasks ready, blocked,
/// owned, with overlapping scopes, and a deleted one; one pending and one delivered message.
/// Returns the writers that must stay alive (they hold their files' locks).
pub fn team_home(home: &Home) -> Vec<troupe_journal::SessionWriter> {
    let lead = home.lead(LEAD);
    let alpha = home.child(ALPHA, LEAD, "alpha");
    let beta = home.child(BETA, LEAD, "beta");
    append(
        &lead,
        vec![
            turn_start(1),
            member(ALPHA, "alpha", "provisioning", None),
            member(ALPHA, "alpha", "active", None),
            member(BETA, "beta", "provisioning", None),
            member(BETA, "beta", "active", None),
            member("mate-gamma", "gamma", "provisioning", None),
            member("mate-delta", "delta", "provisioning", None),
            member(
                "mate-delta",
                "delta",
                "failed",
                Some("LLM_AUTH: check your API key"),
            ),
            task("task-1", 1, "pending", None, &[], &["src/a"]),
            task("task-1", 2, "in_progress", Some(ALPHA), &[], &["src/a"]),
            task("task-2", 1, "pending", None, &["task-1"], &[]),
            task("task-3", 1, "pending", None, &[], &["src"]),
            task("task-3", 2, "in_progress", Some(LEAD), &[], &["src"]),
            task("task-4", 1, "pending", None, &[], &[]),
            task("task-4", 2, "deleted", None, &[], &[]),
            task("task-5", 1, "pending", None, &[], &[]),
            queued("team-message-1", ALPHA, "alpha", BETA),
            queued("team-message-2", BETA, "beta", LEAD),
            delivered("team-message-2", LEAD),
            turn_end(1),
        ],
    );
    append(&alpha, vec![turn_start(1)]);
    append(&beta, vec![turn_start(1), turn_end(1)]);
    drop(lead);
    drop(beta);
    vec![alpha]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_team_projection_shows_roster_board_and_mail() {
    let home = Home::new();
    let _held = team_home(&home);
    let (status, body) = get(&home.router(), "/api/sessions/lead-1/team").await;
    assert_eq!(status, StatusCode::OK);
    insta::assert_json_snapshot!("team_projection", body);
    // The Lead pseudo-row first, then the roster in provisioning order.
    let names: Vec<&str> = body["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lead", "alpha", "beta", "gamma", "delta"]);
    let statuses: Vec<&str> = body["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["inactive", "running", "inactive", "provisioning", "failed"]
    );
    // The deleted task is not shown; readiness and warnings are derived.
    assert_eq!(
        task_statuses(&body),
        [
            "task-1:in_progress",
            "task-2:pending",
            "task-3:in_progress",
            "task-5:pending"
        ]
    );
    assert_eq!(body["mail"], json!({"pending": 1, "byMember": {BETA: 1}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_list_puts_roots_first_with_team_size_and_last_activity() {
    let home = Home::new();
    let _held = team_home(&home);
    let solo = home.lead("solo-root");
    append(&solo, vec![turn_start(1), turn_end(1)]);
    drop(solo);
    // A subagent of the solo root (the default profile): a child, not a teammate.
    drop(home.subagent("sub-1", "solo-root", profile_config("helper", 1, "default")));
    // A root without a Team (`troupe run` without --team).
    let plain = home
        .journal
        .create(troupe_protocol::SessionHeader::new(
            sid("plain-root"),
            T0 - 1,
        ))
        .unwrap();
    plain.append(profile_config("lead", 0, "default")).unwrap();
    flush(&plain);
    drop(plain);
    let (status, body) = get(&home.router(), "/api/sessions").await;
    assert_eq!(status, StatusCode::OK);
    insta::assert_json_snapshot!("session_list", body);
    // `team` tells a Team without teammates yet (solo-root: "lead, no teammates yet" in the
    // picker) from a root that has no Team ("no team").
    let teams: Vec<(&str, bool, Option<u64>)> = body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["role"] == "lead")
        .map(|s| {
            (
                s["id"].as_str().unwrap(),
                s["team"].as_bool().unwrap(),
                s["teamSize"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        teams,
        [
            (LEAD, true, Some(4)),
            ("plain-root", false, Some(0)),
            ("solo-root", true, Some(0))
        ]
    );
    let roles: Vec<(&str, &str)> = body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), s["role"].as_str().unwrap()))
        .collect();
    // Team members are `teammate`, as `troupe sessions` says.
    assert_eq!(
        roles,
        [
            (LEAD, "lead"),
            ("plain-root", "lead"),
            ("solo-root", "lead"),
            (ALPHA, "teammate"),
            (BETA, "teammate"),
            ("sub-1", "child"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammates_role_is_settled_once_its_configuration_is_written() {
    // A listing taken before the child's configuration is in its log says `child`; the next
    // one, after it was appended, says `teammate` (the list follows the files).
    let home = Home::new();
    let lead = home.lead(LEAD);
    let mate = home.subagent(
        ALPHA,
        LEAD,
        EventDraft::new(
            "subagent/descriptor",
            json!({"version": 2, "mode": "continuable", "provider": "spawn", "label": "alpha"}),
        ),
    );
    let router = home.router();
    let role_of = |body: &serde_json::Value| {
        body["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == ALPHA)
            .map(|s| s["role"].as_str().unwrap().to_owned())
            .unwrap()
    };
    let (_, before) = get(&router, "/api/sessions").await;
    assert_eq!(role_of(&before), "child");
    append(&mate, vec![config("alpha", 1)]);
    let (_, after) = get(&router, "/api/sessions").await;
    assert_eq!(role_of(&after), "teammate");
    // And a teammate's id is not a Team root.
    let (status, body) = get(&router, &format!("/api/sessions/{ALPHA}/team")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "WEB_NOT_A_LEAD");
    drop((lead, mate));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_shows_messages_with_their_sender_tool_calls_and_results() {
    let home = Home::new();
    let beta = home.child(BETA, LEAD, "beta");
    append(
        &beta,
        vec![
            EventDraft::new(
                "agent/inbox/spliced",
                json!({"target": "next-turn", "start": 0, "inserted": []}),
            ),
            turn_start(1),
            EventDraft::new(
                "user/message",
                json!({"id": "m-1", "role": "user",
                "content": [{"type": "text", "text": "Fix the bug."}], "source": {"kind": "user"}}),
            ),
            EventDraft::new(
                "user/message",
                json!({"id": "team-message-9", "role": "user",
                "content": [{"type": "text", "text": "Team message team-message-9 from alpha:"},
                            {"type": "text", "text": "I changed a.py"}],
                "source": {"kind": "team-message", "messageId": "team-message-9",
                           "senderId": ALPHA, "senderName": "alpha", "teamId": LEAD}}),
            ),
            EventDraft::new("step/start", json!({"turn": 1, "step": 1})),
            EventDraft::new(
                "request/header",
                json!({"turn": 1, "step": 1, "model": "openai:gpt-test",
                "messages": 3, "tools": ["read"]}),
            ),
            EventDraft::new(
                "assistant/chunk",
                json!({"turn": 1, "step": 1, "block": "text", "delta": "Read"}),
            ),
            EventDraft::new(
                "assistant/message",
                json!({"turn": 1, "step": 1, "message": {
                "content": "Reading it.", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "read", "arguments": "{\"path\":\"a.py\"}"}}]}}),
            ),
            EventDraft::new(
                "tool/call",
                json!({"turn": 1, "step": 1, "callId": "c1", "name": "read",
                "arguments": {"path": "a.py"}}),
            ),
            EventDraft::new(
                "tool/result",
                json!({"turn": 1, "step": 1, "callId": "c1", "name": "read",
                "isError": true, "code": "FS_NOT_FOUND", "content": "{\"code\":\"FS_NOT_FOUND\"}"}),
            ),
            EventDraft::new(
                "model/attempt",
                json!({"turn": 1, "step": 2, "attempt": {"number": 1,
                "status": 429, "error": {"code": "LLM_RATE_LIMITED", "message": "slow down"},
                "retryDelayMs": 500}}),
            ),
            EventDraft::new(
                "tool/result",
                json!({"turn": 1, "step": 2, "callId": "c2", "name": "bash",
                "isError": false, "content": "x".repeat(troupe_web::TOOL_RESULT_MAX_CHARS + 10)}),
            ),
            EventDraft::new(
                "assistant/message",
                json!({"turn": 1, "step": 3, "message": {"content": "Done."}}),
            ),
            turn_end(1),
        ],
    );
    drop(beta);
    let (status, body) = get(&home.router(), "/api/sessions/mate-beta/conversation").await;
    assert_eq!(status, StatusCode::OK);
    insta::assert_json_snapshot!("conversation", body);
    let text = body.to_string();
    for hidden in [
        "SECRET_KEY_VAR",
        "models.invalid",
        "request/header",
        "\"Read\"",
    ] {
        assert!(
            !text.contains(hidden),
            "{hidden} must not be served: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_invalid_sessions_are_json_errors() {
    let home = Home::new();
    let router = home.router();
    for suffix in ["team", "team/events", "conversation", "conversation/events"] {
        let (status, body) = get(&router, &format!("/api/sessions/no-such-session/{suffix}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{suffix}");
        assert_eq!(body["error"]["code"], "SESSION_NOT_FOUND", "{suffix}");
        let (status, body) = get(&router, &format!("/api/sessions/bad%20id/{suffix}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{suffix}");
        assert_eq!(body["error"]["code"], "INVALID_SESSION_ID", "{suffix}");
    }
    let (status, body) = get(&router, "/api/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "WEB_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_stops_folding_shows_the_failure_beside_the_last_valid_state() {
    let home = Home::new();
    let lead = home.lead(LEAD);
    append(
        &lead,
        vec![
            task("task-1", 1, "pending", None, &[], &[]),
            // A revision that skips one breaks the fold.
            task("task-1", 3, "completed", None, &[], &[]),
            task("task-2", 1, "pending", None, &[], &[]),
        ],
    );
    drop(lead);
    let (status, body) = get(&home.router(), "/api/sessions/lead-1/team").await;
    assert_eq!(status, StatusCode::OK);
    insta::assert_json_snapshot!("team_failure", body);
    assert_eq!(task_statuses(&body), ["task-1:pending"]);
    assert!(
        body["failure"]
            .as_str()
            .unwrap()
            .starts_with("seq 2 (team/task)")
    );
}

/// A finished session whose Lead log breaks a Team rule inside a turn: the fold stops there,
/// with the turn open, but no process holds the file, so the Lead is not `running`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_stops_folding_inside_a_turn_nobody_runs_shows_the_lead_inactive() {
    let home = Home::new();
    let lead = home.lead(LEAD);
    append(
        &lead,
        vec![
            turn_start(1),
            task("task-1", 1, "pending", None, &[], &[]),
            task("task-1", 3, "completed", None, &[], &[]),
            turn_end(1),
        ],
    );
    drop(lead);
    let (status, body) = get(&home.router(), "/api/sessions/lead-1/team").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body["failure"]
            .as_str()
            .unwrap()
            .starts_with("seq 3 (team/task)")
    );
    if std::fs::read_to_string("/proc/locks").is_ok() {
        assert_eq!(body["members"][0]["status"], "inactive", "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_file_shows_the_failure_beside_the_last_valid_state() {
    let home = Home::new();
    let lead = home.lead(LEAD);
    append(&lead, vec![task("task-1", 1, "pending", None, &[], &[])]);
    drop(lead);
    let path = home.path().join("sessions/lead-1.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{not json\n");
    text.push_str(
        r#"{"seq":3,"time":1,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
    );
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    let (status, body) = get(&home.router(), "/api/sessions/lead-1/team").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(task_statuses(&body), ["task-1:pending"]);
    let failure = body["failure"].as_str().unwrap();
    assert!(failure.contains("line 4"), "{failure}");
    // The panel's page itself is always served.
    let (status, _) = get(&home.router(), "/").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_panel_is_served_from_the_binary_with_a_strict_content_policy() {
    let home = Home::new();
    let router = home.router();
    for (path, kind, needle) in [
        ("/", "text/html", "<script src=\"app.js\"></script>"),
        ("/app.js", "text/javascript", "EventSource"),
        ("/style.css", "text/css", "@media"),
    ] {
        let response = router
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers().clone();
        assert!(
            headers["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        assert!(
            headers["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("default-src 'self'")
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&body).contains(needle), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_endpoint_but_the_approval_write_writes_anything() {
    let home = Home::new();
    let _held = team_home(&home);
    let before = snapshot_files(&home);
    let router = home.router();
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        for path in [
            "/api/sessions",
            "/api/sessions/lead-1/team",
            "/api/sessions/lead-1/conversation",
            "/api/sessions/lead-1/approvals",
            "/",
        ] {
            let response = router
                .clone()
                .oneshot(
                    Request::builder()
                        .method(method)
                        .uri(path)
                        .body(Body::from("{}"))
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
        }
    }
    for path in [
        "/api/sessions",
        "/api/sessions/lead-1/team",
        "/api/sessions/mate-alpha/conversation",
    ] {
        let (status, body) = get(&router, path).await;
        assert_eq!(status, StatusCode::OK);
        let text = body.to_string();
        assert!(
            !text.contains("SECRET_KEY_VAR") && !text.contains("models.invalid"),
            "{text}"
        );
    }
    assert_eq!(snapshot_files(&home), before, "the home is unchanged");
}

fn snapshot_files(home: &Home) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(home.path().join("sessions"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_requests_must_name_a_loopback_host() {
    let home = Home::new();
    let _held = team_home(&home);
    let router = home.router();
    for (host, allowed) in [
        ("127.0.0.1:7420", true),
        ("localhost:7420", true),
        ("[::1]:7420", true),
        ("localhost", true),
        ("attacker.example:7420", false),
        ("127.0.0.1.attacker.example", false),
    ] {
        let response = router
            .clone()
            .oneshot(
                Request::get("/api/sessions")
                    .header("host", host)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let expected = if allowed {
            StatusCode::OK
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(response.status(), expected, "{host}");
    }
}

#[test]
fn a_non_loopback_bind_needs_the_explicit_flag_and_then_a_token() {
    let any: std::net::IpAddr = "0.0.0.0".parse().unwrap();
    let err = access_for(any, false).unwrap_err();
    assert_eq!(err.code(), "WEB_REMOTE_REFUSED");
    assert!(err.to_string().contains("--allow-remote"), "{err}");
    assert_eq!(
        access_for("127.0.0.1".parse().unwrap(), false).unwrap(),
        Access::Loopback
    );
    let Access::Token(one) = access_for(any, true).unwrap() else {
        panic!("a remote bind gets a token");
    };
    let Access::Token(two) = access_for(any, true).unwrap() else {
        panic!("a remote bind gets a token");
    };
    assert_eq!(one.len(), 32);
    assert_ne!(one, two, "each server gets its own token");
    let url = panel_url(
        "10.1.2.3:7420".parse().unwrap(),
        &Access::Token(one.clone()),
    );
    assert_eq!(url, format!("http://10.1.2.3:7420/?token={one}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_panel_answers_api_requests_only_with_its_token() {
    let home = Home::new();
    let _held = team_home(&home);
    let router = router(WebConfig {
        access: Access::Token("abc123".to_owned()),
        ..home.config()
    });
    let status = |request: Request<Body>| {
        let router = router.clone();
        async move { router.oneshot(request).await.unwrap().status() }
    };
    let plain = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    assert_eq!(
        status(plain("/api/sessions")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status(plain("/api/sessions?token=wrong")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status(plain("/api/sessions?token=abc1234")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status(plain("/api/sessions?token=abc123")).await,
        StatusCode::OK
    );
    assert_eq!(
        status(plain("/api/sessions/lead-1/team/events?token=abc123")).await,
        StatusCode::OK
    );
    let bearer = Request::get("/api/sessions")
        .header("authorization", "Bearer abc123")
        .header("host", "192.0.2.1:7420")
        .body(Body::empty())
        .unwrap();
    assert_eq!(status(bearer).await, StatusCode::OK);
    // The panel's files carry no data and load without the token (the page then passes it on).
    assert_eq!(status(plain("/")).await, StatusCode::OK);
    let (_, body) = get(&router, "/api/sessions").await;
    assert_eq!(body["error"]["code"], "WEB_UNAUTHORIZED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_session_is_not_a_team_but_has_a_conversation() {
    let home = Home::new();
    let _writers = team_home(&home);
    let router = home.router();
    for suffix in ["team", "team/events"] {
        let (status, body) = get(&router, &format!("/api/sessions/{ALPHA}/{suffix}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{suffix}: {body}");
        assert_eq!(body["error"]["code"], "WEB_NOT_A_LEAD", "{suffix}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("open {LEAD}")), "{message}");
    }
    let (status, _) = get(&router, &format!("/api/sessions/{ALPHA}/conversation")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = get(&router, &format!("/api/sessions/{LEAD}/team")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["teamId"], LEAD);
}

/// `GET …/team/timeline` lists the Team events; `GET …/team/show?at=SEQ` is the Team right
/// after one of them (the object of `troupe team show --json --at SEQ`), and without `at`
/// the whole log with each message's receipts; a seq past the log, a non-seq and a
/// teammate's session are refused with their codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_and_the_team_at_a_past_event() {
    let home = Home::new();
    let lead = home.lead(LEAD);
    let _alpha = home.child(ALPHA, LEAD, "alpha");
    for draft in [
        member(ALPHA, "alpha", "provisioning", None),
        member(ALPHA, "alpha", "active", None),
        task("task-1", 1, "pending", None, &[], &[]),
        task("task-1", 2, "in_progress", Some(ALPHA), &[], &[]),
        queued("team-message-1", ALPHA, "alpha", LEAD),
        delivered("team-message-1", LEAD),
    ] {
        append(&lead, vec![draft]);
    }
    drop(lead);
    let router = home.router();
    let (status, body) = get(&router, "/api/sessions/lead-1/team/timeline").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let events = body["events"].as_array().unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    assert_eq!(
        events[3]["text"],
        "task-1 rev 2: pending → in_progress, owner alpha"
    );
    assert_eq!(events[3]["taskId"], "task-1");

    let phases = |body: &Value| -> Vec<String> {
        body["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                format!(
                    "{}:{}",
                    m["name"].as_str().unwrap(),
                    m["phase"].as_str().unwrap()
                )
            })
            .collect()
    };
    let (status, at1) = get(&router, "/api/sessions/lead-1/team/show?at=1").await;
    assert_eq!(status, StatusCode::OK, "{at1}");
    assert_eq!(phases(&at1), ["lead:active", "alpha:provisioning"]);
    assert_eq!(at1["tasks"], json!([]));
    assert_eq!(at1["at"]["seq"], 1);
    assert_eq!(at1["at"]["lastSeq"], 6);
    let (_, at3) = get(&router, "/api/sessions/lead-1/team/show?at=3").await;
    assert_eq!(phases(&at3), ["lead:active", "alpha:active"]);
    assert_eq!(at3["tasks"][0]["status"], "pending");
    let (_, at5) = get(&router, "/api/sessions/lead-1/team/show?at=5").await;
    assert_eq!(at5["tasks"][0]["status"], "in_progress");
    assert_eq!(at5["pendingMessages"].as_array().unwrap().len(), 1);
    assert_eq!(at5["messages"][0]["queued"]["seq"], 5);
    assert_eq!(at5["messages"][0]["delivered"], Value::Null);
    let (_, whole) = get(&router, "/api/sessions/lead-1/team/show").await;
    assert!(whole.get("at").is_none(), "{whole}");
    assert_eq!(whole["pendingMessages"], json!([]));
    assert_eq!(whole["messages"][0]["delivered"]["seq"], 6);

    let (status, body) = get(&router, "/api/sessions/lead-1/team/show?at=7").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "TEAM_AT_OUTSIDE_LOG");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("its last event is seq 6"), "{message}");
    let (status, body) = get(&router, "/api/sessions/lead-1/team/show?at=later").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "WEB_BAD_REQUEST");
    let (status, body) = get(&router, &format!("/api/sessions/{ALPHA}/team/timeline")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "WEB_NOT_A_LEAD");
    let (status, body) = get(&router, "/api/sessions/nobody/team/show?at=1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "SESSION_NOT_FOUND");
}

/// The one write: `POST /api/sessions/{id}/approvals/{request}` answers a teammate's request
/// with the server's token in `Authorization: Bearer`; without it, with another, or from
/// another origin it is 403 and nothing is decided; a body that is not a decision is 400; an
/// unknown request 404, a decided one 409 (nothing changed); every other POST is 405; a
/// server without a write token refuses every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_the_one_write_and_needs_the_token() {
    let home = Home::new();
    let _held = team_home(&home);
    let beta = home.journal.open(&sid(BETA)).unwrap().0;
    append(
        &beta,
        vec![EventDraft::new(
            "approval/requested",
            json!({"id": "0a1b2c3d", "callId": "call-1", "command": "make release",
                   "justification": "writes /srv", "member": "beta"}),
        )],
    );
    drop(beta);
    let decision_log = home
        .path()
        .join("sessions")
        .join(format!("approval-{BETA}-0a1b2c3d.jsonl"));
    let send = |router: axum::Router,
                uri: String,
                headers: Vec<(&'static str, String)>,
                body: &'static str| async move {
        let mut request = Request::post(uri).header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = router
            .oneshot(request.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
        )
    };
    let router = home.router();
    let path = format!("/api/sessions/{LEAD}/approvals/0a1b2c3d");
    let bearer = |token: &str| vec![("authorization", format!("Bearer {token}"))];
    let approve = r#"{"decision":"approve"}"#;

    // Listed as pending, for the Lead's Team.
    let (status, listed) = get(&router, &format!("/api/sessions/{LEAD}/approvals")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["approvals"][0]["id"], "0a1b2c3d", "{listed}");
    assert_eq!(listed["approvals"][0]["session"], BETA);

    for headers in [
        vec![],
        bearer("feedc0d"),
        bearer("wrong"),
        vec![("authorization", format!("token {WRITE_TOKEN}"))],
        {
            let mut h = bearer(WRITE_TOKEN);
            h.push(("origin", "http://evil.example".to_owned()));
            h
        },
    ] {
        let (status, body) = send(router.clone(), path.clone(), headers.clone(), approve).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}");
        assert_eq!(body["error"]["code"], "WEB_TOKEN_REQUIRED");
    }
    // A token in the query is not enough for a write.
    let (status, _) = send(
        router.clone(),
        format!("{path}?token={WRITE_TOKEN}"),
        vec![],
        approve,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    for body in [
        r#"{"decision":"maybe"}"#,
        "not json",
        r#"{"decision":"approve","x":1}"#,
    ] {
        let (status, answer) = send(router.clone(), path.clone(), bearer(WRITE_TOKEN), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer["error"]["code"], "WEB_BAD_REQUEST");
    }
    let (status, answer) = send(
        router.clone(),
        format!("/api/sessions/{LEAD}/approvals/99999999"),
        bearer(WRITE_TOKEN),
        approve,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(answer["error"]["code"], "APPROVAL_NOT_FOUND");
    let (status, _) = send(
        router.clone(),
        "/api/sessions".to_owned(),
        bearer(WRITE_TOKEN),
        approve,
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(!decision_log.exists(), "nothing was decided");

    // Without a write token the server refuses every write.
    let tokenless = troupe_web::router(WebConfig {
        write_token: None,
        ..home.config()
    });
    let (status, _) = send(tokenless, path.clone(), bearer(WRITE_TOKEN), approve).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!decision_log.exists());

    let (status, answer) = send(router.clone(), path.clone(), bearer(WRITE_TOKEN), approve).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["session"], BETA);
    assert_eq!(answer["decided"]["decision"], "approve");
    assert_eq!(answer["decided"]["by"], "web");
    assert!(decision_log.exists());
    let (_, listed) = get(&router, &format!("/api/sessions/{LEAD}/approvals")).await;
    assert_eq!(listed["approvals"], json!([]));
    let (status, answer) = send(
        router.clone(),
        path,
        bearer(WRITE_TOKEN),
        r#"{"decision":"deny"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(answer["error"]["code"], "APPROVAL_ALREADY_DECIDED");
    // The decision log is no session of the list.
    let (_, sessions) = get(&router, "/api/sessions").await;
    assert!(
        sessions["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["id"].as_str().unwrap().starts_with("approval-")),
        "{sessions}"
    );
}

/// A `--worktree` Team's member carries its worktree in the projection (the panel's roster
/// shows its branch on one line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_team_projection_carries_a_members_worktree() {
    let home = Home::new();
    let lead = home.lead(LEAD);
    let alpha = home.child(ALPHA, LEAD, "alpha");
    let worktree = json!({"path": "/home/u/.troupe/worktrees/lead-1/alpha",
                          "branch": "troupe/lead-1/alpha",
                          "base": "0123456789abcdef0123456789abcdef01234567"});
    let with_worktree = |phase: &str| {
        EventDraft::new(
            "team/member",
            json!({"version": 1, "teamId": LEAD, "member": {
                "id": ALPHA, "name": "alpha", "description": "alpha works", "provider": "spawn",
                "context": "fresh", "phase": phase, "worktree": worktree}}),
        )
    };
    append(
        &lead,
        vec![
            turn_start(1),
            with_worktree("provisioning"),
            with_worktree("active"),
            turn_end(1),
        ],
    );
    append(&alpha, vec![turn_start(1), turn_end(1)]);
    drop(alpha);
    let (status, body) = get(&home.router(), "/api/sessions/lead-1/team").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let members = body["members"].as_array().unwrap();
    assert!(
        members[0].get("worktree").is_none(),
        "the Lead keeps the checkout"
    );
    assert_eq!(members[1]["name"], "alpha");
    assert_eq!(members[1]["worktree"], worktree);
    drop(lead);
}
