//! `troupe config`: the configuration a new `troupe run` in the workspace would use, every
//! value with its source (a flag, the project's or the user's file with line and column, or
//! the default), and the `AGENTS.md` files its members would be given.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use serde_json::{Value, json};
use troupe_llm::ModelSpec;
use troupe_mcp::{ServerConfig, Transport};
use troupe_runtime::instructions::{Discovery, discover};

use super::{Settings, Source, Sourced, StoreSettings};
use crate::exit::Failure;
use crate::output::{Stdout, align_columns, escape_controls, fit};
use crate::work::{
    ApprovalArgs, InstructionArgs, ModelArgs, SandboxArgs, TeamLimitArgs, settings_flags,
};

/// `troupe config` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ConfigFlags {
    /// The workspace whose project configuration (.troupe/config.toml) and AGENTS.md files
    /// are read (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sandbox: SandboxArgs,
    #[command(flatten)]
    limits: TeamLimitArgs,
    #[command(flatten)]
    instructions: InstructionArgs,
    #[command(flatten)]
    approval: ApprovalArgs,
    /// Print one JSON object: `{"workspace","files","settings","projectInstructions"}`.
    #[arg(long)]
    json: bool,
}

/// The widest MCP server line (its command line or URL, see [`server_line`]) the table
/// shows, in display columns: a longer one is cut, ending with `…`, so that one long command
/// does not widen every row; `--json` has every field whole. (The other values are single
/// settings — a model, a URL, a path — shown whole.)
const MAX_SHOWN_WIDTH: usize = 48;

/// One row: the key, its value in force, where it came from.
struct Row {
    key: String,
    value: Value,
    source: Source,
    /// Said after the source (why a default is what it is).
    note: Option<&'static str>,
    /// How the table shows the value, when not as its JSON (an MCP server's command line).
    shown: Option<String>,
}

/// `troupe config`: validates the settings exactly as `troupe run` does (a bad file or value
/// is bad input, exit 2, naming `FILE:LINE:COLUMN`) and prints them.
///
/// It opens no store: `store` is shown as configured (a NATS URL is checked, not connected
/// to), so a NATS server that is down or not set up yet does not stop it.
pub(crate) fn show(flags: ConfigFlags, home: &Path, store: &StoreSettings) -> Result<(), Failure> {
    let workspace = match &flags.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()
            .map_err(|e| Failure::bad_input(anyhow!("cannot read the current directory: {e}")))?,
    };
    let workspace = crate::work::check_workspace(&workspace)?;
    let flag_values = settings_flags(
        &flags.model,
        &flags.sandbox,
        &flags.limits,
        &flags.instructions,
        &flags.approval,
        &crate::work::BudgetArgs::default(),
        &crate::work::WorktreeArgs::default(),
    )?;
    let settings = Settings::load(home, &workspace, flag_values)?;
    let spec = settings.model_spec()?;
    let teammates = settings.teammate_models(&spec)?;
    settings.team_limits()?;
    let rows = rows(&settings, store, &spec, &teammates);
    let found = settings
        .project_instructions
        .value
        .then(|| discover(home, &workspace));
    let mut out = Stdout::lock();
    if flags.json {
        let value = json!({
            "workspace": workspace.display().to_string(),
            "files": settings.files.iter().map(|(scope, path, found)| json!({
                "scope": scope.as_str(),
                "path": path.display().to_string(),
                "found": found,
            })).collect::<Vec<_>>(),
            "settings": rows.iter().map(|row| (row.key.clone(), json!({
                "value": row.value,
                "source": source_json(&row.source),
            }))).collect::<serde_json::Map<_, _>>(),
            "projectInstructions": instructions_json(found.as_ref()),
        });
        writeln!(out, "{value}").context("writing output")?;
        return Ok(());
    }
    let mut lines = vec![format!(
        "workspace: {}",
        escape_controls(&workspace.display().to_string())
    )];
    for (scope, path, found) in &settings.files {
        lines.push(format!(
            "{} config: {}{}",
            scope.as_str(),
            escape_controls(&path.display().to_string()),
            if *found { "" } else { " (not found)" }
        ));
    }
    lines.push(String::new());
    let mut table = vec![vec![
        "KEY".to_owned(),
        "VALUE".to_owned(),
        "SOURCE".to_owned(),
    ]];
    for row in &rows {
        let value = match (&row.shown, &row.value) {
            (Some(shown), _) => fit(shown, MAX_SHOWN_WIDTH).0,
            (None, Value::Null) => "-".to_owned(),
            (None, Value::String(text)) => escape_controls(text).into_owned(),
            (None, other) => escape_controls(&other.to_string()).into_owned(),
        };
        let source = match row.note {
            Some(note) => format!("{} ({note})", row.source),
            None => row.source.to_string(),
        };
        table.push(vec![
            row.key.clone(),
            value,
            escape_controls(&source).into_owned(),
        ]);
    }
    lines.extend(align_columns(&table));
    lines.push(String::new());
    lines.extend(instructions_lines(found.as_ref()));
    for line in lines {
        if out.is_closed() {
            break;
        }
        writeln!(out, "{line}").context("writing output")?;
    }
    Ok(())
}

