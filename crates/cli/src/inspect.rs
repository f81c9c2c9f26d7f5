//! `troupe sessions` and `troupe log`: the stored sessions and one session's events, read
//! without locks (so they work while another process writes), printed for a person or as JSON.

use std::io::Write;

use anyhow::Context;
use troupe_journal::{Journal, JournalError};
use troupe_protocol::{Event, SessionId};
use troupe_session::{RoleProbe, SessionRole};

use crate::args::resolve_session;
use crate::exit::Failure;
use crate::output::{Stdout, count, eprint_line, escape_controls, format_time};

/// `troupe sessions [--json]`: every stored session, oldest first.
pub(crate) fn sessions(
    journal: &Journal,
    store: &crate::store::Store,
    json: bool,
) -> Result<(), Failure> {
    let listed = journal
        .list(&mut |e| {
            let e = e.to_string();
            eprint_line!(
                "troupe: note: not listed, its header cannot be read: {}",
                escape_controls(&e)
            );
        })
        .context("listing sessions")?;
    // Decision logs of approvals are records of a member's session, not sessions to open.
    let listed: Vec<_> = listed
        .into_iter()
        .filter(|l| !crate::approve::is_decision_log(&l.header))
        .collect();
    // Each log is read once (streamed, no lock): its own first `agent/config` settles the
    // role of a subagent child, and a log damaged past its header is still listed, with a
    // note naming the damage.
    let roles: Vec<SessionRole> = listed
        .iter()
        .map(|l| {
            let mut probe = RoleProbe::new(&l.header);
            if let Err(e) = journal.read_each(&l.header.id, &mut |event| probe.observe(&event)) {
                let e = e.to_string();
                eprint_line!(
                    "troupe: note: session {} is listed, but its log cannot be read in full: {}",
                    escape_controls(l.header.id.as_str()),
                    escape_controls(&e)
                );
            }
            probe.role()
        })
        .collect();
    let mut out = Stdout::lock();
    if json {
        let rows: Vec<_> = listed
            .iter()
            .zip(&roles)
            .map(|(l, role)| {
                serde_json::json!({
                    "id": l.header.id.as_str(),
                    "parent": l.header.parent_session.as_ref().map(SessionId::as_str),
                    "createdAt": l.header.created_at,
                    "cwd": l.header.cwd,
                    "role": role.as_str(),
                    // Lossy rather than a serialization error for a non-UTF-8 home.
                    "path": l.location.to_string_lossy(),
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(rows)).context("writing output")?;
        return finish(out);
    }
    if listed.is_empty() {
        // A note, not output: stdout stays empty, so `troupe sessions | wc -l` counts sessions.
        let place = store.place();
        let on = if store.is_nats() { "on" } else { "in" };
        eprint_line!("troupe: no sessions {on} {}", escape_controls(&place));
        return finish(out);
    }
    let rows: Vec<[String; 5]> = listed
        .iter()
        .zip(&roles)
        .map(|(l, role)| {
            let h = &l.header;
            [
                escape_controls(h.id.as_str()).into_owned(),
                escape_controls(h.parent_session.as_ref().map_or("-", SessionId::as_str))
                    .into_owned(),
                format_time(h.created_at),
                role.as_str().to_owned(),
                escape_controls(h.cwd.as_deref().unwrap_or("-")).into_owned(),
            ]
        })
        .collect();
    let header = ["ID", "PARENT", "CREATED", "ROLE", "CWD"].map(str::to_owned);
    // Each column as wide as its widest cell, so the header and every row line up.
    let mut widths = [0usize; 4];
    for row in std::iter::once(&header).chain(&rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        if out.is_closed() {
            break;
        }
        let [id, parent, created, role, cwd] = row;
        let [w_id, w_parent, w_created, w_role] = widths;
        writeln!(
            out,
            "{id:<w_id$}  {parent:<w_parent$}  {created:<w_created$}  {role:<w_role$}  {cwd}"
        )
        .context("writing output")?;
    }
    finish(out)
}

/// Flushes command output; a reader that went away is not a failure.
fn finish(mut out: Stdout) -> Result<(), Failure> {
    out.flush().context("writing output")?;
    Ok(())
}

/// `troupe log`: the events from seq `from` on; with `follow`, then every event appended, as
/// it is stored ([`crate::follow::follow`]).
pub(crate) fn log(
    journal: &Journal,
    session: &str,
    json: bool,
    from: u64,
    follow: bool,
) -> Result<(), Failure> {
    let id = resolve_session(journal, session)?;
    if follow {
        let line = |event: &Event| -> anyhow::Result<String> {
            if json {
                Ok(serde_json::to_string(event)?)
            } else {
                Ok(human_line(event))
            }
        };
        return crate::follow::follow(journal, &id, from, &line, &|e| damaged_log(&id, e));
    }
    let mut out = Stdout::lock();
    let mut shown = 0u64;
    let mut write_error: Option<anyhow::Error> = None;
    // Stream the file: memory stays bounded by the longest line, whatever the log's size.
    let read = journal.read_each(&id, &mut |event| {
        if event.seq.0 < from || write_error.is_some() || out.is_closed() {
            return;
        }
        let line = if json {
            serde_json::to_string(&event).map_err(anyhow::Error::from)
        } else {
            Ok(human_line(&event))
        };
        match line.and_then(|line| writeln!(out, "{line}").map_err(anyhow::Error::from)) {
            Ok(()) => shown += 1,
            Err(e) => write_error = Some(e.context("writing output")),
        }
    });
    if let Some(e) = write_error {
        return Err(e.into());
    }
    // The events before any damage are out before the line that names it.
    finish(out)?;
    let summary = read.map_err(|e| damaged_log(&id, e))?;
    if let Some(torn) = &summary.torn_tail {
        let reason = escape_controls(&torn.reason);
        eprint_line!(
            "troupe: note: {} bytes after line {} are an unfinished write ({reason}); they are not shown",
            torn.bytes,
            torn.line.saturating_sub(1),
        );
    }
    if shown == 0 {
        eprint_line!(
            "troupe: note: no events at or after seq {from} (the log has {})",
            count(summary.next_seq.0, "event")
        );
    }
    Ok(())
}

/// A log damaged at the journal level (any damaged line but an unfinished final write, or a
/// corrupt header; REFERENCE a.9) is a failure of the work (exit 1), as for `troupe team
/// show/verify`: one line saying where the shown events stop, then the journal's file, line,
/// byte offset and reason. Every other read error keeps its code (an unknown session, an
/// unsupported file: bad input, exit 2).
fn damaged_log(id: &SessionId, error: JournalError) -> Failure {
    match &error {
        JournalError::Corrupt { line, .. } => {
            // Line 1 is the header; line n ≥ 2 holds seq n − 2.
            let at = if *line >= 2 {
                format!(
                    "at seq {}, so only the events before it are shown",
                    line - 2
                )
            } else {
                "at its header, so no event is shown".to_owned()
            };
            Failure::work(
                anyhow::Error::new(error)
                    .context(format!("the log of session {id} is damaged {at}")),
            )
        }
        _ => error.into(),
    }
}

/// `seq  time  type  data`, with the payload compacted to one line of at most 160 chars and
/// control characters escaped.
fn human_line(event: &Event) -> String {
    const MAX: usize = 160;
    let data = event.data.to_string();
    let mut data = escape_controls(&data).into_owned();
    if data.chars().count() > MAX {
        data = data.chars().take(MAX - 1).collect::<String>() + "…";
    }
    let label = match (event.is_known(), event.ignorable) {
        (true, _) => "",
        (false, true) => " (unknown type, ignorable)",
        (false, false) => " (unknown type)",
    };
    format!(
        // Both time forms fit in 24 columns (`t=18446744073709551615ms` is the longest).
        "{:>6}  {:<24}  {:<24} {data}{label}",
        event.seq.0,
        format_time(event.time),
        escape_controls(&event.kind),
    )
}
