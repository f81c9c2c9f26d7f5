//! The seam the runtime calls: [`ModelProvider`] and [`StreamObserver`].

use std::future::Future;
use std::pin::Pin;

use tokio_util::sync::CancellationToken;

use crate::error::LlmError;
use crate::types::{ChatRequest, ModelResponse, StreamEvent};

/// A boxed, `Send` future, as returned by [`ModelProvider::complete`] (which keeps the trait
/// usable as `dyn ModelProvider`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Receives the progress of a model call as it happens (see [`StreamEvent`]).
///
/// Called synchronously from the provider's task, so implementations must be quick: buffer,
/// coalesce or forward to a channel. Any `FnMut(StreamEvent) + Send` closure is an observer.
pub trait StreamObserver: Send {
    /// One progress event.
    fn on_event(&mut self, event: StreamEvent);
}

impl<F> StreamObserver for F
where
    F: FnMut(StreamEvent) + Send,
{
    fn on_event(&mut self, event: StreamEvent) {
        self(event);
    }
}

/// An observer that ignores every event.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopObserver;

impl StreamObserver for NoopObserver {
    fn on_event(&mut self, _event: StreamEvent) {}
}

/// An observer that keeps every event, for tests and simple callers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventLog {
    /// The events, in arrival order.
    pub events: Vec<StreamEvent>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// The answer text streamed since the last [`StreamEvent::AttemptStarted`].
    pub fn text(&self) -> String {
        self.current_attempt()
            .iter()
            .filter_map(|event| match event {
                StreamEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The reasoning text streamed since the last [`StreamEvent::AttemptStarted`].
    pub fn reasoning(&self) -> String {
        self.current_attempt()
            .iter()
            .filter_map(|event| match event {
                StreamEvent::ReasoningDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn current_attempt(&self) -> &[StreamEvent] {
        let start = self
            .events
            .iter()
            .rposition(|event| matches!(event, StreamEvent::AttemptStarted { .. }))
            .map_or(0, |position| position + 1);
        &self.events[start..]
    }
}

impl StreamObserver for EventLog {
    fn on_event(&mut self, event: StreamEvent) {
        self.events.push(event);
    }
}

/// A chat model the runtime can call: the HTTP client ([`OpenAiClient`](crate::OpenAiClient))
/// or one member's view of a script ([`ScriptedAgent`](crate::ScriptedAgent)).
///
/// Obtain one per agent from [`ProviderFactory::for_agent`](crate::ProviderFactory::for_agent).
pub trait ModelProvider: Send + Sync {
    /// Runs one model call: sends `request`, reports progress to `observer` as it arrives, and
    /// returns the whole answer.
    ///
    /// The HTTP client retries retryable failures by itself; each failed attempt is reported as
    /// [`StreamEvent::AttemptFailed`] before the next starts, so the caller can record it even
    /// when the call finally fails. When `cancel` fires the call returns
    /// [`LlmError::Cancelled`] promptly (mid-stream or during a backoff wait); the cancelled
    /// attempt is not reported as failed, and the deltas it streamed are void.
    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        observer: &'a mut dyn StreamObserver,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, LlmError>>;

    /// A short human label, e.g. `deepseek:deepseek-chat` or `script:demo.json#lead`.
    fn label(&self) -> String;

    /// Tells the provider how many model calls this agent already made in its session (counted
    /// from the session log, before every call), so a resumed session continues where it
    /// stopped. The runtime does not count a call whose tool calls were all cancelled or never
    /// started: that step is asked again, as a real model would repeat the work.
    ///
    /// A no-op for HTTP providers. The scripted provider moves the agent's cursor to step
    /// `calls_made` (0-based), and fails with [`LlmError::Script`] when that is past the end of
    /// the script.
    fn set_calls_made(&self, calls_made: usize) -> Result<(), LlmError> {
        let _ = calls_made;
        Ok(())
    }
}
