//! The shapes and the seam of Team mail and interrupts across processes (see `delivery.rs`
//! and `interrupt.rs` for the whole story and their crash points): [`DeliverRequest`] /
//! [`DeliverAnswer`], [`InterruptRequest`] / [`InterruptAnswer`], the [`MemberHosts`]
//! transport the serializer hands mail and interrupts to, and [`append_unhosted`], the
//! serializer's own append to the log of a teammate nobody hosts. No file of the service is imported here, so
//! the mailbox, the roster and the service can all use it.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use troupe_journal::{Journal, JournalError};
use troupe_protocol::{EventDraft, SessionId, UserMessage, event_types as ty};
use troupe_session::Transcript;
use troupe_session::events::{InboxSplice, InboxTarget};
use troupe_team::Delivery;

use crate::record::to_value;

/// The version of the [`DeliverRequest`] and [`DeliverAnswer`] shapes.
pub const DELIVER_VERSION: u32 = 1;

/// The process holding a teammate's lease has no live agent for it (it is being started or
/// is settling): the serializer asks again.
pub const TEAM_MEMBER_NOT_HOSTED: &str = "TEAM_MEMBER_NOT_HOSTED";

/// One Team message for the inbox of a teammate hosted by another process. Wire (JSON,
/// camelCase): `{"version":1,"team","target","holder","delivery":"quiet"|"wakeup","item"}`;
/// `item` is the inbox item exactly as a local delivery appends it (its `id` is the Team
/// message id, its source the `team-message` source naming `team`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliverRequest {
    /// [`DELIVER_VERSION`].
    pub version: u32,
    /// The Team (its Lead's session).
    pub team: SessionId,
    /// The teammate whose inbox gets the item.
    pub target: SessionId,
    /// The owner token of the lease the serializer found on `target`: only the process
    /// holding that lease answers (a request meant for an older holder is not answered by a
    /// newer one, and the other way round).
    pub holder: String,
    /// Quiet (injected at the next step, never wakes) or wakeup (the next turn).
    pub delivery: Delivery,
    /// The inbox item.
    pub item: UserMessage,
}

/// The answer to a [`DeliverRequest`]. Wire: `{"ok":true}` — the target's log durably holds
/// the item (appended now, or already) — or `{"ok":false,"code":CODE,"message":TEXT}`:
/// `TEAM_MEMBER_NOT_HOSTED`, `INVALID_ARGUMENTS` (another version, an item whose source is not
/// this Team's), or the holder's journal error (`JOURNAL_FAILED`, `AGENT_DISPOSED`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliverAnswer {
    /// Whether the target's log durably holds the item.
    pub ok: bool,
    /// The stable code (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The message (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl DeliverAnswer {
    /// The target's log durably holds the item.
    pub fn held() -> Self {
        Self {
            ok: true,
            code: None,
            message: None,
        }
    }

    /// A failure with `code` and `message`.
    pub fn failed(code: &str, message: impl Into<String>) -> Self {
        Self {
            ok: false,
            code: Some(code.to_owned()),
            message: Some(message.into()),
        }
    }
}

/// The version of the [`InterruptRequest`] and [`InterruptAnswer`] shapes.
pub const INTERRUPT_VERSION: u32 = 1;

/// The Lead's `interrupt_agent` (REFERENCE c.13) of a teammate hosted by another process,
/// for the process holding the teammate's lease — or the Lead's process parking its Team
/// (`cause` `shutdown`). Wire (JSON, camelCase):
/// `{"version":1,"team","target","by","holder","waitMs","cause"?}` (`cause` absent for the
/// Lead's `interrupt_agent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterruptRequest {
    /// [`INTERRUPT_VERSION`].
    pub version: u32,
    /// The Team (its Lead's session): the target's log must name it as its parent.
    pub team: SessionId,
    /// The teammate whose turn is stopped.
    pub target: SessionId,
    /// The caller, the Team's Lead (the serializer checked its role before asking).
    pub by: SessionId,
    /// The owner token of the lease the serializer found on `target` (as
    /// [`DeliverRequest::holder`]; filled in by the transport).
    pub holder: String,
    /// How long the holder waits for the interrupted turn to close before it answers, in
    /// milliseconds: the Team's `disposalTimeoutMs` (REFERENCE c.15), as a local interrupt
    /// waits.
    pub wait_ms: u64,
    /// Why the turn is stopped (absent on the wire for [`InterruptCause::Parent`]).
    #[serde(default, skip_serializing_if = "InterruptCause::is_parent")]
    pub cause: InterruptCause,
}

