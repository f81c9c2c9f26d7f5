//! The cost ledger (issue 17): what each member of a Team spent on its model, folded from the
//! usage its session log recorded, priced per model, and the Team's budget.
//!
//! - [`SessionUsage`]: the fold of one session log — each own `assistant/message`'s `usage`
//!   (the server's counts as recorded with the answer), counted under the model the session
//!   ran then (its latest own `agent/config`), and whether the Lead was already given its
//!   budget notice (an inbox message from source [`BUDGET_NOTICE_SOURCE`]). The events of a
//!   fork's seed (seq below `seedLength`) are its parent's and are not counted.
//! - [`Prices`]: USD per million tokens per model — the built-in defaults ([`PRICES_AS_OF`])
//!   and the config file's `[prices]` over them.
//! - [`Ledger`]: per member and for the whole Team: model calls, prompt / completion / cached
//!   tokens and the cost of the priced part.
//! - [`Budget`]: `--budget-tokens` / `--budget-usd`, and where a ledger stands against it
//!   ([`BudgetLevel`]: under, past the notice threshold, exceeded).
//!
//! Pure: no IO, no clock. Counts saturate instead of overflowing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use troupe_protocol::{Event, SessionId, event_types as ty};

use crate::chat::Usage;
use crate::events::{AgentConfigRecord, InboxSplice};
use crate::model::{ModelSpec, ProviderKind};

/// The source kind of the one notice the Lead gets when the Team has spent
/// [`NOTICE_PERCENT`] % of its budget. Its presence in the Lead's log is what tells a resume
/// that the notice was given (it is never given twice).
pub const BUDGET_NOTICE_SOURCE: &str = "budget";

/// The share of a budget (percent) at which the Lead gets its one notice.
pub const NOTICE_PERCENT: u64 = 80;

/// The code of a model call refused because the Team's budget is spent.
pub const TEAM_BUDGET_EXCEEDED: &str = "TEAM_BUDGET_EXCEEDED";

/// When the built-in prices were published by the providers (the date Troupe took them):
/// they are not updated from the network; `[prices]` overrides them.
pub const PRICES_AS_OF: &str = "2025-10-01";

/// Model calls and token counts, summed. JSON: `{"modelCalls","promptTokens",
/// "completionTokens","cachedTokens","tokens"}` (`tokens` = prompt + completion, what a token
/// budget counts; cached tokens are part of the prompt tokens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// Recorded model answers (with or without usage).
    pub model_calls: u64,
    /// Prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Of the prompt tokens, those served from the provider's prompt cache.
    pub cached_tokens: u64,
    /// `prompt_tokens + completion_tokens`.
    pub tokens: u64,
}

impl UsageTotals {
    /// Counts one model answer with `usage` (`None`: the answer reported none).
    pub fn add_call(&mut self, usage: Option<&Usage>) {
        self.model_calls = self.model_calls.saturating_add(1);
        if let Some(usage) = usage {
            self.prompt_tokens = self.prompt_tokens.saturating_add(usage.prompt_tokens);
            self.completion_tokens = self
                .completion_tokens
                .saturating_add(usage.completion_tokens);
            self.cached_tokens = self
                .cached_tokens
                .saturating_add(usage.cached_tokens.min(usage.prompt_tokens));
        }
        self.tokens = self.prompt_tokens.saturating_add(self.completion_tokens);
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &UsageTotals) {
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.tokens = self.prompt_tokens.saturating_add(self.completion_tokens);
    }
}

/// A model's price in USD per million tokens: `{input, output, cached}` (`cached`, the price
/// of a prompt token served from the cache, defaults to `input`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a price table such as { input = 0.27, output = 1.10, cached = 0.07 } (USD per million tokens)"
)]
pub struct Price {
    /// USD per million prompt tokens not served from the cache.
    pub input: f64,
    /// USD per million completion tokens.
    pub output: f64,
    /// USD per million cached prompt tokens (`input` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<f64>,
}

impl Price {
    /// The cost of `usage` at this price, in USD.
    pub fn cost(&self, usage: &UsageTotals) -> f64 {
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let fresh = usage.prompt_tokens - cached;
        (fresh as f64 * self.input
            + cached as f64 * self.cached.unwrap_or(self.input)
            + usage.completion_tokens as f64 * self.output)
            / 1_000_000.0
    }

    /// Why this price cannot be used, if it cannot: a negative or non-finite number.
    pub fn problem(&self) -> Option<String> {
        [
            ("input", Some(self.input)),
            ("output", Some(self.output)),
            ("cached", self.cached),
        ]
        .into_iter()
        .find_map(|(name, value)| {
            value
                .filter(|v| !v.is_finite() || *v < 0.0)
                .map(|v| format!("{name} = {v} is not a price (USD per million tokens, 0 or more)"))
        })
    }
}

