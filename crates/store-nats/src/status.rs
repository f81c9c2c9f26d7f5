//! Status across processes over NATS (DESIGN §7, issue 14 item 5): a process hosting Team
//! members whose serializer runs elsewhere publishes their status edges on the Team's status
//! subject `troupe.status.<team-id>` ([`StatusPublisher`]); the serializer's process records
//! them ([`StatusListener`]) for `list_agents` and `wait_agent` (see
//! `troupe_runtime::team::StatusEdge` for the shape and the edge-only semantics).
//!
//! Publishing is plain NATS publish (no reply, nothing stored: a status is never durable). A
//! hosted member is reported whenever its agent's status differs from the one last reported
//! (checked at each of its progress events), again every third of the
//! lease TTL while it stays resident (the refresh; each report holds for one TTL), and once
//! more with `live: null` when it is no longer resident here (released: it settled, or the
//! process parked it on shutdown). A report lost in transit is made good by the next refresh;
//! a process that dies stops refreshing and its reports expire after the TTL. A member whose
//! lease this process does not hold (lost: the process stalled past the TTL) is never
//! reported, and is dropped without a release report: a stalled process that wakes up must
//! not keep the Team waiting for it, nor cancel the report of the member's new host.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::connection::State;
use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use troupe_protocol::SessionId;
use troupe_runtime::team::{CallerLive, CallerStatus, STATUS_VERSION, StatusEdge};
use troupe_runtime::{Agent, AgentStatus, Progress, Runtime};

use crate::NatsBackend;

/// The serializer's side: records the reports on one Team's status subject. Dropping it
/// stops.
pub struct StatusListener {
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for StatusListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusListener").finish_non_exhaustive()
    }
}

impl StatusListener {
    /// Subscribes to [`NatsBackend::status_subject`] of `lead` and hands every report to
    /// `runtime`'s Team service, on the calling tokio runtime. Returns once subscribed.
    ///
    /// # Errors
    /// The subscription or the flush fails (the connection is down).
    pub async fn start(
        nats: &NatsBackend,
        runtime: Runtime,
        lead: &SessionId,
    ) -> Result<Self, async_nats::Error> {
        let client = nats.client();
        let mut reports = client.subscribe(NatsBackend::status_subject(lead)).await?;
        client.flush().await?;
        // After this process could not hear reports (its connection was down: a server
        // outage, a restart), a missing report says nothing about its host until the host had
        // a TTL to report again: without that grace the Team would take over, right after the
        // outage, teammates that live workers are still running (and taking back).
        let grace = nats.lease_ttl();
        let lead = lead.clone();
        let task = tokio::spawn(async move {
            let mut health = tokio::time::interval(Duration::from_millis(250));
            let mut was_down = false;
            loop {
                tokio::select! {
                    report = reports.next() => {
                        let Some(report) = report else { break };
                        match serde_json::from_slice::<StatusEdge>(&report.payload) {
                            Ok(edge) => {
                                runtime.teams().status_edge(&edge);
                            }
                            Err(e) => {
                                tracing::debug!(error = %e, "a status report that does not parse");
                            }
                        }
                    }
                    _ = health.tick() => {
                        let down = client.connection_state() != State::Connected;
                        if was_down || down {
                            runtime.teams().hold_reports(&lead, grace);
                        }
                        was_down = down;
                    }
                }
            }
        });
        Ok(Self { task })
    }
}

impl Drop for StatusListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The hosting side: publishes the status edges of the Team members `runtime` hosts whose
/// Team's serializer runs in another process. Dropping it stops.
pub struct StatusPublisher {
    task: Option<tokio::task::JoinHandle<()>>,
    stop: CancellationToken,
}

impl std::fmt::Debug for StatusPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusPublisher").finish_non_exhaustive()
    }
}

/// The Team of a resident agent hosted for a serializer elsewhere: a subagent child (a
/// teammate: a process hosts only those for another) whose parent, the Lead, runs no Team in
/// this runtime.
fn team_elsewhere(runtime: &Runtime, agent: &Agent) -> Option<SessionId> {
    let lead = agent.writer().header().parent_session.clone()?;
    let child = agent.with_transcript(|t| t.descriptor().is_some());
    (child && runtime.teams().team(&lead).is_none()).then_some(lead)
}