/// Why an [`InterruptRequest`] stops a teammate's turn: the cause its `turn/end` records
/// (`aborted` with `{"kind":"parent"|"shutdown"|"user"}`). Wire: `"parent"`, `"shutdown"` or
/// `"user"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InterruptCause {
    /// The Lead's `interrupt_agent` (REFERENCE c.13): the Lead decided, and the Team
    /// recovery leaves the turn alone.
    #[default]
    Parent,
    /// The Lead's process is parking its Team (SIGTERM, the shutdown; REFERENCE c.14): the
    /// turn is stopped as a park stops a resident teammate's, and a `troupe resume`
    /// continues it.
    Shutdown,
    /// The user stopped the run (its first Ctrl-C): the turn is stopped as the user's
    /// cancel stops a resident one (`{"kind":"user"}`), its inbox kept for `troupe resume`.
    User,
}

impl InterruptCause {
    /// Whether this is [`InterruptCause::Parent`] (the wire leaves it out).
    #[must_use]
    pub fn is_parent(&self) -> bool {
        *self == Self::Parent
    }

    /// The cause as the `turn/end` records it: `{"kind":"parent"}`, `{"kind":"shutdown"}` or
    /// `{"kind":"user"}`.
    #[must_use]
    pub fn record(self) -> serde_json::Value {
        match self {
            Self::Parent => serde_json::json!({"kind": "parent"}),
            Self::Shutdown => serde_json::json!({"kind": "shutdown"}),
            Self::User => serde_json::json!({"kind": "user"}),
        }
    }
}

/// The answer to an [`InterruptRequest`]. Wire: `{"ok":true,"previousStatus":"running"|"idle",
/// "settled":BOOL}` — the holder sampled the status, cancelled the turn keeping the inbox
/// (REFERENCE b.7) and `settled` says whether the turn closed within `waitMs` — or
/// `{"ok":false,"code":CODE,"message":TEXT}`: `TEAM_MEMBER_NOT_HOSTED` (the holder runs no
/// agent of it now: the serializer asks again), `INVALID_ARGUMENTS` (another version),
/// `UNAUTHORIZED` (the target is not a teammate of `team`), or the holder's journal error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptAnswer {
    /// Whether the holder interrupted the teammate.
    pub ok: bool,
    /// Its status before the interrupt (success): `running` or `idle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_status: Option<String>,
    /// Whether the interrupted turn closed before the answer (success).
    #[serde(default)]
    pub settled: bool,
    /// The stable code (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The message (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl InterruptAnswer {
    /// The holder interrupted the teammate, whose status before was `previous` (`running` or
    /// `idle`); `settled`: its turn closed in time.
    pub fn interrupted(previous: &str, settled: bool) -> Self {
        Self {
            ok: true,
            previous_status: Some(previous.to_owned()),
            settled,
            code: None,
            message: None,
        }
    }

    /// A failure with `code` and `message`.
    pub fn failed(code: &str, message: impl Into<String>) -> Self {
        Self {
            ok: false,
            previous_status: None,
            settled: false,
            code: Some(code.to_owned()),
            message: Some(message.into()),
        }
    }
}

/// What a [`MemberHosts::interrupt`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterruptHandoff {
    /// The holder of the target's lease interrupted it: its status before (`running` or
    /// `idle`) and whether its turn closed in time.
    Interrupted {
        /// `running` or `idle`.
        previous: &'static str,
        /// The turn closed before the holder answered.
        settled: bool,
    },
    /// Nobody holds the target's lease: it is not live anywhere (REFERENCE c.13: `inactive`,
    /// no effect).
    Unhosted,
    /// A holder was asked and never answered, and its lease has expired since (it died or
    /// lost the store): whether the interrupt reached the turn is decided from the target's
    /// stored log by the caller. `reason` says what the transport saw.
    HolderGone {
        /// What the transport saw.
        reason: String,
    },
}

/// A boxed future of [`MemberHosts::interrupt`].
pub type InterruptFuture<'a> =
    Pin<Box<dyn Future<Output = Result<InterruptHandoff, JournalError>> + Send + 'a>>;

/// What a [`MemberHosts`] hand-over found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// The holder of the target's lease answered: its log durably holds the message.
    Held,
    /// Nobody holds the target's lease.
    Unhosted,
}

/// A boxed future of a [`MemberHosts`] hand-over.
pub type HandoffFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Handoff, JournalError>> + Send + 'a>>;

