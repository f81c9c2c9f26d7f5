//! Acked ⇒ durable under `kill -9`, and the cross-process lock.
//!
//! A child process (`troupe-journal-crash-child`) appends and flushes in a loop, printing each
//! seq once its flush returned. The parent SIGKILLs it at random moments, replays the file, and
//! checks that every printed seq is there, seqs are contiguous and no line is half-parsed; then
//! it starts the next child on the same session (which repairs any torn tail and continues).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use troupe_journal::{Journal, read_path};
use troupe_protocol::{ErrorCode, SessionId};

const CHILD: &str = env!("CARGO_BIN_EXE_troupe-journal-crash-child");

fn spawn_child(dir: &Path, id: &str, mode: &str) -> (Child, mpsc::Receiver<u64>) {
    let mut child = Command::new(CHILD)
        .args([dir.to_str().unwrap(), id, mode])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // A line is only complete (and counted) once its newline arrived.
            if tx.send(line.trim().parse::<u64>().unwrap()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

#[test]
fn every_acknowledged_event_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let id = "crashy";
    let path = dir.path().join(format!("{id}.jsonl"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut acked: Vec<u64> = Vec::new();
    let mut kills = 0;
    for round in 0..24 {
        let mode = if round == 0 { "create" } else { "open" };
        let (mut child, rx) = spawn_child(dir.path(), id, mode);
        // Let it make some progress first, then kill it at a random moment.
        let first = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("child made no progress");
        acked.push(first);
        std::thread::sleep(Duration::from_micros(rng.random_range(0..20_000)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        acked.extend(rx.try_iter());

        let replay = read_path(&path).unwrap();
        let seqs: Vec<u64> = replay.events.iter().map(|e| e.seq.0).collect();
        assert!(
            seqs.iter().enumerate().all(|(i, s)| *s == i as u64),
            "round {round}: seqs not contiguous"
        );
        for e in &replay.events {
            assert_eq!(
                e.data["n"], e.seq.0,
                "round {round}: payload does not match its seq"
            );
        }
        let max_acked = *acked.iter().max().unwrap();
        assert!(
            (max_acked as usize) < replay.events.len(),
            "round {round}: acked seq {max_acked} missing; replay has {} events",
            replay.events.len()
        );
    }
    assert!(kills >= 20);
    // Every acknowledgement was distinct and in order across all rounds.
    assert!(acked.windows(2).all(|w| w[0] < w[1]), "acks went backwards");
}

#[test]
fn a_second_process_opening_the_session_gets_journal_locked() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, rx) = spawn_child(dir.path(), "shared", "create");
    rx.recv_timeout(Duration::from_secs(30))
        .expect("child made no progress");
    let backend_journal = Journal::with_backend(
        std::sync::Arc::new(troupe_journal::JsonlBackend::new(dir.path())),
        std::sync::Arc::new(troupe_protocol::SystemClock),
    );
    let err = backend_journal
        .open(&SessionId::new("shared").unwrap())
        .unwrap_err();
    assert_eq!(err.code(), "JOURNAL_LOCKED");
    assert!(
        err.to_string().contains("locked by another process"),
        "{err}"
    );
    // Reading while the other process writes works.
    assert!(
        !backend_journal
            .read(&SessionId::new("shared").unwrap())
            .unwrap()
            .events
            .is_empty()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // Once the owner is gone the lock is released with it.
    assert!(
        backend_journal
            .open(&SessionId::new("shared").unwrap())
            .is_ok()
    );
}
