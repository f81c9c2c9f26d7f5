//! One configuration file (TOML) read, parsed and checked value by value, every value with
//! the file, line and column it was written at. Any problem — a syntax error, an unknown key,
//! a value of the wrong type or out of range — is bad input naming `FILE:LINE:COLUMN`.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use serde::Deserialize;
use toml::Spanned;
use troupe_llm::ToolChoice;
use troupe_mcp::{ServerConfig, ServerName};
use troupe_session::approval::ApprovalMode;
use troupe_session::ledger::Price;
use troupe_team::{MemberName, TeamLimits};
use troupe_tools::{NetworkAccess, SandboxMode};

use crate::exit::Failure;

/// `--budget-tokens N` (and `[team] budget_tokens`): a whole number of tokens, 1 or more.
pub(crate) fn budget_tokens(raw: &str) -> Result<u64, String> {
    match raw.trim().parse::<i128>() {
        Ok(n) if n >= 1 && n <= i128::from(u64::MAX) => Ok(n as u64),
        Ok(n) if n >= 1 => Err(format!("{n} is not a budget: at most {} tokens", u64::MAX)),
        Ok(n) => Err(format!(
            "{n} is not a budget: give a whole number of tokens, 1 or more"
        )),
        Err(_) => Err(format!(
            "\"{}\" is not a whole number of tokens",
            raw.escape_debug()
        )),
    }
}

/// `--budget-usd X` (and `[team] budget_usd`): a finite number of US dollars above 0.
pub(crate) fn budget_usd(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(x) => Err(format!(
            "{x} is not a budget: give an amount of US dollars above 0"
        )),
        Err(_) => Err(format!(
            "\"{}\" is not an amount of US dollars",
            raw.escape_debug()
        )),
    }
}

/// The longest `--approval-timeout` (and `approval_timeout`): one day.
pub(crate) const MAX_APPROVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(86_400);

/// `--approval-timeout DURATION` (and the files' `approval_timeout`): a humantime duration
/// from 1 s to [`MAX_APPROVAL_TIMEOUT`]; the error says what is accepted.
pub(crate) fn approval_timeout(raw: &str) -> Result<std::time::Duration, String> {
    let duration = humantime::parse_duration(raw)
        .map_err(|e| format!("{e} (a duration such as 10m, 90s or 1h)"))?;
    if duration < std::time::Duration::from_secs(1) || duration > MAX_APPROVAL_TIMEOUT {
        return Err("it must be from 1s to 24h".to_owned());
    }
    Ok(duration)
}

/// The longest `--stall-after` (and `stall_after`): 30 days.
pub(crate) const MAX_STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

/// `--stall-after DURATION` (and the files' `stall_after`): a humantime duration from 1 s to
/// [`MAX_STALL_AFTER`]; the error says what is accepted.
pub(crate) fn stall_after(raw: &str) -> Result<std::time::Duration, String> {
    let duration = humantime::parse_duration(raw)
        .map_err(|e| format!("{e} (a duration such as 10m, 90s or 1h)"))?;
    if duration < std::time::Duration::from_secs(1) || duration > MAX_STALL_AFTER {
        return Err("it must be from 1s to 30days".to_owned());
    }
    Ok(duration)
}

/// The largest configuration file read (1 MiB): a bigger one is refused, never read whole.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Which configuration file a value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `$TROUPE_HOME/config.toml` (the home's).
    User,
    /// `<workspace>/.troupe/config.toml`.
    Project,
}

impl Scope {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
        }
    }
}

/// A position in a configuration file: `PATH:LINE:COLUMN` (1-based; the column counts
/// characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) path: PathBuf,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.path.display(), self.line, self.column)
    }
}

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct At<T> {
    pub(crate) value: T,
    pub(crate) at: Location,
}

