//! `troupe worker --adopt`: a worker that also takes over Leads whose process died (DESIGN §7
//! "Failover", issue 14 item 6).
//!
//! **What is adopted.** A root session on the store that is a Team Lead, whose lease is free
//! (its holder died: the lease expired one TTL after its last renewal), whose log shows work
//! a crash left ([`left_to_do`]), whose workspace is on this host with this worker's identity
//! ([`WorkspaceIdentity::mismatch`]), and none of whose members is held by a process other
//! than a live worker ([`crate::store::team_held`], the check `troupe resume` makes). Work a
//! crash left is either
//! - the Lead's last turn cut by a stop ([`ResumePlan::stopped_mid_turn`]: not finished, not
//!   interrupted by the user, not failed), or
//! - a Lead that finished its own last turn and died while it waited for its Team, which
//!   still has work the Team recovery of a `troupe resume` carries on
//!   ([`crash_left_work`]: a teammate with an open turn — cut, or still running on a live
//!   worker and needing the Team's service — or one a crash recovery closed and did not
//!   continue, a teammate the recovery wakes, a member still being created, a member's
//!   wakeup message not delivered, Team mail waiting to start a Lead turn).
//!
//! Not adopted: a Team that finished (nothing of the above), and one stopped on purpose — a
//! Lead turn interrupted, stopped by the budget or failed, or a park (its turns end
//! `aborted`, which a crash never writes; their continuations wait for the user's `troupe
//! resume`, as does mail `troupe send` appended to a stopped Team). The decision is read from
//! the store each time, never remembered across processes: nothing here is durable. A Lead
//! whose adoption here ended with exit 0 and that is found adoptable again without anyone
//! having run it since counts as a failed adoption (see below), so a worker does not loop on
//! work the resume cannot do.
//!
//! **How.** One Lead per free slot — and, beyond the slots, the Lead of any teammate this
//! worker hosts (that teammate waits for its Team's service, which only a Lead's process
//! gives; with its slots full of such teammates the worker would otherwise never adopt it,
//! and they would wait in vain) — : the worker runs `troupe resume SID --placement workers
//! --adopted-by PID` as its child (same binary, the worker's home and store). The child takes
//! the Lead's lease as any resume does — of adopters racing for one Lead only one gets it; the
//! others' resumes end with `JOURNAL_LOCKED` (exit 2) having written nothing — and then runs
//! today's recovery passes; teammates live workers host keep running there. The child dies
//! with the worker (`PR_SET_PDEATHSIG` on Linux, set by the child itself right after it
//! starts, which then checks that its parent is still the worker), so a worker killed
//! mid-adoption leaves the Lead as a crash would: its lease expires and another adopter, or a
//! `troupe resume`, takes it over.
//!
//! **Cost.** Each look (every half second while a slot is free) lists the sessions and reads
//! each root's lease; a root's log is read once per period its lease stays free (the verdict
//! is kept until the lease is seen held again), so a store full of finished Leads costs one
//! KV read per root per look.
//!
//! **What survives a crash**: the adopter writes nothing itself. Its child is a `troupe
//! resume`, whose crash points are a resume's (every write is the recovery's, decided from
//! the logs, DESIGN decision 10). A worker stopped with Ctrl-C / SIGTERM sends SIGTERM to its
//! adopted Leads (each parks its Team as `troupe resume` does on SIGTERM, waited up to 30 s)
//! before it parks its own members.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use troupe_journal::Journal;
use troupe_protocol::SessionId;
use troupe_runtime::team::crash_left_work;
use troupe_runtime::{ResumePlan, StoredSession};
use troupe_store_nats::{NatsBackend, WorkspaceIdentity};

use crate::exit::Failure;
use crate::output::eprint_line;

/// How many adoptions of one Lead may fail (a non-zero exit, or an exit 0 that left the work
/// owed) before this worker stops trying it (until another process runs it).
const MAX_FAILURES: u32 = 3;

