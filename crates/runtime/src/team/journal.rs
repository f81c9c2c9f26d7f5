//! The Team's journal (DESIGN decision 5): the serializer around the folded [`TeamState`],
//! the one commit path, what a commit publishes, and the fold of a stored Lead log.
//!
//! Every read-check-append of roster, board and mailbox runs inside the serializer — a FIFO
//! async lock around the state — as *decide → check once → append → flush → apply →
//! publish*: the decision (the team crate) builds the typed event; [`TeamState::stage`] checks
//! it against the fold rules once (REFERENCE c.5, `INVARIANT`), in its typed form; its draft is
//! appended to the Lead log through the Lead agent (so the Lead's transcript stays the fold of
//! its log) and flushed; only then is the staged event applied and published — the roster
//! copy updated and waiters woken — so nobody ever sees a Team event that is not durable. The
//! Lead's writer is the only writer of the Lead log, so the state never diverges from the
//! file.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use troupe_journal::{Journal, LineCheck, LineUse, Selected};
use troupe_protocol::{EventDraft, Seq, SessionId, event_types as ty, sync::lock};
use troupe_team::{
    Caller, LiveAgent, LiveStatus, MemberPhase, StreamFold, TeamError, TeamEvent, TeamId,
    TeamLimits, TeamRecord, TeamState,
};

use super::op::{CallOrigin, LogError, TeamOpError};
use crate::agent::Agent;
use crate::record::to_value;
use troupe_session::Transcript;
use troupe_session::events::ToolEffectRecord;

/// One Lead's Team journal: its identity and limits, the serializer, and what commits
/// publish.
pub(super) struct TeamJournal {
    id: TeamId,
    lead: Agent,
    limits: TeamLimits,
    /// Where the members' own logs are read (reconciliation, de-duplication, continuation).
    store: Journal,
    /// The serializer: a FIFO async lock around the folded state.
    state: tokio::sync::Mutex<TeamState>,
    /// The roster as last published (id → name, phase), for synchronous membership
    /// resolution outside the serializer.
    published: Mutex<HashMap<SessionId, (String, MemberPhase)>>,
    /// Change edges: bumped after every durable Team event and every member status change.
    edges: watch::Sender<u64>,
    /// Members hosted by other processes, as their hosts last reported them
    /// (`super::status`): their live status and host, until the report expires.
    elsewhere: Mutex<HashMap<SessionId, Elsewhere>>,
    /// The last release each host reported of a member, and when it came: a placement
    /// answered after its host already ran and released the member must not record it as
    /// running there again ([`TeamJournal::placed`]).
    released: Mutex<HashMap<SessionId, (String, Instant)>>,
    /// One continuation of a member at a time ([`TeamJournal::continuing`]).
    continuing: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
}

/// A member hosted by another process, as its host last reported it (`super::status`).
#[derive(Debug, Clone)]
pub(super) struct Elsewhere {
    /// The host's name.
    pub(super) host: String,
    /// Its live status.
    pub(super) live: LiveAgent,
    /// Until when the report holds.
    pub(super) until: Instant,
}

/// How long a placement's own record holds before its host's first report replaces it.
const PLACED_HOLDS: std::time::Duration = std::time::Duration::from_secs(10);

/// The member tool call a commit is the effect of (DESIGN decision 10), with the call's
/// result text when it is known before the commit.
pub(super) struct Effect<'a> {
    /// The call.
    pub(super) origin: &'a CallOrigin,
    /// Its result text (a task view), `None` when only recovery can build it.
    pub(super) result: Option<String>,
}

impl TeamJournal {
    /// The journal of the Team led by `lead`, whose log folds to `state`.
    pub(super) fn new(lead: Agent, state: TeamState, limits: TeamLimits, store: Journal) -> Self {
        let published = state
            .members()
            .iter()
            .map(|m| (m.id.clone(), (m.name.to_string(), m.phase)))
            .collect();
        Self {
            id: TeamId::new(lead.id().clone()),
            lead,
            limits,
            store,
            state: tokio::sync::Mutex::new(state),
            published: Mutex::new(published),
            edges: watch::channel(0).0,
            elsewhere: Mutex::new(HashMap::new()),
            released: Mutex::new(HashMap::new()),
            continuing: Mutex::new(HashMap::new()),
        }
    }

