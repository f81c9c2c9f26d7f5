//! The MCP server configuration: the `[mcp_servers.<name>]` tables of a TOML file, checked, and
//! their recorded form.
//!
//! The one place that reads it. `troupe run|resume|demo --mcp-config FILE` reads a file holding
//! only these tables ([`McpServers::load`]); a config file with more sections embeds
//! [`McpServers`] as its `mcp_servers` field (it implements `Deserialize`, and every check is
//! part of deserialising, so the error carries the position of the offending value).
//!
//! ```toml
//! [mcp_servers.files]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
//! env = { LOG_LEVEL = "warn" }
//! enabled_tools = ["read_file", "list_directory"]   # optional: only these tools
//! startup_timeout_sec = 10                          # optional, default 10
//! tool_timeout_sec = 60                             # optional, default 60
//!
//! [mcp_servers.docs]                                # streamable HTTP instead of a program
//! url = "https://mcp.example.com/mcp"
//! bearer_token_env_var = "DOCS_TOKEN"               # optional: `Authorization: Bearer $DOCS_TOKEN`
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::McpConfigError;

/// The largest configuration file read (1 MiB): a bigger one is refused, never read whole.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How long a server may take to start, answer `initialize` and list its tools, unless its
/// `startup_timeout_sec` says otherwise: 10 s.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one tool call may take, unless the server's `tool_timeout_sec` says otherwise:
/// 60 s.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest timeout accepted: one day.
const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// The most characters of a server name (tool names are `mcp__<server>__<tool>`, at most 64
/// characters, so the server's part is kept short).
pub const MAX_SERVER_NAME_CHARS: usize = 32;

/// A server's name, the `<name>` of `[mcp_servers.<name>]`: 1–32 characters of
/// `[A-Za-z0-9_-]`, without `__` and not ending in `_`, so `mcp__<server>__<tool>` always says
/// where the server's name ends.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ServerName(String);

impl ServerName {
    /// Checks `name`.
    ///
    /// # Errors
    /// A one-line reason (used as the message of `MCP_CONFIG_INVALID`).
    pub fn new(name: &str) -> Result<Self, String> {
        let shown = name.escape_debug();
        if name.is_empty() {
            return Err("an MCP server name must not be empty".to_owned());
        }
        if name.chars().count() > MAX_SERVER_NAME_CHARS {
            return Err(format!(
                "MCP server name \"{shown}\" is longer than {MAX_SERVER_NAME_CHARS} characters"
            ));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(format!(
                "MCP server name \"{shown}\" may only hold letters, digits, `-` and `_`"
            ));
        }
        if name.contains("__") || name.ends_with('_') {
            return Err(format!(
                "MCP server name \"{shown}\" must not contain `__` or end in `_` (tools are \
                 named mcp__<server>__<tool>)"
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ServerName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        ServerName::new(&name).map_err(serde::de::Error::custom)
    }
}

/// How Troupe reaches a server.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A program Troupe starts (under the session's sandbox, in the workspace) and talks to
    /// over its stdin and stdout (`command`, `args`, `env`).
    Stdio {
        /// The program: a name looked up in `PATH`, or a path.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set in its environment, over the one Troupe runs in (from which the
        /// model's API key variables are removed, as for `bash`).
        env: BTreeMap<String, String>,
    },
    /// A server already running, reached over MCP's streamable HTTP transport (`url`,
    /// `bearer_token_env_var`). It is not Troupe's process, so no sandbox applies to it.
    Http {
        /// The endpoint: an `http://` or `https://` URL.
        url: String,
        /// The variable holding the bearer token sent as `Authorization: Bearer <token>`
        /// (read when the server is started; the token itself is never recorded).
        bearer_token_env_var: Option<String>,
    },
}

/// One MCP server: how to reach it, which of its tools to offer, its timeouts.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Stdio (a program) or streamable HTTP (a URL).
    pub transport: Transport,
    /// When given, only these of the server's tools (by the server's own names) are offered.
    pub enabled_tools: Option<Vec<String>>,
    /// How long starting, `initialize` and `tools/list` may take together.
    pub startup_timeout: Duration,
    /// How long one `tools/call` may take.
    pub tool_timeout: Duration,
}

/// The TOML form of [`ServerConfig`], as users write it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerToml {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    bearer_token_env_var: Option<String>,
    #[serde(default)]
    enabled_tools: Option<Vec<String>>,
    #[serde(default)]
    startup_timeout_sec: Option<f64>,
    #[serde(default)]
    tool_timeout_sec: Option<f64>,
}

