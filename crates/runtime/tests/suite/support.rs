//! A programmable model and a runtime over a temp home + workspace.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use troupe_journal::Journal;
use troupe_llm::{
    AssistantMessage, BoxFuture, ChatMessage, ChatRequest, FinishReason, LlmError, ModelProvider,
    ModelResponse, ModelSpec, ProviderKind, StreamEvent, StreamObserver, ToolCall, Usage,
};
use troupe_protocol::{Event, MessageSource, SessionId, UserMessage};
use troupe_runtime::{Agent, ChunkPolicy, ModelSource, Runtime, RuntimeOptions};
use troupe_session::events::Profile;
use troupe_tools::ToolLimits;

/// One scripted model response.
#[derive(Debug, Clone)]
pub enum Step {
    /// A final answer.
    Text(String),
    /// Tool calls `(name, arguments)`.
    Calls(Vec<(String, Value)>),
    /// Never answers until cancelled (keeps the agent running).
    Hang,
}

pub fn text(s: &str) -> Step {
    Step::Text(s.to_owned())
}

pub fn call(name: &str, args: Value) -> Step {
    Step::Calls(vec![(name.to_owned(), args)])
}

/// A model whose answers are queued by the test and which records every request.
#[derive(Debug, Default)]
pub struct TestModel {
    name: String,
    steps: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<ChatRequest>>,
    calls: AtomicUsize,
    pub entered: Notify,
}

impl TestModel {
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.steps.lock().unwrap().extend(steps);
    }

    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// The text of every user message of request `i`.
    pub fn user_texts(&self, i: usize) -> Vec<String> {
        self.requests()[i]
            .messages
            .iter()
            .filter_map(|m| match m {
                ChatMessage::User { content } => Some(content.clone()),
                _ => None,
            })
            .collect()
    }
}

impl ModelProvider for TestModel {
    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        observer: &'a mut dyn StreamObserver,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, LlmError>> {
        Box::pin(async move {
            self.requests.lock().unwrap().push(request.clone());
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let step = self.steps.lock().unwrap().pop_front();
            self.entered.notify_waiters();
            observer.on_event(StreamEvent::AttemptStarted { attempt: 1 });
            let message = match step {
                None => {
                    return Err(LlmError::Script {
                        message: format!("test model {} has no step {n}", self.name),
                    });
                }
                Some(Step::Hang) => {
                    cancel.cancelled().await;
                    return Err(LlmError::Cancelled);
                }
                Some(Step::Text(t)) => {
                    observer.on_event(StreamEvent::TextDelta { text: t.clone() });
                    AssistantMessage::text(t)
                }
                Some(Step::Calls(calls)) => AssistantMessage {
                    content: None,
                    reasoning_content: None,
                    tool_calls: calls
                        .into_iter()
                        .enumerate()
                        .map(|(i, (name, args))| {
                            ToolCall::new(format!("call-{}-{n}-{i}", self.name), name, args)
                        })
                        .collect(),
                },
            };
            let finish = if message.tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            };
            Ok(ModelResponse {
                message,
                usage: Some(Usage {
                    prompt_tokens: 100,
                    completion_tokens: 10,
                    total_tokens: 110,
                    cached_tokens: 0,
                }),
                finish_reason: Some(finish),
                model: None,
                attempts: Vec::new(),
                truncated_calls: Vec::new(),
            })
        })
    }

    fn label(&self) -> String {
        format!("test:{}", self.name)
    }
}

/// Programmable models keyed by agent name.
#[derive(Debug, Default)]
pub struct TestModels {
    agents: Mutex<HashMap<String, Arc<TestModel>>>,
    /// Agent names whose model setup fails (to make a child start fail).
    pub refuse: Mutex<Vec<String>>,
}

impl TestModels {
    pub fn model(&self, name: &str) -> Arc<TestModel> {
        Arc::clone(
            self.agents
                .lock()
                .unwrap()
                .entry(name.to_owned())
                .or_insert_with(|| {
                    Arc::new(TestModel {
                        name: name.to_owned(),
                        ..TestModel::default()
                    })
                }),
        )
    }
}

