//! How a stored session relates to the others (DESIGN §6: "Lead or teammate"): the one rule
//! behind `troupe sessions`, `troupe team show`'s refusal of a member's session and the web
//! panel's session list; and whether a Lead's session is a Team session ([`is_team_session`]).
//!
//! The header says whether a session is a root, a subagent child or a fork; whether a subagent
//! child is a Team member is recorded in its own log: its first `agent/config` after the seeded
//! prefix has the Team profile (teammates are started with it, other subagent children are
//! not; DESIGN decision 4).

use serde::{Deserialize, Serialize};
use troupe_protocol::{Event, SessionHeader, event_types};

use crate::events::Profile;

/// The `origin` of a subagent child's header (`SessionHeader::origin`): what
/// [`SessionRole::of`] reads as a subagent child.
pub const SUBAGENT_ORIGIN: &str = "subagent";

/// A session's role. Wire (`troupe sessions --json`, `GET /api/sessions`): `"lead"` |
/// `"teammate"` | `"child"` | `"fork"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionRole {
    /// A root session (no parent): a Lead, with or without a Team.
    Lead,
    /// A Team member's session: a subagent child whose own `agent/config` has the Team profile.
    Teammate,
    /// Any other subagent child (`origin: "subagent"` with a parent), including one whose own
    /// `agent/config` could not be read.
    Child,
    /// A fork of another session (a parent, another origin).
    Fork,
}

impl SessionRole {
    /// The rule: `lead` without a parent; for a parent with origin `subagent`, `teammate` when
    /// `own_profile` (the profile of the session's own first `agent/config`, `None` when it has
    /// none or it was not read) is the Team profile, else `child`; `fork` for any other parent.
    pub fn of(header: &SessionHeader, own_profile: Option<Profile>) -> Self {
        match (&header.parent_session, header.origin.as_deref()) {
            (None, _) => SessionRole::Lead,
            (Some(_), Some(SUBAGENT_ORIGIN)) if own_profile == Some(Profile::Team) => {
                SessionRole::Teammate
            }
            (Some(_), Some(SUBAGENT_ORIGIN)) => SessionRole::Child,
            (Some(_), _) => SessionRole::Fork,
        }
    }

    /// Whether the session is a subagent child (`teammate` or `child`): it belongs to its
    /// parent's tree and leads no Team of its own. This does not depend on the profile, so
    /// `SessionRole::of(header, None).is_child()` answers it from the header alone.
    pub fn is_child(self) -> bool {
        matches!(self, SessionRole::Teammate | SessionRole::Child)
    }

    /// The wire name: `lead`, `teammate`, `child` or `fork`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionRole::Lead => "lead",
            SessionRole::Teammate => "teammate",
            SessionRole::Child => "child",
            SessionRole::Fork => "fork",
        }
    }
}

impl std::fmt::Display for SessionRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a Lead's session is a Team session: its configuration has the Team profile
/// (`profile`: its own first `agent/config`'s, `None` when it has none), or its log holds any
/// Team record — a member, a task or a message (`has_team_records`: what
/// `troupe_team::TeamState::has_records` says of its fold). The rule behind `troupe team`'s
/// refusal of a session without a Team and the web panel's session list.
pub fn is_team_session(profile: Option<Profile>, has_team_records: bool) -> bool {
    profile == Some(Profile::Team) || has_team_records
}

/// Reads a session's role from its header and its events, fed in log order (all of them, or
/// only the first ones: the role is settled by the session's own first `agent/config`, so a
/// reader may feed a log incrementally, as the web panel follows files).
#[derive(Debug, Clone)]
pub struct RoleProbe {
    header: SessionHeader,
    /// The profile of the first own `agent/config`: `None` before one was seen, `Some(None)`
    /// when it had no readable profile.
    own_profile: Option<Option<Profile>>,
}

impl RoleProbe {
    /// A probe for the session with this header; before any event, its role is what the
    /// header alone says (a subagent child counts as `child` until its configuration is seen).
    pub fn new(header: &SessionHeader) -> Self {
        Self {
            header: header.clone(),
            own_profile: None,
        }
    }

