//! Model configuration: the `--model`/`--base-url`/`--api-key-env` flags, provider presets,
//! API keys, and client options (streaming, timeouts, retries).
//!
//! Two stages, as in ripgrep: [`ModelFlags`] (what the user typed) is parsed into a
//! [`ModelSpec`] (validated, serializable, recorded in the session for `troupe resume`, never
//! holding a key), which is resolved against the environment into a [`ProviderConfig`] (holding
//! the [`ApiKey`], never serializable). [`ModelSpec`], [`ProviderKind`] and [`ToolChoice`] are
//! session data (`troupe_session::model`, re-exported here); their parsing and resolution are
//! this crate's ([`ModelSpecExt`]).

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
pub use troupe_session::model::{ModelSpec, ProviderKind, ToolChoice};

use crate::error::LlmError;

/// DeepSeek's API base URL.
pub const DEEPSEEK_BASE_URL: &str = "https://api.deepseek.com";
/// The environment variable holding the DeepSeek API key.
pub const DEEPSEEK_API_KEY_ENV: &str = "DEEPSEEK_API_KEY";
/// The model used when `--model` is absent or is just `deepseek:`.
pub const DEEPSEEK_DEFAULT_MODEL: &str = "deepseek-chat";
/// OpenAI's API base URL.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The environment variable holding the OpenAI API key.
pub const OPENAI_API_KEY_ENV: &str = "OPENAI_API_KEY";
/// The model used for `openai:` without a model name.
pub const OPENAI_DEFAULT_MODEL: &str = "gpt-4.1";

/// The model flags as the user gave them (`troupe run --model M --base-url URL
/// --api-key-env VAR --tool-choice C`); every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelFlags {
    /// `--model`: `name`, `provider:name` or `script:FILE`.
    pub model: Option<String>,
    /// `--base-url`: the API base URL (the client appends `/chat/completions`).
    pub base_url: Option<String>,
    /// `--api-key-env`: the environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// `--tool-choice`: how `tool_choice` is sent; `None` keeps the default
    /// ([`ToolChoice::Omit`], or on resume the recorded choice).
    pub tool_choice: Option<ToolChoice>,
}

/// The preset (base URL, key variable, default model) of DeepSeek and OpenAI.
fn preset_of(kind: ProviderKind) -> Option<(&'static str, &'static str, &'static str)> {
    match kind {
        ProviderKind::Deepseek => Some((
            DEEPSEEK_BASE_URL,
            DEEPSEEK_API_KEY_ENV,
            DEEPSEEK_DEFAULT_MODEL,
        )),
        ProviderKind::Openai => Some((OPENAI_BASE_URL, OPENAI_API_KEY_ENV, OPENAI_DEFAULT_MODEL)),
        ProviderKind::Compatible | ProviderKind::Script => None,
    }
}

/// How a [`ModelSpec`] is made from the flags and resolved against the environment (the spec
/// itself is plain session data, `troupe_session::model::ModelSpec`). Implemented for
/// [`ModelSpec`] only; bring it into scope to call `ModelSpec::from_flags(…)`,
/// `spec.with_overrides(…)`, `spec.sibling(…)` and `spec.resolve(…)`.
pub trait ModelSpecExt: Sized {
    /// Parses and validates the flags. Rules:
    /// - no `--model`: `deepseek:deepseek-chat`, unless `--base-url` is given (then `--model`
    ///   is required); an empty (or blank) `--model` is refused;
    /// - `script:FILE`: the scripted provider (`--base-url`/`--api-key-env` are refused);
    /// - `deepseek:M` / `openai:M` (empty `M` picks the preset's default model): the preset,
    ///   whose base URL and key variable `--base-url` / `--api-key-env` may override;
    /// - `compatible:M`, or any model with `--base-url` and no known provider prefix (so Ollama
    ///   names like `qwen2.5:7b` work): an OpenAI-compatible server; the key is optional;
    /// - a bare name: `deepseek…` → DeepSeek, `gpt-…`/`o1…`/`o3…`/`o4…`/`chatgpt…` → OpenAI,
    ///   anything else is refused with a hint;
    /// - `--tool-choice C` is recorded as [`ModelSpec::tool_choice`] (absent:
    ///   [`ToolChoice::Omit`]); it is refused with a script (which has no server to send it to).
    ///
    /// # Errors
    /// [`LlmError::Config`] (`LLM_CONFIG`) and a one-line message.
    fn from_flags(flags: &ModelFlags) -> Result<Self, LlmError>;