/// How long a stop waits for the adopted Leads to park before it kills them.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// In the child (`troupe resume --adopted-by PID`): ties this process's life to the adopting
/// worker's (`PR_SET_PDEATHSIG` = SIGKILL on Linux), then checks that the worker is still its
/// parent (it may have died before the signal was set).
///
/// # Errors
/// The worker is gone already, or the signal cannot be set (a failure of the work, exit 1;
/// nothing was written).
pub(crate) fn die_with(worker: u32) -> Result<(), Failure> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
            .map_err(|e| {
                Failure::work(anyhow!(
                    "adopted by worker pid {worker}: cannot tie this process to it: {e}"
                ))
            })?;
    }
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if parent != i32::try_from(worker).ok() {
        return Err(Failure::work(anyhow!(
            "adopted by worker pid {worker}, which is gone (the parent is {}): nothing was \
             written",
            parent.map_or_else(|| "none".to_owned(), |p| format!("pid {p}"))
        )));
    }
    Ok(())
}

/// Why session `id` needs no adopting (a crash left it nothing to do — another process took it
/// over and finished it, or it ended otherwise: see [`left_to_do`]), `None` when it still does
/// — or when it is no root at all, or its Team log does not read (the resume refuses or
/// reports those itself).
///
/// # Errors
/// The session cannot be read (as `troupe resume` reports it).
pub(crate) fn no_longer_adoptable(
    journal: &Journal,
    id: &SessionId,
) -> Result<Option<String>, Failure> {
    match ResumePlan::read(journal, id)? {
        StoredSession::Root(plan) => match left_to_do(journal, &plan) {
            Ok(Some(_)) => Ok(None),
            Ok(None) => Ok(Some(plan.unfinished().map_or_else(
                || "its last turn finished and its Team has nothing left".to_owned(),
                |why| why.to_owned(),
            ))),
            // The resume reads the Team log again and reports it.
            Err(_) => Ok(None),
        },
        StoredSession::Child { .. } => Ok(None),
    }
}

/// How an adopter runs its children.
#[derive(Debug, Clone)]
pub(crate) struct AdoptCommand {
    /// The `troupe` binary (this one).
    pub(crate) exe: PathBuf,
    /// The worker's home (`--home`).
    pub(crate) home: PathBuf,
    /// The store URL (`--store`).
    pub(crate) url: String,
    /// The worker's `--pace`, passed on.
    pub(crate) pace: Option<u64>,
}

/// One adopted Lead: its session and the `troupe resume` running it.
struct Adoption {
    lead: SessionId,
    child: Child,
}

/// The adopting side of a worker (see the module docs): finds adoptable Leads and runs and
/// reaps their resumes.
pub(crate) struct Adopter {
    journal: Journal,
    nats: NatsBackend,
    workspace: WorkspaceIdentity,
    worker: String,
    command: AdoptCommand,
    running: Vec<Adoption>,
    /// Sessions not adoptable while their lease stays free, with the reason shown (`None`:
    /// nothing to say, e.g. a Lead that finished). Dropped when the lease is seen held.
    known: HashMap<SessionId, Option<String>>,
    /// Leads whose adoption ended with a failure: not tried again before the instant.
    cooling: HashMap<SessionId, Instant>,
    failures: HashMap<SessionId, u32>,
    /// Leads whose adoption here ended with exit 0 and whose lease was not seen held since:
    /// found adoptable again, they count as a failed adoption (no loop on a Lead the resume
    /// cannot finish).
    ended_clean: HashSet<SessionId>,
    /// The last scan error shown (each new one is shown once).
    last_error: Option<String>,
}

/// What one scan of the store found.
struct Scan {
    /// The adoptable Leads, each with why it needs adopting.
    candidates: Vec<(SessionId, String)>,
    /// The roots whose lease was seen held.
    held: HashSet<SessionId>,
    known: HashMap<SessionId, Option<String>>,
    notes: Vec<String>,
    error: Option<String>,
}

impl Adopter {
    /// The adopter of worker `worker`, whose workspace is `workspace`.
    pub(crate) fn new(
        journal: Journal,
        nats: NatsBackend,
        workspace: WorkspaceIdentity,
        worker: String,
        command: AdoptCommand,
    ) -> Self {
        Self {
            journal,
            nats,
            workspace,
            worker,
            command,
            running: Vec::new(),
            known: HashMap::new(),
            cooling: HashMap::new(),
            failures: HashMap::new(),
            ended_clean: HashSet::new(),
            last_error: None,
        }
    }

