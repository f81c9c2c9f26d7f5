//! Test helper (not installed): appends to a session on a NATS store until killed, printing
//! the last seq of each batch once its flush returned — so a test can kill it with SIGKILL and
//! check that every acknowledged event survived, and that its lease expires. With `FLUSHERS`
//! above 1, that many threads append and flush at once (the writer then keeps rounds in
//! flight together), each printing its own batches.
//!
//! Usage: `troupe-store-nats-child URL SESSION create|open LEASE_TTL_MS [FLUSHERS]`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use troupe_journal::{Journal, SessionWriter};
use troupe_protocol::{EventDraft, SessionHeader, SessionId, SystemClock};
use troupe_store_nats::{NatsBackend, NatsOptions};

fn main() {
    if let Err(e) = run() {
        eprintln!("troupe-store-nats-child: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, id, mode, ttl, flushers) = match args.as_slice() {
        [_, url, id, mode, ttl] => (url, id, mode, ttl, 1),
        [_, url, id, mode, ttl, flushers] => (url, id, mode, ttl, flushers.parse()?),
        _ => {
            return Err(
                "usage: troupe-store-nats-child URL SESSION create|open LEASE_TTL_MS [FLUSHERS]"
                    .into(),
            );
        }
    };
    let options = NatsOptions {
        lease_ttl: Duration::from_millis(ttl.parse()?),
        ..NatsOptions::default()
    };
    let journal = Journal::with_backend(
        Arc::new(NatsBackend::connect(url, options)?),
        Arc::new(SystemClock),
    );
    let id = SessionId::new(id.as_str())?;
    let writer = match mode.as_str() {
        "create" => journal.create(SessionHeader::new(id, 0))?,
        _ => journal.open(&id)?.0,
    };
    let stdout = Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..flushers)
            .map(|t| {
                let (writer, stdout) = (&writer, &stdout);
                s.spawn(move || append_until_killed(writer, stdout, t))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "a flusher panicked")?)
            .collect::<Result<Vec<()>, Box<dyn std::error::Error + Send + Sync>>>()
            .map(|_| ())
            .map_err(|e| e.to_string())
    })?;
    Ok(())
}

fn append_until_killed(
    writer: &SessionWriter,
    stdout: &Mutex<std::io::Stdout>,
    thread: u64,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    for n in 0u64.. {
        let size = 1 + ((n + thread) % 3) as usize;
        let drafts = (0..size)
            .map(|i| EventDraft::new("assistant/chunk", json!({"t": thread, "n": n, "i": i})))
            .collect();
        let events = writer.append_batch(drafts)?;
        writer.flush_blocking()?;
        if let Some(last) = events.last() {
            let mut out = stdout.lock().map_err(|_| "stdout lock poisoned")?;
            writeln!(out, "{}", last.seq)?;
            out.flush()?;
        }
    }
    Ok(())
}
