//! Live follows (`LogBackend::follow`): on NATS an ordered push consumer wakes the follower
//! whenever a message is stored — no polling — and a poll hands out whole batches only, with
//! the read's rules for sessions not created yet, unfinished creations, damage, and a server
//! that restarts. The JSONL files have no push (`None`: their readers poll).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod support;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Fixture, Kind};
use troupe_journal::{SessionFollow, Wake};
use troupe_protocol::{ErrorCode, EventDraft, Seq, SessionHeader, SessionId};

fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn chunk(n: u64) -> EventDraft {
    EventDraft::new("assistant/chunk", json!({"n": n}))
}

/// How long a wake may take on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

fn waker() -> (Wake, Receiver<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let wake: Wake = Arc::new(move || {
        let _ = tx.send(());
    });
    (wake, rx)
}

/// Polls after each wake until `want` events were handed out in all (or the poll fails);
/// returns their seqs.
fn seqs_after_wakes(follow: &mut dyn SessionFollow, wakes: &Receiver<()>, want: usize) -> Vec<u64> {
    let end = Instant::now() + DEADLINE;
    let mut seqs = Vec::new();
    loop {
        match follow.poll(&mut |e| seqs.push(e.seq.0)) {
            Ok(_) => {}
            Err(e) if e.code() == "SESSION_NOT_FOUND" => {}
            Err(e) => panic!("{e}"),
        }
        if seqs.len() >= want {
            return seqs;
        }
        let left = end.saturating_duration_since(Instant::now());
        match wakes.recv_timeout(left) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => panic!("no wake within {DEADLINE:?}: {seqs:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the follow stopped"),
        }
    }
}

/// Empties the wake channel.
fn drain(wakes: &Receiver<()>) {
    while wakes.try_recv().is_ok() {}
}

#[test]
fn the_files_have_no_push_and_their_readers_poll() {
    let f = Fixture::files();
    let (wake, _rx) = waker();
    assert!(f.journal.follow(&id("s"), wake).unwrap().is_none());
}

#[test]
fn a_follow_started_before_the_session_hands_out_whole_batches_as_they_are_stored() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let (wake, wakes) = waker();
    let mut follow = f.reconnect().follow(&id("s"), wake).unwrap().unwrap();
    let err = follow.poll(&mut |_| panic!("no event yet")).unwrap_err();
    assert_eq!(err.code(), "SESSION_NOT_FOUND", "{err}");
    assert!(follow.header().is_none());

    let w = f.journal.create(SessionHeader::new(id("s"), 3)).unwrap();
    w.append_batch(vec![chunk(0), chunk(1), chunk(2)]).unwrap();
    w.flush_blocking().unwrap();
    assert_eq!(seqs_after_wakes(follow.as_mut(), &wakes, 3), [0, 1, 2]);
    assert_eq!(follow.header().unwrap().created_at, 3);
    for round in 0..3u64 {
        w.append_batch(vec![chunk(10 + round), chunk(20 + round)])
            .unwrap();
        w.flush_blocking().unwrap();
        let base = 3 + 2 * round;
        assert_eq!(
            seqs_after_wakes(follow.as_mut(), &wakes, 2),
            [base, base + 1]
        );
    }
    drop(w);
    drain(&wakes);

    // The first line of a batch alone wakes the follower but is not handed out...
    let first = json!({"seq": 9, "time": 9, "type": "step/start", "batchLast": 10, "data": {}});
    f.append_raw("s", &[serde_json::to_vec(&first).unwrap()]);
    wakes.recv_timeout(DEADLINE).unwrap();
    let at = follow.poll(&mut |e| panic!("half a batch: {e:?}")).unwrap();
    assert_eq!(at.next_seq, Seq(9));
    // ...and the whole batch is, once its last line is stored.
    let last = json!({"seq": 10, "time": 9, "type": "step/end", "data": {}});
    f.append_raw("s", &[serde_json::to_vec(&last).unwrap()]);
    assert_eq!(seqs_after_wakes(follow.as_mut(), &wakes, 2), [9, 10]);
    // The follow saw what one whole read sees.
    let whole = f.journal.read(&id("s")).unwrap();
    let at = follow.poll(&mut |_| {}).unwrap();
    assert_eq!(at.offset, whole.valid_len);
    assert_eq!(at.next_seq, whole.next_seq());
}

