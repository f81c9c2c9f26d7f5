//! The model a run uses: the provider built from a [`ModelSpec`] (the API key read from the
//! environment, or the script loaded and checked), the secrets kept out of tools and logs, and
//! script paths recorded absolute.

use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use troupe_llm::{ClientOptions, ModelSpec, ModelSpecExt, ProviderFactory, ProviderKind};

use crate::exit::Failure;

/// The Lead's name: the scripted provider's agent key (`{"agents": {"lead": […]}}`).
pub(super) const LEAD: &str = "lead";

/// What [`provider_factory`] builds: the model factory, plus the secrets a run must keep out of
/// tools and logs: the variables that may hold API keys (the providers' defaults and
/// `--api-key-env`), and the key in use.
pub(super) struct ModelSetup {
    pub(super) factory: Arc<ProviderFactory>,
    pub(super) secret_env: Vec<String>,
    pub(super) secrets: Vec<String>,
}

/// Reads the API key and builds the client, or loads and checks the script (a script without
/// steps for the Lead is refused here, before any session exists).
pub(super) fn provider_factory(spec: &ModelSpec, pace: Duration) -> Result<ModelSetup, Failure> {
    let config = spec.resolve(&|var| std::env::var(var).ok())?;
    let mut secret_env: Vec<String> = ["DEEPSEEK_API_KEY", "OPENAI_API_KEY"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    secret_env.extend(spec.api_key_env.iter().cloned());
    secret_env.sort();
    secret_env.dedup();
    let secrets = match &config {
        troupe_llm::ProviderConfig::Http(http) => http
            .api_key
            .iter()
            .map(|k| k.expose_secret().to_owned())
            .filter(|k| !k.is_empty())
            .collect(),
        troupe_llm::ProviderConfig::Script { .. } => Vec::new(),
    };
    let factory = ProviderFactory::new(config, ClientOptions::default())?.with_script_pace(pace);
    // A script without steps for the Lead is refused now rather than after creating a session.
    factory.for_agent(LEAD)?;
    Ok(ModelSetup {
        factory: Arc::new(factory),
        secret_env,
        secrets,
    })
}

/// Records a script path as an absolute path, so `troupe resume` finds it from anywhere.
pub(super) fn absolute_script(mut spec: ModelSpec) -> Result<ModelSpec, Failure> {
    if spec.provider == ProviderKind::Script {
        let path = std::path::absolute(&spec.model)
            .map_err(|e| Failure::bad_input(anyhow!("script path {}: {e}", spec.model)))?;
        spec.model = path.display().to_string();
    }
    Ok(spec)
}
