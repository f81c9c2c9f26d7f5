//! The hub: one [`TeamWatcher`] per watched Team, the session listing cache, and the blocking
//! file reads behind every endpoint. Everything here is derived from the session files and
//! can be dropped at any time: the server holds no state of its own.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Notify, watch};
use troupe_journal::{Journal, JournalError, JsonlBackend, LockTable, Wake};
use troupe_protocol::sync::lock;
use troupe_protocol::{Clock, Event, SessionId, SystemClock};
use troupe_session::{RoleProbe, SessionRole};
use troupe_team::{StallAfter, TeamId, TeamState};

use crate::WebError;
use crate::follow::Follower;
use crate::projection::{MailCounts, TeamProjection, TeamView};

/// Runs blocking file work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, WebError> + Send + 'static,
) -> Result<T, WebError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| WebError::Io(format!("a file read did not finish: {e}")))?
}

/// One published Team view (an SSE frame of `/api/sessions/{id}/team/events`).
///
/// Wire shape: `{"id": N, …TeamView fields…, "mail": MailCounts}`. `id` grows with every
/// change: it is the number of events folded from the Team's session files (the Lead's and
/// every member's) when the view changed, or one more than the previous frame's id when the
/// change came without a new event (a process let go of a session file).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamFrame {
    /// See above; also the frame's SSE `id:`.
    pub id: u64,
    /// The view.
    #[serde(flatten)]
    pub view: TeamView,
    /// The mailbox counts when this view was published.
    pub mail: MailCounts,
}

/// The files of one Team being followed, and their projection.
struct TeamFollow {
    lead: Follower,
    members: Vec<Follower>,
    projection: TeamProjection,
    /// Events folded so far from all of the Team's files.
    position: u64,
}

/// Follows one Team's logs and publishes its view whenever it changes.
pub(crate) struct TeamWatcher {
    follow: Mutex<TeamFollow>,
    frames: watch::Sender<Arc<TeamFrame>>,
    polling: Mutex<bool>,
    /// Notified by the live follows of the Team's logs (a store that pushes appends).
    changed: Arc<Notify>,
    /// Whether the Lead's log is followed live: then the watcher waits for `changed`
    /// instead of reading again every poll interval.
    live: bool,
}

impl TeamWatcher {
    /// The last published frame.
    pub(crate) fn frame(&self) -> Arc<TeamFrame> {
        Arc::clone(&self.frames.borrow())
    }

    /// Events folded so far.
    pub(crate) fn position(&self) -> u64 {
        lock(&self.follow).position
    }