impl ModelSource for TestModels {
    fn for_agent(&self, name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        if self.refuse.lock().unwrap().iter().any(|n| n == name) {
            return Err(LlmError::Script {
                message: format!("no model for {name}"),
            });
        }
        Ok(self.model(name) as Arc<dyn ModelProvider>)
    }
}

/// Records every durable append (session id and event types), in order, across sessions.
#[derive(Debug, Default, Clone)]
pub struct AppendLog(pub Arc<Mutex<Vec<Append>>>);

/// One durable append: the session and its event types.
pub type Append = (SessionId, Vec<String>);

impl AppendLog {
    /// Index of the first append to `id` whose event types satisfy `pred`.
    pub fn position(&self, id: &SessionId, pred: impl Fn(&[String]) -> bool) -> Option<usize> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .position(|(s, kinds)| s == id && pred(kinds))
    }

    /// Session ids of the appends from index `from` on.
    pub fn sessions_from(&self, from: usize) -> Vec<SessionId> {
        self.0.lock().unwrap()[from..]
            .iter()
            .map(|(s, _)| s.clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A point where a durable append stops until the test lets it go on (or fail). The append
/// runs on the session's writer thread, so holding it holds that session's flush — and every
/// flush waiting for it — exactly as a slow disk would.
#[derive(Debug)]
pub struct Gate {
    verdict: Mutex<Option<Result<(), String>>>,
    decided: std::sync::Condvar,
    reached: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            verdict: Mutex::new(None),
            decided: std::sync::Condvar::new(),
            reached: tokio::sync::watch::channel(false).0,
        })
    }

    /// On the writer thread: signals that the append arrived and waits for the verdict (at
    /// most 30 s, so a test that failed before deciding cannot leave the thread stuck).
    fn hold(&self) -> Result<(), String> {
        self.reached.send_replace(true);
        let verdict = self.verdict.lock().unwrap();
        let (verdict, _) = self
            .decided
            .wait_timeout_while(verdict, Duration::from_secs(30), |v| v.is_none())
            .unwrap();
        verdict
            .clone()
            .unwrap_or_else(|| Err("the test never decided the held append".to_owned()))
    }

    fn decide(&self, verdict: Result<(), String>) {
        *self.verdict.lock().unwrap() = Some(verdict);
        self.decided.notify_all();
    }

    /// Lets the held append go on.
    pub fn release(&self) {
        self.decide(Ok(()));
    }

    /// Makes the held append fail with an I/O error whose message is `message`.
    pub fn fail(&self, message: &str) {
        self.decide(Err(message.to_owned()));
    }

    /// Waits (bounded) until the matching append is being held.
    pub async fn reached(&self) {
        let mut rx = self.reached.subscribe();
        tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|r| *r))
            .await
            .expect("the held append was never reached")
            .unwrap();
    }
}

/// Which durable appends a rule applies to: the session and the batch's event types.
type Matcher = Box<dyn Fn(&SessionId, &[String]) -> bool + Send + Sync>;

enum FaultAction {
    Fail(String),
    Hold(Arc<Gate>),
}

/// Faults injected at the backend seam (`SessionSink::append`, DESIGN decision 8): each rule
/// applies once, to the first durable append it matches, and is then removed.
#[derive(Default)]
pub struct SinkFaults {
    rules: Mutex<Vec<(Matcher, FaultAction)>>,
    /// Sessions whose next reads fail with `STORE_IO` (as a store without its quorum does),
    /// and how many more times.
    failing_reads: Mutex<Vec<(SessionId, u32)>>,
}

impl std::fmt::Debug for SinkFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkFaults").finish_non_exhaustive()
    }
}

impl SinkFaults {
    /// The next append matching `when` fails with an I/O error whose message is `message`
    /// (the writer is then poisoned, as after a real failed write).
    pub fn fail_when(
        &self,
        when: impl Fn(&SessionId, &[String]) -> bool + Send + Sync + 'static,
        message: &str,
    ) {
        self.rules
            .lock()
            .unwrap()
            .push((Box::new(when), FaultAction::Fail(message.to_owned())));
    }