    /// Feeds the next event of the session's log. Only the first `agent/config` at or after
    /// the seeded prefix (`seedLength`) counts; every other event is ignored.
    pub fn observe(&mut self, event: &Event) {
        if self.own_profile.is_none()
            && event.seq.0 >= self.header.seed_len()
            && event.kind == event_types::AGENT_CONFIG
        {
            let profile = event
                .data
                .get("profile")
                .and_then(|p| serde_json::from_value::<Profile>(p.clone()).ok());
            self.own_profile = Some(profile);
        }
    }

    /// Whether the session's own first `agent/config` was seen (later events cannot change
    /// the role then).
    pub fn settled(&self) -> bool {
        self.own_profile.is_some()
    }

    /// The profile of the session's own first `agent/config`, once seen and readable.
    pub fn profile(&self) -> Option<Profile> {
        self.own_profile.flatten()
    }

    /// The role from the header and the events fed so far ([`SessionRole::of`]).
    pub fn role(&self) -> SessionRole {
        SessionRole::of(&self.header, self.own_profile.flatten())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;
    use troupe_protocol::SessionId;

    use super::*;

    fn header(parent: Option<&str>, origin: Option<&str>, seed: Option<u64>) -> SessionHeader {
        let mut header = SessionHeader::new(SessionId::new("s").unwrap(), 0);
        if let Some(parent) = parent {
            header = header.with_parent(SessionId::new(parent).unwrap());
        }
        if let Some(origin) = origin {
            header = header.with_origin(origin);
        }
        header.seed_length = seed;
        header
    }

    fn event(seq: u64, kind: &str, data: serde_json::Value) -> Event {
        serde_json::from_value(json!({"seq": seq, "time": 0, "type": kind, "data": data})).unwrap()
    }

    fn config(seq: u64, profile: &str) -> Event {
        event(
            seq,
            "agent/config",
            json!({"name": "x", "profile": profile}),
        )
    }

    /// (header, events fed, expected role).
    fn check(header: &SessionHeader, events: &[Event], expected: SessionRole) {
        let mut probe = RoleProbe::new(header);
        for e in events {
            probe.observe(e);
        }
        assert_eq!(probe.role(), expected, "{header:?} after {events:?}");
    }

    #[test]
    fn roles_follow_the_header_and_the_own_first_configuration() {
        let root = header(None, None, None);
        let child = header(Some("lead"), Some("subagent"), None);
        let fork = header(Some("lead"), None, Some(3));
        check(&root, &[], SessionRole::Lead);
        check(&root, &[config(0, "team")], SessionRole::Lead);
        check(&child, &[], SessionRole::Child);
        check(&child, &[config(0, "default")], SessionRole::Child);
        check(&child, &[config(0, "team")], SessionRole::Teammate);
        // Only the first own configuration counts (a later one records a model override).
        check(
            &child,
            &[config(0, "team"), config(5, "default")],
            SessionRole::Teammate,
        );
        check(
            &child,
            &[config(0, "default"), config(5, "team")],
            SessionRole::Child,
        );
        // An unreadable profile is not the Team profile.
        check(&child, &[config(0, "squad")], SessionRole::Child);
        check(&fork, &[config(4, "team")], SessionRole::Fork);
    }

    #[test]
    fn a_seeded_configuration_is_not_the_sessions_own() {
        // A fork-context teammate inherits its Lead's Team configuration in its seed; its own
        // first configuration decides.
        let seeded = header(Some("lead"), Some("subagent"), Some(2));
        check(&seeded, &[config(0, "team")], SessionRole::Child);
        check(
            &seeded,
            &[config(0, "team"), config(2, "default")],
            SessionRole::Child,
        );
        check(
            &seeded,
            &[config(0, "default"), config(3, "team")],
            SessionRole::Teammate,
        );
    }

    #[test]
    fn wire_names_and_childhood() {
        for (role, name, child) in [
            (SessionRole::Lead, "lead", false),
            (SessionRole::Teammate, "teammate", true),
            (SessionRole::Child, "child", true),
            (SessionRole::Fork, "fork", false),
        ] {
            assert_eq!(role.as_str(), name);
            assert_eq!(serde_json::to_value(role).unwrap(), json!(name));
            assert_eq!(role.is_child(), child);
        }
    }
}
