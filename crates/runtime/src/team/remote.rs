//! The Team service across processes (DESIGN §7 "One serializer per Team, members anywhere",
//! issue 14 item 1): a teammate hosted by another process calls the ten Team tools through
//! the serializer of the process holding its Lead's lease, and gets the result bytes a local
//! call returns.
//!
//! Two halves, transport-free here (the NATS transport is `troupe-store-nats`' `teamsvc`):
//!
//! - **Serving** ([`TeamService::serve_remote`]): one [`TeamCallRequest`] in, one
//!   [`TeamCallAnswer`] out. The arguments are checked and turned into the request by the
//!   very code the local tool runs, the operation runs inside the same serializer
//!   (`journal.rs`) with the caller as a [`Member::Remote`], and the reply is rendered as the
//!   local tool renders it — so the answer is byte for byte what the local call returns.
//!   The transport checks the caller's authority (its lease) before; here a caller that is the
//!   Lead itself is refused (`TEAM_NOT_AUTHORIZED`: the Lead is hosted by this process).
//! - **Calling** ([`RemoteTeam`]): the ten tools for a teammate hosted elsewhere, behind the
//!   same [`Tool`] seam as the local ones (same names, schemas and output schemas), sending
//!   each call through a [`TeamLink`] (the transport, with its bounded retry).
//!
//! **Request ids and de-duplication** (DESIGN decision 10). A request carries an id: the
//! model's tool call id when there is one (so the Team record's `tool/effect` link in the Lead
//! log names the call exactly as a local call's does, and recovery of the caller's host
//! resolves a cut call from it), else a fresh one. A write that is *retried* (its reply was
//! lost, or the Lead moved) is looked up in the Lead log first: when its link is there, the
//! recorded result is answered (rebuilt as recovery rebuilds it) and nothing is appended
//! again. Attempts of one request never run side by side: a retry that reaches the serializer
//! while the first attempt is still in flight waits for it, then looks.
//!
//! **What survives a crash** of the serving process, at each point of a write: before the
//! batch of `tool/effect` link + Team record is durable, nothing (decision 9): the retry at
//! the next Lead holder finds no link and runs it, once; after it is durable and before the
//! answer is sent, the whole record: the retry finds the link and gets the recorded result;
//! after the answer, nothing is left to do. A crash of the caller's host mid-call leaves the
//! call cut in its log: its recovery decides it from the Lead log's link like a local call.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use troupe_protocol::{ErrorCode, STABLE_CODES, SessionId};
use troupe_team::{LiveAgent, LiveStatus};
use troupe_tools::{TextFuture, Tool, ToolContext, ToolError, ToolFuture};

use super::journal::{Member, RemoteMember};
use super::op::{CallOrigin, OpContext};
use super::output::render;
use super::schema::TeamToolName;
use super::service::TeamService;
use super::tools::{op_error, prefixed};
use crate::recovery::TeamLinks;

/// A request whose caller's lease does not match the lease store's current holder of the
/// caller's session (a process acting for a member it does not host, or whose lease expired
/// or was taken over), or a request that names the Lead as its caller.
pub const TEAM_NOT_AUTHORIZED: &str = "TEAM_NOT_AUTHORIZED";

/// A Team service request reached a process that does not hold the Team's Lead lease (any
/// more): the Lead moved, or its Team is not running anywhere. A [`TeamLink`] re-reads the
/// Lead's lease and retries (bounded) before it reports it.
pub const TEAM_LEAD_MOVED: &str = "TEAM_LEAD_MOVED";

/// The version of the request and answer shapes.
pub const TEAM_CALL_VERSION: u32 = 1;

/// The caller's lease as the lease store holds it: the owner token of the writer holding the
/// caller's session and the revision of the lease entry it last wrote (it grows at every
/// renewal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerLease {
    /// The holder's owner token.
    pub owner: String,
    /// The entry revision the holder last wrote.
    pub revision: u64,
}

/// The caller's live status as its host sees it, shown in its own `list_agents` row (the
/// serving process has no agent of it). Wire: `{"status":"running"|"idle","model"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerLive {
    /// `running` (in a turn) or `idle`.
    pub status: CallerStatus,
    /// The model it runs, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A live caller's status (wire `running` | `idle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallerStatus {
    /// In a turn.
    Running,
    /// Resident and waiting.
    Idle,
}

impl From<&CallerLive> for LiveAgent {
    fn from(live: &CallerLive) -> Self {
        LiveAgent {
            status: match live.status {
                CallerStatus::Running => LiveStatus::Running,
                CallerStatus::Idle => LiveStatus::Idle,
            },
            model: live.model.clone(),
        }
    }
}

