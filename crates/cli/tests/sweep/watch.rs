//! Watching a home's session files grow, one durable append at a time (inotify).
//!
//! The journal writes each durable append of a session with one `write` (then `fdatasync`s
//! it), so every `IN_MODIFY` of a session file is one append becoming visible. On each event
//! the watcher reads the new bytes of every `*.jsonl` file in the directory, parses the complete
//! lines and records one [`Append`] per file whose complete events grew: the append's member
//! (the Lead, or a teammate by the name in its own `agent/config`), its first and last seq and
//! the type of its last event.
//!
//! Precision: the watcher reacts a few microseconds to a millisecond after the `write`; when a
//! file grows twice before it looks, the two appends are seen as one (its last seq is the
//! later one's). Callers that need an exact point check the file after the kill
//! ([`last_batch_end`]). A batch that names its last seq in `batchLast` (DESIGN decision 9) is
//! only counted once all of it is visible.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::OwnedFd;
use rustix::fs::inotify;
use serde_json::Value;

/// One durable append as seen in a session file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    /// The session id (the file's stem).
    pub session: String,
    /// `lead`, a teammate's name, or `?` while a child's log names nobody yet.
    pub member: String,
    /// The seq of the append's first event.
    pub first_seq: u64,
    /// The seq of its last event.
    pub last_seq: u64,
    /// The type of its last event, with what it is about (see [`describe`]): `tool/call edit`.
    pub last_type: String,
    /// The types of all its events, in order, described as `last_type` is. A poll sees every
    /// append made since the previous one as one, so an event that matters may be any of them.
    pub types: Vec<String>,
}

/// What the watcher knows about one session file.
#[derive(Debug, Default)]
struct Tracked {
    /// Bytes read so far (up to the end of the last complete line).
    offset: u64,
    /// Whether line 1 (the header) was read.
    header_read: bool,
    /// `lead` for a root session, the teammate's name once seen, else `?`.
    member: Option<String>,
    /// The seq after the last event counted in an append.
    counted: u64,
    /// Complete events not yet counted: (seq, type).
    uncounted: Vec<(u64, String)>,
    /// The last seq of a batch whose first event was seen but not its last.
    open_batch: Option<u64>,
}

/// An inotify watch of one sessions directory.
pub struct Watcher {
    dir: PathBuf,
    inotify: OwnedFd,
    files: BTreeMap<String, Tracked>,
}

impl Watcher {
    /// Watches `dir` (which must exist). Everything already in its files is read now and
    /// counted as before the watch: only later appends are reported.
    pub fn new(dir: &Path) -> Self {
        let inotify = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
            .expect("inotify_init1");
        inotify::add_watch(
            &inotify,
            dir,
            inotify::WatchFlags::MODIFY
                | inotify::WatchFlags::CREATE
                | inotify::WatchFlags::MOVED_TO,
        )
        .expect("inotify_add_watch");
        let mut watcher = Self {
            dir: dir.to_path_buf(),
            inotify,
            files: BTreeMap::new(),
        };
        let _before = watcher.scan();
        watcher
    }

    /// Waits up to `timeout` for the directory to change, then returns every append that became
    /// visible since the last call (in file order; appends of different files are not ordered).
    pub fn poll(&mut self, timeout: Duration) -> Vec<Append> {
        let timespec = Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&self.inotify, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timespec)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => panic!("poll on inotify: {e}"),
        }
        // Drain the events: which file changed does not matter, every file is read.
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(&self.inotify, &mut buf);
        loop {
            match reader.next() {
                Ok(_) => {}
                Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => break,
                Err(e) => panic!("read inotify: {e}"),
            }
        }
        self.scan()
    }

    /// Reads the new bytes of every session file and returns the new appends.
    fn scan(&mut self) -> Vec<Append> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.') && n.ends_with(".jsonl"))
            .collect();
        names.sort();
        for name in names {
            let session = name.trim_end_matches(".jsonl").to_owned();
            let path = self.dir.join(&name);
            let tracked = self.files.entry(session.clone()).or_default();
            if let Some(append) = read_new(&path, &session, tracked) {
                out.push(append);
            }
        }
        out
    }
}

