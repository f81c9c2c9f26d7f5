//! The registry: registration, specs, dispatch, argument validation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use troupe_protocol::ErrorCode;
use troupe_tools::{
    Tool, ToolArguments, ToolContext, ToolError, ToolFuture, ToolRegistry, parse_arguments,
    render_outcome,
};

use super::support::{Workspace, err, ok};

/// A tool defined outside the crate, with its own error code; counts its calls.
#[derive(Default)]
struct Counter {
    calls: AtomicUsize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CounterArgs {
    step: u32,
}

impl Tool for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    fn description(&self) -> &str {
        "Counts."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"step": {"type": "integer"}}, "required": ["step"], "additionalProperties": false})
    }
    fn call<'a>(&'a self, _ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: CounterArgs = parse_arguments(args)?;
            if args.step == 0 {
                return Err(ToolError::other(
                    "COUNTER_ZERO_STEP",
                    "step must not be zero",
                ));
            }
            let total = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(json!({"calls": total}))
        })
    }
}

#[test]
fn core_registry_lists_the_six_tools_in_a_stable_order() {
    let registry = ToolRegistry::with_core_tools();
    assert_eq!(
        registry.names(),
        vec!["read", "write", "edit", "glob", "grep", "bash"]
    );
    let specs = registry.specs();
    assert_eq!(specs.len(), 6);
    assert_eq!(specs, ToolRegistry::with_core_tools().specs());
    let expected_properties: [(&str, &[&str]); 6] = [
        ("read", &["path", "offset", "limit"]),
        ("write", &["path", "content"]),
        ("edit", &["path", "old_string", "new_string", "replace_all"]),
        ("glob", &["pattern", "path"]),
        ("grep", &["pattern", "path", "glob"]),
        ("bash", &["command", "timeout_ms"]),
    ];
    for (spec, (name, properties)) in specs.iter().zip(expected_properties) {
        assert_eq!(spec.name, name);
        assert!(!spec.description.is_empty());
        let schema = &spec.parameters;
        assert_eq!(schema["type"], "object", "{name}");
        assert_eq!(schema["additionalProperties"], false, "{name}");
        let keys: Vec<&str> = schema["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(String::as_str)
            .collect();
        let mut sorted_expected = properties.to_vec();
        sorted_expected.sort_unstable();
        let mut sorted_keys = keys.clone();
        sorted_keys.sort_unstable();
        assert_eq!(sorted_keys, sorted_expected, "{name}");
        for key in keys {
            assert!(
                key.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{key}"
            );
        }
        for required in schema["required"].as_array().expect("required") {
            assert!(
                properties.contains(&required.as_str().expect("str")),
                "{name}"
            );
        }
        let output = spec
            .output_schema
            .as_ref()
            .expect("core tools declare outputs");
        assert_eq!(output["type"], "object");
    }
    // Specs serialize compactly with snake_case keys.
    let text = serde_json::to_string(&specs[0]).expect("spec json");
    assert!(
        text.starts_with(r#"{"name":"read","description":"#),
        "{text}"
    );
    assert!(text.contains(r#""output_schema":"#));
}

#[test]
fn duplicate_and_invalid_names_are_refused() {
    let mut registry = ToolRegistry::with_core_tools();
    let duplicate = registry
        .register(Arc::new(troupe_tools::ReadTool))
        .expect_err("duplicate");
    assert_eq!(duplicate.code(), "DUPLICATE_TOOL");
    assert!(
        duplicate.to_string().contains("already registered"),
        "{duplicate}"
    );
    assert_eq!(duplicate.to_string(), "tool \"read\" is already registered");

    struct Named(&'static str);
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            ""
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        }
        fn call<'a>(&'a self, _ctx: &'a ToolContext, _args: Value) -> ToolFuture<'a> {
            Box::pin(async { Ok(json!({})) })
        }
    }
    for bad in ["", "has space", "dot.ted", &"x".repeat(65)] {
        let name: &'static str = Box::leak(bad.to_owned().into_boxed_str());
        let error = registry
            .register(Arc::new(Named(name)))
            .expect_err("invalid");
        assert_eq!(error.code(), "INVALID_TOOL_NAME", "{bad:?}");
    }
    registry
        .register(Arc::new(Named("team_task-list2")))
        .expect("valid name");
    assert_eq!(registry.len(), 7);
}

#[test]
fn remove_and_lookup() {
    let mut registry = ToolRegistry::with_core_tools();
    assert!(registry.get("bash").is_some());
    let removed = registry.remove("bash").expect("removed");
    assert_eq!(removed.name(), "bash");
    assert!(registry.get("bash").is_none());
    assert!(registry.remove("bash").is_none());
    assert_eq!(
        registry.names(),
        vec!["read", "write", "edit", "glob", "grep"]
    );
    // Re-registering puts it at the end.
    registry.register(removed).expect("register again");
    assert_eq!(registry.names().last(), Some(&"bash"));
    assert!(ToolRegistry::new().is_empty());
}

#[tokio::test]
async fn unknown_tool_is_a_tool_error() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let outcome = ws.registry.dispatch(&ctx, "nope", "{}").await;
    assert_eq!(
        render_outcome(&outcome),
        r#"{"code":"UNKNOWN_TOOL","message":"unknown tool \"nope\""}"#
    );
}

#[tokio::test]
async fn malformed_arguments_are_invalid_arguments_naming_the_field() {
    let ws = Workspace::new();
    ws.put("a.txt", "x");
    let ctx = ws.ctx("alpha");
    let cases: [(&str, ToolArguments, &str); 10] = [
        ("read", r#"{"path": "a.txt""#.into(), "not valid JSON"),
        (
            "read",
            "[1, 2]".into(),
            "must be a JSON object, got an array",
        ),
        (
            "read",
            "\"a.txt\"".into(),
            "must be a JSON object, got a string",
        ),
        ("read", "".into(), "missing field `path`"),
        ("read", json!({"path": 5}).into(), "`path`"),
        (
            "read",
            json!({"path": "a.txt", "offset": "2"}).into(),
            "`offset`",
        ),
        (
            "read",
            json!({"path": "a.txt", "lines": 2}).into(),
            "unknown field `lines`",
        ),
        (
            "edit",
            json!({"path": "a.txt", "old_string": "x"}).into(),
            "missing field `new_string`",
        ),
        // Names and values the model sent stay on one line, escaped.
        (
            "read",
            json!({"path": "a.txt", "two\nlines": 1}).into(),
            "invalid arguments: unknown field `two\\nlines`, expected one of",
        ),
        (
            "edit",
            json!({"path": "a.txt", "old_string": "x", "new_string": "y", "replace_all": "a\u{2028}b"}).into(),
            "field `replace_all`: invalid type: string \"a\\u{2028}b\", expected a boolean",
        ),
    ];
    for (tool, arguments, fragment) in cases {
        let shown = format!("{arguments:?}");
        let error = err(ws.registry.dispatch(&ctx, tool, arguments).await);
        assert_eq!(error.code(), "INVALID_ARGUMENTS", "{shown}");
        assert!(error.to_string().contains(fragment), "{shown}: {error}");
        assert!(!error.to_string().contains(['\n', '\u{2028}']), "{error}");
    }
}

#[tokio::test]
async fn raw_string_arguments_and_custom_tools_dispatch() {
    let ws = Workspace::new();
    ws.put("a.txt", "hello\n");
    let ctx = ws.ctx("alpha");
    let mut registry = ws.registry.clone();
    let counter = Arc::new(Counter::default());
    registry.register(counter.clone()).expect("register");
    let read = ok(registry
        .dispatch(&ctx, "read", String::from(r#"{"path":"a.txt"}"#))
        .await);
    assert_eq!(read["content"], "hello\n");
    assert_eq!(
        ok(registry.dispatch(&ctx, "counter", json!({"step": 1})).await),
        json!({"calls": 1})
    );
    let custom = err(registry.dispatch(&ctx, "counter", r#"{"step":0}"#).await);
    assert_eq!(
        custom.to_json(),
        json!({"code": "COUNTER_ZERO_STEP", "message": "step must not be zero"})
    );
    assert_eq!(
        err(registry.dispatch(&ctx, "counter", r#"{"step":-1}"#).await).code(),
        "INVALID_ARGUMENTS"
    );

    // A canceled context refuses to start the tool.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let canceled = ctx.clone().with_cancellation(cancel);
    assert_eq!(
        err(registry
            .dispatch(&canceled, "counter", json!({"step": 1}))
            .await)
        .code(),
        "TOOL_CANCELED"
    );
    assert_eq!(counter.calls.load(Ordering::SeqCst), 1);
    // The per-agent registry is independent of the one it was cloned from.
    assert!(ws.registry.get("counter").is_none());
}

/// A tool whose failures all read `Error: …` (as the Team tools' do, REFERENCE d.2).
struct Prefixed;

impl Tool for Prefixed {
    fn name(&self) -> &str {
        "prefixed"
    }
    fn description(&self) -> &str {
        "Fails in its own form."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }
    fn call<'a>(&'a self, _ctx: &'a ToolContext, _args: Value) -> ToolFuture<'a> {
        Box::pin(async { Err(ToolError::other("PREFIXED_RAN", "Error: it ran")) })
    }
    fn shape_error(&self, error: ToolError) -> ToolError {
        ToolError::other(error.code(), format!("Error: {error}"))
    }
}

#[tokio::test]
async fn refusals_before_a_known_tool_runs_take_its_shape() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let mut registry = ws.registry.clone();
    registry.register(Arc::new(Prefixed)).expect("register");
    for (arguments, message) in [
        (
            ToolArguments::from("[]"),
            "Error: invalid arguments: arguments must be a JSON object, got an array",
        ),
        (
            ToolArguments::from(json!(null)),
            "Error: invalid arguments: arguments must be a JSON object, got null",
        ),
        (
            ToolArguments::from("{"),
            "Error: invalid arguments: arguments are not valid JSON: EOF while parsing an object at line 1 column 1",
        ),
    ] {
        for text in [false, true] {
            let error = if text {
                registry
                    .dispatch_text(&ctx, "prefixed", arguments.clone())
                    .await
                    .expect_err("refused")
            } else {
                err(registry.dispatch(&ctx, "prefixed", arguments.clone()).await)
            };
            assert_eq!(error.code(), "INVALID_ARGUMENTS");
            assert_eq!(error.to_string(), message);
        }
    }
    let cancel = CancellationToken::new();
    cancel.cancel();
    let canceled = ctx.clone().with_cancellation(cancel);
    let error = err(registry.dispatch(&canceled, "prefixed", json!({})).await);
    assert_eq!(error.code(), "TOOL_CANCELED");
    assert!(error.to_string().starts_with("Error: "), "{error}");
    // Other tools keep the plain form; an unknown tool has no shape to take.
    let plain = err(registry.dispatch(&ctx, "read", "[]").await);
    assert!(
        plain.to_string().starts_with("invalid arguments: "),
        "{plain}"
    );
    let unknown = err(registry.dispatch(&ctx, "nope", "[]").await);
    assert_eq!(unknown.to_string(), "unknown tool \"nope\"");
}

#[test]
fn context_requires_an_existing_directory() {
    let observations = Arc::new(troupe_tools::FileObservations::new());
    let owner = troupe_protocol::SessionId::new("alpha").expect("id");
    let missing = ToolContext::new("/no/such/workspace", owner.clone(), observations.clone())
        .expect_err("missing");
    assert_eq!(missing.code(), "FS_NOT_FOUND");
    let file = tempfile::NamedTempFile::new().expect("file");
    let not_dir = ToolContext::new(file.path(), owner, observations).expect_err("file");
    assert_eq!(not_dir.code(), "FS_NOT_A_DIRECTORY");
}
