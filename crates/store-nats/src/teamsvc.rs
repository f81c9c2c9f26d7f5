//! The Team service over NATS (DESIGN §7 "One serializer per Team, members anywhere"): the
//! process holding a Team's Lead lease answers Team tool calls of teammates hosted by other
//! processes on `troupe.team.<team-id>.op` ([`TeamOpServer`]); [`NatsTeamLink`] is the
//! calling side, the transport of `troupe_runtime::team::RemoteTeam`.
//!
//! **Request/answer**: one NATS request per call, payload a
//! [`TeamCallRequest`] (JSON), reply a [`TeamCallAnswer`] (JSON) — see
//! `troupe_runtime::team` for the shapes and for what the serializer does with them.
//!
//! **Authority** (checked here, before the serializer sees the request): the process must
//! still hold the Lead's lease (else `TEAM_LEAD_MOVED`, and it stops serving the subject), and
//! the request's lease must be the one the lease bucket holds now for the caller's session —
//! the same owner token, at a revision no newer than the entry's (else
//! `TEAM_NOT_AUTHORIZED`): a process may act only for the members whose sessions it holds,
//! that is, hosts. The check reads the lease bucket only when the serving process's watched
//! view of it (`leaseview`) does not vouch for the request: a caller whose lease this process
//! saw renewed within half a TTL, at that revision or an older one, is authorized without a
//! KV read (a live holder renews every TTL/3; the view stops vouching well before a dead
//! holder's entry can expire and be taken over). A serializer whose Lead writer lost its lease mid-call
//! (`JOURNAL_LEASE_LOST`) answers `TEAM_LEAD_MOVED` too and stops serving. The store's users
//! are trusted as its writers are (they can read the lease bucket): the check fences stale and
//! mistaken callers, not a hostile user of the NATS server.
//!
//! **Retry** ([`LinkOptions`]): on `TEAM_LEAD_MOVED`, no responder, or no answer within the
//! request timeout, the link re-reads the Lead's lease and sends again — at once when the
//! lease changed hands since the link last read it (or it never read it: the first attempt
//! of a call is sent without a read), else after a pause (50 ms doubling to 1 s) — at most
//! [`LinkOptions::max_attempts`] times (default 1,000) within [`LinkOptions::patience`]
//! (default 5 min: a dead Lead's lease expires after the 10 s TTL, and then a `troupe resume`
//! — typed by someone — or an `--adopt` worker takes the Team over; the teammate's call
//! waits for it instead of failing, holding nothing but its own turn). Every attempt after one that may have
//! reached a serializer is marked `retry`, so a write whose answer was lost is answered from
//! the Lead log and never applied twice. When the connection to the store is down after a
//! failed attempt the call ends with `STORE_UNREACHABLE` at once (whether a write took effect
//! is then decided from the Lead log by the next retry of the same request id, or by the
//! recovery of the caller's host).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::connection::State;
use async_nats::{Request, RequestErrorKind};
use futures_util::StreamExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use troupe_protocol::SessionId;
use troupe_protocol::sync::lock;
use troupe_runtime::Runtime;
use troupe_runtime::team::{
    CallerLease, LinkFuture, TEAM_LEAD_MOVED, TEAM_NOT_AUTHORIZED, TeamCallAnswer, TeamCallRequest,
    TeamLink, TeamLinkError,
};

use crate::NatsBackend;
use crate::leaseview::LeaseView;

/// The longest request served, in bytes (a Team message is at most 64 KiB by default).
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// The Team service of one live Team on a NATS store (see the module docs); dropping it
/// stops serving at once (requests in flight are aborted: their callers retry).
pub struct TeamOpServer {
    served: crate::served::Served,
}

impl std::fmt::Debug for TeamOpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamOpServer").finish_non_exhaustive()
    }
}

