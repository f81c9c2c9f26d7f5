//! What a command adds around a run's own output ([`Framing`]): lines after the `session`
//! line and after the summary, and its own check of the result (`troupe demo`'s tests).

use troupe_protocol::SessionId;

/// Lines a command adds around a run: after the `session` line, and after the summary.
pub(crate) struct Framing {
    pub(crate) prologue: Vec<String>,
    pub(crate) epilogue: Option<Epilogue>,
    /// The command's own check of the result, run once after the agents stopped (`troupe
    /// demo`: the project's tests). A failed check makes a run that completed exit 1.
    pub(crate) check: Option<Check>,
    /// Whether the run prints its own hints: the `inspect:` line after the summary and, when
    /// it completed, `continue: troupe resume ID "…"` (`troupe demo` lists its own commands).
    pub(crate) run_hints: bool,
}

impl Default for Framing {
    fn default() -> Self {
        Self {
            prologue: Vec::new(),
            epilogue: None,
            check: None,
            run_hints: true,
        }
    }
}

/// Builds the closing lines from what the run left (called once, after the summary).
pub(crate) type Epilogue = Box<dyn Fn(&Ending<'_>) -> Vec<String>>;

/// Checks what the run left (called once, before the outcome is printed), given the Team's
/// report when the run is a Team run (its board as the run left it).
pub(crate) type Check = Box<dyn Fn(Option<&troupe_runtime::TeamReport>) -> Checked>;

/// The outcome of a [`Check`].
pub(crate) struct Checked {
    /// One line saying what was found, e.g. `OK` or `FAILED (failures=2)`.
    pub(crate) summary: String,
    /// `None` when the check passed; else the stable code and message of the failure (the
    /// `error` of the final `--json` line).
    pub(crate) failure: Option<(&'static str, String)>,
}

/// What an [`Epilogue`] is told about the run that ended.
pub(crate) struct Ending<'a> {
    pub(crate) id: &'a SessionId,
    /// ` --home DIR` when the command was given one (to repeat in commands), else empty.
    pub(crate) home: &'a str,
    /// Every teammate (name, session id), in creation order.
    pub(crate) teammates: Vec<(String, SessionId)>,
    /// Whether the Lead answered. When it did not, the run's own last line names `troupe
    /// resume` (the interruption notice, or the failure), so an epilogue does not repeat it.
    pub(crate) completed: bool,
    /// What the command's own check found, when it has one.
    pub(crate) check: Option<&'a Checked>,
}
