//! Test helper (not installed): appends to a session on a NATS store until killed, printing
//! the last seq of each batch once its flush returned — so a test can kill it with SIGKILL and
//! check that every acknowledged event survived, and that its lease expires.
//!
//! Usage: `troupe-store-nats-child URL SESSION create|open LEASE_TTL_MS`.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use troupe_journal::Journal;
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
    let [_, url, id, mode, ttl] = args.as_slice() else {
        return Err("usage: troupe-store-nats-child URL SESSION create|open LEASE_TTL_MS".into());
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
    let mut stdout = std::io::stdout();
    for n in 0u64.. {
        let size = 1 + (n % 3) as usize;
        let drafts = (0..size)
            .map(|i| EventDraft::new("assistant/chunk", json!({"n": n, "i": i})))
            .collect();
        let events = writer.append_batch(drafts)?;
        writer.flush_blocking()?;
        if let Some(last) = events.last() {
            writeln!(stdout, "{}", last.seq)?;
            stdout.flush()?;
        }
    }
    Ok(())
}
