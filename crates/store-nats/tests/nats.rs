//! What only the NATS store has: connection errors, an existing stream used as it is, whole
//! first appends, leases (held, expired, lost, renewed) and the expected-sequence fence, and
//! acknowledged ⇒ stored under `kill -9` of the writer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::json;
use support::{Fixture, Kind, test_options};
use troupe_journal::ScanPosition;
use troupe_protocol::{ErrorCode, EventDraft, Seq, SessionHeader, SessionId};
use troupe_store_nats::{NatsBackend, NatsOptions};
use troupe_test_support::NatsServer;

const CHILD: &str = env!("CARGO_BIN_EXE_troupe-store-nats-child");

fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn chunk(n: u64) -> EventDraft {
    EventDraft::new("assistant/chunk", json!({"n": n}))
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `deadline`.
fn eventually<T>(deadline: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < end,
            "condition not met within {deadline:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn one_line(err: &impl std::fmt::Display) -> String {
    let text = err.to_string();
    assert!(!text.contains('\n'), "{text}");
    text
}

#[test]
fn unusable_servers_and_urls_are_one_line_errors_naming_the_url() {
    let Some(plain) = NatsServer::without_jetstream() else {
        return;
    };
    let err = NatsBackend::connect(&plain.url(), test_options()).unwrap_err();
    assert_eq!(err.code(), "STORE_UNSUPPORTED");
    assert!(one_line(&err).contains(&plain.url()), "{err}");

    // Nothing listens on a port of a stopped server.
    let url = plain.url();
    drop(plain);
    let err = NatsBackend::connect(&url, test_options()).unwrap_err();
    assert_eq!(err.code(), "STORE_UNREACHABLE");
    assert!(one_line(&err).contains(&url), "{err}");

    for bad in ["", "nats://", "nats://host:port:extra,"] {
        let err = NatsBackend::connect(bad, test_options()).unwrap_err();
        assert_eq!(err.code(), "STORE_INVALID_URL", "{bad:?}");
        one_line(&err);
    }
}

#[test]
fn a_stream_with_other_subjects_is_refused_and_nothing_is_changed() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let js = rt.block_on(async {
        let js = jetstream::new(
            async_nats::connect(server.url().replace("nats://", ""))
                .await
                .unwrap(),
        );
        js.create_stream(jetstream::stream::Config {
            name: "TROUPE".into(),
            subjects: vec!["elsewhere.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
        js
    });
    let err = NatsBackend::connect(&server.url(), test_options()).unwrap_err();
    assert_eq!(err.code(), "STORE_MISCONFIGURED");
    let text = one_line(&err);
    assert!(
        text.contains(&server.url()) && text.contains("elsewhere.>"),
        "{text}"
    );
    let subjects = rt.block_on(async {
        let mut stream = js.get_stream("TROUPE").await.unwrap();
        stream.info().await.unwrap().config.subjects.clone()
    });
    assert_eq!(subjects, vec!["elsewhere.>".to_owned()]);
}

#[test]
fn an_existing_stream_with_other_settings_is_used_as_it_is() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = jetstream::new(
            async_nats::connect(server.url().replace("nats://", ""))
                .await
                .unwrap(),
        );
        js.create_stream(jetstream::stream::Config {
            name: "TROUPE".into(),
            subjects: vec!["troupe.>".into()],
            storage: jetstream::stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .unwrap();
    });
    let f = Fixture::on(server, test_options());
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append_batch(vec![chunk(0), chunk(1), chunk(2)]).unwrap();
    w.flush_blocking().unwrap();
    w.append_batch(vec![chunk(3), chunk(4)]).unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    let replay = f.journal.read(&id("s")).unwrap();
    assert_eq!(replay.events.len(), 5);
    assert_eq!(replay.events[3].batch_last, Some(Seq(4)));
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    let storage = rt.block_on(async {
        let mut stream = js.get_stream("TROUPE").await.unwrap();
        stream.info().await.unwrap().config.storage
    });
    assert_eq!(storage, jetstream::stream::StorageType::Memory);
}

#[test]
fn a_new_store_is_created_with_file_storage_and_the_lease_ttl() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let Kind::Nats {
        backend, rt, js, ..
    } = &f.kind
    else {
        unreachable!()
    };
    assert_eq!(backend.lease_ttl(), test_options().lease_ttl);
    let config = rt.block_on(async {
        let mut stream = js.get_stream("TROUPE").await.unwrap();
        stream.info().await.unwrap().config.clone()
    });
    assert_eq!(config.storage, jetstream::stream::StorageType::File);
    assert_eq!(config.subjects, vec!["troupe.session.>".to_owned()]);
}

/// A message that is not a line of the log, published on a live session's subject by
/// something other than its writer: the writer's next append is fenced, nothing of it is
/// stored, and its error says what is last on the log (there is no next seq to name).
#[test]
fn a_foreign_message_that_is_no_line_fences_the_writer_with_a_clear_conflict() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("f"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    rt.block_on(async {
        js.publish("troupe.session.f", "not a line of any log".into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
    w.append_batch(vec![chunk(1), chunk(2)]).unwrap();
    let err = w.flush_blocking().unwrap_err();
    assert_eq!(err.code(), "JOURNAL_POISONED");
    let said = err.to_string();
    assert!(
        said.contains("expected next seq 1 but another writer's message, not a readable line"),
        "{said}"
    );
    assert!(!said.contains(&u64::MAX.to_string()), "{said}");
    // Nothing of the refused batch is stored: the header, event 0, the foreign message.
    assert_eq!(f.raw_lines("f").len(), 3);
}

#[test]
fn an_unfinished_creation_is_no_session_and_the_next_creator_replaces_it() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    // A creator that died after the header and one of its three first events.
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
    let err = f.journal.read(&id("half")).unwrap_err();
    assert_eq!(err.code(), "SESSION_NOT_FOUND");
    assert!(err.to_string().contains("unfinished"), "{err}");
    assert_eq!(
        f.journal.open(&id("half")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert!(f.journal.list(&mut |e| panic!("{e}")).unwrap().is_empty());
    // Creating the id again purges the leftovers and publishes a whole first append.
    let w = f.journal.create(SessionHeader::new(id("half"), 2)).unwrap();
    w.append_batch(vec![chunk(10), chunk(11)]).unwrap();
    w.flush_blocking().unwrap();
    let replay = f.journal.read(&id("half")).unwrap();
    assert_eq!(replay.header.created_at, 2);
    assert_eq!(replay.events.len(), 2);
    assert_eq!(f.raw_lines("half").len(), 3);
}

#[test]
fn a_message_that_is_not_one_line_is_corrupt() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let header = serde_json::to_vec(&SessionHeader::new(id("nl"), 1)).unwrap();
    let e0 = serde_json::to_vec(&chunk(0).into_event(Seq(0), 1)).unwrap();
    let e1 = serde_json::to_vec(&chunk(1).into_event(Seq(1), 1)).unwrap();
    let two = [e0.clone(), b"\n".to_vec(), e1].concat();
    f.put_raw("nl", &[header, e0, two]);
    let err = f.journal.read(&id("nl")).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_CORRUPT");
    assert!(err.to_string().contains("line 3"), "{err}");
}

#[test]
fn a_follower_position_from_another_process_is_honoured() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append_batch(vec![chunk(0), chunk(1)]).unwrap();
    w.flush_blocking().unwrap();
    let at = f
        .journal
        .read_each(&id("s"), &mut |_| {})
        .unwrap()
        .position();
    w.append(chunk(2)).unwrap();
    w.flush_blocking().unwrap();
    // A backend that never handed out `at` reads the whole session and skips what was read.
    let other = f.reconnect();
    let mut seqs = Vec::new();
    let tail = other
        .read_each_from(&id("s"), at, &mut |e| seqs.push(e.seq.0))
        .unwrap();
    assert_eq!(seqs, [2]);
    assert_eq!(tail.next.next_seq, Seq(3));
    let beyond = ScanPosition {
        offset: tail.next.offset + 10,
        next_seq: Seq(9),
    };
    let err = other
        .read_each_from(&id("s"), beyond, &mut |_| {})
        .unwrap_err();
    assert_eq!(err.code(), "JOURNAL_CORRUPT");
}

#[test]
fn a_renewed_lease_outlives_its_ttl_and_a_released_one_is_free_at_once() {
    let options = NatsOptions {
        lease_ttl: Duration::from_millis(1_500),
        ..test_options()
    };
    let Some(f) = Fixture::nats_with(options.clone()) else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    // Several TTLs later the lease is still held: renewals keep it.
    std::thread::sleep(Duration::from_millis(4_500));
    let other = f.reconnect();
    assert_eq!(other.open(&id("s")).unwrap_err().code(), "JOURNAL_LOCKED");
    w.append(chunk(1)).unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    let (w2, replay) = other.open(&id("s")).unwrap();
    assert_eq!(replay.events.len(), 2);
    drop(w2);
}

#[test]
fn a_killed_holders_lease_expires_and_every_acknowledged_event_survives() {
    let ttl = Duration::from_millis(1_500);
    let options = NatsOptions {
        lease_ttl: ttl,
        ..test_options()
    };
    let Some(f) = Fixture::nats_with(options.clone()) else {
        return;
    };
    let Kind::Nats { server, .. } = &f.kind else {
        unreachable!()
    };
    let url = server.url();
    let mut acked = Vec::new();
    for round in 0..3 {
        let mode = if round == 0 { "create" } else { "open" };
        let mut child = eventually(Duration::from_secs(30), || {
            let mut child = Command::new(CHILD)
                .args([&url, "crashy", mode, &ttl.as_millis().to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            match lines.next() {
                Some(Ok(line)) => Some((child, lines, line)),
                _ => {
                    // The previous child's lease has not expired yet: JOURNAL_LOCKED.
                    let mut stderr = String::new();
                    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr)
                        .unwrap();
                    assert!(stderr.contains("locked by host"), "{stderr}");
                    let _ = child.wait();
                    None
                }
            }
        });
        acked.push(child.2.parse::<u64>().unwrap());
        for _ in 0..20 {
            acked.push(child.1.next().unwrap().unwrap().parse().unwrap());
        }
        child.0.kill().unwrap(); // SIGKILL, mid-append.
        child.0.wait().unwrap();
        // The lease names the dead holder until its TTL passes.
        let err = f.journal.open(&id("crashy")).unwrap_err();
        assert_eq!(err.code(), "JOURNAL_LOCKED");
        assert!(
            err.to_string().contains(&format!("pid {}", child.0.id())),
            "{err}"
        );
        let replay = f.journal.read(&id("crashy")).unwrap();
        for seq in &acked {
            assert!(
                *seq < replay.events.len() as u64,
                "acknowledged seq {seq} lost"
            );
        }
        for (i, e) in replay.events.iter().enumerate() {
            assert_eq!(e.seq, Seq(i as u64));
        }
    }
    // After the TTL, this process takes the session over.
    let (w, replay) = eventually(Duration::from_secs(30), || {
        f.journal.open(&id("crashy")).ok()
    });
    assert!(replay.next_seq() > Seq(*acked.last().unwrap()));
    w.append(chunk(99)).unwrap();
    w.flush_blocking().unwrap();
}

/// Takes `key`'s lease away from its holder, as if it had expired and another writer had
/// taken it.
fn steal_lease(f: &Fixture, key: &str) {
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    rt.block_on(async {
        let kv = js.get_key_value("TROUPE_LEASES").await.unwrap();
        kv.purge(key).await.unwrap();
        let thief = json!({"owner": "thief", "host": "elsewhere", "pid": 1, "since": 0});
        kv.create(key, serde_json::to_vec(&thief).unwrap().into())
            .await
            .unwrap();
    });
}

#[test]
fn a_writer_whose_lease_was_taken_is_poisoned_with_lease_lost() {
    let options = NatsOptions {
        lease_ttl: Duration::from_millis(900),
        ..test_options()
    };
    let Some(f) = Fixture::nats_with(options) else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    steal_lease(&f, "s");
    let mut n = 1;
    let err = eventually(Duration::from_secs(30), || {
        n += 1;
        w.append(chunk(n)).and_then(|_| w.flush_blocking()).err()
    });
    assert_eq!(err.code(), "JOURNAL_LEASE_LOST", "{err}");
    assert_eq!(w.append(chunk(0)).unwrap_err().code(), "JOURNAL_LEASE_LOST");
    assert_eq!(w.flush_blocking().unwrap_err().code(), "JOURNAL_LEASE_LOST");
}

#[test]
fn a_stale_writer_is_fenced_by_the_expected_sequence() {
    let options = NatsOptions {
        lease_ttl: Duration::from_secs(30),
        ..test_options()
    };
    let Some(f) = Fixture::nats_with(options) else {
        return;
    };
    let stale = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    stale.append(chunk(0)).unwrap();
    stale.flush_blocking().unwrap();
    // Its lease is gone (it stalled past the TTL) and a new writer took the session over,
    // before the stale one noticed (its next renewal is 10 s away).
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    rt.block_on(async {
        let kv = js.get_key_value("TROUPE_LEASES").await.unwrap();
        kv.purge("s").await.unwrap();
    });
    let other = f.reconnect();
    let (fresh, replay) = other.open(&id("s")).unwrap();
    assert_eq!(replay.events.len(), 1);
    fresh.append(chunk(1)).unwrap();
    fresh.flush_blocking().unwrap();
    // The stale writer's append is refused by the fence: nothing of it is stored.
    stale.append_batch(vec![chunk(100), chunk(101)]).unwrap();
    let err = stale.flush_blocking().unwrap_err();
    assert_eq!(err.code(), "JOURNAL_POISONED");
    assert!(err.to_string().contains("expected next seq 1"), "{err}");
    let replay = other.read(&id("s")).unwrap();
    assert_eq!(replay.events.len(), 2);
    assert_eq!(replay.events[1].data, json!({"n": 1}));
    fresh.append(chunk(2)).unwrap();
    fresh.flush_blocking().unwrap();
}

#[test]
fn the_backend_is_used_and_dropped_inside_a_tokio_runtime() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let url = server.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        // Connecting, writing, reading and dropping from async code: the backend's calls
        // block only the calling task's thread, and its runtime is never nested.
        let journal = troupe_journal::Journal::with_backend(
            std::sync::Arc::new(NatsBackend::connect(&url, test_options()).unwrap()),
            std::sync::Arc::new(troupe_protocol::FixedClock::new(3)),
        );
        let writer = journal.create(SessionHeader::new(id("async"), 0)).unwrap();
        writer.append(chunk(0)).unwrap();
        writer.flush().await.unwrap();
        let reader = journal.clone();
        let events = tokio::spawn(async move { reader.read(&id("async")).unwrap().events.len() })
            .await
            .unwrap();
        assert_eq!(events, 1);
        writer.close().await.unwrap();
        drop(journal);
    });
    drop(server);
}

#[test]
fn a_writer_that_cannot_renew_within_the_ttl_is_poisoned_with_lease_lost() {
    let options = NatsOptions {
        lease_ttl: Duration::from_millis(900),
        append_timeout: Duration::from_secs(60),
        ..test_options()
    };
    let Some(mut f) = Fixture::nats_with(options) else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    // The server goes away: no renewal can succeed, and once the TTL has passed the writer
    // must stop rather than keep retrying its publish.
    f.server().unwrap().kill(0);
    w.append(chunk(1)).unwrap();
    let err = w.flush_blocking().unwrap_err();
    assert_eq!(err.code(), "JOURNAL_LEASE_LOST", "{err}");
    assert!(err.to_string().contains("TTL"), "{err}");
    assert_eq!(w.append(chunk(2)).unwrap_err().code(), "JOURNAL_LEASE_LOST");
}

/// Removes `key`'s lease entry, as the bucket's age limit does once its TTL passed unrenewed.
fn expire_lease(f: &Fixture, key: &str) {
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    rt.block_on(async {
        let kv = js.get_key_value("TROUPE_LEASES").await.unwrap();
        kv.purge(key).await.unwrap();
    });
}

/// The holder's lease (owner token, revision) as this fixture's backend holds it.
fn held(f: &Fixture, key: &str) -> Option<troupe_store_nats::HeldLease> {
    let Kind::Nats { backend, .. } = &f.kind else {
        unreachable!()
    };
    backend.held_lease(&id(key))
}

/// DESIGN §7 leases, the re-take: the server is gone for longer than the TTL (a cluster
/// electing the lease bucket's leader takes 4–9 s, a restart longer), so no renewal could be
/// made and the key expired meanwhile; nobody wrote the session since (its last message is
/// this writer's), so when the server is back the writer takes its lease again and goes on —
/// its append waited instead of failing with `JOURNAL_LEASE_LOST` — and holds the session
/// (another writer is `JOURNAL_LOCKED`). Fails without the re-take: the flush is
/// `JOURNAL_LEASE_LOST` once the TTL passed with the server down.
#[test]
fn a_lease_that_expired_while_the_server_was_down_is_taken_again_when_nobody_wrote_since() {
    let options = NatsOptions {
        lease_ttl: Duration::from_secs(3),
        append_timeout: Duration::from_secs(60),
        ..test_options()
    };
    let Some(mut f) = Fixture::nats_with(options) else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    let before = held(&f, "s").unwrap();
    f.server().unwrap().kill(0);
    // Past the TTL (and past the key's age limit, so the restarted server drops it).
    std::thread::sleep(Duration::from_millis(4_500));
    assert_eq!(held(&f, "s"), None, "a lease past its TTL is not valid");
    let appended = std::thread::spawn({
        let w = w.clone();
        move || {
            w.append(chunk(1))?;
            w.flush_blocking()
        }
    });
    f.server().unwrap().restart(0);
    appended.join().unwrap().unwrap();
    let after = held(&f, "s").expect("the lease is held again");
    assert_eq!(after.owner, before.owner);
    w.append(chunk(2)).unwrap();
    w.flush_blocking().unwrap();
    let replay = f.journal.read(&id("s")).unwrap();
    let seen: Vec<_> = replay.events.iter().map(|e| e.data["n"].clone()).collect();
    assert_eq!(seen, vec![json!(0), json!(1), json!(2)]);
    let err = f.reconnect().open(&id("s")).unwrap_err();
    assert_eq!(err.code(), "JOURNAL_LOCKED", "{err}");
}

/// The re-take is not made when the key expired and another writer wrote the session since
/// (its line is the subject's last): the stale writer's lease is lost
/// (`JOURNAL_LEASE_LOST`, saying why), nothing more of it is stored, and the key is left free.
/// And when the key expired with nobody writing since, it is taken again (no restart needed).
#[test]
fn an_expired_lease_is_taken_again_only_while_the_sessions_last_message_is_the_writers() {
    let options = NatsOptions {
        lease_ttl: Duration::from_millis(900),
        ..test_options()
    };
    let Some(f) = Fixture::nats_with(options) else {
        return;
    };
    // Nobody wrote since: taken again.
    let kept = f.journal.create(SessionHeader::new(id("kept"), 0)).unwrap();
    kept.append(chunk(0)).unwrap();
    kept.flush_blocking().unwrap();
    let first = held(&f, "kept").unwrap();
    expire_lease(&f, "kept");
    eventually(Duration::from_secs(20), || {
        held(&f, "kept").filter(|now| now.revision > first.revision)
    });
    kept.append(chunk(1)).unwrap();
    kept.flush_blocking().unwrap();
    // Another writer wrote since (its line is last), then its key expired too: lost.
    let stale = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    stale.append(chunk(0)).unwrap();
    stale.flush_blocking().unwrap();
    let theirs = chunk(1).into_event(Seq(1), 2_000);
    f.append_raw("s", &[serde_json::to_vec(&theirs).unwrap()]);
    expire_lease(&f, "s");
    let Kind::Nats { backend, .. } = &f.kind else {
        unreachable!()
    };
    let why = eventually(Duration::from_secs(20), || backend.lease_lost(&id("s")));
    assert!(why.contains("not this process's"), "{why}");
    stale.append(chunk(100)).unwrap();
    let err = stale.flush_blocking().unwrap_err();
    assert_eq!(err.code(), "JOURNAL_LEASE_LOST", "{err}");
    let other = f.reconnect();
    let replay = other.read(&id("s")).unwrap();
    let seen: Vec<_> = replay.events.iter().map(|e| e.data["n"].clone()).collect();
    assert_eq!(seen, vec![json!(0), json!(1)]);
    // The stale writer left the key free: the session opens at once.
    drop(other.open(&id("s")).unwrap());
}

#[test]
fn chains_cut_by_other_sessions_are_sent_on_and_stay_whole() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    // Two sessions written at once on one stream: a pipelined chain of one is cut whenever a
    // message of the other lands in between, and must go on from where it was cut.
    let writers: Vec<_> = ["left", "right"]
        .iter()
        .map(|name| f.journal.create(SessionHeader::new(id(name), 0)).unwrap())
        .collect();
    std::thread::scope(|s| {
        for w in &writers {
            s.spawn(move || {
                for round in 0..20u64 {
                    let drafts = (0..50).map(|i| chunk(round * 100 + i)).collect();
                    w.append_batch(drafts).unwrap();
                    w.flush_blocking().unwrap();
                }
            });
        }
    });
    for (name, w) in ["left", "right"].iter().zip(&writers) {
        assert_eq!(w.durable_seq(), Seq(1000));
        let replay = f.journal.read(&id(name)).unwrap();
        assert_eq!(replay.events.len(), 1000, "{name}");
        assert!(replay.torn_tail.is_none());
        for (i, e) in replay.events.iter().enumerate() {
            let round = i as u64 / 50;
            assert_eq!(
                e.data,
                json!({"n": round * 100 + i as u64 % 50}),
                "{name} {i}"
            );
        }
    }
}