    /// Held while this process decides from member `id`'s log what the member is owed and
    /// continues it: the roster's take-over of a dead host's member (`roster::take_over`)
    /// and a wakeup's placement or cold resume (`mailbox::wake_inactive`) may come at once
    /// when a host dies, and each must see the other's continuation note, so one cut turn
    /// never gets two.
    pub(super) async fn continuing(&self, id: &SessionId) -> tokio::sync::OwnedMutexGuard<()> {
        let guard = Arc::clone(lock(&self.continuing).entry(id.clone()).or_default());
        guard.lock_owned().await
    }

    /// The members hosted by other processes, as last reported (`super::status`).
    pub(super) fn elsewhere(&self) -> &Mutex<HashMap<SessionId, Elsewhere>> {
        &self.elsewhere
    }

    /// The members whose report expired while they ran (their host stopped reporting); the
    /// expired reports of idle members are dropped.
    pub(super) fn lost(&self) -> Vec<SessionId> {
        let now = Instant::now();
        let mut elsewhere = lock(&self.elsewhere);
        elsewhere.retain(|_, e| now < e.until || e.live.status == LiveStatus::Running);
        elsewhere
            .iter()
            .filter(|(_, e)| now >= e.until)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Drops the record of `id`.
    pub(super) fn forget(&self, id: &SessionId) {
        lock(&self.elsewhere).remove(id);
    }

    /// The live status of `id` as its host elsewhere reported it, while the report holds.
    pub(super) fn live_elsewhere(&self, id: &SessionId) -> Option<LiveAgent> {
        lock(&self.elsewhere)
            .get(id)
            .filter(|e| Instant::now() < e.until)
            .map(|e| e.live.clone())
    }

    /// The host of `id` as its host elsewhere reported it, while the report holds.
    pub(super) fn host_elsewhere(&self, id: &SessionId) -> Option<String> {
        lock(&self.elsewhere)
            .get(id)
            .filter(|e| Instant::now() < e.until)
            .map(|e| e.host.clone())
    }

    /// Records that `member`, hosted elsewhere, has just gone idle (its holder answered an
    /// interrupt whose turn closed), and bumps the change edge when that changed its status.
    /// A member without a record is left as it is (its host's next report says).
    pub(super) fn settled_elsewhere(&self, member: &SessionId) {
        let changed = lock(&self.elsewhere).get_mut(member).is_some_and(|e| {
            let changed = e.live.status != LiveStatus::Idle;
            e.live.status = LiveStatus::Idle;
            changed
        });
        if changed {
            self.edge();
        }
    }

    /// Records that `member` was just placed on `host` (asked at `asked`) and runs there (its
    /// host's own reports, which may come later, replace the record), and bumps the change
    /// edge — unless that host already reported it released since it was asked: a teammate
    /// that ran and settled before the host's answer came is not recorded as running again
    /// (the run then waited for a report that would never come, until the record expired).
    /// An earlier report of it (idle, before its turn started) is replaced as before: its
    /// release is reported once it settles.
    pub(super) fn placed(&self, member: &SessionId, host: &str, asked: Instant) {
        let released = lock(&self.released)
            .get(member)
            .is_some_and(|(by, at)| by == host && *at >= asked);
        {
            let mut elsewhere = lock(&self.elsewhere);
            if !released {
                let now = Instant::now();
                elsewhere.insert(
                    member.clone(),
                    Elsewhere {
                        host: host.to_owned(),
                        live: LiveAgent {
                            status: LiveStatus::Running,
                            model: None,
                        },
                        until: now + PLACED_HOLDS,
                    },
                );
            }
        }
        self.edge();
    }

    /// Records that `host` reported `member` released (not hosted there any more) now, or,
    /// `released` false, hosted there.
    pub(super) fn reported_release(&self, member: &SessionId, host: &str, released: bool) {
        let mut map = lock(&self.released);
        if released {
            map.insert(member.clone(), (host.to_owned(), Instant::now()));
        } else {
            map.remove(member);
        }
    }

    /// The Team id (= the Lead's session id).
    pub(super) fn id(&self) -> &TeamId {
        &self.id
    }

    /// The Lead.
    pub(super) fn lead(&self) -> &Agent {
        &self.lead
    }

    /// The limits in force.
    pub(super) fn limits(&self) -> &TeamLimits {
        &self.limits
    }

    /// The session store the members' logs are read from.
    pub(super) fn store(&self) -> &Journal {
        &self.store
    }

    /// Enters the serializer (FIFO): the folded state, for as long as the guard lives.
    pub(super) async fn enter(&self) -> tokio::sync::MutexGuard<'_, TeamState> {
        self.state.lock().await
    }