/// The built-in prices (USD per million tokens, as the providers published them on
/// [`PRICES_AS_OF`]) of the models the README names: DeepSeek's `deepseek-chat` and
/// `deepseek-reasoner` (cache miss / output / cache hit), OpenAI's `gpt-4.1` and
/// `gpt-4.1-mini` (input / output / cached input).
pub const BUILTIN_PRICES: [(&str, Price); 4] = [
    (
        "deepseek-chat",
        Price {
            input: 0.28,
            output: 0.42,
            cached: Some(0.028),
        },
    ),
    (
        "deepseek-reasoner",
        Price {
            input: 0.28,
            output: 0.42,
            cached: Some(0.028),
        },
    ),
    (
        "gpt-4.1",
        Price {
            input: 2.0,
            output: 8.0,
            cached: Some(0.5),
        },
    ),
    (
        "gpt-4.1-mini",
        Price {
            input: 0.4,
            output: 1.6,
            cached: Some(0.1),
        },
    ),
];

/// Prices per model name ([`price_key`]): the built-in ones with the configured ones over
/// them.
/// Wire (between the processes of one Team): the map itself, `{"<model>":{"input","output",
/// "cached"}}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Prices {
    prices: BTreeMap<String, Price>,
}

impl Prices {
    /// The built-in prices ([`BUILTIN_PRICES`]).
    pub fn builtin() -> Self {
        Self {
            prices: BUILTIN_PRICES
                .iter()
                .map(|(name, price)| ((*name).to_owned(), *price))
                .collect(),
        }
    }

    /// These prices with `overrides` (the config file's `[prices]`) replacing or adding
    /// entries.
    #[must_use]
    pub fn with(mut self, overrides: impl IntoIterator<Item = (String, Price)>) -> Self {
        self.prices.extend(overrides);
        self
    }

    /// The price of the model `key` ([`price_key`]), if one is known.
    pub fn get(&self, key: &str) -> Option<&Price> {
        self.prices.get(key)
    }

    /// Whether `name` is a model with a built-in price.
    pub fn is_builtin(name: &str) -> bool {
        BUILTIN_PRICES.iter().any(|(builtin, _)| *builtin == name)
    }
}

/// The name a model is priced under: its model name (`deepseek-chat`, `gpt-4.1`, the name a
/// compatible server is sent), or `script` for every scripted model.
pub fn price_key(spec: &ModelSpec) -> String {
    match spec.provider {
        ProviderKind::Script => "script".to_owned(),
        _ => spec.model.clone(),
    }
}

/// The usage one session log recorded (see the module docs). Apply its events in order with
/// [`SessionUsage::apply`]; only the types [`SessionUsage::reads`] names matter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionUsage {
    seed_len: u64,
    model: Option<String>,
    by_model: BTreeMap<String, UsageTotals>,
    budget_notices: u64,
}

impl SessionUsage {
    /// An empty fold of a session whose first `seed_len` events are inherited.
    pub fn new(seed_len: u64) -> Self {
        Self {
            seed_len,
            ..Self::default()
        }
    }

    /// Whether events of type `kind` change this fold (for a selective read of the log).
    pub fn reads(kind: &str) -> bool {
        matches!(
            kind,
            ty::ASSISTANT_MESSAGE | ty::AGENT_CONFIG | ty::AGENT_INBOX_SPLICED
        )
    }