/// Every key's row, in the documented order.
fn rows(
    settings: &Settings,
    store: &StoreSettings,
    spec: &ModelSpec,
    teammates: &troupe_session::events::TeammateModels,
) -> Vec<Row> {
    let source_of =
        |value: Option<&Sourced<String>>| value.map_or(Source::Default, |v| v.source.clone());
    // A default that comes with the provider says so.
    let preset = |value: Option<&Sourced<String>>, present: bool| {
        (value.is_none() && present).then_some("the provider's preset")
    };
    let mut rows = vec![
        Row {
            key: "model".to_owned(),
            value: json!(spec.to_string()),
            source: source_of(settings.model.as_ref()),
            note: None,
            shown: None,
        },
        Row {
            key: "base_url".to_owned(),
            value: json!(spec.base_url),
            source: source_of(settings.base_url.as_ref()),
            note: preset(settings.base_url.as_ref(), spec.base_url.is_some()),
            shown: None,
        },
        Row {
            key: "api_key_env".to_owned(),
            value: json!(spec.api_key_env),
            source: source_of(settings.api_key_env.as_ref()),
            note: preset(settings.api_key_env.as_ref(), spec.api_key_env.is_some()),
            shown: None,
        },
        Row {
            key: "tool_choice".to_owned(),
            value: json!(spec.tool_choice.as_str()),
            source: settings
                .tool_choice
                .as_ref()
                .map_or(Source::Default, |v| v.source.clone()),
            note: None,
            shown: None,
        },
        Row {
            key: "sandbox".to_owned(),
            value: json!(settings.sandbox.value.as_str()),
            source: settings.sandbox.source.clone(),
            note: None,
            shown: None,
        },
        Row {
            key: "network".to_owned(),
            value: json!(settings.network.value.as_str()),
            source: settings.network.source.clone(),
            note: None,
            shown: None,
        },
        Row {
            key: "project_instructions".to_owned(),
            value: json!(settings.project_instructions.value),
            source: settings.project_instructions.source.clone(),
            note: None,
            shown: None,
        },
        Row {
            key: "approval".to_owned(),
            value: json!(settings.approval.value.as_str()),
            source: settings.approval.source.clone(),
            note: None,
            shown: None,
        },
        Row {
            key: "approval_timeout".to_owned(),
            value: json!(humantime::format_duration(settings.approval_timeout.value).to_string()),
            source: settings.approval_timeout.source.clone(),
            note: None,
            shown: None,
        },
        Row {
            key: "stall_after".to_owned(),
            value: json!(humantime::format_duration(settings.stall_after.value).to_string()),
            source: settings.stall_after.source.clone(),
            note: None,
            shown: None,
        },
        Row {
            key: "store".to_owned(),
            // Credentials in a NATS URL are redacted (`nats://user:***@host`).
            value: json!(troupe_store_nats::redact_url(&store.store.value)),
            source: store.store.source.clone(),
            note: (store.store.source == Source::Default).then_some("the home's JSONL files"),
            shown: None,
        },
        Row {
            key: "replicas".to_owned(),
            value: json!(store.replicas.value),
            source: store.replicas.source.clone(),
            note: None,
            shown: None,
        },
        Row {
            key: "team.teammate_model".to_owned(),
            value: json!(teammates.default.as_ref().map(ToString::to_string)),
            source: source_of(settings.teammate_model.as_ref()),
            note: teammates
                .default
                .is_none()
                .then_some("teammates run the Lead's model"),
            shown: None,
        },
    ];
    for (name, spec) in &teammates.by_name {
        rows.push(Row {
            key: format!("team.models.{name}"),
            value: json!(spec.to_string()),
            source: source_of(settings.team_models.get(name)),
            note: None,
            shown: None,
        });
    }
    // `--worktree`, when a file turns it on (off is the default and not shown).
    if settings.worktree.value {
        rows.push(Row {
            key: "team.worktree".to_owned(),
            value: json!(true),
            source: settings.worktree.source.clone(),
            note: Some("each teammate works in its own git worktree"),
            shown: None,
        });
    }
    for (key, value) in &settings.limits {
        rows.push(Row {
            key: format!("team.{key}"),
            value: json!(value.value),
            source: value.source.clone(),
            note: None,
            shown: None,
        });
    }
    // The budget and the configured prices, when set (the built-in prices are in the README).
    for (key, value) in [
        (
            "team.budget_tokens",
            settings
                .budget_tokens
                .as_ref()
                .map(|b| (json!(b.value), b.source.clone())),
        ),
        (
            "team.budget_usd",
            settings
                .budget_usd
                .as_ref()
                .map(|b| (json!(b.value), b.source.clone())),
        ),
    ] {
        if let Some((value, source)) = value {
            rows.push(Row {
                key: key.to_owned(),
                value,
                source,
                note: None,
                shown: None,
            });
        }
    }
    for (name, price) in &settings.prices {
        rows.push(Row {
            key: format!("prices.\"{}\"", name.escape_debug()),
            value: json!(price.value),
            source: price.source.clone(),
            note: None,
            shown: None,
        });
    }
    for (name, server) in &settings.mcp_servers {
        rows.push(Row {
            key: format!("mcp_servers.{name}"),
            value: server_json(&server.value),
            source: server.source.clone(),
            note: None,
            shown: Some(server_line(&server.value)),
        });
    }
    rows
}

