//! Shared helpers: a temporary Troupe home with hand-written session logs, requests through the
//! router, and a small SSE reader that also shows heartbeat comments.

mod dependencies;
mod projection;
mod router;
mod sse;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};
use tower::ServiceExt;
use troupe_journal::{Journal, JsonlBackend, SessionWriter};
use troupe_protocol::{EventDraft, FixedClock, SessionHeader, SessionId};
use troupe_web::{Access, WebConfig, router};

/// Every event of these logs is stamped with this time (epoch ms).
pub const T0: u64 = 1_800_000_000_000;
/// The write token of every test server ([`Home::config`]).
pub const WRITE_TOKEN: &str = "feedc0de";
pub const LEAD: &str = "lead-1";
pub const ALPHA: &str = "mate-alpha";
pub const BETA: &str = "mate-beta";

pub struct Home {
    pub dir: tempfile::TempDir,
    pub journal: Journal,
    /// On NATS: the store the panel serves (its own connection), and the server.
    pub store: Option<(Journal, troupe_test_support::NatsServer)>,
}

impl Home {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::with_backend(
            Arc::new(JsonlBackend::new(dir.path().join("sessions"))),
            Arc::new(FixedClock::new(T0)),
        );
        Self {
            dir,
            journal,
            store: None,
        }
    }

    /// A home whose sessions are on a real NATS server started for the test; the panel serves
    /// that store with a poll interval of an hour, so every live update it shows was pushed.
    /// `None` when the NATS tests are skipped (`TROUPE_SKIP_NATS=1` without a server).
    pub fn nats() -> Option<Self> {
        let server = troupe_test_support::NatsServer::single()?;
        let connect = || {
            let backend =
                troupe_store_nats::NatsBackend::connect(&server.url(), Default::default()).unwrap();
            Journal::with_backend(Arc::new(backend), Arc::new(FixedClock::new(T0)))
        };
        let (journal, served) = (connect(), connect());
        Some(Self {
            dir: tempfile::tempdir().unwrap(),
            journal,
            store: Some((served, server)),
        })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn config(&self) -> WebConfig {
        WebConfig {
            home: self.path(),
            store: self.store.as_ref().map(|(journal, _)| journal.clone()),
            access: Access::Loopback,
            poll_interval: if self.store.is_some() {
                Duration::from_secs(3600)
            } else {
                Duration::from_millis(10)
            },
            heartbeat: Duration::from_millis(150),
            write_token: Some(WRITE_TOKEN.to_owned()),
            ..WebConfig::new(self.path())
        }
    }

    pub fn router(&self) -> Router {
        router(self.config())
    }

    /// A root session with an `agent/config` of the Team profile.
    pub fn lead(&self, id: &str) -> SessionWriter {
        let header = SessionHeader::new(sid(id), T0).with_cwd("/work/project");
        let writer = self.journal.create(header).unwrap();
        writer.append(config("lead", 0)).unwrap();
        flush(&writer);
        writer
    }

    /// A teammate's child session of `parent` (its `agent/config` has the Team profile).
    pub fn child(&self, id: &str, parent: &str, name: &str) -> SessionWriter {
        self.subagent(id, parent, config(name, 1))
    }

    /// A subagent child session of `parent` whose first own event is `config`.
    pub fn subagent(&self, id: &str, parent: &str, config: EventDraft) -> SessionWriter {
        let header = SessionHeader::new(sid(id), T0 + 1)
            .with_cwd("/work/project")
            .with_parent(sid(parent))
            .with_origin("subagent");
        let writer = self.journal.create(header).unwrap();
        writer.append(config).unwrap();
        flush(&writer);
        writer
    }
}

pub fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

/// Appends and flushes (blocking this thread, also from inside a multi-threaded runtime).
pub fn append(writer: &SessionWriter, drafts: Vec<EventDraft>) {
    writer.append_batch(drafts).unwrap();
    flush(writer);
}

pub fn flush(writer: &SessionWriter) {
    tokio::task::block_in_place(|| writer.flush_blocking()).unwrap();
}

pub fn config(name: &str, depth: u32) -> EventDraft {
    profile_config(name, depth, "team")
}

/// An `agent/config` with the given profile (`team` or `default`).
pub fn profile_config(name: &str, depth: u32, profile: &str) -> EventDraft {
    EventDraft::new(
        "agent/config",
        json!({"name": name, "depth": depth, "profile": profile, "workspace": "/work/project",
               "model": {"provider": "openai", "model": "gpt-test",
                         "baseUrl": "https://models.invalid/v1", "apiKeyEnv": "SECRET_KEY_VAR"}}),
    )
}

