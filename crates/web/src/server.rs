//! Routes, access control and the server loop.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::Stream;
use serde_json::{Value, json};
use tokio::sync::Notify;
use troupe_journal::{Journal, JournalError};
use troupe_protocol::SessionId;

use crate::WebError;
use crate::conversation::{Item, item_of};
use crate::follow::Follower;
use crate::hub::{Hub, TeamFrame, wake_of};

/// How often the files of a watched Team or conversation are polled by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(150);
/// How often an idle SSE stream sends a heartbeat comment by default.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(15);

/// Who may read the panel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Bound to a loopback address: any local client that names a loopback host.
    Loopback,
    /// Bound to another address (only with an explicit opt-in): every API request must carry
    /// this token (`?token=…` or `Authorization: Bearer …`).
    Token(String),
}

/// Names the holder of a session (`host H pid P`, as its lease names it) for the panel's
/// `host` of a member ([`crate::MemberRow::host`]): a worker's name when that holder is a live
/// worker (`troupe web` on a NATS store reads the worker registry), `None` to keep the
/// holder's own text. Called on every poll of a watched Team: it must answer at once.
#[derive(Clone)]
pub struct HostNames(Arc<NameHolder>);

/// The function behind [`HostNames`].
type NameHolder = dyn Fn(&str) -> Option<String> + Send + Sync;

impl HostNames {
    /// The names `name` gives.
    pub fn new(name: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Self(Arc::new(name))
    }

    /// The name of `holder`, if any.
    pub fn name(&self, holder: &str) -> Option<String> {
        (self.0)(holder)
    }
}

impl std::fmt::Debug for HostNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostNames").finish_non_exhaustive()
    }
}

/// The server's settings.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// The Troupe home whose `sessions/` are served (when `store` is `None`).
    pub home: PathBuf,
    /// The store to serve instead of the home's JSONL files (e.g. a NATS store: `troupe web
    /// --store nats://…`). Where its store pushes appends ([`Journal::follow`]), the Teams and
    /// conversations watched are followed live, and `poll_interval` is not used for them.
    pub store: Option<Journal>,
    /// Who may read the panel.
    pub access: Access,
    /// How often followed files are read again (for a store that does not push appends).
    pub poll_interval: Duration,
    /// How often idle SSE streams send a heartbeat comment.
    pub heartbeat: Duration,
    /// The token a write (an approval decision) must carry as `Authorization: Bearer
    /// <token>`; `None` refuses every write (`WEB_TOKEN_REQUIRED`). `troupe web` generates one
    /// per server ([`write_token_for`]) and prints it in the URL ([`panel_url_with_token`]).
    pub write_token: Option<String>,
    /// How long a resident task owner may log nothing before the board marks its task
    /// stalled (`troupe web --stall-after`; default 10 minutes).
    pub stall_after: troupe_team::StallAfter,
    /// "Now" for stalled owners (the system clock by default; `troupe web` passes its store's,
    /// which `$TROUPE_CLOCK` can fix).
    pub clock: Arc<dyn troupe_protocol::Clock>,
    /// The names of session holders in other processes ([`HostNames`]; `None`: each is shown
    /// as its lease names it).
    pub host_names: Option<HostNames>,
}

impl WebConfig {
    /// The JSONL files of `home`, loopback access, default poll interval and heartbeat.
    pub fn new(home: PathBuf) -> Self {
        Self {
            home,
            store: None,
            access: Access::Loopback,
            poll_interval: DEFAULT_POLL_INTERVAL,
            heartbeat: DEFAULT_HEARTBEAT,
            write_token: None,
            stall_after: troupe_team::StallAfter::default(),
            clock: Arc::new(troupe_protocol::SystemClock),
            host_names: None,
        }
    }
}

/// The token writes need on a server with `access`: the access token of a remote bind, else
/// a fresh random one (128 bits, hex).
pub fn write_token_for(access: &Access) -> String {
    match access {
        Access::Token(token) => token.clone(),
        Access::Loopback => {
            let token: u128 = rand::random();
            format!("{token:032x}")
        }
    }
}

