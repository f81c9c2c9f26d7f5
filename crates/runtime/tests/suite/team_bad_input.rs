//! Issue #4 "Bad input": every invalid argument of every Team tool, table-driven, through real
//! Lead and teammate turns (REFERENCE c.11, c.15, c.16, d.2, d.4).
//!
//! The rule the matrix checks: **the declared argument schema is the contract**. A value the
//! schema refuses (a wrong JSON type, `null`, a missing required field, an unknown field —
//! every schema says `additionalProperties: false` —, an integer outside the declared
//! `minimum`/`maximum`, an unknown enum value, arguments that are not a JSON object) is the
//! harness's argument-validation error `INVALID_ARGUMENTS` (REFERENCE d.2), except for
//! `wait_agent`'s `timeout_ms`, whose authoritative error is `TEAM_INVALID_TIMEOUT` (d.4.1).
//! A value the schema accepts reaches the Team service, whose refusals carry the REFERENCE c.16
//! code. Either way the result is an error whose message is one line starting `Error: ` and
//! naming the offending argument or value, and nothing Team-level is appended: no `team/*`
//! event, no session file, no delivered message, unchanged roster and board views.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use troupe_protocol::SessionId;
use troupe_runtime::Agent;
use troupe_team::{CreateTask, Delivery, MemberContext, TaskAction, TaskListQuery, UpdateTask};

use super::support::*;
use super::team::{lead_turn, settled, spawn, tool_results};

/// One bad call and what it must produce.
#[derive(Debug, Clone)]
struct Bad {
    tool: &'static str,
    args: Value,
    code: &'static str,
    /// A fragment the message must contain: the argument's name or the offending value.
    names: String,
}

fn bad(tool: &'static str, args: Value, code: &'static str, names: impl Into<String>) -> Bad {
    Bad {
        tool,
        args,
        code,
        names: names.into(),
    }
}

/// `base` with `key` set to `value`.
fn with(base: &Value, key: &str, value: Value) -> Value {
    let mut object = base.as_object().cloned().unwrap_or_default();
    object.insert(key.to_owned(), value);
    Value::Object(object)
}

/// `base` without `key`.
fn without(base: &Value, key: &str) -> Value {
    let mut object = base.as_object().cloned().unwrap_or_default();
    object.remove(key);
    Value::Object(object)
}

const SAFE_MAX: u64 = (1 << 53) - 1;

/// A string of `units` UTF-16 code units whose last character is outside the BMP (two units),
/// so it is one character shorter than it is long: a limit counted in `char`s would let it
/// through.
fn non_bmp_text(units: usize) -> String {
    format!("{}\u{1F600}", "x".repeat(units - 2))
}

/// Arguments each tool would accept (against the fixture below). Every generated case changes
/// exactly one thing.
fn valid_args(tool: &str) -> Value {
    match tool {
        "spawn_teammate" => {
            json!({"name": "new-one", "description": "d", "prompt": "p", "context": "fresh"})
        }
        "send_message" | "followup_task" => json!({"target": "worker", "message": "hi"}),
        "list_agents" => json!({}),
        "wait_agent" => json!({"timeout_ms": 10000}),
        "interrupt_agent" => json!({"target": "worker"}),
        "team_task_create" => json!({
            "subject": "s", "description": "d", "blocked_by": ["task-1"], "write_scopes": ["src"]
        }),
        "team_task_list" => {
            json!({"status": "pending", "owner": "lead", "ready": true, "cursor": 0, "limit": 10})
        }
        "team_task_get" => json!({"task_id": "task-1"}),
        "team_task_update" => json!({
            "task_id": "task-1", "expected_revision": 1, "action": "edit", "subject": "s",
            "description": "d", "blocked_by": [], "write_scopes": ["src"], "owner": "worker"
        }),
        other => panic!("no valid arguments for {other}"),
    }
}

/// Values of the wrong JSON type for a property declared as `schema`.
fn wrong_types(schema: &Value) -> Vec<Value> {
    match schema["type"].as_str().unwrap() {
        "string" => vec![json!(7), json!(true), Value::Null, json!(["x"]), json!({})],
        "integer" => vec![
            json!("10"),
            json!(true),
            Value::Null,
            json!(1.5),
            json!([1]),
            json!({}),
        ],
        "boolean" => vec![json!("true"), json!(1), Value::Null],
        "array" => vec![
            json!("x"),
            json!([1]),
            json!([null]),
            Value::Null,
            json!({}),
        ],
        other => panic!("no wrong types for {other}"),
    }
}

