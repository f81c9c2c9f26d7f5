//! The waits of approvals: a member's `bash` call that asked to run outside the sandbox waits
//! here for its decision ([`Approvals::wait`]), and the terminal of `troupe run` decides
//! through [`Approvals::decide`]. The records, the decision logs and the crash table are
//! `troupe_approval`'s (and `troupe_session::approval`'s).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use troupe_approval::{ApprovalError, POLL_INTERVAL, read_decision, record_decision};
use troupe_journal::Journal;
use troupe_protocol::SessionId;
use troupe_session::approval::{ApprovalDecided, ApprovalPolicy, DecidedBy, Decision};

/// The approvals of one runtime: its [`ApprovalPolicy`] and the waits of its members.
///
/// A member's wait reads its request's decision log every [`POLL_INTERVAL`] (so a decision
/// made in another process — `troupe approve`, the panel — is seen), and is woken at once by a
/// decision made through [`Approvals::decide`] in this process (the terminal).
pub struct Approvals {
    journal: Journal,
    policy: ApprovalPolicy,
    waiting: Mutex<HashMap<(SessionId, String), Arc<Notify>>>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("policy", &self.policy())
            .finish_non_exhaustive()
    }
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Decided (by anyone, the timeout included).
    Decided(ApprovalDecided),
    /// The turn was cancelled: the request was withdrawn with this decision (`deny` by
    /// `interrupt`, or whatever decision had won just before).
    Withdrawn(ApprovalDecided),
}

impl Approvals {
    /// The approvals of a runtime over `journal` with `policy`.
    pub fn new(journal: Journal, policy: ApprovalPolicy) -> Self {
        Self {
            journal,
            policy,
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> ApprovalPolicy {
        self.policy
    }

    /// The current time of the journal's clock (epoch ms).
    pub(crate) fn now_ms(&self) -> u64 {
        self.journal.clock().now_ms()
    }

    /// Decides request `request` of the member session `member` (the terminal's answer):
    /// records the decision ([`record_decision`]) and wakes the member's wait at once.
    ///
    /// # Errors
    /// `APPROVAL_ALREADY_DECIDED` when another decision stands (nothing changed); the
    /// journal's errors.
    pub async fn decide(
        &self,
        member: &SessionId,
        request: &str,
        member_name: &str,
        decision: Decision,
        by: DecidedBy,
    ) -> Result<ApprovalDecided, ApprovalError> {
        let mine = ApprovalDecided {
            id: request.to_owned(),
            decision,
            by,
            decided_at: self.now_ms(),
            session: None,
            rule: None,
        };
        let standing = record_decision(&self.journal, member, mine.clone()).await?;
        if let Some(notify) = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(member.clone(), request.to_owned()))
        {
            notify.notify_one();
        }
        if standing != mine {
            return Err(ApprovalError::AlreadyDecided {
                request: request.to_owned(),
                member: member_name.to_owned(),
                decided: Box::new(standing),
            });
        }
        Ok(standing)
    }

    /// Waits for the decision on request `request` of `member`: reads its decision log now and
    /// every [`POLL_INTERVAL`] (or when woken by [`Approvals::decide`]); after `timeout`
    /// records a denial by `timeout`, and when `cancel` fires records a denial by `interrupt`
    /// (each through [`record_decision`], so a decision that won just before stands instead).
    ///
    /// # Errors
    /// The journal's errors (a decision log that cannot be read or written).
    pub(crate) async fn wait(
        &self,
        member: &SessionId,
        request: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Waited, ApprovalError> {
        let key = (member.clone(), request.to_owned());
        let notify = Arc::clone(
            self.waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key.clone())
                .or_insert_with(|| Arc::new(Notify::new())),
        );
        let result = self
            .wait_on(member, request, timeout, cancel, &notify)
            .await;
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
        result
    }

    async fn wait_on(
        &self,
        member: &SessionId,
        request: &str,
        timeout: Duration,
        cancel: &CancellationToken,
        notify: &Notify,
    ) -> Result<Waited, ApprovalError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(decided) = self.read(member, request).await? {
                return Ok(Waited::Decided(decided));
            }
            tokio::select! {
                () = tokio::time::sleep(POLL_INTERVAL) => {}
                () = notify.notified() => {}
                () = tokio::time::sleep_until(deadline) => {
                    let decided = self.close(member, request, DecidedBy::Timeout).await?;
                    return Ok(Waited::Decided(decided));
                }
                () = cancel.cancelled() => {
                    let decided = self.close(member, request, DecidedBy::Interrupt).await?;
                    return Ok(Waited::Withdrawn(decided));
                }
            }
        }
    }

    /// Reads the decision log off the async workers (a file or a NATS read).
    async fn read(
        &self,
        member: &SessionId,
        request: &str,
    ) -> Result<Option<ApprovalDecided>, ApprovalError> {
        let journal = self.journal.clone();
        let member = member.clone();
        let request = request.to_owned();
        tokio::task::spawn_blocking(move || read_decision(&journal, &member, &request))
            .await
            .unwrap_or(Ok(None))
    }

    /// A denial by `by`, unless a decision stands already.
    async fn close(
        &self,
        member: &SessionId,
        request: &str,
        by: DecidedBy,
    ) -> Result<ApprovalDecided, ApprovalError> {
        let denial = ApprovalDecided {
            id: request.to_owned(),
            decision: Decision::Deny,
            by,
            decided_at: self.now_ms(),
            session: None,
            rule: None,
        };
        record_decision(&self.journal, member, denial).await
    }
}
