//! The Team's mailbox (REFERENCE c.10, DESIGN decision 1): durable enqueue, per-target FIFO
//! dispatch, target-side de-duplication, acknowledgement, and the recovery of pending mail.
//!
//! A send is durable in the Lead log (`team/message/queued`) before any delivery; delivery is
//! per-target FIFO (a ticket taken inside the serializer right after the queued record is
//! durable); the delivered inbox item carries the Team message id as its own id, so "the
//! target already holds it" is the target's transcript `accepted` predicate;
//! `team/message/delivered` is appended only after the target's log durably holds the
//! message. A failed delivery leaves the message queued: it is never lost and never resent
//! by the model (its status `queued` still means stored).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use troupe_journal::JournalError;
use troupe_protocol::{MessageId, Seq, SessionId, sync::lock};
use troupe_team::{
    Delivery, MessageSnapshot, SendMessage, TeamError, TeamRecord, UserSend, UserSendDecision,
    delivered_user_message, js_trim, team_message_id,
};

use super::hosts::{DELIVER_VERSION, DeliverRequest, Handoff, MemberHosts, append_unhosted};
use super::journal::{Effect, Member, TeamJournal, stored_transcript};
use super::lifecycle::{Lifecycle, disposed};
use super::op::{CallOrigin, LogError, TeamOpError};
use crate::agent::Agent;
use crate::control::ChildControl;
use crate::error::RuntimeError;
use troupe_session::events::InboxTarget;

/// How many times a dispatch that failed on an error of the store that may pass (an I/O error
/// reading or reaching it: `STORE_IO`, `STORE_UNREACHABLE`, `JOURNAL_IO`) is tried again, the
/// first pause, and its growth (doubled each time: 0.25 + 0.5 + 1 + 2 s in all). Each attempt
/// is safe to repeat: delivery is de-duplicated against the target's log.
const RETRIES: u32 = 4;
const FIRST_PAUSE: Duration = Duration::from_millis(250);

/// One Team's delivery state: the per-target queues and the messages being dispatched.
#[derive(Debug, Default)]
pub(super) struct Mailbox {
    /// Messages being dispatched by this process (no duplicate attempts).
    in_flight: Mutex<HashSet<MessageId>>,
    /// Per-target FIFO dispatch chains (ticket queues).
    chains: Mutex<HashMap<SessionId, Arc<Chain>>>,
}

/// `send_message`'s / `followup_task`'s request, as the mailbox takes it.
pub(super) struct SendCall<'a> {
    /// The sender (the Lead or a teammate).
    pub(super) agent: Member<'a>,
    /// A member name, or `lead`.
    pub(super) target: &'a str,
    /// The text.
    pub(super) text: &'a str,
    /// Quiet or wakeup.
    pub(super) delivery: Delivery,
    /// The tool call the `queued` record is linked to.
    pub(super) origin: Option<&'a CallOrigin>,
}

/// Why a dispatch left its message queued: the step that failed and its error.
struct DispatchFailure {
    step: &'static str,
    error: TeamOpError,
}

impl DispatchFailure {
    /// Whether trying again may succeed: the store could not be read or reached for now, or
    /// another process holds the target's lease on a shared store (it may be settling, or
    /// hosting the target and answering through [`MemberHosts`] at the next attempt). A
    /// poisoned writer, a lost lease or a refusal stays as it is.
    fn may_pass(&self) -> bool {
        matches!(
            self.error,
            TeamOpError::Runtime(RuntimeError::Journal(
                JournalError::StoreIo { .. }
                    | JournalError::StoreUnreachable { .. }
                    | JournalError::Io { .. }
                    | JournalError::Leased { .. }
            ))
        )
    }

    /// Whether the failure is one of a session log or of the store (rather than, say, a model
    /// that could not be set up): then the message's staying queued is the run's failure
    /// (DESIGN decision 11).
    fn of_a_log(&self) -> bool {
        matches!(self.error, TeamOpError::Runtime(RuntimeError::Journal(_)))
    }

    /// The inactive target's stored log could not be read or replayed (CASES 107).
    fn inspect(error: impl Into<TeamOpError>) -> Self {
        Self {
            step: "the target's log could not be inspected",
            error: error.into(),
        }
    }