impl From<&LiveAgent> for CallerLive {
    fn from(live: &LiveAgent) -> Self {
        CallerLive {
            status: match live.status {
                LiveStatus::Running => CallerStatus::Running,
                LiveStatus::Idle => CallerStatus::Idle,
            },
            model: live.model.clone(),
        }
    }
}

/// One Team tool call from a teammate hosted by another process. Wire (JSON, camelCase):
/// `{"version":1,"requestId","caller","lease":{"owner","revision"}|null,"tool","arguments",
/// "live"?,"retry"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TeamCallRequest {
    /// [`TEAM_CALL_VERSION`].
    pub version: u32,
    /// The request id: the model's tool call id when there is one (see the module docs).
    pub request_id: String,
    /// The calling member's session.
    pub caller: SessionId,
    /// The caller's lease, `None` when its process holds none (then it is refused).
    pub lease: Option<CallerLease>,
    /// The tool name (one of the ten).
    pub tool: String,
    /// The arguments as the model gave them.
    pub arguments: Value,
    /// The caller's live status, as its host reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<CallerLive>,
    /// Whether an earlier attempt of this request may have reached a serializer (its answer
    /// was lost, or the Lead moved): a write is then looked up in the Lead log first.
    #[serde(default)]
    pub retry: bool,
}

/// The answer to a [`TeamCallRequest`]. Wire: `{"ok":true,"result":TEXT}` — the exact text the
/// local tool returns — or `{"ok":false,"code":CODE,"message":TEXT}` — the local tool's error
/// (its message starts `Error: `), or the service's own refusal (`TEAM_NOT_AUTHORIZED`,
/// `TEAM_LEAD_MOVED`, `INVALID_ARGUMENTS` for a request that does not parse).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamCallAnswer {
    /// Whether the call succeeded.
    pub ok: bool,
    /// The result text (success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The stable code (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The message (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl TeamCallAnswer {
    /// A success with `result`.
    pub fn done(result: String) -> Self {
        Self {
            ok: true,
            result: Some(result),
            code: None,
            message: None,
        }
    }

    /// A failure with `code` and `message`.
    pub fn failed(code: &str, message: impl Into<String>) -> Self {
        Self {
            ok: false,
            result: None,
            code: Some(code.to_owned()),
            message: Some(message.into()),
        }
    }

    /// The answer of a tool outcome.
    fn of(outcome: Result<String, ToolError>) -> Self {
        match outcome {
            Ok(text) => Self::done(text),
            Err(e) => Self::failed(e.code(), e.to_string()),
        }
    }

    /// The failure's code, `None` for a success.
    pub fn code(&self) -> Option<&str> {
        if self.ok { None } else { self.code.as_deref() }
    }

    /// The outcome the model sees: the result text, or the error with its code (a code that
    /// is not one of [`STABLE_CODES`] — an answer from a newer or broken peer — becomes
    /// `TOOL_INTERNAL_ERROR` naming it).
    ///
    /// # Errors
    /// The answer's failure as a [`ToolError`].
    pub fn into_result(self) -> Result<String, ToolError> {
        if self.ok {
            return Ok(self.result.unwrap_or_default());
        }
        let code = self.code.unwrap_or_default();
        let message = self.message.unwrap_or_default();
        match STABLE_CODES.iter().find(|c| c.code == code) {
            Some(stable) => Err(ToolError::other(stable.code, message)),
            None => Err(ToolError::other(
                "TOOL_INTERNAL_ERROR",
                format!("Error: the Team service answered an unknown code {code}: {message}"),
            )),
        }
    }
}

/// Why a [`TeamLink`] could not get an answer (each maps to the stable code the model sees).
#[derive(Debug, thiserror::Error)]
pub enum TeamLinkError {
    /// No process holding the Lead's lease answered within the link's bounded retry
    /// (`TEAM_LEAD_MOVED`): the Lead moved and no new holder serves it yet, or the Team is not
    /// running.
    #[error("the Team {team} has no reachable Lead: {detail}")]
    LeadMoved {
        /// The Team.
        team: String,
        /// What the last attempt found, and how long the link tried.
        detail: String,
    },
    /// The store's server went away during the call (`STORE_UNREACHABLE`): whether a write
    /// took effect is decided from the Lead log once it is back (a retry with the same request
    /// id never applies it twice).
    #[error("the store at {url} is unreachable: {reason}")]
    StoreUnreachable {
        /// The store URL.
        url: String,
        /// The client's error.
        reason: String,
    },
}

impl ErrorCode for TeamLinkError {
    fn code(&self) -> &'static str {
        match self {
            TeamLinkError::LeadMoved { .. } => TEAM_LEAD_MOVED,
            TeamLinkError::StoreUnreachable { .. } => "STORE_UNREACHABLE",
        }
    }
}

