//! The control socket of a running Team: `$TROUPE_HOME/run/<lead-id>.sock`, served by the
//! `troupe run` / `resume` / `demo` process that holds the Team's Lead log, so that `troupe
//! send` and `troupe chat` can talk to the live Team (README "Talking to a running team") —
//! and on a NATS store the same requests on the control subject `troupe.control.<lead-id>`
//! ([`troupe_store_nats::NatsBackend::control_subject`]), so a sender on another host, or with
//! another `$TROUPE_HOME`, reaches it too.
//!
//! **Protocol**: JSON lines over a Unix stream socket. Each request is one line, answered by
//! one line, in order; a connection may carry several requests. On NATS each request is the
//! payload of one NATS request (the same JSON, without the newline) and its answer the payload
//! of the one reply. Requests:
//! - `{"op":"send","id":ID,"to":NAME,"text":TEXT,"wakeup":BOOL}` — a message from the user
//!   ([`troupe_runtime::team::TeamService::user_send`]); answer
//!   `{"ok":true,"messageId","to","seq","delivered","repeated"}`.
//! - `{"op":"agents"}` — the live roster; answer `{"ok":true,"members":[MemberView…]}`.
//! - `{"op":"interrupt"}` — `troupe chat`'s Ctrl-C (and its Ctrl-D, which leaves too): the
//!   running process stops every running turn as a Ctrl-C at its own terminal does (inboxes
//!   kept, so the Team is parked and `troupe resume` continues it); answer `{"ok":true}` once
//!   the run has been told.
//!
//! A refusal is `{"ok":false,"code":CODE,"message":TEXT}` (a Team rule's code, `TEAM_DISPOSED`
//! while the Team closes, `CONTROL_BAD_REQUEST` for a line that is not a request — not JSON,
//! not UTF-8 —, `CONTROL_PEER_REFUSED` for a peer that may not talk to the Team). A request
//! line is at most [`MAX_REQUEST_BYTES`].
//!
//! **Who may talk to it**: the socket's directory is private to the user, and the server
//! checks each connection's peer credentials (`SO_PEERCRED`): a peer of another uid, or one
//! that descends from the serving process (a member's `bash` command or MCP server — the
//! sandbox does not confine Unix sockets — even daemonised, the process being a child
//! subreaper), gets `CONTROL_PEER_REFUSED` as the answer to its first request and is
//! disconnected; nothing it asked is done or written. A refusal writes nothing.
//!
//! **Who may bind it**: only the process holding the Lead log's lock (or lease), and only
//! while it holds it: it removes whatever is at the path, then binds, and unlinks the socket
//! when it stops serving (before the Team is shut down). A socket a dead process left behind
//! is therefore removed only by a holder of the lock — the next run, or `troupe send` while it
//! appends to the stopped Team — never while a live process could be serving it. The `run`
//! directory is made private to the user (mode 0700): only they can talk to their Teams.
//!
//! **Long home paths**: a socket address holds at most [`MAX_SOCKET_PATH`] bytes of path. A
//! longer socket path is bound and connected as `/proc/self/fd/<fd>/<lead-id>.sock`, through
//! an open descriptor of the `run` directory ([`at_short_path`]): the socket is the same file
//! in the same private directory, only its address is short.
//!
//! **On NATS** the holder subscribes to the control subject once it holds the Lead log's
//! lease, after the socket is bound, and unsubscribes before it stops serving the socket (so
//! before the Team is shut down and the lease released); a sender that finds no subscriber
//! (NATS's "no responders") appends to the stopped Team under the lease, as it does when no
//! socket is served. A server whose writer lost the lease (`JOURNAL_LEASE_LOST`: another
//! process may hold the Team now) answers `TEAM_DISPOSED` and stops serving the subject, so the
//! sender asks again and reaches the new holder. Anyone who can use the NATS server can send
//! requests: the store's users are trusted as its writers are (they can write the logs too).