    /// Injecting, following up or cold-resuming the target failed (CASES 108).
    fn delivery(error: impl Into<TeamOpError>) -> Self {
        Self {
            step: "delivery failed",
            error: error.into(),
        }
    }

    /// The target's flush or the Lead's `delivered` record failed (CASES 106).
    fn acknowledgement(error: impl Into<TeamOpError>) -> Self {
        Self {
            step: "acknowledgement flush failed",
            error: error.into(),
        }
    }
}

/// The parts of a Team a dispatch works with.
#[derive(Clone, Copy)]
pub(super) struct Dispatcher<'a> {
    /// The Lead log.
    pub(super) journal: &'a TeamJournal,
    /// The admission cutoff and the dispatch count.
    pub(super) lifecycle: &'a Lifecycle,
    /// The members' activations.
    pub(super) control: &'a dyn ChildControl,
    /// The processes hosting teammates elsewhere (`super::delivery`), on a shared store.
    pub(super) hosts: Option<&'a dyn MemberHosts>,
}

impl Mailbox {
    /// `send_message` (quiet) / `followup_task` (wakeup) (REFERENCE c.10.1): the message is
    /// durable in the Lead log before delivery starts; returns its id and `true` (`accepted`)
    /// when the target durably holds it now, `false` (`queued`) otherwise (still stored:
    /// never resend).
    ///
    /// # Errors
    /// `TEAM_MEMBER_NOT_FOUND`, `TEAM_SELF_MESSAGE`, `TEAM_MAILBOX_FULL`,
    /// `TEAM_MESSAGE_TOO_LARGE`, `TEAM_INVALID_ARGUMENT`, `TEAM_NOT_MEMBER`.
    pub(super) async fn send(
        &self,
        parts: Dispatcher<'_>,
        call: SendCall<'_>,
    ) -> Result<(MessageId, bool), TeamOpError> {
        // Whitespace as JavaScript's `trim` sees it, like every other Team text (c.11.6).
        if js_trim(call.text).is_empty() {
            return Err(TeamError::InvalidArgument {
                message: "message must not be empty".to_owned(),
            }
            .into());
        }
        let (message, ticket) = {
            let journal = parts.journal;
            let mut state = journal.enter().await;
            let caller = journal.caller(&state, call.agent)?;
            let id = team_message_id(SessionId::random().as_ref())?;
            let request = SendMessage {
                target: call.target.to_owned(),
                content: vec![json!({"type": "text", "text": call.text})],
                delivery: call.delivery,
            };
            let event = state.decide_send(&caller, &request, id, journal.limits())?;
            let effect = call.origin.map(|origin| Effect {
                origin,
                result: None,
            });
            journal.commit(&mut state, &event, effect).await?;
            let TeamRecord::MessageQueued(message) = event.record else {
                return Err(LogError::Decision {
                    expected: troupe_protocol::event_types::TEAM_MESSAGE_QUEUED,
                }
                .into());
            };
            // Inside the serializer, right after the queued record is durable: delivery
            // order is durable queue order even when senders race (c.10.1 step 3).
            let ticket = self.ticket(&message.target_id);
            (message, ticket)
        };
        let accepted = self.dispatch(parts, &message, ticket).await;
        Ok((message.id, accepted))
    }

