//! CASES §2 (`invariant.spec.ts`): the invariant companion (REFERENCE c.5) as a pure check of
//! a candidate against the folded committed prefix.

use serde_json::Value;
use troupe_protocol::{ErrorCode, Event, EventDraft, Seq};
use troupe_team::{INVARIANT_PACKAGE, InvariantError, TeamState};

use super::support::*;

/// A session whose appends pass through the invariant companion, as with invariants enabled.
struct GuardedSession {
    events: Vec<Event>,
    state: TeamState,
}

impl GuardedSession {
    fn fresh() -> Self {
        Self {
            events: Vec::new(),
            state: TeamState::new(team()),
        }
    }

    fn append(&mut self, (kind, data): (&str, Value)) -> Result<(), InvariantError> {
        self.state.check_candidate(kind, &data)?;
        let event = EventDraft::new(kind, data).into_event(Seq(self.events.len() as u64), 1);
        self.state
            .apply(&event)
            .expect("a checked candidate applies");
        self.events.push(event);
        Ok(())
    }
}

fn check(candidate: (&str, Value), expected: Result<(), &str>) {
    let mut session = GuardedSession::fresh();
    let before = session.state.clone();
    match (session.append(candidate), expected) {
        (Ok(()), Ok(())) => assert_eq!(session.events.len(), 1),
        (Err(error), Err(fragment)) => {
            assert_eq!(error.code(), "INVARIANT");
            assert_eq!(error.package(), INVARIANT_PACKAGE);
            assert!(error.to_string().contains(fragment), "{error}");
            assert!(session.events.is_empty(), "the log must not change");
            assert_eq!(session.state, before, "the state must not change");
        }
        (outcome, expected) => panic!("got {outcome:?}, expected {expected:?}"),
    }
}

#[test]
fn c27_first_provisioning_edge_is_accepted() {
    check(member("w1", "worker-a", "provisioning"), Ok(()));
}

#[test]
fn c28_first_edge_active_is_an_invariant_error() {
    check(
        member("w1", "worker-a", "active"),
        Err("must begin provisioning"),
    );
}

#[test]
fn c29_missing_blocker_is_an_invariant_error() {
    check(
        task("task-1", 1, "pending", &["missing"]),
        Err("is missing or deleted"),
    );
}

#[test]
fn non_team_candidates_always_pass() {
    check(("turn/start", serde_json::json!({"turn": 1})), Ok(()));
}

#[test]
fn check_does_not_change_a_non_empty_state() {
    let mut board = Board::new();
    board.append_raw(member("w1", "worker-a", "provisioning"));
    board.append_raw(task("task-1", 1, "pending", &[]));
    let before = board.state.clone();
    let (kind, data) = task("task-1", 3, "pending", &[]);
    let err = board.state.check_candidate(kind, &data).unwrap_err();
    assert!(err.to_string().contains("revision is not contiguous"));
    assert_eq!(board.state, before);
    board.state.verify_indexes().unwrap();
    // A failed apply leaves the state unchanged as well.
    assert!(board.state.apply_data(kind, &data).is_err());
    assert_eq!(board.state, before);
    board.state.verify_indexes().unwrap();
}

/// The typed candidate of `(kind, data)`, as a decision would build it.
fn typed(kind: &str, data: &Value) -> troupe_team::TeamEvent {
    match troupe_team::decode(kind, data).unwrap() {
        troupe_team::Decoded::Record { team_id, record } => troupe_team::TeamEvent {
            team_id: troupe_team::TeamId::new(troupe_protocol::SessionId::new(team_id).unwrap()),
            record,
        },
        _ => panic!("not a version 1 Team record"),
    }
}

/// `TeamState::stage` (the runtime's one check of a typed candidate) refuses exactly what the
/// invariant companion refuses, with the same error, and a staged event that is dropped
/// instead of applied changes nothing.
#[test]
fn staging_refuses_as_the_check_does_and_a_dropped_stage_changes_nothing() {
    let mut board = Board::new();
    board.append_raw(member("w1", "worker-a", "provisioning"));
    board.append_raw(task("task-1", 1, "pending", &[]));
    let before = board.state.clone();
    for (kind, data) in [
        task("task-1", 3, "pending", &[]),
        task("task-2", 1, "pending", &["missing"]),
        member("w2", "worker-b", "active"),
        member("w3", "worker-a", "provisioning"),
    ] {
        let checked = board.state.check_candidate(kind, &data).unwrap_err();
        let staged = board.state.stage(&typed(kind, &data)).unwrap_err();
        assert_eq!(staged, checked);
        assert_eq!(staged.code(), "INVARIANT");
        assert_eq!(board.state, before);
    }
    let (kind, data) = task("task-1", 2, "pending", &[]);
    drop(board.state.stage(&typed(kind, &data)).unwrap());
    assert_eq!(board.state, before, "a dropped stage applies nothing");
    board.state.stage(&typed(kind, &data)).unwrap().apply();
    let mut stored = before.clone();
    stored.apply_data(kind, &data).unwrap();
    assert_eq!(board.state, stored);
    board.state.verify_indexes().unwrap();
}