    /// The next append matching `when` is held until the returned gate decides.
    pub fn hold_when(
        &self,
        when: impl Fn(&SessionId, &[String]) -> bool + Send + Sync + 'static,
    ) -> Arc<Gate> {
        let gate = Gate::new();
        self.rules
            .lock()
            .unwrap()
            .push((Box::new(when), FaultAction::Hold(Arc::clone(&gate))));
        gate
    }

    /// The next `times` reads of session `id` fail with `STORE_IO` (nothing is appended).
    pub fn fail_reads(&self, id: &SessionId, times: u32) {
        self.failing_reads.lock().unwrap().push((id.clone(), times));
    }

    /// Fails this read of `id` when [`SinkFaults::fail_reads`] says so.
    fn read(&self, id: &SessionId) -> troupe_journal::Result<()> {
        let mut failing = self.failing_reads.lock().unwrap();
        let Some(left) = failing.iter_mut().find(|(s, n)| s == id && *n > 0) else {
            return Ok(());
        };
        left.1 -= 1;
        Err(troupe_journal::JournalError::StoreIo {
            op: "read",
            url: "nats://127.0.0.1:4222".to_owned(),
            reason: "no responders (the stream has no leader)".to_owned(),
        })
    }

    fn apply(&self, id: &SessionId, kinds: &[String]) -> troupe_journal::Result<()> {
        let action = {
            let mut rules = self.rules.lock().unwrap();
            let Some(i) = rules.iter().position(|(m, _)| m(id, kinds)) else {
                return Ok(());
            };
            rules.remove(i).1
        };
        let verdict = match action {
            FaultAction::Fail(message) => Err(message),
            FaultAction::Hold(gate) => gate.hold(),
        };
        verdict.map_err(|message| troupe_journal::JournalError::Io {
            op: "write",
            path: PathBuf::from(format!("{id}.jsonl")),
            error: std::io::Error::other(message),
        })
    }
}

/// A matcher: appends to `id` whose batch holds an event of type `kind`.
pub fn append_of(
    id: &SessionId,
    kind: &'static str,
) -> impl Fn(&SessionId, &[String]) -> bool + Send + Sync + 'static {
    let id = id.clone();
    move |s, kinds| *s == id && kinds.iter().any(|k| k == kind)
}

/// A matcher: appends to any session but `not` whose batch holds an event of type `kind`.
pub fn append_elsewhere(
    not: &SessionId,
    kind: &'static str,
) -> impl Fn(&SessionId, &[String]) -> bool + Send + Sync + 'static {
    let not = not.clone();
    move |s, kinds| *s != not && kinds.iter().any(|k| k == kind)
}

#[derive(Debug)]
struct RecordingBackend {
    inner: troupe_journal::JsonlBackend,
    log: AppendLog,
    faults: Arc<SinkFaults>,
}

struct RecordingSink {
    inner: Box<dyn troupe_journal::SessionSink>,
    log: AppendLog,
    faults: Arc<SinkFaults>,
}

impl troupe_journal::SessionSink for RecordingSink {
    fn header(&self) -> &troupe_protocol::SessionHeader {
        self.inner.header()
    }
    fn next_seq(&self) -> troupe_protocol::Seq {
        self.inner.next_seq()
    }
    fn append(
        &mut self,
        expected: troupe_protocol::Seq,
        events: &[Event],
    ) -> troupe_journal::Result<()> {
        let plain: Vec<String> = events.iter().map(|e| e.kind.clone()).collect();
        self.faults.apply(&self.inner.header().id, &plain)?;
        self.inner.append(expected, events)?;
        let kinds = events
            .iter()
            .map(|e| {
                if e.kind == "team/member" {
                    format!(
                        "team/member:{}",
                        e.data["member"]["phase"].as_str().unwrap_or("")
                    )
                } else {
                    e.kind.clone()
                }
            })
            .collect();
        self.log
            .0
            .lock()
            .unwrap()
            .push((self.inner.header().id.clone(), kinds));
        Ok(())
    }
}

