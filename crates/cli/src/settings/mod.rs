//! Settings: the configuration files and the flags merged into one set of values, each with
//! its source — the one place where a flag, a project file and a user file meet.
//!
//! Files (TOML, `file.rs`): the user's `$TROUPE_HOME/config.toml` (the home's, so `--home DIR`
//! reads `DIR/config.toml`) and the project's `<workspace>/.troupe/config.toml`. Precedence,
//! key by key: a flag over the project file over the user file over the default — except that
//! `base_url`, `api_key_env` and `tool_choice` go with the `model` they were written beside
//! (they come from the layer that gives the model; with `--model`, only from their flags). Every key is its
//! flag's name with `_` for `-`; the Team ones sit under `[team]`:
//!
//! | key | flag |
//! |---|---|
//! | `model`, `base_url`, `api_key_env`, `tool_choice` | `--model`, `--base-url`, `--api-key-env`, `--tool-choice` |
//! | `sandbox`, `network` | `--sandbox`, `--network` |
//! | `project_instructions` (bool) | `--no-project-instructions` (sets false) |
//! | `approval` (`never`, `on-request`), `approval_timeout` (a duration: `"10m"`, `"90s"`) | `--approval`, `--approval-timeout` |
//! | `stall_after` (a duration: `"10m"`) | `--stall-after` (never recorded: `run` reads both files, `resume`, `demo`, `team show` and `web` the user's) |
//! | `store`, `replicas` (the user's file only) | `--store` (and `$TROUPE_STORE`), `--replicas` |
//! | `[team] teammate_model` | `--teammate-model` |
//! | `[team] worktree` (bool) | `--worktree` (each teammate in its own git worktree) |
//! | `[team] max_members`, `max_tasks`, `max_pending_messages`, `max_message_bytes`, `disposal_timeout_ms` | the limit flags |
//! | `[team] budget_tokens` (1 or more), `budget_usd` (above 0) | `--budget-tokens`, `--budget-usd` |
//! | `[team.models] <name> = "M"` | — (a teammate's model by name; wins over `teammate_model`) |
//! | `[prices] "<model>" = {input, output, cached}` | — (USD per million tokens; over the built-in prices) |
//! | `[mcp_servers.<name>]` | `--mcp-config FILE` (its servers *replace* the files' servers) |
//!
//! `store` (a `nats://…` URL; the JSONL files are the home's, chosen with `--home`) and
//! `replicas` are read by every command (`main`, [`UserStore`]), so they sit in the user's
//! file only: `--store` and `$TROUPE_STORE` win over `store`, `--replicas` over `replicas`
//! ([`StoreSettings`]).
//!
//! MCP servers merge by name: a project's `[mcp_servers.<name>]` replaces the user's of the
//! same name (the whole table), the others add up. `--mcp-config FILE` gives the servers of
//! the run outright — the files' are not started, as `--model` takes no `base_url` from a
//! file — so an empty FILE runs without any; `troupe resume --mcp-config FILE` replaces the
//! recorded servers the same way.
//!
//! `[prices]` merge by model name (a project's price replaces a user's), over the built-in
//! ones (`troupe_session::ledger::BUILTIN_PRICES`); every command that prices usage reads
//! them (`run`, `resume`, `demo`, `team show`), as `troupe resume` reads the budget keys when
//! no budget flag is given: neither is recorded in the session.
//!
//! Apart from `store` and `replicas`, the files configure *new* sessions (`troupe run`, and
//! what `troupe config` shows): a
//! session records what it started with, and `troupe resume` uses that record, changed only by
//! the flags given to it. Validation happens before anything is written; an unknown key or a
//! bad value is bad input (exit 2) naming `FILE:LINE:COLUMN`.

mod file;
// `troupe config` is reached as `settings::show`, not re-exported here: `show.rs` reads the
// work flags (`crate::work`), which read this module, so a re-export would be a circle.
pub(crate) mod show;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use troupe_llm::{LlmError, ModelFlags, ModelSpec, ModelSpecExt, ToolChoice};
use troupe_mcp::{McpServers, ServerConfig, ServerName};
use troupe_session::approval::{ApprovalMode, ApprovalPolicy};
use troupe_session::events::TeammateModels;
use troupe_session::ledger::{Budget, Price, Prices};
use troupe_team::TeamLimits;
use troupe_tools::{NetworkAccess, SandboxMode, SandboxPolicy};

