//! The [`Tool`] trait, its spec, and argument parsing.

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::ToolContext;
use crate::effect::FilePlan;
use crate::error::ToolError;

/// The result of one tool call: a compact JSON value on success, a [`ToolError`] otherwise.
///
/// Render it for the model with [`render_outcome`].
pub type ToolOutcome = Result<Value, ToolError>;

/// The boxed future a [`Tool::call`] returns. Boxing keeps [`Tool`] object safe, so a
/// registry can hold `Arc<dyn Tool>`.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolOutcome> + Send + 'a>>;

/// The result of one tool call already rendered for the model: the compact JSON text of the
/// result on success (see [`Tool::call_text`]), a [`ToolError`] otherwise.
pub type TextOutcome = Result<String, ToolError>;

/// The boxed future [`Tool::call_text`] returns.
pub type TextFuture<'a> = Pin<Box<dyn Future<Output = TextOutcome> + Send + 'a>>;

/// The boxed future [`Tool::plan`] returns: the call's [`FilePlan`], or the error the call
/// itself would return (it would have no effect).
pub type PlanFuture<'a> = Pin<Box<dyn Future<Output = Result<FilePlan, ToolError>> + Send + 'a>>;

/// A tool the model can call.
///
/// A tool is stateless with respect to the caller: everything per-agent (workspace, owner
/// session, file observations, cancellation, limits) comes through the [`ToolContext`].
///
/// Conventions every implementation follows:
/// - [`parameters`](Tool::parameters) is a JSON schema of an object with snake_case property
///   names and `"additionalProperties": false`;
/// - [`call`](Tool::call) parses its arguments with [`parse_arguments`] into a typed struct
///   that uses `#[serde(deny_unknown_fields)]`, so malformed arguments fail with
///   `INVALID_ARGUMENTS` naming the field;
/// - results are small JSON values (the runtime serializes them compactly);
/// - failures are [`ToolError`]s with stable codes, never panics.
///
/// # Example
/// ```
/// use serde::Deserialize;
/// use serde_json::{Value, json};
/// use troupe_tools::{Tool, ToolContext, ToolFuture, parse_arguments};
///
/// struct Echo;
///
/// #[derive(Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct EchoArgs {
///     text: String,
/// }
///
/// impl Tool for Echo {
///     fn name(&self) -> &str {
///         "echo"
///     }
///     fn description(&self) -> &str {
///         "Returns its argument."
///     }
///     fn parameters(&self) -> Value {
///         json!({
///             "type": "object",
///             "properties": { "text": { "type": "string" } },
///             "required": ["text"],
///             "additionalProperties": false
///         })
///     }
///     fn call<'a>(&'a self, _ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
///         Box::pin(async move {
///             let args: EchoArgs = parse_arguments(args)?;
///             Ok(json!({ "text": args.text }))
///         })
///     }
/// }
/// ```
pub trait Tool: Send + Sync {
    /// The name the model calls the tool by: 1–64 characters of `[A-Za-z0-9_-]`.
    fn name(&self) -> &str;

    /// What the tool does, for the model.
    fn description(&self) -> &str;

    /// The JSON schema of the arguments (an object schema, `additionalProperties: false`).
    fn parameters(&self) -> Value;

    /// The JSON schema of a successful result, if the tool declares one. Defaults to none.
    fn output_schema(&self) -> Option<Value> {
        None
    }

    /// Runs the tool with already-parsed JSON arguments (a JSON object when called through
    /// [`ToolRegistry::dispatch`](crate::ToolRegistry::dispatch)).
    ///
    /// Implementations honour `ctx.cancellation()`: long-running work stops and returns
    /// [`ToolError::Canceled`] once it is canceled.
    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a>;