/// A boxed future of a [`TeamLink`] call.
pub type LinkFuture<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<TeamCallAnswer, TeamLinkError>> + Send + 'a>>;

/// The transport of a [`RemoteTeam`]: carries one request to the serializer of the process
/// holding the Team's Lead lease and brings back its answer, retrying (bounded) when the Lead
/// moved or the answer was lost (setting [`TeamCallRequest::retry`] on every later attempt).
pub trait TeamLink: Send + Sync {
    /// The Team (its Lead's session).
    fn team(&self) -> &SessionId;

    /// The lease this process holds on `caller`'s session, `None` when it holds none.
    fn lease_of(&self, caller: &SessionId) -> Option<CallerLease>;

    /// Sends `request`; `busy` is how long the serializer may legitimately take to answer
    /// beyond the transport's own request timeout (a `wait_agent`'s timeout).
    fn call(&self, request: TeamCallRequest, busy: Duration) -> LinkFuture<'_>;
}

/// What the host of remote callers knows of them: each one's live status, for its own
/// `list_agents` row (`None`: not known; the serving process then shows what it sees).
pub type LiveSource = Arc<dyn Fn(&SessionId) -> Option<LiveAgent> + Send + Sync>;

/// The ten Team tools of teammates hosted by this process whose Team's serializer runs in
/// another one: each call goes through a [`TeamLink`]; results and errors are the local
/// tools' bytes (see the module docs). The caller is the tool context's owner session.
pub struct RemoteTeam {
    link: Arc<dyn TeamLink>,
    live: LiveSource,
}

impl std::fmt::Debug for RemoteTeam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTeam")
            .field("team", self.link.team())
            .finish_non_exhaustive()
    }
}

impl RemoteTeam {
    /// The remote Team reached through `link`; `live` reports the callers' live status.
    pub fn new(link: Arc<dyn TeamLink>, live: LiveSource) -> Arc<Self> {
        Arc::new(Self { link, live })
    }

    /// The ten tools (REFERENCE d.4), in registration order, with the local tools' names,
    /// descriptions, parameter and output schemas.
    pub fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        TeamToolName::ALL
            .into_iter()
            .map(|name| {
                let (description, parameters, output) = name.definition();
                Arc::new(RemoteTool {
                    team: Arc::clone(self),
                    name,
                    description,
                    parameters,
                    output,
                }) as Arc<dyn Tool>
            })
            .collect()
    }

    /// One call for `caller` (the request id: `call_id`, else a fresh one).
    ///
    /// # Errors
    /// The answer's error; `TEAM_LEAD_MOVED` / `STORE_UNREACHABLE` from the link;
    /// `TEAM_WAIT_ABORTED` when `cancel` fires during a `wait_agent`.
    async fn call(
        &self,
        name: TeamToolName,
        ctx: &ToolContext,
        arguments: Value,
    ) -> Result<String, ToolError> {
        let caller = ctx.owner().clone();
        let busy = if name == TeamToolName::WaitAgent {
            let ms = arguments
                .get("timeout_ms")
                .and_then(Value::as_f64)
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .unwrap_or(troupe_team::WAIT_TIMEOUT_DEFAULT_MS as f64);
            // Bounded by the longest valid timeout (an invalid one is refused at once).
            Duration::from_millis(ms.min(3_600_000.0) as u64)
        } else {
            Duration::ZERO
        };
        let request = TeamCallRequest {
            version: TEAM_CALL_VERSION,
            request_id: ctx
                .call_id()
                .map_or_else(|| SessionId::random().to_string(), str::to_owned),
            lease: self.link.lease_of(&caller),
            live: (self.live)(&caller).as_ref().map(CallerLive::from),
            caller,
            tool: name.name().to_owned(),
            arguments,
            retry: false,
        };
        let sent = self.link.call(request, busy);
        let answer = if name == TeamToolName::WaitAgent {
            tokio::select! {
                answer = sent => answer,
                () = ctx.cancellation().cancelled() => {
                    let remote = RemoteMember {
                        team: self.link.team().clone(),
                        id: ctx.owner().clone(),
                        live: None,
                    };
                    let e = super::waiters::aborted(Member::Remote(&remote));
                    return Err(op_error(&e.into()));
                }
            }
        } else {
            sent.await
        };
        match answer {
            Ok(answer) => answer.into_result(),
            Err(e) => Err(ToolError::other(e.code(), format!("Error: {e}"))),
        }
    }
}

/// One remote Team tool.
struct RemoteTool {
    team: Arc<RemoteTeam>,
    name: TeamToolName,
    description: &'static str,
    parameters: Value,
    output: Value,
}

impl Tool for RemoteTool {
    fn name(&self) -> &str {
        self.name.name()
    }