    /// Applies the flags of `troupe resume` to this recorded spec: a `--model` flag starts over
    /// from the flags (as `troupe run` would read them); otherwise `--base-url` /
    /// `--api-key-env` / `--tool-choice` replace the recorded values and the others are kept.
    ///
    /// # Errors
    /// As [`ModelSpecExt::from_flags`].
    fn with_overrides(&self, flags: &ModelFlags) -> Result<Self, LlmError>;

    /// The spec of another model named `model` beside this one — a teammate model
    /// (`--teammate-model`) beside the Lead's spec `self`. `model` is written as for
    /// `--model` (`name`, `provider:name`, `script:FILE`). A model of this spec's provider —
    /// a `deepseek:`/`openai:`/`compatible:` prefix naming it, or a bare name inferred to it
    /// (with a compatible server, any bare name) — uses this spec's base URL and API key
    /// variable; another provider uses its own preset. The tool choice is this spec's (none
    /// for a script).
    ///
    /// # Errors
    /// [`LlmError::Config`] (`LLM_CONFIG`) as [`ModelSpecExt::from_flags`], e.g. for
    /// `compatible:M` beside a spec without a base URL.
    fn sibling(&self, model: &str) -> Result<Self, LlmError>;

    /// Resolves the spec against the environment (`env` looks a variable up, e.g.
    /// `|name| std::env::var(name).ok()`), reading the API key.
    ///
    /// # Errors
    /// [`LlmError::Config`] when a needed key is missing or empty (the message names the
    /// variable), or when a deserialized spec is inconsistent.
    fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<ProviderConfig, LlmError>;
}

impl ModelSpecExt for ModelSpec {
    fn from_flags(flags: &ModelFlags) -> Result<Self, LlmError> {
        let mut spec = from_model_flags(flags)?;
        if let Some(choice) = flags.tool_choice {
            if spec.provider == ProviderKind::Script {
                return Err(LlmError::config(
                    "--tool-choice cannot be used with a script: model (it is sent to a model server)",
                ));
            }
            spec.tool_choice = choice;
        }
        Ok(spec)
    }

    fn with_overrides(&self, flags: &ModelFlags) -> Result<Self, LlmError> {
        if flags.model.is_some() {
            // An empty `--model ""` is refused there, as for `troupe run`.
            return Self::from_flags(flags);
        }
        let model = format!("{}:{}", self.provider, self.model);
        let recorded_choice = (!self.tool_choice.is_omit()).then_some(self.tool_choice);
        Self::from_flags(&ModelFlags {
            model: Some(model),
            base_url: flags.base_url.clone().or_else(|| self.base_url.clone()),
            api_key_env: flags
                .api_key_env
                .clone()
                .or_else(|| self.api_key_env.clone()),
            tool_choice: flags.tool_choice.or(recorded_choice),
        })
    }

    fn sibling(&self, model: &str) -> Result<Self, LlmError> {
        let trimmed = model.trim();
        let prefixed = trimmed
            .split_once(':')
            .and_then(|(prefix, _)| ProviderKind::from_prefix(prefix));
        let kind = match prefixed {
            Some(kind) => Some(kind),
            None if self.provider == ProviderKind::Compatible => Some(ProviderKind::Compatible),
            None => infer_provider(trimmed),
        };
        let same = kind == Some(self.provider) && self.provider != ProviderKind::Script;
        let choice = (!self.tool_choice.is_omit()).then_some(self.tool_choice);
        let flags = ModelFlags {
            // A bare name gets its provider written out, so that the base URL passed with it
            // does not make it a compatible server's (and `qwen2.5:7b` is no provider prefix).
            model: Some(match (prefixed, kind) {
                (None, Some(kind)) if !trimmed.is_empty() => format!("{kind}:{trimmed}"),
                _ => trimmed.to_owned(),
            }),
            base_url: same.then(|| self.base_url.clone()).flatten(),
            api_key_env: same.then(|| self.api_key_env.clone()).flatten(),
            tool_choice: choice.filter(|_| kind != Some(ProviderKind::Script)),
        };
        Self::from_flags(&flags)
    }

    fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<ProviderConfig, LlmError> {
        if self.provider == ProviderKind::Script {
            return Ok(ProviderConfig::Script {
                path: PathBuf::from(&self.model),
            });
        }
        let base_url = validate_base_url(self.base_url.as_deref().unwrap_or_default())?;
        if self.model.trim().is_empty() {
            return Err(LlmError::config("the model name is empty"));
        }
        let api_key = match &self.api_key_env {
            Some(var) => {
                validate_env_name(var)?;
                match env(var).map(|value| value.trim().to_owned()) {
                    Some(value) if !value.is_empty() => Some(ApiKey::new(value)),
                    _ => {
                        return Err(LlmError::config(match self.provider {
                            ProviderKind::Compatible => format!(
                                "missing API key: the environment variable {var} (named by --api-key-env) is not set"
                            ),
                            _ => format!(
                                "missing API key for {}: set the environment variable {var}",
                                self.provider
                            ),
                        }));
                    }
                }
            }
            None if self.provider == ProviderKind::Compatible => None,
            None => {
                return Err(LlmError::config(format!(
                    "provider {} needs an API key variable",
                    self.provider
                )));
            }
        };
        Ok(ProviderConfig::Http(HttpProviderConfig {
            provider: self.provider,
            model: self.model.clone(),
            base_url,
            api_key,
            api_key_env: self.api_key_env.clone(),
            tool_choice: self.tool_choice,
        }))
    }
}

/// [`ModelSpecExt::from_flags`] without `--tool-choice` (the spec gets [`ToolChoice::Omit`]).
fn from_model_flags(flags: &ModelFlags) -> Result<ModelSpec, LlmError> {
    let base_url = flags
        .base_url
        .as_deref()
        .map(str::trim)
        .filter(|url| !url.is_empty());
    let api_key_env = flags
        .api_key_env
        .as_deref()
        .map(str::trim)
        .filter(|var| !var.is_empty());
    if let Some(var) = api_key_env {
        validate_env_name(var)?;
    }
    // An empty `--model ""` is a mistake (an unset variable, say), not a request for
    // the default model.
    let model = flags.model.as_deref().map(str::trim);
    if model.is_some_and(str::is_empty) {
        return Err(LlmError::config(
            "--model is empty: give a model name, provider:name or script:FILE (or leave the flag out for deepseek:deepseek-chat)",
        ));
    }

    let Some(model) = model else {
        if base_url.is_some() {
            return Err(LlmError::config(
                "--model is required with --base-url (the model name the server expects)",
            ));
        }
        return preset(ProviderKind::Deepseek, "", None, api_key_env);
    };

    let prefixed = model
        .split_once(':')
        .and_then(|(prefix, rest)| ProviderKind::from_prefix(prefix).map(|kind| (kind, rest)));
    match prefixed {
        Some((ProviderKind::Script, path)) => {
            if base_url.is_some() || api_key_env.is_some() {
                return Err(LlmError::config(
                    "--base-url and --api-key-env cannot be used with a script: model",
                ));
            }
            if path.trim().is_empty() {
                return Err(LlmError::config(
                    "--model script:FILE needs a file path after `script:`",
                ));
            }
            Ok(ModelSpec {
                provider: ProviderKind::Script,
                model: path.to_owned(),
                base_url: None,
                api_key_env: None,
                tool_choice: ToolChoice::Omit,
            })
        }
        Some((ProviderKind::Compatible, name)) => {
            let Some(base_url) = base_url else {
                return Err(LlmError::config(
                    "--model compatible:M needs --base-url URL (the OpenAI-compatible server)",
                ));
            };
            compatible(name, base_url, api_key_env)
        }
        Some((kind, name)) => preset(kind, name, base_url, api_key_env),
        None => {
            if let Some(base_url) = base_url {
                return compatible(model, base_url, api_key_env);
            }
            if let Some((prefix, _)) = model.split_once(':') {
                return Err(LlmError::config(format!(
                    "unknown model provider `{prefix}` in --model {model} (known: deepseek, openai, compatible (with --base-url URL), script)"
                )));
            }
            match infer_provider(model) {
                Some(kind) => preset(kind, model, None, api_key_env),
                None => Err(LlmError::config(format!(
                    "cannot tell which provider serves model `{model}`: write deepseek:{model} or openai:{model}, or pass --base-url URL for an OpenAI-compatible server"
                ))),
            }
        }
    }
}