    /// Runs the tool like [`Tool::call`] and renders its success as the compact JSON text the
    /// model sees. The default renders [`Tool::call`]'s value (object keys then come out in
    /// `serde_json`'s sorted order); a tool whose output has a declared key order (its output
    /// schema's) overrides this to serialize its typed result directly, keeping that order.
    /// The runtime calls this, through [`ToolRegistry::dispatch_text`](crate::ToolRegistry::dispatch_text).
    ///
    /// # Errors
    /// As [`Tool::call`].
    fn call_text<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> TextFuture<'a> {
        Box::pin(async move { self.call(ctx, args).await.map(|value| value.to_string()) })
    }

    /// Gives an error the registry raises for this tool *before* calling it (arguments that
    /// are not a JSON object, a call whose context is already cancelled) the tool's own form,
    /// so every failure of the tool reads alike to the model. The default returns `error`
    /// unchanged; the Team tools prefix `Error: ` as they do for their own failures
    /// (REFERENCE d.2). Keep the code: only the message may change.
    fn shape_error(&self, error: ToolError) -> ToolError {
        error
    }

    /// For a tool whose whole effect is one file's content (`write`, `edit`): decides that
    /// effect without causing it (DESIGN decision 10). `Some` future for such a tool, `None`
    /// (the default) for every other. The future resolves to the call's [`FilePlan`] — whose
    /// [`FileEffect`](crate::FileEffect) a runtime records before the call runs — or to the
    /// error the call would return without touching anything (the same checks in the same
    /// order). Run the call with the plan ([`ToolContext::with_file_plan`]): it then writes
    /// exactly the planned content, and only while the file is still at the planned
    /// pre-image.
    fn plan<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> Option<PlanFuture<'a>> {
        let _ = (ctx, args);
        None
    }

    /// The spec sent to the model: name, description, parameters and output schema.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
            output_schema: self.output_schema(),
        }
    }
}

/// What the model is told about one tool.
///
/// Serializes as `{"name", "description", "parameters", "output_schema"?}`; the LLM client
/// maps it to its wire format (for OpenAI-compatible servers, a `function` tool).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The tool name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// The JSON schema of the arguments.
    pub parameters: Value,
    /// The JSON schema of a successful result, when declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// Deserializes tool arguments into a typed struct, mapping failures to
/// [`ToolError::InvalidArguments`] with a one-line message that names the offending field,
/// e.g. ``invalid arguments: missing field `path` ``,
/// ``invalid arguments: field `offset`: invalid type: string "3", expected u64`` or
/// ``invalid arguments: unknown field `lines`, expected one of `path`, `offset`, `limit` ``.
/// Line breaks and other control characters of a name or value the model sent are escaped
/// (`\n`), so the message stays on one line.
///
/// Use `#[serde(deny_unknown_fields)]` on `T` so unknown fields are refused too.
///
/// # Errors
/// [`ToolError::InvalidArguments`] (`INVALID_ARGUMENTS`) when `args` is not an object or does
/// not deserialize into `T`.
pub fn parse_arguments<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    if !args.is_object() {
        return Err(ToolError::invalid_arguments(format!(
            "arguments must be a JSON object, got {}",
            json_kind(&args)
        )));
    }
    serde_path_to_error::deserialize(args).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner().to_string();
        // An unknown top-level field already names itself (its path is its own name).
        let names_itself = inner.starts_with(&format!("unknown field `{path}`"));
        let message = if path == "." || path.is_empty() || names_itself {
            inner
        } else {
            format!("field `{path}`: {inner}")
        };
        ToolError::invalid_arguments(one_line(&message))
    })
}

/// `text` with every control character and line or paragraph separator escaped as Rust
/// escapes it (`\n`, `\u{2028}`), so it is one line.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// The model-facing text of a rendered outcome: the result's text, or the compact JSON of
/// `{"code", "message"}` for an error (see [`ToolError::to_json`]).
pub fn render_text_outcome(outcome: &TextOutcome) -> String {
    match outcome {
        Ok(text) => text.clone(),
        Err(error) => error.to_json().to_string(),
    }
}

/// The model-facing text of an outcome: the compact JSON of the result, or of
/// `{"code", "message"}` for an error (see [`ToolError::to_json`]).
pub fn render_outcome(outcome: &ToolOutcome) -> String {
    match outcome {
        Ok(value) => value.to_string(),
        Err(error) => error.to_json().to_string(),
    }
}

/// A short name of a JSON value's kind, for error messages.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