    /// A message from the user (`troupe send`, see [`crate::user_mail`]): decided by
    /// [`troupe_team::TeamState::decide_user_send`] inside the serializer, committed
    /// (`team/message/queued` with the Lead as sender and `senderName: "user"`), then
    /// dispatched exactly as Team mail (REFERENCE c.10.3). Returns the message, the seq of its
    /// `queued` record (`None`: a retry found it queued before) and whether the target durably
    /// holds it now.
    ///
    /// What survives a crash: before the `queued` record's flush returns, the whole record or
    /// nothing (decision 9) — the caller was told nothing and retries with the same id; after
    /// it, the message is durable and is delivered by this dispatch or by the next resume's
    /// mailbox recovery, once (target-side de-duplication).
    ///
    /// # Errors
    /// `TEAM_INVALID_ARGUMENT`, `TEAM_MEMBER_NOT_FOUND`, `TEAM_MAILBOX_FULL`,
    /// `TEAM_MESSAGE_TOO_LARGE`; the journal's error when the Lead log fails.
    pub(super) async fn user_send(
        &self,
        parts: Dispatcher<'_>,
        message_id: MessageId,
        request: &UserSend,
    ) -> Result<(MessageSnapshot, Option<Seq>, bool), TeamOpError> {
        let (message, seq, ticket, delivered) = {
            let journal = parts.journal;
            let mut state = journal.enter().await;
            if parts.lifecycle.is_closed() {
                return Err(disposed().into());
            }
            match state.decide_user_send(request, message_id, journal.limits())? {
                UserSendDecision::Append(event) => {
                    let seq = journal.commit(&mut state, &event, None).await?;
                    let TeamRecord::MessageQueued(message) = event.record else {
                        return Err(LogError::Decision {
                            expected: troupe_protocol::event_types::TEAM_MESSAGE_QUEUED,
                        }
                        .into());
                    };
                    // Inside the serializer, right after the queued record is durable, as
                    // for Team mail (c.10.1 step 3).
                    let ticket = self.ticket(&message.target_id);
                    (message, Some(seq), Some(ticket), false)
                }
                UserSendDecision::AlreadyQueued { message, delivered } => {
                    (message, None, None, delivered)
                }
            }
        };
        let delivered = match ticket {
            Some(ticket) => self.dispatch(parts, &message, ticket).await,
            None => delivered,
        };
        Ok((message, seq, delivered))
    }

    /// Mailbox recovery of a resumed Team (REFERENCE c.9): pending messages in queue order;
    /// quiet mail to an inactive teammate stays queued (unless a crash came after the target
    /// already held it: then it is acknowledged), wakeup mail cold-resumes its target.
    pub(super) async fn recover(&self, parts: Dispatcher<'_>) {
        let journal = parts.journal;
        let pending: Vec<MessageSnapshot> = {
            let state = journal.enter().await;
            state.pending_messages().cloned().collect()
        };
        for message in pending {
            if parts.lifecycle.is_closed() {
                return;
            }
            let to_inactive_teammate = message.target_id != *journal.lead().id()
                && parts.control.agent(&message.target_id).is_none();
            // On a shared store the target may be hosted by another process: the dispatch
            // asks its holder first.
            if message.delivery == Delivery::Quiet && to_inactive_teammate && parts.hosts.is_none()
            {
                if held_in_log(journal, &message)
                    && let Err(e) = mark_delivered(journal, &message).await
                    && !parts.lifecycle.is_closed()
                {
                    tracing::warn!(message = %message.id, error = %e, "acknowledgement failed");
                }
                continue;
            }
            let ticket = self.ticket(&message.target_id);
            self.dispatch(parts, &message, ticket).await;
        }
    }

    /// Takes the next place in `target`'s delivery queue.
    fn ticket(&self, target: &SessionId) -> Ticket {
        let chain = Arc::clone(
            lock(&self.chains)
                .entry(target.clone())
                .or_insert_with(|| Arc::new(Chain::default())),
        );
        let number = {
            let mut st = lock(&chain.state);
            let n = st.next;
            st.next += 1;
            n
        };
        Ticket { chain, number }
    }

    /// Delivers one queued message (REFERENCE c.10.3); never fails (a failure leaves the
    /// message queued and is logged as a warning naming the step that failed: `the target's
    /// log could not be inspected`, `delivery failed` or `acknowledgement flush failed`).
    /// Returns whether the target durably holds it. Tracked until it settles, so a shutdown
    /// waits for it (REFERENCE c.14 step 4); once the Team is closed, a dispatch that has not
    /// started does nothing.
    async fn dispatch(
        &self,
        parts: Dispatcher<'_>,
        message: &MessageSnapshot,
        ticket: Ticket,
    ) -> bool {
        let _in_flight = parts.lifecycle.dispatch();
        ticket.wait_turn().await;
        // A halted Team (the user stopped the run) starts no delivery: the message stays
        // queued for the next resume, so nobody is woken into a new turn.
        if parts.lifecycle.is_stopping() || !lock(&self.in_flight).insert(message.id.clone()) {
            return false;
        }
        let mut result = dispatch_once(parts, message).await;
        let mut pause = FIRST_PAUSE;
        for _ in 0..RETRIES {
            match &result {
                Err(failure) if failure.may_pass() && !parts.lifecycle.is_stopping() => {
                    tracing::info!(
                        message = %message.id,
                        target = %message.target_id,
                        error = %failure.error,
                        "team message delivery failed ({}); trying again in {} ms",
                        failure.step,
                        pause.as_millis()
                    );
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    result = dispatch_once(parts, message).await;
                }
                _ => break,
            }
        }
        drop(ticket);
        lock(&self.in_flight).remove(&message.id);
        match result {
            Ok(delivered) => delivered,
            Err(failure) => {
                remains_queued(parts, &message.target_id, Some(&message.id), &failure).await;
                false
            }
        }
    }
}