    /// Applies one event. Payloads that do not decode are passed over (the transcript fold is
    /// the one that refuses them): the ledger counts what it can read.
    pub fn apply(&mut self, event: &Event) {
        if event.seq.0 < self.seed_len {
            return;
        }
        match event.kind.as_str() {
            ty::AGENT_CONFIG => {
                if let Ok(config) = serde_json::from_value::<AgentConfigRecord>(event.data.clone())
                {
                    self.model = Some(price_key(&config.model));
                }
            }
            ty::ASSISTANT_MESSAGE => {
                let usage = event
                    .data
                    .get("usage")
                    .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok());
                self.record(self.model.clone().as_deref(), usage.as_ref());
            }
            ty::AGENT_INBOX_SPLICED => {
                if let Ok(splice) = serde_json::from_value::<InboxSplice>(event.data.clone()) {
                    let notices = splice
                        .inserted
                        .iter()
                        .filter(|m| m.source.kind == BUDGET_NOTICE_SOURCE)
                        .count();
                    self.budget_notices = self.budget_notices.saturating_add(notices as u64);
                }
            }
            _ => {}
        }
    }

    /// Counts one model answer of model `model` (`None`: not known, counted as `unknown`).
    pub fn record(&mut self, model: Option<&str>, usage: Option<&Usage>) {
        self.by_model
            .entry(model.unwrap_or("unknown").to_owned())
            .or_default()
            .add_call(usage);
    }

    /// The counts per model (price key), in name order.
    pub fn by_model(&self) -> &BTreeMap<String, UsageTotals> {
        &self.by_model
    }

    /// The counts of every model together.
    pub fn total(&self) -> UsageTotals {
        let mut total = UsageTotals::default();
        for usage in self.by_model.values() {
            total.merge(usage);
        }
        total
    }

    /// Whether the log holds a budget notice (an inbox message from [`BUDGET_NOTICE_SOURCE`]).
    pub fn budget_notice_given(&self) -> bool {
        self.budget_notices > 0
    }
}

/// The cost of per-model counts at `prices`: (USD of the priced models, the models without a
/// price that have usage).
pub fn cost_of(by_model: &BTreeMap<String, UsageTotals>, prices: &Prices) -> (f64, Vec<String>) {
    let mut cost = 0.0;
    let mut unpriced = Vec::new();
    for (model, usage) in by_model {
        match prices.get(model) {
            Some(price) => cost += price.cost(usage),
            None if usage.tokens > 0 => unpriced.push(model.clone()),
            None => {}
        }
    }
    (cost, unpriced)
}

/// One member's line of the [`Ledger`]. JSON: `{"name","id", …UsageTotals, "costUsd",
/// "unpricedModels","models": {"<model>": UsageTotals}}`; `costUsd` is the cost of the priced
/// models' usage, `null` when none of its usage is priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberLedger {
    /// The member's name.
    pub name: String,
    /// Its session.
    pub id: SessionId,
    /// Its counts.
    #[serde(flatten)]
    pub usage: UsageTotals,
    /// USD of its priced usage (`None`: none of its usage is priced).
    pub cost_usd: Option<f64>,
    /// Models it used that have no price (their tokens are not in `cost_usd`).
    pub unpriced_models: Vec<String>,
    /// Its counts per model.
    pub models: BTreeMap<String, UsageTotals>,
}

/// The Team's ledger: every member's line and the totals. JSON: `{…UsageTotals, "costUsd",
/// "unpricedModels","pricesAsOf","members": [MemberLedger]}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// The whole Team's counts.
    #[serde(flatten)]
    pub usage: UsageTotals,
    /// USD of the Team's priced usage (`None`: none of it is priced).
    pub cost_usd: Option<f64>,
    /// Models used without a price, in name order.
    pub unpriced_models: Vec<String>,
    /// The date of the built-in prices ([`PRICES_AS_OF`]).
    pub prices_as_of: &'static str,
    /// One line per member, in the order given (the Lead first).
    pub members: Vec<MemberLedger>,
}

impl Ledger {
    /// The ledger of `members` (name, session, its usage), priced at `prices`.
    pub fn fold<'a>(
        members: impl IntoIterator<Item = (String, SessionId, &'a BTreeMap<String, UsageTotals>)>,
        prices: &Prices,
    ) -> Self {
        let mut usage = UsageTotals::default();
        let mut all: BTreeMap<String, UsageTotals> = BTreeMap::new();
        let mut lines = Vec::new();
        for (name, id, by_model) in members {
            let mut own = UsageTotals::default();
            for (model, counts) in by_model {
                own.merge(counts);
                all.entry(model.clone()).or_default().merge(counts);
            }
            usage.merge(&own);
            let (cost, unpriced) = cost_of(by_model, prices);
            let priced = by_model.keys().any(|m| prices.get(m).is_some());
            lines.push(MemberLedger {
                name,
                id,
                usage: own,
                cost_usd: priced.then_some(cost),
                unpriced_models: unpriced,
                models: by_model.clone(),
            });
        }
        let (cost, unpriced) = cost_of(&all, prices);
        let priced = all.keys().any(|m| prices.get(m).is_some());
        Self {
            usage,
            cost_usd: priced.then_some(cost),
            unpriced_models: unpriced,
            prices_as_of: PRICES_AS_OF,
            members: lines,
        }
    }

    /// The compact `usage` of a member as `list_agents` shows it ([`CompactUsage`]).
    pub fn compact(usage: &UsageTotals, cost_usd: Option<f64>) -> CompactUsage {
        CompactUsage {
            model_calls: usage.model_calls,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cached_tokens: usage.cached_tokens,
            cost_usd,
        }
    }
}