/// The URL to open: `http://ADDR/?token=TOKEN` — the panel reads the token from it and sends
/// it with its writes (and, on a remote bind, with every API request).
pub fn panel_url_with_token(addr: SocketAddr, token: &str) -> String {
    format!("http://{addr}/?token={token}")
}

/// The access rule for serving on `ip`: a loopback address needs nothing; any other address
/// (including the unspecified `0.0.0.0` / `::`) only with `allow_remote`, and then with a fresh
/// random access token (128 bits, hex).
///
/// # Errors
/// `WEB_REMOTE_REFUSED` for a non-loopback address without `allow_remote`.
pub fn access_for(ip: IpAddr, allow_remote: bool) -> Result<Access, WebError> {
    if ip.is_loopback() {
        return Ok(Access::Loopback);
    }
    if !allow_remote {
        return Err(WebError::RemoteRefused(ip));
    }
    let token: u128 = rand::random();
    Ok(Access::Token(format!("{token:032x}")))
}

/// The URL to open: `http://ADDR/`, with `?token=…` when access needs one.
pub fn panel_url(addr: SocketAddr, access: &Access) -> String {
    match access {
        Access::Loopback => format!("http://{addr}/"),
        Access::Token(token) => format!("http://{addr}/?token={token}"),
    }
}

struct App {
    hub: Arc<Hub>,
    heartbeat: Duration,
    write_token: Option<String>,
}

type AppState = Arc<App>;

/// The panel's router (see the crate docs for the routes).
pub fn router(config: WebConfig) -> Router {
    let app = Arc::new(App {
        hub: Arc::new(
            Hub::new(config.home, config.store, config.poll_interval)
                .with_stall(config.stall_after, config.clock)
                .with_host_names(config.host_names),
        ),
        heartbeat: config.heartbeat,
        write_token: config.write_token,
    });
    let access = Arc::new(config.access);
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(script))
        .route("/style.css", get(style))
        .route("/api/sessions", get(sessions))
        .route("/api/sessions/{id}/team", get(team))
        .route("/api/sessions/{id}/team/events", get(team_events))
        .route("/api/sessions/{id}/team/timeline", get(team_timeline))
        .route("/api/sessions/{id}/team/show", get(team_show))
        .route("/api/sessions/{id}/conversation", get(conversation))
        .route(
            "/api/sessions/{id}/conversation/events",
            get(conversation_events),
        )
        .route("/api/sessions/{id}/approvals", get(approvals))
        .route(
            "/api/sessions/{id}/approvals/{request}",
            axum::routing::post(decide_approval),
        )
        .fallback(not_found)
        .with_state(app)
        .layer(middleware::from_fn(move |request, next| {
            guard(Arc::clone(&access), request, next)
        }))
}

/// Serves `config` on `listener` until `shutdown` resolves.
///
/// # Errors
/// The listener's I/O errors.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: WebConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(config))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Read-only, host and token checks, and the security headers of every response.
async fn guard(access: Arc<Access>, request: Request, next: Next) -> Response {
    if let Err(e) = admit(&access, &request) {
        return with_headers(e.into_response());
    }
    with_headers(next.run(request).await)
}

fn admit(access: &Access, request: &Request) -> Result<(), WebError> {
    let write = request.method() == Method::POST && is_approval_write(request.uri().path());
    if request.method() != Method::GET && request.method() != Method::HEAD && !write {
        return Err(WebError::MethodNotAllowed);
    }
    match access {
        Access::Loopback => {
            let host = request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            if !host.is_empty() && !is_loopback_host(host) {
                return Err(WebError::ForbiddenHost(host.chars().take(100).collect()));
            }
        }
        Access::Token(token) => {
            // The panel's own files hold no data; everything under /api needs the token.
            if request.uri().path().starts_with("/api/") && !has_token(request, token) {
                return Err(WebError::Unauthorized);
            }
        }
    }
    Ok(())
}

/// Whether `path` is `/api/sessions/{id}/approvals/{request}`, the one route that takes a POST.
fn is_approval_write(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(parts.as_slice(), ["api", "sessions", id, "approvals", request] if !id.is_empty() && !request.is_empty())
}