use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use troupe_protocol::{ErrorCode, SessionId};
use troupe_runtime::{Runtime, user_message_content};
use troupe_store_nats::NatsBackend;
use troupe_team::{Delivery, UserSend, team_message_id};

/// The longest request line served, in bytes (a message is bounded by the Team's
/// `maxMessageBytes`, 64 KiB by default, well below).
pub(crate) const MAX_REQUEST_BYTES: u64 = 1 << 20;

/// How long a stop waits for the requests in flight to be answered.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// The longest path a Unix socket address holds (`sun_path` is 108 bytes with its NUL).
pub(crate) const MAX_SOCKET_PATH: usize = 107;

/// The control socket of the Team led by `lead` in `home`: `<home>/run/<lead>.sock`.
pub(crate) fn socket_path(home: &Path, lead: &SessionId) -> PathBuf {
    home.join("run").join(format!("{lead}.sock"))
}

/// Runs `f` (a `bind` or `connect`) with an address for the socket at `path` that fits a
/// socket address: `path` itself when it has at most [`MAX_SOCKET_PATH`] bytes, else
/// `/proc/self/fd/<fd>/<name>` through a descriptor of `path`'s directory opened for the call
/// (Linux resolves it to that very directory, so the socket is bound in, or connected from,
/// the private `run` directory itself; the descriptor is closed when `f` returns).
///
/// # Errors
/// The directory cannot be opened (missing: `NotFound`, which senders take as "not served");
/// `f`'s own error.
pub(crate) fn at_short_path<T>(
    path: &Path,
    f: impl FnOnce(&Path) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return f(path);
    };
    if path.as_os_str().len() <= MAX_SOCKET_PATH {
        return f(path);
    }
    let dir = std::fs::File::open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    let result = f(&short);
    drop(dir);
    result
}

/// One request to the control socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
pub(crate) enum Request {
    /// A message from the user.
    Send {
        /// The sender's unique id (`[A-Za-z0-9._-]`, see [`valid_message_id`]): the message is
        /// `team-message-<id>`, and a retry with the same id is the same message.
        id: String,
        /// `lead` or a teammate's name.
        to: String,
        /// The text.
        text: String,
        /// Wakeup (a turn) rather than quiet delivery.
        wakeup: bool,
    },
    /// The live roster.
    Agents,
    /// Stop the running turns (keeping every inbox), as a Ctrl-C at the run's terminal does.
    Interrupt,
}

/// What the control socket tells the run that serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ControlNote {
    /// A line for the run's output.
    Line(String),
    /// A [`Request::Interrupt`]: stop the running turns, keeping inboxes.
    Interrupt,
    /// This process lost the Lead's lease (the reason): it can no longer serve the Team, and
    /// the run ends failed (`JOURNAL_LEASE_LOST`, DESIGN §7), resumable.
    LeaseLost(String),
}

/// Whether `id` may name a message (`troupe send --id`): 1–64 characters of
/// `[A-Za-z0-9._-]`.
pub(crate) fn valid_message_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A running control socket; dropping it stops serving (and unlinks the socket).
pub(crate) struct ControlServer {
    path: PathBuf,
    accept: Option<tokio::task::JoinHandle<JoinSet<()>>>,
    stop: CancellationToken,
}