fn live_of(agent: &Agent) -> CallerLive {
    CallerLive {
        status: match agent.status() {
            AgentStatus::Running => CallerStatus::Running,
            AgentStatus::Idle => CallerStatus::Idle,
        },
        model: Some(agent.setup().model.model.clone()),
    }
}

impl StatusPublisher {
    /// Starts publishing, on the calling tokio runtime, as host `host` (a worker's name).
    pub fn start(nats: &NatsBackend, runtime: Runtime, host: String) -> Self {
        let client = nats.client();
        let leases = nats.clone();
        let ttl = nats.lease_ttl();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let mut progress = runtime.subscribe_progress();
        let task = tokio::spawn(async move {
            // member → its Team and the status last reported.
            let mut hosted: HashMap<SessionId, (SessionId, CallerStatus)> = HashMap::new();
            let publish = |team: &SessionId, member: &SessionId, live: Option<CallerLive>| {
                let edge = StatusEdge {
                    version: STATUS_VERSION,
                    team: team.clone(),
                    member: member.clone(),
                    host: host.clone(),
                    live,
                    ttl_ms,
                };
                let client = client.clone();
                let subject = NatsBackend::status_subject(team);
                async move {
                    let payload = serde_json::to_vec(&edge).unwrap_or_default();
                    if let Err(e) = client.publish(subject, payload.into()).await {
                        tracing::debug!(error = %e, "a status report was not published");
                    }
                }
            };
            let mut refresh = tokio::time::interval((ttl / 3).max(Duration::from_millis(100)));
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    event = progress.recv() => match event {
                        // Any progress of an agent may come with a status change (a wakeup
                        // sets it running before its turn's first progress): the status
                        // is compared with the one last reported.
                        Ok(p) => {
                            let Some(agent) = runtime.agent(&p.agent) else { continue };
                            let Some(team) = team_elsewhere(&runtime, &agent) else { continue };
                            if leases.held_lease(&p.agent).is_none() {
                                continue;
                            }
                            let mut live = live_of(&agent);
                            if let Progress::Status { status } = p.progress {
                                live.status = match status {
                                    AgentStatus::Running => CallerStatus::Running,
                                    AgentStatus::Idle => CallerStatus::Idle,
                                };
                            }
                            if hosted.get(&p.agent).is_some_and(|(_, s)| *s == live.status) {
                                continue;
                            }
                            hosted.insert(p.agent.clone(), (team.clone(), live.status));
                            publish(&team, &p.agent, Some(live)).await;
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => refresh.reset_immediately(),
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    _ = refresh.tick() => {
                        let mut released = Vec::new();
                        for (member, (team, last)) in &mut hosted {
                            match runtime.agent(member) {
                                // A member whose lease this process lost (it stalled past
                                // the TTL) is not reported any more, not even as released:
                                // its last report expires and the Team continues it once the
                                // lease is free. Reporting it running would keep the Team
                                // waiting for a member this process can no longer write for;
                                // reporting it released could cancel the report of the
                                // process that hosts it now.
                                // (One being taken back after an outage of the lease
                                // bucket is neither reported nor dropped until decided.)
                                Some(_) if leases.lease_retaking(member) => {}
                                Some(_) if leases.held_lease(member).is_none() => {
                                    released.push(member.clone());
                                }
                                Some(agent) => {
                                    let live = live_of(&agent);
                                    *last = live.status;
                                    publish(team, member, Some(live)).await;
                                }
                                None => {
                                    publish(team, member, None).await;
                                    released.push(member.clone());
                                }
                            }
                        }
                        for member in released {
                            hosted.remove(&member);
                        }
                    }
                }
            }
            // Stopping: whoever is still reported is released as far as the Team can tell.
            for (member, (team, _)) in &hosted {
                publish(team, member, None).await;
            }
            let _ = client.flush().await;
        });
        Self {
            task: Some(task),
            stop,
        }
    }

    /// Stops: the members still reported are reported released (a flush), then it ends.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for StatusPublisher {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
