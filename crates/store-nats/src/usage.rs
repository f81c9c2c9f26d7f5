//! The Team's budget across processes: every process running members of one Team publishes
//! the usage of each answer it records on `troupe.usage.<team-id>` and counts the others'
//! ([`UsageRelay`]), so each process's [`LiveLedger`] holds the Team's whole spending and
//! refuses a model call once the Team's budget is spent (`troupe_runtime::ledger`, "Across
//! processes").
//!
//! Wire: one core NATS message per recorded answer, `{"origin","session","model",
//! "usage":{"prompt","completion","cached"}|null}` (`origin`: the relay's random id, so a
//! process skips its own). Nothing is stored: the usage is in each answer's
//! `assistant/message` in its member's log, which a ledger is seeded from when it is made and
//! which `team show`'s ledger folds.
//!
//! What a lost or doubled report costs: core NATS delivers at most once, so a report lost
//! while a process was disconnected undercounts the other processes' ledgers until they are
//! made again from the logs (a resume, the next hosting of a Team on a worker); a report
//! that arrives between a new ledger's subscription and its seeding from the logs is counted
//! twice (the budget then refuses a little early, never late by more than the lost reports).
//! A crash loses nothing: no state is kept here.

use std::sync::Arc;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use troupe_protocol::SessionId;
use troupe_runtime::ledger::LiveLedger;
use troupe_session::chat::Usage;

use crate::NatsBackend;

/// A report's usage: prompt, completion and cached prompt tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct WireUsage {
    prompt: u64,
    completion: u64,
    cached: u64,
}

/// One recorded answer, as published (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct UsageReport {
    origin: String,
    session: SessionId,
    model: String,
    usage: Option<WireUsage>,
}

/// Publishes the answers `ledger` records and counts the Team's other processes' reports in
/// it, while it lives (see the module docs). Dropping it stops both.
pub struct UsageRelay {
    listen: tokio::task::JoinHandle<()>,
    publish: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for UsageRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageRelay").finish_non_exhaustive()
    }
}

impl UsageRelay {
    /// Relays the usage of the Team led by `lead` for `ledger`, on the calling tokio runtime:
    /// subscribes to [`NatsBackend::usage_subject`] (returns once subscribed) and sets
    /// `ledger`'s sink ([`LiveLedger::set_sink`]; a ledger that already has one keeps it and
    /// publishes nothing).
    ///
    /// # Errors
    /// The subscription or the flush fails (the connection is down).
    pub async fn start(
        nats: &NatsBackend,
        lead: &SessionId,
        ledger: Arc<LiveLedger>,
    ) -> Result<Self, async_nats::Error> {
        let origin = uuid::Uuid::new_v4().to_string();
        let subject = NatsBackend::usage_subject(lead);
        let client = nats.client();
        let mut reports = client.subscribe(subject.clone()).await?;
        client.flush().await?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<UsageReport>();
        let own = origin.clone();
        ledger.set_sink(Box::new(move |session, model, usage| {
            let _ = tx.send(UsageReport {
                origin: own.clone(),
                session: session.clone(),
                model: model.to_owned(),
                usage: usage.map(|u| WireUsage {
                    prompt: u.prompt_tokens,
                    completion: u.completion_tokens,
                    cached: u.cached_tokens,
                }),
            });
        }));
        let publisher = client.clone();
        let publish = tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                if let Ok(payload) = serde_json::to_vec(&report) {
                    if let Err(e) = publisher.publish(subject.clone(), payload.into()).await {
                        tracing::debug!(error = %e, "a usage report could not be published");
                    }
                    let _ = publisher.flush().await;
                }
            }
        });
        let listen = tokio::spawn(async move {
            while let Some(message) = reports.next().await {
                match serde_json::from_slice::<UsageReport>(&message.payload) {
                    Ok(report) if report.origin == origin => {}
                    Ok(report) => {
                        let usage = report.usage.map(|u| Usage {
                            prompt_tokens: u.prompt,
                            completion_tokens: u.completion,
                            total_tokens: u.prompt.saturating_add(u.completion),
                            cached_tokens: u.cached,
                        });
                        ledger.record_elsewhere(&report.session, &report.model, usage.as_ref());
                    }
                    Err(e) => tracing::debug!(error = %e, "a usage report that does not parse"),
                }
            }
        });
        Ok(Self { listen, publish })
    }
}

impl Drop for UsageRelay {
    fn drop(&mut self) {
        self.listen.abort();
        self.publish.abort();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The wire shape of a report, both ways.
    #[test]
    fn a_report_is_the_documented_object() {
        let report = UsageReport {
            origin: "o".into(),
            session: SessionId::new("s").unwrap(),
            model: "script".into(),
            usage: Some(WireUsage {
                prompt: 100,
                completion: 50,
                cached: 7,
            }),
        };
        let wire = serde_json::to_value(&report).unwrap();
        assert_eq!(
            wire,
            serde_json::json!({"origin":"o","session":"s","model":"script",
                "usage":{"prompt":100,"completion":50,"cached":7}})
        );
        assert_eq!(serde_json::from_value::<UsageReport>(wire).unwrap(), report);
    }
}
