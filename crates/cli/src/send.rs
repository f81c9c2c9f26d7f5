//! `troupe send SESSION [--to NAME] [--wakeup] [--id ID] TEXT`: a durable message from the user
//! to a Team's Lead or one of its teammates (README "Talking to a running team").
//!
//! Where the message goes, decided afresh on every attempt ([`ask_team`], which `troupe chat`
//! uses too):
//! 1. The control socket of the process running the Team (`control.rs`): it appends the
//!    message through the Team's serializer and delivers it as Team mail is delivered. On a
//!    NATS store, when no process of this home serves the socket, the same request goes to
//!    the Team's control subject `troupe.control.<lead-id>` (NATS request-reply, answered by
//!    the process holding the Lead's lease, on any host); NATS's "no responders" means not
//!    served.
//! 2. No process serves either: the message is appended to the stopped Team's Lead log
//!    ([`troupe_runtime::append_user_message`], under the log's lock or lease), and the next
//!    `troupe resume` delivers it. A socket file found there was left by a dead process (only
//!    the holder of the lock serves it): it is removed, with a note.
//! 3. The lock is held but nobody answers (the Team is starting or stopping), or an answer is
//!    lost (the process died, a NATS request timed out): try again, for up to [`DEADLINE`];
//!    then `CONTROL_UNREACHABLE`.
//!
//! The message's id is chosen here (`--id`, else a random UUID) and stays the same across
//! attempts, so an attempt whose answer was lost (the process died after appending) is found
//! queued by the next one and not sent twice. What survives a crash at each point: of this
//! process, before it printed, the message is queued or not, and the same `--id` sent again
//! gives the one message either way; of the Team's process, see
//! [`troupe_runtime::team::TeamService::user_send`] — a message is either in the Lead log (and is
//! delivered once, by that process or the next resume) or was never acknowledged.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use async_nats::RequestErrorKind;
use serde_json::Value;
use troupe_journal::{Journal, JournalError};
use troupe_protocol::{ErrorCode, SessionId};
use troupe_runtime::{
    LeadLog, LeadRead, UserMailError, UserMailReceipt, append_user_message, user_message_content,
};
use troupe_store_nats::NatsBackend;
use troupe_team::{Delivery, LEAD_NAME, UserSend, js_trim, team_message_id};

use crate::args::resolve_session;
use crate::control::{Request, at_short_path, socket_path, valid_message_id};
use crate::exit::Failure;
use crate::hints::not_a_root;
use crate::home::Home;
use crate::output::{eprint_line, escape_controls};

/// How long a send keeps trying to reach a Team whose process holds its log but does not
/// answer on its control socket (it is starting up or shutting down).
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

/// How long one answer of the control socket (or subject) may take (a wakeup that cold-resumes a teammate
/// is answered once the teammate's log holds the message).
const ANSWER_LIMIT: Duration = Duration::from_secs(60);

/// The code of a Team whose process holds its log but does not answer (exit 1).
const CONTROL_UNREACHABLE: &str = "CONTROL_UNREACHABLE";

/// The Team refusals that are bad input: the message as typed cannot be sent (exit 2).
const BAD_MESSAGE_CODES: [&str; 5] = [
    "TEAM_MEMBER_NOT_FOUND",
    "TEAM_INVALID_ARGUMENT",
    "TEAM_MAILBOX_FULL",
    "TEAM_MESSAGE_TOO_LARGE",
    "NOT_A_TEAM",
];

/// `troupe send`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct SendFlags {
    /// The Lead's session id, or a unique prefix of it (see `troupe sessions`).
    pub(crate) session: String,
    /// The member to send to: `lead` (the default) or a teammate's name.
    #[arg(long, value_name = "NAME", default_value = LEAD_NAME)]
    pub(crate) to: String,
    /// Start a turn of the member with the message (it waits for the current one); without
    /// it, a running member reads the message at its next step and an idle one at its next
    /// turn (Team mail's quiet delivery).
    #[arg(long)]
    pub(crate) wakeup: bool,
    /// This message's own id (1-64 characters of [A-Za-z0-9._-]; default: a random UUID).
    /// A send repeated with the same id is the same message: it is delivered once.
    #[arg(long, value_name = "ID")]
    pub(crate) id: Option<String>,
    /// The message; `-` reads it from stdin.
    pub(crate) text: String,
}