/// Reports that mail to `target` stays queued after `failure` (REFERENCE c.10.3: it is never
/// lost, and the next resume's mailbox recovery delivers it): a warning naming the step, and —
/// when a session log or the store failed and the Team is not closing — the run's failure
/// naming the member (DESIGN decision 11), so the run cannot end looking complete with a
/// wakeup never delivered.
async fn remains_queued(
    parts: Dispatcher<'_>,
    target: &SessionId,
    message: Option<&MessageId>,
    failure: &DispatchFailure,
) {
    let DispatchFailure { step, error } = failure;
    tracing::warn!(
        message = message.map(|m| m.to_string()),
        target = %target,
        error = %error,
        "team message remains queued: {step}"
    );
    if !failure.of_a_log() || parts.lifecycle.is_closed() {
        return;
    }
    let name = {
        let state = parts.journal.enter().await;
        state.name_of(target).unwrap_or("teammate").to_owned()
    };
    let what = match message {
        Some(id) => format!("message {id}"),
        None => "its pending quiet mail".to_owned(),
    };
    parts.control.note_undelivered(
        target,
        &name,
        format!("{what} stays queued ({step}): {error}"),
    );
}

/// One delivery attempt of `message`, by where its target is: the Lead, a resident teammate,
/// or an inactive one (quiet mail waits; wakeup mail is de-duplicated against the stored log,
/// then cold-resumes the target).
async fn dispatch_once(
    parts: Dispatcher<'_>,
    message: &MessageSnapshot,
) -> Result<bool, DispatchFailure> {
    let journal = parts.journal;
    let item = delivered_user_message(journal.id(), message);
    let target = &message.target_id;
    let lead = journal.lead();
    let held = |a: &Agent| a.with_transcript(|t| t.accepted(&message.id));
    if target == lead.id() {
        if !held(lead) {
            match message.delivery {
                Delivery::Wakeup => lead.followup(item).await,
                Delivery::Quiet => lead.inject(item).await,
            }
            .map_err(DispatchFailure::delivery)?;
        }
        return acknowledge(journal, lead, message).await;
    }
    if let Some(live) = parts.control.agent(target) {
        if !held(&live) {
            match message.delivery {
                Delivery::Quiet => live.inject(item).await.map(|_| ()),
                Delivery::Wakeup => parts
                    .control
                    .follow_up(lead, target, item)
                    .await
                    .map(|_| ()),
            }
            .map_err(DispatchFailure::delivery)?;
        }
        // The target may have settled and been re-activated meanwhile: check the current
        // activation's log.
        let current = parts.control.agent(target).unwrap_or(live);
        return acknowledge(journal, &current, message).await;
    }
    if let Some(hosts) = parts.hosts {
        let request = DeliverRequest {
            version: DELIVER_VERSION,
            team: journal.lead().id().clone(),
            target: target.clone(),
            holder: String::new(),
            delivery: message.delivery,
            item: item.clone(),
        };
        match hosts
            .deliver(request)
            .await
            .map_err(DispatchFailure::delivery)?
        {
            Handoff::Held => {
                // The holder answered: the target's log durably holds it (c.10.3 order).
                mark_delivered(journal, message)
                    .await
                    .map_err(DispatchFailure::acknowledgement)?;
                return Ok(true);
            }
            Handoff::Unhosted if message.delivery == Delivery::Quiet => {
                if hosts.append_unhosted() {
                    append_unhosted(journal.store(), target, item, InboxTarget::NextStep)
                        .await
                        .map_err(DispatchFailure::delivery)?;
                    mark_delivered(journal, message)
                        .await
                        .map_err(DispatchFailure::acknowledgement)?;
                    return Ok(true);
                }
                // A crash may have come after an earlier holder took it.
                if held_in_log(journal, message) {
                    mark_delivered(journal, message)
                        .await
                        .map_err(DispatchFailure::acknowledgement)?;
                    return Ok(true);
                }
                return Ok(false);
            }
            Handoff::Unhosted => {}
        }
    }
    if message.delivery == Delivery::Quiet {
        // Quiet mail never starts an inactive teammate: it waits until the target runs.
        return Ok(false);
    }
    wake_inactive(parts, message, item).await
}