    fn description(&self) -> &str {
        self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn output_schema(&self) -> Option<Value> {
        Some(self.output.clone())
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let text = self.call_text(ctx, args).await?;
            serde_json::from_str(&text)
                .map_err(|e| ToolError::other("TOOL_INTERNAL_ERROR", e.to_string()))
        })
    }

    /// The serializer's answer text, exactly.
    fn call_text<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> TextFuture<'a> {
        Box::pin(async move { self.team.call(self.name, ctx, args).await.map_err(prefixed) })
    }

    fn shape_error(&self, error: ToolError) -> ToolError {
        prefixed(error)
    }
}

impl TeamService {
    /// Serves one Team tool call from a teammate hosted by another process (see the module
    /// docs): the transport has checked the caller's lease; `lead` is the Team the request
    /// was addressed to. The answer is the local tool's result or error, byte for byte.
    ///
    /// Refusals of its own: `TEAM_LEAD_MOVED` when no Team of `lead` runs here;
    /// `TEAM_NOT_AUTHORIZED` when the caller is the Lead; `UNKNOWN_TOOL` for a name that is
    /// not one of the ten; `INVALID_ARGUMENTS` for another request version.
    pub async fn serve_remote(&self, lead: &SessionId, request: TeamCallRequest) -> TeamCallAnswer {
        let Some(team) = self.team(lead) else {
            return TeamCallAnswer::failed(
                TEAM_LEAD_MOVED,
                format!("Error: the Team {lead} does not run in this process"),
            );
        };
        if request.version != TEAM_CALL_VERSION {
            return TeamCallAnswer::failed(
                "INVALID_ARGUMENTS",
                format!(
                    "Error: Team service request version {} (this process speaks {TEAM_CALL_VERSION})",
                    request.version
                ),
            );
        }
        if request.caller == *lead {
            return TeamCallAnswer::failed(
                TEAM_NOT_AUTHORIZED,
                "Error: the Lead is hosted by the process serving its Team and calls it there",
            );
        }
        let Some(name) = TeamToolName::from_name(&request.tool) else {
            return TeamCallAnswer::of(Err(prefixed(ToolError::UnknownTool {
                name: request.tool,
            })));
        };
        let member = RemoteMember {
            team: lead.clone(),
            id: request.caller.clone(),
            live: request.live.as_ref().map(LiveAgent::from),
        };
        if !name.writes() {
            return self.run_remote(&member, name, &request).await;
        }
        let key = (request.caller.clone(), request.request_id.clone());
        let _turn = team.remote_in_flight().begin(key).await;
        if request.retry
            && let Some(answer) = self.recorded_answer(lead, &request)
        {
            return answer;
        }
        self.run_remote(&member, name, &request).await
    }

    /// Runs the call as the local tool would (arguments checked by the same code), linked to
    /// the request id when it writes.
    async fn run_remote(
        &self,
        member: &RemoteMember,
        name: TeamToolName,
        request: &TeamCallRequest,
    ) -> TeamCallAnswer {
        let op = match name.request(request.arguments.clone()) {
            Ok(op) => op,
            Err(e) => return TeamCallAnswer::of(Err(prefixed(e))),
        };
        let origin = name.writes().then(|| CallOrigin {
            session: member.id.clone(),
            call_id: request.request_id.clone(),
            tool: name,
        });
        let context = OpContext {
            cancel: None,
            origin,
        };
        let outcome = match self.call_as(Member::Remote(member), op, context).await {
            Ok(reply) => render(&reply),
            Err(e) => Err(op_error(&e)),
        };
        TeamCallAnswer::of(outcome.map_err(prefixed))
    }

    /// The recorded answer of a retried write whose link is in the Lead log (decision 10),
    /// rebuilt as recovery rebuilds it; `None` when the log holds no record of it (it never
    /// took effect) or cannot be read (then it runs, and the serializer's own checks decide).
    fn recorded_answer(
        &self,
        lead: &SessionId,
        request: &TeamCallRequest,
    ) -> Option<TeamCallAnswer> {
        let replay = match self.store().read(lead) {
            Ok(replay) => replay,
            Err(e) => {
                tracing::warn!(team = %lead, error = %e, "reading the Lead log for a retried request failed");
                return None;
            }
        };
        let links = TeamLinks::collect(&replay.events);
        let resolution = links.rebuilt(&request.caller, &request.request_id, None)?;
        Some(match resolution {
            troupe_session::CallResolution::Done {
                content,
                is_error: false,
                ..
            } => TeamCallAnswer::done(content),
            other => TeamCallAnswer::failed(
                "TOOL_OUTCOME_UNKNOWN",
                format!(
                    "Error: the Lead log holds the effect of request {} but not its result ({other:?})",
                    request.request_id
                ),
            ),
        })
    }
}
