//! Roster decisions (REFERENCE c.8, c.9, c.13): reserving a teammate, settling provisioning,
//! resolving interrupt targets.

use troupe_protocol::SessionId;

use crate::error::TeamError;
use crate::ids::{LEAD_NAME, MemberName};
use crate::limits::TeamLimits;
use crate::record::{
    MemberContext, MemberPhase, MemberProvider, MemberSnapshot, MemberWorktree, TeamEvent,
    TeamRecord,
};
use crate::state::{Caller, TeamState};
use crate::text::{SHORT_TEXT_MAX, js_trim, required_text};

/// The `failed` error recorded by roster reconciliation when the child is not live and no
/// better diagnosis exists (REFERENCE c.9 step 2).
pub const RECOVERY_NO_RESUMABLE_CHILD: &str =
    "provisioning did not leave a resumable child Session";
/// The `failed` error when the persisted child does not match the provisioned continuation
/// (REFERENCE c.9 step 3).
pub const RECOVERY_CHILD_MISMATCH: &str =
    "persisted child Session does not match the provisioned continuation";
/// Prefix of the `failed` error when inspecting the child failed (REFERENCE c.9 step 3):
/// `child Session recovery failed: <message>`.
pub const RECOVERY_INSPECT_FAILED_PREFIX: &str = "child Session recovery failed: ";

/// `spawnTeammate`'s durable part (REFERENCE c.8 steps 2, 4, 5): reserve a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionTeammate {
    /// The name (validated as is, not trimmed).
    pub name: String,
    /// The delegated job; trimmed, 1..200 UTF-16 units.
    pub description: String,
    /// The child provider; trimmed, 1..200 (the trimmed value is stored).
    pub provider: String,
    /// Fresh or fork.
    pub context: MemberContext,
    /// The member's own worktree (`--worktree`), recorded with its reservation; `None`: it
    /// works in the shared checkout (REFERENCE g.1).
    pub worktree: Option<MemberWorktree>,
}

/// How provisioning ended for one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisioningOutcome {
    /// The child exists and durably accepted its initial prompt.
    Active,
    /// It did not; `error` is recorded on the member.
    Failed {
        /// The diagnosis (shown as the member's diagnostics).
        error: String,
    },
}

/// The result of [`TeamState::decide_settle_provisioning`].
#[derive(Debug, Clone, PartialEq)]
pub enum SettleDecision {
    /// The member is still `provisioning`: append this terminal edge.
    Append(TeamEvent),
    /// Someone else already settled it; append nothing. The caller compares the phase with
    /// its own outcome (opposite phases are `TEAM_PROVISIONING_CONFLICT`, REFERENCE c.8).
    AlreadySettled(MemberPhase),
}

impl TeamState {
    /// `TEAM_LEAD_REQUIRED` unless `caller` is this Team's Lead (`action` names the attempt,
    /// e.g. `spawn teammates`).
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER` for a caller outside the Team, `TEAM_LEAD_REQUIRED` for a teammate.
    pub fn require_lead(&self, caller: &Caller, action: &str) -> Result<(), TeamError> {
        self.require_member(caller)?;
        if caller.is_lead() {
            Ok(())
        } else {
            Err(TeamError::LeadRequired {
                action: action.to_owned(),
            })
        }
    }

    /// Decides the reservation of a teammate (REFERENCE c.8). Checks, in order: Lead only;
    /// name (pattern, ≤ 64, ≠ `lead`); description; provider; name not reserved in any phase;
    /// roster size (failed included) < `maxMembers`; `child_id` unused (not the Lead, not a
    /// member). Returns the `team/member` event with phase `provisioning`.
    ///
    /// `child_id` is minted by the caller (a random UUID v4 in the runtime).
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER`, `TEAM_LEAD_REQUIRED`, `TEAM_INVALID_MEMBER_NAME`,
    /// `TEAM_INVALID_ARGUMENT`, `TEAM_MEMBER_NAME_TAKEN`, `TEAM_MEMBER_LIMIT`.
    pub fn decide_provision(
        &self,
        caller: &Caller,
        request: &ProvisionTeammate,
        child_id: SessionId,
        limits: &TeamLimits,
    ) -> Result<TeamEvent, TeamError> {
        self.require_lead(caller, "spawn teammates")?;
        let name = MemberName::new(request.name.clone())?;
        let description = required_text(&request.description, "description", SHORT_TEXT_MAX)?;
        let provider = required_text(&request.provider, "provider", SHORT_TEXT_MAX)?;
        if self.member_named(name.as_str()).is_some() {
            return Err(TeamError::MemberNameTaken {
                name: name.to_string(),
            });
        }
        if self.members().len() as u64 >= limits.max_members {
            return Err(TeamError::MemberLimit {
                limit: limits.max_members,
            });
        }
        // A fresh UUID never collides; the guard keeps a reused id from producing an edge the
        // fold would refuse.
        if child_id == *self.id().lead_id() || self.member(&child_id).is_some() {
            return Err(TeamError::invalid_argument(format!(
                "child session id {child_id} is already used in this Team"
            )));
        }
        Ok(TeamEvent {
            team_id: self.id().clone(),
            record: TeamRecord::Member(MemberSnapshot {
                id: child_id,
                name,
                description,
                provider: MemberProvider::named(provider),
                context: request.context,
                phase: MemberPhase::Provisioning,
                error: None,
                worktree: request.worktree.clone().map(Box::new),
            }),
        })
    }