/// Delivers wakeup mail to an inactive teammate: de-duplicated against its stored log first
/// (a crash may have come between the target's flush and the `delivered` record), then a cold
/// resume with the target's older quiet mail first, so its history keeps queue order
/// (REFERENCE c.10 porting note).
async fn wake_inactive(
    parts: Dispatcher<'_>,
    message: &MessageSnapshot,
    item: troupe_protocol::UserMessage,
) -> Result<bool, DispatchFailure> {
    let journal = parts.journal;
    let lead = journal.lead();
    let target = &message.target_id;
    // Not at the same time as the roster's take-over of it (its host died): both decide from
    // its log what it is owed.
    let _continuing = journal.continuing(target).await;
    if let Some(hosts) = parts.hosts.filter(|h| h.append_unhosted())
        && !parts.lifecycle.is_stopping()
        && place_wakeup(journal, parts.control, hosts, message, item.clone()).await?
    {
        return Ok(true);
    }
    let stored = journal
        .store()
        .read(target)
        .map_err(TeamOpError::from)
        .and_then(|replay| {
            troupe_session::Transcript::fold(replay.header.seed_len(), &replay.events)
                .map_err(Into::into)
        })
        .map_err(DispatchFailure::inspect)?;
    // A Team halted or closed meanwhile (a placement that found no host may have taken a
    // while) wakes nobody: the message stays queued, and the next resume wakes the target
    // with the copy its log already holds.
    if parts.lifecycle.is_stopping() {
        return Ok(false);
    }
    if stored.accepted(&message.id) {
        // Already held. If it is still waiting in the inactive target's inbox, wake the
        // target so the wakeup takes effect — without a second copy.
        let pending = stored
            .next_turn()
            .iter()
            .chain(stored.next_step())
            .any(|m| m.id == message.id);
        // What it is owed for turns a stop cut, counted while it is resident and parked
        // (before the wake it cannot run, or settle, yet).
        let mut owed = 0;
        if pending {
            let agent = parts
                .control
                .activate(lead, target)
                .await
                .map_err(DispatchFailure::delivery)?;
            owed = owed_here(&agent);
            parts
                .control
                .wake(lead, target)
                .await
                .map_err(DispatchFailure::delivery)?;
        }
        mark_delivered(journal, message)
            .await
            .map_err(DispatchFailure::acknowledgement)?;
        continue_woken(parts, target, owed).await;
        return Ok(true);
    }
    let agent = parts
        .control
        .activate(lead, target)
        .await
        .map_err(DispatchFailure::delivery)?;
    if let Err(e) = deliver_older_quiet(journal, &agent, Some(message)).await {
        // The cold-resumed target must still settle (its log failed, or a flush did).
        parts.control.watch(&agent);
        return Err(e);
    }
    // Counted while it is parked: once the wakeup runs it may finish and settle at once.
    let owed = owed_here(&agent);
    parts
        .control
        .follow_up(lead, target, item)
        .await
        .map_err(DispatchFailure::delivery)?;
    let acknowledged = acknowledge(journal, &agent, message).await;
    continue_woken(parts, target, owed).await;
    acknowledged
}

/// The continuation notes a teammate cold-resumed here is owed: one per turn a stop cut
/// while the run went on (its host parked it or died; its cold resume closed an open one as
/// interrupted) that nothing continued yet, as the resume's continuation counts them. Read
/// from its live transcript while it is parked, before anything wakes it.
fn owed_here(agent: &Agent) -> usize {
    agent.with_transcript(|t| {
        t.owed_continuations(
            troupe_session::ContinuationRule::Teammate,
            troupe_session::OpenTurn::Running,
        )
    })
}

