//! Approvals from the command line: `troupe approve SESSION [REQUEST] [--deny]` (another
//! terminal), and the questions `troupe run` / `troupe resume` ask at their own terminal.
//!
//! Every decision goes through `troupe_runtime::approval`: it is recorded by creating the
//! request's decision log, which only one decision can ever do, and the running member sees it
//! there (it reads that log again every 200 ms) — no connection to the running process is
//! needed, and a decision made while nothing runs is taken by the next resume.

use std::collections::VecDeque;

use anyhow::{Context, anyhow};
use tokio::sync::mpsc;
use troupe_approval::{ApprovalError, PendingApproval, decide, pending};
use troupe_journal::Journal;
use troupe_protocol::{ErrorCode, SessionId};
use troupe_runtime::{AgentProgress, Progress, Runtime};
use troupe_session::approval::{DecidedBy, Decision};

use crate::exit::Failure;
use crate::output::{Stdout, escape_controls};
use crate::progress::Printer;

/// `troupe approve` as typed.
#[derive(Debug, clap::Args)]
pub(crate) struct ApproveFlags {
    /// The session: a Lead (its teammates' requests included) or any member, by id or unique
    /// prefix.
    session: String,
    /// The request to decide (its id, as the run printed it). Without it, the pending requests
    /// are listed.
    request: Option<String>,
    /// Deny the request instead of approving it.
    #[arg(long, requires = "request", conflicts_with = "always")]
    deny: bool,
    /// Approve it, and let that member run this exact command outside the sandbox again
    /// without asking, for the rest of its session (recorded in its log: a resume keeps it).
    #[arg(long, requires = "request")]
    always: bool,
    /// List as JSON (an array of {session, id, callId, command, justification, member,
    /// requestedAt}).
    #[arg(long, conflicts_with = "request")]
    json: bool,
}

/// `troupe approve`: lists the pending requests of a session and its members, or decides one.
///
/// # Errors
/// Bad input (exit 2, nothing changed): an unknown session, `APPROVAL_NOT_FOUND`,
/// `APPROVAL_ALREADY_DECIDED`. A log that cannot be read: exit 1.
pub(crate) fn run(journal: &Journal, flags: ApproveFlags, home_args: &str) -> Result<(), Failure> {
    let id = crate::args::resolve_session(journal, &flags.session)?;
    // The session must exist (a missing one is bad input, as for every command).
    journal.header(&id)?;
    let Some(request) = flags.request else {
        return list(journal, &id, flags.json, home_args);
    };
    let decision = if flags.deny {
        Decision::Deny
    } else if flags.always {
        Decision::Always
    } else {
        Decision::Approve
    };
    let said = decide_one(journal, &id, &request, decision, DecidedBy::Cli)?;
    let mut out = Stdout::lock();
    use std::io::Write;
    writeln!(
        out,
        "{said}: a running troupe sees it within a second; a stopped session takes it when it \
         is resumed"
    )
    .context("writing output")?;
    Ok(())
}

/// Decides request `request` of `session` (or of one of its members) — through its decision
/// log, see [`troupe_approval::decide`] — and says what was decided: `approved
/// request ID of session S` (`approved always`, `denied`).
///
/// # Errors
/// As [`run`]'s: `APPROVAL_NOT_FOUND`, `APPROVAL_ALREADY_DECIDED` are bad input (nothing
/// changed).
pub(crate) fn decide_one(
    journal: &Journal,
    session: &SessionId,
    request: &str,
    decision: Decision,
    by: DecidedBy,
) -> Result<String, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (member, decided) = runtime
        .block_on(decide(journal, session, request, decision, by))
        .map_err(approval_failure)?;
    let verb = match decided.decision {
        Decision::Approve => "approved",
        Decision::Always => "approved always",
        Decision::Deny => "denied",
    };
    Ok(format!("{verb} request {request} of session {member}"))
}

/// The pending requests of `session` and its members (see
/// [`troupe_approval::pending`]).
///
/// # Errors
/// A log that cannot be read.
pub(crate) fn pending_of(
    journal: &Journal,
    session: &SessionId,
) -> Result<Vec<PendingApproval>, Failure> {
    pending(journal, session).map_err(approval_failure)
}

fn approval_failure(error: ApprovalError) -> Failure {
    let code = error.code();
    match error {
        ApprovalError::NotFound { .. } | ApprovalError::AlreadyDecided { .. } => {
            Failure::bad_input(anyhow!("{code}: {error}"))
        }
        ApprovalError::Journal(e) => e.into(),
        other => Failure::work(anyhow!("{code}: {other}")),
    }
}

