//! Property: random operation sequences (provision/settle, create, claim, release, complete,
//! reopen, reassign, delete, set_dependencies, edit, sends, acknowledgements) through the
//! decision functions agree with a simple reference model of REFERENCE c.8, c.10 and c.11;
//! after every step the incremental state equals a full fold of the log; revisions are
//! contiguous; no claim ever takes a task from another owner; a prefix fold plus the rest
//! equals the whole.

use std::collections::HashMap;

use proptest::prelude::*;
use troupe_protocol::{ErrorCode, Event, Seq};
use troupe_team::{
    Caller, CreateTask, Delivery, MemberContext, MemberPhase, ProvisionTeammate,
    ProvisioningOutcome, SendMessage, SettleDecision, TaskAction, TaskStatus, TeamError, TeamEvent,
    TeamLimits, TeamRecord, TeamState, UpdateTask, team_message_id,
};

use super::support::*;

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
const TARGETS: [&str; 5] = ["lead", "alpha", "beta", "gamma", "ghost"];
const OWNERS: [&str; 6] = ["lead", "alpha", "beta", "gamma", " ", "nobody"];
/// Raw scope → normalized scope (`None` = invalid).
const SCOPES: [(&str, Option<&str>); 5] = [
    ("src", Some("src")),
    ("src/a", Some("src/a")),
    ("docs", Some("docs")),
    ("./src/", Some("src")),
    ("../bad", None),
];
/// A reference to a task: mostly an existing one (`Some`; `true` = any task, tombstones
/// included, else a non-deleted one when there is one), sometimes an unknown id (`None`).
type TaskRef = Option<(prop::sample::Index, bool)>;

fn task_ref() -> impl Strategy<Value = TaskRef> {
    prop::option::weighted(
        0.97,
        (any::<prop::sample::Index>(), prop::bool::weighted(0.1)),
    )
}

