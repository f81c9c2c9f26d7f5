//! Process groups started by tools: how a caller learns about them
//! ([`ToolContext::with_process_observer`](crate::ToolContext::with_process_observer)) and how
//! a later process stops a group that outlived a crash ([`stop_leftover_group`]).
//!
//! A process id alone does not name a process across time: after the group ended, the kernel
//! may give its number to an unrelated process. A group is therefore identified by its id
//! *and* its leader's start time (field 22 of `/proc/<pid>/stat`, in clock ticks since boot),
//! which no later process with the same id can share.

use std::fmt;
use std::sync::Arc;

use rustix::process::{Pid, Signal, kill_process_group};

/// A process group a tool started: its id (the leader's pid) and the leader's start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessInfo {
    /// The process group id (the pid of the group's leader).
    pub pgid: i32,
    /// The leader's start time: field 22 (`starttime`) of `/proc/<pgid>/stat`, in clock
    /// ticks since boot.
    pub start_time: u64,
}

/// A callback told about every process group a tool call starts, right after it started
/// (before the tool waits for it). It runs on the tool's task and must not block.
#[derive(Clone)]
pub struct ProcessObserver(Arc<dyn Fn(ProcessInfo) + Send + Sync>);

impl ProcessObserver {
    /// Wraps a callback.
    pub fn new(callback: impl Fn(ProcessInfo) + Send + Sync + 'static) -> Self {
        Self(Arc::new(callback))
    }

    /// Reports `info` to the callback.
    pub fn notify(&self, info: ProcessInfo) {
        (self.0)(info);
    }
}

impl fmt::Debug for ProcessObserver {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("ProcessObserver(..)")
    }
}

/// The start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot) of process `pid`,
/// or `None` when it does not exist or `/proc` cannot be read (e.g. not Linux).
pub fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// The fields of a `/proc/<pid>/stat` line from field 3 (`state`) on. The command name
/// (field 2) is parenthesized and may itself hold spaces and parentheses, so fields are counted
/// from the *last* `)`.
fn fields_after_command(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line.
fn parse_start_time(stat: &str) -> Option<u64> {
    fields_after_command(stat)?.get(22 - 3)?.parse().ok()
}

/// Whether a `/proc/<pid>/stat` line describes a process that still runs code (not a zombie
/// waiting to be reaped, not dead) and belongs to process group `pgid` (field 5).
fn is_live_member(stat: &str, pgid: i32) -> bool {
    let Some(fields) = fields_after_command(stat) else {
        return false;
    };
    let live = fields
        .first()
        .is_some_and(|state| !matches!(*state, "Z" | "X" | "x"));
    live && fields.get(5 - 3).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
}

/// Whether any process of group `pgid` still runs code.
fn group_has_live_member(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry.file_name().to_str().is_some_and(|name| {
            name.bytes().all(|b| b.is_ascii_digit())
                && std::fs::read_to_string(entry.path().join("stat"))
                    .is_ok_and(|stat| is_live_member(&stat, pgid))
        })
    })
}

/// Stops a process group a tool started in an earlier process that then died (a crash), if it
/// is still running: when `/proc/<pgid>/stat` exists, its start time is the recorded one (so
/// the number was not reused), and some process of the group still runs, the whole group gets
/// `SIGKILL`. Returns whether it did.
///
/// A group whose leader is gone is left alone: its number may since name another process, and
/// the start time that would prove otherwise died with the leader.
pub fn stop_leftover_group(info: ProcessInfo) -> bool {
    if info.pgid <= 1 || process_start_time(info.pgid) != Some(info.start_time) {
        return false;
    }
    let Some(pgid) = Pid::from_raw(info.pgid) else {
        return false;
    };
    // A leader that is only a zombie still proves the group's identity (its pid cannot be
    // reused before it is reaped), but the group may have nothing left to stop.
    if !group_has_live_member(info.pgid) {
        return false;
    }
    kill_process_group(pgid, Signal::KILL).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22_counted_after_the_command_name() {
        let stat = "4242 (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100 18446744073709551615";
        assert_eq!(parse_start_time(stat), Some(987_654));
        assert_eq!(parse_start_time("garbage"), None);
        assert!(is_live_member(stat, 4242));
        assert!(!is_live_member(stat, 4243));
        assert!(!is_live_member(&stat.replace(") S ", ") Z "), 4242));
    }

    #[test]
    fn the_current_process_has_a_start_time_and_a_wrong_one_is_not_killed() {
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        let start = process_start_time(me);
        assert!(start.is_some());
        // A mismatching start time must never signal anything (here: our own group).
        let wrong = ProcessInfo {
            pgid: me,
            start_time: start.unwrap_or(0) + 1,
        };
        assert!(!stop_leftover_group(wrong));
    }
}
