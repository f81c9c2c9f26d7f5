//! The shapes and the seam of Team mail across processes (see `delivery.rs` for the whole
//! story and its crash points): [`DeliverRequest`] / [`DeliverAnswer`], the [`MemberHosts`]
//! transport the serializer hands mail to, and [`append_unhosted`], the serializer's own
//! append to the log of a teammate nobody hosts. No file of the service is imported here, so
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

    /// Places the unhosted teammate `target`, whose log already holds the work it is woken
    /// for, on a host elsewhere (DESIGN §7 "Workers and placement"): `Ok(Some(host))` once a
    /// host runs it; `Ok(None)` when no host is eligible (each one skipped is reported as a
    /// warning with the reason): then it runs in this process.
    ///
    /// # Errors
    /// `STORE_IO` when the hosts cannot be listed (the mailbox tries again).
    fn place<'a>(&'a self, target: &'a SessionId) -> PlaceFuture<'a>;
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