    /// Reads what was appended to the Team's files and publishes a frame if the view changed.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND` when the Lead's file does not exist (first read only).
    fn refresh_blocking(&self, hub: &Hub) -> Result<(), WebError> {
        let mut guard = lock(&self.follow);
        let follow = &mut *guard;
        let first = follow.lead.header().is_none();
        let mut folded = 0u64;
        let projection = &mut follow.projection;
        let lead_result = follow.lead.poll(&hub.journal, &mut |event: Event| {
            folded += 1;
            projection.apply_lead(&event);
        });
        if let Some(header) = follow.lead.header() {
            projection.set_seed_len(&header.id, header.seed_len());
        }
        match lead_result {
            Ok(()) => {}
            Err(JournalError::NotFound { .. }) if first => {
                return Err(WebError::SessionNotFound(follow.lead.id().to_string()));
            }
            Err(e) => projection.fail(format!("the Lead's log cannot be read: {e}")),
        }
        for member in projection.state().members() {
            if !follow.members.iter().any(|f| f.id() == &member.id) {
                let follower = if self.live {
                    Follower::live(member.id.clone(), &hub.journal, wake_of(&self.changed))
                } else {
                    Follower::new(member.id.clone())
                };
                follow.members.push(follower);
            }
        }
        for follower in &mut follow.members {
            let id = follower.id().clone();
            // A fork's log starts with a copy of the Lead's history: not its own changes.
            if !projection.knows_seed_len(&id)
                && let Ok(header) = hub.journal.header(&id)
            {
                projection.set_seed_len(&id, header.seed_len());
            }
            let result = follower.poll(&hub.journal, &mut |event: Event| {
                folded += 1;
                projection.apply_member(&id, &event);
            });
            if let Some(header) = follower.header() {
                projection.set_seed_len(&id, header.seed_len());
            }
            match result {
                Ok(()) | Err(JournalError::NotFound { .. }) => {}
                Err(e) => tracing::warn!(member = %id, error = %e, "a member's log cannot be read"),
            }
        }
        // Residency: from the kernel's lock table for the files; from the session's holder
        // where the store can tell one (a NATS lease), else unknown (the log alone decides).
        let lead_id = follow.lead.id().clone();
        let ids = std::iter::once(&lead_id).chain(follow.members.iter().map(Follower::id));
        // The host of a holder (`MemberRow::host`): on the files every holder is a local
        // process; on a store with leases, `local` for the Lead's holder, else the holder as
        // its lease names it (`host H pid P`, without its `(since …)`) or the name
        // `host_names` gives it (a worker's).
        match &hub.files {
            Some(files) => {
                let table = LockTable::read();
                for id in ids {
                    let held = table.is_held(&files.session_path(id));
                    projection.set_resident(id, held);
                    projection.set_host(id, (held == Some(true)).then(|| "local".to_owned()));
                }
            }
            None => {
                let holder = |id: &SessionId| -> Option<Option<String>> {
                    let held = hub.journal.holder(id).ok()?;
                    Some(held.map(|h| h.split(" (").next().unwrap_or(&h).to_owned()))
                };
                let lead_holder = holder(&lead_id).flatten();
                for id in ids {
                    let held = holder(id);
                    projection.set_resident(id, held.as_ref().map(Option::is_some));
                    let host = held.flatten().map(|h| {
                        if lead_holder.as_deref() == Some(h.as_str()) {
                            "local".to_owned()
                        } else {
                            hub.host_names
                                .as_ref()
                                .and_then(|names| names.name(&h))
                                .unwrap_or(h)
                        }
                    });
                    projection.set_host(id, host);
                }
            }
        }
        follow.position += folded;
        projection.set_now(hub.clock.now_ms());
        if let Some(view) = projection.take_view() {
            let mail = projection.mail();
            let position = follow.position;
            self.frames.send_if_modified(|frame| {
                if frame.view == view {
                    return false;
                }
                let id = position.max(frame.id + 1);
                *frame = Arc::new(TeamFrame { id, view, mail });
                true
            });
        }
        Ok(())
    }
}

/// A cached listing row's reading state.
struct ListingEntry {
    follower: Follower,
    /// The session's role, settled by its own first `agent/config` as the log is followed.
    role: RoleProbe,
    team: Option<TeamState>,
    last_time: Option<u64>,
    events: u64,
}

/// One row of `GET /api/sessions`.
///
/// Wire shape: `{"id","role","parent"?,"createdAt","cwd"?,"lastActivity","events",
/// "teamSize"?,"team"}`: `role` is `lead`, `teammate`, `child` or `fork` (as `troupe sessions`
/// says), `lastActivity` the time of the last event (epoch ms; `createdAt` for an empty log),
/// `teamSize` the number of roster members of a root session's Team (absent for teammates,
/// children and forks), `events` the number of valid events, `team` whether the session leads
/// a Team (its own first `agent/config` has the Team profile, or its log holds Team records):
/// a Team with no teammate yet is `"team": true, "teamSize": 0`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRow {
    /// The session id.
    pub id: SessionId,
    /// `lead`, `teammate`, `child` or `fork` ([`SessionRole`]: the rule `troupe sessions`
    /// uses too).
    pub role: SessionRole,
    /// The parent session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<SessionId>,
    /// Creation time, epoch ms.
    pub created_at: u64,
    /// The working directory at creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The last event's time, epoch ms (`createdAt` for an empty log).
    pub last_activity: u64,
    /// Valid events in the log.
    pub events: u64,
    /// Roster members of a root session's Team (0 for a root without a Team).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team_size: Option<usize>,
    /// Whether the session leads a Team (even one with no teammate yet).
    pub team: bool,
}

/// A wake for live follows that notifies `changed` (a permit is kept when nobody waits, so no
/// wake is lost).
pub(crate) fn wake_of(changed: &Arc<Notify>) -> Wake {
    let changed = Arc::clone(changed);
    Arc::new(move || changed.notify_one())
}