/// The write's own checks (CSRF-safe): the token in an `Authorization: Bearer` header — which a
/// page of another site can neither know nor send without a preflight this server never
/// allows —, and when the browser names an `Origin`, the origin of the host served.
fn admit_write(headers: &HeaderMap, token: Option<&str>) -> Result<(), WebError> {
    let Some(token) = token else {
        return Err(WebError::TokenRequired);
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "));
    if !given.is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes())) {
        return Err(WebError::TokenRequired);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let expected = format!("http://{host}");
        if origin.to_str().ok() != Some(expected.as_str()) {
            return Err(WebError::TokenRequired);
        }
    }
    Ok(())
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<IpAddr>()
            .is_ok_and(|ip: IpAddr| ip.is_loopback())
}

fn has_token(request: &Request, token: &str) -> bool {
    let from_query = request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .filter_map(|pair| pair.strip_prefix("token="))
            .any(|given| constant_time_eq(given.as_bytes(), token.as_bytes()))
    });
    let from_header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()));
    from_query || from_header
}

/// Compares without stopping at the first difference, so response times do not reveal how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn with_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

const INDEX_HTML: &str = include_str!("panel/index.html");
const APP_JS: &str = include_str!("panel/app.js");
const STYLE_CSS: &str = include_str!("panel/style.css");

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn not_found(request: Request) -> WebError {
    WebError::NotFound(request.uri().path().chars().take(200).collect())
}

fn session_id(raw: &str) -> Result<SessionId, WebError> {
    SessionId::new(raw).map_err(|_| WebError::InvalidSessionId(raw.chars().take(200).collect()))
}

async fn sessions(State(app): State<AppState>) -> Result<Json<Value>, WebError> {
    let rows = app.hub.sessions().await?;
    Ok(Json(json!({ "sessions": rows })))
}