pub(crate) use file::{
    LIMIT_KEYS, Location, Scope, approval_timeout, budget_tokens, budget_usd, stall_after,
};

use crate::exit::Failure;
use file::{At, ConfigFile};

/// Where a value in force came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Nothing set it.
    Default,
    /// The flag named.
    Flag(&'static str),
    /// The file the flag named (`--mcp-config FILE`).
    FlagFile(&'static str, PathBuf),
    /// The environment variable named (`TROUPE_STORE`).
    Env(&'static str),
    /// A configuration file, at this position.
    File { scope: Scope, at: Location },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::FlagFile(flag, path) => write!(f, "flag {flag} {}", path.display()),
            Source::Env(variable) => write!(f, "env ${variable}"),
            Source::File { scope, at } => write!(f, "{} {at}", scope.as_str()),
        }
    }
}

/// A value and its source.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sourced<T> {
    pub(crate) value: T,
    pub(crate) source: Source,
}

impl<T> Sourced<T> {
    fn from_file(value: At<T>, scope: Scope) -> Self {
        Self {
            value: value.value,
            source: Source::File {
                scope,
                at: value.at,
            },
        }
    }

    /// The file position, when a file set it.
    pub(crate) fn location(&self) -> Option<&Location> {
        match &self.source {
            Source::File { at, .. } => Some(at),
            _ => None,
        }
    }
}

/// The settings flags as typed (each `None` / `false` when not given).
#[derive(Debug, Clone, Default)]
pub(crate) struct FlagValues {
    pub(crate) model: ModelFlags,
    pub(crate) teammate_model: Option<String>,
    pub(crate) sandbox: Option<SandboxMode>,
    pub(crate) network: Option<NetworkAccess>,
    /// The limit flags, by the key of [`LIMIT_KEYS`].
    pub(crate) limits: BTreeMap<&'static str, u64>,
    pub(crate) no_project_instructions: bool,
    /// `--mcp-config FILE`: the file and its servers (read and checked already).
    pub(crate) mcp_config: Option<(PathBuf, McpServers)>,
    pub(crate) approval: Option<ApprovalMode>,
    pub(crate) approval_timeout: Option<std::time::Duration>,
    pub(crate) budget_tokens: Option<u64>,
    pub(crate) budget_usd: Option<f64>,
    /// `--worktree`.
    pub(crate) worktree: bool,
    pub(crate) stall_after: Option<std::time::Duration>,
}

/// Where the two configuration files of a run of the home `home` in `workspace` are.
pub(crate) fn config_paths(home: &Path, workspace: &Path) -> [(Scope, PathBuf); 2] {
    let home = std::path::absolute(home).unwrap_or_else(|_| home.to_path_buf());
    [
        (Scope::User, home.join("config.toml")),
        (
            Scope::Project,
            workspace.join(".troupe").join("config.toml"),
        ),
    ]
}

/// The store the command uses and the replicas of a NATS stream it creates, each with its
/// source — `--store` over `$TROUPE_STORE` over the user's `store` over the home's JSONL
/// files; `--replicas` over the user's `replicas` over 1 — resolved by `main` for every
/// command and shown by `troupe config`.
#[derive(Debug, Clone)]
pub(crate) struct StoreSettings {
    /// `nats://…`, or `file:DIR` for the JSONL files of the home `DIR`.
    pub(crate) store: Sourced<String>,
    pub(crate) replicas: Sourced<usize>,
}

impl StoreSettings {
    /// The home's JSONL files, one replica: what a command uses when nothing names a store.
    pub(crate) fn files(home: &Path) -> Self {
        Self {
            store: Sourced {
                value: format!("file:{}", home.display()),
                source: Source::Default,
            },
            replicas: Sourced {
                value: 1,
                source: Source::Default,
            },
        }
    }
}

/// The `store` and `replicas` of the user's file of the home `home` (the keys every command
/// reads; a project file may not set them).
#[derive(Debug, Default)]
pub(crate) struct UserStore {
    pub(crate) store: Option<Sourced<String>>,
    pub(crate) replicas: Option<Sourced<usize>>,
}

