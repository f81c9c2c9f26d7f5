//! The control socket of a running Team: `$TROUPE_HOME/run/<lead-id>.sock`, served by the
//! `troupe run` / `resume` / `demo` process that holds the Team's Lead log, so that `troupe
//! send` and `troupe chat` can talk to the live Team (README "Talking to a running team").
//!
//! **Protocol**: JSON lines over a Unix stream socket. Each request is one line, answered by
//! one line, in order; a connection may carry several requests. Requests:
//! - `{"op":"send","id":ID,"to":NAME,"text":TEXT,"wakeup":BOOL}` — a message from the user
//!   ([`troupe_runtime::team::TeamService::user_send`]); answer
//!   `{"ok":true,"messageId","to","seq","delivered","repeated"}`.
//! - `{"op":"agents"}` — the live roster; answer `{"ok":true,"members":[MemberView…]}`.
//!
//! A refusal is `{"ok":false,"code":CODE,"message":TEXT}` (a Team rule's code, `TEAM_DISPOSED`
//! while the Team closes, `CONTROL_BAD_REQUEST` for a line that is not a request). A request
//! line is at most [`MAX_REQUEST_BYTES`].
//!
//! **Who may bind it**: only the process holding the Lead log's lock (or lease), and only
//! while it holds it: it removes whatever is at the path, then binds, and unlinks the socket
//! when it stops serving (before the Team is shut down). A socket a dead process left behind
//! is therefore removed only by a holder of the lock — the next run, or `troupe send` while it
//! appends to the stopped Team — never while a live process could be serving it. The `run`
//! directory is made private to the user (mode 0700): only they can talk to their Teams.

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use troupe_protocol::{ErrorCode, SessionId};
use troupe_runtime::{Runtime, user_message_content};
use troupe_team::{Delivery, UserSend, team_message_id};

/// The longest request line served, in bytes (a message is bounded by the Team's
/// `maxMessageBytes`, 64 KiB by default, well below).
pub(crate) const MAX_REQUEST_BYTES: u64 = 1 << 20;

/// How long a stop waits for the requests in flight to be answered.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// The control socket of the Team led by `lead` in `home`: `<home>/run/<lead>.sock`.
pub(crate) fn socket_path(home: &Path, lead: &SessionId) -> PathBuf {
    home.join("run").join(format!("{lead}.sock"))
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
    /// the run's output).
    ///
    /// # Errors
    /// The `run` directory cannot be made or the socket cannot be bound (e.g. a home path too
    /// long for a socket address): the run goes on without it, and `troupe send` says the
    /// Team cannot be reached.
    pub(crate) fn start(
        home: &Path,
        runtime: Runtime,
        lead: SessionId,
        notes: mpsc::UnboundedSender<String>,
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
        let listener = UnixListener::bind(&path)?;
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
        if let Some(accept) = self.accept.take()
            && let Ok(mut connections) = accept.await
        {
            let drained = async { while connections.join_next().await.is_some() {} };
            if tokio::time::timeout(STOP_LIMIT, drained).await.is_err() {
                connections.abort_all();
            }
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

struct Context {
    runtime: Runtime,
    lead: SessionId,
    notes: mpsc::UnboundedSender<String>,
}

/// Answers the requests of one connection, in order, until it closes.
async fn serve(stream: UnixStream, context: &Context) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = String::new();
        match (&mut reader)
            .take(MAX_REQUEST_BYTES + 1)
            .read_line(&mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let too_long = line.len() as u64 > MAX_REQUEST_BYTES;
        let answer = if too_long {
            refusal(
                "CONTROL_BAD_REQUEST",
                &format!("a request line is at most {MAX_REQUEST_BYTES} bytes"),
            )
        } else {
            match serde_json::from_str::<Request>(line.trim_end()) {
                Ok(request) => answer(request, context).await,
                Err(e) => refusal(
                    "CONTROL_BAD_REQUEST",
                    &format!("not a control request: {e}"),
                ),
            }
        };
        let mut text = answer.to_string();
        text.push('\n');
        if write.write_all(text.as_bytes()).await.is_err() || too_long {
            return;
        }
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
                    let _ = context.notes.send(format!(
                        "message from the user {status} {} (troupe send; seq {})",
                        receipt.target_name, receipt.seq.0
                    ));
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