impl troupe_journal::LogBackend for RecordingBackend {
    fn create(
        &self,
        header: troupe_protocol::SessionHeader,
    ) -> troupe_journal::Result<Box<dyn troupe_journal::SessionSink>> {
        Ok(Box::new(RecordingSink {
            inner: self.inner.create(header)?,
            log: self.log.clone(),
            faults: Arc::clone(&self.faults),
        }))
    }
    fn open(
        &self,
        id: &SessionId,
    ) -> troupe_journal::Result<(Box<dyn troupe_journal::SessionSink>, troupe_journal::Replay)>
    {
        let (sink, replay) = self.inner.open(id)?;
        Ok((
            Box::new(RecordingSink {
                inner: sink,
                log: self.log.clone(),
                faults: Arc::clone(&self.faults),
            }),
            replay,
        ))
    }
    fn read(&self, id: &SessionId) -> troupe_journal::Result<troupe_journal::Replay> {
        self.faults.read(id)?;
        self.inner.read(id)
    }
    fn list(
        &self,
        on_error: &mut dyn FnMut(troupe_journal::JournalError),
    ) -> troupe_journal::Result<Vec<troupe_journal::SessionListing>> {
        self.inner.list(on_error)
    }
}

/// A temp home + workspace and a runtime over them.
pub struct Harness {
    pub home: tempfile::TempDir,
    pub workspace: tempfile::TempDir,
    pub models: Arc<TestModels>,
    pub runtime: Runtime,
}

/// A fault hook whose syncs fail once `fail` is set.
#[derive(Debug, Default)]
pub struct FailSwitch {
    pub fail: std::sync::atomic::AtomicBool,
}

impl troupe_journal::FaultHook for FailSwitch {
    fn fail_sync(&self) -> bool {
        self.fail.load(Ordering::SeqCst)
    }
}

impl Harness {
    pub fn new() -> Self {
        Self::build(None)
    }

    /// A harness whose journal records every durable append (see [`AppendLog`]).
    pub fn recording() -> (Self, AppendLog) {
        let (h, log, _) = Self::faulty();
        (h, log)
    }

    /// A harness whose journal records every durable append and applies the returned
    /// [`SinkFaults`] to each.
    pub fn faulty() -> (Self, AppendLog, Arc<SinkFaults>) {
        let home = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let models = Arc::new(TestModels::default());
        let (journal, log, faults) = faulty_journal(home.path());
        let runtime = runtime_with(journal, workspace.path(), Arc::clone(&models));
        (
            Self {
                home,
                workspace,
                models,
                runtime,
            },
            log,
            faults,
        )
    }

    /// [`Harness::restart`] onto a journal that applies the returned [`SinkFaults`].
    pub fn restart_faulty(&mut self) -> Arc<SinkFaults> {
        let (journal, _, faults) = faulty_journal(self.home.path());
        self.runtime = runtime_with(journal, self.workspace.path(), Arc::clone(&self.models));
        faults
    }

    /// A harness with custom Team limits.
    pub fn with_limits(limits: troupe_team::TeamLimits) -> Self {
        let mut h = Self::new();
        let mut options = h.runtime.options().clone();
        options.team_limits = limits;
        h.runtime = Runtime::new(h.journal(), options);
        h
    }

    /// A harness whose journal consults `faults` at every write and sync.
    pub fn with_faults(faults: Arc<FailSwitch>) -> Self {
        Self::build(Some(faults))
    }

    fn build(faults: Option<Arc<FailSwitch>>) -> Self {
        let home = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let models = Arc::new(TestModels::default());
        let runtime = match faults {
            None => runtime_over(home.path(), workspace.path(), Arc::clone(&models)),
            Some(f) => {
                let backend =
                    troupe_journal::JsonlBackend::new(home.path().join("sessions")).with_faults(f);
                let journal = Journal::with_backend(
                    Arc::new(backend),
                    Arc::new(troupe_protocol::SystemClock),
                );
                runtime_with(journal, workspace.path(), Arc::clone(&models))
            }
        };
        Self {
            home,
            workspace,
            models,
            runtime,
        }
    }

