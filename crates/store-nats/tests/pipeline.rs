//! Group-commit rounds kept in flight together on a standalone server (`NatsOptions::
//! pipeline_depth`): many flushers at once, chains cut by another session, the writer killed
//! with rounds in flight, the server killed and restarted under them. In every case the log
//! holds every acknowledged event, contiguous, each journal batch whole.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::sync::Arc;

use serde_json::{Value, json};
use support::{Fixture, Kind, test_options};
use troupe_journal::{Journal, SessionWriter};
use troupe_protocol::{Event, EventDraft, Seq, SessionHeader, SessionId, SystemClock};
use troupe_store_nats::{NatsBackend, NatsOptions};
use troupe_test_support::NatsServer;

const CHILD: &str = env!("CARGO_BIN_EXE_troupe-store-nats-child");
const FLUSHERS: u64 = 8;

fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

/// Batch `n` of flusher `t`: 1–3 events (as the child writes them).
fn batch(t: u64, n: u64) -> Vec<EventDraft> {
    (0..1 + (n + t) % 3)
        .map(|i| EventDraft::new("assistant/chunk", json!({"t": t, "n": n, "i": i})))
        .collect()
}

/// The batches of a replayed log of flushers' batches, checked: seqs contiguous from 0 and
/// every batch whole (its events consecutive, `i` = 0, 1, …, as many as [`batch`] makes).
/// Returns each batch's flusher and number, in log order.
fn whole_batches(events: &[Event]) -> Vec<(u64, u64)> {
    let field = |e: &Event, k: &str| e.data.get(k).and_then(Value::as_u64).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at < events.len() {
        let (t, n) = (field(&events[at], "t"), field(&events[at], "n"));
        let size = (1 + (n + t) % 3) as usize;
        assert!(at + size <= events.len(), "batch {t}/{n} cut at the end");
        for (i, e) in events[at..at + size].iter().enumerate() {
            assert_eq!(e.seq, Seq((at + i) as u64), "seqs contiguous");
            assert_eq!(
                e.data,
                json!({"t": t, "n": n, "i": i}),
                "batch {t}/{n} whole"
            );
        }
        out.push((t, n));
        at += size;
    }
    out
}

/// [`whole_batches`], and each flusher's batches in order without a gap or a repeat. Returns
/// each flusher's number of batches.
fn check_log(events: &[Event]) -> BTreeMap<u64, u64> {
    let mut next: BTreeMap<u64, u64> = BTreeMap::new();
    for (t, n) in whole_batches(events) {
        let expected = next.entry(t).or_insert(0);
        assert_eq!(n, *expected, "flusher {t}: batch {n} out of order");
        *expected += 1;
    }
    next
}

#[test]
fn many_flushers_keep_rounds_in_flight_and_chains_cut_by_another_session_stay_whole() {
    let Some(f) = Fixture::nats() else {
        return;
    };
    // Two sessions written at once on one stream, each by eight flushers: rounds of one go
    // out while earlier ones await their acknowledgement, and the other session's messages
    // land between them (the chain is cut and sent on from there).
    let writers: Vec<SessionWriter> = ["left", "right"]
        .iter()
        .map(|name| f.journal.create(SessionHeader::new(id(name), 0)).unwrap())
        .collect();
    const BATCHES: u64 = 60;
    std::thread::scope(|s| {
        for w in &writers {
            for t in 0..FLUSHERS {
                s.spawn(move || {
                    for n in 0..BATCHES {
                        w.append_batch(batch(t, n)).unwrap();
                        w.flush_blocking().unwrap();
                    }
                });
            }
        }
    });
    let mut pipelined = 0;
    for (name, w) in ["left", "right"].iter().zip(&writers) {
        let replay = f.journal.read(&id(name)).unwrap();
        assert!(replay.torn_tail.is_none(), "{name}");
        assert_eq!(w.durable_seq(), Seq(replay.events.len() as u64), "{name}");
        let batches = check_log(&replay.events);
        assert_eq!(batches.len() as u64, FLUSHERS, "{name}");
        assert!(
            batches.values().all(|n| *n == BATCHES),
            "{name}: {batches:?}"
        );
        pipelined += w.stats().pipelined_rounds;
    }
    assert!(
        pipelined > 0,
        "no round was sent while another was in flight"
    );
}

