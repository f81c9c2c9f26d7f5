//! The per-agent [`ToolRegistry`].

use std::sync::Arc;

use serde_json::Value;

use crate::bash::BashTool;
use crate::context::ToolContext;
use crate::effect::FilePlan;
use crate::error::{RegistryError, ToolError};
use crate::files::{EditTool, ReadTool, WriteTool};
use crate::search::{GlobTool, GrepTool};
use crate::tool::{TextOutcome, Tool, ToolOutcome, ToolSpec, json_kind};

/// The core coding tools of DESIGN §4, in the order they are offered to the model:
/// `read`, `write`, `edit`, `glob`, `grep`, `bash`.
pub fn core_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadTool),
        Arc::new(WriteTool),
        Arc::new(EditTool),
        Arc::new(GlobTool),
        Arc::new(GrepTool),
        Arc::new(BashTool::default()),
    ]
}

/// Tool-call arguments as the model sent them: the raw JSON text of an OpenAI-style
/// `function.arguments`, or an already-parsed value (from a scripted provider or a replayed
/// log).
#[derive(Debug, Clone, PartialEq)]
pub enum ToolArguments {
    /// JSON text. An empty (or all-whitespace) string means `{}`.
    Raw(String),
    /// A parsed value.
    Value(Value),
}

impl From<&str> for ToolArguments {
    fn from(raw: &str) -> Self {
        ToolArguments::Raw(raw.to_owned())
    }
}

impl From<String> for ToolArguments {
    fn from(raw: String) -> Self {
        ToolArguments::Raw(raw)
    }
}

impl From<Value> for ToolArguments {
    fn from(value: Value) -> Self {
        ToolArguments::Value(value)
    }
}

impl ToolArguments {
    /// The arguments as a JSON object.
    ///
    /// # Errors
    /// `INVALID_ARGUMENTS` when the text is not JSON or the value is not an object.
    pub fn into_object(self) -> Result<Value, ToolError> {
        let value = match self {
            ToolArguments::Raw(raw) if raw.trim().is_empty() => Value::Object(Default::default()),
            ToolArguments::Raw(raw) => serde_json::from_str(&raw).map_err(|error| {
                ToolError::invalid_arguments(format!("arguments are not valid JSON: {error}"))
            })?,
            ToolArguments::Value(value) => value,
        };
        if value.is_object() {
            Ok(value)
        } else {
            Err(ToolError::invalid_arguments(format!(
                "arguments must be a JSON object, got {}",
                json_kind(&value)
            )))
        }
    }
}

/// The tools one agent may call.
///
/// Each agent owns its registry (a teammate's Team tools differ from the Lead's); tools are
/// shared between registries through [`Arc`]. Tools keep their registration order, which is
/// the order of [`specs`](ToolRegistry::specs) — stable, so model requests are reproducible.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding the [`core_tools`].
    pub fn with_core_tools() -> Self {
        Self {
            tools: core_tools(),
        }
    }

    /// Adds a tool at the end of the order.
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`] (message `tool "<name>" is already registered`) when the
    /// name is taken; [`RegistryError::InvalidName`] when it is not 1–64 characters of
    /// `[A-Za-z0-9_-]`.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.name();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(RegistryError::InvalidName(name.to_owned()));
        }
        if self.get(name).is_some() {
            return Err(RegistryError::Duplicate(name.to_owned()));
        }
        self.tools.push(tool);
        Ok(())
    }

    /// Removes the tool called `name`, returning it.
    pub fn remove(&mut self, name: &str) -> Option<Arc<dyn Tool>> {
        let index = self.tools.iter().position(|tool| tool.name() == name)?;
        Some(self.tools.remove(index))
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|tool| tool.name() == name)
    }

    /// The tool names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|tool| tool.name()).collect()
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether the registry has no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The specs to send to the model, in order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|tool| tool.spec()).collect()
    }

    /// Runs one tool call: looks the tool up, parses the arguments into a JSON object, and
    /// calls it.
    ///
    /// # Errors
    /// `UNKNOWN_TOOL` (message `unknown tool "<name>"`), `INVALID_ARGUMENTS` (not JSON, not an
    /// object, or refused by the tool's typed arguments), `TOOL_CANCELED` when the context is
    /// already canceled (the tool does not run), and whatever the tool returns. The two
    /// refusals raised for a known tool before it runs pass through its
    /// [`Tool::shape_error`].
    pub async fn dispatch(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: impl Into<ToolArguments>,
    ) -> ToolOutcome {
        let (tool, arguments) = self.admit(ctx, name, arguments.into())?;
        tool.call(ctx, arguments).await
    }

    /// [`ToolRegistry::dispatch`] through [`Tool::call_text`]: the result comes back as the
    /// compact JSON text the model sees, in the tool's own key order.
    ///
    /// # Errors
    /// As [`ToolRegistry::dispatch`].
    pub async fn dispatch_text(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: impl Into<ToolArguments>,
    ) -> TextOutcome {
        let (tool, arguments) = self.admit(ctx, name, arguments.into())?;
        tool.call_text(ctx, arguments).await
    }

    /// The [`FilePlan`] of a call to `name` when that tool plans its effect ([`Tool::plan`]:
    /// `write`, `edit`), after the same admission checks as [`ToolRegistry::dispatch`]:
    /// `None` for an unknown tool or one that does not plan, `Some(Err(…))` with the error the
    /// call would return without any effect (arguments that are not an object, a cancelled
    /// context, every check of the tool itself).
    pub async fn plan(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: &Value,
    ) -> Option<Result<FilePlan, ToolError>> {
        let tool = self.get(name)?;
        let planned = tool.plan(ctx, arguments.clone())?;
        Some(
            match self.admit(ctx, name, ToolArguments::Value(arguments.clone())) {
                Err(e) => Err(e),
                Ok(_) => planned.await,
            },
        )
    }

    /// The checks before a tool runs, shared by both dispatches: the tool by name, the
    /// arguments as an object, and a context not yet canceled (the last two refusals pass
    /// through the tool's [`Tool::shape_error`]).
    fn admit(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: ToolArguments,
    ) -> Result<(&Arc<dyn Tool>, Value), ToolError> {
        let tool = self.get(name).ok_or_else(|| ToolError::UnknownTool {
            name: name.to_owned(),
        })?;
        let arguments = arguments.into_object().map_err(|e| tool.shape_error(e))?;
        if ctx.cancellation().is_cancelled() {
            return Err(tool.shape_error(ToolError::Canceled));
        }
        Ok((tool, arguments))
    }
}