/// A message ready to go: its Team, target, text, delivery and id.
pub(crate) struct Outgoing {
    pub(crate) lead: SessionId,
    pub(crate) to: String,
    pub(crate) text: String,
    pub(crate) wakeup: bool,
    pub(crate) id: String,
}

/// `troupe send`.
pub(crate) fn run(flags: SendFlags, home: &Home<'_>) -> Result<(), Failure> {
    let text = if flags.text == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::bad_input(anyhow!("reading the message from stdin: {e}")))?;
        text
    } else {
        flags.text
    };
    if js_trim(&text).is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "the message is empty: give the text to send (or - to read it from stdin)"
        )));
    }
    let id = match flags.id {
        Some(id) if !valid_message_id(&id) => {
            return Err(Failure::bad_input(anyhow!(
                "--id {id:?}: give 1-64 characters of [A-Za-z0-9._-]"
            )));
        }
        Some(id) => id,
        None => uuid(),
    };
    let journal = &home.store.journal;
    let lead = check_team(journal, &flags.session, &flags.to, &home.args())?;
    let outgoing = Outgoing {
        lead,
        to: flags.to,
        text,
        wakeup: flags.wakeup,
        id,
    };
    let sent = deliver(home, &outgoing, &mut |note| {
        eprint_line!("troupe: note: {note}");
    })?;
    println!(
        "{}",
        escape_controls(&receipt_line(&sent, &outgoing, &home.args()))
    );
    Ok(())
}

/// A random id for a message (a UUID v4, as session ids are minted).
pub(crate) fn uuid() -> String {
    SessionId::random().to_string()
}

/// Resolves `raw` to a Team's Lead and checks, from its log as it stands (no lock), that `to`
/// names its Lead or an active teammate — so a message to nobody is refused before anything
/// is tried (the Team's serializer decides again when it appends).
///
/// # Errors
/// Bad input: an unknown or ambiguous session, a teammate's or child's session (naming the
/// Lead to send to), a session without a Team (`NOT_A_TEAM`), an unknown target
/// (`TEAM_MEMBER_NOT_FOUND`). A damaged Lead log is a failure of the work.
pub(crate) fn check_team(
    journal: &Journal,
    raw: &str,
    to: &str,
    home_args: &str,
) -> Result<SessionId, Failure> {
    let id = resolve_session(journal, raw)?;
    let lead = LeadLog::read(journal, &id, LeadRead::Team).map_err(|e| match e {
        troupe_runtime::LeadLogError::Journal(e) => Failure::from(e),
        other => Failure::work(other),
    })?;
    let role = lead.role();
    if role.is_child()
        && let Some(parent) = &lead.summary().header.parent_session
    {
        let name = lead
            .config()
            .map_or_else(|| "NAME".to_owned(), |c| c.name.clone());
        let command = format!("troupe send {parent} --to {name}{home_args} TEXT");
        return Err(not_a_root(&id, role, parent, &command));
    }
    if !lead.is_team() {
        return Err(Failure::bad_input(anyhow!(
            "NOT_A_TEAM: session {id} is not a Team session: troupe send talks to Teams (troupe \
             run --team); give a plain session its next instruction with troupe resume {id} \
             PROMPT"
        )));
    }
    if let Err(e) = lead.state().resolve_target(to) {
        let members: Vec<&str> = lead
            .state()
            .members()
            .iter()
            .filter(|m| m.phase == troupe_team::MemberPhase::Active)
            .map(|m| m.name.as_str())
            .collect();
        let names = std::iter::once(LEAD_NAME)
            .chain(members)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Failure::bad_input(anyhow!(
            "{}: {e} in the Team of {id} (members: {names}); nothing was sent",
            e.code()
        )));
    }
    Ok(id)
}

/// Where the message went.
pub(crate) struct Sent {
    pub(crate) receipt: UserMailReceipt,
    /// Whether the Team was running (its process answered) rather than appended to.
    pub(crate) running: bool,
}