/// `NatsBackend::hosting_worker` (failover, DESIGN §7): the live worker whose process holds a
/// session's lease. None without a registry (which it does not create), none for a free
/// session, none once the lease is released or the worker deregistered.
#[test]
fn the_worker_holding_a_lease_is_found_only_while_it_holds_it_and_is_registered() {
    use troupe_store_nats::{WORKER_VERSION, WorkerRecord, WorkerRegistration, WorkspaceIdentity};
    let Some(f) = Fixture::nats() else {
        return;
    };
    let Kind::Nats {
        backend, rt, js, ..
    } = &f.kind
    else {
        unreachable!("a NATS fixture")
    };
    let w = f.journal.create(SessionHeader::new(id("held"), 0)).unwrap();
    w.append(chunk(0)).unwrap();
    w.flush_blocking().unwrap();
    assert_eq!(backend.hosting_worker(&id("held")).unwrap(), None);
    assert!(
        rt.block_on(js.get_key_value(troupe_store_nats::WORKERS_BUCKET))
            .is_err(),
        "the registry was not created"
    );
    // A worker registered as this process (the lease's holder).
    let record = WorkerRecord {
        version: WORKER_VERSION,
        name: "w1".into(),
        host: rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
        pid: std::process::id(),
        pid_namespace: None,
        slots: 1,
        free: 1,
        workspace: WorkspaceIdentity {
            path: "/w".into(),
            git_top: None,
            head: None,
        },
        since: 0,
    };
    let registration = rt
        .block_on(WorkerRegistration::register(backend, record))
        .unwrap();
    let found = backend.hosting_worker(&id("held")).unwrap();
    assert_eq!(found.map(|w| w.name), Some("w1".to_owned()));
    assert_eq!(backend.hosting_worker(&id("free")).unwrap(), None);
    drop(w);
    assert_eq!(
        backend.hosting_worker(&id("held")).unwrap(),
        None,
        "released"
    );
    let (w, _) = f.journal.open(&id("held")).unwrap();
    rt.block_on(registration.deregister());
    assert_eq!(
        backend.hosting_worker(&id("held")).unwrap(),
        None,
        "deregistered"
    );
    drop(w);
}

