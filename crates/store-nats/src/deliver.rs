//! Team mail and interrupts across processes over NATS (DESIGN §7 "Delivery across
//! processes"): the process holding a teammate's lease answers delivery requests for it on
//! `troupe.deliver.<id>` and the Lead's interrupts of it on `troupe.interrupt.<id>`
//! ([`DeliveryServer`]); [`NatsMemberHosts`] is the serializer's side, the transport of
//! `troupe_runtime::team::MemberHosts`.
//!
//! **Subject.** DESIGN §7 names it `troupe.session.<id>.deliver`; the stream takes
//! `troupe.session.>`, so a request there would be stored in the stream as a message and
//! acknowledged by JetStream itself. Like the control and Team service subjects it lives
//! outside the stream's subjects: `troupe.deliver.<id>` ([`NatsBackend::deliver_subject`]).
//!
//! **Request/answer**: one NATS request per attempt, payload a
//! `troupe_runtime::team::DeliverRequest` (JSON) naming the owner token of the lease the
//! serializer found on the target, reply a `DeliverAnswer` (JSON). Every process serving
//! deliveries subscribes to `troupe.deliver.*` and answers only the requests naming a lease
//! it holds now (the others it leaves to their holder); the holder appends the item to the
//! target's inbox — durably, de-duplicated by message id — and answers.
//!
//! **Retry** ([`NatsMemberHosts`]): each attempt re-reads the target's lease first. No lease:
//! [`Handoff::Unhosted`]. A lease: the request, waiting up to the store's request timeout.
//! No answer (the holder died or lost its connection: its lease expires after the TTL), a
//! lease that cannot be read (the lease bucket is electing a leader), or a holder that answers
//! `TEAM_MEMBER_NOT_HOSTED` (it is starting or settling the teammate): pause (50 ms doubling to 1 s) and try again, for up to twice the lease TTL plus one request
//! timeout, after which the hand-over fails with `STORE_IO` (the mailbox tries again, then
//! leaves the message queued). Every attempt is safe to repeat: the holder, and the
//! serializer's own unhosted append, find a message already in the target's log by its id
//! and append nothing (see `troupe_runtime::team`'s delivery docs for what survives a crash
//! at each point).
//!
//! **Interrupts** (the Lead's `interrupt_agent` of a teammate hosted elsewhere, REFERENCE
//! c.13) take the same path on `troupe.interrupt.<id>` ([`NatsBackend::interrupt_subject`]),
//! served by the same [`DeliveryServer`]: payload a `troupe_runtime::team::InterruptRequest`
//! naming the lease's owner token, reply an `InterruptAnswer`; the holder stops the turn as a
//! local interrupt does and answers the status it sampled. The retry is the delivery's, with
//! each attempt waiting the request timeout plus the request's `waitMs`; nobody holding the
//! lease is `Unhosted` (`inactive`); a holder that never answered and whose lease then
//! expired is `HolderGone`, which the serializer decides from the teammate's log (see
//! `troupe_runtime::team`'s interrupt docs); a holder that keeps its lease but never answers
//! is `STORE_IO` after the patience. Nothing is written by the request itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::{Request, RequestErrorKind};
use futures_util::StreamExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use troupe_journal::JournalError;
use troupe_protocol::SessionId;
use troupe_runtime::Runtime;
use troupe_runtime::team::{
    DeliverAnswer, DeliverRequest, Handoff, HandoffFuture, InterruptAnswer, InterruptFuture,
    InterruptHandoff, InterruptRequest, MemberHosts, PlaceFuture, TEAM_MEMBER_NOT_HOSTED,
};

use crate::NatsBackend;
use crate::workers::{
    HostAnswer, HostRequest, HostedBudget, WORKER_VERSION, WorkspaceIdentity, live_workers,
};

/// The longest delivery request served, in bytes (a Team message is at most 64 KiB by
/// default; its frame adds little).
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// The holder's side (see the module docs): answers the delivery requests naming a lease
/// this process holds, with `runtime`'s Team service. Dropping it stops serving at once.
pub struct DeliveryServer {
    served: crate::served::Served,
}

impl std::fmt::Debug for DeliveryServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryServer").finish_non_exhaustive()
    }
}

