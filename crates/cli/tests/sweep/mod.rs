//! The crash sweep of `troupe demo` (issue 10, "Must show"): the real binary is SIGKILLed right
//! after each durable append of every member's log in turn, resumed with `troupe resume`
//! (itself SIGKILLed once after one of its own appends, then resumed again), and the Team it
//! leaves is checked.
//!
//! How a kill point is found: by watching the session files grow ([`watch`], inotify). A
//! reference run of the demo lists every append the watcher sees (per member: the seq of the
//! append's last event); a kill run SIGKILLs the demo as soon as the target member's log shows
//! an append ending at or after the target seq. The kill then lands where the file says: after
//! the process died, the target log's last whole batch is read back, and a kill that landed
//! later than aimed (the process appended again before the signal) is tried again, up to
//! [`ATTEMPTS`] times; a point that never lands exactly is reported with where it did land.
//!
//! The checks, after the last resume: the resume exits 0; `troupe team verify` passes; all
//! three tasks are completed; `python3 -m unittest` passes in the workspace; no member is left
//! `provisioning`; and every message queued in the Lead log is a `user/message` in its
//! target's log exactly once (and in no other log).

pub mod watch;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use watch::{Append, Watcher, last_batch_end};

/// How many runs aim at one kill point before it is reported as not hit exactly.
pub const ATTEMPTS: u32 = 3;
/// How long one `troupe` process may take before the sweep gives up on it (a hang is a failure).
const PROCESS_LIMIT: Duration = Duration::from_secs(180);
/// The second kill lands after the resume's `1 + index % RESUME_KILL_SPREAD`-th append.
const RESUME_KILL_SPREAD: usize = 5;

/// A fresh home, sessions directory and workspace in a temporary directory.
pub struct Paths {
    _root: tempfile::TempDir,
    /// The Troupe home.
    pub home: PathBuf,
    /// `home/sessions` (created beforehand so it can be watched from the start).
    pub sessions: PathBuf,
    /// The demo's workspace (created by the demo).
    pub workspace: PathBuf,
}

impl Paths {
    /// A new temporary root with an empty home.
    pub fn new() -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let home = root.path().join("home");
        let sessions = home.join("sessions");
        std::fs::create_dir_all(&sessions).expect("create the sessions directory");
        let workspace = root.path().join("ws");
        Self {
            _root: root,
            home,
            sessions,
            workspace,
        }
    }

    /// `troupe --home HOME ARGS…` (stdin closed, no `TROUPE_HOME` from outside).
    pub fn troupe(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
        cmd.arg("--home")
            .arg(&self.home)
            .env_remove("TROUPE_HOME")
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// `troupe demo --workspace WS`.
    pub fn demo(&self) -> Command {
        let mut cmd = self.troupe(&["demo", "--workspace"]);
        cmd.arg(&self.workspace);
        cmd
    }

    /// Keeps the temporary root on disk (for a look after the sweep) and returns its path.
    pub fn keep(&mut self) -> PathBuf {
        let root = std::mem::replace(&mut self._root, tempfile::tempdir().expect("tempdir"));
        root.keep()
    }

    /// The session file of `id`.
    pub fn session_file(&self, id: &str) -> PathBuf {
        self.sessions.join(format!("{id}.jsonl"))
    }
}

/// What one watched `troupe` process did.
#[derive(Debug)]
pub struct Watched {
    /// Its exit status (a SIGKILLed process has no code).
    pub status: ExitStatus,
    /// The append the kill was decided on, when it was killed.
    pub killed_after: Option<Append>,
    /// Every append seen while it ran, in the order seen.
    pub appends: Vec<Append>,
    /// Its stderr.
    pub stderr: String,
    /// Whether it outlived [`PROCESS_LIMIT`] (and was killed for that).
    pub timed_out: bool,
}

