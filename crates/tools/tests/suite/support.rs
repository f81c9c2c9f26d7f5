//! Shared fixtures: a temp workspace, contexts per owner, dispatch helpers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tempfile::TempDir;
use troupe_protocol::{ErrorCode, SessionId};
use troupe_tools::{
    FileObservations, ToolContext, ToolError, ToolLimits, ToolOutcome, ToolRegistry, render_outcome,
};

/// A temporary workspace with one shared observation store, as a team would have.
pub struct Workspace {
    pub dir: TempDir,
    pub observations: Arc<FileObservations>,
    pub registry: ToolRegistry,
}

impl Workspace {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            observations: Arc::new(FileObservations::new()),
            registry: ToolRegistry::with_core_tools(),
        }
    }

    /// The canonical root.
    pub fn root(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).expect("canonical root")
    }

    /// An absolute path inside the workspace.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.root().join(relative)
    }

    /// Writes a file directly (an "external" writer, bypassing the tools).
    pub fn put(&self, relative: &str, content: impl AsRef<[u8]>) {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(path, content).expect("write fixture file");
    }

    pub fn get(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative)).expect("read file")
    }

    /// The context of the agent whose session id is `owner`.
    pub fn ctx(&self, owner: &str) -> ToolContext {
        ToolContext::new(
            self.dir.path(),
            SessionId::new(owner).expect("session id"),
            Arc::clone(&self.observations),
        )
        .expect("context")
    }

    pub fn ctx_with_limits(&self, owner: &str, limits: ToolLimits) -> ToolContext {
        self.ctx(owner).with_limits(limits)
    }

    /// Dispatches a call with JSON arguments through the core registry.
    pub async fn call(&self, ctx: &ToolContext, name: &str, args: Value) -> ToolOutcome {
        let outcome = self.registry.dispatch(ctx, name, args).await;
        assert_compact(&outcome);
        if let Ok(value) = &outcome {
            assert_conforms(&self.registry, name, value);
        }
        outcome
    }
}

/// The successful value, or a panic showing the error.
#[track_caller]
pub fn ok(outcome: ToolOutcome) -> Value {
    match outcome {
        Ok(value) => value,
        Err(error) => panic!("expected success, got {}", error.to_json()),
    }
}

/// The error, or a panic showing the value.
#[track_caller]
pub fn err(outcome: ToolOutcome) -> ToolError {
    match outcome {
        Ok(value) => panic!("expected an error, got {value}"),
        Err(error) => error,
    }
}

/// The error code, or a panic showing the value.
#[track_caller]
pub fn code(outcome: ToolOutcome) -> &'static str {
    err(outcome).code()
}

/// The model-facing text is compact JSON: re-serializing its parse gives the same string.
#[track_caller]
pub fn assert_compact(outcome: &ToolOutcome) {
    let text = render_outcome(outcome);
    let parsed: Value = serde_json::from_str(&text).expect("outcome text is JSON");
    assert_eq!(serde_json::to_string(&parsed).expect("serialize"), text);
    if let Err(error) = outcome {
        let object = parsed.as_object().expect("error is an object");
        assert_eq!(
            object.len(),
            2,
            "error has exactly code and message: {text}"
        );
        assert_eq!(parsed["code"], error.code());
    }
}

/// A successful result matches the tool's declared output schema: required keys present, no
/// keys outside `properties` (the schemas use `additionalProperties: false`).
#[track_caller]
pub fn assert_conforms(registry: &ToolRegistry, name: &str, value: &Value) {
    let Some(tool) = registry.get(name) else {
        return;
    };
    let Some(schema) = tool.output_schema() else {
        return;
    };
    let object = value.as_object().expect("result is an object");
    let properties = schema["properties"].as_object().expect("schema properties");
    for required in schema["required"].as_array().expect("schema required") {
        let key = required.as_str().expect("required key");
        assert!(
            object.contains_key(key),
            "{name} result lacks {key}: {value}"
        );
    }
    for key in object.keys() {
        assert!(
            properties.contains_key(key),
            "{name} result has undeclared {key}: {value}"
        );
    }
}

/// Whether process `pid` is gone (no entry, or a zombie nobody reaped yet).
pub fn process_is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            // The state is the first field after the parenthesized command name.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('Z') || state.starts_with('X')
        }
    }
}

/// Waits up to 5 s for `pid` to be gone.
pub async fn wait_gone(pid: u32) -> bool {
    for _ in 0..100 {
        if process_is_gone(pid) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

/// Lists the names in a directory, sorted.
pub fn dir_names(path: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .expect("read dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}
