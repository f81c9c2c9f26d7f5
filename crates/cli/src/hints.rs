//! The exact commands a command prints for the user to run next: inspecting and continuing a
//! session, the root to use instead of a child session, paths quoted for a shell.

use std::path::Path;

use anyhow::anyhow;
use troupe_protocol::SessionId;
use troupe_session::SessionRole;

use crate::exit::Failure;

/// The exact commands that inspect and continue a session.
pub(crate) struct Hints {
    id: String,
    /// ` --home DIR --store URL` as far as the command was given them, else empty.
    pub(crate) home: String,
    team: bool,
}

impl Hints {
    /// `home_args`: ` --home DIR --store URL` as the command was given them.
    pub(crate) fn new(id: &SessionId, home_args: &str, team: bool) -> Self {
        Self {
            id: id.to_string(),
            home: home_args.to_owned(),
            team,
        }
    }

    pub(crate) fn resume(&self) -> String {
        format!("troupe resume {}{}", self.id, self.home)
    }

    pub(crate) fn inspect(&self) -> String {
        let log = format!("inspect:  troupe log {}{}", self.id, self.home);
        if self.team {
            format!(
                "{log}  |  troupe team show {}{}  |  watch: troupe web{}",
                self.id, self.home, self.home
            )
        } else {
            log
        }
    }

    pub(crate) fn continue_with(&self) -> String {
        format!("continue: {} \"<next instruction>\"", self.resume())
    }
}

/// ` --home DIR` (absolute and quoted, so a printed command works from any directory) when the
/// command was given `--home`, else empty.
pub(crate) fn home_arg(home_flag: Option<&Path>) -> String {
    home_flag.map_or_else(String::new, |dir| {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        format!(" --home {}", shell_quote(&dir.display().to_string()))
    })
}

/// The refusal of a child session where a root is needed (`troupe resume`, `troupe team
/// show/verify`), worded the same everywhere and naming the exact command to run instead:
/// `session X is a teammate of L, not a Team Lead: run troupe resume L`.
pub(crate) fn not_a_root(
    id: &SessionId,
    role: SessionRole,
    parent: &SessionId,
    command: &str,
) -> Failure {
    let what = if role == SessionRole::Teammate {
        "a teammate of"
    } else {
        "a child session of"
    };
    let not = if role == SessionRole::Teammate {
        "a Team Lead"
    } else {
        "a root session"
    };
    Failure::bad_input(anyhow!(
        "session {id} is {what} {parent}, not {not}: run {command}"
    ))
}

/// Quotes `text` for a POSIX shell when it is not made of safe characters only.
pub(crate) fn shell_quote(text: &str) -> String {
    let safe = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:=@%".contains(c));
    if safe {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_leaves_plain_paths_alone() {
        assert_eq!(shell_quote("/tmp/home-1"), "/tmp/home-1");
        assert_eq!(shell_quote("/tmp/my home"), "'/tmp/my home'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