fn limits() -> TeamLimits {
    TeamLimits {
        max_members: 2,
        max_tasks: 6,
        max_pending_messages_per_member: 2,
        ..TeamLimits::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Provision(usize),
    Settle(usize, bool),
    Create {
        caller: usize,
        blockers: Vec<TaskRef>,
        scopes: Vec<usize>,
    },
    Update {
        caller: usize,
        task: TaskRef,
        stale: bool,
        action: usize,
        blockers: Option<Vec<TaskRef>>,
        owner: Option<usize>,
        subject: bool,
    },
    Send {
        caller: usize,
        target: usize,
        wakeup: bool,
    },
    Ack {
        message: usize,
        wrong_target: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    // The Lead half of the time, so owner-or-Lead actions often pass.
    let caller = prop_oneof![3 => Just(0usize), 1 => 1..4usize];
    prop_oneof![
        2 => (0..3usize).prop_map(Op::Provision),
        2 => (0..3usize, prop::bool::weighted(0.8)).prop_map(|(n, a)| Op::Settle(n, a)),
        6 => (
            caller.clone(),
            prop::collection::vec(task_ref(), 0..3),
            prop::collection::vec(prop_oneof![12 => 0..SCOPES.len() - 1, 1 => Just(SCOPES.len() - 1)], 0..3),
        )
            .prop_map(|(caller, blockers, scopes)| Op::Create { caller, blockers, scopes }),
        10 => (
            caller.clone(),
            task_ref(),
            prop::bool::weighted(0.1),
            0..12usize,
            prop::option::weighted(0.9, prop::collection::vec(task_ref(), 0..3)),
            prop::option::weighted(0.8, 0..OWNERS.len()),
            prop::bool::weighted(0.8),
        )
            .prop_map(|(caller, task, stale, action, blockers, owner, subject)| Op::Update {
                caller, task, stale, action, blockers, owner, subject,
            }),
        3 => (caller, 0..TARGETS.len(), any::<bool>())
            .prop_map(|(caller, target, wakeup)| Op::Send { caller, target, wakeup }),
        3 => (0..8usize, prop::bool::weighted(0.2))
            .prop_map(|(message, wrong_target)| Op::Ack { message, wrong_target }),
    ]
}

#[derive(Debug, Clone, PartialEq)]
struct MTask {
    id: String,
    revision: u64,
    subject: String,
    status: TaskStatus,
    owner: Option<String>,
    blocked_by: Vec<String>,
    scopes: Vec<String>,
}

#[derive(Debug, Clone)]
struct MMember {
    id: String,
    name: String,
    phase: MemberPhase,
}

#[derive(Debug, Clone)]
struct MMessage {
    id: String,
    target: String,
    delivered: bool,
}

/// The reference model: plain vectors and the REFERENCE tables transcribed directly.
#[derive(Debug, Clone, Default)]
struct Model {
    members: Vec<MMember>,
    tasks: Vec<MTask>,
    next_task: u64,
    messages: Vec<MMessage>,
}

type Expect<T> = Result<T, &'static str>;

impl Model {
    fn new() -> Self {
        Self {
            next_task: 1,
            ..Self::default()
        }
    }

    fn caller_id(&self, caller: usize) -> Option<String> {
        if caller == 0 {
            return Some(ROOT.to_owned());
        }
        self.members
            .iter()
            .find(|m| m.name == NAMES[caller - 1] && m.phase != MemberPhase::Failed)
            .map(|m| m.id.clone())
    }

    fn active_id(&self, name: &str) -> Option<String> {
        if name == "lead" {
            return Some(ROOT.to_owned());
        }
        self.members
            .iter()
            .find(|m| m.name == name && m.phase == MemberPhase::Active)
            .map(|m| m.id.clone())
    }

    /// Resolves a generated task reference against the tasks that exist.
    fn task_name(&self, reference: &TaskRef) -> String {
        let live: Vec<&MTask> = self
            .tasks
            .iter()
            .filter(|t| t.status != TaskStatus::Deleted)
            .collect();
        match reference {
            Some((index, false)) if !live.is_empty() => live[index.index(live.len())].id.clone(),
            Some((index, _)) if !self.tasks.is_empty() => {
                self.tasks[index.index(self.tasks.len())].id.clone()
            }
            _ => "missing".to_owned(),
        }
    }

    /// Resolves generated blockers; references to existing tasks are dropped while none
    /// exist, so early creations are not all refused.
    fn blocker_names(&self, references: &[TaskRef]) -> Vec<String> {
        references
            .iter()
            .filter(|r| r.is_none() || !self.tasks.is_empty())
            .map(|r| self.task_name(r))
            .collect()
    }

    fn task(&self, id: &str) -> Option<&MTask> {
        self.tasks.iter().find(|t| t.id == id)
    }

    fn live(&self, id: &str) -> bool {
        self.task(id)
            .is_some_and(|t| t.status != TaskStatus::Deleted)
    }

    fn blockers_done(&self, task: &MTask) -> bool {
        task.blocked_by.iter().all(|b| {
            self.task(b)
                .is_some_and(|t| t.status == TaskStatus::Completed)
        })
    }

    fn check_blockers(&self, own: &str, raw: &[String]) -> Expect<Vec<String>> {
        for (k, b) in raw.iter().enumerate() {
            if b == own {
                return Err("TEAM_TASK_DEPENDENCY_CYCLE");
            }
            if raw[..k].contains(b) {
                return Err("TEAM_INVALID_ARGUMENT");
            }
            if !self.live(b) {
                return Err("TEAM_TASK_NOT_FOUND");
            }
        }
        Ok(raw.to_vec())
    }

    fn has_cycle(&self, candidate: &MTask) -> bool {
        let edges = |id: &str| -> Vec<String> {
            if id == candidate.id {
                return candidate.blocked_by.clone();
            }
            self.task(id)
                .filter(|t| t.status != TaskStatus::Deleted)
                .map(|t| t.blocked_by.clone())
                .unwrap_or_default()
        };
        // Any cycle among valid graphs must pass through the candidate: search from it.
        let mut stack = edges(&candidate.id);
        let mut seen = Vec::new();
        while let Some(node) = stack.pop() {
            if node == candidate.id {
                return true;
            }
            if !seen.contains(&node) {
                seen.push(node.clone());
                stack.extend(edges(&node));
            }
        }
        false
    }

    fn provision(&self, name: &str) -> Expect<MMember> {
        if self.members.iter().any(|m| m.name == name) {
            return Err("TEAM_MEMBER_NAME_TAKEN");
        }
        if self.members.len() >= 2 {
            return Err("TEAM_MEMBER_LIMIT");
        }
        Ok(MMember {
            id: format!("child-{name}"),
            name: name.to_owned(),
            phase: MemberPhase::Provisioning,
        })
    }

    fn create(&self, blockers: &[String], scopes: &[usize]) -> Expect<MTask> {
        if self
            .tasks
            .iter()
            .filter(|t| t.status != TaskStatus::Deleted)
            .count()
            >= 6
        {
            return Err("TEAM_TASK_LIMIT");
        }
        let id = format!("task-{}", self.next_task);
        let blocked_by = self.check_blockers(&id, blockers)?;
        let mut normalized: Vec<String> = Vec::new();
        for &s in scopes {
            let scope = SCOPES[s].1.ok_or("TEAM_INVALID_WRITE_SCOPE")?.to_owned();
            if !normalized.contains(&scope) {
                normalized.push(scope);
            }
        }
        Ok(MTask {
            id,
            revision: 1,
            subject: "subject".to_owned(),
            status: TaskStatus::Pending,
            owner: None,
            blocked_by,
            scopes: normalized,
        })
    }

    fn update(&self, caller: &str, request: &UpdateTask) -> Expect<MTask> {
        use TaskStatus::*;
        let current = self.task(&request.task_id).ok_or("TEAM_TASK_NOT_FOUND")?;
        if request.expected_revision != current.revision {
            return Err("TEAM_TASK_STALE_REVISION");
        }
        if current.status == Deleted {
            return Err("TEAM_TASK_DELETED");
        }
        let lead = caller == ROOT;
        let authorized = lead || current.owner.as_deref() == Some(caller);
        let mut next = MTask {
            revision: current.revision + 1,
            ..current.clone()
        };
        let auth = || {
            if authorized {
                Ok(())
            } else {
                Err("TEAM_TASK_UNAUTHORIZED")
            }
        };
        match request.action {
            TaskAction::Claim => {
                if current.owner.as_deref().is_some_and(|o| o != caller) {
                    return Err("TEAM_TASK_ALREADY_CLAIMED");
                }
                if current.status != Pending || !self.blockers_done(current) {
                    return Err("TEAM_TASK_BLOCKED");
                }
                next.status = InProgress;
                next.owner = Some(caller.to_owned());
            }
            TaskAction::Release => {
                auth()?;
                if current.status != InProgress {
                    return Err("TEAM_TASK_INVALID_TRANSITION");
                }
                next.status = Pending;
                next.owner = None;
            }
            TaskAction::Complete => {
                auth()?;
                if current.status != InProgress {
                    return Err("TEAM_TASK_INVALID_TRANSITION");
                }
                next.status = Completed;
            }
            TaskAction::Reopen => {
                auth()?;
                if current.status != Completed {
                    return Err("TEAM_TASK_INVALID_TRANSITION");
                }
                next.status = Pending;
                next.owner = None;
            }
            TaskAction::Edit => {
                auth()?;
                let subject = request.subject.as_ref().ok_or("TEAM_INVALID_ARGUMENT")?;
                next.subject = subject.clone();
            }
            TaskAction::SetDependencies => {
                auth()?;
                let raw = request.blocked_by.as_ref().ok_or("TEAM_INVALID_ARGUMENT")?;
                next.blocked_by = self.check_blockers(&current.id, raw)?;
                if self.has_cycle(&next) {
                    return Err("TEAM_TASK_DEPENDENCY_CYCLE");
                }
            }
            TaskAction::Reassign => {
                if !lead {
                    return Err("TEAM_LEAD_REQUIRED");
                }
                if !matches!(current.status, Pending | InProgress) {
                    return Err("TEAM_TASK_INVALID_TRANSITION");
                }
                let name = request.owner.as_deref().unwrap_or("").trim();
                if name.is_empty() {
                    next.status = Pending;
                    next.owner = None;
                } else {
                    if !self.blockers_done(current) {
                        return Err("TEAM_TASK_BLOCKED");
                    }
                    next.owner = Some(self.active_id(name).ok_or("TEAM_MEMBER_NOT_FOUND")?);
                    next.status = InProgress;
                }
            }
            TaskAction::Delete => {
                auth()?;
                if self.tasks.iter().any(|t| {
                    t.id != current.id && t.status != Deleted && t.blocked_by.contains(&current.id)
                }) {
                    return Err("TEAM_TASK_HAS_DEPENDENTS");
                }
                next.status = Deleted;
            }
        }
        Ok(next)
    }

    fn send(&self, caller: &str, target: &str) -> Expect<String> {
        let target = self.active_id(target).ok_or("TEAM_MEMBER_NOT_FOUND")?;
        if target == caller {
            return Err("TEAM_SELF_MESSAGE");
        }
        let pending = self
            .messages
            .iter()
            .filter(|m| m.target == target && !m.delivered)
            .count();
        if pending >= 2 {
            return Err("TEAM_MAILBOX_FULL");
        }
        Ok(target)
    }

    fn store_task(&mut self, task: MTask) {
        let number: u64 = task.id.trim_start_matches("task-").parse().unwrap_or(0);
        self.next_task = self.next_task.max(number + 1);
        match self.tasks.iter_mut().find(|t| t.id == task.id) {
            Some(slot) => *slot = task,
            None => self.tasks.push(task),
        }
    }
}

fn outcome<T>(result: &Result<T, TeamError>) -> Result<(), &'static str> {
    match result {
        Ok(_) => Ok(()),
        Err(e) => Err(e.code()),
    }
}

fn task_record(event: &TeamEvent) -> MTask {
    let TeamRecord::Task(t) = &event.record else {
        panic!("not a task event: {event:?}");
    };
    MTask {
        id: t.id.to_string(),
        revision: t.revision.get(),
        subject: t.subject.clone(),
        status: t.status,
        owner: t.owner_id.as_ref().map(|o| o.to_string()),
        blocked_by: t.blocked_by.iter().map(|b| b.to_string()).collect(),
        scopes: t.write_scopes.clone(),
    }
}

struct Harness {
    state: TeamState,
    /// The same events as the runtime commits them: staged (checked once, typed), then
    /// applied.
    staged: TeamState,
    log: Vec<Event>,
    model: Model,
    revisions: HashMap<String, u64>,
    message_counter: u32,
}

impl Harness {
    fn commit(&mut self, event: &TeamEvent) -> Result<(), TestCaseError> {
        let draft = event.to_draft();
        self.state
            .check_candidate(&draft.kind, &draft.data)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let stored = draft.into_event(Seq(self.log.len() as u64), 1);
        self.state
            .apply(&stored)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.staged
            .stage(event)
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .apply();
        prop_assert_eq!(&self.staged, &self.state);
        if let TeamRecord::Task(task) = &event.record {
            // Revisions are contiguous per task, independently of the fold's own check.
            let last = self.revisions.entry(task.id.to_string()).or_insert(0);
            prop_assert_eq!(task.revision.get(), *last + 1);
            *last += 1;
        }
        self.log.push(stored);
        Ok(())
    }

    fn caller(&self, id: &str) -> Caller {
        self.state
            .caller(&sid(id))
            .expect("model and state agree on membership")
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let limits = limits();
        match op {
            Op::Provision(n) => {
                let name = NAMES[*n];
                let expected = self.model.provision(name);
                let got = self.state.decide_provision(
                    &Caller::lead(&team()),
                    &ProvisionTeammate {
                        name: name.to_owned(),
                        description: "job".to_owned(),
                        provider: "spawn".to_owned(),
                        context: MemberContext::Fork,
                        worktree: None,
                    },
                    sid(&format!("child-{name}")),
                    &limits,
                );
                prop_assert_eq!(outcome(&got), expected.as_ref().map(drop).map_err(|e| *e));
                if let (Ok(event), Ok(member)) = (got, expected) {
                    self.commit(&event)?;
                    self.model.members.push(member);
                }
            }
            Op::Settle(n, active) => {
                let name = NAMES[*n];
                let id = sid(&format!("child-{name}"));
                let outcome = if *active {
                    ProvisioningOutcome::Active
                } else {
                    ProvisioningOutcome::Failed {
                        error: "boom".to_owned(),
                    }
                };
                let got = self.state.decide_settle_provisioning(&id, &outcome);
                let Some(member) = self.model.members.iter_mut().find(|m| m.name == name) else {
                    prop_assert_eq!(
                        got.map(drop).map_err(|e| e.code()),
                        Err("TEAM_MEMBER_NOT_FOUND")
                    );
                    return Ok(());
                };
                match got.map_err(|e| TestCaseError::fail(e.to_string()))? {
                    SettleDecision::AlreadySettled(phase) => {
                        prop_assert_ne!(member.phase, MemberPhase::Provisioning);
                        prop_assert_eq!(phase, member.phase);
                    }
                    SettleDecision::Append(event) => {
                        prop_assert_eq!(member.phase, MemberPhase::Provisioning);
                        member.phase = if *active {
                            MemberPhase::Active
                        } else {
                            MemberPhase::Failed
                        };
                        self.commit(&event)?;
                    }
                }
            }
            Op::Create {
                caller,
                blockers,
                scopes,
            } => {
                let Some(caller_id) = self.model.caller_id(*caller) else {
                    return Ok(());
                };
                let blockers = self.model.blocker_names(blockers);
                let expected = self.model.create(&blockers, scopes);
                let request = CreateTask {
                    subject: "subject".to_owned(),
                    description: "description".to_owned(),
                    blocked_by: blockers,
                    write_scopes: scopes.iter().map(|&s| SCOPES[s].0.to_owned()).collect(),
                };
                let got =
                    self.state
                        .decide_create_task(&self.caller(&caller_id), &request, &limits);
                prop_assert_eq!(outcome(&got), expected.as_ref().map(drop).map_err(|e| *e));
                if let (Ok(event), Ok(task)) = (got, expected) {
                    prop_assert_eq!(task_record(&event), task.clone());
                    self.commit(&event)?;
                    self.model.store_task(task);
                }
            }
            Op::Update {
                caller,
                task,
                stale,
                action,
                blockers,
                owner,
                subject,
            } => {
                let Some(caller_id) = self.model.caller_id(*caller) else {
                    return Ok(());
                };
                let task_id = self.model.task_name(task);
                let current = self.model.task(&task_id).map_or(1, |t| t.revision);
                // Actions 8..12 take the task's natural next step, so tasks travel the
                // whole pending → in_progress → completed → pending cycle often.
                let action = match (*action, self.model.task(&task_id).map(|t| t.status)) {
                    (0..8, _) => TaskAction::ALL[*action],
                    (_, Some(TaskStatus::InProgress)) if *action == 8 => TaskAction::Release,
                    (_, Some(TaskStatus::InProgress)) => TaskAction::Complete,
                    (_, Some(TaskStatus::Completed)) => TaskAction::Reopen,
                    _ => TaskAction::Claim,
                };
                let mut request = UpdateTask::new(
                    task_id.clone(),
                    if *stale { current + 1 } else { current },
                    action,
                );
                request.blocked_by = blockers.as_ref().map(|list| self.model.blocker_names(list));
                request.owner = owner.map(|o| OWNERS[o].to_owned());
                request.subject = subject.then(|| format!("subject {}", self.log.len()));
                let before = self.model.task(&task_id).cloned();
                let expected = self.model.update(&caller_id, &request);
                let got = self
                    .state
                    .decide_update_task(&self.caller(&caller_id), &request);
                prop_assert_eq!(
                    outcome(&got),
                    expected.as_ref().map(drop).map_err(|e| *e),
                    "{:?} on {:?}",
                    request,
                    before
                );
                if let (Ok(event), Ok(task)) = (got, expected) {
                    let record = task_record(&event);
                    prop_assert_eq!(&record, &task);
                    if request.action == TaskAction::Claim {
                        // Never two owners: a claim only takes an unowned (or own) task.
                        let prior = before.and_then(|t| t.owner);
                        prop_assert!(
                            prior.is_none() || prior.as_deref() == Some(caller_id.as_str())
                        );
                    }
                    self.commit(&event)?;
                    self.model.store_task(task);
                }
            }
            Op::Send {
                caller,
                target,
                wakeup,
            } => {
                let Some(caller_id) = self.model.caller_id(*caller) else {
                    return Ok(());
                };
                self.message_counter += 1;
                let id = team_message_id(&format!("m{}", self.message_counter)).unwrap();
                let expected = self.model.send(&caller_id, TARGETS[*target]);
                let request = SendMessage {
                    target: TARGETS[*target].to_owned(),
                    content: vec![serde_json::json!({"type": "text", "text": "note"})],
                    delivery: if *wakeup {
                        Delivery::Wakeup
                    } else {
                        Delivery::Quiet
                    },
                };
                let got =
                    self.state
                        .decide_send(&self.caller(&caller_id), &request, id.clone(), &limits);
                prop_assert_eq!(outcome(&got), expected.as_ref().map(drop).map_err(|e| *e));
                if let (Ok(event), Ok(target)) = (got, expected) {
                    let TeamRecord::MessageQueued(message) = &event.record else {
                        panic!()
                    };
                    prop_assert_eq!(message.target_id.as_str(), target.as_str());
                    prop_assert_eq!(message.sender_id.as_str(), caller_id.as_str());
                    self.commit(&event)?;
                    self.model.messages.push(MMessage {
                        id: id.to_string(),
                        target,
                        delivered: false,
                    });
                }
            }
            Op::Ack {
                message,
                wrong_target,
            } => {
                if self.model.messages.is_empty() {
                    return Ok(());
                }
                let index = message % self.model.messages.len();
                let queued = self.model.messages[index].clone();
                let target = if *wrong_target {
                    if queued.target == ROOT {
                        "child-alpha".to_owned()
                    } else {
                        ROOT.to_owned()
                    }
                } else {
                    queued.target.clone()
                };
                let id = troupe_protocol::MessageId::new(queued.id.clone()).unwrap();
                let got = self.state.decide_delivered(&id, &sid(&target));
                let expected = !queued.delivered && !wrong_target;
                prop_assert_eq!(got.is_some(), expected);
                if let Some(event) = got {
                    self.commit(&event)?;
                    self.model.messages[index].delivered = true;
                }
            }
        }
        self.check_after_step()
    }

    fn check_after_step(&self) -> Result<(), TestCaseError> {
        // The incremental state equals a full fold of the log after every step.
        let refolded =
            TeamState::fold(team(), &self.log).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&refolded, &self.state);
        self.state.verify_indexes().map_err(TestCaseError::fail)?;
        // State and model agree.
        let tasks: Vec<MTask> = self
            .state
            .tasks()
            .iter()
            .map(|t| {
                task_record(&TeamEvent {
                    team_id: team(),
                    record: TeamRecord::Task(t.clone()),
                })
            })
            .collect();
        prop_assert_eq!(&tasks, &self.model.tasks);
        for task in self.state.tasks() {
            prop_assert_eq!(
                task.status == TaskStatus::InProgress && task.owner_id.is_none(),
                false
            );
        }
        let phases: Vec<(String, MemberPhase)> = self
            .state
            .members()
            .iter()
            .map(|m| (m.name.to_string(), m.phase))
            .collect();
        let modelled: Vec<(String, MemberPhase)> = self
            .model
            .members
            .iter()
            .map(|m| (m.name.clone(), m.phase))
            .collect();
        prop_assert_eq!(phases, modelled);
        let pending: Vec<String> = self
            .state
            .pending_messages()
            .map(|m| m.id.to_string())
            .collect();
        let modelled: Vec<String> = self
            .model
            .messages
            .iter()
            .filter(|m| !m.delivered)
            .map(|m| m.id.clone())
            .collect();
        prop_assert_eq!(pending, modelled);
        for target in [ROOT, "child-alpha", "child-beta", "child-gamma"] {
            let count = self
                .model
                .messages
                .iter()
                .filter(|m| m.target == target && !m.delivered)
                .count();
            prop_assert_eq!(self.state.pending_count_for(&sid(target)), count);
        }
        prop_assert_eq!(self.state.next_task_number(), self.model.next_task);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn operations_agree_with_the_reference_model(
        ops in prop::collection::vec(op(), 1..80),
        split in any::<prop::sample::Index>(),
    ) {
        let mut harness = Harness {
            state: TeamState::new(team()),
            staged: TeamState::new(team()),
            log: Vec::new(),
            model: Model::new(),
            revisions: HashMap::new(),
            message_counter: 0,
        };
        for op in &ops {
            harness.step(op)?;
        }
        // Fold of a prefix, then the rest, equals the fold of the whole.
        let whole = TeamState::fold(team(), &harness.log).unwrap();
        let k = split.index(harness.log.len() + 1);
        let mut state = TeamState::fold(team(), &harness.log[..k]).unwrap();
        for event in &harness.log[k..] {
            state.apply(event).unwrap();
        }
        prop_assert_eq!(&state, &whole);
        prop_assert_eq!(&whole, &harness.state);
    }
}
