//! Shared helpers: event builders for hand-written Lead logs, and [`Board`], a tiny stand-in
//! for the runtime's commit protocol (decide → invariant check → append → apply).

use serde_json::{Value, json};
use troupe_protocol::{ErrorCode, Event, EventDraft, Seq, SessionId};
use troupe_team::{
    Caller, CreateTask, LineApplied, MemberContext, ProvisionTeammate, ProvisioningOutcome,
    SettleDecision, TaskAction, TaskView, TeamError, TeamEvent, TeamId, TeamLimits, TeamState,
    UpdateTask,
};

/// The root (Lead) session id of hand-written logs.
pub const ROOT: &str = "team-root";
/// Another Team's id (an ancestor fork's records).
pub const ANCESTOR: &str = "ancestor-root";

pub fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

pub fn team() -> TeamId {
    TeamId::new(sid(ROOT))
}

/// `(type, data)` pairs → stored events with contiguous seqs.
pub fn events(list: Vec<(&str, Value)>) -> Vec<Event> {
    list.into_iter()
        .enumerate()
        .map(|(i, (kind, data))| {
            EventDraft::new(kind, data).into_event(Seq(i as u64), 1_000 + i as u64)
        })
        .collect()
}

pub fn member_in(team: &str, id: &str, name: &str, phase: &str) -> (&'static str, Value) {
    (
        "team/member",
        json!({"version": 1, "teamId": team, "member": {
            "id": id, "name": name, "description": "Review the diff", "provider": "spawn",
            "context": "fresh", "phase": phase}}),
    )
}

pub fn member(id: &str, name: &str, phase: &str) -> (&'static str, Value) {
    member_in(ROOT, id, name, phase)
}

pub fn task_in(
    team: &str,
    id: &str,
    revision: u64,
    status: &str,
    blocked_by: &[&str],
) -> (&'static str, Value) {
    (
        "team/task",
        json!({"version": 1, "teamId": team, "task": {
            "id": id, "revision": revision, "subject": format!("subject of {id}"),
            "description": "do it", "status": status, "blockedBy": blocked_by,
            "writeScopes": []}}),
    )
}

pub fn task(id: &str, revision: u64, status: &str, blocked_by: &[&str]) -> (&'static str, Value) {
    task_in(ROOT, id, revision, status, blocked_by)
}

pub fn queued_with(id: &str, target: &str, content: Value) -> (&'static str, Value) {
    (
        "team/message/queued",
        json!({"version": 1, "teamId": ROOT, "message": {
            "id": id, "senderId": ROOT, "senderName": "lead", "targetId": target,
            "delivery": "quiet", "content": content}}),
    )
}

pub fn queued(id: &str, target: &str) -> (&'static str, Value) {
    queued_with(id, target, json!([{"type": "text", "text": "hello"}]))
}

pub fn delivered(id: &str, target: &str) -> (&'static str, Value) {
    (
        "team/message/delivered",
        json!({"version": 1, "teamId": ROOT, "messageId": id, "targetId": target}),
    )
}

pub fn fold(list: Vec<(&str, Value)>) -> Result<TeamState, String> {
    TeamState::fold(team(), &events(list)).map_err(|e| e.to_string())
}

/// Asserts an error's code.
pub fn assert_code<T: std::fmt::Debug>(result: Result<T, TeamError>, code: &str) {
    match result {
        Ok(value) => panic!("expected {code}, got Ok({value:?})"),
        Err(error) => assert_eq!(error.code(), code, "{error}"),
    }
}

/// A Lead log in memory plus its incrementally folded state: the runtime's commit protocol
/// without IO. Every commit is checked by the invariant companion first, and after every
/// commit the incremental state is compared with a full re-fold of the log.
pub struct Board {
    pub state: TeamState,
    pub log: Vec<Event>,
    pub limits: TeamLimits,
    /// The same log folded through its lines (the fast path of `team show` and attach).
    fast: TeamState,
    /// The same events applied as the runtime commits them: staged (checked once, typed),
    /// then applied.
    staged: TeamState,
}

impl Board {
    pub fn new() -> Self {
        Self::with_limits(TeamLimits::default())
    }

    pub fn with_limits(limits: TeamLimits) -> Self {
        Self {
            state: TeamState::new(team()),
            log: Vec::new(),
            limits,
            fast: TeamState::new(team()),
            staged: TeamState::new(team()),
        }
    }

    pub fn lead(&self) -> Caller {
        Caller::lead(&team())
    }

    pub fn caller(&self, name: &str) -> Caller {
        let member = self.state.member_named(name).unwrap();
        self.state.caller(&member.id).unwrap()
    }

