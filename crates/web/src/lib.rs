//! `troupe web`: the Team panel (DESIGN §2, §6; REFERENCE f).
//!
//! An axum server that reads the session logs of a Troupe home or of a shared store (NATS) —
//! while `troupe run` writes them from another process — and serves:
//!
//! | route | answers |
//! |---|---|
//! | `GET /` (`/app.js`, `/style.css`) | the panel: plain HTML/CSS/JS embedded in the binary |
//! | `GET /api/sessions` | `{"sessions":[SessionRow…]}`: roots first, most recently active first |
//! | `GET /api/sessions/{id}/team` | the Team's [`TeamFrame`] plus `"position"` (events folded so far) |
//! | `GET /api/sessions/{id}/team/events` | SSE: a `team` frame per view change |
//! | `GET /api/sessions/{id}/team/timeline` | `{"events":[TimelineEntry…]}`: one entry per Team event (`troupe team log --json`) |
//! | `GET /api/sessions/{id}/team/show[?at=SEQ]` | `troupe team show --json [--at SEQ]`'s object: roster, board, pending mail, every message's receipts; with `at`, as it was right after Lead event SEQ (404 `TEAM_AT_OUTSIDE_LOG` past the last one, 400 `WEB_BAD_REQUEST` when SEQ is not a whole number) |
//! | `GET /api/sessions/{id}/conversation` | `{"sessionId","items":[Item…],"failure"?}`: the member's own log; `failure` says why it cannot be read past the last item |
//! | `GET /api/sessions/{id}/conversation/events` | SSE: an `item` frame per new [`Item`]; a damaged log ends with one `failure` frame `{"message"}` |
//! | `GET /api/sessions/{id}/approvals` | `{"approvals":[PendingApproval…]}`: the requests to run a command outside the sandbox that nobody decided yet, of the session and its direct children |
//! | `POST /api/sessions/{id}/approvals/{request}` | the one write: `{"decision":"approve"\|"deny"}` with `Authorization: Bearer <token>` decides the request (`by: web`); 403 `WEB_TOKEN_REQUIRED` without the token or from another origin, 404 `APPROVAL_NOT_FOUND`, 409 `APPROVAL_ALREADY_DECIDED` (nothing changed) |
//!
//! **Live updates** come from the session logs: a watcher per Team follows the Lead's log and
//! every member's log, folds only the new whole batches, and publishes a frame only when the
//! [`TeamView`] changed — mailbox-only events and events the view does not show publish
//! nothing (REFERENCE f's memoized view). On the JSONL files the logs are read again every
//! [`WebConfig::poll_interval`]; on a store that pushes appends ([`WebConfig::store`] on NATS:
//! an ordered consumer per followed log) the watcher and each conversation stream wait for the
//! push instead, and nothing polls. Every frame carries `id:`;
//! a reconnecting browser sends `Last-Event-ID` and gets the current view unless that is the
//! frame it already has (each frame is a whole view, so the latest one is exactly what it
//! missed), then live frames, with no duplicate and no gap at the boundary (a `watch` channel
//! marks what each connection has seen). Conversation frames carry the event's seq as `id:`, so
//! a reconnect resumes after the last item it got. Heartbeats are SSE comments every
//! [`WebConfig::heartbeat`].
//!
//! **Read-only but for approvals, and local by default**: every route is GET except the POST
//! of an approval decision, which needs the server's write token in an `Authorization:
//! Bearer` header ([`WebConfig::write_token`]; CSRF-safe: a page of another site can neither
//! know it nor send the header without a preflight this server never allows, and an
//! `Origin` other than the host served is refused) and whose only effect is the request's
//! decision log (`troupe_approval::decide`: created once, never a member's log or
//! lock). API keys are never read (the runtime keeps them out of the logs and the panel shows
//! only messages, tool calls and results). The server binds to loopback unless
//! [`access_for`] is told `allow_remote`, which then requires a generated token on every API
//! request. On loopback, requests must name a loopback host (against DNS rebinding).
//!
//! **Errors**: an unknown session is 404 `{"error":{"code":"SESSION_NOT_FOUND",…}}`; the Team
//! of a subagent's or teammate's session is 404 `WEB_NOT_A_LEAD`, naming its Lead; a Lead
//! log that stops folding (a broken rule, a damaged file) gives a view with `failure` beside the
//! last valid state, which the panel shows above it.
//!
//! Invariant: the crate holds no state of its own — watchers and caches are folds of the
//! session files and can be dropped at any time; it writes nothing but the decision logs of
//! approvals, and takes no session's lock.

mod conversation;
mod error;
mod follow;
mod history;
mod hub;
mod projection;
mod server;

pub use conversation::{Item, TOOL_RESULT_MAX_CHARS, item_of};
pub use error::WebError;
pub use hub::{SessionRow, TeamFrame};
pub use projection::{MailCounts, MemberRow, TaskRow, TeamProjection, TeamView};
pub use server::{
    Access, DEFAULT_HEARTBEAT, DEFAULT_POLL_INTERVAL, HostNames, WebConfig, access_for, panel_url,
    panel_url_with_token, router, serve, write_token_for,
};
