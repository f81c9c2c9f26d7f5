//! `troupe`: coding agents working as a durable team.
//!
//! This binary parses flags, calls the libraries and prints; it holds no domain logic
//! (DESIGN §2). Exit codes: 0 success, 1 the work failed, 2 bad usage or bad input (with a
//! one-line reason on stderr).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod demo;
mod exit;
mod output;
mod progress;
mod team;
mod web;
mod work;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use troupe_journal::{Journal, JournalError, ResolveError};
use troupe_protocol::{Event, SessionId};
use troupe_runtime::{RoleProbe, SessionRole};

use crate::exit::Failure;
use crate::output::{Stdout, eprint_line, escape_controls};

/// Coding agents that work as a durable team: every piece of team state is replayed from the
/// Lead's append-only session log, so a crash, a kill -9 or a restart loses nothing.
#[derive(Debug, Parser)]
#[command(
    name = "troupe",
    version,
    about = "Coding agents that work as a durable team, replayed from append-only session logs.",
    long_about = None
)]
struct Cli {
    /// Troupe home holding the session logs (default: $TROUPE_HOME, else ~/.troupe).
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scripted Team on a small real project, offline, in seconds (no API key needed).
    ///
    /// Writes a small Python package whose unittest suite fails (into ./troupe-demo or
    /// --workspace DIR, which must be new or empty), then a Lead and two teammates fix it
    /// through the real runtime and tools, driven by a built-in script: a task board with a
    /// dependency, claims, edits (one refused as stale and retried), messages, test runs. Ends
    /// with the commands to inspect what they did.
    Demo(demo::DemoFlags),
    /// Create a session and run the Lead on PROMPT until the work is done.
    ///
    /// Runs until the Lead has answered and every teammate (with --team) or subagent is idle
    /// or inactive (a teammate that goes idle is put away until a message wakes it). The
    /// session id goes to stderr first, the final answer to stdout (with --json:
    /// JSON lines on stdout, the last one `{"event":"done",…}` holding the answer). Ctrl-C
    /// stops every running turn and leaves a resumable session (exit 1).
    Run(work::RunFlags),
    /// Reopen a session (crash recovery first) and run it until the work is done.
    ///
    /// Runs PROMPT if given; else continues an interrupted or failed turn, or the messages
    /// waiting in the inbox; else prints the last answer without calling the model. The
    /// recorded model, provider, base URL and workspace are used unless a flag overrides them
    /// (API keys come from the environment and are never recorded).
    Resume(work::ResumeFlags),
    /// List stored sessions, oldest first (id, parent, created, role, cwd).
    ///
    /// Roles: `lead` (a root session), `teammate` (a Team member's session), `child` (another
    /// subagent child), `fork` (a fork). With no session, stdout stays empty and stderr says
    /// so (exit 0).
    Sessions {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's events.
    Log {
        /// The session id, or a unique prefix of it (see `troupe sessions`).
        session: String,
        /// Print each event as one line of compact JSON, in the stored shape (pipe into `jq`).
        ///
        /// Each event is re-encoded, not copied from the file: fields Troupe does not know
        /// and the exact number formatting are not preserved byte for byte.
        #[arg(long)]
        json: bool,
        /// Start at this seq (0-based).
        #[arg(long, value_name = "SEQ", default_value_t = 0, allow_negative_numbers = true,
              value_parser = whole_number)]
        from: u64,
    },
    /// Inspect a Team offline from its Lead's log: `team show`, `team verify`.
    Team {
        #[command(subcommand)]
        command: team::TeamCommand,
    },
    /// Serve the web panel: watch Teams live in a browser (read-only, 127.0.0.1 by default).
    ///
    /// Prints the URL to open. The panel shows the sessions of the home, each Team's roster
    /// with live status, its task board and any member's conversation, updated live from the
    /// session files while `troupe run` writes them from another process.
    Web(web::WebFlags),
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) if e.exit_code() == 0 => {
            // --help, --version: clap's own output on stdout, unchanged.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if missing_command(&e) => {
            // `troupe` (or `troupe team`) alone: the short help of that command, on stderr.
            let mut help = parsed_command(&args).1;
            let text = help.render_help().to_string();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "{}", text.trim_end());
            let _ = writeln!(err);
            return ExitCode::from(exit::BAD_INPUT);
        }
        Err(e) => {
            eprint_line!("troupe: {}", usage_error_line(&e, &args));
            return ExitCode::from(exit::BAD_INPUT);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { code, error }) => {
            // One line: the outermost context and its causes, joined.
            if let Some(error) = error {
                let line = format!("{error:#}");
                eprint_line!("troupe: {}", escape_controls(&line));
            }
            ExitCode::from(code)
        }
    }
}

