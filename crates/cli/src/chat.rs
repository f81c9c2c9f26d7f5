//! `troupe chat [SESSION]`: talk to a Team line by line (README "Talking to a running team").
//!
//! A line goes to the Lead, `@name text` to a teammate — each sent as `troupe send --wakeup`
//! sends it ([`crate::send::deliver`]: through the running process's control socket, or
//! appended to the stopped Team's log), so the member runs a turn with it. `/board` prints the
//! task board, `/agents` the roster (live statuses from the running process, else as stored),
//! `/approve [REQUEST] [--deny|--always]` decides an approval request of any member (without
//! REQUEST: the one pending request, or the list when there are several; decided through its
//! decision log as `troupe approve` does, by `chat`), `/help` the commands, `/quit` leaves
//! (the Team goes on). Ctrl-C asks the running process (its control socket) to stop every
//! running turn, keeping inboxes — as a Ctrl-C at its own terminal does — so the Team stops
//! and stays resumable; Ctrl-D does the same and leaves: the Team is parked, and `troupe
//! resume` continues it. Meanwhile the members' answers, tool calls and approval requests
//! are printed above the prompt as their logs grow (the logs
//! are followed as `troupe log --follow` follows one: read again every
//! [`crate::follow::FILE_INTERVAL`], whole batches only; a teammate's log is followed from
//! the moment its `team/member` record appears).
//!
//! Chat writes nothing but the messages it sends (their durability is `troupe send`'s) and the
//! decisions of `/approve` (their durability is the decision log's: created whole or not at
//! all, see `troupe_runtime::approval`); an interrupt is the running process's Ctrl-C, whose
//! records are its own. `/quit` (or the end of a stdin that is not a terminal) changes nothing:
//! a running Team goes on, a stopped one stays as it was.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, anyhow};
use rustyline::ExternalPrinter;
use rustyline::error::ReadlineError;
use serde_json::Value;
use troupe_approval::PendingApproval;
use troupe_journal::{Journal, ScanPosition};
use troupe_protocol::{Event, SessionId, event_types};
use troupe_runtime::{LeadLog, LeadRead};
use troupe_session::approval::{DecidedBy, Decision};
use troupe_team::LEAD_NAME;

use crate::control::Request;
use crate::exit::Failure;
use crate::home::Home;
use crate::output::escape_controls;
use crate::send::{Asked, Outgoing, Sent, ask_team, check_team, deliver, uuid};

/// `troupe chat`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ChatFlags {
    /// The Lead's session id, or a unique prefix of it (default: the Team started last).
    pub(crate) session: Option<String>,
}

/// At most this many characters of a tool call's arguments are shown.
const ARGUMENTS_SHOWN: usize = 100;

const HELP: &str = "lines go to the Lead; @NAME TEXT to a teammate; /board, /agents, \
/approve [REQUEST] [--deny|--always], /help; Ctrl-C stops the running turns; /quit leaves, \
Ctrl-D leaves and parks the Team";