/// The spec of a preset provider (DeepSeek, OpenAI).
fn preset(
    kind: ProviderKind,
    name: &str,
    base_url: Option<&str>,
    api_key_env: Option<&str>,
) -> Result<ModelSpec, LlmError> {
    let Some((preset_url, preset_env, default_model)) = preset_of(kind) else {
        return Err(LlmError::config(format!("provider {kind} has no preset")));
    };
    let name = name.trim();
    Ok(ModelSpec {
        provider: kind,
        model: if name.is_empty() { default_model } else { name }.to_owned(),
        base_url: Some(validate_base_url(base_url.unwrap_or(preset_url))?),
        api_key_env: Some(api_key_env.unwrap_or(preset_env).to_owned()),
        tool_choice: ToolChoice::Omit,
    })
}

/// The spec of an OpenAI-compatible server.
fn compatible(
    name: &str,
    base_url: &str,
    api_key_env: Option<&str>,
) -> Result<ModelSpec, LlmError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(LlmError::config(
            "--model compatible:M needs a model name after `compatible:`",
        ));
    }
    Ok(ModelSpec {
        provider: ProviderKind::Compatible,
        model: name.to_owned(),
        base_url: Some(validate_base_url(base_url)?),
        api_key_env: api_key_env.map(str::to_owned),
        tool_choice: ToolChoice::Omit,
    })
}

/// Parses the flags and resolves them: [`ModelSpecExt::from_flags`] then [`ModelSpecExt::resolve`].
pub fn resolve_model(
    flags: &ModelFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ProviderConfig, LlmError> {
    ModelSpec::from_flags(flags)?.resolve(env)
}

fn infer_provider(model: &str) -> Option<ProviderKind> {
    let lower = model.to_ascii_lowercase();
    if lower.starts_with("deepseek") {
        Some(ProviderKind::Deepseek)
    } else if ["gpt-", "o1", "o3", "o4", "chatgpt"]
        .iter()
        .any(|prefix| lower.starts_with(prefix))
    {
        Some(ProviderKind::Openai)
    } else {
        None
    }
}

fn validate_env_name(var: &str) -> Result<(), LlmError> {
    let mut characters = var.chars();
    let valid = characters
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && characters.all(|character| character.is_ascii_alphanumeric() || character == '_');
    if valid {
        Ok(())
    } else {
        Err(LlmError::config(format!(
            "--api-key-env `{var}` is not an environment variable name (letters, digits, _)"
        )))
    }
}

fn validate_base_url(url: &str) -> Result<String, LlmError> {
    let trimmed = url.trim().trim_end_matches('/');
    let parsed = reqwest::Url::parse(trimmed)
        .map_err(|error| LlmError::config(format!("--base-url `{url}` is not a URL: {error}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(LlmError::config(format!(
            "--base-url `{url}` must be an http:// or https:// URL with a host"
        )));
    }
    Ok(trimmed.to_owned())
}

/// An API key. Its `Debug` and `Display` print `***`, it is not serializable, and the only way to
/// read it is [`ApiKey::expose_secret`], used when building the `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself. Only for the `Authorization` header: never log or record it.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("***")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("***")
    }
}

/// A resolved HTTP provider: where to send requests and with which key. Not serializable (it
/// holds the key); record [`HttpProviderConfig::spec`] instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpProviderConfig {
    /// The provider kind (never [`ProviderKind::Script`]).
    pub provider: ProviderKind,
    /// The model name sent in every request.
    pub model: String,
    /// The API base URL without a trailing `/`; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// The key sent as `Authorization: Bearer …`; `None` sends no `Authorization` header.
    pub api_key: Option<ApiKey>,
    /// The variable the key came from, named in authentication errors.
    pub api_key_env: Option<String>,
    /// How `tool_choice` is sent with requests that offer tools.
    pub tool_choice: ToolChoice,
}

impl HttpProviderConfig {
    /// A configuration for an OpenAI-compatible server, e.g. a local one in tests.
    pub fn compatible(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider: ProviderKind::Compatible,
            model: model.into(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            api_key_env: None,
            tool_choice: ToolChoice::Omit,
        }
    }