impl ControlServer {
    /// Serves the control socket of the live Team of `lead` (which this process holds: see the
    /// module docs). `notes` gets one line per message from the user that was accepted (for
    /// the run's output), and each interrupt asked for.
    ///
    /// # Errors
    /// The `run` directory cannot be made or the socket cannot be bound (e.g. a home path too
    /// long for a socket address): the run goes on without it, and `troupe send` says the
    /// Team cannot be reached.
    pub(crate) fn start(
        home: &Path,
        runtime: Runtime,
        lead: SessionId,
        notes: mpsc::UnboundedSender<ControlNote>,
    ) -> std::io::Result<Self> {
        let path = socket_path(home, &lead);
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            // A directory made before (by an older umask) is made private too.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        // This process holds the Lead log: nothing else can be serving this path.
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = at_short_path(&path, |address| UnixListener::bind(address))?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let context = Arc::new(Context {
            runtime,
            lead,
            notes,
        });
        let accept = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            let context = Arc::clone(&context);
                            connections.spawn(async move { serve(stream, &context).await });
                        }
                        // Out of file descriptors, most likely: try again shortly.
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    },
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
            connections
        });
        Ok(Self {
            path,
            accept: Some(accept),
            stop,
        })
    }

    /// Stops serving: unlinks the socket (new senders find the Team stopping and wait for it
    /// to be released, then append to its log), and waits up to [`STOP_LIMIT`] for the
    /// requests in flight to be answered.
    pub(crate) async fn stop(mut self) {
        let _ = std::fs::remove_file(&self.path);
        self.stop.cancel();
        if let Some(accept) = self.accept.take() {
            drain(accept).await;
        }
    }
}

/// Waits for a server's loop to end (it hands back the requests it is still answering), then
/// up to [`STOP_LIMIT`] for those answers; the ones left are aborted.
async fn drain(server: tokio::task::JoinHandle<JoinSet<()>>) {
    if let Ok(mut answering) = server.await {
        let drained = async { while answering.join_next().await.is_some() {} };
        if tokio::time::timeout(STOP_LIMIT, drained).await.is_err() {
            answering.abort_all();
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = std::fs::remove_file(&self.path);
            accept.abort();
        }
    }
}

/// The control subject of a running Team on a NATS store (see the module docs, "On NATS");
/// dropping it stops serving (the subscription is dropped, the requests in flight aborted).
pub(crate) struct NatsControl {
    serve: Option<tokio::task::JoinHandle<JoinSet<()>>>,
    stop: CancellationToken,
}

impl NatsControl {
    /// Subscribes to the control subject of the live Team of `lead`
    /// ([`NatsBackend::control_subject`]) with the store's client and serves its requests.
    /// Returns once the server has the subscription (a flush), so a sender told the Team
    /// runs finds it served. `notes` as for [`ControlServer::start`].
    ///
    /// # Errors
    /// The subscription or the flush fails (the connection is down): the run goes on without
    /// it, and senders elsewhere wait for the Team to stop, then append to it.
    pub(crate) async fn start(
        nats: &NatsBackend,
        runtime: Runtime,
        lead: SessionId,
        notes: mpsc::UnboundedSender<ControlNote>,
    ) -> Result<Self, async_nats::Error> {
        let client = nats.client();
        let mut requests = client
            .subscribe(NatsBackend::control_subject(&lead))
            .await?;
        client.flush().await?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let context = Arc::new(Context {
            runtime,
            lead,
            notes,
        });
        let serve = tokio::spawn(async move {
            let mut answering = JoinSet::new();
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    request = requests.next() => {
                        let Some(request) = request else { break };
                        let Some(reply) = request.reply.clone() else { continue };
                        let (context, client, lost) =
                            (Arc::clone(&context), client.clone(), stopped.clone());
                        answering.spawn(async move {
                            let too_long = request.payload.len() as u64 > MAX_REQUEST_BYTES;
                            let mut answer =
                                answer_text(&request.payload, too_long, &context).await;
                            if answer["code"] == "JOURNAL_LEASE_LOST" {
                                // Another process may hold the Team now: this one stops
                                // serving it, and the sender asks again.
                                answer = refusal(
                                    "TEAM_DISPOSED",
                                    "this process lost the Team's lease: it no longer runs it",
                                );
                                lost.cancel();
                            }
                            let _ = client.publish(reply, answer.to_string().into()).await;
                            let _ = client.flush().await;
                        });
                    }
                    Some(_) = answering.join_next(), if !answering.is_empty() => {}
                }
            }
            // New requests find no responder from here on.
            let _ = requests.unsubscribe().await;
            let _ = client.flush().await;
            answering
        });
        Ok(Self {
            serve: Some(serve),
            stop,
        })
    }

    /// Stops serving: unsubscribes (new senders find no responder and wait for the Team to be
    /// released, then append to its log) and waits up to [`STOP_LIMIT`] for the requests in
    /// flight to be answered.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(serve) = self.serve.take() {
            drain(serve).await;
        }
    }
}