/// An MCP server as its `[mcp_servers.<name>]` table would say it, every default filled in:
/// `{"command", "args", "env"}` or `{"url", "bearer_token_env_var"?}`, then
/// `"enabled_tools"?`, `"startup_timeout_sec"`, `"tool_timeout_sec"`.
fn server_json(server: &ServerConfig) -> Value {
    let mut value = match &server.transport {
        Transport::Stdio { command, args, env } => {
            json!({"command": command, "args": args, "env": env})
        }
        Transport::Http {
            url,
            bearer_token_env_var,
        } => match bearer_token_env_var {
            Some(var) => json!({"url": url, "bearer_token_env_var": var}),
            None => json!({"url": url}),
        },
    };
    if let Some(tools) = &server.enabled_tools {
        value["enabled_tools"] = json!(tools);
    }
    value["startup_timeout_sec"] = seconds(server.startup_timeout);
    value["tool_timeout_sec"] = seconds(server.tool_timeout);
    value
}

/// An MCP server on one line of the table: its command line (`env K=V … command args…`,
/// quoted for a shell) or its URL (`url (bearer $VAR)`), then `enabled_tools` and timeouts
/// that are not the defaults (`--json` has every field).
fn server_line(server: &ServerConfig) -> String {
    use crate::hints::shell_quote;
    let mut line = match &server.transport {
        Transport::Stdio { command, args, env } => {
            let mut words: Vec<String> = Vec::new();
            if !env.is_empty() {
                words.push("env".to_owned());
                words.extend(env.iter().map(|(k, v)| shell_quote(&format!("{k}={v}"))));
            }
            words.push(shell_quote(command));
            words.extend(args.iter().map(|a| shell_quote(a)));
            words.join(" ")
        }
        Transport::Http {
            url,
            bearer_token_env_var,
        } => match bearer_token_env_var {
            Some(var) => format!("{url} (bearer ${var})"),
            None => url.clone(),
        },
    };
    if let Some(tools) = &server.enabled_tools {
        line.push_str(&format!(" (tools: {})", tools.join(", ")));
    }
    if server.startup_timeout != troupe_mcp::DEFAULT_STARTUP_TIMEOUT {
        line.push_str(&format!(" (startup {}s)", seconds(server.startup_timeout)));
    }
    if server.tool_timeout != troupe_mcp::DEFAULT_TOOL_TIMEOUT {
        line.push_str(&format!(" (tool {}s)", seconds(server.tool_timeout)));
    }
    line
}