/// `troupe chat`.
pub(crate) fn run(flags: ChatFlags, home: &Home<'_>) -> Result<(), Failure> {
    let journal = home.store.journal.clone();
    let raw = match flags.session {
        Some(raw) => raw,
        None => latest_team(&journal)?.to_string(),
    };
    let lead = check_team(&journal, &raw, LEAD_NAME, &home.args())?;
    let mut editor = rustyline::DefaultEditor::new()
        .context("starting the line editor")
        .map_err(Failure::work)?;
    let out: Output = match editor.create_external_printer() {
        Ok(printer) => Output::Editor(Box::new(printer)),
        Err(_) => Output::Plain,
    };
    let out = Arc::new(std::sync::Mutex::new(out));
    let running = matches!(ask_team(home, &lead, &Request::Agents), Asked::Answer(_));
    emit(
        &out,
        &format!(
            "chat with the Team of {lead} ({}): {HELP}",
            if running {
                "running"
            } else {
                "not running: messages wait for troupe resume"
            }
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let (journal, lead, out, stop) = (
            journal.clone(),
            lead.clone(),
            Arc::clone(&out),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || follow_team(&journal, &lead, &out, &stop))
    };
    let result = read_lines(&mut editor, &journal, home, &lead, &out);
    stop.store(true, Ordering::SeqCst);
    let _ = follower.join();
    result
}

/// Where chat prints: above the editor's prompt, or plainly when stdin is no terminal.
enum Output {
    Editor(Box<dyn ExternalPrinter + Send>),
    Plain,
}

fn emit(out: &std::sync::Mutex<Output>, line: &str) {
    let mut out = out
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match &mut *out {
        Output::Editor(printer) => {
            let _ = printer.print(format!("{line}\n"));
        }
        Output::Plain => {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{line}");
            let _ = stdout.flush();
        }
    }
}

/// The Team session started last: the newest root session whose log is a Team's.
fn latest_team(journal: &Journal) -> Result<SessionId, Failure> {
    let mut roots: Vec<_> = journal
        .list(&mut |_| {})?
        .into_iter()
        .filter(|l| l.header.parent_session.is_none())
        .collect();
    roots.sort_by_key(|l| std::cmp::Reverse(l.header.created_at));
    roots
        .into_iter()
        .find(|l| {
            LeadLog::read(journal, &l.header.id, LeadRead::Team).is_ok_and(|lead| lead.is_team())
        })
        .map(|l| l.header.id)
        .ok_or_else(|| {
            Failure::bad_input(anyhow!(
                "no Team session in this home to chat with (start one with troupe run --team)"
            ))
        })
}

/// The input loop: each line sent or obeyed, until `/quit`, Ctrl-D or the end of stdin.
fn read_lines(
    editor: &mut rustyline::DefaultEditor,
    journal: &Journal,
    home: &Home<'_>,
    lead: &SessionId,
    out: &std::sync::Mutex<Output>,
) -> Result<(), Failure> {
    use std::io::IsTerminal;
    let resume = format!("troupe resume {lead}{}", home.args());
    loop {
        let line = match editor.readline("> ") {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                if interrupt(home, lead) {
                    emit(
                        out,
                        &format!(
                            "interrupting: the running turns stop, every inbox is kept; the \
                             Team stays resumable ({resume})"
                        ),
                    );
                } else {
                    emit(
                        out,
                        "nothing runs to interrupt (/quit leaves; Ctrl-D leaves and parks a \
                         running Team)",
                    );
                }
                continue;
            }
            Err(ReadlineError::Eof) => {
                // The end of a pipe is no Ctrl-D: the Team goes on.
                if std::io::stdin().is_terminal() {
                    let parked = interrupt(home, lead);
                    emit(
                        out,
                        &if parked {
                            format!(
                                "leaving: the Team is parked (its running turns stopped, every \
                                 inbox kept); {resume} continues it"
                            )
                        } else {
                            format!("leaving: the Team is not running; {resume} continues it")
                        },
                    );
                }
                return Ok(());
            }
            // Bytes that are not UTF-8 (a binary paste, a file in another encoding): that
            // line is skipped, said so, and chat goes on — ending the chat would leave the
            // user's other lines unsent over one bad line.
            Err(ReadlineError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                emit(
                    out,
                    "troupe: chat: a line that is not valid UTF-8 was skipped (nothing was sent); \
                     type it again as text",
                );
                continue;
            }
            Err(e) => return Err(Failure::work(anyhow!("reading a line: {e}"))),
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(line);
        match line {
            "/quit" | "/exit" => return Ok(()),
            "/help" => emit(out, HELP),
            "/board" => board(journal, lead, out),
            "/agents" => agents(journal, home, lead, out),
            command if command == "/approve" || command.starts_with("/approve ") => {
                approve(journal, lead, &command["/approve".len()..], out);
            }
            command if command.starts_with('/') => {
                emit(out, &format!("unknown command {command}: {HELP}"));
            }
            _ => {
                let (to, text) = match line.strip_prefix('@') {
                    Some(rest) => match rest.split_once(char::is_whitespace) {
                        Some((name, text)) if !text.trim().is_empty() => (name, text.trim()),
                        _ => {
                            emit(out, "@NAME needs a message: @alpha please check the tests");
                            continue;
                        }
                    },
                    None => (LEAD_NAME, line),
                };
                send_line(journal, home, lead, to, text, out);
            }
        }
    }
}

/// Asks the running process of the Team (its socket, or on NATS its control subject) to stop
/// its running turns (keeping inboxes); whether
/// a running process took it.
fn interrupt(home: &Home<'_>, lead: &SessionId) -> bool {
    matches!(
        ask_team(home, lead, &Request::Interrupt),
        Asked::Answer(answer) if answer["ok"] == true
    )
}

const APPROVE_USAGE: &str = "/approve [REQUEST] [--deny|--always]";

/// `/approve [REQUEST] [--deny|--always]`: decides a pending request of the Team (the only one
/// when REQUEST is not given), or lists them when several wait.
fn approve(journal: &Journal, lead: &SessionId, args: &str, out: &std::sync::Mutex<Output>) {
    let mut request = None;
    let mut decision = Decision::Approve;
    for word in args.split_whitespace() {
        match word {
            "--deny" if decision == Decision::Approve => decision = Decision::Deny,
            "--always" if decision == Decision::Approve => decision = Decision::Always,
            id if !id.starts_with('-') && request.is_none() => request = Some(id.to_owned()),
            _ => {
                emit(out, &format!("usage: {APPROVE_USAGE}"));
                return;
            }
        }
    }
    let request = match request {
        Some(request) => request,
        None => {
            let waiting = match crate::approve::pending_of(journal, lead) {
                Ok(waiting) => waiting,
                Err(failure) => {
                    emit(out, &failure_text("approval", failure));
                    return;
                }
            };
            match waiting.as_slice() {
                [] => {
                    emit(out, "approval: no request is pending");
                    return;
                }
                [only] => only.request.id.clone(),
                several => {
                    for waiting in several {
                        emit(out, &pending_line(waiting));
                    }
                    emit(
                        out,
                        &format!(
                            "approval: {} requests are pending: name one, {APPROVE_USAGE}",
                            several.len()
                        ),
                    );
                    return;
                }
            }
        }
    };
    match crate::approve::decide_one(journal, lead, &request, decision, DecidedBy::Chat) {
        Ok(said) => emit(out, &format!("approval: {said}")),
        Err(failure) => emit(out, &failure_text("approval", failure)),
    }
}

/// A pending request on one line: `approval: ID lead: $ COMMAND (because: WHY)`.
fn pending_line(waiting: &PendingApproval) -> String {
    let request = &waiting.request;
    escape_controls(&format!(
        "approval: {} {}: $ {} (because: {})",
        request.id, request.member, request.command, request.justification
    ))
    .into_owned()
}

/// Sends one line as `troupe send --wakeup` would, and prints what became of it.
fn send_line(
    journal: &Journal,
    home: &Home<'_>,
    lead: &SessionId,
    to: &str,
    text: &str,
    out: &std::sync::Mutex<Output>,
) {
    if let Err(failure) = check_team(journal, lead.as_str(), to, &home.args()) {
        emit(out, &failure_text("not sent", failure));
        return;
    }
    let outgoing = Outgoing {
        lead: lead.clone(),
        to: to.to_owned(),
        text: text.to_owned(),
        wakeup: true,
        id: uuid(),
    };
    let sent = deliver(home, &outgoing, &mut |note| {
        emit(out, &format!("note: {note}"));
    });
    match sent {
        Ok(Sent { receipt, running }) => {
            let status = if receipt.delivered {
                "delivered to"
            } else {
                "queued for"
            };
            let mut line = format!("→ {status} {} (seq {})", receipt.target_name, receipt.seq.0);
            if !running && !receipt.delivered {
                line.push_str(&format!(
                    "; the Team is not running: troupe resume {lead}{} delivers it",
                    home.args()
                ));
            }
            emit(out, &line);
        }
        Err(failure) => emit(out, &failure_text("not sent", failure)),
    }
}

fn failure_text(what: &str, failure: Failure) -> String {
    failure.error.map_or_else(
        || what.to_owned(),
        |e| escape_controls(&format!("{what}: {e:#}")).into_owned(),
    )
}

/// `/board`: the task board as the Lead log holds it.
fn board(journal: &Journal, lead: &SessionId, out: &std::sync::Mutex<Output>) {
    let Ok(log) = LeadLog::read(journal, lead, LeadRead::Team) else {
        emit(out, "the Lead log cannot be read now");
        return;
    };
    let show = log.show(false);
    if show.tasks.is_empty() {
        emit(out, "board: no tasks");
    }
    for task in &show.tasks {
        let owner = task
            .owner_name
            .as_deref()
            .map_or_else(String::new, |o| format!(" ({o})"));
        emit(
            out,
            &escape_controls(&format!(
                "board: {} [{}] {}{owner}",
                task.id,
                task.status.as_str(),
                task.subject
            )),
        );
    }
}

/// `/agents`: the roster with live statuses when the Team runs, else as stored.
fn agents(journal: &Journal, home: &Home<'_>, lead: &SessionId, out: &std::sync::Mutex<Output>) {
    let members: Vec<(String, String)> = match ask_team(home, lead, &Request::Agents) {
        Asked::Answer(answer) if answer["ok"] == true => answer["members"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|m| {
                        (
                            m["name"].as_str().unwrap_or("?").to_owned(),
                            m["status"].as_str().unwrap_or("?").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        _ => match LeadLog::read(journal, lead, LeadRead::Team) {
            Ok(log) => log
                .show(false)
                .members
                .iter()
                .map(|m| {
                    let status = serde_json::to_value(m.member.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    (
                        m.member.name.clone(),
                        format!("{status} (the Team is not running)"),
                    )
                })
                .collect(),
            Err(_) => {
                emit(out, "the Lead log cannot be read now");
                return;
            }
        },
    };
    for (name, status) in members {
        emit(out, &escape_controls(&format!("agent: {name} {status}")));
    }
}

/// Follows the Lead's log and every teammate's, printing answers and tool calls as they are
/// stored, until `stop`.
fn follow_team(
    journal: &Journal,
    lead: &SessionId,
    out: &std::sync::Mutex<Output>,
    stop: &AtomicBool,
) {
    // Name, read position and whether the first read is shown, of every followed log: the
    // logs there are as chat opens start at their end; a teammate's that appears later is
    // shown from its first event.
    let mut followed: HashMap<SessionId, (String, Option<ScanPosition>, bool)> = HashMap::new();
    followed.insert(lead.clone(), (LEAD_NAME.to_owned(), None, false));
    let mut first_round = true;
    let mut shown_pending: std::collections::HashSet<String> = std::collections::HashSet::new();
    while !stop.load(Ordering::SeqCst) {
        let ids: Vec<SessionId> = followed.keys().cloned().collect();
        for id in ids {
            let Some((name, position, shown)) = followed.get(&id).cloned() else {
                continue;
            };
            let mut lines = Vec::new();
            let mut members = Vec::new();
            let quiet = position.is_none() && !shown;
            let mut on_event = |event: Event| {
                // Shown already as pending when chat opened.
                if event.kind == event_types::APPROVAL_REQUESTED
                    && event.data["id"]
                        .as_str()
                        .is_some_and(|id| shown_pending.contains(id))
                {
                    return;
                }
                if event.kind == event_types::TEAM_MEMBER
                    && let Some(member) = event.data["member"]["id"].as_str()
                    && let (Ok(member), Some(name)) = (
                        SessionId::new(member),
                        event.data["member"]["name"].as_str(),
                    )
                {
                    members.push((member, name.to_owned()));
                }
                if !quiet && let Some(line) = render(&name, &event) {
                    lines.push(line);
                }
            };
            let next = match position {
                None => journal.read_each(&id, &mut on_event).map(|s| s.position()),
                Some(at) => journal
                    .read_each_from(&id, at, &mut on_event)
                    .map(|t| t.next),
            };
            for line in lines {
                emit(out, &line);
            }
            if let Ok(next) = next
                && let Some(entry) = followed.get_mut(&id)
            {
                entry.1 = Some(next);
            }
            for (member, name) in members {
                // A teammate that appears while chat runs is followed from its first event.
                followed.entry(member).or_insert((name, None, !first_round));
            }
        }
        if first_round {
            // The requests that were waiting before chat opened: the logs were read up to
            // here quietly, so they are shown now (after that read, so none made meanwhile is
            // missed; one the next read finds too is not shown twice).
            for waiting in crate::approve::pending_of(journal, lead).unwrap_or_default() {
                let request = &waiting.request;
                emit(
                    out,
                    &escape_controls(&format!(
                        "{}: asks to run a command outside the sandbox (waiting since before \
                         chat opened): $ {} (because: {}) — /approve {} [--deny|--always]",
                        request.member, request.command, request.justification, request.id
                    )),
                );
                shown_pending.insert(request.id.clone());
            }
        }
        first_round = false;
        std::thread::sleep(crate::follow::FILE_INTERVAL);
    }
}

/// What chat shows of one event of member `name`: its answers and tool calls, and turns that
/// did not complete.
fn render(name: &str, event: &Event) -> Option<String> {
    let line = match event.kind.as_str() {
        event_types::ASSISTANT_MESSAGE => {
            let text = event.data["message"]["content"].as_str()?.trim();
            if text.is_empty() {
                return None;
            }
            let indented = text.replace('\n', "\n  ");
            format!("{name}: {indented}")
        }
        event_types::TOOL_CALL => {
            let tool = event.data["name"].as_str()?;
            let arguments = compact(&event.data["arguments"]);
            format!("{name}: ▸ {tool} {arguments}")
        }
        event_types::APPROVAL_REQUESTED => {
            let data = &event.data;
            format!(
                "{name}: asks to run a command outside the sandbox: $ {} (because: {}) — \
                 /approve {} [--deny|--always]",
                data["command"].as_str()?,
                data["justification"].as_str().unwrap_or(""),
                data["id"].as_str()?
            )
        }
        event_types::APPROVAL_DECIDED => {
            let data = &event.data;
            format!(
                "{name}: request {} decided: {} by {}",
                data["id"].as_str()?,
                data["decision"].as_str()?,
                data["by"].as_str()?
            )
        }
        event_types::TURN_END => {
            let reason = event.data["reason"].as_str().unwrap_or("completed");
            if reason == "completed" {
                return None;
            }
            format!("{name}: turn {reason}")
        }
        _ => return None,
    };
    Some(
        line.lines()
            .map(|l| escape_controls(l).into_owned())
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

fn compact(arguments: &Value) -> String {
    let text = arguments.to_string();
    if text.chars().count() <= ARGUMENTS_SHOWN {
        return text;
    }
    let mut cut: String = text.chars().take(ARGUMENTS_SHOWN - 1).collect();
    cut.push('…');
    cut
}