/// Runs `cmd` while watching `sessions`; SIGKILLs it right after the first append for which
/// `kill_after(append, number_of_appends_seen_before_it)` is true.
pub fn run_watched(
    mut cmd: Command,
    sessions: &Path,
    mut kill_after: impl FnMut(&Append, usize) -> bool,
) -> Watched {
    let stderr_file = tempfile::NamedTempFile::new().expect("stderr file");
    let mut watcher = Watcher::new(sessions);
    let mut guard = watch::KillOnDrop(
        cmd.stdout(Stdio::null())
            .stderr(stderr_file.reopen().expect("reopen the stderr file"))
            .spawn()
            .expect("spawn troupe"),
    );
    let child = &mut guard.0;
    let deadline = Instant::now() + PROCESS_LIMIT;
    let mut appends = Vec::new();
    let mut killed_after = None;
    let mut timed_out = false;
    let status = loop {
        let exited = child.try_wait().expect("try_wait");
        // After the exit one last look catches the final appends.
        let timeout = if exited.is_some() {
            Duration::ZERO
        } else {
            Duration::from_millis(50)
        };
        for append in watcher.poll(timeout) {
            if killed_after.is_none() && kill_after(&append, appends.len()) {
                let _ = child.kill();
                killed_after = Some(append.clone());
            }
            appends.push(append);
        }
        if let Some(status) = exited {
            break status;
        }
        if Instant::now() > deadline && !timed_out {
            timed_out = true;
            let _ = child.kill();
        }
    };
    let stderr = std::fs::read_to_string(stderr_file.path()).unwrap_or_default();
    Watched {
        status,
        killed_after,
        appends,
        stderr,
        timed_out,
    }
}

/// A kill point: right after the durable append of `member`'s log that ends at `seq`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Point {
    /// `lead` or a teammate's name.
    pub member: String,
    /// The seq of the append's last event.
    pub seq: u64,
    /// That event's type in the reference run.
    pub kind: String,
}

impl Point {
    /// `member@seq`, the form `TROUPE_SWEEP=only:…` takes.
    pub fn spec(&self) -> String {
        format!("{}@{}", self.member, self.seq)
    }
}

/// Runs the demo `runs` times without killing it and lists every append seen, Lead first, then
/// each teammate in the order its log appeared, each by seq (the union over the runs).
///
/// # Panics
/// When a reference demo does not exit 0: the sweep needs a demo that works unkilled.
pub fn reference_points(runs: usize) -> Vec<Point> {
    let mut order: Vec<String> = Vec::new();
    let mut seen: BTreeMap<String, BTreeMap<u64, String>> = BTreeMap::new();
    for _ in 0..runs {
        let paths = Paths::new();
        let watched = run_watched(paths.demo(), &paths.sessions, |_, _| false);
        assert_eq!(
            watched.status.code(),
            Some(0),
            "the reference demo failed: {}",
            watched.stderr
        );
        for append in watched.appends {
            if !order.contains(&append.member) {
                order.push(append.member.clone());
            }
            seen.entry(append.member)
                .or_default()
                .entry(append.last_seq)
                .or_insert(append.last_type);
        }
    }
    let mut points = Vec::new();
    for member in order {
        for (seq, kind) in &seen[&member] {
            points.push(Point {
                member: member.clone(),
                seq: *seq,
                kind: kind.clone(),
            });
        }
    }
    points
}

/// One failed check of a kill point.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Which check: `resume` (a resume exited 1), `crash` (a resume panicked, died of a signal
    /// or exited otherwise), `hang`, `verify`, `show`, `tasks`, `tests`, `provisioning`,
    /// `delivery` (a queued message never reached its target's log), `duplicate` (a message in
    /// a log more than once, or in one it was not queued for), `log` (a member's log cannot be
    /// read), `kill` (the kill point was never reached).
    pub check: &'static str,
    /// What it found.
    pub detail: String,
}

/// Where the second kill (during `troupe resume`) landed.
#[derive(Debug, Clone)]
pub enum SecondKill {
    /// Right after this append of the resume.
    After(Append),
    /// The resume finished first, after this many appends.
    NotReached(usize),
}

/// The result of one kill point.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Its position in the sweep's list.
    pub index: usize,
    /// What was aimed at.
    pub point: Point,
    /// Runs made to land on it.
    pub attempts: u32,
    /// Where the kill landed in the target log: (seq, type) of its last whole batch.
    pub landed: Option<(u64, String)>,
    /// The resume's append number the second kill aimed at (1-based).
    pub resume_kill_at: usize,
    /// Where the second kill landed.
    pub second: Option<SecondKill>,
    /// The Lead's session id.
    pub lead: Option<String>,
    /// Every failed check (empty: clean).
    pub failures: Vec<Failure>,
    /// What each resume said last (shown with failures).
    pub notes: Vec<String>,
}