impl UserStore {
    /// Reads the user's file (`<home>/config.toml`). A missing file sets nothing; a bad one
    /// is bad input (exit 2) naming `FILE:LINE:COLUMN`, for every command but `store copy`.
    pub(crate) fn load(home: &Path) -> Result<Self, Failure> {
        let [(scope, path), _] = config_paths(home, Path::new(""));
        let file = ConfigFile::load(scope, path)?;
        let Some(values) = file.values else {
            return Ok(Self::default());
        };
        Ok(Self {
            store: values.store.map(|v| Sourced::from_file(v, scope)),
            replicas: values.replicas.map(|v| Sourced::from_file(v, scope)),
        })
    }
}

/// The stall threshold of a command over stored sessions (`resume`, `team show`, `web`, and
/// `demo`, whose project is new): `flag` (`--stall-after`) when given, else `stall_after` of
/// the user's file of `home`, else 10 minutes. A project's file configures new runs only (as
/// every key of it does), so these commands never fail on one; the user's file is checked by
/// every command anyway ([`UserStore::load`]).
///
/// # Errors
/// A user's file that is bad (bad input naming `FILE:LINE:COLUMN`).
pub(crate) fn stall_after_in(
    home: &Path,
    flag: Option<std::time::Duration>,
) -> Result<troupe_team::StallAfter, Failure> {
    let flags = FlagValues {
        stall_after: flag,
        ..FlagValues::default()
    };
    if flag.is_some() {
        return Ok(Settings::merge(Vec::new(), flags).stall_after());
    }
    let [(scope, path), _] = config_paths(home, home);
    let files = vec![ConfigFile::load(scope, path)?];
    Ok(Settings::merge(files, flags).stall_after())
}

/// The settings in force for a new session: every key's value and source.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The user's and the project's file, found or not.
    pub(crate) files: Vec<(Scope, PathBuf, bool)>,
    pub(crate) model: Option<Sourced<String>>,
    pub(crate) base_url: Option<Sourced<String>>,
    pub(crate) api_key_env: Option<Sourced<String>>,
    pub(crate) tool_choice: Option<Sourced<ToolChoice>>,
    pub(crate) sandbox: Sourced<SandboxMode>,
    pub(crate) network: Sourced<NetworkAccess>,
    pub(crate) project_instructions: Sourced<bool>,
    pub(crate) approval: Sourced<ApprovalMode>,
    pub(crate) approval_timeout: Sourced<std::time::Duration>,
    /// How long a resident task owner may log nothing before its task is shown stalled.
    pub(crate) stall_after: Sourced<std::time::Duration>,
    pub(crate) teammate_model: Option<Sourced<String>>,
    pub(crate) team_models: BTreeMap<String, Sourced<String>>,
    /// Every Team limit (defaults filled in), by the key of [`LIMIT_KEYS`], in that order.
    pub(crate) limits: Vec<(&'static str, Sourced<u64>)>,
    /// The MCP servers by name: `--mcp-config`'s, else the files' (a project's replaces a
    /// user's of the same name).
    pub(crate) mcp_servers: BTreeMap<ServerName, Sourced<ServerConfig>>,
    /// Whether any source named MCP servers (`--mcp-config`, even an empty file, or a file's
    /// `[mcp_servers.<name>]`): a session records them only then.
    mcp_named: bool,
    /// `[prices]` by model name (a project's replaces a user's of the same name).
    pub(crate) prices: BTreeMap<String, Sourced<Price>>,
    pub(crate) budget_tokens: Option<Sourced<u64>>,
    pub(crate) budget_usd: Option<Sourced<f64>>,
    /// `[team] worktree` / `--worktree` (default false).
    pub(crate) worktree: Sourced<bool>,
}

impl Settings {
    /// Reads the user's and the project's configuration files (for a run of the home `home`
    /// in `workspace`) and merges them under `flags`. A file that is missing is no file; a
    /// bad one is bad input naming `FILE:LINE:COLUMN`.
    pub(crate) fn load(home: &Path, workspace: &Path, flags: FlagValues) -> Result<Self, Failure> {
        let mut files = Vec::new();
        for (scope, path) in config_paths(home, workspace) {
            files.push(ConfigFile::load(scope, path)?);
        }
        Ok(Self::merge(files, flags))
    }

