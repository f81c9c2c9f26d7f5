//! `Journal::resolve`: a session named by its id or by a unique prefix of it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use troupe_journal::{Journal, JournalError, ResolveError};
use troupe_protocol::{ErrorCode, EventDraft, SessionHeader, SessionId};

fn home_with(ids: &[&str]) -> (tempfile::TempDir, Journal) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_home(dir.path());
    for id in ids {
        let writer = journal
            .create(SessionHeader::new(SessionId::new(*id).unwrap(), 1))
            .unwrap();
        writer
            .append(EventDraft::new(
                "user/message",
                serde_json::json!({"text": "hi"}),
            ))
            .unwrap();
        writer.flush_blocking().unwrap();
    }
    (dir, journal)
}

#[test]
fn a_unique_prefix_names_its_session_and_an_exact_id_wins() {
    let (_dir, journal) = home_with(&["6f1c2a-one", "6f1c2b-two", "abc", "abcd"]);
    assert_eq!(journal.resolve("6f1c2a").unwrap().as_str(), "6f1c2a-one");
    assert_eq!(
        journal.resolve("6f1c2b-two").unwrap().as_str(),
        "6f1c2b-two"
    );
    // `abc` is a whole id and a prefix of `abcd`: the exact id wins.
    assert_eq!(journal.resolve("abc").unwrap().as_str(), "abc");
    assert_eq!(journal.resolve("abcd").unwrap().as_str(), "abcd");
    // Nothing matches: the id itself, so the read that follows says SESSION_NOT_FOUND.
    let missing = journal.resolve("zz").unwrap();
    assert_eq!(missing.as_str(), "zz");
    let Err(error) = journal.read(&missing) else {
        panic!("zz does not exist")
    };
    assert_eq!(error.code(), "SESSION_NOT_FOUND");
}

#[test]
fn an_ambiguous_prefix_lists_every_candidate() {
    let (_dir, journal) = home_with(&["6f1c2b-two", "6f1c2a-one", "7"]);
    let Err(ResolveError::Journal(error)) = journal.resolve("6f1c") else {
        panic!("6f1c matches two sessions")
    };
    assert_eq!(error.code(), "SESSION_ID_AMBIGUOUS");
    assert!(matches!(error, JournalError::Ambiguous { .. }));
    assert_eq!(
        error.to_string(),
        "session id prefix 6f1c is ambiguous: it matches 2 sessions: 6f1c2a-one, 6f1c2b-two \
         (give more characters of the id)"
    );
    // An id that cannot be the start of one is refused as such.
    let Err(ResolveError::InvalidId(invalid)) = journal.resolve("../x") else {
        panic!("not an id")
    };
    assert_eq!(invalid.code(), "INVALID_SESSION_ID");
}

#[test]
fn at_most_ten_candidates_are_named() {
    let ids: Vec<String> = (0..12).map(|n| format!("s-{n:02}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (_dir, journal) = home_with(&refs);
    let Err(error) = journal.resolve("s-") else {
        panic!("ambiguous")
    };
    let text = error.to_string();
    assert!(
        text.contains("it matches 12 sessions: s-00, s-01"),
        "{text}"
    );
    assert!(text.contains("s-09 and 2 more (give more"), "{text}");
    assert!(!text.contains("s-10"), "{text}");
}

#[test]
fn a_home_without_sessions_resolves_to_the_id_itself() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open_home(&dir.path().join("not-yet"));
    assert_eq!(journal.resolve("abc").unwrap().as_str(), "abc");
}