fn camel(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The schema-driven part of the matrix, generated from the parameter schemas the model is
/// shown: for every tool, arguments that are not an object, an unknown field (and the
/// camelCase spelling of each snake_case argument), each required field missing, every
/// argument with every wrong JSON type, every integer just outside its declared bounds, and
/// every enum argument with an unknown value.
fn schema_matrix(specs: &[(String, Value)]) -> Vec<Bad> {
    let mut cases = Vec::new();
    for (name, parameters) in specs {
        let tool: &'static str = troupe_runtime::team::TEAM_TOOL_NAMES
            .iter()
            .find(|t| *t == name)
            .unwrap();
        let base = valid_args(tool);
        assert_eq!(parameters["additionalProperties"], false, "{tool}");
        for not_object in [json!([]), json!("x"), json!(5), Value::Null] {
            cases.push(bad(tool, not_object, "INVALID_ARGUMENTS", "JSON object"));
        }
        cases.push(bad(
            tool,
            with(&base, "unexpected", json!(1)),
            "INVALID_ARGUMENTS",
            "`unexpected`",
        ));
        // An offending name or value with a line break is still reported on one line.
        cases.push(bad(
            tool,
            with(&base, "two\nlines", json!(1)),
            "INVALID_ARGUMENTS",
            "two\\nlines",
        ));
        let properties = parameters["properties"].as_object().unwrap();
        for (property, schema) in properties {
            let is_timeout = tool == "wait_agent" && property == "timeout_ms";
            let (code, names) = if is_timeout {
                ("TEAM_INVALID_TIMEOUT", "timeout_ms".to_owned())
            } else {
                ("INVALID_ARGUMENTS", format!("`{property}`"))
            };
            if property.contains('_') {
                let spelled = camel(property);
                cases.push(bad(
                    tool,
                    with(&base, &spelled, base[property].clone()),
                    "INVALID_ARGUMENTS",
                    format!("`{spelled}`"),
                ));
            }
            for value in wrong_types(schema) {
                // A wrong element of an array is named with its index.
                let names = if schema["type"] == "array" && value.is_array() {
                    format!("`{property}[0]`")
                } else {
                    names.clone()
                };
                cases.push(bad(tool, with(&base, property, value), code, names));
            }
            // Just outside each declared bound.
            if let Some(min) = schema["minimum"].as_i64() {
                cases.push(bad(
                    tool,
                    with(&base, property, json!(min - 1)),
                    code,
                    &names,
                ));
            }
            if let Some(max) = schema["maximum"].as_u64() {
                cases.push(bad(
                    tool,
                    with(&base, property, json!(max + 1)),
                    code,
                    &names,
                ));
            }
            if schema.get("enum").is_some() {
                for value in ["unknown", "PENDING", "", "pending\nnow"] {
                    cases.push(bad(tool, with(&base, property, json!(value)), code, &names));
                }
            }
        }
        for required in parameters["required"].as_array().unwrap() {
            let required = required.as_str().unwrap();
            cases.push(bad(
                tool,
                without(&base, required),
                "INVALID_ARGUMENTS",
                format!("missing field `{required}`"),
            ));
        }
    }
    cases
}

/// The value-level part of the matrix for the Lead, against the fixture: `worker` (active,
/// inactive), `broken` (failed); task-1 pending r1, task-2 deleted r2, task-3 in progress
/// owned by `worker` r2, task-4 pending r1 blocked by task-1. The next task id is task-5.
fn lead_value_matrix() -> Vec<Bad> {
    let mut cases = Vec::new();
    let spawn = |name: &str, description: &str, prompt: &str| json!({"name": name, "description": description, "prompt": prompt});
    // spawn_teammate: names (REFERENCE c.1: not trimmed), duplicates in any phase, texts.
    let long_name = "x".repeat(65);
    for name in [
        "",
        "Worker",
        "bad_name",
        "-bad",
        "bad-",
        "a--b",
        " spaced",
        "spaced ",
        "lead",
        "Lead",
        long_name.as_str(),
        "été",
        "a/b",
        "a.b",
        "two\nlines",
    ] {
        cases.push(bad(
            "spawn_teammate",
            spawn(name, "d", "p"),
            "TEAM_INVALID_MEMBER_NAME",
            format!("{name:?}"),
        ));
    }
    for name in ["worker", "broken"] {
        cases.push(bad(
            "spawn_teammate",
            spawn(name, "d", "p"),
            "TEAM_MEMBER_NAME_TAKEN",
            format!("{name:?}"),
        ));
    }
    for description in [
        String::new(),
        "  ".to_owned(),
        "\u{FEFF}\n".to_owned(),
        "x".repeat(201),
        non_bmp_text(201),
    ] {
        cases.push(bad(
            "spawn_teammate",
            spawn("new-one", &description, "p"),
            "TEAM_INVALID_ARGUMENT",
            "description",
        ));
    }
    for prompt in ["", " \n\t"] {
        cases.push(bad(
            "spawn_teammate",
            spawn("new-one", "d", prompt),
            "TEAM_INVALID_ARGUMENT",
            "prompt",
        ));
    }
    // send_message / followup_task: unknown or inactive targets, self, empty and oversized.
    for tool in ["send_message", "followup_task"] {
        for target in [
            "",
            "  ",
            "nobody",
            "Worker",
            "broken",
            "task-1",
            "two\nlines",
        ] {
            cases.push(bad(
                tool,
                json!({"target": target, "message": "hi"}),
                "TEAM_MEMBER_NOT_FOUND",
                format!("{:?}", target.trim()),
            ));
        }
        for target in ["lead", " lead\n"] {
            cases.push(bad(
                tool,
                json!({"target": target, "message": "hi"}),
                "TEAM_SELF_MESSAGE",
                "itself",
            ));
        }
        for message in ["", " \n\t", "\u{FEFF}\u{A0}"] {
            cases.push(bad(
                tool,
                json!({"target": "worker", "message": message}),
                "TEAM_INVALID_ARGUMENT",
                "message",
            ));
        }
        cases.push(bad(
            tool,
            json!({"target": "worker", "message": "x".repeat(70_000)}),
            "TEAM_MESSAGE_TOO_LARGE",
            "65536 bytes",
        ));
    }
    // wait_agent: out of range or not an integer (REFERENCE c.12 step 2).
    for timeout in [
        json!(0),
        json!(9999),
        json!(3_600_001),
        json!(-10000),
        json!(10000.5),
        json!(SAFE_MAX + 1),
        json!(u64::MAX),
        json!(1e300),
        json!("30000"),
    ] {
        cases.push(bad(
            "wait_agent",
            json!({"timeout_ms": timeout}),
            "TEAM_INVALID_TIMEOUT",
            "timeout_ms",
        ));
    }
    // interrupt_agent.
    for target in ["lead", " lead "] {
        cases.push(bad(
            "interrupt_agent",
            json!({"target": target}),
            "TEAM_INVALID_TARGET",
            "interrupt itself",
        ));
    }
    for target in ["", "nobody", "broken", "Worker"] {
        cases.push(bad(
            "interrupt_agent",
            json!({"target": target}),
            "TEAM_MEMBER_NOT_FOUND",
            format!("{target:?}"),
        ));
    }
    // team_task_create: texts (UTF-16 units), blockers, write scopes.
    let create =
        |subject: &str, description: &str| json!({"subject": subject, "description": description});
    for subject in [
        String::new(),
        " ".to_owned(),
        "x".repeat(201),
        non_bmp_text(201),
    ] {
        cases.push(bad(
            "team_task_create",
            create(&subject, "d"),
            "TEAM_INVALID_ARGUMENT",
            "subject",
        ));
    }
    for description in [
        String::new(),
        "\n".to_owned(),
        "x".repeat(16_385),
        non_bmp_text(16_385),
    ] {
        cases.push(bad(
            "team_task_create",
            create("s", &description),
            "TEAM_INVALID_ARGUMENT",
            "description",
        ));
    }
    let unknown_ids = [
        "task-99",
        "task-2",
        "task-0",
        "task-x",
        "7",
        "",
        "TASK-1",
        " task-1",
        "task-01",
        "task-9007199254740992",
        "task-1\n",
    ];
    for id in unknown_ids {
        cases.push(bad(
            "team_task_create",
            json!({"subject": "s", "description": "d", "blocked_by": [id]}),
            "TEAM_TASK_NOT_FOUND",
            format!("{id:?}"),
        ));
    }
    cases.push(bad(
        "team_task_create",
        json!({"subject": "s", "description": "d", "blocked_by": ["task-1", "task-1"]}),
        "TEAM_INVALID_ARGUMENT",
        "blocked_by",
    ));
    cases.push(bad(
        "team_task_create",
        json!({"subject": "s", "description": "d", "blocked_by": ["task-5"]}),
        "TEAM_TASK_DEPENDENCY_CYCLE",
        "task-5",
    ));
    let bad_scopes = [
        "", ".", "..", "./", "/", "/root", "C:\\root", "C:root", "a//b", "a/../b", "../x",
    ];
    for scope in bad_scopes {
        cases.push(bad(
            "team_task_create",
            json!({"subject": "s", "description": "d", "write_scopes": ["src", scope]}),
            "TEAM_INVALID_WRITE_SCOPE",
            format!("{scope:?}"),
        ));
    }
    // team_task_list: malformed cursors and limits (REFERENCE d.4.2: plain errors).
    for cursor in [
        json!(-1),
        json!(SAFE_MAX + 1),
        json!(u64::MAX),
        json!(1e300),
    ] {
        cases.push(bad(
            "team_task_list",
            json!({"cursor": cursor}),
            "INVALID_ARGUMENTS",
            "`cursor`",
        ));
    }
    for limit in [
        json!(0),
        json!(101),
        json!(-1),
        json!(SAFE_MAX + 1),
        json!(2.5),
    ] {
        cases.push(bad(
            "team_task_list",
            json!({"limit": limit}),
            "INVALID_ARGUMENTS",
            "`limit`",
        ));
    }
    cases.push(bad(
        "team_task_list",
        json!({"status": "deleted"}),
        "INVALID_ARGUMENTS",
        "`status`",
    ));
    // team_task_get: malformed and unknown ids.
    for id in unknown_ids.iter().filter(|id| **id != "task-2") {
        cases.push(bad(
            "team_task_get",
            json!({"task_id": id}),
            "TEAM_TASK_NOT_FOUND",
            format!("{id:?}"),
        ));
    }
    // team_task_update: ids, revisions, actions and each action's own arguments.
    let update = |id: &str, revision: Value, action: &str| json!({"task_id": id, "expected_revision": revision, "action": action});
    for id in unknown_ids.iter().filter(|id| **id != "task-2") {
        cases.push(bad(
            "team_task_update",
            update(id, json!(1), "claim"),
            "TEAM_TASK_NOT_FOUND",
            format!("{id:?}"),
        ));
    }
    for revision in [json!(0), json!(-1), json!(SAFE_MAX + 1), json!(u64::MAX)] {
        cases.push(bad(
            "team_task_update",
            update("task-1", revision, "claim"),
            "INVALID_ARGUMENTS",
            "`expected_revision`",
        ));
    }
    for revision in [2, 7, SAFE_MAX] {
        cases.push(bad(
            "team_task_update",
            update("task-1", json!(revision), "claim"),
            "TEAM_TASK_STALE_REVISION",
            format!("not {revision}"),
        ));
    }
    cases.push(bad(
        "team_task_update",
        update("task-1", json!(3), "delete"),
        "TEAM_TASK_STALE_REVISION",
        "stale team task revision",
    ));
    // A tombstone: a stale revision is reported before the deletion (REFERENCE c.11.4).
    cases.push(bad(
        "team_task_update",
        update("task-2", json!(1), "edit"),
        "TEAM_TASK_STALE_REVISION",
        "task-2",
    ));
    cases.push(bad(
        "team_task_update",
        with(&update("task-2", json!(2), "edit"), "subject", json!("s")),
        "TEAM_TASK_DELETED",
        "task-2",
    ));
    for action in ["assign", "Claim", "set-dependencies", "deleted"] {
        cases.push(bad(
            "team_task_update",
            update("task-1", json!(1), action),
            "INVALID_ARGUMENTS",
            "`action`",
        ));
    }
    let edit = update("task-1", json!(1), "edit");
    cases.push(bad(
        "team_task_update",
        edit.clone(),
        "TEAM_INVALID_ARGUMENT",
        "subject, description or write_scopes",
    ));
    cases.push(bad(
        "team_task_update",
        with(&edit, "blocked_by", json!([])),
        "TEAM_INVALID_ARGUMENT",
        "subject, description or write_scopes",
    ));
    for subject in [String::new(), "\t".to_owned(), non_bmp_text(201)] {
        cases.push(bad(
            "team_task_update",
            with(&edit, "subject", json!(subject)),
            "TEAM_INVALID_ARGUMENT",
            "subject",
        ));
    }
    for description in [String::new(), non_bmp_text(16_385)] {
        cases.push(bad(
            "team_task_update",
            with(&edit, "description", json!(description)),
            "TEAM_INVALID_ARGUMENT",
            "description",
        ));
    }
    for scope in bad_scopes {
        cases.push(bad(
            "team_task_update",
            with(&edit, "write_scopes", json!([scope])),
            "TEAM_INVALID_WRITE_SCOPE",
            format!("{scope:?}"),
        ));
    }
    let dependencies = update("task-1", json!(1), "set_dependencies");
    cases.push(bad(
        "team_task_update",
        dependencies.clone(),
        "TEAM_INVALID_ARGUMENT",
        "blocked_by",
    ));
    for (blockers, code, names) in [
        (json!(["task-1"]), "TEAM_TASK_DEPENDENCY_CYCLE", "task-1"),
        (json!(["task-4"]), "TEAM_TASK_DEPENDENCY_CYCLE", "task-4"),
        (
            json!(["task-3", "task-3"]),
            "TEAM_INVALID_ARGUMENT",
            "blocked_by",
        ),
        (json!(["task-2"]), "TEAM_TASK_NOT_FOUND", "\"task-2\""),
        (json!(["task-0"]), "TEAM_TASK_NOT_FOUND", "\"task-0\""),
        (json!(["task-x"]), "TEAM_TASK_NOT_FOUND", "\"task-x\""),
    ] {
        cases.push(bad(
            "team_task_update",
            with(&dependencies, "blocked_by", blockers),
            code,
            names,
        ));
    }
    let reassign = update("task-1", json!(1), "reassign");
    for owner in ["nobody", "broken", "Worker", "task-1"] {
        cases.push(bad(
            "team_task_update",
            with(&reassign, "owner", json!(owner)),
            "TEAM_MEMBER_NOT_FOUND",
            format!("{owner:?}"),
        ));
    }
    cases
}

/// The teammate's matrix (caller `worker`, REFERENCE c.8 step 2, c.11.4, c.13): where the
/// caller matters, the role check comes before value checks, the argument schema before both.
fn teammate_matrix() -> Vec<Bad> {
    vec![
        bad(
            "spawn_teammate",
            json!({"name": "helper", "description": "d", "prompt": "p"}),
            "TEAM_LEAD_REQUIRED",
            "spawn teammates",
        ),
        bad(
            "spawn_teammate",
            json!({"name": "Bad Name", "description": "", "prompt": "p"}),
            "TEAM_LEAD_REQUIRED",
            "spawn teammates",
        ),
        bad(
            "spawn_teammate",
            json!({"name": 5, "description": "d", "prompt": "p"}),
            "INVALID_ARGUMENTS",
            "`name`",
        ),
        bad(
            "interrupt_agent",
            json!({"target": "lead"}),
            "TEAM_LEAD_REQUIRED",
            "interrupt teammates",
        ),
        bad(
            "interrupt_agent",
            json!({"target": "nobody"}),
            "TEAM_LEAD_REQUIRED",
            "interrupt teammates",
        ),
        bad(
            "interrupt_agent",
            json!({}),
            "INVALID_ARGUMENTS",
            "`target`",
        ),
        bad(
            "send_message",
            json!({"target": "worker", "message": "me"}),
            "TEAM_SELF_MESSAGE",
            "worker",
        ),
        bad(
            "followup_task",
            json!({"target": " worker ", "message": "me"}),
            "TEAM_SELF_MESSAGE",
            "worker",
        ),
        bad(
            "send_message",
            json!({"target": "lead", "message": " "}),
            "TEAM_INVALID_ARGUMENT",
            "message",
        ),
        bad(
            "followup_task",
            json!({"target": "nobody", "message": "x"}),
            "TEAM_MEMBER_NOT_FOUND",
            "\"nobody\"",
        ),
        bad(
            "wait_agent",
            json!({"timeout_ms": 9999}),
            "TEAM_INVALID_TIMEOUT",
            "timeout_ms",
        ),
        bad(
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 1, "action": "reassign", "owner": "worker"}),
            "TEAM_LEAD_REQUIRED",
            "reassign",
        ),
        bad(
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 1, "action": "edit", "subject": "mine"}),
            "TEAM_TASK_UNAUTHORIZED",
            "task-1",
        ),
        bad(
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 9, "action": "edit", "subject": "mine"}),
            "TEAM_TASK_STALE_REVISION",
            "not 9",
        ),
        bad(
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 0, "action": "claim"}),
            "INVALID_ARGUMENTS",
            "`expected_revision`",
        ),
        bad(
            "team_task_create",
            json!({"subject": "", "description": "d"}),
            "TEAM_INVALID_ARGUMENT",
            "subject",
        ),
        bad(
            "team_task_get",
            json!({"task_id": "task-0"}),
            "TEAM_TASK_NOT_FOUND",
            "\"task-0\"",
        ),
        bad(
            "team_task_list",
            json!({"limit": 0}),
            "INVALID_ARGUMENTS",
            "`limit`",
        ),
        bad(
            "list_agents",
            json!({"all": true}),
            "INVALID_ARGUMENTS",
            "`all`",
        ),
        bad("list_agents", json!([]), "INVALID_ARGUMENTS", "JSON object"),
    ]
}

