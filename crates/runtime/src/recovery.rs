//! Recovery decides from the logs, not by guessing (DESIGN decision 10).
//!
//! After a crash, a session's open turn is closed with one synthetic `tool/result` per call of
//! its open step that has none (REFERENCE a.9). Where the logs fully describe a call's effect,
//! [`Resolver`] resolves it exactly:
//!
//! | call | resolved from | done (result rebuilt) | not run (`TOOL_NOT_STARTED`, asked again) |
//! |---|---|---|---|
//! | no `tool/call` | the caller's log | — | always |
//! | `read`, `glob`, `grep`, `list_agents`, `team_task_get`, `team_task_list`, `wait_agent` | nothing: they change nothing | — | always |
//! | `interrupt_agent` | nothing: after the restart no teammate's turn runs, so it is safe to repeat | — | always |
//! | `spawn_teammate`, `send_message`, `followup_task`, `team_task_create`, `team_task_update` | the Lead log's `tool/effect` link naming the call, in the batch of the Team record it appended | link present | no link |
//! | `write`, `edit` | the file against the pre- and post-image hashes its `tool/call` recorded | post-image | pre-image |
//!
//! A file that holds neither image was changed by someone else: `TOOL_OUTCOME_UNKNOWN` saying
//! so. Every other call (`bash`, the subagent tools, extra tools) is `TOOL_OUTCOME_UNKNOWN`:
//! its effect is outside Troupe's knowledge.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde_json::{Value, json};
use troupe_protocol::{Event, MessageId, MessageSource, SessionId, UserMessage, event_types as ty};
use troupe_team::{MemberPhase, MemberView, TeamState};
use troupe_tools::{FileEffectState, file_effect_state};

use crate::team::output::{send_result_text, spawn_result_text};
use crate::team::schema::TeamToolName;
use troupe_session::events::ToolEffectRecord;
use troupe_session::{
    CONTINUATION_SOURCE, CallResolution, ContinuationRule, OpenTurn, READ_ONLY_TOOLS, Transcript,
    UnansweredCall,
};

/// Whether the open step of `transcript` has a started Team call whose effect would be in the
/// Lead log (so recovery needs the Team's links to resolve it).
pub(crate) fn needs_team_links(transcript: &Transcript) -> bool {
    transcript.unanswered().iter().any(|c| {
        c.call_seq.is_some()
            && TeamToolName::from_name(&c.call.name).is_some_and(TeamToolName::writes)
    })
}

/// What a linked call appended.
#[derive(Debug, Clone)]
enum Linked {
    /// A roster record: the member's id (a spawn's `provisioning` edge).
    Member(SessionId),
    /// A task snapshot.
    Task,
    /// A queued message: its id.
    Message(MessageId),
}

#[derive(Debug, Clone)]
struct Link {
    result: Option<String>,
    linked: Linked,
}

/// The `tool/effect` links of a Lead log: which member's tool call appended which Team record,
/// plus the ids of the messages delivered since (for a rebuilt `send_message` result).
#[derive(Debug, Default)]
pub(crate) struct TeamLinks {
    links: HashMap<(SessionId, String), Link>,
    delivered: HashSet<MessageId>,
}

impl TeamLinks {
    /// Collects the links of the Lead log `events`. A link counts only with the Team record it
    /// announces right after it (the same batch): a link whose record is not there never took
    /// effect.
    pub(crate) fn collect(events: &[Event]) -> Self {
        let mut out = Self::default();
        for (at, event) in events.iter().enumerate() {
            if event.kind == ty::TEAM_MESSAGE_DELIVERED {
                if let Some(id) = event.data["messageId"]
                    .as_str()
                    .and_then(|id| MessageId::new(id).ok())
                {
                    out.delivered.insert(id);
                }
                continue;
            }
            if event.kind != ty::TOOL_EFFECT {
                continue;
            }
            let Ok(link) = serde_json::from_value::<ToolEffectRecord>(event.data.clone()) else {
                continue;
            };
            let Some(record) = events.get(at + 1) else {
                continue;
            };
            let linked = match record.kind.as_str() {
                ty::TEAM_MEMBER => record.data["member"]["id"]
                    .as_str()
                    .and_then(|id| SessionId::new(id).ok())
                    .map(Linked::Member),
                ty::TEAM_TASK => Some(Linked::Task),
                ty::TEAM_MESSAGE_QUEUED => record.data["message"]["id"]
                    .as_str()
                    .and_then(|id| MessageId::new(id).ok())
                    .map(Linked::Message),
                _ => None,
            };
            if let Some(linked) = linked {
                out.links.insert(
                    (link.session_id, link.call_id),
                    Link {
                        result: link.result,
                        linked,
                    },
                );
            }
        }
        out
    }
}