    fn merge(files: Vec<ConfigFile>, flags: FlagValues) -> Self {
        let statuses = files
            .iter()
            .map(|f| (f.scope, f.path.clone(), f.values.is_some()))
            .collect();
        // Highest precedence first: the project file, then the user's.
        let mut layers: Vec<(Scope, file::FileValues)> = files
            .into_iter()
            .filter_map(|f| f.values.map(|v| (f.scope, v)))
            .collect();
        layers.sort_by_key(|(scope, _)| match scope {
            Scope::Project => 0,
            Scope::User => 1,
        });
        macro_rules! pick {
            ($flag:expr, $name:literal, $field:ident) => {
                match $flag {
                    Some(value) => Some(Sourced {
                        value,
                        source: Source::Flag($name),
                    }),
                    None => layers.iter_mut().find_map(|(scope, values)| {
                        values.$field.take().map(|v| Sourced::from_file(v, *scope))
                    }),
                }
            };
        }
        // `base_url`, `api_key_env` and `tool_choice` belong to the `model` they were written
        // with: they come from the layer that gave the model (a `--model` flag: only their
        // flags), so a user's local server is never asked for a project's `openai:` model, nor
        // a script refused for its tool choice. Their flags apply over any layer; with the
        // default model, the highest layer setting them gives them (a key variable for the
        // default provider, say).
        let model_layer = match &flags.model.model {
            Some(_) => Some(None),
            None => layers
                .iter()
                .position(|(_, values)| values.model.is_some())
                .map(Some),
        };
        let model = pick!(flags.model.model.clone(), "--model", model);
        let base_url = match flags.model.base_url.clone() {
            Some(value) => Some(Sourced {
                value,
                source: Source::Flag("--base-url"),
            }),
            None => bound(&mut layers, model_layer, |values| values.base_url.take()),
        };
        let api_key_env = match flags.model.api_key_env.clone() {
            Some(value) => Some(Sourced {
                value,
                source: Source::Flag("--api-key-env"),
            }),
            None => bound(&mut layers, model_layer, |values| values.api_key_env.take()),
        };
        let tool_choice = match flags.model.tool_choice {
            Some(value) => Some(Sourced {
                value,
                source: Source::Flag("--tool-choice"),
            }),
            None => bound(&mut layers, model_layer, |values| values.tool_choice.take()),
        };
        let teammate_model = pick!(
            flags.teammate_model.clone(),
            "--teammate-model",
            teammate_model
        );
        let worktree =
            pick!(flags.worktree.then_some(true), "--worktree", worktree).unwrap_or(Sourced {
                value: false,
                source: Source::Default,
            });
        let default = SandboxPolicy::default();
        let sandbox = pick!(flags.sandbox, "--sandbox", sandbox).unwrap_or(Sourced {
            value: default.filesystem,
            source: Source::Default,
        });
        let network = pick!(flags.network, "--network", network).unwrap_or(Sourced {
            value: default.network,
            source: Source::Default,
        });
        let project_instructions = pick!(
            flags.no_project_instructions.then_some(false),
            "--no-project-instructions",
            project_instructions
        )
        .unwrap_or(Sourced {
            value: true,
            source: Source::Default,
        });
        let default_approval = ApprovalPolicy::default();
        let approval = pick!(flags.approval, "--approval", approval).unwrap_or(Sourced {
            value: default_approval.mode,
            source: Source::Default,
        });
        let approval_timeout = pick!(
            flags.approval_timeout,
            "--approval-timeout",
            approval_timeout
        )
        .unwrap_or(Sourced {
            value: default_approval.timeout(),
            source: Source::Default,
        });
        let budget_tokens = pick!(flags.budget_tokens, "--budget-tokens", budget_tokens);
        let budget_usd = pick!(flags.budget_usd, "--budget-usd", budget_usd);
        let stall_after =
            pick!(flags.stall_after, "--stall-after", stall_after).unwrap_or(Sourced {
                value: std::time::Duration::from_millis(troupe_team::STALL_AFTER_DEFAULT_MS),
                source: Source::Default,
            });
        let defaults = serde_json::to_value(TeamLimits::default()).unwrap_or_default();
        let limits = LIMIT_KEYS
            .into_iter()
            .map(|(key, flag, json_key)| {
                let from_flag = flags.limits.get(key).map(|value| Sourced {
                    value: *value,
                    source: Source::Flag(flag),
                });
                let value = from_flag
                    .or_else(|| {
                        layers.iter_mut().find_map(|(scope, values)| {
                            values
                                .limits
                                .remove(key)
                                .map(|v| Sourced::from_file(v, *scope))
                        })
                    })
                    .unwrap_or(Sourced {
                        value: defaults[json_key].as_u64().unwrap_or_default(),
                        source: Source::Default,
                    });
                (key, value)
            })
            .collect();
        // Tables by name: the user's first, the project's replacing them.
        let mut team_models = BTreeMap::new();
        let mut mcp_servers = BTreeMap::new();
        let mut prices = BTreeMap::new();
        for (scope, values) in layers.into_iter().rev() {
            for (name, price) in values.prices {
                prices.insert(name, Sourced::from_file(price, scope));
            }
            for (name, model) in values.team_models {
                team_models.insert(name, Sourced::from_file(model, scope));
            }
            for (name, server) in values.mcp_servers {
                mcp_servers.insert(name, Sourced::from_file(server, scope));
            }
        }
        // `--mcp-config FILE` replaces the files' servers.
        let mcp_named = flags.mcp_config.is_some() || !mcp_servers.is_empty();
        if let Some((path, servers)) = flags.mcp_config {
            mcp_servers = servers
                .iter()
                .map(|(name, server)| {
                    let source = Source::FlagFile("--mcp-config", path.clone());
                    (
                        name.clone(),
                        Sourced {
                            value: server.clone(),
                            source,
                        },
                    )
                })
                .collect();
        }
        Self {
            files: statuses,
            model,
            base_url,
            api_key_env,
            tool_choice,
            sandbox,
            network,
            project_instructions,
            approval,
            approval_timeout,
            stall_after,
            teammate_model,
            team_models,
            limits,
            mcp_servers,
            mcp_named,
            prices,
            budget_tokens,
            budget_usd,
            worktree,
        }
    }