/// The recorded (JSON, camelCase) form of [`ServerConfig`], in an `agent/config`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ServerRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bearer_token_env_var: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enabled_tools: Option<Vec<String>>,
    startup_timeout_ms: u64,
    tool_timeout_ms: u64,
}

fn timeout(key: &str, seconds: Option<f64>, default: Duration) -> Result<Duration, String> {
    match seconds {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= MAX_TIMEOUT_SECS => {
            Ok(Duration::from_secs_f64(s))
        }
        Some(s) => Err(format!(
            "{key} must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECS}, not {s}"
        )),
    }
}

fn check_text(what: &str, text: &str) -> Result<(), String> {
    if text.contains('\0') {
        return Err(format!("{what} must not contain a NUL character"));
    }
    Ok(())
}

impl ServerConfig {
    fn from_toml(raw: ServerToml) -> Result<Self, String> {
        let transport = match (raw.command, raw.url) {
            (Some(_), Some(_)) => {
                return Err(
                    "give either `command` (stdio) or `url` (streamable HTTP), not both".to_owned(),
                );
            }
            (None, None) => {
                return Err(
                    "missing `command` (a program to start) or `url` (a streamable HTTP server)"
                        .to_owned(),
                );
            }
            (Some(command), None) => {
                if raw.bearer_token_env_var.is_some() {
                    return Err("`bearer_token_env_var` applies to a `url` server only".to_owned());
                }
                stdio(
                    command,
                    raw.args.unwrap_or_default(),
                    raw.env.unwrap_or_default(),
                )?
            }
            (None, Some(url)) => {
                if raw.args.is_some() || raw.env.is_some() {
                    return Err("`args` and `env` apply to a `command` server only".to_owned());
                }
                http(url, raw.bearer_token_env_var)?
            }
        };
        Ok(Self {
            transport,
            enabled_tools: raw.enabled_tools,
            startup_timeout: timeout(
                "startup_timeout_sec",
                raw.startup_timeout_sec,
                DEFAULT_STARTUP_TIMEOUT,
            )?,
            tool_timeout: timeout(
                "tool_timeout_sec",
                raw.tool_timeout_sec,
                DEFAULT_TOOL_TIMEOUT,
            )?,
        })
    }

    fn record(&self) -> ServerRecord {
        let mut record = ServerRecord {
            command: None,
            url: None,
            bearer_token_env_var: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            enabled_tools: self.enabled_tools.clone(),
            startup_timeout_ms: duration_ms(self.startup_timeout),
            tool_timeout_ms: duration_ms(self.tool_timeout),
        };
        match &self.transport {
            Transport::Stdio { command, args, env } => {
                record.command = Some(command.clone());
                record.args = args.clone();
                record.env = env.clone();
            }
            Transport::Http {
                url,
                bearer_token_env_var,
            } => {
                record.url = Some(url.clone());
                record.bearer_token_env_var = bearer_token_env_var.clone();
            }
        }
        record
    }

    fn from_record(record: ServerRecord) -> Result<Self, String> {
        let transport = match (record.command, record.url) {
            (Some(command), None) => Transport::Stdio {
                command,
                args: record.args,
                env: record.env,
            },
            (None, Some(url)) => Transport::Http {
                url,
                bearer_token_env_var: record.bearer_token_env_var,
            },
            _ => return Err("a server needs exactly one of `command` and `url`".to_owned()),
        };
        Ok(Self {
            transport,
            enabled_tools: record.enabled_tools,
            startup_timeout: Duration::from_millis(record.startup_timeout_ms),
            tool_timeout: Duration::from_millis(record.tool_timeout_ms),
        })
    }
}