impl TeamOpServer {
    /// Subscribes to [`NatsBackend::team_subject`] of `lead` and serves its requests with
    /// `runtime`'s Team service, on the calling tokio runtime. Returns once the server has
    /// the subscription (a flush), so a caller finds it served from then on. Call it while
    /// this process holds the Lead log's lease (every request checks that it still does).
    ///
    /// # Errors
    /// The subscription or the flush fails (the connection is down).
    pub async fn start(
        nats: &NatsBackend,
        runtime: Runtime,
        lead: SessionId,
    ) -> Result<Self, async_nats::Error> {
        let client = nats.client();
        let mut requests = client.subscribe(NatsBackend::team_subject(&lead)).await?;
        client.flush().await?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let nats = nats.clone();
        let lead = Arc::new(lead);
        let view = Arc::new(nats.lease_view());
        let serve = tokio::spawn(async move {
            let mut answering = JoinSet::new();
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    request = requests.next() => {
                        let Some(request) = request else { break };
                        let Some(reply) = request.reply.clone() else { continue };
                        let (nats, runtime, lead, lost) =
                            (nats.clone(), runtime.clone(), Arc::clone(&lead), stopped.clone());
                        let view = Arc::clone(&view);
                        let client = client.clone();
                        answering.spawn(async move {
                            let mut answer =
                                answer(&nats, &view, &runtime, &lead, &request.payload).await;
                            if matches!(answer.code(), Some("JOURNAL_LEASE_LOST" | TEAM_LEAD_MOVED)) {
                                // Another process may hold the Team now: this one stops
                                // serving it, and the caller asks again there.
                                if answer.code() == Some("JOURNAL_LEASE_LOST") {
                                    answer = TeamCallAnswer::failed(
                                        TEAM_LEAD_MOVED,
                                        format!(
                                            "Error: this process lost the Lead lease of Team {lead}"
                                        ),
                                    );
                                }
                                lost.cancel();
                            }
                            let payload = serde_json::to_vec(&answer).unwrap_or_default();
                            let _ = client.publish(reply, payload.into()).await;
                            let _ = client.flush().await;
                        });
                    }
                    Some(_) = answering.join_next(), if !answering.is_empty() => {}
                }
            }
            // New requests find no responder from here on.
            let _ = requests.unsubscribe().await;
            let _ = client.flush().await;
            answering
        });
        Ok(Self {
            served: crate::served::Served::new(serve, stop),
        })
    }

    /// Stops serving: unsubscribes (callers find no responder and retry at the next holder of
    /// the Lead's lease) and waits up to 10 s for the requests in flight to be answered.
    pub async fn stop(self) {
        self.served.stop().await;
    }
}

/// The answer to one request payload: the authority checks, then the serializer.
async fn answer(
    nats: &NatsBackend,
    view: &LeaseView,
    runtime: &Runtime,
    lead: &SessionId,
    payload: &[u8],
) -> TeamCallAnswer {
    if payload.len() > MAX_REQUEST_BYTES {
        return TeamCallAnswer::failed(
            "INVALID_ARGUMENTS",
            format!("Error: a Team service request is at most {MAX_REQUEST_BYTES} bytes"),
        );
    }
    let request: TeamCallRequest = match serde_json::from_slice(payload) {
        Ok(request) => request,
        Err(e) => {
            return TeamCallAnswer::failed(
                "INVALID_ARGUMENTS",
                format!("Error: not a Team service request: {e}"),
            );
        }
    };
    // A Lead lease being taken back after an outage of the lease bucket is waited for: the
    // answer is then as the renewal decides (a refusal here stops serving the Team).
    if nats.settled_lease(lead).await.is_none() {
        return TeamCallAnswer::failed(
            TEAM_LEAD_MOVED,
            format!("Error: this process does not hold the Lead lease of Team {lead}"),
        );
    }
    if let Err(refusal) = authorize(nats, view, &request).await {
        return refusal;
    }
    runtime.teams().serve_remote(lead, request).await
}

/// Whether the request's lease is the caller's session's current one (see the module docs):
/// vouched for by the watched view, else read from the lease bucket.
async fn authorize(
    nats: &NatsBackend,
    view: &LeaseView,
    request: &TeamCallRequest,
) -> Result<(), TeamCallAnswer> {
    let caller = &request.caller;
    let refuse = |why: String| {
        Err(TeamCallAnswer::failed(
            TEAM_NOT_AUTHORIZED,
            format!("Error: not authorized to act for {caller}: {why}"),
        ))
    };
    let Some(claimed) = &request.lease else {
        return refuse("the request names no lease (its process does not host it)".to_owned());
    };
    if view.vouches(caller.as_str(), &claimed.owner, claimed.revision) {
        return Ok(());
    }
    match nats.current_lease(caller).await {
        Ok(Some(current))
            if current.owner == claimed.owner && claimed.revision <= current.revision =>
        {
            Ok(())
        }
        Ok(Some(_)) => refuse("its session's lease is held by another process".to_owned()),
        Ok(None) => refuse("no process holds its session's lease".to_owned()),
        Err(e) => Err(TeamCallAnswer::failed(
            "STORE_IO",
            format!("Error: the caller's lease could not be read: {e}"),
        )),
    }
}

/// How a [`NatsTeamLink`] retries (see the module docs). [`Default`]: 1,000 attempts within
/// 5 min, each waiting up to 5 s (plus a `wait_agent`'s own timeout) for its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkOptions {
    /// The most attempts of one call.
    pub max_attempts: u32,
    /// How long one call keeps retrying, from its first attempt.
    pub patience: Duration,
    /// How long one attempt waits for its answer (beyond the serializer's own wait).
    pub request_timeout: Duration,
}