impl Outcome {
    /// Whether the kill landed exactly on the point.
    pub fn exact(&self) -> bool {
        self.landed
            .as_ref()
            .is_some_and(|(seq, _)| *seq == self.point.seq)
    }

    /// Whether every check passed.
    pub fn clean(&self) -> bool {
        self.failures.is_empty()
    }

    /// One line: the point, where the kills landed, and the verdict.
    pub fn line(&self) -> String {
        let mut s = format!("#{:<3} {}'s log", self.index, self.point.member);
        match &self.landed {
            Some((seq, kind)) if *seq == self.point.seq => {
                let _ = write!(s, " seq {seq} ({kind})");
            }
            Some((seq, kind)) => {
                let _ = write!(
                    s,
                    " seq {seq} ({kind}) [aimed at seq {} ({}), landed later]",
                    self.point.seq, self.point.kind
                );
            }
            None => {
                let _ = write!(
                    s,
                    " seq {} ({}) [not reached]",
                    self.point.seq, self.point.kind
                );
            }
        }
        match &self.second {
            Some(SecondKill::After(a)) => {
                let _ = write!(
                    s,
                    "; resume killed after its append {} ({}'s seq {} {})",
                    self.resume_kill_at, a.member, a.last_seq, a.last_type
                );
            }
            Some(SecondKill::NotReached(n)) if self.resume_kill_at == 0 => {
                let _ = write!(s, "; resumed ({n} appends), no second kill");
            }
            Some(SecondKill::NotReached(n)) => {
                let _ = write!(
                    s,
                    "; resume finished after {n} appends (second kill aimed at append {})",
                    self.resume_kill_at
                );
            }
            None => {}
        }
        if self.failures.is_empty() {
            s.push_str(": clean");
        } else {
            s.push_str(": FAILED");
            for f in &self.failures {
                let _ = write!(s, "\n      [{}] {}", f.check, f.detail);
            }
            for note in &self.notes {
                let _ = write!(s, "\n      (note) {note}");
            }
        }
        s
    }
}

/// The last non-empty line of `text` (for one-line failure details).
fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_owned()
}

/// The lines of `text` that look like an error (`troupe: …`, an error code), else its last line.
fn error_lines(text: &str) -> String {
    let picked: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("troupe:") || l.contains("_FAILED") || l.contains("error"))
        .collect();
    if picked.is_empty() {
        last_line(text)
    } else {
        picked.join(" | ")
    }
}

/// The line of a resume's stderr that says what it did: an error or "nothing to resume", else
/// its last line (at most 300 characters).
fn summary_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.starts_with("troupe:") || l.contains("nothing to resume"))
        .map_or_else(|| last_line(text), str::to_owned);
    line.chars().take(300).collect()
}

