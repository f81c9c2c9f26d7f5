//! Test helpers: loopback fake OpenAI server, temp workspaces, fixed clock and ids. Never shipped
//! in the binary.
//!
//! - [`fake_openai`]: a fake OpenAI-compatible chat-completions server on `127.0.0.1` with a
//!   scripted response queue and a record of every request.

pub mod fake_openai;

pub use fake_openai::{FakeOpenAi, FakeResponse, Mimic, RecordedRequest, StreamEnd, StreamedTools};