    /// The prices in force: the built-in ones with `[prices]` over them.
    pub(crate) fn prices(&self) -> Prices {
        Prices::builtin().with(
            self.prices
                .iter()
                .map(|(name, price)| (name.clone(), price.value)),
        )
    }

    /// The budget in force (flags over the files).
    pub(crate) fn budget(&self) -> Budget {
        Budget {
            tokens: self.budget_tokens.as_ref().map(|b| b.value),
            usd: self.budget_usd.as_ref().map(|b| b.value),
        }
    }

    /// The warnings about `[prices]` and the budget for a run of the models `models` (their
    /// price keys): a price for a model that is neither built in nor one this run uses (a
    /// typo, or a model no member runs: its price is kept), and — with a USD budget — a model
    /// of the run without a price (its usage counts no dollars).
    pub(crate) fn price_warnings(&self, models: &[String]) -> Vec<String> {
        let mut warnings = Vec::new();
        for (name, price) in &self.prices {
            if !Prices::is_builtin(name) && !models.contains(name) {
                let at = price
                    .location()
                    .map_or_else(String::new, |at| format!("{at}: "));
                warnings.push(format!(
                    "troupe: warning: {at}prices.\"{}\": no model of this run and no built-in price has that \
                     name (the price is kept for a model that has it)",
                    name.escape_debug()
                ));
            }
        }
        if self.budget_usd.is_some() {
            let prices = self.prices();
            for model in models {
                if prices.get(model).is_none() {
                    warnings.push(format!(
                        "troupe: warning: --budget-usd counts priced usage only, and model \"{}\" has no price: \
                         add [prices] \"{}\" = {{input = …, output = …}} to the configuration",
                        model.escape_debug(),
                        model.escape_debug()
                    ));
                }
            }
        }
        warnings
    }

    /// The stall threshold in force ([`Settings::stall_after`]).
    pub(crate) fn stall_after(&self) -> troupe_team::StallAfter {
        let ms = u64::try_from(self.stall_after.value.as_millis()).unwrap_or(u64::MAX);
        troupe_team::StallAfter::from_ms(ms).unwrap_or_default()
    }

    /// The MCP servers a new session starts and records: `None` when no source names any
    /// (nothing is recorded), else those of [`Settings::mcp_servers`] (an empty set when
    /// `--mcp-config` named an empty file).
    pub(crate) fn mcp(&self) -> Option<McpServers> {
        self.mcp_named.then(|| {
            self.mcp_servers
                .iter()
                .map(|(name, server)| (name.clone(), server.value.clone()))
                .collect()
        })
    }

    /// The model settings as the flags of [`ModelSpec::from_flags`].
    pub(crate) fn model_flags(&self) -> ModelFlags {
        ModelFlags {
            model: self.model.as_ref().map(|m| m.value.clone()),
            base_url: self.base_url.as_ref().map(|m| m.value.clone()),
            api_key_env: self.api_key_env.as_ref().map(|m| m.value.clone()),
            tool_choice: self.tool_choice.as_ref().map(|m| m.value),
        }
    }