impl Drop for NatsControl {
    fn drop(&mut self) {
        if let Some(serve) = self.serve.take() {
            serve.abort();
        }
    }
}

struct Context {
    runtime: Runtime,
    lead: SessionId,
    notes: mpsc::UnboundedSender<ControlNote>,
}

/// Answers the requests of one connection, in order, until it closes. A peer
/// [`peer_refusal`] refuses gets that refusal as the answer to its first request, and the
/// connection is closed: nothing it asks is done.
async fn serve(stream: UnixStream, context: &Context) {
    let refused = peer_refusal(&stream);
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = Vec::new();
        match (&mut reader)
            .take(MAX_REQUEST_BYTES + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let too_long = line.len() as u64 > MAX_REQUEST_BYTES;
        let answer = match &refused {
            Some(refusal) => refusal.clone(),
            None => answer_text(line.trim_ascii_end(), too_long, context).await,
        };
        let mut text = answer.to_string();
        text.push('\n');
        if write.write_all(text.as_bytes()).await.is_err() || too_long || refused.is_some() {
            return;
        }
    }
}

/// Why the peer of `stream` may not talk to this Team, if it may not (code
/// `CONTROL_PEER_REFUSED`): its credentials (`SO_PEERCRED`, taken by the kernel when the
/// peer connected) name another user, or a process that descends from this one — a command a
/// member runs (`bash`, an MCP server), even one that daemonised itself, since this process is
/// a child subreaper ([`become_subreaper`]) — or the credentials cannot be read or the
/// process's ancestry cannot be followed (it exited). The sandbox does not confine Unix
/// sockets, so without this check a member's command could pose as the user (`troupe send`)
/// or interrupt the run.
fn peer_refusal(stream: &UnixStream) -> Option<Value> {
    let refuse = |why: String| {
        Some(refusal(
            "CONTROL_PEER_REFUSED",
            &format!("{why}: only the user, from outside the Team, may talk to a running Team"),
        ))
    };
    let credentials = match stream.peer_cred() {
        Ok(credentials) => credentials,
        Err(e) => return refuse(format!("the peer's credentials cannot be read ({e})")),
    };
    let me = rustix::process::getuid().as_raw();
    if credentials.uid() != me {
        return refuse(format!(
            "the peer runs as uid {}, not as this run's uid {me}",
            credentials.uid()
        ));
    }
    let Some(pid) = credentials.pid() else {
        return refuse("the peer's process id is unknown".to_owned());
    };
    match descends_from(pid, std::process::id()) {
        Ok(false) => None,
        Ok(true) => refuse(format!(
            "the peer (pid {pid}) is a command started by this run (a member's bash or MCP \
             server)"
        )),
        Err(e) => refuse(format!(
            "the peer's ancestry (pid {pid}) cannot be read ({e})"
        )),
    }
}

/// Whether process `pid` is `ancestor` or one of its descendants, following the parent ids
/// in `/proc/<pid>/stat` (field 4) up to the init process.
///
/// # Errors
/// A `/proc` entry on the way cannot be read or parsed (the process exited meanwhile).
fn descends_from(pid: i32, ancestor: u32) -> std::io::Result<bool> {
    let mut current = u32::try_from(pid).map_err(std::io::Error::other)?;
    // A parent chain is far shorter than this; the bound only guards against a loop.
    for _ in 0..4096 {
        if current == ancestor {
            return Ok(true);
        }
        if current <= 1 {
            return Ok(false);
        }
        let stat = std::fs::read_to_string(format!("/proc/{current}/stat"))?;
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses; it ends at the last `)`.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("/proc/{current}/stat: no parent id")))?;
        current = parent;
    }
    Ok(false)
}