/// Runs kill point `point` (number `index` of the sweep) and checks the Team it leaves.
pub fn run_point(index: usize, point: &Point, resume_kill_at: usize) -> Outcome {
    let mut outcome = Outcome {
        index,
        point: point.clone(),
        attempts: 0,
        landed: None,
        resume_kill_at,
        second: None,
        lead: None,
        failures: Vec::new(),
        notes: Vec::new(),
    };
    let mut chosen: Option<(Paths, String)> = None;
    for attempt in 1..=ATTEMPTS {
        outcome.attempts = attempt;
        let paths = Paths::new();
        let target = point.clone();
        let run = run_watched(paths.demo(), &paths.sessions, |a, _| {
            a.member == target.member && a.last_seq >= target.seq
        });
        let lead = run
            .appends
            .iter()
            .find(|a| a.member == "lead")
            .map(|a| a.session.clone());
        let Some(killed) = run.killed_after.clone() else {
            outcome.landed = None;
            if attempt == ATTEMPTS {
                outcome.failures.push(Failure {
                    check: "kill",
                    detail: format!(
                        "the demo exited ({}) before {}'s seq {} was seen: {}",
                        run.status,
                        point.member,
                        point.seq,
                        last_line(&run.stderr)
                    ),
                });
                return outcome;
            }
            continue;
        };
        outcome.landed = last_batch_end(&paths.session_file(&killed.session));
        outcome.lead = lead.clone();
        if run.status.code().is_some() {
            // The demo finished on its own before the signal arrived: not a crash at all.
            if attempt == ATTEMPTS {
                outcome.failures.push(Failure {
                    check: "kill",
                    detail: format!("the demo exited ({}) before the SIGKILL", run.status),
                });
                return outcome;
            }
            continue;
        }
        if let Some(lead) = lead
            && (outcome.exact() || attempt == ATTEMPTS)
        {
            chosen = Some((paths, lead));
            break;
        }
    }
    let Some((mut paths, lead)) = chosen else {
        outcome.failures.push(Failure {
            check: "kill",
            detail: "no Lead log was seen before the kill".to_owned(),
        });
        return outcome;
    };

    // The first resume, SIGKILLed right after its `resume_kill_at`-th append (0: not killed).
    let first = run_watched(
        paths.troupe(&["resume", &lead]),
        &paths.sessions,
        |_, before| before + 1 == resume_kill_at,
    );
    match &first.killed_after {
        Some(a) if first.status.code().is_none() => {
            outcome.second = Some(SecondKill::After(a.clone()));
        }
        _ => {
            outcome.second = Some(SecondKill::NotReached(first.appends.len()));
            if first.timed_out || first.status.code() != Some(0) {
                outcome.failures.push(Failure {
                    check: resume_check(&first),
                    detail: format!(
                        "the first troupe resume (not killed) exited {}: {}",
                        describe(&first),
                        error_lines(&first.stderr)
                    ),
                });
            }
        }
    }
    outcome.notes.push(format!(
        "first resume ({}): {}",
        describe(&first),
        summary_line(&first.stderr)
    ));
    // The last resume runs to the end.
    let last = run_watched(paths.troupe(&["resume", &lead]), &paths.sessions, |_, _| {
        false
    });
    if last.timed_out || last.status.code() != Some(0) {
        outcome.failures.push(Failure {
            check: resume_check(&last),
            detail: format!(
                "troupe resume exited {}: {}",
                describe(&last),
                error_lines(&last.stderr)
            ),
        });
    }
    outcome.notes.push(format!(
        "last resume ({}): {}",
        describe(&last),
        summary_line(&last.stderr)
    ));
    let (failures, notes) = check_team(&paths, &lead);
    outcome.failures.extend(failures);
    outcome.notes.extend(notes);
    if std::env::var_os("TROUPE_SWEEP_KEEP").is_some() {
        outcome
            .notes
            .push(format!("kept: {}", paths.keep().display()));
    }
    outcome
}

/// The check a resume that did not exit 0 failed: `resume` (it exited 1: the work failed),
/// `hang` (it outlived [`PROCESS_LIMIT`]) or `crash` (a panic, a signal or another code).
fn resume_check(w: &Watched) -> &'static str {
    if w.timed_out {
        "hang"
    } else if w.status.code() == Some(1) {
        "resume"
    } else {
        "crash"
    }
}

fn describe(w: &Watched) -> String {
    if w.timed_out {
        format!("only when killed after {} s", PROCESS_LIMIT.as_secs())
    } else {
        match w.status.code() {
            Some(code) => code.to_string(),
            None => format!("by a signal ({})", w.status),
        }
    }
}

/// `troupe ARGS` to completion: (exit code, stdout, stderr).
fn output(paths: &Paths, args: &[&str]) -> (Option<i32>, String, String) {
    let out = paths
        .troupe(args)
        .output()
        .expect("run troupe to completion");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every event of `id` as `troupe log ID --json` prints them, or why it could not be read.
fn log(paths: &Paths, id: &str) -> Result<Vec<Value>, String> {
    let (code, out, err) = output(paths, &["log", id, "--json"]);
    if code != Some(0) {
        return Err(format!(
            "troupe log {id} exited {code:?}: {}",
            last_line(&err)
        ));
    }
    out.lines()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("troupe log {id}: {e}")))
        .collect()
}