impl Default for LinkOptions {
    fn default() -> Self {
        Self {
            max_attempts: 1_000,
            patience: Duration::from_secs(300),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// The calling side of the Team service on a NATS store: a [`TeamLink`] to the Team led by
/// one Lead, for the teammates this process hosts (their leases are this backend's).
#[derive(Debug, Clone)]
pub struct NatsTeamLink {
    nats: NatsBackend,
    lead: SessionId,
    options: LinkOptions,
    /// The Lead lease's owner token as the last failed attempt read it (`None` until then).
    lead_seen: Arc<Mutex<Option<String>>>,
}

impl NatsTeamLink {
    /// The link to the Team led by `lead` over `nats`.
    pub fn new(nats: NatsBackend, lead: SessionId, options: LinkOptions) -> Self {
        Self {
            nats,
            lead,
            options,
            lead_seen: Arc::default(),
        }
    }

    /// The Lead's lease owner now (`None`: nobody holds it, or it could not be read).
    async fn lead_owner(&self) -> Option<String> {
        self.nats
            .current_lease(&self.lead)
            .await
            .ok()
            .flatten()
            .map(|l| l.owner)
    }

    async fn send(
        &self,
        mut request: TeamCallRequest,
        busy: Duration,
    ) -> Result<TeamCallAnswer, TeamLinkError> {
        // A caller whose lease is being taken back after an outage of the lease bucket names
        // it once that is decided (else the call would be refused as unauthorized).
        if request.lease.is_none() && self.nats.lease_retaking(&request.caller) {
            self.nats.settled_lease(&request.caller).await;
            request.lease = self.lease_of(&request.caller);
        }
        let client = self.nats.client();
        let subject = NatsBackend::team_subject(&self.lead);
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        // The Lead's owner as last read (no read before the first attempt: a call to a Lead
        // that did not move costs one request and nothing else).
        let mut owner = lock(&self.lead_seen).clone();
        let mut last = String::new();
        let mut attempts = 0;
        while attempts < self.options.max_attempts {
            attempts += 1;
            let payload = serde_json::to_vec(&request).map_err(|e| TeamLinkError::LeadMoved {
                team: self.lead.to_string(),
                detail: format!("the request could not be encoded: {e}"),
            })?;
            let asked = Request::new()
                .payload(payload.into())
                .timeout(Some(self.options.request_timeout + busy));
            match client.send_request(subject.clone(), asked).await {
                Ok(message) => match serde_json::from_slice::<TeamCallAnswer>(&message.payload) {
                    Ok(answer) if answer.code() == Some(TEAM_LEAD_MOVED) => {
                        last = answer.message.unwrap_or_default();
                        request.retry = true;
                    }
                    Ok(answer) => return Ok(answer),
                    Err(e) => {
                        last = format!("an answer that does not parse: {e}");
                        request.retry = true;
                    }
                },
                Err(e) if e.kind() == RequestErrorKind::NoResponders => {
                    last = "no process serves the Team".to_owned();
                }
                Err(e) => {
                    last = format!("no answer: {e}");
                    // It may have reached a serializer whose answer was lost.
                    request.retry = true;
                    if client.connection_state() != State::Connected {
                        return Err(TeamLinkError::StoreUnreachable {
                            url: self.nats.url().to_owned(),
                            reason: format!("{e} (the connection is down)"),
                        });
                    }
                }
            }
            // Re-read the Lead's lease: a new holder is asked at once, else after a pause.
            let now = self.lead_owner().await;
            if now.is_some() {
                lock(&self.lead_seen).clone_from(&now);
            }
            if now.is_some() && now != owner {
                owner = now;
                continue;
            }
            owner = now;
            if started.elapsed() + pause > self.options.patience {
                break;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
        if client.connection_state() != State::Connected {
            return Err(TeamLinkError::StoreUnreachable {
                url: self.nats.url().to_owned(),
                reason: last,
            });
        }
        Err(TeamLinkError::LeadMoved {
            team: self.lead.to_string(),
            detail: format!(
                "{last} ({attempts} attempts over {} ms)",
                started.elapsed().as_millis()
            ),
        })
    }
}

impl TeamLink for NatsTeamLink {
    fn team(&self) -> &SessionId {
        &self.lead
    }

    fn lease_of(&self, caller: &SessionId) -> Option<CallerLease> {
        self.nats.held_lease(caller).map(|l| CallerLease {
            owner: l.owner,
            revision: l.revision,
        })
    }

    fn call(&self, request: TeamCallRequest, busy: Duration) -> LinkFuture<'_> {
        Box::pin(self.send(request, busy))
    }
}