/// A teammate a wakeup cold-resumed here gets, after it, the `owed` continuation notes
/// ([`owed_here`]), as the resume's continuation gives them (`roster::continue_teammates`),
/// each queued as a next turn (it is cold-resumed again if it settled meanwhile). A note that
/// cannot be queued because its log failed is the run's failure naming the teammate (DESIGN
/// decision 11), as there.
async fn continue_woken(parts: Dispatcher<'_>, target: &SessionId, owed: usize) {
    // Halted or closed meanwhile: the next resume owes it the same notes, from its log.
    if parts.lifecycle.is_stopping() {
        return;
    }
    for _ in 0..owed {
        let note = crate::recovery::continuation_note();
        if let Err(e) = parts
            .control
            .follow_up(parts.journal.lead(), target, note)
            .await
        {
            if !parts.lifecycle.is_closed() {
                continuation_failed(parts.journal, parts.control, target, &e).await;
            }
            return;
        }
    }
}

/// Reports that what continues teammate `id` could not be queued (`error`): a warning, and
/// when its log could not take it (a full disk, a lost lease) the run's failure naming it
/// (DESIGN decision 11, `JOURNAL_FAILED`), never a run that ends as if the teammate had
/// nothing left to do.
pub(super) async fn continuation_failed(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    id: &SessionId,
    error: &RuntimeError,
) {
    tracing::warn!(teammate = %id, error = %error, "could not continue a teammate");
    if crate::error::is_log_failure(error) {
        let name = {
            let state = journal.enter().await;
            state.name_of(id).unwrap_or("teammate").to_owned()
        };
        control.note_undelivered(
            id,
            &name,
            format!(
                "continuing it after the stop: {}",
                crate::error::log_failure_text(error)
            ),
        );
    }
}