/// The checks of the issue on the Team of `lead` in `paths`: the failures, and notes that help
/// find a failure's cause (the tool results a recovery closed as `TOOL_OUTCOME_UNKNOWN`).
pub fn check_team(paths: &Paths, lead: &str) -> (Vec<Failure>, Vec<String>) {
    let mut failures = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut fail = |check: &'static str, detail: String| failures.push(Failure { check, detail });

    let (code, out, err) = output(paths, &["team", "verify", lead]);
    if code != Some(0) {
        fail(
            "verify",
            format!(
                "troupe team verify exited {code:?}: {}",
                last_line(&(out + &err))
            ),
        );
    }

    let (code, out, err) = output(paths, &["team", "show", lead, "--json"]);
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    names.insert(lead.to_owned(), "lead".to_owned());
    match serde_json::from_str::<Value>(&out) {
        Ok(view) if code == Some(0) => {
            let tasks = view["tasks"].as_array().cloned().unwrap_or_default();
            let open: Vec<String> = tasks
                .iter()
                .filter(|t| t["status"] != "completed")
                .map(|t| {
                    format!(
                        "{} {}{}",
                        t["id"].as_str().unwrap_or("?"),
                        t["status"].as_str().unwrap_or("?"),
                        t["ownerName"]
                            .as_str()
                            .map(|o| format!(" ({o})"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            if tasks.len() != 3 || !open.is_empty() {
                fail(
                    "tasks",
                    format!(
                        "{} tasks on the board (3 expected), not completed: {}",
                        tasks.len(),
                        if open.is_empty() {
                            "none".to_owned()
                        } else {
                            open.join(", ")
                        }
                    ),
                );
            }
            for member in view["members"].as_array().cloned().unwrap_or_default() {
                let name = member["name"].as_str().unwrap_or("?").to_owned();
                if let Some(id) = member["id"].as_str() {
                    names.insert(id.to_owned(), name.clone());
                }
                if member["status"] == "provisioning" {
                    fail("provisioning", format!("{name} is still provisioning"));
                }
            }
        }
        _ => fail(
            "show",
            format!("troupe team show exited {code:?}: {}", last_line(&err)),
        ),
    }

    let (passed, tests) = unittest(&paths.workspace);
    if !passed {
        fail(
            "tests",
            format!("python3 -m unittest: {}", last_line(&tests)),
        );
    }

    // Every queued message is a `user/message` in its target's log exactly once.
    match log(paths, lead) {
        Err(e) => fail("log", e),
        Ok(lead_log) => {
            let queued: Vec<(String, String, String)> = lead_log
                .iter()
                .filter(|e| e["type"] == "team/message/queued")
                .map(|e| {
                    let m = &e["data"]["message"];
                    (
                        m["id"].as_str().unwrap_or("?").to_owned(),
                        m["targetId"].as_str().unwrap_or("?").to_owned(),
                        format!(
                            "{} -> {} ({})",
                            m["senderName"].as_str().unwrap_or("?"),
                            names
                                .get(m["targetId"].as_str().unwrap_or(""))
                                .map_or("?", String::as_str),
                            m["delivery"].as_str().unwrap_or("?")
                        ),
                    )
                })
                .collect();
            let mut delivered: BTreeMap<(String, String), usize> = BTreeMap::new();
            for id in names.keys() {
                match log(paths, id) {
                    Err(e) => fail("log", e),
                    Ok(events) => {
                        for e in &events {
                            if e["type"] == "tool/result"
                                && e["data"]["code"] == "TOOL_OUTCOME_UNKNOWN"
                            {
                                unknown.push(format!(
                                    "{} {}",
                                    names[id],
                                    e["data"]["name"].as_str().unwrap_or("?")
                                ));
                            }
                            if e["type"] == "user/message"
                                && e["data"]["source"]["kind"] == "team-message"
                                && let Some(m) = e["data"]["id"].as_str()
                            {
                                *delivered.entry((m.to_owned(), id.clone())).or_default() += 1;
                            }
                        }
                    }
                }
            }
            for (message, target, what) in &queued {
                let n = delivered
                    .get(&(message.clone(), target.clone()))
                    .copied()
                    .unwrap_or(0);
                if n != 1 {
                    fail(
                        if n == 0 { "delivery" } else { "duplicate" },
                        format!("message {what} is in its target's log {n} times"),
                    );
                }
            }
            for ((message, session), n) in &delivered {
                if !queued.iter().any(|(m, t, _)| m == message && t == session) {
                    fail(
                        "duplicate",
                        format!(
                            "{}'s log holds message {message} {n} times, which was not queued \
                             for it",
                            names.get(session).map_or("?", String::as_str)
                        ),
                    );
                }
            }
        }
    }
    let notes = if unknown.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "closed as TOOL_OUTCOME_UNKNOWN: {}",
            unknown.join(", ")
        )]
    };
    (failures, notes)
}

/// `python3 -m unittest` in `dir`: (passed, combined output).
pub fn unittest(dir: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .args(["-m", "unittest"])
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run python3");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Which points a sweep runs (`TROUPE_SWEEP`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Every `n`-th point of the reference list, from the first (`every:N`; the default is
    /// `every:7`).
    Every(usize),
    /// The named points, `only:MEMBER@SEQ[+J],…` (J: the resume's append the second kill
    /// follows, default 1; 0: no second kill).
    Only(Vec<(Point, usize)>),
}

impl Mode {
    /// Parses `TROUPE_SWEEP`: unset or `reduced` (every 7th point), `full`, `every:N`,
    /// `only:MEMBER@SEQ[+J],…`.
    pub fn from_env() -> Self {
        let value = std::env::var("TROUPE_SWEEP").unwrap_or_default();
        match value.as_str() {
            "" | "reduced" => Mode::Every(7),
            "full" => Mode::Every(1),
            other => {
                if let Some(n) = other.strip_prefix("every:") {
                    Mode::Every(n.parse().expect("TROUPE_SWEEP=every:N takes a number"))
                } else if let Some(list) = other.strip_prefix("only:") {
                    Mode::Only(
                        list.split(',')
                            .map(|spec| {
                                let (point, j) = spec.split_once('+').unwrap_or((spec, "1"));
                                let (member, seq) =
                                    point.split_once('@').expect("TROUPE_SWEEP=only:MEMBER@SEQ");
                                (
                                    Point {
                                        member: member.to_owned(),
                                        seq: seq.parse().expect("a seq"),
                                        kind: "?".to_owned(),
                                    },
                                    j.parse().expect("+J takes a number"),
                                )
                            })
                            .collect(),
                    )
                } else {
                    panic!(
                        "TROUPE_SWEEP={other}: use reduced, full, every:N or only:MEMBER@SEQ[+J],…"
                    )
                }
            }
        }
    }
}

/// `TROUPE_SWEEP_RESUME_KILL=off`: no second kill (each point is killed once, resumed once,
/// then resumed again, which must find nothing left to do).
pub fn second_kill_off() -> bool {
    std::env::var("TROUPE_SWEEP_RESUME_KILL").is_ok_and(|v| v == "off")
}

/// The whole sweep's result.
#[derive(Debug)]
pub struct Sweep {
    /// Points in the reference list (every append seen).
    pub total_points: usize,
    /// The points run, in order.
    pub outcomes: Vec<Outcome>,
    /// Wall time.
    pub took: Duration,
}

/// Runs the sweep `mode` selects with `jobs` points at a time, printing each point's line to
/// stderr as it finishes.
pub fn sweep(mode: &Mode, jobs: usize) -> Sweep {
    let start = Instant::now();
    let (total_points, selected): (usize, Vec<(usize, Point, usize)>) = match mode {
        Mode::Every(n) => {
            let points = reference_points(2);
            let total = points.len();
            let selected = points
                .into_iter()
                .enumerate()
                .filter(|(i, _)| i % n == 0)
                .map(|(i, p)| {
                    let j = if second_kill_off() {
                        0
                    } else {
                        1 + i % RESUME_KILL_SPREAD
                    };
                    (i, p, j)
                })
                .collect();
            (total, selected)
        }
        Mode::Only(list) => (
            list.len(),
            list.iter()
                .enumerate()
                .map(|(i, (p, j))| (i, p.clone(), *j))
                .collect(),
        ),
    };
    eprintln!(
        "crash sweep: {} of {total_points} kill points, {jobs} at a time",
        selected.len()
    );
    let queue = std::sync::Mutex::new(selected.into_iter());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((index, point, j)) = next else { break };
                    let outcome = run_point(index, &point, j);
                    eprintln!("{}", outcome.line());
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(outcome);
                }
            });
        }
    });
    let mut outcomes = results.into_inner().unwrap_or_else(|e| e.into_inner());
    outcomes.sort_by_key(|o| o.index);
    Sweep {
        total_points,
        outcomes,
        took: start.elapsed(),
    }
}

