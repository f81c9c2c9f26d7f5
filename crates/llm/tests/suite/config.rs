//! The `--model` / `--base-url` / `--api-key-env` resolver and key redaction.

use std::collections::HashMap;

use troupe_llm::{
    ApiKey, ClientOptions, HttpProviderConfig, LlmError, ModelFlags, ModelSpec, ModelSpecExt,
    OpenAiClient, ProviderConfig, ProviderFactory, ProviderKind, ToolChoice, resolve_model,
};
use troupe_protocol::ErrorCode;

fn flags(model: Option<&str>, base_url: Option<&str>, api_key_env: Option<&str>) -> ModelFlags {
    ModelFlags {
        model: model.map(str::to_owned),
        base_url: base_url.map(str::to_owned),
        api_key_env: api_key_env.map(str::to_owned),
        tool_choice: None,
    }
}

fn spec(
    provider: ProviderKind,
    model: &str,
    base_url: Option<&str>,
    key_env: Option<&str>,
) -> ModelSpec {
    ModelSpec {
        provider,
        model: model.to_owned(),
        base_url: base_url.map(str::to_owned),
        api_key_env: key_env.map(str::to_owned),
        tool_choice: ToolChoice::Omit,
    }
}

/// Data-driven: flags → the spec, or an `LLM_CONFIG` error containing `expected`.
fn check(flags: ModelFlags, expected: Result<ModelSpec, &str>) {
    let actual = ModelSpec::from_flags(&flags);
    match (actual, expected) {
        (Ok(actual), Ok(expected)) => assert_eq!(actual, expected, "{flags:?}"),
        (Err(error), Err(needle)) => {
            assert_eq!(error.code(), "LLM_CONFIG", "{flags:?}");
            let message = error.to_string();
            assert!(message.contains(needle), "{flags:?}: {message}");
            assert!(!message.contains('\n'), "one line: {message}");
        }
        (actual, expected) => panic!("{flags:?}: got {actual:?}, expected {expected:?}"),
    }
}

const DS: &str = "https://api.deepseek.com";
const OA: &str = "https://api.openai.com/v1";

#[test]
fn presets_and_provider_prefixes() {
    use ProviderKind::*;
    check(
        flags(None, None, None),
        Ok(spec(
            Deepseek,
            "deepseek-chat",
            Some(DS),
            Some("DEEPSEEK_API_KEY"),
        )),
    );
    check(
        flags(Some("deepseek-reasoner"), None, None),
        Ok(spec(
            Deepseek,
            "deepseek-reasoner",
            Some(DS),
            Some("DEEPSEEK_API_KEY"),
        )),
    );
    check(
        flags(Some("deepseek:"), None, None),
        Ok(spec(
            Deepseek,
            "deepseek-chat",
            Some(DS),
            Some("DEEPSEEK_API_KEY"),
        )),
    );
    check(
        flags(Some("openai:gpt-4o-mini"), None, None),
        Ok(spec(
            Openai,
            "gpt-4o-mini",
            Some(OA),
            Some("OPENAI_API_KEY"),
        )),
    );
    check(
        flags(Some("openai:"), None, None),
        Ok(spec(Openai, "gpt-4.1", Some(OA), Some("OPENAI_API_KEY"))),
    );
    check(
        flags(Some("gpt-4.1"), None, None),
        Ok(spec(Openai, "gpt-4.1", Some(OA), Some("OPENAI_API_KEY"))),
    );
    check(
        flags(Some("o3-mini"), None, None),
        Ok(spec(Openai, "o3-mini", Some(OA), Some("OPENAI_API_KEY"))),
    );
    // A preset behind a proxy, with another key variable.
    check(
        flags(
            Some("openai:gpt-4.1"),
            Some("https://proxy.example/v1/"),
            Some("MY_KEY"),
        ),
        Ok(spec(
            Openai,
            "gpt-4.1",
            Some("https://proxy.example/v1"),
            Some("MY_KEY"),
        )),
    );
    // OpenAI-compatible servers: model names may contain colons; the key is optional.
    check(
        flags(
            Some("qwen2.5-coder:7b"),
            Some("http://localhost:11434/v1"),
            None,
        ),
        Ok(spec(
            Compatible,
            "qwen2.5-coder:7b",
            Some("http://localhost:11434/v1"),
            None,
        )),
    );
    check(
        flags(
            Some("compatible:llama3"),
            Some("http://127.0.0.1:8080"),
            Some("LOCAL_KEY"),
        ),
        Ok(spec(
            Compatible,
            "llama3",
            Some("http://127.0.0.1:8080"),
            Some("LOCAL_KEY"),
        )),
    );
    check(
        flags(Some("script:team.json"), None, None),
        Ok(spec(Script, "team.json", None, None)),
    );
}

