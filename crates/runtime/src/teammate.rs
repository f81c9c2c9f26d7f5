//! The one rule for "is this child session a valid teammate?" ([`teammate_problem`]), shared
//! by `troupe team verify` ([`LeadLog::violation`](crate::LeadLog::violation)) and the Team
//! recovery's provisioning reconciliation (REFERENCE c.9 step 3), so the two cannot disagree.
//! A pure check of a child log already read and folded: nothing here reads or writes.

use std::fmt;

use troupe_protocol::{SessionHeader, SessionId};
use troupe_team::MemberProvider;

use troupe_session::Transcript;
use troupe_session::events::{ChildProvider, DescriptorMode, Profile};

/// Why a child session is not a valid teammate of its Lead. The `Display` text is what
/// `troupe team verify` prints after `teammate NAME (ID): `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TeammateProblem {
    /// The child's header names no `parentSession`.
    NoParent,
    /// The child's `parentSession` is another session than the Lead.
    OtherParent {
        /// The parent the child's header names.
        parent: SessionId,
        /// The Lead.
        lead: SessionId,
    },
    /// The child's log has no `subagent/descriptor` (REFERENCE b.5).
    NoDescriptor,
    /// The descriptor's mode is not `continuable`.
    NotContinuable {
        /// The mode recorded.
        mode: DescriptorMode,
    },
    /// The descriptor's provider (`spawn` / `fork`) is not the roster's.
    OtherProvider {
        /// The provider the child's descriptor records.
        recorded: ChildProvider,
        /// The provider the Lead's roster records.
        roster: MemberProvider,
    },
    /// The child has no `agent/config`, so it cannot be resumed.
    NoConfig,
    /// The child's `agent/config` lacks the Team profile, so a resume would not give it the
    /// Team tools.
    NotTeamProfile,
}

impl fmt::Display for TeammateProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoParent => f.write_str("its child session has no parentSession"),
            Self::OtherParent { parent, lead } => write!(
                f,
                "its child session's parentSession is {parent}, not the Lead {lead}"
            ),
            Self::NoDescriptor => f.write_str("its child session has no subagent/descriptor"),
            Self::NotContinuable { mode } => write!(
                f,
                "its child session's descriptor mode is {:?}, not \"continuable\"",
                mode.as_str()
            ),
            Self::OtherProvider { recorded, roster } => write!(
                f,
                "its child session's descriptor provider {:?} differs from the roster's {:?}",
                recorded.as_str(),
                roster.as_str()
            ),
            Self::NoConfig => {
                f.write_str("its child session has no agent/config, so it cannot be resumed")
            }
            Self::NotTeamProfile => f.write_str(
                "its child session's agent/config does not have the Team profile, so a resume \
                 would not give it the Team tools",
            ),
        }
    }
}

/// Whether the child session with `header`, folded into `transcript`, is a valid teammate of
/// `lead` whose roster records `provider`: its header names the Lead as `parentSession`, it
/// carries a continuable `subagent/descriptor` of that provider, and an `agent/config` with
/// the Team profile (so a cold resume gets the Team tools back). Returns the first problem, in
/// that order; `None` for a valid teammate.
///
/// A child the runtime creates gets its descriptor and its configuration in one batch, so a
/// log with the descriptor always has the configuration too.
pub(crate) fn teammate_problem(
    header: &SessionHeader,
    transcript: &Transcript,
    lead: &SessionId,
    provider: &MemberProvider,
) -> Option<TeammateProblem> {
    if let Some(problem) = parent_problem(header, lead) {
        return Some(problem);
    }
    match transcript.descriptor() {
        None => return Some(TeammateProblem::NoDescriptor),
        Some(d) if d.mode != DescriptorMode::Continuable => {
            return Some(TeammateProblem::NotContinuable { mode: d.mode });
        }
        Some(d) if d.provider.as_str() != provider.as_str() => {
            return Some(TeammateProblem::OtherProvider {
                recorded: d.provider,
                roster: provider.clone(),
            });
        }
        Some(_) => {}
    }
    match transcript.config() {
        None => Some(TeammateProblem::NoConfig),
        Some(c) if c.profile != Profile::Team => Some(TeammateProblem::NotTeamProfile),
        Some(_) => None,
    }
}

/// The first check of [`teammate_problem`], which needs only the header: whether it names
/// `lead` as the child's `parentSession` (a caller may check it before folding the log).
pub(crate) fn parent_problem(header: &SessionHeader, lead: &SessionId) -> Option<TeammateProblem> {
    match &header.parent_session {
        Some(parent) if parent == lead => None,
        Some(parent) => Some(TeammateProblem::OtherParent {
            parent: parent.clone(),
            lead: lead.clone(),
        }),
        None => Some(TeammateProblem::NoParent),
    }
}