    /// A new runtime over the same files (a "restart": nothing in memory survives).
    pub fn restart(&mut self) {
        self.runtime = runtime_over(
            self.home.path(),
            self.workspace.path(),
            Arc::clone(&self.models),
        );
    }

    pub fn journal(&self) -> Journal {
        Journal::open_home(self.home.path())
    }

    pub async fn lead(&self) -> Agent {
        self.runtime
            .create_root(SessionId::random(), "lead", Profile::Default)
            .await
            .unwrap()
    }

    /// A Team root named `lead` (DESIGN decision 4's team profile).
    pub async fn team_lead(&self) -> Agent {
        self.runtime
            .create_root(SessionId::random(), "lead", Profile::Team)
            .await
            .unwrap()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.workspace.path().join(rel)
    }

    pub fn events(&self, id: &SessionId) -> Vec<Event> {
        self.journal().read(id).unwrap().events
    }

    /// Event types of a session, in order.
    pub fn kinds(&self, id: &SessionId) -> Vec<String> {
        self.events(id).into_iter().map(|e| e.kind).collect()
    }
}

fn faulty_journal(home: &Path) -> (Journal, AppendLog, Arc<SinkFaults>) {
    let log = AppendLog::default();
    let faults = Arc::new(SinkFaults::default());
    let backend = RecordingBackend {
        inner: troupe_journal::JsonlBackend::new(home.join("sessions")),
        log: log.clone(),
        faults: Arc::clone(&faults),
    };
    let journal = Journal::with_backend(Arc::new(backend), Arc::new(troupe_protocol::SystemClock));
    (journal, log, faults)
}

/// The `tracing` output of the current thread, captured (warnings and above) while the guard
/// lives. Use it in `current_thread` tests, where every task runs on the test's thread.
#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Starts capturing on this thread.
    pub fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The captured lines that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

fn runtime_over(home: &Path, workspace: &Path, models: Arc<TestModels>) -> Runtime {
    runtime_with(Journal::open_home(home), workspace, models)
}

fn runtime_with(journal: Journal, workspace: &Path, models: Arc<TestModels>) -> Runtime {
    Runtime::new(
        journal,
        RuntimeOptions {
            workspace: workspace.to_path_buf(),
            models,
            model_spec: ModelSpec {
                provider: ProviderKind::Script,
                model: "test".to_owned(),
                base_url: None,
                api_key_env: None,
                tool_choice: Default::default(),
            },
            chunks: ChunkPolicy::default(),
            tool_limits: ToolLimits::default(),
            max_depth: 1,
            team_limits: troupe_team::TeamLimits::default(),
            stall_after: troupe_team::StallAfter::default(),
            extra_tools: Vec::new(),
            secret_env: Vec::new(),
            secrets: Vec::new(),
            teammate_models: Default::default(),
            project_instructions: None,
            sandbox: troupe_tools::SandboxPolicy::default(),
            mcp_servers: None,
            approval: troupe_session::approval::ApprovalPolicy::default(),
            ledger: Default::default(),
            worktree_root: None,
            placement: Default::default(),
        },
    )
}

pub fn user(text: &str) -> UserMessage {
    UserMessage::text(text, MessageSource::kind("user"))
}

/// Waits (bounded) until `agent` is idle.
pub async fn idle(agent: &Agent) {
    tokio::time::timeout(Duration::from_secs(20), agent.wait_idle())
        .await
        .expect("agent did not become idle");
}

/// Waits (bounded) until the model of `name` has been called `n` times in total.
pub async fn model_called(model: &TestModel, n: usize) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while model.requests().len() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("model was not called");
}

/// `turn/end` reasons (`kind`) of a session, in order.
pub fn turn_end_kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind == "turn/end")
        .map(|e| e.data["reason"]["kind"].as_str().unwrap().to_owned())
        .collect()
}
