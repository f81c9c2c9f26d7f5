//! The model choice a session records (`agent/config`'s `model`): which provider serves the
//! model, the model's name, where it is served and how `tool_choice` is sent — never a key.
//!
//! Plain data: parsing the `--model` flags into a [`ModelSpec`] and resolving it against the
//! environment (reading the API key) are the model client's (`troupe_llm::ModelSpecExt`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::ParseError;

/// Which kind of provider serves the model. Serialized lowercase (`"deepseek"`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// DeepSeek's API (preset base URL and key variable).
    Deepseek,
    /// OpenAI's API (preset base URL and key variable).
    Openai,
    /// Any OpenAI-compatible server given by `--base-url` (Ollama, vLLM, llama.cpp, LM Studio);
    /// the key is optional.
    Compatible,
    /// The offline scripted provider (`script:FILE`).
    Script,
}

impl ProviderKind {
    /// The provider's name as written in `--model provider:model`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deepseek => "deepseek",
            Self::Openai => "openai",
            Self::Compatible => "compatible",
            Self::Script => "script",
        }
    }

    /// The provider a `--model provider:…` prefix names (`deepseek`, `openai`, `compatible`,
    /// `script`); `None` for any other text.
    pub fn from_prefix(prefix: &str) -> Option<Self> {
        match prefix {
            "deepseek" => Some(Self::Deepseek),
            "openai" => Some(Self::Openai),
            "compatible" => Some(Self::Compatible),
            "script" => Some(Self::Script),
            _ => None,
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Whether and how the request's `tool_choice` is sent (`--tool-choice`), recorded with the
/// model choice ([`ModelSpec::tool_choice`]) so that `troupe resume` sends the same.
///
/// Serialized lowercase (`"auto"`, `"required"`, `"none"`, `"omit"`). Sent only with a request
/// that offers tools (servers refuse a `tool_choice` without `tools`). OpenAI, DeepSeek
/// and llama.cpp's `llama-server` read a missing `tool_choice` as `auto` when tools are
/// offered; llama-cpp-python's `chatml-function-calling` format leaves the tools out of the
/// prompt unless it is given, so it needs `auto`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoice {
    /// `"tool_choice": "auto"`: the model decides whether to call tools.
    Auto,
    /// `"tool_choice": "required"`: the model must call at least one tool.
    Required,
    /// `"tool_choice": "none"`: the model must not call tools (they are still described).
    None,
    /// No `tool_choice` key at all: the server's default. The default.
    #[default]
    Omit,
}

impl ToolChoice {
    /// Every choice, in the order `--tool-choice` lists them.
    pub const ALL: [Self; 4] = [Self::Auto, Self::Required, Self::None, Self::Omit];

    /// The flag value: `auto`, `required`, `none` or `omit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Required => "required",
            Self::None => "none",
            Self::Omit => "omit",
        }
    }

    /// Whether no `tool_choice` is sent (the default, left out of the recorded spec).
    pub fn is_omit(&self) -> bool {
        *self == Self::Omit
    }

    /// The wire value of `tool_choice`; `None` for [`ToolChoice::Omit`].
    pub fn wire_value(self) -> Option<&'static str> {
        match self {
            Self::Omit => Option::None,
            other => Some(other.as_str()),
        }
    }
}

impl fmt::Display for ToolChoice {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl std::str::FromStr for ToolChoice {
    type Err = ParseError;

    /// Parses `auto`, `required`, `none` or `omit` (surrounding blanks ignored, case
    /// sensitive). Fails with [`ParseError::UnknownToolChoice`] (`LLM_CONFIG`) naming the
    /// accepted values.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        Self::ALL
            .into_iter()
            .find(|choice| choice.as_str() == text)
            .ok_or_else(|| ParseError::UnknownToolChoice(text.to_owned()))
    }
}

/// A validated model choice, without any secret: what a session records so that
/// `troupe resume` calls the same model.
///
/// Serialized camelCase: `{"provider":"deepseek","model":"deepseek-chat",
/// "baseUrl":"https://api.deepseek.com","apiKeyEnv":"DEEPSEEK_API_KEY"}`, plus
/// `"toolChoice":"auto"|"required"|"none"` when `--tool-choice` asked for one (absent means
/// [`ToolChoice::Omit`], so specs recorded before the flag existed read unchanged); for a
/// script, `{"provider":"script","model":"<file path>"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// The provider kind.
    pub provider: ProviderKind,
    /// The model name sent to the server; for [`ProviderKind::Script`], the script file path.
    pub model: String,
    /// The effective API base URL (without `/chat/completions`); `None` for a script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The environment variable the key is read from; `None` for a script and for a compatible
    /// server without a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// How `tool_choice` is sent ([`ToolChoice`]); always [`ToolChoice::Omit`] for a script.
    #[serde(default, skip_serializing_if = "ToolChoice::is_omit")]
    pub tool_choice: ToolChoice,
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}:{}", self.provider, self.model)
    }
}