#[test]
fn bad_flags_are_refused_with_one_line() {
    check(
        flags(Some("anthropic:claude"), None, None),
        Err("unknown model provider `anthropic`"),
    );
    check(
        flags(Some("llama3"), None, None),
        Err("cannot tell which provider serves model `llama3`"),
    );
    check(
        flags(None, Some("http://localhost:1234/v1"), None),
        Err("--model is required with --base-url"),
    );
    check(
        flags(Some("compatible:m"), None, None),
        Err("needs --base-url"),
    );
    check(
        flags(Some("m"), Some("ftp://host/v1"), None),
        Err("must be an http:// or https:// URL"),
    );
    check(
        flags(Some("m"), Some("not a url"), None),
        Err("is not a URL"),
    );
    check(
        flags(Some("deepseek-chat"), None, Some("BAD-NAME")),
        Err("not an environment variable name"),
    );
    check(flags(Some("script:"), None, None), Err("needs a file path"));
    // An empty model is a mistake, not a request for the default (DeepSeek).
    check(flags(Some(""), None, None), Err("--model is empty"));
    check(flags(Some("  "), None, None), Err("--model is empty"));
    check(
        flags(Some(""), Some("http://127.0.0.1:1/v1"), None),
        Err("--model is empty"),
    );
    check(
        flags(Some("script:x.json"), Some("http://h"), None),
        Err("cannot be used with a script"),
    );
}

#[test]
fn resolution_reads_the_key_and_names_a_missing_variable() {
    let env: HashMap<&str, &str> = [("DEEPSEEK_API_KEY", "sk-ds-secret"), ("EMPTY", "  ")].into();
    let lookup = |name: &str| env.get(name).map(|value| (*value).to_owned());

    let config = resolve_model(&flags(None, None, None), &lookup).unwrap();
    let ProviderConfig::Http(http) = &config else {
        panic!("{config:?}")
    };
    assert_eq!(
        http.api_key.as_ref().map(ApiKey::expose_secret),
        Some("sk-ds-secret")
    );
    assert_eq!(http.base_url, "https://api.deepseek.com");
    assert_eq!(http.model, "deepseek-chat");

    let error = resolve_model(&flags(Some("openai:gpt-4.1"), None, None), &lookup).unwrap_err();
    assert_eq!(error.code(), "LLM_CONFIG");
    assert_eq!(
        error.to_string(),
        "missing API key for openai: set the environment variable OPENAI_API_KEY"
    );
    let error =
        resolve_model(&flags(Some("deepseek-chat"), None, Some("EMPTY")), &lookup).unwrap_err();
    assert!(error.to_string().contains("EMPTY"), "{error}");
    let error = resolve_model(
        &flags(
            Some("m"),
            Some("http://localhost:8000/v1"),
            Some("LOCAL_KEY"),
        ),
        &lookup,
    )
    .unwrap_err();
    assert!(error.to_string().contains("LOCAL_KEY"), "{error}");
    assert!(error.to_string().contains("--api-key-env"), "{error}");

    // A local server needs no key.
    let config = resolve_model(
        &flags(Some("m"), Some("http://localhost:8000/v1"), None),
        &lookup,
    )
    .unwrap();
    let ProviderConfig::Http(http) = config else {
        panic!()
    };
    assert_eq!(http.api_key, None);
}

#[test]
fn keys_never_show_in_debug_display_or_the_recorded_spec() {
    let key = ApiKey::new("sk-very-secret-key");
    assert_eq!(format!("{key:?}"), "***");
    assert_eq!(format!("{key}"), "***");

    let env = |name: &str| (name == "DEEPSEEK_API_KEY").then(|| "sk-very-secret-key".to_owned());
    let config = resolve_model(&ModelFlags::default(), &env).unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains("sk-very-secret-key"), "{debug}");
    assert!(debug.contains("***"), "{debug}");

    let recorded = serde_json::to_string(&config.spec()).unwrap();
    assert!(!recorded.contains("sk-very-secret"), "{recorded}");
    assert_eq!(
        recorded,
        r#"{"provider":"deepseek","model":"deepseek-chat","baseUrl":"https://api.deepseek.com","apiKeyEnv":"DEEPSEEK_API_KEY"}"#
    );
    let ProviderConfig::Http(http) = config.clone() else {
        panic!()
    };
    let client = OpenAiClient::new(http, ClientOptions::default()).unwrap();
    assert!(!format!("{client:?}").contains("sk-very-secret"));
    let factory = ProviderFactory::new(config, ClientOptions::default()).unwrap();
    assert!(!format!("{factory:?}").contains("sk-very-secret"));
    assert_eq!(
        factory.for_agent("lead").unwrap().label(),
        "deepseek:deepseek-chat"
    );
}