    /// How many Leads this worker runs now (each takes a slot).
    pub(crate) fn adopted(&self) -> usize {
        self.running.len()
    }

    /// Reaps the adoptions that ended, then adopts up to `free` Leads, and beyond them any
    /// adoptable Lead in `hosting` (the Leads of the teammates this worker hosts: each of
    /// those teammates waits for its Team's service, which only its Lead's process gives,
    /// so a worker whose slots its own teammates fill would otherwise never adopt the Lead
    /// they wait for). Returns whether the number of adopted Leads changed.
    pub(crate) async fn tick(&mut self, free: usize, hosting: &HashSet<SessionId>) -> bool {
        let before = self.running.len();
        self.reap();
        if free > 0 || !hosting.is_empty() {
            let now = Instant::now();
            self.cooling.retain(|_, until| now < *until);
            let skip: HashSet<SessionId> = self
                .running
                .iter()
                .map(|a| a.lead.clone())
                .chain(self.cooling.keys().cloned())
                .collect();
            let (journal, nats, mine) = (
                self.journal.clone(),
                self.nats.clone(),
                self.workspace.clone(),
            );
            let known = std::mem::take(&mut self.known);
            let scanned =
                tokio::task::spawn_blocking(move || scan(&journal, &nats, &mine, known, &skip))
                    .await;
            match scanned {
                Ok(scan) => {
                    self.known = scan.known;
                    for note in scan.notes {
                        eprint_line!("troupe worker {}: {note}", self.worker);
                    }
                    if scan.error != self.last_error {
                        if let Some(error) = &scan.error {
                            eprint_line!(
                                "troupe worker {}: warning: looking for Leads to adopt: {error}",
                                self.worker
                            );
                        }
                        self.last_error = scan.error;
                    }
                    for id in &scan.held {
                        self.ended_clean.remove(id);
                    }
                    let (theirs, others): (Vec<_>, Vec<_>) = scan
                        .candidates
                        .into_iter()
                        .partition(|(lead, _)| hosting.contains(lead));
                    for (lead, why) in theirs.into_iter().chain(others.into_iter().take(free)) {
                        if self.ended_clean.remove(&lead) {
                            // Its adoption here ended well, yet nobody ran it since and the
                            // log still shows work: the resume cannot do it. Counted as a
                            // failed adoption, so this worker does not loop on it.
                            eprint_line!(
                                "troupe worker {}: warning: the adopted Lead {lead} ended, yet \
                                 its log still shows work ({why})",
                                self.worker
                            );
                            self.failed(lead);
                            continue;
                        }
                        self.adopt(lead, &why);
                    }
                }
                Err(e) => {
                    eprint_line!(
                        "troupe worker {}: warning: looking for Leads to adopt: {e}",
                        self.worker
                    );
                }
            }
        }
        self.running.len() != before
    }

    /// Starts the resume of `lead`, which needs adopting because `why` (see [`left_to_do`]).
    fn adopt(&mut self, lead: SessionId, why: &str) {
        let mut command = Command::new(&self.command.exe);
        command
            .arg("--home")
            .arg(&self.command.home)
            .arg("--store")
            .arg(&self.command.url)
            .arg("resume")
            .arg(lead.as_str())
            .args(["--placement", "workers", "--adopted-by"])
            .arg(std::process::id().to_string())
            .stdin(Stdio::null())
            // Its lines are the worker's, each named by the Lead (not a live area drawn over
            // the worker's own lines on its terminal).
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(pace) = self.command.pace {
            command.arg("--pace").arg(pace.to_string());
        }
        match command.spawn() {
            Ok(mut child) => {
                eprint_line!(
                    "troupe worker {}: adopting Lead {lead}: its lease expired {why} (troupe \
                     resume, pid {})",
                    self.worker,
                    child.id()
                );
                let prefix = format!("troupe worker {}: Lead {}: ", self.worker, short(&lead));
                if let Some(out) = child.stdout.take() {
                    relay_lines(out, prefix.clone());
                }
                if let Some(err) = child.stderr.take() {
                    relay_lines(err, prefix);
                }
                self.running.push(Adoption { lead, child });
            }
            Err(e) => {
                eprint_line!(
                    "troupe worker {}: warning: cannot start the resume of Lead {lead}: {e}",
                    self.worker
                );
                self.failed(lead);
            }
        }
    }