/// A member's usage as a `list_agents` row carries it, keys in this order:
/// `{"modelCalls","promptTokens","completionTokens","cachedTokens","costUsd"?}` (`costUsd`,
/// USD, only when its model has a price).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactUsage {
    /// Model answers recorded.
    pub model_calls: u64,
    /// Prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Cached prompt tokens.
    pub cached_tokens: u64,
    /// USD of the priced usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// A Team's budget: at most `tokens` tokens (prompt + completion) and at most `usd` dollars of
/// priced usage, each optional. Both are positive when set (the front end refuses others).
/// Wire: `{"tokens"?,"usd"?}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// The token budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// The USD budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
}

/// Where a Team's spending stands against its [`Budget`].
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetLevel {
    /// Below [`NOTICE_PERCENT`] % of every limit (or no limit).
    Under,
    /// At or past [`NOTICE_PERCENT`] % of a limit, below 100 % of all: what the notice says.
    Notice(String),
    /// At or past a limit: what the refusal says.
    Exceeded(String),
}

impl Budget {
    /// Whether any limit is set.
    pub fn is_set(&self) -> bool {
        self.tokens.is_some() || self.usd.is_some()
    }

    /// Where `tokens` used and `usd` spent stand against this budget. The messages name the
    /// budget and what was used, e.g. `the Team's token budget is spent: 1200 of 1000 tokens
    /// used`.
    pub fn level(&self, tokens: u64, usd: f64) -> BudgetLevel {
        if let Some(limit) = self.tokens
            && tokens >= limit
        {
            return BudgetLevel::Exceeded(format!(
                "the Team's token budget is spent: {tokens} of {limit} tokens used"
            ));
        }
        if let Some(limit) = self.usd
            && usd >= limit
        {
            return BudgetLevel::Exceeded(format!(
                "the Team's USD budget is spent: ${usd:.4} of ${limit:.4} used"
            ));
        }
        if let Some(limit) = self.tokens
            && u128::from(tokens) * 100 >= u128::from(limit) * u128::from(NOTICE_PERCENT)
        {
            return BudgetLevel::Notice(format!(
                "the Team has used {tokens} of its {limit} token budget ({}%)",
                u128::from(tokens) * 100 / u128::from(limit)
            ));
        }
        if let Some(limit) = self.usd
            && usd * 100.0 >= limit * NOTICE_PERCENT as f64
        {
            return BudgetLevel::Notice(format!(
                "the Team has spent ${usd:.4} of its ${limit:.4} budget ({:.0}%)",
                usd * 100.0 / limit
            ));
        }
        BudgetLevel::Under
    }
}