async fn team(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, WebError> {
    let watcher = app.hub.team(session_id(&id)?).await?;
    let frame = watcher.frame();
    let mut value = serde_json::to_value(&*frame).map_err(|e| WebError::Io(e.to_string()))?;
    if let Some(object) = value.as_object_mut() {
        object.insert("position".to_owned(), json!(watcher.position()));
    }
    Ok(Json(value))
}

/// `GET /api/sessions/{id}/team/timeline` (see [`crate::history::timeline`]).
async fn team_timeline(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, WebError> {
    Ok(Json(
        crate::history::timeline(&app.hub, session_id(&id)?).await?,
    ))
}

/// `GET /api/sessions/{id}/team/show[?at=SEQ]` (see [`crate::history::show`]); an `at` that
/// is not a whole number is 400 `WEB_BAD_REQUEST`.
async fn team_show(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Result<Json<Value>, WebError> {
    let at = match query.get("at") {
        None => None,
        Some(raw) => Some(raw.parse::<u64>().map_err(|_| {
            WebError::BadRequest(format!(
                "/api/sessions/{id}/team/show?at={}: at must be a seq (a whole number)",
                raw.chars().take(40).collect::<String>()
            ))
        })?),
    };
    Ok(Json(
        crate::history::show(&app.hub, session_id(&id)?, at).await?,
    ))
}

/// The `Last-Event-ID` a reconnecting browser sends, when it is a number.
fn last_event_id(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.trim().parse().ok())
}

fn team_sse(frame: &TeamFrame) -> SseEvent {
    let data = serde_json::to_string(frame).unwrap_or_else(|e| {
        json!({"id": frame.id, "failure": format!("the view cannot be encoded: {e}")}).to_string()
    });
    SseEvent::default()
        .event("team")
        .id(frame.id.to_string())
        .data(data)
}

async fn team_events(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, WebError> {
    let watcher = app.hub.team(session_id(&id)?).await?;
    let receiver = app.hub.subscribe(&watcher);
    let last = last_event_id(&headers);
    // The first frame is the current view unless the browser already has exactly it; after
    // that, every published change. `borrow_and_update` marks what was sent as seen, so a
    // change published at the boundary is sent once, never twice or not at all.
    let stream = futures_util::stream::unfold(
        (receiver, last, true),
        |(mut receiver, last, first)| async move {
            if first {
                let frame = Arc::clone(&receiver.borrow_and_update());
                if last != Some(frame.id) {
                    let event = team_sse(&frame).retry(Duration::from_secs(1));
                    return Some((Ok(event), (receiver, last, false)));
                }
            }
            receiver.changed().await.ok()?;
            let frame = Arc::clone(&receiver.borrow_and_update());
            Some((Ok(team_sse(&frame)), (receiver, last, false)))
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(app.heartbeat)))
}

/// A conversation being read: the follower of the member's file and the items not yet sent.
struct ConversationRead {
    follower: Arc<Mutex<Follower>>,
    hub: Arc<Hub>,
    /// Items with a seq at or below this were sent already (or are not wanted).
    after: Option<u64>,
}

/// What one read of a conversation found: the new items and, when the file cannot be read
/// further (a damaged line, an unsupported file, an IO error), why — once; the items before the
/// damage come first.
struct ConversationChunk {
    items: Vec<Item>,
    failure: Option<String>,
}

impl ConversationRead {
    /// Reads what was appended since the last call.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND` when the file does not exist (and nothing was read). Every other read
    /// error is the chunk's `failure`, reported once: the follower reads nothing after it.
    async fn next_items(&self) -> Result<ConversationChunk, WebError> {
        let follower = Arc::clone(&self.follower);
        let hub = Arc::clone(&self.hub);
        let after = self.after;
        tokio::task::spawn_blocking(move || {
            let mut follower = troupe_protocol::sync::lock(&follower);
            let mut items = Vec::new();
            let mut seed_len = follower.header().map(|h| h.seed_len());
            let result = follower.poll(hub.journal(), &mut |event| items.push(event));
            if seed_len.is_none() {
                seed_len = follower.header().map(|h| h.seed_len());
            }
            let seed_len = seed_len.unwrap_or(0);
            let items: Vec<Item> = items
                .iter()
                .filter(|e| e.seq.0 >= seed_len && after.is_none_or(|a| e.seq.0 > a))
                .filter_map(item_of)
                .collect();
            match result {
                Ok(()) => Ok(ConversationChunk {
                    items,
                    failure: None,
                }),
                Err(JournalError::NotFound { id, .. }) if items.is_empty() => {
                    Err(WebError::SessionNotFound(id))
                }
                // Items before a damaged line are still shown, then the failure (the follower
                // is broken now: this is the only time it is reported).
                Err(e) => Ok(ConversationChunk {
                    items,
                    failure: Some(e.to_string()),
                }),
            }
        })
        .await
        .map_err(|e| WebError::Io(format!("a file read did not finish: {e}")))?
    }
}

/// `GET /api/sessions/{id}/conversation`: `{"sessionId","items":[Item…],"failure"?}`, where
/// `failure` says why the file cannot be read past the last item (a damaged line, …).
async fn conversation(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, WebError> {
    let id = session_id(&id)?;
    let read = ConversationRead {
        follower: Arc::new(Mutex::new(Follower::new(id.clone()))),
        hub: Arc::clone(&app.hub),
        after: None,
    };
    let chunk = read.next_items().await?;
    let mut body = json!({"sessionId": id, "items": chunk.items});
    if let Some(failure) = chunk.failure {
        body["failure"] = Value::String(failure);
    }
    Ok(Json(body))
}

/// `GET /api/sessions/{id}/approvals`: `{"approvals":[PendingApproval…]}`, the requests of the
/// session and its direct children (a Lead's teammates) that nobody decided yet, oldest first.
async fn approvals(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, WebError> {
    let id = session_id(&id)?;
    let hub = Arc::clone(&app.hub);
    let waiting = tokio::task::spawn_blocking(move || troupe_approval::pending(hub.journal(), &id))
        .await
        .map_err(|e| WebError::Io(format!("a read did not finish: {e}")))??;
    Ok(Json(json!({ "approvals": waiting })))
}

/// The body of an approval write.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    /// `approve` or `deny`.
    decision: String,
}

/// `POST /api/sessions/{id}/approvals/{request}` with `{"decision":"approve"|"deny"}` and the
/// panel's token: decides the request (of the session or one of its direct children) as the
/// web panel (`by: web`), through its decision log — the one write of this server.
/// Answers `{"session","decided"}`; refusals change nothing.
async fn decide_approval(
    State(app): State<AppState>,
    Path((id, request)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, WebError> {
    admit_write(&headers, app.write_token.as_deref())?;
    let id = session_id(&id)?;
    let body: DecisionBody = serde_json::from_slice(&body).map_err(|e| {
        WebError::BadRequest(format!(
            "the body must be {{\"decision\": \"approve\"}} or {{\"decision\": \"deny\"}}: {e}"
        ))
    })?;
    let decision = match body.decision.as_str() {
        "approve" => troupe_session::approval::Decision::Approve,
        "deny" => troupe_session::approval::Decision::Deny,
        other => {
            return Err(WebError::BadRequest(format!(
                "decision {other:?} is not approve or deny"
            )));
        }
    };
    let (member, decided) = troupe_approval::decide(
        app.hub.journal(),
        &id,
        &request,
        decision,
        troupe_session::approval::DecidedBy::Web,
    )
    .await?;
    Ok(Json(json!({ "session": member, "decided": decided })))
}

fn failure_sse(message: &str) -> SseEvent {
    SseEvent::default()
        .event("failure")
        .data(json!({ "message": message }).to_string())
}

fn item_sse(item: &Item) -> SseEvent {
    let data = serde_json::to_string(item).unwrap_or_else(|_| "{}".to_owned());
    SseEvent::default()
        .event("item")
        .id(item.seq().to_string())
        .data(data)
}

async fn conversation_events(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, WebError> {
    let id = session_id(&id)?;
    // Followed live where the store pushes appends: then the stream waits for a wake
    // instead of reading again every poll interval.
    let changed = Arc::new(Notify::new());
    let follower = {
        let hub = Arc::clone(&app.hub);
        let wake = wake_of(&changed);
        tokio::task::spawn_blocking(move || Follower::live(id, hub.journal(), wake))
            .await
            .map_err(|e| WebError::Io(format!("a read did not finish: {e}")))?
    };
    let live = follower.is_live();
    let mut read = ConversationRead {
        follower: Arc::new(Mutex::new(follower)),
        hub: Arc::clone(&app.hub),
        after: last_event_id(&headers),
    };
    // The first read answers 404 for an unknown session before the stream starts.
    let first = read.next_items().await?;
    if let Some(last) = first.items.last() {
        read.after = Some(last.seq());
    }
    let interval = app.hub.poll_interval;
    let mut queue: VecDeque<SseEvent> = first.items.iter().map(item_sse).collect();
    let stopped = first.failure.is_some();
    queue.extend(first.failure.as_deref().map(failure_sse));
    let stream = futures_util::stream::unfold(
        (read, queue, stopped),
        move |(mut read, mut queue, mut stopped)| {
            let changed = Arc::clone(&changed);
            async move {
                loop {
                    if let Some(event) = queue.pop_front() {
                        return Some((Ok(event), (read, queue, stopped)));
                    }
                    if stopped {
                        // A damaged log: nothing more will come; heartbeats keep the stream open
                        // so the browser does not reconnect in a loop.
                        std::future::pending::<()>().await;
                    }
                    if live {
                        changed.notified().await;
                    } else {
                        tokio::time::sleep(interval).await;
                    }
                    match read.next_items().await {
                        Ok(chunk) => {
                            if let Some(last) = chunk.items.last() {
                                read.after = Some(last.seq());
                            }
                            queue.extend(chunk.items.iter().map(item_sse));
                            if let Some(failure) = chunk.failure {
                                stopped = true;
                                queue.push_back(failure_sse(&failure));
                            }
                        }
                        Err(e) => {
                            stopped = true;
                            queue.push_back(failure_sse(&e.to_string()));
                        }
                    }
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(app.heartbeat)))
}