    /// The Lead's model (the session's). A refusal names the position of the model key that
    /// came from a file, if any did (`model`, else `base_url`, `api_key_env`, `tool_choice`).
    pub(crate) fn model_spec(&self) -> Result<ModelSpec, Failure> {
        ModelSpec::from_flags(&self.model_flags()).map_err(|e| {
            let at = [&self.model, &self.base_url, &self.api_key_env]
                .into_iter()
                .flatten()
                .find_map(Sourced::location)
                .or_else(|| self.tool_choice.as_ref().and_then(Sourced::location));
            located(e, at)
        })
    }

    /// The teammate models beside the Lead's `lead` ([`ModelSpec::sibling`]): `teammate_model`
    /// for every teammate, `[team.models]` by name. A refusal names the file position of the
    /// value (or its flag).
    pub(crate) fn teammate_models(&self, lead: &ModelSpec) -> Result<TeammateModels, Failure> {
        let spec = |value: &Sourced<String>, key: &str| {
            lead.sibling(&value.value)
                .map_err(|e| match value.location() {
                    Some(at) => Failure::bad_input(anyhow!(
                        "{at}: {key} \"{}\": {e}",
                        value.value.escape_debug()
                    )),
                    None => Failure::bad_input(anyhow!("--teammate-model {}: {e}", value.value)),
                })
        };
        let mut models = TeammateModels::default();
        if let Some(value) = &self.teammate_model {
            models.default = Some(spec(value, "team.teammate_model")?);
        }
        for (name, value) in &self.team_models {
            models
                .by_name
                .insert(name.clone(), spec(value, &format!("team.models.{name}"))?);
        }
        Ok(models)
    }

    /// The Team limits in force. File values were checked when read; a flag's value is
    /// refused here naming the flag.
    pub(crate) fn team_limits(&self) -> Result<TeamLimits, Failure> {
        let mut limits = TeamLimits::default();
        for ((key, value), (_, flag, json_key)) in self.limits.iter().zip(LIMIT_KEYS) {
            limits
                .set_json(json_key, &serde_json::json!(value.value))
                .map_err(|e| match (&value.source, e) {
                    (
                        Source::File { at, .. },
                        troupe_team::TeamError::InvalidConfig { reason, .. },
                    ) => {
                        Failure::bad_input(anyhow!("{at}: team.{key} = {}: {reason}", value.value))
                    }
                    (_, troupe_team::TeamError::InvalidConfig { value, reason, .. }) => {
                        Failure::bad_input(anyhow!("{flag} {value}: {reason}"))
                    }
                    (_, other) => Failure::bad_input(other),
                })?;
        }
        limits
            .validate()
            .map_err(|e| Failure::bad_input(anyhow!("invalid Team limits: {e}")))?;
        Ok(limits)
    }

    /// The approvals of a new session.
    pub(crate) fn approval_policy(&self) -> ApprovalPolicy {
        ApprovalPolicy {
            mode: self.approval.value,
            timeout_ms: u64::try_from(self.approval_timeout.value.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The sandbox of a new session.
    pub(crate) fn sandbox_policy(&self) -> SandboxPolicy {
        SandboxPolicy {
            filesystem: self.sandbox.value,
            network: self.network.value,
        }
    }
}

/// A key that goes with the model (see [`Settings`]'s merge): from the layer that gave the
/// model (`Some(Some(index))`), none when a flag gave it (`Some(None)`), else the highest layer
/// that sets it.
fn bound<T>(
    layers: &mut [(Scope, file::FileValues)],
    model_layer: Option<Option<usize>>,
    take: fn(&mut file::FileValues) -> Option<At<T>>,
) -> Option<Sourced<T>> {
    match model_layer {
        Some(None) => None,
        Some(Some(index)) => layers
            .get_mut(index)
            .and_then(|(scope, values)| take(values).map(|v| Sourced::from_file(v, *scope))),
        None => layers
            .iter_mut()
            .find_map(|(scope, values)| take(values).map(|v| Sourced::from_file(v, *scope))),
    }
}

/// A model-spec refusal, prefixed with the file position of the value it concerns.
fn located(error: LlmError, at: Option<&Location>) -> Failure {
    match at {
        Some(at) => Failure::bad_input(anyhow!("{at}: {error}")),
        None => Failure::bad_input(error),
    }
}