impl DeliveryServer {
    /// Subscribes to `troupe.deliver.*` and serves, on the calling tokio runtime, the
    /// requests for sessions whose lease `nats` holds, with `runtime`'s agents. Returns once
    /// the server has the subscription (a flush).
    ///
    /// # Errors
    /// The subscription or the flush fails (the connection is down).
    pub async fn start(nats: &NatsBackend, runtime: Runtime) -> Result<Self, async_nats::Error> {
        let client = nats.client();
        let mut deliveries = client
            .subscribe(format!("{}*", crate::DELIVER_SUBJECT_PREFIX))
            .await?;
        let mut interrupts = client
            .subscribe(format!("{}*", crate::INTERRUPT_SUBJECT_PREFIX))
            .await?;
        client.flush().await?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let nats = nats.clone();
        let serve = tokio::spawn(async move {
            let mut answering = JoinSet::new();
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    request = deliveries.next() => {
                        let Some(request) = request else { break };
                        let Some(reply) = request.reply.clone() else { continue };
                        let Some(parsed) = parse(&nats, &request.payload) else { continue };
                        let (runtime, client) = (runtime.clone(), client.clone());
                        answering.spawn(async move {
                            let answer = match parsed {
                                Ok(request) => runtime.teams().accept_delivery(&request).await,
                                Err(refusal) => refusal,
                            };
                            let payload = serde_json::to_vec(&answer).unwrap_or_default();
                            let _ = client.publish(reply, payload.into()).await;
                            let _ = client.flush().await;
                        });
                    }
                    request = interrupts.next() => {
                        let Some(request) = request else { break };
                        let Some(reply) = request.reply.clone() else { continue };
                        let Some(parsed) = parse_interrupt(&nats, &request.payload) else { continue };
                        let (runtime, client) = (runtime.clone(), client.clone());
                        answering.spawn(async move {
                            let answer = runtime.teams().accept_interrupt(&parsed).await;
                            let payload = serde_json::to_vec(&answer).unwrap_or_default();
                            let _ = client.publish(reply, payload.into()).await;
                            let _ = client.flush().await;
                        });
                    }
                    Some(_) = answering.join_next(), if !answering.is_empty() => {}
                }
            }
            let _ = deliveries.unsubscribe().await;
            let _ = interrupts.unsubscribe().await;
            let _ = client.flush().await;
            answering
        });
        Ok(Self {
            served: crate::served::Served::new(serve, stop),
        })
    }

    /// Stops serving: unsubscribes and waits up to 10 s for the requests in flight to be
    /// answered.
    pub async fn stop(self) {
        self.served.stop().await;
    }
}

/// The request in `payload` when this process holds the lease it names (`None`: another
/// process's to answer, or not a request at all — nobody can tell whose it is, so nobody
/// answers and the sender's attempt times out); for a request larger than 1 MiB naming a
/// lease held here, a refusal (`INVALID_ARGUMENTS`).
fn parse(nats: &NatsBackend, payload: &[u8]) -> Option<Result<DeliverRequest, DeliverAnswer>> {
    let request: DeliverRequest = serde_json::from_slice(payload).ok()?;
    let held = nats.held_lease(&request.target)?;
    if held.owner != request.holder {
        return None;
    }
    if payload.len() > MAX_REQUEST_BYTES {
        return Some(Err(DeliverAnswer::failed(
            "INVALID_ARGUMENTS",
            format!("Error: a delivery request is at most {MAX_REQUEST_BYTES} bytes"),
        )));
    }
    Some(Ok(request))
}

/// The interrupt request in `payload` when this process holds the lease it names (`None`:
/// another process's to answer, or not a request at all; see [`parse`]).
fn parse_interrupt(nats: &NatsBackend, payload: &[u8]) -> Option<InterruptRequest> {
    if payload.len() > MAX_REQUEST_BYTES {
        return None;
    }
    let request: InterruptRequest = serde_json::from_slice(payload).ok()?;
    let held = nats.held_lease(&request.target)?;
    (held.owner == request.holder).then_some(request)
}

/// Where placement's warnings go (a worker skipped and why; none eligible).
pub type Warnings = Arc<dyn Fn(&str) + Send + Sync>;

/// The serializer's side on a NATS store (see the module docs).
#[derive(Clone)]
pub struct NatsMemberHosts {
    nats: NatsBackend,
    append_unhosted: bool,
    /// The Lead's workspace, when woken teammates are placed on workers.
    placement: Option<WorkspaceIdentity>,
    /// The Team's budget, sent with each request to host a teammate.
    budget: Option<HostedBudget>,
    warn: Warnings,
    /// Where the notices of taken-over teammates go (see `MemberHosts::notice`).
    notice: Warnings,
}

impl std::fmt::Debug for NatsMemberHosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsMemberHosts")
            .field("append_unhosted", &self.append_unhosted)
            .field("placement", &self.placement)
            .finish_non_exhaustive()
    }
}