/// Whether clap stopped because no (sub)command was named.
fn missing_command(error: &clap::Error) -> bool {
    matches!(
        error.kind(),
        clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            | clap::error::ErrorKind::MissingSubcommand
    )
}

/// A clap usage error as one line: the message, its details and tips, and where to get help,
/// e.g. `the following required arguments were not provided: <SESSION> (see 'troupe log
/// --help')`.
fn usage_error_line(error: &clap::Error, args: &[OsString]) -> String {
    let hint = help_hint(args);
    // clap renders `error: MESSAGE`, indented details and `tip:` lines, then `Usage: …` and
    // `For more information, …`; keep everything before those.
    let rendered = error.render().to_string();
    let mut message = String::new();
    let mut details = Vec::new();
    let mut tips = Vec::new();
    for line in rendered.lines() {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if message.is_empty() {
            message = line
                .strip_prefix("error:")
                .unwrap_or(line)
                .trim()
                .to_owned();
        } else if line.starts_with("tip:") {
            tips.push(line.to_owned());
        } else {
            details.push(line.to_owned());
        }
    }
    if message.is_empty() {
        message = "invalid command line".to_owned();
    }
    if !details.is_empty() {
        message.push(' ');
        message.push_str(&details.join(", "));
    }
    tips.push(format!("see '{hint}'"));
    escape_controls(&format!("{message} ({})", tips.join("; "))).into_owned()
}

/// `troupe SUBCOMMAND… --help` for the (nested) subcommand being parsed, else
/// `troupe --help`.
fn help_hint(args: &[OsString]) -> String {
    format!("{} --help", parsed_command(args).0.join(" "))
}

/// The (nested) subcommand `args` name, as its words (`["troupe", "team", "show"]`) and its
/// clap definition.
fn parsed_command(args: &[OsString]) -> (Vec<String>, clap::Command) {
    let mut command = Cli::command();
    // Built, so that a subcommand's usage names its full path (`troupe team <COMMAND>`).
    command.build();
    let mut path = vec!["troupe".to_owned()];
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let Some(arg) = arg.to_str() else { break };
        if arg == "--home" {
            rest.next();
        } else if arg == "--" || !arg.starts_with('-') {
            if arg == "help" {
                break;
            }
            let Some(sub) = command.find_subcommand(arg).cloned() else {
                break;
            };
            path.push(arg.to_owned());
            command = sub;
            if !command.has_subcommands() {
                break;
            }
        }
    }
    (path, command)
}

fn run(cli: Cli) -> Result<(), Failure> {
    let home = troupe_journal::resolve_home(cli.home.as_deref()).ok_or_else(|| {
        Failure::bad_input(anyhow::anyhow!(
            "cannot find a Troupe home: pass --home DIR or set TROUPE_HOME"
        ))
    })?;
    let named = home_name(&home, cli.home.is_some());
    check_home(&home, &named)?;
    let journal = Journal::open_home(&home);
    let home = work::Home {
        dir: home,
        flag: cli.home.as_deref(),
        named,
    };
    match cli.command {
        Command::Run(flags) => work::run(flags, home),
        Command::Resume(flags) => work::resume(flags, home),
        Command::Demo(flags) => demo::run(flags, home),
        Command::Sessions { json } => sessions(&journal, &home.dir, json),
        Command::Log {
            session,
            json,
            from,
        } => log(&journal, &session, json, from),
        Command::Team { command } => team::run(&journal, command, &work::home_arg(home.flag)),
        Command::Web(flags) => web::run(flags, &home.dir),
    }
}