/// The Team limit keys (`[team]`), each with its flag and its `TeamLimits` (camelCase) key.
pub(crate) const LIMIT_KEYS: [(&str, &str, &str); 5] = [
    ("max_members", "--max-members", "maxMembers"),
    ("max_tasks", "--max-tasks", "maxTasks"),
    (
        "max_pending_messages",
        "--max-pending-messages",
        "maxPendingMessagesPerMember",
    ),
    (
        "max_message_bytes",
        "--max-message-bytes",
        "maxMessageBytes",
    ),
    (
        "disposal_timeout_ms",
        "--disposal-timeout-ms",
        "disposalTimeoutMs",
    ),
];

/// Everything one file sets, checked value by value (a combination — a base URL without a
/// model, say — is checked once the files and flags are merged).
#[derive(Debug, Default)]
pub(crate) struct FileValues {
    pub(crate) model: Option<At<String>>,
    pub(crate) base_url: Option<At<String>>,
    pub(crate) api_key_env: Option<At<String>>,
    pub(crate) tool_choice: Option<At<ToolChoice>>,
    pub(crate) sandbox: Option<At<SandboxMode>>,
    pub(crate) network: Option<At<NetworkAccess>>,
    pub(crate) project_instructions: Option<At<bool>>,
    /// `approval`: `never` or `on-request`.
    pub(crate) approval: Option<At<ApprovalMode>>,
    /// `approval_timeout`: a duration as `--approval-timeout` takes it (`"10m"`, `"90s"`).
    pub(crate) approval_timeout: Option<At<std::time::Duration>>,
    /// `stall_after`: a duration as `--stall-after` takes it (`"10m"`, `"90s"`).
    pub(crate) stall_after: Option<At<std::time::Duration>>,
    pub(crate) teammate_model: Option<At<String>>,
    /// `[team] worktree`: each teammate gets its own git worktree (`--worktree`).
    pub(crate) worktree: Option<At<bool>>,
    /// `[team.models]`: model by member name.
    pub(crate) team_models: BTreeMap<String, At<String>>,
    /// `[team]` limits, by their key in [`LIMIT_KEYS`].
    pub(crate) limits: BTreeMap<&'static str, At<u64>>,
    /// `store` (user file only): a NATS store's URL, checked as `nats://HOST:PORT[,…]`.
    pub(crate) store: Option<At<String>>,
    /// `replicas` (user file only): 1 to 5.
    pub(crate) replicas: Option<At<usize>>,
    /// `[mcp_servers.<name>]`: each server checked by `troupe-mcp` (the tables
    /// `--mcp-config FILE` takes), with the position of its table.
    pub(crate) mcp_servers: BTreeMap<ServerName, At<ServerConfig>>,
    /// `[prices] "<model>" = {input, output, cached}`: USD per million tokens.
    pub(crate) prices: BTreeMap<String, At<Price>>,
    /// `[team] budget_tokens`: 1 or more.
    pub(crate) budget_tokens: Option<At<u64>>,
    /// `[team] budget_usd`: above 0.
    pub(crate) budget_usd: Option<At<f64>>,
}

