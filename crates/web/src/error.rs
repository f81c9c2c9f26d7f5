//! The web crate's errors and their HTTP form.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use troupe_protocol::ErrorCode;

/// Everything the web server refuses. Each variant has a stable code; request errors are served
/// as `{"error":{"code","message"}}` with the status of [`WebError::status`].
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// A session id that is not valid (`INVALID_SESSION_ID`, 400).
    #[error("invalid session id: {0}")]
    InvalidSessionId(String),
    /// No session file with this id (`SESSION_NOT_FOUND`, 404).
    #[error("no session {0}")]
    SessionNotFound(String),
    /// A Team asked of a subagent's or teammate's session (`WEB_NOT_A_LEAD`, 404): the Team
    /// it belongs to, if any, is the one of `lead`, its parent.
    #[error("session {id} is a child session of {lead}, not a Team Lead: open {lead}, its Lead")]
    NotALead {
        /// The session asked for.
        id: String,
        /// Its parent, the Lead.
        lead: String,
    },
    /// No route (`WEB_NOT_FOUND`, 404).
    #[error("no such page: {0}")]
    NotFound(String),
    /// A request without the access token of a remote bind (`WEB_UNAUTHORIZED`, 401).
    #[error("this panel needs its access token: open the URL troupe web printed")]
    Unauthorized,
    /// A request naming a host other than the loopback one the server is bound to
    /// (`WEB_FORBIDDEN_HOST`, 403): a page on another site that resolves its name to
    /// 127.0.0.1 must not read the panel (DNS rebinding).
    #[error("requests must name a loopback host (localhost, 127.0.0.1 or [::1]), not {0}")]
    ForbiddenHost(String),
    /// A method the route does not serve (`WEB_METHOD_NOT_ALLOWED`, 405): every route is
    /// read with GET; the one write is POST of an approval decision.
    #[error(
        "this route only serves GET (the one write is POST /api/sessions/ID/approvals/REQUEST)"
    )]
    MethodNotAllowed,
    /// A write without the panel's token (`Authorization: Bearer <token>`), or sent from a
    /// page of another origin (`WEB_TOKEN_REQUIRED`, 403): nothing changed.
    #[error(
        "approvals need the panel's token: open the URL troupe web printed (it carries the token) and answer there"
    )]
    TokenRequired,
    /// A write whose body is not the JSON the route takes, or a query value that is not what
    /// the route takes (`?at=` that is not a whole number) (`WEB_BAD_REQUEST`, 400).
    #[error("{0}")]
    BadRequest(String),
    /// An approval the runtime refused or could not record (its code:
    /// `APPROVAL_NOT_FOUND` 404, `APPROVAL_ALREADY_DECIDED` 409, `SESSION_NOT_FOUND` 404,
    /// others 500): nothing changed.
    #[error(transparent)]
    Approval(#[from] troupe_approval::ApprovalError),
    /// A non-loopback address without the explicit opt-in (`WEB_REMOTE_REFUSED`).
    #[error(
        "refusing to serve on {0}, which is not a loopback address: pass --allow-remote to \
         serve other machines (every request then needs a generated access token)"
    )]
    RemoteRefused(std::net::IpAddr),
    /// Reading the session store failed (`WEB_IO`, 500).
    #[error("{0}")]
    Io(String),
    /// A past point of a Team outside its Lead log (`TEAM_AT_OUTSIDE_LOG`, 404): the message
    /// names the log's last seq.
    #[error("{0}")]
    OutsideLog(String),
    /// A Lead log that cannot be read or folded for a timeline or a past view (409), with the
    /// code of why (`JOURNAL_CORRUPT`, `JOURNAL_UNSUPPORTED`, `TEAM_LOG_INVALID`, …).
    #[error("{message}")]
    Log {
        /// The stable code of the error.
        code: &'static str,
        /// The error.
        message: String,
    },
}

impl ErrorCode for WebError {
    fn code(&self) -> &'static str {
        match self {
            WebError::InvalidSessionId(_) => "INVALID_SESSION_ID",
            WebError::SessionNotFound(_) => "SESSION_NOT_FOUND",
            WebError::NotALead { .. } => "WEB_NOT_A_LEAD",
            WebError::NotFound(_) => "WEB_NOT_FOUND",
            WebError::Unauthorized => "WEB_UNAUTHORIZED",
            WebError::ForbiddenHost(_) => "WEB_FORBIDDEN_HOST",
            WebError::MethodNotAllowed => "WEB_METHOD_NOT_ALLOWED",
            WebError::TokenRequired => "WEB_TOKEN_REQUIRED",
            WebError::BadRequest(_) => "WEB_BAD_REQUEST",
            WebError::Approval(e) => e.code(),
            WebError::RemoteRefused(_) => "WEB_REMOTE_REFUSED",
            WebError::Io(_) => "WEB_IO",
            WebError::OutsideLog(_) => "TEAM_AT_OUTSIDE_LOG",
            WebError::Log { code, .. } => code,
        }
    }
}

impl WebError {
    /// The HTTP status a request refused with this error gets.
    pub fn status(&self) -> StatusCode {
        match self {
            WebError::InvalidSessionId(_) => StatusCode::BAD_REQUEST,
            WebError::SessionNotFound(_)
            | WebError::NotFound(_)
            | WebError::NotALead { .. }
            | WebError::OutsideLog(_) => StatusCode::NOT_FOUND,
            WebError::Log { .. } => StatusCode::CONFLICT,
            WebError::Unauthorized => StatusCode::UNAUTHORIZED,
            WebError::ForbiddenHost(_) => StatusCode::FORBIDDEN,
            WebError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            WebError::TokenRequired => StatusCode::FORBIDDEN,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::Approval(e) => match e.code() {
                "APPROVAL_NOT_FOUND" | "SESSION_NOT_FOUND" => StatusCode::NOT_FOUND,
                "APPROVAL_ALREADY_DECIDED" => StatusCode::CONFLICT,
                "INVALID_SESSION_ID" => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            WebError::RemoteRefused(_) | WebError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {"code": self.code(), "message": self.to_string()}
        });
        (self.status(), Json(body)).into_response()
    }
}