pub fn member(id: &str, name: &str, phase: &str, error: Option<&str>) -> EventDraft {
    let mut member = json!({"id": id, "name": name, "description": format!("{name} works"),
                            "provider": "spawn", "context": "fresh", "phase": phase});
    if let Some(error) = error {
        member["error"] = json!(error);
    }
    EventDraft::new(
        "team/member",
        json!({"version": 1, "teamId": LEAD, "member": member}),
    )
}

pub fn task(
    id: &str,
    revision: u64,
    status: &str,
    owner: Option<&str>,
    blocked_by: &[&str],
    scopes: &[&str],
) -> EventDraft {
    let mut task = json!({"id": id, "revision": revision, "subject": format!("subject of {id}"),
                          "description": format!("What {id} is about."), "status": status,
                          "blockedBy": blocked_by, "writeScopes": scopes});
    if let Some(owner) = owner {
        task["ownerId"] = json!(owner);
    }
    EventDraft::new(
        "team/task",
        json!({"version": 1, "teamId": LEAD, "task": task}),
    )
}

pub fn queued(message: &str, sender: &str, sender_name: &str, target: &str) -> EventDraft {
    EventDraft::new(
        "team/message/queued",
        json!({"version": 1, "teamId": LEAD, "message": {
            "id": message, "senderId": sender, "senderName": sender_name, "targetId": target,
            "delivery": "quiet", "content": [{"type": "text", "text": "hello"}]}}),
    )
}

pub fn delivered(message: &str, target: &str) -> EventDraft {
    EventDraft::new(
        "team/message/delivered",
        json!({"version": 1, "teamId": LEAD, "messageId": message, "targetId": target}),
    )
}

pub fn turn_start(turn: u64) -> EventDraft {
    EventDraft::new("turn/start", json!({"turn": turn}))
}

pub fn turn_end(turn: u64) -> EventDraft {
    EventDraft::new(
        "turn/end",
        json!({"turn": turn, "reason": {"kind": "completed"}}),
    )
}

pub async fn get(router: &Router, path: &str) -> (StatusCode, Value) {
    let response = router
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

/// One SSE block: a frame (`event`, `id`, `data`) or a comment (a heartbeat).
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Frame {
        event: String,
        id: Option<String>,
        data: Value,
    },
    Comment,
}

/// Reads SSE blocks from a response body (split at blank lines, whatever the chunking).
pub struct SseReader {
    body: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, axum::Error>> + Send>>,
    buffer: String,
}

impl SseReader {
    /// Opens `path` on `router`, sending `Last-Event-ID` when given; panics unless 200.
    pub async fn open(router: &Router, path: &str, last_event_id: Option<&str>) -> Self {
        let mut request = Request::get(path);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Self {
            body: Box::pin(response.into_body().into_data_stream()),
            buffer: String::new(),
        }
    }

    /// The next block (fails the test after 10 s: nothing should take that long).
    pub async fn next(&mut self) -> Block {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                return parse_block(&block);
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.body.next())
                .await
                .expect("an SSE block within 10 s")
                .expect("the stream goes on")
                .unwrap();
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The next frame, skipping heartbeats.
    pub async fn next_frame(&mut self) -> (String, Option<String>, Value) {
        loop {
            if let Block::Frame { event, id, data } = self.next().await {
                return (event, id, data);
            }
        }
    }
}

fn parse_block(block: &str) -> Block {
    let mut event = String::from("message");
    let mut id = None;
    let mut data = String::new();
    let mut any_field = false;
    for line in block.lines() {
        if line.starts_with(':') || line.is_empty() {
            continue;
        }
        any_field = true;
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = value.to_owned(),
            "id" => id = Some(value.to_owned()),
            "data" => data.push_str(value),
            _ => {}
        }
    }
    if !any_field {
        return Block::Comment;
    }
    Block::Frame {
        event,
        id,
        data: serde_json::from_str(&data).unwrap_or(Value::Null),
    }
}

/// Task statuses of a Team frame, as `id:status` strings.
pub fn task_statuses(frame: &Value) -> Vec<String> {
    frame["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            format!(
                "{}:{}",
                t["id"].as_str().unwrap(),
                t["status"].as_str().unwrap()
            )
        })
        .collect()
}