/// Places a woken unhosted teammate on a host elsewhere (`--placement workers`, DESIGN §7):
/// its older pending quiet mail, then the wakeup, are appended to its log under a lease of
/// this process (each acknowledged as it is durable; queue order kept, REFERENCE c.10 porting
/// note), then a host is asked to run it. Returns `true` when a host runs it (the wakeup is
/// acknowledged), `false` when none is eligible: the caller then wakes it here, finding the
/// wakeup already in its log (no second copy).
///
/// What survives a crash: each append is whole or absent (decision 9) and de-duplicated by
/// message id on the retry; a crash after the appends and before a host took it leaves the
/// wakeup `queued` and held, which the next dispatch (or the resume's mailbox recovery)
/// places or wakes without a second copy.
async fn place_wakeup(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    hosts: &dyn MemberHosts,
    message: &MessageSnapshot,
    item: troupe_protocol::UserMessage,
) -> Result<bool, DispatchFailure> {
    let target = &message.target_id;
    append_quiet_unhosted(journal, target, Some(message)).await?;
    append_unhosted(journal.store(), target, item, InboxTarget::NextTurn)
        .await
        .map_err(DispatchFailure::delivery)?;
    append_owed_notes_unhosted(journal, control, target).await?;
    let name = journal
        .phase_of(target)
        .map_or_else(|| target.to_string(), |(name, _)| name);
    let asked = std::time::Instant::now();
    match hosts.place(target, &name).await {
        Ok(Some(host)) => {
            tracing::info!(target = %target, host = %host, "teammate placed");
            journal.placed(target, &host, asked);
            mark_delivered(journal, message)
                .await
                .map_err(DispatchFailure::acknowledgement)?;
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => Err(DispatchFailure::delivery(e)),
    }
}

/// Appends, after a wakeup, the continuation notes the unhosted teammate `target` is owed: one
/// for each turn of it a stop cut that nothing continued yet (its host parked it or died while
/// the run went on), as the resume's continuation gives them (REFERENCE c.9 extended,
/// [`Transcript::owed_continuations`]) — so a run that wakes it does not end with work the
/// next resume would find owed. A turn its dead host left open is closed first, as after a
/// crash (`ChildControl::close_cut_turn`, as `roster::take_over` does): a note queued while
/// that turn was still open would not count as its continuation, and the host's cold resume
/// would owe it another. What survives a crash: the closers are one batch and each note is
/// whole or absent; a note appended after the close counts as the continuation of its turn,
/// so none is appended twice.
///
/// [`Transcript::owed_continuations`]: troupe_session::Transcript::owed_continuations
async fn append_owed_notes_unhosted(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    target: &SessionId,
) -> Result<(), DispatchFailure> {
    let owed = |t: &troupe_session::Transcript| {
        t.owed_continuations(
            troupe_session::ContinuationRule::Teammate,
            troupe_session::OpenTurn::Cut,
        )
    };
    let Some(stored) = stored_transcript(journal.store(), target) else {
        return Ok(());
    };
    let mut owed_now = owed(&stored);
    if owed_now > 0 && stored.open_turn().is_some() {
        control
            .close_cut_turn(journal.lead(), target)
            .await
            .map_err(DispatchFailure::delivery)?;
        owed_now = stored_transcript(journal.store(), target).map_or(0, |t| owed(&t));
    }
    let owed = owed_now;
    for _ in 0..owed {
        append_unhosted(
            journal.store(),
            target,
            crate::recovery::continuation_note(),
            InboxTarget::NextTurn,
        )
        .await
        .map_err(DispatchFailure::delivery)?;
    }
    Ok(())
}

/// Appends the pending quiet mail of the unhosted teammate `target` (all of it, or only what
/// was queued before `before`) to its log under a lease of this process, in queue order,
/// each acknowledged once it is durable. What survives a crash: as [`place_wakeup`]'s appends
/// (each whole or absent, de-duplicated by message id on the retry; one appended and not yet
/// acknowledged stays `queued` and held, acknowledged by the next dispatch or recovery
/// without a second copy).
async fn append_quiet_unhosted(
    journal: &TeamJournal,
    target: &SessionId,
    before: Option<&MessageSnapshot>,
) -> Result<(), DispatchFailure> {
    let older: Vec<MessageSnapshot> = {
        let state = journal.enter().await;
        state
            .pending_messages_for(target)
            .filter(|m| {
                m.delivery == Delivery::Quiet
                    && before.is_none_or(|b| state.queued_before(&m.id, &b.id))
            })
            .cloned()
            .collect()
    };
    for m in older {
        let quiet = delivered_user_message(journal.id(), &m);
        append_unhosted(journal.store(), target, quiet, InboxTarget::NextStep)
            .await
            .map_err(DispatchFailure::delivery)?;
        mark_delivered(journal, &m)
            .await
            .map_err(DispatchFailure::acknowledgement)?;
    }
    Ok(())
}

/// [`append_quiet_unhosted`] of all of `target`'s pending quiet mail, for the roster's
/// re-placement of a teammate whose host died (`roster::take_over`): its mail is in its log
/// before its continuation note, as a local continuation delivers it
/// ([`deliver_pending_quiet`]).
///
/// # Errors
/// The failed step and its error, as one line.
pub(super) async fn append_all_quiet_unhosted(
    journal: &TeamJournal,
    target: &SessionId,
) -> Result<(), String> {
    append_quiet_unhosted(journal, target, None)
        .await
        .map_err(|f| format!("{}: {}", f.step, f.error))
}

/// Cold-resumes teammate `id` (its inbox stays parked) when it has pending quiet mail, and
/// delivers all of it in queue order ([`deliver_older_quiet`] with no bound): the recovery
/// calls it for a teammate it starts again, so the mail is in its history before the
/// continuation note (REFERENCE c.9 mailbox recovery). Crash safety: each message is injected
/// and the teammate's log flushed before its `delivered` record; a crash in between leaves it
/// queued and held, which the next recovery acknowledges without a second copy. A failure is
/// logged as a warning (the message stays queued), unless the Team is closing.
pub(super) async fn deliver_pending_quiet(parts: Dispatcher<'_>, id: &SessionId) {
    let journal = parts.journal;
    let any = {
        let state = journal.enter().await;
        state
            .pending_messages_for(id)
            .any(|m| m.delivery == Delivery::Quiet)
    };
    if !any {
        return;
    }
    let result = match parts.control.activate(journal.lead(), id).await {
        Ok(agent) => {
            let delivered = deliver_older_quiet(journal, &agent, None).await;
            if delivered.is_err() {
                // The cold-resumed teammate must still settle.
                parts.control.watch(&agent);
            }
            delivered
        }
        Err(e) => Err(DispatchFailure::delivery(e)),
    };
    if let Err(failure) = result
        && !parts.lifecycle.is_closed()
    {
        remains_queued(parts, id, None, &failure).await;
    }
}

/// Delivers the target's pending quiet messages — those queued before `before` when a wakeup
/// cold-resumes it, every one when the recovery continues it (`None`) — in queue order,
/// acknowledging each.
async fn deliver_older_quiet(
    journal: &TeamJournal,
    agent: &Agent,
    before: Option<&MessageSnapshot>,
) -> Result<(), DispatchFailure> {
    let older: Vec<MessageSnapshot> = {
        let state = journal.enter().await;
        state
            .pending_messages_for(agent.id())
            .filter(|m| {
                m.delivery == Delivery::Quiet
                    && before.is_none_or(|b| state.queued_before(&m.id, &b.id))
            })
            .cloned()
            .collect()
    };
    for m in older {
        if !agent.with_transcript(|t| t.accepted(&m.id)) {
            agent
                .inject(delivered_user_message(journal.id(), &m))
                .await
                .map_err(DispatchFailure::delivery)?;
        }
        acknowledge(journal, agent, &m).await?;
    }
    Ok(())
}

/// Acknowledges `message` once `target`'s log durably holds it (REFERENCE c.10.3): the
/// target's flush comes before the Lead's `delivered` record.
async fn acknowledge(
    journal: &TeamJournal,
    target: &Agent,
    message: &MessageSnapshot,
) -> Result<bool, DispatchFailure> {
    match target.writer().flush().await {
        // A target that settled meanwhile closed its writer, which flushed everything it
        // had appended: its transcript is still exactly its durable log.
        Ok(_) | Err(troupe_journal::JournalError::Closed { .. }) => {}
        Err(e) => return Err(DispatchFailure::acknowledgement(e)),
    }
    // The handle may be an activation that settled and was replaced meanwhile; the stored
    // log is the authority then.
    if !target.with_transcript(|t| t.accepted(&message.id)) && !held_in_log(journal, message) {
        return Ok(false);
    }
    mark_delivered(journal, message)
        .await
        .map_err(DispatchFailure::acknowledgement)?;
    Ok(true)
}

/// Appends `team/message/delivered` for `message` unless it is already recorded.
async fn mark_delivered(
    journal: &TeamJournal,
    message: &MessageSnapshot,
) -> Result<(), TeamOpError> {
    let mut state = journal.enter().await;
    if let Some(event) = state.decide_delivered(&message.id, &message.target_id) {
        journal.commit(&mut state, &event, None).await?;
    }
    Ok(())
}

/// Whether the (inactive) target's stored log already holds `message`.
fn held_in_log(journal: &TeamJournal, message: &MessageSnapshot) -> bool {
    stored_transcript(journal.store(), &message.target_id).is_some_and(|t| t.accepted(&message.id))
}

/// One target's delivery queue: tickets are served strictly in order.
#[derive(Debug, Default)]
struct Chain {
    state: Mutex<ChainState>,
    turn: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct ChainState {
    /// The number the next ticket gets.
    next: u64,
    /// The ticket whose turn it is.
    serving: u64,
    /// Tickets dropped before their turn (their dispatch was abandoned): skipped when reached.
    abandoned: BTreeSet<u64>,
}

/// A place in a [`Chain`]. Dropping it after its turn lets the next ticket through; dropping
/// it before its turn marks it abandoned, so the queue skips it.
struct Ticket {
    chain: Arc<Chain>,
    number: u64,
}

impl Ticket {
    /// Waits until every earlier ticket of the chain was served.
    async fn wait_turn(&self) {
        loop {
            let notified = self.chain.turn.notified();
            if lock(&self.chain.state).serving == self.number {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = lock(&self.chain.state);
        if st.serving == self.number {
            // This ticket's turn is over: pass it on, skipping abandoned tickets.
            st.serving += 1;
            loop {
                let serving = st.serving;
                if !st.abandoned.remove(&serving) {
                    break;
                }
                st.serving += 1;
            }
        } else if st.serving < self.number {
            // Dropped before its turn: skip it when the queue gets there.
            st.abandoned.insert(self.number);
        }
        drop(st);
        self.chain.turn.notify_waiters();
    }
}