#[test]
fn recorded_specs_round_trip_and_accept_resume_overrides() {
    let recorded = ModelSpec::from_flags(&flags(
        Some("qwen3:8b"),
        Some("http://localhost:11434/v1"),
        None,
    ))
    .unwrap();
    let text = serde_json::to_string(&recorded).unwrap();
    let reloaded: ModelSpec = serde_json::from_str(&text).unwrap();
    assert_eq!(reloaded, recorded);
    assert_eq!(reloaded.to_string(), "compatible:qwen3:8b");

    // No flags: the recorded spec as is.
    assert_eq!(
        reloaded.with_overrides(&ModelFlags::default()).unwrap(),
        recorded
    );
    // Another base URL only.
    let moved = reloaded
        .with_overrides(&flags(None, Some("http://127.0.0.1:9999/v1"), None))
        .unwrap();
    assert_eq!(moved.model, "qwen3:8b");
    assert_eq!(moved.base_url.as_deref(), Some("http://127.0.0.1:9999/v1"));
    // A model flag starts over.
    let switched = reloaded
        .with_overrides(&flags(Some("deepseek-chat"), None, None))
        .unwrap();
    assert_eq!(switched.provider, ProviderKind::Deepseek);
    // An empty model flag on resume is refused too, not read as "keep the recorded one".
    let empty = reloaded
        .with_overrides(&flags(Some(""), None, None))
        .unwrap_err();
    assert_eq!(empty.code(), "LLM_CONFIG");
    assert!(empty.to_string().contains("--model is empty"), "{empty}");
}

#[test]
fn bad_deserialized_specs_fail_resolution() {
    let broken = ModelSpec {
        provider: ProviderKind::Openai,
        model: "gpt-4.1".to_owned(),
        base_url: Some("nope".to_owned()),
        api_key_env: Some("OPENAI_API_KEY".to_owned()),
        tool_choice: ToolChoice::Omit,
    };
    let error = broken.resolve(&|_| Some("k".to_owned())).unwrap_err();
    assert!(matches!(error, LlmError::Config { .. }), "{error:?}");
}

#[test]
fn client_rejects_a_bad_base_url() {
    let error = OpenAiClient::new(
        HttpProviderConfig::compatible("mailto:someone", "m"),
        ClientOptions::default(),
    )
    .unwrap_err();
    assert_eq!(error.code(), "LLM_CONFIG");
}

#[test]
fn tool_choice_parses_the_four_values_and_refuses_others() {
    for choice in ToolChoice::ALL {
        assert_eq!(choice.as_str().parse::<ToolChoice>().unwrap(), choice);
    }
    assert_eq!(" auto ".parse::<ToolChoice>().unwrap(), ToolChoice::Auto);
    for bad in ["", "Auto", "any", "function"] {
        let error = bad.parse::<ToolChoice>().unwrap_err();
        assert_eq!(error.code(), "LLM_CONFIG");
        assert!(
            error.to_string().contains("auto, required, none, omit"),
            "{error}"
        );
    }
    assert_eq!(ToolChoice::default(), ToolChoice::Omit);
    assert_eq!(ToolChoice::Omit.wire_value(), None);
    assert_eq!(ToolChoice::Required.wire_value(), Some("required"));
}

