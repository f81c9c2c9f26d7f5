//! Test helper for the journal's crash tests (not part of the `troupe` command).
//!
//! `troupe-journal-crash-child SESSIONS_DIR SESSION_ID create|open` appends events in a loop
//! and prints each durable seq on stdout as soon as its flush returned. The parent test kills
//! it with SIGKILL at random moments and checks that every printed seq survived.
//!
//! Every 8th event is a `turn/end`, the rest `assistant/chunk` with a ~200-byte payload that
//! repeats the seq, so a half-written line can never parse as a valid event of the right seq.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use troupe_journal::{Journal, JsonlBackend};
use troupe_protocol::{Clock, EventDraft, SessionHeader, SessionId, SystemClock, event_types};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crash-child: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: troupe-journal-crash-child SESSIONS_DIR SESSION_ID create|open";
    let dir = PathBuf::from(args.next().ok_or(usage)?);
    let id = SessionId::new(args.next().ok_or(usage)?)?;
    let mode = args.next().ok_or(usage)?;
    let journal = Journal::with_backend(Arc::new(JsonlBackend::new(dir)), Arc::new(SystemClock));
    let writer = match mode.as_str() {
        "create" => journal.create(SessionHeader::new(id, SystemClock.now_ms()))?,
        "open" => journal.open(&id)?.0,
        _ => return Err(usage.into()),
    };
    let stdout = std::io::stdout();
    let filler = "x".repeat(160);
    loop {
        let seq = writer.next_seq().0;
        let draft = if seq % 8 == 7 {
            EventDraft::new(event_types::TURN_END, json!({"n": seq}))
        } else {
            EventDraft::new(
                event_types::ASSISTANT_CHUNK,
                json!({"n": seq, "text": format!("{seq}:{filler}")}),
            )
        };
        writer.append(draft)?;
        let durable = writer.flush_blocking()?;
        let mut out = stdout.lock();
        writeln!(out, "{}", durable.0 - 1)?;
        out.flush()?;
    }
}
