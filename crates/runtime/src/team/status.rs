//! Status across processes (DESIGN §7, issue 14 item 5): every process publishes the status
//! edges of the Team members it hosts on the Team's status subject; the serializer's process
//! records them ([`TeamService::status_edge`]), so `list_agents` shows a member hosted
//! elsewhere with its live status and `wait_agent` (REFERENCE c.12) is woken by its edges.
//!
//! **Edge-only** (REFERENCE c.12 (b)): a report whose status differs from the one recorded —
//! a member starting to run, going idle, or being released by its host — is one change
//! edge, bumped at once; a report that repeats the recorded status (the host's periodic
//! refresh) only keeps the record alive. Edges are not replayed: a report before a
//! `wait_agent` registered does not satisfy it (the watch channel's "seen" mark, as for
//! local edges).
//!
//! **Nothing durable**: a status is what a host sees now, never written to a log. A record
//! lives for the `ttl_ms` its report names (the hosts refresh it well within it); a host
//! that dies stops refreshing, and once the record expires the member shows as its roster
//! phase says without a live agent (`inactive`) — the same as after its lease expires. A
//! member whose record expired while it ran is continued by the Team once its lease is free
//! (`TeamService::watch_elsewhere`), as a crash's recovery continues it.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use troupe_protocol::{SessionId, sync::lock};
use troupe_team::LiveAgent;

use super::remote::CallerLive;
use super::service::TeamService;

/// The version of the [`StatusEdge`] shape.
pub const STATUS_VERSION: u32 = 1;

/// One member's status as its host reports it. Wire (JSON, camelCase):
/// `{"version":1,"team","member","host","live":{"status":"running"|"idle","model"?}|null,
/// "ttlMs"}`; `live: null` when the host released the member (it settled, or the host
/// parked it on shutdown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusEdge {
    /// [`STATUS_VERSION`].
    pub version: u32,
    /// The Team (its Lead's session).
    pub team: SessionId,
    /// The member.
    pub member: SessionId,
    /// The host's name (a worker's `--name`, else `host:pid`).
    pub host: String,
    /// The live status, `None` once released.
    pub live: Option<CallerLive>,
    /// How long the report holds without a refresh, in milliseconds.
    pub ttl_ms: u64,
}

impl TeamService {
    /// How many members of `lead`'s Team run in other processes, as their hosts last reported
    /// them — a report that expired while running included (its host died: the Team
    /// continues the member once its lease is free, `TeamService::watch_elsewhere`): a run
    /// waits for them before it ends.
    pub fn running_elsewhere(&self, lead: &SessionId) -> usize {
        let Some(team) = self.team(lead) else {
            return 0;
        };
        lock(team.journal().elsewhere())
            .values()
            .filter(|e| e.live.status == troupe_team::LiveStatus::Running)
            .count()
    }

    /// Records a member's status reported by its host in another process (see the module
    /// docs) and bumps the Team's change edge when it changed. Returns whether the report was
    /// taken: `false` when no Team of `edge.team` runs here, the member is not on its roster,
    /// the report's version is another, or the member's record names another host and still
    /// holds — a member moves to another host only through this process's placement, so such a
    /// report is a late one of its former host (one sent before it released the member) and
    /// must not stand for where it runs now (it made a resume end while the member ran on
    /// the worker it had just been placed on).
    pub fn status_edge(&self, edge: &StatusEdge) -> bool {
        if edge.version != STATUS_VERSION {
            return false;
        }
        let Some(team) = self.team(&edge.team) else {
            return false;
        };
        let journal = team.journal();
        if journal.phase_of(&edge.member).is_none() {
            return false;
        }
        let changed = {
            let mut elsewhere = lock(journal.elsewhere());
            let current = elsewhere
                .get(&edge.member)
                .filter(|e| Instant::now() < e.until);
            if current.is_some_and(|e| e.host != edge.host) {
                return false;
            }
            let before = current.map(|e| e.live.status);
            match &edge.live {
                Some(live) => {
                    let live = LiveAgent::from(live);
                    let changed = before != Some(live.status);
                    elsewhere.insert(
                        edge.member.clone(),
                        super::journal::Elsewhere {
                            host: edge.host.clone(),
                            live,
                            until: Instant::now() + Duration::from_millis(edge.ttl_ms),
                        },
                    );
                    changed
                }
                None => elsewhere.remove(&edge.member).is_some() && before.is_some(),
            }
        };
        journal.reported_release(&edge.member, &edge.host, edge.live.is_none());
        if changed {
            journal.edge();
        }
        true
    }

    /// Holds the reports of `lead`'s members hosted by another process for `grace` more from
    /// now (at least): while, and right after, this process could not hear reports (its
    /// connection to the store was down), a report's absence says nothing about its host, so
    /// no member counts as lost (for a take-over) before its host had `grace` to report again.
    pub fn hold_reports(&self, lead: &SessionId, grace: Duration) {
        let Some(team) = self.team(lead) else {
            return;
        };
        let until = Instant::now() + grace;
        for e in lock(team.journal().elsewhere()).values_mut() {
            e.until = e.until.max(until);
        }
    }

    /// The host of each member of `lead`'s Team hosted by another process (reports that
    /// hold), by member id.
    pub fn hosts_elsewhere(&self, lead: &SessionId) -> Vec<(SessionId, String)> {
        let Some(team) = self.team(lead) else {
            return Vec::new();
        };
        let now = Instant::now();
        lock(team.journal().elsewhere())
            .iter()
            .filter(|(_, e)| now < e.until)
            .map(|(id, e)| (id.clone(), e.host.clone()))
            .collect()
    }
}
