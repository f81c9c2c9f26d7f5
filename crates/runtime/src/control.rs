//! The narrow child-control interface (REFERENCE b.3–b.9) through which the Team service and
//! the `subagent` tools drive the runtime's children — codex's `AgentControl` is the model.
//!
//! The runtime owns the registry of live agents and every child's activation; a caller that
//! only needs to start, follow up, wake, interrupt or drain children gets a
//! [`ChildControl`] instead of the runtime itself, so it depends on these operations and not
//! on the registry (no file of the runtime imports `runtime.rs` except `lib.rs`). The runtime's
//! implementation holds a weak reference back to it: a control outliving its runtime answers
//! every operation with `AGENT_DISPOSED` and every lookup with "not resident".

use std::future::Future;
use std::pin::Pin;

use tokio_util::sync::CancellationToken;
use troupe_llm::ModelSpec;
use troupe_protocol::{Event, MessageId, SessionId, UserMessage};

use crate::agent::Agent;
use crate::error::RuntimeError;
use troupe_session::events::{AgentConfigRecord, ChildProvider, Profile};

/// A request to start a child (REFERENCE b.3).
#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// Fresh or fork.
    pub provider: ChildProvider,
    /// The child's label (its name; the scripted provider's agent key).
    pub label: String,
    /// A caller-reserved id; a random UUID when `None`.
    pub child_id: Option<SessionId>,
    /// The initial task.
    pub prompt: String,
    /// `true` for a continuable child (follow-ups, cold resume, settlement when idle);
    /// `false` for a one-shot child whose caller awaits its answer.
    pub continuable: bool,
    /// Whether the parent receives a settlement notice each time the child settles
    /// (REFERENCE b.8). Teammates do not: the Lead follows them through the Team instead.
    pub notify_parent: bool,
    /// Tool profile of the child.
    pub profile: Profile,
    /// The child's own model (a teammate model), recorded in its config with `ownModel`;
    /// `None`: it runs the session's model.
    pub model: Option<ModelSpec>,
    /// The caller's signal: once cancelled, creation stops and rolls back (no live child is
    /// left). It only governs the call until the inbox accepted the prompt (REFERENCE b.3).
    pub cancel: Option<CancellationToken>,
    /// The child's own workspace (absolute), recorded in its config and header as its
    /// `workspace`/`cwd`: a teammate's git worktree under `--worktree`. `None`: the parent's.
    pub workspace: Option<std::path::PathBuf>,
}

/// What starting a child returns once the child's inbox accepted the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildStart {
    /// The child's session id.
    pub child_id: SessionId,
    /// The initial message's id.
    pub message_id: MessageId,
}

/// The future of a [`ChildControl`] operation.
pub type ControlFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, RuntimeError>> + Send + 'a>>;

/// The child operations of the runtime (REFERENCE b.3–b.9), each with the authorization and
/// the durability of the runtime's own method of the same purpose (`Runtime::start_child`,
/// `followup_child`, `wake_child`, `ensure_child_live`, `interrupt`, `drain_children`).
///
/// Every operation on a child is authorized against `parent`: it must be the registry's exact
/// live entry (`UNAUTHORIZED` otherwise, as for a stale or copied handle), and the child must
/// be its direct child — except [`ChildControl::interrupt`], which any live ancestor may do.
pub trait ChildControl: Send + Sync {
    /// The resident agent `id`, if any.
    fn agent(&self, id: &SessionId) -> Option<Agent>;

    /// The parent of the resident agent `id`, if it is resident and has one.
    fn parent_of(&self, id: &SessionId) -> Option<SessionId>;

    /// Remembers the model the member `id`, whose latest recorded configuration is `config`,
    /// runs (its own model, else the session's), for views of it while it is not resident.
    fn remember_model(&self, id: &SessionId, config: &AgentConfigRecord);

    /// The model name `id` runs, as last set up or remembered in this process, if known.
    fn model_seen(&self, id: &SessionId) -> Option<String>;

    /// Starts a child of `parent` (REFERENCE b.3); resolves once the child's inbox durably
    /// holds the prompt. A failure before that leaves no live child.
    ///
    /// # Errors
    /// `DUPLICATE_CHILD`, `UNAUTHORIZED`, `CANCELLED` (the spec's signal), journal and model
    /// setup errors.
    fn start<'a>(&'a self, parent: &'a Agent, spec: ChildSpec) -> ControlFuture<'a, ChildStart>;

