//! `troupe`: coding agents working as a durable team.
//!
//! This binary parses flags, calls the libraries and prints; it holds no domain logic
//! (DESIGN §2). Exit codes: 0 success, 1 the work failed, 2 bad usage or bad input (with a
//! one-line reason on stderr).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod exit;
mod progress;
mod work;

use anyhow::Context;
use clap::{Parser, Subcommand};
use troupe_journal::{Journal, Replay};
use troupe_protocol::{Event, SessionHeader, SessionId};

use crate::exit::Failure;

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
    /// Create a session and run the Lead on PROMPT until the work is done.
    ///
    /// Runs until the Lead has answered and every helper is idle. The session id goes to
    /// stderr first, the final answer to stdout (with --json: JSON lines on stdout, the last
    /// one `{"event":"done",…}` holding the answer). Ctrl-C stops the turn and leaves a
    /// resumable session (exit 1).
    Run(work::RunFlags),
    /// Reopen a session (crash recovery first) and run it until the work is done.
    ///
    /// Runs PROMPT if given; else continues an interrupted or failed turn, or the messages
    /// waiting in the inbox; else prints the last answer without calling the model. The
    /// recorded model, provider, base URL and workspace are used unless a flag overrides them
    /// (API keys come from the environment and are never recorded).
    Resume(work::ResumeFlags),
    /// List stored sessions, oldest first (id, parent, created, role, cwd).
    Sessions {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's events.
    Log {
        /// The session id (see `troupe sessions`).
        session: String,
        /// Print each event as its stored JSON line (pipe into `jq`).
        #[arg(long)]
        json: bool,
        /// Start at this seq (0-based).
        #[arg(long, value_name = "SEQ", default_value_t = 0)]
        from: u64,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { code, error }) => {
            // One line: the outermost context and its causes, joined.
            if let Some(error) = error {
                eprintln!("troupe: {error:#}");
            }
            ExitCode::from(code)
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    let home = troupe_journal::resolve_home(cli.home.as_deref()).ok_or_else(|| {
        Failure::bad_input(anyhow::anyhow!(
            "cannot find a Troupe home: pass --home DIR or set TROUPE_HOME"
        ))
    })?;
    let journal = Journal::open_home(&home);
    let home = work::Home {
        dir: home,
        flag: cli.home.as_deref(),
    };
    match cli.command {
        Command::Run(flags) => work::run(flags, home),
        Command::Resume(flags) => work::resume(flags, home),
        Command::Sessions { json } => sessions(&journal, &home.dir, json),
        Command::Log {
            session,
            json,
            from,
        } => log(&journal, &session, json, from),
    }
}

fn parse_session_id(raw: &str) -> Result<SessionId, Failure> {
    SessionId::new(raw).map_err(Failure::bad_input)
}

/// How a session relates to others, from its header alone.
fn role(header: &SessionHeader) -> &'static str {
    match (&header.parent_session, header.origin.as_deref()) {
        (None, _) => "lead",
        (Some(_), Some("subagent")) => "child",
        (Some(_), _) => "fork",
    }
}

fn format_time(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

fn sessions(journal: &Journal, home: &Path, json: bool) -> Result<(), Failure> {
    let listed = journal
        .list(&mut |e| eprintln!("troupe: skipping unreadable session file: {e}"))
        .context("listing sessions")?;
    let mut out = std::io::stdout().lock();
    if json {
        let rows: Vec<_> = listed
            .iter()
            .map(|l| {
                serde_json::json!({
                    "id": l.header.id,
                    "parent": l.header.parent_session,
                    "createdAt": l.header.created_at,
                    "cwd": l.header.cwd,
                    "role": role(&l.header),
                    "path": l.location,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(rows)).context("writing output")?;
        return Ok(());
    }
    if listed.is_empty() {
        writeln!(out, "no sessions in {}", home.join("sessions").display())
            .context("writing output")?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<36}  {:<36}  {:<24}  {:<5}  CWD",
        "ID", "PARENT", "CREATED", "ROLE"
    )
    .context("writing output")?;
    for l in &listed {
        let h = &l.header;
        writeln!(
            out,
            "{:<36}  {:<36}  {:<24}  {:<5}  {}",
            h.id,
            h.parent_session.as_ref().map_or("-", SessionId::as_str),
            format_time(h.created_at),
            role(h),
            h.cwd.as_deref().unwrap_or("-"),
        )
        .context("writing output")?;
    }
    Ok(())
}

fn log(journal: &Journal, session: &str, json: bool, from: u64) -> Result<(), Failure> {
    let id = parse_session_id(session)?;
    let replay: Replay = journal.read(&id)?;
    if let Some(torn) = &replay.torn_tail {
        eprintln!(
            "troupe: note: {} bytes after line {} are an unfinished write ({}); they are not shown",
            torn.bytes,
            torn.line - 1,
            torn.reason
        );
    }
    let mut out = std::io::stdout().lock();
    let events = replay.events.iter().filter(|e| e.seq.0 >= from);
    for event in events {
        let line = if json {
            serde_json::to_string(event).context("encoding event")?
        } else {
            human_line(event)
        };
        if let Err(e) = writeln!(out, "{line}") {
            // A closed pipe (`troupe log … | head`) is not a failure.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(anyhow::Error::new(e).context("writing output").into());
        }
    }
    Ok(())
}

/// `seq  time  type  data`, with the payload compacted to one line of at most 160 chars.
fn human_line(event: &Event) -> String {
    const MAX: usize = 160;
    let mut data = event.data.to_string();
    if data.chars().count() > MAX {
        data = data.chars().take(MAX - 1).collect::<String>() + "…";
    }
    let skipped = if event.is_known() {
        ""
    } else {
        " (unknown, skipped)"
    };
    format!(
        "{:>6}  {}  {:<24} {data}{skipped}",
        event.seq,
        format_time(event.time),
        event.kind
    )
}