fn stdio(
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
) -> Result<Transport, String> {
    if command.trim().is_empty() {
        return Err("`command` must name the program to start".to_owned());
    }
    check_text("`command`", &command)?;
    for arg in &args {
        check_text("an argument in `args`", arg)?;
    }
    for (name, value) in &env {
        if name.is_empty() || name.contains('=') {
            return Err(format!(
                "`env` has an invalid variable name \"{}\" (empty or with `=`)",
                name.escape_debug()
            ));
        }
        check_text("an `env` name or value", name)?;
        check_text("an `env` name or value", value)?;
    }
    Ok(Transport::Stdio { command, args, env })
}

fn http(url: String, bearer_token_env_var: Option<String>) -> Result<Transport, String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    if host.is_none_or(str::is_empty) || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "`url` must be an http:// or https:// URL with a host, not \"{}\"",
            url.escape_debug()
        ));
    }
    if let Some(var) = &bearer_token_env_var
        && (var.is_empty() || var.contains(['=', '\0']))
    {
        return Err(format!(
            "`bearer_token_env_var` must name an environment variable, not \"{}\"",
            var.escape_debug()
        ));
    }
    Ok(Transport::Http {
        url,
        bearer_token_env_var,
    })
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl<'de> Deserialize<'de> for ServerConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = ServerToml::deserialize(deserializer)?;
        ServerConfig::from_toml(raw).map_err(serde::de::Error::custom)
    }
}

/// The configured servers by name (`[mcp_servers.<name>]`), in name order — the order they
/// are started in and their tools are offered in.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct McpServers(BTreeMap<ServerName, ServerConfig>);

/// The servers of several sources merged into one set (a configuration file embedding
/// `[mcp_servers.<name>]` tables beside other keys checks each with [`ServerConfig`]'s
/// `Deserialize` and collects them here); a name given twice keeps the last.
impl FromIterator<(ServerName, ServerConfig)> for McpServers {
    fn from_iter<I: IntoIterator<Item = (ServerName, ServerConfig)>>(servers: I) -> Self {
        Self(servers.into_iter().collect())
    }
}

/// A file holding only `[mcp_servers.<name>]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpConfigFile {
    #[serde(default)]
    mcp_servers: McpServers,
}

