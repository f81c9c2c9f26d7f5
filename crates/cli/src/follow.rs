//! `troupe log SESSION --follow`: prints a session's events, then every event appended, until
//! interrupted (or until the reader of stdout goes away). On a store that pushes appends
//! (NATS: an ordered consumer, [`Journal::follow`]) it waits for the push — nothing polls; on
//! the JSONL files it reads what was appended every [`FILE_INTERVAL`]. Either way an event is
//! printed once its whole batch is stored, never half a batch. Reads only: no lock, no write.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use troupe_journal::{Journal, JournalError, Wake};
use troupe_protocol::{Event, SessionId};

use crate::exit::Failure;
use crate::output::Stdout;

/// How often a followed session file is read again (the files cannot push).
pub(crate) const FILE_INTERVAL: Duration = Duration::from_millis(200);

/// Prints the events of `id` from seq `from` on, each as `line` renders it, and goes on
/// printing what is appended.
///
/// # Errors
/// `SESSION_NOT_FOUND` when the session does not exist when the follow starts (bad input);
/// a damaged log or a failed read (`damaged` maps it: the events before the damage are
/// printed first); a failed write to stdout.
pub(crate) fn follow(
    journal: &Journal,
    id: &SessionId,
    from: u64,
    line: &dyn Fn(&Event) -> anyhow::Result<String>,
    damaged: &dyn Fn(JournalError) -> Failure,
) -> Result<(), Failure> {
    let mut printer = Printer {
        out: Stdout::lock(),
        from,
        line,
        error: None,
    };
    let (tx, wakes) = std::sync::mpsc::channel::<()>();
    let wake: Wake = Arc::new(move || {
        let _ = tx.send(());
    });
    match journal.follow(id, wake)? {
        Some(mut live) => loop {
            let polled = live.poll(&mut |event| printer.print(&event));
            if printer.finish()? {
                return Ok(());
            }
            polled.map_err(damaged)?;
            // Blocks until the store pushed something (the follow holds the sender).
            if wakes.recv().is_err() {
                return Ok(());
            }
            while wakes.try_recv().is_ok() {}
        },
        None => {
            let summary = journal.read_each(id, &mut |event| printer.print(&event));
            let closed = printer.finish()?;
            let mut at = summary.map_err(damaged)?.position();
            if closed {
                return Ok(());
            }
            loop {
                std::thread::sleep(FILE_INTERVAL);
                let tail = journal.read_each_from(id, at, &mut |event| printer.print(&event));
                let closed = printer.finish()?;
                at = tail.map_err(damaged)?.next;
                if closed {
                    return Ok(());
                }
            }
        }
    }
}

/// Prints followed events from a seq on.
struct Printer<'a> {
    out: Stdout,
    from: u64,
    line: &'a dyn Fn(&Event) -> anyhow::Result<String>,
    /// The first failed write; nothing more is printed after it.
    error: Option<anyhow::Error>,
}

impl Printer<'_> {
    fn print(&mut self, event: &Event) {
        if event.seq.0 < self.from || self.error.is_some() || self.out.is_closed() {
            return;
        }
        let written = (self.line)(event)
            .and_then(|text| writeln!(self.out, "{text}").map_err(anyhow::Error::from));
        if let Err(e) = written {
            self.error = Some(e.context("writing output"));
        }
    }

    /// Flushes what was printed; `true` once the reader of stdout has gone away.
    ///
    /// # Errors
    /// A failed write.
    fn finish(&mut self) -> Result<bool, Failure> {
        if let Some(e) = self.error.take() {
            return Err(e.into());
        }
        self.out.flush().context("writing output")?;
        Ok(self.out.is_closed())
    }
}