/// Checks each result against its case: an error, the expected code (in the content and on
/// the `tool/result` event), a one-line message starting `Error: ` naming the argument.
fn check_results(h: &Harness, id: &SessionId, first: usize, cases: &[Bad]) {
    let results = tool_results(h, id).split_off(first);
    let codes: Vec<Option<String>> = h
        .events(id)
        .into_iter()
        .filter(|e| e.kind == "tool/result")
        .map(|e| e.data["code"].as_str().map(str::to_owned))
        .skip(first)
        .collect();
    assert_eq!(results.len(), cases.len(), "one result per case");
    let mut failures = Vec::new();
    for ((case, (name, is_error, value)), code) in cases.iter().zip(&results).zip(&codes) {
        assert_eq!(name, case.tool);
        let message = value["message"].as_str().unwrap_or_default();
        let ok = *is_error
            && value["code"] == case.code
            && code.as_deref() == Some(case.code)
            && message.starts_with("Error: ")
            && !message.contains(['\n', '\r', '\u{2028}', '\u{2029}'])
            && message.contains(&case.names);
        if !ok {
            let mut shown = value.to_string();
            if shown.len() > 300 {
                shown = format!("{}…", shown.chars().take(300).collect::<String>());
            }
            let mut args = case.args.to_string();
            if args.len() > 200 {
                args = format!("{}…", args.chars().take(200).collect::<String>());
            }
            failures.push(format!(
                "{} {args}: want {} naming {:?}, got {shown}",
                case.tool, case.code, case.names
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// A task view without `stalled.idleMs` (the time since its owner's last event, which grows
/// with the clock; `reason` and `since` stay).
fn without_idle_time(task: &mut Value) {
    if let Some(stalled) = task.get_mut("stalled").and_then(Value::as_object_mut) {
        stalled.remove("idleMs");
    }
}

/// Everything Team-level a bad call must leave unchanged.
#[derive(Debug, PartialEq)]
struct TeamSnapshot {
    /// `team/*` events of the Lead log (type and payload).
    team_events: Vec<(String, Value)>,
    /// Stored session ids.
    sessions: BTreeSet<String>,
    /// Roster, board (with tombstones) and each task as the live service shows them.
    members: Value,
    tasks: Value,
    each_task: Vec<Value>,
}

async fn team_snapshot(h: &Harness, lead: &Agent) -> TeamSnapshot {
    let team_events = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind.starts_with("team/"))
        .map(|e| (e.kind, e.data))
        .collect();
    let sessions = h
        .journal()
        .list(&mut |e| panic!("{e}"))
        .unwrap()
        .into_iter()
        .map(|l| l.header.id.to_string())
        .collect();
    let members =
        serde_json::to_value(h.runtime.teams().list_members(lead).await.unwrap()).unwrap();
    let query = TaskListQuery {
        limit: 100,
        ..TaskListQuery::default()
    };
    let mut tasks =
        serde_json::to_value(h.runtime.teams().list_tasks(lead, &query).await.unwrap()).unwrap();
    // The Lead's one-time stall notice goes with the first list only, and how long a stalled
    // owner has been idle grows with the clock: neither is a change of the board.
    if let Some(page) = tasks.as_object_mut() {
        page.remove("stallNotice");
    }
    for task in tasks["tasks"].as_array_mut().into_iter().flatten() {
        without_idle_time(task);
    }
    let mut each_task = Vec::new();
    for n in 1..=4 {
        let view = h
            .runtime
            .teams()
            .get_task(lead, &format!("task-{n}"))
            .await
            .unwrap();
        let mut view = serde_json::to_value(view).unwrap();
        without_idle_time(&mut view);
        each_task.push(view);
    }
    TeamSnapshot {
        team_events,
        sessions,
        members,
        tasks,
        each_task,
    }
}

fn task(subject: &str, blocked_by: &[&str]) -> CreateTask {
    CreateTask {
        subject: subject.into(),
        description: "d".into(),
        blocked_by: blocked_by.iter().map(|s| (*s).to_owned()).collect(),
        write_scopes: vec!["src".into()],
    }
}

/// The fixture of [`lead_value_matrix`]; `worker_steps` is the teammate's first turn. Returns
/// the Lead and the worker's id once the worker has settled.
async fn fixture(h: &Harness, worker_steps: Vec<Step>) -> (Agent, SessionId) {
    let lead = h.team_lead().await;
    for (subject, blockers) in [
        ("one", &[][..]),
        ("two", &[]),
        ("three", &[]),
        ("four", &["task-1"]),
    ] {
        h.runtime
            .teams()
            .create_task(&lead, &task(subject, blockers))
            .await
            .unwrap();
    }
    h.runtime
        .teams()
        .update_task(&lead, &UpdateTask::new("task-2", 1, TaskAction::Delete))
        .await
        .unwrap();
    let worker = spawn(h, &lead, "worker", worker_steps).await;
    settled(h, &worker).await;
    let mut reassign = UpdateTask::new("task-3", 1, TaskAction::Reassign);
    reassign.owner = Some("worker".into());
    h.runtime
        .teams()
        .update_task(&lead, &reassign)
        .await
        .unwrap();
    h.models.refuse.lock().unwrap().push("broken".into());
    assert!(
        h.runtime
            .teams()
            .spawn(&lead, "broken", "d", "p", MemberContext::Fresh, None)
            .await
            .is_err()
    );
    (lead, worker)
}

/// The whole matrix through one Lead turn per tool: every case is an error with the REFERENCE
/// code and a one-line `Error: ` message naming the argument, and nothing Team-level changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_argument_of_every_team_tool_is_refused_and_appends_nothing() {
    let h = Harness::new();
    let (lead, worker) = fixture(&h, vec![text("ready")]).await;
    // The schemas exactly as the model is shown them.
    lead_turn(&h, &lead, vec![]).await;
    let request = h.models.model("lead").requests().last().cloned().unwrap();
    let specs: Vec<(String, Value)> = request
        .tools
        .iter()
        .filter(|t| troupe_runtime::team::TEAM_TOOL_NAMES.contains(&t.name.as_str()))
        .map(|t| (t.name.clone(), t.parameters.clone()))
        .collect();
    assert_eq!(specs.len(), 10);
    let mut cases = schema_matrix(&specs);
    cases.extend(lead_value_matrix());
    for tool in troupe_runtime::team::TEAM_TOOL_NAMES {
        assert!(
            cases.iter().any(|c| c.tool == tool),
            "{tool} has no bad-input case"
        );
    }

    let before = team_snapshot(&h, &lead).await;
    let worker_events = h.events(&worker).len();
    let lead_seq = h.events(lead.id()).len();
    let first = tool_results(&h, lead.id()).len();
    // One model step per tool, its calls run one after another.
    let mut steps: Vec<Step> = Vec::new();
    for tool in troupe_runtime::team::TEAM_TOOL_NAMES {
        let calls: Vec<(String, Value)> = cases
            .iter()
            .filter(|c| c.tool == tool)
            .map(|c| (c.tool.to_owned(), c.args.clone()))
            .collect();
        steps.push(Step::Calls(calls));
    }
    let ordered: Vec<Bad> = troupe_runtime::team::TEAM_TOOL_NAMES
        .iter()
        .flat_map(|tool| cases.iter().filter(move |c| c.tool == *tool).cloned())
        .collect();
    lead_turn(&h, &lead, steps).await;
    check_results(&h, lead.id(), first, &ordered);

    // Nothing Team-level was appended or changed.
    assert_eq!(team_snapshot(&h, &lead).await, before);
    let turn: Vec<String> = h.events(lead.id())[lead_seq..]
        .iter()
        .map(|e| e.kind.clone())
        .collect();
    let kinds: BTreeSet<&str> = turn.iter().map(String::as_str).collect();
    assert!(
        kinds.iter().all(|k| !k.starts_with("team/")),
        "Team events appended: {kinds:?}"
    );
    assert_eq!(h.events(&worker).len(), worker_events, "worker log changed");
    assert!(h.runtime.agent(&worker).is_none(), "the worker was woken");
    h.runtime.shutdown().await.unwrap();
}

/// The teammate's side: the role check precedes value checks, the schema precedes both, and
/// a teammate's bad calls append nothing to the Lead log either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammates_bad_calls_are_refused_in_role_order_and_append_nothing() {
    let h = Harness::new();
    let cases = teammate_matrix();
    let mut steps: Vec<Step> = cases
        .iter()
        .map(|c| Step::Calls(vec![(c.tool.to_owned(), c.args.clone())]))
        .collect();
    steps.push(text("done"));
    let (lead, worker) = fixture(&h, steps).await;
    check_results(&h, &worker, 0, &cases);
    // The Lead log holds exactly the fixture's Team events: four creates, a delete, the
    // worker's provisioning and active records, the reassign, and `broken`'s two records.
    let team_kinds: Vec<String> = h
        .events(lead.id())
        .into_iter()
        .filter(|e| e.kind.starts_with("team/"))
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        team_kinds,
        [
            "team/task",
            "team/task",
            "team/task",
            "team/task",
            "team/task",
            "team/member",
            "team/member",
            "team/task",
            "team/member",
            "team/member"
        ]
    );
    // No message reached anyone: the Lead log has no inbox item from the worker.
    assert!(
        !h.events(lead.id())
            .iter()
            .any(|e| e.data.to_string().contains("team-message")),
        "a Team message reached the Lead"
    );
    h.runtime.shutdown().await.unwrap();
}

/// The limits are counted exactly: UTF-16 units for texts (a non-BMP character counts two)
/// and UTF-8 bytes of the framed JSON for messages. One unit or byte over is refused and
/// appends nothing; exactly the limit is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_and_message_limits_are_exact_at_the_boundary() {
    let h = Harness::with_limits(troupe_team::TeamLimits {
        max_message_bytes: 512,
        ..troupe_team::TeamLimits::default()
    });
    let lead = h.team_lead().await;
    let worker = spawn(&h, &lead, "worker", vec![text("ready")]).await;
    settled(&h, &worker).await;
    // The framed size of a message with text `t` from `lead`: the header block, then the text
    // block (REFERENCE c.10.2, c.15).
    let framed = |t: &str| {
        let snapshot = troupe_team::MessageSnapshot {
            id: troupe_team::team_message_id("00000000-0000-4000-8000-000000000000").unwrap(),
            sender_id: lead.id().clone(),
            sender_name: "lead".into(),
            target_id: worker.clone(),
            delivery: Delivery::Quiet,
            content: vec![json!({"type": "text", "text": t})],
        };
        troupe_team::framed_size(&troupe_team::TeamId::new(lead.id().clone()), &snapshot)
    };
    let base = framed("");
    // Fill with ASCII, then end with a four-byte character so the boundary falls on it.
    let fill = |bytes: u64| format!("{}\u{1F600}", "x".repeat((bytes - base - 4) as usize));
    let (exact, over) = (fill(512), fill(513));
    assert_eq!((framed(&exact), framed(&over)), (512, 513));
    let r = lead_turn(
        &h,
        &lead,
        vec![
            call("send_message", json!({"target": "worker", "message": over})),
            call(
                "team_task_create",
                json!({"subject": non_bmp_text(201), "description": non_bmp_text(16_385)}),
            ),
            call(
                "spawn_teammate",
                json!({"name": "w2", "description": non_bmp_text(201), "prompt": "p"}),
            ),
        ],
    )
    .await;
    assert_eq!(r[0].2["code"], "TEAM_MESSAGE_TOO_LARGE", "{:?}", r[0]);
    assert_eq!(
        r[0].2["message"],
        "Error: team message is 513 bytes once framed; the limit is 512 bytes"
    );
    assert_eq!(r[1].2["code"], "TEAM_INVALID_ARGUMENT", "{:?}", r[1]);
    assert!(r[1].2["message"].as_str().unwrap().contains("got 201"));
    assert_eq!(r[2].2["code"], "TEAM_INVALID_ARGUMENT", "{:?}", r[2]);
    let state = super::team::fold(&h, lead.id());
    assert_eq!(state.messages().len(), 0);
    assert_eq!(state.members().len(), 1);
    assert_eq!(state.next_task_number(), 1);

    // Exactly the limits: accepted.
    h.models.model("w2").push([text("ok")]);
    let r = lead_turn(
        &h,
        &lead,
        vec![
            call("send_message", json!({"target": "worker", "message": exact})),
            call(
                "team_task_create",
                json!({"subject": format!(" {} ", non_bmp_text(200)), "description": non_bmp_text(16_384)}),
            ),
            call(
                "spawn_teammate",
                json!({"name": "w2", "description": non_bmp_text(200), "prompt": "p"}),
            ),
        ],
    )
    .await;
    assert!(r.iter().all(|(_, is_error, _)| !is_error), "{r:?}");
    assert_eq!(r[1].2["subject"], non_bmp_text(200), "stored trimmed");
    let state = super::team::fold(&h, lead.id());
    assert_eq!(state.messages().len(), 1);
    assert_eq!(state.members().len(), 2);
    h.runtime.shutdown().await.unwrap();
}

