//! `troupe`: coding agents working as a durable team.
//!
//! This binary parses flags, calls the libraries and prints; it holds no domain logic
//! (DESIGN §2). Exit codes: 0 success, 1 the work failed, 2 bad usage or bad input (with a
//! one-line reason on stderr).

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

mod adopt;
mod approve;
mod args;
mod chat;
mod control;
mod demo;
mod exit;
mod follow;
mod framing;
mod hints;
mod home;
mod inspect;
mod mcp;
mod output;
mod progress;
mod script;
mod send;
mod settings;
mod store;
mod team;
mod web;
mod work;
mod worker;

use clap::{CommandFactory, Parser, Subcommand};
use troupe_journal::Journal;

use crate::exit::Failure;
use crate::home::{Home, check_home, home_name};
use crate::output::{eprint_line, escape_controls};

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

    #[command(flatten)]
    store: store::StoreFlags,

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
    /// stops every running turn and leaves a resumable session (exit 1). A setting not given as
    /// a flag comes from the project's .troupe/config.toml, else the user's
    /// $TROUPE_HOME/config.toml (see `troupe config`); the AGENTS.md files are recorded and given
    /// to every member.
    Run(work::RunFlags),
    /// Reopen a session (crash recovery first) and run it until the work is done.
    ///
    /// Runs PROMPT if given; else continues an interrupted or failed turn, or the messages
    /// waiting in the inbox; else prints the last answer without calling the model. The
    /// recorded model, provider, base URL and workspace are used unless a flag overrides them
    /// (API keys come from the environment and are never recorded).
    Resume(work::ResumeFlags),
    /// Send a durable message from the user to a Team's Lead or a teammate (running or not).
    ///
    /// To a running Team the message goes through its process (the control socket in the
    /// home's run/ directory) and is delivered as Team mail is; to a stopped Team it is
    /// appended to the Lead's log and delivered at the next troupe resume. The member sees it
    /// framed "Message from the user:". Prints one line: delivered or queued, to whom, the seq
    /// of its record in the Lead's log.
    Send(send::SendFlags),
    /// Talk to a Team line by line: lines go to the Lead, @NAME TEXT to a teammate.
    ///
    /// Each line is sent as troupe send --wakeup sends it (the member runs a turn with it);
    /// the members' answers, tool calls and approval requests are printed as their logs grow.
    /// /board prints the task board, /agents the roster, /approve [REQUEST] [--deny|--always]
    /// answers an approval request (alone: the one pending). Ctrl-C stops the running turns
    /// (inboxes kept: the Team stays resumable); Ctrl-D leaves and parks a running Team; /quit
    /// leaves (the Team goes on, or stays stopped, as it was). Without SESSION: the Team
    /// session started last.
    Chat(chat::ChatFlags),
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
              value_parser = args::whole_number)]
        from: u64,
        /// Keep printing the events appended, as they are stored (a batch once it is whole),
        /// until interrupted. On a NATS store the server pushes them; the files are read
        /// again every 200 ms.
        #[arg(long)]
        follow: bool,
    },
    /// Inspect a Team offline from its Lead's log: `team show` (also at a past point, `--at`),
    /// `team log` (its timeline), `team verify`.
    Team {
        #[command(subcommand)]
        command: team::TeamCommand,
    },
    /// Show the configuration a new `troupe run` here would use, and where each value comes from.
    ///
    /// Reads the user's file ($TROUPE_HOME/config.toml, i.e. the home's) and the project's
    /// (<workspace>/.troupe/config.toml) and applies the flags given, exactly as `troupe run`
    /// does: a flag wins over the project's file, which wins over the user's, which wins over
    /// the default. Each value's source is a flag, an environment variable, a file with line and
    /// column, or the default. Shows the MCP servers a run would start ([mcp_servers.<name>],
    /// or --mcp-config FILE instead) and the store every command uses (`store`, `replicas`: the
    /// user's file only), and lists the AGENTS.md files the members would be given. An unknown
    /// key or a bad value is exit 2 naming FILE:LINE:COLUMN. `troupe resume` does not read
    /// these files: a session keeps what it started with.
    Config(settings::show::ConfigFlags),
    /// Move sessions between stores: `troupe store copy --from STORE --to STORE [SESSION…]`.
    Store {
        #[command(subcommand)]
        command: store::StoreCommand,
    },
    /// Answer a member's request to run a command outside the sandbox, from any terminal.
    ///
    /// With only SESSION, lists the requests nobody decided yet (of the session and, for a
    /// Lead, of its teammates). With REQUEST, approves it (or denies it with --deny, or with
    /// --always also lets that exact command run again without asking): the decision is
    /// recorded at once; a running troupe sees it within a second, a stopped
    /// session takes it when it is resumed. A request that does not exist or is already
    /// decided is refused (exit 2) and nothing changes.
    Approve(approve::ApproveFlags),
    /// Serve the web panel: watch Teams live in a browser (127.0.0.1 by default).
    ///
    /// Prints the URL to open (it carries the panel's token). The panel shows the sessions of
    /// the home, each Team's roster with live status, its task board, any member's
    /// conversation, and the requests to run a command outside the sandbox that wait for an
    /// answer, updated live from the session files while `troupe run` writes them from another
    /// process. Answering a request (its Approve / Deny buttons) is its only write.
    Web(web::WebFlags),
    /// Host teammates of Teams run by other processes, on a NATS store (--store URL).
    ///
    /// Registers in the store's worker registry (its name, free slots and workspace: its
    /// canonical path, and the git top level and HEAD when it is a repository) and hosts the
    /// teammates a Lead's process places on it (troupe run --placement workers): each one is
    /// cold-resumed from the store as troupe resume would, calls its Team through the Lead's
    /// process, and runs until it settles; then its slot is free again. Ctrl-C / SIGTERM parks
    /// the hosted members (inboxes kept; the Team resumes them elsewhere) and exits 0. With
    /// --adopt it also takes over Team Leads whose process died with work left — mid-turn, or
    /// while it waited for its teammates (troupe resume as its child, one per free slot). Exit 2: no NATS store, --slots 0, a name a live worker
    /// already has.
    Worker(worker::WorkerFlags),
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
    // Every command a Team runs stays this process's descendant, even daemonised, so the
    // control socket can tell it from the user (see `control::become_subreaper`).
    if let Err(e) = control::become_subreaper() {
        eprint_line!(
            "troupe: note: cannot become a child subreaper ({e}): a daemonised command of a \
             member could reach the control socket as the user"
        );
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { code, error }) => {
            // One line: the outermost context and its causes, joined.
            if let Some(error) = error {
                let line = exit::coded_line(&error);
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
        if let Some(long) = arg
            .strip_prefix("--")
            .filter(|l| !l.is_empty() && !l.contains('='))
        {
            // An option of this level that takes a value (`--home DIR`, `--store URL`, …):
            // the value is not a subcommand.
            let takes_value = command
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .is_some_and(|a| a.get_action().takes_values());
            if takes_value {
                rest.next();
            }
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
    if let Command::Store {
        command: store::StoreCommand::Copy(flags),
    } = cli.command
    {
        if let Some(store) = &cli.store.store {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "troupe store copy takes its stores as --from and --to, not --store {}",
                troupe_store_nats::redact_url(store)
            )));
        }
        return store::copy(flags, cli.store.replicas);
    }
    // `--store file:DIR` is the home DIR: it stands for `--home DIR`.
    let (store_home, spec) = store::resolve(&cli.store, cli.home.as_deref())?;
    let cli_home_given = cli.home.is_some();
    let home_flag = store_home.or(cli.home);
    let home = troupe_journal::resolve_home(home_flag.as_deref()).ok_or_else(|| {
        Failure::bad_input(anyhow::anyhow!(
            "cannot find a Troupe home: pass --home DIR or set TROUPE_HOME"
        ))
    })?;
    let named = home_name(&home, home_flag.is_some());
    check_home(&home, &named)?;
    // The user's configuration file may name the store (when --store and $TROUPE_STORE do
    // not), so every command reads it; a bad one is bad input naming FILE:LINE:COLUMN.
    let user = settings::UserStore::load(&home)?;
    let (spec, store_settings) = store::choose(&cli.store, spec, &home, cli_home_given, user);
    if let Command::Config(flags) = cli.command {
        // `troupe config` only shows the settings: the store's URL is checked, never
        // connected to (a NATS server that is down is no reason not to show the file).
        if let Some(store::StoreSpec::Nats(url)) = &spec {
            troupe_store_nats::parse_url(url)?;
            store::nats_options(Some(store_settings.replicas.value))?;
        }
        return settings::show::show(flags, &home, &store_settings);
    }
    let mut store = match &spec {
        Some(spec) => store::Store::open(spec, Some(store_settings.replicas.value))?,
        None => store::Store::files(&home),
    };
    store.arg = store::store_arg(&cli.store, spec.as_ref());
    // `$TROUPE_CLOCK`: a fixed "now" (tests; see `store::clock_from_env`).
    if let Some(clock) = store::clock_from_env()? {
        store.journal = store.journal.with_clock(clock);
    }
    let journal: Journal = store.journal.clone();
    let home = Home {
        dir: home,
        flag: home_flag.as_deref(),
        named,
        store,
    };
    match cli.command {
        Command::Run(flags) => work::run(flags, home),
        Command::Resume(flags) => work::resume(flags, home, demo::resumed_framing),
        Command::Demo(flags) => demo::run(flags, home),
        Command::Send(flags) => send::run(flags, &home),
        Command::Chat(flags) => chat::run(flags, &home),
        Command::Sessions { json } => inspect::sessions(&journal, &home.store, json),
        Command::Log {
            session,
            json,
            from,
            follow,
        } => inspect::log(&journal, &session, json, from, follow),
        Command::Team { command } => team::run(&home, command),
        Command::Approve(flags) => approve::run(&journal, flags, &home.args()),
        Command::Web(flags) => web::run(flags, &home.dir, &home.store),
        Command::Worker(flags) => worker::run(flags, &home),
        // Handled above, before any store is opened.
        Command::Config(_) => Ok(()),
        // Handled above, before any home is resolved: `store copy` names its own stores.
        Command::Store { .. } => Ok(()),
    }
}