/// The text of the Lead's budget notice for `what` ([`BudgetLevel::Notice`]'s message).
pub fn budget_notice_text(what: &str) -> String {
    format!(
        "Budget notice: {what}. At 100% every new model call of the Team is refused \
         ({TEAM_BUDGET_EXCEEDED}) and the run stops (resumable with a higher budget). Finish \
         the most important work first and keep the remaining calls few."
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use troupe_protocol::Seq;

    fn event(seq: u64, kind: &str, data: serde_json::Value) -> Event {
        Event {
            seq: Seq(seq),
            time: 0,
            kind: kind.to_owned(),
            batch_last: None,
            data,
            ignorable: false,
        }
    }

    fn config(model: &str) -> serde_json::Value {
        json!({"name": "lead", "model": {"provider": "deepseek", "model": model},
               "profile": "team", "workspace": "/w", "depth": 0})
    }

    fn answer(usage: serde_json::Value) -> serde_json::Value {
        json!({"turn": 1, "step": 1, "message": {"content": "x"}, "usage": usage})
    }

    #[test]
    fn the_fold_sums_usage_per_model_and_skips_the_seed() {
        let mut fold = SessionUsage::new(2);
        let events = [
            // The seed: the parent's config and answer.
            event(0, ty::AGENT_CONFIG, config("gpt-4.1")),
            event(
                1,
                ty::ASSISTANT_MESSAGE,
                answer(json!({"prompt_tokens": 999})),
            ),
            event(2, ty::AGENT_CONFIG, config("deepseek-chat")),
            event(
                3,
                ty::ASSISTANT_MESSAGE,
                answer(json!({"prompt_tokens": 100,
                "completion_tokens": 10, "prompt_cache_hit_tokens": 40})),
            ),
            event(
                4,
                ty::ASSISTANT_MESSAGE,
                json!({"turn": 1, "step": 2,
                "message": {"content": "y"}}),
            ),
            event(5, ty::AGENT_CONFIG, config("gpt-4.1-mini")),
            event(
                6,
                ty::ASSISTANT_MESSAGE,
                answer(json!({"prompt_tokens": 50,
                "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 20}})),
            ),
        ];
        for e in &events {
            fold.apply(e);
        }
        let chat = fold.by_model()["deepseek-chat"];
        assert_eq!(
            chat,
            UsageTotals {
                model_calls: 2,
                prompt_tokens: 100,
                completion_tokens: 10,
                cached_tokens: 40,
                tokens: 110
            }
        );
        assert_eq!(fold.by_model()["gpt-4.1-mini"].cached_tokens, 20);
        assert!(!fold.by_model().contains_key("gpt-4.1"));
        let total = fold.total();
        assert_eq!((total.model_calls, total.tokens), (3, 165));
        assert!(!fold.budget_notice_given());
    }

    #[test]
    fn costs_use_the_cached_price_for_cached_prompt_tokens() {
        let usage = UsageTotals {
            model_calls: 1,
            prompt_tokens: 1_000_000,
            completion_tokens: 1_000_000,
            cached_tokens: 500_000,
            tokens: 2_000_000,
        };
        let price = Price {
            input: 2.0,
            output: 8.0,
            cached: Some(0.5),
        };
        assert!((price.cost(&usage) - (1.0 + 0.25 + 8.0)).abs() < 1e-9);
        let no_cached = Price {
            cached: None,
            ..price
        };
        assert!((no_cached.cost(&usage) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn the_ledger_totals_members_and_lists_unpriced_models() {
        let mut lead = SessionUsage::new(0);
        lead.record(
            Some("gpt-4.1"),
            Some(&Usage {
                prompt_tokens: 1000,
                completion_tokens: 100,
                total_tokens: 0,
                cached_tokens: 0,
            }),
        );
        let mut mate = SessionUsage::new(0);
        mate.record(
            Some("my-local"),
            Some(&Usage {
                prompt_tokens: 10,
                completion_tokens: 1,
                total_tokens: 11,
                cached_tokens: 0,
            }),
        );
        mate.record(Some("my-local"), None);
        let ledger = Ledger::fold(
            [
                (
                    "lead".to_owned(),
                    SessionId::new("l").unwrap(),
                    lead.by_model(),
                ),
                (
                    "alpha".to_owned(),
                    SessionId::new("a").unwrap(),
                    mate.by_model(),
                ),
            ],
            &Prices::builtin(),
        );
        assert_eq!(ledger.usage.model_calls, 3);
        assert_eq!(ledger.usage.tokens, 1111);
        assert_eq!(ledger.unpriced_models, vec!["my-local".to_owned()]);
        let cost = ledger.cost_usd.unwrap();
        assert!((cost - (1000.0 * 2.0 + 100.0 * 8.0) / 1e6).abs() < 1e-12);
        assert_eq!(ledger.members[1].cost_usd, None);
        let json = serde_json::to_value(&ledger).unwrap();
        assert_eq!(json["members"][1]["modelCalls"], 2);
        assert_eq!(json["tokens"], 1111);
    }

    #[test]
    fn a_budget_notice_in_the_inbox_is_seen() {
        let mut fold = SessionUsage::new(0);
        fold.apply(&event(
            0,
            ty::AGENT_INBOX_SPLICED,
            json!({"target": "next-step", "start": 0, "inserted": [{"id": "m1", "role": "user",
                "content": [{"type": "text", "text": "n"}], "source": {"kind": "budget"}}]}),
        ));
        assert!(fold.budget_notice_given());
    }

    #[test]
    fn budget_levels() {
        let budget = Budget {
            tokens: Some(1000),
            usd: None,
        };
        assert_eq!(budget.level(799, 0.0), BudgetLevel::Under);
        assert!(matches!(budget.level(800, 0.0), BudgetLevel::Notice(_)));
        assert!(
            matches!(budget.level(1000, 0.0), BudgetLevel::Exceeded(m) if m.contains("1000 of 1000"))
        );
        let usd = Budget {
            tokens: None,
            usd: Some(1.0),
        };
        assert_eq!(usd.level(u64::MAX, 0.5), BudgetLevel::Under);
        assert!(matches!(usd.level(0, 0.85), BudgetLevel::Notice(_)));
        assert!(matches!(usd.level(0, 1.0), BudgetLevel::Exceeded(_)));
        assert_eq!(Budget::default().level(u64::MAX, 1e9), BudgetLevel::Under);
    }
}