#[test]
fn a_pipeline_depth_of_one_sends_no_round_before_the_last_is_stored() {
    let Some(f) = Fixture::nats_with(NatsOptions {
        pipeline_depth: 1,
        ..test_options()
    }) else {
        return;
    };
    let w = f
        .journal
        .create(SessionHeader::new(id("plain"), 0))
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..FLUSHERS {
            let w = &w;
            s.spawn(move || {
                for n in 0..20 {
                    w.append_batch(batch(t, n)).unwrap();
                    w.flush_blocking().unwrap();
                }
            });
        }
    });
    assert_eq!(w.stats().pipelined_rounds, 0);
    let batches = check_log(&f.journal.read(&id("plain")).unwrap().events);
    assert!(batches.values().all(|n| *n == 20), "{batches:?}");
}

/// Every seq the child printed (its flush returned) survives a SIGKILL of it, with rounds of
/// eight flushers in flight at the kill; what it leaves is a valid log (at most an unfinished
/// final batch, deleted by the next open), which the next writer continues.
#[test]
fn kill_9_of_a_writer_with_rounds_in_flight_loses_no_acknowledged_event() {
    let ttl = Duration::from_millis(1_500);
    let Some(f) = Fixture::nats_with(NatsOptions {
        lease_ttl: ttl,
        ..test_options()
    }) else {
        return;
    };
    let Kind::Nats { server, .. } = &f.kind else {
        unreachable!()
    };
    let url = server.url();
    let mut acked = Vec::new();
    for (round, lines) in [(0, 40), (1, 97), (2, 301)] {
        let mode = if round == 0 { "create" } else { "open" };
        let (mut child, mut out) = eventually(Duration::from_secs(30), || {
            let mut child = Command::new(CHILD)
                .args([&url, "crashy", mode, &ttl.as_millis().to_string(), "8"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
            match out.next() {
                Some(Ok(line)) => {
                    acked.push(line.parse::<u64>().unwrap());
                    Some((child, out))
                }
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
        for _ in 0..lines {
            acked.push(out.next().unwrap().unwrap().parse().unwrap());
        }
        child.kill().unwrap(); // SIGKILL, with flushes in flight.
        child.wait().unwrap();
        let replay = f.journal.read(&id("crashy")).unwrap();
        for seq in &acked {
            assert!(
                *seq < replay.events.len() as u64,
                "acknowledged seq {seq} lost (round {round})"
            );
        }
        // (Each child's flushers number their batches from 0 again: no order check.)
        whole_batches(&replay.events);
    }
    let (w, replay) = eventually(Duration::from_secs(30), || {
        f.journal.open(&id("crashy")).ok()
    });
    assert!(replay.next_seq() > Seq(*acked.iter().max().unwrap()));
    w.append_batch(batch(0, 0)).unwrap();
    w.flush_blocking().unwrap();
}

/// The server killed (SIGKILL) while eight flushers keep rounds in flight, and started again
/// on its store a moment later: the writer resolves what was in flight from the subject's last
/// message and sends the rest again, so every flush either returns once its events are stored
/// or fails; none returns for an event that is not in the log, and nothing is stored twice.
#[test]
fn a_server_killed_and_restarted_under_rounds_in_flight_loses_nothing_acknowledged() {
    let Some(mut server) = NatsServer::single() else {
        return;
    };
    let journal = Journal::with_backend(
        Arc::new(NatsBackend::connect(&server.url(), test_options()).unwrap()),
        Arc::new(SystemClock),
    );
    let w = journal
        .create(SessionHeader::new(id("restart"), 0))
        .unwrap();
    let acked: Mutex<Vec<Seq>> = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..FLUSHERS {
            let (w, acked, failures) = (&w, &acked, &failures);
            s.spawn(move || {
                for n in 0.. {
                    if start.elapsed() > Duration::from_secs(4) {
                        return;
                    }
                    let flushed = w.append_batch(batch(t, n)).and_then(|events| {
                        w.flush_blocking()?;
                        Ok(events)
                    });
                    match flushed {
                        Ok(events) => acked.lock().unwrap().push(events.last().unwrap().seq),
                        Err(e) => return failures.lock().unwrap().push(e.to_string()),
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(700));
        assert!(
            !acked.lock().unwrap().is_empty(),
            "nothing acknowledged before the kill"
        );
        server.kill(0);
        std::thread::sleep(Duration::from_millis(500));
        server.restart(0);
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "flushes failed: {failures:?}");
    let replay = journal.read(&id("restart")).unwrap();
    assert!(replay.torn_tail.is_none());
    assert_eq!(w.durable_seq(), Seq(replay.events.len() as u64));
    for seq in acked.into_inner().unwrap() {
        assert!(
            seq.0 < replay.events.len() as u64,
            "acknowledged {seq} lost"
        );
    }
    assert_eq!(check_log(&replay.events).len() as u64, FLUSHERS);
    assert!(w.stats().pipelined_rounds > 0);
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
