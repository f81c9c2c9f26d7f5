//! Team mail across processes (DESIGN §7 "Delivery across processes", issue 14 item 4): a
//! message to a teammate hosted by another process is handed to the process holding the
//! teammate's lease, which appends it to the teammate's inbox — durably and de-duplicated by
//! message id, exactly as a local delivery does — and answers; only then does the serializer
//! append `team/message/delivered` (REFERENCE c.10.3: target receipt durable before the
//! Lead's acknowledgement).
//!
//! Two halves, transport-free here (the NATS transport is `troupe-store-nats`' `deliver`):
//!
//! - **Handing over** ([`MemberHosts`]): the serializer's side. For a teammate that is not
//!   resident in this process, the mailbox asks its [`MemberHosts`] first: [`Handoff::Held`]
//!   when the holder answered that the teammate's log durably holds the message,
//!   [`Handoff::Unhosted`] when nobody holds the teammate's lease (then the mailbox goes on as
//!   for an inactive teammate: quiet mail is appended under a lease of this process's own when
//!   [`MemberHosts::append_unhosted`] says so — else it stays `queued`, REFERENCE c.10.5 —, and
//!   wakeup mail cold-resumes the teammate here, de-duplicated against its stored log).
//! - **Accepting** ([`TeamService::accept_delivery`]): the holder's side. It injects (quiet)
//!   or queues as the next turn (wakeup) into its resident agent unless the agent's log
//!   already holds the message id, waits for the flush, and answers.
//!
//! **What survives a crash**, at each point of one delivery:
//! - before the holder's append is durable: nothing in the target's log; the Lead log holds
//!   the message `queued` (it was durable before any delivery), so the serializer's retry —
//!   or the next resume's mailbox recovery — delivers it again, once;
//! - after the holder's append is durable and before its answer arrives (the holder died or
//!   lost its connection): the target's log holds the message, the Lead log still says
//!   `queued`; the serializer's retry reaches the holder again (which finds the message id in
//!   its log and answers without appending) or, once the dead holder's lease expired, takes
//!   the lease itself and finds the message id in the stored log: either way it appends no
//!   second copy and only then `team/message/delivered`;
//! - after the answer and before `delivered` is durable: as the previous point (the retry is
//!   answered from the target's log);
//! - after `delivered`: nothing is left to do.
//!
//! An unhosted append ([`append_unhosted`]) takes the target's lease through the store (the
//! same lease every writer takes, with the store's TTL), appends the one inbox item and
//! releases the lease at once: a crash while holding it leaves either nothing or the whole
//! item in the target's log (decision 9), and the lease frees itself after its TTL.

use troupe_journal::JournalError;
use troupe_protocol::ErrorCode;
use troupe_team::Delivery;

use super::hosts::{DELIVER_VERSION, DeliverAnswer, DeliverRequest, TEAM_MEMBER_NOT_HOSTED};
use super::service::TeamService;

impl TeamService {
    /// Accepts a Team message for a teammate this process hosts (the holder's side, see the
    /// module docs): the item is injected (quiet) or queued as the next turn (wakeup) unless
    /// the agent's log already holds its id, and the answer comes once the log is flushed.
    /// The transport has checked that this process holds the lease the request names.
    pub async fn accept_delivery(&self, request: &DeliverRequest) -> DeliverAnswer {
        if request.version != DELIVER_VERSION {
            return DeliverAnswer::failed(
                "INVALID_ARGUMENTS",
                format!(
                    "Error: delivery request version {} (this process speaks {DELIVER_VERSION})",
                    request.version
                ),
            );
        }
        let source = &request.item.source;
        let from_team = source.kind == troupe_team::TEAM_MESSAGE_SOURCE_KIND
            && source
                .extra
                .get("teamId")
                .and_then(serde_json::Value::as_str)
                == Some(request.team.as_str())
            && source
                .extra
                .get("messageId")
                .and_then(serde_json::Value::as_str)
                == Some(request.item.id.as_str());
        if !from_team {
            return DeliverAnswer::failed(
                "INVALID_ARGUMENTS",
                format!("Error: the item is not a message of Team {}", request.team),
            );
        }
        let Some(agent) = self.resident(&request.target) else {
            return DeliverAnswer::failed(
                TEAM_MEMBER_NOT_HOSTED,
                format!(
                    "Error: this process holds the lease of {} but runs no agent of it now",
                    request.target
                ),
            );
        };
        let id = &request.item.id;
        if !agent.with_transcript(|t| t.accepted(id)) {
            let appended = match request.delivery {
                Delivery::Quiet => agent.inject(request.item.clone()).await,
                Delivery::Wakeup => agent.followup(request.item.clone()).await,
            };
            if let Err(e) = appended {
                return DeliverAnswer::failed(e.code(), format!("Error: {e}"));
            }
        }
        // Held already (a retry): its log may still be flushing the first attempt's append.
        match agent.writer().flush().await {
            Ok(_) | Err(JournalError::Closed { .. }) => {}
            Err(e) => return DeliverAnswer::failed(e.code(), format!("Error: {e}")),
        }
        if agent.with_transcript(|t| t.accepted(id)) {
            DeliverAnswer::held()
        } else {
            DeliverAnswer::failed(
                TEAM_MEMBER_NOT_HOSTED,
                format!(
                    "Error: {} settled before it took the message",
                    request.target
                ),
            )
        }
    }
}