    /// The [`Caller`] for `member` in `state` (inside the serializer): the Lead, or a roster
    /// member.
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER`.
    pub(super) fn caller(
        &self,
        state: &TeamState,
        member: Member<'_>,
    ) -> Result<Caller, TeamOpError> {
        if member.id() == self.lead.id() {
            return Ok(Caller::lead(&self.id));
        }
        state
            .caller(member.id())
            .ok_or_else(|| not_member(member.id()))
    }

    /// The published roster phase of `id` (and its name).
    pub(super) fn phase_of(&self, id: &SessionId) -> Option<(String, MemberPhase)> {
        lock(&self.published).get(id).cloned()
    }

    /// Wakes every current waiter (a change edge).
    pub(super) fn edge(&self) {
        self.edges.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The change edges from now on.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.edges.subscribe()
    }

    /// Commits `event` inside the serializer (`state` is the guarded state): checks it once
    /// ([`TeamState::stage`]), appends it — after its `tool/effect` link when `effect` names
    /// the member's call, in one batch — flushes, applies it and publishes it (roster copy,
    /// change edge; never before the flush).
    ///
    /// What survives a crash: the batch whole or nothing of it (DESIGN decision 9) — the link
    /// and the record, so recovery rebuilds the call's result, or neither, so recovery asks
    /// the call again. A failed append or flush leaves the state unchanged.
    ///
    /// # Errors
    /// `INVARIANT` (nothing appended); journal errors of the append or the flush;
    /// `TEAM_LOG_INVALID` when the stored event differs from the checked one (a secret was
    /// redacted from it) and the fold refuses it. Returns the seq of the record.
    pub(super) async fn commit(
        &self,
        state: &mut TeamState,
        event: &TeamEvent,
        effect: Option<Effect<'_>>,
    ) -> Result<Seq, TeamOpError> {
        let staged = state.stage(event)?;
        let mut drafts = Vec::with_capacity(2);
        if let Some(Effect { origin, result }) = effect {
            let link = ToolEffectRecord {
                session_id: origin.session.clone(),
                call_id: origin.call_id.clone(),
                tool: origin.tool.name().to_owned(),
                result,
            };
            drafts.push(EventDraft::ignorable(ty::TOOL_EFFECT, to_value(&link)));
        }
        drafts.push(event.to_draft());
        let (stored, redacted) = self.lead.append_records_redacted(drafts)?;
        self.lead.writer().flush().await?;
        if redacted {
            // The log holds the redacted record: the state must be the fold of the log.
            drop(staged);
            for e in stored.iter().filter(|e| e.kind != ty::TOOL_EFFECT) {
                state.apply(e).map_err(LogError::Fold)?;
            }
        } else {
            staged.apply();
        }
        if let TeamRecord::Member(m) = &event.record {
            lock(&self.published).insert(m.id.clone(), (m.name.to_string(), m.phase));
        }
        self.edge();
        Ok(stored.last().map_or(Seq(0), |e| e.seq))
    }
}

impl std::fmt::Debug for TeamJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamJournal")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// `TEAM_NOT_MEMBER` for the caller `id`.
pub(super) fn not_member(id: &SessionId) -> TeamOpError {
    TeamOpError::Team(TeamError::NotMember { id: id.to_string() })
}

/// Who calls a Team operation: a resident agent of this process (the Lead, or a teammate it
/// hosts), or a teammate hosted by another process whose request reached this serializer
/// over the Team service (`super::remote`), with the live status its host reported.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Member<'a> {
    /// An agent of this runtime.
    Resident(&'a Agent),
    /// A teammate hosted elsewhere.
    Remote(&'a RemoteMember),
}

/// A teammate hosted by another process, as a Team service request names it.
#[derive(Debug, Clone)]
pub(crate) struct RemoteMember {
    /// The Team it calls (its Lead's session).
    pub(crate) team: SessionId,
    /// Its session.
    pub(crate) id: SessionId,
    /// Its live status and model as its host reported them (`None`: not reported, shown as
    /// this process sees it).
    pub(crate) live: Option<LiveAgent>,
}

impl Member<'_> {
    /// The caller's session.
    pub(crate) fn id(&self) -> &SessionId {
        match self {
            Member::Resident(agent) => agent.id(),
            Member::Remote(remote) => &remote.id,
        }
    }

    /// The cause of the caller's turn's abort, when it was aborted (a resident agent's; a
    /// remote caller's is its host's, not known here).
    pub(crate) fn abort_cause(&self) -> Option<serde_json::Value> {
        match self {
            Member::Resident(agent) => agent.abort_cause(),
            Member::Remote(_) => None,
        }
    }
}

/// Hands one item of a selective journal scan (`Journal::read_selected_each` or
/// `troupe_journal::scan_selected_each`, selecting with [`StreamFold::reads`]) to `fold` and
/// answers the scan: an unparsed Team line is decoded by the fold when it can
/// ([`LineUse::Used`]) or asked for parsed ([`LineUse::NeedEvent`]); a parsed event is
/// applied. The one adapter between the journal's selective scan and the Team fold.
pub fn feed_stream_fold(fold: &mut StreamFold, selected: Selected<'_>) -> LineUse {
    match selected {
        Selected::Line(line) => {
            if fold.line(line.kind, line.text) {
                LineUse::Used
            } else {
                LineUse::NeedEvent
            }
        }
        Selected::Event(event) => {
            fold.event(&event);
            LineUse::Used
        }
    }
}

/// Folds the Team of Lead `lead` from its stored log with one selective scan: only `team/…`
/// lines are decoded ([`feed_stream_fold`]); of every other line the envelope prefix is
/// checked (`check`: [`LineCheck::Prefix`] right after a resume replayed and checked every
/// line, or for a log only this process wrote; [`LineCheck::Full`] to check every line). A
/// damaged log is reported before a fold refusal, as when the whole log is read first.
///
/// # Errors
/// Journal errors (`SESSION_NOT_FOUND`, `JOURNAL_CORRUPT`, …); `TEAM_LOG_INVALID` naming the
/// first event the fold refuses.
pub fn fold_team_log(
    store: &Journal,
    lead: &SessionId,
    check: LineCheck,
) -> Result<TeamState, TeamOpError> {
    let mut fold = StreamFold::new(TeamId::new(lead.clone()));
    store.read_selected_each(lead, check, &StreamFold::reads, &mut |selected| {
        feed_stream_fold(&mut fold, selected)
    })?;
    Ok(fold.finish()?)
}

/// The fold of the stored log of `id`, if it reads and replays.
pub(super) fn stored_transcript(store: &Journal, id: &SessionId) -> Option<Transcript> {
    let replay = store.read(id).ok()?;
    Transcript::fold(replay.header.seed_len(), &replay.events).ok()
}