    /// A failed adoption of `lead`: cooled down for two lease TTLs, given up after
    /// [`MAX_FAILURES`].
    fn failed(&mut self, lead: SessionId) {
        let failures = self.failures.entry(lead.clone()).or_default();
        *failures += 1;
        if *failures >= MAX_FAILURES {
            self.known.insert(
                lead.clone(),
                Some(format!(
                    "its adoption failed {MAX_FAILURES} times: not adopted again by this worker \
                     until another process runs it (troupe resume {lead})"
                )),
            );
            eprint_line!(
                "troupe worker {}: not adopting Lead {lead} again: its adoption failed \
                 {MAX_FAILURES} times (troupe resume {lead} shows why)",
                self.worker
            );
        } else {
            self.cooling
                .insert(lead, Instant::now() + self.nats.lease_ttl() * 2);
        }
    }

    /// Reaps the adoptions whose resume ended.
    fn reap(&mut self) {
        let mut ended = Vec::new();
        self.running.retain_mut(|a| match a.child.try_wait() {
            Ok(Some(status)) => {
                ended.push((a.lead.clone(), Ok(status)));
                false
            }
            Ok(None) => true,
            Err(e) => {
                // It cannot be waited for (it is not our child any more): its lease tells
                // the next scan whether it still runs.
                let _ = a.child.kill();
                ended.push((a.lead.clone(), Err(e)));
                false
            }
        });
        for (lead, status) in ended {
            match status {
                Ok(status) if status.success() => {
                    self.failures.remove(&lead);
                    self.ended_clean.insert(lead.clone());
                    eprint_line!(
                        "troupe worker {}: the adopted Lead {lead} ended (exit 0)",
                        self.worker
                    );
                }
                Ok(status) => {
                    eprint_line!(
                        "troupe worker {}: the adoption of Lead {lead} ended with {status}",
                        self.worker
                    );
                    self.failed(lead);
                }
                Err(e) => {
                    eprint_line!(
                        "troupe worker {}: the adoption of Lead {lead} cannot be waited for: {e}",
                        self.worker
                    );
                    self.failed(lead);
                }
            }
        }
    }

    /// Stops every adopted Lead: SIGTERM (each parks its Team), waited up to [`STOP_WAIT`],
    /// then SIGKILL for any left.
    pub(crate) async fn stop(mut self) {
        for a in &self.running {
            eprint_line!(
                "troupe worker {}: stopping the adopted Lead {}: it parks its Team (troupe \
                 resume {} goes on)",
                self.worker,
                a.lead,
                a.lead
            );
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&a.child),
                rustix::process::Signal::TERM,
            );
        }
        let end = Instant::now() + STOP_WAIT;
        while !self.running.is_empty() && Instant::now() < end {
            self.running
                .retain_mut(|a| matches!(a.child.try_wait(), Ok(None)));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for a in &mut self.running {
            let _ = a.child.kill();
            let _ = a.child.wait();
        }
    }
}

/// The first 8 characters of a session id (a unique prefix in practice: commands take it).
fn short(id: &SessionId) -> &str {
    let id = id.as_str();
    id.char_indices().nth(8).map_or(id, |(end, _)| &id[..end])
}

