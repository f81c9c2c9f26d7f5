//! The live ledger of a run (issue 17): every member's model usage as its answers are
//! recorded, priced, and the Team's budget enforced before each model call.
//!
//! One [`LiveLedger`] is shared by every agent of a runtime ([`crate::RuntimeOptions::ledger`]).
//! It starts from what the logs already hold (a resume seeds it with each member's
//! [`SessionUsage`], folded from its log: [`LeadLog::member_usage`](crate::LeadLog::member_usage)),
//! then counts each `assistant/message` right after it is recorded, under the agent's model.
//!
//! - **Refusal.** Before a step's model call, [`LiveLedger::check`]: once the spent tokens or
//!   dollars reach a limit of the [`Budget`], the call is refused and the turn ends `aborted`
//!   with reason `{"kind":"budget","code":"TEAM_BUDGET_EXCEEDED","message"}` (its tool calls
//!   were all answered, so nothing is cut); no agent of the runtime opens a new turn
//!   (the driver asks [`LiveLedger::check`] before it opens one, so work held back counts as
//!   refused), so the run settles and ends. A resume continues a turn the
//!   budget stopped (the Lead's like any unfinished root turn; a teammate's by the Team
//!   recovery, see `troupe_session::ContinuationRule`).
//! - **Notice.** When the spending first reaches [`NOTICE_PERCENT`](troupe_session::ledger::NOTICE_PERCENT)
//!   % of a limit, one notice is due to the Lead (an inbox message from source
//!   `troupe_session::ledger::BUDGET_NOTICE_SOURCE`); [`deliver_budget_notice`](crate::deliver_budget_notice) injects it into the
//!   Lead's inbox. Whether it was given is decided from the
//!   Lead's log: a resume seeds [`LiveLedger::notice_given`] from it, so the notice is never
//!   repeated.
//!
//! - **Across processes** (a NATS store with teammates on workers): every process that runs
//!   members of the Team holds a ledger with the Team's budget, seeded from the logs; each
//!   answer it records is handed to its [`UsageSink`] (published to the Team's other
//!   processes) and each answer another process recorded is counted with
//!   [`LiveLedger::record_elsewhere`], so every process refuses once the Team's spending, not
//!   only its own, reaches the budget. Only the Lead's process gives the notice
//!   ([`LiveLedger::without_notice`] on the others).
//!
//! Durability: the ledger writes nothing of its own. The usage is in each answer's
//! `assistant/message` (written before it is counted here: a crash loses no count a log
//! holds); the notice is one `agent/inbox/spliced`, flushed before the Lead reads it. A crash
//! after the threshold was crossed and before that append leaves no notice in the log: the
//! resume finds the spending past the threshold without one and delivers it then.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tokio::sync::Notify;
use troupe_protocol::SessionId;
use troupe_protocol::sync::lock;
use troupe_session::chat::Usage;
use troupe_session::ledger::{
    Budget, BudgetLevel, Prices, SessionUsage, TEAM_BUDGET_EXCEEDED, UsageTotals,
    budget_notice_text, cost_of,
};

/// Where a ledger hands each answer it records itself (not those of
/// [`LiveLedger::record_elsewhere`]): session, model (price key), usage. Called under no lock
/// of the ledger; it must not block.
pub type UsageSink = Box<dyn Fn(&SessionId, &str, Option<&Usage>) + Send + Sync>;

/// The live ledger and budget of a runtime (see the module docs). Shared through an `Arc`.
#[derive(Default)]
pub struct LiveLedger {
    budget: Budget,
    prices: Prices,
    state: Mutex<LedgerState>,
    notice: Notify,
    sink: std::sync::OnceLock<UsageSink>,
}

