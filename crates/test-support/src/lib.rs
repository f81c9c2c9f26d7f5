//! Test helpers: loopback fake OpenAI server, real NATS servers, temp workspaces, fixed clock
//! and ids. Never shipped in the binary.
//!
//! - [`fake_openai`]: a fake OpenAI-compatible chat-completions server on `127.0.0.1` with a
//!   scripted response queue and a record of every request.
//! - [`nats`]: real `nats-server` processes (one node, or a three-node cluster) on free
//!   loopback ports with temporary store directories, killed when dropped.

pub mod fake_openai;
pub mod nats;

pub use fake_openai::{FakeOpenAi, FakeResponse, Mimic, RecordedRequest, StreamEnd, StreamedTools};
pub use nats::NatsServer;