    /// Decides `settleProvisioning` (REFERENCE c.8 steps 7–8, c.9 step 4): if member
    /// `member_id` is still `provisioning`, the terminal edge to append (`error` only for
    /// `failed`); otherwise the phase someone else already recorded.
    ///
    /// # Errors
    /// `TEAM_MEMBER_NOT_FOUND` when no member has that id.
    pub fn decide_settle_provisioning(
        &self,
        member_id: &SessionId,
        outcome: &ProvisioningOutcome,
    ) -> Result<SettleDecision, TeamError> {
        let member = self
            .member(member_id)
            .ok_or_else(|| TeamError::MemberNotFound {
                name: member_id.to_string(),
            })?;
        if member.phase != MemberPhase::Provisioning {
            return Ok(SettleDecision::AlreadySettled(member.phase));
        }
        let (phase, error) = match outcome {
            ProvisioningOutcome::Active => (MemberPhase::Active, None),
            ProvisioningOutcome::Failed { error } => (MemberPhase::Failed, Some(error.clone())),
        };
        Ok(SettleDecision::Append(TeamEvent {
            team_id: self.id().clone(),
            record: TeamRecord::Member(MemberSnapshot {
                phase,
                error,
                ..member.clone()
            }),
        }))
    }

    /// The members still `provisioning`, in roster order (the input of roster
    /// reconciliation, REFERENCE c.9).
    pub fn provisioning_members(&self) -> impl Iterator<Item = &MemberSnapshot> + '_ {
        self.members()
            .iter()
            .filter(|m| m.phase == MemberPhase::Provisioning)
    }

    /// Resolves a message target or assignee by name (REFERENCE c.10.1): the name is trimmed;
    /// `lead` is the Lead; otherwise an **active** member. Returns `(id, name)`.
    ///
    /// # Errors
    /// `TEAM_MEMBER_NOT_FOUND` for a provisioning, failed or unknown name.
    pub fn resolve_target(&self, name: &str) -> Result<(SessionId, String), TeamError> {
        let name = js_trim(name);
        if name == LEAD_NAME {
            return Ok((self.id().lead_id().clone(), LEAD_NAME.to_owned()));
        }
        self.member_named(name)
            .filter(|m| m.phase == MemberPhase::Active)
            .map(|m| (m.id.clone(), m.name.to_string()))
            .ok_or_else(|| TeamError::MemberNotFound {
                name: name.to_owned(),
            })
    }

    /// Resolves the target of `interrupt` (REFERENCE c.13): Lead only; `lead` →
    /// `TEAM_INVALID_TARGET`; otherwise an active member.
    ///
    /// # Errors
    /// `TEAM_NOT_MEMBER`, `TEAM_LEAD_REQUIRED`, `TEAM_INVALID_TARGET`,
    /// `TEAM_MEMBER_NOT_FOUND`.
    pub fn resolve_interrupt_target(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<&MemberSnapshot, TeamError> {
        self.require_lead(caller, "interrupt teammates")?;
        let (id, resolved) = self.resolve_target(name)?;
        if resolved == LEAD_NAME {
            return Err(TeamError::InvalidTarget {
                name: name.to_owned(),
            });
        }
        self.member(&id)
            .ok_or(TeamError::MemberNotFound { name: resolved })
    }
}