/// A configuration file found (or looked for).
#[derive(Debug)]
pub(crate) struct ConfigFile {
    pub(crate) scope: Scope,
    pub(crate) path: PathBuf,
    /// `None` when there is no file there.
    pub(crate) values: Option<FileValues>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    model: Option<Spanned<String>>,
    base_url: Option<Spanned<String>>,
    api_key_env: Option<Spanned<String>>,
    tool_choice: Option<Spanned<String>>,
    sandbox: Option<Spanned<String>>,
    network: Option<Spanned<String>>,
    project_instructions: Option<Spanned<bool>>,
    approval: Option<Spanned<String>>,
    approval_timeout: Option<Spanned<String>>,
    stall_after: Option<Spanned<String>>,
    store: Option<Spanned<String>>,
    replicas: Option<Spanned<i64>>,
    team: Option<TeamToml>,
    /// Checked as `troupe_mcp::McpServers` checks them (a name, then each table with
    /// [`ServerConfig`]'s `Deserialize`), so an error carries the position of its value.
    mcp_servers: Option<BTreeMap<Spanned<ServerName>, Spanned<ServerConfig>>>,
    /// Checked as [`Price`] (`input`, `output`, optional `cached`; nothing else).
    prices: Option<BTreeMap<Spanned<String>, Spanned<Price>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TeamToml {
    teammate_model: Option<Spanned<String>>,
    worktree: Option<Spanned<bool>>,
    max_members: Option<Spanned<i64>>,
    max_tasks: Option<Spanned<i64>>,
    max_pending_messages: Option<Spanned<i64>>,
    max_message_bytes: Option<Spanned<i64>>,
    disposal_timeout_ms: Option<Spanned<i64>>,
    budget_tokens: Option<Spanned<i64>>,
    budget_usd: Option<Spanned<f64>>,
    models: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
}

impl ConfigFile {
    /// Reads the file of `scope` at `path`: a missing file is no file (`values: None`); one
    /// that cannot be read, is not a regular file, is larger than 1 MiB, is not UTF-8, or whose
    /// content is refused is bad input (exit 2) naming it — as is a project file setting
    /// `store` or `replicas`, which every command reads from the user's file (only `run`
    /// knows the project), or a value that loosens the sandbox (`sandbox = "off"`,
    /// `network = "on"`), which the members' commands could otherwise write into it.
    pub(crate) fn load(scope: Scope, path: PathBuf) -> Result<Self, Failure> {
        let shown = path.display().to_string();
        let metadata = match std::fs::metadata(&path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self {
                    scope,
                    path,
                    values: None,
                });
            }
            Err(e) => {
                return Err(Failure::bad_input(anyhow!(
                    "{} configuration {shown}: {e}",
                    scope.as_str()
                )));
            }
        };
        if !metadata.is_file() {
            return Err(Failure::bad_input(anyhow!(
                "{} configuration {shown} is not a regular file",
                scope.as_str()
            )));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| {
                Failure::bad_input(anyhow!("{} configuration {shown}: {e}", scope.as_str()))
            })?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(Failure::bad_input(anyhow!(
                "{} configuration {shown} is larger than 1 MiB",
                scope.as_str()
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = position(&path, e.as_bytes(), e.utf8_error().valid_up_to());
            Failure::bad_input(anyhow!("{at}: the file is not UTF-8 text"))
        })?;
        let values = parse(&path, &text).map_err(Failure::bad_input)?;
        if scope == Scope::Project {
            let user_only = [
                values.store.as_ref().map(|v| ("store", &v.at)),
                values.replicas.as_ref().map(|v| ("replicas", &v.at)),
            ];
            if let Some((key, at)) = user_only.into_iter().flatten().next() {
                return Err(Failure::bad_input(anyhow!(
                    "{at}: {key} belongs in the user's file ($TROUPE_HOME/config.toml): every \
                     command reads it, and only troupe run knows the project"
                )));
            }
            // The project's file lies in the workspace, which the members' `bash` may write
            // (`--sandbox workspace-write`): a value in it that loosens the sandbox would let
            // one run's command switch every later run's sandbox off. It may tighten it.
            let loosening = [
                values
                    .sandbox
                    .as_ref()
                    .filter(|v| v.value == SandboxMode::Off)
                    .map(|v| ("sandbox = \"off\"", "--sandbox off", &v.at)),
                values
                    .network
                    .as_ref()
                    .filter(|v| v.value == NetworkAccess::On)
                    .map(|v| ("network = \"on\"", "--network on", &v.at)),
            ];
            if let Some((setting, flag, at)) = loosening.into_iter().flatten().next() {
                return Err(Failure::bad_input(anyhow!(
                    "{at}: {setting} cannot come from a project's file, which the agents \
                     themselves can write: put it in the user's file ($TROUPE_HOME/config.toml) \
                     or pass {flag}"
                )));
            }
        }
        Ok(Self {
            scope,
            path,
            values: Some(values),
        })
    }
}