/// Prints each line read from `pipe` on the worker's stderr after `prefix`, on a thread of
/// its own until the pipe ends (the adopted resume exited).
fn relay_lines(pipe: impl std::io::Read + Send + 'static, prefix: String) {
    let relay = move || {
        let mut lines = std::io::BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match std::io::BufRead::read_until(&mut lines, b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end_matches(['\n', '\r']);
                    // A blank line of the child is no line of the worker's.
                    if !text.trim().is_empty() {
                        eprint_line!("{prefix}{text}");
                    }
                }
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("adopted-output".to_owned())
        .spawn(relay)
    {
        eprint_line!("troupe: warning: the adopted Lead's output cannot be shown: {e}");
    }
}

/// One look at the store (blocking: the journal's calls): the adoptable Leads (see the module
/// docs), skipping `skip` and the sessions in `known` whose lease is still free.
fn scan(
    journal: &Journal,
    nats: &NatsBackend,
    mine: &WorkspaceIdentity,
    mut known: HashMap<SessionId, Option<String>>,
    skip: &HashSet<SessionId>,
) -> Scan {
    let mut scan = Scan {
        candidates: Vec::new(),
        held: HashSet::new(),
        known: HashMap::new(),
        notes: Vec::new(),
        error: None,
    };
    let listed = match journal.list(&mut |_| {}) {
        Ok(listed) => listed,
        Err(e) => {
            scan.error = Some(e.to_string());
            scan.known = known;
            return scan;
        }
    };
    for listing in &listed {
        let header = &listing.header;
        let id = &header.id;
        if header.parent_session.is_some()
            || header.origin.as_deref() == Some(troupe_session::SUBAGENT_ORIGIN)
            || skip.contains(id)
        {
            continue;
        }
        match journal.holder(id) {
            Ok(None) => {}
            Ok(Some(_)) => {
                // Someone runs it: what it needs is decided again once it is free.
                known.remove(id);
                scan.held.insert(id.clone());
                continue;
            }
            Err(e) => {
                scan.error = Some(e.to_string());
                continue;
            }
        }
        if known.contains_key(id) {
            continue;
        }
        let why = match verdict(journal, mine, id) {
            Ok(why) => why,
            Err(why) => {
                if let Some(why) = &why {
                    scan.notes.push(format!("not adopting Lead {id}: {why}"));
                }
                known.insert(id.clone(), why);
                continue;
            }
        };
        match crate::store::team_held(journal, nats, &listed, id) {
            // A member of it still held by a dead Lead's process: its lease expires soon.
            Ok(Some(_)) => {}
            Ok(None) => scan.candidates.push((id.clone(), why)),
            Err(e) => scan.error = Some(e.to_string()),
        }
    }
    // Verdicts of sessions gone from the store are dropped with them.
    let listed: HashSet<&SessionId> = listed.iter().map(|l| &l.header.id).collect();
    known.retain(|id, _| listed.contains(id));
    scan.known = known;
    scan
}

/// Whether the free root session `id` is a Lead to adopt: `Ok(why)` when it is (why it needs
/// adopting, as the adoption note says it), `Err(reason)` when not (`None`: nothing worth
/// saying — not a Team, a Lead that finished with nothing left, or one stopped on purpose).
fn verdict(
    journal: &Journal,
    mine: &WorkspaceIdentity,
    id: &SessionId,
) -> Result<String, Option<String>> {
    let plan = match ResumePlan::read(journal, id) {
        Ok(StoredSession::Root(plan)) => plan,
        Ok(StoredSession::Child { .. }) => return Err(None),
        Err(e) => return Err(Some(format!("it cannot be read: {e}"))),
    };
    if !plan.is_team() {
        return Err(None);
    }
    let why = left_to_do(journal, &plan)
        .map_err(|e| Some(format!("its Team's log cannot be read: {e}")))?
        .ok_or(None)?;
    let workspace = Path::new(&plan.config().workspace);
    let theirs = WorkspaceIdentity::of(workspace).map_err(|e| {
        Some(format!(
            "its workspace {} is not on this host ({e})",
            workspace.display()
        ))
    })?;
    match mine.mismatch(&theirs) {
        None => Ok(why),
        Some(why) => Err(Some(format!(
            "this worker's workspace does not match: {why}"
        ))),
    }
}

/// What a crash left the stopped Team of `plan` to do (see the module docs), `None` when
/// nothing: its Lead's last turn cut by the stop ([`ResumePlan::stopped_mid_turn`]), or —
/// when that turn finished — the work [`crash_left_work`] finds. A Lead whose last turn was
/// interrupted, stopped by the budget or failed was stopped on purpose (or needs its user):
/// `None`.
///
/// # Errors
/// The Team log's read errors.
fn left_to_do(
    journal: &Journal,
    plan: &ResumePlan,
) -> Result<Option<String>, troupe_runtime::team::TeamOpError> {
    if plan.stopped_mid_turn() {
        return Ok(Some("mid-turn".to_owned()));
    }
    if plan.unfinished().is_some() {
        return Ok(None);
    }
    Ok(crash_left_work(journal, plan.id())?
        .map(|why| format!("after its last turn, with its Team's work unfinished: {why}")))
}