impl NatsMemberHosts {
    /// The hand-over over `nats`; `append_unhosted` as
    /// `troupe_runtime::team::MemberHosts::append_unhosted` (on with `--placement workers`).
    pub fn new(nats: NatsBackend, append_unhosted: bool) -> Self {
        Self {
            nats,
            append_unhosted,
            placement: None,
            budget: None,
            warn: Arc::new(|line: &str| tracing::warn!("{line}")),
            notice: Arc::new(|line: &str| tracing::info!("{line}")),
        }
    }

    /// Sends placement's warnings (one line each) to `warn` instead of the log.
    #[must_use]
    pub fn with_warnings(mut self, warn: Warnings) -> Self {
        self.warn = warn;
        self
    }

    /// Sends the notices of teammates taken over after their host died (one line each,
    /// saying where each continues: `MemberHosts::notice`) to `notice` instead of the log.
    #[must_use]
    pub fn with_notices(mut self, notice: Warnings) -> Self {
        self.notice = notice;
        self
    }

    /// Sends the Team's budget (`budget` with `prices`) with each request to host a
    /// teammate, so the worker holds it to the Team's budget; an unset budget sends none.
    #[must_use]
    pub fn with_budget(
        mut self,
        budget: troupe_session::ledger::Budget,
        prices: troupe_session::ledger::Prices,
    ) -> Self {
        self.budget = budget.is_set().then_some(HostedBudget { budget, prices });
        self
    }

    /// The hand-over of `--placement workers`: unhosted quiet mail is appended at once, and
    /// a woken unhosted teammate is placed on a live worker whose workspace identity matches
    /// `lead` (the Lead's) — the one with the most free slots first (by name on a tie), those
    /// whose last heartbeat said none last (a slot may have freed since: the worker itself
    /// answers `WORKER_BUSY` when it is full); a worker that is skipped or refuses is reported
    /// as a warning with the reason; none: `None`, the teammate runs in the Lead's process.
    pub fn placing(nats: NatsBackend, lead: WorkspaceIdentity) -> Self {
        Self {
            nats,
            append_unhosted: true,
            placement: Some(lead),
            budget: None,
            warn: Arc::new(|line: &str| tracing::warn!("{line}")),
            notice: Arc::new(|line: &str| tracing::info!("{line}")),
        }
    }