/// `--tool-choice` is recorded with the model choice (omitted when `omit`), reaches the
/// resolved config, is refused with a script, and a resume keeps it unless it is given again
/// or `--model` starts over.
#[test]
fn tool_choice_is_recorded_with_the_model_and_kept_on_resume() {
    let with_choice = |choice: Option<ToolChoice>| ModelFlags {
        tool_choice: choice,
        ..flags(Some("local"), Some("http://127.0.0.1:8000/v1"), None)
    };
    let spec = ModelSpec::from_flags(&with_choice(Some(ToolChoice::Auto))).unwrap();
    assert_eq!(spec.tool_choice, ToolChoice::Auto);
    let recorded = serde_json::to_value(&spec).unwrap();
    assert_eq!(recorded["toolChoice"], "auto");
    let reloaded: ModelSpec = serde_json::from_value(recorded).unwrap();
    assert_eq!(reloaded, spec);
    match reloaded.resolve(&|_| None).unwrap() {
        ProviderConfig::Http(config) => assert_eq!(config.tool_choice, ToolChoice::Auto),
        other => panic!("{other:?}"),
    }

    let plain = ModelSpec::from_flags(&with_choice(None)).unwrap();
    assert_eq!(plain.tool_choice, ToolChoice::Omit);
    let plain_json = serde_json::to_value(&plain).unwrap();
    assert!(plain_json.get("toolChoice").is_none(), "{plain_json}");
    // A spec recorded before the flag existed reads as `omit`.
    let old: ModelSpec = serde_json::from_value(serde_json::json!({
        "provider": "compatible", "model": "local", "baseUrl": "http://127.0.0.1:8000/v1"
    }))
    .unwrap();
    assert_eq!(old, plain);

    // Resume: kept, replaced by the flag, or started over by --model.
    let kept = reloaded.with_overrides(&ModelFlags::default()).unwrap();
    assert_eq!(kept.tool_choice, ToolChoice::Auto);
    let moved = reloaded
        .with_overrides(&flags(None, Some("http://127.0.0.1:9000/v1"), None))
        .unwrap();
    assert_eq!(moved.tool_choice, ToolChoice::Auto);
    let replaced = reloaded
        .with_overrides(&ModelFlags {
            tool_choice: Some(ToolChoice::Required),
            ..ModelFlags::default()
        })
        .unwrap();
    assert_eq!(replaced.tool_choice, ToolChoice::Required);
    let omitted = reloaded
        .with_overrides(&ModelFlags {
            tool_choice: Some(ToolChoice::Omit),
            ..ModelFlags::default()
        })
        .unwrap();
    assert_eq!(omitted.tool_choice, ToolChoice::Omit);
    let restarted = reloaded.with_overrides(&with_choice(None)).unwrap();
    assert_eq!(
        restarted.tool_choice,
        ToolChoice::Omit,
        "--model starts over"
    );

    check(
        ModelFlags {
            tool_choice: Some(ToolChoice::Auto),
            ..flags(Some("script:s.json"), None, None)
        },
        Err("--tool-choice cannot be used with a script: model"),
    );
}

/// A teammate model beside the Lead's (`ModelSpec::sibling`): the Lead's provider keeps the
/// Lead's base URL and key variable (and a compatible server serves any bare name), another
/// provider uses its preset, a script is a script; the tool choice follows, except to a script.
#[test]
fn a_sibling_model_shares_the_leads_server_only_on_its_provider() {
    let local = "http://127.0.0.1:8080/v1";
    let mut lead = spec(
        ProviderKind::Compatible,
        "big",
        Some(local),
        Some("LOCAL_KEY"),
    );
    lead.tool_choice = ToolChoice::Auto;
    let with_auto = |mut spec: ModelSpec| {
        spec.tool_choice = ToolChoice::Auto;
        spec
    };
    for (model, expected) in [
        (
            "small",
            with_auto(spec(
                ProviderKind::Compatible,
                "small",
                Some(local),
                Some("LOCAL_KEY"),
            )),
        ),
        (
            "qwen2.5:7b",
            with_auto(spec(
                ProviderKind::Compatible,
                "qwen2.5:7b",
                Some(local),
                Some("LOCAL_KEY"),
            )),
        ),
        (
            "compatible:tiny",
            with_auto(spec(
                ProviderKind::Compatible,
                "tiny",
                Some(local),
                Some("LOCAL_KEY"),
            )),
        ),
        (
            "openai:gpt-4.1-mini",
            with_auto(spec(
                ProviderKind::Openai,
                "gpt-4.1-mini",
                Some(OA),
                Some("OPENAI_API_KEY"),
            )),
        ),
        (
            "script:/s.json",
            spec(ProviderKind::Script, "/s.json", None, None),
        ),
    ] {
        assert_eq!(lead.sibling(model).unwrap(), expected, "{model}");
    }
    let deepseek = spec(
        ProviderKind::Deepseek,
        "deepseek-reasoner",
        Some("http://proxy.test/v1"),
        Some("DS_KEY"),
    );
    assert_eq!(
        deepseek.sibling("deepseek-chat").unwrap(),
        spec(
            ProviderKind::Deepseek,
            "deepseek-chat",
            Some("http://proxy.test/v1"),
            Some("DS_KEY")
        )
    );
    assert_eq!(
        deepseek.sibling("gpt-4.1-mini").unwrap(),
        spec(
            ProviderKind::Openai,
            "gpt-4.1-mini",
            Some(OA),
            Some("OPENAI_API_KEY")
        )
    );
    let script = spec(ProviderKind::Script, "/lead.json", None, None);
    let error = script.sibling("compatible:x").unwrap_err().to_string();
    assert!(error.contains("needs --base-url"), "{error}");
    let error = script.sibling("llama").unwrap_err().to_string();
    assert!(error.contains("cannot tell which provider"), "{error}");
}