impl McpServers {
    /// Reads `path`, a TOML file holding only `[mcp_servers.<name>]` tables (an empty file is
    /// no server).
    ///
    /// # Errors
    /// `MCP_CONFIG_UNREADABLE` when the file cannot be opened or read, is not a regular file
    /// or is larger than [`MAX_CONFIG_BYTES`]; `MCP_CONFIG_INVALID` as
    /// [`McpServers::from_toml_str`], naming the path.
    pub fn load(path: &Path) -> Result<Self, McpConfigError> {
        let unreadable = |reason: String| McpConfigError::Unreadable {
            path: path.display().to_string(),
            reason,
        };
        let file = std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?;
        let metadata = file.metadata().map_err(|e| unreadable(e.to_string()))?;
        if !metadata.is_file() {
            return Err(unreadable("not a regular file".to_owned()));
        }
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| unreadable(e.to_string()))?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(unreadable(format!("larger than {MAX_CONFIG_BYTES} bytes")));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            let (line, column) = line_column(
                &String::from_utf8_lossy(e.as_bytes()),
                e.utf8_error().valid_up_to(),
            );
            McpConfigError::Invalid {
                origin: path.display().to_string(),
                line,
                column,
                message: "the file is not UTF-8 text".to_owned(),
            }
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses `text`, TOML holding only `[mcp_servers.<name>]` tables; `origin` names it in
    /// errors (a path).
    ///
    /// # Errors
    /// `MCP_CONFIG_INVALID` with the line and column (1-based) of the first problem: TOML
    /// syntax, an unknown key (anywhere), neither or both of `command` and `url`, keys of the
    /// other transport, a value of the wrong type, a bad server name (see
    /// [`ServerName::new`]), an empty command, a URL that is not `http(s)://host…`, a NUL
    /// character, an `env` name with `=`, a timeout outside (0, 86400] seconds.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, McpConfigError> {
        toml::from_str::<McpConfigFile>(text)
            .map(|file| file.mcp_servers)
            .map_err(|error| {
                let (line, column) = error
                    .span()
                    .map_or((1, 1), |span| line_column(text, span.start));
                McpConfigError::Invalid {
                    origin: origin.to_owned(),
                    line,
                    column,
                    message: plain_message(error.message()),
                }
            })
    }

    /// The servers, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&ServerName, &ServerConfig)> {
        self.0.iter()
    }

    /// The number of servers.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The form recorded in a session's `agent/config` (`mcpServers`): `{"<name>":
    /// {"command", "args"?, "env"?, "enabledTools"?, "startupTimeoutMs", "toolTimeoutMs"}}`
    /// for a stdio server, `{"url", "bearerTokenEnvVar"?, …}` for a streamable HTTP one. It
    /// holds `env` values as given: secrets belong in the environment Troupe runs in (which
    /// servers inherit) or in the variable `bearer_token_env_var` names, not in `env`.
    pub fn to_record(&self) -> Value {
        let record: BTreeMap<&str, ServerRecord> = self
            .0
            .iter()
            .map(|(name, config)| (name.as_str(), config.record()))
            .collect();
        serde_json::to_value(record).unwrap_or(Value::Null)
    }

    /// Reads the recorded form back ([`McpServers::to_record`]).
    ///
    /// # Errors
    /// `MCP_CONFIG_INVALID` (origin `the session's recorded configuration`) when the value is
    /// not that form.
    pub fn from_record(value: &Value) -> Result<Self, McpConfigError> {
        let invalid = |message: String| McpConfigError::Invalid {
            origin: "the session's recorded MCP configuration".to_owned(),
            line: 1,
            column: 1,
            message,
        };
        let records: BTreeMap<String, ServerRecord> =
            serde_json::from_value(value.clone()).map_err(|e| invalid(e.to_string()))?;
        let mut servers = BTreeMap::new();
        for (name, record) in records {
            servers.insert(
                ServerName::new(&name).map_err(invalid)?,
                ServerConfig::from_record(record).map_err(invalid)?,
            );
        }
        Ok(Self(servers))
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

/// A TOML parser's message on one line, with serde's Rust type names said as a file's writer
/// knows them: `expected f64` is `expected a number`, `expected u64` `expected a whole
/// number`; every other word is kept. Used for `--mcp-config` files here and for Troupe's own
/// `config.toml` files by the binary.
pub fn plain_message(message: &str) -> String {
    let words: Vec<&str> = message.split_whitespace().collect();
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let bare = word.trim_end_matches([',', '.', ';', ')']);
        let plain = match bare {
            "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64"
            | "u128" | "usize" => Some("a whole number"),
            "f32" | "f64" => Some("a number"),
            _ => None,
        };
        match plain {
            Some(plain) if i > 0 && words[i - 1] == "expected" => {
                out.push(format!("{plain}{}", &word[bare.len()..]));
            }
            _ => out.push((*word).to_owned()),
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_count_from_one() {
        assert_eq!(line_column("abc", 0), (1, 1));
        assert_eq!(line_column("abc\ndef", 5), (2, 2));
        assert_eq!(line_column("é\nx", 3), (2, 1));
    }

    #[test]
    fn server_names() {
        for good in ["a", "files", "my-server", "a_b", "_x", "A9"] {
            assert!(ServerName::new(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a.b", "a__b", "a_", "é", &"x".repeat(33)] {
            assert!(ServerName::new(bad).is_err(), "{bad}");
        }
    }
}