impl std::fmt::Debug for LiveLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveLedger")
            .field("budget", &self.budget)
            .field("state", &self.state)
            .field("sink", &self.sink.get().is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct LedgerState {
    /// Per session, per model (price key): the counts.
    members: HashMap<SessionId, BTreeMap<String, UsageTotals>>,
    /// The first refusal of this run (its message).
    refused: Option<String>,
    /// The notice is due (its text), not yet taken by [`deliver_budget_notice`](crate::deliver_budget_notice).
    notice_due: Option<String>,
    /// The notice was given (in an earlier run, read from the Lead's log) or taken.
    notice_given: bool,
}

impl LiveLedger {
    /// A ledger with `budget` (possibly unset: it only counts) and `prices`.
    pub fn new(budget: Budget, prices: Prices) -> Self {
        Self {
            budget,
            prices,
            ..Self::default()
        }
    }

    /// A ledger that never gives the Lead's notice (a worker's ledger of a Team whose Lead
    /// runs in another process, which gives it).
    #[must_use]
    pub fn without_notice(self) -> Self {
        lock(&self.state).notice_given = true;
        self
    }

    /// Hands every answer this ledger records from now on to `sink` (once; `false` when a
    /// sink was already set).
    pub fn set_sink(&self, sink: UsageSink) -> bool {
        self.sink.set(sink).is_ok()
    }

    /// The budget.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// The prices.
    pub fn prices(&self) -> &Prices {
        &self.prices
    }

    /// Seeds the counts of session `id` with what its log holds (before any agent runs).
    /// `notice_given`: the Lead's log holds the budget notice. A notice that is due (the
    /// seeded spending is past the threshold) and was not given becomes due now.
    pub fn seed(&self, id: &SessionId, usage: &SessionUsage) {
        let mut st = lock(&self.state);
        st.notice_given |= usage.budget_notice_given();
        let entry = st.members.entry(id.clone()).or_default();
        for (model, counts) in usage.by_model() {
            entry.entry(model.clone()).or_default().merge(counts);
        }
        self.update_notice(&mut st);
    }

    /// Tokens used and USD spent so far, by every member.
    pub fn spent(&self) -> (u64, f64) {
        spent_of(&lock(&self.state), &self.prices)
    }

    /// Refuses a new model call once the budget is spent: `Err(message)` naming the budget and
    /// what was used (the code is [`TEAM_BUDGET_EXCEEDED`]); the first refusal is remembered
    /// ([`LiveLedger::refused`]).
    pub fn check(&self) -> Result<(), String> {
        let mut st = lock(&self.state);
        let (tokens, usd) = spent_of(&st, &self.prices);
        match self.budget.level(tokens, usd) {
            BudgetLevel::Exceeded(message) => {
                st.refused.get_or_insert_with(|| message.clone());
                Err(message)
            }
            _ => Ok(()),
        }
    }

    /// The first refusal of this run, if a model call was refused: `TEAM_BUDGET_EXCEEDED`'s
    /// message.
    pub fn refused(&self) -> Option<String> {
        lock(&self.state).refused.clone()
    }

    /// Counts one recorded answer of session `id`, model `model` (its price key), and hands
    /// it to the sink ([`LiveLedger::set_sink`]).
    pub fn record(&self, id: &SessionId, model: &str, usage: Option<&Usage>) {
        self.record_elsewhere(id, model, usage);
        if let Some(sink) = self.sink.get() {
            sink(id, model, usage);
        }
    }

    /// Counts one answer another process of the Team recorded (not handed to the sink).
    pub fn record_elsewhere(&self, id: &SessionId, model: &str, usage: Option<&Usage>) {
        let mut st = lock(&self.state);
        st.members
            .entry(id.clone())
            .or_default()
            .entry(model.to_owned())
            .or_default()
            .add_call(usage);
        self.update_notice(&mut st);
    }

    /// Session `id`'s counts and the cost of their priced part (`None`: nothing priced).
    pub fn usage_of(&self, id: &SessionId) -> (UsageTotals, Option<f64>) {
        let st = lock(&self.state);
        let Some(by_model) = st.members.get(id) else {
            return (UsageTotals::default(), None);
        };
        let mut total = UsageTotals::default();
        for counts in by_model.values() {
            total.merge(counts);
        }
        let (cost, _) = cost_of(by_model, &self.prices);
        let priced = by_model.keys().any(|m| self.prices.get(m).is_some());
        (total, priced.then_some(cost))
    }

    /// Whether the notice was given (or taken for delivery).
    pub fn notice_given(&self) -> bool {
        lock(&self.state).notice_given
    }

    fn update_notice(&self, st: &mut LedgerState) {
        if st.notice_given || st.notice_due.is_some() {
            return;
        }
        let (tokens, usd) = spent_of(st, &self.prices);
        let what = match self.budget.level(tokens, usd) {
            BudgetLevel::Notice(what) | BudgetLevel::Exceeded(what) => what,
            BudgetLevel::Under => return,
        };
        st.notice_due = Some(budget_notice_text(&what));
        self.notice.notify_one();
    }

    /// Waits until the notice is due and takes it (it is then given: never due again).
    pub(crate) async fn take_notice(&self) -> String {
        loop {
            if let Some(text) = self.take_due_notice() {
                return text;
            }
            self.notice.notified().await;
        }
    }

    /// Takes the notice if it is due now (it is then given: never due again).
    pub(crate) fn take_due_notice(&self) -> Option<String> {
        let mut st = lock(&self.state);
        let text = st.notice_due.take()?;
        st.notice_given = true;
        Some(text)
    }
}

fn spent_of(st: &LedgerState, prices: &Prices) -> (u64, f64) {
    let mut tokens = 0u64;
    let mut usd = 0.0;
    for by_model in st.members.values() {
        for counts in by_model.values() {
            tokens = tokens.saturating_add(counts.tokens);
        }
        usd += cost_of(by_model, prices).0;
    }
    (tokens, usd)
}

/// The turn-end reason of a turn the budget stopped: `{"kind":"budget","code":
/// "TEAM_BUDGET_EXCEEDED","message"}`.
pub(crate) fn budget_abort_cause(message: &str) -> serde_json::Value {
    serde_json::json!({"kind": "budget", "code": TEAM_BUDGET_EXCEEDED, "message": message})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn usage(prompt: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: 0,
            cached_tokens: 0,
        }
    }

    #[test]
    fn a_spent_budget_refuses_and_the_notice_is_due_once() {
        let ledger = LiveLedger::new(
            Budget {
                tokens: Some(100),
                usd: None,
            },
            Prices::builtin(),
        );
        let lead = SessionId::new("lead-1").unwrap();
        let mate = SessionId::new("mate-1").unwrap();
        ledger.record(&lead, "script", Some(&usage(50, 10)));
        assert!(ledger.check().is_ok());
        assert!(lock(&ledger.state).notice_due.is_none());
        ledger.record(&mate, "script", Some(&usage(15, 5)));
        assert!(lock(&ledger.state).notice_due.is_some());
        assert!(ledger.check().is_ok());
        ledger.record(&mate, "script", Some(&usage(20, 0)));
        let refused = ledger.check().unwrap_err();
        assert!(refused.contains("100 of 100 tokens"), "{refused}");
        assert_eq!(ledger.refused(), Some(refused));
        assert_eq!(ledger.usage_of(&mate).0.tokens, 40);
        assert_eq!(ledger.spent().0, 100);
    }

    #[test]
    fn a_notice_seen_in_the_log_is_not_due_again() {
        let ledger = LiveLedger::new(
            Budget {
                tokens: Some(100),
                usd: None,
            },
            Prices::builtin(),
        );
        let lead = SessionId::new("lead-1").unwrap();
        let mut seen = SessionUsage::new(0);
        seen.record(Some("script"), Some(&usage(90, 0)));
        seen.apply(&troupe_protocol::Event {
            seq: troupe_protocol::Seq(0),
            time: 0,
            kind: troupe_protocol::event_types::AGENT_INBOX_SPLICED.to_owned(),
            batch_last: None,
            data: serde_json::json!({"target": "next-step", "start": 0, "inserted": [{
                "id": "m", "role": "user", "content": [], "source": {"kind": "budget"}}]}),
            ignorable: false,
        });
        ledger.seed(&lead, &seen);
        assert!(ledger.notice_given());
        assert!(lock(&ledger.state).notice_due.is_none());
    }
}