/// A worker's name is taken over at once from a record of this host and pid namespace whose
/// pid names no process (a worker killed without deregistering), and only from such a
/// record: not while its process lives, not from another pid namespace (a container sharing
/// the host name), not from a record that names no namespace.
#[test]
fn a_dead_workers_name_is_taken_over_only_from_its_own_host_and_pid_namespace() {
    use troupe_store_nats::{
        WORKER_VERSION, WorkerRecord, WorkerRegistration, WorkspaceIdentity, pid_namespace,
    };
    // Entries outlive the test (they expire one lease TTL after they are written).
    let options = NatsOptions {
        lease_ttl: Duration::from_secs(60),
        ..test_options()
    };
    let Some(f) = Fixture::nats_with(options) else {
        return;
    };
    let Kind::Nats {
        backend, rt, js, ..
    } = &f.kind
    else {
        unreachable!("a NATS fixture")
    };
    let here = pid_namespace();
    assert!(here.is_some(), "Linux names the pid namespace");
    let record = |pid: u32, namespace: Option<String>| WorkerRecord {
        version: WORKER_VERSION,
        name: "w".into(),
        host: rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
        pid,
        pid_namespace: namespace,
        slots: 1,
        free: 1,
        workspace: WorkspaceIdentity {
            path: "/w".into(),
            git_top: None,
            head: None,
        },
        since: 0,
    };
    // A pid no process has: a child that ran and was reaped.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let put = |holder: &WorkerRecord| {
        rt.block_on(async {
            let kv = js
                .get_key_value(troupe_store_nats::WORKERS_BUCKET)
                .await
                .unwrap();
            kv.put("w", serde_json::to_vec(holder).unwrap().into())
                .await
                .unwrap();
        });
    };
    let register = || {
        rt.block_on(WorkerRegistration::register(
            backend,
            record(std::process::id(), here.clone()),
        ))
    };
    // The bucket exists once a worker registered; this one frees the name again.
    rt.block_on(register().unwrap().deregister());
    for (holder, why) in [
        (
            record(std::process::id(), here.clone()),
            "its process lives",
        ),
        (
            record(dead, Some("pid:[1]".to_owned())),
            "another pid namespace",
        ),
        (record(dead, None), "no namespace named"),
    ] {
        put(&holder);
        let refused = register().unwrap_err();
        assert_eq!(refused.code(), "WORKER_NAME_TAKEN", "{why}");
    }
    put(&record(dead, here.clone()));
    let taken = register().unwrap();
    rt.block_on(taken.deregister());
}

/// The number of consumers on the store's stream.
fn consumers(f: &Fixture) -> usize {
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    rt.block_on(async {
        let mut stream = js.get_stream("TROUPE").await.unwrap();
        stream.info().await.unwrap().state.consumer_count
    })
}

/// A read's consumer is deleted once the read is over: a stream takes at most 1,000 consumers
/// (nats-server 2.15's default), an ordered consumer left alone lives 30 s after its last
/// use, and a running Team reads its members' logs far more often than that — 1,100 reads in
/// a row all succeed, and none leaves a consumer behind.
#[test]
fn reads_leave_no_consumer_behind_so_a_thousand_in_a_row_succeed() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    let w = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    w.append_batch(vec![chunk(0), chunk(1)]).unwrap();
    w.flush_blocking().unwrap();
    for n in 0..1100 {
        let replay = f
            .journal
            .read(&id("s"))
            .unwrap_or_else(|e| panic!("read {n}: {e}"));
        assert_eq!(replay.events.len(), 2);
    }
    eventually(Duration::from_secs(30), || {
        (consumers(&f) == 0).then_some(())
    });
}
