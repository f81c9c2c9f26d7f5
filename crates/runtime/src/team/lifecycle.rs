//! The Team's lifecycle (REFERENCE c.14): the single admission cutoff (closing) and the
//! bounded settlement of the operations in flight when it came.
//!
//! Closing cancels one token: waits return `{timedOut: false}`, no new Team operation is
//! admitted (`TEAM_DISPOSED`), a dispatch that has not started does nothing and a creation in
//! flight is stopped. Creations and dispatches are counted separately because a shutdown
//! settles creations first — their recovery may still register dispatches — then dispatches
//! and acknowledgements (c.14 steps 3–4).
//!
//! Halting (the user's Ctrl-C, before the run parks) comes earlier and holds less: operations
//! are still admitted and what they decide is durable (a message is `queued` in the Lead
//! log), but nothing new starts running — no dispatch, no placement, no cold resume, no
//! continuation — so no member of the stopping run wakes another, or the Lead, into a new
//! turn. What a halt held back is the Lead log's pending mail, which the next resume's
//! mailbox recovery delivers (REFERENCE c.9).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use troupe_protocol::sync::lock;
use troupe_team::{TeamError, TeamId};

/// One Team's admission cutoff and its operations in flight.
#[derive(Debug, Default)]
pub(super) struct Lifecycle {
    /// Cancelled when the Team closes.
    closed: CancellationToken,
    /// Set when the user stopped the run (see the module docs).
    halted: AtomicBool,
    /// `spawn_teammate` calls in flight (settled first at disposal).
    creations: InFlight,
    /// Dispatches and acknowledgements in flight (settled second at disposal).
    dispatches: InFlight,
    /// Failures of in-flight creations that ended after the Team was closed (the closing's
    /// own `TEAM_DISPOSED` excluded): reported by the shutdown (c.14 step 6).
    close_failures: Mutex<Vec<String>>,
}

impl Lifecycle {
    /// Whether the Team is closed.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Halts the Team (see the module docs). Idempotent; a halt is never lifted (the run ends).
    pub(super) fn halt(&self) {
        self.halted.store(true, Ordering::SeqCst);
    }

    /// Whether nothing new may start running: the Team is halted or closed.
    pub(super) fn is_stopping(&self) -> bool {
        self.halted.load(Ordering::SeqCst) || self.is_closed()
    }

    /// Waits until no dispatch or acknowledgement is in flight.
    pub(super) async fn dispatches_settled(&self) {
        self.dispatches.settled().await;
    }

    /// The closing signal (for `select!` and for signals derived from it).
    pub(super) fn closing(&self) -> &CancellationToken {
        &self.closed
    }

    /// Closes the Team (c.14 steps 1–2). Idempotent.
    pub(super) fn close(&self) {
        self.closed.cancel();
    }

    /// `TEAM_DISPOSED` once the Team is closed (the admission check of every operation).
    ///
    /// # Errors
    /// `TEAM_DISPOSED`.
    pub(super) fn admit(&self) -> Result<(), TeamError> {
        if self.is_closed() {
            Err(disposed())
        } else {
            Ok(())
        }
    }

    /// Counts one teammate creation until the guard is dropped.
    pub(super) fn creation(&self) -> InFlightGuard<'_> {
        self.creations.enter()
    }

    /// Counts one dispatch (or acknowledgement) until the guard is dropped.
    pub(super) fn dispatch(&self) -> InFlightGuard<'_> {
        self.dispatches.enter()
    }

    /// Records a creation that failed on its own while the Team was closing (`code: message`),
    /// for the shutdown to report.
    pub(super) fn note_close_failure(&self, failure: String) {
        lock(&self.close_failures).push(failure);
    }

    /// Settles the operations in flight after [`Lifecycle::close`] (c.14 steps 3–4):
    /// creations first, then dispatches and acknowledgements, each bounded by `bound`. Returns
    /// the failures to report: creations that failed after the close for a reason of their own,
    /// and a `TEAM_DISPOSAL_TIMEOUT` for each kind of operation still running when its bound
    /// expired.
    pub(super) async fn settle(&self, team: &TeamId, bound: Duration) -> Vec<String> {
        let mut failures = Vec::new();
        for (ops, what) in [
            (&self.creations, "teammate creations"),
            (&self.dispatches, "message deliveries"),
        ] {
            if tokio::time::timeout(bound, ops.settled()).await.is_err() {
                failures.push(format!(
                    "TEAM_DISPOSAL_TIMEOUT: in-flight {what} of Team {team} did not settle within {} ms",
                    bound.as_millis()
                ));
            }
        }
        let mut reported = std::mem::take(&mut *lock(&self.close_failures));
        reported.extend(failures);
        reported
    }
}

/// `TEAM_DISPOSED`: the Team runtime is shut down (REFERENCE c.14).
pub(super) fn disposed() -> TeamError {
    TeamError::Disposed {
        message: "the Team runtime is shut down".to_owned(),
    }
}

/// A count of operations in flight that a shutdown waits for.
#[derive(Debug)]
struct InFlight {
    count: watch::Sender<usize>,
}

impl Default for InFlight {
    fn default() -> Self {
        Self {
            count: watch::channel(0).0,
        }
    }
}

impl InFlight {
    /// Counts one operation until the guard is dropped.
    fn enter(&self) -> InFlightGuard<'_> {
        self.count.send_modify(|n| *n += 1);
        InFlightGuard(self)
    }

    /// Waits until no operation is in flight.
    async fn settled(&self) {
        let mut rx = self.count.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// One operation in flight; dropping it ends it.
pub(super) struct InFlightGuard<'a>(&'a InFlight);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}