/// Resolves the started calls a crash cut in one session (see the module docs).
pub(crate) struct Resolver<'a> {
    /// The session whose calls are resolved.
    pub(crate) session: &'a SessionId,
    /// Its workspace (absolute), for `write`/`edit`.
    pub(crate) workspace: Option<PathBuf>,
    /// Its Team's links, when it is a Team member whose Lead log was read (without them a
    /// Team tool's call is unknown, never guessed "not run").
    pub(crate) links: Option<&'a TeamLinks>,
    /// The Team's roster after reconciliation (the Lead's `spawn_teammate` results).
    pub(crate) team: Option<&'a TeamState>,
}

impl Resolver<'_> {
    /// How `call` (started: it has a `tool/call`) is resolved.
    pub(crate) fn resolve(&self, call: &UnansweredCall) -> CallResolution {
        let name = call.call.name.as_str();
        if READ_ONLY_TOOLS.contains(&name) {
            return CallResolution::NotRun {
                why: if name == "wait_agent" {
                    "it only waits for a Team change".to_owned()
                } else {
                    "it only reads".to_owned()
                },
            };
        }
        match (name, TeamToolName::from_name(name)) {
            (_, Some(TeamToolName::InterruptAgent)) => CallResolution::NotRun {
                why: "after the restart no teammate's turn is running, so interrupting again is \
                      safe"
                    .to_owned(),
            },
            ("write" | "edit", _) => self.file_call(call),
            (_, Some(tool)) if tool.writes() => self.team_call(call),
            _ => CallResolution::Unknown { detail: None },
        }
    }

    fn file_call(&self, call: &UnansweredCall) -> CallResolution {
        let (Some(effect), Some(workspace)) = (&call.effect, &self.workspace) else {
            return CallResolution::Unknown { detail: None };
        };
        let path = &effect.path;
        match file_effect_state(workspace, effect) {
            Ok(FileEffectState::Done) => CallResolution::Done {
                content: effect.result.to_string(),
                is_error: false,
                code: None,
            },
            Ok(FileEffectState::NotRun) => CallResolution::NotRun {
                why: format!("{path} is exactly as it was before the call"),
            },
            Ok(FileEffectState::Changed) => CallResolution::Unknown {
                detail: Some(format!(
                    "{path} was changed by someone else since the call started: it holds neither \
                     its content from before the call nor the content the call writes."
                )),
            },
            Err(e) => CallResolution::Unknown {
                detail: Some(format!("{path} could not be checked: {e}.")),
            },
        }
    }

    fn team_call(&self, call: &UnansweredCall) -> CallResolution {
        let Some(links) = self.links else {
            return CallResolution::Unknown { detail: None };
        };
        links
            .rebuilt(self.session, &call.call.id, self.team)
            .unwrap_or_else(|| CallResolution::NotRun {
                why: "the Lead log holds no Team record of it, so it changed nothing".to_owned(),
            })
    }
}

impl TeamLinks {
    /// The call `call_id` of member `session` as its link tells it (`None`: no link, so it
    /// never took effect): done with its result rebuilt, or unknown when the result cannot be
    /// rebuilt. `team` is the roster after reconciliation (a spawn's result needs it).
    pub(crate) fn rebuilt(
        &self,
        session: &SessionId,
        call_id: &str,
        team: Option<&TeamState>,
    ) -> Option<CallResolution> {
        let links = self;
        let link = links.links.get(&(session.clone(), call_id.to_owned()))?;
        Some(Self::resolution(links, link, team))
    }

    fn resolution(links: &TeamLinks, link: &Link, team: Option<&TeamState>) -> CallResolution {
        let done = |content: String| CallResolution::Done {
            content,
            is_error: false,
            code: None,
        };
        match &link.linked {
            Linked::Task => match &link.result {
                Some(result) => done(result.clone()),
                None => CallResolution::Unknown { detail: None },
            },
            Linked::Message(id) => {
                let status = if links.delivered.contains(id) {
                    "accepted"
                } else {
                    "queued"
                };
                done(send_result_text(id, status))
            }
            Linked::Member(id) => {
                let Some(member) = team.and_then(|t| t.member(id)) else {
                    return CallResolution::Unknown { detail: None };
                };
                match member.phase {
                    MemberPhase::Active => {
                        done(spawn_result_text(&MemberView::spawned(member, None)))
                    }
                    MemberPhase::Failed => {
                        let code = "TEAM_PROVISIONING_CONFLICT";
                        let message = format!(
                            "Error: teammate {} could not be created: {}",
                            member.name,
                            member.error.as_deref().unwrap_or("unknown error")
                        );
                        CallResolution::Done {
                            content: json!({"code": code, "message": message}).to_string(),
                            is_error: true,
                            code: Some(code.to_owned()),
                        }
                    }
                    MemberPhase::Provisioning => CallResolution::Unknown { detail: None },
                }
            }
        }
    }
}