/// Makes this process a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`): a process a
/// member's command started that leaves its parent (`setsid`, a double fork, `nohup … &`) is
/// re-parented to this process rather than to init, so it still descends from this one and
/// [`peer_refusal`] still refuses it. Such an orphan is not reaped until this process exits
/// (it stays a zombie entry meanwhile): reaping it would need `waitpid(-1)`, which would take
/// the exit statuses of tokio's own children.
///
/// # Errors
/// The `prctl` fails (not on Linux ≥ 3.4).
pub(crate) fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

/// The answer to one request's text (`too_long`: it had more than [`MAX_REQUEST_BYTES`]).
async fn answer_text(request: &[u8], too_long: bool, context: &Context) -> Value {
    if too_long {
        return refusal(
            "CONTROL_BAD_REQUEST",
            &format!("a request is at most {MAX_REQUEST_BYTES} bytes"),
        );
    }
    match serde_json::from_slice::<Request>(request) {
        Ok(request) => answer(request, context).await,
        Err(e) => refusal(
            "CONTROL_BAD_REQUEST",
            &format!("not a control request: {e}"),
        ),
    }
}

fn refusal(code: &str, message: &str) -> Value {
    json!({"ok": false, "code": code, "message": message})
}

async fn answer(request: Request, context: &Context) -> Value {
    match request {
        Request::Send {
            id,
            to,
            text,
            wakeup,
        } => {
            if !valid_message_id(&id) {
                return refusal(
                    "CONTROL_BAD_REQUEST",
                    "id must be 1-64 characters of [A-Za-z0-9._-]",
                );
            }
            let message_id = match team_message_id(&id) {
                Ok(message_id) => message_id,
                Err(e) => return refusal(e.code(), &e.to_string()),
            };
            let request = UserSend {
                target: to,
                content: user_message_content(&text),
                delivery: if wakeup {
                    Delivery::Wakeup
                } else {
                    Delivery::Quiet
                },
            };
            match context
                .runtime
                .teams()
                .user_send(&context.lead, message_id, &request)
                .await
            {
                Ok(receipt) => {
                    let status = if receipt.delivered {
                        "delivered to"
                    } else {
                        "queued for"
                    };
                    // A repeat (the same id again: a retry) is the same message, noted once.
                    if !receipt.repeated {
                        let _ = context.notes.send(ControlNote::Line(format!(
                            "message from the user {status} {} (troupe send; seq {})",
                            receipt.target_name, receipt.seq.0
                        )));
                    }
                    json!({
                        "ok": true,
                        "messageId": receipt.message_id,
                        "to": receipt.target_name,
                        "seq": receipt.seq.0,
                        "delivered": receipt.delivered,
                        "repeated": receipt.repeated,
                    })
                }
                Err(e) => refusal(e.code(), &e.to_string()),
            }
        }
        Request::Interrupt => {
            if context.runtime.teams().team(&context.lead).is_none() {
                return refusal("TEAM_DISPOSED", "the Team is not running");
            }
            match context.notes.send(ControlNote::Interrupt) {
                Ok(()) => json!({"ok": true}),
                Err(_) => refusal("TEAM_DISPOSED", "the run is ending"),
            }
        }
        Request::Agents => {
            let Some(team) = context.runtime.teams().team(&context.lead) else {
                return refusal("TEAM_DISPOSED", "the Team is not running");
            };
            match context.runtime.teams().list_members(team.lead()).await {
                Ok(members) => json!({"ok": true, "members": members}),
                Err(e) => refusal(e.code(), &e.to_string()),
            }
        }
    }
}
