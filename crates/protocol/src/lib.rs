//! Troupe's wire types: the vocabulary every other crate speaks.
//!
//! This crate does no IO and knows nothing of tokio. It owns:
//! - identifier newtypes built only through validating constructors ([`SessionId`], [`Seq`]);
//! - the session file header ([`SessionHeader`]) and the event envelope ([`Event`]) of
//!   DESIGN §3 / REFERENCE (a.1)–(a.2);
//! - the list of event types this build understands ([`event_types`]);
//! - byte-level readers for hand-written JSON fast paths ([`json_scan`]);
//! - the [`Clock`] seam, so time is injected rather than read;
//! - the [`ErrorCode`] trait every library error enum implements to expose a stable
//!   `SCREAMING_SNAKE` code, and [`STABLE_CODES`], the one list of every stable code of every
//!   crate;
//! - the workspace's one lock helper ([`sync::lock`]).

mod clock;
mod codes;
mod error;
mod event;
pub mod event_types;
mod header;
mod id;
pub mod json_scan;
mod message;
pub mod sync;

pub use clock::{Clock, FixedClock, SystemClock};
pub use codes::{STABLE_CODES, StableCode, stable_code};
pub use error::ErrorCode;
pub use event::{Event, EventDraft};
pub use header::{FORMAT_VERSION, HEADER_TYPE, SessionHeader};
pub use id::{IdError, SESSION_ID_MAX_LEN, Seq, SessionId};
pub use message::{MessageId, MessageSource, UserMessage};