    /// The same configuration sending `tool_choice` as `choice` says.
    #[must_use]
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    /// The same configuration with a key read from `env_var` (for messages) holding `key`.
    pub fn with_api_key(mut self, env_var: impl Into<String>, key: ApiKey) -> Self {
        self.api_key_env = Some(env_var.into());
        self.api_key = Some(key);
        self
    }

    /// The secret-free, serializable form of this configuration.
    pub fn spec(&self) -> ModelSpec {
        ModelSpec {
            provider: self.provider,
            model: self.model.clone(),
            base_url: Some(self.base_url.clone()),
            api_key_env: self.api_key_env.clone(),
            tool_choice: self.tool_choice,
        }
    }
}

/// A resolved provider configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderConfig {
    /// An OpenAI-compatible HTTP server.
    Http(HttpProviderConfig),
    /// The scripted provider reading this file.
    Script {
        /// The script file.
        path: PathBuf,
    },
}

impl ProviderConfig {
    /// The secret-free, serializable form of this configuration.
    pub fn spec(&self) -> ModelSpec {
        match self {
            Self::Http(config) => config.spec(),
            Self::Script { path } => ModelSpec {
                provider: ProviderKind::Script,
                model: path.display().to_string(),
                base_url: None,
                api_key_env: None,
                tool_choice: ToolChoice::Omit,
            },
        }
    }
}

/// Whether the `reasoning_content` of earlier assistant messages is sent back to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReasoningReplay {
    /// Never sent (OpenAI and most servers do not accept it).
    Never,
    /// Sent only for assistant messages after the last user message, i.e. within the current
    /// tool-calling turn, as DeepSeek's thinking mode requires; dropped for earlier turns.
    CurrentTurn,
    /// Always sent.
    Always,
}

/// Retry behaviour of the HTTP client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per call, the first included (1 disables retries). Default 5.
    pub max_attempts: u32,
    /// Backoff before the second attempt, in ms; doubled for each later one. Default 1000.
    pub initial_backoff_ms: u64,
    /// Upper bound of the exponential backoff, in ms. Default 30 000.
    pub max_backoff_ms: u64,
    /// Randomize each backoff within [half, full] of its value ("equal jitter"), so clients do
    /// not retry in lockstep. Default true; tests turn it off for exact delays.
    pub jitter: bool,
    /// Upper bound applied to a server's `Retry-After`, in ms. Default 60 000.
    pub max_retry_after_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff_ms: 1_000,
            max_backoff_ms: 30_000,
            jitter: true,
            max_retry_after_ms: 60_000,
        }
    }
}

impl RetryPolicy {
    /// The exponential backoff (ms) after failed attempt `failed_attempt` (1-based), before
    /// jitter: `initial_backoff_ms * 2^(failed_attempt - 1)`, capped at `max_backoff_ms`.
    pub fn backoff_ms(&self, failed_attempt: u32) -> u64 {
        let doublings = failed_attempt.saturating_sub(1).min(32);
        self.initial_backoff_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_backoff_ms)
    }
}

/// Behaviour of the HTTP client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// Ask for a streamed answer (`stream: true`). Default true. When false, or when the server
    /// answers a streaming request with `application/json`, the whole JSON body is parsed.
    pub stream: bool,
    /// Send `stream_options: {"include_usage": true}` with streaming requests. Default true.
    pub include_usage: bool,
    /// Longest silence (ms) allowed while waiting for the response headers or the next chunk of
    /// the body; then the attempt fails with [`LlmError::IdleTimeout`]. Default 120 000.
    pub idle_timeout_ms: u64,
    /// TCP/TLS connect timeout, in ms. Default 10 000.
    pub connect_timeout_ms: u64,
    /// Retries.
    pub retry: RetryPolicy,
    /// Whether reasoning is sent back; `None` picks by provider: [`ReasoningReplay::CurrentTurn`]
    /// for DeepSeek, [`ReasoningReplay::Never`] for the others.
    pub reasoning_replay: Option<ReasoningReplay>,
    /// Largest error body read for an error message, in bytes. Default 65 536.
    pub max_error_body_bytes: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            stream: true,
            include_usage: true,
            idle_timeout_ms: 120_000,
            connect_timeout_ms: 10_000,
            retry: RetryPolicy::default(),
            reasoning_replay: None,
            max_error_body_bytes: 64 * 1024,
        }
    }
}