    /// Appends a raw (hand-written) event, as a test would with `session.append`.
    pub fn append_raw(&mut self, (kind, data): (&str, Value)) {
        let event = EventDraft::new(kind, data).into_event(Seq(self.log.len() as u64), 7);
        self.state.apply(&event).unwrap();
        let line = serde_json::to_string(&event).unwrap();
        if self.fast.apply_line(kind, &line) == LineApplied::NeedEvent {
            self.fast.apply(&event).unwrap();
        }
        assert_eq!(self.fast, self.state, "the fast path differs: {line}");
        // A record written by hand reaches the runtime's state as a stored event.
        self.staged.apply(&event).unwrap();
        self.log.push(event);
    }

    /// Commits a decided event: invariant check, append, apply, then compare with a full
    /// re-fold of the whole log.
    pub fn commit(&mut self, decided: TeamEvent) {
        // The runtime's path: the typed event checked once, applied without a `Value`.
        self.staged.stage(&decided).unwrap().apply();
        let draft = decided.to_draft();
        self.state
            .check_candidate(&draft.kind, &draft.data)
            .unwrap();
        let event = draft.into_event(Seq(self.log.len() as u64), 7);
        self.state.apply(&event).unwrap();
        self.log.push(event);
        let refolded = TeamState::fold(team(), &self.log).unwrap();
        assert_eq!(
            refolded, self.state,
            "incremental state differs from a full fold"
        );
        self.state.verify_indexes().unwrap();
        // A line Troupe writes always takes the fast path, with the same result.
        let line = serde_json::to_string(self.log.last().unwrap()).unwrap();
        let kind = &self.log.last().unwrap().kind;
        assert_eq!(
            self.fast.apply_line(kind, &line),
            LineApplied::Applied,
            "{line}"
        );
        assert_eq!(self.fast, self.state, "the fast path differs: {line}");
        self.fast.verify_indexes().unwrap();
        assert_eq!(
            self.staged, self.state,
            "staging and applying differs from applying the stored event"
        );
        self.staged.verify_indexes().unwrap();
    }

    /// Provisions and activates a teammate named `name` (child id `child-<name>`).
    pub fn spawn(&mut self, name: &str) -> Caller {
        let id = sid(&format!("child-{name}"));
        let decided = self
            .state
            .decide_provision(
                &self.lead(),
                &ProvisionTeammate {
                    name: name.to_owned(),
                    description: format!("{name} work"),
                    provider: "spawn".to_owned(),
                    context: MemberContext::Fresh,
                    worktree: None,
                },
                id.clone(),
                &self.limits,
            )
            .unwrap();
        self.commit(decided);
        match self
            .state
            .decide_settle_provisioning(&id, &ProvisioningOutcome::Active)
            .unwrap()
        {
            SettleDecision::Append(event) => self.commit(event),
            SettleDecision::AlreadySettled(phase) => panic!("already {phase}"),
        }
        self.caller(name)
    }

    pub fn create(
        &mut self,
        caller: &Caller,
        blocked_by: &[&str],
        scopes: &[&str],
    ) -> Result<TaskView, TeamError> {
        let request = CreateTask {
            subject: "a task".to_owned(),
            description: "what to do".to_owned(),
            blocked_by: blocked_by.iter().map(|s| s.to_string()).collect(),
            write_scopes: scopes.iter().map(|s| s.to_string()).collect(),
        };
        self.create_with(caller, &request)
    }

    pub fn create_with(
        &mut self,
        caller: &Caller,
        request: &CreateTask,
    ) -> Result<TaskView, TeamError> {
        let decided = self
            .state
            .decide_create_task(caller, request, &self.limits)?;
        Ok(self.commit_task(decided))
    }

    pub fn update(&mut self, caller: &Caller, request: &UpdateTask) -> Result<TaskView, TeamError> {
        let decided = self.state.decide_update_task(caller, request)?;
        Ok(self.commit_task(decided))
    }

    /// The simple actions with the task's current revision.
    pub fn act(
        &mut self,
        caller: &Caller,
        id: &str,
        action: TaskAction,
    ) -> Result<TaskView, TeamError> {
        let revision = self.revision(id);
        self.update(caller, &UpdateTask::new(id, revision, action))
    }

    pub fn revision(&self, id: &str) -> u64 {
        self.state.task(id).map_or(1, |t| t.revision.get())
    }

    fn commit_task(&mut self, decided: TeamEvent) -> TaskView {
        // A mutation's view is the pre-append state plus the new snapshot ...
        let troupe_team::TeamRecord::Task(snapshot) = &decided.record else {
            panic!("not a task event");
        };
        let before = self.state.task_view_of(snapshot);
        let id = snapshot.id.to_string();
        self.commit(decided);
        // ... which equals the stored task's view afterwards.
        let after = self.state.task_view(&id).unwrap();
        assert_eq!(before, after);
        after
    }
}