/// Reads what `path` gained since `tracked.offset`; returns the append it completed, if any.
fn read_new(path: &Path, session: &str, tracked: &mut Tracked) -> Option<Append> {
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    if len < tracked.offset {
        // Truncated (a torn tail repaired, or worse): start over and count nothing of what is
        // there now.
        *tracked = Tracked::default();
        let _ = read_new(path, session, tracked);
        tracked.counted = tracked
            .uncounted
            .last()
            .map_or(tracked.counted, |(s, _)| s + 1);
        tracked.uncounted.clear();
        return None;
    }
    if len == tracked.offset {
        return None;
    }
    file.seek(SeekFrom::Start(tracked.offset)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    for line in bytes[..complete].split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            // A damaged line: counted as an event of unknown type at the next seq.
            let seq = tracked
                .uncounted
                .last()
                .map_or(tracked.counted, |(s, _)| s + 1);
            tracked
                .uncounted
                .push((seq, "<unparsable line>".to_owned()));
            continue;
        };
        if !tracked.header_read {
            tracked.header_read = true;
            if value.get("parentSession").is_none() {
                tracked.member = Some("lead".to_owned());
            }
            continue;
        }
        let seq = value["seq"].as_u64().unwrap_or(u64::MAX);
        let kind = describe(&value);
        if value["type"] == "agent/config" && tracked.member.is_none() {
            tracked.member = value["data"]["name"].as_str().map(str::to_owned);
        }
        if let Some(last) = value.get("batchLast").and_then(Value::as_u64) {
            tracked.open_batch = Some(last);
        }
        tracked.uncounted.push((seq, kind));
    }
    tracked.offset += complete as u64;
    let (last_seq, last_type) = tracked.uncounted.last()?.clone();
    if tracked.open_batch.is_some_and(|end| last_seq < end) {
        return None;
    }
    tracked.open_batch = None;
    let first_seq = tracked.uncounted[0].0;
    let types = tracked.uncounted.drain(..).map(|(_, kind)| kind).collect();
    tracked.counted = last_seq.saturating_add(1);
    Some(Append {
        session: session.to_owned(),
        member: tracked.member.clone().unwrap_or_else(|| "?".to_owned()),
        first_seq,
        last_seq,
        last_type,
        types,
    })
}

/// The seq and type of the last event of `path` that ends a whole batch (a trailing partial
/// line, or a batch cut before its `batchLast`, does not count): where a kill really landed.
pub fn last_batch_end(path: &Path) -> Option<(u64, String)> {
    let text = std::fs::read(path).ok()?;
    let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut open: Option<u64> = None;
    let mut last: Option<(u64, String)> = None;
    for line in text[..complete].split(|&b| b == b'\n').skip(1) {
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let Some(seq) = value["seq"].as_u64() else {
            continue;
        };
        if let Some(end) = value.get("batchLast").and_then(Value::as_u64) {
            open = Some(end);
        }
        if open.is_none_or(|end| seq >= end) {
            open = None;
            last = Some((seq, describe(&value)));
        }
    }
    last
}

/// An event's type and what it is about, in a few words: the tool of a `tool/call` or
/// `tool/result`, the member and phase of a `team/member`, the task and status of a
/// `team/task`, the sender and delivery of a `team/message/queued`, the reason of a
/// `turn/end`, the source of a `user/message`.
pub fn describe(event: &Value) -> String {
    let kind = event["type"].as_str().unwrap_or("?");
    let d = &event["data"];
    let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let detail = match kind {
        "tool/call" | "tool/result" => Some(text(&d["name"])),
        "team/member" => Some(format!(
            "{} {}",
            text(&d["member"]["name"]),
            text(&d["member"]["phase"])
        )),
        "team/task" => Some(format!(
            "{} {}",
            text(&d["task"]["id"]),
            text(&d["task"]["status"])
        )),
        "team/message/queued" => Some(format!(
            "from {} {}",
            text(&d["message"]["senderName"]),
            text(&d["message"]["delivery"])
        )),
        "turn/end" => Some(text(&d["reason"]["kind"])),
        "user/message" => Some(text(&d["source"]["kind"])),
        _ => None,
    };
    match detail {
        Some(detail) => format!("{kind} {detail}"),
        None => kind.to_owned(),
    }
}

/// A child process that is SIGKILLed and reaped when the guard is dropped — also when a test
/// panics while the child runs, or while it is stopped (SIGSTOP).
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