/// The home as the user chose it, for messages: `--home DIR`, `TROUPE_HOME DIR` or
/// `the Troupe home DIR`.
fn home_name(home: &Path, from_flag: bool) -> String {
    if from_flag {
        format!("--home {}", home.display())
    } else if std::env::var_os(troupe_journal::HOME_ENV).is_some_and(|v| !v.is_empty()) {
        format!("TROUPE_HOME {}", home.display())
    } else {
        format!("the Troupe home {}", home.display())
    }
}

/// The home and its `sessions` directory must be directories when they exist (a missing one is
/// created by the first write). Anything else is bad input, reported before any work starts.
fn check_home(home: &Path, named: &str) -> Result<(), Failure> {
    let named = named.to_owned();
    let sessions = home.join("sessions");
    for (dir, shown) in [
        (home, named.clone()),
        (
            sessions.as_path(),
            format!("{} (in {named})", sessions.display()),
        ),
    ] {
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(Failure::bad_input(anyhow::anyhow!(
                    "{shown} is not a directory"
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(Failure::bad_input(anyhow::anyhow!("{shown}: {e}"))),
        }
    }
    Ok(())
}

/// A whole number of 0 or more, as a flag's value: a negative number is named as such (clap's
/// own parser would call it an unknown flag, or "invalid digit", and suggest `-- -1`).
pub(crate) fn whole_number(raw: &str) -> Result<u64, String> {
    if let Some(digits) = raw.strip_prefix('-')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        return Err(format!(
            "{raw} is negative: give a whole number of 0 or more"
        ));
    }
    raw.parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => format!("{raw} is too large (at most {})", u64::MAX),
        _ => format!("{raw} is not a whole number"),
    })
}

/// The session `raw` names: its full id or a unique prefix of it ([`Journal::resolve`]). An
/// invalid or ambiguous id is bad input (exit 2, one line listing the candidates).
pub(crate) fn resolve_session(journal: &Journal, raw: &str) -> Result<SessionId, Failure> {
    journal.resolve(raw).map_err(|e| match e {
        ResolveError::InvalidId(e) => Failure::bad_input(e),
        ResolveError::Journal(e @ JournalError::Ambiguous { .. }) => Failure::bad_input(e),
        ResolveError::Journal(e) => e.into(),
    })
}

/// RFC 3339 UTC with milliseconds; a time humantime cannot show (year 10000 or later) as the
/// raw number, `t=<ms>ms`.
fn format_time(ms: u64) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let shown = std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::from_millis(ms))
        .is_some_and(|t| write!(text, "{}", humantime::format_rfc3339_millis(t)).is_ok());
    if shown { text } else { format!("t={ms}ms") }
}

fn sessions(journal: &Journal, home: &Path, json: bool) -> Result<(), Failure> {
    let listed = journal
        .list(&mut |e| {
            let e = e.to_string();
            eprint_line!(
                "troupe: note: not listed, its header cannot be read: {}",
                escape_controls(&e)
            );
        })
        .context("listing sessions")?;
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
        let dir = home.join("sessions").display().to_string();
        eprint_line!("troupe: no sessions in {}", escape_controls(&dir));
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

fn log(journal: &Journal, session: &str, json: bool, from: u64) -> Result<(), Failure> {
    let id = resolve_session(journal, session)?;
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
            work::count(summary.next_seq.0, "event")
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
            Failure::work(anyhow::anyhow!(
                "the log of session {id} is damaged {at}: {error}"
            ))
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