/// Parses and checks the text of the file at `path`. The error is one line,
/// `PATH:LINE:COLUMN: what is wrong`.
pub(crate) fn parse(path: &Path, text: &str) -> Result<FileValues, anyhow::Error> {
    let at = |span: Range<usize>| position(path, text.as_bytes(), span.start);
    let raw: FileToml = toml::from_str(text).map_err(|e| {
        let location = at(e.span().unwrap_or(0..0));
        anyhow!("{location}: {}", troupe_mcp::plain_message(e.message()))
    })?;
    let string = |value: Spanned<String>, key: &str| -> Result<At<String>, anyhow::Error> {
        let location = at(value.span());
        let value = value.into_inner();
        if value.trim().is_empty() {
            return Err(anyhow!("{location}: {key} is empty"));
        }
        Ok(At {
            value,
            at: location,
        })
    };
    let parsed = |value: Spanned<String>,
                  key: &str,
                  accepted: &str|
     -> Result<(String, Location), anyhow::Error> {
        let location = at(value.span());
        let text = value.into_inner();
        if text.trim().is_empty() {
            return Err(anyhow!("{location}: {key} is empty (one of {accepted})"));
        }
        Ok((text, location))
    };
    let mut values = FileValues::default();
    if let Some(v) = raw.model {
        values.model = Some(string(v, "model")?);
    }
    if let Some(v) = raw.base_url {
        values.base_url = Some(string(v, "base_url")?);
    }
    if let Some(v) = raw.api_key_env {
        values.api_key_env = Some(string(v, "api_key_env")?);
    }
    if let Some(v) = raw.tool_choice {
        let accepted = "auto, required, none, omit";
        let (text, location) = parsed(v, "tool_choice", accepted)?;
        let choice = text
            .parse::<ToolChoice>()
            .map_err(|_| anyhow!("{location}: tool_choice \"{text}\" is not one of {accepted}"))?;
        values.tool_choice = Some(At {
            value: choice,
            at: location,
        });
    }
    if let Some(v) = raw.sandbox {
        let (text, location) = parsed(v, "sandbox", "workspace-write, read-only, off")?;
        let mode = SandboxMode::parse(&text).map_err(|e| anyhow!("{location}: sandbox: {e}"))?;
        values.sandbox = Some(At {
            value: mode,
            at: location,
        });
    }
    if let Some(v) = raw.network {
        let (text, location) = parsed(v, "network", "on, off")?;
        let access =
            NetworkAccess::parse(&text).map_err(|e| anyhow!("{location}: network: {e}"))?;
        values.network = Some(At {
            value: access,
            at: location,
        });
    }
    if let Some(v) = raw.project_instructions {
        values.project_instructions = Some(At {
            at: at(v.span()),
            value: v.into_inner(),
        });
    }
    if let Some(v) = raw.approval {
        let (text, location) = parsed(v, "approval", "never, on-request")?;
        let mode = ApprovalMode::parse(&text).map_err(|e| anyhow!("{location}: approval: {e}"))?;
        values.approval = Some(At {
            value: mode,
            at: location,
        });
    }
    if let Some(v) = raw.approval_timeout {
        let (text, location) = parsed(v, "approval_timeout", "a duration such as 10m or 90s")?;
        let timeout = approval_timeout(&text).map_err(|e| {
            anyhow!(
                "{location}: approval_timeout \"{}\": {e}",
                text.escape_debug()
            )
        })?;
        values.approval_timeout = Some(At {
            value: timeout,
            at: location,
        });
    }
    if let Some(v) = raw.stall_after {
        let (text, location) = parsed(v, "stall_after", "a duration such as 10m or 90s")?;
        let after = stall_after(&text)
            .map_err(|e| anyhow!("{location}: stall_after \"{}\": {e}", text.escape_debug()))?;
        values.stall_after = Some(At {
            value: after,
            at: location,
        });
    }
    if let Some(v) = raw.store {
        let (text, location) = parsed(v, "store", "nats://HOST:PORT[,HOST:PORT…]")?;
        if !text.starts_with("nats://") {
            return Err(anyhow!(
                "{location}: store \"{}\" is not a NATS store: give nats://HOST:PORT[,HOST:PORT…] \
                 (the JSONL files are the home's: choose the home with --home or $TROUPE_HOME)",
                text.escape_debug()
            ));
        }
        troupe_store_nats::parse_url(&text).map_err(|e| anyhow!("{location}: store: {e}"))?;
        values.store = Some(At {
            value: text,
            at: location,
        });
    }
    if let Some(v) = raw.replicas {
        let location = at(v.span());
        let n = *v.get_ref();
        let replicas = usize::try_from(n)
            .ok()
            .filter(|n| (1..=5).contains(n))
            .ok_or_else(|| anyhow!("{location}: replicas = {n}: give 1 to 5"))?;
        values.replicas = Some(At {
            value: replicas,
            at: location,
        });
    }
    if let Some(team) = raw.team {
        if let Some(v) = team.teammate_model {
            values.teammate_model = Some(string(v, "team.teammate_model")?);
        }
        if let Some(v) = team.worktree {
            values.worktree = Some(At {
                at: at(v.span()),
                value: v.into_inner(),
            });
        }
        let limits = [
            team.max_members,
            team.max_tasks,
            team.max_pending_messages,
            team.max_message_bytes,
            team.disposal_timeout_ms,
        ];
        for ((key, _, json_key), value) in LIMIT_KEYS.into_iter().zip(limits) {
            let Some(value) = value else { continue };
            let location = at(value.span());
            let number = *value.get_ref();
            // The limit's own check (REFERENCE c.15): a whole number from 1 to 2^53-1.
            let mut check = TeamLimits::default();
            check
                .set_json(json_key, &serde_json::json!(number))
                .map_err(|e| match e {
                    troupe_team::TeamError::InvalidConfig { reason, .. } => {
                        anyhow!("{location}: team.{key} = {number}: {reason}")
                    }
                    other => anyhow!("{location}: team.{key}: {other}"),
                })?;
            values.limits.insert(
                key,
                At {
                    value: number.unsigned_abs(),
                    at: location,
                },
            );
        }
        if let Some(v) = team.budget_tokens {
            let location = at(v.span());
            let n = *v.get_ref();
            let tokens = budget_tokens(&n.to_string())
                .map_err(|e| anyhow!("{location}: team.budget_tokens = {n}: {e}"))?;
            values.budget_tokens = Some(At {
                value: tokens,
                at: location,
            });
        }
        if let Some(v) = team.budget_usd {
            let location = at(v.span());
            let x = *v.get_ref();
            if !(x.is_finite() && x > 0.0) {
                return Err(anyhow!(
                    "{location}: team.budget_usd = {x}: give an amount of US dollars above 0"
                ));
            }
            values.budget_usd = Some(At {
                value: x,
                at: location,
            });
        }
        for (name, model) in team.models.unwrap_or_default() {
            let name_at = at(name.span());
            let name = name.into_inner();
            MemberName::new(name.as_str()).map_err(|_| {
                anyhow!(
                    "{name_at}: team.models: \"{}\" is not a teammate name (lowercase letters, \
                     digits and single dashes, at most 64, not \"lead\")",
                    name.escape_debug()
                )
            })?;
            let model = string(model, &format!("team.models.{name}"))?;
            values.team_models.insert(name, model);
        }
    }
    for (name, price) in raw.prices.unwrap_or_default() {
        let location = at(price.span());
        let name = name.into_inner();
        if name.trim().is_empty() {
            return Err(anyhow!("{location}: prices: a model name is empty"));
        }
        let price = price.into_inner();
        if let Some(problem) = price.problem() {
            return Err(anyhow!(
                "{location}: prices.\"{}\": {problem}",
                name.escape_debug()
            ));
        }
        values.prices.insert(
            name,
            At {
                value: price,
                at: location,
            },
        );
    }
    for (name, server) in raw.mcp_servers.unwrap_or_default() {
        let location = at(server.span());
        values.mcp_servers.insert(
            name.into_inner(),
            At {
                value: server.into_inner(),
                at: location,
            },
        );
    }
    Ok(values)
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn position(path: &Path, text: &[u8], offset: usize) -> Location {
    let before = &text[..offset.min(text.len())];
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    Location {
        path: path.to_path_buf(),
        line: before.iter().filter(|b| **b == b'\n').count() + 1,
        column,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn error(text: &str) -> String {
        parse(Path::new("/c.toml"), text).unwrap_err().to_string()
    }

    #[test]
    fn every_refusal_names_the_line_and_column() {
        for (text, expected) in [
            (
                "model = \"x\"\nfoo = 1\n",
                "/c.toml:2:1: unknown field `foo`",
            ),
            (
                "[team]\nmax_members = 0\n",
                "/c.toml:2:15: team.max_members = 0: ",
            ),
            (
                "[team]\nmax_tasks = \"8\"\n",
                "/c.toml:2:13: invalid type: string \"8\", expected a whole number",
            ),
            (
                "[team]\nmax_tasks = 1.5\n",
                "/c.toml:2:13: invalid type: floating point `1.5`, expected a whole number",
            ),
            (
                "[mcp_servers.x]\ncommand = \"y\"\nstartup_timeout_sec = \"soon\"\n",
                "/c.toml:3:23: invalid type: string \"soon\", expected a number",
            ),
            (
                "project_instructions = 1\n",
                "/c.toml:1:24: invalid type: integer `1`, expected a boolean",
            ),
            (
                "tool_choice = \"sometimes\"",
                "/c.toml:1:15: tool_choice \"sometimes\" is not",
            ),
            ("sandbox = \"jail\"", "/c.toml:1:11: sandbox: "),
            ("model = \"  \"", "/c.toml:1:9: model is empty"),
            ("model = ", "/c.toml:1:9: "),
            (
                "[team.models]\nLead = \"x\"",
                "/c.toml:2:1: team.models: \"Lead\" is not",
            ),
            (
                "[team]\nmodel = \"x\"",
                "/c.toml:2:1: unknown field `model`",
            ),
            ("# é\nnetwork = \"maybe\"", "/c.toml:2:11: network: "),
            (
                "[team]\nteammate_model = \"\"",
                "/c.toml:2:18: team.teammate_model is empty",
            ),
            (
                "[mcp_servers.files]\ncommand = \"npx\"\ncomand = \"x\"",
                "/c.toml:3:1: unknown field `comand`",
            ),
            (
                "model = \"x\"\n[mcp_servers.files]\nargs = []",
                "/c.toml:2:1: missing `command` (a program to start) or `url`",
            ),
            (
                "store = \"file:/tmp/h\"",
                "/c.toml:1:9: store \"file:/tmp/h\" is not a NATS store",
            ),
            ("store = \"nats://\"", "/c.toml:1:9: store: "),
            ("replicas = 7", "/c.toml:1:12: replicas = 7: give 1 to 5"),
            (
                "approval = \"ask\"",
                "/c.toml:1:12: approval: unknown approval mode",
            ),
            (
                "approval_timeout = \"0s\"",
                "/c.toml:1:20: approval_timeout \"0s\": it must be from 1s to 24h",
            ),
            (
                "approval_timeout = 600",
                "/c.toml:1:20: invalid type: integer `600`",
            ),
            (
                "[mcp_servers.\"my files\"]\ncommand = \"npx\"",
                "/c.toml:1:14: MCP server name \"my files\" may only hold",
            ),
        ] {
            let message = error(text);
            assert!(message.starts_with(expected), "{text:?}: {message}");
            assert!(!message.contains('\n'), "one line: {message}");
        }
    }

    #[test]
    fn values_keep_their_position() {
        let values = parse(
            Path::new("/c.toml"),
            "# comment\nmodel = \"deepseek-chat\"\n[team.models]\nreviewer = \"gpt-4.1-mini\"\n\
             [mcp_servers.files]\ncommand = \"npx\"\n",
        )
        .unwrap();
        let model = values.model.unwrap();
        assert_eq!(model.value, "deepseek-chat");
        assert_eq!((model.at.line, model.at.column), (2, 9));
        let reviewer = &values.team_models["reviewer"];
        assert_eq!((reviewer.at.line, reviewer.at.column), (4, 12));
        let files = &values.mcp_servers[&ServerName::new("files").unwrap()];
        assert!(
            matches!(&files.value.transport, troupe_mcp::Transport::Stdio { command, .. } if command == "npx"),
            "{files:?}"
        );
        assert_eq!((files.at.line, files.at.column), (5, 1));
    }
}