/// The serializer's transport to the processes hosting teammates (see the module docs).
pub trait MemberHosts: Send + Sync {
    /// Hands `request` (its `holder` is filled in by the transport) to the process holding
    /// the lease of `request.target`, retrying (bounded) while a holder does not answer — a
    /// dead holder's lease expires after its TTL, and then the answer is
    /// [`Handoff::Unhosted`].
    ///
    /// # Errors
    /// `STORE_IO` / `STORE_UNREACHABLE` (the mailbox tries again, then leaves the message
    /// queued) when the store cannot be reached or the holder kept refusing.
    fn deliver(&self, request: DeliverRequest) -> HandoffFuture<'_>;

    /// Whether quiet mail to an unhosted teammate is appended to its log at once (under a
    /// lease of the serializer's process) rather than left `queued` until it runs again —
    /// and whether a woken unhosted teammate is placed with [`MemberHosts::place`] (on with
    /// `--placement workers`).
    fn append_unhosted(&self) -> bool;

    /// Places the unhosted teammate `target` (named `name` in the Team, as the warnings
    /// call it), whose log already holds the work it is woken for, on a host elsewhere
    /// (DESIGN §7 "Workers and placement"): `Ok(Some(host))` once a host runs it; `Ok(None)`
    /// when no host is eligible (each one skipped is reported as a warning with the reason):
    /// then it runs in this process.
    ///
    /// # Errors
    /// `STORE_IO` when the hosts cannot be listed (the mailbox tries again).
    fn place<'a>(&'a self, target: &'a SessionId, name: &'a str) -> PlaceFuture<'a>;

    /// Hands the Lead's interrupt `request` (its `holder` is filled in by the transport) to
    /// the process holding the lease of `request.target`, retrying (bounded) while a holder
    /// does not answer or answers `TEAM_MEMBER_NOT_HOSTED`: [`InterruptHandoff::Interrupted`]
    /// with the holder's answer, [`InterruptHandoff::Unhosted`] when nobody held the lease
    /// when first asked, [`InterruptHandoff::HolderGone`] when a holder never answered and
    /// its lease expired meanwhile. The default: no member is hosted elsewhere
    /// ([`InterruptHandoff::Unhosted`]).
    ///
    /// # Errors
    /// `STORE_IO` / `STORE_UNREACHABLE` when the store cannot be reached, the holder refused
    /// (its code and message), or it kept not answering while its lease held;
    /// `JOURNAL_LEASE_LOST`, nothing sent, when this process no longer certainly holds the
    /// Lead's lease (`request.team`) or the store names another holder of it (a stalled Lead
    /// woken after a takeover stops none of the new holder's teammates).
    fn interrupt(&self, request: InterruptRequest) -> InterruptFuture<'_> {
        let _ = request;
        Box::pin(std::future::ready(Ok(InterruptHandoff::Unhosted)))
    }

    /// Tells the user of the Lead's process `line` (one line, no prefix): that a teammate
    /// whose host died was taken over, and where it continues. The default: the log
    /// (`tracing`, info).
    fn notice(&self, line: &str) {
        tracing::info!("{line}");
    }
}

/// A boxed future of [`MemberHosts::place`].
pub type PlaceFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<String>, JournalError>> + Send + 'a>>;

/// Appends `item` to the inbox of the unhosted session `target` (see the module docs): takes
/// its lease (opening it for writing), appends one `agent/inbox/spliced` inserting `item` at
/// the end of the `list` (next step: quiet mail; next turn: a wakeup) unless the log already
/// holds its id, flushes and releases.
///
/// # Errors
/// `JOURNAL_LOCKED` when another process took the lease meanwhile (the mailbox asks the
/// hosts again), the journal's errors otherwise.
pub(super) async fn append_unhosted(
    store: &Journal,
    target: &SessionId,
    item: UserMessage,
    list: InboxTarget,
) -> Result<(), crate::error::RuntimeError> {
    let (writer, replay) = store.open(target)?;
    let result = async {
        let transcript = Transcript::fold(replay.header.seed_len(), &replay.events)?;
        if transcript.accepted(&item.id) {
            return Ok(());
        }
        let start = match list {
            InboxTarget::NextStep => transcript.next_step().len(),
            InboxTarget::NextTurn => transcript.next_turn().len(),
        };
        let splice = InboxSplice {
            target: list,
            start,
            removed_count: 0,
            inserted: vec![item],
            outcome: None,
        };
        writer.append(EventDraft::new(ty::AGENT_INBOX_SPLICED, to_value(&splice)))?;
        writer.flush().await?;
        Ok::<(), crate::error::RuntimeError>(())
    }
    .await;
    let closed = writer.close().await;
    result?;
    closed?;
    Ok(())
}