/// Shared by every request: the journal, the caches and the timing settings.
pub(crate) struct Hub {
    journal: Journal,
    /// The session files, when the journal is the home's JSONL store (for residency).
    files: Option<JsonlBackend>,
    pub(crate) poll_interval: Duration,
    teams: Mutex<HashMap<SessionId, Arc<TeamWatcher>>>,
    listing: Mutex<HashMap<SessionId, ListingEntry>>,
    /// The stall threshold of every Team's board.
    stall_after: StallAfter,
    /// "Now" for stalled owners.
    clock: Arc<dyn Clock>,
    /// The names of session holders in other processes (`MemberRow::host`).
    host_names: Option<crate::server::HostNames>,
}

impl Hub {
    /// The hub of `store`, or of the JSONL files of `home` when `store` is `None`.
    pub(crate) fn new(home: PathBuf, store: Option<Journal>, poll_interval: Duration) -> Self {
        let (journal, files) = match store {
            Some(journal) => (journal, None),
            None => (
                Journal::open_home(&home),
                Some(JsonlBackend::new(home.join("sessions"))),
            ),
        };
        Self {
            journal,
            files,
            poll_interval,
            teams: Mutex::new(HashMap::new()),
            listing: Mutex::new(HashMap::new()),
            stall_after: StallAfter::default(),
            clock: Arc::new(SystemClock),
            host_names: None,
        }
    }

    /// Names the holders in other processes with `names` (`MemberRow::host`).
    pub(crate) fn with_host_names(mut self, names: Option<crate::server::HostNames>) -> Self {
        self.host_names = names;
        self
    }