#[test]
fn an_unfinished_creation_is_not_found_until_a_creator_replaces_it() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    let header = serde_json::to_vec(&SessionHeader::new(id("half"), 1)).unwrap();
    let event = serde_json::to_vec(&chunk(0).into_event(Seq(0), 1)).unwrap();
    rt.block_on(async {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Troupe-First-Events", "3");
        js.publish_with_headers("troupe.session.half", headers, header.into())
            .await
            .unwrap()
            .await
            .unwrap();
        js.publish("troupe.session.half", event.into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
    let (wake, wakes) = waker();
    let mut follow = f.journal.follow(&id("half"), wake).unwrap().unwrap();
    // Both leftover messages arrive; the session is still not there.
    let end = Instant::now() + DEADLINE;
    loop {
        let err = follow.poll(&mut |e| panic!("{e:?}")).unwrap_err();
        assert_eq!(err.code(), "SESSION_NOT_FOUND", "{err}");
        if err.to_string().contains("unfinished: 1 of its first 3") {
            break;
        }
        wakes
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .unwrap();
    }
    let w = f.journal.create(SessionHeader::new(id("half"), 2)).unwrap();
    w.append_batch(vec![chunk(10), chunk(11)]).unwrap();
    w.flush_blocking().unwrap();
    let mut data = Vec::new();
    let end = Instant::now() + DEADLINE;
    while data.len() < 2 {
        match follow.poll(&mut |e| data.push(e.data["n"].as_u64().unwrap())) {
            Ok(_) => {}
            Err(e) => assert_eq!(e.code(), "SESSION_NOT_FOUND", "{e}"),
        }
        if data.len() < 2 {
            wakes
                .recv_timeout(end.saturating_duration_since(Instant::now()))
                .unwrap();
        }
    }
    assert_eq!(data, [10, 11]);
    assert_eq!(follow.header().unwrap().created_at, 2);
}

#[test]
fn damage_ends_the_follow_after_the_events_before_it() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append_batch(vec![chunk(0), chunk(1)]).unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    let (wake, wakes) = waker();
    let mut follow = f.journal.follow(&id("s"), wake).unwrap().unwrap();
    assert_eq!(seqs_after_wakes(follow.as_mut(), &wakes, 2), [0, 1]);
    // A garbage message on the subject: committed corruption at its line.
    f.append_raw("s", &[b"not json".to_vec()]);
    let end = Instant::now() + DEADLINE;
    let err = loop {
        match follow.poll(&mut |e| panic!("{e:?}")) {
            Ok(_) => wakes
                .recv_timeout(end.saturating_duration_since(Instant::now()))
                .unwrap(),
            Err(e) => break e,
        }
    };
    assert_eq!(err.code(), "JOURNAL_CORRUPT", "{err}");
    assert!(err.to_string().contains("line 4"), "{err}");
    // The follow is over: nothing more is handed out.
    let more = serde_json::to_vec(&chunk(3).into_event(Seq(2), 1)).unwrap();
    f.append_raw("s", &[more]);
    follow.poll(&mut |e| panic!("{e:?}")).unwrap();

    // A payload holding a newline is not one line.
    let w = f.journal.create(SessionHeader::new(id("nl"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    let (wake, wakes) = waker();
    let mut follow = f.journal.follow(&id("nl"), wake).unwrap().unwrap();
    assert_eq!(seqs_after_wakes(follow.as_mut(), &wakes, 1), [0]);
    f.append_raw("nl", &[b"{}\n{}".to_vec()]);
    let end = Instant::now() + DEADLINE;
    let err = loop {
        match follow.poll(&mut |e| panic!("{e:?}")) {
            Ok(_) => wakes
                .recv_timeout(end.saturating_duration_since(Instant::now()))
                .unwrap(),
            Err(e) => break e,
        }
    };
    assert_eq!(err.code(), "JOURNAL_CORRUPT", "{err}");
    assert!(err.to_string().contains("line 3"), "{err}");
}

#[test]
fn a_follow_goes_on_after_its_server_restarts() {
    let Some(mut f) = Fixture::nats() else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    let follower = f.reconnect();
    let (wake, wakes) = waker();
    let mut follow = follower.follow(&id("s"), wake).unwrap().unwrap();
    assert_eq!(seqs_after_wakes(follow.as_mut(), &wakes, 1), [0]);
    let server = f.server().unwrap();
    server.kill(0);
    server.restart(0);
    // The writer's client reconnects too; its append is pushed to the follow.
    let end = Instant::now() + DEADLINE;
    let (w, _) = loop {
        match f.journal.open(&id("s")) {
            Ok(opened) => break opened,
            Err(e) if Instant::now() < end => {
                eprintln!("open after the restart: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{e}"),
        }
    };
    w.append_batch(vec![chunk(1), chunk(2)]).unwrap();
    w.flush_blocking().unwrap();
    assert_eq!(seqs_after_wakes(follow.as_mut(), &wakes, 2), [1, 2]);
}

#[test]
fn the_first_poll_hands_out_what_the_session_held_when_the_follow_started() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    for n in 0..40 {
        w.append(chunk(n)).unwrap();
    }
    w.flush_blocking().unwrap();
    let (wake, _wakes) = waker();
    let mut follow = f.reconnect().follow(&id("s"), wake).unwrap().unwrap();
    // At once, without waiting for a wake: the poll itself waits for the backlog.
    let mut seqs = Vec::new();
    let at = follow.poll(&mut |e| seqs.push(e.seq.0)).unwrap();
    assert_eq!(seqs, (0..40).collect::<Vec<_>>());
    assert_eq!(at.next_seq, Seq(40));
    // A session missing at the start is not found at the first poll, also at once.
    let (wake, _wakes) = waker();
    let mut missing = f.journal.follow(&id("none"), wake).unwrap().unwrap();
    let err = missing.poll(&mut |_| {}).unwrap_err();
    assert_eq!(err.code(), "SESSION_NOT_FOUND");
    assert!(err.to_string().contains("session none not found"), "{err}");
}