/// The prompts of the Lead's `spawn_teammate` calls in the Lead log `events`, for recreating
/// a teammate a crash left without its prompt (defect 6 of issue 10): for each member name,
/// the arguments (`prompt`, `context`) of the last `spawn_teammate` call with that name
/// before the member's `provisioning` record, and the fork seed the call would have captured
/// (the Lead's events up to its last `turn/end` before that record). Names are never reused
/// and the Lead runs one call at a time, so that call is the one that reserved the name.
pub(crate) fn spawn_requests(events: &[Event]) -> HashMap<String, SpawnRequest> {
    let mut last_call: HashMap<String, Value> = HashMap::new();
    let mut last_turn_end = 0usize;
    let mut out = HashMap::new();
    for (at, event) in events.iter().enumerate() {
        match event.kind.as_str() {
            ty::TURN_END => last_turn_end = at + 1,
            ty::TOOL_CALL if event.data["name"] == "spawn_teammate" => {
                if let Some(name) = event.data["arguments"]["name"].as_str() {
                    last_call.insert(name.to_owned(), event.data["arguments"].clone());
                }
            }
            ty::TEAM_MEMBER if event.data["member"]["phase"] == "provisioning" => {
                let Some(name) = event.data["member"]["name"].as_str() else {
                    continue;
                };
                let Some(arguments) = last_call.get(name) else {
                    continue;
                };
                let Some(prompt) = arguments["prompt"].as_str() else {
                    continue;
                };
                out.insert(
                    name.to_owned(),
                    SpawnRequest {
                        prompt: prompt.to_owned(),
                        seed_end: last_turn_end,
                    },
                );
            }
            _ => {}
        }
    }
    out
}

/// What a crash-cut `spawn_teammate` asked for (see [`spawn_requests`]).
#[derive(Debug, Clone)]
pub(crate) struct SpawnRequest {
    /// The teammate's initial prompt.
    pub(crate) prompt: String,
    /// A fork's seed: the Lead's events `[..seed_end]`.
    pub(crate) seed_end: usize,
}

/// What the Team recovery owes an active teammate (REFERENCE c.9 extended; "nothing accepted
/// is lost"), decided from its log alone (DESIGN decision 10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TeammateRecovery {
    /// Its parked items must run (wake it): wakeup mail, a first prompt that never ran (issue
    /// 10 defect 5: its spawn succeeded, so its work is owed), or a continuation an earlier
    /// recovery queued and that never ran. Parked quiet mail alone does not wake it
    /// (REFERENCE c.9, CASES 32).
    pub(crate) wake: bool,
    /// How many continuation notes ([`continuation_note`]) to queue: one per turn a stop cut
    /// that no continuation answered yet ([`Transcript::owed_continuations`] under
    /// [`ContinuationRule::Teammate`]). A turn the Lead interrupted on purpose is not owed one.
    pub(crate) notes: usize,
}

/// Decides [`TeammateRecovery`] for the non-resident teammate whose stored log folds into `t`
/// (an open turn there was cut by the stop: [`OpenTurn::Cut`]); `wakeups` holds the ids of
/// the Team's wakeup messages (from the Lead log).
pub(crate) fn teammate_recovery(t: &Transcript, wakeups: &HashSet<MessageId>) -> TeammateRecovery {
    let first_prompt =
        t.stats().turns == 0 && t.next_turn().iter().any(|m| m.source.kind == "user");
    let continuation_waiting = t
        .next_turn()
        .iter()
        .any(|m| m.source.kind == CONTINUATION_SOURCE);
    let wakeup_waiting = t
        .next_turn()
        .iter()
        .chain(t.next_step())
        .any(|m| wakeups.contains(&m.id));
    TeammateRecovery {
        wake: first_prompt || continuation_waiting || wakeup_waiting,
        notes: t.owed_continuations(ContinuationRule::Teammate, OpenTurn::Cut),
    }
}

/// The note that continues a teammate's cut turn (see [`TeammateRecovery::notes`]).
pub(crate) fn continuation_note() -> UserMessage {
    UserMessage::text(
        "Your previous turn did not finish (the process running it stopped). Any tool call that was \
         running then has a result saying whether it ran. Check the current state first \
         (re-read the files you were changing, re-list the tasks), then continue your task from \
         where it stopped.",
        MessageSource::kind(CONTINUATION_SOURCE),
    )
}