    /// The hub with stall threshold `after`, "now" from `clock`.
    pub(crate) fn with_stall(mut self, after: StallAfter, clock: Arc<dyn Clock>) -> Self {
        self.stall_after = after;
        self.clock = clock;
        self
    }

    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The watcher of the Team whose Lead is `id`, brought up to date.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`; `WEB_NOT_A_LEAD` for a subagent's or teammate's session (its
    /// Team is its Lead's).
    pub(crate) async fn team(
        self: &Arc<Self>,
        id: SessionId,
    ) -> Result<Arc<TeamWatcher>, WebError> {
        let existing = lock(&self.teams).get(&id).cloned();
        let watcher = match existing {
            Some(watcher) => watcher,
            None => {
                self.refuse_child(&id).await?;
                let projection = TeamProjection::new(id.clone()).with_stall_after(self.stall_after);
                let initial = TeamFrame {
                    id: 0,
                    view: projection.view(),
                    mail: MailCounts::default(),
                };
                let changed = Arc::new(Notify::new());
                let lead = {
                    let hub = Arc::clone(self);
                    let (id, wake) = (id.clone(), wake_of(&changed));
                    blocking(move || Ok(Follower::live(id, &hub.journal, wake))).await?
                };
                let watcher = Arc::new(TeamWatcher {
                    live: lead.is_live(),
                    follow: Mutex::new(TeamFollow {
                        lead,
                        members: Vec::new(),
                        projection,
                        position: 0,
                    }),
                    frames: watch::Sender::new(Arc::new(initial)),
                    polling: Mutex::new(false),
                    changed,
                });
                self.refresh(&watcher).await?;
                let mut teams = lock(&self.teams);
                Arc::clone(teams.entry(id).or_insert(watcher))
            }
        };
        self.refresh(&watcher).await?;
        Ok(watcher)
    }

    /// Refuses a child session (a subagent or a teammate) as a Team root. A header that cannot
    /// be read is left to the fold, which reports it.
    pub(crate) async fn refuse_child(self: &Arc<Self>, id: &SessionId) -> Result<(), WebError> {
        let hub = Arc::clone(self);
        let lead = id.clone();
        let header = blocking(move || Ok(hub.journal.header(&lead).ok())).await?;
        match header {
            // Whether a session is a subagent child does not depend on its profile: the
            // header says it.
            Some(header) if SessionRole::of(&header, None).is_child() => Err(WebError::NotALead {
                id: id.to_string(),
                lead: header
                    .parent_session
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
            }),
            _ => Ok(()),
        }
    }

    /// Reads the Team's files now.
    async fn refresh(self: &Arc<Self>, watcher: &Arc<TeamWatcher>) -> Result<(), WebError> {
        let hub = Arc::clone(self);
        let watcher = Arc::clone(watcher);
        blocking(move || watcher.refresh_blocking(&hub)).await
    }

    /// A receiver of the Team's frames; keeps a follower task running while any receiver
    /// exists (it reads again every poll interval, or, when the Team's logs are followed live,
    /// whenever a live follow says something arrived).
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        watcher: &Arc<TeamWatcher>,
    ) -> watch::Receiver<Arc<TeamFrame>> {
        let receiver = watcher.frames.subscribe();
        let mut polling = lock(&watcher.polling);
        if !*polling {
            *polling = true;
            let hub = Arc::clone(self);
            let watcher = Arc::clone(watcher);
            tokio::spawn(async move { hub.poll_team(watcher).await });
        }
        receiver
    }

    async fn poll_team(self: Arc<Self>, watcher: Arc<TeamWatcher>) {
        loop {
            if watcher.live {
                tokio::select! {
                    () = watcher.changed.notified() => {}
                    () = watcher.frames.closed() => {}
                }
            } else {
                tokio::time::sleep(self.poll_interval).await;
            }
            {
                let mut polling = lock(&watcher.polling);
                if watcher.frames.receiver_count() == 0 {
                    *polling = false;
                    return;
                }
            }
            if let Err(e) = self.refresh(&watcher).await {
                tracing::warn!(error = %e, "following a Team failed");
            }
        }
    }

    /// Every stored session, roots first, then the most recently active first.
    ///
    /// # Errors
    /// `WEB_IO` when the session directory cannot be listed.
    pub(crate) async fn sessions(self: &Arc<Self>) -> Result<Vec<SessionRow>, WebError> {
        let hub = Arc::clone(self);
        blocking(move || hub.sessions_blocking()).await
    }

    fn sessions_blocking(&self) -> Result<Vec<SessionRow>, WebError> {
        let listed = self
            .journal
            .list(&mut |e| tracing::warn!(error = %e, "skipping an unreadable session file"))
            .map_err(|e| WebError::Io(e.to_string()))?;
        // Decision logs of approvals are records of a member's session, not sessions to show.
        let listed: Vec<_> = listed
            .into_iter()
            .filter(|l| !troupe_approval::is_decision_log(&l.header))
            .collect();
        let mut cache = lock(&self.listing);
        let present: HashSet<&SessionId> = listed.iter().map(|l| &l.header.id).collect();
        cache.retain(|id, _| present.contains(id));
        let mut rows = Vec::with_capacity(listed.len());
        for listing in &listed {
            let header = &listing.header;
            let entry = cache
                .entry(header.id.clone())
                .or_insert_with(|| ListingEntry {
                    follower: Follower::new(header.id.clone()),
                    role: RoleProbe::new(header),
                    team: (SessionRole::of(header, None) == SessionRole::Lead)
                        .then(|| TeamState::new(TeamId::new(header.id.clone()))),
                    last_time: None,
                    events: 0,
                });
            let ListingEntry {
                follower,
                role,
                team,
                last_time,
                events,
            } = entry;
            let result = follower.poll(&self.journal, &mut |event: Event| {
                *events += 1;
                *last_time = Some(event.time);
                role.observe(&event);
                if let Some(team) = team.as_mut() {
                    // A Team log that stops folding keeps the size of its last valid state.
                    let _ = team.apply(&event);
                }
            });
            if let Err(e) = result {
                tracing::debug!(session = %header.id, error = %e, "session listed from its header only");
            }
            rows.push(SessionRow {
                id: header.id.clone(),
                role: role.role(),
                parent: header.parent_session.clone(),
                created_at: header.created_at,
                cwd: header.cwd.clone(),
                last_activity: last_time.unwrap_or(header.created_at),
                events: *events,
                team_size: team.as_ref().map(|t| t.members().len()),
                // The rule `troupe team` refuses a session without a Team by (a Lead's
                // `team` is always folded).
                team: role.role() == SessionRole::Lead
                    && team.as_ref().is_some_and(|t| {
                        troupe_session::is_team_session(role.profile(), t.has_records())
                    }),
            });
        }
        rows.sort_by(|a, b| {
            (a.role != SessionRole::Lead)
                .cmp(&(b.role != SessionRole::Lead))
                .then(b.last_activity.cmp(&a.last_activity))
                .then(a.id.cmp(&b.id))
        });
        Ok(rows)
    }
}