/// A duration in seconds: a whole number when it is one (`10`, not `10.0`).
fn seconds(duration: std::time::Duration) -> Value {
    if duration.subsec_nanos() == 0 {
        json!(duration.as_secs())
    } else {
        json!(duration.as_secs_f64())
    }
}

fn source_json(source: &Source) -> Value {
    match source {
        Source::Default => json!({"kind": "default"}),
        Source::Flag(flag) => json!({"kind": "flag", "flag": flag}),
        Source::Env(variable) => json!({"kind": "env", "variable": variable}),
        Source::FlagFile(flag, path) => {
            json!({"kind": "flag", "flag": flag, "path": path.display().to_string()})
        }
        Source::File { scope, at } => json!({
            "kind": scope.as_str(),
            "path": at.path.display().to_string(),
            "line": at.line,
            "column": at.column,
        }),
    }
}

/// `null` when turned off; else the files in prompt order and those skipped.
fn instructions_json(found: Option<&Discovery>) -> Value {
    let Some(found) = found else {
        return Value::Null;
    };
    json!({
        "files": found.instructions.iter().flat_map(|i| &i.files).map(|f| json!({
            "path": f.path,
            "bytes": f.bytes,
            "included": f.text.len(),
        })).collect::<Vec<_>>(),
        "skipped": found.skipped.iter().map(|s| json!({
            "path": s.path.display().to_string(),
            "reason": s.reason,
        })).collect::<Vec<_>>(),
    })
}

fn instructions_lines(found: Option<&Discovery>) -> Vec<String> {
    let Some(found) = found else {
        return vec!["project instructions: off".to_owned()];
    };
    let mut lines = Vec::new();
    match &found.instructions {
        None => lines.push("project instructions: no AGENTS.md file".to_owned()),
        Some(instructions) => {
            lines.push("project instructions (in prompt order):".to_owned());
            for file in &instructions.files {
                let shown = escape_controls(&file.path).into_owned();
                lines.push(if file.is_cut() {
                    format!(
                        "  {shown} ({} bytes, {} included)",
                        file.bytes,
                        file.text.len()
                    )
                } else if file.text.trim().is_empty() {
                    format!("  {shown} ({} bytes, empty)", file.bytes)
                } else {
                    format!("  {shown} ({} bytes)", file.bytes)
                });
            }
        }
    }
    for skipped in &found.skipped {
        lines.push(format!(
            "  skipped: {}: {}",
            escape_controls(&skipped.path.display().to_string()),
            skipped.reason
        ));
    }
    lines
}