/// Sends `outgoing` (see the module docs for the order of the attempts). `note` gets what the
/// user should know on the way (a dead process's socket removed, a retry).
///
/// # Errors
/// A Team refusal (bad input for [`BAD_MESSAGE_CODES`]), `CONTROL_UNREACHABLE` after
/// [`DEADLINE`], a journal error of the direct append.
pub(crate) fn deliver(
    home: &Home<'_>,
    outgoing: &Outgoing,
    note: &mut dyn FnMut(&str),
) -> Result<Sent, Failure> {
    let journal = &home.store.journal;
    let socket = socket_path(&home.dir, &outgoing.lead);
    let started = Instant::now();
    let mut lost_answer = false;
    let request = Request::Send {
        id: outgoing.id.clone(),
        to: outgoing.to.clone(),
        text: outgoing.text.clone(),
        wakeup: outgoing.wakeup,
    };
    loop {
        match ask_team(home, &outgoing.lead, &request) {
            Asked::Answer(answer) => {
                if answer["ok"] == true {
                    return Ok(Sent {
                        receipt: receipt_of(&answer, outgoing)?,
                        running: true,
                    });
                }
                let code = answer["code"].as_str().unwrap_or("CONTROL_BAD_REQUEST");
                let message = answer["message"].as_str().unwrap_or("refused");
                // A Team that is closing: it releases its log soon, then the message is
                // appended to it.
                if code != "TEAM_DISPOSED" {
                    return Err(refused(code, message));
                }
            }
            Asked::Lost => {
                if !lost_answer {
                    note(
                        "the Team's process ended before it answered (or its answer was lost): \
                         trying again with the same message id (it is not sent twice)",
                    );
                }
                lost_answer = true;
            }
            Asked::NotServed => match append(journal, &socket, outgoing, note) {
                Ok(receipt) => {
                    return Ok(Sent {
                        receipt,
                        running: false,
                    });
                }
                Err(UserMailError::Journal(JournalError::Locked { .. }))
                | Err(UserMailError::Journal(JournalError::Leased { .. })) => {}
                Err(e @ (UserMailError::Team(_) | UserMailError::NotATeam { .. })) => {
                    return Err(refused(e.code(), &e.to_string()));
                }
                Err(UserMailError::Journal(e)) => return Err(e.into()),
                Err(e @ UserMailError::Log { .. }) => {
                    return Err(Failure::work(anyhow!("{}: {e}", e.code())));
                }
            },
        }
        if started.elapsed() >= DEADLINE {
            let subject = if home.store.is_nats() {
                format!(
                    " or its control subject {}",
                    NatsBackend::control_subject(&outgoing.lead)
                )
            } else {
                String::new()
            };
            return Err(Failure::work(anyhow!(
                "{CONTROL_UNREACHABLE}: the Team of {} is held by a running process that did not \
                 answer on its control socket {}{subject} within {} s (is it an older troupe?); \
                 nothing was sent",
                outgoing.lead,
                socket.display(),
                DEADLINE.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn refused(code: &str, message: &str) -> Failure {
    let error = anyhow!("{code}: {message}; nothing was sent");
    if BAD_MESSAGE_CODES.contains(&code) {
        Failure::bad_input(error)
    } else {
        Failure::work(error)
    }
}

/// What one attempt at the control socket gave.
pub(crate) enum Asked {
    /// The process answered.
    Answer(Value),
    /// Nobody serves the socket (no file, or a file nobody listens on).
    NotServed,
    /// The connection broke before the answer (the process died, or closed it).
    Lost,
}

/// One control request to the running Team of `lead`: to its control socket in `home`, and
/// when no process serves that, on a NATS store to its control subject (NATS request-reply;
/// "no responders" is not served). The one function `troupe send` and `troupe chat` reach a
/// running Team through.
pub(crate) fn ask_team(home: &Home<'_>, lead: &SessionId, request: &Request) -> Asked {
    match ask_socket(&socket_path(&home.dir, lead), request) {
        Asked::NotServed => {}
        asked => return asked,
    }
    match home.store.nats_backend() {
        Some(nats) => ask_nats(nats, lead, request),
        None => Asked::NotServed,
    }
}

/// One request to the control subject of `lead` on the NATS store `nats`, and its answer.
fn ask_nats(nats: &NatsBackend, lead: &SessionId, request: &Request) -> Asked {
    let Ok(payload) = serde_json::to_vec(request) else {
        return Asked::Lost;
    };
    match nats.request_blocking(NatsBackend::control_subject(lead), payload, ANSWER_LIMIT) {
        Ok(answer) => serde_json::from_slice(&answer).map_or(Asked::Lost, Asked::Answer),
        Err(e) if e.kind() == RequestErrorKind::NoResponders => Asked::NotServed,
        // Timed out (the process died, or is stuck) or the connection failed: the next attempt
        // asks again with the same message id.
        Err(_) => Asked::Lost,
    }
}

/// One request to the control socket at `socket` (through a short address when its path is
/// too long for one: [`at_short_path`]), and its answer.
fn ask_socket(socket: &Path, request: &Request) -> Asked {
    let stream = match at_short_path(socket, |address| UnixStream::connect(address)) {
        Ok(stream) => stream,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            return Asked::NotServed;
        }
        // Anything else (permissions): nobody this process can reach serves it.
        Err(_) => return Asked::NotServed,
    };
    let Ok(mut line) = serde_json::to_string(request) else {
        return Asked::Lost;
    };
    line.push('\n');
    let _ = stream.set_read_timeout(Some(ANSWER_LIMIT));
    let mut writer = &stream;
    if writer.write_all(line.as_bytes()).is_err() {
        return Asked::Lost;
    }
    let mut answer = String::new();
    match BufReader::new(&stream).read_line(&mut answer) {
        Ok(n) if n > 0 => serde_json::from_str(&answer).map_or(Asked::Lost, Asked::Answer),
        _ => Asked::Lost,
    }
}

/// Appends `outgoing` to the stopped Team (under its log's lock), removing a control socket a
/// dead process left.
fn append(
    journal: &Journal,
    socket: &Path,
    outgoing: &Outgoing,
    note: &mut dyn FnMut(&str),
) -> Result<UserMailReceipt, UserMailError> {
    let message_id = team_message_id(&outgoing.id)?;
    let request = UserSend {
        target: outgoing.to.clone(),
        content: user_message_content(&outgoing.text),
        delivery: if outgoing.wakeup {
            Delivery::Wakeup
        } else {
            Delivery::Quiet
        },
    };
    let mut removed = None;
    let receipt = append_user_message(journal, &outgoing.lead, message_id, &request, &mut || {
        // This process holds the Lead log: no live process serves its socket.
        if std::fs::remove_file(socket).is_ok() {
            removed = Some(socket.to_path_buf());
        }
    })?;
    if let Some(path) = removed {
        note(&format!(
            "removed the control socket {} left by a process that is no longer running",
            path.display()
        ));
    }
    Ok(receipt)
}

/// The receipt in a control socket's answer.
fn receipt_of(answer: &Value, outgoing: &Outgoing) -> Result<UserMailReceipt, Failure> {
    let bad = || {
        Failure::work(anyhow!(
            "CONTROL_BAD_REQUEST: an answer that is not a receipt: {answer}"
        ))
    };
    let message_id = answer["messageId"]
        .as_str()
        .and_then(|m| troupe_protocol::MessageId::new(m).ok())
        .ok_or_else(bad)?;
    Ok(UserMailReceipt {
        message_id,
        target_name: answer["to"]
            .as_str()
            .map_or_else(|| outgoing.to.clone(), str::to_owned),
        seq: troupe_protocol::Seq(answer["seq"].as_u64().ok_or_else(bad)?),
        delivered: answer["delivered"].as_bool().ok_or_else(bad)?,
        repeated: answer["repeated"].as_bool().unwrap_or(false),
    })
}

/// The one line `troupe send` prints: `delivered to NAME` or `queued for NAME`, the seq of its
/// `team/message/queued` record, the message id, and when a queued message is read.
pub(crate) fn receipt_line(sent: &Sent, outgoing: &Outgoing, home_args: &str) -> String {
    let r = &sent.receipt;
    let status = if r.delivered {
        "delivered to"
    } else {
        "queued for"
    };
    let mut line = format!(
        "{status} {} (seq {}, {})",
        r.target_name, r.seq.0, r.message_id
    );
    if r.repeated {
        line.push_str(", already queued by an earlier send with this id: not sent again");
    }
    let lead_quiet = r.target_name == LEAD_NAME && !outgoing.wakeup;
    if !sent.running && !r.delivered {
        if lead_quiet {
            line.push_str(&format!(
                ": the Team is not running; the Lead reads it in its next turn (troupe resume \
                 {}{home_args} \"<next instruction>\")",
                outgoing.lead
            ));
        } else if outgoing.wakeup {
            line.push_str(&format!(
                ": the Team is not running; troupe resume {}{home_args} delivers it",
                outgoing.lead
            ));
        } else {
            line.push_str(&format!(
                ": the Team is not running; {} reads it when it next runs (or send with \
                 --wakeup)",
                r.target_name
            ));
        }
    } else if !r.delivered {
        line.push_str(&format!(
            ": {} reads it when it next runs (or send with --wakeup)",
            r.target_name
        ));
    }
    line
}
