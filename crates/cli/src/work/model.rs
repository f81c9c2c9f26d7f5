//! The models a run uses: a provider built for each [`ModelSpec`] the session names — the
//! Lead's (the session's model) and every teammate model — with its API key read from the
//! environment or its script loaded and checked, all before anything is written; the secrets
//! kept out of tools and logs; script paths recorded absolute.

use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use troupe_llm::{
    ClientOptions, LlmError, ModelProvider, ModelSpec, ModelSpecExt, ProviderFactory, ProviderKind,
};
use troupe_runtime::ModelSource;

use crate::exit::Failure;

/// The Lead's name: the scripted provider's agent key (`{"agents": {"lead": […]}}`).
pub(super) const LEAD: &str = "lead";

/// A provider factory per model spec of the session: the Lead's, then the teammate models.
/// As a [`ModelSource`], it serves an agent the provider of the spec it runs; a spec that was
/// not set up (which the runtime never asks for: every model a member can run is named by the
/// session's configuration) is an `LLM_CONFIG` error rather than a key read behind the
/// secrets' back.
pub(super) struct ModelSet {
    lead_spec: ModelSpec,
    lead: Arc<ProviderFactory>,
    others: Vec<(ModelSpec, Arc<ProviderFactory>)>,
}

impl ModelSet {
    /// The Lead's factory (a script's steps say whether a new instruction can be taken).
    pub(super) fn lead(&self) -> &ProviderFactory {
        &self.lead
    }
}

impl ModelSource for ModelSet {
    fn for_agent(&self, name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        self.lead.for_agent(name)
    }

    fn for_member(&self, name: &str, spec: &ModelSpec) -> Result<Arc<dyn ModelProvider>, LlmError> {
        if *spec == self.lead_spec {
            return self.lead.for_agent(name);
        }
        match self.others.iter().find(|(other, _)| other == spec) {
            Some((_, factory)) => factory.for_agent(name),
            None => Err(LlmError::Config {
                message: format!("the model {spec} of {name} was not set up for this run"),
            }),
        }
    }
}

/// The providers' own API key variables: always kept out of tools and logs (`troupe run`
/// and `troupe worker`).
pub(crate) const PROVIDER_KEY_VARS: [&str; 2] = ["DEEPSEEK_API_KEY", "OPENAI_API_KEY"];

/// What [`model_set`] builds: the models, plus the secrets a run must keep out of tools and
/// logs: the variables that may hold API keys (the providers' defaults and every spec's key
/// variable), and the keys in use.
pub(super) struct ModelSetup {
    pub(super) models: Arc<ModelSet>,
    pub(super) secret_env: Vec<String>,
    pub(super) secrets: Vec<String>,
}

/// Builds the Lead's model `lead` and every model of `others` (a teammate model, named by
/// what says so, e.g. `--teammate-model`): reads each API key and builds each client, or loads
/// and checks each script (a Lead script without steps for the Lead is refused here, before
/// any session exists). A refusal of another model names it.
pub(super) fn model_set(
    lead: &ModelSpec,
    others: &[(String, ModelSpec)],
    pace: Duration,
    home: &std::path::Path,
) -> Result<ModelSetup, Failure> {
    let mut secret_env: Vec<String> = PROVIDER_KEY_VARS.into_iter().map(str::to_owned).collect();
    let mut secrets = Vec::new();
    let lead_factory = factory(lead, pace, home, &mut secret_env, &mut secrets)?;
    // A script without steps for the Lead is refused now rather than after creating a session.
    lead_factory.for_agent(LEAD)?;
    let mut built: Vec<(ModelSpec, Arc<ProviderFactory>)> = Vec::new();
    for (what, spec) in others {
        if spec == lead || built.iter().any(|(b, _)| b == spec) {
            continue;
        }
        let factory = factory(spec, pace, home, &mut secret_env, &mut secrets)
            .map_err(|e| Failure::bad_input(anyhow!("{what} {spec}: {e:#}")))?;
        built.push((spec.clone(), Arc::new(factory)));
    }
    secret_env.sort();
    secret_env.dedup();
    secrets.sort();
    secrets.dedup();
    Ok(ModelSetup {
        models: Arc::new(ModelSet {
            lead_spec: lead.clone(),
            lead: Arc::new(lead_factory),
            others: built,
        }),
        secret_env,
        secrets,
    })
}

fn factory(
    spec: &ModelSpec,
    pace: Duration,
    home: &std::path::Path,
    secret_env: &mut Vec<String>,
    secrets: &mut Vec<String>,
) -> Result<ProviderFactory, LlmError> {
    let config = crate::script::config_here(spec.resolve(&|var| std::env::var(var).ok())?, home);
    secret_env.extend(spec.api_key_env.iter().cloned());
    if let troupe_llm::ProviderConfig::Http(http) = &config {
        secrets.extend(
            http.api_key
                .iter()
                .map(|k| k.expose_secret().to_owned())
                .filter(|k| !k.is_empty()),
        );
    }
    Ok(ProviderFactory::new(config, ClientOptions::default())?.with_script_pace(pace))
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