/// Integers are JSON Schema integers: a number without a fractional part is accepted in any
/// spelling (`10000.0`, `1e1`), as the original's JavaScript numbers are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integral_numbers_are_integers_in_any_spelling() {
    let h = Harness::new();
    let lead = h.team_lead().await;
    h.runtime
        .teams()
        .create_task(&lead, &task("one", &[]))
        .await
        .unwrap();
    let r = lead_turn(
        &h,
        &lead,
        vec![
            call("wait_agent", json!({"timeout_ms": 10000.0})),
            call("team_task_list", json!({"cursor": 0.0, "limit": 1e1})),
            call(
                "team_task_update",
                json!({"task_id": "task-1", "expected_revision": 1.0, "action": "claim"}),
            ),
        ],
    )
    .await;
    assert!(r.iter().all(|(_, is_error, _)| !is_error), "{r:?}");
    assert_eq!(r[0].2["noProgress"]["reason"], "no-active-peer");
    assert_eq!(r[1].2["tasks"][0]["id"], "task-1");
    assert_eq!(r[2].2["revision"], 2);
    h.runtime.shutdown().await.unwrap();
}

#[test]
fn camel_spelling() {
    assert_eq!(camel("expected_revision"), "expectedRevision");
    assert_eq!(camel("task_id"), "taskId");
}