/// A failure's cause with the ids, paths and numbers taken out, to group points by.
pub fn cause(failure: &Failure) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let hexish = word.len() >= 8
            && word.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
            && word.chars().any(|c| c.is_ascii_digit());
        if hexish || word.starts_with('/') || word.starts_with("team-message-") {
            out.push('…');
        } else if !word.is_empty() && word.chars().all(|c| c.is_ascii_digit()) {
            out.push('N');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in failure.detail.chars() {
        if c.is_whitespace() || c == ',' || c == ':' || c == '(' || c == ')' {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    format!("[{}] {out}", failure.check)
}

impl Sweep {
    /// The points that failed a check.
    pub fn failed(&self) -> Vec<&Outcome> {
        self.outcomes.iter().filter(|o| !o.clean()).collect()
    }

    /// The sweep as Markdown: totals, failures grouped by cause (each with one reproduction),
    /// then every point's line.
    pub fn markdown(&self, title: &str) -> String {
        let mut md = String::new();
        let clean = self.outcomes.iter().filter(|o| o.clean()).count();
        let exact = self.outcomes.iter().filter(|o| o.exact()).count();
        let _ = writeln!(md, "# {title}\n");
        let _ = writeln!(
            md,
            "- kill points: {} in the reference list, {} run ({} landed exactly on the aimed \
             append), {:.0} s",
            self.total_points,
            self.outcomes.len(),
            exact,
            self.took.as_secs_f64()
        );
        let _ = writeln!(
            md,
            "- **clean: {clean}**, **failed: {}**",
            self.outcomes.len() - clean
        );
        let mut groups: BTreeMap<String, Vec<&Outcome>> = BTreeMap::new();
        for o in self.failed() {
            let mut causes: Vec<String> = o.failures.iter().map(cause).collect();
            causes.sort();
            causes.dedup();
            groups.entry(causes.join("; ")).or_default().push(o);
        }
        let mut groups: Vec<(String, Vec<&Outcome>)> = groups.into_iter().collect();
        groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        if !groups.is_empty() {
            let _ = writeln!(md, "\n## Failures by cause\n");
            let _ = writeln!(
                md,
                "Grouped by the set of failed checks (ids, paths and numbers left out). \
                 Reproduce one with `TROUPE_SWEEP=only:MEMBER@SEQ+J cargo test -p troupe-cli \
                 --test crash_sweep -- --nocapture` (J: the resume's append the second kill \
                 follows).\n"
            );
            for (cause, outcomes) in &groups {
                let _ = writeln!(md, "### {} point(s): `{cause}`\n", outcomes.len());
                let points: Vec<String> = outcomes
                    .iter()
                    .map(|o| format!("#{} {} ({})", o.index, o.point.spec(), o.point.kind))
                    .collect();
                let _ = writeln!(md, "Points: {}\n", points.join(", "));
                let first = outcomes[0];
                let _ = writeln!(
                    md,
                    "Reproduction: `TROUPE_SWEEP=only:{}+{} cargo test -p troupe-cli --test \
                     crash_sweep -- --nocapture`\n",
                    first.point.spec(),
                    first.resume_kill_at
                );
                let _ = writeln!(md, "```\n{}\n```\n", first.line());
            }
        }
        let _ = writeln!(md, "\n## Every point\n\n```");
        for o in &self.outcomes {
            let _ = writeln!(md, "{}", o.line());
        }
        let _ = writeln!(md, "```");
        md
    }
}