fn list(journal: &Journal, id: &SessionId, json: bool, home_args: &str) -> Result<(), Failure> {
    let waiting = pending(journal, id).map_err(approval_failure)?;
    let mut out = Stdout::lock();
    use std::io::Write;
    if json {
        let text = serde_json::to_string(&waiting).context("encoding the requests")?;
        writeln!(out, "{text}").context("writing output")?;
        return Ok(());
    }
    if waiting.is_empty() {
        crate::output::eprint_line!("no approval request of session {id} is pending");
        return Ok(());
    }
    writeln!(
        out,
        "REQUEST   MEMBER        ASKED                     COMMAND (WHY)"
    )
    .context("writing output")?;
    for PendingApproval {
        request,
        requested_at,
        ..
    } in &waiting
    {
        writeln!(
            out,
            "{:<9} {:<13} {:<25} {} ({})",
            request.id,
            escape_controls(&request.member),
            crate::output::format_time(*requested_at),
            escape_controls(&request.command),
            escape_controls(&request.justification),
        )
        .context("writing output")?;
    }
    drop(out);
    crate::output::eprint_line!(
        "approve one with: troupe approve {id} REQUEST{home_args} (or --deny to deny it, --always \
         to allow that command from then on)"
    );
    Ok(())
}

/// A request asked at this terminal and not answered yet.
struct Asked {
    member: SessionId,
    name: String,
    request: String,
}

/// The questions `troupe run` / `troupe resume` ask at their terminal: one at a time, oldest
/// first, answered `y` (approve), `n` (deny) or `a` (always: this exact command, for the rest
/// of that member's session). Lines are read from stdin — only when it is a terminal — by a
/// thread started with the first question. A request decided elsewhere (`troupe approve`, the
/// panel, the timeout) leaves the queue when its decision is reported.
pub(crate) struct Prompts {
    /// Whether stdin is a terminal (no questions are asked otherwise).
    terminal: bool,
    lines: Option<mpsc::UnboundedReceiver<String>>,
    queue: VecDeque<Asked>,
}

impl Prompts {
    /// Questions at this terminal when stdin is one.
    pub(crate) fn new() -> Self {
        use std::io::IsTerminal;
        Self {
            terminal: std::io::stdin().is_terminal(),
            lines: None,
            queue: VecDeque::new(),
        }
    }

    /// Whether requests are answered at this terminal.
    pub(crate) fn answers_here(&self) -> bool {
        self.terminal
    }

    /// Follows the approval events: a request joins the queue, a decision takes its request
    /// out (the question on screen changes when it was the one shown).
    pub(crate) fn on_progress(&mut self, event: &AgentProgress, printer: &mut Printer) {
        if !self.terminal {
            return;
        }
        match &event.progress {
            Progress::ApprovalRequested { request, .. } => {
                if self.queue.iter().any(|a| a.request == *request) {
                    return;
                }
                self.queue.push_back(Asked {
                    member: event.agent.clone(),
                    name: event.agent_name.clone(),
                    request: request.clone(),
                });
                if self.queue.len() == 1 {
                    self.start_reading();
                    self.ask(printer);
                }
            }
            Progress::ApprovalDecided { request, .. } => {
                let Some(at) = self.queue.iter().position(|a| a.request == *request) else {
                    return;
                };
                self.queue.remove(at);
                if at == 0 {
                    printer.set_prompt(None, false);
                    self.ask(printer);
                }
            }
            _ => {}
        }
    }

    fn ask(&self, printer: &mut Printer) {
        if let Some(front) = self.queue.front() {
            printer.set_prompt(
                Some(format!(
                    "approve {}'s request {}? [y]es / [n]o / [a]lways this command: ",
                    escape_controls(&front.name),
                    front.request
                )),
                false,
            );
        }
    }

    fn start_reading(&mut self) {
        if self.lines.is_some() {
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        // A plain thread: a blocking read of the terminal that ends with the process.
        let spawned = std::thread::Builder::new()
            .name("troupe-answers".to_owned())
            .spawn(move || {
                let stdin = std::io::stdin();
                let mut line = String::new();
                loop {
                    line.clear();
                    match stdin.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if tx.send(line.clone()).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        if spawned.is_ok() {
            self.lines = Some(rx);
        }
    }

    /// The next line typed (pending forever when nothing reads the terminal).
    pub(crate) async fn next_line(&mut self) -> Option<String> {
        match self.lines.as_mut() {
            Some(lines) => lines.recv().await,
            None => std::future::pending().await,
        }
    }

    /// Takes a typed line as the answer to the question shown.
    pub(crate) async fn answer(&mut self, line: &str, runtime: &Runtime, printer: &mut Printer) {
        let decision = match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Decision::Approve,
            "n" | "no" => Decision::Deny,
            "a" | "always" => Decision::Always,
            _ => {
                if !self.queue.is_empty() {
                    printer.set_prompt(None, true);
                    printer.note("approval: answer y (yes), n (no) or a (always this command)");
                    self.ask(printer);
                }
                return;
            }
        };
        let Some(front) = self.queue.pop_front() else {
            return;
        };
        printer.set_prompt(None, true);
        let decided = runtime
            .approvals()
            .decide(
                &front.member,
                &front.request,
                &front.name,
                decision,
                DecidedBy::Terminal,
            )
            .await;
        if let Err(e) = decided {
            printer.note(&format!("approval: {}: {e}", e.code()));
        }
        self.ask(printer);
    }
}

/// Whether `header` is a decision log (left out of session lists).
pub(crate) fn is_decision_log(header: &troupe_protocol::SessionHeader) -> bool {
    troupe_approval::is_decision_log(header)
}