    /// `target` is named by `name` (its Team name) in the warnings.
    async fn place_on_worker(
        &self,
        target: &SessionId,
        name: &str,
    ) -> Result<Option<String>, JournalError> {
        tracing::debug!(teammate = %target, name, "placing");
        let Some(lead) = &self.placement else {
            return Ok(None);
        };
        // A registry that cannot be read (its bucket's leader died and the replicas are
        // electing another: the bucket looks missing, or its keys time out) is tried again
        // for as long as an append would be, rather than failing the hand-over at once.
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let mut workers = loop {
            match live_workers(&self.nats).await {
                Ok(workers) => break workers,
                Err(e) if started.elapsed() + pause < self.nats.options().append_timeout => {
                    tracing::debug!(error = %e, "the workers could not be listed; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    return Err(self.io(format!(
                        "the workers could not be listed (for {} ms): {e}",
                        started.elapsed().as_millis()
                    )));
                }
            }
        };
        let none_registered = workers.is_empty();
        workers.sort_by(|a, b| b.free.cmp(&a.free).then_with(|| a.name.cmp(&b.name)));
        let timeout = self.nats.options().request_timeout;
        // The ineligible workers are named with their reasons on one line (`worker W skipped
        // for T: why`, or `workers skipped for T: W1: why; W2: why`), then the eligible ones
        // are asked (in the order above: a full one last, it may have freed a slot since its
        // heartbeat — the one right after a teammate settled there — and it says when not).
        let mut skipped = Vec::new();
        let eligible: Vec<_> = workers
            .into_iter()
            .filter(|worker| match worker.workspace.mismatch(lead) {
                Some(why) => {
                    skipped.push((worker.name.clone(), why));
                    false
                }
                None => true,
            })
            .collect();
        match skipped.as_slice() {
            [] => {}
            [(worker, why)] => {
                (self.warn)(&format!(
                    "worker {worker} skipped for teammate {name}: {why}"
                ));
            }
            several => {
                let named: Vec<String> = several
                    .iter()
                    .map(|(worker, why)| format!("{worker}: {why}"))
                    .collect();
                (self.warn)(&format!(
                    "workers skipped for teammate {name}: {}",
                    named.join("; ")
                ));
            }
        }
        for worker in eligible {
            let request = HostRequest {
                version: WORKER_VERSION,
                session: target.clone(),
                budget: self.budget.clone(),
            };
            let payload = serde_json::to_vec(&request)
                .map_err(|e| self.io(format!("the request could not be encoded: {e}")))?;
            let asked = Request::new()
                .payload(payload.into())
                .timeout(Some(timeout * 2));
            let answer = self
                .nats
                .client()
                .send_request(NatsBackend::worker_subject(&worker.name), asked)
                .await
                .map_err(|e| crate::conn::error_text(&e))
                .and_then(|m| {
                    serde_json::from_slice::<HostAnswer>(&m.payload).map_err(|e| e.to_string())
                });
            match answer {
                Ok(answer) if answer.ok => return Ok(Some(worker.name)),
                Ok(answer) => (self.warn)(&format!(
                    "worker {} refused teammate {name}: {}: {}",
                    worker.name,
                    answer.code.unwrap_or_default(),
                    answer.message.unwrap_or_default()
                )),
                Err(e) => (self.warn)(&format!(
                    "worker {} did not answer for teammate {name}: {e}",
                    worker.name
                )),
            }
        }
        let why = if none_registered {
            " (no worker is registered on this store: start one with troupe worker)"
        } else {
            ""
        };
        (self.warn)(&format!(
            "no worker can host teammate {name}: it runs in the Lead's process{why}"
        ));
        Ok(None)
    }

    fn io(&self, reason: String) -> JournalError {
        JournalError::StoreIo {
            op: "deliver a Team message to its target's host",
            url: self.nats.url().to_owned(),
            reason,
        }
    }

    async fn hand_over(&self, mut request: DeliverRequest) -> Result<Handoff, JournalError> {
        let client = self.nats.client();
        let subject = NatsBackend::deliver_subject(&request.target);
        let timeout = self.nats.options().request_timeout;
        let patience = self.nats.lease_ttl() * 2 + timeout;
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let mut last = String::new();
        loop {
            // A lease that cannot be read (the lease bucket's leader died and its replicas are
            // electing another, a lost connection) is a transient failure like an unanswered
            // request: tried again within the patience, not a failed delivery at once.
            let lease = match self.nats.current_lease(&request.target).await {
                Ok(Some(lease)) => Some(lease),
                Ok(None) => return Ok(Handoff::Unhosted),
                Err(e) => {
                    last = format!("the target's lease could not be read: {e}");
                    None
                }
            };
            if let Some(lease) = &lease
                && self
                    .nats
                    .held_lease(&request.target)
                    .is_some_and(|own| own.owner == lease.owner)
            {
                // This process's own (the teammate is being started or released here).
                last = "this process holds the lease but runs no agent of it".to_owned();
            } else if let Some(lease) = lease {
                request.holder.clone_from(&lease.owner);
                let payload = serde_json::to_vec(&request)
                    .map_err(|e| self.io(format!("the request could not be encoded: {e}")))?;
                let asked = Request::new()
                    .payload(payload.into())
                    .timeout(Some(timeout));
                match client.send_request(subject.clone(), asked).await {
                    Ok(message) => {
                        match serde_json::from_slice::<DeliverAnswer>(&message.payload) {
                            Ok(answer) if answer.ok => return Ok(Handoff::Held),
                            Ok(answer) => {
                                let code = answer.code.unwrap_or_default();
                                let message = answer.message.unwrap_or_default();
                                if code != TEAM_MEMBER_NOT_HOSTED {
                                    return Err(
                                        self.io(format!("the holder refused: {code}: {message}"))
                                    );
                                }
                                last = format!("{code}: {message}");
                            }
                            Err(e) => last = format!("an answer that does not parse: {e}"),
                        }
                    }
                    Err(e) if e.kind() == RequestErrorKind::NoResponders => {
                        last = "no process serves deliveries".to_owned();
                    }
                    Err(e) => last = format!("the holder did not answer: {e}"),
                }
            }
            if started.elapsed() + pause > patience {
                return Err(self.io(format!(
                    "{last} (for {} ms; the message stays queued)",
                    started.elapsed().as_millis()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// [`MemberHosts::interrupt`] over NATS (see the module docs): as [`Self::hand_over`], on
    /// `troupe.interrupt.<id>`, each attempt waiting the request timeout plus the holder's
    /// `waitMs`; a holder that never answered and whose lease then expired is
    /// [`InterruptHandoff::HolderGone`]; one whose lease stays held past the patience, a
    /// `STORE_IO` error.
    async fn interrupt_holder(
        &self,
        mut request: InterruptRequest,
    ) -> Result<InterruptHandoff, JournalError> {
        let io = |reason: String| JournalError::StoreIo {
            op: "interrupt a teammate on its host",
            url: self.nats.url().to_owned(),
            reason,
        };
        // Only the Team's Lead-lease holder stops its members: a process that lost the Lead's
        // lease (stalled past the TTL while another took the Team over) must not stop the
        // new holder's teammates on its way out. Checked against the bucket, not this
        // process's own record, which a stall leaves stale until its next renewal.
        let lead = &request.team;
        if let Some(why) = self.nats.lease_lost(lead) {
            return Err(JournalError::LeaseLost {
                id: lead.clone(),
                reason: why,
            });
        }
        // Only a lease this process certainly holds (renewed within its TTL; a writer that let
        // go of it after its log failed leaves none), and the bucket still names, is enough.
        let Some(own) = self.nats.settled_lease(lead).await else {
            return Err(JournalError::LeaseLost {
                id: lead.clone(),
                reason: "this process no longer holds the Lead's lease (lost, or not renewed \
                         within its TTL): it no longer interrupts its teammates"
                    .to_owned(),
            });
        };
        if self
            .nats
            .current_lease(lead)
            .await?
            .is_none_or(|now| now.owner != own.owner)
        {
            return Err(JournalError::LeaseLost {
                id: lead.clone(),
                reason: "another process holds the Lead's lease now: this one no longer \
                         interrupts its teammates"
                    .to_owned(),
            });
        }
        let client = self.nats.client();
        let subject = NatsBackend::interrupt_subject(&request.target);
        let timeout = self.nats.options().request_timeout + Duration::from_millis(request.wait_ms);
        let patience = self.nats.lease_ttl() * 2 + timeout;
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let mut asked = false;
        let mut last = String::new();
        loop {
            let Some(lease) = self.nats.current_lease(&request.target).await? else {
                return Ok(if asked {
                    InterruptHandoff::HolderGone {
                        reason: format!("{last}, and its lease expired"),
                    }
                } else {
                    InterruptHandoff::Unhosted
                });
            };
            if self
                .nats
                .held_lease(&request.target)
                .is_some_and(|own| own.owner == lease.owner)
            {
                // This process's own, and no agent of it here (it is being started or
                // released here): nothing runs elsewhere; the caller decides again.
                return Ok(if asked {
                    InterruptHandoff::HolderGone {
                        reason: format!("{last}, and this process took its lease"),
                    }
                } else {
                    InterruptHandoff::Unhosted
                });
            }
            request.holder.clone_from(&lease.owner);
            let payload = serde_json::to_vec(&request)
                .map_err(|e| io(format!("the request could not be encoded: {e}")))?;
            let sent = Request::new()
                .payload(payload.into())
                .timeout(Some(timeout));
            match client.send_request(subject.clone(), sent).await {
                Ok(message) => match serde_json::from_slice::<InterruptAnswer>(&message.payload) {
                    Ok(answer) if answer.ok => {
                        let previous = match answer.previous_status.as_deref() {
                            Some("running") => "running",
                            Some("idle") => "idle",
                            other => {
                                return Err(io(format!(
                                    "the holder answered the previous status {other:?}"
                                )));
                            }
                        };
                        return Ok(InterruptHandoff::Interrupted {
                            previous,
                            settled: answer.settled,
                        });
                    }
                    Ok(answer) => {
                        let code = answer.code.unwrap_or_default();
                        let message = answer.message.unwrap_or_default();
                        if code != TEAM_MEMBER_NOT_HOSTED {
                            return Err(io(format!("the holder refused: {code}: {message}")));
                        }
                        last = format!("{code}: {message}");
                    }
                    Err(e) => last = format!("an answer that does not parse: {e}"),
                },
                Err(e) if e.kind() == RequestErrorKind::NoResponders => {
                    asked = true;
                    last = "no process serves interrupts".to_owned();
                }
                Err(e) => {
                    asked = true;
                    last = format!("the holder did not answer: {e}");
                }
            }
            if started.elapsed() + pause > patience {
                return Err(io(format!(
                    "{last} (for {} ms, its lease still held)",
                    started.elapsed().as_millis()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

impl MemberHosts for NatsMemberHosts {
    fn interrupt(&self, request: InterruptRequest) -> InterruptFuture<'_> {
        Box::pin(self.interrupt_holder(request))
    }

    fn deliver(&self, request: DeliverRequest) -> HandoffFuture<'_> {
        Box::pin(self.hand_over(request))
    }

    fn notice(&self, line: &str) {
        (self.notice)(line);
    }

    fn append_unhosted(&self) -> bool {
        self.append_unhosted
    }

    fn place<'a>(&'a self, target: &'a SessionId, name: &'a str) -> PlaceFuture<'a> {
        Box::pin(self.place_on_worker(target, name))
    }
}