    /// Follows up `child` with `message` (REFERENCE b.6): to the live child, or cold-resumed
    /// from its log; resolves once the message is durable in the child's log.
    ///
    /// # Errors
    /// `UNAUTHORIZED`, `NOT_RESUMABLE` (no readable log, not a continuable child), journal
    /// errors.
    fn follow_up<'a>(
        &'a self,
        parent: &'a Agent,
        child: &'a SessionId,
        message: UserMessage,
    ) -> ControlFuture<'a, MessageId>;

    /// Wakes `child`'s parked inbox (REFERENCE b.6 without a new message), cold-resuming it
    /// when needed; `true` when there was anything to run.
    ///
    /// # Errors
    /// As [`ChildControl::follow_up`].
    fn wake<'a>(&'a self, parent: &'a Agent, child: &'a SessionId) -> ControlFuture<'a, bool>;

    /// The resident `child`, cold-resumed without sending anything when it is not resident
    /// (its inbox stays parked).
    ///
    /// # Errors
    /// As [`ChildControl::follow_up`].
    fn activate<'a>(&'a self, parent: &'a Agent, child: &'a SessionId) -> ControlFuture<'a, Agent>;

    /// Starts the settlement watcher of the resident continuable `child` once (REFERENCE b.8:
    /// it settles when idle). [`ChildControl::activate`] does not, as nothing was sent yet: a
    /// caller whose delivery to the child it activated failed calls this, so the child still
    /// settles (its log failed, or a flush did) instead of staying resident forever.
    fn watch(&self, child: &Agent);

    /// Records that a message to member `target` (Team name `name`) stays queued because its
    /// delivery failed on a session log or the store after every retry (`error`: the message,
    /// the step and the journal's error) — or that a teammate owed a continuation after a stop
    /// could not be continued because its log failed: DESIGN decision 11 makes it the run's failure
    /// (`JOURNAL_FAILED` naming the member), so a run never ends with that work silently
    /// undone. The message itself stays durable in the Lead log and is delivered by the next
    /// resume's mailbox recovery.
    fn note_undelivered(&self, target: &SessionId, name: &str, error: String);

    /// Interrupts `target`'s current turn for the ancestor `caller` (REFERENCE b.7), keeping
    /// its inbox; a target that is not resident is an accepted no-op. Does not wait for the
    /// turn to close.
    ///
    /// # Errors
    /// `UNAUTHORIZED` (the caller is not exact live, is the target, or is not an ancestor).
    fn interrupt<'a>(&'a self, caller: &'a Agent, target: &'a SessionId) -> ControlFuture<'a, ()>;

    /// Releases the selected direct children of `parent`, each child-first, parking their
    /// inboxes (REFERENCE b.9); ids that are not resident are skipped.
    ///
    /// # Errors
    /// `UNAUTHORIZED`, `ACTIVATION_TEARDOWN_FAILED` (after every child was released).
    fn drain<'a>(&'a self, parent: &'a Agent, children: &'a [SessionId]) -> ControlFuture<'a, ()>;

    /// Carries out a creation a crash cut before the child's prompt was durable (issue 10,
    /// defect 6): the child gets its log — created whole (a fork seeded with `seed`) or, when
    /// `log_exists`, the prompt appended — with `spec.prompt` waiting in its inbox; the child
    /// is not started. What survives a crash here: no change, or the whole log / the prompt.
    ///
    /// # Errors
    /// Journal errors.
    fn recreate<'a>(
        &'a self,
        parent: &'a Agent,
        child: &'a SessionId,
        spec: ChildSpec,
        seed: Vec<Event>,
        log_exists: bool,
    ) -> ControlFuture<'a, ()>;

    /// Closes a turn a crash left open in the log of `child`, a teammate of `parent` that is
    /// not resident (its host in another process died): its log opened for writing under a
    /// lease of this process, the crash recovery of an activation applied (leftover process
    /// groups stopped, synthetic closers from the logs, `turn/end` `interrupted`, flushed),
    /// then released — nothing is started. `true` when a turn was closed; `false` when none
    /// was open or the child is resident here. What survives a crash: the closers are one
    /// flushed batch, whole or absent (the next activation closes the turn again).
    ///
    /// # Errors
    /// `JOURNAL_LOCKED` (another process holds it), journal errors.
    fn close_cut_turn<'a>(
        &'a self,
        parent: &'a Agent,
        child: &'a SessionId,
    ) -> ControlFuture<'a, bool>;
}
