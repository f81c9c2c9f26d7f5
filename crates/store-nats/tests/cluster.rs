//! A three-node cluster with a stream of three replicas, under faults: kill -9 of one server
//! during appends (they go on), of two (they fail with a clear error, nothing acknowledged is
//! lost, and once the servers are back a reopened writer goes on), and of the writer's server
//! the moment a lease renewal passes through it (the renewal is stored, its acknowledgement
//! lost: the writer recognises the entry as its own and keeps its lease).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Fixture, Kind};
use troupe_journal::SessionWriter;
use troupe_protocol::{ErrorCode, EventDraft, Seq, SessionHeader, SessionId};
use troupe_store_nats::NatsOptions;
use troupe_test_support::NatsServer;

fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn options(append_timeout: Duration) -> NatsOptions {
    NatsOptions {
        replicas: 3,
        lease_ttl: Duration::from_secs(30),
        request_timeout: Duration::from_secs(4),
        append_timeout,
        ..NatsOptions::default()
    }
}

/// A thread appending batches of one to three events and flushing each, recording the last
/// seq of every acknowledged flush, until stopped or a flush fails.
struct Appender {
    acked: Arc<Mutex<Vec<u64>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Option<troupe_journal::JournalError>>,
}

impl Appender {
    fn start(writer: SessionWriter) -> Self {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
            move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let drafts = (0..1 + n % 3)
                        .map(|i| EventDraft::new("assistant/chunk", json!({"n": n, "i": i})))
                        .collect();
                    let last = match writer.append_batch(drafts) {
                        Ok(events) => events.last().map(|e| e.seq.0),
                        Err(e) => return Some(e),
                    };
                    match writer.flush_blocking() {
                        Ok(_) => acked.lock().unwrap().extend(last),
                        Err(e) => return Some(e),
                    }
                }
                None
            }
        });
        Self {
            acked,
            stop,
            thread,
        }
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    fn wait_for(&self, n: usize, deadline: Duration) {
        let end = Instant::now() + deadline;
        while self.count() < n {
            assert!(!self.thread.is_finished(), "the appender stopped early");
            assert!(
                Instant::now() < end,
                "only {} flushes within {deadline:?}",
                self.count()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(self) -> (Vec<u64>, Option<troupe_journal::JournalError>) {
        self.stop.store(true, Ordering::SeqCst);
        let error = self.thread.join().unwrap();
        (self.acked.lock().unwrap().clone(), error)
    }
}

/// The index (0-based) of the node leading the stream's replicas.
fn stream_leader(f: &Fixture) -> usize {
    leader_of(f, "TROUPE")
}

/// The index (0-based) of the node leading stream `name`'s replicas, asked again while there
/// is none (an election after a restart).
fn leader_of(f: &Fixture, name: &str) -> usize {
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let leader = rt.block_on(async {
            let mut stream = js.get_stream(name).await.ok()?;
            let info = stream.info().await.ok()?;
            info.cluster.as_ref().and_then(|c| c.leader.clone())
        });
        if let Some(leader) = leader {
            return leader.trim_start_matches('n').parse::<usize>().unwrap() - 1;
        }
        assert!(Instant::now() < end, "stream {name} has no leader");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn check_log(f: &Fixture, acked: &[u64]) -> Seq {
    let replay = eventually_read(f);
    let len = replay.events.len() as u64;
    for seq in acked {
        assert!(
            *seq < len,
            "acknowledged seq {seq} lost (log has {len} events)"
        );
    }
    assert!(replay.torn_tail.is_none() || replay.events.len() as u64 > *acked.last().unwrap_or(&0));
    replay.next_seq()
}

fn eventually_read(f: &Fixture) -> troupe_journal::Replay {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        match f.journal.read(&id("s")) {
            Ok(replay) => return replay,
            Err(e) if Instant::now() < end => {
                eprintln!("read not possible yet: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn appends_go_on_when_one_of_three_servers_is_killed() {
    let Some(server) = NatsServer::cluster() else {
        return;
    };
    let mut f = Fixture::on(server, options(Duration::from_secs(60)));
    let writer = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    let appender = Appender::start(writer);
    appender.wait_for(20, Duration::from_secs(60));
    // The stream leader dies: the other two elect a new one and the appends go on.
    let leader = stream_leader(&f);
    f.server().unwrap().kill(leader);
    let before = appender.count();
    appender.wait_for(before + 40, Duration::from_secs(90));
    let (acked, error) = appender.stop();
    assert!(error.is_none(), "{error:?}");
    check_log(&f, &acked);
    f.server().unwrap().restart(leader);
}

/// Reads made right after the stream leader is killed succeed, each with every acknowledged
/// event: a read that fails before it delivered anything (the election, the client moving
/// to another node when it was on the leader) is made again instead of ending in `STORE_IO`.
#[test]
fn reads_go_on_when_the_stream_leader_is_killed() {
    let Some(server) = NatsServer::cluster() else {
        return;
    };
    let mut f = Fixture::on(server, options(Duration::from_secs(60)));
    let writer = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    let appender = Appender::start(writer);
    appender.wait_for(20, Duration::from_secs(60));
    let (acked, error) = appender.stop();
    assert!(error.is_none(), "{error:?}");
    let leader = stream_leader(&f);
    f.server().unwrap().kill(leader);
    for round in 0..5 {
        let replay = f
            .journal
            .read(&id("s"))
            .unwrap_or_else(|e| panic!("read {round} after the leader was killed: {e}"));
        let len = replay.events.len() as u64;
        assert!(
            acked.iter().all(|seq| *seq < len),
            "read {round} lost acknowledged events"
        );
    }
    f.server().unwrap().restart(leader);
}

#[test]
fn with_two_of_three_killed_appends_fail_clearly_and_a_reopen_goes_on_after_they_return() {
    let Some(server) = NatsServer::cluster() else {
        return;
    };
    let mut f = Fixture::on(server, options(Duration::from_secs(8)));
    let writer = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    let appender = Appender::start(writer.clone());
    appender.wait_for(20, Duration::from_secs(60));
    let leader = stream_leader(&f);
    let other = (leader + 1) % 3;
    f.server().unwrap().kill(leader);
    f.server().unwrap().kill(other);
    // No quorum: the next flush fails once its retries run out, and the writer is poisoned.
    let end = Instant::now() + Duration::from_secs(120);
    while !appender.thread.is_finished() {
        assert!(
            Instant::now() < end,
            "appends did not fail without a quorum"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (acked, error) = appender.stop();
    let error = error.expect("a flush failed");
    assert_eq!(error.code(), "JOURNAL_POISONED", "{error}");
    let text = error.to_string();
    assert!(
        text.contains("gave up after 8000 ms") && text.contains("nats://"),
        "{text}"
    );
    // The servers return: nothing acknowledged is lost, and a reopen goes on from there.
    f.server().unwrap().restart(leader);
    f.server().unwrap().restart(other);
    drop(writer);
    let next = check_log(&f, &acked);
    let end = Instant::now() + Duration::from_secs(90);
    let (writer, replay) = loop {
        match f.journal.open(&id("s")) {
            Ok(opened) => break opened,
            Err(e) => {
                assert!(Instant::now() < end, "no reopen: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    assert!(replay.next_seq() >= next);
    writer
        .append(EventDraft::new("assistant/chunk", json!({"after": true})))
        .unwrap();
    writer.flush_blocking().unwrap();
    drop(writer);
    let replay = f.journal.read(&id("s")).unwrap();
    assert_eq!(replay.events.last().unwrap().data, json!({"after": true}));
    assert!(replay.torn_tail.is_none());
}

#[test]
fn sessions_appending_side_by_side_on_a_cluster_stay_whole_and_the_stream_healthy() {
    // Multi-event rounds of several sessions at once, as a Team writes them: on a clustered
    // stream a message of one session lands between two of another's, which a chain fenced by
    // the last message id would turn into a critical write error of the whole stream.
    let Some(server) = NatsServer::cluster() else {
        return;
    };
    let f = Fixture::on(server, options(Duration::from_secs(60)));
    let writers: Vec<_> = (0..3)
        .map(|n| {
            f.journal
                .create(SessionHeader::new(id(&format!("s{n}")), 0))
                .unwrap()
        })
        .collect();
    let threads: Vec<_> = writers
        .into_iter()
        .map(|writer| {
            std::thread::spawn(move || {
                for round in 0..15u64 {
                    let drafts = (0..4)
                        .map(|i| {
                            EventDraft::new("assistant/chunk", json!({"round": round, "i": i}))
                        })
                        .collect();
                    writer.append_batch(drafts).unwrap();
                    writer.flush_blocking().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    for n in 0..3 {
        let replay = f.journal.read(&id(&format!("s{n}"))).unwrap();
        assert_eq!(replay.events.len(), 60);
        assert!(replay.torn_tail.is_none());
    }
    let w = f
        .journal
        .create(SessionHeader::new(id("after"), 0))
        .unwrap();
    w.append(EventDraft::new("assistant/chunk", json!({})))
        .unwrap();
    w.flush_blocking().unwrap();
}

/// The revision of session `key`'s lease entry, retried while the bucket elects a leader.
fn lease_revision(f: &Fixture, key: &str) -> u64 {
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let read = rt.block_on(async {
            let kv = js.get_key_value("TROUPE_LEASES").await?;
            Ok::<_, async_nats::Error>(kv.entry(key).await?.map(|e| e.revision))
        });
        match read {
            Ok(Some(revision)) => return revision,
            other => {
                assert!(Instant::now() < end, "no lease entry to read: {other:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The index of the node the backend's connection is on (by the client port its server
/// announced).
fn connected_node(f: &mut Fixture) -> usize {
    let Kind::Nats { backend, .. } = &f.kind else {
        unreachable!()
    };
    let port = backend.client().server_info().port;
    let server = f.server().unwrap();
    (0..server.len())
        .find(|i| server.port(*i) == port)
        .expect("connected to a node of the cluster")
}

/// Asks the leader of stream `name` to step down (another replica is elected).
fn step_down(f: &Fixture, name: &str) {
    let Kind::Nats { rt, js, .. } = &f.kind else {
        unreachable!()
    };
    rt.block_on(async {
        let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{name}");
        let _ = js.client().request(subject, "".into()).await;
    });
}

/// A thread on its own connection to node `via` that SIGKILLs process `victim` the moment it
/// sees a put on `subject` whose payload contains `needle`, then says so on the channel it
/// returns.
fn tripwire(
    url: String,
    subject: String,
    needle: String,
    victim: u32,
) -> std::sync::mpsc::Receiver<()> {
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (fired_tx, fired) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            use futures_util::StreamExt as _;
            let addrs = troupe_store_nats::parse_url(&url).unwrap();
            let client = async_nats::connect(addrs).await.unwrap();
            let mut puts = client.subscribe(subject).await.unwrap();
            client.flush().await.unwrap();
            ready_tx.send(()).unwrap();
            while let Some(message) = puts.next().await {
                if String::from_utf8_lossy(&message.payload).contains(&needle) {
                    let pid = rustix::process::Pid::from_raw(victim.cast_signed()).unwrap();
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    let _ = fired_tx.send(());
                    return;
                }
            }
        });
    });
    ready
        .recv_timeout(Duration::from_secs(60))
        .expect("the tripwire subscribed");
    fired
}

/// Issue 14, the lease lost-ack fix on a cluster: a renewal reaches the server and is stored,
/// but the server the writer is connected to is killed (-9) the moment the renewal passes
/// through it (a tripwire subscribed on another node sees the put), so its acknowledgement
/// never comes back. The writer reconnects to another node and renews again with the revision
/// it still knows, which its own stored renewal makes "wrong last sequence"; it must recognise
/// the entry as its own (its owner token) rather than take the lease for lost. The writer
/// never fails, keeps its owner token, and every acknowledged append is in the log.
#[test]
fn a_renewal_whose_ack_is_lost_when_its_server_is_killed_keeps_the_lease() {
    let Some(server) = NatsServer::cluster() else {
        return;
    };
    // TTL 12 s: a renewal every 4 s, and a reconnect plus a retry fit well inside it.
    let ttl = Duration::from_secs(12);
    let mut f = Fixture::on(
        server,
        NatsOptions {
            lease_ttl: ttl,
            ..options(Duration::from_secs(60))
        },
    );
    let writer = f.journal.create(SessionHeader::new(id("s"), 0)).unwrap();
    let appender = Appender::start(writer);
    appender.wait_for(5, Duration::from_secs(60));
    let backend = match &f.kind {
        Kind::Nats { backend, .. } => backend.clone(),
        Kind::Files { .. } => unreachable!(),
    };
    let held = backend
        .held_lease(&id("s"))
        .expect("the writer holds its lease");
    // The node to kill is the writer's; the bucket's leader must be another node, which
    // stores the renewal and whose acknowledgement then has no way back.
    let connected = connected_node(&mut f);
    let end = Instant::now() + Duration::from_secs(90);
    while leader_of(&f, "KV_TROUPE_LEASES") == connected {
        assert!(Instant::now() < end, "the bucket's leader never moved");
        step_down(&f, "KV_TROUPE_LEASES");
        std::thread::sleep(Duration::from_millis(500));
    }
    let via = (0..3).find(|i| *i != connected).unwrap();
    let victim = f.server().unwrap().pid(connected).unwrap();
    let fired = tripwire(
        f.server().unwrap().node_url(via),
        "$KV.TROUPE_LEASES.s".to_owned(),
        held.owner.clone(),
        victim,
    );
    fired
        .recv_timeout(Duration::from_secs(90))
        .expect("a renewal passed through the writer's server");
    f.server().unwrap().kill(connected);
    // The renewal caught by the kill times out (one period), the retry meets the writer's own
    // stored entry; two more renewals after that show the lease kept.
    let stored = lease_revision(&f, "s");
    let end = Instant::now() + Duration::from_secs(120);
    loop {
        let now = backend.held_lease(&id("s"));
        assert_eq!(
            now.as_ref().map(|h| &h.owner),
            Some(&held.owner),
            "the lease was lost"
        );
        if now.is_some_and(|h| h.revision > stored) && lease_revision(&f, "s") > stored {
            break;
        }
        assert!(
            Instant::now() < end,
            "the lease was never renewed after the kill"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let count = appender.count();
    appender.wait_for(count + 10, Duration::from_secs(120));
    f.server().unwrap().restart(connected);
    assert_eq!(
        backend.held_lease(&id("s")).map(|h| h.owner),
        Some(held.owner)
    );
    let (acked, error) = appender.stop();
    assert!(error.is_none(), "{error:?}");
    check_log(&f, &acked);
}
